"""The ``__cluster_metadata`` log on disk (Kafka's KafkaMetadataLog), on strom's segment code.

Theory of operation
-------------------
The log is the partition directory ``<metadata.log.dir>/__cluster_metadata-0``, laid out as any
strom partition (:class:`strom.log.local_log.LocalLog`: ``%020d.log`` segments with their
indexes, recovered batch by batch after a crash) plus these files:

* ``leader-epoch-checkpoint`` — Kafka's leader epoch cache (``0`` / count / ``epoch startOffset``
  lines): for each leader epoch in the log, the offset of its first batch. It answers
  :meth:`MetadataLog.end_offset_for_epoch` (a follower's divergence check) and
  :meth:`MetadataLog.last_fetched_epoch`. Every batch carries its epoch in
  ``partitionLeaderEpoch``, so the cache can always be rebuilt from batch headers.
* ``recovery-point-offset-checkpoint`` / ``log-start-offset-checkpoint`` — Kafka's checkpoint
  format, as :mod:`strom.log.partition_log` writes them; ``.clean-shutdown`` after a clean close.
* snapshots ``<offset %020d>-<epoch %010d>.checkpoint``: the image at ``offset`` (everything
  before it applied), framed as Kafka frames them: a control batch holding a
  SnapshotHeaderRecord, the caller's record batches, a control batch holding a
  SnapshotFooterRecord. A snapshot is written as ``.checkpoint.part``, fsynced, renamed and the
  directory fsynced: a ``.checkpoint`` file is always complete; ``.part`` files are leftovers of
  a crash and are deleted on open. :meth:`read_snapshot` returns the caller's batches only.

Rules that keep the epoch cache right across crashes
----------------------------------------------------
The cache file is correct for every offset below the recovery point written in the
checkpoint file: it is rewritten (durably) before that checkpoint is (on roll and close), and on
every truncation the lowered recovery point is checkpointed *before* segments change. On an
unclean open, entries starting at or after the first segment that :class:`LocalLog` recovers are
dropped and rebuilt from the recovered batches' headers; after a clean shutdown the file is
trusted. An unreadable file is rebuilt from every batch. Entries always lie in
``[log start, log end)``, in memory as after an open (Kafka keeps, in memory, an entry at the log
start of an empty log; a reopen would drop it, so strom never keeps it).

Truncation (:meth:`truncate_to`) is made durable at once: the directory is fsynced (later
segments deleted) before the cut segment is. Otherwise a crash could bring back a later segment
that the truncation deleted while the cut segment had meanwhile grown new batches over the same
offsets. As a second line of defence, an open ends the log at the first gap between segments
(:func:`_end_at_first_gap`; a Raft log has none, unlike a compacted partition).

Log start and snapshots (Kafka's rules): :meth:`delete_before_snapshot` moves the log start
offset to a snapshot's offset (checkpointed first), then deletes the segments wholly below it
and the older snapshots. :meth:`truncate_to_latest_snapshot` (also run on open) restarts the
log at the latest snapshot when that snapshot is ahead of the log (a follower that fetched it):
the new log start is checkpointed first, then segments are deleted last to first. On open,
snapshots below the log start are deleted, and a log start ahead of the log end restarts the log
there. A log start above 0 without a snapshot at or after it is an inconsistent directory.

The high watermark is not persisted (as in Kafka's metadata log): on open it is the latest
snapshot's offset (everything before a snapshot was committed; so no truncation can reach below
it) or the log start offset, and the Raft state machine moves it from there.

Error contract: see :mod:`strom.raft.log`. ``OSError`` and inconsistent files raise
:class:`RaftStorageError`; invalid arguments (epochs going backwards, offsets out of range,
truncation below the high watermark, malformed batches) raise ``ValueError`` (a
``CorruptRecordError`` for bad bytes).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from strom.clock import Clock, RealClock
from strom.config import LogConfig
from strom.durable_file import fsync_dir, replace_file
from strom.log.leader_epoch import LEADER_EPOCH_FILE, LeaderEpochCache
from strom.log.local_log import LocalLog
from strom.log.partition_log import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_FILE,
    RECOVERY_POINT_FILE,
    _read_checkpoint,
    _write_checkpoint,
)
from strom.protocol.records import (
    BATCH_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    build_batch,
    control_type,
    iter_batches,
    parse_header,
    patch_base_offset,
    patch_leader_epoch,
    verify_crc,
)
from strom.raft.log import AppendInfo, OffsetAndEpoch, RaftLog, RaftStorageError

__all__ = [
    "METADATA_PARTITION_DIR",
    "METADATA_TOPIC",
    "LeaderEpochCache",
    "MetadataLog",
    "snapshot_file_name",
]

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION_DIR = f"{METADATA_TOPIC}-0"
SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SNAPSHOT_SUFFIX = ".checkpoint.part"
DELETED_SNAPSHOT_SUFFIX = ".checkpoint.deleted"
# Kafka's ControlRecordType
CONTROL_SNAPSHOT_HEADER = 3
CONTROL_SNAPSHOT_FOOTER = 4
# Kafka's metadata.log.segment.bytes / metadata.log.segment.ms defaults
DEFAULT_CONFIG = LogConfig(segment_bytes=1024 * 1024 * 1024, segment_ms=7 * 24 * 3600 * 1000)


def snapshot_file_name(snapshot_id: OffsetAndEpoch) -> str:
    """Kafka's ``Snapshots.filenameFromSnapshotId`` plus the suffix."""
    return f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


def _parse_snapshot_name(name: str, suffix: str) -> OffsetAndEpoch | None:
    stem = name[: -len(suffix)]
    offset, sep, epoch = stem.partition("-")
    if sep != "-" or len(offset) != 20 or len(epoch) != 10 or not (offset.isdigit() and epoch.isdigit()):
        return None
    return OffsetAndEpoch(int(offset), int(epoch))


# --------------------------------------------------------------------------- the log


class MetadataLog:
    """:class:`~strom.raft.log.RaftLog` on disk. Create with :meth:`open`; single-threaded."""

    def __init__(self, directory: Path, clock: Clock, local: LocalLog, epochs: LeaderEpochCache,
                 snapshots: list[OffsetAndEpoch], log_start_offset: int) -> None:
        self.directory = directory
        self.clock = clock
        self._local = local
        self._epochs = epochs
        self._snapshots = snapshots  # sorted, all at or after the log start offset
        self._log_start = log_start_offset
        # everything before a snapshot was committed (a snapshot past the log end restarts it)
        self._high_watermark = min(max([log_start_offset, *(s.offset for s in snapshots[-1:])]),
                                   local.log_end_offset)
        self._written_epochs: bytes | None = None
        self._written_offsets: tuple[int, int] | None = None  # (recovery point, log start) on disk
        self.closed = False

    # ------------------------------------------------------------------ open / close

    @classmethod
    def open(cls, metadata_log_dir: Path, *, clock: Clock | None = None, config: LogConfig | None = None
             ) -> MetadataLog:
        """Open (creating it if needed) ``<metadata_log_dir>/__cluster_metadata-0``, recovering
        after a crash. Raises :class:`RaftStorageError` on I/O errors or inconsistent files."""
        directory = Path(metadata_log_dir) / METADATA_PARTITION_DIR
        try:
            return cls._open(directory, clock or RealClock(), config or DEFAULT_CONFIG)
        except OSError as e:
            raise RaftStorageError(f"cannot open the metadata log in {directory}: {e}") from e

    @classmethod
    def _open(cls, directory: Path, clock: Clock, config: LogConfig) -> MetadataLog:
        new = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        if new:
            fsync_dir(directory.parent)
        snapshots = _scan_snapshots(directory)
        marker = directory / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_point = _read_checkpoint(directory / RECOVERY_POINT_FILE) or 0
        log_start = _read_checkpoint(directory / LOG_START_FILE) or 0
        local = LocalLog.load(directory, config, clock, recovery_point=recovery_point, clean_shutdown=clean,
                              log_start_offset=log_start)
        if clean:  # from here on a crash must make the next open recover
            marker.unlink()
            fsync_dir(directory)
        _end_at_first_gap(local)
        leo = local.log_end_offset
        log_start = max(log_start, local.segments[0].base_offset)

        # the epoch cache: trusted below the first recovered segment, rebuilt from headers above
        try:
            saved = LeaderEpochCache.parse_checkpoint((directory / LEADER_EPOCH_FILE).read_bytes())
        except FileNotFoundError:
            saved = None
        if saved is None:
            trusted_below = local.segments[0].base_offset
        elif clean:
            trusted_below = leo
        else:
            trusted_below = local.segments[local.segment_index_for(min(recovery_point, leo))].base_offset
        epochs = LeaderEpochCache([e for e in saved or [] if e[1] < trusted_below])
        for h in _headers(local, trusted_below):
            epochs.assign(h.partition_leader_epoch, h.base_offset)

        if log_start > 0 and not any(s.offset >= log_start for s in snapshots):
            raise RaftStorageError(
                f"inconsistent metadata log in {directory}: it starts at offset {log_start} but no "
                f"snapshot at or after that offset exists (snapshots: "
                f"{', '.join(snapshot_file_name(s) for s in snapshots) or 'none'})"
            )
        if log_start > leo:  # a restart at a snapshot, or a log start moved past a lost tail
            local.truncate_fully_and_start_at(log_start)
            epochs = LeaderEpochCache()
        epochs.truncate_from_start(log_start)
        epochs.truncate_from_end(local.log_end_offset)  # entries lie in [log start, log end)
        for s in [s for s in snapshots if s.offset < log_start]:
            (directory / snapshot_file_name(s)).unlink()
        log = cls(directory, clock, local, epochs, [s for s in snapshots if s.offset >= log_start], log_start)
        log._write_checkpoints()
        log._truncate_to_latest_snapshot()
        return log

    def close(self) -> None:
        """Flush everything, write the checkpoints and the clean-shutdown marker."""
        if self.closed:
            return
        with self._storage("close"):
            self._local.flush()
            for seg in self._local.segments:
                seg.on_become_inactive()
                seg.flush()
            self._write_checkpoints()
            self._local.close()
            fd = os.open(self.directory / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(self.directory)
        self.closed = True

    def close_without_flush(self) -> None:
        """Release the file handles as a crash would leave the files (tests)."""
        if not self.closed:
            self._local.close_handles()
            self.closed = True

    # ------------------------------------------------------------------ positions

    @property
    def start_offset(self) -> int:
        return self._log_start

    @property
    def end_offset(self) -> int:
        return self._local.log_end_offset

    @property
    def flushed_offset(self) -> int:
        """The recovery point; at least the log start (what lies before it is in a snapshot)."""
        return max(self._local.recovery_point, self._log_start)

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def update_high_watermark(self, offset: int) -> None:
        """Clamped to the log end; a move backwards is ignored."""
        self._high_watermark = max(self._high_watermark, min(offset, self.end_offset))

    def last_fetched_epoch(self) -> int:
        latest = self._epochs.latest_epoch
        if latest is not None:
            return latest
        return self._snapshots[-1].epoch if self._snapshots else 0

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        got_epoch, got_offset = self._epochs.end_offset_for(epoch, self.end_offset)
        if epoch < 0 or got_epoch < 0:  # the cache cannot say (empty, or above its latest epoch)
            return OffsetAndEpoch(self.end_offset, self.last_fetched_epoch())
        found = OffsetAndEpoch(got_offset, got_epoch)
        earliest = self._snapshots[0] if self._snapshots else None
        if earliest is not None and found.offset == earliest.offset and found.epoch < epoch:
            # Kafka: the epoch's start was removed with the log before the oldest snapshot
            return earliest
        return found

    @property
    def epoch_entries(self) -> list[tuple[int, int]]:
        """The leader epoch cache: ``(epoch, start offset)`` (tests, tools)."""
        return list(self._epochs.entries)

    @property
    def segment_base_offsets(self) -> list[int]:
        return [s.base_offset for s in self._local.segments]

    # ------------------------------------------------------------------ data

    def append_as_leader(self, records: list[bytes], epoch: int, timestamp_ms: int) -> AppendInfo:
        self._check_open()
        if not records:
            raise ValueError("a leader append needs at least one record")
        self._check_epoch(epoch)
        base = self.end_offset
        batch = build_batch([(None, r, [], timestamp_ms) for r in records], base_offset=base,
                            partition_leader_epoch=epoch)
        h = parse_header(batch)
        self._append(batch, [(0, h)])
        return AppendInfo(base, h.last_offset)

    def append_control_as_leader(self, batch: bytes, epoch: int) -> AppendInfo:
        """Append one prebuilt batch (the LeaderChangeMessage of a new leader): its base offset
        and leader epoch are patched (the CRC covers neither). ``batch`` must be exactly one
        CRC-valid batch."""
        self._check_open()
        self._check_epoch(epoch)
        found = _complete_batches(batch)
        if len(found) != 1 or found[0][1].size != len(batch):
            raise ValueError("append_control_as_leader takes exactly one whole batch")
        verify_crc(batch, 0, found[0][1])
        data = bytearray(batch)
        base = self.end_offset
        patch_base_offset(data, 0, base)
        patch_leader_epoch(data, 0, epoch)
        h = found[0][1]._replace(base_offset=base, partition_leader_epoch=epoch)
        self._append(bytes(data), [(0, h)])
        return AppendInfo(base, h.last_offset)

    def append_as_follower(self, batches: bytes) -> AppendInfo | None:
        """Appends the complete batches of ``batches`` (a trailing partial one is ignored, as in
        a fetch response cut at its size limit). Each must be CRC-valid, contiguous from
        ``end_offset``, with epochs never decreasing."""
        self._check_open()
        found = _complete_batches(batches)
        if not found:
            return None
        expected = self.end_offset
        epoch = self.last_fetched_epoch()
        for pos, h in found:
            if h.base_offset != expected:
                raise ValueError(f"batch at offset {h.base_offset} does not follow the log end {expected}")
            if h.partition_leader_epoch < epoch:
                raise ValueError(f"batch at offset {h.base_offset} has epoch {h.partition_leader_epoch} "
                                 f"below the log's epoch {epoch}")
            verify_crc(batches, pos, h)
            expected, epoch = h.next_offset, h.partition_leader_epoch
        end = found[-1][0] + found[-1][1].size
        self._append(bytes(batches[:end]), found)
        return AppendInfo(found[0][1].base_offset, found[-1][1].last_offset)

    def _check_epoch(self, epoch: int) -> None:
        current = self.last_fetched_epoch()
        if epoch < 0 or epoch < current:
            raise ValueError(f"cannot append at epoch {epoch}: the log is at epoch {current}")

    def _append(self, data: bytes, batches: list[tuple[int, BatchHeader]]) -> None:
        local = self._local
        last = batches[-1][1].last_offset
        max_ts, offset_of_max_ts = -1, batches[0][1].base_offset
        for _, h in batches:
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max_ts = h.max_timestamp, h.base_offset
        with self._storage("append"):
            if local.should_roll(len(data), max_ts, last, self.clock.time_ms()):
                self._roll()
            local.append(bytearray(data), batches, last, max_ts, offset_of_max_ts)
        for _, h in batches:
            self._epochs.assign(h.partition_leader_epoch, h.base_offset)

    def _roll(self) -> None:
        self._write_epoch_file()  # correct below the new recovery point before it is checkpointed
        self._local.roll()
        self._write_checkpoints()

    def read(self, offset: int, max_bytes: int) -> bytes:
        self._check_open()
        if not self._log_start <= offset <= self.end_offset:
            raise ValueError(f"offset {offset} is outside the log [{self._log_start}, {self.end_offset}]")
        if offset == self.end_offset:
            return b""
        with self._storage("read"):
            data = self._local.read(offset, max_bytes, None, True)
            try:
                return data.read_bytes()
            finally:
                data.close()

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= ``offset`` (durably, see the module
        docstring). ``offset`` below the high watermark, or inside a batch that starts below it,
        raises ValueError."""
        self._check_open()
        if offset >= self.end_offset:
            return
        if offset < self._high_watermark:
            raise ValueError(f"cannot truncate to {offset}, below the high watermark {self._high_watermark}")
        cut = offset
        head = self.read(offset, 1)
        if head:
            cut = min(offset, parse_header(head).base_offset)
        if cut < self._high_watermark:
            raise ValueError(f"cannot truncate to {offset}: its batch starts at {cut}, below the high "
                             f"watermark {self._high_watermark}")
        with self._storage("truncation"):
            local = self._local
            if self._written_offsets is None or self._written_offsets[0] > cut:
                local.recovery_point = min(local.recovery_point, cut)
                self._write_checkpoints(epochs=False)
            local.truncate_to(cut)
            fsync_dir(self.directory)  # the later segments' deletion first, then the cut
            local.active_segment.flush()
            self._epochs.truncate_from_end(self.end_offset)
            self._write_checkpoints()

    def flush(self) -> None:
        self._check_open()
        with self._storage("flush"):
            self._local.flush()

    # ------------------------------------------------------------------ snapshots

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return self._snapshots[-1] if self._snapshots else None

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        return self._snapshots[0] if self._snapshots else None

    @property
    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        return list(self._snapshots)

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """Write the snapshot file (see the module docstring). An id that exists already is left
        as it is; one below the log start offset, or ``data`` that is not whole CRC-valid
        batches, raises ValueError."""
        self._check_open()
        if snapshot_id in self._snapshots:
            return
        if snapshot_id.offset < self._log_start or snapshot_id.epoch < 0:
            raise ValueError(f"invalid snapshot id {snapshot_id}: the log starts at {self._log_start}")
        batches = list(iter_batches(data))
        for pos, h in batches:
            verify_crc(data, pos, h)
        now = self.clock.time_ms()
        header = _control_batch(CONTROL_SNAPSHOT_HEADER, struct.pack(">hqb", 0, self._last_timestamp_before(
            snapshot_id.offset), 0), 0, snapshot_id.epoch, now)
        footer_offset = batches[-1][1].next_offset if batches else 1
        footer = _control_batch(CONTROL_SNAPSHOT_FOOTER, struct.pack(">hb", 0, 0), footer_offset,
                                snapshot_id.epoch, now)
        path = self.directory / snapshot_file_name(snapshot_id)
        part = path.with_name(path.name[: -len(SNAPSHOT_SUFFIX)] + PARTIAL_SNAPSHOT_SUFFIX)
        with self._storage("snapshot write"):
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                for chunk in (header, data, footer):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(part, path)
            fsync_dir(self.directory)
        self._snapshots = sorted([*self._snapshots, snapshot_id])

    def _last_timestamp_before(self, offset: int) -> int:
        """Kafka's lastContainedLogTimestamp: the timestamp of the batch holding ``offset - 1``
        if the log still has it, else -1."""
        if not self._log_start <= offset - 1 < self.end_offset:
            return -1
        return parse_header(self.read(offset - 1, 1)).max_timestamp

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> bytes | None:
        """The batches given to :meth:`create_snapshot`; None if there is no such snapshot.
        A damaged file raises RaftStorageError."""
        if snapshot_id not in self._snapshots:
            return None
        path = self.directory / snapshot_file_name(snapshot_id)
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise RaftStorageError(f"cannot read the snapshot {path}: {e}") from e
        try:
            batches = list(iter_batches(raw))
            for pos, h in batches:
                verify_crc(raw, pos, h)
            if len(batches) < 2:
                raise CorruptRecordError("no header and footer")
            (hpos, head), (fpos, foot) = batches[0], batches[-1]
            if not (head.is_control and control_type(raw, hpos, head) == CONTROL_SNAPSHOT_HEADER):
                raise CorruptRecordError("it does not start with a SnapshotHeaderRecord")
            if not (foot.is_control and control_type(raw, fpos, foot) == CONTROL_SNAPSHOT_FOOTER):
                raise CorruptRecordError("it does not end with a SnapshotFooterRecord")
        except CorruptRecordError as e:
            raise RaftStorageError(f"the snapshot {path} is damaged: {e}") from e
        return raw[hpos + head.size:fpos]

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Kafka's ``deleteBeforeSnapshot``: if the snapshot exists and lies after the log start
        offset, the log start moves to it and the segments and snapshots wholly before it are
        deleted. A snapshot past the log end raises ValueError (that is
        :meth:`truncate_to_latest_snapshot`'s case)."""
        self._check_open()
        if snapshot_id not in self._snapshots or snapshot_id.offset <= self._log_start:
            return
        if snapshot_id.offset > self.end_offset:
            raise ValueError(f"snapshot {snapshot_id} is past the log end {self.end_offset}")
        new_start = snapshot_id.offset
        with self._storage("deletion before a snapshot"):
            self._write_epoch_file()  # whole, as the recovery point written next requires
            self._log_start = new_start
            self._high_watermark = max(self._high_watermark, new_start)
            self._write_checkpoints(epochs=False)  # the log start first: a crash from here on
            self._epochs.truncate_from_start(new_start)  # has the next open complete the rest
            self._epochs.truncate_from_end(self.end_offset)  # as an open would (S == end: none)
            self._write_epoch_file()
            segs = self._local.segments
            doomed = [s for i, s in enumerate(segs[:-1]) if segs[i + 1].base_offset <= new_start]
            if doomed:
                self._local.remove_segments(doomed)
                for seg in doomed:
                    seg.delete_renamed()
            self._forget_snapshots_before(new_start)

    def truncate_to_latest_snapshot(self) -> bool:
        self._check_open()
        return self._truncate_to_latest_snapshot()

    def _truncate_to_latest_snapshot(self) -> bool:
        latest = self.latest_snapshot_id()
        last_epoch = self.last_fetched_epoch()
        if latest is None or not (
            latest.epoch > last_epoch or (latest.epoch == last_epoch and latest.offset > self.end_offset)
        ):
            return False
        with self._storage("truncation to a snapshot"):
            self._log_start = latest.offset
            self._write_checkpoints()  # the new start first: an interrupted restart is redone on open
            self._local.truncate_fully_and_start_at(latest.offset)
            self._epochs = LeaderEpochCache()
            self._high_watermark = latest.offset
            self._write_checkpoints()
            self._forget_snapshots_before(latest.offset)
        return True

    def _forget_snapshots_before(self, offset: int) -> None:
        for s in [s for s in self._snapshots if s.offset < offset]:
            with contextlib.suppress(FileNotFoundError):
                (self.directory / snapshot_file_name(s)).unlink()
        self._snapshots = [s for s in self._snapshots if s.offset >= offset]

    # ------------------------------------------------------------------ checkpoints

    def _write_epoch_file(self) -> None:
        content = self._epochs.to_checkpoint()
        if content != self._written_epochs:
            replace_file(self.directory / LEADER_EPOCH_FILE, content)
            self._written_epochs = content

    def _write_checkpoints(self, *, epochs: bool = True) -> None:
        """The epoch file (first: it must be right below the recovery point), then the recovery
        point and log start offset, each only if changed."""
        if epochs:
            self._write_epoch_file()
        values = (self._local.recovery_point, self._log_start)
        if values != self._written_offsets:
            old = self._written_offsets
            for i, name in enumerate((RECOVERY_POINT_FILE, LOG_START_FILE)):
                if old is None or old[i] != values[i]:
                    _write_checkpoint(self.directory / name, METADATA_TOPIC, 0, values[i])
            fsync_dir(self.directory)
            self._written_offsets = values

    # ------------------------------------------------------------------ helpers

    @contextlib.contextmanager
    def _storage(self, what: str) -> Iterator[None]:
        try:
            yield
        except OSError as e:
            raise RaftStorageError(f"{what} in the metadata log {self.directory} failed: {e}") from e

    def _check_open(self) -> None:
        if self.closed:
            raise RaftStorageError(f"the metadata log in {self.directory} is closed")

    def __repr__(self) -> str:
        return (f"MetadataLog({str(self.directory)!r}, start={self._log_start}, hw={self._high_watermark}, "
                f"flushed={self.flushed_offset}, end={self.end_offset})")


def _control_batch(ctype: int, value: bytes, base_offset: int, epoch: int, timestamp_ms: int) -> bytes:
    """One control record (key ``version i16 | type i16``) in a batch, as Kafka's
    MemoryRecordsBuilder writes SnapshotHeader/SnapshotFooter records."""
    return build_batch([(struct.pack(">hh", 0, ctype), value, [], timestamp_ms)], base_offset=base_offset,
                       control=True, partition_leader_epoch=epoch)


def _complete_batches(buf: bytes) -> list[tuple[int, BatchHeader]]:
    """``(position, header)`` of the whole batches at the start of ``buf``; a truncated last batch
    is left out, bad framing raises CorruptRecordError."""
    out = []
    pos = 0
    while len(buf) - pos >= BATCH_OVERHEAD:
        h = parse_header(buf, pos)
        if h.magic != 2 or h.size < BATCH_OVERHEAD or h.last_offset_delta < 0:
            raise CorruptRecordError(f"invalid record batch at position {pos}")
        if pos + h.size > len(buf):
            break
        out.append((pos, h))
        pos += h.size
    return out


def _end_at_first_gap(local: LocalLog) -> None:
    """A Raft log has no gaps: if a segment does not start where the one before it ends (a
    later segment whose deletion a crash undid), the log ends there. ``LocalLog.load`` cannot
    check this itself: a compacted partition's segments legitimately have gaps."""
    segs = local.segments
    for prev, seg in itertools.pairwise(segs):
        end = prev.read_next_offset()
        if seg.base_offset != end:
            local.truncate_to(min(end, seg.base_offset))
            fsync_dir(local.directory)
            local.active_segment.flush()
            return


def _headers(local: LocalLog, from_offset: int) -> Iterator[BatchHeader]:
    """Batch headers of ``local`` from the segment holding ``from_offset`` on."""
    for seg in local.segments[local.segment_index_for(from_offset):]:
        for _, h in seg.iter_headers():
            if h.last_offset >= from_offset:
                yield h


def _scan_snapshots(directory: Path) -> list[OffsetAndEpoch]:
    """The complete snapshots in ``directory``; partial and deleted ones are removed."""
    found = []
    for entry in os.scandir(directory):
        name = entry.name
        if name.endswith((PARTIAL_SNAPSHOT_SUFFIX, DELETED_SNAPSHOT_SUFFIX)):
            os.unlink(entry.path)
        elif name.endswith(SNAPSHOT_SUFFIX):
            sid = _parse_snapshot_name(name, SNAPSHOT_SUFFIX)
            if sid is not None:
                found.append(sid)
    return sorted(found)


if TYPE_CHECKING:

    def _implements_raft_log(log: MetadataLog) -> RaftLog:  # mypy checks the structural match
        return log
