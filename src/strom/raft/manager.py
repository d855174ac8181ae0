"""The asyncio driver of one KRaft node (Kafka's ``KafkaRaftClientDriver`` + ``RaftManager``).

Theory of operation
-------------------
:class:`RaftManager` owns a :class:`~strom.raft.quorum.RaftNode` (the sans-IO KIP-595 state
machine), the node's :class:`~strom.raft.metadata_log.MetadataLog`
(``<metadata.log.dir>/__cluster_metadata-0``) and its
:class:`~strom.raft.quorum_state_file.FileQuorumStateStore` (``<metadata.log.dir>/quorum-state``).
It does exactly three things with them, all on the event loop thread:

* **Timers.** One task on the injected :class:`~strom.scheduler.Scheduler` is kept armed for
  :meth:`RaftNode.next_deadline`; when it fires the manager calls :meth:`RaftNode.poll`. Every
  other call into the node (a message, an append, a resignation) re-arms it, so the node is
  polled exactly when it has something to do. Time is the injected clock's ``monotonic_ms``.
* **Messages.** What the node returns is a list of :class:`~strom.raft.messages.Outbound`. A
  *request* goes to the :class:`RaftTransport` (one connection per voter, see
  :mod:`strom.raft.transport`), whose answer comes back through :meth:`RaftManager.receive`; a
  *response* completes the future of the inbound request it answers. Inbound requests (the
  server's handlers for Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch of ``__cluster_metadata``
  and FetchSnapshot) call :meth:`RaftManager.handle_request`, which hands the request to the
  node under a correlation id of the manager's own and awaits the node's answer: a Fetch the
  node parks (long poll) is answered when the node completes it. The node itself times out its
  outgoing requests (``request_timeout_ms``), so a lost connection is just a late answer.
* **Listeners.** The node has one listener, the manager; it fans ``handle_commit``,
  ``handle_load_snapshot`` and ``handle_leader_change`` out to the listeners registered with
  :meth:`register` *before* :meth:`start` (a listener registered later sees only what happens
  after it registered: the owner registers its publishers first, as Kafka's ``RaftManager``
  is given its listeners before ``startup``).

The owner's API: :meth:`start`, :meth:`append` (leader only, else
:class:`~strom.raft.quorum.NotLeaderError`), :meth:`wait_committed`, :attr:`leader_and_epoch`,
:attr:`leader_high_watermark`, :meth:`describe_quorum`, :meth:`maybe_snapshot`, :meth:`shutdown`.
The synchronous :meth:`append_now`, :meth:`resign` and :meth:`create_snapshot` are for an owner
that must append and replay without yielding to the loop in between (the controller, whose
event queue is the loop itself: :mod:`strom.controller.server`); they go through the manager,
which re-arms its timer, so the manager stays the only thing that drives the node.

A deadline that is already due (an append with ``controller.quorum.append.linger.ms=0``, a
parked fetch to complete) is polled on the event loop at once (``call_soon``), not through the
scheduler: on a :class:`~strom.testing.scheduler.ManualScheduler` a zero-delay task would wait
for the test to advance the clock, and an append must not wait for a clock.

One-voter quorum
----------------
The zero-setup ``strom serve`` is a combined node that is its own only voter
(``KRaftConfig.single_node``). Its node elects itself at the first poll (a quorum of one needs no
votes; a restarted leader stands again at once) and its high watermark is its own flushed
offset, so it needs no transport at all: :class:`NullTransport` is used, and any request the
node would send is a bug (it raises).

fsync on the event loop
-----------------------
The node flushes the log itself, ``controller.quorum.append.linger.ms`` (25 ms) after the first
append of a linger window (one fsync per window, however many appends it holds), and a follower
flushes after each fetched chunk. This driver runs those flushes on the loop thread, and that
is a deliberate choice: the metadata log is small (KBs per window; the controller batches its
writes), one ``fdatasync`` of one segment costs about a millisecond on a local SSD
(``tests/unit/test_raft_manager.py::test_flush_cost`` measures it and fails above 50 ms), and
moving it to a thread would need a lock around every log read and append of the state machine
(the node reads the log to answer fetches while a flush would be running) for a gain of at most
one fsync per 25 ms. The data partitions' flushes, which are large, stay off the loop as
before. If the metadata log ever grows hot (a disk with 10 ms fsyncs), the place to change is
:meth:`_on_timer`: flush in a worker with the node's ``flush`` deferred.

Snapshots
---------
The owner (the controller or the broker's metadata loader) calls :meth:`maybe_snapshot` after
applying committed batches; the manager counts the bytes of committed records since the last
snapshot and, once ``metadata.log.max.record.bytes.between.snapshots`` is reached, asks for the
image's bytes and stores the snapshot at a committed batch boundary (Kafka's
``SnapshotGenerator``; the interval trigger ``metadata.log.max.snapshot.interval.ms`` is the
owner's to call with ``force=True``).

Errors: :class:`~strom.raft.quorum.NotLeaderError` from :meth:`append` and
:meth:`describe_quorum` on a non-leader, and from :meth:`wait_committed` when the leadership the
append was made in ends before it committed (the write may or may not survive: the caller
renounces, as Kafka's QuorumController does). :class:`RaftManagerClosed` after
:meth:`shutdown`. Storage failures (:class:`~strom.raft.log.RaftStorageError`) propagate.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from strom.clock import Clock, RealClock
from strom.config import LogConfig
from strom.raft.log import OffsetAndEpoch
from strom.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    Outbound,
    RaftMessage,
    RaftRequest,
    RaftResponse,
    VoteRequest,
)
from strom.raft.metadata_log import MetadataLog
from strom.raft.quorum import (
    CommittedBatch,
    LeaderAndEpoch,
    NotLeaderError,
    QuorumInfo,
    RaftConfig,
    RaftListener,
    RaftNode,
    Resigned,
)
from strom.raft.quorum_state_file import FileQuorumStateStore
from strom.scheduler import AsyncioScheduler, Scheduler, TaskHandle

if TYPE_CHECKING:
    from strom.config import BrokerConfig
    from strom.metadata.quorum_config import KRaftConfig

__all__ = [
    "NullTransport",
    "RaftManager",
    "RaftManagerClosed",
    "RaftManagerConfig",
    "RaftTransport",
]

log = logging.getLogger("strom.raft.manager")

_REQUEST_TYPES = (
    VoteRequest,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
)


_MAX_TIMER_MS = 60_000  # the node's "nothing to do" is 2**62: wake up now and then anyway


class RaftManagerClosed(Exception):
    """The manager was shut down (or never started)."""


class RaftTransport(Protocol):
    """Outbound requests to the other nodes (:mod:`strom.raft.transport`). ``send`` must not
    block: it queues the request; the answer is handed to the ``on_response`` callback given to
    :meth:`start` as ``(sender, correlation_id, response)``. A request that gets no answer (lost
    connection, timeout) is simply never answered: the node times it out."""

    def start(self, on_response: Callable[[int, int, RaftResponse], None]) -> None: ...

    def send(self, destination: int, correlation_id: int, request: RaftRequest) -> None: ...

    async def close(self) -> None: ...


class NullTransport:
    """The one-voter quorum's transport: there is nobody to talk to."""

    def start(self, on_response: Callable[[int, int, RaftResponse], None]) -> None:
        pass

    def send(self, destination: int, correlation_id: int, request: RaftRequest) -> None:
        raise RuntimeError(f"a quorum of one sent {type(request).__name__} to node {destination}")

    async def close(self) -> None:
        pass


@dataclass(frozen=True, slots=True)
class RaftManagerConfig:
    """What the manager needs besides the node's :class:`RaftConfig`."""

    metadata_log_dir: Path
    log_config: LogConfig
    max_bytes_between_snapshots: int = 20 * 1024 * 1024  # metadata.log.max.record.bytes.between.snapshots
    shutdown_timeout_ms: int = 5000

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> RaftManagerConfig:
        return cls(
            metadata_log_dir=Path(config.metadata_log_dir),
            log_config=LogConfig(
                segment_bytes=int(config.get("metadata.log.segment.bytes", 1024 * 1024 * 1024)),
                segment_ms=int(config.get("metadata.log.segment.ms", 7 * 24 * 3600 * 1000)),
            ),
            max_bytes_between_snapshots=int(
                config.get("metadata.log.max.record.bytes.between.snapshots", 20 * 1024 * 1024)
            ),
        )


def raft_config_from_kraft(kraft: KRaftConfig, cluster_id: str | None, **overrides: Any) -> RaftConfig:
    """The node's :class:`RaftConfig` from the parsed KRaft settings."""
    return RaftConfig(
        node_id=kraft.node_id,
        voters=kraft.voter_ids,
        election_timeout_ms=kraft.election_timeout_ms,
        fetch_timeout_ms=kraft.fetch_timeout_ms,
        election_backoff_max_ms=kraft.election_backoff_max_ms,
        request_timeout_ms=kraft.request_timeout_ms,
        retry_backoff_ms=kraft.retry_backoff_ms,
        append_linger_ms=kraft.append_linger_ms,
        cluster_id=cluster_id,
        **overrides,
    )


class _Waiter:
    __slots__ = ("epoch", "future", "offset")

    def __init__(self, offset: int, epoch: int | None, future: asyncio.Future[int]) -> None:
        self.offset = offset
        self.epoch = epoch
        self.future = future


class RaftManager:
    """One node of the metadata quorum, on the event loop. See the module docstring."""

    def __init__(
        self,
        raft_config: RaftConfig,
        config: RaftManagerConfig,
        *,
        transport: RaftTransport | None = None,
        clock: Clock | None = None,
        scheduler: Scheduler | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.raft_config = raft_config
        self.config = config
        self.clock = clock or RealClock()
        self.scheduler: Scheduler = scheduler or AsyncioScheduler()
        self.rng = rng or random.Random()
        if transport is None:
            if raft_config.voters != {raft_config.node_id}:
                raise ValueError("a quorum of more than one voter needs a transport")
            transport = NullTransport()
        self.transport = transport
        self._listeners: list[RaftListener] = []
        self.node: RaftNode | None = None
        self.metadata_log: MetadataLog | None = None
        self._timer: TaskHandle | None = None
        self._timer_due: int | None = None
        self._soon: asyncio.Handle | None = None  # a poll due now, on the loop
        self._leader_hw: int | None = None  # the high watermark of the last fetch answered by the leader
        self._inbound_ids = itertools.count(1)
        self._other_clusters: set[int] = set()  # nodes whose cluster.id mismatch was logged
        self._inbound: dict[tuple[int, int], asyncio.Future[RaftResponse]] = {}
        self._waiters: list[_Waiter] = []
        self._closed = False
        # snapshots: committed batch ends since the last snapshot -> their epoch, and bytes
        self._batch_ends: dict[int, int] = {}
        self._bytes_since_snapshot = 0

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_broker_config(
        cls,
        config: BrokerConfig,
        cluster_id: str | None,
        *,
        transport: RaftTransport | None = None,
        clock: Clock | None = None,
        scheduler: Scheduler | None = None,
        rng: random.Random | None = None,
    ) -> RaftManager:
        """The manager of a broker/controller process: settings from ``config`` (its
        :meth:`~strom.config.BrokerConfig.kraft` and the ``metadata.log.*`` keys). With more
        than one voter and no ``transport``, a :class:`~strom.raft.transport.SocketRaftTransport`
        to the other voters of ``controller.quorum.voters`` is built."""
        kraft = config.kraft()
        raft_config = raft_config_from_kraft(kraft, cluster_id)
        if transport is None and raft_config.voters != {raft_config.node_id}:
            from strom.raft.transport import SocketRaftTransport

            transport = SocketRaftTransport.for_voters(kraft)
        return cls(
            raft_config,
            RaftManagerConfig.from_broker_config(config),
            transport=transport,
            clock=clock,
            scheduler=scheduler,
            rng=rng,
        )

    def register(self, listener: RaftListener) -> None:
        """Add a listener (before :meth:`start` to see the whole committed log)."""
        self._listeners.append(listener)

    def unregister(self, listener: RaftListener) -> None:
        self._listeners.remove(listener)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Open the log and the quorum state, create the node (listeners get the latest snapshot
        and, as the node commits, the log), start the transport and the timer. Must run on the
        event loop."""
        if self.node is not None:
            raise RuntimeError("RaftManager.start() called twice")
        if self._closed:
            raise RaftManagerClosed("the raft manager was shut down")
        self.metadata_log = MetadataLog.open(
            self.config.metadata_log_dir, clock=self.clock, config=self.config.log_config
        )
        store = FileQuorumStateStore(self.config.metadata_log_dir)
        try:
            self.node = RaftNode(self.raft_config, self.metadata_log, store, self, self.rng, self._now())
        except BaseException:
            self.metadata_log.close()
            raise
        self.transport.start(self.receive)
        self._dispatch(self.node.poll(self._now()))

    async def shutdown(self) -> None:
        """Graceful stop: a leader of a multi-voter quorum resigns (EndQuorumEpoch, so that a
        successor stands at once) and waits for the voters to acknowledge, at most
        ``shutdown_timeout_ms``; then the timer, the transport and the log are closed."""
        if self._closed:
            return
        node = self.node
        if node is not None and node.is_leader and len(self.raft_config.voters) > 1:
            node.resign(self._now())
            self._dispatch(node.poll(self._now()))
            loop = asyncio.get_running_loop()  # real time: the injected clock may stand still
            deadline = loop.time() + self.config.shutdown_timeout_ms / 1000
            while loop.time() < deadline and self._resigning(node):
                await asyncio.sleep(0.01)
        self._close()
        await self.transport.close()

    def _resigning(self, node: RaftNode) -> bool:
        st = node.state
        others = self.raft_config.voters - {self.raft_config.node_id}
        return isinstance(st, Resigned) and not others <= st.end_acked

    def _cancel_timers(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None

    def _close(self) -> None:
        self._closed = True
        self._cancel_timers()
        for fut in self._inbound.values():
            if not fut.done():
                fut.set_exception(RaftManagerClosed("the raft manager was shut down"))
        self._inbound.clear()
        for w in self._waiters:
            if not w.future.done():
                w.future.set_exception(RaftManagerClosed("the raft manager was shut down"))
        self._waiters.clear()
        if self.metadata_log is not None:
            self.metadata_log.close()

    async def kill(self) -> None:
        """Stop as a crash would (tests): no resignation, no flush of the log's tail."""
        if self._closed:
            return
        self._closed = True
        self._cancel_timers()
        for fut in list(self._inbound.values()) + [w.future for w in self._waiters]:
            if not fut.done():
                fut.set_exception(RaftManagerClosed("the raft manager was killed"))
        self._inbound.clear()
        self._waiters.clear()
        await self.transport.close()
        if self.metadata_log is not None:
            self.metadata_log.close_without_flush()

    # ------------------------------------------------------------------ views
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def node_id(self) -> int:
        return self.raft_config.node_id

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        node = self._node()
        return LeaderAndEpoch(node.leader_id, node.epoch)

    @property
    def is_leader(self) -> bool:
        return self._node().is_leader

    @property
    def high_watermark(self) -> int:
        return self._node().high_watermark

    @property
    def leader_high_watermark(self) -> int | None:
        """The quorum's high watermark as this node last learnt it: its own on the leader, else
        the one the leader sent in its last successful Fetch answer (None before any). A node
        whose listeners applied everything below it has caught up with the committed log (what
        a starting broker waits for)."""
        node = self._node()
        if node.is_leader:
            return node.high_watermark
        return self._leader_hw

    def describe_quorum(self) -> QuorumInfo:
        """DescribeQuorum's answer; :class:`NotLeaderError` on a non-leader."""
        return self._node().describe_quorum(self._now())

    # ------------------------------------------------------------------ writes
    async def append(self, records: list[bytes]) -> int:
        """Append one batch of metadata records (serialized records' values) as the leader;
        returns the offset of its last record (await :meth:`wait_committed` with it). Raises
        :class:`NotLeaderError` on a non-leader."""
        return self.append_now(records)

    def append_now(self, records: list[bytes]) -> int:
        """:meth:`append`, synchronously (for the controller, see the module docstring). The node
        is polled once the caller returned to the loop, never from inside this call: the caller
        may be a listener called by the node (a new leader's controller writes its first batch
        from ``handle_leader_change``), and a commit delivered before the caller noted what it
        appended would be missed (with no append linger, the poll commits at once)."""
        offset = self._node().append(self._now(), records)
        self._poll_soon()
        return offset

    def resign(self) -> None:
        """Give up the leadership now (EndQuorumEpoch to the other voters, from the next poll,
        on the loop); nothing on a non-leader."""
        self._node().resign(self._now())
        self._poll_soon()

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """Store the owner's snapshot at ``snapshot_id`` (a committed batch boundary its
        listener applied) and drop the log before it (:meth:`RaftNode.create_snapshot`; raises
        ValueError when that is not possible yet)."""
        self._node().create_snapshot(snapshot_id, data)
        self._batch_ends = {end: e for end, e in self._batch_ends.items() if end > snapshot_id.offset}
        self._bytes_since_snapshot = 0

    async def wait_committed(self, offset: int) -> int:
        """Wait until ``offset`` is committed (the high watermark passed it); returns the high
        watermark. On the leader, raises :class:`NotLeaderError` if this node stops leading the
        epoch it leads now before the offset commits."""
        node = self._node()
        if node.high_watermark > offset:
            return node.high_watermark
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append(_Waiter(offset, node.epoch if node.is_leader else None, fut))
        return await fut

    def maybe_snapshot(
        self, offset: int, data: bytes | Callable[[], bytes], *, force: bool = False
    ) -> OffsetAndEpoch | None:
        """Snapshot the owner's image, which has applied every committed record before
        ``offset`` (a committed batch's end, ``last_offset + 1``), if more than
        ``metadata.log.max.record.bytes.between.snapshots`` of records were committed since the
        last snapshot (or ``force``). ``data`` (or what it returns) is the image as record
        batches. Returns the snapshot id, or None when none was taken."""
        node = self._node()
        if not force and self._bytes_since_snapshot < self.config.max_bytes_between_snapshots:
            return None
        epoch = self._batch_ends.get(offset)
        if epoch is None:
            return None  # not a committed batch end this manager saw since the last snapshot
        latest = self._log().latest_snapshot_id()
        if latest is not None and latest.offset >= offset:
            return None
        snapshot_id = OffsetAndEpoch(offset, epoch)
        node.create_snapshot(snapshot_id, data() if callable(data) else data)
        self._batch_ends = {end: e for end, e in self._batch_ends.items() if end > offset}
        self._bytes_since_snapshot = 0
        return snapshot_id

    # ------------------------------------------------------------------ messages
    async def handle_request(
        self, sender: int, request: RaftRequest, timeout_ms: int | None = None
    ) -> RaftResponse:
        """An inbound KRaft request from node ``sender``; returns the node's answer (a parked
        Fetch: once the node completes it). Raises ``TimeoutError`` if the node does not answer
        within ``timeout_ms`` (default: the request timeout plus the fetch wait)."""
        node = self._node()
        if not isinstance(request, _REQUEST_TYPES):
            raise TypeError(f"not a KRaft request: {request!r}")
        theirs = getattr(request, "cluster_id", None)
        if theirs is not None and theirs != self.raft_config.cluster_id:
            self._log_other_cluster(sender, f"its cluster.id is {theirs}")
        cid = next(self._inbound_ids)
        fut: asyncio.Future[RaftResponse] = asyncio.get_running_loop().create_future()
        key = (sender, cid)
        self._inbound[key] = fut
        try:
            self._dispatch(node.handle(self._now(), sender, cid, request))
            if timeout_ms is None:
                timeout_ms = self.raft_config.request_timeout_ms + self.raft_config.fetch_max_wait_ms
            return await asyncio.wait_for(fut, timeout_ms / 1000)
        finally:
            self._inbound.pop(key, None)

    def receive(self, sender: int, correlation_id: int, response: RaftResponse) -> None:
        """A response from ``sender`` to the request the node sent with ``correlation_id``
        (the transport's callback)."""
        if self._closed or self.node is None:
            return
        if response.error_code == Errors.INCONSISTENT_CLUSTER_ID:
            self._log_other_cluster(sender, "it answers INCONSISTENT_CLUSTER_ID")
        if (
            isinstance(response, FetchResponse)
            and response.error_code == Errors.NONE
            and response.current_leader.leader_id == sender
        ):
            self._leader_hw = response.high_watermark
        self._dispatch(self.node.handle(self._now(), sender, correlation_id, response))

    def _log_other_cluster(self, other: int, why: str) -> None:
        """Once per node: a voter formatted for another cluster can never join this quorum."""
        if other in self._other_clusters:
            return
        self._other_clusters.add(other)
        log.error(
            "node %d: node %d belongs to another cluster (%s); this node's cluster.id is %s "
            "(meta.properties, from 'strom storage format -t'): the two never form a quorum "
            "until they are formatted with the same cluster id",
            self.raft_config.node_id,
            other,
            why,
            self.raft_config.cluster_id,
        )

    # ------------------------------------------------------------------ RaftListener (fan-out)
    def handle_commit(self, batches: list[CommittedBatch]) -> None:
        for b in batches:
            self._batch_ends[b.last_offset + 1] = b.epoch
            self._bytes_since_snapshot += sum(len(r) for r in b.records)
        for listener in list(self._listeners):
            listener.handle_commit(batches)

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self._batch_ends.clear()
        self._bytes_since_snapshot = 0
        for listener in list(self._listeners):
            listener.handle_load_snapshot(snapshot_id, data)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        log.info("node %d: leader %s in epoch %d", self.raft_config.node_id, leader.leader_id, leader.epoch)
        for listener in list(self._listeners):
            listener.handle_leader_change(leader)

    # ------------------------------------------------------------------ driving
    def _now(self) -> int:
        return self.clock.monotonic_ms()

    def _node(self) -> RaftNode:
        if self._closed:
            raise RaftManagerClosed("the raft manager was shut down")
        if self.node is None:
            raise RaftManagerClosed("the raft manager is not started")
        return self.node

    def _log(self) -> MetadataLog:
        assert self.metadata_log is not None
        return self.metadata_log

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_due = None
        if self._closed or self.node is None:
            return
        self._dispatch(self.node.poll(self._now()))

    def _on_soon(self) -> None:
        self._soon = None
        if self._closed or self.node is None:
            return
        self._dispatch(self.node.poll(self._now()))

    def _dispatch(self, out: list[Outbound]) -> None:
        """Send what the node returned, settle waiters, re-arm the timer."""
        if self._closed:
            return
        node = self.node
        assert node is not None
        for o in out:
            msg: RaftMessage = o.message
            if isinstance(msg, _REQUEST_TYPES):
                try:
                    self.transport.send(o.destination, o.correlation_id, msg)
                except Exception:
                    log.exception("sending %s to node %d failed", type(msg).__name__, o.destination)
            else:
                fut = self._inbound.get((o.destination, o.correlation_id))
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        self._settle_waiters(node)
        self._arm(node.next_deadline())

    def _settle_waiters(self, node: RaftNode) -> None:
        if not self._waiters:
            return
        hw = node.high_watermark
        leading = node.epoch if node.is_leader else None
        keep: list[_Waiter] = []
        for w in self._waiters:
            if w.future.done():
                continue
            if hw > w.offset:
                w.future.set_result(hw)
            elif w.epoch is not None and w.epoch != leading:
                w.future.set_exception(
                    NotLeaderError(
                        f"node {self.raft_config.node_id} stopped leading epoch {w.epoch} "
                        f"before offset {w.offset} committed"
                    )
                )
            else:
                keep.append(w)
        self._waiters = keep

    def _poll_soon(self) -> None:
        if self._soon is None and not self._closed:
            self._soon = asyncio.get_running_loop().call_soon(self._on_soon)

    def _arm(self, deadline: int) -> None:
        now = self._now()
        if deadline <= now:  # due already: poll once the loop ran what is ready (not a clock's task)
            self._poll_soon()
            return
        due = min(deadline, now + _MAX_TIMER_MS)
        if self._timer is not None and self._timer_due is not None and self._timer_due <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_due = due
        self._timer = self.scheduler.schedule(due - now, self._on_timer, name="raft-poll")
