"""The ordered segments of one partition on local disk (Kafka's LocalLog + LogLoader).

Theory of operation
-------------------
Segments are kept sorted by base offset; the last one is the *active* segment that receives
appends. ``recovery_point`` is the offset below which every byte is known to be fsynced.

Loading (:meth:`LocalLog.load`):

1. Leftovers of interrupted operations are removed: ``*.deleted`` (rename-then-delete was cut
   short), ``*.tmp``, ``*.cleaned`` (a compaction that had not committed) and index files whose
   ``.log`` is gone. A ``<base>.log.swap`` is a compaction that *had* committed (see
   :meth:`LocalLog.replace_segments`): it is validated, every old segment whose base offset lies
   in its offset range is deleted, and it is renamed to ``<base>.log`` — the swap is completed.
2. After a clean shutdown every segment is trusted; its indexes are only sanity-checked and rebuilt
   (by a full :meth:`LogSegment.recover`) if the check fails or a file is missing.
3. After an unclean shutdown, segments below the one holding the recovery point are treated as
   in (2); that segment and every later one are recovered (re-validated batch by batch). The
   first segment that had to be truncated ends the log: all later segments are deleted, since
   offsets after a hole cannot be trusted.

Offsets are not re-checked across segment boundaries beyond "base offsets increase".
"""

from __future__ import annotations

import contextlib
import os
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from strom.clock import Clock
from strom.config import LogConfig
from strom.durable_file import fsync_dir
from strom.log.errors import CorruptIndexError, CorruptRecordError
from strom.log.faults import crash_point
from strom.log.file_cache import CachedFile
from strom.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)
from strom.protocol.records import BatchHeader


class FileRegion(NamedTuple):
    """``length`` bytes at ``position`` of the open file ``fd`` (for os.sendfile / os.pread).

    The fd is a duplicate owned by whoever holds the :class:`FetchData` (segment descriptors
    themselves may be closed by the file cache at any time): it stays readable after the
    segment is renamed, deleted or evicted, and must be closed (:meth:`FetchData.close`)."""

    fd: int
    position: int
    length: int


@dataclass(frozen=True)
class FetchData:
    regions: list[FileRegion]
    size: int

    def read_bytes(self) -> bytes:
        parts = []
        for r in self.regions:
            got = os.pread(r.fd, r.length, r.position)
            parts.append(got)
        return b"".join(parts)

    def close(self) -> None:
        """Close the regions' descriptors (unless handed on, e.g. to a fetch response)."""
        for r in self.regions:
            with contextlib.suppress(OSError):
                os.close(r.fd)
        self.regions.clear()


EMPTY_FETCH = FetchData([], 0)


def _offset_of(name: str, suffix: str) -> int | None:
    stem = name[: -len(suffix)]
    return int(stem) if stem.isdigit() else None


class LocalLog:
    def __init__(self, directory: Path, config: LogConfig, clock: Clock, segments: list[LogSegment],
                 recovery_point: int, next_offset: int) -> None:
        self.directory = directory
        self.config = config
        self.clock = clock
        self.segments = segments
        self._bases = [s.base_offset for s in segments]
        self.recovery_point = recovery_point
        self.log_end_offset = next_offset
        self.last_flush_ms = clock.monotonic_ms()
        # what load() re-validated batch by batch (an unclean shutdown's tail): segments, bytes
        self.recovered_segments = 0
        self.recovered_bytes = 0
        self.recovered_from = -1  # the base offset of the first segment recovered

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(
        cls,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        *,
        recovery_point: int,
        clean_shutdown: bool,
        log_start_offset: int,
    ) -> LocalLog:
        directory.mkdir(parents=True, exist_ok=True)
        log_bases: set[int] = set()
        swap_bases: list[int] = []
        for entry in os.scandir(directory):
            name = entry.name
            if name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                base = _offset_of(name[: -len(SWAP_SUFFIX)], LOG_SUFFIX)
                if base is not None:
                    swap_bases.append(base)
                    continue
            if name.endswith((DELETED_SUFFIX, ".tmp", CLEANED_SUFFIX, SWAP_SUFFIX)):
                os.unlink(entry.path)
            elif name.endswith(LOG_SUFFIX):
                base = _offset_of(name, LOG_SUFFIX)
                if base is not None:
                    log_bases.add(base)
        for base in sorted(swap_bases):
            cls._complete_swap(directory, config, clock, base, log_bases)
        for entry in os.scandir(directory):
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                if entry.name.endswith(suffix):
                    base = _offset_of(entry.name, suffix)
                    if base is not None and base not in log_bases:
                        os.unlink(entry.path)

        def open_segment(base: int) -> LogSegment:
            return LogSegment.open(directory, base, index_interval_bytes=config.index_interval_bytes,
                                   max_index_size=config.segment_index_bytes, clock=clock)

        bases = sorted(log_bases)
        # index of the first segment that needs recovery (len(bases) if none)
        first_unflushed = len(bases) if clean_shutdown else max(0, bisect_right(bases, recovery_point) - 1)
        segments: list[LogSegment] = []
        recovered_any = False
        recovered_segments = recovered_bytes = 0
        for i, base in enumerate(bases):
            seg = open_segment(base)
            if i >= first_unflushed:
                recovered_any = True
                recovered_segments += 1
                recovered_bytes += seg.size
                truncated = seg.recover()
                segments.append(seg)
                if truncated:
                    for later in bases[i + 1:]:
                        open_segment(later).delete()
                    break
            else:
                try:
                    seg.sanity_check()
                except (CorruptIndexError, CorruptRecordError):
                    seg.recover()
                segments.append(seg)
        # an empty segment followed by others is an interrupted roll; drop empty non-active ones
        kept = [s for s in segments[:-1] if s.size > 0] + segments[-1:]
        for s in segments[:-1]:
            if s.size == 0:
                s.delete()
        segments = kept
        if not segments:
            segments = [open_segment(log_start_offset)]
            segments[0].recover()
        next_offset = segments[-1].read_next_offset()
        log = cls(directory, config, clock, segments, min(recovery_point, next_offset), next_offset)
        log.recovered_segments, log.recovered_bytes = recovered_segments, recovered_bytes
        if recovered_any:
            log.recovered_from = bases[first_unflushed] if bases else log_start_offset
            # recovery read the data but did not make it durable: do that once, then trust it
            first_recovered = bases[first_unflushed]
            for seg in segments:
                if seg.base_offset >= first_recovered:
                    seg.flush()
            log.recovery_point = next_offset
        return log

    @staticmethod
    def _complete_swap(directory: Path, config: LogConfig, clock: Clock, base: int, log_bases: set[int]
                       ) -> None:
        """Finish an interrupted :meth:`replace_segments` whose ``<base>.log.swap`` exists."""
        seg = LogSegment.open(directory, base, index_interval_bytes=config.index_interval_bytes,
                              max_index_size=config.segment_index_bytes, clock=clock, file_suffix=SWAP_SUFFIX)
        seg.recover()  # it was fsynced before the rename: this only rebuilds the indexes
        end = seg.read_next_offset()
        for old in sorted(b for b in log_bases if base <= b < end):
            prefix = f"{old:020d}"
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(directory / (prefix + suffix))
            log_bases.discard(old)
        seg.flush()
        seg.change_file_suffixes(SWAP_SUFFIX, "")
        seg.close_handles()
        fsync_dir(directory)
        log_bases.add(base)

    # ------------------------------------------------------------------ queries

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def segment_index_for(self, offset: int) -> int:
        """Index of the segment with the largest base offset <= ``offset`` (0 if none)."""
        return max(0, bisect_right(self._bases, offset) - 1)

    # ------------------------------------------------------------------ append / roll

    def should_roll(self, append_size: int, max_timestamp: int, last_offset: int, now_ms: int) -> bool:
        cfg = self.config
        segment_ms = cfg.segment_ms
        if cfg.compact_enabled and cfg.max_compaction_lag_ms > 0:
            # Kafka's LogConfig.maxSegmentMs: the active segment is never cleaned, so it must roll
            # in time for max.compaction.lag.ms to be honoured
            segment_ms = min(segment_ms, cfg.max_compaction_lag_ms)
        return self.active_segment.should_roll(
            append_size=append_size, max_timestamp=max_timestamp, last_offset=last_offset, now_ms=now_ms,
            segment_bytes=cfg.segment_bytes, segment_ms=segment_ms,
        )

    def roll(self, *, sync: bool = True) -> LogSegment:
        """Start a new active segment at the log end offset; the old one is finalised and (with
        ``sync``) fsynced, with the directory, and the recovery point moves to the new base offset.
        ``sync=False``: nothing is fsynced and the recovery point stays; the caller makes the old
        segment durable later (Kafka's roll, which leaves that to its asynchronous flush-log
        task) and then moves the recovery point (:meth:`flush_done`)."""
        new_base = self.log_end_offset
        old = self.active_segment
        if old.base_offset == new_base and old.size == 0:
            return old
        old.on_become_inactive()
        if sync:
            old.flush()
        seg = LogSegment.open(self.directory, new_base, index_interval_bytes=self.config.index_interval_bytes,
                              max_index_size=self.config.segment_index_bytes, clock=self.clock)
        seg.recover()  # a fresh (empty) segment: this only resets state and creates the files
        self.segments.append(seg)
        self._bases.append(new_base)
        if sync:
            fsync_dir(self.directory)
            self.recovery_point = max(self.recovery_point, new_base)
        return seg

    def append(self, records: bytes | bytearray | memoryview, batches: list[tuple[int, BatchHeader]],
               last_offset: int, largest_timestamp: int, offset_of_largest_timestamp: int) -> None:
        self.active_segment.append(records, largest_timestamp, offset_of_largest_timestamp, batches)
        self.log_end_offset = last_offset + 1

    def flush(self, offset: int | None = None, *, sync: bool = True) -> None:
        """fsync every segment holding offsets in ``[recovery_point, offset)`` (default: LEO).
        ``sync=False``: only move the recovery point (the caller syncs the file system)."""
        upto = self.log_end_offset if offset is None else offset
        if upto <= self.recovery_point:
            self.last_flush_ms = self.clock.monotonic_ms()
            return
        new_segment = False
        for seg in self.segments[self.segment_index_for(self.recovery_point):]:
            if seg.base_offset >= upto:
                break
            if sync:
                seg.flush_log()
            new_segment = new_segment or seg.base_offset >= self.recovery_point
        if new_segment and sync:
            # Kafka's LocalLog.flush: a segment created since the last flush (the first one of a
            # new log) has a name only the directory's fsync makes durable
            fsync_dir(self.directory)
        self.recovery_point = upto
        self.last_flush_ms = self.clock.monotonic_ms()

    def flush_plan(self) -> tuple[int, list[CachedFile], Path | None]:
        """What :meth:`flush` would sync, for a flush done in another thread: the offset it
        makes durable, the segment files to fsync and the directory to fsync (a segment new
        since the last flush), or nothing. Cheap: no system call."""
        upto = self.log_end_offset
        if upto <= self.recovery_point:
            return upto, [], None
        files: list[CachedFile] = []
        new_segment = False
        for seg in self.segments[self.segment_index_for(self.recovery_point):]:
            if seg.base_offset >= upto:
                break
            files.append(seg.log_file)
            new_segment = new_segment or seg.base_offset >= self.recovery_point
        return upto, files, (self.directory if new_segment else None)

    def flush_done(self, upto: int) -> None:
        """A flush planned by :meth:`flush_plan` is durable: move the recovery point."""
        if upto > self.recovery_point:
            self.recovery_point = min(upto, self.log_end_offset)
        self.last_flush_ms = self.clock.monotonic_ms()

    # ------------------------------------------------------------------ read

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None, min_one_message: bool
             ) -> FetchData:
        regions: list[FileRegion] = []
        try:
            return self._read(regions, start_offset, max_bytes, max_offset, min_one_message)
        except BaseException:
            FetchData(regions, 0).close()
            raise

    def _read(self, regions: list[FileRegion], start_offset: int, max_bytes: int, max_offset: int | None,
              min_one_message: bool) -> FetchData:
        total = 0
        remaining = max_bytes
        i = self.segment_index_for(start_offset)
        offset = start_offset
        while i < len(self.segments):
            seg = self.segments[i]
            next_base = self._bases[i + 1] if i + 1 < len(self.segments) else None
            max_pos: int | None = None
            last_segment = next_base is None
            file = seg.log_file
            fd = file.acquire()  # pinned for the whole segment: one cache lookup, not one per pread
            try:
                if max_offset is not None and (next_base is None or max_offset < next_base):
                    found = seg.translate_offset(max_offset, 0, fd)
                    max_pos = found[0] if found is not None else seg.size
                    last_segment = True
                sl = seg.read(offset, remaining, max_pos, min_one_message and not regions, fd)
                if sl is not None and sl.length:
                    regions.append(FileRegion(os.dup(fd), sl.position, sl.length))
            finally:
                file.release()
            if sl is not None:
                if sl.length == 0:
                    break
                total += sl.length
                remaining -= sl.length
                end = seg.size if max_pos is None else max_pos
                if remaining <= 0 or sl.position + sl.length < end:
                    break
            if last_segment or next_base is None:
                break
            offset = next_base
            i += 1
        return FetchData(regions, total)

    # ------------------------------------------------------------------ retention / compaction

    def remove_segments(self, doomed: list[LogSegment], *, sync: bool = True, rename: bool = True) -> None:
        """Take ``doomed`` (never the active segment) out of the log and rename their files to
        ``*.deleted``. The descriptors stay open: the caller closes and unlinks them later
        (:meth:`LogSegment.delete_renamed`) once no reader can still hold them. ``sync=False``:
        the renames are not made durable here (the next directory fsync does it; a crash before
        it brings the segments back, and the next retention pass removes them again).
        ``rename=False``: only out of the list; the caller renames them (on another thread)."""
        ids = {id(s) for s in doomed}
        if id(self.active_segment) in ids:
            raise ValueError("the active segment cannot be removed")
        self.segments = [s for s in self.segments if id(s) not in ids]
        self._bases = [s.base_offset for s in self.segments]
        if not rename:
            return
        for seg in doomed:
            seg.rename_to_deleted()
        if sync:
            fsync_dir(self.directory)

    def replace_segments(self, new: LogSegment, old: list[LogSegment]) -> None:
        """Swap ``new`` (a cleaned segment written under ``.cleaned``, fsynced) in for the
        consecutive closed segments ``old`` (Kafka's replaceSegments). ``new`` covers exactly the
        offset range of ``old`` and has the base offset of ``old[0]``.

        Crash safety, step by step (each rename is followed by a directory fsync):

        1. ``new``: ``.cleaned`` -> ``.swap``. Before this, recovery deletes the ``.cleaned``
           files and the old segments stay; from here on, recovery *completes* the swap.
        2. every old segment: -> ``*.deleted`` (descriptors kept open for readers).
        3. ``new``: ``.swap`` -> plain name; it takes the old segments' place in the list.
        """
        if not old or old[0].base_offset != new.base_offset:
            raise ValueError("a cleaned segment must start where the segments it replaces start")
        first = next(i for i, s in enumerate(self.segments) if s is old[0])
        if self.segments[first:first + len(old)] != old or first + len(old) >= len(self.segments):
            raise ValueError("the replaced segments must be consecutive closed segments of the log")
        new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        fsync_dir(self.directory)
        crash_point("cleaner.after_swap_rename")
        for seg in old:
            seg.rename_to_deleted()
        fsync_dir(self.directory)
        crash_point("cleaner.after_old_renamed")
        new.change_file_suffixes(SWAP_SUFFIX, "")
        fsync_dir(self.directory)
        self.segments[first:first + len(old)] = [new]
        self._bases = [s.base_offset for s in self.segments]

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        for seg in self.segments:
            seg.close()

    def close_handles(self) -> None:
        for seg in self.segments:
            seg.close_handles()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset`` (Kafka's
        ``truncateFullyAndStartAt``: a Raft follower that installed a snapshot past its log end).
        Segments go last to first, so a crash part-way leaves a prefix of the old log; the new
        segment's name is durable when this returns."""
        for seg in reversed(self.segments):
            seg.delete()
        seg = LogSegment.open(self.directory, offset, index_interval_bytes=self.config.index_interval_bytes,
                              max_index_size=self.config.segment_index_bytes, clock=self.clock)
        seg.recover()  # a fresh (empty) segment: this only resets state and creates the files
        self.segments = [seg]
        self._bases = [offset]
        self.log_end_offset = offset
        self.recovery_point = offset
        fsync_dir(self.directory)

    def truncate_to(self, offset: int) -> None:
        """Remove every offset >= ``offset`` (whole batches: the batch holding ``offset`` goes)."""
        if offset >= self.log_end_offset:
            return
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().delete()
            self._bases.pop()
        seg = self.active_segment
        seg.truncate_to(offset)
        self.log_end_offset = seg.read_next_offset() if seg.size else seg.base_offset
        if len(self.segments) > 1 and seg.size == 0 and self.log_end_offset < seg.base_offset:
            self.log_end_offset = seg.base_offset
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
