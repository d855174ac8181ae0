"""Per-producer idempotence state and its snapshots (Kafka's ProducerStateManager).

Theory of operation
-------------------
For every producer id the manager remembers the current epoch and the metadata of the last
:data:`NUM_BATCHES_TO_RETAIN` batches it wrote (first/last sequence, first/last offset, max
timestamp). A leader append runs each idempotent batch (producer_id >= 0) through these rules,
Kafka's ``ProducerAppendInfo``:

1. Duplicate: same epoch and the same ``(first_seq, last_seq)`` as a retained batch -> the caller
   answers with that batch's offsets and appends nothing (:meth:`ProducerStateEntry.find_duplicate`).
2. Epoch older than the current one -> :class:`InvalidProducerEpochError`.
3. A new (larger) epoch must start at sequence 0, else :class:`OutOfOrderSequenceError`. A producer
   the partition has no state for (new, or its batches were all deleted by retention) is accepted at
   any sequence, as Kafka does since KIP-360.
4. Same epoch: ``first_seq`` must be ``last_seq + 1`` (with wrap-around from 2^31-1 to 0), else
   :class:`OutOfOrderSequenceError`.

Checks run against a staged copy (:class:`ProducerAppendInfo`) so several batches of one request
are validated in order; the staged entries are committed with :meth:`ProducerStateManager.update`
only after the bytes are in the log. Replayed batches (recovery, replication) skip validation.

Transactions: transactional batches record ``current_txn_first_offset`` (the first offset of the
producer's ongoing transaction) and control batches clear it; :meth:`first_unstable_offset` is the
hook for the last stable offset. Markers are not interpreted further yet.

Snapshots: ``%020d.snapshot`` named by the offset the state covers up to (exclusive) — written
when a segment rolls and on clean close. A snapshot is ``version u16 | crc32c u32 | JSON body``;
one with a bad CRC is deleted and an older one (or a scan from the log start) is used instead.
"""

from __future__ import annotations

import json
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crc32c import crc32c

from strom.durable_file import replace_file
from strom.log.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from strom.protocol.records import BatchHeader

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct(">HI")
_INT32_MAX = 0x7FFFFFFF
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: wraps from 2^31-1 to 0."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


@dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
        )

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        last_seq = header.last_sequence
        for meta in self.batches:
            if meta.first_seq == header.base_sequence and meta.last_seq == last_seq:
                return meta
        return None

    def add_batch(self, epoch: int, meta: BatchMetadata) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(meta)
        self.last_timestamp = meta.timestamp

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.producer_id,
            "epoch": self.producer_epoch,
            "coordinator_epoch": self.coordinator_epoch,
            "last_timestamp": self.last_timestamp,
            "txn_first_offset": self.current_txn_first_offset,
            "batches": [
                [b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp] for b in self.batches
            ],
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ProducerStateEntry:
        entry = cls(int(obj["pid"]), int(obj["epoch"]))
        entry.coordinator_epoch = int(obj["coordinator_epoch"])
        entry.last_timestamp = int(obj["last_timestamp"])
        txn = obj["txn_first_offset"]
        entry.current_txn_first_offset = None if txn is None else int(txn)
        for b in obj["batches"]:
            entry.batches.append(BatchMetadata(*(int(x) for x in b)))
        return entry


class ProducerAppendInfo:
    """The staged update of one producer during one append (Kafka's ProducerAppendInfo)."""

    def __init__(self, producer_id: int, current: ProducerStateEntry | None, *, validate: bool) -> None:
        self.producer_id = producer_id
        self.current = current if current is not None else ProducerStateEntry(producer_id)
        self.updated = self.current.copy()
        self.validate = validate

    def _check_epoch(self, epoch: int) -> None:
        if epoch < self.updated.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {self.producer_id}: epoch {epoch} is older than the current epoch "
                f"{self.updated.producer_epoch}"
            )

    def _check_sequence(self, epoch: int, first_seq: int) -> None:
        if epoch != self.updated.producer_epoch:
            if first_seq != 0 and self.updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {self.producer_id}: new epoch {epoch} must start at sequence 0, "
                    f"got {first_seq} (current epoch {self.updated.producer_epoch})"
                )
            return
        last = self.updated.last_seq  # NO_SEQUENCE (-1) if none retained: must then start at 0
        known = bool(self.updated.batches) or self.current.producer_epoch != NO_PRODUCER_EPOCH
        if known and not in_sequence(last, first_seq):
            raise OutOfOrderSequenceError(
                f"producer {self.producer_id}: out of order sequence {first_seq} "
                f"(epoch {epoch}), expected {increment_sequence(last, 1)}"
            )

    def append_data_batch(
        self, header: BatchHeader, first_offset: int, last_offset: int, timestamp: int
    ) -> None:
        """Validate (leader appends) and stage one data batch. Raises the producer errors."""
        epoch = header.producer_epoch
        if self.validate:
            self._check_epoch(epoch)
            self._check_sequence(epoch, header.base_sequence)
        meta = BatchMetadata(header.base_sequence, header.last_sequence, first_offset, last_offset, timestamp)
        self.updated.add_batch(epoch, meta)
        if header.is_transactional and self.updated.current_txn_first_offset is None:
            self.updated.current_txn_first_offset = first_offset

    def append_control_batch(self, header: BatchHeader, offset: int, timestamp: int,
                             coordinator_epoch: int = -1, *, fence: bool = False) -> None:
        """A transaction marker: ends the producer's ongoing transaction. ``coordinator_epoch``:
        the epoch of the ``__transaction_state`` partition leader that wrote it (-1: unknown,
        e.g. a replay from batch headers). With ``fence`` (a marker appended by this leader, not
        replicated) one older than the last marker's is refused, as Kafka's
        ``checkCoordinatorEpoch``: a coordinator that lost its partition must not end a
        transaction its successor already ended (the producer may be in its next one)."""
        if self.validate:
            self._check_epoch(header.producer_epoch)
        if fence and 0 <= coordinator_epoch < self.updated.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"producer {self.producer_id}: marker from coordinator epoch {coordinator_epoch}, "
                f"older than {self.updated.coordinator_epoch}"
            )
        if coordinator_epoch >= 0:
            self.updated.coordinator_epoch = coordinator_epoch
        if header.producer_epoch != self.updated.producer_epoch:
            self.updated.batches.clear()
            self.updated.producer_epoch = header.producer_epoch
        self.updated.current_txn_first_offset = None
        self.updated.last_timestamp = timestamp


class ProducerStateManager:
    """Producer states of one partition plus their snapshot files in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerStateEntry] = {}
        # producer id -> first offset of its ongoing transaction (kept in step with ``producers``
        # so the last stable offset a fetch asks for costs O(open transactions), not O(producers))
        self._ongoing: dict[int, int] = {}
        self.map_end_offset = 0  # state reflects every batch below this offset

    # ------------------------------------------------------------------ state

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def prepare_update(self, producer_id: int, *, validate: bool) -> ProducerAppendInfo:
        return ProducerAppendInfo(producer_id, self.producers.get(producer_id), validate=validate)

    def update(self, info: ProducerAppendInfo) -> None:
        self.producers[info.producer_id] = info.updated
        first = info.updated.current_txn_first_offset
        if first is None:
            self._ongoing.pop(info.producer_id, None)
        else:
            self._ongoing[info.producer_id] = first

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    def first_unstable_offset(self) -> int | None:
        """Smallest first offset of any ongoing transaction (for the last stable offset)."""
        return min(self._ongoing.values()) if self._ongoing else None

    def replay(self, headers: Iterable[BatchHeader], coordinator_epoch: int = -1) -> None:
        """Rebuild state from batches already in the log (headers only, no validation);
        ``coordinator_epoch``: what a marker among them carries, when the caller decoded it."""
        for h in headers:
            if h.producer_id >= 0:
                info = self.prepare_update(h.producer_id, validate=False)
                if h.is_control:
                    info.append_control_batch(h, h.base_offset, h.max_timestamp, coordinator_epoch)
                else:
                    info.append_data_batch(h, h.base_offset, h.last_offset, h.max_timestamp)
                self.update(info)
            self.map_end_offset = h.next_offset

    # ------------------------------------------------------------------ snapshots

    def snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def list_snapshots(self) -> list[int]:
        out = []
        for p in self.directory.glob("*" + SNAPSHOT_SUFFIX):
            stem = p.name[: -len(SNAPSHOT_SUFFIX)]
            if stem.isdigit():
                out.append(int(stem))
        return sorted(out)

    def take_snapshot(self, sync: bool = True) -> Path:
        """Write the state as of ``map_end_offset`` (atomically: temp file, fsync unless not
        ``sync``, rename)."""
        body = json.dumps(
            {
                "map_end_offset": self.map_end_offset,
                "producers": [e.to_json() for e in self.producers.values()],
            },
            separators=(",", ":"),
        ).encode()
        data = _SNAPSHOT_HEADER.pack(_SNAPSHOT_VERSION, crc32c(body)) + body
        path = self.snapshot_path(self.map_end_offset)
        replace_file(path, data, sync_dir=False, sync=sync)
        return path

    def _read_snapshot(self, offset: int) -> dict[int, ProducerStateEntry] | None:
        try:
            data = self.snapshot_path(offset).read_bytes()
        except OSError:
            return None
        if len(data) < _SNAPSHOT_HEADER.size:
            return None
        version, crc = _SNAPSHOT_HEADER.unpack_from(data)
        body = data[_SNAPSHOT_HEADER.size :]
        if version != _SNAPSHOT_VERSION or crc32c(body) != crc:
            return None
        try:
            obj = json.loads(body)
            if int(obj["map_end_offset"]) != offset:
                return None
            entries = [ProducerStateEntry.from_json(e) for e in obj["producers"]]
        except (ValueError, KeyError, TypeError):
            return None
        return {e.producer_id: e for e in entries}

    def delete_snapshots_after(self, offset: int) -> None:
        """Delete snapshots for offsets > ``offset`` (they describe data no longer in the log)."""
        for snap in self.list_snapshots():
            if snap > offset:
                self.snapshot_path(snap).unlink(missing_ok=True)

    def delete_snapshots_before(self, offset: int) -> None:
        for snap in self.list_snapshots():
            if snap < offset:
                self.snapshot_path(snap).unlink(missing_ok=True)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget every producer and delete every snapshot (Kafka's ``truncateFullyAndStartAt``);
        the caller fsyncs the directory."""
        for snap in self.list_snapshots():
            self.snapshot_path(snap).unlink(missing_ok=True)
        self.producers.clear()
        self._ongoing.clear()
        self.map_end_offset = offset

    def load(self, log_start_offset: int, log_end_offset: int) -> int:
        """Load the newest usable snapshot in ``[log_start_offset, log_end_offset]`` and return the
        offset from which the log must be replayed (the snapshot offset, or the log start).
        Snapshots outside the range and corrupt ones are deleted."""
        for tmp in self.directory.glob("*" + SNAPSHOT_SUFFIX + ".tmp"):
            tmp.unlink(missing_ok=True)
        self.delete_snapshots_after(log_end_offset)
        self.producers.clear()
        self._ongoing.clear()
        for snap in reversed(self.list_snapshots()):
            if snap < log_start_offset:
                break
            state = self._read_snapshot(snap)
            if state is None:
                self.snapshot_path(snap).unlink(missing_ok=True)
                continue
            self.producers = state
            self._ongoing = {
                pid: e.current_txn_first_offset
                for pid, e in state.items()
                if e.current_txn_first_offset is not None
            }
            self.map_end_offset = snap
            return snap
        self.map_end_offset = log_start_offset
        return log_start_offset
