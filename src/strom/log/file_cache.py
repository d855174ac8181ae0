"""Open file descriptors of the logs: opened lazily, bounded by a process-wide LRU.

Theory of operation
-------------------
Kafka keeps every segment's files open, so a broker needs three descriptors per segment and
thousands of partitions exhaust ``ulimit -n``. Here (like RocksDB's ``max_open_files``) every
segment file — ``.log``, ``.index``, ``.timeindex`` — is a :class:`CachedFile`: a path and open
flags, holding a descriptor only while it sits in the :class:`FileCache`. Idle partitions and
inactive segments therefore hold no descriptor; the cache closes the least recently used ones
once more than ``capacity`` are open (broker config ``strom.log.max.open.files``).

Rules:

* :meth:`CachedFile.acquire` returns an open descriptor (opening the file if needed) and *pins*
  it; :meth:`CachedFile.release` unpins. Eviction never closes a pinned descriptor, so a thread
  in the middle of a ``pread``/``pwrite`` never has its descriptor closed (and reused) under it.
  Every use of a descriptor is bracketed by acquire/release; nobody keeps the bare number.
* Descriptors that outlive a call (a fetch response written later with ``sendfile``, the
  cleaner's inputs) are duplicated while pinned (:meth:`CachedFile.dup`): the duplicate belongs
  to the caller, keeps a renamed or unlinked file readable, and is not counted here.
* Renames update :attr:`CachedFile.path`; an open descriptor survives a rename and a closed one
  is reopened under the new name.
* ``dirty`` records a write since the last fsync, also across an eviction (closing does not
  lose page-cache data; an fsync of a reopened descriptor flushes the inode): :meth:`flush`
  fsyncs only dirty files, so closing ten thousand untouched partitions costs no fsync.
* Opening fails with EMFILE/ENFILE: the cache closes half of its unpinned descriptors and tries
  once more; if that fails too the ``OSError`` propagates (the log turns it into
  KAFKA_STORAGE_ERROR) and one line per minute at most is logged. Nothing is left half-open, so
  the next access recovers by itself once descriptors are free again.

Thread safety: one lock guards the cache's bookkeeping (the event loop, the cleaner thread and
topic-creation workers all open files); system calls other than ``close`` run outside it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path

from strom.observability.metrics import FSYNC_SECONDS
from strom.rate_limited_log import RateLimitedLine

log = logging.getLogger("strom.log.files")

FD_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE})
MIN_CAPACITY = 8


def default_capacity() -> int:
    """Half of the soft RLIMIT_NOFILE (the rest is left for sockets, fetch responses' duplicated
    descriptors and everything else), at least :data:`MIN_CAPACITY`."""
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, ValueError, OSError):
        return 512
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 65536
    return max(MIN_CAPACITY, soft // 2)


fd_exhausted_log = RateLimitedLine(log)


def note_fd_exhaustion(e: OSError, what: str) -> None:
    """Log (once a minute at most) an operation that failed for lack of descriptors."""
    if e.errno in FD_EXHAUSTED:
        fd_exhausted_log.log(logging.ERROR, "%s failed: %s; answering KAFKA_STORAGE_ERROR until "
                             "descriptors free up", what, os.strerror(e.errno or 0))


class FileCache:
    """The LRU of open :class:`CachedFile` descriptors."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = max(MIN_CAPACITY, capacity if capacity is not None else default_capacity())
        self._lock = threading.Lock()
        self._open: OrderedDict[CachedFile, None] = OrderedDict()  # least recently used first
        self.opens = 0  # files opened (statistics, tests)
        self.evictions = 0

    @property
    def open_count(self) -> int:
        return len(self._open)

    def resize(self, capacity: int) -> None:
        with self._lock:
            self.capacity = max(MIN_CAPACITY, capacity)
            self._evict_locked(self.capacity)

    def close_idle(self) -> None:
        """Close every descriptor no operation holds now (they reopen on their next use)."""
        with self._lock:
            self._evict_locked(0)

    def _evict_locked(self, limit: int) -> None:
        """Close unpinned descriptors, least recently used first, until at most ``limit`` are
        open (or only pinned ones are left)."""
        excess = len(self._open) - limit
        if excess <= 0:
            return
        doomed = []
        for f in self._open:
            if f._pins == 0:
                doomed.append(f)
                if len(doomed) >= excess:
                    break
        for f in doomed:
            del self._open[f]
            fd, f._fd = f._fd, -1
            self.evictions += 1
            with contextlib.suppress(OSError):
                os.close(fd)

    def _open_fd(self, f: CachedFile) -> int:
        try:
            return os.open(f.path, f.flags, 0o644)
        except OSError as e:
            if e.errno not in FD_EXHAUSTED:
                raise
        with self._lock:  # out of descriptors: give back half of ours and try once more
            self._evict_locked(len(self._open) // 2)
        try:
            return os.open(f.path, f.flags, 0o644)
        except OSError as e:
            if e.errno in FD_EXHAUSTED:
                fd_exhausted_log.log(
                    logging.ERROR,
                    "cannot open %s: %s; %d log files open (strom.log.max.open.files=%d); requests "
                    "touching unopened segments fail with KAFKA_STORAGE_ERROR until descriptors free up",
                    f.path, os.strerror(e.errno or 0), len(self._open), self.capacity,
                )
            raise

    def acquire(self, f: CachedFile) -> int:
        with self._lock:
            if f._fd >= 0:
                f._pins += 1
                self._open.move_to_end(f)
                return f._fd
            if f.closed:
                raise OSError(errno.EBADF, "log file already closed", str(f.path))
            f._pins += 1
        try:
            fd = self._open_fd(f)
        except BaseException:
            with self._lock:
                f._pins -= 1
            raise
        with self._lock:
            if f._fd >= 0:  # another thread opened it meanwhile
                os.close(fd)
                self._open.move_to_end(f)
                return f._fd
            f._fd = fd
            f.flags &= ~os.O_CREAT  # created now: a later reopen must not resurrect a deleted file
            self._open[f] = None
            self.opens += 1
            self._evict_locked(self.capacity)
            return fd

    def release(self, f: CachedFile) -> None:
        with self._lock:
            f._pins -= 1

    def close(self, f: CachedFile) -> None:
        """Close ``f`` for good: its descriptor now, and no reopening later."""
        with self._lock:
            f.closed = True
            fd = f._fd
            if fd < 0:
                return
            f._fd = -1
            self._open.pop(f, None)
        os.close(fd)


class CachedFile:
    """A file of a segment whose descriptor lives in a :class:`FileCache` (see the module doc)."""

    __slots__ = ("__weakref__", "_fd", "_pins", "cache", "closed", "dirty", "flags", "path")

    def __init__(self, path: Path, cache: FileCache | None = None, *, create: bool = True) -> None:
        self.path = path
        self.flags = os.O_RDWR | (os.O_CREAT if create else 0) | getattr(os, "O_CLOEXEC", 0)
        self.cache = cache if cache is not None else FILE_CACHE
        self.dirty = False
        self.closed = False
        self._fd = -1
        self._pins = 0

    @property
    def is_open(self) -> bool:
        return self._fd >= 0

    def acquire(self) -> int:
        return self.cache.acquire(self)

    def release(self) -> None:
        self.cache.release(self)

    def dup(self) -> int:
        """A duplicate of the descriptor that the caller owns (and must close)."""
        fd = self.cache.acquire(self)
        try:
            return os.dup(fd)
        finally:
            self.cache.release(self)

    # small helpers: each pins the descriptor for one system call

    def pread(self, n: int, position: int) -> bytes:
        fd = self.cache.acquire(self)
        try:
            return os.pread(fd, n, position)
        finally:
            self.cache.release(self)

    def pwrite(self, data: bytes | bytearray | memoryview, position: int) -> int:
        fd = self.cache.acquire(self)
        try:
            self.dirty = True
            return os.pwrite(fd, data, position)
        finally:
            self.cache.release(self)

    def truncate(self, length: int) -> None:
        fd = self.cache.acquire(self)
        try:
            self.dirty = True
            os.ftruncate(fd, length)
        finally:
            self.cache.release(self)

    def size(self) -> int:
        fd = self.cache.acquire(self)
        try:
            return os.fstat(fd).st_size
        finally:
            self.cache.release(self)

    def read_all(self) -> bytes:
        fd = self.cache.acquire(self)
        try:
            size = os.fstat(fd).st_size
            chunks = []
            pos = 0
            while pos < size:
                chunk = os.pread(fd, size - pos, pos)
                if not chunk:
                    break
                chunks.append(chunk)
                pos += len(chunk)
            return b"".join(chunks)
        finally:
            self.cache.release(self)

    def flush(self) -> None:
        """fsync if anything was written since the last fsync (reopening if evicted)."""
        if not self.dirty:
            return
        fd = self.cache.acquire(self)
        try:
            self.dirty = False
            start = time.perf_counter()
            os.fsync(fd)
            FSYNC_SECONDS.observe(time.perf_counter() - start)
        except BaseException:
            self.dirty = True
            raise
        finally:
            self.cache.release(self)

    def close(self) -> None:
        self.cache.close(self)

    def __repr__(self) -> str:
        return f"CachedFile({self.path}, fd={self._fd})"


FILE_CACHE = FileCache()
"""The process-wide cache; the broker sets its capacity from ``strom.log.max.open.files``."""
