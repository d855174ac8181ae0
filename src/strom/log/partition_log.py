"""One partition's log: offsets, high watermark, log start offset, idempotence (Kafka's UnifiedLog).

Theory of operation
-------------------
``append_as_leader`` takes the record batches of a Produce request as opaque bytes. Per batch it
does header-only work: framing (``iter_batches``), size and count checks, CRC32C, the producer
state check, then patches the base offset and leader epoch in a private copy (and, for
``LogAppendTime`` topics, the timestamps plus CRC). Records are never decoded on this path.

Offsets: ``log_start_offset <= high_watermark <= log_end_offset``. The log end offset (LEO) moves
on append; the high watermark only when the caller says so (:meth:`update_high_watermark`), since
it depends on replication. Reads for consumers pass ``max_offset=high_watermark``.

Files in the partition directory, besides the segments and producer snapshots:

* ``recovery-point-offset-checkpoint`` — offset below which data is fsynced (written on roll and
  close; a stale value only makes recovery do more work).
* ``log-start-offset-checkpoint`` and ``replication-offset-checkpoint`` (the high watermark).
  All three use Kafka's checkpoint text format: ``0`` / ``1`` / ``<topic> <partition> <offset>``.
* ``.clean-shutdown`` — written by :meth:`close` after everything is fsynced and removed by
  :meth:`open`; without it, ``open`` recovers the log from the recovery point and rebuilds the
  producer state from the newest snapshot by scanning batch headers.
* ``leader-epoch-checkpoint`` — the leader epoch cache (:mod:`strom.log.leader_epoch`).

Leader epochs
-------------
``append_as_leader`` assigns ``(leader_epoch, first offset)`` when the epoch is new,
``append_as_follower`` the ``partitionLeaderEpoch`` of each batch (Kafka's ``assign``); retention
and DeleteRecords truncate the cache from the start, truncation from the end. The file is written
with the other checkpoints, *before* them (:meth:`_write_checkpoints`: on roll, close, retention,
truncation), so it is right for every offset below the recovery point on disk. At open it is
trusted below the first segment recovery re-reads (all of it after a clean shutdown) and the rest
is rebuilt from batch headers — all of it if the file is missing or damaged; entries at or past
the log end are dropped and the one holding the log start starts there. So the cache never claims
an epoch for offsets the log does not hold. The leader's early entry for a new epoch
(:meth:`assign_epoch_start_offset`) lives in memory until the next checkpoint.

Replication
-----------
``append_as_follower`` keeps the leader's offsets, epochs and timestamps; it walks headers only
(framing, contiguity, CRC32C), so it costs about what a leader append of uncompressed batches
does. ``truncate_to`` / ``truncate_fully_and_start_at`` are Kafka's ``truncateTo`` /
``truncateFullyAndStartAt``. Truncation is durable when it returns: (1) the lowered recovery point
(and the epoch file) are checkpointed before anything changes, so a crash from then on recovers
the cut segment and re-reads its epochs; (2) later segments, producer snapshots past the cut and
the ``.txnindex`` files of removed segments are deleted and the cut segment's ``.txnindex``
rewritten atomically; (3) the directory is fsynced — a deleted segment could otherwise come back
after a crash, beyond a cut segment that meanwhile got new batches over its offsets — and then the
cut segment; (4) producer state is reloaded from the newest snapshot at or below the new end and
the batches after it replayed, the epoch cache, high watermark and log start offset lowered to the
new end, and checkpoints written. A crash during a truncation leaves a prefix of the old log.
The high watermark moves back only there: :meth:`update_high_watermark` ignores lower values.

Retention (:meth:`delete_old_segments`, Kafka's deleteOldSegments): whole closed segments,
oldest first, never the active one and never one holding offsets at or above the high
watermark; a segment goes when (policy ``delete``) its largest timestamp is older than
``retention.ms``, or the log is larger than ``retention.bytes`` by at least the segment's size,
or (any policy) the whole segment lies below the log start offset (DeleteRecords,
:meth:`delete_records`). The log start offset then moves to the new first segment's base, is
checkpointed at once (written, not fsynced: a crash may bring a removed segment back, which the
next pass removes again; DeleteRecords itself checkpoints durably), and producer snapshots below
the first segment are removed.

Rolls (:meth:`_roll`): with a deferred roll flush installed (:func:`set_roll_flusher`, the
broker's :mod:`strom.server.roll_flusher`), a roll creates the new segment and leaves the fsync
of the closed one, its indexes, the producer snapshot and the directory to another thread, as
Kafka's roll leaves them to its flush-log task; the recovery point moves when that is done
(:meth:`finish_roll_flush`). Without one (tools, tests) a roll fsyncs inline.

Threads and the lock
--------------------
Everything runs on the event-loop thread except the log cleaner (a worker thread). ``lock``
(an ``RLock``) guards the segment *list*, the ``.txnindex`` map and ``log_start_offset``: the
event loop holds it for append (which may roll), read, flush, retention, DeleteRecords, aborted
transaction lookups and close; the cleaner holds it only to take its snapshot of the segments to
clean (:meth:`cleanable_segments`, which dups their descriptors) and for the swap
(:meth:`replace_segments`: three renames and fsyncs). The cleaner reads closed segments through
its own descriptors without the lock: a closed segment's bytes never change, and one removed
meanwhile stays readable through the dup'd descriptor. The roll flusher's thread finishes a roll
flush (:meth:`finish_roll_flush`): it moves the recovery point under ``lock`` and then writes
the checkpoint files without it. Those writers (that thread and the event loop) are serialised
by a second lock, taken only by :meth:`_write_checkpoints`, never with ``lock`` taken inside it.

Segments taken out of the log (retention, DeleteRecords, a swap) are renamed to ``*.deleted`` at
once, but closed and unlinked only by :meth:`delete_expired_segments` after
``file.delete.delay.ms``, never inside the call that removed them. The descriptors of a
:class:`FileRegion` are duplicates owned by the reader (segment descriptors come and go with the
file cache, :mod:`strom.log.file_cache`): they keep a renamed or unlinked file readable and must be
closed by whoever consumes them (a fetch response once written, :meth:`FetchData.close`).

Records (Kafka's LogValidator, :meth:`check_batches`): uncompressed batches of a topic that is not
compacted only have their record length chain followed (cheap slice comparisons); compressed
batches and compacted topics are walked record by record in bounded memory — decompressed as a
stream — to reject bad structure, wrong offset deltas and, when compacted, null keys
(INVALID_RECORD, 87). The broker runs that walk in a worker thread before the append.

Error contract: ``append_as_leader`` and ``check_batches`` raise CorruptRecordError (2) /
InvalidRecordError (87; its RecordValidationError carries Kafka's per-record ``record_errors``),
MessageTooLargeError (10), RecordListTooLargeError (18), InvalidProducerEpochError (47),
OutOfOrderSequenceError (45) with nothing appended; ``append_as_follower`` raises
UnexpectedAppendOffsetError, OffsetsOutOfOrderError and CorruptReplicaRecordsError (2) with
nothing appended; ``read`` raises OffsetOutOfRangeError (1); ``OSError`` is wrapped in
KafkaStorageError (56).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from strom.clock import Clock
from strom.config import LogConfig
from strom.durable_file import fsync_dir, replace_file
from strom.log.errors import (
    CorruptReplicaRecordsError,
    InvalidRecordError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    PolicyViolationError,
    RecordListTooLargeError,
    UnexpectedAppendOffsetError,
)
from strom.log.faults import crash_point
from strom.log.file_cache import CachedFile, note_fd_exhaustion
from strom.log.leader_epoch import LeaderEpochFileCache
from strom.log.local_log import EMPTY_FETCH, FetchData, FileRegion, LocalLog
from strom.log.producer_state import ProducerAppendInfo, ProducerStateManager
from strom.log.segment import LogSegment, filename_prefix
from strom.log.transaction_index import AbortedTxn, TransactionIndex
from strom.protocol.batch_validation import any_compressed, check_record_chain, validate_batch_records
from strom.protocol.records import (
    BATCH_OVERHEAD,
    CONTROL_ABORT,
    BatchHeader,
    CorruptRecordError,
    control_marker,
    iter_batches,
    parse_header,
    patch_base_offset,
    patch_leader_epoch,
    set_log_append_time,
    verify_crc,
)

__all__ = [
    "AppendInfo", "FetchData", "FileRegion", "FlushPlan", "PartitionLog", "RollFlush", "RollFlusher",
    "SegmentInfo", "flush_roll_inline", "partition_dir", "set_roll_flusher", "sync_flush_plan",
]

log_recovery = logging.getLogger("strom.log.recovery")

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".clean-shutdown"


def partition_dir(log_dir: Path, topic: str, partition: int) -> Path:
    """Kafka's layout: ``<log.dir>/<topic>-<partition>``."""
    return log_dir / f"{topic}-{partition}"


@dataclass(frozen=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    duplicate: bool = False


@dataclass(frozen=True)
class SegmentInfo:
    base_offset: int
    size: int
    path: Path


_CHECKPOINT_FILES = (RECOVERY_POINT_FILE, LOG_START_FILE, HIGH_WATERMARK_FILE)


def _write_checkpoint(path: Path, topic: str, partition: int, offset: int, sync: bool = True) -> None:
    replace_file(path, f"0\n1\n{topic} {partition} {offset}\n".encode(), sync_dir=False, sync=sync)


def _read_checkpoint(path: Path) -> int | None:
    try:
        lines = path.read_text().split("\n")
        if lines[0].strip() != "0" or int(lines[1]) < 1:
            return None
        return int(lines[2].split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def _load_epochs(directory: Path, local: LocalLog, clean: bool, recovery_point: int, log_start: int
                 ) -> LeaderEpochFileCache:
    """The leader epoch cache at open: the checkpoint file is trusted below the first segment
    that recovery re-read (all of it after a clean shutdown); from there on, and wholly if the
    file is missing or not valid, the cache is rebuilt from batch headers. Entries then lie in
    ``[log start, log end)``."""
    saved = LeaderEpochFileCache.read_file(directory)
    segs = local.segments
    leo = local.log_end_offset
    if saved is None:
        trusted_below = segs[0].base_offset
    elif clean:
        trusted_below = leo
    else:
        trusted_below = segs[local.segment_index_for(min(recovery_point, leo))].base_offset
    epochs = LeaderEpochFileCache(directory, [e for e in saved or [] if e[1] < trusted_below])
    if trusted_below < leo:
        for seg in segs[local.segment_index_for(trusted_below):]:
            for _, h in seg.iter_headers():
                if h.last_offset >= trusted_below:
                    epochs.assign(h.partition_leader_epoch, h.base_offset)
    epochs.truncate_from_start(log_start)
    epochs.truncate_from_end(leo)
    epochs.mark_written(saved)
    return epochs


def _writable_bytes(records: bytes | bytearray | memoryview) -> TypeGuard[memoryview]:
    """A writable view of plain bytes, which offsets can be patched into in place."""
    return (isinstance(records, memoryview) and not records.readonly and records.c_contiguous
            and records.itemsize == 1)


def _complete_batches(data: bytes | bytearray | memoryview) -> list[tuple[int, BatchHeader]]:
    """``(position, header)`` of the whole batches at the start of ``data``; a trailing partial
    batch (a fetch response cut at its size limit) is left out. Bad framing raises
    CorruptReplicaRecordsError."""
    out: list[tuple[int, BatchHeader]] = []
    pos = 0
    end = len(data)
    while end - pos >= BATCH_OVERHEAD:
        h = parse_header(data, pos)
        if h.magic != 2 or h.size < BATCH_OVERHEAD or h.last_offset_delta < 0 or h.records_count < 0:
            raise CorruptReplicaRecordsError(f"invalid record batch header at position {pos}")
        if pos + h.size > end:
            break
        out.append((pos, h))
        pos += h.size
    return out


class PartitionLog:
    """The log of one topic-partition. Called from the event loop; only the cleaner thread may
    call :meth:`cleanable_segments` / :meth:`replace_segments` concurrently (see the lock rules)."""

    def __init__(self, directory: Path, topic: str, partition: int, config: LogConfig, clock: Clock,
                 local: LocalLog, producer_state: ProducerStateManager, log_start_offset: int,
                 high_watermark: int, epochs: LeaderEpochFileCache | None = None) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self._local = local
        self.producer_state = producer_state
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark
        self.closed = False
        self.lock = threading.RLock()
        # serialises the checkpoint files' writers: the event loop, and the roll flusher's thread
        # that checkpoints a finished roll flush (see "Threads and the lock")
        self._ckpt_lock = threading.Lock()
        # segments removed from the log, renamed *.deleted, closed and unlinked when due
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._clean_marker = False  # the .clean-shutdown file still stands (nothing changed yet)
        self._marker_due = False  # closed with sync=False: mark_clean_shutdown writes the marker
        # the values the checkpoint files hold (None: unknown, write them)
        self._checkpointed: list[int | None] = [None, None, None]
        # aborted transactions, one ``.txnindex`` per segment (by segment base offset)
        self._txn_indexes: dict[int, TransactionIndex] = {}
        # leader epoch -> first offset (``leader-epoch-checkpoint``; see "Leader epochs" above)
        self._epochs = epochs if epochs is not None else LeaderEpochFileCache(directory)

    # ------------------------------------------------------------------ open / recovery

    @classmethod
    def open(cls, directory: Path, topic: str, partition: int, config: LogConfig, clock: Clock
             ) -> PartitionLog:
        """Open the partition log in ``directory`` (the partition's own directory, see
        :func:`partition_dir`), creating it if needed; recovers after an unclean shutdown."""
        try:
            return cls._open(Path(directory), topic, partition, config, clock)
        except OSError as e:
            raise KafkaStorageError(f"cannot open log {topic}-{partition} in {directory}: {e}") from e

    @classmethod
    def _open(cls, directory: Path, topic: str, partition: int, config: LogConfig, clock: Clock
              ) -> PartitionLog:
        new = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        if new:
            # Kafka's LogManager.createLogDirectory: the new directory's name is durable only
            # once its parent is fsynced; without it a power cut can lose the whole partition
            fsync_dir(directory.parent)
        marker = directory / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_point = _read_checkpoint(directory / RECOVERY_POINT_FILE) or 0
        log_start = _read_checkpoint(directory / LOG_START_FILE) or 0
        local = LocalLog.load(directory, config, clock, recovery_point=recovery_point,
                              clean_shutdown=clean, log_start_offset=log_start)
        leo = local.log_end_offset
        log_start = min(max(log_start, local.segments[0].base_offset), leo)
        psm = ProducerStateManager(directory)
        replay_from = psm.load(log_start, leo)
        hw = _read_checkpoint(directory / HIGH_WATERMARK_FILE)
        hw = log_start if hw is None else min(max(hw, log_start), leo)
        epochs = _load_epochs(directory, local, clean, recovery_point, log_start)
        if local.recovered_bytes:
            # Kafka logs "Recovering unflushed segment": what an unclean shutdown costs at start
            log_recovery.info(
                "%s-%d: recovered %d segment(s), %d bytes from offset %d after an unclean shutdown "
                "(recovery point %d; %d segment(s) before it trusted)", topic, partition,
                local.recovered_segments, local.recovered_bytes, local.recovered_from, recovery_point,
                sum(1 for seg in local.segments if seg.base_offset < local.recovered_from))
        log = cls(directory, topic, partition, config, clock, local, psm, log_start, hw, epochs)
        if new:  # no checkpoint files: they read as 0, which a new log's offsets are
            log._checkpointed = [0, 0, 0]
        log._load_txn_indexes(replay_from)
        if replay_from < leo:
            log._replay_producers(replay_from)
        psm.update_map_end_offset(leo)
        if clean:
            # Keep the marker until the first change (:meth:`_mark_dirty`): a log that is only
            # read is still clean, and closing it again costs no fsync.
            log._clean_marker = True
            # a missing or damaged epoch file was rebuilt: write it now (a close that changed
            # nothing writes nothing), so the next open need not walk the log again
            log._epochs.write()
        else:
            log._write_checkpoints()
        return log

    def _mark_dirty(self) -> None:
        """Before the first change after a clean open: remove the clean-shutdown marker (durably),
        so a crash from now on makes the next open recover."""
        if self._clean_marker:
            (self.directory / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
            fsync_dir(self.directory)
            self._clean_marker = False

    # ------------------------------------------------------------------ transactions

    def _txn_index(self, base_offset: int) -> TransactionIndex:
        idx = self._txn_indexes.get(base_offset)
        if idx is None:
            path = self.directory / f"{filename_prefix(base_offset)}.txnindex"
            idx = self._txn_indexes[base_offset] = TransactionIndex(path)
        return idx

    def _load_txn_indexes(self, rebuild_from: int) -> None:
        """Open the ``.txnindex`` of every segment; entries for markers at or after
        ``rebuild_from`` are dropped (the producer-state replay re-creates them)."""
        bases = {s.base_offset for s in self._local.segments}
        for path in self.directory.glob("*.txnindex"):
            try:
                base = int(path.name.split(".")[0])
            except ValueError:
                continue
            if base not in bases:
                path.unlink()  # orphan of a deleted segment
                continue
            self._txn_index(base).truncate_to(rebuild_from)

    def _replay_producers(self, start_offset: int, note_markers: bool = True) -> None:
        """Rebuild producer state (and, with ``note_markers``, aborted-transaction entries) from
        batch headers; only a control batch's single record is decoded, for its commit/abort
        type and the coordinator epoch it carries (the producer's, as Kafka's recovery keeps)."""
        local = self._local
        psm = self.producer_state
        for seg in local.segments[local.segment_index_for(start_offset):]:
            found = seg.translate_offset(start_offset)
            if found is None:
                continue
            for pos, h in seg.iter_headers(found[0]):
                # (a control batch without records: a marker emptied by the cleaner)
                if not (h.is_control and h.producer_id >= 0 and h.records_count):
                    psm.replay([h])
                    continue
                ctype, coordinator_epoch = control_marker(seg.read_batch(pos, h), 0, h)
                entry = psm.last_entry(h.producer_id)
                first = entry.current_txn_first_offset if entry is not None else None
                if note_markers and first is not None and ctype == CONTROL_ABORT:
                    aborted = AbortedTxn(h.producer_id, first, h.base_offset, first)
                    self._txn_index(seg.base_offset).append(aborted)
                psm.replay([h], coordinator_epoch)

    @property
    def last_stable_offset(self) -> int:
        """The high watermark, or the first offset of the oldest ongoing transaction if lower."""
        first = self.producer_state.first_unstable_offset()
        return self.high_watermark if first is None else min(first, self.high_watermark)

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound)`` (read_committed fetch)."""
        with self.lock:  # the cleaner thread merges .txnindex files when it swaps segments
            return self._collect_aborted(fetch_offset, upper_bound)

    def _collect_aborted(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        first_base = self._local.segments[0].base_offset
        out: list[AbortedTxn] = []
        for base in sorted(self._txn_indexes):
            if base < first_base and base not in {s.base_offset for s in self._local.segments}:
                self._txn_indexes.pop(base).delete()  # its segment is gone
                continue
            out.extend(self._txn_indexes[base].collect(fetch_offset, upper_bound))
        return out

    def describe_producers(self) -> list[dict[str, int]]:
        """Active producers (DescribeProducers)."""
        out = []
        for pid, e in sorted(self.producer_state.producers.items()):
            out.append({
                "producer_id": pid,
                "producer_epoch": e.producer_epoch,
                "last_sequence": e.last_seq,
                "last_timestamp": e.last_timestamp,
                "coordinator_epoch": e.coordinator_epoch,
                "current_txn_start_offset": (
                    -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
                ),
            })
        return out

    # ------------------------------------------------------------------ properties

    @property
    def log_end_offset(self) -> int:
        return self._local.log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

    @property
    def recovered_segments(self) -> int:
        """Segments the open re-validated batch by batch (after an unclean shutdown: those from
        the one holding the recovery point on); 0 after a clean one."""
        return self._local.recovered_segments

    @property
    def recovered_bytes(self) -> int:
        """Bytes of log the open re-validated (see :attr:`recovered_segments`)."""
        return self._local.recovered_bytes

    @property
    def size_bytes(self) -> int:
        return self._local.size_bytes

    @property
    def segments(self) -> list[SegmentInfo]:
        return [SegmentInfo(s.base_offset, s.size, s.log_path) for s in self._local.segments]

    @property
    def segment_count(self) -> int:
        return len(self._local.segments)

    @property
    def log_segments(self) -> list[LogSegment]:
        """The segment objects themselves (for the cleaner and tests); do not mutate."""
        return list(self._local.segments)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        self._local.config = config
        for seg in self._local.segments:
            seg.index_interval_bytes = config.index_interval_bytes

    def update_high_watermark(self, offset: int) -> None:
        """Move the high watermark up to ``offset``, clamped to ``[log_start_offset,
        log_end_offset]``; a lower value is ignored (Kafka's ``maybeUpdateHighWatermark``: the
        high watermark goes back only on truncation, :meth:`truncate_to`)."""
        hw = min(max(offset, self.log_start_offset), self.log_end_offset)
        if hw > self.high_watermark:
            self.high_watermark = hw

    # ------------------------------------------------------------------ leader epochs

    @property
    def latest_epoch(self) -> int | None:
        """The latest leader epoch in the cache (None: empty)."""
        return self._epochs.latest_epoch

    @property
    def epoch_entries(self) -> list[tuple[int, int]]:
        """The leader epoch cache: ``[(epoch, start offset)]``, both strictly increasing."""
        return list(self._epochs.entries)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end offset)`` as Kafka's ``LeaderEpochFileCache.endOffsetFor``
        answers (see :meth:`strom.log.leader_epoch.LeaderEpochCache.end_offset_for`); ``(-1, -1)``
        (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) when the cache cannot say."""
        return self._epochs.end_offset_for(epoch, self.log_end_offset)

    def epoch_for_offset(self, offset: int) -> int | None:
        """The leader epoch the record at ``offset`` was written in (ListOffsets answers it)."""
        return self._epochs.epoch_for_offset(offset)

    def assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> None:
        """Kafka's ``maybeAssignEpochStartOffset``: a replica becoming leader records that
        ``leader_epoch`` starts at ``start_offset`` (its log end offset) before anything is
        appended in it, so :meth:`end_offset_for_epoch` answers for the previous epochs at once.
        Not written to the file until the next checkpoint; an open drops an entry at the log end."""
        self._check_open()
        if start_offset > self.log_end_offset:
            raise ValueError(f"epoch start {start_offset} is past the log end {self.log_end_offset}")
        self._epochs.assign(leader_epoch, start_offset)

    # ------------------------------------------------------------------ append

    def needs_record_walk(self, records: bytes | bytearray | memoryview) -> bool:
        """Whether validating ``records`` walks them record by record (a compacted topic, or a
        compressed batch): the broker then runs :meth:`check_batches` in a worker thread first.
        Header fields only, cheaper than a header parse: this is on the hot path."""
        return self.config.compact_enabled or any_compressed(records)

    def check_batches(
        self, records: bytes | bytearray | memoryview, *, from_coordinator: bool = False
    ) -> list[tuple[int, BatchHeader]]:
        """Every check of an append that needs no log state, in Kafka's order: framing and
        magic, size against ``max.message.bytes``, CRC32C, record count against the offset range,
        no control batch from a client, then the records (Kafka's LogValidator): uncompressed
        batches of a topic that is not compacted have their record length chain checked, the
        others every record walked in bounded memory (:mod:`strom.protocol.batch_validation`).

        Reads only the config, so any thread may call it (the broker calls it in a worker thread
        when :meth:`needs_record_walk`). Returns ``(position, header)`` per batch."""
        config = self.config
        total = len(records)
        if total == 0:
            raise InvalidRecordError("produce request carries no record batch")
        if total > config.segment_bytes:
            raise RecordListTooLargeError(
                f"append of {total} bytes is larger than segment.bytes {config.segment_bytes}"
            )
        batches = list(iter_batches(records))  # CorruptRecordError on bad framing / magic
        max_size = config.max_message_bytes
        compacted = config.compact_enabled
        for pos, h in batches:
            if h.size > max_size:
                raise MessageTooLargeError(
                    f"record batch of {h.size} bytes is larger than max.message.bytes {max_size}"
                )
            verify_crc(records, pos, h)
            if h.records_count <= 0 or h.last_offset_delta != h.records_count - 1:
                raise InvalidRecordError(
                    f"record batch at position {pos} has {h.records_count} records but last offset "
                    f"delta {h.last_offset_delta}"
                )
            if h.is_control and not from_coordinator:
                # Kafka's LogValidator: clients may not write transaction markers
                raise InvalidRecordError("control batches are written by the transaction coordinator only")
            if h.compression or (compacted and not h.is_control):
                validate_batch_records(records, pos, h, compacted=compacted and not h.is_control)
            else:
                check_record_chain(records, pos, h)
        return batches

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        *,
        from_coordinator: bool = False,
        prevalidated: bool = False,
    ) -> AppendInfo:
        """Validate (:meth:`check_batches`, unless the caller did with these very bytes:
        ``prevalidated``), assign offsets to and append the batches of one Produce request.

        Returns the offsets assigned, or — for a retried idempotent batch already in the log —
        the offsets it got the first time (``duplicate=True``, nothing appended).
        """
        self._check_open()
        config = self.config
        # offsets and epochs are patched into the request's own buffer when it is writable (a
        # large Produce frame: strom.protocol.produce_request leaves its records a view of it);
        # else into a copy
        data: bytearray | memoryview = records if _writable_bytes(records) else bytearray(records)
        total = len(data)
        if prevalidated:
            batches = list(iter_batches(data))
        else:
            batches = self.check_batches(data, from_coordinator=from_coordinator)

        log_append_time = config.message_timestamp_type == "LogAppendTime"
        now = self.clock.time_ms()
        psm = self.producer_state
        infos: dict[int, ProducerAppendInfo] = {}
        placed: list[tuple[int, BatchHeader]] = []
        aborted: list[AbortedTxn] = []
        next_offset = self.log_end_offset
        max_ts = -1
        offset_of_max_ts = next_offset
        for pos, h in batches:
            first = next_offset
            last = first + h.last_offset_delta
            ts = now if log_append_time else h.max_timestamp
            pid = h.producer_id
            if pid >= 0:
                entry = psm.last_entry(pid)
                # a retried client batch is answered with its first offsets (Kafka looks for
                # duplicates only for AppendOrigin.CLIENT): the coordinators' transactional
                # offset commits carry no sequence (-1), so each would match the last one
                if entry is not None and not h.is_control and not from_coordinator:
                    dup = entry.find_duplicate(h)
                    if dup is not None:
                        return AppendInfo(
                            dup.first_offset, dup.last_offset, dup.timestamp if log_append_time else -1,
                            self.log_start_offset, dup.last_offset - dup.first_offset + 1, duplicate=True,
                        )
                info = infos.get(pid)
                if info is None:
                    # the coordinators' own appends (markers, transactional offsets) skip sequence checks
                    info = infos[pid] = psm.prepare_update(pid, validate=not from_coordinator)
                if h.is_control:
                    txn_first = info.updated.current_txn_first_offset
                    ctype, coordinator_epoch = control_marker(data, pos, h)
                    info.append_control_batch(h, first, ts, coordinator_epoch, fence=from_coordinator)
                    if txn_first is not None and ctype == CONTROL_ABORT:
                        aborted.append(AbortedTxn(pid, txn_first, first, txn_first))
                else:
                    info.append_data_batch(h, first, last, ts)
            if ts > max_ts:
                max_ts, offset_of_max_ts = ts, first
            if log_append_time:
                placed.append((pos, h._replace(base_offset=first, partition_leader_epoch=leader_epoch,
                                               base_timestamp=now, max_timestamp=now,
                                               attributes=h.attributes | 0x08)))
            else:
                placed.append((pos, h._replace(base_offset=first, partition_leader_epoch=leader_epoch)))
            next_offset = last + 1

        for pos, h in placed:
            patch_base_offset(data, pos, h.base_offset)
            patch_leader_epoch(data, pos, leader_epoch)
            if log_append_time:
                set_log_append_time(data, pos, now)

        first_offset = placed[0][1].base_offset
        last_offset = next_offset - 1
        local = self._local
        with self.lock:
            try:
                self._mark_dirty()
                if local.should_roll(total, max_ts, last_offset, now):
                    self._roll()
                local.append(data, placed, last_offset, max_ts, offset_of_max_ts)
            except OSError as e:
                self._undo_partial_append()
                note_fd_exhaustion(e, f"append to {self.topic}-{self.partition}")
                raise KafkaStorageError(f"append to {self.topic}-{self.partition} failed: {e}") from e
            self._epochs.assign(leader_epoch, first_offset)  # Kafka's assign: only a new epoch adds
            try:
                for txn in aborted:
                    self._txn_index(local.segments[-1].base_offset).append(txn)
            except OSError as e:
                raise KafkaStorageError(f"append to {self.topic}-{self.partition} failed: {e}") from e
        for info in infos.values():
            psm.update(info)
        psm.update_map_end_offset(next_offset)
        if next_offset - local.recovery_point >= config.flush_messages:
            self.flush()
        return AppendInfo(
            first_offset, last_offset, now if log_append_time else -1, self.log_start_offset,
            last_offset - first_offset + 1, duplicate=False,
        )

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> int:
        """Append batches replicated from the leader (Kafka's ``appendAsFollower``), or copied
        from the current log by a future log (AlterReplicaLogDirs): offsets, leader epochs and
        timestamps are kept. Header walk only, records are never decoded (but for the single
        record of a transaction marker): per batch framing and CRC32C; producer state, the
        aborted-transaction index and the leader epoch cache (each batch's
        ``partitionLeaderEpoch``, Kafka's ``assign``) are updated from the headers.

        A trailing partial batch (a fetch response ends mid-batch) is ignored: only the whole
        batches are appended. Returns the new log end offset.

        Refused with nothing appended:

        * the first batch does not start at the log end offset: UnexpectedAppendOffsetError —
          except that an empty log (log end == log start) whose log end offset falls inside the
          first batch restarts at that batch's base offset (Kafka's
          ``Partition.appendRecordsToFollowerOrFutureReplica``: the leader's log start lies
          inside a batch); and that a compacted log accepts a first batch after its end (the
          cleaner leaves gaps between batches);
        * a batch that does not start at the end of the one before: OffsetsOutOfOrderError (a
          compacted log only requires increasing offsets);
        * bad framing or a CRC32C mismatch: CorruptReplicaRecordsError.

        ``OSError`` is wrapped in KafkaStorageError."""
        self._check_open()
        batches = _complete_batches(records)
        if not batches:
            return self.log_end_offset
        gaps_allowed = self.config.compact_enabled
        leo = self.log_end_offset
        first = batches[0][1]
        restart_at: int | None = None
        psm = self.producer_state
        if first.base_offset != leo:
            if first.base_offset < leo <= first.last_offset and leo == self.log_start_offset:
                restart_at = first.base_offset  # (after the checks below)
            elif not (gaps_allowed and first.base_offset > leo):
                raise UnexpectedAppendOffsetError(
                    f"unexpected offset in append to {self.topic}-{self.partition}: the first batch "
                    f"holds offsets {first.base_offset}..{first.last_offset}, the log end offset is {leo}",
                    first.base_offset, first.last_offset,
                )
        infos: dict[int, ProducerAppendInfo] = {}
        aborted: list[AbortedTxn] = []
        max_ts, offset_of_max_ts = -1, first.base_offset
        expected = first.base_offset
        for pos, h in batches:
            if h.base_offset != expected and not (gaps_allowed and h.base_offset > expected):
                raise OffsetsOutOfOrderError(
                    f"out of order offsets in append to {self.topic}-{self.partition}: batch at "
                    f"offset {h.base_offset} after offset {expected - 1}"
                )
            try:
                verify_crc(records, pos, h)
            except CorruptRecordError as e:
                raise CorruptReplicaRecordsError(
                    f"record batch at offset {h.base_offset} of an append to {self.topic}-{self.partition} "
                    "failed its CRC32C check"
                ) from e
            expected = h.next_offset
            if h.producer_id >= 0:
                info = infos.get(h.producer_id)
                if info is None:
                    info = infos[h.producer_id] = psm.prepare_update(h.producer_id, validate=False)
                if h.is_control:
                    txn_first = info.updated.current_txn_first_offset
                    ctype, coordinator_epoch = (-1, -1)
                    if h.records_count:
                        ctype, coordinator_epoch = control_marker(records, pos, h)
                    if txn_first is not None and ctype == CONTROL_ABORT:
                        aborted.append(AbortedTxn(h.producer_id, txn_first, h.base_offset, txn_first))
                    info.append_control_batch(h, h.base_offset, h.max_timestamp, coordinator_epoch)
                else:
                    info.append_data_batch(h, h.base_offset, h.last_offset, h.max_timestamp)
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max_ts = h.max_timestamp, h.base_offset
        if restart_at is not None:  # all checked: start again at the batch's base (rare)
            self.truncate_fully_and_start_at(restart_at)
            return self.append_as_follower(records)
        last_offset = batches[-1][1].last_offset
        end = batches[-1][0] + batches[-1][1].size
        data = memoryview(records)[:end] if end != len(records) else records
        local = self._local
        with self.lock:
            try:
                self._mark_dirty()
                if local.should_roll(end, max_ts, last_offset, self.clock.time_ms()):
                    self._roll()
                local.append(data, batches, last_offset, max_ts, offset_of_max_ts)
                for _, h in batches:
                    self._epochs.assign(h.partition_leader_epoch, h.base_offset)
                for txn in aborted:
                    self._txn_index(local.segments[-1].base_offset).append(txn)
            except OSError as e:
                self._undo_partial_append()
                raise KafkaStorageError(f"append to {self.topic}-{self.partition} failed: {e}") from e
        for info in infos.values():
            psm.update(info)
        psm.update_map_end_offset(last_offset + 1)
        if last_offset + 1 - local.recovery_point >= self.config.flush_messages:
            self.flush()  # flush.messages holds for replicas too (Kafka's UnifiedLog.append)
        return last_offset + 1

    # ------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> bool:
        """Kafka's ``truncateTo``: remove every batch holding an offset >= ``offset`` (whole
        batches: one that holds ``offset`` goes, so the new log end offset may be below it).
        Segments after it are deleted and the one holding it cut (offset and time indexes with
        it), aborted-transaction entries of removed markers dropped, producer state rebuilt from
        the newest snapshot at or below the new end, the epoch cache truncated to the new end
        (``truncateFromEnd``), the high watermark, recovery point and log start offset lowered
        to it if above. Returns whether anything was removed.

        ``offset`` at or past the log end: only epoch entries at or after the log end are
        dropped (Kafka: an epoch assigned by a leader that appended nothing). Below the first
        segment: :meth:`truncate_fully_and_start_at`.

        Durable when it returns (see "Truncation" in the module docstring): a crash afterwards
        never brings a removed record back; a crash during it leaves a prefix of the old log.
        ``OSError`` is wrapped in KafkaStorageError."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate {self.topic}-{self.partition} to a negative offset {offset}")
        with self.lock:
            try:
                return self._truncate_to(offset)
            except OSError as e:
                raise KafkaStorageError(f"truncation of {self.topic}-{self.partition} failed: {e}") from e

    def _truncate_to(self, offset: int) -> bool:
        local = self._local
        if offset >= local.log_end_offset:
            self._epochs.truncate_from_end(local.log_end_offset)  # written with the next checkpoint
            return False
        if local.segments[0].base_offset > offset:
            self._truncate_fully_and_start_at(offset)
            return True
        self._mark_dirty()
        # 1. the lowered recovery point, durably, before any segment changes: from here on a
        #    crash makes the next open recover (and re-read epochs) from the cut segment on
        local.recovery_point = min(local.recovery_point, offset)
        self._write_checkpoints()
        crash_point("truncate.after_checkpoint")
        # 2. later segments, snapshots and aborted-transaction entries of what goes
        removed = [s.base_offset for s in local.segments[1:] if s.base_offset >= offset]
        local.truncate_to(offset)
        leo = local.log_end_offset
        for base in removed:
            idx = self._txn_indexes.pop(base, None)
            if idx is not None:
                idx.delete()
        for idx in self._txn_indexes.values():
            if any(t.last_offset >= leo for t in idx.entries):
                idx.rewrite([t for t in idx.entries if t.last_offset < leo])  # atomic, fsynced
        self.producer_state.delete_snapshots_after(leo)
        # 3. the deletions durable first, then the cut (else a later segment could come back
        #    after the cut segment grew new batches over its offsets)
        fsync_dir(self.directory)
        crash_point("truncate.after_dir_sync")
        local.active_segment.flush()
        # 4. state derived from the log
        self.log_start_offset = min(self.log_start_offset, leo)
        psm = self.producer_state
        replay_from = psm.load(self.log_start_offset, leo)
        if replay_from < leo:  # the kept entries of the .txnindex files are right as they are
            self._replay_producers(replay_from, note_markers=False)
        psm.update_map_end_offset(leo)
        self._epochs.truncate_from_end(leo)
        self.high_watermark = min(self.high_watermark, leo)
        self._write_checkpoints()
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Kafka's ``truncateFullyAndStartAt``: delete every segment and start an empty log at
        ``offset`` (log start offset, high watermark and recovery point all ``offset``), with no
        producer state, aborted-transaction index or epoch entry. Durable when it returns; a
        crash during it leaves the old log (its log start possibly moved) or the new empty one.
        ``OSError`` is wrapped in KafkaStorageError."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot start {self.topic}-{self.partition} at a negative offset {offset}")
        with self.lock:
            try:
                self._truncate_fully_and_start_at(offset)
            except OSError as e:
                raise KafkaStorageError(f"truncation of {self.topic}-{self.partition} failed: {e}") from e

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        self._mark_dirty()
        # the new log start first: a crash once segments are gone opens an empty log there
        self.log_start_offset = offset
        self._write_checkpoints()
        crash_point("truncate_fully.after_checkpoint")
        self._local.truncate_fully_and_start_at(offset)
        for idx in self._txn_indexes.values():
            idx.delete()
        self._txn_indexes.clear()
        self.producer_state.truncate_fully_and_start_at(offset)
        self._epochs.clear()
        self.high_watermark = offset
        fsync_dir(self.directory)  # the snapshots' and .txnindex files' deletion
        self._write_checkpoints()

    def _undo_partial_append(self) -> None:
        """After a failed write (e.g. ENOSPC) cut the active segment back to its last complete
        batch, so the next append starts on a batch boundary and nothing half-written is ever
        read or recovered. Best effort: if even that fails, recovery truncates at restart."""
        seg = self._local.active_segment
        try:
            if seg.file_size() != seg.size:
                seg.truncate_file(seg.size)
        except OSError:
            pass

    def _roll(self) -> None:
        """Kafka's roll: the new segment now; the old one (log, indexes, .txnindex), the
        producer snapshot and the directory made durable by the roll flusher (inline without
        one), after which the recovery point moves to the new base (:meth:`finish_roll_flush`)."""
        self._mark_dirty()
        with self.lock:
            old = self._local.segments[-1]
            txn = self._txn_indexes.get(old.base_offset)
            new = self._local.roll(sync=False)
        if new is old:
            return
        snapshot = self.producer_state.take_snapshot(sync=False)
        # the checkpoints are written when the flush is done (finish_roll_flush, on the roll
        # flusher's thread): a rename here waits behind the file system's journal while an
        # earlier roll's fsync runs (~10 ms, up to ~40 ms, measured), a stall of the event loop
        job = RollFlush(new.base_offset, old, txn, snapshot, self.directory)
        (_roll_flusher or flush_roll_inline)(self, job)

    def finish_roll_flush(self, job: RollFlush, *, sync: bool = False) -> None:
        """:meth:`RollFlush.sync` succeeded: everything below ``job.upto`` is durable, the
        recovery point moves there (unless a flush meanwhile moved it further) and is
        checkpointed (fsynced with ``sync``). Any thread: the roll flusher calls it on its own,
        so the checkpoint files' renames never stall the event loop. A log closed meanwhile
        (deleted, or closed by a shutdown that wrote its own checkpoints) is left alone."""
        if self.closed:
            return
        with self.lock:
            if self.closed:
                return
            self._local.flush_done(job.upto)
        try:
            self._write_checkpoints(sync)
        except OSError:
            if not self.closed:
                raise

    def roll(self) -> None:
        """Force a new active segment (Kafka's ``roll``), e.g. for tests and admin tools."""
        self._check_open()
        try:
            self._roll()
        except OSError as e:
            raise KafkaStorageError(f"roll of {self.topic}-{self.partition} failed: {e}") from e

    # ------------------------------------------------------------------ read

    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = True) -> FetchData:
        """Whole batches from the one containing ``fetch_offset``, at most ``max_bytes`` (but at
        least one batch if ``min_one_message``), never a batch holding an offset >= ``max_offset``.

        Raises OffsetOutOfRangeError if ``fetch_offset`` is outside
        ``[log_start_offset, log_end_offset]``.
        """
        self._check_open()
        leo = self.log_end_offset
        if fetch_offset < self.log_start_offset or fetch_offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} is out of range [{self.log_start_offset}, {leo}] "
                f"for {self.topic}-{self.partition}"
            )
        if fetch_offset == leo or (max_offset is not None and fetch_offset >= max_offset):
            return EMPTY_FETCH
        try:
            with self.lock:
                return self._local.read(fetch_offset, max_bytes, max_offset, min_one_message)
        except OSError as e:
            note_fd_exhaustion(e, f"read from {self.topic}-{self.partition}")
            raise KafkaStorageError(f"read from {self.topic}-{self.partition} failed: {e}") from e

    def read_bytes(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
                   min_one_message: bool = True) -> bytes:
        """:meth:`read`, with the regions copied out (for tests, tools and compaction)."""
        data = self.read(fetch_offset, max_bytes, max_offset=max_offset, min_one_message=min_one_message)
        try:
            return data.read_bytes()
        finally:
            data.close()

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with timestamp >= ``timestamp_ms``
        (Kafka ListOffsets by time); None if there is none."""
        self._check_open()
        with self.lock:
            return self._offset_for_timestamp(timestamp_ms)

    def _offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        segs = self._local.segments
        for i, seg in enumerate(segs):
            if i + 1 < len(segs) and segs[i + 1].base_offset <= self.log_start_offset:
                continue
            if seg.max_timestamp_so_far < timestamp_ms:
                continue
            found = seg.find_offset_by_timestamp(timestamp_ms, self.log_start_offset)
            if found is not None:
                return found
        return None

    def max_timestamp_offset(self) -> tuple[int, int]:
        """``(offset, timestamp)`` of the first record with the largest timestamp (ListOffsets
        MAX_TIMESTAMP, -3); ``(-1, -1)`` if the log is empty or has no timestamps."""
        self._check_open()
        with self.lock:
            return self._max_timestamp_offset()

    def _max_timestamp_offset(self) -> tuple[int, int]:
        if self.log_end_offset == self.log_start_offset:
            return -1, -1
        best: LogSegment | None = None
        for seg in self._local.segments:
            if best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far:
                best = seg
        if best is None or best.max_timestamp_so_far < 0:
            return -1, -1
        ts = best.max_timestamp_so_far
        return best.offset_of_timestamp_in_batch(best.offset_of_max_timestamp, ts), ts

    # ------------------------------------------------------------------ durability / lifecycle

    def flush(self) -> None:
        """fsync everything appended so far and move the recovery point to the log end."""
        self._check_open()
        try:
            with self.lock:
                self._local.flush()
        except OSError as e:
            raise KafkaStorageError(f"flush of {self.topic}-{self.partition} failed: {e}") from e

    def plan_flush(self) -> FlushPlan | None:
        """The first half of a flush done off the event loop (the coordinators' flusher): what
        is appended now, to be synced by :func:`sync_flush_plan` in another thread and then
        recorded by :meth:`finish_flush`. None: nothing unflushed. Appends may go on meanwhile
        (the next plan covers them); the log's lock is held only to read the segment list."""
        if self.closed:
            raise KafkaStorageError(f"{self.topic}-{self.partition} is closed")
        with self.lock:
            upto, files, directory = self._local.flush_plan()
        if not files:
            return None
        return FlushPlan(upto, files, directory)

    def finish_flush(self, plan: FlushPlan) -> None:
        """:func:`sync_flush_plan` succeeded: the recovery point moves to the plan's offset."""
        if self.closed:
            return
        with self.lock:
            self._local.flush_done(plan.upto)

    def flush_if_due(self) -> None:
        """Flush if ``flush.ms`` has passed (injected clock) since the last flush and there is
        unflushed data."""
        if self.closed:
            return
        local = self._local
        if local.recovery_point >= local.log_end_offset:
            return
        if self.clock.monotonic_ms() - local.last_flush_ms >= self.config.flush_ms:
            self.flush()

    def _write_checkpoints(self, sync: bool = True) -> None:
        """Write the checkpoint files whose value changed since this log last wrote (or read) them."""
        d, t, p = self.directory, self.topic, self.partition
        with self._ckpt_lock:  # never takes ``lock`` inside (callers may hold it)
            values = (self._local.recovery_point, self.log_start_offset, self.high_watermark)
            # the epoch file first (its own directory fsync): it must be right below the recovery
            # point the next lines may checkpoint
            changed = self._epochs.write(sync=sync)
            for i, (name, value) in enumerate(zip(_CHECKPOINT_FILES, values, strict=True)):
                if self._checkpointed[i] != value:
                    _write_checkpoint(d / name, t, p, value, sync)
                    self._checkpointed[i] = value
                    changed = True
            if changed and sync:
                # one directory fsync makes the renames durable: without it a power cut brings
                # back the old log start offset, and records DeleteRecords had removed reappear
                fsync_dir(d)

    def close(self, *, sync: bool = True) -> None:
        """Flush, snapshot producer state, write checkpoints and the clean-shutdown marker.

        ``sync=False`` (a broker closing thousands of logs): nothing is fsynced and the marker is
        not written yet; the caller makes everything durable at once (``os.sync``) and only then
        calls :meth:`mark_clean_shutdown` — two syncs in all instead of several fsyncs per log."""
        if self.closed:
            return
        self.lock.acquire()
        try:
            self._finish_pending_deletes()
            if self._clean_marker:  # nothing changed since a clean open: files are as they were
                self._local.close_handles()
                return
            self._local.flush(sync=sync)
            for seg in self._local.segments:
                seg.on_become_inactive()
                if sync:
                    seg.flush()
            self.producer_state.update_map_end_offset(self.log_end_offset)
            self.producer_state.take_snapshot(sync=sync)
            if sync:
                for idx in self._txn_indexes.values():
                    idx.flush()
            self._write_checkpoints(sync)
            self._local.close()
            if sync:
                self._write_marker(sync=True)
            else:
                self._marker_due = True
        except OSError as e:
            raise KafkaStorageError(f"close of {self.topic}-{self.partition} failed: {e}") from e
        finally:
            self.closed = True
            self.lock.release()

    def _write_marker(self, sync: bool) -> None:
        fd = os.open(self.directory / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if sync:
            fsync_dir(self.directory)

    def mark_clean_shutdown(self) -> None:
        """After ``close(sync=False)`` and a sync of everything it wrote: write the clean-shutdown
        marker (unsynced too: the caller syncs again)."""
        if self._marker_due:
            try:
                self._write_marker(sync=False)
            except OSError as e:
                raise KafkaStorageError(f"close of {self.topic}-{self.partition} failed: {e}") from e
            self._marker_due = False

    def close_without_flush(self) -> None:
        """Release file handles as a crash would leave things: no flush, snapshot or marker
        (for tests simulating an unclean shutdown)."""
        with self.lock:
            self._close_handles()

    def _close_handles(self) -> None:
        """Close every file handle (segments and those awaiting deletion), once; under the lock."""
        if not self.closed:
            self._local.close_handles()
            for _, seg in self._pending_deletes:
                seg.close_handles()
            self._pending_deletes.clear()
            self.closed = True

    def delete(self) -> None:
        """Remove every file of this partition and its directory (rename, then delete)."""
        with self.lock:
            self._close_handles()
        doomed = self.directory.with_name(self.directory.name + ".deleting")
        if doomed.exists():
            shutil.rmtree(doomed)
        try:
            os.rename(self.directory, doomed)
        except FileNotFoundError:
            return
        shutil.rmtree(doomed)

    # ------------------------------------------------------------------ retention / DeleteRecords

    def delete_old_segments(self) -> int:
        """Apply retention (see the module docstring); returns the number of segments removed.
        Their files are renamed now and unlinked by :meth:`delete_expired_segments`."""
        if self.closed:
            return 0
        config = self.config
        delete_policy = config.delete_enabled
        now = self.clock.time_ms()
        with self.lock:
            segs = self._local.segments
            doomed: list[LogSegment] = []
            excess = self.size_bytes - config.retention_bytes if config.retention_bytes >= 0 else -1
            for i, seg in enumerate(segs[:-1]):  # never the active segment
                next_base = segs[i + 1].base_offset
                if next_base > self.high_watermark:
                    break
                below_start = next_base <= self.log_start_offset
                by_time = delete_policy and config.retention_ms >= 0 and (
                    now - self._largest_timestamp(seg) > config.retention_ms
                )
                by_size = delete_policy and excess >= 0 and excess - seg.size >= 0
                if not (below_start or by_time or by_size):
                    break
                doomed.append(seg)
                if excess >= 0:
                    excess -= seg.size
            if doomed:
                # nothing fsynced on this path (Kafka neither syncs the renames nor the log
                # start offset, which it checkpoints every minute): retention runs on the event
                # loop, and a crash that brings back a removed segment costs only another pass
                self._remove_segments(doomed, sync=False)
        return len(doomed)

    @staticmethod
    def _largest_timestamp(seg: LogSegment) -> int:
        if seg.max_timestamp_so_far >= 0:
            return seg.max_timestamp_so_far
        return seg.last_modified_ms()  # no timestamps: Kafka's lastModified

    def _remove_segments(self, doomed: list[LogSegment], *, sync: bool = True) -> None:
        """Take ``doomed`` out (lock held), move the log start offset, checkpoint (fsynced only
        with ``sync``), schedule the unlinks."""
        try:
            self._mark_dirty()
            deferred = not sync and _background_io is not None
            self._local.remove_segments(doomed, sync=sync, rename=not deferred)
            due = self.clock.monotonic_ms() + max(0, self.config.file_delete_delay_ms)
            self._pending_deletes.extend((due, s) for s in doomed)
            if not deferred:
                crash_point("retention.after_rename")
            first = self._local.segments[0].base_offset
            if first > self.log_start_offset:
                self.log_start_offset = first
                self.high_watermark = max(self.high_watermark, first)
                self._epochs.truncate_from_start(first)
            idxs = [i for seg in doomed if (i := self._txn_indexes.pop(seg.base_offset, None)) is not None]

            def files() -> None:
                if deferred:
                    for seg in doomed:
                        seg.rename_to_deleted()
                    crash_point("retention.after_rename")
                self._write_checkpoints(sync)
                self.producer_state.delete_snapshots_before(first)
                for idx in idxs:
                    idx.delete()

            # the renames, the checkpoint and the unlinks wait behind the file system's journal
            # while a roll's fsync runs (~10 ms each, measured): off the event loop when it can
            if not (deferred and _background_io is not None and _background_io(self, files)):
                files()
        except OSError as e:
            raise KafkaStorageError(f"deleting segments of {self.topic}-{self.partition} failed: {e}") from e

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: move the log start offset to ``offset`` (-1: the high watermark) and
        remove the segments wholly below it. Returns the new low watermark (log start offset).

        Raises OffsetOutOfRangeError if ``offset`` is beyond the high watermark (or < -1) and
        PolicyViolationError if the cleanup policy does not include ``delete`` (Kafka's rule)."""
        self._check_open()
        if not self.config.delete_enabled:  # compact or empty: Kafka's Partition.deleteRecordsOnLeader
            raise PolicyViolationError(
                f"Records of partition {self.topic}-{self.partition} can not be deleted due to the "
                "configured policy"
            )
        with self.lock:
            target = self.high_watermark if offset == -1 else offset
            if target < 0 or target > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records of {self.topic}-{self.partition} before offset {offset}: "
                    f"the high watermark is {self.high_watermark}"
                )
            if target > self.log_start_offset:
                self.log_start_offset = target
                self._epochs.truncate_from_start(target)
                try:
                    self._mark_dirty()
                    self._write_checkpoints()
                except OSError as e:
                    raise KafkaStorageError(f"checkpoint of {self.topic}-{self.partition} failed: {e}") from e
                self.delete_old_segments()
            return self.log_start_offset

    def delete_expired_segments(self, force: bool = False) -> int:
        """Close and unlink removed segments whose ``file.delete.delay.ms`` has passed (all of
        them with ``force``). Returns how many were unlinked."""
        if not self._pending_deletes:
            return 0
        now = self.clock.monotonic_ms()
        with self.lock:
            due = [s for t, s in self._pending_deletes if force or t <= now]
            self._pending_deletes = [(t, s) for t, s in self._pending_deletes if not (force or t <= now)]
        def unlink() -> None:
            for seg in due:
                try:
                    seg.delete_renamed()
                except OSError as e:
                    raise KafkaStorageError(f"unlinking {seg.log_path} failed: {e}") from e

        # in order after the renames queued by _remove_segments (unlinking a large file takes
        # milliseconds too)
        if due and not (_background_io is not None and _background_io(self, unlink)):
            unlink()
        return len(due)

    def _finish_pending_deletes(self) -> None:
        for _, seg in self._pending_deletes:
            seg.delete_renamed()
        self._pending_deletes.clear()

    @property
    def pending_deletes(self) -> int:
        """Removed segments whose files are not unlinked yet."""
        return len(self._pending_deletes)

    # ------------------------------------------------------------------ cleaner interface

    def cleanable_segments(self, upto_offset: int) -> list[tuple[LogSegment, int]]:
        """Closed segments whose base offset is below ``upto_offset``, each with a dup of its
        ``.log`` descriptor that the caller must close. Called by the cleaner thread."""
        with self.lock:
            self._check_open()
            out: list[tuple[LogSegment, int]] = []
            try:
                for seg in self._local.segments[:-1]:
                    if seg.base_offset >= upto_offset:
                        break
                    out.append((seg, seg.dup_fd()))
            except BaseException:
                for _, fd in out:
                    os.close(fd)
                raise
            return out

    def replace_segments(
        self, new: LogSegment, old: list[LogSegment], removed_markers: set[tuple[int, int]] | None = None
    ) -> bool:
        """Swap the cleaned segment ``new`` (files ``*.cleaned``, fsynced) in for ``old`` (see
        :meth:`LocalLog.replace_segments`). Returns False — having changed nothing — if the log
        changed meanwhile (closed, or an ``old`` segment was removed by retention); the caller
        then deletes ``new``. Called by the cleaner thread.

        The aborted-transaction entries of ``old[1:]`` are first appended to the ``.txnindex`` of
        ``old[0]`` (the cleaned segment's base), since the cleaner keeps transactional batches and
        markers; a crash before the swap leaves duplicates there, which are harmless. Entries whose
        marker the cleaning removed (``removed_markers``: ``(producer id, marker offset)``) are
        dropped in the same atomic rewrite, before the swap: such a marker is removed only once
        its transaction's data is gone, so an index without the entry is right for the old
        segments as well (a stray abort marker means nothing to a consumer), whereas an entry
        left without its marker would make read_committed consumers drop that producer's later
        batches."""
        with self.lock:
            if self.closed:
                return False
            segs = self._local.segments
            first = next((i for i, s in enumerate(segs) if s is old[0]), -1)
            if first < 0 or segs[first:first + len(old)] != old or first + len(old) >= len(segs):
                return False
            try:
                self._mark_dirty()
                moved = [self._txn_indexes[s.base_offset] for s in old[1:]
                         if s.base_offset in self._txn_indexes]
                drop = removed_markers or set()
                if any(idx.entries for idx in moved) or drop:
                    target = self._txn_index(old[0].base_offset)
                    entries = [t for idx in [target, *moved] for t in idx.entries]
                    kept = [t for t in entries if (t.producer_id, t.last_offset) not in drop]
                    if kept != target.entries:
                        target.rewrite(kept)
                crash_point("cleaner.before_swap")
                self._local.replace_segments(new, old)
                for s in old[1:]:
                    gone = self._txn_indexes.pop(s.base_offset, None)
                    if gone is not None:
                        gone.delete()
            except OSError as e:
                raise KafkaStorageError(f"swapping cleaned segments of {self!r} failed: {e}") from e
            due = self.clock.monotonic_ms() + max(0, self.config.file_delete_delay_ms)
            self._pending_deletes.extend((due, s) for s in old)
            return True

    def _check_open(self) -> None:
        if self.closed:
            raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition}, start={self.log_start_offset}, "
                f"hw={self.high_watermark}, leo={self.log_end_offset})")


@dataclass(frozen=True, slots=True)
class FlushPlan:
    """What one off-loop flush syncs (see :meth:`PartitionLog.plan_flush`)."""

    upto: int
    files: list[CachedFile]
    directory: Path | None


@dataclass(frozen=True)
class RollFlush:
    """What a roll left to make durable (:func:`set_roll_flusher`): the segment it closed (log
    and indexes), that segment's ``.txnindex``, the producer snapshot taken at the roll, and the
    directory (the new segment's names). ``upto`` is the new segment's base offset."""

    upto: int
    segment: LogSegment
    txn_index: TransactionIndex | None
    snapshot: Path
    directory: Path

    def sync(self) -> None:
        """fsync it all (any thread). Files deleted meanwhile (retention, truncation, the
        cleaner's swap, a deleted partition) are skipped: what replaced them was made durable
        by whoever replaced them. Raises OSError (an inline roll's caller wraps it, as any
        append's I/O error)."""
        seg = self.segment
        for f in (seg.log_file, seg.offset_index.file, seg.time_index.file):
            try:
                f.flush()
            except OSError:
                if f.closed or not self.directory.exists():
                    continue
                raise
        for path in ([self.txn_index.path] if self.txn_index is not None else []) + [self.snapshot]:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if self.directory.exists():
            fsync_dir(self.directory)


# The broker's deferred roll flush (strom.server.roll_flusher): called on the thread that rolled
# with the log and what the roll left to make durable; it runs RollFlush.sync elsewhere and then
# PartitionLog.finish_roll_flush. None (tools, tests that open logs directly): a roll fsyncs inline.
RollFlusher = Callable[["PartitionLog", RollFlush], None]
_roll_flusher: RollFlusher | None = None


def flush_roll_inline(plog: PartitionLog, job: RollFlush) -> None:
    """A roll's flush done at once, on the rolling thread (no roll flusher installed)."""
    job.sync()
    plog.finish_roll_flush(job, sync=True)


def set_roll_flusher(fn: RollFlusher | None) -> None:
    """Install (or with None remove) the process's deferred roll flush."""
    global _roll_flusher
    _roll_flusher = fn


# The broker's background file work (the roll flusher's thread): ``fn(log, job)`` queues ``job``
# (file renames, checkpoints and unlinks of retention) behind the roll flushes, in order, and
# returns True; False when the caller must run it itself (not on the event loop's thread, or
# shutting down). A job's OSError marks the log's directory as failing unless the log closed.
BackgroundIO = Callable[["PartitionLog", Callable[[], None]], bool]
_background_io: BackgroundIO | None = None


def set_background_io(fn: BackgroundIO | None) -> None:
    """Install (or with None remove) the process's background file work."""
    global _background_io
    _background_io = fn


def sync_flush_plan(plan: FlushPlan) -> None:
    """fsync a plan's files (any thread; descriptors are pinned per call by the file cache). A
    file closed since the plan was made belonged to a segment that was deleted or replaced by a
    cleaned copy (which the cleaner made durable itself): skipped. Raises KafkaStorageError."""
    try:
        for f in plan.files:
            try:
                f.flush()
            except OSError:
                if f.closed:
                    continue
                raise
        if plan.directory is not None:
            fsync_dir(plan.directory)
    except OSError as e:
        raise KafkaStorageError(f"flush up to offset {plan.upto} failed: {e}") from e
