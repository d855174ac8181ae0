"""The start of a quorum node, in process: Kafka's order (controller first). A node of a
three-voter quorum whose two other voters are down serves its CONTROLLER listener (the voters
must be able to ask it for its vote) and nothing else while it waits for a majority; it answers
the quorum's requests there (DescribeQuorum: NOT_LEADER_OR_FOLLOWER, no leader), and its start
can be cancelled and the broker stopped cleanly. A broker-only node is an observer of the
quorum: it follows the metadata log from the voters and registers with the active controller
over the wire."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import pytest

from strom.client.connection import KafkaConnection
from strom.config import BrokerConfig
from strom.log.log_dirs import format_dirs
from strom.server.broker import Broker

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind((HOST, 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _config(tmp: Path, roles: str, node_id: int, ports: list[int]) -> BrokerConfig:
    port, controller, other1, other2 = ports
    values = {
        "process.roles": roles,
        "node.id": str(node_id),
        "controller.quorum.voters": f"1@{HOST}:{controller},2@{HOST}:{other1},3@{HOST}:{other2}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(tmp / "data"),
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "log.cleaner.enable": "false",
    }
    if "controller" in roles:
        values["listeners"] = f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller}"
    else:
        values["listeners"] = f"PLAINTEXT://{HOST}:{port}"
    return BrokerConfig.from_sources(None, values)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((HOST, port)) == 0


def test_controller_listener_serves_first_while_waiting_for_a_majority(tmp_path: Path) -> None:
    ports = free_ports(4)
    config = _config(tmp_path, "broker,controller", 1, ports)
    format_dirs(config.log_dirs, config.metadata_log_dir, 1, "qV0t3rsTestC1usterIdAA")

    async def body() -> None:
        broker = Broker(config)
        assert broker.quorum is not None  # three voters: the quorum whatever the flag says
        starting = asyncio.ensure_future(broker.start())
        try:
            for _ in range(500):
                if _listening(ports[1]):
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(1.5)  # past an election timeout: still no majority
            assert not starting.done()
            assert _listening(ports[1]) and not _listening(ports[0])  # CONTROLLER only
            assert broker.raft_manager is not None and broker.raft_manager.leader_and_epoch.leader_id is None
            conn = await KafkaConnection.open(HOST, ports[1])
            try:
                partitions = [{"partition_index": 0}]
                req = {"topics": [{"topic_name": "__cluster_metadata", "partitions": partitions}]}
                resp = await conn.request(55, req, version=2)
            finally:
                await conn.close()
            part = resp.topics[0].partitions[0]
            assert int(part.error_code) == 6 and part.leader_id == -1
        finally:
            starting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await starting
            await broker.stop()
        assert broker.raft_manager is None and not _listening(ports[1])

    asyncio.run(body())


def test_broker_only_node_follows_the_log_as_an_observer(tmp_path: Path) -> None:
    """A one-voter quorum (node 1, the quorum flag on) and a broker-only node 4 naming it in
    controller.quorum.voters: node 4 runs no controller, fetches the metadata log from node 1's
    CONTROLLER listener as an observer (DescribeQuorum at the leader lists it, caught up), its
    loader holds the topic created at node 1, and it registers with node 1's controller over the
    wire and finishes its start (its client listener serves)."""
    port, controller, port4 = free_ports(3)
    cluster_id = "qV0t3rsTestC1usterIdAA"
    common = {
        "strom.metadata.quorum.enable": "true",
        "controller.quorum.voters": f"1@{HOST}:{controller}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "log.cleaner.enable": "false",
    }
    voter_cfg = BrokerConfig.from_sources(None, {
        **common,
        "process.roles": "broker,controller",
        "node.id": "1",
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller}",
        "log.dirs": str(tmp_path / "n1"),
    })
    observer_cfg = BrokerConfig.from_sources(None, {
        **common,
        "process.roles": "broker",
        "node.id": "4",
        "listeners": f"PLAINTEXT://{HOST}:{port4}",
        "log.dirs": str(tmp_path / "n4"),
    })
    for cfg, nid in ((voter_cfg, 1), (observer_cfg, 4)):
        format_dirs(cfg.log_dirs, cfg.metadata_log_dir, nid, cluster_id)

    async def body() -> None:
        voter = Broker(voter_cfg)
        await voter.start()
        observer = Broker(observer_cfg)
        assert observer.quorum is not None and observer.quorum.controller is None
        starting = asyncio.ensure_future(observer.start())
        try:
            await asyncio.wait_for(asyncio.shield(starting), 60)
            await voter.create_topic_async("seen-by-observer", 2, {})
            mgr = voter.raft_manager
            assert mgr is not None
            info = None
            for _ in range(1000):
                info = mgr.describe_quorum()
                obs = {r.replica_id: r.log_end_offset for r in info.observers}
                image = observer.quorum.publisher.image
                if (
                    obs.get(4, -1) >= info.high_watermark
                    and image is not None
                    and image.topics.get_topic("seen-by-observer") is not None
                ):
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError(f"observer not caught up: {info}")
            assert [r.replica_id for r in info.current_voters] == [1]
            om = observer.raft_manager
            assert om is not None and not om.is_leader
            assert om.leader_and_epoch.leader_id == 1
            assert _listening(port4)
            assert observer.quorum.broker_epoch >= 0  # registered at node 1's controller
        finally:
            if not starting.done():
                starting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await starting
            await observer.stop()
            await voter.stop()

    asyncio.run(body())
