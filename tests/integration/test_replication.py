"""Replicated partitions on a real three-node cluster (issue 14): followers fetch from leaders,
the HW is the ISR's, ``acks=all`` waits for the ISR, ``min.insync.replicas`` refuses writes the
ISR cannot hold, and a kill -9 of a leader loses no acknowledged record.

Three ``strom serve`` processes (:class:`ClusterProcess`, the configs of ``strom dev-cluster``),
one module-wide cluster; each test uses its own topic. Records are produced and consumed with
confluent-kafka (librdkafka), unchanged. After the replicas caught up, the partition's segment
files are compared byte for byte across the three data dirs: followers hold the leader's bytes
(offsets, leader epochs, producer ids and CRCs as the leader wrote them).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.client.groups import fetch_offsets
from strom.testing.cluster_process import ClusterProcess
from strom.testing.polling import wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_mod = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.integration

NODES = (1, 2, 3)
OVERRIDES = (
    "broker.heartbeat.interval.ms=300",
    "broker.session.timeout.ms=2500",
    "replica.lag.time.max.ms=3000",
    "controller.quorum.election.timeout.ms=500",
    "controller.quorum.fetch.timeout.ms=1000",
    # the coordinators' topics replicated too (Kafka's default is 3; strom's 1)
    "offsets.topic.replication.factor=3",
    "transaction.state.log.replication.factor=3",
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    c = ClusterProcess(tmp_path_factory.mktemp("replication") / "dc", 3, overrides=OVERRIDES)
    c.start()
    try:
        c.wait_ready(90)
        yield c
    finally:
        c.close()


@pytest.fixture
def ready(cluster: ClusterProcess) -> ClusterProcess:
    for i in NODES:
        if not cluster.is_running(i):
            cluster.start_node(i)
    cluster.wait_ready(90)
    return cluster


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create(c: ClusterProcess, name: str, partitions: int, rf: int = 3, **configs: str) -> None:
    node = c.running[0]
    res = c.create_topics(node, {name: (partitions, rf)}, configs=configs)
    assert res[name][0] == 0, res
    c.wait_topic(name, timeout=60)






def produce(c: ClusterProcess, name: str, values: list[bytes], *, acks: str = "all",
            idempotent: bool = True, timeout: float = 60.0, **extra: object
            ) -> tuple[list[tuple[int, int, bytes]], list[str]]:
    """Produce ``values`` (key = value); returns ((partition, offset, value) acknowledged, errors)."""
    p = confluent_kafka.Producer({
        "bootstrap.servers": c.bootstrap, "acks": acks, "enable.idempotence": idempotent,
        "linger.ms": 5, "message.timeout.ms": int(timeout * 1000), "topic.metadata.refresh.interval.ms": 1000,
        **extra,
    })
    acked: list[tuple[int, int, bytes]] = []
    errors: list[str] = []

    def cb(err, msg):  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    for v in values:
        while True:
            try:
                p.produce(name, key=v, value=v, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    left = p.flush(timeout + 10)
    assert left == 0, f"{left} records never answered"
    return acked, errors


def consume_all(
    c: ClusterProcess, name: str, expected: int, timeout: float = 60.0
) -> list[tuple[int, int, bytes]]:
    cons = confluent_kafka.Consumer({
        "bootstrap.servers": c.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "topic.metadata.refresh.interval.ms": 1000,
    })
    cons.subscribe([name])
    out: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            m = cons.poll(0.5)
            if m is None or m.error():
                continue
            out.append((m.partition(), m.offset(), m.value()))
        # nothing more than expected turns up
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            m = cons.poll(0.2)
            if m is not None and not m.error():
                out.append((m.partition(), m.offset(), m.value()))
    finally:
        cons.close()
    return out


def segment_bytes(c: ClusterProcess, node: int, name: str, partition: int) -> bytes:
    d = Path(c.spec(node).dir) / "data" / f"{name}-{partition}"
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


def wait_isr_full(c: ClusterProcess, name: str, partitions: int, node: int | None = None,
                  timeout: float = 60.0) -> dict[int, tuple[int, list[int], list[int]]]:
    def check():  # type: ignore[no-untyped-def]
        info = c.partition_info(node or c.running[0], name)
        return info if len(info) == partitions and all(len(i[2]) == 3 for i in info.values()) else None

    return wait_for(f"full ISRs of {name}", check, timeout)


def test_replicas_hold_the_leaders_bytes(ready: ClusterProcess) -> None:
    c = ready
    name = topic_name("repl")
    create(c, name, 3, 3)
    values = [f"r{i:05d}".encode() for i in range(3000)]
    acked, errors = produce(c, name, values)
    assert errors == [] and len(acked) == len(values)
    info = wait_isr_full(c, name, 3)
    for p in range(3):
        assert sorted(info[p][1]) == [1, 2, 3]

    def same_bytes():  # type: ignore[no-untyped-def]
        for p in range(3):
            blobs = {n: segment_bytes(c, n, name, p) for n in NODES}
            if len(set(blobs.values())) != 1 or not blobs[1]:
                return None
        return True

    wait_for("identical segments on the three nodes", same_bytes, 30)
    got = consume_all(c, name, len(values))
    assert sorted(v for _p, _o, v in got) == sorted(values)


def test_min_insync_replicas_refuses_acks_all_but_not_acks_1(ready: ClusterProcess) -> None:
    c = ready
    name = topic_name("minisr")
    create(c, name, 1, 3, **{"min.insync.replicas": "3"})
    acked, errors = produce(c, name, [b"before"])
    assert errors == [] and len(acked) == 1
    leader = c.partition_info(1, name)[0][0]
    victim = next(n for n in NODES if n != leader)
    c.kill(victim)
    try:
        wait_for("the ISR to shrink to two", lambda: len(c.partition_info(leader, name)[0][2]) == 2, 30)
        # librdkafka retries NOT_ENOUGH_REPLICAS (retriable) until its timeout: no retries here
        acked, errors = produce(c, name, [b"refused"], idempotent=False, timeout=10, retries=0)
        assert acked == [] and errors and "NOT_ENOUGH_REPLICAS" in errors[0], errors
        acked, errors = produce(c, name, [b"acks1"], acks="1", idempotent=False, timeout=10)
        assert errors == [] and len(acked) == 1
    finally:
        c.start_node(victim)
    wait_isr_full(c, name, 1, timeout=60)
    acked, errors = produce(c, name, [b"after"])
    assert errors == [] and len(acked) == 1


def test_kill_leader_loses_no_acknowledged_record(ready: ClusterProcess) -> None:
    c = ready
    name = topic_name("failover")
    create(c, name, 3, 3, **{"min.insync.replicas": "2"})
    first = [f"a{i:05d}".encode() for i in range(2000)]
    acked1, errors = produce(c, name, first)
    assert errors == [] and len(acked1) == len(first)
    info = wait_isr_full(c, name, 3)
    leader0 = info[0][0]
    c.kill(leader0)
    survivor = next(n for n in NODES if n != leader0)
    wait_for("a new leader of partition 0",
             lambda: c.partition_info(survivor, name)[0][0] not in (-1, leader0), 30)
    second = [f"b{i:05d}".encode() for i in range(2000)]
    acked2, errors = produce(c, name, second)
    assert errors == [] and len(acked2) == len(second)
    c.start_node(leader0)
    wait_isr_full(c, name, 3, timeout=90)
    expected = first + second
    got = consume_all(c, name, len(expected))
    values = [v for _p, _o, v in got]
    assert len(values) == len(set(values)), "a record was read twice"
    assert sorted(values) == sorted(expected), (
        f"{len(set(expected) - set(values))} acknowledged records lost"
    )
    # offsets per partition are contiguous and every acknowledged offset holds its value
    by_offset = {(p, o): v for p, o, v in got}
    for p, o, v in acked1 + acked2:
        assert by_offset.get((p, o)) == v


def test_epochs_and_leader_hints_in_answers(ready: ClusterProcess) -> None:
    """KIP-320 and KIP-951 on a replicated partition: stale or future ``current_leader_epoch``
    answered FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH by ListOffsets; a Produce or Fetch sent
    to a follower gets NOT_LEADER_OR_FOLLOWER with the leader and its endpoint; after a leader
    change OffsetForLeaderEpoch gives the end of the old epoch, and ListOffsets the epochs."""
    from strom.protocol.records import build_batch

    c = ready
    name = topic_name("epochs")
    create(c, name, 1, 3)
    acked, errors = produce(c, name, [b"one", b"two"])
    assert errors == [] and len(acked) == 2
    md = c.metadata(1, [name]).topics[name].partitions[0]
    leader, epoch = md.leader, md.leader_epoch
    follower = next(n for n in NODES if n != leader)

    def list_offsets(node: int, current: int) -> Any:
        resp = c.request(node, 2, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "current_leader_epoch": current,
                                           "timestamp": -1}]}]})
        return resp.topics[0].partitions[0]

    assert int(list_offsets(leader, epoch).error_code) == 0
    assert int(list_offsets(leader, epoch + 1).error_code) == 75  # UNKNOWN_LEADER_EPOCH
    latest = list_offsets(leader, -1)
    assert int(latest.offset) == 2 and int(latest.leader_epoch) == epoch

    batch = build_batch([(None, b"to-a-follower", [], int(time.time() * 1000))])
    resp = c.request(follower, 0, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": name, "partition_data": [{"index": 0, "records": batch}]}]})
    part = resp.responses[0].partition_responses[0]
    assert int(part.error_code) == 6  # NOT_LEADER_OR_FOLLOWER
    assert int(part.current_leader.leader_id) == leader and int(part.current_leader.leader_epoch) == epoch
    ports = {int(e.node_id): int(e.port) for e in resp.node_endpoints}
    assert ports.get(leader) == int(c.node_bootstrap(leader).rsplit(":", 1)[1])

    # a new leader: kill the old one; the epoch rises and the old epoch ends at offset 2
    c.kill(leader)
    try:
        new = wait_for("a new leader", lambda: (
            lambda p: p if p.leader not in (-1, leader) and p.leader_epoch > epoch else None
        )(c.metadata(follower, [name]).topics[name].partitions[0]), 30)
        resp = c.request(new.leader, 23, {"replica_id": -1, "topics": [
            {"topic": name, "partitions": [{"partition": 0, "current_leader_epoch": new.leader_epoch,
                                            "leader_epoch": epoch}]}]})
        p = resp.topics[0].partitions[0]
        assert int(p.error_code) == 0 and int(p.leader_epoch) == epoch and int(p.end_offset) == 2
        assert int(list_offsets(new.leader, epoch).error_code) == 74  # FENCED_LEADER_EPOCH: the old epoch
        earliest = c.request(new.leader, 2, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                           "timestamp": -2}]}]}).topics[0].partitions[0]
        assert int(earliest.offset) == 0 and int(earliest.leader_epoch) == epoch  # written in the old epoch
    finally:
        c.start_node(leader)
    wait_isr_full(c, name, 1, timeout=60)


def test_manual_replica_assignment_through_any_node(ready: ClusterProcess) -> None:
    """CreateTopics with replica assignments (kafka-topics.sh --replica-assignment, the Java
    Admin's NewTopic(name, assignments)) sent to a node that is named in none of them: the
    controller places the replicas as asked and the first replica leads."""
    admin = admin_mod.AdminClient({"bootstrap.servers": ready.node_bootstrap(1)})
    name = topic_name("assigned")
    new = admin_mod.NewTopic(name, 2, replica_assignment=[[2, 3], [3, 2]])
    futures = admin.create_topics([new])
    futures[name].result(30)
    ready.wait_topic(name, timeout=60)
    info = ready.partition_info(1, name)
    assert info[0][0] == 2 and sorted(info[0][1]) == [2, 3]
    assert info[1][0] == 3 and sorted(info[1][1]) == [2, 3]
    assert not (Path(ready.spec(1).dir) / "data" / f"{name}-0").exists()  # node 1 holds no replica
    bad = admin.create_topics([admin_mod.NewTopic(topic_name("bad"), 1, replica_assignment=[[2, 9]])])
    with pytest.raises(confluent_kafka.KafkaException) as e:
        next(iter(bad.values())).result(30)
    assert e.value.args[0].code() == confluent_kafka.KafkaError.INVALID_REPLICA_ASSIGNMENT


def test_committed_offsets_survive_the_coordinators_death(ready: ClusterProcess) -> None:
    """__consumer_offsets replicated (RF=3): a group's committed offsets, acknowledged only once
    the ISR has them, are served by the next coordinator after kill -9 of the first."""
    c = ready
    name = topic_name("groups")
    create(c, name, 1, 3)
    acked, errors = produce(c, name, [f"m{i}".encode() for i in range(20)])
    assert errors == [] and len(acked) == 20
    group = f"g-{uuid.uuid4().hex[:6]}"
    cons = confluent_kafka.Consumer({
        "bootstrap.servers": c.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    try:
        cons.subscribe([name])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < 20 and time.monotonic() < deadline:
            m = cons.poll(0.5)
            if m is not None and not m.error():
                seen += 1
        assert seen == 20
        tp = confluent_kafka.TopicPartition(name, 0, 17)
        cons.commit(offsets=[tp], asynchronous=False)
    finally:
        cons.close()
    resp = c.request(1, 10, {"key": group, "key_type": 0, "coordinator_keys": [group]})
    coordinator = int(resp.coordinators[0].node_id)
    c.kill(coordinator)
    try:
        survivor = next(n for n in NODES if n != coordinator)

        def committed() -> int | None:
            # strom's own client: a librdkafka AdminClient dropped with a request still in flight
            # (the coordinator moving) aborted the whole test process once
            got = c.run(survivor, lambda client: fetch_offsets(client, group, {name: [0]}))
            oam = got.get((name, 0))
            return oam.offset if oam is not None else None

        assert wait_for("the group's offsets at a new coordinator", committed, 60) == 17
    finally:
        c.start_node(coordinator)


def test_pipelined_acks_all_requests_appended_and_answered_in_order(ready: ClusterProcess) -> None:
    """A connection's acks=-1 produce requests are appended one after the other while the
    earlier ones wait for the ISR (their responses deferred), and every response goes back in
    request order, a Metadata request in between included (Kafka's per-connection order; the
    client checks each response's correlation id against the oldest request in flight). One
    follower is stopped (SIGSTOP) while the requests are sent, so the first one cannot complete
    before the ISR shrinks: the rest must still be appended behind it, not rejected or lost."""
    import asyncio

    from strom.client.connection import KafkaConnection
    from strom.protocol.records import build_batch

    c = ready
    name = topic_name("pipelined")
    create(c, name, 1, 3)
    leader = c.partition_info(1, name)[0][0]
    follower = next(n for n in NODES if n != leader)
    host, port = c.node_bootstrap(leader).rsplit(":", 1)
    n = 12

    async def go() -> list[Any]:
        conn = await KafkaConnection.open(host, int(port), request_timeout=60)
        try:
            calls = []
            for i in range(n):
                batch = build_batch([(None, f"r{i}".encode(), [], int(time.time() * 1000))])
                calls.append(conn.request(0, {
                    "transactional_id": None, "acks": -1, "timeout": 30000,
                    "topic_data": [{"name": name, "partition_data": [{"index": 0, "records": batch}]}],
                }, version=9))
                if i == n // 2:
                    calls.append(conn.request(3, {"topics": [{"name": name}]}, version=9))
            return list(await asyncio.gather(*calls))
        finally:
            await conn.close()

    c.pause(follower)
    try:
        answers = asyncio.run(go())
    finally:
        c.resume(follower)
    produced = [a for a in answers if hasattr(a, "responses")]
    assert len(produced) == n and any(hasattr(a, "brokers") for a in answers)
    offsets = []
    for a in produced:
        p = a.responses[0].partition_responses[0]
        assert p.error_code == 0, p
        offsets.append(p.base_offset)
    assert offsets == list(range(offsets[0], offsets[0] + n)), offsets  # appended in request order
    wait_isr_full(c, name, 1, timeout=60)
    got = consume_all(c, name, n)
    assert [v for _p, _o, v in got] == [f"r{i}".encode() for i in range(n)]


def test_a_commit_waits_for_min_insync_replicas_and_completes_when_they_return(
    ready: ClusterProcess,
) -> None:
    """Kafka writes transaction markers with acks=-1: while a partition's ISR is below its
    ``min.insync.replicas`` the marker is refused (NOT_ENOUGH_REPLICAS) and retried, so the
    transaction stays open (the HW does not move, a read_committed consumer sees nothing); once
    the replica returns to the ISR, the marker is written and the commit completes."""
    c = ready
    name = topic_name("txnisr")
    create(c, name, 1, 3, **{"min.insync.replicas": "3"})
    wait_isr_full(c, name, 1)
    tid = f"t-{uuid.uuid4().hex[:8]}"
    p = confluent_kafka.Producer({
        "bootstrap.servers": c.bootstrap, "transactional.id": tid, "transaction.timeout.ms": 120000,
        "topic.metadata.refresh.interval.ms": 1000,
    })
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(name, key=b"k", value=b"in-txn")
    assert p.flush(30) == 0  # appended and replicated (the ISR is full)
    leader = c.partition_info(c.running[0], name)[0][0]
    resp = c.request(leader, 10, {"key": tid, "key_type": 1, "coordinator_keys": [tid]})
    coordinator = int(resp.coordinators[0].node_id)
    victim = next(n for n in NODES if n not in (leader, coordinator))
    c.kill(victim)
    outcome: list[BaseException | None] = []
    committing = threading.Thread(target=lambda: outcome.append(_commit(p)), daemon=True)
    try:
        wait_for("the ISR to shrink to two", lambda: len(c.partition_info(leader, name)[0][2]) == 2, 30)
        committing.start()
        time.sleep(5)
        assert outcome == [], f"the commit ended below min.insync.replicas: {outcome}"
        ends = {}
        for isolation in ("read_uncommitted", "read_committed"):
            probe = confluent_kafka.Consumer({"bootstrap.servers": c.bootstrap, "group.id": "probe",
                                              "isolation.level": isolation})
            try:
                ends[isolation] = probe.get_watermark_offsets(confluent_kafka.TopicPartition(name, 0), 10)
            finally:
                probe.close()
        # the HW is right after the record (no marker appended), the LSO before it (still open)
        assert ends == {"read_uncommitted": (0, 1), "read_committed": (0, 0)}, ends
    finally:
        c.start_node(victim)
    wait_isr_full(c, name, 1, timeout=60)
    committing.join(90)
    assert outcome == [None], outcome
    cons = confluent_kafka.Consumer({
        "bootstrap.servers": c.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
    })
    try:
        cons.subscribe([name])
        got = wait_for("the committed record", lambda: _value(cons.poll(0.5)), 60)
    finally:
        cons.close()
    assert got == b"in-txn"


def _commit(p: Any) -> BaseException | None:
    try:
        p.commit_transaction(120)
    except Exception as e:  # (recorded for the test's assertion)
        return e
    return None


def _value(m: Any) -> bytes | None:
    return m.value() if m is not None and not m.error() else None


@pytest.mark.parametrize("version", [9, 11])
def test_a_transactional_produce_is_verified_with_a_coordinator_on_another_node(
    ready: ClusterProcess, version: int
) -> None:
    """KIP-890 verification across brokers for clients before transaction version 2 (librdkafka:
    Produce below v12, partitions added with AddPartitionsToTxn first): a leader that is not the
    transactional id's coordinator asks the coordinator whether the partition is in the
    transaction before the first transactional batch is appended (as a single node asks its own
    coordinator). A batch for a partition never added is refused (INVALID_TXN_STATE, v11
    TRANSACTION_ABORTABLE) and not written, so it cannot leave a hanging transaction; once
    added, the same batch is appended. (It was appended unasked.)"""
    from strom.protocol.records import build_batch

    c = ready
    tid = topic_name("verified")
    name = topic_name("verify")
    create(c, name, 6)
    wait_isr_full(c, name, 6)

    def call(node: int, api: int, body: dict[str, Any], v: int) -> Any:
        async def go(client: Any) -> Any:
            host, port = c.node_bootstrap(node).rsplit(":", 1)
            conn = await client.connection(host, int(port))
            return await conn.request(api, body, version=v)

        return c.run(node, go)

    def txn_coordinator() -> int | None:
        resp = c.request(c.running[0], 10, {"key": tid, "key_type": 1, "coordinator_keys": [tid]})
        found = resp.coordinators[0]
        return int(found.node_id) if int(found.error_code) == 0 else None

    coordinator = int(wait_for("the transaction coordinator", txn_coordinator, 60))
    init = c.request(coordinator, 22, {"transactional_id": tid, "transaction_timeout": 60_000,
                                       "producer_id": -1, "producer_epoch": -1})
    assert int(init.error_code) == 0, init
    pid, epoch = int(init.producer_id), int(init.producer_epoch)
    info = c.partition_info(c.running[0], name)
    partition, leader = next((p, i[0]) for p, i in sorted(info.items()) if i[0] != coordinator)
    batch = build_batch([(None, b"in-txn", [], int(time.time() * 1000))], producer_id=pid,
                        producer_epoch=epoch, base_sequence=0, transactional=True)
    produce_body = {"transactional_id": tid, "acks": -1, "timeout": 10_000, "topic_data": [
        {"name": name, "partition_data": [{"index": partition, "records": batch}]}]}

    refused = call(leader, 0, produce_body, version).responses[0].partition_responses[0]
    # TRANSACTION_ABORTABLE (120) from v11, INVALID_TXN_STATE (48) before
    assert int(refused.error_code) == (120 if version >= 11 else 48), refused
    ends = c.request(leader, 2, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": name, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                       "timestamp": -1}]}]}).topics[0].partitions[0]
    assert int(ends.offset) == 0  # nothing written

    added = call(coordinator, 24, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                   "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [
                                       {"name": name, "partitions": [partition]}]}, 3)
    add_result = added.results_by_topic_v3_and_below[0].results_by_partition[0]
    assert int(add_result.partition_error_code) == 0, added
    accepted = call(leader, 0, produce_body, version).responses[0].partition_responses[0]
    assert int(accepted.error_code) == 0 and int(accepted.base_offset) == 0, accepted
    ended = call(coordinator, 26, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                   "committed": False}, 3)
    assert int(ended.error_code) == 0, ended


def test_delete_records_answers_once_every_live_replica_has_deleted(ready: ClusterProcess) -> None:
    """DeleteRecords is answered once the partition's low watermark (the lowest log start offset
    of its live replicas) reached the new start, as Kafka's DelayedDeleteRecords: kill -9 of the
    leader right after the answer, and the new leader's log still starts there (the deleted
    records do not come back). A follower that cannot follow (paused, still registered) has the
    request time out with REQUEST_TIMED_OUT and the low watermark reached. (The leader answered
    at once whatever its followers held: "deleted" while a replica that could become leader
    still had the records; the paused-follower half fails on that code.)"""
    c = ready
    name = topic_name("deleted")
    create(c, name, 1, **{"min.insync.replicas": "2"})
    wait_isr_full(c, name, 1)
    acked, errors = produce(c, name, [b"v%d" % i for i in range(100)])
    assert not errors and len(acked) == 100
    leader = c.partition_info(c.running[0], name)[0][0]

    def delete(offset: int, timeout_ms: int = 30_000) -> Any:
        return c.request(leader, 21, {"topics": [{"name": name, "partitions": [
            {"partition_index": 0, "offset": offset}]}], "timeout": timeout_ms},
            timeout=timeout_ms / 1000 + 10).topics[0].partitions[0]

    time.sleep(1.0)  # the followers idle in their long polls
    answer = delete(60)
    assert int(answer.error_code) == 0 and int(answer.low_watermark) == 60, answer
    c.kill(leader)
    try:
        survivor = next(n for n in NODES if n != leader)
        new = wait_for("a new leader", lambda: (
            lambda info: info[0] if info[0] not in (-1, leader) else None
        )(c.partition_info(survivor, name)[0]), 30)
        earliest = c.request(new, 2, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                           "timestamp": -2}]}]}).topics[0].partitions[0]
        assert int(earliest.error_code) == 0 and int(earliest.offset) == 60, earliest
    finally:
        c.start_node(leader)
    wait_isr_full(c, name, 1, timeout=60)

    leader = c.partition_info(c.running[0], name)[0][0]
    follower = next(n for n in NODES if n != leader)
    c.pause(follower)
    try:
        answer = delete(80, timeout_ms=1500)
        assert int(answer.error_code) == 7 and int(answer.low_watermark) == 60, answer  # REQUEST_TIMED_OUT
    finally:
        c.resume(follower)
    assert int(delete(80).low_watermark) == 80  # followed once it runs again
