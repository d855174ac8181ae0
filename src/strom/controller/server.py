"""The controller runtime: Kafka's ``ControllerServer`` and the ``QuorumController`` event loop.

Theory of operation
-------------------
:class:`~strom.controller.QuorumController` is a pure, replayable state machine (DESIGN.md lesson
6). This module runs it on the metadata quorum. It is the Raft listener of its node
(:class:`~strom.raft.quorum.RaftListener`) and talks to the Raft node through the small
:class:`RaftClient` protocol (``RaftNode`` itself, or the asyncio ``RaftManager`` around it): it
never drives the Raft node's timers or network, whoever owns the node does.

Two controller states are kept:

* ``committed``: replays every committed batch (``handle_commit``) and snapshot
  (``handle_load_snapshot``), on every node, active or standby. It is what a rebuild starts from
  and what snapshots are written from.
* ``active``: exists only on the active controller (this node leads the quorum). It is rebuilt
  from ``committed`` when the node is told it leads (the Raft node tells a new leader only after
  its listener applied everything before the leader's epoch), and runs ahead of it by the
  records appended but not yet committed.

One operation at a time (Kafka's event queue): :meth:`ControllerServer.submit` runs
``active.handle(...)``, appends the result's records to the metadata log as **one batch**
(atomic: a topic exists with all its partitions or not at all), replays them into ``active``
before returning to the event loop, so the next operation sees them, and resolves the request's
future with the response once the high watermark passes the batch (``handle_commit``). asyncio
runs one callback at a time and nothing here awaits between handle, append and replay, so the
single-threaded event loop *is* the queue. A result without records (DescribeConfigs, a
rejected request) is answered at once.

Failures, per the contract in ``quorum_controller.py``:

* losing leadership (``handle_leader_change`` to another leader or epoch): ``active`` is
  dropped and every waiting request fails with NOT_CONTROLLER (the client retries at the new
  controller; its records may still commit, Kafka answers the same way);
* an append that raises: the node resigns (its uncommitted tail can no longer be trusted to
  match ``active``), ``active`` is dropped, waiting requests fail with NOT_CONTROLLER;
* a request at a node that does not lead: NOT_CONTROLLER at once.

The first leader of a new cluster (nothing committed yet) writes
:meth:`QuorumController.bootstrap_records` plus ``initial_records`` (the migration of an old
single-node data dir, :mod:`strom.metadata.migration`) as its first batch, before any
operation, so that they are written exactly once.

Periodic work (:meth:`ControllerServer.maybe_poll`): the owner calls it at
:meth:`ControllerServer.next_poll_ms`; it appends ``active.poll(now)`` results (fencing of one
expired broker at a time, leader rebalance) until nothing is due.

Snapshots: after ``snapshot_max_bytes`` of committed metadata records
(``metadata.log.max.record.bytes.between.snapshots``), :meth:`maybe_poll` writes a snapshot of
``committed`` at the last committed batch and the Raft node drops the log before it. Taken in
``maybe_poll``, never inside ``handle_commit`` (the Raft node is delivering batches then).

Error contract: :meth:`submit` never raises for a controller-side failure; it answers with the
error a Kafka controller would (NOT_CONTROLLER). Records that do not decode or replay raise from
``handle_commit`` (a fault the node cannot recover from, as in Kafka).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..clock import Clock
from ..metadata.records import build_records_batch, decode, encode, iter_batch_records
from ..raft.log import OffsetAndEpoch
from ..raft.quorum import CommittedBatch, LeaderAndEpoch, NotLeaderError
from .config_control import Validator, default_validator
from .quorum_controller import ControllerConfig, QuorumController

log = logging.getLogger(__name__)

DEFAULT_SNAPSHOT_MAX_BYTES = 20 * 1024 * 1024  # metadata.log.max.record.bytes.between.snapshots


class RaftClient(Protocol):
    """What the controller needs of its Raft node (``RaftNode`` satisfies it)."""

    @property
    def leader_id(self) -> int | None: ...

    @property
    def epoch(self) -> int: ...

    def append(self, now_ms: int, records: list[bytes]) -> int: ...

    def resign(self, now_ms: int) -> None: ...

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None: ...


class NotControllerError(Exception):
    """This node is not (or stopped being) the active controller."""


@dataclass(slots=True)
class _Waiter:
    last_offset: int
    future: asyncio.Future[dict[str, Any]] | None
    response: dict[str, Any]


class ControllerServer:
    def __init__(
        self,
        node_id: int,
        clock: Clock,
        config: ControllerConfig | None = None,
        *,
        cluster_id: str | None = None,
        validator: Validator = default_validator,
        rnd: random.Random | None = None,
        initial_records: Sequence[Any] = (),
        snapshot_max_bytes: int = DEFAULT_SNAPSHOT_MAX_BYTES,
        on_commit: Callable[[list[CommittedBatch]], None] | None = None,
    ) -> None:
        self.node_id = node_id
        self.clock = clock
        self.config = config or ControllerConfig()
        self.cluster_id = cluster_id
        self.validator = validator
        self.random = rnd or random.Random()
        self.initial_records = list(initial_records)
        self.snapshot_max_bytes = snapshot_max_bytes
        self.on_commit = on_commit
        self.raft: RaftClient | None = None
        self.committed = self._new_controller()
        self.active: QuorumController | None = None
        self.leader = LeaderAndEpoch(None, 0)
        self._committed_any = False
        self._last_committed: OffsetAndEpoch | None = None  # (next offset, epoch) of the last batch
        self._bytes_since_snapshot = 0
        self._waiters: list[_Waiter] = []

    def _new_controller(self) -> QuorumController:
        return QuorumController(
            self.config, rnd=self.random, cluster_id=self.cluster_id, validator=self.validator
        )

    def attach(self, raft: RaftClient) -> None:
        """Set the Raft node (built with this object as its listener)."""
        self.raft = raft

    # ---- views -------------------------------------------------------------------------------
    @property
    def is_active(self) -> bool:
        return self.active is not None

    @property
    def controller_id(self) -> int | None:
        return self.leader.leader_id

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _now(self) -> int:
        return int(self.clock.monotonic_ms())

    # ---- RaftListener ------------------------------------------------------------------------
    def handle_commit(self, batches: list[CommittedBatch]) -> None:
        for batch in batches:
            if not batch.control:
                offset = batch.base_offset
                for data in batch.records:
                    self.committed.replay(decode(data), offset)
                    self._bytes_since_snapshot += len(data)
                    offset += 1
                self._committed_any = True
            self._last_committed = OffsetAndEpoch(batch.last_offset + 1, batch.epoch)
        if batches:
            self._complete(batches[-1].last_offset)
        if self.on_commit is not None:
            self.on_commit(batches)

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        fresh = self._new_controller()
        for offset, record in iter_batch_records(data):
            fresh.replay(record, offset)
        fresh.last_applied_offset = snapshot_id.offset - 1
        self.committed = fresh
        self._committed_any = True
        self._last_committed = snapshot_id
        self._bytes_since_snapshot = 0
        if self.active is not None:  # a leader never loads a snapshot; be safe anyway
            self._deactivate()

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        previous, self.leader = self.leader, leader
        if leader.leader_id == self.node_id:
            if self.active is None or previous.epoch != leader.epoch:
                self._activate()
        elif self.active is not None:
            self._deactivate()

    # ---- activation --------------------------------------------------------------------------
    def _rebuilt(self) -> QuorumController:
        fresh = self._new_controller()
        for record in self.committed.snapshot_records():
            fresh.replay(record)
        fresh.last_applied_offset = self.committed.last_applied_offset
        return fresh

    def _activate(self) -> None:
        self._fail_waiters()
        self.active = self._rebuilt()
        now = self._now()
        self.active.activate(now)
        if not self._committed_any:
            records = [*QuorumController.bootstrap_records(), *self.initial_records]
            self._append(records, None)
        log.info("controller %d active in epoch %d", self.node_id, self.leader.epoch)

    def _deactivate(self) -> None:
        self.active = None
        self._fail_waiters()

    def _fail_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if w.future is not None and not w.future.done():
                w.future.set_exception(NotControllerError(f"node {self.node_id} lost leadership"))

    def _complete(self, committed_last_offset: int) -> None:
        done = [w for w in self._waiters if w.last_offset <= committed_last_offset]
        if not done:
            return
        self._waiters = [w for w in self._waiters if w.last_offset > committed_last_offset]
        for w in done:
            if w.future is not None and not w.future.done():
                w.future.set_result(w.response)

    # ---- the write path ----------------------------------------------------------------------
    def _append(
        self,
        records: list[Any],
        future: asyncio.Future[dict[str, Any]] | None,
        response: dict[str, Any] | None = None,
    ) -> int:
        """Append ``records`` as one batch and replay them into ``active``. Returns the batch's
        last offset. Raises NotControllerError (and resigns on a failed append)."""
        raft, active = self.raft, self.active
        if raft is None or active is None:
            raise NotControllerError(f"node {self.node_id} is not the active controller")
        encoded = [encode(r) for r in records]
        now = self._now()
        try:
            last = raft.append(now, encoded)
        except NotLeaderError as e:
            self._deactivate()
            raise NotControllerError(str(e)) from e
        except Exception as e:
            log.exception("metadata append failed on controller %d; resigning", self.node_id)
            try:
                raft.resign(now)
            finally:
                self._deactivate()
            raise NotControllerError(f"append failed: {e}") from e
        first = last - len(records) + 1
        for i, data in enumerate(encoded):
            active.replay(decode(data), first + i)
        self._waiters.append(_Waiter(last, future, response or {}))
        return last

    def next_offset(self) -> int:
        raft = self.raft
        log_ = getattr(raft, "log", None)
        return int(log_.end_offset) if log_ is not None else -1

    def submit(self, api_key: int, request: Any, api_version: int = -1) -> asyncio.Future[dict[str, Any]]:
        """Run one controller operation; the future resolves with its response once its records
        are committed, or fails with :class:`NotControllerError`. Call on the event loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        active = self.active
        if active is None:
            future.set_exception(NotControllerError(f"node {self.node_id} is not the active controller"))
            return future
        result = active.handle(
            api_key, request, api_version=api_version, now_ms=self._now(), next_offset=self.next_offset()
        )
        response: dict[str, Any] = result.response or {}
        if not result.records:
            future.set_result(response)
            return future
        try:
            self._append(list(result.records), future, response)
        except NotControllerError as e:
            future.set_exception(e)
        return future

    async def call(self, api_key: int, request: Any, api_version: int = -1) -> dict[str, Any]:
        return await self.submit(api_key, request, api_version)

    def end_session(self, broker_id: int) -> None:
        """Soft state: ``broker_id``'s old incarnation is gone (this process replaced it)."""
        if self.active is not None:
            self.active.cluster.end_session(broker_id)

    # ---- periodic work -----------------------------------------------------------------------
    def next_poll_ms(self) -> int:
        now = self._now()
        if self.active is None:
            return now + self.config.broker_session_timeout_ms
        return self.active.next_poll_ms(now)

    def maybe_poll(self) -> int:
        """Run due periodic work and a due snapshot; the number of records appended."""
        self.maybe_snapshot()
        n = 0
        while self.active is not None:
            result = self.active.poll(self._now())
            if not result.records:
                break
            try:
                self._append(list(result.records), None)
            except NotControllerError:
                break
            n += len(result.records)
        return n

    def maybe_snapshot(self) -> bool:
        raft, at = self.raft, self._last_committed
        if raft is None or at is None or self._bytes_since_snapshot < self.snapshot_max_bytes:
            return False
        data = build_records_batch(self.committed.snapshot_records(), base_offset=0)
        try:
            raft.create_snapshot(at, data)
        except ValueError:
            log.debug("snapshot at %s not possible yet", at)
            return False
        self._bytes_since_snapshot = 0
        return True


__all__ = ["ControllerServer", "NotControllerError", "RaftClient"]
