"""Share groups (KIP-932) with confluent-kafka's ShareConsumer (librdkafka's share consumer)
against strom: group configs through the AdminClient's GROUP resource, explicit ACCEPT, RELEASE
(redelivered with delivery count 2), REJECT (archived, never redelivered), implicit
acknowledgement."""

from __future__ import annotations

import time
import uuid

import pytest

from strom.testing.broker_process import BrokerProcess

ck = pytest.importorskip("confluent_kafka")
admin_mod = pytest.importorskip("confluent_kafka.admin")
if not hasattr(ck, "ShareConsumer"):
    pytest.skip("this confluent-kafka has no ShareConsumer", allow_module_level=True)

pytestmark = pytest.mark.integration


def _setup(b: BrokerProcess, n: int, partitions: int = 1) -> tuple[str, str]:
    topic, group = f"sc-{uuid.uuid4().hex[:8]}", f"scg-{uuid.uuid4().hex[:8]}"
    a = admin_mod.AdminClient({"bootstrap.servers": b.bootstrap})
    a.create_topics([admin_mod.NewTopic(topic, partitions, 1)])[topic].result(30)
    res = admin_mod.ConfigResource(
        admin_mod.ResourceType.GROUP,
        group,
        incremental_configs=[
            admin_mod.ConfigEntry(
                "share.auto.offset.reset", "earliest", incremental_operation=admin_mod.AlterConfigOpType.SET
            )
        ],
    )
    a.incremental_alter_configs([res])[res].result(30)
    described = a.describe_configs([admin_mod.ConfigResource(admin_mod.ResourceType.GROUP, group)])
    entries = next(iter(described.values())).result(30)
    assert entries["share.auto.offset.reset"].value == "earliest"
    p = ck.Producer({"bootstrap.servers": b.bootstrap})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), key=str(i).encode())
    p.flush(30)
    return topic, group


def _consume(b: BrokerProcess, topic: str, group: str, decide, want: int, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    """Poll, acknowledge each message with ``decide(msg)`` (None: implicit mode), until ``want``
    final decisions or the timeout. Returns [(value, delivery count, ack)]."""
    explicit = decide is not None
    c = ck.ShareConsumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit" if explicit else "implicit",
        }
    )
    c.subscribe([topic])
    seen = []
    final = 0
    end = time.monotonic() + timeout
    try:
        while final < want and time.monotonic() < end:
            msgs = [m for m in c.poll(1.0) if m.error() is None]
            for m in msgs:
                ack = decide(m) if explicit else None
                if explicit:
                    c.acknowledge(m, ack)
                if ack != ck.AcknowledgeType.RELEASE:
                    final += 1
                seen.append((m.value().decode(), m.delivery_count(), ack))
            if msgs and explicit:
                c.commit_sync()
        if not explicit:
            # librdkafka's close() sends its final ShareAcknowledge without the last poll's
            # implicit acknowledgements (the broker then releases those records): commit first
            c.commit_sync()
    finally:
        c.close()
    return seen


def test_confluent_share_consumer(broker: BrokerProcess) -> None:
    A = ck.AcknowledgeType
    topic, group = _setup(broker, 10)
    seen = _consume(broker, topic, group, lambda m: A.RELEASE if m.delivery_count() == 1 else A.ACCEPT, 10)
    for i in range(10):
        mine = [(dc, ack) for v, dc, ack in seen if v == f"v{i}"]
        assert mine == [(1, A.RELEASE), (2, A.ACCEPT)], mine
    topic2, group2 = _setup(broker, 6)
    seen = _consume(broker, topic2, group2, lambda m: A.REJECT if m.value() == b"v3" else A.ACCEPT, 6)
    assert sorted(v for v, _dc, _a in seen) == [f"v{i}" for i in range(6)]
    assert _consume(broker, topic2, group2, lambda m: A.ACCEPT, 1, timeout=4) == []
    topic3, group3 = _setup(broker, 8, partitions=2)
    seen = _consume(broker, topic3, group3, None, 8)
    assert sorted(v for v, _dc, _a in seen) == sorted(f"v{i}" for i in range(8))
    # implicit acknowledgements were committed: nothing comes back
    assert _consume(broker, topic3, group3, None, 1, timeout=4) == []
