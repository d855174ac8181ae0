"""The leader epoch cache and its ``leader-epoch-checkpoint`` file (Kafka's LeaderEpochFileCache).

Theory of operation
-------------------
For every leader epoch present in a log, the cache holds the offset of the epoch's first batch:
``(epoch, start offset)`` entries, both strictly increasing. A replica uses it to answer
OffsetForLeaderEpoch (:meth:`LeaderEpochCache.end_offset_for`), which tells a follower where its
log diverges from the leader's. Every v2 batch carries its epoch (``partitionLeaderEpoch``), so the
cache can always be rebuilt from batch headers; the file only spares that walk.

The rules are Kafka's:

* :meth:`~LeaderEpochCache.assign` adds ``(epoch, start)`` unless the latest entry is the same epoch
  starting at or before ``start``; entries that contradict the new one (epoch >= it, or start >=
  its start) are removed first. A negative epoch (a batch written without one) is ignored.
* :meth:`~LeaderEpochCache.truncate_from_end` (log truncation) drops the epochs starting at or
  after the new log end; :meth:`~LeaderEpochCache.truncate_from_start` (log start moved) drops the
  epochs wholly before the new log start and moves the start of the one holding it there.
* :meth:`~LeaderEpochCache.end_offset_for` is ``LeaderEpochFileCache.endOffsetFor``.

The file, ``leader-epoch-checkpoint``, is Kafka's checkpoint text format: ``0`` (version), the
entry count, then one ``epoch startOffset`` line per entry. :meth:`LeaderEpochFileCache.write`
replaces it atomically (temporary file, fsync, rename, directory fsync), and only when its
content changed. When it is written, and how far it is trusted after a crash, is the owning log's
business (see :mod:`strom.log.partition_log` and :mod:`strom.raft.metadata_log`).
"""

from __future__ import annotations

import itertools
from pathlib import Path

from strom.durable_file import replace_file

__all__ = [
    "LEADER_EPOCH_FILE",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "LeaderEpochCache",
    "LeaderEpochFileCache",
]

LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1  # Kafka's RecordBatch.NO_PARTITION_LEADER_EPOCH / OffsetsForLeaderEpoch
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """The cache in memory: ``entries`` is ``[(epoch, start offset)]``, both strictly increasing."""

    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        self.entries: list[tuple[int, int]] = []
        for epoch, start in entries or []:
            self.assign(epoch, start)

    @property
    def latest_epoch(self) -> int | None:
        return self.entries[-1][0] if self.entries else None

    @property
    def earliest_entry(self) -> tuple[int, int] | None:
        return self.entries[0] if self.entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (see the module docstring). Returns
        whether the cache changed."""
        if epoch < 0 or start_offset < 0:
            return False
        entries = self.entries
        if entries and entries[-1][0] == epoch and entries[-1][1] <= start_offset:
            return False
        while entries and (entries[-1][0] >= epoch or entries[-1][1] >= start_offset):
            entries.pop()
        entries.append((epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop the entries of epochs starting at or after ``end_offset``. Returns whether any
        entry was dropped."""
        changed = False
        while self.entries and self.entries[-1][1] >= end_offset:
            self.entries.pop()
            changed = True
        return changed

    def truncate_from_start(self, start_offset: int) -> bool:
        """Drop the entries wholly before ``start_offset``; the epoch holding it starts there.
        Returns whether the cache changed."""
        below = [e for e in self.entries if e[1] <= start_offset]
        if not below or (len(below) == 1 and below[0][1] == start_offset):
            return False
        self.entries = [(below[-1][0], start_offset), *self.entries[len(below):]]
        return True

    def clear(self) -> None:
        self.entries = []

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the entry holding ``offset`` (the last one starting at or before it)."""
        found = None
        for epoch, start in self.entries:
            if start > offset:
                break
            found = epoch
        return found

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``: ``(epoch, end offset)`` for OffsetForLeaderEpoch.

        * ``requested_epoch`` is UNDEFINED_EPOCH (-1), or above every epoch in the cache (a leader
          never sees that), or the cache is empty: ``(-1, -1)``;
        * it is the latest epoch: ``(it, log_end_offset)``;
        * else the largest epoch <= it and the start offset of the first epoch above it; if no
          epoch is <= it (the log start moved past those epochs), ``(requested_epoch, start of
          the first entry)``."""
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        entries = self.entries
        if entries and entries[-1][0] == requested_epoch:
            return requested_epoch, log_end_offset
        higher = next((i for i, (e, _) in enumerate(entries) if e > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, entries[0][1]
        return entries[higher - 1][0], entries[higher][1]

    # ------------------------------------------------------------------ the checkpoint format

    def to_checkpoint(self) -> bytes:
        lines = ["0", str(len(self.entries)), *(f"{e} {o}" for e, o in self.entries)]
        return ("\n".join(lines) + "\n").encode()

    @staticmethod
    def parse_checkpoint(data: bytes) -> list[tuple[int, int]] | None:
        """The entries of a checkpoint file; ``None`` if it is not a valid one (wrong version or
        count, malformed line, entries not strictly increasing, negative values)."""
        try:
            lines = data.decode().split("\n")
            if lines[0].strip() != "0":
                return None
            count = int(lines[1])
            entries = []
            for line in lines[2:2 + count]:
                epoch, offset = line.split()
                entries.append((int(epoch), int(offset)))
        except (ValueError, IndexError, UnicodeDecodeError):
            return None
        if len(entries) != count or any(
            a[0] >= b[0] or a[1] >= b[1] for a, b in itertools.pairwise(entries)
        ) or any(e < 0 or o < 0 for e, o in entries):
            return None
        return entries


class LeaderEpochFileCache(LeaderEpochCache):
    """The cache of one partition directory, with its ``leader-epoch-checkpoint`` file."""

    def __init__(self, directory: Path, entries: list[tuple[int, int]] | None = None) -> None:
        super().__init__(entries)
        self.path = Path(directory) / LEADER_EPOCH_FILE
        self._written: bytes | None = None  # the file's content as this object last saw it

    @classmethod
    def read_file(cls, directory: Path) -> list[tuple[int, int]] | None:
        """The entries in ``directory``'s checkpoint file; None if missing or not valid."""
        try:
            data = (Path(directory) / LEADER_EPOCH_FILE).read_bytes()
        except FileNotFoundError:
            return None
        return cls.parse_checkpoint(data)

    @property
    def dirty(self) -> bool:
        """The entries differ from what this object last wrote (or read)."""
        return self.to_checkpoint() != self._written

    def mark_written(self, entries: list[tuple[int, int]] | None) -> None:
        """The file holds ``entries`` (as read at open): no need to write them again."""
        self._written = None if entries is None else LeaderEpochCache(entries).to_checkpoint()

    def write(self, *, sync: bool = True, sync_dir: bool = True) -> bool:
        """Write the file if its content changed (atomically; durable when this returns unless
        ``sync=False``). Returns whether it wrote. ``OSError`` propagates."""
        content = self.to_checkpoint()
        if content == self._written:
            return False
        replace_file(self.path, content, sync=sync, sync_dir=sync_dir and sync)
        self._written = content
        return True
