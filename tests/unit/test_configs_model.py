"""Config model (sources, synonyms, validation, incremental ops, persistence of dynamic broker
configs) on an in-process Broker, plus dump-log on a real segment. No network."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from strom.cli import dump_log
from strom.clock import ManualClock
from strom.config import BrokerConfig, LogConfig
from strom.log.partition_log import PartitionLog
from strom.metadata import configs as cfg
from strom.metadata.configs import ConfigSource, ConfigType, OpType
from strom.protocol.errors import ErrorCode
from strom.protocol.records import build_batch
from strom.server.broker import Broker


def make_broker(tmp_path: Path, **overrides: str) -> Broker:
    # registry-only (also under STROM_TEST_QUORUM=1): these brokers are never started; topics are
    # made with the synchronous Broker.create_topic and configs altered with no event loop, while
    # on the metadata quorum both go through the controller on the started broker's loop
    base = {
        "log.dirs": str(tmp_path / "data"),
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "strom.metadata.quorum.enable": "false",
    }
    base.update(overrides)
    return Broker(BrokerConfig.from_sources(None, base))


def entries(es: list[cfg.ConfigEntry]) -> dict[str, cfg.ConfigEntry]:
    return {e.name: e for e in es}


# ---------------------------------------------------------------------------- normalize / validate


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("retention.ms", " 1000 ", "1000"),
        ("retention.ms", "-1", "-1"),
        ("cleanup.policy", "compact, delete", "compact,delete"),
        ("cleanup.policy", "delete,delete", "delete"),
        ("cleanup.policy", "", ""),  # Kafka 4: no policy at all (neither retention nor compaction)
        ("min.cleanable.dirty.ratio", "0.25", "0.25"),
        ("message.timestamp.type", "LogAppendTime", "LogAppendTime"),
        ("max.message.bytes", "2147483647", "2147483647"),
    ],
)
def test_normalize_topic_value(name: str, raw: str, expected: str) -> None:
    assert cfg.normalize_topic_value(name, raw) == expected


@pytest.mark.parametrize(
    ("name", "raw", "fragment"),
    [
        ("retention.ms", "abc", "Not a number of type LONG"),
        ("retention.ms", "-5", "Value must be at least -1"),
        ("max.message.bytes", "2147483648", "Not a number of type INT"),
        ("cleanup.policy", "compact,bogus", "String must be one of: compact, delete"),
        ("message.timestamp.type", "WallClock", "String must be one of"),
        ("min.cleanable.dirty.ratio", "1.5", "between 0 and 1"),
        ("min.insync.replicas", "0", "at least 1"),
        ("no.such.config", "1", "Unknown topic config name: no.such.config"),
        ("retention.ms", None, "Null value"),
    ],
)
def test_invalid_topic_values(name: str, raw: str | None, fragment: str) -> None:
    with pytest.raises(cfg.ConfigResourceError) as ei:
        cfg.normalize_topic_value(name, raw)
    assert ei.value.code == ErrorCode.INVALID_CONFIG
    assert fragment in str(ei.value)


# ---------------------------------------------------------------------------- incremental ops

TYPES = {"cleanup.policy": ConfigType.LIST, "retention.ms": ConfigType.LONG}


def inc(current: dict[str, str], ops: list[tuple[str, int, str | None]]) -> dict[str, str]:
    return cfg.incremental_changes(
        current,
        ops,
        type_of=TYPES,
        effective={"cleanup.policy": "delete", "retention.ms": "604800000"},
        unknown="topic",
    )


def test_incremental_set_delete() -> None:
    assert inc({}, [("retention.ms", OpType.SET, "5")]) == {"retention.ms": "5"}
    assert inc({"retention.ms": "5"}, [("retention.ms", OpType.DELETE, None)]) == {}
    assert inc({}, [("retention.ms", OpType.DELETE, None)]) == {}  # deleting an absent key is fine


def test_incremental_append_subtract_lists() -> None:
    # APPEND starts from the effective value when there is no override
    assert inc({}, [("cleanup.policy", OpType.APPEND, "compact")]) == {"cleanup.policy": "delete,compact"}
    assert inc({"cleanup.policy": "compact"}, [("cleanup.policy", OpType.APPEND, "compact")]) == {
        "cleanup.policy": "compact"
    }
    assert inc({"cleanup.policy": "delete,compact"}, [("cleanup.policy", OpType.SUBTRACT, "delete")]) == {
        "cleanup.policy": "compact"
    }
    assert inc({"cleanup.policy": "compact"}, [("cleanup.policy", OpType.SUBTRACT, "delete")]) == {
        "cleanup.policy": "compact"
    }


def test_incremental_errors() -> None:
    with pytest.raises(cfg.ConfigResourceError) as ei:
        inc({}, [("retention.ms", OpType.APPEND, "5")])
    assert ei.value.code == ErrorCode.INVALID_CONFIG
    assert "append is not allowed" in str(ei.value)
    with pytest.raises(cfg.ConfigResourceError) as ei:
        inc({}, [("retention.ms", OpType.SET, "5"), ("retention.ms", OpType.SET, "6")])
    assert ei.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(cfg.ConfigResourceError) as ei:
        inc({}, [("retention.ms", 9, "5")])
    assert ei.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(cfg.ConfigResourceError) as ei:
        inc({}, [("nope", OpType.SET, "5")])
    assert ei.value.code == ErrorCode.INVALID_CONFIG


# ---------------------------------------------------------------------------- describe on a broker


def test_topic_sources_and_synonyms(tmp_path: Path) -> None:
    broker = make_broker(tmp_path, **{"log.retention.hours": "100"})
    info = broker.create_topic("t", 2, {"max.message.bytes": "5000"})
    es = entries(cfg.describe_topic(broker, info))
    assert set(es) == set(cfg.TOPIC_CONFIG_TYPES)
    mmb = es["max.message.bytes"]
    assert (mmb.value, mmb.source, mmb.is_default) == ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG, False)
    assert [(s.name, s.value, s.source) for s in mmb.synonyms] == [
        ("max.message.bytes", "5000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG),
    ]
    ret = es["retention.ms"]
    assert ret.value == str(100 * 3_600_000)
    assert ret.source == ConfigSource.STATIC_BROKER_CONFIG
    assert [(s.name, s.source) for s in ret.synonyms] == [
        ("log.retention.hours", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", ConfigSource.DEFAULT_CONFIG),
    ]
    cp = es["cleanup.policy"]
    assert (cp.value, cp.source, cp.is_default, cp.config_type) == (
        "delete",
        ConfigSource.DEFAULT_CONFIG,
        True,
        ConfigType.LIST,
    )
    kio = cp.to_kio(include_synonyms=False)
    assert kio["synonyms"] == [] and kio["config_source"] == 5 and kio["read_only"] is False


def test_broker_describe_sensitive_and_read_only(tmp_path: Path) -> None:
    broker = make_broker(tmp_path, **{"ssl.keystore.password": "hunter2", "message.max.bytes": "2000000"})
    es = entries(cfg.describe_broker(broker, default=False))
    pw = es["ssl.keystore.password"]
    assert pw.sensitive and pw.config_type == ConfigType.PASSWORD
    kio = pw.to_kio(True)
    assert kio["value"] is None and all(s["value"] is None for s in kio["synonyms"])
    assert "hunter2" not in json.dumps(kio)
    mmb = es["message.max.bytes"]
    assert (mmb.value, mmb.source, mmb.read_only) == ("2000000", ConfigSource.STATIC_BROKER_CONFIG, False)
    assert es["listeners"].read_only
    assert es["log.retention.ms"].value is None  # unset, as Kafka shows it
    assert es["node.id"].source == ConfigSource.DEFAULT_CONFIG


def test_dynamic_broker_configs_apply_and_persist(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    info = broker.create_topic("t", 1)
    plog = broker.logs[("t", 0)]
    cfg.alter_broker(broker, True, {"message.max.bytes": "3000"}, validate_only=False)
    assert broker.config["message.max.bytes"] == 3000
    assert plog.config.max_message_bytes == 3000  # took effect on the open log
    cfg.alter_broker(broker, False, {"message.max.bytes": "4000"}, validate_only=False)
    assert plog.config.max_message_bytes == 4000  # per-broker beats the cluster default
    es = entries(cfg.describe_topic(broker, info))
    assert [(s.value, s.source) for s in es["max.message.bytes"].synonyms] == [
        ("4000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("1048588", ConfigSource.DEFAULT_CONFIG),
    ]
    default_entries = cfg.describe_broker(broker, default=True)
    assert [(e.name, e.value, e.source) for e in default_entries] == [
        ("message.max.bytes", "3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    ]
    # a topic override still wins
    cfg.alter_topic(broker, "t", {"max.message.bytes": "100"}, validate_only=False)
    assert plog.config.max_message_bytes == 100
    # removing the per-broker value falls back to the default
    cfg.alter_broker(broker, False, {}, validate_only=False)
    cfg.alter_topic(broker, "t", {}, validate_only=False)
    assert plog.config.max_message_bytes == 3000
    doc = json.loads((broker.log_dir / cfg.DYNAMIC_CONFIG_FILE).read_text())
    assert doc["default"] == {"message.max.bytes": "3000"}
    for p in broker.logs.values():
        p.close()
    # a new broker on the same dir applies them before any request
    again = make_broker(tmp_path)
    cfg.apply_dynamic_broker_configs(again)
    assert again.config["message.max.bytes"] == 3000


def test_broker_alter_validation(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    broker.create_topic("t", 1)
    with pytest.raises(cfg.ConfigResourceError, match="Cannot update these configs dynamically: listeners"):
        cfg.alter_broker(broker, False, {"listeners": "PLAINTEXT://x:1"}, validate_only=False)
    with pytest.raises(cfg.ConfigResourceError, match="Unknown broker config name"):
        cfg.alter_broker(broker, False, {"no.such": "1"}, validate_only=False)
    with pytest.raises(cfg.ConfigResourceError, match=r"log\.segment\.bytes"):
        cfg.alter_broker(broker, True, {"log.segment.bytes": "3"}, validate_only=False)
    cfg.alter_broker(broker, True, {"log.retention.ms": "1000"}, validate_only=True)
    assert not (broker.log_dir / cfg.DYNAMIC_CONFIG_FILE).exists()  # validate_only changes nothing
    with pytest.raises(cfg.ConfigResourceError) as ei:
        cfg.broker_scope(broker, "7")
    assert ei.value.code == ErrorCode.INVALID_REQUEST
    assert cfg.broker_scope(broker, "") is True
    assert cfg.broker_scope(broker, str(broker.node_id)) is False


def test_dynamic_retention_precedence(tmp_path: Path) -> None:
    broker = make_broker(tmp_path, **{"log.retention.hours": "10"})
    info = broker.create_topic("t", 1)
    cfg.alter_broker(broker, True, {"log.retention.minutes": "3"}, validate_only=False)
    assert broker.logs[("t", 0)].config.retention_ms == 180_000
    es = entries(cfg.describe_topic(broker, info))
    assert es["retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert es["retention.ms"].value == "180000"


def test_alter_topic_unknown_and_invalid(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    broker.create_topic("t", 1)
    with pytest.raises(cfg.ConfigResourceError) as ei:
        cfg.alter_topic(broker, "nope", {}, validate_only=False)
    assert ei.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(cfg.ConfigResourceError) as ei:
        cfg.alter_topic(broker, "t", {"segment.bytes": "1"}, validate_only=False)
    assert ei.value.code == ErrorCode.INVALID_CONFIG
    cfg.alter_topic(broker, "t", {"segment.bytes": "100000"}, validate_only=True)
    assert broker.topics.get("t").configs == {}  # type: ignore[union-attr]


# ---------------------------------------------------------------------------- dump-log


def _segment(tmp_path: Path) -> Path:
    d = tmp_path / "t-0"
    config = LogConfig(index_interval_bytes=1)  # an index entry for every batch
    plog = PartitionLog.open(d, "t", 0, config, ManualClock())
    for i in range(5):
        batch = build_batch([(f"k{i}".encode(), f"value-{i}".encode(), [("h", b"x")], 1_700_000_000_000 + i)])
        plog.append_as_leader(batch, 0)
    plog.close()
    return d / "00000000000000000000.log"


def test_dump_log_batches_and_records(tmp_path: Path) -> None:
    seg = _segment(tmp_path)
    out = io.StringIO()
    res = dump_log.dump_file(seg, out, records=True, payload=True)
    text = out.getvalue()
    assert res.ok, res.problems
    assert "Log starting offset: 0" in text
    assert text.count("baseOffset:") == 5
    assert "isvalid: true" in text and "compresscodec: none" in text
    assert "| offset: 3 CreateTime: 1700000000003 keySize: 2 valueSize: 7" in text
    assert "headerKeys: [h] key: k3 payload: value-3" in text


def test_dump_log_detects_corruption(tmp_path: Path) -> None:
    seg = _segment(tmp_path)
    data = bytearray(seg.read_bytes())
    data[-3] ^= 0xFF  # inside the last batch's records: CRC fails
    seg.write_bytes(bytes(data) + b"garbage")
    out = io.StringIO()
    res = dump_log.dump_file(seg, out)
    assert not res.ok
    assert "isvalid: false" in out.getvalue()
    assert "Found 7 invalid bytes at the end" in out.getvalue()


def test_dump_index_sanity(tmp_path: Path) -> None:
    seg = _segment(tmp_path)
    index = seg.with_suffix(".index")
    tindex = seg.with_suffix(".timeindex")
    out = io.StringIO()
    assert dump_log.dump_file(index, out).ok
    assert "offset: 1 position:" in out.getvalue()
    out = io.StringIO()
    assert dump_log.dump_file(tindex, out).ok, out.getvalue()
    assert "timestamp: 1700000000001 offset: 1" in out.getvalue()
    # point an index entry at the wrong position
    raw = bytearray(index.read_bytes())
    raw[4:8] = (7).to_bytes(4, "big")
    index.write_bytes(bytes(raw))
    out = io.StringIO()
    res = dump_log.dump_file(index, out, verify_index_only=True)
    assert not res.ok
    assert "Mismatches in :" in out.getvalue()
    assert "position 7 is not the start of a batch" in out.getvalue()
