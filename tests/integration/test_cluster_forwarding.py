"""Three real ``strom serve`` nodes (combined broker+controller, as ``strom dev-cluster`` makes
them): every broker registers with the active controller over the wire, requests sent to a node
whose controller is not the active one are forwarded to it (CreateTopics, CreatePartitions,
AlterConfigs, DeleteTopics in an Envelope, DescribeQuorum), and a node stopped with SIGTERM
shuts down in a controlled way; after a kill -9 of the active controller the channels find the
new one."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.cli.dev_cluster import HOST, DevCluster

pytestmark = pytest.mark.integration


def strom(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strom", *args], capture_output=True, text=True, timeout=timeout
    )


def wait_for(what: str, check: object, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(
        tmp_path / "dc",
        3,
        overrides=[
            "offsets.topic.num.partitions=2",
            "transaction.state.log.num.partitions=1",
            "share.coordinator.state.topic.num.partitions=1",
        ],
    )
    c.plan()
    c.format()
    c.start()
    try:
        yield c
    finally:
        c.stop()


def leader_seen_by(port: int) -> int | None:
    r = strom("metadata-quorum", "--bootstrap-server", f"{HOST}:{port}", "describe", "--status")
    if r.returncode != 0:
        return None
    fields = dict(line.split(":", 1) for line in r.stdout.splitlines() if ":" in line)
    return int(fields["LeaderId"])


def test_brokers_register_over_the_wire_and_requests_are_forwarded(cluster: DevCluster) -> None:
    specs = {s.node_id: s for s in cluster.specs}

    def registered(node: int) -> bool:
        return f"broker {node} registered with epoch" in specs[node].log_path.read_text()

    for node in specs:
        wait_for(f"node {node} to register", lambda node=node: registered(node))
    # every node answers DescribeQuorum with the same leader (followers forward it)
    leaders = {node: leader_seen_by(s.port) for node, s in specs.items()}
    assert None not in leaders.values() and len(set(leaders.values())) == 1, leaders
    leader = next(iter(leaders.values()))
    assert leader in specs
    follower = next(n for n in specs if n != leader)
    # CreateTopics at a follower: forwarded to the active controller, answered once applied
    at_follower = f"{HOST}:{specs[follower].port}"
    r = strom("topics", "--bootstrap-server", at_follower, "create", "--topic", "fwd", "--partitions", "3")
    assert r.returncode == 0, r.stderr
    for node, s in specs.items():
        out = strom("topics", "--bootstrap-server", f"{HOST}:{s.port}", "describe", "--topic", "fwd")
        assert out.returncode == 0 and "PartitionCount: 3" in out.stdout, (node, out.stdout, out.stderr)
    # a second one is refused
    argv = ["--bootstrap-server", at_follower, "create", "--topic", "fwd", "--partitions", "1"]
    again = strom("topics", *argv)
    assert again.returncode != 0 and "already exists" in again.stderr
    # CreatePartitions and a topic config at the follower reach every node
    grow = ["--bootstrap-server", at_follower, "alter", "--topic", "fwd", "--partitions", "5"]
    assert strom("topics", *grow).returncode == 0
    alter = ["--entity-type", "topics", "--entity-name", "fwd", "alter", "--add-config", "retention.ms=4242"]
    assert strom("configs", "--bootstrap-server", at_follower, *alter).returncode == 0
    for s in specs.values():
        at = f"{HOST}:{s.port}"

        def applied(at: str = at) -> bool:
            topic = strom("topics", "--bootstrap-server", at, "describe", "--topic", "fwd").stdout
            desc = ["--entity-type", "topics", "--entity-name", "fwd", "describe"]
            configs = strom("configs", "--bootstrap-server", at, *desc).stdout
            return "PartitionCount: 5" in topic and "retention.ms=4242" in configs

        wait_for(f"node at {at} to apply the partitions and the config", applied, 30)
    # DeleteTopics at the follower
    assert strom("topics", "--bootstrap-server", at_follower, "delete", "--topic", "fwd").returncode == 0
    at_leader = f"{HOST}:{specs[leader].port}"
    wait_for(
        "the topic to be gone at the leader",
        lambda: "fwd" not in strom("topics", "--bootstrap-server", at_leader, "list").stdout.split(),
        30,
    )
    # a follower stopped with SIGTERM: controlled shutdown at the active controller, clean exit
    proc = cluster.procs[follower]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    log = specs[follower].log_path.read_text()
    assert f"broker {follower}: controlled shutdown complete" in log, log[-3000:]


def test_forwarding_follows_the_new_controller_after_a_kill_9(cluster: DevCluster) -> None:
    specs = {s.node_id: s for s in cluster.specs}
    for node, s in specs.items():
        wait_for(
            f"node {node} to register",
            lambda node=node, s=s: f"broker {node} registered with epoch" in s.log_path.read_text(),
        )
    leader = leader_seen_by(next(iter(specs.values())).port)
    assert leader in specs
    survivor = next(n for n in specs if n != leader)
    at = f"{HOST}:{specs[survivor].port}"
    assert strom("topics", "--bootstrap-server", at, "create", "--topic", "before").returncode == 0
    cluster.procs[leader].send_signal(signal.SIGKILL)
    cluster.procs[leader].wait(30)
    # the surviving node's channel loses its connection, finds the new leader and retries there
    r = strom(
        "topics", "--bootstrap-server", at, "create", "--topic", "after", "--partitions", "2", timeout=90
    )
    assert r.returncode == 0, r.stderr
    new_leader = leader_seen_by(specs[survivor].port)
    assert new_leader is not None and new_leader != leader
    # and the survivor that is not the new controller forwards to it
    follower = next(n for n in specs if n not in (leader, new_leader))
    at_follower = f"{HOST}:{specs[follower].port}"
    assert strom("topics", "--bootstrap-server", at_follower, "create", "--topic", "later").returncode == 0
    for node in specs:
        if node != leader:
            out = strom("topics", "--bootstrap-server", f"{HOST}:{specs[node].port}", "list").stdout.split()
            assert {"before", "after", "later"} <= set(out), (node, out)
