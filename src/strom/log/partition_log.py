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

Error contract: ``append_as_leader`` raises CorruptRecordError (2) / InvalidRecordError (87),
MessageTooLargeError (10), RecordListTooLargeError (18), InvalidProducerEpochError (47),
OutOfOrderSequenceError (45) with nothing appended; ``read`` raises OffsetOutOfRangeError (1);
``OSError`` is wrapped in KafkaStorageError (56).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from strom.clock import Clock
from strom.config import LogConfig
from strom.log.errors import (
    InvalidRecordError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from strom.log.local_log import EMPTY_FETCH, FetchData, FileRegion, LocalLog, fsync_dir
from strom.log.producer_state import ProducerAppendInfo, ProducerStateManager
from strom.log.segment import LogSegment, filename_prefix
from strom.log.transaction_index import AbortedTxn, TransactionIndex
from strom.protocol.records import (
    CONTROL_ABORT,
    BatchHeader,
    control_type,
    iter_batches,
    patch_base_offset,
    patch_leader_epoch,
    set_log_append_time,
    verify_crc,
)

__all__ = ["AppendInfo", "FetchData", "FileRegion", "PartitionLog", "SegmentInfo", "partition_dir"]

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


def _write_checkpoint(path: Path, topic: str, partition: int, offset: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    data = f"0\n1\n{topic} {partition} {offset}\n".encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read_checkpoint(path: Path) -> int | None:
    try:
        lines = path.read_text().split("\n")
        if lines[0].strip() != "0" or int(lines[1]) < 1:
            return None
        return int(lines[2].split()[-1])
    except (OSError, ValueError, IndexError):
        return None


class PartitionLog:
    """The log of one topic-partition. Not thread-safe: the server calls it from one task."""

    def __init__(self, directory: Path, topic: str, partition: int, config: LogConfig, clock: Clock,
                 local: LocalLog, producer_state: ProducerStateManager, log_start_offset: int,
                 high_watermark: int) -> None:
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
        # aborted transactions, one ``.txnindex`` per segment (by segment base offset)
        self._txn_indexes: dict[int, TransactionIndex] = {}

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
        directory.mkdir(parents=True, exist_ok=True)
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
        log = cls(directory, topic, partition, config, clock, local, psm, log_start, hw)
        log._load_txn_indexes(replay_from)
        if replay_from < leo:
            log._replay_producers(replay_from)
        psm.update_map_end_offset(leo)
        if clean:
            marker.unlink()
            fsync_dir(directory)
        log._write_checkpoints()
        return log

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

    def _replay_producers(self, start_offset: int) -> None:
        """Rebuild producer state (and aborted-transaction entries) from batch headers; only a
        control batch's single record is decoded, for its commit/abort type."""
        local = self._local
        psm = self.producer_state
        for seg in local.segments[local.segment_index_for(start_offset):]:
            found = seg.translate_offset(start_offset)
            if found is None:
                continue
            for pos, h in seg.iter_headers(found[0]):
                if h.is_control and h.producer_id >= 0:
                    self._note_marker(seg, pos, h)
                psm.replay([h])

    def _note_marker(self, seg: LogSegment, pos: int, h: BatchHeader) -> None:
        entry = self.producer_state.last_entry(h.producer_id)
        first = entry.current_txn_first_offset if entry is not None else None
        if first is None:
            return
        if control_type(seg.read_batch(pos, h), 0, h) == CONTROL_ABORT:
            self._txn_index(seg.base_offset).append(AbortedTxn(h.producer_id, first, h.base_offset, first))

    @property
    def last_stable_offset(self) -> int:
        """The high watermark, or the first offset of the oldest ongoing transaction if lower."""
        first = self.producer_state.first_unstable_offset()
        return self.high_watermark if first is None else min(first, self.high_watermark)

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound)`` (read_committed fetch)."""
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
                "current_txn_start_offset": -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
            })
        return out

    @staticmethod
    def _iter_headers(local: LocalLog, start_offset: int) -> Iterator[tuple[int, BatchHeader]]:
        """Headers of every batch whose last offset >= ``start_offset`` (no record decoding)."""
        for seg in local.segments[local.segment_index_for(start_offset):]:
            found = seg.translate_offset(start_offset)
            if found is None:
                continue
            yield from seg.iter_headers(found[0])

    # ------------------------------------------------------------------ properties

    @property
    def log_end_offset(self) -> int:
        return self._local.log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

    @property
    def size_bytes(self) -> int:
        return self._local.size_bytes

    @property
    def segments(self) -> list[SegmentInfo]:
        return [SegmentInfo(s.base_offset, s.size, s.log_path) for s in self._local.segments]

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
        """Set the high watermark, clamped to ``[log_start_offset, log_end_offset]``."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)

    # ------------------------------------------------------------------ append

    def append_as_leader(
        self, records: bytes | bytearray | memoryview, leader_epoch: int, *, from_coordinator: bool = False
    ) -> AppendInfo:
        """Validate, assign offsets to and append the batches of one Produce request.

        Returns the offsets assigned, or — for a retried idempotent batch already in the log —
        the offsets it got the first time (``duplicate=True``, nothing appended).
        """
        self._check_open()
        config = self.config
        data = bytearray(records)
        total = len(data)
        if total == 0:
            raise InvalidRecordError("produce request carries no record batch")
        if total > config.segment_bytes:
            raise RecordListTooLargeError(
                f"append of {total} bytes is larger than segment.bytes {config.segment_bytes}"
            )
        batches = list(iter_batches(data))  # CorruptRecordError on bad framing / magic
        max_size = config.max_message_bytes
        for pos, h in batches:
            if h.size > max_size:
                raise MessageTooLargeError(
                    f"record batch of {h.size} bytes is larger than max.message.bytes {max_size}"
                )
            if h.records_count <= 0 or h.last_offset_delta != h.records_count - 1:
                raise InvalidRecordError(
                    f"record batch at position {pos} has {h.records_count} records but last offset "
                    f"delta {h.last_offset_delta}"
                )
            verify_crc(data, pos, h)
            if h.is_control and not from_coordinator:
                # Kafka's LogValidator: clients may not write transaction markers
                raise InvalidRecordError("control batches are written by the transaction coordinator only")

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
                if entry is not None and not h.is_control:
                    dup = entry.find_duplicate(h)
                    if dup is not None:
                        return AppendInfo(
                            dup.first_offset, dup.last_offset, dup.timestamp if log_append_time else -1,
                            self.log_start_offset, dup.last_offset - dup.first_offset + 1, duplicate=True,
                        )
                info = infos.get(pid)
                if info is None:
                    info = infos[pid] = psm.prepare_update(pid, validate=True)
                if h.is_control:
                    txn_first = info.updated.current_txn_first_offset
                    if txn_first is not None and control_type(data, pos, h) == CONTROL_ABORT:
                        aborted.append(AbortedTxn(pid, txn_first, first, txn_first))
                    info.append_control_batch(h, first, ts)
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
        try:
            if local.should_roll(total, max_ts, last_offset, now):
                self._roll()
            local.append(data, placed, last_offset, max_ts, offset_of_max_ts)
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

    def _roll(self) -> None:
        active = self._txn_indexes.get(self._local.segments[-1].base_offset)
        if active is not None:
            active.flush()
        self._local.roll()
        self.producer_state.take_snapshot()
        self._write_checkpoints()

    def roll(self) -> None:
        """Force a new active segment (Kafka's ``roll``), e.g. for tests and admin tools."""
        self._check_open()
        self._roll()

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
            return self._local.read(fetch_offset, max_bytes, max_offset, min_one_message)
        except OSError as e:
            raise KafkaStorageError(f"read from {self.topic}-{self.partition} failed: {e}") from e

    def read_bytes(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
                   min_one_message: bool = True) -> bytes:
        """:meth:`read`, with the regions copied out (for tests, tools and compaction)."""
        return self.read(fetch_offset, max_bytes, max_offset=max_offset,
                         min_one_message=min_one_message).read_bytes()

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with timestamp >= ``timestamp_ms``
        (Kafka ListOffsets by time); None if there is none."""
        self._check_open()
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
            self._local.flush()
        except OSError as e:
            raise KafkaStorageError(f"flush of {self.topic}-{self.partition} failed: {e}") from e

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

    def _write_checkpoints(self) -> None:
        d, t, p = self.directory, self.topic, self.partition
        _write_checkpoint(d / RECOVERY_POINT_FILE, t, p, self._local.recovery_point)
        _write_checkpoint(d / LOG_START_FILE, t, p, self.log_start_offset)
        _write_checkpoint(d / HIGH_WATERMARK_FILE, t, p, self.high_watermark)

    def close(self) -> None:
        """Flush, snapshot producer state, write checkpoints and the clean-shutdown marker."""
        if self.closed:
            return
        try:
            self._local.flush()
            for seg in self._local.segments:
                seg.on_become_inactive()
                seg.flush()
            self.producer_state.update_map_end_offset(self.log_end_offset)
            self.producer_state.take_snapshot()
            for idx in self._txn_indexes.values():
                idx.flush()
            self._write_checkpoints()
            self._local.close()
            marker = self.directory / CLEAN_SHUTDOWN_FILE
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(self.directory)
        except OSError as e:
            raise KafkaStorageError(f"close of {self.topic}-{self.partition} failed: {e}") from e
        finally:
            self.closed = True

    def close_without_flush(self) -> None:
        """Release file handles as a crash would leave things: no flush, snapshot or marker
        (for tests simulating an unclean shutdown)."""
        if not self.closed:
            self._local.close_handles()
            self.closed = True

    def delete(self) -> None:
        """Remove every file of this partition and its directory (rename, then delete)."""
        if not self.closed:
            self._local.close_handles()
            self.closed = True
        doomed = self.directory.with_name(self.directory.name + ".deleting")
        if doomed.exists():
            shutil.rmtree(doomed)
        try:
            os.rename(self.directory, doomed)
        except FileNotFoundError:
            return
        shutil.rmtree(doomed)

    def _check_open(self) -> None:
        if self.closed:
            raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition}, start={self.log_start_offset}, "
                f"hw={self.high_watermark}, leo={self.log_end_offset})")

