"""The flush a segment roll leaves behind, done off the event loop (Kafka's ``flush-log`` task).

A roll used to fsync the segment it closed (up to ``segment.bytes`` of page cache, often still
dirty), that segment's indexes, the producer snapshot and the directory on the event loop: a
stall of tens to hundreds of milliseconds for every client at every roll. Kafka's
``UnifiedLog.roll`` only creates the new segment and schedules the flush on its scheduler's
threads; the recovery point moves when that flush is done. :class:`RollFlusher` does the same:
installed with :func:`strom.log.partition_log.set_roll_flusher`, it runs each
:class:`~strom.log.partition_log.RollFlush` on one worker thread, in roll order (so the recovery
point never passes a segment that is not yet durable), moves the recovery point and writes the
checkpoint files there (:meth:`PartitionLog.finish_roll_flush`), and hands the outcome back to
the loop (counters; a failure goes to ``on_error``). A roll outside the event loop's thread (none today)
flushes inline.

Until the flush is done a crash only costs recovery time: the recovery point on disk still
lies below the rolled segment, which the next start re-reads and checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from ..log import partition_log
from ..log.partition_log import (
    PartitionLog,
    RollFlush,
    flush_roll_inline,
    set_background_io,
    set_roll_flusher,
)

log = logging.getLogger("strom.server")

__all__ = ["RollFlusher"]


class RollFlusher:
    """One worker thread for the rolls of every log of one event loop (see the module docstring).
    ``on_error(log, exc)``: a flush failed (the log's directory is then treated as failing)."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 on_error: Callable[[PartitionLog, BaseException], None]) -> None:
        self.loop = loop
        self.on_error = on_error
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strom-roll-flush")
        self._loop_thread = threading.get_ident()
        self.pending = 0
        self.done = 0
        self.closed = False

    def install(self) -> None:
        set_roll_flusher(self)
        set_background_io(self.run)

    def run(self, plog: PartitionLog, job: Callable[[], None]) -> bool:
        """Queue other file work of ``plog`` (retention's renames, checkpoint and unlinks) behind
        the roll flushes; False (the caller runs it) off the loop's thread or once closed."""
        return self._submit(plog, None, job)

    def __call__(self, plog: PartitionLog, job: RollFlush) -> None:
        if not self._submit(plog, job, lambda: self._flush(plog, job)):
            flush_roll_inline(plog, job)  # an error goes to the roll's caller, as without a flusher

    def _submit(self, plog: PartitionLog, roll: RollFlush | None, fn: Callable[[], None]) -> bool:
        if self.closed or threading.get_ident() != self._loop_thread:
            return False
        self.pending += 1
        fut = self._executor.submit(fn)
        fut.add_done_callback(lambda f: self._done_threadsafe(plog, roll, f))
        return True

    @staticmethod
    def _flush(plog: PartitionLog, job: RollFlush) -> None:
        """On the worker: the fsyncs, then the recovery point and the checkpoint files (their
        renames wait behind the file system's journal while a large fsync runs: ~10 ms, up to
        ~40 ms, measured; the event loop must not)."""
        job.sync()
        plog.finish_roll_flush(job)

    def _done_threadsafe(self, plog: PartitionLog, job: RollFlush | None, fut: Future[None]) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop (shutdown): the logs' close synced
            self.loop.call_soon_threadsafe(self._done, plog, job, fut)

    def _done(self, plog: PartitionLog, job: RollFlush | None, fut: Future[None]) -> None:
        self.pending -= 1
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            if job is None and plog.closed:
                return  # the log was deleted or closed (which finished its deletes) meanwhile
            self.on_error(plog, exc)
            return
        if job is not None:
            self.done += 1

    def close(self) -> None:
        """Stop taking jobs (later rolls flush inline) and wait for the ones queued."""
        self.closed = True
        if partition_log._roll_flusher is self:
            set_roll_flusher(None)
        if partition_log._background_io == self.run:
            set_background_io(None)
        self._executor.shutdown(wait=True)
