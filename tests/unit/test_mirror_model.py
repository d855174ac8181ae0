"""MirrorMaker 2's model in strom.mirror: replication policies, the topic filter and its regex,
the OffsetSync/Checkpoint/Heartbeat formats, offset translation and mm2.properties parsing."""

from __future__ import annotations

import re
import struct
from typing import Any

import pytest

from strom.mirror.config import MirrorConfigError, parse_mm2
from strom.mirror.policy import GroupFilter, ReplicationPolicy, TopicFilter, java_split
from strom.mirror.records import (
    Checkpoint,
    Heartbeat,
    OffsetSync,
    OffsetSyncStore,
    PartitionState,
    RecordFormatError,
)

DEFAULT = ReplicationPolicy()
IDENTITY = ReplicationPolicy(identity=True)


def test_java_split() -> None:
    assert java_split("a.b", ".") == ["a", "b"]
    assert java_split("a.", ".") == ["a"]
    assert java_split("a..", ".") == ["a"]
    assert java_split(".a", ".") == ["", "a"]
    assert java_split("a..b", ".") == ["a", "", "b"]


def test_default_policy_naming() -> None:
    p = DEFAULT
    assert p.format_remote_topic("A", "orders") == "A.orders"
    assert p.topic_source("A.orders") == "A"
    assert p.upstream_topic("A.orders") == "orders"
    assert p.topic_source("orders") is None
    assert p.original_topic("B.A.orders") == "orders"
    assert p.offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"
    assert p.checkpoints_topic("A") == "A.checkpoints.internal"
    assert p.is_heartbeats_topic("heartbeats") and p.is_heartbeats_topic("A.heartbeats")
    assert not p.is_heartbeats_topic("heartbeats2")
    for t in (
        "__consumer_offsets",
        "A.checkpoints.internal",
        "mm2-offset-syncs.B.internal",
        "connect-offsets-internal",
        ".hidden",
        "mm2-offsets.A.internal",
    ):
        assert p.is_internal_topic(t), t
    assert not p.is_internal_topic("orders")
    sep = ReplicationPolicy(separator="_")
    assert sep.format_remote_topic("A", "orders") == "A_orders"
    assert sep.offset_syncs_topic("B") == "mm2-offset-syncs_B_internal"
    assert ReplicationPolicy(separator="_", internal_separator_enabled=False).checkpoints_topic("A") == (
        "A.checkpoints.internal"
    )


def test_identity_policy_naming() -> None:
    p = IDENTITY
    assert p.format_remote_topic("A", "orders") == "orders"
    assert p.format_remote_topic("A", "heartbeats") == "A.heartbeats"
    assert p.topic_source("orders") is None
    assert p.topic_source("A.heartbeats") == "A"
    assert p.upstream_topic("orders") == "orders"
    assert p.original_topic("x.y") == "x.y"


def test_cycles() -> None:
    assert DEFAULT.is_cycle("B.orders", "B")
    assert DEFAULT.is_cycle("C.B.orders", "B")
    assert not DEFAULT.is_cycle("C.orders", "B")
    assert not DEFAULT.is_cycle("xB.orders", "B")
    assert not DEFAULT.is_cycle("B.", "B")
    assert DEFAULT.is_cycle("C..B.x", "B")
    assert not IDENTITY.is_cycle("orders", "B")
    assert IDENTITY.is_cycle("B.heartbeats", "B")


NAMES = [
    "orders",
    "A.orders",
    "B.orders",
    "C.B.orders",
    "B.",
    "B..",
    "B..x",
    "xB.y",
    ".B.x",
    "C..B.x",
    "heartbeats",
    "A.heartbeats",
    "B.heartbeats",
    "C.B.heartbeats",
    "heartbeats.x",
    "__consumer_offsets",
    "A.checkpoints.internal",
    "mm2-offset-syncs.B.internal",
    "x-internal",
    "orders.replica",
    "logs.2024",
    "B",
    "BB.x",
    "a\nB.x",
    "tx.internal",
    "keep-me",
    "drop-me",
    "mm2-status.A.internal",
]


@pytest.mark.parametrize(
    "policy",
    [
        DEFAULT,
        IDENTITY,
        ReplicationPolicy(separator="__"),
        ReplicationPolicy(identity=True, source_cluster_alias="B"),
    ],
)
@pytest.mark.parametrize(
    "topics,excludes",
    [
        ((".*",), (r".*[\-\.]internal", r".*\.replica", "__.*")),
        (("keep.*", "orders"), ()),
        ((".*",), ("drop-.*",)),
        ((), ()),
    ],
)
def test_subscribe_pattern_agrees_with_the_filter(
    policy: ReplicationPolicy, topics: tuple[str, ...], excludes: tuple[str, ...]
) -> None:
    f = TopicFilter(topics, excludes, policy, "B")
    rx = re.compile(f.subscribe_pattern())
    for name in NAMES + [n.replace(".", policy.separator) for n in NAMES]:
        assert (rx.fullmatch(name) is not None) == f.should_replicate(name), (name, f.subscribe_pattern())


def test_hops_and_upstream_clusters() -> None:
    assert DEFAULT.count_hops("A.orders", "A") == 1
    assert DEFAULT.count_hops("B.A.orders", "A") == 2
    assert DEFAULT.count_hops("B.A.orders", "C") == -1
    assert DEFAULT.count_hops("orders", "A") == -1
    topics = ["heartbeats", "A.heartbeats", "B.A.heartbeats", "C.heartbeats", "A.orders", "x"]
    assert DEFAULT.upstream_clusters(topics) == {"A": 1, "B": 1, "C": 1}
    assert DEFAULT.upstream_clusters(["B.A.heartbeats"]) == {"A": 2, "B": 1}
    assert DEFAULT.upstream_clusters(["orders", "heartbeats"]) == {}


def test_default_filter_decisions() -> None:
    f = TopicFilter((".*",), (r".*[\-\.]internal", r".*\.replica", "__.*"), DEFAULT, "B")
    assert f.should_replicate("orders")
    assert f.should_replicate("heartbeats")
    assert f.should_replicate("C.heartbeats")
    assert not f.should_replicate("B.orders")  # B's own data coming back: a cycle
    assert not f.should_replicate("B.heartbeats")
    assert not f.should_replicate("__consumer_offsets")
    assert not f.should_replicate("mm2-offset-syncs.B.internal")
    only = TopicFilter(("orders",), (), DEFAULT, "B")
    assert only.should_replicate("heartbeats") and not only.should_replicate("payments")


def test_group_filter() -> None:
    g = GroupFilter((".*",), ("console-consumer-.*", "connect-.*", "__.*"))
    assert g.should_replicate("billing")
    assert not g.should_replicate("console-consumer-123")
    assert not g.should_replicate("connect-file-sink")


# -- formats (byte layouts of Kafka's protocol.types structs)


def test_offset_sync_bytes() -> None:
    s = OffsetSync("orders", 3, 1000, 42)
    assert s.key() == b"\x00\x06orders" + struct.pack(">i", 3)
    assert s.value() == struct.pack(">qq", 1000, 42)
    assert OffsetSync.decode(s.key(), s.value()) == s


def test_checkpoint_bytes() -> None:
    c = Checkpoint("g1", "A.orders", 2, 100, 97, "meta")
    assert c.key() == b"\x00\x02g1\x00\x08A.orders" + struct.pack(">i", 2)
    assert c.value() == struct.pack(">hqq", 0, 100, 97) + b"\x00\x04meta"
    assert Checkpoint.decode(c.key(), c.value()) == c
    with pytest.raises(RecordFormatError):
        Checkpoint.decode(c.key(), struct.pack(">hqq", 1, 1, 1) + b"\x00\x00")
    with pytest.raises(RecordFormatError):
        Checkpoint.decode(c.key()[:5], c.value())


def test_heartbeat_bytes() -> None:
    h = Heartbeat("A", "B", 1_700_000_000_000)
    assert h.key() == b"\x00\x01A\x00\x01B"
    assert h.value() == struct.pack(">hq", 0, 1_700_000_000_000)
    assert Heartbeat.decode(h.key(), h.value()) == h


# -- offset syncs and translation


def test_partition_state_fires_as_mm2() -> None:
    st = PartitionState(max_offset_lag=100)
    assert st.update(0, 0)  # first record of this lifetime
    assert not st.update(1, 1)
    assert st.update(5, 2)  # skipped upstream records (a transaction marker, compaction)
    assert not st.update(6, 3)
    assert st.update(7, 2)  # downstream went back (truncation)
    st2 = PartitionState(max_offset_lag=3)
    assert st2.update(0, 0)
    assert not st2.update(1, 1)
    assert not st2.update(2, 2)
    assert st2.update(3, 4)  # translated offset (last sync + 1) three or more behind


def test_translation() -> None:
    store = OffsetSyncStore()
    assert store.translate("t", 0, 5) is None
    store.add(OffsetSync("t", 0, 10, 3))
    store.add(OffsetSync("t", 0, 20, 15))
    assert store.translate("t", 0, 5) == -1  # older than every sync
    assert store.translate("t", 0, 10) == 3
    assert store.translate("t", 0, 11) == 4  # one past the sync, never further
    assert store.translate("t", 0, 19) == 4
    assert store.translate("t", 0, 20) == 15
    assert store.translate("t", 0, 1000) == 16
    store.add(OffsetSync("t", 0, 12, 40))  # upstream rewound: newer history replaces
    assert store.translate("t", 0, 20) == 41
    assert store.translate("t", 0, 10) == 3


# -- mm2.properties


def _props(**kw: str) -> dict[str, str]:
    base = {"clusters": "A, B", "A.bootstrap.servers": "a:9092", "B.bootstrap.servers": "b:9092"}
    base.update({k.replace("__", "->").replace("_", "."): v for k, v in kw.items()})
    return base


def test_flows_and_overrides(caplog: pytest.LogCaptureFixture) -> None:
    props = _props()
    props.update(
        {
            "A->B.enabled": "true",
            "B->A.enabled": "true",
            "A->B.topics": "orders, pay.*",
            "emit.checkpoints.interval.seconds": "5",
            "B->A.emit.checkpoints.interval.seconds": "7",
            "A.security.protocol": "PLAINTEXT",
            "made.up.key": "1",
        }
    )
    with caplog.at_level("WARNING", logger="strom.mirror"):
        cfg = parse_mm2(props)
    assert [f.name for f in cfg.flows] == ["A->B", "B->A"]
    ab, ba = cfg.flows
    assert ab.source.client == {"bootstrap.servers": "a:9092", "security.protocol": "PLAINTEXT"}
    assert ab.get("topics") == "orders, pay.*" and ba.get("topics") == ".*"
    assert (
        ab.get_int("emit.checkpoints.interval.seconds") == 5
        and ba.get_int("emit.checkpoints.interval.seconds") == 7
    )
    assert ab.get("sync.group.offsets.enabled") == "false"  # Kafka's defaults
    assert ab.get_int("refresh.topics.interval.seconds") == 600
    assert ab.get_int("replication.factor") == 2
    assert ab.offset_syncs_topic() == "mm2-offset-syncs.B.internal"  # on the source, named for the target
    assert cfg.unknown == ["made.up.key"]
    assert "made.up.key' was supplied but isn't a known config" in caplog.text
    assert parse_mm2(props, ["A"]).flows[0].name == "B->A"


def test_flows_are_disabled_by_default() -> None:
    assert parse_mm2(_props()).flows == []


@pytest.mark.parametrize(
    "extra,message",
    [
        ({"A->B.enabled": "yes"}, "Expected value to be either true or false"),
        ({"A->B.enabled": "true", "replication.policy.class": "com.x.Custom"}, "replication.policy.class"),
        ({"A->B.enabled": "true", "A->B.topics": "(unclosed"}, "bad regular expression"),
        ({"A->B.enabled": "true", "groups.exclude": "g["}, "bad regular expression 'g[' in groups.exclude"),
        ({"A->B.enabled": "true", "config.properties.exclude": "*x"}, "in config.properties.exclude"),
        ({"A->B.enabled": "true", "offset.lag.max": "lots"}, "Not a number"),
        ({"A->B.enabled": "true", "offset-syncs.topic.location": "middle"}, "offset-syncs.topic.location"),
    ],
)
def test_bad_configs(extra: dict[str, str], message: str) -> None:
    props = _props()
    props.update(extra)
    with pytest.raises(MirrorConfigError, match=re.escape(message)):
        parse_mm2(props)


def test_missing_clusters_and_bootstrap() -> None:
    with pytest.raises(MirrorConfigError, match="clusters"):
        parse_mm2({"A->B.enabled": "true"})
    with pytest.raises(MirrorConfigError, match=r"B\.bootstrap\.servers"):
        parse_mm2({"clusters": "A, B", "A.bootstrap.servers": "a:1", "A->B.enabled": "true"})


def test_identity_policy_from_config() -> None:
    props = _props()
    props.update(
        {
            "A->B.enabled": "true",
            "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        }
    )
    f = parse_mm2(props).flows[0]
    assert f.policy().identity
    assert f.policy().format_remote_topic("A", "orders") == "orders"


# -- the CLI's config handling (no brokers needed)


def test_cli_validate_and_errors(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from strom.cli.main import run

    good = tmp_path / "mm2.properties"
    good.write_text(
        "# two clusters\nclusters = A, B\nA.bootstrap.servers = a:9092\nB.bootstrap.servers = b:9092\n"
        "A->B.enabled = true\nA->B.topics = orders\n"
    )
    assert run(["mirror", "validate", str(good)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("A->B: policy=org.apache.kafka.connect.mirror.DefaultReplicationPolicy pattern=")
    bad = tmp_path / "bad.properties"
    bad.write_text("clusters = A, B\nA.bootstrap.servers = a:9092\nA->B.enabled = true\n")
    for argv in (
        ["mirror", "validate", str(bad)],
        ["mirror", "run", str(bad)],
        ["mirror", "run", str(tmp_path / "missing.properties")],
        ["mirror", "run", str(good), "--clusters", "C"],
        ["mirror", "run", str(good), "--trigger-interval-ms", "0"],  # refused before Spark starts
        ["mirror", "run", str(good), "--max-records-per-batch", "-1"],
        [
            "mirror",
            "translate-offsets",
            "--bootstrap-server",
            "a:1",
            "--source-alias",
            "A",
            "--group",
            "g",
            "--timeout-ms",
            "-1",
        ],
    ):
        assert run(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("strom mirror: error: ") and err.count("\n") == 1, err
        assert "Traceback" not in err
    off = tmp_path / "off.properties"
    off.write_text("clusters = A, B\nA.bootstrap.servers = a:9092\nB.bootstrap.servers = b:9092\n")
    assert run(["mirror", "run", str(off)]) == 2
    assert "no enabled flows" in capsys.readouterr().err
