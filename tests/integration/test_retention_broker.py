"""Retention, DeleteRecords and compaction against a real ``strom serve`` process with librdkafka."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

OVERRIDES = [
    "group.initial.rebalance.delay.ms=0",
    "log.retention.check.interval.ms=200",
    "log.segment.delete.delay.ms=300",
    "log.cleaner.backoff.ms=200",
]


@pytest.fixture(scope="module")
def lbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("retention") / "data", overrides=OVERRIDES)
    b.start()
    try:
        yield b
    finally:
        rc = b.stop()
        if rc not in (0, -15):
            print(b.log())


def create(b: BrokerProcess, configs: dict[str, str], partitions: int = 1) -> str:
    name = "t-" + uuid.uuid4().hex[:10]
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    fut = admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name]
    fut.result(10)
    return name


def produce(
    b: BrokerProcess, topic: str, items: list[tuple[bytes | None, bytes | None, int | None]], **conf: object
) -> None:
    p = Producer(
        {"bootstrap.servers": b.bootstrap, "linger.ms": 0, "acks": "all", "batch.num.messages": 5, **conf}
    )
    errors: list[object] = []
    for key, value, ts in items:
        kw: dict[str, object] = {"key": key, "value": value, "partition": 0}
        if ts is not None:
            kw["timestamp"] = ts
        p.produce(topic, on_delivery=lambda err, _m: errors.append(err) if err else None, **kw)  # type: ignore[arg-type]
        p.poll(0)
    assert p.flush(20) == 0
    assert not errors, errors


def consume_all(
    b: BrokerProcess, topic: str, timeout: float = 10.0
) -> list[tuple[int, bytes | None, bytes | None]]:
    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "g-" + uuid.uuid4().hex[:6],
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.assign([TopicPartition(topic, 0, low)])
    out: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.time() + timeout
    while (not out or out[-1][0] < high - 1) and time.time() < deadline and high > low:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        out.append((m.offset(), m.key(), m.value()))
    c.close()
    return out


def watermarks(b: BrokerProcess, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "w"})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(lo), int(hi)
    finally:
        c.close()


def seg_files(b: BrokerProcess, topic: str, suffix: str = ".log") -> list[str]:
    d = Path(b.data_dir) / f"{topic}-0"
    return sorted(n for n in os.listdir(d) if n.endswith(suffix))


def wait_for(pred: object, timeout: float = 15.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def test_time_retention_deletes_old_segments(lbroker: BrokerProcess) -> None:
    topic = create(lbroker, {"segment.bytes": "2000", "retention.ms": "60000"})
    old = int(time.time() * 1000) - 3_600_000
    produce(lbroker, topic, [(b"k%d" % i, b"x" * 100, old) for i in range(60)])
    now = int(time.time() * 1000)
    produce(lbroker, topic, [(b"n%d" % i, b"y" * 100, now) for i in range(30)])
    assert wait_for(lambda: watermarks(lbroker, topic)[0] > 0)
    assert wait_for(lambda: not seg_files(lbroker, topic, ".deleted"))
    lo, hi = watermarks(lbroker, topic)
    assert hi == 90 and 0 < lo <= 60
    got = consume_all(lbroker, topic)
    assert [o for o, _, _ in got] == list(range(lo, 90))
    names = seg_files(lbroker, topic)
    assert int(names[0].split(".")[0]) == lo  # whole segments went; the new first starts at lo
    assert not any(n.startswith("0000000000000000000.") for n in names)


def test_delete_records_via_admin_client(lbroker: BrokerProcess) -> None:
    topic = create(lbroker, {"segment.bytes": "1500"})
    produce(lbroker, topic, [(b"k", b"v" * 100, None) for _ in range(40)])
    admin = AdminClient({"bootstrap.servers": lbroker.bootstrap})
    res = admin.delete_records([TopicPartition(topic, 0, 25)])
    tp = next(iter(res.values())).result(10)
    assert tp.low_watermark == 25
    assert watermarks(lbroker, topic) == (25, 40)
    assert [o for o, _, _ in consume_all(lbroker, topic)] == list(range(25, 40))
    bad = admin.delete_records([TopicPartition(topic, 0, 41)])
    with pytest.raises(KafkaException) as e:
        next(iter(bad.values())).result(10)
    assert e.value.args[0].code() == 1  # OFFSET_OUT_OF_RANGE
    # survives a restart (checkpointed)
    lbroker.stop()
    lbroker.start()
    assert watermarks(lbroker, topic) == (25, 40)


def test_compaction_keeps_latest_value_per_key(lbroker: BrokerProcess) -> None:
    topic = create(
        lbroker,
        {
            "cleanup.policy": "compact",
            "segment.bytes": "4000",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "86400000",
        },
    )
    items: list[tuple[bytes | None, bytes | None, int | None]] = []
    expect: dict[bytes, bytes | None] = {}
    for i in range(400):
        k = b"key-%d" % (i % 20)
        v = None if i % 97 == 0 else b"v%d-" % i + b"z" * 50
        items.append((k, v, None))
        expect[k] = v
    produce(lbroker, topic, items, **{"compression.type": "lz4"})
    before = len(seg_files(lbroker, topic))
    assert wait_for(lambda: len(consume_all(lbroker, topic)) < 100, timeout=30)
    got = consume_all(lbroker, topic)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets))
    latest = {k: v for _, k, v in got if k is not None}
    assert latest == expect
    assert len(seg_files(lbroker, topic)) <= before


def test_null_key_rejected_on_compacted_topic(lbroker: BrokerProcess) -> None:
    topic = create(lbroker, {"cleanup.policy": "compact"})
    p = Producer({"bootstrap.servers": lbroker.bootstrap, "linger.ms": 0, "retries": 0})
    errs: list[object] = []
    p.produce(topic, value=b"no key", partition=0, on_delivery=lambda err, _m: errs.append(err))
    p.flush(10)
    assert errs and errs[0] is not None and errs[0].code() == 87  # type: ignore[attr-defined]


def test_empty_cleanup_policy_keeps_everything(lbroker: BrokerProcess) -> None:
    """Kafka 4 takes an empty cleanup.policy (IncrementalAlterConfigs SUBTRACT of the last policy,
    or SET ""): neither retention nor compaction applies -- segments stay however old or big
    (Kafka 4.2 documents it as infinite retention); DeleteRecords is refused as with any policy
    lacking "delete" (POLICY_VIOLATION), null keys are accepted."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    topic = create(lbroker, {"segment.bytes": "2000", "retention.ms": "60000", "retention.bytes": "3000"})
    admin = AdminClient({"bootstrap.servers": lbroker.bootstrap})
    res = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)
        ],
    )
    admin.incremental_alter_configs([res])[res].result(10)
    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    entry = next(iter(described.values())).result(10)["cleanup.policy"]
    assert entry.value == ""
    old = int(time.time() * 1000) - 3_600_000
    produce(lbroker, topic, [(b"k%d" % (i % 3), b"x" * 100, old) for i in range(60)])
    produce(lbroker, topic, [(None, b"no key", None)])
    segments = len(seg_files(lbroker, topic))
    assert segments > 3
    time.sleep(1.5)  # several retention checks (every 200 ms) and cleaner passes
    assert watermarks(lbroker, topic) == (0, 61)
    assert len(seg_files(lbroker, topic)) == segments
    assert [o for o, _, _ in consume_all(lbroker, topic)] == list(range(61))
    bad = admin.delete_records([TopicPartition(topic, 0, 10)])
    with pytest.raises(KafkaException) as e:
        next(iter(bad.values())).result(10)
    assert e.value.args[0].code() == 44  # POLICY_VIOLATION
    # "delete" back: retention applies again
    res = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([res])[res].result(10)
    assert wait_for(lambda: watermarks(lbroker, topic)[0] > 0)
