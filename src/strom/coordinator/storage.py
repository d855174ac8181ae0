"""Where the group coordinator keeps its records: the partitions of ``__consumer_offsets``.

The broker implements :class:`OffsetsStorage` over the real (compacted) log; tests and
simulations use :class:`MemoryOffsetsStorage`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class OffsetsStorage(Protocol):
    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append key/value records (value None = tombstone); durable when it returns.
        Raises on failure (the coordinator then answers with an error and keeps no state)."""
        ...

    def read_all(self, partition: int) -> Iterable[tuple[bytes, bytes | None]]:
        """Every record of the partition from the start, in order (for loading)."""
        ...


class MemoryOffsetsStorage:
    """An in-memory OffsetsStorage. ``fail_next`` makes the next appends raise (fault tests)."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.fail_next = 0
        self.appends = 0

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        if self.fail_next > 0:
            self.fail_next -= 1
            raise OSError("injected append failure")
        self.appends += 1
        self.partitions.setdefault(partition, []).extend(records)

    def read_all(self, partition: int) -> Iterable[tuple[bytes, bytes | None]]:
        return list(self.partitions.get(partition, ()))

    def compacted(self, partition: int) -> list[tuple[bytes, bytes | None]]:
        """The partition as log compaction would leave it (last value per key, no tombstones)."""
        last: dict[bytes, bytes | None] = {}
        for k, v in self.partitions.get(partition, ()):
            last.pop(k, None)
            last[k] = v
        return [(k, v) for k, v in last.items() if v is not None]
