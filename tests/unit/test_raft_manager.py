"""RaftManager on a real MetadataLog and quorum-state file, driven by a manual clock/scheduler:
the one-voter quorum (elects itself, commits on its own flush, keeps log and epoch across a
restart), listeners, wait_committed, snapshots, and a multi-voter node's use of the transport."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from strom.clock import ManualClock
from strom.config import LogConfig
from strom.protocol.records import build_batch
from strom.raft.log import OffsetAndEpoch
from strom.raft.manager import RaftManager, RaftManagerClosed, RaftManagerConfig
from strom.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    Errors,
    FetchRequest,
    FetchResponse,
    LeaderIdAndEpoch,
    RaftRequest,
    RaftResponse,
    VoteRequest,
    VoteResponse,
)
from strom.raft.metadata_log import MetadataLog
from strom.raft.quorum import CommittedBatch, LeaderAndEpoch, NotLeaderError, RaftConfig
from strom.testing.scheduler import ManualScheduler


@dataclass
class Recorder:
    commits: list[CommittedBatch] = field(default_factory=list)
    snapshots: list[OffsetAndEpoch] = field(default_factory=list)
    leaders: list[LeaderAndEpoch] = field(default_factory=list)

    def handle_commit(self, batches: list[CommittedBatch]) -> None:
        self.commits.extend(batches)

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self.snapshots.append(snapshot_id)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leaders.append(leader)

    def records(self) -> list[bytes]:
        return [r for b in self.commits for r in b.records]


@dataclass
class FakeTransport:
    sent: list[tuple[int, int, RaftRequest]] = field(default_factory=list)
    on_response: Callable[[int, int, RaftResponse], None] | None = None
    closed: bool = False

    def start(self, on_response: Callable[[int, int, RaftResponse], None]) -> None:
        self.on_response = on_response

    def send(self, destination: int, correlation_id: int, request: RaftRequest) -> None:
        self.sent.append((destination, correlation_id, request))

    async def close(self) -> None:
        self.closed = True


class Env:
    def __init__(self, tmp: Path) -> None:
        self.dir = tmp
        self.clock = ManualClock()
        self.scheduler = ManualScheduler(self.clock)

    def manager(
        self,
        voters: frozenset[int] = frozenset({1}),
        transport: FakeTransport | None = None,
        max_bytes: int = 1 << 20,
    ) -> RaftManager:
        import random

        return RaftManager(
            RaftConfig(1, voters, cluster_id="c1"),
            RaftManagerConfig(
                self.dir, LogConfig(segment_bytes=1 << 20), max_bytes_between_snapshots=max_bytes,
                shutdown_timeout_ms=100,
            ),
            transport=transport,
            clock=self.clock,
            scheduler=self.scheduler,
            rng=random.Random(7),
        )


def run(body: Callable[[Env], Coroutine[Any, Any, None]], tmp: Path) -> None:
    asyncio.run(body(Env(tmp)))


def test_one_voter_starts_as_leader_and_commits_on_its_flush(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        m = env.manager()
        rec = Recorder()
        m.register(rec)
        m.start()
        assert m.is_leader and m.leader_and_epoch == LeaderAndEpoch(1, 1)
        off = await m.append([b"a", b"b"])
        waiter = asyncio.ensure_future(m.wait_committed(off))
        await env.scheduler.settle()
        assert not waiter.done()  # nothing commits before the linger flush
        env.scheduler.advance(m.raft_config.append_linger_ms)
        await env.scheduler.settle()
        assert waiter.done() and waiter.result() > off
        assert rec.records() == [b"a", b"b"]
        assert rec.leaders[-1] == LeaderAndEpoch(1, 1)
        assert m.transport.__class__.__name__ == "NullTransport"
        await m.shutdown()
        assert m.closed

    run(body, tmp_path)


def test_restart_keeps_log_and_epoch(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        m = env.manager()
        m.start()
        for i in range(3):
            off = await m.append([f"r{i}".encode()])
        env.scheduler.advance(100)
        await m.wait_committed(off)
        epoch = m.leader_and_epoch.epoch
        await m.shutdown()

        m2 = env.manager()
        rec = Recorder()
        m2.register(rec)
        m2.start()
        # a restarted only voter stands again at once, one epoch up
        assert m2.is_leader and m2.leader_and_epoch.epoch == epoch + 1
        env.scheduler.advance(100)
        await env.scheduler.settle()
        assert rec.records() == [b"r0", b"r1", b"r2"]
        off = await m2.append([b"r3"])
        env.scheduler.advance(100)
        await m2.wait_committed(off)
        assert rec.records()[-1] == b"r3"
        await m2.shutdown()

    run(body, tmp_path)


def test_wait_committed_fails_when_leadership_is_lost(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        t = FakeTransport()
        m = env.manager(frozenset({1, 2, 3}), t)
        m.start()
        # become candidate, win with node 2's vote
        env.scheduler.advance(2 * m.raft_config.election_timeout_ms)
        votes = [(d, c, r) for d, c, r in t.sent if isinstance(r, VoteRequest)]
        assert {d for d, _c, _r in votes} == {2, 3}
        d, c, r = votes[0]
        assert t.on_response is not None
        t.on_response(d, c, VoteResponse(Errors.NONE, -1, r.candidate_epoch, True))
        assert m.is_leader
        assert any(isinstance(req, BeginQuorumEpochRequest) for _d, _c, req in t.sent)
        off = await m.append([b"x"])
        waiter = asyncio.ensure_future(m.wait_committed(off))
        await env.scheduler.settle()
        # a higher epoch's leader appears: this node follows it, the waiter fails
        resp = await m.handle_request(3, BeginQuorumEpochRequest(3, m.leader_and_epoch.epoch + 1, "c1"))
        assert isinstance(resp, BeginQuorumEpochResponse) and resp.error_code == Errors.NONE
        await env.scheduler.settle()
        assert waiter.done() and isinstance(waiter.exception(), NotLeaderError)
        assert m.leader_and_epoch.leader_id == 3
        with pytest.raises(NotLeaderError):
            await m.append([b"y"])
        with pytest.raises(NotLeaderError):
            m.describe_quorum()
        await m.shutdown()
        assert t.closed

    run(body, tmp_path)


def test_parked_fetch_is_answered_when_data_arrives(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        t = FakeTransport()
        m = env.manager(frozenset({1, 2, 3}), t)
        m.start()
        env.scheduler.advance(2 * m.raft_config.election_timeout_ms)
        assert t.on_response is not None
        for d, c, r in list(t.sent):
            if isinstance(r, VoteRequest):
                t.on_response(d, c, VoteResponse(Errors.NONE, -1, r.candidate_epoch, True))
        assert m.is_leader
        epoch = m.leader_and_epoch.epoch
        end = m.metadata_log.end_offset if m.metadata_log else 0
        last_epoch = m.metadata_log.last_fetched_epoch() if m.metadata_log else 0
        fetch = asyncio.ensure_future(
            m.handle_request(2, FetchRequest(2, epoch, end, last_epoch, 0, 1 << 20, 500, "c1"))
        )
        await env.scheduler.settle()
        assert not fetch.done()  # parked: the follower is at the end of the log
        await m.append([b"new"])
        await env.scheduler.settle()
        resp = fetch.result()
        assert isinstance(resp, FetchResponse) and resp.error_code == Errors.NONE and resp.records
        info = m.describe_quorum()
        assert info.leader_id == 1 and [v.replica_id for v in info.current_voters] == [1, 2, 3]
        await m.shutdown()

    run(body, tmp_path)


def test_maybe_snapshot_after_enough_bytes(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        m = env.manager(max_bytes=100)
        rec = Recorder()
        m.register(rec)
        m.start()
        off = await m.append([b"x" * 60])
        env.scheduler.advance(100)
        await m.wait_committed(off)
        end = rec.commits[-1].last_offset + 1
        image = build_batch([(None, b"image", [], 0)])
        assert m.maybe_snapshot(end, image) is None  # 60 bytes < 100
        off = await m.append([b"y" * 30, b"z" * 30])
        env.scheduler.advance(100)
        await m.wait_committed(off)
        end = rec.commits[-1].last_offset + 1
        assert m.maybe_snapshot(end - 1, image) is None  # not a batch boundary
        sid = m.maybe_snapshot(end, lambda: image)
        assert sid == OffsetAndEpoch(end, rec.commits[-1].epoch)
        assert m.metadata_log is not None and m.metadata_log.latest_snapshot_id() == sid
        assert m.maybe_snapshot(end, image, force=True) is None  # already there
        await m.shutdown()

        m2 = env.manager(max_bytes=100)
        rec2 = Recorder()
        m2.register(rec2)
        m2.start()
        assert rec2.snapshots == [sid]
        await m2.shutdown()

    run(body, tmp_path)


def test_closed_manager_refuses(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        m = env.manager()
        with pytest.raises(RaftManagerClosed):
            await m.append([b"x"])
        m.start()
        await m.shutdown()
        with pytest.raises(RaftManagerClosed):
            await m.append([b"x"])
        with pytest.raises(ValueError):
            RaftManager(RaftConfig(1, frozenset({1, 2})), RaftManagerConfig(tmp_path, LogConfig()))

    run(body, tmp_path)


def test_flush_cost(tmp_path: Path) -> None:
    """The module docstring's claim: one linger window's flush of the metadata log is cheap
    enough to run on the event loop. Median of 20 small append+flush rounds under 50 ms."""
    log = MetadataLog.open(tmp_path)
    costs = []
    for i in range(20):
        log.append_as_leader([os.urandom(200) for _ in range(10)], 1, i)
        t0 = time.perf_counter()
        log.flush()
        costs.append(time.perf_counter() - t0)
    log.close()
    costs.sort()
    median_ms = costs[len(costs) // 2] * 1000
    print(f"metadata log flush: median {median_ms:.2f} ms, max {costs[-1] * 1000:.2f} ms")
    assert median_ms < 50


def test_from_broker_config(tmp_path: Path) -> None:
    from strom.config import BrokerConfig
    from strom.raft.transport import SocketRaftTransport

    async def body() -> None:
        cfg = BrokerConfig.from_sources(
            overrides={
                "log.dirs": str(tmp_path / "data"),
                "metadata.log.segment.bytes": "65536",
                "controller.quorum.election.timeout.ms": "777",
            }
        )
        m = RaftManager.from_broker_config(cfg, "cid")
        assert m.raft_config.voters == {cfg.node_id} and m.raft_config.election_timeout_ms == 777
        assert m.config.log_config.segment_bytes == 65536
        assert m.config.metadata_log_dir == tmp_path / "data"
        m.start()
        assert m.is_leader and (tmp_path / "data" / "__cluster_metadata-0").is_dir()
        await m.shutdown()

        cfg3 = BrokerConfig.from_sources(
            overrides={
                "log.dirs": str(tmp_path / "data3"),
                "node.id": "1",
                "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "controller.listener.names": "CONTROLLER",
                "controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095",
            }
        )
        m3 = RaftManager.from_broker_config(cfg3, "cid")
        assert isinstance(m3.transport, SocketRaftTransport)
        assert m3.transport.endpoints == {2: ("127.0.0.1", 9094), 3: ("127.0.0.1", 9095)}

    asyncio.run(body())


def test_append_now_commits_on_the_loop_never_inside_the_call(tmp_path: Path) -> None:
    """The controller's synchronous append: with no append linger the batch commits as soon as
    the loop runs (no clock needs to advance), but never from inside ``append_now`` itself (the
    caller notes what it appended before the commit is delivered)."""

    async def body(env: Env) -> None:
        import random

        m = RaftManager(
            RaftConfig(1, frozenset({1}), cluster_id="c1", append_linger_ms=0),
            RaftManagerConfig(env.dir, LogConfig(segment_bytes=1 << 20), shutdown_timeout_ms=100),
            clock=env.clock,
            scheduler=env.scheduler,
            rng=random.Random(7),
        )
        rec = Recorder()
        m.register(rec)
        m.start()
        await env.scheduler.settle()
        assert m.is_leader
        seen_inside: list[int] = []

        class Probe:
            def handle_commit(self, batches: list[CommittedBatch]) -> None:
                seen_inside.extend(b.last_offset for b in batches if inside)

            def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
                pass

            def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
                pass

        m.register(Probe())
        inside = True
        last = m.append_now([b"x"])
        inside = False
        assert seen_inside == [] and rec.records() == []
        await env.scheduler.settle()  # the loop runs; the manual clock never moved
        assert rec.records() == [b"x"]
        assert m.high_watermark > last and m.leader_high_watermark == m.high_watermark
        await m.shutdown()

    run(body, tmp_path)


def test_follower_learns_the_leaders_high_watermark_from_fetch_answers(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        t = FakeTransport()
        m = env.manager(voters=frozenset({1, 2, 3}), transport=t)
        m.start()
        assert m.leader_high_watermark is None
        # node 2 leads epoch 5: its BeginQuorumEpoch makes this node a follower, which fetches
        await m.handle_request(2, BeginQuorumEpochRequest(2, 5, "c1"))
        env.scheduler.advance(0)
        await env.scheduler.settle()
        fetches = [(d, c, r) for d, c, r in t.sent if isinstance(r, FetchRequest)]
        assert fetches and fetches[-1][0] == 2
        _d, cid, _r = fetches[-1]
        assert t.on_response is not None
        t.on_response(2, cid, FetchResponse(Errors.NONE, 0, 0, current_leader=LeaderIdAndEpoch(2, 5)))
        assert m.leader_high_watermark == 0
        await m.shutdown()

    run(body, tmp_path)
