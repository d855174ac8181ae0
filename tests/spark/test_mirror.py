"""``strom mirror`` between two independent strom brokers (two clusters, A and B), driven and
checked with confluent-kafka: records, headers and timestamps mirrored exactly once across a
restart that replays a committed batch; DefaultReplicationPolicy and IdentityReplicationPolicy
naming; topic configs and partition counts synced; active/active without loops; a consumer group
failing over from A to B through MM2's checkpoints; the internal records decoded with MM2's
formats."""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from strom.cli.main import run as cli_run
from strom.mirror.config import parse_mm2
from strom.mirror.records import Checkpoint, Heartbeat, OffsetSync
from strom.mirror.runtime import MirrorMaker
from strom.testing.broker_process import BrokerProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration]

RF1 = {
    "replication.factor": "1",
    "offset-syncs.topic.replication.factor": "1",
    "checkpoints.topic.replication.factor": "1",
    "heartbeats.topic.replication.factor": "1",
    "offset.storage.replication.factor": "1",
}


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    a = BrokerProcess(tmp_path_factory.mktemp("mirror-a") / "data")
    b = BrokerProcess(tmp_path_factory.mktemp("mirror-b") / "data")
    a.start()
    try:
        b.start()
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


def mm2(a: BrokerProcess, b: BrokerProcess, flows: str, **extra: str) -> dict[str, str]:
    props = {"clusters": "A, B", "A.bootstrap.servers": a.bootstrap, "B.bootstrap.servers": b.bootstrap}
    props.update(RF1)
    for f in flows.split(","):
        props[f"{f.strip()}.enabled"] = "true"
    props.update(extra)
    return props


def create(bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(30)


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for r in records:
        p.produce(topic, **r)
    assert p.flush(30) == 0


def consume_all(bootstrap: str, topic: str, timeout: float = 20.0) -> list[Any]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    try:
        md = c.list_topics(topic, timeout=10)
        parts = list(md.topics[topic].partitions)
        c.assign([TopicPartition(topic, p, -2) for p in parts])
        out: list[Any] = []
        eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(eof) < len(parts) and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error():
                    if m.error().code() == -191:
                        eof.add(m.partition())
                    continue
                out.append(m)
        return out
    finally:
        c.close()


def topics_of(bootstrap: str) -> dict[str, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {t: len(tm.partitions) for t, tm in md.topics.items()}


def topic_configs(bootstrap: str, topic: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    entries: dict[str, Any] = next(iter(fut.values())).result(10)
    return entries


def records(prefix: str, n: int, partitions: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "key": f"{prefix}-k{i}".encode(),
            "value": None if i % 17 == 16 else f"{prefix}-v{i}".encode() * (1 + i % 3),
            "partition": i % partitions,
            "timestamp": 1_600_000_000_000 + i * 7,
            "headers": [("h", f"{i}".encode()), ("null", None)] if i % 2 else None,
        }
        for i in range(start, start + n)
    ]


def shape(m: Any) -> tuple[Any, ...]:
    hs = tuple((k, v) for k, v in (m.headers() or []))
    return (m.partition(), m.key(), m.value(), m.timestamp()[1], hs)


def expected(recs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["partition"], r["key"], r["value"], r["timestamp"], tuple(r["headers"] or ())) for r in recs]


def by_partition(rows: list[tuple[Any, ...]]) -> dict[int, list[tuple[Any, ...]]]:
    out: dict[int, list[tuple[Any, ...]]] = {}
    for r in rows:
        out.setdefault(r[0], []).append(r)
    return out


def test_mirror_exactly_once_across_restart(spark: Any, clusters: Any, tmp_path: Path) -> None:
    a, b = clusters
    create(a.bootstrap, "orders", 3, {"retention.ms": "86400000", "max.message.bytes": "500000"})
    first = records("o", 300, 3)
    produce(a.bootstrap, "orders", first)
    props = mm2(a, b, "A->B", **{"A->B.topics": "orders"})
    MirrorMaker(parse_mm2(props), tmp_path).run_once(spark)

    assert topics_of(b.bootstrap)["A.orders"] == 3
    got = [shape(m) for m in consume_all(b.bootstrap, "A.orders")]
    assert by_partition(got) == by_partition(expected(first))  # order per partition, partition i -> i
    entries = topic_configs(b.bootstrap, "A.orders")
    assert entries["retention.ms"].value == "86400000"
    assert entries["max.message.bytes"].value == "500000"

    # more data, a partition added at the source, a changed config; then a "crash" after the
    # last batch's transaction committed but before Spark recorded the batch: its commit file
    # goes, so the restarted query replays that batch
    second = records("p", 100, 3, start=300)
    produce(a.bootstrap, "orders", second)
    MirrorMaker(parse_mm2(props), tmp_path).run_once(spark)
    commit_dir = tmp_path / "A->B" / "checkpoint" / "commits"
    last_batch = max(int(p.name) for p in commit_dir.iterdir() if p.name.isdigit())
    (commit_dir / str(last_batch)).unlink()
    (commit_dir / f".{last_batch}.crc").unlink(missing_ok=True)
    admin_a = AdminClient({"bootstrap.servers": a.bootstrap})
    admin_a.create_partitions([NewPartitions("orders", 4)])["orders"].result(30)
    third = [dict(r, partition=3) for r in records("q", 50, 1, start=400)]
    produce(a.bootstrap, "orders", third)
    again = MirrorMaker(parse_mm2(props), tmp_path)
    again.run_once(spark)
    assert again.flows[0].skipped == 100  # the replayed batch was recognised, not written twice
    assert again.flows[0].records == 50

    assert topics_of(b.bootstrap)["A.orders"] == 4
    got = [shape(m) for m in consume_all(b.bootstrap, "A.orders")]
    assert len(got) == 450
    assert by_partition(got) == by_partition(expected(first + second + third))

    # a checkpoint lost entirely: the flow resumes after the offsets committed with the data
    shutil.rmtree(tmp_path / "A->B" / "checkpoint")
    produce(a.bootstrap, "orders", records("r", 30, 4, start=450))
    MirrorMaker(parse_mm2(props), tmp_path).run_once(spark)
    assert len(consume_all(b.bootstrap, "A.orders")) == 480

    # MM2's internal records decode with MM2's formats
    syncs = [
        OffsetSync.decode(m.key(), m.value()) for m in consume_all(a.bootstrap, "mm2-offset-syncs.B.internal")
    ]
    assert {(s.topic, s.partition) for s in syncs} == {("orders", p) for p in range(4)}
    last = {}
    for s in syncs:
        last[(s.topic, s.partition)] = s
    dst = {
        m.partition(): m.offset() for m in consume_all(b.bootstrap, "A.orders")
    }  # last offset per partition
    src = {m.partition(): m.offset() for m in consume_all(a.bootstrap, "orders")}
    for p in range(4):
        assert (last[("orders", p)].upstream_offset, last[("orders", p)].downstream_offset) == (
            src[p],
            dst[p],
        )
    beats = [Heartbeat.decode(m.key(), m.value()) for m in consume_all(b.bootstrap, "heartbeats")]
    assert beats and {(h.source_cluster_alias, h.target_cluster_alias) for h in beats} == {("A", "B")}


def test_identity_policy(spark: Any, clusters: Any, tmp_path: Path) -> None:
    a, b = clusters
    create(a.bootstrap, "ident.events", 2, {"cleanup.policy": "compact"})
    recs = records("i", 40, 2)
    for r in recs:
        r["value"] = r["value"] or b"x"
    # transactions on the source: an aborted one is never mirrored (read_committed), a committed
    # one is; their markers leave gaps in the upstream offsets, which force offset syncs
    txn = Producer({"bootstrap.servers": a.bootstrap, "transactional.id": "ident-writer"})
    txn.init_transactions(30)
    for commit, chunk in ((False, recs[:10]), (True, recs[10:20])):
        txn.begin_transaction()
        for r in chunk:
            txn.produce("ident.events", **r)
        txn.flush(30)
        if commit:
            txn.commit_transaction(30)
        else:
            txn.abort_transaction(30)
    produce(a.bootstrap, "ident.events", recs[20:])
    recs = recs[10:]
    props = mm2(
        a,
        b,
        "A->B",
        **{
            "A->B.topics": "ident\\..*",
            "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        },
    )
    MirrorMaker(parse_mm2(props), tmp_path).run_once(spark)
    t = topics_of(b.bootstrap)
    assert t["ident.events"] == 2 and "A.ident.events" not in t
    got = [shape(m) for m in consume_all(b.bootstrap, "ident.events")]
    assert by_partition(got) == by_partition(expected(recs))
    entries = topic_configs(b.bootstrap, "ident.events")
    assert entries["cleanup.policy"].value == "compact"
    syncs = [
        OffsetSync.decode(m.key(), m.value()) for m in consume_all(a.bootstrap, "mm2-offset-syncs.B.internal")
    ]
    mine = [sy for sy in syncs if sy.topic == "ident.events"]
    # per partition: 5 aborted records and a marker, 5 committed and a marker, then 10 plain ones:
    # the first mirrored record (upstream 6) is synced, the gap after the commit marker (11 -> 12)
    # is synced, and so is the last record (21)
    for part in (0, 1):
        ups = sorted(sy.upstream_offset for sy in mine if sy.partition == part)
        assert ups == [6, 12, 21], (part, ups)


def test_active_active_without_loops(spark: Any, clusters: Any, tmp_path: Path, capsys: Any) -> None:
    a, b = clusters
    create(a.bootstrap, "aa-west", 1)
    create(b.bootstrap, "aa-east", 1)
    produce(a.bootstrap, "aa-west", records("w", 20, 1))
    produce(b.bootstrap, "aa-east", records("e", 30, 1))
    props = mm2(a, b, "A->B, B->A", **{"topics": "aa-.*"})
    for _ in range(2):  # a second round: anything that could loop would grow a prefix
        MirrorMaker(parse_mm2(props), tmp_path).run_once(spark)
    ta, tb = topics_of(a.bootstrap), topics_of(b.bootstrap)
    assert "B.aa-east" in ta and "A.aa-west" in tb
    # internal topics stay home (__consumer_offsets, offset syncs, checkpoints, mm2-offsets): the
    # only topics named after the other cluster are its data, its heartbeats and the checkpoints
    # topic MM2 names after the source cluster
    for here, other in ((ta, "B."), (tb, "A.")):
        assert other + "checkpoints.internal" in here
        leaked = {
            t
            for t in here
            if t.startswith(other)
            and t != other + "checkpoints.internal"
            and (t.endswith(".internal") or t[2:].startswith("__"))
        }
        assert not leaked, leaked
    for t in list(ta) + list(tb):
        assert not t.startswith(("A.B.", "B.A.")), t
    assert len(consume_all(b.bootstrap, "A.aa-west")) == 20
    assert len(consume_all(a.bootstrap, "B.aa-east")) == 30
    # heartbeats travel one hop: B holds A's heartbeats as A.heartbeats, never B.A.heartbeats
    assert "A.heartbeats" in tb and "B.heartbeats" in ta
    beats = {
        Heartbeat.decode(m.key(), m.value()).source_cluster_alias
        for m in consume_all(b.bootstrap, "A.heartbeats")
    }
    assert beats == {"B"}  # B->A's heartbeats, written on A, mirrored back to B once
    assert cli_run(["mirror", "upstream-clusters", "--bootstrap-server", b.bootstrap]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == [["A", "1"]]


def test_consumer_group_failover(spark: Any, clusters: Any, tmp_path: Path, capsys: Any) -> None:
    a, b = clusters
    create(a.bootstrap, "pay", 2)
    recs = records("pay", 400, 2)
    produce(a.bootstrap, "pay", recs)
    # the group has read part of the topic on A: 130 records of partition 0, 70 of partition 1
    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "billing", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("pay", 0, 130), TopicPartition("pay", 1, 70)], asynchronous=False)
    c.close()

    # another group is active on B (a member holds its partitions): MM2 leaves its offsets alone
    create(b.bootstrap, "A.pay", 2)
    busy_a = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "busy", "enable.auto.commit": False})
    busy_a.commit(offsets=[TopicPartition("pay", 0, 50)], asynchronous=False)
    busy_a.close()
    busy_b = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "busy",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    busy_b.subscribe(["A.pay"])
    wait_for(lambda: busy_b.consume(1, 0.5) is not None and bool(busy_b.assignment()))

    props = mm2(
        a,
        b,
        "A->B",
        **{
            "A->B.topics": "pay",
            "sync.group.offsets.enabled": "true",
            "A->B.groups": "billing, busy",
            # the offset syncs on the target, written in the batches' transactions
            "A->B.offset-syncs.topic.location": "target",
        },
    )
    mm = MirrorMaker(parse_mm2(props), tmp_path)
    mm.run_once(spark)
    syncs = [
        OffsetSync.decode(m.key(), m.value()) for m in consume_all(b.bootstrap, "mm2-offset-syncs.A.internal")
    ]
    # the module's target broker also holds other tests' syncs (and this flow mirrors heartbeats)
    assert {(sy.topic, sy.partition) for sy in syncs if sy.topic == "pay"} == {("pay", 0), ("pay", 1)}
    cps = [Checkpoint.decode(m.key(), m.value()) for m in consume_all(b.bootstrap, "A.checkpoints.internal")]
    mine = {(cp.topic, cp.partition): cp for cp in cps if cp.group == "billing"}
    assert {k: v.upstream_offset for k, v in mine.items()} == {("A.pay", 0): 130, ("A.pay", 1): 70}

    assert ("A.pay", 0) in {(cp.topic, cp.partition) for cp in cps if cp.group == "busy"}
    admin_b = AdminClient({"bootstrap.servers": b.bootstrap})
    res = admin_b.list_consumer_group_offsets([ConsumerGroupTopicPartitions("busy")])["busy"].result(10)
    assert all(tp.offset < 0 for tp in res.topic_partitions or []), res.topic_partitions
    busy_b.close()

    # RemoteClusterUtils-style translation from the CLI
    assert (
        cli_run(
            [
                "mirror",
                "translate-offsets",
                "--bootstrap-server",
                b.bootstrap,
                "--source-alias",
                "A",
                "--group",
                "billing",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    assert {(t, int(p)): int(o) for t, p, o in rows} == {k: cp.downstream_offset for k, cp in mine.items()}

    # the group is not active on B, so its translated offsets were committed there
    res = admin_b.list_consumer_group_offsets([ConsumerGroupTopicPartitions("billing")])["billing"].result(10)
    assert {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions} == {
        k: cp.downstream_offset for k, cp in mine.items()
    }

    # fail over: the group (inactive on B, so MM2 synced its offsets) resumes on B
    done = {0: 130, 1: 70}
    consumed_on_a = {r["key"] for i, r in enumerate(recs) if i // 2 < done[r["partition"]]}
    rest = {r["key"] for r in recs} - consumed_on_a
    c2 = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "billing",
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
            "isolation.level": "read_committed",
        }
    )
    c2.subscribe(["A.pay"])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not rest <= set(got):
        for m in c2.consume(500, 0.5):
            if not m.error():
                got.append(m.key())
    c2.close()
    assert rest <= set(got), "records missing after failover"
    assert len(got) == len(set(got))
    reread = set(got) & consumed_on_a
    # at most offset.lag.max (100) records per partition are read again on B
    assert len(reread) <= 2 * 100, len(reread)
    print(f"failover: {len(got)} records read on B, {len(reread)} of them already read on A")


def wait_for(cond: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.5)
    raise AssertionError("condition not met in time")


@pytest.mark.slow
def test_continuous_flow_picks_up_new_topics(spark: Any, clusters: Any, tmp_path: Path) -> None:
    """The flow running continuously: a topic created on A later is created on B (with its
    partitions) and mirrored; heartbeats, checkpoints and the group sync run on their intervals."""
    a, b = clusters
    create(a.bootstrap, "live-1", 1)
    produce(a.bootstrap, "live-1", records("l1", 10, 1))
    props = mm2(
        a,
        b,
        "A->B",
        **{
            "A->B.topics": "live-.*",
            "refresh.topics.interval.seconds": "1",
            "emit.checkpoints.interval.seconds": "1",
            "sync.group.offsets.enabled": "true",
            "sync.group.offsets.interval.seconds": "1",
            "A->B.groups": "live-group",
        },
    )
    mm = MirrorMaker(parse_mm2(props), tmp_path)
    mm.start(spark, trigger_ms=300)
    try:
        wait_for(lambda: len(consume_all(b.bootstrap, "A.live-1", 5)) == 10)
        create(a.bootstrap, "live-2", 3)
        produce(a.bootstrap, "live-2", records("l2", 30, 3))
        wait_for(lambda: topics_of(b.bootstrap).get("A.live-2") == 3)
        wait_for(lambda: len(consume_all(b.bootstrap, "A.live-2", 5)) == 30)
        c = Consumer(
            {"bootstrap.servers": a.bootstrap, "group.id": "live-group", "enable.auto.commit": False}
        )
        c.commit(offsets=[TopicPartition("live-2", 0, 10)], asynchronous=False)
        c.close()

        def synced() -> bool:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("live-group")])
            res = fut["live-group"].result(10)
            return any(tp.topic == "A.live-2" and tp.offset >= 0 for tp in res.topic_partitions)

        wait_for(synced)
        assert len(consume_all(b.bootstrap, "heartbeats", 5)) >= 2
        assert mm.failed() is None
    finally:
        mm.stop()


@pytest.mark.slow
def test_multi_node_cluster_on_either_side(spark: Any, clusters: Any, tmp_path: Path) -> None:
    """A three-node strom cluster C as a source (C->B) and as a target (A->C, remote topics with
    replication factor 3), beside the single-node brokers."""
    from strom.testing.cluster_process import ClusterProcess

    a, b = clusters
    with ClusterProcess(tmp_path / "dc", 3) as c:  # started by __enter__
        c.wait_ready()
        create_rf(c.bootstrap, "multi", 3, 3)
        produce(c.bootstrap, "multi", records("m", 90, 3))
        create(a.bootstrap, "to-c", 2)
        produce(a.bootstrap, "to-c", records("t", 40, 2))
        props = {
            "clusters": "A, B, C",
            "A.bootstrap.servers": a.bootstrap,
            "B.bootstrap.servers": b.bootstrap,
            "C.bootstrap.servers": c.bootstrap,
            **RF1,
            "C->B.enabled": "true",
            "C->B.topics": "multi",
            "A->C.enabled": "true",
            "A->C.topics": "to-c",
            "A->C.replication.factor": "3",
        }
        MirrorMaker(parse_mm2(props), tmp_path / "state").run_once(spark)
        got = [shape(m) for m in consume_all(b.bootstrap, "C.multi")]
        assert by_partition(got) == by_partition(expected(records("m", 90, 3)))
        got = [shape(m) for m in consume_all(c.bootstrap, "A.to-c")]
        assert by_partition(got) == by_partition(expected(records("t", 40, 2)))
        md = AdminClient({"bootstrap.servers": c.bootstrap}).list_topics("A.to-c", timeout=10)
        assert {len(p.replicas) for p in md.topics["A.to-c"].partitions.values()} == {3}


def create_rf(bootstrap: str, topic: str, partitions: int, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, rf)])[topic].result(30)
