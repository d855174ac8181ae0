"""A deterministic simulation of ISR data replication (the data-plane sibling of ``raftsim``).

The production code runs; the simulation only plays the network, the clock and the processes:

* each broker is a real :class:`~strom.server.replica_manager.ReplicaManager` over a real
  :class:`~strom.log.partition_log.PartitionLog` (opened as ``ReplicaManager._open_partition``
  opens it) on its own directory, watched by its own :class:`~strom.testing.powerloss.PowerLossFS`;
* the controller is the real :class:`~strom.controller.QuorumController` (through
  :class:`~strom.testing.controller.ControllerHarness`, which commits at once): registrations,
  heartbeats and session fencing, elections from the ISR, AlterPartition (KIP-841);
* the leader answers a follower's fetch with ``ReplicaManager.read_for_follower`` (which runs
  :func:`strom.replication.leader.handle_follower_fetch`), long-polled as the Fetch handler does
  (re-read on every purgatory notification and at the deadline); the follower builds its fetch with
  :func:`strom.replication.follower.fetch_partition` and applies the answer with
  :func:`strom.replication.follower.handle_fetch_answer`, dropping answers for an old leader epoch
  as ``ReplicaFetcher._handle`` does;
* produce goes through ``ReplicaManager._append_one`` (leader check, append, HW, error mapping);
  acks=-1 refuses below ``min.insync.replicas`` as ``append_records`` does and waits in the
  replica manager's own ``_hw_waiters`` (completed by its ``_high_watermark_advanced`` /
  ``_fail_waiters``, then ``_check_isr_after_append``);
* ISR changes: ``ReplicaManager.maybe_shrink_isrs`` on its timer, expansions from the fetch
  path; ``isr_sender`` marks the partition pending and sends AlterPartition to the controller over
  the simulated network; the answer is applied by ``AlterPartitionManager._answer``.

One thread, one seeded ``random.Random``; time is the sim's number (a ``ManualClock`` follows it).
The network drops, delays (so reorders) and partitions messages; requests to a dead process are
refused, lost ones time out. A kill is ``kill -9`` (files closed unflushed; the page cache keeps
what was written) or a power cut (``PowerLossFS.cut`` of that broker's directory: only what was
fsynced survives, torn writes included).

After every event :meth:`Cluster.check` verifies the invariants (see its docstring).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from strom.clock import ManualClock
from strom.config import LogConfig
from strom.controller import ControllerConfig
from strom.log.errors import KafkaStorageError, LogError
from strom.log.partition_log import PartitionLog
from strom.metadata.topics import TopicInfo
from strom.protocol.errors import ErrorCode
from strom.protocol.records import build_batch, decode_records, iter_batches
from strom.protocol.replica_fetch import ReplicaFetchPartitionAnswer
from strom.rate_limited_log import RateLimitedLog
from strom.replication.follower import FetchAnswer, fetch_partition, handle_fetch_answer
from strom.server.alter_partition_manager import AlterPartitionManager
from strom.server.partition import Partition, PendingIsr
from strom.server.replica_manager import ReplicaManager
from strom.testing.controller import ControllerHarness, alter_partition_request, heartbeat_request
from strom.testing.powerloss import PowerLossFS

TOPIC = "t"
TP = (TOPIC, 0)
CONTROLLER = 0
MAX_BYTES = 1 << 20

# the broker's replication configs, scaled down to simulated milliseconds
LAG_MAX_MS = 400
FETCH_WAIT_MS = 100
FETCH_BACKOFF_MS = 50
FETCH_TIMEOUT_MS = 400  # replica.socket.timeout.ms + the long poll
HEARTBEAT_MS = 50
SESSION_TIMEOUT_MS = 300
METADATA_PULL_MS = 100
PRODUCE_TIMEOUT_MS = 500
ALTER_TIMEOUT_MS = 400
ALTER_BACKOFF_MS = 500  # AlterPartitionManager.RETRY_BACKOFF_S
SAME_TIME_EVENTS = 5_000  # more at one instant: a livelock (nothing waits on time any more)
BROKER_CONFIG = {"num.io.threads": 1, "replica.lag.time.max.ms": LAG_MAX_MS}

logging.getLogger("strom").setLevel(logging.ERROR)


class InvariantViolation(AssertionError):
    pass


@dataclass
class Totals:
    runs: int = 0
    events: int = 0
    checks: int = 0
    messages: int = 0
    kills: int = 0
    power_cuts: int = 0
    elections: int = 0
    acked_all: int = 0
    acked_one: int = 0
    truncations: int = 0
    unclean: int = 0  # runs where the last replica standing had lost its tail (not checked on)


TOTALS = Totals()


@dataclass
class Stats:
    events: int = 0
    checks: int = 0
    messages: int = 0
    dropped: int = 0
    kills: int = 0
    power_cuts: int = 0
    produced: int = 0
    acked_all: int = 0
    acked_one: int = 0
    truncations: int = 0
    unclean: int = 0


class SimFuture:
    """What ``ReplicaManager._hw_waiters`` holds, without an event loop."""

    def __init__(self) -> None:
        self._done = False
        self._exc: BaseException | None = None

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return False

    def set_result(self, _value: object) -> None:
        self._done = True

    def set_exception(self, exc: BaseException) -> None:
        self._done, self._exc = True, exc

    def exception(self) -> BaseException | None:
        return self._exc


class SimPurgatory:
    """``ReplicaManager.purgatory``: a notification wakes the broker's parked fetches and
    acks=-1 waiters at the current time (one event)."""

    def __init__(self, node: SimBroker) -> None:
        self.node = node

    def notify(self, _tp: object) -> None:
        self.node.wake()


class SimFetcherManager:
    """``ReplicaManager.fetcher_manager``: the one partition's fetch target."""

    def __init__(self, node: SimBroker) -> None:
        self.node = node

    def add_partition(self, _tp: object, leader_id: int, leader_epoch: int) -> None:
        node = self.node
        ft = node.fetch
        if ft is not None and ft.leader == leader_id:
            ft.leader_epoch = leader_epoch  # the same fetcher: an in-flight answer is dropped
        else:
            node.fetch = FetchTarget(leader_id, leader_epoch)
        node.cluster.schedule(node.cluster.now, node.guard(node.fetch_now))

    def remove_partition(self, _tp: object) -> None:
        self.node.fetch = None


class SimMetadataCache:
    """The broker's metadata view: the leader its replica manager last applied."""

    def __init__(self, node: SimBroker) -> None:
        self.node = node

    def leader_id(self, topic: str, partition: int) -> int | None:
        rm = self.node.rm
        p = rm.partitions.get((topic, partition)) if rm is not None else None
        return None if p is None else p.leader_id

    def topic(self, name: str) -> TopicInfo | None:
        return self.node.cluster.topic_info if name == TOPIC else None

    def fenced_brokers(self, listener: str | None = None) -> list[Any]:
        """None known here: the leader proposes every caught-up follower and the simulated
        controller refuses fenced ones (INELIGIBLE_REPLICA), the invariant checks seeing both."""
        return []


@dataclass
class FetchTarget:
    leader: int
    leader_epoch: int
    in_flight: bool = False
    delayed_until: int = 0


@dataclass
class Parked:
    """A follower fetch the leader holds (long poll)."""

    replica: int
    request: dict[str, Any]
    broker_epoch: int
    deadline: int
    respond: Callable[[Any], None]
    timer: bool = False


@dataclass
class Waiting:
    """An acks=-1 produce waiting for the HW in the replica manager's ``_hw_waiters``."""

    fut: SimFuture
    response: Any
    deadline: int
    respond: Callable[[Any], None]


class SimBroker:
    def __init__(self, cluster: Cluster, node_id: int, directory: Path) -> None:
        self.cluster = cluster
        self.id = node_id
        self.directory = directory
        self.fs: PowerLossFS | None = None
        self.alive = False
        self.incarnation = 0
        self.rm: ReplicaManager | None = None
        self.plog: PartitionLog | None = None
        self.alter: AlterPartitionManager | None = None
        self.broker_epoch = -1
        self.meta_offset = -1
        self.fetch: FetchTarget | None = None
        self.parked: list[Parked] = []
        self.waiting: list[Waiting] = []
        self._woken = False
        self.lossy_kills = 0
        self.live = False
        self.image: Any = None

    # ------------------------------------------------------------------ life
    def guard(self, action: Callable[[], None]) -> Callable[[], None]:
        """``action``, run only if this incarnation is still alive then."""
        inc = self.incarnation

        def run() -> None:
            if self.alive and self.incarnation == inc:
                action()

        run.__qualname__ = getattr(action, "__qualname__", "action")
        return run

    def start(self) -> None:
        c = self.cluster
        self.incarnation += 1
        self.alive = True
        rm = ReplicaManager(
            node_id=self.id, config=BROKER_CONFIG, clock=c.clock, metadata_cache=SimMetadataCache(self),
            log_dirs=[self.directory], offline_dirs={}, log_config=lambda _info: c.log_config,
            storage_log=RateLimitedLog(logging.getLogger("strom.sim"), c.clock),
        )
        rm.purgatory = SimPurgatory(self)  # type: ignore[assignment]
        rm.fetcher_manager = SimFetcherManager(self)
        rm.isr_sender = self.submit_isr
        self.rm = rm
        self.plog = rm._open_partition(c.topic_info, 0, self.directory)
        self.alter = AlterPartitionManager(SimpleNamespace(replica_manager=rm), lambda: self.broker_epoch)  # type: ignore[arg-type]
        self.broker_epoch = -1
        self.meta_offset = -1
        self.live = False
        self.image: Any = None
        self.fetch = None
        self.parked, self.waiting = [], []
        self._woken = False
        c.node_started(self)
        self.register()
        c.schedule(c.now + HEARTBEAT_MS, self.guard(self.heartbeat))
        c.schedule(c.now + METADATA_PULL_MS, self.guard(self.pull_metadata))
        c.schedule(c.now + LAG_MAX_MS // 2, self.guard(self.shrink_isrs))

    def kill(self, lose_unflushed: bool) -> None:
        if not self.alive:
            return
        c = self.cluster
        self.alive = False
        assert self.plog is not None and self.rm is not None
        self.rm.validation_executor.shutdown(wait=False)
        self.plog.close_without_flush()
        self.rm = None
        self.plog = None
        self.parked, self.waiting, self.fetch = [], [], None
        c.stats.kills += 1
        if lose_unflushed and self.fs is not None:
            self.fs.cut()
            self.lossy_kills += 1
            c.lost_in_isr[self.id] = c.registration().leader_epoch
            c.stats.power_cuts += 1
        c.node_killed(self)

    # ------------------------------------------------------------------ controller
    def register(self) -> None:
        c = self.cluster

        def handle(respond: Callable[[Any], None]) -> None:
            respond(c.controller_register(self.id, self.incarnation))

        def reply(resp: dict[str, Any]) -> None:
            if resp["error_code"] == 0:
                self.broker_epoch = int(resp["broker_epoch"])
            else:
                c.schedule(c.now + HEARTBEAT_MS, self.guard(self.register))

        c.rpc(self.id, CONTROLLER, handle, reply, 300, lambda: self.register())

    def heartbeat(self) -> None:
        c = self.cluster
        c.schedule(c.now + HEARTBEAT_MS, self.guard(self.heartbeat))
        if self.broker_epoch < 0:
            return
        epoch, offset = self.broker_epoch, self.meta_offset

        def handle(respond: Callable[[Any], None]) -> None:
            respond(c.controller_heartbeat(self.id, epoch, offset))

        def reply(resp: dict[str, Any]) -> None:
            if resp["error_code"] == ErrorCode.STALE_BROKER_EPOCH and self.broker_epoch == epoch:
                self.broker_epoch = -1
                self.register()
            elif resp["error_code"] == 0 and not resp["is_fenced"] and not self.live:
                self.live = True  # go_live: apply_all_partitions
                if self.image is not None and self.rm is not None:
                    self.rm.apply_partition(TOPIC, 0, self.image)
                    self.after_apply()

        c.rpc(self.id, CONTROLLER, handle, reply, HEARTBEAT_MS * 4, lambda: None)

    def pull_metadata(self) -> None:
        c = self.cluster
        c.schedule(c.now + METADATA_PULL_MS, self.guard(self.pull_metadata))
        c.rpc(self.id, CONTROLLER, lambda respond: respond(c.metadata()), self.apply_metadata, 300,
              lambda: None)

    def apply_metadata(self, meta: tuple[int, Any]) -> None:
        """The image: applied to the replica manager once live (unfenced after registering, as
        the broker's start-up goes: register, heartbeat until unfenced, then go live)."""
        offset, reg = meta
        if offset <= self.meta_offset or self.rm is None:
            return
        self.meta_offset = offset
        self.image = reg
        if self.live:
            self.rm.apply_partition(TOPIC, 0, reg)
            self.after_apply()

    def after_apply(self) -> None:
        """Kafka's leader keeps its acks=-1 waiters until it becomes a follower
        (``_fail_waiters`` in ``apply_partition``); check them now."""
        self.cluster.observe_roles(self)
        self.complete_waiting()

    def submit_isr(self, p: Partition, isr: tuple[int, ...]) -> None:
        """``ReplicaManager.isr_sender`` (``AlterPartitionManager.submit`` without asyncio)."""
        c = self.cluster
        if p.pending is not None:
            return
        pending = p.pending = PendingIsr(isr, p.partition_epoch, c.clock.time_ms())
        request = alter_partition_request(
            self.id, self.broker_epoch, c.topic_info.topic_id, 0, p.leader_epoch, pending.partition_epoch,
            [(b, -1) for b in pending.isr], p.leader_recovery_state,
        )

        def handle(respond: Callable[[Any], None]) -> None:
            respond(c.controller_alter(request))

        def clear() -> None:
            if p.pending is pending:
                p.pending = None

        def reply(resp: dict[str, Any]) -> None:
            assert self.alter is not None
            ok = self.alter._answer(p, pending, resp)
            self.after_apply()
            if ok:
                clear()
            else:
                c.schedule(c.now + ALTER_BACKOFF_MS, self.guard(clear))

        c.rpc(self.id, CONTROLLER, handle, reply, ALTER_TIMEOUT_MS,
              lambda: c.schedule(c.now + ALTER_BACKOFF_MS, self.guard(clear)))

    def shrink_isrs(self) -> None:
        c = self.cluster
        c.schedule(c.now + LAG_MAX_MS // 2, self.guard(self.shrink_isrs))
        assert self.rm is not None
        self.rm.maybe_shrink_isrs()

    # ------------------------------------------------------------------ follower
    def fetch_now(self) -> None:
        c = self.cluster
        ft, plog = self.fetch, self.plog
        if ft is None or plog is None or ft.in_flight:
            return
        if ft.delayed_until > c.now:
            c.schedule(ft.delayed_until, self.guard(self.fetch_now))
            return
        if ft.leader == self.id:
            return
        request = fetch_partition(plog, ft.leader_epoch, MAX_BYTES)
        ft.in_flight = True
        sent_epoch = ft.leader_epoch
        broker_epoch = self.broker_epoch
        leader = c.brokers.get(ft.leader)

        def handle(respond: Callable[[Any], None]) -> None:
            assert leader is not None
            leader.serve_fetch(Parked(self.id, request, broker_epoch, c.now + FETCH_WAIT_MS, respond))

        def reply(answer: FetchAnswer) -> None:
            ft.in_flight = False
            if self.fetch is not ft or ft.leader_epoch != sent_epoch:
                self.fetch_now()  # its leader epoch changed meanwhile: dropped (ReplicaFetcher._handle)
                return
            self.on_answer(ft, answer)

        def failed() -> None:
            ft.in_flight = False
            ft.delayed_until = c.now + FETCH_BACKOFF_MS
            self.fetch_now()

        if leader is None:
            failed()
            return
        c.rpc(self.id, ft.leader, handle, reply, FETCH_TIMEOUT_MS, failed)

    def on_answer(self, ft: FetchTarget, answer: FetchAnswer) -> None:
        c = self.cluster
        plog = self.plog
        assert plog is not None
        end_before = plog.log_end_offset
        backoff = False
        try:
            result = handle_fetch_answer(TP, plog, answer)
        except (KafkaStorageError, OSError, LogError):
            backoff = True
        else:
            if result.high_watermark_advanced:
                self.wake()
            code = answer.error_code
            backoff = code not in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE)
        if plog.log_end_offset < end_before:
            c.stats.truncations += 1
        c.after_log_change(self)
        if backoff:
            ft.delayed_until = c.now + FETCH_BACKOFF_MS
        self.fetch_now()

    # ------------------------------------------------------------------ leader
    def serve_fetch(self, f: Parked) -> None:
        """The Fetch handler for a follower: read; nothing to send and no error: hold it until a
        notification or the deadline, then read again."""
        rm, c = self.rm, self.cluster
        assert rm is not None
        req = f.request
        r = rm.read_for_follower(
            f.replica, TOPIC, 0, req["fetch_offset"], req["partition_max_bytes"],
            current_leader_epoch=req["current_leader_epoch"], last_fetched_epoch=req["last_fetched_epoch"],
            broker_epoch=f.broker_epoch, min_one_message=True,
        )
        records = b""
        if r.records.size:
            try:
                records = r.records.read_bytes()
            finally:
                r.records.close()
        quiet = r.error_code == ErrorCode.NONE and r.diverging_epoch is None and not records
        if quiet and c.now < f.deadline:
            self.parked.append(f)
            if not f.timer:
                f.timer = True
                c.schedule(f.deadline, self.guard(self.wake_now))
            return
        # as the fetcher reads the leader's answer: FetchAnswer.of a decoded partition
        f.respond(FetchAnswer.of(ReplicaFetchPartitionAnswer(
            0, r.error_code, r.high_watermark, -1, r.log_start_offset, r.diverging_epoch, None,
            memoryview(records) if records else None,
        )))
        c.after_log_change(self)

    def wake(self) -> None:
        if not self._woken:
            self._woken = True
            self.cluster.schedule(self.cluster.now, self.guard(self.wake_now))

    def wake_now(self) -> None:
        self._woken = False
        parked, self.parked = self.parked, []
        for f in parked:
            self.serve_fetch(f)
        self.complete_waiting()

    def produce(self, records: bytes, acks: int, respond: Callable[[Any], None]) -> None:
        """Produce's path for one partition (``ReplicaManager.append_records`` without asyncio)."""
        rm, c = self.rm, self.cluster
        assert rm is not None
        plog, error = rm.leader_log_or_error(TOPIC, 0)
        if plog is None:
            respond(SimpleNamespace(error_code=error))
            return
        p = rm.partitions.get(TP)
        if acks == -1 and p is not None and len(p.isr) < plog.config.min_insync_replicas:
            respond(SimpleNamespace(error_code=ErrorCode.NOT_ENOUGH_REPLICAS))
            return
        resp = rm._append_one(TOPIC, 0, records, False, False)
        c.after_log_change(self)
        if acks != -1 or resp.error_code != ErrorCode.NONE:
            respond(resp)
            return
        fut = SimFuture()
        if plog.high_watermark > resp.last_offset:
            fut.set_result(None)
        else:
            rm._hw_waiters.setdefault(TP, []).append((resp.last_offset + 1, fut))
        self.waiting.append(Waiting(fut, resp, c.now + PRODUCE_TIMEOUT_MS, respond))
        c.schedule(c.now + PRODUCE_TIMEOUT_MS, self.guard(self.complete_waiting))
        self.complete_waiting()

    def complete_waiting(self) -> None:
        """``_wait_for_high_watermark``'s ending for each waiter: done (then
        ``_check_isr_after_append``), failed, or timed out."""
        rm, c = self.rm, self.cluster
        if rm is None:
            return
        keep = []
        for w in self.waiting:
            results = [w.response]
            if w.fut.done():
                exc = w.fut.exception()
                if exc is not None:
                    code = getattr(exc, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
                    results[0] = SimpleNamespace(error_code=code)
                else:
                    rm._check_isr_after_append(TP, results, 0)  # type: ignore[arg-type]
                    if results[0].error_code == ErrorCode.NONE:
                        c.acks_all_decided(self, w.response)
                w.respond(results[0])
            elif c.now >= w.deadline:
                left = [x for x in rm._hw_waiters.get(TP, ()) if x[1] is not w.fut]
                if left:
                    rm._hw_waiters[TP] = left  # type: ignore[assignment]
                else:
                    rm._hw_waiters.pop(TP, None)
                w.respond(SimpleNamespace(error_code=ErrorCode.REQUEST_TIMED_OUT))
            else:
                keep.append(w)
        self.waiting = keep


@dataclass
class Producer:
    """A client producing records one at a time (max.in.flight 1); idempotent ones retry the
    same batch (same sequence) until it is answered, bumping the epoch on OUT_OF_ORDER_SEQUENCE
    (the Java producer's ``bumpIdempotentEpochAndResetIdIfNeeded``)."""

    node_id: int
    acks: int
    idempotent: bool
    producer_id: int = -1
    epoch: int = 0
    seq: int = 0
    counter: int = 0
    leader: int = -1
    pending: bytes | None = None
    pending_value: bytes = b""
    attempts: int = 0
    stopped: bool = False


class Cluster:
    def __init__(
        self,
        seed: int,
        brokers: int = 3,
        min_isr: int = 2,
        drop_rate: float = 0.0,
        max_delay_ms: int = 5,
        flush_messages: int | None = None,
        power_loss: bool = True,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0
        self.clock = ManualClock(1_700_000_000_000)
        self.drop_rate = drop_rate
        self.max_delay_ms = max_delay_ms
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.stats = Stats()
        self.groups: dict[int, int] = {}
        self.slow: dict[int, int] = {}  # node -> extra delay of every message it sends or gets
        if flush_messages is None:
            flush_messages = self.rng.choice([1, 3, 10, 1 << 62])
        self.log_config = LogConfig(
            segment_bytes=self.rng.choice([2048, 8192, 65536]), index_interval_bytes=256,
            min_insync_replicas=min_isr,
            flush_messages=flush_messages,
        )
        self.root = Path(tempfile.mkdtemp(prefix="replsim-"))
        self.topic_info = TopicInfo(TOPIC, uuid.UUID(int=1), 1)
        # the controller: the real QuorumController, records committed at once
        self.h = ControllerHarness(
            ControllerConfig(broker_session_timeout_ms=SESSION_TIMEOUT_MS, auto_leader_rebalance_enable=True,
                             leader_imbalance_check_interval_seconds=1),
            seed=seed,
        )
        self._registered: dict[int, int] = {}  # broker -> the sim incarnation registered last
        ids = list(range(1, brokers + 1))
        for b in ids:
            self.h.register(b)
            self.h.heartbeat(b)
            self._registered[b] = 1  # the incarnation its first start will have
        created = self.h.create_topic(TOPIC, assignments={0: ids},
                                      configs={"min.insync.replicas": str(min_isr)})
        assert created["error_code"] == 0, created
        info = self.h.controller.replication.topic(TOPIC)
        assert info is not None
        self.topic_info = TopicInfo(TOPIC, info.id, 1)
        self.brokers: dict[int, SimBroker] = {}
        self.power_loss = power_loss
        for b in ids:
            d = self.root / f"broker-{b}"
            d.mkdir()
            node = self.brokers[b] = SimBroker(self, b, d)
            if power_loss:
                node.fs = PowerLossFS(d, torn=True, rng=random.Random(seed * 31 + b)).install()
        self.producers: list[Producer] = []
        # invariant state
        self.epoch_leader: dict[int, int] = {}
        self.max_leader_epoch: dict[int, int] = {}  # per broker, per incarnation
        self.controller_epochs = (-1, -1)
        self.last_hw: dict[int, int] = {}
        self.checked_to: dict[int, int] = {}
        self.committed: dict[int, tuple[int, bytes]] = {}  # base offset -> (next offset, batch bytes)
        self.committed_end = 0
        self.committed_values: dict[bytes, int] = {}
        self.committed_producer_batches: dict[tuple[int, int, int], int] = {}
        self.acked_all: dict[bytes, int] = {}  # value -> offset, acknowledged acks=-1
        self.acked_one: dict[bytes, int] = {}
        self.decided: dict[tuple[int, int], int] = {}  # (broker, offset) ack decisions
        self.leaders_checked: set[tuple[int, int, int]] = set()
        # (broker, leader epoch) -> (its HW then, every broker's power cuts then)
        self.lead_start: dict[tuple[int, int], tuple[int, dict[int, int]]] = {}
        self._closed = False
        self._same_time = 0
        # power-cut brokers the controller's ISR still holds -> the leader epoch at the cut
        self.lost_in_isr: dict[int, int] = {}
        self.unclean = False
        for b in ids:
            self.brokers[b].start()

    # ---------------------------------------------------------------- world
    def fail(self, what: str) -> None:
        raise InvariantViolation(f"seed {self.seed}, event {self.stats.events}, t={self.now}: {what}")

    def schedule(self, at: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, action))

    def alive(self, nid: int) -> bool:
        if nid == CONTROLLER or nid >= 100:
            return True
        return self.brokers[nid].alive

    def incarnation(self, nid: int) -> int:
        return self.brokers[nid].incarnation if nid in self.brokers else 0

    def partition(self, *groups: list[int]) -> None:
        self.groups = {nid: i + 1 for i, g in enumerate(groups) for nid in g}

    def heal(self) -> None:
        self.groups = {}

    def connected(self, a: int, b: int) -> bool:
        return self.groups.get(a, 0) == self.groups.get(b, 0)

    def delay(self, a: int, b: int) -> int:
        return self.rng.randint(1, self.max_delay_ms) + self.slow.get(a, 0) + self.slow.get(b, 0)

    def rpc(self, src: int, dst: int, handle: Callable[[Callable[[Any], None]], None],
            reply: Callable[[Any], None], timeout_ms: int, on_fail: Callable[[], None]) -> None:
        """A request from ``src`` to ``dst``: ``handle(respond)`` runs at ``dst`` on arrival,
        ``reply(answer)`` at ``src`` when the answer arrives; ``on_fail`` when ``dst`` refuses
        (dead) or after ``timeout_ms`` (lost). Everything for ``src``'s incarnation of the send."""
        self.stats.messages += 1
        inc = self.incarnation(src)
        state = {"done": False}

        def current() -> bool:
            return not state["done"] and self.alive(src) and self.incarnation(src) == inc

        def fail() -> None:
            if current():
                state["done"] = True
                on_fail()

        def answered(value: Any) -> None:
            self.stats.messages += 1
            if self.rng.random() < self.drop_rate or not self.connected(src, dst):
                self.stats.dropped += 1
                return

            def arrive() -> None:
                if current() and self.connected(src, dst):
                    state["done"] = True
                    reply(value)

            self.schedule(self.now + self.delay(src, dst), arrive)

        dst_inc = self.incarnation(dst)

        def deliver() -> None:
            if not self.connected(src, dst):
                return
            if not self.alive(dst):
                fail()  # connection refused
                return
            if self.incarnation(dst) != dst_inc and dst in self.brokers:
                fail()  # the connection to its previous life is gone
                return
            handle(answered)

        if self.rng.random() < self.drop_rate or not self.connected(src, dst):
            self.stats.dropped += 1
        else:
            self.schedule(self.now + self.delay(src, dst), deliver)
        self.schedule(self.now + timeout_ms, fail)

    # ---------------------------------------------------------------- controller
    def _controller_now(self) -> None:
        self.h.now_ms = self.now

    def controller_register(self, b: int, incarnation: int) -> dict[str, Any]:
        self._controller_now()
        new = self._registered.get(b) != incarnation
        self._registered[b] = incarnation
        resp = self.h.register(b, new_incarnation=new)
        self.after_controller()
        return resp

    def controller_heartbeat(self, b: int, epoch: int, offset: int) -> dict[str, Any]:
        self._controller_now()
        resp: dict[str, Any] = self.h.commit(self.h.controller.broker_heartbeat(
            heartbeat_request(b, epoch, offset), self.now))
        self.after_controller()
        return resp

    def controller_alter(self, request: Any) -> dict[str, Any]:
        self._controller_now()
        resp: dict[str, Any] = self.h.commit(self.h.controller.alter_partition(request))
        self.after_controller()
        return resp

    def controller_poll(self) -> None:
        self._controller_now()
        if self.h.poll():
            self.after_controller()
        self.schedule(self.now + 50, self.controller_poll)

    def registration(self) -> Any:
        info = self.h.controller.replication.topic(TOPIC)
        assert info is not None
        return info.parts[0]

    def metadata(self) -> tuple[int, Any]:
        return self.h.next_offset, self.registration()

    def after_controller(self) -> None:
        """Push the new image to every broker (lost or late pushes: the brokers also pull)."""
        reg = self.registration()
        if (reg.leader_epoch, reg.partition_epoch) < self.controller_epochs:
            self.fail(f"the controller's epochs went back to {(reg.leader_epoch, reg.partition_epoch)}")
        if (reg.leader_epoch, reg.partition_epoch) == self.controller_epochs:
            return
        self.controller_epochs = (reg.leader_epoch, reg.partition_epoch)
        for b in list(self.lost_in_isr):
            if b not in reg.isr:
                del self.lost_in_isr[b]  # out of the ISR: it can only come back by catching up
        meta = self.metadata()
        for b, node in self.brokers.items():
            if self.rng.random() < self.drop_rate or not self.connected(CONTROLLER, b):
                continue
            self.schedule(self.now + self.delay(CONTROLLER, b), self._push(node, meta))

    def _push(self, node: SimBroker, meta: tuple[int, Any]) -> Callable[[], None]:
        def push() -> None:
            if self.connected(CONTROLLER, node.id):
                node.apply_metadata(meta)

        return node.guard(push)

    # ---------------------------------------------------------------- clients
    def add_producer(self, acks: int, idempotent: bool, interval_ms: int = 10,
                     until: int | None = None) -> Producer:
        cid = 100 + len(self.producers)
        pr = Producer(cid, acks, idempotent, producer_id=1000 + len(self.producers) if idempotent else -1)
        self.producers.append(pr)

        def next_record() -> None:
            if pr.stopped or (until is not None and self.now >= until):
                return
            pr.counter += 1
            value = f"{self.seed}:{cid}:{pr.counter}".encode()
            pr.pending_value = value
            pr.attempts = 0
            self._build(pr)
            send()

        def send() -> None:
            if pr.stopped:
                return
            pr.attempts += 1
            if pr.leader < 0 or pr.attempts > 1:
                pr.leader = self.guess_leader()
            target = self.brokers.get(pr.leader)
            if target is None:
                retry_or_drop(ErrorCode.LEADER_NOT_AVAILABLE)
                return
            records = pr.pending
            assert records is not None
            self.stats.produced += 1

            def handle(respond: Callable[[Any], None]) -> None:
                target.produce(records, pr.acks, respond)

            self.rpc(cid, pr.leader, handle, on_response, PRODUCE_TIMEOUT_MS + 200,
                     lambda: retry_or_drop(ErrorCode.REQUEST_TIMED_OUT))

        def on_response(resp: Any) -> None:
            code = int(resp.error_code)
            if code == ErrorCode.NONE:
                offset = int(resp.base_offset)
                if pr.acks == -1:
                    self.acked(pr.pending_value, offset, self.acked_all)
                    self.stats.acked_all += 1
                else:
                    self.acked(pr.pending_value, offset, self.acked_one)
                    self.stats.acked_one += 1
                if pr.idempotent:
                    pr.seq += 1
                self.schedule(self.now + interval_ms, next_record)
            elif code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and pr.idempotent:
                pr.epoch += 1
                pr.seq = 0
                self._build(pr)
                self.schedule(self.now + 20, send)
            else:
                retry_or_drop(code)

        def retry_or_drop(_code: int) -> None:
            if pr.idempotent and pr.attempts < 50:
                self.schedule(self.now + 30, send)
            else:
                self.schedule(self.now + interval_ms, next_record)

        self.schedule(self.now + interval_ms, next_record)
        return pr

    def _build(self, pr: Producer) -> None:
        kw: dict[str, Any] = {}
        if pr.idempotent:
            kw = {"producer_id": pr.producer_id, "producer_epoch": pr.epoch, "base_sequence": pr.seq}
        pr.pending = build_batch([(None, pr.pending_value, [], self.clock.time_ms())], **kw)

    def guess_leader(self) -> int:
        """What a client's metadata says: a random live broker's view (stale, possibly)."""
        views = [n for n in self.brokers.values() if n.alive and n.rm is not None]
        if not views:
            return -1
        node = self.rng.choice(views)
        assert node.rm is not None
        p = node.rm.partitions.get(TP)
        return p.leader_id if p is not None else -1

    def acked(self, value: bytes, offset: int, book: dict[bytes, int]) -> None:
        if value in book and book[value] != offset:
            self.fail(f"record {value!r} acknowledged at {book[value]} and at {offset}")
        book[value] = offset
        if book is self.acked_all and not self.unclean:
            self.check_acked(value, offset)

    def acks_all_decided(self, node: SimBroker, response: Any) -> None:
        """A leader decided an acks=-1 append is committed: its HW passed it, so the committed
        prefix (built after every event) must cover it once this event ends."""
        self.decided[(node.id, int(response.last_offset))] = self.now

    # ---------------------------------------------------------------- loop
    def run_for(self, ms: int) -> None:
        self.run_until(self.now + ms)

    def run_until(self, end: int) -> None:
        while self._queue and self._queue[0][0] <= end:
            t, _, action = heapq.heappop(self._queue)
            if t > self.now:
                self.clock.advance(t - self.now)
                self.now = t
                self._same_time = 0
            self._same_time += 1
            if self._same_time > SAME_TIME_EVENTS:
                self.fail(f"livelock: {SAME_TIME_EVENTS} events at t={t} without time moving")
            action()
            self.stats.events += 1
            self.check()
        if end > self.now:
            self.clock.advance(end - self.now)
            self.now = end

    def start(self) -> None:
        self.schedule(self.now + 50, self.controller_poll)

    # ---------------------------------------------------------------- faults
    def kill(self, b: int, lose_unflushed: bool = False) -> None:
        self.brokers[b].kill(lose_unflushed)

    def restart(self, b: int) -> None:
        node = self.brokers[b]
        if not node.alive:
            node.start()

    def may_lose_unflushed(self, b: int) -> bool:
        """A power cut may hit ``b`` only while another live broker is in the controller's ISR
        and holds the committed prefix: Kafka keeps acknowledged data as long as not every ISR
        member loses what it had not flushed (the last replica standing is KIP-966's case)."""
        reg = self.registration()
        for r in reg.isr:
            node = self.brokers[r]
            plog = node.plog
            if (r != b and node.alive and plog is not None and plog.log_end_offset >= self.committed_end
                    and self.connected(r, CONTROLLER) and r not in self.lost_in_isr):
                return True
        return False

    # ---------------------------------------------------------------- invariants
    def node_started(self, node: SimBroker) -> None:
        assert node.plog is not None
        self.max_leader_epoch[node.id] = -1
        self.last_hw[node.id] = node.plog.high_watermark
        self.checked_to[node.id] = node.plog.log_start_offset

    def node_killed(self, node: SimBroker) -> None:
        pass

    def observe_roles(self, node: SimBroker) -> None:
        """A power-cut broker that leads, live, at a leader epoch after its cut: it was still in
        the ISR after registering again, so it was the last replica standing, and it lost its
        unflushed tail (KIP-966's case: Kafka loses data there too). Later faults took the power
        cut past the fault model: durability is not checked on in this run."""
        assert node.rm is not None
        p = node.rm.partitions.get(TP)
        cut_at = self.lost_in_isr.get(node.id)
        if (p is not None and p.is_leader and cut_at is not None and p.leader_epoch > cut_at
                and not self.unclean):
            self.unclean = True
            self.stats.unclean = 1

    def after_log_change(self, node: SimBroker) -> None:
        pass

    def batches(self, node: SimBroker, start: int, end: int) -> list[tuple[int, int, Any, bytes]]:
        """(base, next, header, bytes) of the batches of ``node`` holding offsets in [start, end)."""
        plog = node.plog
        assert plog is not None
        out: list[tuple[int, int, Any, bytes]] = []
        pos = max(start, plog.log_start_offset)
        while pos < end:
            data = plog.read(pos, MAX_BYTES, max_offset=end)
            try:
                raw = data.read_bytes()
            finally:
                data.close()
            if not raw:
                break
            for p, h in iter_batches(raw):
                if h.next_offset > end:
                    return out
                out.append((h.base_offset, h.next_offset, h, bytes(raw[p:p + h.size])))
                pos = h.next_offset
        return out

    def check(self) -> None:
        """After every event:

        * the controller's (leader epoch, partition epoch) never goes back; each broker's leader
          epoch never goes back (per incarnation); one leader per leader epoch; each log's epoch
          cache strictly increasing, and its batches' epochs never above the broker's epoch;
        * on a leader: HW <= min log end offset over the maximal ISR as it knows them (or the HW
          it started leading with), and <= the real log end offset of every live ISR member
          following it at its epoch that lost nothing since;
        * committed data never changes: the global committed prefix is built from every live
          broker's log below its HW, which must equal it (so followers' logs are prefixes of the
          leader's up to their HW, and bytes are equal at equal offsets below the HW); a broker
          that leads holds all of it (leader completeness);
        * each HW never goes back within an incarnation (truncation included);
        * no value and no (producer id, epoch, sequence) twice in the committed prefix (producer
          idempotence); every acknowledged acks=-1 record is in it, at its offset, and stays.
        """
        self.stats.checks += 1
        for node in self.brokers.values():
            if not node.alive or node.rm is None or node.plog is None:
                continue
            b, rm, plog = node.id, node.rm, node.plog
            p = rm.partitions.get(TP)
            if p is not None:
                if p.leader_epoch < self.max_leader_epoch[b]:
                    self.fail(f"broker {b}: leader epoch went back to {p.leader_epoch}")
                self.max_leader_epoch[b] = p.leader_epoch
                if p.is_leader:
                    prev = self.epoch_leader.setdefault(p.leader_epoch, b)
                    if prev != b:
                        self.fail(f"two leaders at epoch {p.leader_epoch}: {prev} and {b}")
                    key = (b, p.leader_epoch, node.incarnation)
                    if key not in self.leaders_checked:
                        self.leaders_checked.add(key)
                        self.lead_start[(b, p.leader_epoch)] = (plog.high_watermark, self.losses())
                        if not self.unclean:
                            self.check_leader_completeness(node)
                    self.check_leader_hw(node, p)
            entries = plog.epoch_entries
            for (e1, o1), (e2, o2) in itertools.pairwise(entries):
                if not (e1 < e2 and o1 < o2):
                    self.fail(f"broker {b}: epoch cache not increasing: {entries}")
            hw = plog.high_watermark
            if hw < self.last_hw[b]:
                self.fail(f"broker {b}: HW went back from {self.last_hw[b]} to {hw}")
            self.last_hw[b] = hw
            if hw > self.checked_to[b] and not self.unclean:
                self.check_log(node, self.checked_to[b], hw)
                self.checked_to[b] = hw
        for (b, last), _t in list(self.decided.items()):
            if self.committed_end <= last and not self.unclean:
                self.fail(f"broker {b} acknowledged offset {last} (acks=-1) beyond the committed end "
                          f"{self.committed_end}")
            del self.decided[(b, last)]
        if self.stats.events % 400 == 0 and not self.unclean:
            self.check_all()

    def losses(self) -> dict[int, int]:
        return {b: n.lossy_kills for b, n in self.brokers.items()}

    def check_leader_hw(self, node: SimBroker, p: Partition) -> None:
        plog = node.plog
        assert plog is not None
        hw = plog.high_watermark
        start_hw, losses = self.lead_start[(node.id, p.leader_epoch)]
        if len(p.replicas) > 1 and hw > start_hw:
            for r in p.maximal_isr:
                st = p.remote.get(r)
                if r == node.id or self.brokers[r].lossy_kills != losses[r]:
                    continue  # a member that lost its unflushed tail may report less (it leaves the ISR)
                if st is None or st.log_end_offset < hw:
                    self.fail(f"leader {node.id}: HW {hw} above ISR member {r}'s log end offset as it "
                              f"knows it ({st}; maximal ISR {p.maximal_isr})")
            if self.losses() == losses:
                for r in p.isr:
                    other = self.brokers.get(r)
                    if r == node.id or other is None or not other.alive or other.rm is None:
                        continue
                    op = other.rm.partitions.get(TP)
                    if op is None or op.leader_epoch != p.leader_epoch or op.leader_id != node.id:
                        continue
                    assert other.plog is not None
                    if other.plog.log_end_offset < hw:
                        self.fail(f"leader {node.id}: HW {hw} above ISR member {r}'s log end "
                                  f"{other.plog.log_end_offset}")

    def check_all(self) -> None:
        for node in self.brokers.values():
            if node.alive and node.plog is not None:
                self.check_log(node, node.plog.log_start_offset, node.plog.high_watermark)

    def check_leader_completeness(self, node: SimBroker) -> None:
        plog = node.plog
        assert plog is not None
        if plog.log_end_offset < self.committed_end:
            self.fail(f"leader {node.id} misses committed data: its log ends at {plog.log_end_offset}, "
                      f"committed up to {self.committed_end}")
        for base, _nxt, _h, data in self.batches(node, plog.log_start_offset, self.committed_end):
            known = self.committed.get(base)
            if known is None or known[1] != data:
                self.fail(f"leader {node.id} holds another batch at committed offset {base}")

    def check_log(self, node: SimBroker, start: int, end: int) -> None:
        for base, nxt, h, data in self.batches(node, start, end):
            known = self.committed.get(base)
            if known is not None:
                if known[1] != data:
                    self.fail(f"broker {node.id}: committed batch at {base} changed")
            elif base == self.committed_end:
                self.commit_batch(base, nxt, h, data)
            elif base > self.committed_end:
                self.fail(f"broker {node.id} commits {base} past the committed end {self.committed_end}")
            else:
                self.fail(f"broker {node.id}: batch at {base} does not align with committed batches")

    def commit_batch(self, base: int, nxt: int, h: Any, data: bytes) -> None:
        self.committed[base] = (nxt, data)
        self.committed_end = nxt
        if h.producer_id >= 0:
            key = (h.producer_id, h.producer_epoch, h.base_sequence)
            if key in self.committed_producer_batches:
                self.fail(f"producer batch {key} committed twice: at {self.committed_producer_batches[key]} "
                          f"and {base}")
            self.committed_producer_batches[key] = base
        for rec in decode_records(data):
            value = rec.value or b""
            if value in self.committed_values:
                self.fail(f"record {value!r} committed twice: at {self.committed_values[value]} and "
                          f"{rec.offset}")
            self.committed_values[value] = rec.offset

    def check_acked(self, value: bytes, offset: int) -> None:
        if self.committed_values.get(value) != offset:
            self.fail(f"acknowledged (acks=-1) record {value!r} at {offset} is not committed there "
                      f"(committed at {self.committed_values.get(value)}, "
                      f"committed end {self.committed_end})")

    # ---------------------------------------------------------------- the end
    def settle(self, within_ms: int = 20_000) -> None:
        """Heal, restart everyone, stop the producers, then require: every broker in the ISR,
        every log byte-identical to the leader's with the HW at its end, a last acks=-1 record
        acknowledged, and every acknowledged acks=-1 record in every log at its offset."""
        self.heal()
        self.slow.clear()
        for pr in self.producers:
            pr.stopped = True
        for b in self.brokers:
            self.restart(b)
        final = self.add_producer(-1, True)
        final.producer_id = 9999
        deadline = self.now + within_ms
        while self.now < deadline:
            self.run_for(100)
            if final.counter >= 1 and final.pending_value in self.acked_all:
                final.stopped = True
                if self.converged():
                    self.final_check()
                self.add_totals()
                return
        reg = self.registration()
        state = {b: (n.plog.log_end_offset, n.plog.high_watermark) if n.plog else None
                 for b, n in self.brokers.items()}
        self.fail(f"no convergence within {within_ms} ms after healing: {reg}, logs {state}")

    def converged(self) -> bool:
        reg = self.registration()
        if reg.leader < 0 or set(reg.isr) != set(reg.replicas):
            return False
        leader = self.brokers[reg.leader]
        if leader.plog is None:
            return False
        leo = leader.plog.log_end_offset
        return all(n.plog is not None and n.plog.log_end_offset == leo and n.plog.high_watermark == leo
                   for n in self.brokers.values())

    def final_check(self) -> None:
        if self.unclean:
            return
        self.check_all()
        reg = self.registration()
        leader = self.brokers[reg.leader]
        assert leader.plog is not None
        ref = self.batches(leader, leader.plog.log_start_offset, leader.plog.log_end_offset)
        for node in self.brokers.values():
            assert node.plog is not None
            got = self.batches(node, leader.plog.log_start_offset, node.plog.log_end_offset)
            if [d for *_x, d in got] != [d for *_x, d in ref]:
                self.fail(f"broker {node.id}'s log differs from the leader {reg.leader}'s after settling")
        for value, offset in self.acked_all.items():
            self.check_acked(value, offset)

    def add_totals(self) -> None:
        TOTALS.runs += 1
        TOTALS.events += self.stats.events
        TOTALS.checks += self.stats.checks
        TOTALS.messages += self.stats.messages
        TOTALS.kills += self.stats.kills
        TOTALS.power_cuts += self.stats.power_cuts
        TOTALS.elections += len(self.epoch_leader)
        TOTALS.acked_all += self.stats.acked_all
        TOTALS.acked_one += self.stats.acked_one
        TOTALS.truncations += self.stats.truncations
        TOTALS.unclean += self.stats.unclean

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for node in self.brokers.values():
            if node.plog is not None:
                node.plog.close_without_flush()
            if node.rm is not None:
                node.rm.validation_executor.shutdown(wait=False)
        for node in reversed(list(self.brokers.values())):
            if node.fs is not None:
                node.fs.uninstall()
        shutil.rmtree(self.root, ignore_errors=True)
