"""TransactionIndex: the ``.txnindex`` file of a segment, listing aborted transactions.

Kafka's format: fixed 34-byte entries ``version i16 (0) | producerId i64 | firstOffset i64 |
lastOffset i64 | lastStableOffset i64``, appended when an ABORT marker is written. A
``read_committed`` fetch asks for the aborted transactions overlapping the range it returns, so
the consumer can drop their records. The index is derived data: after a crash it is rebuilt
from the segment's control batches, like the offset and time indexes.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from strom.durable_file import replace_file

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        if path.exists():
            data = path.read_bytes()
            usable = len(data) - len(data) % ENTRY_SIZE
            for pos in range(0, usable, ENTRY_SIZE):
                version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
                if version != 0 or last < first:
                    break  # corrupt tail: keep what came before (rebuilt on recovery anyway)
                self.entries.append(AbortedTxn(pid, first, last, lso))

    def append(self, txn: AbortedTxn) -> None:
        if self.entries and txn.last_offset < self.entries[-1].last_offset:
            raise ValueError("aborted transactions must be appended in last-offset order")
        self.entries.append(txn)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, _ENTRY.pack(0, *txn))
        finally:
            os.close(fd)

    def flush(self) -> None:
        if self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions that overlap [fetch_offset, upper_bound)."""
        return [t for t in self.entries if t.last_offset >= fetch_offset and t.first_offset < upper_bound]

    def reset(self) -> None:
        self.entries = []
        if self.path.exists():
            self.path.unlink()

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after ``offset``."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) != len(self.entries):
            self.entries = []
            if self.path.exists():
                self.path.unlink()
            for t in keep:
                self.append(t)

    def rewrite(self, entries: list[AbortedTxn]) -> None:
        """Replace the whole index with ``entries`` atomically (temp file, fsync, rename), as
        the cleaner does when markers are removed: a crash leaves the old or the new index."""
        self.entries = list(entries)
        replace_file(self.path, b"".join(_ENTRY.pack(0, *t) for t in self.entries), sync_dir=False)

    def delete(self) -> None:
        if self.path.exists():
            self.path.unlink()
