"""Helpers shared by the log tests (no tests here)."""

from __future__ import annotations

from pathlib import Path

from strom.clock import ManualClock
from strom.config import LogConfig
from strom.log import PartitionLog
from strom.protocol.records import build_batch, decode_records, iter_batches

T0 = 1_700_000_000_000


def batch(n: int = 1, *, size: int = 10, ts: int = T0, tag: int = 0, **kw: int | bool) -> bytes:
    """A v2 batch of ``n`` records with values ``b"<tag>:<i>:" + padding`` (``size`` bytes each)."""
    records = []
    for i in range(n):
        v = f"{tag}:{i}:".encode()
        records.append((f"k{i}".encode(), v + b"x" * max(0, size - len(v)), [], ts + i))
    return build_batch(records, base_offset=12345, **kw)  # type: ignore[arg-type]


def open_log(path: Path, clock: ManualClock | None = None, **cfg: object) -> PartitionLog:
    config = LogConfig(**cfg)  # type: ignore[arg-type]
    return PartitionLog.open(path, "t", 0, config, clock or ManualClock(T0))


def offsets_of(data: bytes) -> list[int]:
    return [r.offset for r in decode_records(data)]


def batch_bases(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for _, h in iter_batches(data)]


def read_all(log: PartitionLog, start: int | None = None) -> bytes:
    return log.read_bytes(log.log_start_offset if start is None else start, 1 << 30)
