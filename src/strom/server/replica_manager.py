"""The partitions this broker hosts, and every read and write of their logs (Kafka's
``ReplicaManager``, with the log-dir part of its ``LogManager``).

Theory of operation
-------------------
* **Partitions.** ``logs`` maps ``(topic, partition)`` to the open
  :class:`~strom.log.partition_log.PartitionLog`; ``offline_partitions`` names those whose log
  dir failed (until a restart). Logs are opened at start (:meth:`ReplicaManager.load_logs`),
  made for new partitions (:meth:`make_partition_logs` in a worker thread, then
  :meth:`add_partitions`), and dropped with their topic (:meth:`remove_partitions`). Topic
  lifecycle itself (the registry, names, counts) is the broker's.
* **One answer per partition error.** :meth:`partition_error` / :meth:`leader_log_or_error`
  are the only place that decides what a request about a partition gets when it cannot be
  served here: KAFKA_STORAGE_ERROR for a partition on a failed dir, NOT_LEADER_OR_FOLLOWER when
  the metadata cache names another leader (a single node always leads; replication will only
  change what the cache says), UNKNOWN_TOPIC_OR_PARTITION otherwise.
* **Appends.** :meth:`append_records` is Produce's path: per-partition checks, then either
  every partition is appended at once without yielding (no record walk, nothing queued), or
  each partition takes its place in the partition's *append chain* before anything yields, the
  record-by-record walks run in ``validation_executor`` threads concurrently, and each partition
  appends once its walk is done and the append before it in the chain has happened. Per
  partition, appends happen in arrival order, so producer sequence and idempotence state see
  the batches as sent. ``acks=-1`` completes when the high watermark covers the append (at once
  on a single node: the HW follows the log end offset); ``timeout_ms`` bounds the wait.
  :meth:`append_to_leader` is one partition's append (coordinators, markers).
* **Reads.** :meth:`read` (Fetch), :meth:`fetch_offset` (ListOffsets) and
  :meth:`partition_state` (log start, HW, LSO, log end) answer from the leader's log; a storage
  error on the way goes through :meth:`read_failed`. KIP-392: a consumer's Fetch v11+ may also be
  served by a follower (up to the follower's HW, or LSO), and the leader may answer it with a
  ``preferred_read_replica`` instead of records (``replica.selector.class``,
  :mod:`strom.replication.selector`).
* **Delayed fetches.** ``purgatory`` wakes long-polling fetches; every HW advance, dir failure
  and log swap notifies it.
* **Log dirs.** A device error (:meth:`note_storage_error`) or a failed check
  (:meth:`check_log_dir`, also periodic) takes a dir offline (:meth:`mark_log_dir_offline`):
  its partitions leave ``logs`` for ``offline_partitions``. The first dir holds the broker's
  metadata; its failure calls ``halt``. DescribeLogDirs and AlterReplicaLogDirs ask
  :meth:`log_dir_replicas`, :meth:`log_dir_usage` and :meth:`alter_replica_log_dir` (moves:
  :mod:`strom.server.log_dir_mover`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import errno
import logging
import os
import shutil
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..clock import Clock
from ..config import ConfigError, LogConfig
from ..durable_file import fsync_dir
from ..log.errors import KafkaStorageError, LogError
from ..log.local_log import EMPTY_FETCH, FetchData
from ..log.log_dirs import META_FILE, discover, next_log_dirs, parse_partition_dir
from ..log.partition_log import AppendInfo, PartitionLog
from ..metadata.topics import INTERNAL_TOPICS, TopicError, TopicInfo, validate_topic_name
from ..observability.metrics import BrokerMetrics
from ..protocol.errors import ErrorCode
from ..protocol.records import BATCH_OVERHEAD, parse_header
from ..rate_limited_log import RateLimitedLog
from ..replication.leader import handle_follower_fetch, leader_epoch_error
from ..replication.selector import ReplicaView, preferred_read_replica, selector_name
from ..scheduler import Scheduler
from .log_dir_mover import LogDirMover, remove_tree
from .metadata_cache import MetadataCache, RegistryMetadataCache
from .partition import Partition, RoleChange
from .purgatory import FetchPurgatory

log = logging.getLogger("strom.replica_manager")

TopicPartition = tuple[str, int]

# errors of the device under a log dir: the dir goes offline (not ENOSPC, EMFILE: see check_log_dir)
_DEVICE_ERRNOS = frozenset({errno.EIO, errno.EROFS, errno.ENODEV, errno.ENXIO})
# what the periodic check takes for a failed dir: the above, or the dir gone or unreadable
# a full disk: a dir failure in a cluster (see fails_dir_when_full)
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_DIR_FAILURE_ERRNOS = _DEVICE_ERRNOS | {errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.ESTALE}

# ListOffsets special timestamps
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
MAX_PREFERRED = 10_000  # remembered destinations of partitions not created yet (hostile clients)


class AppendOrigin(enum.Enum):
    """Who appends (Kafka's ``AppendOrigin``): clients may not write internal topics."""

    CLIENT = "client"
    COORDINATOR = "coordinator"


class NotLeaderOrFollowerError(LogError):
    error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER


@dataclass(slots=True)
class PartitionResponse:
    """One partition's answer to an append (Kafka's ``ProduceResponse.PartitionResponse``)."""

    error_code: int = ErrorCode.NONE
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: Sequence[tuple[int, str]] = ()  # (batch index, message)
    last_offset: int = -1  # the append's last offset (what acks=-1 waits for the HW to pass)


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A led partition's offsets: [log start, log end), the high watermark and the last stable
    offset (the first offset of the oldest open transaction, else the HW)."""

    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class LogDirReplica:
    """A log of this broker in a log dir, for DescribeLogDirs: ``is_future`` for the copy a
    move is making, whose ``offset_lag`` is how far it is behind the current log end offset."""

    log_dir: Path
    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool = False


@dataclass(slots=True)
class LogReadResult:
    """One partition's read for Fetch (Kafka's ``LogReadResult``). ``records`` holds file
    regions whose descriptors the caller owns (close them, or hand them to the response)."""

    error_code: int = ErrorCode.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: list[tuple[int, int]] | None = None
    records: FetchData = EMPTY_FETCH
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset) for a follower that diverged
    preferred_read_replica: int = -1  # KIP-392: the consumer should fetch from this replica
    # a follower's fetch to answer at once: the HW moved past what that follower was last told
    high_watermark_news: bool = False


@dataclass(frozen=True, slots=True)
class OffsetResult:
    """ListOffsets' answer for one partition (Kafka's ``TimestampAndOffset`` plus its error)."""

    error_code: int = ErrorCode.NONE
    offset: int = -1
    timestamp: int = -1
    leader_epoch: int = -1


_UNANSWERED = PartitionResponse(ErrorCode.UNKNOWN_SERVER_ERROR)  # a slot of append_records not filled yet

# An append's producer, when its first batch is transactional: (producer id, epoch)
Producer = tuple[int, int]
# Produce's transaction verification: (topic, partition, producer) -> the error to answer
Verifier = Callable[[str, int, Producer], Awaitable[int]]


def txn_producer(records: Any) -> Producer | None:
    """(producer id, epoch) of a transactional first batch, else None (header only)."""
    if len(records) < BATCH_OVERHEAD:
        return None
    try:
        h = parse_header(records, 0)
    except Exception:
        return None  # validation reports it
    if h.magic != 2 or not h.is_transactional or h.is_control or h.producer_id < 0:
        return None
    return h.producer_id, h.producer_epoch


class ReplicaManager:
    LEADER_EPOCH = 0

    def __init__(
        self,
        *,
        node_id: int,
        config: Any,
        clock: Clock,
        metadata_cache: MetadataCache,
        log_dirs: Sequence[Path],
        offline_dirs: dict[Path, str],
        offline_partitions: dict[TopicPartition, Path | None] | None = None,
        log_config: Callable[[TopicInfo], LogConfig],
        storage_log: RateLimitedLog,
        halt: Callable[[], None] = lambda: None,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.clock = clock
        self.metadata_cache = metadata_cache
        self.log_dirs = list(log_dirs)
        self.metadata_log_dir = self.log_dirs[0]
        self.log_config = log_config
        self.storage_log = storage_log
        self._halt = halt
        # told of a failed dir other than the first (KIP-858: the broker heartbeats at once)
        self.on_dir_offline: Callable[[Path], None] | None = None
        self.logs: dict[TopicPartition, PartitionLog] = {}
        # failed log dirs (Kafka's offline dirs) -> why; their partitions are offline until restart
        self.offline_dirs = offline_dirs
        # partitions of the registry that are on a failed dir (None: not found, maybe there)
        self.offline_partitions: dict[TopicPartition, Path | None] = (
            offline_partitions if offline_partitions is not None else {}
        )
        # AlterReplicaLogDirs for a partition not created yet (Kafka's preferred log dir)
        self.preferred_dirs: dict[TopicPartition, Path] = {}
        self.mover = LogDirMover(self)
        self.purgatory = FetchPurgatory(scheduler)
        self.metrics: BrokerMetrics | None = None  # the broker's counters (ISR shrinks and expands)
        # Record-by-record validation of produced batches (compressed, or for a compacted topic)
        # runs here, off the event loop (Kafka does it on its num.io.threads request handlers).
        # Each walk holds a few MB at most (strom.protocol.batch_validation), so the pool's size
        # bounds that memory; more threads than cores would only contend for the GIL.
        self.validation_executor = ThreadPoolExecutor(
            max_workers=max(1, min(config["num.io.threads"], os.cpu_count() or 1, 4)),
            thread_name_prefix="strom-validate",
        )
        # per partition, the completion of the last append waiting for its validation
        self.append_chains: dict[TopicPartition, asyncio.Future[None]] = {}
        # acks=-1 appends waiting for the HW: partition -> [(offset the HW must pass, future)]
        self._hw_waiters: dict[TopicPartition, list[tuple[int, asyncio.Future[None]]]] = {}
        self.stopping = threading.Event()  # set at shutdown: partition creation gives up
        # replication state of the partitions hosted here (on the metadata quorum; empty on the
        # registry path, where this node leads everything and the HW is the log end offset)
        self.partitions: dict[TopicPartition, Partition] = {}
        # the leader's own bound on the HW (its log end offset; for the coordinators' topics what
        # is durable), set by advance_high_watermark
        self._leader_caps: dict[TopicPartition, int] = {}
        # set by the broker in a cluster: followers' fetchers, and the AlterPartition sender
        self.fetcher_manager: Any = None
        # the coordinators' writer: told when an internal topic's HW moves or its leadership goes
        self.coordinator_hooks: Any = None
        self.isr_sender: Callable[[Partition, tuple[int, ...]], None] | None = None
        # KIP-392 (replica.selector.class): None, or the selector naming a consumer's read replica
        try:
            selector = str(config["replica.selector.class"] or "")
        except KeyError:  # a partial config (tests, the simulation): Kafka's default
            selector = ""
        self.replica_selector = selector_name(selector)
        self._follower_reads: dict[TopicPartition, int] = {}  # partition -> leader epoch logged
        self._preferred_logged: dict[TopicPartition, tuple[str, int]] = {}  # the last (rack, replica) logged

    # ------------------------------------------------------------------ partition errors
    def partition_error(self, topic: str, partition: int) -> int:
        """What a request about the partition gets here: NONE if this broker leads it."""
        return self.leader_log_or_error(topic, partition)[1]

    def leader_log_or_error(
        self, topic: str, partition: int, current_leader_epoch: int = -1
    ) -> tuple[PartitionLog | None, int]:
        """Kafka's ``getPartitionOrError`` + ``leaderLogIfLocal``: the partition's log if this
        broker leads it (at ``current_leader_epoch``, when the request names one: KIP-320), else
        None and the error (see the module docstring)."""
        tp = (topic, partition)
        plog = self.logs.get(tp)
        leader = self.metadata_cache.leader_id(topic, partition)
        if plog is not None and leader == self.node_id:
            if current_leader_epoch >= 0:
                error = self.leader_epoch_error(tp, current_leader_epoch)
                if error != ErrorCode.NONE:
                    return None, error
            return plog, ErrorCode.NONE
        if tp in self.offline_partitions:
            return None, ErrorCode.KAFKA_STORAGE_ERROR
        if leader is None or (plog is None and leader == self.node_id):
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return None, ErrorCode.NOT_LEADER_OR_FOLLOWER

    def local_log_or_error(
        self, topic: str, partition: int, current_leader_epoch: int = -1
    ) -> tuple[PartitionLog | None, int]:
        """Kafka's ``getPartitionOrException`` + ``localLogWithEpochOrThrow(requireLeader=false)``
        (a consumer's Fetch v11+, KIP-392): the partition's log if it is hosted here, leader or
        follower, at ``current_leader_epoch`` when the request names one, else None and the
        error: KAFKA_STORAGE_ERROR (failed dir), FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH,
        NOT_LEADER_OR_FOLLOWER (not a replica here), UNKNOWN_TOPIC_OR_PARTITION."""
        tp = (topic, partition)
        plog = self.logs.get(tp)
        leader = self.metadata_cache.leader_id(topic, partition)
        if plog is None:
            if tp in self.offline_partitions:
                return None, ErrorCode.KAFKA_STORAGE_ERROR
            if leader is None:
                return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if leader is None:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if leader != self.node_id and tp not in self.partitions:
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER  # a log here, but not a replica (yet)
        if current_leader_epoch >= 0:
            error = self.leader_epoch_error(tp, current_leader_epoch)
            if error != ErrorCode.NONE:
                return None, error
        return plog, ErrorCode.NONE

    def partition_state(self, topic: str, partition: int) -> tuple[PartitionState | None, int]:
        """The offsets of a partition this broker leads, else None and the error."""
        plog, error = self.leader_log_or_error(topic, partition)
        if plog is None:
            return None, error
        state = PartitionState(
            plog.log_start_offset, plog.high_watermark, plog.last_stable_offset, plog.log_end_offset
        )
        return state, ErrorCode.NONE

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The local log of the partition, leader or not (admin: log dirs, configs)."""
        return self.logs.get((topic, partition))

    def is_online(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.logs

    # ------------------------------------------------------------------ appends
    async def append_records(
        self,
        entries: Sequence[tuple[str, int, Any]],
        *,
        acks: int,
        timeout_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verify: Verifier | None = None,
    ) -> list[PartitionResponse]:
        """Append ``(topic, partition, records)`` entries; one response per entry, in order.

        ``verify`` (Produce with a transactional id) is asked, at the partition's turn in its
        append chain, about a transactional batch whose producer has no transaction open here.
        Does not yield unless a partition needs a record walk or a verification, another append
        to one of its partitions is under way, or ``acks=-1`` waits for the HW."""
        results, wait = await self.append_records_then_wait(
            entries, acks=acks, timeout_ms=timeout_ms, origin=origin, verify=verify
        )
        if wait is not None:
            await wait
        return results

    async def append_records_then_wait(
        self,
        entries: Sequence[tuple[str, int, Any]],
        *,
        acks: int,
        timeout_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verify: Verifier | None = None,
    ) -> tuple[list[PartitionResponse], Coroutine[Any, Any, None] | None]:
        """:meth:`append_records` in two steps: the appends (done when this returns), and for
        ``acks=-1`` the wait for the HW to pass them, returned as a coroutine that completes the
        responses in place (the caller must await it). The network layer reads and appends a
        connection's next produce request while this one waits (the appends stay in request
        order; the responses are sent in order)."""
        results: list[PartitionResponse] = [_UNANSWERED] * len(entries)
        pending: list[tuple[int, str, int, Any, bool]] = []  # (slot, topic, partition, records, walk)
        to_verify: dict[TopicPartition, Producer] = {}
        chains = self.append_chains
        cache = self.metadata_cache
        slow = False
        if acks not in (0, 1, -1):  # every partition gets it (Kafka's answer)
            return [PartitionResponse(ErrorCode.INVALID_REQUIRED_ACKS) for _ in entries], None
        for slot, (topic, partition, records) in enumerate(entries):
            leader = cache.leader_id(topic, partition)
            if leader is None:
                results[slot] = PartitionResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            if topic in INTERNAL_TOPICS and origin is AppendOrigin.CLIENT:  # the coordinators' (Kafka's rule)
                message = f"Cannot append to internal topic {topic}"
                results[slot] = PartitionResponse(ErrorCode.INVALID_TOPIC_EXCEPTION, error_message=message)
                continue
            if not records:
                results[slot] = PartitionResponse(ErrorCode.CORRUPT_MESSAGE, error_message="empty record set")
                continue
            plog = self.logs.get((topic, partition))
            if plog is None or leader != self.node_id:
                results[slot] = PartitionResponse(self.partition_error(topic, partition))
                continue
            if acks == -1 and (too_small := self.isr_too_small((topic, partition))) is not None:
                results[slot] = PartitionResponse(ErrorCode.NOT_ENOUGH_REPLICAS, error_message=too_small)
                continue
            try:
                walk = plog.needs_record_walk(records)
            except Exception as e:
                results[slot] = self._append_error(topic, partition, e)
                continue
            if verify is not None:
                producer = txn_producer(records)
                if producer is not None and self._needs_verification(topic, partition, producer):
                    to_verify[(topic, partition)] = producer
            slow = slow or walk or (topic, partition) in chains or bool(to_verify)
            pending.append((slot, topic, partition, records, walk))
        from_coordinator = origin is AppendOrigin.COORDINATOR
        if not slow:  # checked above, in this same step of the event loop: append at once
            logs = self.logs
            for slot, topic, partition, records, _walk in pending:
                results[slot] = self._append_one(
                    topic, partition, records, False, from_coordinator, logs[(topic, partition)]
                )
        elif pending:
            await self._append_in_chains(pending, results, to_verify, verify, from_coordinator)
        if acks == -1 and pending and not self._replicated_already(pending, results):
            return results, self._wait_for_high_watermark(pending, results, timeout_ms)
        return results, None

    def _replicated_already(self, pending: list[tuple[int, str, int, Any, bool]],
                            results: list[PartitionResponse]) -> bool:
        """acks=-1 with every append already below its partition's HW (one replica in the ISR):
        nothing to wait for; the ISR checked as after a wait."""
        logs = self.logs
        for slot, topic, partition, _records, _walk in pending:
            r = results[slot]
            if r.error_code == ErrorCode.NONE:
                plog = logs.get((topic, partition))
                if plog is None or plog.high_watermark <= r.last_offset:
                    return False
        for slot, topic, partition, _records, _walk in pending:
            if results[slot].error_code == ErrorCode.NONE:
                self._check_isr_after_append((topic, partition), results, slot)
        return True

    def produce_purgatory_size(self) -> int:
        """Produces with acks=all waiting for the high watermark (a metric)."""
        return sum(len(w) for w in self._hw_waiters.values())

    def _needs_verification(self, topic: str, partition: int, producer: Producer) -> bool:
        """Kafka's ``hasOngoingTransaction`` negated: the producer has no transaction open here at
        this epoch, so the coordinator must say the partition is in one first."""
        plog = self.logs.get((topic, partition))
        if plog is None:
            return False  # deleted meanwhile: the append answers UNKNOWN_TOPIC_OR_PARTITION
        entry = plog.producer_state.last_entry(producer[0])
        return not (
            entry is not None
            and entry.producer_epoch == producer[1]
            and entry.current_txn_first_offset is not None
        )

    def _append_error(self, topic: str, partition: int, e: BaseException) -> PartitionResponse:
        """The partition's answer to a failed validation or append."""
        if isinstance(e, KafkaStorageError | OSError):  # one rate-limited line, no traceback
            self.storage_log.failed(
                "append to", f"{topic}-{partition}", e,
                "answering KAFKA_STORAGE_ERROR, nothing appended; every produce retries",
            )
            return PartitionResponse(ErrorCode.KAFKA_STORAGE_ERROR, error_message="storage error")
        if isinstance(e, KeyError):  # deleted while its records were being validated, or its dir failed
            return PartitionResponse(self.partition_error(topic, partition))
        code: int | None = getattr(e, "error_code", None)  # log errors carry Kafka codes
        if code is None:
            log.error("unexpected append failure on %s-%d", topic, partition, exc_info=e)
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        record_errors = getattr(e, "record_errors", None) or ()
        return PartitionResponse(code, error_message=str(e), record_errors=record_errors)

    def _append_one(
        self,
        topic: str,
        partition: int,
        records: Any,
        prevalidated: bool,
        from_coordinator: bool,
        led: PartitionLog | None = None,
    ) -> PartitionResponse:
        """``led``: the partition's log, already found led here in this step of the event loop."""
        try:
            if led is not None:
                res = self._append_to_log(led, records, self.leader_epoch_of((topic, partition)), False,
                                          from_coordinator, prevalidated)
            else:
                res = self.append_to_leader(
                    topic, partition, records, prevalidated=prevalidated, from_coordinator=from_coordinator
                )
        except Exception as e:
            return self._append_error(topic, partition, e)
        if self.storage_log.failing:
            self.storage_log.ok("append to", f"{topic}-{partition}")
        return PartitionResponse(
            ErrorCode.NONE, res.first_offset, res.log_append_time, res.log_start_offset,
            last_offset=res.last_offset,
        )

    async def _append_in_chains(
        self,
        pending: list[tuple[int, str, int, Any, bool]],
        results: list[PartitionResponse],
        to_verify: dict[TopicPartition, Producer],
        verify: Verifier | None,
        from_coordinator: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        chains = self.append_chains
        tickets: list[tuple[asyncio.Future[None] | None, asyncio.Future[None]]] = []
        for _slot, topic, partition, _records, _walk in pending:  # no await in this loop: one atomic step
            mine: asyncio.Future[None] = loop.create_future()
            tickets.append((chains.get((topic, partition)), mine))
            chains[(topic, partition)] = mine
        pool = self.validation_executor
        checks: list[asyncio.Future[Any] | None] = [
            loop.run_in_executor(pool, self.logs[(topic, partition)].check_batches, records)
            if walk
            else None
            for _slot, topic, partition, records, walk in pending
        ]
        try:
            for item, (before, mine), check in zip(pending, tickets, checks, strict=True):
                slot, topic, partition, records, walk = item
                error: BaseException | None = None
                if check is not None:
                    try:
                        await check
                    except Exception as e:
                        error = e
                if before is not None and not before.done():
                    await asyncio.wait([before])
                producer = to_verify.get((topic, partition))
                verify_error: int = ErrorCode.NONE
                # checked again now the appends before it are done: they may have opened the transaction
                if producer is not None and verify is not None and self._needs_verification(
                    topic, partition, producer
                ):
                    verify_error = await verify(topic, partition, producer)
                if error is not None:
                    results[slot] = self._append_error(topic, partition, error)
                elif verify_error != ErrorCode.NONE:
                    results[slot] = PartitionResponse(verify_error)
                else:
                    results[slot] = self._append_one(topic, partition, records, walk, from_coordinator)
                _release(chains, (topic, partition), mine)
        finally:
            for item, (_before, mine) in zip(pending, tickets, strict=True):
                _release(chains, (item[1], item[2]), mine)
            for check in checks:
                if check is not None and not check.done():
                    check.cancel()

    async def _wait_for_high_watermark(
        self,
        pending: list[tuple[int, str, int, Any, bool]],
        results: list[PartitionResponse],
        timeout_ms: int,
    ) -> None:
        """acks=-1: each appended partition completes once its HW passes the append (Kafka's
        DelayedProduce); REQUEST_TIMED_OUT after ``timeout_ms``."""
        waits: list[tuple[int, TopicPartition, asyncio.Future[None]]] = []
        for slot, topic, partition, _records, _walk in pending:
            r = results[slot]
            if r.error_code != ErrorCode.NONE:
                continue
            plog = self.logs.get((topic, partition))
            if plog is not None and plog.high_watermark > r.last_offset:
                self._check_isr_after_append((topic, partition), results, slot)
                continue  # e.g. a single replica: the HW is the log end offset
            tp = (topic, partition)
            waits.append((slot, tp, self._add_hw_waiter(tp, r.last_offset + 1)))
        if not waits:
            return
        try:
            await asyncio.wait([f for _s, _tp, f in waits], timeout=max(timeout_ms, 0) / 1000)
        finally:  # timed out, or the request was cancelled: the waiters go
            for slot, tp, fut in waits:
                if not fut.done():
                    self._drop_hw_waiter(tp, fut)
                    results[slot] = PartitionResponse(ErrorCode.REQUEST_TIMED_OUT)
                elif not fut.cancelled() and (exc := fut.exception()) is not None:
                    code = getattr(exc, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
                    results[slot] = PartitionResponse(code)
                else:
                    self._check_isr_after_append(tp, results, slot)

    def _add_hw_waiter(self, tp: TopicPartition, need: int) -> asyncio.Future[None]:
        """A future completed once ``tp``'s HW reaches ``need`` (:meth:`_high_watermark_advanced`),
        or failed with the partition's error (:meth:`_fail_waiters`)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._hw_waiters.setdefault(tp, []).append((need, fut))
        return fut

    def _drop_hw_waiter(self, tp: TopicPartition, fut: asyncio.Future[None]) -> None:
        """A waiter given up (timed out, or its request cancelled): cancelled and forgotten."""
        fut.cancel()
        left = [w for w in self._hw_waiters.get(tp, ()) if w[1] is not fut]
        if left:
            self._hw_waiters[tp] = left
        else:
            self._hw_waiters.pop(tp, None)

    def isr_too_small(self, tp: TopicPartition) -> str | None:
        """Why an acks=-1 append to ``tp`` is refused with NOT_ENOUGH_REPLICAS (its ISR is below
        ``min.insync.replicas``, Kafka's ``appendRecordsToLeader`` check), or None."""
        p = self.partitions.get(tp)
        plog = self.logs.get(tp)
        if p is None or plog is None:
            return None
        min_isr = plog.config.min_insync_replicas
        if len(p.isr) >= min_isr:
            return None
        return (f"The size of the current ISR {list(p.isr)} is insufficient to satisfy "
                f"the min.isr requirement of {min_isr} for partition {tp[0]}-{tp[1]}")

    async def await_high_watermark(self, tp: TopicPartition, offset: int, timeout_ms: int) -> int:
        """Until ``tp``'s HW reaches ``offset`` (the ISR has everything below it): NONE, or why
        not: REQUEST_TIMED_OUT after ``timeout_ms``, NOT_LEADER_OR_FOLLOWER when leadership moved
        meanwhile (what was appended may be truncated), NOT_ENOUGH_REPLICAS_AFTER_APPEND when the
        HW passed it with the ISR below ``min.insync.replicas`` (as an acks=-1 produce), or the
        partition's error. Kafka writes transaction markers with acks=-1 for this reason."""
        plog = self.logs.get(tp)
        if plog is None or self.metadata_cache.leader_id(*tp) != self.node_id:
            return self.partition_error(*tp)
        if plog.high_watermark < offset:
            fut = self._add_hw_waiter(tp, offset)
            try:
                await asyncio.wait([fut], timeout=max(timeout_ms, 0) / 1000)
            finally:
                if not fut.done():
                    self._drop_hw_waiter(tp, fut)
            if fut.cancelled():
                return ErrorCode.REQUEST_TIMED_OUT
            exc = fut.exception()
            if exc is not None:
                return int(getattr(exc, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR))
        if self._isr_below_min(tp) is not None:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    def _isr_below_min(self, tp: TopicPartition) -> str | None:
        """Why ``tp``'s ISR is below its ``min.insync.replicas`` after an append (None if not)."""
        p = self.partitions.get(tp)
        plog = self.logs.get(tp)
        if p is None or plog is None:
            return None
        min_isr = plog.config.min_insync_replicas
        if len(p.isr) < min_isr:
            return f"the ISR of {tp[0]}-{tp[1]} shrank below min.insync.replicas={min_isr}"
        return None

    def _check_isr_after_append(
        self, tp: TopicPartition, results: list[PartitionResponse], slot: int
    ) -> None:
        """Kafka's ``checkEnoughReplicasReachOffset``: the HW passed the append, but the ISR is
        below ``min.insync.replicas``."""
        why = self._isr_below_min(tp)
        if why is not None:
            results[slot] = PartitionResponse(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, error_message=why)

    def _high_watermark_advanced(self, tp: TopicPartition, hw: int) -> None:
        waiters = self._hw_waiters.get(tp)
        if waiters:
            keep = []
            for need, fut in waiters:
                if fut.done():
                    continue
                if hw >= need:
                    fut.set_result(None)
                else:
                    keep.append((need, fut))
            if keep:
                self._hw_waiters[tp] = keep
            else:
                del self._hw_waiters[tp]
        self.purgatory.notify(tp)

    def _fail_waiters(self, tp: TopicPartition, code: int) -> None:
        """``tp`` is no longer led here (a follower now, moved away, deleted, its dir offline):
        produces waiting for its HW get ``code``; a coordinator partition's writes waiting to be
        covered fail too (the coordinator answers NOT_COORDINATOR), else they would wait forever
        once nothing appends to the partition any more."""
        for _need, fut in self._hw_waiters.pop(tp, ()):
            if not fut.done():
                exc = LogError(ErrorCode(code).name)
                exc.error_code = code
                fut.set_exception(exc)
        if self.coordinator_hooks is not None and tp[0] in INTERNAL_TOPICS:
            self.coordinator_hooks.resigned(tp)

    def append_to_leader(
        self,
        topic: str,
        partition: int,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int = 0,
        flush: bool = False,
        from_coordinator: bool = False,
        prevalidated: bool = False,
        advance_hw: bool = True,
    ) -> AppendInfo:
        """One partition's append (Kafka's ``Partition.appendRecordsToLeader``); the HW
        follows (``advance_hw=False``: the caller moves it with :meth:`advance_high_watermark`,
        as the coordinators' writer does once the append is durable). Raises KeyError for a
        partition not hosted here, NotLeaderOrFollowerError,
        the log's errors, KafkaStorageError (after noting it: a device error takes the dir
        offline)."""
        plog = self.logs[(topic, partition)]
        if self.metadata_cache.leader_id(topic, partition) != self.node_id:
            raise NotLeaderOrFollowerError(f"this broker does not lead {topic}-{partition}")
        p = self.partitions.get((topic, partition))
        if p is not None:
            leader_epoch = p.leader_epoch
        return self._append_to_log(plog, records, leader_epoch, flush, from_coordinator, prevalidated,
                                   advance_hw)

    def _append_to_log(
        self,
        plog: PartitionLog,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        flush: bool,
        from_coordinator: bool,
        prevalidated: bool,
        advance_hw: bool = True,
    ) -> AppendInfo:
        try:
            info = plog.append_as_leader(
                records, leader_epoch, from_coordinator=from_coordinator, prevalidated=prevalidated
            )
        except KafkaStorageError as e:
            self.note_storage_error(plog, e)
            raise
        if flush:
            plog.flush()
        if advance_hw:  # a single node is its whole ISR: the HW is the log end offset
            self.advance_high_watermark(plog, plog.log_end_offset)
        return info

    def advance_high_watermark(self, plog: PartitionLog, offset: int) -> None:
        """Move ``plog``'s HW up to ``offset`` as far as the ISR allows (Kafka's
        ``maybeIncrementLeaderHW``: not past the log end offset of any replica of the maximal
        ISR): waiting fetches and acks=-1 appends see it."""
        tp = (plog.topic, plog.partition)
        p = self.partitions.get(tp)
        if p is not None:
            if len(p.replicas) > 1:
                self._leader_caps[tp] = offset
            offset = p.leader_high_watermark(offset)
        if offset > plog.high_watermark:
            plog.update_high_watermark(offset)
        self._high_watermark_changed(tp, plog)

    def _high_watermark_changed(self, tp: TopicPartition, plog: PartitionLog) -> None:
        """Waiting fetches and acks=-1 appends look at ``plog``'s HW again (and the coordinators,
        for their replicated topics: they answer at the HW)."""
        if self.coordinator_hooks is not None and tp[0] in INTERNAL_TOPICS and tp in self.partitions:
            self.coordinator_hooks.high_watermark_advanced(tp, plog.high_watermark)
        if self._hw_waiters:
            self._high_watermark_advanced(tp, plog.high_watermark)
        else:
            self.purgatory.notify(tp)

    # ------------------------------------------------------------------ replication
    def _isr_eligible(self, isr: Iterable[int], proposed: tuple[int, ...]) -> tuple[int, ...] | None:
        """KIP-841 (Kafka's ``isReplicaIsrEligible``): the caught-up followers a proposal adds,
        without those on fenced brokers (the controller would refuse the whole proposal,
        INELIGIBLE_REPLICA, and the leader would propose it again at every follower fetch, also
        keeping a live follower out); None when none is left to add."""
        current = set(isr)
        fenced = {b.node_id for b in self.metadata_cache.fenced_brokers()}
        kept = tuple(r for r in proposed if r in current or r not in fenced)
        return kept if set(kept) != current else None

    def leader_epoch_of(self, tp: TopicPartition) -> int:
        """The partition's leader epoch here (0 on the registry path: one leader, never elected)."""
        p = self.partitions.get(tp)
        return p.leader_epoch if p is not None else self.LEADER_EPOCH

    def leader_epoch_error(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        """KIP-320: a request's ``current_leader_epoch`` (-1: none) against the partition's here:
        FENCED_LEADER_EPOCH when older, UNKNOWN_LEADER_EPOCH when newer."""
        if current_leader_epoch < 0:
            return ErrorCode.NONE
        return leader_epoch_error(self.leader_epoch_of(tp), current_leader_epoch)

    def apply_partition(self, topic: str, partition: int, reg: Any) -> None:
        """The image's registration of a partition hosted here (Kafka's ``applyDelta`` for one
        partition): become its leader or a follower at a new leader epoch, or take a new ISR."""
        tp = (topic, partition)
        plog = self.logs.get(tp)
        p = self.partitions.get(tp)
        if p is None:
            p = self.partitions[tp] = Partition(topic, partition, self.node_id)
        leo = plog.log_end_offset if plog is not None else 0
        change = p.update(tuple(reg.replicas), tuple(reg.isr), int(reg.leader), int(reg.leader_epoch),
                          int(reg.partition_epoch), self.clock.time_ms(), leo,
                          int(getattr(reg, "leader_recovery_state", 0)))
        fetchers = self.fetcher_manager
        if change is RoleChange.LEADER:
            if fetchers is not None:
                fetchers.remove_partition(tp)
            if plog is not None:
                plog.assign_epoch_start_offset(p.leader_epoch, plog.log_end_offset)
                self._leader_caps[tp] = plog.log_end_offset
                if len(p.replicas) == 1:
                    self.advance_high_watermark(plog, plog.log_end_offset)
            log.info("%s-%d: leader at epoch %d, ISR %s", topic, partition, p.leader_epoch, list(p.isr))
            if p.leader_recovery_state != 0 and self.isr_sender is not None:
                # elected uncleanly (KIP-704 RECOVERING): its log is the partition's now; tell the
                # controller it recovered, as Kafka's leader does, so the ISR can grow again
                log.warning("%s-%d: elected uncleanly at epoch %d; records other replicas had beyond "
                            "offset %d are lost", topic, partition, p.leader_epoch,
                            plog.log_end_offset if plog is not None else 0)
                self.isr_sender(p, p.isr)
        elif change is RoleChange.FOLLOWER:
            self._fail_waiters(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            self.purgatory.notify(tp)
            self._leader_caps.pop(tp, None)
            if fetchers is not None:
                if p.leader_id >= 0 and plog is not None:
                    fetchers.add_partition(tp, p.leader_id, p.leader_epoch)
                else:
                    fetchers.remove_partition(tp)
            log.info("%s-%d: follower of %d at epoch %d", topic, partition, p.leader_id, p.leader_epoch)
        elif p.is_leader and plog is not None:
            self._maybe_increment_hw(tp, plog)  # the ISR may have shrunk

    def current_leader(self, topic: str, partition: int) -> tuple[int, int] | None:
        """KIP-951: (leader id, leader epoch) as this broker knows them, for an answer that
        sends the client elsewhere; None when unknown."""
        p = self.partitions.get((topic, partition))
        if p is not None and p.leader_id >= 0:
            return p.leader_id, p.leader_epoch
        leader = self.metadata_cache.leader_id(topic, partition)
        if leader is None or leader < 0:
            return None
        return leader, self.leader_epoch_of((topic, partition))

    def forget_partition(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)
        self._leader_caps.pop(tp, None)
        self._follower_reads.pop(tp, None)
        self._preferred_logged.pop(tp, None)
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_partition(tp)

    def _maybe_increment_hw(self, tp: TopicPartition, plog: PartitionLog) -> None:
        cap = self._leader_caps.get(tp, plog.log_end_offset)
        self.advance_high_watermark(plog, cap)

    def read_for_follower(
        self,
        replica_id: int,
        topic: str,
        partition: int,
        fetch_offset: int,
        max_bytes: int,
        *,
        current_leader_epoch: int = -1,
        last_fetched_epoch: int = -1,
        broker_epoch: int = -1,
        min_one_message: bool = True,
        follower_log_start_offset: int = -1,
    ) -> LogReadResult:
        """A follower's Fetch of one partition (Kafka's ``readFromLocalLog`` for a replica plus
        ``updateFollowerFetchState``): epochs checked (KIP-320), divergence answered with the
        end of the follower's last epoch on this leader (``diverging_epoch``, KIP-595's check
        that Kafka 2.7+ replicas use instead of OffsetForLeaderEpoch), else the fetch offset is
        the follower's log end offset: the HW and the ISR may move; records up to the log end.
        ``follower_log_start_offset`` (the fetch's ``log_start_offset``) moves the partition's
        low watermark, which a DeleteRecords may be waiting for."""
        tp = (topic, partition)
        plog, error = self.leader_log_or_error(topic, partition)
        if plog is None:
            return LogReadResult(error)
        p = self.partitions.get(tp)
        if p is None:
            return LogReadResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        hw_before = plog.high_watermark
        ans = handle_follower_fetch(
            p, plog, replica_id, fetch_offset, current_leader_epoch=current_leader_epoch,
            last_fetched_epoch=last_fetched_epoch, broker_epoch=broker_epoch,
            leader_cap=self._leader_caps.get(tp, plog.log_end_offset), now_ms=self.clock.time_ms(),
        )
        r = LogReadResult(ans.error_code, ans.high_watermark, ans.last_stable_offset, ans.log_start_offset)
        if ans.error_code != ErrorCode.NONE or ans.diverging_epoch is not None:
            r.diverging_epoch = ans.diverging_epoch
            return r
        st = p.remote.get(replica_id)
        if st is not None and 0 <= follower_log_start_offset != st.log_start_offset:
            st.log_start_offset = follower_log_start_offset
            self.purgatory.notify(tp)  # (a DeleteRecords waiting for the low watermark)
        if st is not None and r.high_watermark > st.last_sent_high_watermark:
            # the follower learns a new HW at once rather than after its long poll (it serves
            # consumers up to its HW: KIP-392), as Kafka completes such a fetch without waiting
            st.last_sent_high_watermark = r.high_watermark
            r.high_watermark_news = True
        if plog.high_watermark > hw_before:
            # only a HW that moved wakes anyone: waking every waiting fetch at each follower
            # fetch made two idle followers' long polls wake each other without end
            self._high_watermark_changed(tp, plog)
        expand = self._isr_eligible(p.isr, ans.expand_isr) if ans.expand_isr is not None else None
        if expand is not None and self.isr_sender is not None:
            if self.metrics is not None:
                self.metrics.isr_expands += 1
            log.info("%s-%d: expanding the ISR %s to %s", p.topic, p.partition, list(p.isr), list(expand))
            self.isr_sender(p, expand)
        if ans.read_to <= fetch_offset or (max_bytes <= 0 and not min_one_message):
            return r
        try:
            r.records = plog.read(
                fetch_offset, max(max_bytes, 0), max_offset=ans.read_to, min_one_message=min_one_message
            )
        except Exception as e:
            r.error_code = self.read_failed(topic, partition, e)
        return r

    def maybe_shrink_isrs(self) -> None:
        """Every ``replica.lag.time.max.ms`` / 2 (Kafka's ``isr-expiration`` task): remove the
        followers not caught up for ``replica.lag.time.max.ms`` from the ISRs led here."""
        if self.isr_sender is None:
            return
        lag_max = int(self.config["replica.lag.time.max.ms"])
        now = self.clock.time_ms()
        for tp, p in list(self.partitions.items()):
            if not p.is_leader or len(p.replicas) < 2:
                continue
            plog = self.logs.get(tp)
            if plog is None:
                continue
            target = p.isr_to_shrink(now, lag_max, plog.log_end_offset)
            if target is not None:
                log.info("%s-%d: shrinking the ISR %s to %s (replicas lagging more than %d ms)",
                         tp[0], tp[1], list(p.isr), list(target), lag_max)
                if self.metrics is not None:
                    self.metrics.isr_shrinks += 1
                self.isr_sender(p, target)

    # ------------------------------------------------------------------ reads
    def read(
        self,
        topic: str,
        partition: int,
        fetch_offset: int,
        max_bytes: int,
        *,
        isolation_level: int = READ_UNCOMMITTED,
        min_one_message: bool = True,
        current_leader_epoch: int = -1,
        from_any_replica: bool = False,
        client_rack: str | None = None,
        listener: str | None = None,
    ) -> LogReadResult:
        """Fetch's read of one partition (Kafka's ``readFromLocalLog``): the partition's state
        and whole batches from ``fetch_offset`` up to the HW (the LSO for read_committed, with
        the aborted transactions), at most ``max_bytes`` unless ``min_one_message``; nothing if
        ``max_bytes`` <= 0 and not ``min_one_message``.

        ``from_any_replica`` (a consumer's Fetch v11+, KIP-392): a follower serves it too, up to
        its own HW / LSO (an offset between its HW and its log end gets no records, one past its
        log end OFFSET_OUT_OF_RANGE, on which consumers go back to the leader); on the leader,
        the replica selector may name another replica for the client's rack
        (``preferred_read_replica``, no records)."""
        if from_any_replica:
            plog, error = self.local_log_or_error(topic, partition, current_leader_epoch)
        else:
            plog, error = self.leader_log_or_error(topic, partition, current_leader_epoch)
        if plog is None:
            return LogReadResult(error)
        hw = plog.high_watermark
        lso = plog.last_stable_offset
        r = LogReadResult(ErrorCode.NONE, hw, lso, plog.log_start_offset)
        if from_any_replica:
            self._note_follower_read((topic, partition))
        if from_any_replica and self.replica_selector is not None and client_rack:
            r.preferred_read_replica = self._preferred_read_replica(
                (topic, partition), plog, fetch_offset, client_rack, listener
            )
            if r.preferred_read_replica >= 0:
                if self._preferred_logged.get((topic, partition)) != (client_rack, r.preferred_read_replica):
                    self._preferred_logged[(topic, partition)] = (client_rack, r.preferred_read_replica)
                    log.info("%s-%d: consumers in rack %s read from replica %d (KIP-392)",
                             topic, partition, client_rack, r.preferred_read_replica)
                return r
        upper = hw
        if isolation_level == READ_COMMITTED:  # up to the last stable offset, with aborted txns
            upper = lso
            r.aborted = [(a.producer_id, a.first_offset) for a in plog.collect_aborted(fetch_offset, lso)]
        if fetch_offset < plog.log_start_offset or fetch_offset > plog.log_end_offset:
            r.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
            return r
        if fetch_offset >= upper or (max_bytes <= 0 and not min_one_message):
            return r
        try:
            r.records = plog.read(
                fetch_offset, max(max_bytes, 0), max_offset=upper, min_one_message=min_one_message
            )
        except Exception as e:
            r.error_code = self.read_failed(topic, partition, e)
            return r
        if self.storage_log.failing:
            self.storage_log.ok("read from", f"{topic}-{partition}")
        return r

    def _note_follower_read(self, tp: TopicPartition) -> None:
        """Log once per leader epoch that a consumer reads the partition from this follower."""
        p = self.partitions.get(tp)
        if p is None or p.is_leader or self._follower_reads.get(tp) == p.leader_epoch:
            return
        self._follower_reads[tp] = p.leader_epoch
        log.info("%s-%d: serving consumer fetches as a follower of %d at epoch %d (KIP-392)",
                 tp[0], tp[1], p.leader_id, p.leader_epoch)

    def _preferred_read_replica(
        self, tp: TopicPartition, plog: PartitionLog, fetch_offset: int, client_rack: str,
        listener: str | None,
    ) -> int:
        """Kafka's ``findPreferredReadReplica`` on the leader: the candidates are the followers in
        the ISR whose log end offset reached ``fetch_offset`` and that are alive on the client's
        listener; the selector picks (-1: the leader)."""
        p = self.partitions.get(tp)
        if p is None or not p.is_leader:
            return -1
        me = self.metadata_cache.alive_broker(self.node_id, listener)
        now = self.clock.time_ms()
        leader = ReplicaView(self.node_id, me.rack if me else None, plog.log_end_offset, 0)
        followers = []
        for r, st in p.remote.items():
            if r not in p.isr or st.log_end_offset < fetch_offset or fetch_offset < plog.log_start_offset:
                continue
            node = self.metadata_cache.alive_broker(r, listener)
            if node is None:
                continue
            followers.append(ReplicaView(r, node.rack, st.log_end_offset, now - st.last_caught_up_ms))
        return preferred_read_replica(self.replica_selector, client_rack, leader, followers)

    def read_failed(self, topic: str, partition: int, e: BaseException) -> int:
        """The error for a read of the partition that raised ``e``; a storage error is logged
        and may take the log dir offline."""
        code = getattr(e, "error_code", None)
        if code is None:
            code = ErrorCode.KAFKA_STORAGE_ERROR
        if code == ErrorCode.KAFKA_STORAGE_ERROR:
            self.storage_log.failed("read from", f"{topic}-{partition}", e,
                                    "answering KAFKA_STORAGE_ERROR for the partition")
            plog = self.logs.get((topic, partition))
            if plog is not None:
                self.note_storage_error(plog, e)  # a failed device takes its log dir offline
        return int(code)

    def fetch_offset(
        self, topic: str, partition: int, timestamp: int, isolation_level: int = READ_UNCOMMITTED,
        current_leader_epoch: int = -1,
    ) -> OffsetResult:
        """ListOffsets for one partition (Kafka's ``fetchOffsetForTimestamp``): earliest (-2),
        latest (-1: the HW, the LSO for read_committed), max timestamp (-3), earliest local
        (-4), latest tiered (-5: none), or the first offset below the HW whose timestamp is >=
        ``timestamp``. INVALID_REQUEST for another negative timestamp. The leader epoch
        answered is the current one for latest, else the epoch the offset was written in (the
        epoch cache); ``current_leader_epoch`` is checked as KIP-320 says."""
        plog, error = self.leader_log_or_error(topic, partition, current_leader_epoch)
        if plog is None:
            return OffsetResult(error)
        offset, found_ts = -1, -1
        if timestamp == LATEST:
            offset = plog.last_stable_offset if isolation_level == READ_COMMITTED else plog.high_watermark
        elif timestamp in (EARLIEST, EARLIEST_LOCAL):
            offset = plog.log_start_offset
        elif timestamp == LATEST_TIERED:
            offset = -1
        elif timestamp == MAX_TIMESTAMP:
            offset, found_ts = plog.max_timestamp_offset()
        elif timestamp >= 0:
            hit = plog.offset_for_timestamp(timestamp)
            if hit is not None and hit[0] < plog.high_watermark:
                offset, found_ts = hit
        else:
            return OffsetResult(ErrorCode.INVALID_REQUEST)
        if offset < 0:
            return OffsetResult(ErrorCode.NONE, offset, found_ts, -1)
        epoch = None if timestamp == LATEST else plog.epoch_for_offset(offset)
        if epoch is None:
            epoch = self.leader_epoch_of((topic, partition))
        return OffsetResult(ErrorCode.NONE, offset, found_ts, epoch)

    def low_watermark(self, topic: str, partition: int) -> int | None:
        """The lowest log start offset of the partition's live replicas, this leader's included
        (Kafka's ``lowWatermarkIfLeader``; a live follower that has not said its own yet counts
        as -1); None when this broker does not lead the partition."""
        plog, _ = self.leader_log_or_error(topic, partition)
        if plog is None:
            return None
        low = plog.log_start_offset
        p = self.partitions.get((topic, partition))
        if p is not None:
            for r, st in p.remote.items():
                if st.log_start_offset < low and self.metadata_cache.alive_broker(r) is not None:
                    low = st.log_start_offset
        return low

    async def delete_records_and_wait(self, topic: str, partition: int, offset: int,
                                      timeout_ms: int) -> tuple[int, int]:
        """DeleteRecords as Kafka answers it (its ``DelayedDeleteRecords``): the leader moves
        its log start offset, then the answer waits until every live replica's has followed
        (the low watermark; followers learn it from their next fetch and say theirs in the one
        after), so that records answered as deleted cannot come back with a follower that
        becomes leader. REQUEST_TIMED_OUT (with the low watermark reached) after ``timeout_ms``."""
        low, error = self.delete_records(topic, partition, offset)
        if error != ErrorCode.NONE:
            return low, error
        deadline = self.clock.monotonic_ms() + max(0, timeout_ms)
        while True:
            now_low = self.low_watermark(topic, partition)
            if now_low is None:
                return -1, ErrorCode.NOT_LEADER_OR_FOLLOWER
            if now_low >= low:
                return now_low, ErrorCode.NONE
            remaining = deadline - self.clock.monotonic_ms()
            if remaining <= 0:
                return now_low, ErrorCode.REQUEST_TIMED_OUT
            await self.purgatory.wait([(topic, partition)], remaining)

    def delete_records(self, topic: str, partition: int, offset: int) -> tuple[int, int]:
        """DeleteRecords on the leader's log of one partition: (its new log start offset, error)."""
        plog, error = self.leader_log_or_error(topic, partition)
        if plog is None:
            return -1, error
        try:
            low = plog.delete_records(offset)
        except (KafkaStorageError, OSError) as e:
            self.storage_log.failed("DeleteRecords on", f"{topic}-{partition}", e,
                                    "answering KAFKA_STORAGE_ERROR; the client may retry")
            return -1, ErrorCode.KAFKA_STORAGE_ERROR
        except LogError as e:
            return -1, e.error_code
        self.storage_log.ok("DeleteRecords on", f"{topic}-{partition}")
        return low, ErrorCode.NONE

    # ------------------------------------------------------------------ partitions
    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def dir_partition_counts(self) -> dict[Path, int]:
        """Partitions (current and future logs) per log dir, for placement."""
        counts = dict.fromkeys(self.log_dirs, 0)
        for plog in list(self.logs.values()):
            d = plog.directory.parent
            counts[d] = counts.get(d, 0) + 1
        for mv in list(self.mover.moves.values()):
            counts[mv.dest] = counts.get(mv.dest, 0) + 1
        return counts

    def load_logs(
        self, topics: Iterable[TopicInfo], hosted: Callable[[str, int], bool] | None = None
    ) -> None:
        """At start: find every partition of ``topics`` in the online dirs (see
        :mod:`strom.log.log_dirs`), finish swaps a crash interrupted, open the logs.

        ``hosted`` (on the metadata quorum): whether this node is a replica of a partition; only
        those are opened (or made), and the log of a partition of ``topics`` that is not hosted
        here any more (moved away while the broker was down) is a stray and is deleted, as Kafka
        deletes stray replicas at start-up."""
        topics = list(topics)
        known = {info.name for info in topics}
        online = self.online_dirs()
        found = discover(online)
        leftovers = found.deleted
        doomed_tps = {(p[0], p[1]) for p in map(parse_partition_dir, (x.name for x in leftovers)) if p}
        resume: list[tuple[str, int, Path]] = []
        if hosted is not None:
            counts = {info.name: info.partitions for info in topics}
            strays = [
                tp for tp in found.current if tp[0] in known and tp[1] < counts[tp[0]] and not hosted(*tp)
            ]
            for tp in strays:
                log.info("%s-%d is not hosted by this broker: deleting its stray log", tp[0], tp[1])
                leftovers.append(found.current.pop(tp) / f"{tp[0]}-{tp[1]}")
            for tp in [tp for tp in found.future if tp[0] in known and not hosted(*tp)]:
                leftovers.append(found.future.pop(tp))
        for tp, path in sorted(found.future.items()):
            if tp in found.current:
                resume.append((tp[0], tp[1], path))
            elif tp[0] in known and tp not in doomed_tps and self.offline_dirs:
                # the current log may be on the failed dir: keep the future log as it is
                self.offline_partitions[tp] = None
            elif tp[0] in known:
                # the swap's second rename is missing (the first renamed the current log to
                # -delete): the future log was complete; it becomes the current log. Without
                # the -delete dir (the current log lost by hand) it is the best copy left
                final = path.parent / f"{tp[0]}-{tp[1]}"
                log.info("finishing the move of %s-%d into %s (interrupted%s)", tp[0], tp[1], path.parent,
                         " after the old copy was set aside" if tp in doomed_tps else ", no current log")
                os.rename(path, final)
                fsync_dir(path.parent)
                found.current[tp] = path.parent
            else:
                leftovers.append(path)
        started = self.clock.monotonic_ms()
        opened = len(self.logs)
        for info in topics:
            for p in range(info.partitions):
                tp = (info.name, p)
                if hosted is not None and not hosted(*tp):
                    continue
                d = found.current.get(tp)
                if d is None:
                    if self.offline_dirs:  # it may be on the failed dir: do not make it empty
                        self.offline_partitions[tp] = None
                        continue
                    d = next_log_dirs(online, self.dir_partition_counts())[0]
                if d in self.offline_dirs:
                    self.offline_partitions[tp] = d
                    continue
                try:
                    self._open_partition(info, p, d)
                except KafkaStorageError as e:
                    if d == self.metadata_log_dir:
                        raise ConfigError(f"cannot open {info.name}-{p} in the first log dir: {e}") from e
                    self.mark_log_dir_offline(d, str(e))
        loaded = [plog for tp, plog in self.logs.items() if tp[0] in known]
        recovered = [plog for plog in loaded if plog.recovered_bytes]
        log.info("loaded %d logs in %d ms; %d recovered after an unclean shutdown: %d segment(s), "
                 "%d bytes re-read", len(self.logs) - opened, self.clock.monotonic_ms() - started,
                 len(recovered),
                 sum(plog.recovered_segments for plog in recovered),
                 sum(plog.recovered_bytes for plog in recovered))
        for topic, p, path in resume:
            if (topic, p) in self.logs and path.parent not in self.offline_dirs:
                self.mover.resume(topic, p, path)
        if leftovers:
            asyncio.get_running_loop().run_in_executor(None, _remove_trees, leftovers)

    def _open_partition(self, info: TopicInfo, partition: int, log_dir: Path) -> PartitionLog:
        d = log_dir / f"{info.name}-{partition}"
        plog = PartitionLog.open(d, info.name, partition, self.log_config(info), self.clock)
        if isinstance(self.metadata_cache, RegistryMetadataCache):
            # one node leads everything: the HW is the log end offset. A replica keeps the HW of
            # its checkpoint (Kafka's): its log end may hold what was never committed
            plog.update_high_watermark(plog.log_end_offset)
        self._registry_epoch(plog)
        self.logs[(info.name, partition)] = plog
        return plog

    def _registry_epoch(self, plog: PartitionLog) -> None:
        """On the registry path this node leads every partition at epoch 0 from the start: its
        epoch cache says so, as a Kafka leader's does (``maybeAssignEpochStartOffset``)."""
        if isinstance(self.metadata_cache, RegistryMetadataCache) and plog.latest_epoch is None:
            plog.assign_epoch_start_offset(self.LEADER_EPOCH, plog.log_end_offset)

    def make_partition_logs(
        self, info: TopicInfo, partitions: Iterable[int], abort: threading.Event | None = None
    ) -> list[PartitionLog]:
        """Create the logs of ``partitions`` (in a worker thread), unpublished; all or nothing.
        Raises TopicError (KAFKA_STORAGE_ERROR, or REQUEST_TIMED_OUT when abandoned)."""
        made: list[PartitionLog] = []
        config = self.log_config(info)
        online = self.online_dirs()
        if not online:
            raise TopicError(ErrorCode.KAFKA_STORAGE_ERROR, "every log dir is offline")
        counts = self.dir_partition_counts()
        try:
            for p in partitions:
                if self.stopping.is_set() or (abort is not None and abort.is_set()):
                    raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"creating '{info.name}' was abandoned")
                for other in online:  # not in the registry: left by a creation a crash interrupted
                    stale = other / f"{info.name}-{p}"
                    if stale.exists():
                        shutil.rmtree(stale)
                pref = self.preferred_dirs.pop((info.name, p), None)
                log_dir = pref if pref in online else next_log_dirs(online, counts)[0]
                counts[log_dir] = counts.get(log_dir, 0) + 1
                plog = PartitionLog.open(log_dir / f"{info.name}-{p}", info.name, p, config, self.clock)
                made.append(plog)
            for used in {plog.directory.parent for plog in made}:
                fsync_dir(used)
        except BaseException as e:
            delete_logs(made)
            if isinstance(e, OSError | LogError):
                raise TopicError(
                    ErrorCode.KAFKA_STORAGE_ERROR,
                    f"creating partitions of topic '{info.name}' failed: {e}",
                ) from e
            raise
        return made

    def add_partitions(self, info: TopicInfo, first: int, logs: list[PartitionLog]) -> None:
        """Publish logs made by :meth:`make_partition_logs` as partitions ``first, first+1 ...``."""
        for p, plog in enumerate(logs, first):
            plog.update_high_watermark(plog.log_end_offset)
            self._registry_epoch(plog)
            self.logs[(info.name, p)] = plog

    def add_logs(self, info: TopicInfo, logs: list[PartitionLog]) -> None:
        """Publish logs made by :meth:`make_partition_logs`, each as its own partition (on the
        metadata quorum: the partitions this node hosts, not necessarily contiguous)."""
        for plog in logs:
            plog.update_high_watermark(plog.log_end_offset)
            self._registry_epoch(plog)
            self.logs[(info.name, plog.partition)] = plog

    def remove_replica(self, topic: str, partition: int) -> None:
        """This node no longer hosts the partition (a reassignment moved it away): stop its
        move, delete its log; requests waiting on it are answered NOT_LEADER_OR_FOLLOWER."""
        tp = (topic, partition)
        self.mover.cancel(tp)
        self.offline_partitions.pop(tp, None)
        plog = self.logs.pop(tp, None)
        self.forget_partition(tp)
        self._fail_waiters(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.purgatory.notify(tp)
        if plog is not None:
            plog.delete()

    def remove_partitions(self, topic: str, count: int) -> None:
        """The topic was deleted: stop its moves, delete its logs."""
        for p in range(count):
            tp = (topic, p)
            self.mover.cancel(tp)
            self.offline_partitions.pop(tp, None)
            plog = self.logs.pop(tp, None)
            self.forget_partition(tp)
            self._fail_waiters(tp, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if plog is not None:
                plog.delete()

    def flush_due_logs(self, interval_s: float) -> None:
        """Flush every log whose ``flush.ms``/``flush.messages`` is due."""
        storage_log = self.storage_log
        for plog in list(self.logs.values()):
            try:
                plog.flush_if_due()
            except (KafkaStorageError, OSError) as e:
                storage_log.failed("flush of", f"{plog.topic}-{plog.partition}", e,
                                   f"the data stays unflushed; retrying every {interval_s:g} s")
                continue
            if storage_log.failing:
                storage_log.ok("flush of", f"{plog.topic}-{plog.partition}")

    def shutdown(self) -> None:
        """Close every log cleanly: every log unsynced, one sync, the clean-shutdown markers, one
        more sync (with ten thousand partitions, ~8 fsyncs per log would take minutes)."""
        self.stopping.set()
        closed: list[PartitionLog] = []
        self.validation_executor.shutdown(wait=False, cancel_futures=True)
        self.mover.close()
        for plog in self.logs.values():
            try:
                plog.close(sync=False)
                closed.append(plog)
            except Exception:
                log.exception("closing %s-%d failed", plog.topic, plog.partition)
        if closed:
            os.sync()
            for plog in closed:
                try:
                    plog.mark_clean_shutdown()
                except Exception:
                    log.exception("closing %s-%d failed", plog.topic, plog.partition)
            os.sync()

    # ------------------------------------------------------------------ log dir admin
    def log_dir_replicas(self) -> list[LogDirReplica]:
        """Every log here, current ones then future ones, by partition (DescribeLogDirs)."""
        out = [
            # Kafka's lag of a leader: 0 (its HW never passes its log end)
            LogDirReplica(plog.directory.parent, topic, p, plog.size_bytes,
                          max(plog.high_watermark - plog.log_end_offset, 0))
            for (topic, p), plog in sorted(self.logs.items())
        ]
        for (topic, p), mv in sorted(self.mover.moves.items()):
            cur = self.logs.get((topic, p))
            lag = max(cur.log_end_offset - mv.future.log_end_offset, 0) if cur is not None else 0
            out.append(LogDirReplica(mv.dest, topic, p, mv.future.size_bytes, lag, True))
        return out

    def log_dir_usage(self, d: Path) -> tuple[int, int] | None:
        """(total, usable) bytes of the log dir's file system, -1 each if unknown; None for a
        failed dir (a dir that cannot be measured is checked, and may fail)."""
        if d in self.offline_dirs:
            return None
        try:
            st = os.statvfs(d)
        except OSError:
            self.check_log_dir(d)
            return -1, -1
        return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize

    def alter_replica_log_dir(self, topic: str, partition: int, dest: Path) -> int:
        """AlterReplicaLogDirs for one partition (Kafka's ``alterReplicaLogDirs``): start moving
        it to the log dir ``dest``, or remember ``dest`` for a partition not created yet. The
        error: KAFKA_STORAGE_ERROR when ``dest`` or the partition is offline, or another dir
        is; REPLICA_NOT_AVAILABLE for a partition not here; else NONE."""
        if dest in self.offline_dirs:
            return ErrorCode.KAFKA_STORAGE_ERROR
        tp = (topic, partition)
        if tp in self.offline_partitions:
            return ErrorCode.KAFKA_STORAGE_ERROR
        plog = self.logs.get(tp)
        if plog is None:
            try:
                validate_topic_name(topic)
                if partition >= 0 and (tp in self.preferred_dirs or len(self.preferred_dirs) < MAX_PREFERRED):
                    self.preferred_dirs[tp] = dest  # Kafka's maybeUpdatePreferredLogDir
            except TopicError:
                pass
            return ErrorCode.REPLICA_NOT_AVAILABLE
        if self.offline_dirs and plog.directory.parent != dest:
            return ErrorCode.KAFKA_STORAGE_ERROR
        try:
            self.mover.start_move(topic, partition, dest)
        except KeyError:
            return ErrorCode.REPLICA_NOT_AVAILABLE
        except (LogError, OSError) as e:
            self.storage_log.failed("starting the move of", f"{topic}-{partition}", e,
                                    "answering KAFKA_STORAGE_ERROR")
            self.check_log_dir(dest)
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.NONE

    # ------------------------------------------------------------------ log dir failures
    def check_log_dir(self, d: Path) -> bool:
        """Is the log dir ``d`` still usable? Gone, unreadable or read-only takes it offline
        (:meth:`mark_log_dir_offline`). A full disk is not a failure here (a write found it:
        :meth:`note_storage_error` decides)."""
        if d in self.offline_dirs:
            return False
        try:
            if not os.path.isdir(d):
                raise FileNotFoundError(errno.ENOENT, "log dir is gone", str(d))
            os.listdir(d)
            with contextlib.suppress(FileNotFoundError):  # removed by hand: rewritten at start
                (d / META_FILE).read_bytes()
            if os.statvfs(d).f_flag & os.ST_RDONLY:
                raise OSError(errno.EROFS, "read-only file system", str(d))
        except OSError as e:
            if e.errno not in _DIR_FAILURE_ERRNOS:  # out of descriptors or memory: not the disk
                return True
            self.mark_log_dir_offline(d, f"{type(e).__name__}: {e}")
            return False
        return True

    def check_log_dirs(self) -> None:
        """The periodic check (``strom.log.dir.check.interval.ms``) of every online dir."""
        for d in self.online_dirs():
            self.check_log_dir(d)

    def note_storage_error(self, plog: PartitionLog, exc: BaseException) -> None:
        """An I/O error on ``plog``: an error of the device (EIO, EROFS ...) takes its dir
        offline at once, as Kafka's LogDirFailureChannel does for any IOException. A full disk
        (ENOSPC, EDQUOT) does too while other brokers are alive (:meth:`fails_dir_when_full`):
        their replicas take over. On a broker alone, and for the other errors (out of
        descriptors), the dir is only checked: appends answer KAFKA_STORAGE_ERROR until space
        returns."""
        d = plog.directory.parent
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, OSError):
            cause = cause.__cause__
        if isinstance(cause, OSError) and (
            cause.errno in _DEVICE_ERRNOS or (cause.errno in _FULL_ERRNOS and self.fails_dir_when_full())
        ):
            self.mark_log_dir_offline(d, f"{type(cause).__name__}: {cause}")
        else:
            self.check_log_dir(d)

    def fails_dir_when_full(self) -> bool:
        """Does a full disk take the log dir offline (Kafka: ENOSPC is an IOException like any
        other)? Yes while another broker is alive, so that the controller moves this broker's
        leaderships and ISR places to replicas that can still write (a follower that cannot
        append would otherwise hold acks=all producers for ``replica.lag.time.max.ms``). A broker
        alone keeps its dir online: going offline would only take away the reads it can still
        serve (strom's single-node behaviour; Kafka would stop)."""
        return any(b.node_id != self.node_id for b in self.metadata_cache.alive_brokers())

    def mark_log_dir_offline(self, d: Path, reason: str) -> None:
        """Kafka's ``LogDirFailureChannel``/``handleLogDirFailure``: the dir's partitions go
        offline (KAFKA_STORAGE_ERROR for them), moves into it stop, every other dir keeps
        serving. The first dir holds the broker's metadata: its failure halts the broker, as
        Kafka halts when its metadata log dir fails."""
        if d in self.offline_dirs:
            return
        self.offline_dirs[d] = reason
        log.error("log dir %s failed (%s): its partitions are offline until a restart", d, reason)
        self.mover.cancel_into(d)
        for tp, plog in list(self.logs.items()):
            if plog.directory.parent != d:
                continue
            del self.logs[tp]
            self.mover.cancel(tp)
            with contextlib.suppress(Exception):
                plog.close_without_flush()
            self.offline_partitions[tp] = d
            self._fail_waiters(tp, ErrorCode.KAFKA_STORAGE_ERROR)
            self.purgatory.notify(tp)
        if d == self.metadata_log_dir:
            log.critical("the first log dir %s holds the broker's metadata: stopping the broker", d)
            self._halt()
        elif self.on_dir_offline is not None:
            self.on_dir_offline(d)


def _release(
    chains: dict[TopicPartition, asyncio.Future[None]], tp: TopicPartition, mine: asyncio.Future[None]
) -> None:
    if not mine.done():
        mine.set_result(None)
    if chains.get(tp) is mine:
        del chains[tp]


def delete_logs(logs: list[PartitionLog]) -> None:
    """Remove partitions that were never published (best effort)."""
    for plog in logs:
        try:
            plog.delete()
        except Exception as e:
            log.warning("removing unpublished partition %s-%d failed: %s", plog.topic, plog.partition, e)


def _remove_trees(paths: list[Path]) -> None:
    """Delete leftover directories (``-delete``, abandoned ``-future``) in a worker thread."""
    for path in paths:
        remove_tree(path)
