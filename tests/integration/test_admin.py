"""CreatePartitions, DescribeLogDirs, DescribeTopicPartitions and OffsetForLeaderEpoch against a
real broker: confluent-kafka / kafka-python where they expose the API, strom's client (raw kio
requests) where they do not."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from strom.client import Client
from strom.client import admin as sadmin
from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

T = TypeVar("T")


@pytest.fixture(scope="module")
def admin_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("admin") / "data")
    b.start()
    try:
        yield b
    finally:
        b.stop()


def new_topic(b: BrokerProcess, partitions: int = 1, prefix: str = "adm") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    a.create_topics([NewTopic(name, partitions)])[name].result(15)
    return name


def with_client(b: BrokerProcess, fn: Callable[[Client], Awaitable[T]]) -> T:
    async def go() -> T:
        async with Client(b.bootstrap) as c:
            return await fn(c)

    return asyncio.run(go())


def raw(b: BrokerProcess, api_key: int, body: dict[str, Any]) -> Any:
    async def go(c: Client) -> Any:
        conn = await c.any_connection()
        return await conn.request(api_key, body)

    return with_client(b, go)


# ---------------------------------------------------------------------------- CreatePartitions


def test_create_partitions_grows_topic_and_producers_see_it(admin_broker: BrokerProcess) -> None:
    t = new_topic(admin_broker, 1)
    a = AdminClient({"bootstrap.servers": admin_broker.bootstrap})
    a.create_partitions([NewPartitions(t, 4)])[t].result(15)
    md = a.list_topics(t, timeout=10)
    assert sorted(md.topics[t].partitions) == [0, 1, 2, 3]
    p = Producer({"bootstrap.servers": admin_broker.bootstrap, "linger.ms": 0, "partitioner": "random"})
    seen: set[int | None] = set()
    for i in range(200):
        p.produce(t, b"v%d" % i, on_delivery=lambda err, m: seen.add(m.partition()) if err is None else None)
    p.flush(15)
    assert seen == {0, 1, 2, 3}
    sizes = with_client(admin_broker, lambda c: sadmin.describe_log_dirs(c))[0][2]
    assert all(sizes[(t, i)] > 0 for i in range(4))


def test_create_partitions_refuses_shrink_and_same(admin_broker: BrokerProcess) -> None:
    t = new_topic(admin_broker, 2)
    a = AdminClient({"bootstrap.servers": admin_broker.bootstrap})
    for n, msg in ((1, "higher than the requested 1"), (2, "already has 2 partitions")):
        with pytest.raises(KafkaException) as ei:
            a.create_partitions([NewPartitions(t, n)])[t].result(15)
        assert ei.value.args[0].code() == KafkaError.INVALID_PARTITIONS
        assert msg in ei.value.args[0].str()


def test_create_partitions_unknown_topic_validate_only_and_internal(admin_broker: BrokerProcess) -> None:
    t = new_topic(admin_broker, 1)
    result = with_client(
        admin_broker,
        lambda c: sadmin.create_partitions(c, {"no-such-topic-x": 3, "__consumer_offsets": 60}),
    )
    err = result["no-such-topic-x"]
    assert err is not None and err.code == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert result["__consumer_offsets"] is not None
    assert with_client(admin_broker, lambda c: sadmin.create_partitions(c, {t: 5}, validate_only=True)) == {
        t: None
    }
    a = AdminClient({"bootstrap.servers": admin_broker.bootstrap})
    assert len(a.list_topics(t, timeout=10).topics[t].partitions) == 1


def test_kafka_python_create_partitions(admin_broker: BrokerProcess) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewPartitions as KPNewPartitions

    t = new_topic(admin_broker, 1)
    kp = KafkaAdminClient(bootstrap_servers=admin_broker.bootstrap)
    try:
        kp.create_partitions({t: KPNewPartitions(3)})
    finally:
        kp.close()
    a = AdminClient({"bootstrap.servers": admin_broker.bootstrap})
    assert len(a.list_topics(t, timeout=10).topics[t].partitions) == 3


def test_partitions_survive_restart(broker: BrokerProcess) -> None:
    t = new_topic(broker, 1)
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    a.create_partitions([NewPartitions(t, 3)])[t].result(15)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    p.produce(t, b"last", partition=2)
    p.flush(15)
    broker.stop()
    broker.start()
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert len(a.list_topics(t, timeout=10).topics[t].partitions) == 3
    end = with_client(broker, lambda c: c.list_offsets(t, {0: -1, 1: -1, 2: -1}))
    assert end == {0: 0, 1: 0, 2: 1}


# ---------------------------------------------------------------------------- DescribeLogDirs


def test_describe_log_dirs_sizes(admin_broker: BrokerProcess) -> None:
    from kafka.admin import KafkaAdminClient

    t = new_topic(admin_broker, 2)
    p = Producer({"bootstrap.servers": admin_broker.bootstrap, "linger.ms": 0})
    for _ in range(10):
        p.produce(t, b"x" * 1000, partition=1)
    p.flush(15)
    [(log_dir, code, sizes)] = with_client(
        admin_broker, lambda c: sadmin.describe_log_dirs(c, topics={t: [0, 1]})
    )
    assert code == 0
    assert log_dir == str(admin_broker.data_dir.resolve())
    assert sizes[(t, 0)] == 0
    expected = sum(f.stat().st_size for f in (admin_broker.data_dir / f"{t}-1").glob("*.log"))
    assert sizes[(t, 1)] == expected >= 10_000
    assert set(sizes) == {(t, 0), (t, 1)}  # only what was asked
    kp = KafkaAdminClient(bootstrap_servers=admin_broker.bootstrap)
    try:
        res = kp.describe_log_dirs()
    finally:
        kp.close()
    text = repr(res)
    assert t in text and str(admin_broker.data_dir.resolve()) in text


# ---------------------------------------------------------------------------- DescribeTopicPartitions


def test_describe_topic_partitions_with_cursor(admin_broker: BrokerProcess) -> None:
    tag = uuid.uuid4().hex[:6]
    a = new_topic(admin_broker, 3, prefix=f"dtp-{tag}-a")
    b = new_topic(admin_broker, 2, prefix=f"dtp-{tag}-b")
    resp = raw(
        admin_broker,
        75,
        {
            "topics": [{"name": a}, {"name": b}, {"name": "zz-missing"}],
            "response_partition_limit": 2,
            "cursor": None,
        },
    )
    assert [t.name for t in resp.topics] == [a]
    assert [int(p.partition_index) for p in resp.topics[0].partitions] == [0, 1]
    assert resp.next_cursor.topic_name == a and int(resp.next_cursor.partition_index) == 2
    resp2 = raw(
        admin_broker,
        75,
        {
            "topics": [{"name": a}, {"name": b}, {"name": "zz-missing"}],
            "response_partition_limit": 10,
            "cursor": {"topic_name": a, "partition_index": 2},
        },
    )
    got = [(t.name, [int(p.partition_index) for p in t.partitions], int(t.error_code)) for t in resp2.topics]
    assert got == [
        (a, [2], 0),
        (b, [0, 1], 0),
        ("zz-missing", [], KafkaError.UNKNOWN_TOPIC_OR_PART),
    ]
    assert resp2.next_cursor is None
    part = resp2.topics[1].partitions[0]
    assert int(part.leader_id) == 1 and list(part.isr_nodes) == [1] and int(part.leader_epoch) == 0


def test_confluent_describe_topics(admin_broker: BrokerProcess) -> None:
    from confluent_kafka import TopicCollection

    t = new_topic(admin_broker, 3)
    a = AdminClient({"bootstrap.servers": admin_broker.bootstrap})
    desc = a.describe_topics(TopicCollection([t]))[t].result(15)
    assert desc.name == t and len(desc.partitions) == 3
    assert all(p.leader is not None and p.leader.id == 1 for p in desc.partitions)


# ---------------------------------------------------------------------------- OffsetForLeaderEpoch


def test_offset_for_leader_epoch(admin_broker: BrokerProcess) -> None:
    t = new_topic(admin_broker, 1)
    p = Producer({"bootstrap.servers": admin_broker.bootstrap, "linger.ms": 0})
    for i in range(7):
        p.produce(t, b"%d" % i, partition=0)
    p.flush(15)
    resp = raw(
        admin_broker,
        23,
        {
            "replica_id": -1,
            "topics": [
                {
                    "topic": t,
                    "partitions": [
                        {"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0},
                        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 5},
                        {"partition": 0, "current_leader_epoch": 3, "leader_epoch": 0},
                        {"partition": 9, "current_leader_epoch": -1, "leader_epoch": 0},
                    ],
                },
            ],
        },
    )
    parts = [(int(x.error_code), int(x.leader_epoch), int(x.end_offset)) for x in resp.topics[0].partitions]
    assert parts == [
        (0, 0, 7),  # the current epoch ends at the log end offset
        (0, -1, -1),  # an epoch newer than any known: undefined
        (75, -1, -1),  # UNKNOWN_LEADER_EPOCH: the client knows a newer leader epoch than ours
        (3, -1, -1),  # no such partition
    ]


def test_consumer_offset_validation_uses_epochs(admin_broker: BrokerProcess) -> None:
    """librdkafka validates positions with OffsetForLeaderEpoch after a metadata leader-epoch
    change; a consumer seeking with an epoch must keep working."""
    from confluent_kafka import Consumer, TopicPartition

    t = new_topic(admin_broker, 1)
    p = Producer({"bootstrap.servers": admin_broker.bootstrap, "linger.ms": 0})
    for i in range(3):
        p.produce(t, b"%d" % i, partition=0)
    p.flush(15)
    c = Consumer({"bootstrap.servers": admin_broker.bootstrap, "group.id": uuid.uuid4().hex})
    try:
        c.assign([TopicPartition(t, 0, 1, leader_epoch=0)])  # offset 1 at leader epoch 0: validated first
        got: list[bytes | None] = []
        deadline = time.monotonic() + 15
        while len(got) < 2 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        assert got == [b"1", b"2"]
    finally:
        c.close()
