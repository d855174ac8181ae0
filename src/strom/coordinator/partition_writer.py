"""How the coordinators write their partitions: append now, answer when the high watermark
reaches the append (Kafka's ``PartitionWriter`` and the coordinator runtime's HW listener).

Theory of operation
-------------------
A coordinator write has two halves, as in Kafka's ``CoordinatorRuntime``:

1. :meth:`PartitionWriter.append` puts the records in the partition's log *now*, on the caller's
   thread, without waiting for the disk, and returns the log end offset right after them.
   Nothing blocks; a failure to append (partition offline, disk full) raises
   :class:`CoordinatorWriteError` at once and the coordinator keeps no state from the step.
2. The answer waits until the partition's **high watermark** covers that offset. On a single
   node the HW of an internal partition advances when the records are *durable* (fsynced by the
   broker's flusher thread, :mod:`strom.server.coordinator_writer`), so a response still goes
   out only once what it acknowledges survives a power cut. With replication the HW will
   advance when the ISR has the records; the coordinators do not change.

:meth:`PartitionWriter.await_offset` is the completion a coordinator waits on; it fails with
:class:`CoordinatorWriteError` when the write can no longer become durable (the flush failed,
the partition went offline). Kafka's ``Listener.onHighWatermarkUpdated`` is
:meth:`PartitionWriter.register_listener` for runtimes that prefer a callback.

Concurrent writes to one partition share one flush: the flusher syncs whatever is in the log
when it starts, and everything appended while it ran is synced by the next round.

Errors (:func:`coordinator_error`) follow Kafka's ``CoordinatorRuntime`` /
``GroupCoordinatorService.normalizeException``: UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS,
REQUEST_TIMED_OUT -> COORDINATOR_NOT_AVAILABLE; NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR ->
NOT_COORDINATOR; MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_FETCH_SIZE ->
UNKNOWN_SERVER_ERROR; COORDINATOR_LOAD_IN_PROGRESS and NOT_COORDINATOR pass through. Any other
failure (a bug, an injected fault) answers COORDINATOR_NOT_AVAILABLE, as strom always has.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from ..protocol.errors import ErrorCode

TopicPartition = tuple[str, int]
Records = Sequence[tuple[bytes, bytes | None]]


class CoordinatorWriteError(Exception):
    """A coordinator write failed; ``code`` is the partition's error (Kafka's code as the log
    answered it, e.g. KAFKA_STORAGE_ERROR), mapped for clients by :func:`coordinator_error`."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or f"coordinator write failed with error {code}")
        self.code = code


_MAPPED: dict[int, int] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorCode.COORDINATOR_NOT_AVAILABLE,
}


def coordinator_error(exc: BaseException) -> int:
    """The error a coordinator answers for a failed write (see the module doc)."""
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return _MAPPED.get(code, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


class HighWatermarkListener(Protocol):
    def on_high_watermark_updated(self, tp: TopicPartition, offset: int) -> None: ...


class PartitionWriter(Protocol):
    def append(
        self,
        tp: TopicPartition,
        records: Records,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> int:
        """Append key/value records (value None: tombstone) without waiting for the disk;
        returns the log end offset after them. Raises :class:`CoordinatorWriteError`."""
        ...

    def append_marker(self, tp: TopicPartition, producer_id: int, producer_epoch: int, commit: bool) -> int:
        """Append a transaction marker (control batch); returns the log end offset after it."""
        ...

    def await_offset(self, tp: TopicPartition, offset: int) -> Awaitable[None]:
        """Done when the HW of ``tp`` reaches ``offset``; fails with CoordinatorWriteError."""
        ...

    def high_watermark(self, tp: TopicPartition) -> int: ...

    def register_listener(self, tp: TopicPartition, listener: HighWatermarkListener) -> None: ...

    def deregister_listener(self, tp: TopicPartition, listener: HighWatermarkListener) -> None: ...


class DeferredQueue:
    """Completions waiting for one partition's HW, in offset order (Kafka's DeferredEventQueue)."""

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, offset: int, fut: asyncio.Future[None]) -> None:
        w = self._waiting
        if not w or w[-1][0] <= offset:
            w.append((offset, fut))
        else:  # out of order (rare: a caller waiting for an older offset): keep the order
            items = sorted([*w, (offset, fut)], key=lambda e: e[0])
            w.clear()
            w.extend(items)

    def complete_upto(self, hw: int) -> None:
        w = self._waiting
        while w and w[0][0] <= hw:
            _o, fut = w.popleft()
            if not fut.done():
                fut.set_result(None)

    def fail_upto(self, offset: int | None, exc: BaseException) -> None:
        """Fail the waiters for offsets up to ``offset`` (None: all)."""
        w = self._waiting
        while w and (offset is None or w[0][0] <= offset):
            _o, fut = w.popleft()
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # retrieved: a waiter that went away leaves no warning


def done_future() -> asyncio.Future[None]:
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    fut.set_result(None)
    return fut


ListenerFn = Callable[[TopicPartition, int], None]
