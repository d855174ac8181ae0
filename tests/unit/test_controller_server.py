"""The controller runtime on a real one-voter RaftNode (in-memory log, manual clock)."""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

import pytest

from strom.clock import ManualClock
from strom.controller.quorum_controller import BROKER_HEARTBEAT, BROKER_REGISTRATION, CREATE_TOPICS
from strom.controller.server import ControllerServer, NotControllerError
from strom.metadata.records import TopicRecord
from strom.protocol.errors import ErrorCode
from strom.raft.quorum import RaftConfig, RaftNode
from strom.testing.controller import create_topic_request, heartbeat_request, registration_request
from strom.testing.raft import MemoryQuorumStateStore, MemoryRaftLog


class OneVoter:
    """A controller on its own one-voter quorum, pumped by hand."""

    def __init__(self, log: MemoryRaftLog | None = None, store: MemoryQuorumStateStore | None = None,
                 **kw: Any) -> None:
        self.clock = ManualClock()
        self.log = log or MemoryRaftLog()
        self.store = store or MemoryQuorumStateStore()
        self.server = ControllerServer(1, self.clock, cluster_id="test-cluster", rnd=random.Random(0), **kw)
        self.node = RaftNode(
            RaftConfig(node_id=1, voters=frozenset({1})),
            self.log,
            self.store,
            self.server,
            random.Random(1),
            self.clock.monotonic_ms(),
        )
        self.server.attach(self.node)

    def start(self) -> None:
        """Lead, and register and unfence broker 1 (topics need a live broker)."""
        self.pump()
        reg = self.server.submit(BROKER_REGISTRATION, registration_request(1, uuid.UUID(int=1)))
        self.pump()
        assert reg.result()["error_code"] == 0
        epoch = reg.result()["broker_epoch"]
        hb = self.server.submit(BROKER_HEARTBEAT, heartbeat_request(1, epoch, self.log.end_offset))
        self.pump()
        assert hb.result()["is_fenced"] is False

    def pump(self, ms: int = 100) -> None:
        """Run the node's timers for ``ms`` of manual time."""
        end = self.clock.monotonic_ms() + ms
        while True:
            now = self.clock.monotonic_ms()
            self.node.poll(now)
            due = self.node.next_deadline()
            if due <= now:
                continue
            if due > end:
                break
            self.clock.advance(due - now)
        self.clock.advance(max(0, end - self.clock.monotonic_ms()))


def test_bootstrap_written_once_and_create_topic_answers_on_commit() -> None:
    async def run() -> None:
        q = OneVoter()
        q.start()
        assert q.server.is_active and q.server.controller_id == 1
        assert q.server.committed.features.finalized  # the bootstrap records committed
        fut = q.server.submit(CREATE_TOPICS, create_topic_request("t", 3, 1))
        assert not fut.done()  # appended, not yet committed
        # the next operation already sees the uncommitted topic
        dup = q.server.submit(CREATE_TOPICS, create_topic_request("t", 3, 1))
        assert dup.done()
        assert dup.result()["topics"][0]["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
        q.pump()
        assert fut.done()
        topic = fut.result()["topics"][0]
        assert topic["error_code"] == 0 and topic["num_partitions"] == 3
        assert q.server.committed.replication.topic("t") is not None
        assert q.server.waiting == 0

    asyncio.run(run())


def test_losing_leadership_fails_waiters_with_not_controller() -> None:
    async def run() -> None:
        q = OneVoter()
        q.start()
        fut = q.server.submit(CREATE_TOPICS, create_topic_request("t", 1, 1))
        q.node.resign(q.clock.monotonic_ms())
        q.node.poll(q.clock.monotonic_ms())
        assert fut.done()
        with pytest.raises(NotControllerError):
            fut.result()
        assert not q.server.is_active
        # a request now fails at once
        late = q.server.submit(CREATE_TOPICS, create_topic_request("u", 1, 1))
        assert late.done() and isinstance(late.exception(), NotControllerError)

    asyncio.run(run())


def test_failed_append_resigns_and_rebuilds_from_committed() -> None:
    async def run() -> None:
        q = OneVoter()
        q.start()
        ok = q.server.submit(CREATE_TOPICS, create_topic_request("a", 1, 1))
        q.pump()
        assert ok.result()["topics"][0]["error_code"] == 0

        def broken(*_: Any) -> Any:
            raise OSError("disk gone")

        original = q.log.append_as_leader
        q.log.append_as_leader = broken  # type: ignore[method-assign]
        bad = q.server.submit(CREATE_TOPICS, create_topic_request("b", 1, 1))
        assert isinstance(bad.exception(), NotControllerError)
        assert not q.server.is_active
        q.log.append_as_leader = original  # type: ignore[method-assign]
        q.pump(5000)  # a new election: the node leads again, rebuilt from the committed log
        assert q.server.is_active
        assert q.server.active is not None
        assert q.server.active.replication.topic("a") is not None
        assert q.server.active.replication.topic("b") is None
        again = q.server.submit(CREATE_TOPICS, create_topic_request("b", 1, 1))
        q.pump()
        assert again.result()["topics"][0]["error_code"] == 0

    asyncio.run(run())


def test_restart_replays_committed_log_and_writes_bootstrap_only_once() -> None:
    async def run() -> None:
        initial = [TopicRecord(name="old", topic_id=uuid.UUID(int=7))]
        q = OneVoter(initial_records=initial)
        q.start()
        fut = q.server.submit(CREATE_TOPICS, create_topic_request("t", 2, 1))
        q.pump()
        fut.result()
        records_before = sum(1 for b in q.log.batches())
        q2 = OneVoter(log=q.log, store=q.store, initial_records=initial)
        q2.log.restart()
        q2.pump(5000)
        assert q2.server.is_active
        ctl = q2.server.active
        assert ctl is not None
        assert ctl.replication.topic("t") is not None
        info = ctl.replication.topic("old")
        assert info is not None
        # only a leader-change batch was added: no second bootstrap
        new_batches = sum(1 for b in q2.log.batches()) - records_before
        assert new_batches == 1

    asyncio.run(run())


def test_registration_heartbeat_and_periodic_fencing() -> None:
    async def run() -> None:
        q = OneVoter()
        q.pump()
        reg = q.server.submit(BROKER_REGISTRATION, registration_request(1, uuid.UUID(int=1)))
        q.pump()
        epoch = reg.result()["broker_epoch"]
        assert epoch > 0
        hb = q.server.submit(BROKER_HEARTBEAT, heartbeat_request(1, epoch, q.log.end_offset))
        q.pump()
        assert hb.result()["is_fenced"] is False
        # silence past the session timeout: the periodic work fences the broker
        q.clock.advance(q.server.config.broker_session_timeout_ms + 1)
        assert q.server.next_poll_ms() <= q.clock.monotonic_ms()
        assert q.server.maybe_poll() == 1
        q.pump()
        reg_state = q.server.committed.cluster.registration(1)
        assert reg_state is not None and reg_state.fenced

    asyncio.run(run())


def test_snapshot_after_max_bytes_and_restart_from_it() -> None:
    async def run() -> None:
        q = OneVoter(snapshot_max_bytes=200)
        q.start()
        for i in range(5):
            f = q.server.submit(CREATE_TOPICS, create_topic_request(f"t{i}", 2, 1))
            q.pump()
            f.result()
        assert q.server.maybe_snapshot()
        assert q.log.latest_snapshot_id() is not None
        assert q.log.start_offset > 0
        q2 = OneVoter(log=q.log, store=q.store)
        q2.log.restart()
        assert all(q2.server.committed.replication.topic(f"t{i}") is not None for i in range(5))
        q2.pump(5000)
        ctl = q2.server.active
        assert ctl is not None and ctl.replication.topic("t4") is not None

    asyncio.run(run())


def test_config_records_replayed_by_standby_state() -> None:
    # the committed state is fed only by handle_commit: a standby sees what the leader commits
    async def run() -> None:
        q = OneVoter()
        q.start()
        f = q.server.submit(CREATE_TOPICS, create_topic_request("c", 1, 1, configs={"retention.ms": "5"}))
        assert q.server.committed.configs.topic_config("c", "retention.ms") is None
        q.pump()
        f.result()
        assert q.server.committed.configs.topic_config("c", "retention.ms") == "5"

    asyncio.run(run())
