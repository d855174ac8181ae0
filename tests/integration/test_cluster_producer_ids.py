"""Producer ids on a real three-node cluster (:class:`strom.testing.cluster_process.ClusterProcess`):
every broker takes its producer-id blocks from the controller (KIP-730), so producers whose
InitProducerId was answered by different brokers never share a producer id.

The bug this guards against: each broker handed out ids from its own local file, so node 1 and
node 2 both gave out producer id 0, and two transactional producers coordinated by different
brokers wrote to one partition as the same producer (batches dropped as duplicates,
OUT_OF_ORDER_SEQUENCE_NUMBER).

Checked: InitProducerId without a transactional id sent to each node directly answers distinct
ids; confluent-kafka transactional producers whose transactional ids are coordinated by
different nodes (``__transaction_state`` partitions led by different brokers) get distinct
producer ids (DescribeTransactions), write interleaved transactions to the same partitions, and a
read_committed consumer sees every committed record exactly once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strom.client.groups import find_coordinator
from strom.client.transactions import describe_transaction
from strom.testing.cluster_process import ClusterProcess

pytestmark = pytest.mark.integration

INIT_PRODUCER_ID = 22
TXN_PARTITIONS = 12


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    c = ClusterProcess(
        tmp_path_factory.mktemp("pids-cluster") / "dc",
        3,
        overrides=[f"transaction.state.log.num.partitions={TXN_PARTITIONS}"],
    )
    c.start()
    try:
        c.wait_ready(90)
        yield c
    finally:
        c.close()


def _init_producer_id(cluster: ClusterProcess, node: int) -> int:
    deadline = time.monotonic() + 30
    while True:
        resp = cluster.request(
            node,
            INIT_PRODUCER_ID,
            {
                "transactional_id": None,
                "transaction_timeout": 60_000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        if int(resp.error_code) == 0:
            return int(resp.producer_id)
        # COORDINATOR_LOAD_IN_PROGRESS while the node has no block yet: retriable
        assert int(resp.error_code) == 14 and time.monotonic() < deadline, resp
        time.sleep(0.2)


def test_idempotent_init_producer_id_on_each_node_gives_distinct_ids(cluster: ClusterProcess) -> None:
    ids = {node: [_init_producer_id(cluster, node) for _ in range(3)] for node in cluster.node_ids}
    flat = [pid for pids in ids.values() for pid in pids]
    assert len(set(flat)) == len(flat), ids
    for pids in ids.values():
        assert pids == sorted(pids)  # each node hands out its block in order


def _coordinated_by_each_node(cluster: ClusterProcess, prefix: str) -> dict[int, str]:
    """One transactional id per node, chosen so that node coordinates it."""
    chosen: dict[int, str] = {}
    for i in range(200):
        tid = f"{prefix}-{i}"
        coordinator = cluster.run(cluster.node_ids[0], lambda c, tid=tid: find_coordinator(c, tid, 1))
        chosen.setdefault(int(coordinator.node_id), tid)
        if len(chosen) == len(cluster.node_ids):
            break
    return chosen


def test_transactional_producers_on_different_coordinators_lose_nothing(cluster: ClusterProcess) -> None:
    topic = f"pids-{uuid.uuid4().hex[:8]}"
    assert cluster.create_topics(1, {topic: (3, 3)}) == {topic: (0, None)}
    cluster.wait_topic(topic)
    tids = _coordinated_by_each_node(cluster, f"pids-tx-{uuid.uuid4().hex[:6]}")
    assert len(tids) >= 2, f"the {TXN_PARTITIONS} __transaction_state partitions are led by one node: {tids}"

    producers = {
        node: Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "linger.ms": 5})
        for node, tid in tids.items()
    }
    for p in producers.values():
        p.init_transactions(30)
    expected: set[bytes] = set()
    for round_ in range(4):  # interleaved transactions of every producer on the same partitions
        for p in producers.values():
            p.begin_transaction()
        for node, p in producers.items():
            for i in range(60):
                value = f"{tids[node]}-{round_}-{i}".encode()
                p.produce(topic, value=value, partition=i % 3)
                expected.add(value)
        for p in producers.values():
            p.commit_transaction(30)
    aborted = next(iter(producers.values()))
    aborted.begin_transaction()
    aborted.produce(topic, value=b"aborted", partition=0)
    aborted.abort_transaction(30)

    pids = {
        node: cluster.run(node, lambda c, tid=tid: describe_transaction(c, tid)).producer_id
        for node, tid in tids.items()
    }
    assert len(set(pids.values())) == len(pids), pids

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"g-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        deadline = time.monotonic() + 60
        while len(got) < len(expected) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append(bytes(msg.value()))
        end = time.monotonic() + 2  # nothing more arrives (no aborted record, no duplicate)
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append(bytes(msg.value()))
    finally:
        consumer.close()
        for p in producers.values():
            p.flush(10)
    assert len(got) == len(set(got)), "a record arrived twice"
    assert set(got) == expected, (len(expected - set(got)), sorted(set(got) - expected)[:5])
