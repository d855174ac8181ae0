"""Three RaftManagers in one process on loopback ports (real sockets, real MetadataLogs,
``strom.raft.transport``): elect, append, kill the leader (sockets and tasks closed, no
resignation), a new leader within election timeouts, the old one rejoins and catches up, all
three logs agree. ``measure_failover`` is also run by ``python -m`` for the median over trials."""

from __future__ import annotations

import asyncio
import random
import socket
import statistics
import time
from pathlib import Path

import pytest

from strom.config import LogConfig
from strom.raft.log import OffsetAndEpoch
from strom.raft.manager import RaftManager, RaftManagerConfig
from strom.raft.quorum import CommittedBatch, LeaderAndEpoch, RaftConfig
from strom.raft.transport import SocketRaftTransport, serve_raft

pytestmark = pytest.mark.integration

ELECTION_TIMEOUT_MS = 300
FETCH_TIMEOUT_MS = 600


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


class Cluster:
    def __init__(self, root: Path, seed: int) -> None:
        self.root = root
        self.ports = dict(zip((1, 2, 3), free_ports(3), strict=True))
        self.rng = random.Random(seed)
        self.managers: dict[int, RaftManager] = {}
        self.servers: dict[int, asyncio.Server] = {}
        self.recorders: dict[int, Recorder] = {}

    async def start(self, nid: int) -> None:
        cfg = RaftConfig(
            nid,
            frozenset(self.ports),
            election_timeout_ms=ELECTION_TIMEOUT_MS,
            fetch_timeout_ms=FETCH_TIMEOUT_MS,
            election_backoff_max_ms=300,
            request_timeout_ms=500,
            fetch_max_wait_ms=200,
            cluster_id="test-cluster",
        )
        transport = SocketRaftTransport(
            {o: ("127.0.0.1", p) for o, p in self.ports.items() if o != nid}, request_timeout_ms=500
        )
        m = RaftManager(
            cfg,
            RaftManagerConfig(self.root / f"node{nid}", LogConfig(segment_bytes=1 << 20)),
            transport=transport,
            rng=random.Random(self.rng.random()),
        )
        rec = Recorder()
        m.register(rec)
        self.recorders[nid] = rec
        m.start()
        self.managers[nid] = m
        self.servers[nid] = await serve_raft(m, "127.0.0.1", self.ports[nid])

    async def kill(self, nid: int) -> None:
        self.servers.pop(nid).close()
        await self.managers.pop(nid).kill()

    async def stop_all(self) -> None:
        for nid in list(self.managers):
            self.servers.pop(nid).close()
            await self.managers.pop(nid).shutdown()

    def leaders(self) -> list[int]:
        return [n for n, m in self.managers.items() if m.is_leader]

    async def wait_leader(self, timeout_s: float = 10.0, exclude: int | None = None) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ls = [n for n in self.leaders() if n != exclude]
            if len(ls) == 1:
                return ls[0]
            await asyncio.sleep(0.005)
        raise AssertionError(f"no leader within {timeout_s}s: {self.leaders()}")

    async def wait_records(self, nid: int, want: list[bytes], timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.recorders[nid].records == want:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"node {nid} has {self.recorders[nid].records}, want {want}")


async def _scenario(root: Path, seed: int) -> float:
    """Returns the election time (ms) after the leader kill."""
    c = Cluster(root, seed)
    try:
        for nid in (1, 2, 3):
            await c.start(nid)
        leader = await c.wait_leader()
        m = c.managers[leader]
        off = await m.append([b"a", b"b"])
        await asyncio.wait_for(m.wait_committed(off), 5)
        for nid in (1, 2, 3):
            await c.wait_records(nid, [b"a", b"b"])
        old_epoch = m.leader_and_epoch.epoch

        killed_at = time.monotonic()
        await c.kill(leader)
        new_leader = await c.wait_leader(exclude=leader)
        elected_ms = (time.monotonic() - killed_at) * 1000
        assert c.managers[new_leader].leader_and_epoch.epoch > old_epoch

        m2 = c.managers[new_leader]
        off = await m2.append([b"c"])
        await asyncio.wait_for(m2.wait_committed(off), 5)

        await c.start(leader)  # the old leader rejoins and catches up
        for nid in (1, 2, 3):
            await c.wait_records(nid, [b"a", b"b", b"c"])
        assert len(c.leaders()) == 1
        # the committed prefix is byte-identical on all three nodes
        ends = {nid: c.managers[nid].high_watermark for nid in c.managers}
        prefix = min(ends.values())
        reads = {nid: _committed_bytes(c.managers[nid], prefix) for nid in c.managers}
        assert len(set(reads.values())) == 1, reads
        return elected_ms
    finally:
        await c.stop_all()


def _committed_bytes(m: RaftManager, end: int) -> bytes:
    from strom.protocol.records import iter_batches

    lg = m.metadata_log
    assert lg is not None
    data = lg.read(0, 1 << 24)
    out = b""
    for pos, h in iter_batches(data):
        if h.base_offset >= end:
            break
        out += data[pos : pos + h.batch_length + 12]
    return out


def test_three_managers_fail_over_and_agree(tmp_path: Path) -> None:
    elected_ms = asyncio.run(_scenario(tmp_path, 1))
    # a follower stands after fetch.timeout (600 ms) plus at most one election round
    assert elected_ms < FETCH_TIMEOUT_MS + 2 * ELECTION_TIMEOUT_MS + 1000


def measure_failover(trials: int = 10) -> list[float]:
    import tempfile

    times = []
    for i in range(trials):
        with tempfile.TemporaryDirectory() as d:
            times.append(asyncio.run(_scenario(Path(d), 100 + i)))
    return times


if __name__ == "__main__":
    ts = measure_failover()
    print("election after leader kill (ms):", [round(t) for t in ts], "median", round(statistics.median(ts)))
