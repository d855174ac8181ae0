"""Three real ``strom serve`` processes configured as ``strom dev-cluster`` writes them
(process.roles=broker,controller, node.id, controller.quorum.voters naming the three CONTROLLER
listeners, controller.listener.names=CONTROLLER), each formatted with ``strom storage format``.
One started alone waits for a majority (it does not fail, and says once what it waits for);
the two others start at about the same time. They elect exactly one leader over TCP
(DescribeQuorum on the CONTROLLER listeners: the leader describes the quorum, the others name
it), a topic created at the active controller's node reaches the
metadata log of all three (every voter's log end offset reaches the high watermark past the
creation), and after ``kill -9`` of the leader the two others elect a new one; the killed node
restarts, rejoins as a follower and catches up. The leader stops cleanly on SIGTERM and the two
others elect a successor; the others stop cleanly too."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.client.connection import KafkaConnection
from strom.client.errors import KafkaConnectionError

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"
IDS = (1, 2, 3)
START_TIMEOUT_S = 60.0


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind((HOST, 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Node:
    def __init__(self, root: Path, node_id: int, port: int, controller_port: int) -> None:
        self.node_id = node_id
        self.port = port
        self.controller_port = controller_port
        self.dir = root / f"node-{node_id}"
        self.dir.mkdir(parents=True)
        self.config = self.dir / "server.properties"
        self.log_path = self.dir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def write_config(self, voters: str) -> None:
        self.config.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    f"node.id={self.node_id}",
                    f"controller.quorum.voters={voters}",
                    f"listeners=PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
                    f"advertised.listeners=PLAINTEXT://{HOST}:{self.port}",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    f"log.dirs={self.dir / 'data'}",
                    f"metadata.log.dir={self.dir / 'metadata'}",
                    "offsets.topic.num.partitions=1",
                    "transaction.state.log.num.partitions=1",
                    "share.coordinator.state.topic.num.partitions=1",
                    "log.cleaner.enable=false",
                ]
            )
            + "\n"
        )

    def format(self, cluster_id: str) -> None:
        subprocess.run(
            [sys.executable, "-m", "strom", "storage", "format", "-t", cluster_id, "-c", str(self.config)],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def start(self) -> None:
        out = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "strom", "serve", str(self.config)], stdout=out, stderr=subprocess.STDOUT
        )
        out.close()

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc = None

    def stop(self) -> int | None:
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(timeout=30)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[int, Node]]:
    ports = free_ports(2 * len(IDS))
    nodes = {nid: Node(tmp_path, nid, ports[2 * i], ports[2 * i + 1]) for i, nid in enumerate(IDS)}
    voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in nodes.values())
    cluster_id = "qV0t3rsTestC1usterIdAA"  # 22 characters of base64: a Kafka cluster id
    for n in nodes.values():
        n.write_config(voters)
        n.format(cluster_id)
    try:
        yield nodes
    finally:
        for n in nodes.values():
            n.stop()
        if os.environ.get("STROM_TEST_SHOW_LOGS"):
            for n in nodes.values():
                print(f"---- node {n.node_id}\n{n.log()}")


async def _request(port: int, api_key: int, body: dict[str, Any], version: int) -> Any:
    conn = await KafkaConnection.open(HOST, port)
    try:
        return await conn.request(api_key, body, version=version)
    finally:
        await conn.close()


async def describe_quorum(port: int) -> Any:
    """DescribeQuorum v2 at ``port`` (a CONTROLLER listener): the partition of __cluster_metadata."""
    body = {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}
    resp = await _request(port, 55, body, 2)
    return resp.topics[0].partitions[0]


async def wait_for_leader(
    nodes: dict[int, Node], timeout_s: float, not_: int | None = None
) -> tuple[int, Any]:
    """Until every live node names the same leader (a node that does not lead answers
    NOT_LEADER_OR_FOLLOWER naming it, or forwards the request to it) and that node describes
    the quorum as its leader; returns (leader id, the leader's description)."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        answers: dict[int, Any] = {}
        for nid, n in nodes.items():
            if not n.alive():
                continue
            try:
                answers[nid] = await asyncio.wait_for(describe_quorum(n.controller_port), 5)
            except (OSError, TimeoutError, KafkaConnectionError) as e:
                last = e
        named = {p.leader_id for p in answers.values()}
        if len(answers) == sum(n.alive() for n in nodes.values()) and len(named) == 1:
            (leader,) = named
            own = answers.get(leader)
            if leader not in (-1, not_) and own is not None and int(own.error_code) == 0:
                assert all(int(p.error_code) in (0, 6) for p in answers.values()), answers
                return leader, own
        last = answers
        await asyncio.sleep(0.2)
    raise AssertionError(f"no single leader within {timeout_s}s: {last}")


async def wait_replicated(port: int, voters: set[int], timeout_s: float, past: int) -> Any:
    """Until the leader at ``port`` reports a high watermark above ``past`` and every voter of
    ``voters`` with a log end offset at it (the voters fetched the whole committed log)."""
    deadline = time.monotonic() + timeout_s
    part: Any = None
    while time.monotonic() < deadline:
        part = await describe_quorum(port)
        if int(part.error_code) == 0 and part.high_watermark > past:
            ends = {r.replica_id: r.log_end_offset for r in part.current_voters}
            if all(ends.get(v, -1) >= part.high_watermark for v in voters):
                return part
        await asyncio.sleep(0.2)
    raise AssertionError(f"voters {voters} not caught up past {past}: {part}")


async def wait_port(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            _r, w = await asyncio.open_connection(HOST, port)
        except OSError:
            await asyncio.sleep(0.2)
            continue
        w.close()
        return
    raise AssertionError(f"nothing listens on {port} after {timeout_s}s")


async def create_topic(port: int, name: str, partitions: int) -> int:
    body = {
        "topics": [
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
        ],
        "timeout_ms": 30000,
        "validate_only": False,
    }
    resp = await _request(port, 19, body, 7)
    return int(resp.topics[0].error_code)


def test_three_serve_processes_form_a_quorum_and_fail_over(cluster: dict[int, Node]) -> None:
    nodes = cluster

    async def body() -> None:
        # one node alone has no majority: it waits (serving its CONTROLLER listener), and says
        # once what it waits for
        nodes[1].start()
        await wait_port(nodes[1].controller_port, START_TIMEOUT_S)
        await asyncio.sleep(3)  # several election timeouts
        assert nodes[1].alive()
        assert nodes[1].log().count("waits for a leader of the metadata quorum") == 1, nodes[1].log()
        part = await describe_quorum(nodes[1].controller_port)
        assert int(part.error_code) == 6 and part.leader_id == -1  # NOT_LEADER_OR_FOLLOWER, no leader
        for nid in IDS[1:]:  # the others at about the same time
            nodes[nid].start()
        leader, part = await wait_for_leader(nodes, START_TIMEOUT_S)
        assert [r.replica_id for r in part.current_voters] == list(IDS)
        # the active controller's node finishes its start (registration, internal topics)
        await wait_port(nodes[leader].port, START_TIMEOUT_S)
        before = (await describe_quorum(nodes[leader].controller_port)).high_watermark
        assert await create_topic(nodes[leader].port, "replicated", 3) == 0
        part = await wait_replicated(nodes[leader].controller_port, set(IDS), 30, before)
        created_at = part.high_watermark

        # kill -9 the leader: the two others elect a new one
        old = leader
        nodes[old].kill9()
        new, part = await wait_for_leader(nodes, 30, not_=old)
        assert new != old and part.leader_epoch > 0
        # the killed node comes back, follows the new leader, catches up
        nodes[old].start()
        new2, _ = await wait_for_leader(nodes, START_TIMEOUT_S)
        part = await wait_replicated(nodes[new2].controller_port, set(IDS), 30, created_at - 1)
        assert part.high_watermark >= created_at
        # the new active controller's node finished its start; a creation there reaches all three
        await wait_port(nodes[new2].port, START_TIMEOUT_S)
        before = part.high_watermark
        assert await create_topic(nodes[new2].port, "after-failover", 1) == 0
        await wait_replicated(nodes[new2].controller_port, set(IDS), 30, before)
        assert all(n.alive() for n in nodes.values())

        # SIGTERM of the leader: it exits cleanly (resigning), the two others elect a successor
        epoch = (await describe_quorum(nodes[new2].controller_port)).leader_epoch
        assert nodes[new2].stop() == 0
        new3, part = await wait_for_leader(nodes, 30, not_=new2)
        assert new3 != new2 and part.leader_epoch > epoch

    try:
        asyncio.run(body())
        # a clean stop (SIGTERM) of every other node
        alive = [nid for nid, n in nodes.items() if n.alive()]
        for nid in alive:  # together (one by one, the last would have no quorum left)
            proc = nodes[nid].proc
            assert proc is not None
            proc.send_signal(signal.SIGTERM)
        assert {nid: nodes[nid].stop() for nid in alive} == dict.fromkeys(alive, 0)
    except BaseException:
        for n in nodes.values():
            print(f"---- node {n.node_id}\n{n.log()[-6000:]}")
        raise
