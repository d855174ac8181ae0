"""The transaction coordinator's state machine (Kafka's TransactionStateManager/TransactionMetadata).

Theory of operation
-------------------
One :class:`TxnMetadata` per ``transactional.id``, in one of Kafka's states::

    Empty --AddPartitions/AddOffsets--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers--> CompleteCommit
    Ongoing --EndTxn(abort) or timeout--> PrepareAbort --markers--> CompleteAbort
    Complete*/Empty --InitProducerId--> Empty (epoch bumped)

Every method is a pure decision over the current state and the injected clock: it mutates
nothing and returns a :class:`TxnResult` holding the new metadata to persist (a record of
``__transaction_state``), the response error, and, for EndTxn, the markers to write. The
runtime persists the record, then calls :meth:`TransactionStateMachine.replay` with it, which
is the only place state changes — the same path recovery takes when it reads the log back.

Transaction version 2 (KIP-890 part 2, EndTxn v5+): every transaction end bumps the producer
epoch; the markers carry the bumped epoch (so a zombie still on the old epoch is fenced by every
partition of the transaction) and the EndTxn response hands the new id/epoch to the client. At
an exhausted epoch (32766) the prepare record carries ``next_producer_id`` and the completion
rotates to it at epoch 0 (Kafka's ``prepareComplete``). A retry of a completed EndTxn carries the
epoch before the bump (``retryOnEpochBump``) or, after a rotation, the old id at 32766
(``retryOnOverflow``); an abort with no transaction open still bumps (an "empty" abort, no
markers). Partitions join implicitly: the produce path and TxnOffsetCommit v5 call
:meth:`add_partitions`; clients no longer send AddPartitionsToTxn/AddOffsetsToTxn.

Rules (Kafka's): a request with an older epoch gets PRODUCER_FENCED; an unknown producer id or
a different one INVALID_PRODUCER_ID_MAPPING; an operation while markers are being written
CONCURRENT_TRANSACTIONS; EndTxn outside a transaction INVALID_TXN_STATE (retries of a completed
EndTxn with the same outcome succeed); InitProducerId on an Ongoing transaction fences it
(epoch bump, abort) before handing out the next epoch; a transaction older than its timeout is
aborted by :meth:`expired` with an epoch bump so the zombie producer is fenced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

from ..clock import Clock
from ..protocol.errors import ErrorCode

TopicPartition = tuple[str, int]
MAX_EPOCH = 32767


class TxnState(Enum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return {
            TxnState.EMPTY: "Empty",
            TxnState.ONGOING: "Ongoing",
            TxnState.PREPARE_COMMIT: "PrepareCommit",
            TxnState.PREPARE_ABORT: "PrepareAbort",
            TxnState.COMPLETE_COMMIT: "CompleteCommit",
            TxnState.COMPLETE_ABORT: "CompleteAbort",
            TxnState.DEAD: "Dead",
            TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
        }[self]


KAFKA_STATE_NAMES = {s.kafka_name: s for s in TxnState}


@dataclass(frozen=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = -1
    # KIP-890 (transaction.version 2): the version the client ended its last transaction with,
    # and the producer id rotation of an epoch overflow (Kafka's TransactionLogValue tags 0-2)
    client_transaction_version: int = 0
    previous_producer_id: int = -1
    next_producer_id: int = -1

    def with_(self, **changes: object) -> TxnMetadata:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Markers:
    """Markers to write: one control batch per partition, then the completion record."""

    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]
    complete: TxnMetadata


@dataclass
class TxnResult:
    error: int = ErrorCode.NONE
    record: TxnMetadata | None = None  # to persist (and replay) before answering
    markers: Markers | None = None  # to write after ``record``; then persist markers.complete
    partition_errors: dict[TopicPartition, int] = field(default_factory=dict)
    producer_id: int = -1
    producer_epoch: int = -1


class TransactionStateMachine:
    def __init__(self, clock: Clock, allocate_producer_id: Callable[[], int], max_timeout_ms: int) -> None:
        self.clock = clock
        self.allocate_producer_id = allocate_producer_id
        self.max_timeout_ms = max_timeout_ms
        self.txns: dict[str, TxnMetadata] = {}

    # ------------------------------------------------------------------ replay
    def replay(self, meta: TxnMetadata | None, transactional_id: str | None = None) -> None:
        """Apply a persisted record (``None`` = tombstone of ``transactional_id``)."""
        if meta is None:
            if transactional_id is not None:
                self.txns.pop(transactional_id, None)
            return
        self.txns[meta.transactional_id] = meta

    # ------------------------------------------------------------------ validation
    def _check(self, txn_id: str, producer_id: int, epoch: int) -> tuple[TxnMetadata | None, int]:
        meta = self.txns.get(txn_id)
        if meta is None or meta.state == TxnState.DEAD:
            return None, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_id != producer_id:
            return None, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch < meta.producer_epoch:
            return None, ErrorCode.PRODUCER_FENCED
        if epoch > meta.producer_epoch:
            return None, ErrorCode.INVALID_PRODUCER_EPOCH
        return meta, ErrorCode.NONE

    # ------------------------------------------------------------------ requests
    def init_producer_id(
        self, txn_id: str, timeout_ms: int, expected_pid: int = -1, expected_epoch: int = -1
    ) -> TxnResult:
        now = self.clock.time_ms()
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return TxnResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        meta = self.txns.get(txn_id)
        if meta is None or meta.state == TxnState.DEAD:
            pid = self.allocate_producer_id()
            new = TxnMetadata(txn_id, pid, 0, timeout_ms, TxnState.EMPTY, frozenset(), -1, now)
            return TxnResult(record=new, producer_id=pid, producer_epoch=0)
        # KIP-360: a producer recovering with its old ids is fenced unless they are the current
        # ones (or the ones just before a bump the producer did not see the answer to)
        current = (meta.producer_id, meta.producer_epoch)
        previous = (meta.producer_id, meta.last_producer_epoch)
        if expected_pid >= 0 and (expected_pid, expected_epoch) not in (current, previous):
            return TxnResult(ErrorCode.PRODUCER_FENCED)
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE):
            return TxnResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.state == TxnState.ONGOING:
            # Fence the current producer: abort its transaction with a bumped epoch. The runtime
            # writes the markers, then the caller retries (Kafka answers CONCURRENT_TRANSACTIONS
            # here too; clients retry InitProducerId on it).
            return self._abort_with_fence(meta, now, ErrorCode.CONCURRENT_TRANSACTIONS)
        pid, epoch = meta.producer_id, meta.producer_epoch + 1
        if epoch >= MAX_EPOCH - 1:
            pid, epoch = self.allocate_producer_id(), 0
        new = meta.with_(
            producer_id=pid,
            producer_epoch=epoch,
            last_producer_epoch=meta.producer_epoch,
            timeout_ms=timeout_ms,
            state=TxnState.EMPTY,
            partitions=frozenset(),
            start_ms=-1,
            last_update_ms=now,
        )
        return TxnResult(record=new, producer_id=pid, producer_epoch=epoch)

    def _abort_with_fence(self, meta: TxnMetadata, now: int, error: int) -> TxnResult:
        # Kafka bumps at the fence (prepareFenceProducerEpoch) and, for a transaction version 2
        # transaction, again at its abort (prepareAbortOrCommit): the fenced producer's EndTxn
        # then looks like no retry and gets PRODUCER_FENCED. No producer id rotation on this path
        epoch = min(meta.producer_epoch + (2 if meta.client_transaction_version >= 2 else 1), MAX_EPOCH)
        prepare = meta.with_(
            producer_epoch=epoch,
            last_producer_epoch=meta.producer_epoch,
            state=TxnState.PREPARE_ABORT,
            last_update_ms=now,
        )
        complete = prepare.with_(state=TxnState.COMPLETE_ABORT, partitions=frozenset(), last_update_ms=now)
        markers = Markers(meta.producer_id, epoch, False, meta.partitions, complete)
        return TxnResult(error, record=prepare, markers=markers)

    def add_partitions(
        self,
        txn_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
        client_transaction_version: int | None = None,
    ) -> TxnResult:
        """AddPartitionsToTxn, or the implicit add of transaction version 2 (a transactional
        produce, TxnOffsetCommit v5: ``client_transaction_version=2``)."""
        parts = frozenset(partitions)
        meta, err = self._check(txn_id, producer_id, epoch)
        if meta is None:
            return TxnResult(err, partition_errors=dict.fromkeys(parts, err))
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE):
            err = ErrorCode.CONCURRENT_TRANSACTIONS
            return TxnResult(err, partition_errors=dict.fromkeys(parts, err))
        if meta.state == TxnState.ONGOING and parts <= meta.partitions:
            return TxnResult(partition_errors=dict.fromkeys(parts, 0))
        now = self.clock.time_ms()
        start = meta.start_ms if meta.state == TxnState.ONGOING else now
        new = meta.with_(
            state=TxnState.ONGOING, partitions=meta.partitions | parts, start_ms=start, last_update_ms=now
        )
        if client_transaction_version is not None:
            new = new.with_(client_transaction_version=client_transaction_version)
        return TxnResult(record=new, partition_errors=dict.fromkeys(parts, 0))

    def verify_partitions(
        self, txn_id: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn ``verify_only`` (KIP-890 part 1, Kafka's
        ``handleVerifyPartitionsInTransaction``): is each partition in the transaction?
        A partition that is not gets TRANSACTION_ABORTABLE (the produce path maps it to
        INVALID_TXN_STATE for clients too old to know that code)."""
        parts = list(partitions)
        meta = self.txns.get(txn_id)
        if meta is None or meta.state == TxnState.DEAD or meta.producer_id != producer_id:
            return dict.fromkeys(parts, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if meta.producer_epoch != epoch:
            return dict.fromkeys(parts, ErrorCode.PRODUCER_FENCED)
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return dict.fromkeys(parts, ErrorCode.CONCURRENT_TRANSACTIONS)
        return {
            tp: ErrorCode.NONE if tp in meta.partitions else ErrorCode.TRANSACTION_ABORTABLE for tp in parts
        }

    def end_txn(
        self, txn_id: str, producer_id: int, epoch: int, commit: bool, *, tv2: bool = False
    ) -> TxnResult:
        """EndTxn; ``tv2`` for EndTxn v5+ (transaction version 2: the epoch is bumped)."""
        if tv2:
            return self._end_txn_v2(txn_id, producer_id, epoch, commit)
        meta, err = self._check(txn_id, producer_id, epoch)
        if meta is None:
            return TxnResult(err)
        now = self.clock.time_ms()
        state = meta.state
        if state == TxnState.ONGOING:
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            prepare = meta.with_(state=target, last_update_ms=now)
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            complete = prepare.with_(state=done, partitions=frozenset(), last_update_ms=now)
            return TxnResult(
                record=prepare, markers=Markers(producer_id, epoch, commit, meta.partitions, complete)
            )
        if (state == TxnState.COMPLETE_COMMIT and commit) or (
            state == TxnState.COMPLETE_ABORT and not commit
        ):
            return TxnResult()  # a retry of an EndTxn that already completed
        if (state == TxnState.PREPARE_COMMIT and commit) or (state == TxnState.PREPARE_ABORT and not commit):
            return TxnResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if state == TxnState.EMPTY and not commit:
            # aborting an empty transaction is allowed by clients (abortTransaction after init)
            return TxnResult()
        return TxnResult(ErrorCode.INVALID_TXN_STATE)

    def _end_txn_v2(self, txn_id: str, producer_id: int, epoch: int, commit: bool) -> TxnResult:
        """Kafka's ``endTransaction`` for transaction version 2."""
        meta = self.txns.get(txn_id)
        if meta is None or meta.state == TxnState.DEAD:
            return TxnResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        state = meta.state
        retry_on_overflow = (
            meta.previous_producer_id == producer_id and epoch == MAX_EPOCH - 1 and meta.producer_epoch == 0
        )
        retry_on_bump = meta.producer_epoch == epoch + 1
        if meta.producer_id != producer_id and not retry_on_overflow:
            return TxnResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            valid = retry_on_bump
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid = retry_on_bump or retry_on_overflow or epoch == meta.producer_epoch
        else:
            valid = epoch == meta.producer_epoch
        if not valid:
            return TxnResult(ErrorCode.PRODUCER_FENCED)
        is_retry = retry_on_bump or retry_on_overflow
        now = self.clock.time_ms()
        done = TxnResult(producer_id=meta.producer_id, producer_epoch=meta.producer_epoch)
        if state == TxnState.ONGOING:
            return self._prepare_end_v2(meta, commit, now, empty=False)
        if state == TxnState.COMPLETE_COMMIT:
            if commit:
                return done if is_retry else TxnResult(ErrorCode.INVALID_TXN_STATE)
            if is_retry:
                return TxnResult(ErrorCode.INVALID_TXN_STATE)
            return self._prepare_end_v2(meta, False, now, empty=True)
        if state == TxnState.COMPLETE_ABORT:
            if not commit:
                return done if is_retry else self._prepare_end_v2(meta, False, now, empty=True)
            return TxnResult(ErrorCode.INVALID_TXN_STATE)
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            same = (state == TxnState.PREPARE_COMMIT) == commit
            return TxnResult(ErrorCode.CONCURRENT_TRANSACTIONS if same else ErrorCode.INVALID_TXN_STATE)
        if state == TxnState.EMPTY and not commit:
            return self._prepare_end_v2(meta, False, now, empty=True)
        return TxnResult(ErrorCode.INVALID_TXN_STATE)

    def _prepare_end_v2(self, meta: TxnMetadata, commit: bool, now: int, *, empty: bool) -> TxnResult:
        """Prepare* with the epoch bumped (``prepareAbortOrCommit`` with transaction version 2); an
        exhausted epoch takes a new producer id, which the completion switches to at epoch 0."""
        next_pid = self.allocate_producer_id() if meta.producer_epoch >= MAX_EPOCH - 1 else -1
        prepare = meta.with_(
            state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
            producer_epoch=meta.producer_epoch + 1,
            last_producer_epoch=meta.producer_epoch,
            next_producer_id=next_pid,
            client_transaction_version=2,
            start_ms=now if empty else meta.start_ms,
            last_update_ms=now,
        )
        complete = self._completion(prepare, now)
        markers = Markers(prepare.producer_id, prepare.producer_epoch, commit, prepare.partitions, complete)
        return TxnResult(
            record=prepare,
            markers=markers,
            producer_id=complete.producer_id,
            producer_epoch=complete.producer_epoch,
        )

    @staticmethod
    def _completion(prepare: TxnMetadata, now: int) -> TxnMetadata:
        """The Complete* record that follows ``prepare``'s markers (Kafka's ``prepareComplete``)."""
        commit = prepare.state == TxnState.PREPARE_COMMIT
        done = prepare.with_(
            state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
            partitions=frozenset(),
            last_update_ms=now,
        )
        if prepare.client_transaction_version >= 2 and prepare.next_producer_id >= 0:
            done = done.with_(
                producer_id=prepare.next_producer_id,
                producer_epoch=0,
                previous_producer_id=prepare.producer_id,
                next_producer_id=-1,
            )
        return done

    # ------------------------------------------------------------------ timeouts
    def expired(self) -> list[TxnResult]:
        """Ongoing transactions past their timeout: abort them, fencing the producer."""
        now = self.clock.time_ms()
        out = []
        for meta in self.txns.values():
            if (
                meta.state == TxnState.ONGOING
                and meta.start_ms >= 0
                and now > meta.start_ms + meta.timeout_ms
            ):
                out.append(self._abort_with_fence(meta, now, ErrorCode.NONE))
        return out

    def incomplete(self) -> list[TxnResult]:
        """After recovery: transactions whose markers may not all have been written."""
        out = []
        for tid in self.txns:
            markers = self.prepared_markers(tid)
            if markers is not None:
                out.append(TxnResult(markers=markers))
        return out

    def prepared_markers(self, txn_id: str) -> Markers | None:
        """The markers of ``txn_id``'s transaction if it is prepared (PREPARE_COMMIT/ABORT) now."""
        meta = self.txns.get(txn_id)
        if meta is None or meta.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return None
        commit = meta.state == TxnState.PREPARE_COMMIT
        complete = self._completion(meta, self.clock.time_ms())
        return Markers(meta.producer_id, meta.producer_epoch, commit, meta.partitions, complete)

    def expire_ids(self, expiration_ms: int) -> list[str]:
        """``transactional.id.expiration.ms``: idle, completed ids to tombstone."""
        now = self.clock.time_ms()
        return [
            m.transactional_id
            for m in self.txns.values()
            if m.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
            and m.last_update_ms >= 0
            and now - m.last_update_ms > expiration_ms
        ]
