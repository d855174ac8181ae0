"""AlterReplicaLogDirs: moving a partition to another log directory while it serves.

Theory of operation (Kafka's ``ReplicaAlterLogDirsThread`` and ``replaceCurrentWithFutureLog``)
------------------------------------------------------------------------------------------------
1. A *future log* is created in the destination: ``<dest>/<topic>-<partition>.<uuid>-future``,
   starting at the first batch of the current log (its log start offset).
2. A task on the event loop copies the current log's batches into it, offsets kept
   (:meth:`PartitionLog.append_as_follower`), chunk by chunk, at most
   ``replica.alter.log.dirs.io.max.bytes.per.second``. The current log keeps serving produce,
   fetch and everything else meanwhile; the future log is invisible to clients.
3. Once the future log has reached the current log end offset, in one step of the event loop
   (no produce can interleave): both logs are closed (flushed), the future gets the current log
   start offset and high watermark, the current directory is renamed to
   ``<topic>-<partition>.<uuid>-delete``, the future one to ``<topic>-<partition>`` (each rename
   made durable), the log is opened again from its new place and published. The old directory
   is deleted in a worker thread.

Restarts: a future log found at start is resumed (step 2 goes on from where it was); one found
with no current log but with a ``-delete`` directory of the partition is a swap a crash cut
between its two renames — the future log was complete, and becomes the current one. Kafka orders
the renames the other way and asks the operator to delete one of two "duplicate" directories;
here the current one is renamed first so the crash is always recoverable. A future log that is
ahead of its current log (the current lost unflushed data in a crash) or behind its log start
(retention moved on) is discarded and the copy starts again. Moving to an offline directory,
a failure of either directory, or deleting the topic cancels the move (the future is deleted
if its directory is still there).

Only one move per partition: a new destination cancels the move under way (Kafka's
``futureReplicaDirChanged``); the current directory as destination cancels it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..durable_file import fsync_dir
from ..log.errors import KafkaStorageError, LogError
from ..log.log_dirs import delete_dir_name, future_dir_name
from ..log.partition_log import HIGH_WATERMARK_FILE, LOG_START_FILE, PartitionLog, _write_checkpoint
from ..protocol.records import iter_batches

if TYPE_CHECKING:
    from .replica_manager import ReplicaManager

log = logging.getLogger("strom.log_dir_mover")

CHUNK_BYTES = 1 << 20


@dataclass
class FutureMove:
    topic: str
    partition: int
    dest: Path  # the destination log dir
    future: PartitionLog
    task: asyncio.Task[None] | None = None

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)


class LogDirMover:
    """The moves under way, by partition. Everything runs on the event loop."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.replica_manager = replica_manager
        self.moves: dict[tuple[str, int], FutureMove] = {}
        self.swapped = 0  # moves finished since start (tests, metrics)

    # ------------------------------------------------------------------ starting and stopping
    def start_move(self, topic: str, partition: int, dest: Path) -> None:
        """Begin moving the (online) partition to the online log dir ``dest``; a no-op if it is
        there already or on its way there. Raises KafkaStorageError."""
        rm = self.replica_manager
        tp = (topic, partition)
        cur = rm.logs[tp]
        mv = self.moves.get(tp)
        if mv is not None:
            if mv.dest == dest:
                return
            self.cancel(tp)
        if cur.directory.parent == dest:
            return
        info = rm.metadata_cache.topic(topic)
        if info is None:
            raise KeyError(tp)
        start = self._first_batch_offset(cur)
        path = dest / future_dir_name(topic, partition)
        try:
            path.mkdir()
            _write_checkpoint(path / LOG_START_FILE, topic, partition, start)
            future = PartitionLog.open(path, topic, partition, rm.log_config(info), rm.clock)
        except (OSError, LogError) as e:
            shutil.rmtree(path, ignore_errors=True)
            raise KafkaStorageError(f"cannot create the future log {path}: {e}") from e
        self._run(FutureMove(topic, partition, dest, future))
        log.info("moving %s-%d from %s to %s", topic, partition, cur.directory.parent, dest)

    def resume(self, topic: str, partition: int, path: Path) -> None:
        """At start: go on with the move whose future log is at ``path``."""
        rm = self.replica_manager
        info = rm.metadata_cache.topic(topic)
        cur = rm.logs.get((topic, partition))
        if info is None or cur is None:
            remove_tree(path)
            return
        try:
            future = PartitionLog.open(path, topic, partition, rm.log_config(info), rm.clock)
        except LogError as e:
            log.warning("discarding the future log %s: %s", path, e)
            remove_tree(path)
            return
        log.info("resuming the move of %s-%d to %s at offset %d", topic, partition, path.parent,
                 future.log_end_offset)
        self._run(FutureMove(topic, partition, path.parent, future))

    def _run(self, mv: FutureMove) -> None:
        self.moves[mv.tp] = mv
        mv.task = asyncio.get_running_loop().create_task(self._copy(mv), name=f"alter-log-dir {mv.tp}")

    def cancel(self, tp: tuple[str, int], *, delete: bool = True) -> None:
        """Stop the move of ``tp``; its future log is deleted (unless ``delete`` is False: its
        directory failed, the files are left as they are)."""
        mv = self.moves.pop(tp, None)
        if mv is None:
            return
        if mv.task is not None and mv.task is not asyncio.current_task():
            mv.task.cancel()
        if delete:
            try:
                mv.future.delete()
            except OSError as e:
                log.warning("removing the future log of %s-%d failed: %s", tp[0], tp[1], e)
        else:
            with contextlib.suppress(Exception):
                mv.future.close_without_flush()
        log.info("move of %s-%d to %s cancelled", tp[0], tp[1], mv.dest)

    def cancel_into(self, log_dir: Path) -> None:
        """The directory ``log_dir`` failed: drop the moves into it."""
        for tp, mv in list(self.moves.items()):
            if mv.dest == log_dir:
                self.cancel(tp, delete=False)

    def close(self) -> None:
        """Broker shutdown: close every future log cleanly (a restart resumes the moves)."""
        for mv in list(self.moves.values()):
            if mv.task is not None:
                mv.task.cancel()
            try:
                mv.future.close()
            except Exception:
                log.exception("closing the future log of %s-%d failed", mv.topic, mv.partition)
        self.moves.clear()

    # ------------------------------------------------------------------ the copy
    @staticmethod
    def _first_batch_offset(cur: PartitionLog) -> int:
        """Where a future log starts: the base of the batch holding the log start offset."""
        if cur.log_start_offset >= cur.log_end_offset:
            return cur.log_start_offset
        data = cur.read_bytes(cur.log_start_offset, 1, max_offset=cur.log_end_offset)
        for _pos, h in iter_batches(data):
            return int(h.base_offset)
        return cur.log_start_offset

    def _restart_future(self, mv: FutureMove, cur: PartitionLog) -> None:
        """Throw the future log away and start it again at the current log start."""
        rm = self.replica_manager
        info = rm.metadata_cache.topic(mv.topic)
        if info is None:
            raise KeyError(mv.tp)
        mv.future.delete()
        start = self._first_batch_offset(cur)
        path = mv.dest / future_dir_name(mv.topic, mv.partition)
        path.mkdir()
        _write_checkpoint(path / LOG_START_FILE, mv.topic, mv.partition, start)
        mv.future = PartitionLog.open(path, mv.topic, mv.partition, rm.log_config(info), rm.clock)

    async def _copy(self, mv: FutureMove) -> None:
        rm = self.replica_manager
        failing: PartitionLog = mv.future  # the log whose I/O an error comes from
        try:
            while True:
                if self.moves.get(mv.tp) is not mv:
                    return
                cur = rm.logs.get(mv.tp)
                if cur is None or cur.closed:
                    self.cancel(mv.tp)
                    return
                fut = mv.future
                if fut.log_end_offset > cur.log_end_offset or fut.log_end_offset < cur.log_start_offset:
                    log.info("future log of %s-%d (end %d) does not fit the current log [%d, %d]: "
                             "copying again", mv.topic, mv.partition, fut.log_end_offset,
                             cur.log_start_offset, cur.log_end_offset)
                    self._restart_future(mv, cur)
                    continue
                if fut.log_end_offset == cur.log_end_offset:
                    self._swap(mv, cur)
                    return
                failing = cur
                data = cur.read_bytes(fut.log_end_offset, CHUNK_BYTES, max_offset=cur.log_end_offset)
                failing = fut
                if not data:
                    await asyncio.sleep(0.05)
                    continue
                fut.append_as_follower(data)
                rate = rm.config["replica.alter.log.dirs.io.max.bytes.per.second"]
                await asyncio.sleep(len(data) / rate if 0 < rate < (1 << 62) else 0)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            # a storage error on either side: give the move up; the directory checks decide
            # whether a directory failed (and then take its partitions offline)
            log.error("moving %s-%d to %s failed: %s; the partition stays where it was",
                      mv.topic, mv.partition, mv.dest, e)
            rm.note_storage_error(failing, e)
            if self.moves.get(mv.tp) is mv:
                self.cancel(mv.tp, delete=mv.dest not in rm.offline_dirs)

    def _swap(self, mv: FutureMove, cur: PartitionLog) -> None:
        """Step 3 of the module docstring; no await in here."""
        rm = self.replica_manager
        tp = mv.tp
        fut = mv.future
        info = rm.metadata_cache.topic(mv.topic)
        if info is None:
            raise KeyError(tp)
        src_dir = cur.directory.parent
        final = mv.dest / f"{mv.topic}-{mv.partition}"
        doomed = src_dir / delete_dir_name(mv.topic, mv.partition, uuid.uuid4())
        log_start, hw = cur.log_start_offset, cur.high_watermark
        fut.close()
        # the future log takes over the current one's log start offset and high watermark
        _write_checkpoint(fut.directory / LOG_START_FILE, mv.topic, mv.partition, log_start)
        _write_checkpoint(fut.directory / HIGH_WATERMARK_FILE, mv.topic, mv.partition, hw)
        fsync_dir(fut.directory)
        cur.close()
        renamed = False
        try:
            os.rename(cur.directory, doomed)
            renamed = True
            fsync_dir(src_dir)
            os.rename(fut.directory, final)
            fsync_dir(mv.dest)
            new = PartitionLog.open(final, mv.topic, mv.partition, rm.log_config(info), rm.clock)
        except (OSError, LogError) as e:
            # undo what can be undone and keep serving from the current log
            log.error("swapping %s-%d into %s failed: %s; it stays in %s", mv.topic, mv.partition,
                      mv.dest, e, src_dir)
            if renamed and not cur.directory.exists():
                with contextlib.suppress(OSError):
                    os.rename(doomed, cur.directory)
            rm.logs[tp] = PartitionLog.open(cur.directory, mv.topic, mv.partition,
                                                rm.log_config(info), rm.clock)
            rm.logs[tp].update_high_watermark(hw)
            raise
        new.update_high_watermark(max(hw, new.high_watermark))
        rm.logs[tp] = new
        self.moves.pop(tp, None)
        self.swapped += 1
        rm.purgatory.notify(tp)
        log.info("moved %s-%d from %s to %s (offsets %d..%d)", mv.topic, mv.partition, src_dir, mv.dest,
                 new.log_start_offset, new.log_end_offset)
        asyncio.get_running_loop().run_in_executor(None, remove_tree, doomed)


def remove_tree(path: Path) -> None:
    """Delete a log directory tree; one WARN line if it cannot (a later start retries)."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning("removing %s failed: %s", path, e)
