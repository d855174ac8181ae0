"""The broker's :class:`~strom.coordinator.partition_writer.PartitionWriter`: coordinator
appends go to the partition logs at once, a flusher thread makes them durable, and the high
watermark of the coordinators' partitions advances when they are.

Theory of operation
-------------------
* :meth:`CoordinatorPartitionWriter.append` appends on the event loop (no fsync) through
  ``Broker.append`` with ``advance_hw=False`` for the coordinators' own topics
  (``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``): their HW stays
  at the durable offset. Transaction markers to data partitions (:meth:`append_marker`) leave the
  data partition's HW as a produce would (it advances at once on a single node) and their
  waiters wait for durability all the same (EndTxn answered once the markers are on disk);
  ``Broker.write_local_markers`` then also waits for the HW to pass them (the ISR has them).
* A *flush round* starts on the loop's next turn after an append: for each partition written
  since the last round it takes a :class:`~strom.log.partition_log.FlushPlan` (the segment files
  holding offsets up to the log end; no system call), hands the plans to a few worker threads
  (``strom-coordinator-flush``, 4: the partitions' fsyncs run side by side, which a file system
  commits together) and when they are done, back on the loop,
  moves each log's recovery point, raises the HW of the coordinators' partitions, wakes
  fetches of those partitions and completes the waiters up to the synced offset. Only one round
  is in flight: what is appended meanwhile waits for the next round, so N concurrent commits to
  a partition cost one or two fsyncs, not N.
* A failed fsync fails the waiters it covered with KAFKA_STORAGE_ERROR (the coordinators answer
  Kafka's NOT_COORDINATOR) and goes to ``Broker.note_storage_error`` (a device error takes the
  dir offline). The records stay in the log (the state the coordinator replayed matches the
  log); the next append retries the fsync. A partition that left ``Broker.logs`` (its dir
  failed, the broker stopping) fails its waiters with its partition error.

``threaded=False`` syncs on the loop instead of the worker thread (deterministic simulations on
the manual scheduler, where no other thread may run).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from ..coordinator.partition_writer import (
    CoordinatorWriteError,
    DeferredQueue,
    HighWatermarkListener,
    Records,
    TopicPartition,
)
from ..coordinator.storage import StoredEntry
from ..log.errors import KafkaStorageError, LogError
from ..log.partition_log import FlushPlan, PartitionLog, sync_flush_plan
from ..protocol.errors import ErrorCode
from ..protocol.records import (
    CONTROL_COMMIT,
    build_batch,
    build_control_batch,
    control_type,
    decode_batch_records,
    iter_batches,
)

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("strom.coordinator_writer")

COORDINATOR_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


class CoordinatorPartitionWriter:
    """See the module doc."""

    def __init__(self, broker: Broker, *, threaded: bool = True, flush_threads: int = 4,
                 hw_on_durable: frozenset[str] = COORDINATOR_TOPICS) -> None:
        self.broker = broker
        self.hw_on_durable = hw_on_durable
        self.flush_threads = max(1, flush_threads)
        self._executor = (
            ThreadPoolExecutor(max_workers=self.flush_threads, thread_name_prefix="strom-coordinator-flush")
            if threaded
            else None
        )
        self._waiting: dict[TopicPartition, DeferredQueue] = {}
        self._durable: dict[TopicPartition, int] = {}  # offsets below are on disk (this process)
        self._completed: dict[TopicPartition, int] = {}  # waiters answered up to here
        self._listeners: dict[TopicPartition, list[HighWatermarkListener]] = {}
        self._dirty: set[TopicPartition] = set()
        # bumped when a partition stops being led here: a flush round planned before must not
        # bring back its durable offset (the log may be truncated before it leads again)
        self._generation: dict[TopicPartition, int] = {}
        self._kicked = False
        self._in_flight = False
        self._closed = False
        self.rounds = 0  # flush rounds done (tests, bench)

    # ------------------------------------------------------------------ PartitionWriter

    def append(
        self,
        tp: TopicPartition,
        records: Records,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> int:
        now = self.broker.clock.time_ms()
        recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]] = [
            (k, v, [], now) for k, v in records
        ]
        if transactional:
            batch = build_batch(
                recs, producer_id=producer_id, producer_epoch=producer_epoch, transactional=True
            )
        else:
            batch = build_batch(recs)
        return self._append(tp, batch, transactional)

    def append_marker(self, tp: TopicPartition, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int = 0) -> int:
        batch = build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch,
                                    self.broker.clock.time_ms())
        return self._append(tp, batch, True)

    def _committed(self, tp: TopicPartition, plog: PartitionLog | None = None) -> int:
        """What the waiters of ``tp`` may be answered up to: durable here and, for a replicated
        partition, below the HW (the ISR has it, as Kafka's coordinators answer at the HW)."""
        durable = self._durable.get(tp, -1)
        if tp[0] not in self.hw_on_durable:
            return durable
        if plog is None:
            plog = self.broker.replica_manager.logs.get(tp)
        return durable if plog is None else min(durable, plog.high_watermark)

    def high_watermark_advanced(self, tp: TopicPartition, hw: int) -> None:
        """The replica manager moved ``tp``'s HW (followers caught up): answer what it covers."""
        if tp in self._waiting or tp in self._listeners:
            self._complete(tp, min(hw, self._durable.get(tp, -1)))

    def resigned(self, tp: TopicPartition) -> None:
        """This broker no longer leads ``tp``: its waiters will never be covered. What was durable
        is forgotten too: as a follower its log may be truncated before it leads again."""
        self._fail(tp, None, CoordinatorWriteError(ErrorCode.NOT_COORDINATOR, f"{tp[0]}-{tp[1]} moved"))
        self._durable.pop(tp, None)
        self._completed.pop(tp, None)
        self._dirty.discard(tp)
        self._generation[tp] = self._generation.get(tp, 0) + 1

    def await_offset(self, tp: TopicPartition, offset: int) -> Awaitable[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._committed(tp) >= offset:
            fut.set_result(None)
            return fut
        if self._closed:
            fut.set_exception(CoordinatorWriteError(ErrorCode.NOT_COORDINATOR, "the broker is stopping"))
            return fut
        q = self._waiting.get(tp)
        if q is None:
            q = self._waiting[tp] = DeferredQueue()
        q.add(offset, fut)
        self._dirty.add(tp)
        self._kick()
        return fut

    def high_watermark(self, tp: TopicPartition) -> int:
        plog = self.broker.replica_manager.logs.get(tp)
        return plog.high_watermark if plog is not None else -1

    def register_listener(self, tp: TopicPartition, listener: HighWatermarkListener) -> None:
        self._listeners.setdefault(tp, []).append(listener)

    def deregister_listener(self, tp: TopicPartition, listener: HighWatermarkListener) -> None:
        ls = self._listeners.get(tp)
        if ls is not None and listener in ls:
            ls.remove(listener)

    # ------------------------------------------------------------------ append

    def _append(self, tp: TopicPartition, batch: bytes | bytearray, from_coordinator: bool) -> int:
        if self._closed:
            raise CoordinatorWriteError(ErrorCode.NOT_COORDINATOR, "the broker is stopping")
        topic, partition = tp
        if tp not in self.broker.replica_manager.logs:
            code = self.broker.replica_manager.partition_error(topic, partition)
            raise CoordinatorWriteError(code, f"{topic}-{partition} is not available")
        try:
            info = self.broker.replica_manager.append_to_leader(
                topic, partition, batch, from_coordinator=from_coordinator,
                advance_hw=topic not in self.hw_on_durable,
            )
        except LogError as e:
            raise CoordinatorWriteError(e.error_code, str(e)) from e
        self._dirty.add(tp)
        self._kick()
        return int(info.last_offset) + 1

    # ------------------------------------------------------------------ flush rounds

    def _kick(self) -> None:
        if self._kicked or self._in_flight or self._closed:
            return
        self._kicked = True
        asyncio.get_running_loop().call_soon(self._start_round)

    def _start_round(self) -> None:
        self._kicked = False
        if self._in_flight or self._closed or not self._dirty:
            return
        tps, self._dirty = self._dirty, set()
        plans: list[tuple[TopicPartition, PartitionLog, FlushPlan]] = []
        generations = {tp: self._generation.get(tp, 0) for tp in tps}
        for tp in sorted(tps):
            plog = self.broker.replica_manager.logs.get(tp)
            if plog is None:
                code = self.broker.replica_manager.partition_error(*tp)
                self._fail(tp, None, CoordinatorWriteError(code, f"{tp[0]}-{tp[1]} is offline"))
                continue
            try:
                plan = plog.plan_flush()
            except KafkaStorageError as e:
                self._fail(tp, None, CoordinatorWriteError(ErrorCode.KAFKA_STORAGE_ERROR, str(e)))
                continue
            if plan is None:  # already durable (flushed by someone else)
                self._advance(tp, plog, plog.log_end_offset)
            else:
                plans.append((tp, plog, plan))
        if not plans:
            return
        self._in_flight = True
        self.rounds += 1
        if self._executor is None:
            self._round_done(plans, _sync_all([p for _tp, _l, p in plans]), generations)
            return
        # the partitions' fsyncs run side by side (a file system commits concurrent fsyncs
        # together): plan i goes to thread i mod flush_threads
        loop = asyncio.get_running_loop()
        n = min(self.flush_threads, len(plans))
        chunks = [[p for _tp, _l, p in plans[i::n]] for i in range(n)]
        futs = [loop.run_in_executor(self._executor, _sync_all, chunk) for chunk in chunks]

        def done(_f: object) -> None:
            per_chunk: list[list[BaseException | None]] = []
            for f, chunk in zip(futs, chunks, strict=True):
                try:
                    per_chunk.append(f.result())
                except BaseException as e:  # the executor was shut down (the broker stopping)
                    per_chunk.append([e] * len(chunk))
            results = [per_chunk[i % n][i // n] for i in range(len(plans))]
            self._round_done(plans, results, generations)

        asyncio.gather(*futs, return_exceptions=True).add_done_callback(done)

    def _round_done(self, plans: list[tuple[TopicPartition, PartitionLog, FlushPlan]],
                    results: list[BaseException | None], generations: dict[TopicPartition, int]) -> None:
        self._in_flight = False
        storage_log = self.broker.storage_log
        for (tp, plog, plan), exc in zip(plans, results, strict=True):
            if exc is None and self.broker.replica_manager.logs.get(tp) is plog:
                plog.finish_flush(plan)
                if self._generation.get(tp, 0) == generations[tp]:  # (else resigned meanwhile)
                    self._advance(tp, plog, plan.upto)
                if storage_log.failing:
                    storage_log.ok("flush of", f"{tp[0]}-{tp[1]}")
                continue
            if exc is None:  # the log was closed or replaced meanwhile (dir failed, moved)
                exc = KafkaStorageError(f"{tp[0]}-{tp[1]} went offline during its flush")
            storage_log.failed("flush of", f"{tp[0]}-{tp[1]}", exc,
                               "failing the coordinator writes it covered; the next write retries")
            if isinstance(exc, KafkaStorageError | OSError):
                with contextlib.suppress(Exception):
                    self.broker.replica_manager.note_storage_error(plog, exc)
            self._fail(tp, plan.upto, CoordinatorWriteError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)))
        if self._dirty:
            self._kick()

    def _advance(self, tp: TopicPartition, plog: PartitionLog, offset: int) -> None:
        if offset <= self._durable.get(tp, -1):
            return
        self._durable[tp] = offset
        if tp[0] in self.hw_on_durable and offset > plog.high_watermark:
            self.broker.replica_manager.advance_high_watermark(plog, offset)
        self._complete(tp, self._committed(tp, plog))

    def _complete(self, tp: TopicPartition, offset: int) -> None:
        if offset <= self._completed.get(tp, -1):
            return
        self._completed[tp] = offset
        q = self._waiting.get(tp)
        if q is not None:
            q.complete_upto(offset)
            if not q:
                del self._waiting[tp]
        for listener in self._listeners.get(tp, ()):
            try:
                listener.on_high_watermark_updated(tp, offset)
            except Exception:
                log.exception("high watermark listener of %s-%d failed", *tp)

    def _fail(self, tp: TopicPartition, upto: int | None, exc: CoordinatorWriteError) -> None:
        q = self._waiting.get(tp)
        if q is not None:
            q.fail_upto(upto, exc)
            if not q:
                del self._waiting[tp]

    def close(self) -> None:
        """Stop: waiters fail with NOT_COORDINATOR (the broker closes the logs, durably)."""
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        for tp in list(self._waiting):
            self._fail(tp, None, CoordinatorWriteError(ErrorCode.NOT_COORDINATOR, "the broker is stopping"))


def _sync_all(plans: list[FlushPlan]) -> list[BaseException | None]:
    out: list[BaseException | None] = []
    for plan in plans:
        try:
            sync_flush_plan(plan)
            out.append(None)
        except Exception as e:
            out.append(e)
    return out


class InternalTopicStorage:
    """Key/value record storage of a coordinator over an internal compacted topic
    (``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``), on the real
    partition logs, written through the broker's :class:`CoordinatorPartitionWriter`.

    :meth:`write` / :meth:`write_txn` append at once and return the completion (done when the
    HW covers the records); :meth:`append` / :meth:`append_txn` await it."""

    def __init__(self, broker: Broker, topic: str = "__consumer_offsets",
                 writer: CoordinatorPartitionWriter | None = None) -> None:
        self.broker = broker
        self.topic = topic
        self.writer = writer if writer is not None else broker.coordinator_writer

    def write(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> Awaitable[None]:
        tp = (self.topic, partition)
        return self.writer.await_offset(tp, self.writer.append(tp, records))

    def write_txn(
        self, partition: int, records: list[tuple[bytes, bytes | None]], producer_id: int, producer_epoch: int
    ) -> Awaitable[None]:
        tp = (self.topic, partition)
        end = self.writer.append(tp, records, producer_id=producer_id, producer_epoch=producer_epoch,
                                 transactional=True)
        return self.writer.await_offset(tp, end)

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        await self.write(partition, records)

    async def append_txn(
        self, partition: int, records: list[tuple[bytes, bytes | None]], producer_id: int, producer_epoch: int
    ) -> None:
        await self.write_txn(partition, records, producer_id, producer_epoch)

    def read_entries(self, partition: int) -> Iterator[StoredEntry]:
        """Every record from the log start, with transactional records and markers marked."""
        plog = self.broker.replica_manager.logs.get((self.topic, partition))
        if plog is None:
            return
        offset = plog.log_start_offset
        while offset < plog.log_end_offset:
            data = plog.read_bytes(offset, 1 << 20, max_offset=plog.log_end_offset)
            if not data:
                break
            for pos, h in iter_batches(data):
                if h.is_control:
                    if h.records_count:  # (the cleaner empties a marker it keeps for its epoch)
                        commit = control_type(data, pos, h) == CONTROL_COMMIT
                        yield StoredEntry(None, None, h.producer_id, True, commit)
                else:
                    for rec in decode_batch_records(data, pos, h):
                        if rec.offset >= offset and rec.key is not None:
                            yield StoredEntry(rec.key, rec.value, h.producer_id, h.is_transactional)
                offset = h.next_offset

    def read_all(self, partition: int) -> Iterable[tuple[bytes, bytes | None]]:
        """Non-transactional records only (what the transaction coordinator's topic holds)."""
        for e in self.read_entries(partition):
            if e.key is not None and not e.transactional:
                yield e.key, e.value
