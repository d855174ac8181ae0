"""The start of a quorum node, in process: Kafka's order (controller first). A node of a
three-voter quorum whose two other voters are down serves its CONTROLLER listener (the voters
must be able to ask it for its vote) and nothing else while it waits for a majority; it answers
the quorum's requests there (DescribeQuorum: NOT_LEADER_OR_FOLLOWER, no leader), and its start
can be cancelled and the broker stopped cleanly. A broker-only node (an observer) is refused
with a clear error, as it is not supported yet."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from strom.client.connection import KafkaConnection
from strom.config import BrokerConfig, ConfigError
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


def test_broker_only_node_is_refused(tmp_path: Path) -> None:
    config = _config(tmp_path, "broker", 4, free_ports(4))
    format_dirs(config.log_dirs, config.metadata_log_dir, 4, "qV0t3rsTestC1usterIdAA")
    with pytest.raises(ConfigError, match=r"process\.roles=broker without controller is not supported yet"):
        Broker(config)
