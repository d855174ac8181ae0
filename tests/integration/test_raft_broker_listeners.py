"""The quorum through real broker listeners: three in-process strom Brokers, each with a
RaftManager as ``broker.raft_manager`` (as the composition root will set it), the managers'
transports pointed at the brokers' PLAINTEXT ports. Vote/BeginQuorumEpoch/Fetch go through
network.py, the handler registry, the Fetch handler's KRaft routing and kio's codecs. A leader
is elected, an append commits everywhere, and DescribeQuorum from strom's client on every node
answers as Kafka does (the leader describes the quorum; the others NOT_LEADER_OR_FOLLOWER)."""

from __future__ import annotations

import asyncio
import random
import socket
import time
from pathlib import Path

import pytest

from strom.client.connection import KafkaConnection
from strom.config import BrokerConfig, LogConfig
from strom.raft.log import OffsetAndEpoch
from strom.raft.manager import RaftManager, RaftManagerConfig
from strom.raft.quorum import CommittedBatch, LeaderAndEpoch, RaftConfig
from strom.raft.transport import SocketRaftTransport
from strom.server.broker import Broker


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Recorder:
    def __init__(self) -> None:
        self.records: list[bytes] = []

    def handle_commit(self, batches: list[CommittedBatch]) -> None:
        self.records.extend(r for b in batches for r in b.records)

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        pass

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        pass


pytestmark = pytest.mark.integration


def test_quorum_through_broker_listeners(tmp_path: Path) -> None:
    async def body() -> None:
        ports = dict(zip((1, 2, 3), free_ports(3), strict=True))
        brokers: dict[int, Broker] = {}
        managers: dict[int, RaftManager] = {}
        recorders: dict[int, Recorder] = {}
        try:
            for nid, port in ports.items():
                cfg = BrokerConfig.from_sources(
                    overrides={
                        "log.dirs": str(tmp_path / f"b{nid}"),
                        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                        "offsets.topic.num.partitions": "1",
                        "transaction.state.log.num.partitions": "1",
                        "share.coordinator.state.topic.num.partitions": "1",
                        "log.cleaner.enable": "false",
                        # the registry path: this test gives each broker its own raft manager
                        # (a broker on the quorum owns the manager of its own quorum)
                        "strom.metadata.quorum.enable": "false",
                    }
                )
                b = Broker(cfg)
                m = RaftManager(
                    RaftConfig(
                        nid,
                        frozenset(ports),
                        election_timeout_ms=300,
                        fetch_timeout_ms=600,
                        request_timeout_ms=500,
                        fetch_max_wait_ms=200,
                        cluster_id="c",
                    ),
                    RaftManagerConfig(tmp_path / f"meta{nid}", LogConfig()),
                    transport=SocketRaftTransport(
                        {o: ("127.0.0.1", p) for o, p in ports.items() if o != nid}, request_timeout_ms=500
                    ),
                    clock=b.clock,
                    rng=random.Random(nid),
                )
                recorders[nid] = Recorder()
                m.register(recorders[nid])
                b.raft_manager = m  # type: ignore[attr-defined]
                await b.start()
                m.start()
                brokers[nid], managers[nid] = b, m

            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and sum(m.is_leader for m in managers.values()) != 1:
                await asyncio.sleep(0.01)
            (leader,) = [n for n, m in managers.items() if m.is_leader]
            off = await managers[leader].append([b"x", b"y"])
            await asyncio.wait_for(managers[leader].wait_committed(off), 5)
            while time.monotonic() < deadline and any(r.records != [b"x", b"y"] for r in recorders.values()):
                await asyncio.sleep(0.01)
            assert all(r.records == [b"x", b"y"] for r in recorders.values())

            for nid, port in ports.items():
                conn = await KafkaConnection.open("127.0.0.1", port)
                try:
                    resp = await conn.request(
                        55,
                        {
                            "topics": [
                                {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}
                            ]
                        },
                        version=2,
                    )
                finally:
                    await conn.close()
                part = resp.topics[0].partitions[0]
                if nid == leader:
                    assert int(part.error_code) == 0
                    assert part.leader_id == leader and part.high_watermark > off
                    assert [r.replica_id for r in part.current_voters] == [1, 2, 3]
                    assert all(r.log_end_offset >= off + 1 for r in part.current_voters)
                else:
                    assert int(part.error_code) == 6  # NOT_LEADER_OR_FOLLOWER
                    assert part.leader_id == leader
        finally:
            for nid in list(managers):
                await managers[nid].shutdown()
            for b in brokers.values():
                await b.stop()

    asyncio.run(body())
