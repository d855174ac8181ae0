"""Fetch from the closest replica (KIP-392) and unclean leader election, on three real nodes.

One cluster (:class:`ClusterProcess`): node ``i`` has ``broker.rack=r<i>``; node 1 has
``replica.selector.class`` set to Kafka's ``RackAwareReplicaSelector`` class name, node 2 to
strom's name for it (``rack-aware``), node 3 none (Kafka's default: consumers always read from
the leader). The selector is the leader's: a partition led by node 1 or 2 sends a consumer in
another replica's rack to that replica, one led by node 3 never does.

Evidence is taken on both sides: librdkafka's statistics name the broker each partition is
fetched from, and the brokers' logs say which partitions they served to consumers as followers
(once per leader epoch) and which replica a leader named for which rack. A Java KafkaConsumer
with ``client.rack`` is checked too.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.client.messages import ApiKey
from strom.protocol.records import build_batch
from strom.testing.cluster_process import ClusterProcess
from strom.testing.polling import wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.integration

NODES = (1, 2, 3)
COMPAT_HOME = Path(os.environ.get("STROM_COMPAT_HOME", Path.home() / ".cache" / "strom-compat"))
JAVA_LIBS = COMPAT_HOME / "java" / "libs"
KAFKA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
SELECTOR_OF = {1: KAFKA_SELECTOR, 2: "rack-aware", 3: None}
OFFSET_FOR_LEADER_EPOCH = 23
FETCH_WAIT_MS = 2000  # the followers' long poll: a HW learnt only at its end would show
OVERRIDES = (
    "broker.heartbeat.interval.ms=300",
    "broker.session.timeout.ms=2500",
    "replica.lag.time.max.ms=2500",
    f"replica.fetch.wait.max.ms={FETCH_WAIT_MS}",
    "controller.quorum.election.timeout.ms=500",
    "controller.quorum.fetch.timeout.ms=1000",
    "leader.imbalance.check.interval.seconds=1",  # the controller's unclean-election check
    "auto.leader.rebalance.enable=false",
)


def node_overrides() -> dict[int, list[str]]:
    out = {}
    for n in NODES:
        lines = [f"broker.rack=r{n}"]
        if SELECTOR_OF[n]:
            lines.append(f"replica.selector.class={SELECTOR_OF[n]}")
        out[n] = lines
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    c = ClusterProcess(
        tmp_path_factory.mktemp("rack") / "dc", 3, overrides=OVERRIDES, node_overrides=node_overrides()
    )
    c.start()
    try:
        c.wait_ready(90)
        yield c
    finally:
        c.close()






def create_assigned(
    c: ClusterProcess, node: int, name: str, assignment: list[list[int]], **configs: str
) -> None:
    resp = c.request(node, ApiKey.CREATE_TOPICS, {
        "topics": [{
            "name": name, "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": i, "broker_ids": b} for i, b in enumerate(assignment)],
            "configs": [{"name": k, "value": v} for k, v in configs.items()],
        }],
        "timeout": 30_000, "validate_only": False,
    })
    assert int(resp.topics[0].error_code) == 0, resp
    c.wait_topic(name, timeout=60)


def produce(c: ClusterProcess, name: str, values: list[bytes], *, partition: int | None = None,
            timeout: float = 30.0) -> tuple[list[tuple[int, int, bytes]], list[str]]:
    p = confluent_kafka.Producer({
        "bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
        "message.timeout.ms": int(timeout * 1000), "topic.metadata.refresh.interval.ms": 500,
    })
    acked: list[tuple[int, int, bytes]] = []
    errors: list[str] = []

    def cb(err, msg):  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    for v in values:
        if partition is None:
            p.produce(name, key=v, value=v, on_delivery=cb)
        else:
            p.produce(name, key=v, value=v, partition=partition, on_delivery=cb)
        p.poll(0)
    assert p.flush(timeout + 10) == 0
    return acked, errors


class RackConsumer:
    """A confluent-kafka consumer with ``client.rack``, assigned partitions from the start, that
    records which broker librdkafka fetches each partition from (its statistics)."""

    def __init__(self, c: ClusterProcess, name: str, partitions: list[int], rack: str) -> None:
        self.fetched_from: dict[int, set[int]] = {p: set() for p in partitions}
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": c.bootstrap, "group.id": f"rack-{uuid.uuid4().hex[:6]}",
            "client.rack": rack, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "statistics.interval.ms": 200, "stats_cb": self._stats,
            "topic.metadata.refresh.interval.ms": 1000, "fetch.wait.max.ms": 100,
        })
        self.name = name
        self.consumer.assign([confluent_kafka.TopicPartition(name, p, 0) for p in partitions])
        self.records: list[tuple[int, int, bytes]] = []
        self.errors: list[Any] = []

    def _stats(self, text: str) -> None:
        parts = json.loads(text).get("topics", {}).get(self.name, {}).get("partitions", {})
        for p, st in parts.items():
            broker = int(st.get("broker", -1))
            if int(p) in self.fetched_from and broker >= 0 and st.get("fetch_state") == "active":
                self.fetched_from[int(p)].add(broker)

    def poll_until(self, count: int, timeout: float = 30.0) -> list[tuple[int, int, bytes]]:
        deadline = time.monotonic() + timeout
        while len(self.records) < count and time.monotonic() < deadline:
            m = self.consumer.poll(0.2)
            if m is None:
                continue
            if m.error():
                self.errors.append(m.error())
                continue
            self.records.append((m.partition(), m.offset(), m.value()))
        return self.records

    def close(self) -> None:
        self.consumer.close()


def served_as_follower(c: ClusterProcess, node: int, name: str, partition: int) -> bool:
    return f"{name}-{partition}: serving consumer fetches as a follower" in c.log(node, tail=10**7)


def test_brokers_register_their_racks(cluster: ClusterProcess) -> None:
    for n in NODES:
        md = cluster.metadata(n)
        assert {b.node_id: b.rack for b in md.brokers.values()} == {1: "r1", 2: "r2", 3: "r3"}


def test_consumers_read_from_a_replica_in_their_rack(cluster: ClusterProcess) -> None:
    c = cluster
    name = f"rack-{uuid.uuid4().hex[:8]}"
    # one partition led by each node, every node a replica of each
    create_assigned(c, 1, name, [[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    def full_isrs():  # type: ignore[no-untyped-def]
        info = c.partition_info(1, name)
        return info if all(len(i[2]) == 3 for i in info.values()) else None

    leaders = {p: i[0] for p, i in wait_for("full ISRs", full_isrs).items()}
    assert leaders == {0: 1, 1: 2, 2: 3}
    values = [f"v{i:05d}".encode() for i in range(600)]
    acked, errors = produce(c, name, values)
    assert errors == [] and len(acked) == len(values)

    consumers = {n: RackConsumer(c, name, [0, 1, 2], f"r{n}") for n in NODES}
    try:
        for cons in consumers.values():
            got = cons.poll_until(len(values))
            # every record exactly once, in order per partition
            assert sorted(v for _p, _o, v in got) == sorted(values)
            for p in range(3):
                offsets = [o for q, o, _v in got if q == p]
                assert offsets == sorted(set(offsets)) and offsets[0] == 0
        # records produced while the consumers sit on followers reach them: the followers learn
        # the HW at once, not at the end of their long poll (replica.fetch.wait.max.ms)
        latencies = []
        producer = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0})
        for i in range(8):
            v = f"late{i}".encode()
            t0 = time.monotonic()
            producer.produce(name, value=v, partition=0)
            assert producer.flush(10) == 0
            for cons in consumers.values():
                n0 = len(cons.records)
                cons.poll_until(n0 + 1, timeout=10)
                assert cons.records[-1][2] == v
            latencies.append(time.monotonic() - t0)
        for cons in consumers.values():
            cons.poll_until(len(values) + 100, timeout=1.0)
            assert sorted(v for _p, _o, v in cons.records) == sorted(
                values + [f"late{i}".encode() for i in range(8)]
            )
        median_ms = statistics.median(latencies) * 1000
        print(f"produce(acks=all) -> consumed by 3 rack consumers: median {median_ms:.0f} ms")
        assert median_ms < FETCH_WAIT_MS / 2, latencies

        # librdkafka fetched each partition from the replica the leader's selector named
        for n, cons in consumers.items():
            for p, leader in leaders.items():
                want = n if SELECTOR_OF[leader] else leader
                assert cons.fetched_from[p], (n, p)
                assert want in cons.fetched_from[p], (n, p, cons.fetched_from)
                if not SELECTOR_OF[leader]:
                    assert cons.fetched_from[p] == {leader}, (n, p, cons.fetched_from)
        # the brokers' side: followers served consumers only where the leader has a selector
        for p, leader in leaders.items():
            for n in NODES:
                if n == leader:
                    continue
                assert served_as_follower(c, n, name, p) == bool(SELECTOR_OF[leader]), (p, n)
            if SELECTOR_OF[leader]:
                log = c.log(leader, tail=10**7)
                for n in NODES:
                    if n != leader:
                        assert f"{name}-{p}: consumers in rack r{n} read from replica {n}" in log
    finally:
        for cons in consumers.values():
            cons.close()


def fetch(c: ClusterProcess, node: int, name: str, offset: int, *, version: int, rack: str = "",
          isolation: int = 0) -> Any:
    resp = c.run(node, lambda client: _fetch(client, c, node, name, offset, version, rack, isolation))
    return resp.responses[0].partitions[0]


async def _fetch(client: Any, c: ClusterProcess, node: int, name: str, offset: int, version: int,
                 rack: str, isolation: int) -> Any:
    host, port = c.node_bootstrap(node).rsplit(":", 1)
    conn = await client.connection(host, int(port))
    return await conn.request(ApiKey.FETCH, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": name, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20,
        }]}],
        "forgotten_topics_data": [], "rack_id": rack,
    }, version=version)


def test_follower_answers_consumer_fetches(cluster: ClusterProcess) -> None:
    c = cluster
    name = f"ffetch-{uuid.uuid4().hex[:8]}"
    create_assigned(c, 1, name, [[1, 2, 3]])
    wait_for("full ISR", lambda: len(c.partition_info(1, name)[0][2]) == 3)
    acked, errors = produce(c, name, [f"x{i}".encode() for i in range(50)])
    assert errors == [] and len(acked) == 50
    # the follower knows the HW promptly; it answers consumers up to it
    p = wait_for("the follower's HW", lambda: (
        (r := fetch(c, 2, name, 0, version=12)).high_watermark == 50 and r))
    assert p.error_code == 0 and p.records
    # the leader names the follower of the client's rack and sends no records
    p = fetch(c, 1, name, 0, version=12, rack="r2")
    assert (p.error_code, p.preferred_read_replica, p.high_watermark) == (0, 2, 50) and not p.records
    # ... not for a client of its own rack, nor one without a rack, nor one of no replica's rack
    for rack in ("r1", "", "elsewhere"):
        p = fetch(c, 1, name, 0, version=12, rack=rack)
        assert p.preferred_read_replica == -1 and p.records, rack
    # at the follower's log end: nothing; past it: OFFSET_OUT_OF_RANGE (the consumer goes back
    # to the leader); before v11 a follower is not the leader: NOT_LEADER_OR_FOLLOWER
    assert fetch(c, 3, name, 50, version=12).error_code == 0
    assert fetch(c, 3, name, 51, version=12).error_code == 1  # OFFSET_OUT_OF_RANGE
    assert fetch(c, 3, name, 0, version=10).error_code == 6  # NOT_LEADER_OR_FOLLOWER
    # a follower does not name another replica
    assert fetch(c, 2, name, 0, version=12, rack="r3").preferred_read_replica == -1
    # read_committed on a follower stops at the LSO: an open transaction's records are held back
    tx = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap, "transactional.id": f"tx-{name}"})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(5):
        tx.produce(name, value=f"t{i}".encode(), partition=0)
    assert tx.flush(30) == 0
    try:
        p = wait_for("the follower's HW past the open transaction", lambda: (
            (r := fetch(c, 3, name, 0, version=12)).high_watermark == 55 and r))
        committed = fetch(c, 3, name, 0, version=12, isolation=1)
        assert committed.error_code == 0 and committed.last_stable_offset == 50
        assert 0 < len(bytes(committed.records)) < len(bytes(p.records))
        assert fetch(c, 3, name, 50, version=12, isolation=1).records in (None, b"")
    finally:
        tx.abort_transaction(30)


def offset_for_leader_epoch(c: ClusterProcess, node: int, name: str, epoch: int) -> tuple[int, int, int]:
    resp = c.request(node, OFFSET_FOR_LEADER_EPOCH, {
        "replica_id": -1,
        "topics": [{"topic": name, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": epoch}]}],
    })
    p = resp.topics[0].partitions[0]
    return int(p.error_code), int(p.leader_epoch), int(p.end_offset)


def strom_cli(c: ClusterProcess, node: int, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strom", *argv[:1], "--bootstrap-server", c.node_bootstrap(node), *argv[1:]],
        capture_output=True, text=True, timeout=60,
    )


def test_unclean_leader_election(cluster: ClusterProcess) -> None:
    """RF=2 on nodes 1 (leader) and 2; node 3 is a voter only. Node 2 dies, the ISR shrinks to
    node 1, which takes more records; node 1 dies and node 2 comes back out of sync: the
    partition has no leader until unclean election is allowed (the topic's dynamic config, or
    ElectLeaders UNCLEAN); then node 2 leads, the records only node 1 had are lost, and a
    consumer that read them is told by OffsetForLeaderEpoch where the log was truncated."""
    c = cluster
    t0 = time.monotonic()
    by_config, by_cli = f"unclean-{uuid.uuid4().hex[:8]}", f"uncleancli-{uuid.uuid4().hex[:8]}"
    for name in (by_config, by_cli):
        create_assigned(c, 3, name, [[1, 2]])
    for name in (by_config, by_cli):
        wait_for("ISR [1, 2]", lambda name=name: c.partition_info(3, name)[0] == (1, [1, 2], [1, 2]))
        acked, errors = produce(c, name, [f"kept{i}".encode() for i in range(100)])
        assert errors == [] and len(acked) == 100
    c.kill(2)
    for name in (by_config, by_cli):
        wait_for("ISR [1]", lambda name=name: c.partition_info(3, name)[0][2] == [1], timeout=20)
        acked, errors = produce(c, name, [f"lost{i}".encode() for i in range(50)])
        assert errors == [] and [o for _p, o, _v in acked] == list(range(100, 150))
    epoch_of_lost = int(c.metadata(3, [by_config]).topics[by_config].partitions[0].leader_epoch)
    # a consumer that read everything, the lost records included
    reader = RackConsumer(c, by_config, [0], "r3")
    assert len(reader.poll_until(150)) == 150
    c.kill(1)
    c.start_node(2)
    for name in (by_config, by_cli):
        wait_for("no leader", lambda name=name: c.partition_info(3, name)[0][0] == -1, timeout=30)
    wait_for("node 2 registered", lambda: 2 in c.metadata(3).brokers, timeout=30)
    time.sleep(3)  # three of the controller's unclean-election checks
    for name in (by_config, by_cli):
        leader, _replicas, isr = c.partition_info(3, name)[0]
        assert (leader, isr) == (-1, [1]), name  # the last ISR member stays recorded
    acked, errors = produce(c, by_config, [b"refused"], timeout=3)
    assert acked == [] and errors, errors
    resp = c.request(2, ApiKey.PRODUCE, {
        "transactional_id": None, "acks": -1, "timeout": 1000,
        "topic_data": [{"name": by_config, "partition_data": [
            {"index": 0, "records": build_batch([(None, b"refused", [], int(time.time() * 1000))])}]}],
    })
    assert int(resp.responses[0].partition_responses[0].error_code) == 6  # NOT_LEADER_OR_FOLLOWER

    # the topic's config allows it: the controller's periodic check elects node 2
    r = strom_cli(c, 3, "configs", "--entity-type", "topics", "--entity-name", by_config,
                  "alter", "--add-config", "unclean.leader.election.enable=true")
    assert r.returncode == 0, r.stderr
    wait_for("node 2 leads", lambda: c.partition_info(3, by_config)[0][0] == 2, timeout=15)
    assert c.partition_info(3, by_config)[0][2] == [2]
    assert c.partition_info(3, by_cli)[0][0] == -1  # the other topic does not allow it
    # ElectLeaders UNCLEAN (kafka-leader-election.sh) elects regardless of the config
    r = strom_cli(
        c, 3, "leader-election", "--election-type", "unclean", "--topic", by_cli, "--partition", "0"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Successfully completed leader election (UNCLEAN)" in r.stdout
    wait_for("node 2 leads", lambda: c.partition_info(3, by_cli)[0][0] == 2, timeout=15)

    for name in (by_config, by_cli):
        acked, errors = produce(c, name, [f"after{i}".encode() for i in range(10)])
        assert errors == [] and [o for _p, o, _v in acked] == list(range(100, 110))
        # what node 1 alone had is gone; offsets 100.. now hold other records
        cons = RackConsumer(c, name, [0], "r3")
        try:
            got = [v for _p, _o, v in cons.poll_until(110)]
            cons.poll_until(200, timeout=1.0)
            got = [v for _p, _o, v in cons.records]
        finally:
            cons.close()
        assert got == [f"kept{i}".encode() for i in range(100)] + [f"after{i}".encode() for i in range(10)]
    # a consumer that read offsets 100..149 at the old epoch asks where that epoch ends: 100
    code, epoch, end = offset_for_leader_epoch(c, 2, by_config, epoch_of_lost)
    assert code == 0 and end == 100 and epoch <= epoch_of_lost
    # librdkafka's consumer does the same (KIP-320): it validates its position with the new
    # leader, finds the truncation and goes on from offset 100 (without that check it would get
    # OFFSET_OUT_OF_RANGE at 150 and auto.offset.reset would take it back to 0)
    try:
        after = reader.poll_until(160, timeout=15.0)[150:]
        print("librdkafka consumer after the unclean election:", after[:2], reader.errors[:3])
        assert after[:10] == [(0, 100 + i, f"after{i}".encode()) for i in range(10)], (after, reader.errors)
    finally:
        reader.close()

    # node 1 comes back: it truncates to node 2's log and rejoins the ISR (the leader reported
    # itself RECOVERED, so the controller accepts the larger ISR)
    c.start_node(1)
    for name in (by_config, by_cli):
        wait_for("ISR [1, 2]", lambda name=name: sorted(c.partition_info(3, name)[0][2]) == [1, 2],
                 timeout=30)
    print(f"unclean election scenario: {time.monotonic() - t0:.1f} s")


JAVA_CONSUMER = """
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;

public class RackConsumer {
    public static void main(String[] args) {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("client.rack", args[2]);
        p.put("enable.auto.commit", "false");
        p.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        p.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        int want = Integer.parseInt(args[3]);
        try (KafkaConsumer<byte[], String> c = new KafkaConsumer<>(p)) {
            TopicPartition tp = new TopicPartition(args[1], 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<String> got = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 60000;
            while (got.size() < want && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], String> r : c.poll(Duration.ofMillis(200))) {
                    got.add(r.offset() + ":" + r.value());
                }
            }
            for (String s : got) System.out.println("REC " + s);
        }
    }
}
"""


def test_java_consumer_reads_from_its_rack(cluster: ClusterProcess, tmp_path: Path) -> None:
    libs = JAVA_LIBS
    if shutil.which("java") is None or not libs.is_dir():
        pytest.skip("no JDK or Kafka client jars")
    c = cluster
    name = f"rackjava-{uuid.uuid4().hex[:8]}"
    create_assigned(c, 1, name, [[1, 2, 3]])
    wait_for("full ISR", lambda: len(c.partition_info(1, name)[0][2]) == 3)
    values = [f"j{i:04d}" for i in range(300)]
    acked, errors = produce(c, name, [v.encode() for v in values])
    assert errors == [] and len(acked) == 300
    src = tmp_path / "RackConsumer.java"
    src.write_text(JAVA_CONSUMER)
    r = subprocess.run(["java", "-cp", f"{libs}/*", str(src), c.bootstrap, name, "r2", "300"],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    got = [line[4:] for line in r.stdout.splitlines() if line.startswith("REC ")]
    assert got == [f"{i}:{v}" for i, v in enumerate(values)]  # every record once, in order
    assert served_as_follower(c, 2, name, 0)
    assert not served_as_follower(c, 3, name, 0)
    assert f"{name}-0: consumers in rack r2 read from replica 2" in c.log(1, tail=10**7)
