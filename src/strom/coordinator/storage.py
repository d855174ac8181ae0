"""Where the group coordinator keeps its records: the partitions of ``__consumer_offsets``.

The broker implements :class:`OffsetsStorage` over the real (compacted) log; tests and
simulations use :class:`MemoryOffsetsStorage`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import NamedTuple, Protocol


class StoredEntry(NamedTuple):
    """A record as stored, with what transactions need: the producer of a transactional record,
    or, for a transaction marker (``key`` and ``value`` None), whether it commits."""

    key: bytes | None
    value: bytes | None
    producer_id: int = -1
    transactional: bool = False
    marker_commit: bool | None = None


class OffsetsStorage(Protocol):
    def write(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> Awaitable[None]:
        """Append now (no waiting for the disk; raises at once if the append fails) and return
        the completion, done when the records are durable (the partition's HW reached them:
        :mod:`.partition_writer`); it fails if they cannot be made durable."""
        ...

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append key/value records (value None = tombstone); durable when it returns.
        Raises on failure (the coordinator then answers with an error and keeps no state)."""
        ...

    def read_all(self, partition: int) -> Iterable[tuple[bytes, bytes | None]]:
        """Every record of the partition from the start, in order (for loading)."""
        ...

    async def append_txn(
        self, partition: int, records: list[tuple[bytes, bytes | None]], producer_id: int, producer_epoch: int
    ) -> None:
        """Append records as part of a producer's transaction (TxnOffsetCommit); they count only
        once a COMMIT marker for that producer follows."""
        ...

    def read_entries(self, partition: int) -> Iterable[StoredEntry]:
        """Like :meth:`read_all`, with transactional records and markers (for loading)."""
        ...


class MemoryOffsetsStorage:
    """An in-memory OffsetsStorage. ``fail_next`` makes the next appends raise (fault tests);
    ``durable`` (an :class:`asyncio.Event`), when set, holds every completion of :meth:`write`
    until it is set (a flush that takes time); ``fail_flush`` makes the held ones fail."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.entries: dict[int, list[StoredEntry]] = {}
        self.fail_next = 0
        self.appends = 0
        self.durable: asyncio.Event | None = None
        self.fail_flush = False

    def write(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> Awaitable[None]:
        self._append_now(partition, records)
        return self._completion()

    async def _completion(self) -> None:
        if self.durable is not None:
            await self.durable.wait()
            if self.fail_flush:
                raise OSError("injected flush failure")

    async def append_txn(
        self, partition: int, records: list[tuple[bytes, bytes | None]], producer_id: int, producer_epoch: int
    ) -> None:
        if self.fail_next > 0:
            self.fail_next -= 1
            raise OSError("injected append failure")
        self.entries.setdefault(partition, []).extend(
            StoredEntry(k, v, producer_id, True) for k, v in records
        )

    def write_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        self.entries.setdefault(partition, []).append(StoredEntry(None, None, producer_id, True, commit))

    def read_entries(self, partition: int) -> Iterable[StoredEntry]:
        entries = self.entries.get(partition, [])
        if not any(e.transactional for e in entries):
            # no transactions here: ``partitions`` is authoritative (tests may replace it)
            return [StoredEntry(k, v) for k, v in self.partitions.get(partition, ())]
        return list(entries)

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        self._append_now(partition, records)

    def _append_now(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        if self.fail_next > 0:
            self.fail_next -= 1
            raise OSError("injected append failure")
        self.appends += 1
        self.partitions.setdefault(partition, []).extend(records)
        self.entries.setdefault(partition, []).extend(StoredEntry(k, v) for k, v in records)

    def read_all(self, partition: int) -> Iterable[tuple[bytes, bytes | None]]:
        return list(self.partitions.get(partition, ()))

    def compacted(self, partition: int) -> list[tuple[bytes, bytes | None]]:
        """The partition as log compaction would leave it (last value per key, no tombstones)."""
        last: dict[bytes, bytes | None] = {}
        for k, v in self.partitions.get(partition, ()):
            last.pop(k, None)
            last[k] = v
        return [(k, v) for k, v in last.items() if v is not None]
