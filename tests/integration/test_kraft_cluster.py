# ruff: noqa: E501  (the embedded Java source keeps its natural line lengths)
"""A real three-node KRaft cluster: three ``strom serve`` processes (combined broker+controller
nodes, :class:`strom.testing.cluster_process.ClusterProcess`, configured exactly as ``strom
dev-cluster`` configures them) on loopback ports.

What is checked (issue 13, "Real processes"): the three nodes elect one leader and DescribeQuorum
shows three voters caught up; every node's Metadata and DescribeCluster list the three brokers;
CreateTopics, CreatePartitions, AlterConfigs and DeleteTopics sent to each node in turn succeed
and show on every node (the time a new topic takes to show on all three is printed); kill -9 of
the active controller: a new leader, CreateTopics through a surviving node keeps working, the
killed node restarts, rejoins and shows the topics made while it was down; confluent-kafka,
kafka-python and the Java AdminClient against the cluster; ``strom dev-cluster`` end to end; and
the bad set-ups a single node cannot detect alone: a node formatted with another cluster id (it
never joins, disturbs nobody, and both sides log the mismatch naming ``cluster.id``) and a node
whose ``controller.quorum.voters`` disagrees with the others' (it disturbs nobody). The set-ups one
node refuses at start (bad or inconsistent voters, a node id not in the voters, a cluster id or
node id that does not match the dirs, nothing lost) are tests/integration/test_kraft_storage.py.

Every request is sent to one named node (a fresh client bootstrapped on it alone), so an answer is
that node's own view, not whichever node a routing client picked.

One cluster serves the module (starting three nodes costs seconds on a small machine); the tests
use distinct topic names and the failover test leaves all three nodes running.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.cli.dev_cluster import free_ports
from strom.client import Client
from strom.testing.cluster_process import ClusterProcess

pytestmark = pytest.mark.integration

NODES = (1, 2, 3)
CREATE_PARTITIONS = 37
ALTER_CONFIGS = 33
DESCRIBE_CONFIGS = 32

COMPAT_HOME = Path(os.environ.get("STROM_COMPAT_HOME", Path.home() / ".cache" / "strom-compat"))
JAVA_LIBS = COMPAT_HOME / "java" / "libs"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    c = ClusterProcess(tmp_path_factory.mktemp("kraft-cluster") / "dc", 3)
    c.start()
    try:
        c.wait_ready(90)
        yield c
    finally:
        c.close()
        assert c.running == []


@pytest.fixture
def ready(cluster: ClusterProcess) -> ClusterProcess:
    """The module's cluster with all three nodes running and listing each other."""
    for i in NODES:
        if not cluster.is_running(i):
            cluster.start_node(i)
    cluster.wait_ready(90)
    return cluster


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def ok(results: dict[str, tuple[int, str | None]]) -> None:
    assert all(code == 0 for code, _ in results.values()), results


def strom(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strom", *args], capture_output=True, text=True, timeout=timeout
    )


def topic_view(c: ClusterProcess, node: int, topic: str) -> Any:
    """What ``node`` says of ``topic``: id and, per partition, (leader, replicas, isr)."""
    t = c.metadata(node, [topic]).topics[topic]
    assert t.error_code == 0, (node, t)
    return t.topic_id, {p: (m.leader, m.replicas, m.isr) for p, m in t.partitions.items()}


def wait_caught_up(c: ClusterProcess, leader: int, voters: set[int], timeout: float = 30) -> Any:
    """Wait until DescribeQuorum (asked of the leader) shows every voter of ``voters`` at the
    leader's log end offset; returns that answer."""
    deadline = time.monotonic() + timeout
    while True:
        q = c.describe_quorum(leader)
        ends = {v.replica_id: v.log_end_offset for v in q.voters}
        if q.leader_id == leader and all(ends.get(v) == ends.get(leader) for v in voters):
            return q
        assert time.monotonic() < deadline, (q, c.logs())
        time.sleep(0.2)


# ---------------------------------------------------------------------------- the quorum


def test_three_nodes_elect_one_leader_and_three_voters_catch_up(ready: ClusterProcess) -> None:
    c = ready
    leader = c.active_controller()
    q = wait_caught_up(c, leader, set(NODES))
    assert sorted(v.replica_id for v in q.voters) == list(NODES)
    assert q.leader_epoch >= 1 and q.high_watermark >= 1
    assert q.observers == ()  # combined nodes are all voters
    # every node that answers DescribeQuorum names the same leader and epoch
    for i in NODES:
        qi = c.describe_quorum(i)
        assert (qi.leader_id, qi.leader_epoch) == (leader, q.leader_epoch), (i, qi)
    # kafka-metadata-quorum.sh's summary, through any node
    out = strom("metadata-quorum", "--bootstrap-server", c.bootstrap, "describe", "--status")
    assert out.returncode == 0, out.stderr
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in out.stdout.splitlines())}
    assert fields["ClusterId"] == c.cluster_id
    assert fields["LeaderId"] == str(leader)
    assert [int(x) for x in re.findall(r'"id": (\d+)', fields["CurrentVoters"])] == sorted(NODES)
    assert fields["CurrentObservers"] == "[]"


def test_every_node_lists_three_brokers_and_a_live_controller(ready: ClusterProcess) -> None:
    c = ready
    for i in NODES:
        md = c.metadata(i, [])
        assert sorted(md.brokers) == list(NODES), (i, md.brokers)
        for b in md.brokers.values():
            assert (b.host, b.port) == ("127.0.0.1", c.spec(b.node_id).port)
        assert md.cluster_id == c.cluster_id
        # KRaft (KIP-590): clients cannot reach the controller; the id given is a live broker
        assert md.controller_id in NODES, (i, md.controller_id)
        desc = c.describe_cluster(i)
        assert desc.cluster_id == c.cluster_id
        assert [(b.node_id, b.port, b.fenced) for b in desc.brokers] == [
            (n, c.spec(n).port, False) for n in NODES
        ], (i, desc)
        assert desc.controller_id in NODES, (i, desc)


# ---------------------------------------------------------------------------- topics through each node


def test_create_topics_through_each_node_shows_on_every_node(ready: ClusterProcess) -> None:
    c = ready
    propagation = []
    for via in NODES:
        for rf in (1, 3):
            topic = name(f"via{via}-rf{rf}")
            ok(c.create_topics(via, {topic: (3, rf)}))
            # the node that answered shows it at once (it applied the commit before answering)
            _tid, parts = topic_view(c, via, topic)
            assert len(parts) == 3
            propagation.append(c.wait_topic(topic, NODES, timeout=30))
            views = {i: topic_view(c, i, topic) for i in NODES}
            assert len({repr(v) for v in views.values()}) == 1, views  # same id, leaders, replicas, ISR
            tid, parts = views[1]
            assert tid is not None
            for leader, replicas, isr in parts.values():
                assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= set(NODES)
                assert leader == replicas[0] and set(isr) == set(replicas)
    # a name taken, through another node than the one that made it
    topic = name("dup")
    ok(c.create_topics(1, {topic: (1, 1)}))
    assert c.create_topics(2, {topic: (1, 1)})[topic][0] == 36  # TOPIC_ALREADY_EXISTS
    propagation.sort()
    print(
        f"\nmetadata propagation (CreateTopics answered -> shown by all 3 nodes), {len(propagation)} "
        f"topics: median {propagation[len(propagation) // 2] * 1000:.0f} ms, max {propagation[-1] * 1000:.0f} ms"
    )


def test_create_partitions_with_replica_assignments_on_a_cluster(ready: ClusterProcess) -> None:
    """CreatePartitions with explicit assignments naming other brokers (kafka-topics --alter
    --replica-assignment): the controller checks and places them as given; assignments naming
    a broker that does not exist, or of the wrong replication factor, are refused
    (INVALID_REPLICA_ASSIGNMENT) and nothing changes. (Every assignment naming a broker other
    than the one asked was refused as naming brokers that do not exist.)"""
    c = ready
    topic = name("assigned")
    ok(c.create_topics(1, {topic: (1, 2)}))
    c.wait_topic(topic, NODES)

    def grow(via: int, count: int, assignments: list[list[int]]) -> tuple[int, str | None]:
        resp = c.request(via, CREATE_PARTITIONS, {
            "topics": [{"name": topic, "count": count,
                        "assignments": [{"broker_ids": a} for a in assignments]}],
            "timeout": 30000, "validate_only": False})
        r = resp.results[0]
        return int(r.error_code), r.error_message

    assert grow(2, 2, [[99, 1]])[0] == 39, "a broker that does not exist"  # INVALID_REPLICA_ASSIGNMENT
    assert grow(2, 2, [[1, 2, 3]])[0] == 39, "three replicas for a topic of two"
    assert len(topic_view(c, 2, topic)[1]) == 1
    assert grow(2, 3, [[3, 1], [1, 3]]) == (0, None)
    deadline = time.monotonic() + 30
    while True:
        views = [topic_view(c, i, topic)[1] for i in NODES]
        if all(len(v) == 3 for v in views):
            break
        assert time.monotonic() < deadline, c.logs()
        time.sleep(0.05)
    for v in views:
        assert list(v[1][1]) == [3, 1] and list(v[2][1]) == [1, 3], v


def test_create_partitions_alter_configs_and_delete_through_each_node(ready: ClusterProcess) -> None:
    c = ready
    for via in NODES:
        topic = name(f"ops{via}")
        ok(c.create_topics(via % 3 + 1, {topic: (1, 1)}))  # made through another node
        c.wait_topic(topic, NODES)
        # CreatePartitions through `via`
        resp = c.request(
            via,
            CREATE_PARTITIONS,
            {
                "topics": [{"name": topic, "count": 4, "assignments": None}],
                "timeout": 30000,
                "validate_only": False,
            },
        )
        assert [int(r.error_code) for r in resp.results] == [0], resp
        deadline = time.monotonic() + 30
        while not all(len(topic_view(c, i, topic)[1]) == 4 for i in NODES):
            assert time.monotonic() < deadline, c.logs()
            time.sleep(0.05)
        # AlterConfigs through `via`, visible in DescribeConfigs of every node
        resp = c.request(
            via,
            ALTER_CONFIGS,
            {
                "resources": [
                    {
                        "resource_type": 2,
                        "resource_name": topic,
                        "configs": [{"name": "retention.ms", "value": str(3_600_000 + via)}],
                    }
                ],
                "validate_only": False,
            },
        )
        assert [int(r.error_code) for r in resp.responses] == [0], resp
        for i in NODES:
            deadline = time.monotonic() + 30
            while (got := c.run(i, lambda cl, t=topic: cl.describe_configs(t))).get("retention.ms") != str(
                3_600_000 + via
            ):
                assert time.monotonic() < deadline, (i, got)
                time.sleep(0.05)
        # DeleteTopics through `via`: gone from every node
        ok(c.delete_topics(via, [topic]))
        c.wait_topic(topic, NODES, present=False)
        assert c.create_topics(via, {topic: (2, 1)})[topic][0] == 0  # the name is free again
        c.wait_topic(topic, NODES)
        assert all(len(topic_view(c, i, topic)[1]) == 2 for i in NODES)


# ---------------------------------------------------------------------------- failover


def test_kill_9_of_the_active_controller(ready: ClusterProcess) -> None:
    c = ready
    old = c.active_controller()
    survivors = [i for i in NODES if i != old]
    before = name("before")
    ok(c.create_topics(survivors[0], {before: (1, 1)}))
    c.wait_topic(before, NODES)
    old_epoch = c.describe_quorum(old).leader_epoch

    c.kill(old)
    t0 = time.monotonic()
    first = name("failover")
    attempts = 0
    while True:  # CreateTopics through a survivor until it succeeds
        attempts += 1
        try:
            result = c.create_topics(survivors[attempts % 2], {first: (1, 1)}, timeout_ms=5000)
        except Exception as e:  # a timeout or a closed connection while the quorum elects
            result = {first: (-1, repr(e))}
        code = result[first][0]
        if code == 0:
            break
        # NOT_CONTROLLER / REQUEST_TIMED_OUT while electing; TOPIC_ALREADY_EXISTS if an earlier
        # attempt was committed but its answer lost
        if code == 36:
            break
        assert time.monotonic() - t0 < 60, (result, c.logs())
        time.sleep(0.05)
    failover = time.monotonic() - t0
    print(f"\ncontroller failover (kill -9 -> first successful CreateTopics): {failover * 1000:.0f} ms")
    new = c.active_controller(among=survivors)
    assert new in survivors
    assert c.describe_quorum(new).leader_epoch > old_epoch
    c.wait_topic(first, survivors)

    made_while_down = [name("down") for _ in range(3)]
    for k, topic in enumerate(made_while_down):
        ok(c.create_topics(survivors[k % 2], {topic: (2, 1)}))
    for topic in made_while_down:
        c.wait_topic(topic, survivors)

    c.start_node(old)  # restarts on its own dirs, rejoins, catches up
    for topic in [before, first, *made_while_down]:
        c.wait_topic(topic, [old], timeout=60)
    for topic in made_while_down:
        assert topic_view(c, old, topic) == topic_view(c, new, topic)
    leader = c.active_controller()
    wait_caught_up(c, leader, set(NODES), timeout=60)
    c.wait_ready(60)
    # and through the restarted node, too
    again = name("again")
    ok(c.create_topics(old, {again: (1, 1)}))
    c.wait_topic(again, NODES)


# ---------------------------------------------------------------------------- admin clients


def test_confluent_kafka_admin_client(ready: ClusterProcess) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    c = ready
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    md = admin.list_topics(timeout=15)
    assert sorted(md.brokers) == list(NODES)
    desc = admin.describe_cluster(request_timeout=15).result(15)
    assert sorted(n.id for n in desc.nodes) == list(NODES)
    assert desc.cluster_id == c.cluster_id and desc.controller is not None and desc.controller.id in NODES
    topics = [name("ck1"), name("ck3")]
    futures = admin.create_topics([NewTopic(topics[0], 2, 1), NewTopic(topics[1], 2, 3)], request_timeout=30)
    for f in futures.values():
        f.result(30)
    for t in topics:
        c.wait_topic(t, NODES)
    md = admin.list_topics(timeout=15)
    assert [len(md.topics[t].partitions) for t in topics] == [2, 2]
    assert {len(p.replicas) for p in md.topics[topics[1]].partitions.values()} == {3}
    for f in admin.delete_topics(topics, request_timeout=30).values():
        f.result(30)
    for t in topics:
        c.wait_topic(t, NODES, present=False)


def test_kafka_python_admin_client(ready: ClusterProcess) -> None:
    from kafka.admin import KafkaAdminClient

    c = ready
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30000)
    try:
        desc = admin.describe_cluster()
        assert sorted(b["broker_id"] for b in desc["brokers"]) == list(NODES)
        assert desc["cluster_id"] == c.cluster_id and desc["controller_id"] in NODES
        topic = name("kp")
        admin.create_topics({topic: {"num_partitions": 3, "replication_factor": 3}})
        c.wait_topic(topic, NODES)
        (t,) = admin.describe_topics([topic])
        assert t["error_code"] == 0 and t["name"] == topic
        assert len(t["partitions"]) == 3
        for p in t["partitions"]:
            assert sorted(p["replica_nodes"]) == list(NODES) and p["leader_id"] in NODES
    finally:
        admin.close()


JAVA_SOURCE = r"""
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.*;

public class ClusterAdmin {
    public static void main(String[] a) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", a[0]);
        p.put("default.api.timeout.ms", "60000");
        String topic = a[1];
        try (Admin admin = Admin.create(p)) {
            DescribeClusterResult dc = admin.describeCluster();
            System.out.println("CLUSTER " + dc.clusterId().get());
            System.out.println("CONTROLLER " + dc.controller().get().id());
            List<Integer> ids = new ArrayList<>();
            for (Node n : dc.nodes().get()) ids.add(n.id());
            Collections.sort(ids);
            System.out.println("NODES " + ids);
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 3))).all().get();
            TopicDescription td = null;
            for (int i = 0; i < 100; i++) {  // metadata propagation: until every partition has a leader
                try {
                    td = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                    if (td.partitions().stream().allMatch(x -> x.leader() != null)) break;
                } catch (Exception e) { }
                Thread.sleep(100);
            }
            for (TopicPartitionInfo tp : td.partitions()) {
                List<Integer> r = new ArrayList<>(), isr = new ArrayList<>();
                for (Node n : tp.replicas()) r.add(n.id());
                for (Node n : tp.isr()) isr.add(n.id());
                System.out.println("PARTITION " + tp.partition() + " leader " + tp.leader().id() + " replicas " + r + " isr " + isr);
            }
            QuorumInfo q = admin.describeMetadataQuorum().quorumInfo().get();
            List<String> voters = new ArrayList<>();
            for (QuorumInfo.ReplicaState v : q.voters()) voters.add(v.replicaId() + ":" + v.logEndOffset());
            System.out.println("QUORUM leader " + q.leaderId() + " epoch " + q.leaderEpoch() + " hw " + q.highWatermark() + " voters " + voters + " observers " + q.observers().size());
        }
    }
}
"""


def test_java_admin_client(ready: ClusterProcess, tmp_path: Path) -> None:
    if shutil.which("java") is None or not JAVA_LIBS.is_dir():
        pytest.skip("no JDK or Kafka client jars")
    c = ready
    leader = c.active_controller()
    src = tmp_path / "ClusterAdmin.java"
    src.write_text(JAVA_SOURCE)
    topic = name("java")
    r = subprocess.run(
        ["java", "-cp", f"{JAVA_LIBS}/*", str(src), c.bootstrap, topic],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    out = {line.split(" ", 1)[0]: line for line in r.stdout.splitlines() if line.split(" ")[0].isupper()}
    assert out["CLUSTER"] == f"CLUSTER {c.cluster_id}"
    assert int(out["CONTROLLER"].split()[1]) in NODES
    assert out["NODES"] == "NODES [1, 2, 3]"
    partitions = [line for line in r.stdout.splitlines() if line.startswith("PARTITION ")]
    assert len(partitions) == 3, r.stdout
    for line in partitions:
        m = re.fullmatch(r"PARTITION \d leader (\d) replicas \[(.*)\] isr \[(.*)\]", line)
        assert m is not None, line
        assert sorted(int(x) for x in m.group(2).split(", ")) == list(NODES)
        assert int(m.group(1)) in NODES
    m = re.fullmatch(
        r"QUORUM leader (\d+) epoch (\d+) hw (\d+) voters \[(.*)\] observers (\d+)", out["QUORUM"]
    )
    assert m is not None, out["QUORUM"]
    assert int(m.group(1)) == leader and int(m.group(3)) >= 1 and m.group(5) == "0"
    assert sorted(int(v.split(":")[0]) for v in m.group(4).split(", ")) == list(NODES)


# ---------------------------------------------------------------------------- bad set-ups


def test_a_node_formatted_for_another_cluster_does_not_join(tmp_path: Path) -> None:
    """Each node alone is consistent (its dirs match its config), so it starts; the quorum
    refuses it: every Raft request carries the cluster id, the others answer
    INCONSISTENT_CLUSTER_ID, and the two right nodes go on without it, losing nothing."""
    c = ClusterProcess(tmp_path / "dc", 3)
    c.dev.plan()
    c.dev.format()
    bad = c.spec(3)
    other_id = strom("storage", "random-uuid").stdout.strip()
    meta = bad.dir / "data" / "meta.properties"
    shutil.rmtree(bad.dir / "data")
    shutil.rmtree(bad.dir / "metadata", ignore_errors=True)
    r = strom("storage", "format", "-t", other_id, "-c", str(bad.config_path))
    assert r.returncode == 0, r.stderr
    assert f"cluster.id={other_id}" in meta.read_text()
    try:
        for i in NODES:
            c.dev.start_node(i)
        c.wait_listening([1, 2], timeout=90)  # node 3 never catches up: it never serves clients
        assert c.is_running(3), c.log(3)  # but it does not exit either (nothing to refuse locally)
        leader = c.active_controller(among=[1, 2], timeout=60)
        assert leader in (1, 2)
        topic = name("good")
        ok(c.create_topics(1, {topic: (1, 1)}))
        c.wait_topic(topic, [1, 2])
        time.sleep(3)  # several election and fetch timeouts
        q = c.describe_quorum(leader)
        ends = {v.replica_id: v.log_end_offset for v in q.voters}
        assert ends.get(3, -1) <= 0 and ends[leader] > 0, q  # node 3 got nothing
        assert c.active_controller(among=[1, 2]) == leader  # and disturbed no one
        # and each side says why, naming the setting
        assert re.search(r"node 3: node [12] belongs to another cluster", c.log(3)), c.log(3)
        assert f"this node's cluster.id is {other_id}" in c.log(3)
        assert f"node {leader}: node 3 belongs to another cluster" in c.log(leader), c.log(leader)
    finally:
        c.close()


def test_a_node_outside_the_voters_disturbs_nobody(ready: ClusterProcess, tmp_path: Path) -> None:
    """A fourth node whose ``controller.quorum.voters`` names the three and itself (inconsistent
    with theirs): it campaigns, the three answer its Vote requests INCONSISTENT_VOTER_SET before
    looking at its epoch, so their leader and epoch stay as they were and topics are still made.
    (Having learnt the leader from those answers it may follow the log as an observer and
    register as a broker, as a Kafka node may: the voters alone decide.)"""
    c = ready
    leader = c.active_controller()
    epoch = c.describe_quorum(leader).leader_epoch
    port, cport = free_ports(2)
    node = tmp_path / "node-4"
    node.mkdir()
    cfg = node / "server.properties"
    cfg.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=4",
                f"controller.quorum.voters={c.voters},4@127.0.0.1:{cport}",
                f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "controller.listener.names=CONTROLLER",
                f"log.dirs={node / 'data'}",
                "offsets.topic.num.partitions=1",
                "transaction.state.log.num.partitions=1",
                "share.coordinator.state.topic.num.partitions=1",
            ]
        )
        + "\n"
    )
    r = strom("storage", "format", "-t", c.cluster_id, "-c", str(cfg))
    assert r.returncode == 0, r.stderr
    with (node / "server.log").open("wb") as log:
        intruder = subprocess.Popen(
            [sys.executable, "-m", "strom", "serve", str(cfg)], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        time.sleep(6)  # several of its election timeouts (1 s default, randomised up to 2 s)
        q = c.describe_quorum(leader)
        assert (q.leader_id, q.leader_epoch) == (leader, epoch), q
        assert sorted(v.replica_id for v in q.voters) == list(NODES)
        topic = name("undisturbed")
        ok(c.create_topics(leader % 3 + 1, {topic: (1, 1)}))
        c.wait_topic(topic, NODES)
        # it learnt the leader from the answers and may follow the log as an observer, as any
        # replica id may in Kafka; it is never counted as a voter
        assert 4 not in {v.replica_id for v in q.voters}
    finally:
        intruder.kill()
        intruder.wait()
    # a broker that registered stops being listed once fenced (broker.session.timeout.ms): the
    # module's cluster is three brokers again for the tests that follow
    deadline = time.monotonic() + 30
    while 4 in c.metadata(leader, []).brokers:
        assert time.monotonic() < deadline, c.logs()
        time.sleep(0.2)


# ---------------------------------------------------------------------------- strom dev-cluster


def _node_processes(marker: str) -> list[int]:
    """Pids of running processes whose command line mentions ``marker``."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and "serve" in cmd:
            pids.append(int(d.name))
    return pids


def test_dev_cluster_end_to_end(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    d = tmp_path / "dc"
    proc = subprocess.Popen(
        [sys.executable, "-m", "strom", "dev-cluster", "--nodes", "3", "--dir", str(d)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        while not lines or not lines[-1].startswith("all 3 node(s) are listening"):
            line = proc.stdout.readline()
            assert line, (lines, proc.stderr.read() if proc.stderr else "")
            lines.append(line.strip())
        assert lines[0].startswith("strom dev-cluster: 3 node(s), cluster id ")
        bootstrap = next(x for x in lines if x.startswith("bootstrap servers: ")).split(": ", 1)[1]
        assert len(bootstrap.split(",")) == 3
        assert len(_node_processes(str(d))) == 3
        deadline = time.monotonic() + 90
        while True:
            r = strom("cluster", "--bootstrap-server", bootstrap)
            if r.returncode == 0 and r.stdout.count("unfenced") == 3:
                break
            assert time.monotonic() < deadline, r.stdout + r.stderr
            time.sleep(1)
        status = strom("metadata-quorum", "--bootstrap-server", bootstrap, "describe", "--status")
        assert status.returncode == 0, status.stderr
        assert status.stdout.count('"id"') >= 3

        topic = "dev-cluster-topic"
        r = strom(
            "topics",
            "--bootstrap-server",
            bootstrap,
            "create",
            "--topic",
            topic,
            "--partitions",
            "2",
            "--replication-factor",
            "1",
        )
        assert r.returncode == 0, r.stderr
        # the partition's leader, from Metadata; strom's client sends the Produce there
        import asyncio

        async def produce() -> tuple[int, int]:
            async with Client(bootstrap) as cl:
                deadline = time.monotonic() + 30
                while True:
                    t = await cl.topic(topic, refresh=True)
                    if t.partitions[1].leader >= 0:
                        break
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.1)
                offset = await cl.produce(
                    topic, 1, [(b"k", b"through the leader", [], int(time.time() * 1000))]
                )
                return t.partitions[1].leader, offset

        leader, offset = asyncio.run(produce())
        assert leader in NODES and offset == 0
        # real clients route themselves
        p = Producer({"bootstrap.servers": bootstrap})
        p.produce(topic, b"from confluent", partition=1)
        assert p.flush(30) == 0
        del p  # (its connections would complain once the nodes stop)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dc", "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition(topic, 1, 0)])
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < 2 and time.monotonic() < deadline:
                m = consumer.poll(1)
                if m is not None and m.error() is None:
                    got.append(m.value())
            assert got == [b"through the leader", b"from confluent"]
        finally:
            consumer.close()

        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert proc.wait(60) == 0
        assert _node_processes(str(d)) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in _node_processes(str(d)):
            os.kill(pid, signal.SIGKILL)
