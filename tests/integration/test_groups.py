"""Consumer groups against a real strom broker process with confluent-kafka (librdkafka)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from strom.testing.broker_process import BrokerProcess

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.integration


def make_topic(bootstrap: str, partitions: int = 6, records_per_partition: int = 10) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(10)
    p = Producer({"bootstrap.servers": bootstrap})
    for part in range(partitions):
        for i in range(records_per_partition):
            p.produce(name, key=f"{part}-{i}".encode(), value=b"v", partition=part)
    p.flush(10)
    return name


def consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    }
    conf.update(extra)
    return Consumer(conf)


def poll_until(consumers: list[Consumer], cond: Callable[[], bool], timeout: float = 30.0) -> list[object]:
    msgs: list[object] = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        for c in consumers:
            m = c.poll(0.05)
            if m is not None and not m.error():
                msgs.append(m)
        if cond():
            return msgs
    raise AssertionError("condition not reached in time")


def owned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def exclusive_cover(consumers: list[Consumer], n: int) -> bool:
    sets = [owned(c) for c in consumers]
    return all(sets) and sum(len(s) for s in sets) == n and set().union(*sets) == set(range(n))


def test_three_consumers_share_six_partitions_and_rebalance_on_leave(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = make_topic(bs)
    group = f"g-{uuid.uuid4().hex[:6]}"
    # a 30 s session: without the LeaveGroup the partitions would wait that long for a new owner
    cs = [consumer(bs, group, **{"session.timeout.ms": 30000}) for _ in range(3)]
    for c in cs:
        c.subscribe([topic])
    poll_until(cs, lambda: exclusive_cover(cs, 6))
    assert sorted(len(owned(c)) for c in cs) == [2, 2, 2]
    cs[2].close()
    rest = cs[:2]
    t0 = time.time()
    poll_until(rest, lambda: exclusive_cover(rest, 6), timeout=25)
    assert time.time() - t0 < 15.0  # a LeaveGroup rebalances at once, well within the session timeout
    for c in rest:
        c.close()


def test_cooperative_sticky_moves_only_what_must_move(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = make_topic(bs)
    group = f"g-{uuid.uuid4().hex[:6]}"
    conf = {"partition.assignment.strategy": "cooperative-sticky"}
    a, b = consumer(bs, group, **conf), consumer(bs, group, **conf)
    for c in (a, b):
        c.subscribe([topic])
    poll_until([a, b], lambda: exclusive_cover([a, b], 6))
    before = {id(a): owned(a), id(b): owned(b)}
    c3 = consumer(bs, group, **conf)
    c3.subscribe([topic])
    cs = [a, b, c3]
    poll_until(cs, lambda: exclusive_cover(cs, 6) and sorted(len(owned(c)) for c in cs) == [2, 2, 2])
    # a and b kept a subset of what they had: only 2 partitions moved, to the new member
    assert owned(a) <= before[id(a)] and owned(b) <= before[id(b)]
    for c in cs:
        c.close()


@pytest.mark.parametrize("how", ["sigterm", "kill-9"])
def test_commit_restart_consumers_and_broker_resume_at_committed(tmp_path: object, how: str) -> None:
    from pathlib import Path

    b = BrokerProcess(Path(str(tmp_path)) / "data", overrides=["group.initial.rebalance.delay.ms=0"])
    b.start()
    try:
        bs = b.bootstrap
        topic = make_topic(bs, partitions=3, records_per_partition=10)
        group = "resume"
        c = consumer(bs, group)
        c.subscribe([topic])
        seen: list[object] = []
        seen += poll_until([c], lambda: len(owned(c)) == 3)
        deadline = time.time() + 20
        while len(seen) < 30 and time.time() < deadline:
            m = c.poll(0.1)
            if m is not None and not m.error():
                seen.append(m)
        assert len(seen) == 30
        # commit 4 records of each partition
        c.commit(offsets=[TopicPartition(topic, p, 4) for p in range(3)], asynchronous=False)
        c.close()
        if how == "kill-9":
            b.kill()
        else:
            assert b.stop() in (0, -15)
        b.start()
        c2 = consumer(bs, group)
        committed = c2.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
        assert [tp.offset for tp in committed] == [4, 4, 4]
        c2.subscribe([topic])
        got: list[object] = []
        deadline = time.time() + 20
        while len(got) < 18 and time.time() < deadline:
            m = c2.poll(0.1)
            if m is not None and not m.error():
                got.append(m)
        offsets = sorted((m.partition(), m.offset()) for m in got)  # type: ignore[attr-defined]
        assert offsets == [(p, o) for p in range(3) for o in range(4, 10)]
        c2.close()
    finally:
        b.stop()


def test_static_member_restart_gets_partitions_back_without_rebalance(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    topic = make_topic(bs)
    group = f"g-{uuid.uuid4().hex[:6]}"
    a = consumer(bs, group, **{"group.instance.id": "inst-a", "session.timeout.ms": 10000})
    b = consumer(bs, group, **{"group.instance.id": "inst-b", "session.timeout.ms": 10000})
    a_assigns: list[int] = []
    a.subscribe([topic], on_assign=lambda _c, parts: a_assigns.append(len(parts)))
    b.subscribe([topic])
    poll_until([a, b], lambda: exclusive_cover([a, b], 6))
    a_rebalances = len(a_assigns)
    b_parts = owned(b)
    a_parts = owned(a)
    b.close()  # a static member's close sends no LeaveGroup: no rebalance
    b2 = consumer(bs, group, **{"group.instance.id": "inst-b", "session.timeout.ms": 10000})
    b2.subscribe([topic])
    poll_until([a, b2], lambda: owned(b2) == b_parts, timeout=20)
    t_end = time.time() + 3
    while time.time() < t_end:
        a.poll(0.05)
        b2.poll(0.05)
    assert owned(a) == a_parts
    assert len(a_assigns) == a_rebalances  # a saw no rebalance
    for c in (a, b2):
        c.close()
