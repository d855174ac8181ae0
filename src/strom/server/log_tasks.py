"""Background log maintenance: retention, delayed segment deletion, and the log cleaner.

* Retention runs on the event loop every ``log.retention.check.interval.ms`` (a periodic task of
  the broker's :class:`~strom.scheduler.Scheduler`): each partition
  log's :meth:`PartitionLog.delete_old_segments` (cheap: header-free, renames only).
* Removed segments are unlinked by a small task once ``file.delete.delay.ms`` has passed (each
  log's :meth:`PartitionLog.delete_expired_segments`), checked every second (or more often if a
  log's delay is shorter).
* The cleaner runs in one daemon thread (``strom-log-cleaner``) so compaction never blocks the
  event loop; it synchronises with the loop only through each log's lock (see
  :mod:`strom.log.partition_log`). It cleans the filthiest compacted log, then backs off for
  ``log.cleaner.backoff.ms`` (default 15 s, Kafka's) when nothing is cleanable; its first round
  waits ``strom.log.cleaner.initial.delay.ms`` (default 0; benchmarks use it). Both waits are
  timed by the broker's scheduler (a task that wakes the thread). Set
  ``log.cleaner.enable=false`` to turn it off. Cancelling the returned task stops the thread at
  its next batch.
* By default the cleaner's CPU work (offset map, recopy) runs in a child process
  (:class:`strom.log.cleaner.CleanerWorker`, ``strom.log.cleaner.process=true``, niced by
  ``strom.log.cleaner.process.nice``, default 10): a CPU-bound Python thread would make the
  event loop wait for the GIL after every syscall, multiplying produce latency while it cleans.
  The thread keeps all locking and swapping. ``log.cleaner.io.max.bytes.per.second`` (Kafka's,
  unlimited by default, re-read every round) throttles the bytes it reads and writes;
  ``strom.log.cleaner.writeback.pacing`` (default true) writes cleaned segments back to disk as
  they are written (sync_file_range) rather than in one burst at their fsync.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
from typing import TYPE_CHECKING, Any

from ..config_schema import BROKER_CONFIGS
from ..log.cleaner import NO_THROTTLE, CleanerAborted, LogCleaner
from ..log.errors import KafkaStorageError
from ..scheduler import AsyncioScheduler, TaskHandle

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("strom.log_tasks")

SWITCH_INTERVAL_S = 0.0005


def _conf(broker: Broker, name: str, typ: type, default: Any = None) -> Any:
    """The broker config ``name`` as ``typ``; when it is unset or unreadable, its default in the
    schema (``default`` only for the tuning keys the schema does not list)."""
    if default is None:
        default = BROKER_CONFIGS[name].default
    raw = broker.config.get(name, default)
    if typ is bool and isinstance(raw, str):
        return raw.strip().lower() == "true"
    try:
        return typ(raw)
    except (TypeError, ValueError):
        return default


def run_retention(broker: Broker) -> int:
    """One retention pass over every log; returns the number of segments removed."""
    removed = 0
    storage_log = broker.storage_log
    for plog in list(broker.replica_manager.logs.values()):
        try:
            n = plog.delete_old_segments()
        except (KafkaStorageError, OSError) as e:
            storage_log.failed("retention of", f"{plog.topic}-{plog.partition}", e,
                               "its old segments stay; retrying at the next retention check")
            continue
        except Exception:
            log.exception("retention failed for %s-%d", plog.topic, plog.partition)
            continue
        if storage_log.failing:
            storage_log.ok("retention of", f"{plog.topic}-{plog.partition}")
        if n:
            removed += n
            log.info(
                "retention removed %d segment(s) of %s-%d; log start offset now %d",
                n,
                plog.topic,
                plog.partition,
                plog.log_start_offset,
            )
    if removed and broker.metrics is not None:
        broker.metrics.retention_segments_deleted += removed
    return removed


def _deleter_interval_ms(broker: Broker) -> int:
    """Every second, or half the shortest ``file.delete.delay.ms`` of a log with pending deletes."""
    logs = list(broker.replica_manager.logs.values())
    delays = [p.config.file_delete_delay_ms for p in logs if p.pending_deletes]
    return min([1000, *[max(10, d // 2) for d in delays]])


def run_deleter(broker: Broker) -> None:
    """Unlink the removed segments whose ``file.delete.delay.ms`` has passed."""
    storage_log = broker.storage_log
    for plog in list(broker.replica_manager.logs.values()):
        if plog.pending_deletes:
            tp = f"{plog.topic}-{plog.partition}"
            try:
                plog.delete_expired_segments()
            except (KafkaStorageError, OSError) as e:
                storage_log.failed("unlinking deleted segments of", tp, e,
                                   "the files stay as *.deleted; retrying every second")
                continue
            except Exception:
                log.exception("deleting old segments of %s failed", tp)
                continue
            storage_log.ok("unlinking deleted segments of", tp)


class CleanerThread:
    """The cleaner's worker thread (Kafka's CleanerThread.cleanOrSleep loop)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.backoff_s = (
            max(1, int(_conf(broker, "log.cleaner.backoff.ms", int))) / 1000
        )
        self.use_process = bool(_conf(broker, "strom.log.cleaner.process", bool))
        self.cleaner = LogCleaner(
            broker.log_dir,
            broker.clock,
            max_map_entries=int(_conf(broker, "strom.log.cleaner.max.map.entries", int, 4_000_000)),
            io_max_bytes_per_second=self._io_max_bytes_per_second(),
            use_process=self.use_process,
            worker_nice=int(_conf(broker, "strom.log.cleaner.process.nice", int)),
            pace_writeback=bool(_conf(broker, "strom.log.cleaner.writeback.pacing", bool)),
        )
        self.wakeup = threading.Event()
        self.thread = threading.Thread(target=self._run, name="strom-log-cleaner", daemon=True)
        self.loop: asyncio.AbstractEventLoop | None = None  # the broker's, where its scheduler runs
        self._backoff: TaskHandle | None = None

    def _io_max_bytes_per_second(self) -> float:
        rate = float(_conf(self.broker, "log.cleaner.io.max.bytes.per.second", float))
        return rate if rate > 0 else NO_THROTTLE

    def start(self) -> None:
        with contextlib.suppress(RuntimeError):  # (no loop: the backoff is a plain timed wait)
            self.loop = asyncio.get_running_loop()
        if not self.use_process:
            # In-thread cleaning is CPU-bound Python: with the default 5 ms GIL switch interval
            # the event loop could wait up to 5 ms for the GIL on every wake-up while it runs.
            # 0.5 ms bounds that; it only costs anything while the threads compete for the GIL.
            sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        self.thread.start()

    def stop(self) -> None:
        self.cleaner.stop.set()
        self.wakeup.set()
        if self._backoff is not None:
            self._backoff.cancel()

    def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds`` in the cleaner thread, timed by the broker's scheduler (so on a
        manual scheduler the cleaner runs when simulated time passes); True if stopping."""
        loop = self.loop
        ms = seconds * 1000

        def arm() -> None:
            self._backoff = self.broker.scheduler.schedule(ms, self.wakeup.set, name="log-cleaner-backoff")

        try:
            if loop is None or loop.is_closed():
                raise RuntimeError("no event loop")
            loop.call_soon_threadsafe(arm)
        except RuntimeError:
            self.wakeup.wait(seconds)
        else:
            self.wakeup.wait()
        self.wakeup.clear()
        return self.cleaner.stop.is_set()

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self.cleaner.close()

    def _loop(self) -> None:
        stop = self.cleaner.stop
        try:
            self.cleaner.start_worker()
        except OSError:
            log.exception("starting the log cleaner's worker process failed")
        initial = int(_conf(self.broker, "strom.log.cleaner.initial.delay.ms", int, 0))
        if initial > 0 and self._sleep(initial / 1000):
            return
        while not stop.is_set():
            cleaned = None
            try:
                self.cleaner.set_io_max_bytes_per_second(self._io_max_bytes_per_second())
                logs = list(self.broker.replica_manager.logs.values())
                known = {(p.topic, p.partition) for p in logs}
                for tp in [tp for tp in self.cleaner.checkpoint.offsets if tp not in known]:
                    self.cleaner.forget(tp)
                cleaned = self.cleaner.clean_once(logs)
            except CleanerAborted:
                return
            except (KafkaStorageError, OSError) as e:
                self.broker.storage_log.failed(
                    "log cleaning", "round", e, f"nothing was swapped in; retrying in {self.backoff_s:g} s"
                )
            except Exception:
                log.exception("log cleaner round failed")
            else:
                self.broker.storage_log.ok("log cleaning", "round")
            metrics = self.broker.metrics
            if cleaned is not None and metrics is not None:  # (a metric: races with a scrape tolerated)
                metrics.cleaner_runs += 1
                metrics.cleaner_bytes_read += cleaned.bytes_read
                metrics.cleaner_bytes_written += cleaned.bytes_written
                metrics.cleaner_seconds += cleaned.elapsed_s
            if cleaned is None:
                self._sleep(self.backoff_s)


class _CleanerHandle:
    """The cleaner thread as a cancellable task (cancel stops it at its next batch)."""

    def __init__(self, thread: CleanerThread) -> None:
        self.thread = thread
        self.cancelled = False

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.thread.stop()


def start_log_tasks(broker: Broker) -> list[TaskHandle]:
    """Called by :meth:`Broker.start`: retention and segment deletion as periodic tasks of the
    broker's scheduler, and the cleaner thread; the broker cancels them on shutdown."""
    sched = broker.scheduler
    retention_ms = max(1, int(_conf(broker, "log.retention.check.interval.ms", int)))
    tasks: list[TaskHandle] = [
        sched.schedule_periodic(retention_ms, lambda: run_retention(broker), name="log-retention"),
        # unlinking a large segment can take milliseconds: off the event loop, as Kafka's
        # scheduler threads do it (the next round is scheduled once this one is done)
        sched.schedule_periodic(lambda: _deleter_interval_ms(broker),
                                (lambda: asyncio.to_thread(run_deleter, broker))
                                if isinstance(sched, AsyncioScheduler) else (lambda: run_deleter(broker)),
                                name="log-segment-deleter"),
    ]
    if _conf(broker, "log.cleaner.enable", bool):
        thread = CleanerThread(broker)
        broker.log_cleaner = thread  # type: ignore[attr-defined]  # for tests and tools
        thread.start()
        tasks.append(_CleanerHandle(thread))
    return tasks
