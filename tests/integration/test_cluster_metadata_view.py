"""Three real ``strom serve`` nodes (``strom dev-cluster``'s configs): every broker's view of the
cluster comes from the metadata image (ImageMetadataCache). Each node lists the three brokers at
their addresses and the same leaders; a partition's log exists only on its replica; a produce to
a node that does not lead the partition answers NOT_LEADER_OR_FOLLOWER, the client following the
leaders reaches every partition; FindCoordinator at any node names the leader of the group's
``__consumer_offsets`` partition, a commit there works and one at another node answers
NOT_COORDINATOR; a real client's transaction over partitions of the three brokers is committed
and aborted with every marker written (WriteTxnMarkers from its coordinator); a real client's
consumer group (librdkafka, classic and KIP-848) consumes what was produced across the three."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.cli.dev_cluster import HOST, DevCluster
from strom.client import Client, groups
from strom.client.messages import ApiKey
from strom.coordinator.records import partition_for
from strom.protocol import records as rec
from strom.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration

OFFSETS_PARTITIONS = 6


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(
        tmp_path / "dc",
        3,
        overrides=[
            f"offsets.topic.num.partitions={OFFSETS_PARTITIONS}",
            "transaction.state.log.num.partitions=1",
            "share.coordinator.state.topic.num.partitions=1",
        ],
    )
    c.plan()
    c.format()
    c.start()
    try:
        deadline = time.monotonic() + 90
        for s in c.specs:  # registered, then serving clients (their listeners come up last)
            while not (f"broker {s.node_id} registered with epoch" in s.log_path.read_text()
                       and _listening(s.port)):
                assert time.monotonic() < deadline, f"node {s.node_id} is not serving"
                time.sleep(0.2)
        yield c
    finally:
        c.stop()


def _listening(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=1).close()
    except OSError:
        return False
    return True


async def _produce_error(client: Client, port: int, topic: str, partition: int) -> int:
    conn = await client.connection(HOST, port)
    resp = await conn.request(ApiKey.PRODUCE, {
        "transactional_id": None, "acks": 1, "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [
            {"index": partition, "records": rec.build_batch([(None, b"x", [], -1)])}]}],
    }, max_version=12)
    return int(resp.responses[0].partition_responses[0].error_code)


async def _commit_error(client: Client, port: int, group: str) -> int:
    conn = await client.connection(HOST, port)
    resp = await conn.request(groups.OFFSET_COMMIT, {
        "group_id": group, "generation_id_or_member_epoch": -1, "generation_id": -1, "member_id": "",
        "group_instance_id": None, "retention_time_ms": -1,
        "topics": [{"name": "spread", "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
             "committed_metadata": "", "commit_timestamp": -1}]}],
    })
    return int(resp.topics[0].partitions[0].error_code)


def _committed_values(confluent_kafka: Any, boot: str) -> list[bytes]:  # of topic "txn"
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": boot, "group.id": "read-committed", "auto.offset.reset": "earliest",
        "isolation.level": "read_committed", "enable.auto.commit": False,
    })
    try:
        consumer.subscribe(["txn"])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        idle = 0
        while time.monotonic() < deadline and idle < 5:
            m = consumer.poll(1.0)
            if m is None:
                idle += 1 if values else 0
                continue
            if not m.error():
                values.append(m.value())
        return values
    finally:
        consumer.close()


async def _check_stable(c: DevCluster) -> None:
    client = Client(",".join(f"{HOST}:{s.port}" for s in c.specs))
    try:
        md = await client.metadata(["txn"])
        for p, m in md.topics["txn"].partitions.items():
            b = md.brokers[m.leader]
            conn = await client.connection(b.host, b.port)
            offsets = []
            for isolation in (0, 1):  # the high watermark, the last stable offset
                resp = await conn.request(ApiKey.LIST_OFFSETS, {
                    "replica_id": -1, "isolation_level": isolation, "timeout": 5000,
                    "topics": [{"name": "txn", "partitions": [
                        {"partition_index": p, "timestamp": -1, "current_leader_epoch": -1}]}],
                })
                offsets.append(int(resp.topics[0].partitions[0].offset))
            assert offsets[0] == offsets[1] > 0, (p, offsets)
    finally:
        await client.close()


async def _check(c: DevCluster) -> dict[int, int]:
    specs = {s.node_id: s for s in c.specs}
    boot = ",".join(f"{HOST}:{s.port}" for s in c.specs)
    client = Client(boot)
    try:
        assert await client.create_topics({"spread": (6, 1), "txn": (6, 1)}) == {"spread": None, "txn": None}
        views: dict[int, Any] = {}
        for node, s in specs.items():
            one = Client(f"{HOST}:{s.port}")
            try:
                deadline = time.monotonic() + 30
                while True:  # every node applies the creation from its metadata log
                    md = await one.metadata(["spread", "__consumer_offsets"])
                    if md.topics["spread"].error_code == 0:
                        break
                    assert time.monotonic() < deadline, md.topics["spread"]
                    await asyncio.sleep(0.2)
                views[node] = md
            finally:
                await one.close()
        for node, md in views.items():
            assert {b: (x.host, x.port) for b, x in md.brokers.items()} == {
                n: (HOST, s.port) for n, s in specs.items()
            }, node
            assert md.controller_id in specs
        leaders = {p: m.leader for p, m in views[1].topics["spread"].partitions.items()}
        assert set(leaders.values()) == set(specs)  # spread over the three
        for md in views.values():
            assert {p: m.leader for p, m in md.topics["spread"].partitions.items()} == leaders
            assert all(m.replicas == (m.leader,) for m in md.topics["spread"].partitions.values())
        # a partition's log is only on its replica
        for p, leader in leaders.items():
            for node, s in specs.items():
                assert (s.dir / "data" / f"spread-{p}").is_dir() == (node == leader), (p, node)
        # a node that does not lead the partition: NOT_LEADER_OR_FOLLOWER; its leader: appended
        for p, leader in leaders.items():
            for node, s in specs.items():
                want = ErrorCode.NONE if node == leader else ErrorCode.NOT_LEADER_OR_FOLLOWER
                assert await _produce_error(client, s.port, "spread", p) == want, (p, node)
        # the coordinator of a group: the leader of its __consumer_offsets partition, at any node
        offsets_leaders = {p: m.leader for p, m in views[2].topics["__consumer_offsets"].partitions.items()}
        coordinators: dict[int, int] = {}
        for i in range(12):
            group = f"group-{i}"
            want = offsets_leaders[partition_for(group, OFFSETS_PARTITIONS)]
            for s in specs.values():
                at = Client(f"{HOST}:{s.port}")
                try:
                    assert (await groups.find_coordinator(at, group)).node_id == want
                finally:
                    await at.close()
            assert await _commit_error(client, specs[want].port, group) == ErrorCode.NONE
            other = next(n for n in specs if n != want)
            assert await _commit_error(client, specs[other].port, group) == ErrorCode.NOT_COORDINATOR
            got = await groups.fetch_offsets(client, group)
            assert got[("spread", 0)].offset == 1
            coordinators[i] = want
        return coordinators
    finally:
        await client.close()


def test_three_nodes_answer_from_the_image(cluster: DevCluster) -> None:
    coordinators = asyncio.run(_check(cluster))
    assert len(set(coordinators.values())) > 1  # groups are coordinated by several nodes

    confluent_kafka = pytest.importorskip("confluent_kafka")
    boot = ",".join(f"{HOST}:{s.port}" for s in cluster.specs)
    producer = confluent_kafka.Producer({"bootstrap.servers": boot, "enable.idempotence": True})
    for i in range(60):
        producer.produce("spread", key=f"k{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0
    for protocol in ("classic", "consumer"):
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": boot, "group.id": f"real-{protocol}", "auto.offset.reset": "earliest",
            "group.protocol": protocol,
        })
        try:
            consumer.subscribe(["spread"])
            values = set()
            deadline = time.monotonic() + 60
            while len(values) < 60 and time.monotonic() < deadline:
                m = consumer.poll(1.0)
                if m is not None and not m.error() and m.key() is not None:
                    values.add(m.value())
            assert values == {f"v{i}".encode() for i in range(60)}, (protocol, len(values))
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()

    # a transaction over partitions led by the three brokers: its coordinator writes the
    # markers of the others' partitions through them (WriteTxnMarkers). (Its own topic: each
    # broker still hands out producer ids from its own local blocks, so the idempotent
    # producer above may have the same id; the controller's AllocateProducerIds is not used yet)
    txn = confluent_kafka.Producer({"bootstrap.servers": boot, "transactional.id": "spread-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(12):
        txn.produce("txn", key=f"t{i}".encode(), value=b"committed", partition=i % 6)
    txn.commit_transaction(30)
    txn.begin_transaction()
    for p in range(6):
        txn.produce("txn", key=b"a", value=b"aborted", partition=p)
    txn.flush(30)
    txn.abort_transaction(30)
    committed = _committed_values(confluent_kafka, boot)
    assert committed.count(b"committed") == 12 and b"aborted" not in committed
    # and the last stable offset reached the high watermark on every partition (every marker written)
    asyncio.run(_check_stable(cluster))
