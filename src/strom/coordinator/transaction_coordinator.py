"""The transaction coordinator runtime: persists decisions of :class:`TransactionStateMachine`
to ``__transaction_state``, writes transaction markers, aborts timed-out transactions, and
reloads everything on start.

Order of a commit: persist PrepareCommit → write a COMMIT control batch to every partition of
the transaction (offsets partitions included: the group coordinator then materialises the
pending transactional offsets) → persist CompleteCommit → answer. A crash anywhere in between
leaves a Prepare* record; :meth:`start` finds it and writes the markers again (a duplicate
marker for a producer with no open transaction is harmless), so a prepared transaction always
completes. Markers that cannot be written now (a partition's leader moving, its ISR below
``min.insync.replicas``) leave the transaction prepared and are written again every
``MARKER_RETRY_BACKOFF_MS`` until they are, as Kafka's marker channel retries them.

One lock orders the state machine's decisions and their ``__transaction_state`` appends; the
markers are written *outside* it (:meth:`_finish`), as Kafka's marker channel sends them apart
from the coordinator's request handling: a marker waiting for a partition's ISR or new leader
(up to 30 s) holds up only its own transaction, whose requests meanwhile get
CONCURRENT_TRANSACTIONS from the state machine (it is prepared). The completion is logged under
the lock once the markers are written, if the transaction is still prepared at that producer
id and epoch (its partition may have been resigned meanwhile: the new coordinator completes it).
Unlike Kafka, EndTxn answers only once the markers are written and the completion logged, so a
producer that saw its commit succeed reads it back at once with read_committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any, NoReturn, Protocol

from ..clock import Clock
from ..protocol.errors import ErrorCode, KafkaError
from ..rate_limited_log import RateLimitedLog
from ..scheduler import AsyncioScheduler, Scheduler, TaskHandle
from .records import partition_for
from .transaction import Markers, TransactionStateMachine, TxnMetadata, TxnResult, TxnState
from .transaction_records import TxnRecordError, decode_key, decode_value, encode_key, encode_value

log = logging.getLogger("strom.txn")

# markers that could not be written are written again this long after (Kafka's marker channel
# retries them until written)
MARKER_RETRY_BACKOFF_MS = 500
TopicPartition = tuple[str, int]


class TxnStorage(Protocol):
    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None: ...

    def read_all(self, partition: int) -> Iterable[tuple[bytes, bytes | None]]: ...


class MarkerWriter(Protocol):
    async def write_markers(
        self, producer_id: int, producer_epoch: int, commit: bool, partitions: Iterable[TopicPartition],
        coordinator_epoch: int = 0,
    ) -> None: ...


class TransactionCoordinator:
    def __init__(
        self,
        *,
        clock: Clock,
        storage: TxnStorage,
        markers: MarkerWriter,
        allocate_producer_id: Callable[[], int],
        num_partitions: int = 50,
        max_timeout_ms: int = 900_000,
        id_expiration_ms: int = 604_800_000,
        abort_check_interval_ms: int = 10_000,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.clock = clock
        self.storage = storage
        self.markers = markers
        self.num_partitions = num_partitions
        self.id_expiration_ms = id_expiration_ms
        self.abort_check_interval_ms = abort_check_interval_ms
        self.sm = TransactionStateMachine(clock, allocate_producer_id, max_timeout_ms)
        self._lock = asyncio.Lock()
        self.scheduler: Scheduler = scheduler if scheduler is not None else AsyncioScheduler()
        self._task: TaskHandle | None = None  # the periodic timeout check
        self._markers_due: dict[str, Markers] = {}  # markers that failed, by transactional id
        self._retry_task: TaskHandle | None = None  # their next try (_retry_markers)
        self._finishing: set[str] = set()  # transactional ids whose markers are being written
        self.loaded = False
        # which __transaction_state partitions this broker leads (the metadata quorum's image),
        # asked at start; None: every one (a single node). ``owned``: the partitions loaded and
        # served since (on_election / on_resignation); other transactional ids: NOT_COORDINATOR.
        self.owns: Callable[[int], bool] | None = None
        self.owned: set[int] | None = None
        self._elections: set[asyncio.Task[None]] = set()  # completing prepared txns on election
        # per partition, bumped by every election and resignation: a write that waited across
        # one must not put its state back (Kafka checks the coordinator epoch after an append)
        self._terms: dict[int, int] = {}
        # the coordinator epoch of a __transaction_state partition: its leader epoch here, read
        # when the partition is loaded (Kafka's coordinatorEpoch) and sent with its markers (a
        # partition refuses an older coordinator's marker); 0 on a single node
        self.coordinator_epoch: Callable[[int], int] = lambda partition: 0
        self._epochs: dict[int, int] = {}
        # transactional id -> the term in which its prepared transaction was logged or loaded
        # here: its markers are this coordinator's to write only in that term
        self._prepare_terms: dict[str, int] = {}
        self.storage_log = RateLimitedLog(log, clock)  # failed __transaction_state / marker writes

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        owns = self.owns
        if owns is not None:
            self.owned = {p for p in range(self.num_partitions) if owns(p)}
        for p in range(self.num_partitions):
            if self.owned is None or p in self.owned:  # (else led elsewhere: another broker's)
                self._epochs[p] = self.coordinator_epoch(p)
                self._load(p)
        self.loaded = True
        await self._complete_prepared(None, "after restart")
        self._task = self.scheduler.schedule_periodic(
            self.abort_check_interval_ms, self._check_timeouts, name="transaction timeout check"
        )

    def _load(self, p: int) -> None:
        for key, value in self.storage.read_all(p):
            try:
                tid = decode_key(key)
                self.sm.replay(None if value is None else decode_value(tid, value), tid)
            except TxnRecordError as e:
                log.error("skipping corrupt __transaction_state record in partition %d: %s", p, e)

    async def _complete_prepared(self, partition: int | None, why: str) -> None:
        """Write the markers of the prepared transactions (of ``partition``, or all) that the
        log holds without their completion (after a restart or an election). One that fails is
        tried again (:meth:`_retry_markers`)."""
        for res in self.sm.incomplete():
            assert res.markers is not None
            tid = res.markers.complete.transactional_id
            if partition is not None and self.partition_for(tid) != partition:
                continue
            await self._markers_of_prepared(res.markers, f"completing prepared transaction {tid} {why}")

    def _still_prepared(self, markers: Markers) -> bool:
        """The transaction of ``markers`` is still prepared at their producer id and epoch (not
        completed, nor resigned, while the caller waited)."""
        meta = self.sm.txns.get(markers.complete.transactional_id)
        return (meta is not None and meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
                and meta.producer_id == markers.producer_id and meta.producer_epoch == markers.producer_epoch)

    async def _markers_of_prepared(self, markers: Markers, why: str | None) -> None:
        """``markers``, if their transaction is still prepared and nobody writes them already; a
        failure is reported and retried. ``why`` is logged (None: a retry, already reported by
        the rate-limited failure line)."""
        tid = markers.complete.transactional_id
        async with self._lock:
            # the id's transaction as prepared now: not stale markers of an earlier transaction
            # of the same producer id and epoch (its partition resigned and loaded again meanwhile)
            current = self.sm.prepared_markers(tid)
            if current is None or tid in self._finishing or self.coordinated_elsewhere(tid):
                return
            self._prepare_terms[tid] = self._terms.get(self.partition_for(tid), 0)
            if why is not None:
                log.info("%s", why)
        with contextlib.suppress(KafkaError):  # reported (rate-limited); tried again
            await self._finish(current)

    def _markers_failed(self, markers: Markers) -> None:
        """Kafka's marker channel retries until the markers are written (a leader moving, an
        ISR below ``min.insync.replicas``): the transaction stays prepared (its producer's
        EndTxn retries get CONCURRENT_TRANSACTIONS) and its markers are written again
        ``MARKER_RETRY_BACKOFF_MS`` later, the lock free meanwhile for other transactions."""
        self._markers_due[markers.complete.transactional_id] = markers
        if self._retry_task is None and self._task is not None:  # (started, not stopped)
            self._retry_task = self.scheduler.schedule(
                MARKER_RETRY_BACKOFF_MS, self._retry_markers, name="transaction marker retry"
            )

    async def _retry_markers(self) -> None:
        self._retry_task = None
        due, self._markers_due = self._markers_due, {}
        for tid, markers in sorted(due.items()):
            log.debug("writing the markers of transaction %s again", tid)
            await self._markers_of_prepared(markers, None)

    def on_election(self, partition: int) -> None:
        """This broker became the leader of ``__transaction_state-partition``: load its
        transactional ids from the local log (Kafka's ``onElection``), then complete the
        prepared transactions among them, as :meth:`start` does after a restart."""
        self.on_resignation(partition)
        self._terms[partition] = self._terms.get(partition, 0) + 1
        self._epochs[partition] = self.coordinator_epoch(partition)
        if self.owned is not None:
            self.owned.add(partition)
        self._load(partition)
        if self.loaded:  # (started: a loop runs)
            task = asyncio.get_running_loop().create_task(
                self._complete_prepared(partition, f"of __transaction_state-{partition} on election")
            )
            self._elections.add(task)
            task.add_done_callback(self._election_done)

    def _election_done(self, task: asyncio.Task[None]) -> None:
        self._elections.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("completing prepared transactions after an election failed: %s", task.exception())

    def on_resignation(self, partition: int) -> None:
        """This broker no longer leads the partition: forget its transactional ids."""
        self._terms[partition] = self._terms.get(partition, 0) + 1
        if self.owned is not None:
            self.owned.discard(partition)
        for tid in [t for t in self.sm.txns if self.partition_for(t) == partition]:
            del self.sm.txns[tid]
            self._prepare_terms.pop(tid, None)

    async def stop(self) -> None:
        for task in list(self._elections):
            task.cancel()
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._retry_task is not None:
            self._retry_task.cancel()
            self._retry_task = None

    async def _check_timeouts(self) -> None:
        """Every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``."""
        try:
            await self.abort_expired()
        except KafkaError:
            pass  # a storage failure, already reported (rate-limited); retried next round
        except Exception:
            log.exception("transaction timeout check failed")

    async def abort_expired(self) -> int:
        prepared: list[Markers] = []
        try:
            async with self._lock:
                results = self.sm.expired()
                terms = dict(self._terms)
                for res in results:
                    assert res.record is not None and res.markers is not None
                    tid = res.record.transactional_id
                    partition = self.partition_for(tid)
                    if self._terms.get(partition, 0) != terms.get(partition, 0):
                        continue  # resigned (or reloaded) during an earlier write of this loop
                    log.info("aborting transaction %s: timed out", tid)
                    try:
                        await self._persist(res.record)
                    except KafkaError:
                        continue  # reported; the others still abort, this one next round
                    prepared.append(res.markers)
                terms = dict(self._terms)
                for tid in self.sm.expire_ids(self.id_expiration_ms):
                    partition = self.partition_for(tid)
                    if self._terms.get(partition, 0) != terms.get(partition, 0):
                        continue
                    with contextlib.suppress(KafkaError):  # (reported; tried again next round)
                        await self._append_in_term(tid, None)
                        self.sm.replay(None, tid)
        finally:
            for markers in prepared:  # (each failure is reported and retried)
                with contextlib.suppress(KafkaError):
                    await self._finish(markers)
        return len(results)

    # ------------------------------------------------------------------ persistence
    async def _append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append to ``__transaction_state``; a storage failure is reported (rate-limited) and
        becomes NOT_COORDINATOR, Kafka's answer for KAFKA_STORAGE_ERROR on the transaction log
        (the client looks the coordinator up again and retries)."""
        what, subject = "append to", f"__transaction_state-{partition}"
        try:
            await self.storage.append(partition, records)
        except Exception as e:
            self.storage_log.failed(what, subject, e, "answering NOT_COORDINATOR, state unchanged")
            raise KafkaError(ErrorCode.NOT_COORDINATOR, "the transaction log is not writable") from e
        self.storage_log.ok(what, subject)

    async def _persist(self, meta: TxnMetadata) -> None:
        """Log ``meta``, then apply it, unless the partition was resigned (or resigned and led
        again, reloaded from the log) while the append waited for the ISR: then the state is
        another broker's, or already rebuilt from the log, and the caller gets NOT_COORDINATOR."""
        tid = meta.transactional_id
        term = await self._append_in_term(tid, encode_value(meta))
        self.sm.replay(meta)
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            self._prepare_terms[tid] = term
        else:
            self._prepare_terms.pop(tid, None)

    async def _append_in_term(self, tid: str, value: bytes | None) -> int:
        """Append ``tid``'s record (None: its tombstone) and return the partition's term, or
        raise NOT_COORDINATOR when the partition was resigned (or resigned and loaded again)
        while the append waited for the ISR: the state is then another broker's, or already
        rebuilt from the log, and must not be applied."""
        partition = self.partition_for(tid)
        term = self._terms.get(partition, 0)
        await self._append(partition, [(encode_key(tid), value)])
        if self._terms.get(partition, 0) != term or self.coordinated_elsewhere(tid):
            raise KafkaError(ErrorCode.NOT_COORDINATOR, f"__transaction_state-{partition} moved meanwhile")
        return term

    async def _finish(self, markers: Markers) -> None:
        """Outside the lock: write the markers of a prepared transaction, then, under the lock,
        log its completion if it is still prepared at their producer id and epoch. A failure is
        reported (rate-limited), the markers are written again later (:meth:`_markers_failed`)
        and KafkaError NOT_COORDINATOR raised (the producer retries its EndTxn, which gets
        CONCURRENT_TRANSACTIONS until the markers are written)."""
        tid = markers.complete.transactional_id
        partition = self.partition_for(tid)
        # the term its prepare was logged (or loaded) in: resigned since (the producer's next
        # transaction may be prepared here now, or another broker owns it), these are stale
        term = self._prepare_terms.get(tid)
        if term is None or term != self._terms.get(partition, 0) or self.coordinated_elsewhere(tid):
            self._stale_finish(tid)
        what, subject = "writing transaction markers of producer", str(markers.producer_id)
        self._finishing.add(tid)
        try:
            await self.markers.write_markers(
                markers.producer_id, markers.producer_epoch, markers.commit, sorted(markers.partitions),
                coordinator_epoch=self._epochs.get(partition, 0),
            )
        except Exception as e:
            self.storage_log.failed(what, subject, e, "answering NOT_COORDINATOR, retrying")
            self._markers_failed(markers)
            raise KafkaError(ErrorCode.NOT_COORDINATOR, "transaction markers could not be written") from e
        finally:
            self._finishing.discard(tid)
        self.storage_log.ok(what, subject)
        if self._terms.get(partition, 0) != term:
            self._stale_finish(tid)
        async with self._lock:
            if self._terms.get(partition, 0) != term:  # (resigned while this waited for the lock)
                self._stale_finish(tid)
            if self._still_prepared(markers):
                await self._persist(markers.complete)

    def _stale_finish(self, tid: str) -> NoReturn:
        """Markers of ``tid`` whose partition was resigned (and maybe loaded again) since their
        transaction was prepared here: no completion is logged for them. The state here, if any,
        is the log's; a transaction prepared in it is completed with its own markers (an
        election skips an id being finished), by the retry."""
        current = self.sm.prepared_markers(tid)
        if current is not None and not self.coordinated_elsewhere(tid):
            self._markers_failed(current)
        raise KafkaError(ErrorCode.NOT_COORDINATOR,
                         f"__transaction_state-{self.partition_for(tid)} moved meanwhile")

    async def _apply(self, res: TxnResult) -> TxnResult:
        """Under the lock: log the state machine's decision. Its markers, if any, are the
        caller's to write once the lock is released (:meth:`_finish`)."""
        if res.record is not None:
            await self._persist(res.record)
        return res

    def coordinated_elsewhere(self, txn_id: str) -> bool:
        """Whether ``txn_id``'s ``__transaction_state`` partition is led by another broker (a
        cluster); a single node coordinates every id."""
        return self.owned is not None and self.partition_for(txn_id) not in self.owned

    def _not_ready(self, txn_id: str | None = None) -> int | None:
        """NOT_COORDINATOR for a transactional id whose ``__transaction_state`` partition this
        broker does not lead (``owns``); COORDINATOR_LOAD_IN_PROGRESS until loaded. Asked again
        once a request holds the lock: while it waited for another request's write (an append
        waiting for the ISR, markers), the partition may have been resigned and its ids
        forgotten, and the state machine would answer INVALID_PRODUCER_ID_MAPPING (fatal for the
        client) where Kafka answers NOT_COORDINATOR (look the coordinator up again, retry)."""
        if txn_id and self.coordinated_elsewhere(txn_id):
            return ErrorCode.NOT_COORDINATOR
        return None if self.loaded else ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

    # ------------------------------------------------------------------ API
    async def init_producer_id(
        self, txn_id: str, timeout_ms: int, producer_id: int = -1, producer_epoch: int = -1
    ) -> tuple[int, int, int]:
        if (err := self._not_ready(txn_id)) is not None:
            return err, -1, -1
        async with self._lock:
            if (err := self._not_ready(txn_id)) is not None:  # resigned while this waited
                return err, -1, -1
            res = await self._apply(self.sm.init_producer_id(txn_id, timeout_ms, producer_id, producer_epoch))
        if res.markers is None:
            return res.error, res.producer_id, res.producer_epoch
        # the previous producer was fenced and its transaction aborted: once its markers are
        # written, hand out the next epoch now instead of making the client retry
        await self._finish(res.markers)
        if res.error != ErrorCode.CONCURRENT_TRANSACTIONS:
            return res.error, res.producer_id, res.producer_epoch
        async with self._lock:
            if (err := self._not_ready(txn_id)) is not None:
                return err, -1, -1
            res = await self._apply(self.sm.init_producer_id(txn_id, timeout_ms))
        if res.markers is not None:  # (another producer's transaction began meanwhile)
            await self._finish(res.markers)
        return res.error, res.producer_id, res.producer_epoch

    async def add_partitions(
        self,
        txn_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
        client_transaction_version: int | None = None,
    ) -> dict[TopicPartition, int]:
        parts = list(partitions)
        if (err := self._not_ready(txn_id)) is not None:
            return dict.fromkeys(parts, err)
        async with self._lock:
            if (err := self._not_ready(txn_id)) is not None:  # resigned while this waited
                return dict.fromkeys(parts, err)
            res = await self._apply(
                self.sm.add_partitions(txn_id, producer_id, epoch, parts, client_transaction_version)
            )
        if res.markers is not None:
            await self._finish(res.markers)
        return res.partition_errors

    def verify_partitions(
        self, txn_id: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn ``verify_only`` (asked by a partition leader or group coordinator,
        maybe another broker): NOT_COORDINATOR for an id this broker no longer coordinates (its
        state was dropped on resignation) and COORDINATOR_LOAD_IN_PROGRESS while loading, as
        Kafka's ``getTransactionState``; answered from the state machine's empty state they
        were INVALID_PRODUCER_ID_MAPPING, fatal to the producer."""
        if (err := self._not_ready(txn_id)) is not None:
            return dict.fromkeys(partitions, err)
        return self.sm.verify_partitions(txn_id, producer_id, epoch, partitions)

    async def add_offsets(
        self, txn_id: str, producer_id: int, epoch: int, group_id: str, offsets_partition: int
    ) -> int:
        res = await self.add_partitions(
            txn_id, producer_id, epoch, [("__consumer_offsets", offsets_partition)]
        )
        return next(iter(res.values()), 0)

    async def end_txn(self, txn_id: str, producer_id: int, epoch: int, commit: bool) -> int:
        """EndTxn below v5 (transaction version 1): the epoch stays."""
        return (await self.end_transaction(txn_id, producer_id, epoch, commit))[0]

    async def end_transaction(
        self, txn_id: str, producer_id: int, epoch: int, commit: bool, *, tv2: bool = False
    ) -> tuple[int, int, int]:
        """EndTxn: ``(error, producer id, producer epoch)``; with ``tv2`` (EndTxn v5+) the id and
        epoch are the bumped ones the client continues with (-1, -1 on an error)."""
        if (err := self._not_ready(txn_id)) is not None:
            return err, -1, -1
        async with self._lock:
            if (err := self._not_ready(txn_id)) is not None:  # resigned while this waited
                return err, -1, -1
            res = await self._apply(self.sm.end_txn(txn_id, producer_id, epoch, commit, tv2=tv2))
        if res.markers is not None:
            await self._finish(res.markers)
        if res.error != ErrorCode.NONE:
            return res.error, -1, -1
        return res.error, res.producer_id, res.producer_epoch

    async def abort(self, txn_id: str) -> int:
        """Admin abort (``strom transactions abort``): abort the ongoing transaction, fencing."""
        async with self._lock:
            meta = self.sm.txns.get(txn_id)
            if meta is None:
                return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            if meta.state != TxnState.ONGOING:
                return ErrorCode.INVALID_TXN_STATE
            res = await self._apply(self.sm._abort_with_fence(meta, self.clock.time_ms(), ErrorCode.NONE))
        if res.markers is not None:
            await self._finish(res.markers)
        return ErrorCode.NONE

    def describe(self, txn_id: str) -> dict[str, Any]:
        """DescribeTransactions for one id: NOT_COORDINATOR for an id coordinated elsewhere and
        COORDINATOR_LOAD_IN_PROGRESS while loading (the admin client looks the coordinator up
        again and retries, as with Kafka), TRANSACTIONAL_ID_NOT_FOUND for an unknown one."""
        err = self._not_ready(txn_id)
        meta = self.sm.txns.get(txn_id) if err is None else None
        if meta is None:
            return {
                "error_code": ErrorCode.TRANSACTIONAL_ID_NOT_FOUND if err is None else err,
                "transactional_id": txn_id,
                "transaction_state": "",
                "transaction_timeout": 0,
                "transaction_start_time": -1,
                "producer_id": -1,
                "producer_epoch": -1,
                "topics": [],
            }
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(meta.partitions):
            by_topic.setdefault(t, []).append(p)
        return {
            "error_code": 0,
            "transactional_id": txn_id,
            "transaction_state": meta.state.kafka_name,
            "transaction_timeout": meta.timeout_ms,
            "transaction_start_time": meta.start_ms,
            "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        }

    def list(
        self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), min_duration_ms: int = -1
    ) -> list[TxnMetadata]:
        states = set(states)
        pids = set(producer_ids)
        now = self.clock.time_ms()
        out = []
        for m in self.sm.txns.values():
            if states and m.state.kafka_name not in states:
                continue
            if pids and m.producer_id not in pids:
                continue
            if min_duration_ms >= 0 and (m.state != TxnState.ONGOING or now - m.start_ms < min_duration_ms):
                continue
            out.append(m)
        return out
