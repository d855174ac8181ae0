"""One log segment: ``%020d.log`` plus its ``.index`` and ``.timeindex`` (Kafka's LogSegment).

Theory of operation
-------------------
The ``.log`` file is a concatenation of already-validated v2 record batches whose offsets were
assigned by the log. The segment never decodes records on the hot path: it only reads batch
*headers* (61 bytes) to find batch boundaries.

* append: the bytes are written with ``os.pwrite`` at the end of the file, so a reader using
  ``os.pread``/``sendfile`` on the same fd sees them as soon as ``append`` returns. Every
  ``index.interval.bytes`` of log, the batch about to be written gets an offset-index entry
  (its last offset, its position) and the time index gets the largest timestamp so far.
* read: the index gives a position at or before the batch holding ``start_offset``; headers are
  scanned forward to that batch. The result is a ``(position, length)`` slice made of whole
  batches, cut at ``max_size`` and ``max_position``.
* recover: re-validates every batch from byte 0 (length, magic, CRC32C, increasing offsets),
  rebuilds both indexes, and truncates the file at the first invalid byte.
* delete: files are renamed to ``*.deleted`` first, then unlinked (Kafka's rename-then-delete), so
  a crash mid-way leaves files the next load recognises as garbage. Retention and compaction split
  the two steps: :meth:`rename_to_deleted` keeps the file descriptors open (a pending fetch
  response may still ``sendfile`` from them) and :meth:`delete_renamed` closes and unlinks later,
  after ``file.delete.delay.ms``.
* file suffix: the cleaner writes a segment under ``<name>.cleaned`` then renames it to
  ``<name>.swap`` and finally to the plain name (:meth:`change_file_suffixes`); open file
  descriptors survive renames.
* descriptors: the three files are :class:`~strom.log.file_cache.CachedFile` objects, opened on first
  use and closed by the process-wide LRU when it is full, so an idle segment holds none. Every
  system call pins its descriptor for its duration; :meth:`dup_fd` hands out a duplicate the
  caller owns (fetch responses, the cleaner), which stays readable after renames, unlinks and
  evictions. ``*.deleted`` files are never reopened: once created, a file is opened without
  ``O_CREAT``.

Error contract: ``recover`` never raises for bad data (it truncates); ``read``/``translate_offset``
raise :class:`CorruptRecordError` only if the file changed under us; ``OSError`` propagates.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from strom.clock import Clock
from strom.log.errors import CorruptIndexError, CorruptRecordError
from strom.log.file_cache import CachedFile
from strom.log.index import OffsetIndex, TimeIndex
from strom.protocol.records import (
    BATCH_OVERHEAD,
    BatchHeader,
    decode_batch_records,
    iter_batches,
    parse_header,
    verify_crc,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

_SCAN_CHUNK = 8192
_MIB = 1 << 20
_PREFETCH_AHEAD = 8 * _MIB  # how far past a read of released pages the kernel is asked to read


class _PageCacheWindow:
    """How much of each segment's freshly written tail stays in the page cache (bytes; 0: all of
    it, as Kafka leaves it to the kernel). Set once per process from
    ``strom.log.page.cache.window.bytes`` by :func:`set_page_cache_window`.

    Behind the window, :meth:`LogSegment.append` hands the pages back with
    ``posix_fadvise(DONTNEED)`` every ``step`` bytes: the first call starts the writeback of the
    dirty pages, a later one (each range is advised again while it is less than ``recheck``
    bytes behind) drops them once clean. Freed pages are reused at once by the next writes, which
    on a virtual machine that returns free guest memory to its host (virtio free page reporting)
    costs a tenth of writing into pages the host must back anew (bench/page_cache.py); readers of
    the tail (followers, caught-up consumers) are served from the window, older reads go to the
    disk as after any eviction."""

    __slots__ = ("prefetched", "prefetcher", "recheck", "releaser", "step", "window")

    def __init__(self) -> None:
        self.window = 0
        self.step = 2 * _MIB
        self.recheck = 16 * _MIB
        # ``(fd, offset, length)``: advises the range off the caller's thread (the first
        # advice of a dirty range submits its writeback, ~1 ms per 16 MiB); None: inline
        self.releaser: Callable[[int, int, int], None] | None = None
        # the same for :meth:`prefetch` (asking for pages allocates them and submits their
        # reads, ~0.2 ms per MiB); None: inline
        self.prefetcher: Callable[[int, int, int], None] | None = None
        self.prefetched = 0  # reads of released ranges asked ahead (prefetch)

    def prefetch(self, fd: int, offset: int, length: int) -> None:
        """A read of a range this window released (with what follows it, up to
        ``_PREFETCH_AHEAD``): ask the kernel for all of it at once (``posix_fadvise(WILLNEED)``,
        which only starts the reads) before it is sent. Left to ``sendfile``, the pages are read
        back a readahead window at a time, on the event loop, and go out in pieces as they
        arrive; the receiver pays for every piece: 0.73 against 0.28 CPU-s/GiB with the advice,
        0.21 from the page cache (``bench/receive_floor.py --kinds
        recv-cached,recv-cold,recv-willneed``). Asking for the next reads too keeps the disk ahead
        of a consumer catching up. Never raises."""
        self.prefetched += 1
        if self.prefetcher is not None:
            self.prefetcher(fd, offset, length)
            return
        advise_willneed(fd, offset, length)

    def release(self, fd: int, offset: int, length: int) -> None:
        """Hand ``length`` bytes at ``offset`` of ``fd`` back to the kernel; never raises."""
        if self.releaser is not None:
            self.releaser(fd, offset, length)
            return
        advise_dontneed(fd, offset, length)


def advise_dontneed(fd: int, offset: int, length: int) -> None:
    """``posix_fadvise(DONTNEED)``; advice only: an error is ignored (the data is written either way)."""
    with contextlib.suppress(OSError):
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def advise_willneed(fd: int, offset: int, length: int) -> None:
    """``posix_fadvise(WILLNEED)``: start reading the range into the page cache; errors ignored."""
    with contextlib.suppress(OSError):
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)


def set_page_cache_releaser(
    releaser: Callable[[int, int, int], None] | None,
    prefetcher: Callable[[int, int, int], None] | None = None,
) -> None:
    """Install (or remove, None) what advises the pages behind the window away, and what asks
    released pages back: see :class:`strom.server.page_cache_releaser.PageCacheReleaser`."""
    PAGE_CACHE.releaser = releaser
    PAGE_CACHE.prefetcher = prefetcher


PAGE_CACHE = _PageCacheWindow()


def set_page_cache_window(nbytes: int, step: int = 2 * _MIB) -> None:
    """Keep ``nbytes`` of every segment's tail in the page cache, release the rest as it is
    written, every ``step`` bytes (at most a quarter of the window, or a MiB; ``nbytes <= 0``: never
    release, the kernel decides). A range is advised again up to 16 MiB (at least 4 steps)
    behind, by when its writeback has finished and its pages can be dropped."""
    if nbytes <= 0 or not hasattr(os, "posix_fadvise"):
        PAGE_CACHE.window = 0
        return
    PAGE_CACHE.window = nbytes
    PAGE_CACHE.step = max(64 * 1024, min(step, max(_MIB, nbytes // 4)))
    PAGE_CACHE.recheck = max(4 * PAGE_CACHE.step, 16 * _MIB)
_RECOVER_CHUNK = 1 << 20
_MAX_RELATIVE_OFFSET = 0x7FFFFFFF


def filename_prefix(offset: int) -> str:
    return f"{offset:020d}"


@dataclass(frozen=True)
class LogSlice:
    """A run of whole batches in a segment's ``.log``: ``length`` bytes at ``position``."""

    position: int
    length: int
    first_batch_offset: int


class LogSegment:
    """A segment of the log. Create with :meth:`open`; its files are opened as needed (see the
    module docstring) until :meth:`close`."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        clock: Clock,
        file_suffix: str = "",
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        prefix = filename_prefix(base_offset)
        self.file_suffix = file_suffix
        self.log_path = directory / (prefix + LOG_SUFFIX + file_suffix)
        self.index_path = directory / (prefix + INDEX_SUFFIX + file_suffix)
        self.time_index_path = directory / (prefix + TIME_INDEX_SUFFIX + file_suffix)
        self._file = CachedFile(self.log_path)
        self.size = self._file.size()
        self.offset_index = OffsetIndex(self.index_path, base_offset, max_index_size)
        self.time_index = TimeIndex(self.time_index_path, base_offset, max_index_size)
        self._bytes_since_last_index_entry = 0
        # largest timestamp in the segment and the base offset of the first batch that has it
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp = -1
        self.rolling_based_timestamp: int | None = None
        self.created_ms = clock.time_ms()
        self._clock = clock
        self.closed = False
        # the page cache behind the window is released up to here (PAGE_CACHE); the next release
        # once the segment reaches _release_at
        self._released_upto = 0
        self._release_at = 0
        self._prefetched_upto = 0  # released pages asked back up to here (prefetch)

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int = 4096,
        max_index_size: int = 10 * 1024 * 1024,
        clock: Clock,
        file_suffix: str = "",
    ) -> LogSegment:
        """Open (or create) the segment's files. Does not validate: call :meth:`sanity_check`
        (trusted, after a clean shutdown) or :meth:`recover`. ``file_suffix`` (``.cleaned``,
        ``.swap``) is appended to every file name."""
        return cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            max_index_size=max_index_size,
            clock=clock,
            file_suffix=file_suffix,
        )

    @property
    def fd(self) -> int:
        """The ``.log`` descriptor as open right now, unpinned: it may be closed by the next open
        of any log file. For single-threaded tests and tools only; use :meth:`dup_fd`."""
        fd = self._file.acquire()
        self._file.release()
        return fd

    @property
    def log_file(self) -> CachedFile:
        return self._file

    def dup_fd(self) -> int:
        """A duplicate of the ``.log`` descriptor, owned (and closed) by the caller."""
        return self._file.dup()

    def file_size(self) -> int:
        """Size of the ``.log`` on disk (may exceed :attr:`size` after a failed write)."""
        return self._file.size()

    def truncate_file(self, size: int) -> None:
        self._file.truncate(size)

    def last_modified_ms(self) -> int:
        return os.stat(self.log_path).st_mtime_ns // 1_000_000

    def sanity_check(self) -> None:
        """Check the indexes of a segment that is trusted (clean shutdown, or flushed before the
        recovery point) and load its timestamps. Raises CorruptIndexError if they are missing
        or inconsistent; the caller then runs :meth:`recover`."""
        if not (self.index_path.exists() and self.time_index_path.exists()):
            raise CorruptIndexError(f"index files of segment {self.base_offset} are missing")
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check()
        # an indexed position must be a batch boundary, and the batches after the last entry
        # must end exactly at the end of the file (catches a torn tail in a "trusted" segment)
        off, pos = self.offset_index.lookup(self.offset_index.last_offset)
        if len(self.offset_index):
            h = self._header_at(pos)
            if h is None or h.last_offset != off:
                raise CorruptIndexError(f"index of segment {self.base_offset} points inside a batch")
        end = pos
        try:
            for p, h in self.iter_headers(pos):
                if h.magic != 2 or p + h.size > self.size:
                    break
                end = p + h.size
        except CorruptRecordError:
            pass
        if end != self.size:
            raise CorruptIndexError(f"segment {self.base_offset} does not end on a batch boundary")
        self.max_timestamp_so_far, self.offset_of_max_timestamp = self.time_index.last_entry
        if self.max_timestamp_so_far < 0:
            self.offset_of_max_timestamp = -1
        if self.size:
            first = self._header_at(0)
            if first is None:
                raise CorruptIndexError(f"segment {self.base_offset} does not start with a batch")
            self.rolling_based_timestamp = first.max_timestamp

    def read_next_offset(self) -> int:
        """The offset after the last batch in this segment (scans headers from the last index
        entry), or ``base_offset`` if empty."""
        _, pos = self.offset_index.lookup(self.offset_index.last_offset)
        nxt = self.base_offset
        for _, h in self.iter_headers(pos):
            nxt = h.next_offset
        return nxt

    def flush(self) -> None:
        """fsync the files written since their last fsync."""
        self._file.flush()
        self.offset_index.flush()
        self.time_index.flush()

    def flush_log(self) -> None:
        self._file.flush()

    def on_become_inactive(self) -> None:
        """Called when a newer segment takes over: make the time index end with the segment's
        largest timestamp (Kafka's onBecomeInactiveSegment)."""
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp, True)

    def create_index_files(self) -> None:
        """Create the index files if missing (Kafka's layout has all three from the start; their
        descriptors are only opened to write)."""
        self.offset_index.create_file()
        self.time_index.create_file()

    def close(self) -> None:
        if self.closed:
            return
        self.on_become_inactive()
        self.offset_index.close()
        self.time_index.close()
        self._file.close()
        self.closed = True

    def close_handles(self) -> None:
        """Close the files without touching them (used before deleting)."""
        if self.closed:
            return
        self.offset_index.close()
        self.time_index.close()
        self._file.close()
        self.closed = True

    def delete(self) -> None:
        """Rename every file to ``*.deleted`` then unlink it."""
        self.close_handles()
        for path in (self.log_path, self.index_path, self.time_index_path):
            doomed = path.with_name(path.name + DELETED_SUFFIX)
            try:
                os.rename(path, doomed)
            except FileNotFoundError:
                continue
            os.unlink(doomed)

    @property
    def paths(self) -> tuple[Path, Path, Path]:
        return self.log_path, self.index_path, self.time_index_path

    def change_file_suffixes(self, old: str, new: str) -> None:
        """Rename the three files from suffix ``old`` to ``new`` (Kafka's changeFileSuffixes).
        The ``.log`` is renamed last. Open descriptors stay valid."""
        if self.file_suffix != old:
            raise ValueError(f"segment {self.base_offset} has suffix {self.file_suffix!r}, not {old!r}")
        renamed: list[Path] = []
        for path in (self.index_path, self.time_index_path, self.log_path):
            stem = path.name[: len(path.name) - len(old)] if old else path.name
            target = path.with_name(stem + new)
            try:
                os.rename(path, target)
            except FileNotFoundError:
                if path is self.log_path:
                    raise
            renamed.append(target)
        self.index_path, self.time_index_path, self.log_path = renamed
        self.offset_index.path = self.index_path
        self.time_index.path = self.time_index_path
        self._file.path = self.log_path
        self.file_suffix = new

    def rename_to_deleted(self) -> None:
        """First half of an asynchronous delete: rename the files to ``*.deleted`` but keep the
        descriptors open, so readers that hold them (fetch responses, the cleaner) still work.
        Finish with :meth:`delete_renamed`."""
        if self.file_suffix.endswith(DELETED_SUFFIX):
            return
        self.change_file_suffixes(self.file_suffix, self.file_suffix + DELETED_SUFFIX)

    def delete_renamed(self) -> None:
        """Second half: close the descriptors and unlink the (renamed) files."""
        self.close_handles()
        for path in self.paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    # ------------------------------------------------------------------ append

    def can_hold_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= _MAX_RELATIVE_OFFSET

    def should_roll(
        self,
        *,
        append_size: int,
        max_timestamp: int,
        last_offset: int,
        now_ms: int,
        segment_bytes: int,
        segment_ms: int,
    ) -> bool:
        """Kafka's LogSegment.shouldRoll."""
        if self.size == 0:
            return False
        if self.size > segment_bytes - append_size:
            return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        if not self.can_hold_offset(last_offset):
            return True
        rb = self.rolling_based_timestamp
        waited = max_timestamp - rb if rb is not None and rb >= 0 else now_ms - self.created_ms
        return waited > segment_ms

    def append(
        self,
        records: bytes | bytearray | memoryview,
        largest_timestamp: int,
        offset_of_largest_timestamp: int,
        batches: list[tuple[int, BatchHeader]] | None = None,
    ) -> None:
        """Append validated batches whose offsets are already assigned.

        ``batches`` is ``[(position in records, header)]`` if the caller already parsed them.
        ``offset_of_largest_timestamp`` is the base offset of the first batch holding
        ``largest_timestamp``.
        """
        if batches is None:
            batches = list(iter_batches(records))
        if not batches:
            return
        if not self.can_hold_offset(batches[-1][1].last_offset):
            raise ValueError(f"offset {batches[-1][1].last_offset} does not fit segment {self.base_offset}")
        start = self.size
        # the log first, then the indexes; if any write fails (ENOSPC, EIO) everything is cut
        # back to ``start`` so the segment still ends on a batch boundary and the in-memory
        # state matches the files
        view = memoryview(records)
        written = 0
        total = len(view)
        f = self._file
        fd = f.acquire()
        try:
            f.dirty = True
            while written < total:
                written += os.pwrite(fd, view[written:], start + written)
            if PAGE_CACHE.window and start + total >= self._release_at:
                self._release_behind(fd, start + total)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise
        finally:
            f.release()
        saved = (self.max_timestamp_so_far, self.offset_of_max_timestamp, self.rolling_based_timestamp,
                 self._bytes_since_last_index_entry)
        try:
            if start == 0:
                self.rolling_based_timestamp = batches[0][1].max_timestamp
            self._update_max_timestamp(largest_timestamp, offset_of_largest_timestamp)
            interval = self.index_interval_bytes
            for pos, h in batches:
                if self._bytes_since_last_index_entry > interval:
                    self.offset_index.append(h.last_offset, start + pos)
                    self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
                    self._bytes_since_last_index_entry = 0
                self._bytes_since_last_index_entry += h.size
        except OSError:
            (self.max_timestamp_so_far, self.offset_of_max_timestamp, self.rolling_based_timestamp,
             self._bytes_since_last_index_entry) = saved
            with contextlib.suppress(OSError):
                self.offset_index.truncate_to_position(start)
                self.time_index.truncate_to(batches[0][1].base_offset)
            with contextlib.suppress(OSError):
                self._file.truncate(start)
            raise
        self.size = start + total

    def _release_behind(self, fd: int, end: int) -> None:
        """Hand the page cache more than ``PAGE_CACHE.window`` bytes behind ``end`` back to the
        kernel (see :class:`_PageCacheWindow`); never raises."""
        pc = PAGE_CACHE
        self._release_at = end + pc.step
        upto = end - pc.window
        lo = self._released_upto
        if upto <= lo:
            return
        pc.release(fd, lo, upto - lo)
        # pages still dirty were only queued for writeback: they are advised again next time
        self._released_upto = max(lo, upto - pc.recheck)

    def _update_max_timestamp(self, ts: int, offset: int) -> None:
        if ts > self.max_timestamp_so_far:
            self.max_timestamp_so_far = ts
            self.offset_of_max_timestamp = offset

    # ------------------------------------------------------------------ read

    def _header_at(self, position: int) -> BatchHeader | None:
        if position + BATCH_OVERHEAD > self.size:
            return None
        data = self._file.pread(BATCH_OVERHEAD, position)
        if len(data) < BATCH_OVERHEAD:
            return None
        return parse_header(data)

    def iter_headers(
        self, start_position: int = 0, end_position: int | None = None, fd: int = -1
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Yield ``(position, header)`` of each batch from ``start_position`` (a batch boundary)
        to ``end_position`` (default: end of file). Reads headers only, in small chunks.
        ``fd``: the ``.log`` descriptor, already pinned by the caller (else pinned per read)."""
        end = self.size if end_position is None else min(end_position, self.size)
        pos = start_position
        buf = b""
        buf_start = pos
        while pos < end:
            off = pos - buf_start
            if off + BATCH_OVERHEAD > len(buf):
                n = max(BATCH_OVERHEAD, min(_SCAN_CHUNK, end - pos))
                buf = os.pread(fd, n, pos) if fd >= 0 else self._file.pread(n, pos)
                buf_start = pos
                off = 0
                if len(buf) < BATCH_OVERHEAD:
                    raise CorruptRecordError(
                        f"segment {self.base_offset}: batch header truncated at position {pos}"
                    )
            h = parse_header(buf, off)
            if h.batch_length < BATCH_OVERHEAD - 12:
                raise CorruptRecordError(f"segment {self.base_offset}: bad batch length at position {pos}")
            yield pos, h
            pos += h.size

    def translate_offset(self, offset: int, starting_position: int = 0, fd: int = -1
                         ) -> tuple[int, BatchHeader] | None:
        """``(position, header)`` of the first batch whose last offset >= ``offset``, or None."""
        _, pos = self.offset_index.lookup(offset)
        for p, h in self.iter_headers(max(pos, starting_position), None, fd):
            if h.last_offset >= offset:
                return p, h
        return None

    def _boundary_at_or_before(self, limit: int, from_position: int, fd: int) -> int:
        """Largest batch boundary <= ``limit`` and >= ``from_position`` (a boundary)."""
        if limit >= self.size:
            return self.size
        pos = max(from_position, self.offset_index.floor_position(limit))
        if limit - pos <= 65536:
            window = os.pread(fd, limit - pos, pos)
            off = 0
            while off + BATCH_OVERHEAD <= len(window):
                h = parse_header(window, off)
                if off + h.size > len(window):
                    break
                off += h.size
            return pos + off
        for p, h in self.iter_headers(pos, self.size, fd):
            if p + h.size > limit:
                return p
        return self.size

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = False,
        fd: int = -1,
    ) -> LogSlice | None:
        """Whole batches starting with the one that contains ``start_offset``.

        Returns None if no batch in this segment holds an offset >= ``start_offset``. Otherwise a
        slice (possibly of length 0) of at most ``max_size`` bytes ending at or before
        ``max_position``; with ``min_one_message`` the first batch is returned even if it is
        larger than ``max_size`` (but never past ``max_position``). ``fd``: the ``.log``
        descriptor if the caller pinned it (:attr:`log_file`), else it is pinned here.
        """
        if fd < 0:
            f = self._file
            fd = f.acquire()
            try:
                return self._read(start_offset, max_size, max_position, min_one_message, fd)
            finally:
                f.release()
        return self._read(start_offset, max_size, max_position, min_one_message, fd)

    def _read(self, start_offset: int, max_size: int, max_position: int | None, min_one_message: bool,
              fd: int) -> LogSlice | None:
        found = self.translate_offset(start_offset, 0, fd)
        if found is None:
            return None
        start, first = found
        max_pos = self.size if max_position is None else min(max_position, self.size)
        if start >= max_pos:
            return LogSlice(start, 0, first.base_offset)
        limit = min(max_pos, start + max(max_size, 0))
        if first.size > limit - start:
            if min_one_message and start + first.size <= max_pos:
                end = start + first.size
            else:
                return LogSlice(start, 0, first.base_offset)
        else:
            end = self._boundary_at_or_before(limit, start + first.size, fd)
        if start < self._released_upto and end + _PREFETCH_AHEAD // 2 > self._prefetched_upto:
            # a consumer catching up, read back from the disk: this read and the next ones, so
            # the disk works ahead of the reader (what was asked already is not asked again)
            lo = max(start, self._prefetched_upto)
            hi = max(end, min(self._released_upto, end + _PREFETCH_AHEAD))
            if hi > lo:
                PAGE_CACHE.prefetch(fd, lo, hi - lo)
                self._prefetched_upto = hi
        return LogSlice(start, end - start, first.base_offset)

    def read_batch(self, position: int, header: BatchHeader) -> bytes:
        return self._file.pread(header.size, position)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """First ``(offset, timestamp)`` with timestamp >= ``timestamp`` and offset >=
        ``starting_offset``; None if this segment has none. Decodes only the one batch found."""
        _, idx_offset = self.time_index.lookup(timestamp)
        _, pos = self.offset_index.lookup(max(idx_offset, starting_offset))
        for p, h in self.iter_headers(pos):
            if h.max_timestamp < timestamp or h.last_offset < starting_offset:
                continue
            found = self._first_record_at_or_after(p, h, timestamp, starting_offset)
            if found is not None:
                return found
        return None

    def _first_record_at_or_after(
        self, pos: int, h: BatchHeader, timestamp: int, starting_offset: int
    ) -> tuple[int, int] | None:
        if h.timestamp_type == 1:  # LogAppendTime: every record carries max_timestamp
            return max(h.base_offset, starting_offset), h.max_timestamp
        data = self.read_batch(pos, h)
        for rec in decode_batch_records(data, 0, h):
            if rec.timestamp >= timestamp and rec.offset >= starting_offset:
                return rec.offset, rec.timestamp
        return None

    def offset_of_timestamp_in_batch(self, batch_offset: int, timestamp: int) -> int:
        """Offset of the first record with exactly ``timestamp`` in the batch at ``batch_offset``."""
        found = self.translate_offset(batch_offset)
        if found is None:
            return batch_offset
        pos, h = found
        got = self._first_record_at_or_after(pos, h, timestamp, h.base_offset)
        return got[0] if got is not None else h.base_offset

    # ------------------------------------------------------------------ recovery

    def recover(self) -> int:
        """Re-validate every batch from byte 0, rebuild both indexes and truncate the file at the
        first invalid byte. Returns the number of bytes truncated."""
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp = -1
        self.rolling_based_timestamp = None
        f = self._file
        file_size = f.size()
        pos = 0
        last_index_pos = 0
        expected = self.base_offset
        buf = b""
        buf_start = 0
        interval = self.index_interval_bytes
        while pos < file_size:
            if file_size - pos < BATCH_OVERHEAD:
                break
            off = pos - buf_start
            if off + BATCH_OVERHEAD > len(buf):
                buf = f.pread(min(_RECOVER_CHUNK, file_size - pos), pos)
                buf_start, off = pos, 0
            h = parse_header(buf, off)
            if (
                h.magic != 2
                or h.batch_length < BATCH_OVERHEAD - 12
                or pos + h.size > file_size
                or h.base_offset < expected
                or h.last_offset_delta < 0
                or not self.can_hold_offset(h.last_offset)
            ):
                break
            if off + h.size > len(buf):
                buf = f.pread(max(h.size, min(_RECOVER_CHUNK, file_size - pos)), pos)
                buf_start, off = pos, 0
                if len(buf) < h.size:
                    break
            try:
                verify_crc(buf, off, h)
            except CorruptRecordError:
                break
            if pos == 0:
                self.rolling_based_timestamp = h.max_timestamp
            self._update_max_timestamp(h.max_timestamp, h.base_offset)
            if pos - last_index_pos > interval:
                self.offset_index.append(h.last_offset, pos)
                self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
                last_index_pos = pos
            expected = h.next_offset
            pos += h.size
        truncated = file_size - pos
        if truncated:
            f.truncate(pos)
        # Kafka's LogSegment.recover: end the time index with the largest timestamp, as a closed
        # segment's does; else a recovered inactive segment is later trusted with no timestamps
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp, True)
        self.size = pos
        self._bytes_since_last_index_entry = pos - last_index_pos
        self.create_index_files()
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset >= ``offset`` (the batch holding ``offset`` and
        everything after). Returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        pos, _ = found
        removed = self.size - pos
        self.offset_index.truncate_to_position(pos)
        self.time_index.truncate_to(offset)
        self._file.truncate(pos)
        self.size = pos
        self._released_upto = min(self._released_upto, pos)
        self._prefetched_upto = min(self._prefetched_upto, pos)
        self._release_at = 0
        self._bytes_since_last_index_entry = 0
        if pos == 0:
            self.rolling_based_timestamp = None
            self.created_ms = self._clock.time_ms()
        # the largest timestamp left: the time index's last entry, then the batches after it
        # (headers only; without this a segment cut below its first time-index entry would
        # forget its timestamps, and once closed never be found by time)
        ts, off = self.time_index.last_entry
        if ts < 0:
            ts, off = -1, -1
        self.max_timestamp_so_far, self.offset_of_max_timestamp = ts, off
        if pos:
            _, start = self.offset_index.lookup(max(off, self.base_offset))
            for _, h in self.iter_headers(start):
                self._update_max_timestamp(h.max_timestamp, h.base_offset)
        return removed

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"
