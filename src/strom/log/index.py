"""Sparse offset and time indexes of one log segment (Kafka's OffsetIndex / TimeIndex).

Theory of operation
-------------------
* OffsetIndex: 8-byte entries ``relative offset u32 | file position u32`` (big-endian). An entry
  ``(o, p)`` says the batch that starts at byte ``p`` of the ``.log`` has last offset ``base + o``
  (Kafka indexes a batch by its *last* offset). Entries are strictly increasing in both fields.
  ``lookup(t)`` answers the largest entry with offset <= t, or ``(base, 0)``; a reader then scans
  batch headers forward from that position. Entries are written every ``index.interval.bytes`` of
  log, so a scan never walks more than about that many bytes of headers.
* TimeIndex: 12-byte entries ``timestamp i64 | relative offset u32``. An entry ``(T, o)`` says the
  largest timestamp in the segment up to (and including) the batch at offset ``base + o`` is ``T``,
  and no batch before that one has a timestamp >= ``T``. Timestamps strictly increase.
  ``lookup(ts)`` answers the largest entry with timestamp <= ts, or ``(-1, base)``.

Files are appended to (never preallocated), so the file always holds exactly the valid entries and
needs no trimming after a crash or close. The entries also live in memory (``array``) so lookups
are a ``bisect`` with no syscalls, and the file is only needed to append, truncate and fsync: its
descriptor comes from the log's file cache (:mod:`strom.log.file_cache`) and is usually closed.

Indexes are never trusted after a crash: :meth:`sanity_check` raises :class:`CorruptIndexError`
and the segment rebuilds the index from the ``.log``.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right
from pathlib import Path

from strom.log.errors import CorruptIndexError
from strom.log.file_cache import CachedFile

_MAX_RELATIVE = 0xFFFFFFFF
_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")


class _IndexFile:
    entry_size: int

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self._file = CachedFile(path)
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry_size)
        self._file_len = 0

    def _load(self) -> bytes:
        """The file's whole entries; a missing file reads as an empty index (and fails the
        segment's sanity check, which rebuilds it)."""
        if not os.path.exists(self._file.path):
            return b""
        raw = self._file.read_all()
        self._file_len = len(raw)
        return raw[: len(raw) - len(raw) % self.entry_size]

    @property
    def path(self) -> Path:
        return self._file.path

    @path.setter
    def path(self, value: Path) -> None:  # renamed (see LogSegment.change_file_suffixes)
        self._file.path = value

    def create_file(self) -> None:
        """Create the (empty) file if no entry was written yet."""
        if not os.path.exists(self._file.path):
            self._file.acquire()
            self._file.release()

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    def _write_at(self, index: int, data: bytes) -> None:
        self._file.pwrite(data, index * self.entry_size)
        self._file_len = (index + 1) * self.entry_size

    def _truncate_entries(self, n: int) -> None:
        if self._file_len != n * self.entry_size:
            self._file.truncate(n * self.entry_size)
        self._file_len = n * self.entry_size

    def flush(self) -> None:
        self._file.flush()

    @property
    def file(self) -> CachedFile:
        """The index's file (to fsync it from another thread, as a deferred roll flush does)."""
        return self._file

    def close(self) -> None:
        self._file.close()

    def _relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if rel < 0 or rel > _MAX_RELATIVE:
            raise ValueError(f"offset {offset} does not fit an index with base offset {self.base_offset}")
        return rel


class OffsetIndex(_IndexFile):
    """Sparse map from offset to the file position of the batch holding it."""

    entry_size = 8

    def __init__(self, path: Path, base_offset: int, max_index_size: int = 10 * 1024 * 1024) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._offsets: array[int] = array("q")  # absolute last offsets
        self._positions: array[int] = array("q")
        words: array[int] = array("I")
        words.frombytes(self._load())
        if sys.byteorder == "little":
            words.byteswap()
        self._offsets = array("q", (base_offset + o for o in words[0::2]))
        self._positions = array("q", words[1::2])

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._offsets, self._positions, strict=True))

    @property
    def last_offset(self) -> int:
        return self._offsets[-1] if self._offsets else self.base_offset

    def sanity_check(self, log_size: int) -> None:
        """Raise CorruptIndexError unless every entry is well-formed and inside the log."""
        if self._file_len % self.entry_size:
            raise CorruptIndexError(f"{self.path}: length {self._file_len} is not a multiple of 8")
        offs, poss = self._offsets, self._positions
        for i in range(1, len(offs)):
            if offs[i] <= offs[i - 1] or poss[i] <= poss[i - 1]:
                raise CorruptIndexError(f"{self.path}: entry {i} is not increasing")
        if poss and poss[-1] >= log_size:
            raise CorruptIndexError(f"{self.path}: last entry points past the log ({poss[-1]} >= {log_size})")
        if poss and poss[0] <= 0:
            raise CorruptIndexError(f"{self.path}: entry at position 0")

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= target, else (base, 0)."""
        i = bisect_right(self._offsets, target_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self._offsets[i], self._positions[i]

    def floor_position(self, position: int) -> int:
        """Largest indexed batch position <= ``position`` (0 if none): a batch boundary."""
        i = bisect_right(self._positions, position) - 1
        return self._positions[i] if i >= 0 else 0

    def append(self, offset: int, position: int) -> None:
        if self._offsets and (offset <= self._offsets[-1] or position <= self._positions[-1]):
            raise ValueError(f"index entry ({offset}, {position}) is not after the last one")
        rel = self._relative(offset)
        self._write_at(len(self._offsets), _OFFSET_ENTRY.pack(rel, position))
        self._offsets.append(offset)
        self._positions.append(position)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry with offset >= ``offset``."""
        n = bisect_right(self._offsets, offset - 1)
        del self._offsets[n:]
        del self._positions[n:]
        self._truncate_entries(n)

    def truncate_to_position(self, position: int) -> None:
        """Drop every entry at file position >= ``position``."""
        n = bisect_right(self._positions, position - 1)
        del self._offsets[n:]
        del self._positions[n:]
        self._truncate_entries(n)

    def reset(self) -> None:
        del self._offsets[:]
        del self._positions[:]
        self._truncate_entries(0)


class TimeIndex(_IndexFile):
    """Sparse map from timestamp to the first offset at which the segment reached it."""

    entry_size = 12

    def __init__(self, path: Path, base_offset: int, max_index_size: int = 10 * 1024 * 1024) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._timestamps: array[int] = array("q")
        self._offsets: array[int] = array("q")
        for ts, rel in _TIME_ENTRY.iter_unpack(self._load()):
            self._timestamps.append(ts)
            self._offsets.append(base_offset + rel)

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._timestamps, self._offsets, strict=True))

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base) if empty."""
        if not self._timestamps:
            return -1, self.base_offset
        return self._timestamps[-1], self._offsets[-1]

    def sanity_check(self, next_offset: int | None = None) -> None:
        if self._file_len % self.entry_size:
            raise CorruptIndexError(f"{self.path}: length {self._file_len} is not a multiple of 12")
        tss, offs = self._timestamps, self._offsets
        for i in range(1, len(tss)):
            if tss[i] <= tss[i - 1] or offs[i] < offs[i - 1]:
                raise CorruptIndexError(f"{self.path}: entry {i} is not increasing")
        if next_offset is not None and offs and offs[-1] >= next_offset:
            raise CorruptIndexError(f"{self.path}: last entry offset {offs[-1]} is past the log")

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= target, else (-1, base)."""
        i = bisect_right(self._timestamps, target_timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._timestamps[i], self._offsets[i]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append ``(timestamp, offset)`` if the timestamp is larger than the last entry's."""
        if not skip_full_check and self.is_full:
            return
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        if timestamp < 0:
            return
        if self._offsets and offset < self._offsets[-1]:
            raise ValueError(f"time index offset {offset} goes backwards")
        rel = self._relative(offset)
        self._write_at(len(self._timestamps), _TIME_ENTRY.pack(timestamp, rel))
        self._timestamps.append(timestamp)
        self._offsets.append(offset)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry with offset >= ``offset``."""
        n = len(self._offsets)
        while n and self._offsets[n - 1] >= offset:
            n -= 1
        del self._timestamps[n:]
        del self._offsets[n:]
        self._truncate_entries(n)

    def reset(self) -> None:
        del self._timestamps[:]
        del self._offsets[:]
        self._truncate_entries(0)
