"""Event-loop lag: how late the broker's event loop runs a timer that should fire every few ms.

Everything a strom broker does for its clients runs on one asyncio loop, so any call that blocks
it (an fsync, a large synchronous read, a long computation) delays every connection at once.
:class:`LoopLagMonitor` is the measurement: the scheduler runs :meth:`tick` every
``strom.event.loop.lag.sample.ms``; the time past the moment it was due is the lag (how long
the loop was busy with something else). It keeps a histogram (``strom_event_loop_lag_seconds``),
the largest lag seen (``strom_event_loop_lag_max_seconds``) and logs a WARN line for a stall of
``stall_log_s`` or more, at most once per ``log_interval_s`` (with how many more there were).

A late tick has two possible causes, and on a machine with few cores they look alike: the loop
was busy (a long callback, many callbacks in one iteration, a GC pause), or the broker's thread
was runnable but waiting for a core (the OS ran another process). With a ``cpu`` clock (the loop
thread's CPU time, ``time.thread_time``) the monitor also records the *busy lag*, ``min(lag, CPU
the loop thread used since the previous tick)``: an upper bound of the part of the lag the loop
spent running its own work (``strom_event_loop_busy_lag_seconds``). A tick late while the thread
hardly ran was the OS's doing, not the broker's. With a ``waited`` clock (how long the thread has
waited on a run queue for a core, :func:`runqueue_wait_clock`: Linux's schedstat) it records the
*own lag*, ``max(0, lag - wait since the previous tick)``: a lower bound of the same part
(``strom_event_loop_own_lag_seconds``). From the moment the timer is due the loop either runs or
waits for a core, so the loop's own stall lies between the two.

Sans-IO: the clocks are passed in; the broker wires :meth:`tick` to its scheduler.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable

from .metrics import Histogram

log = logging.getLogger("strom.observability")

__all__ = ["LAG_BUCKETS", "LoopLagMonitor", "runqueue_wait_clock"]

# seconds: 0.25 ms .. 10 s (the goal is no stall over 5 ms; a stall of seconds must still show)
LAG_BUCKETS: tuple[float, ...] = (
    0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)


class _SchedstatClock:
    """The second field of an open schedstat file, in seconds; the file is closed with the clock."""

    __slots__ = ("__weakref__", "fd")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        weakref.finalize(self, os.close, fd)

    def __call__(self) -> float:
        try:
            return int(os.pread(self.fd, 128, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return 0.0


def runqueue_wait_clock() -> Callable[[], float] | None:
    """Seconds the calling thread has spent runnable but waiting for a core (the second field of
    its ``/proc/self/task/<tid>/schedstat``), as a clock that can be read from any thread; None
    where the kernel does not expose it. The file stays open and is read with ``pread`` (the
    kernel writes it anew at offset 0): 1.4 µs a read, against 10 µs (and far more on a busy
    machine) to open, read and close it on every tick."""
    try:
        fd = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    clock = _SchedstatClock(fd)
    try:
        int(os.pread(fd, 128, 0).split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return clock


class LoopLagMonitor:
    """Lag of a periodic timer of ``interval_s`` (see the module docstring)."""

    def __init__(self, now: Callable[[], float], interval_s: float, *, stall_log_s: float = 1.0,
                 log_interval_s: float = 60.0, cpu: Callable[[], float] | None = None,
                 waited: Callable[[], float] | None = None) -> None:
        self.now = now
        self.cpu = cpu
        self.busy_histogram: Histogram | None = Histogram(LAG_BUCKETS) if cpu is not None else None
        self.max_busy_lag_s = 0.0
        self._cpu_at = 0.0
        self.waited = waited
        self.own_histogram: Histogram | None = Histogram(LAG_BUCKETS) if waited is not None else None
        self.max_own_lag_s = 0.0
        self._waited_at = 0.0
        self.interval_s = interval_s
        self.stall_log_s = stall_log_s
        self.log_interval_s = log_interval_s
        self.histogram = Histogram(LAG_BUCKETS)
        self.max_lag_s = 0.0
        self._due: float | None = None
        self._last_log = float("-inf")
        self._unlogged = 0

    def start(self) -> None:
        """The timer was just scheduled: its first run is due one interval from now."""
        self._due = self.now() + self.interval_s
        if self.cpu is not None:
            self._cpu_at = self.cpu()
        if self.waited is not None:
            self._waited_at = self.waited()

    def tick(self) -> float:
        """The timer ran: record how late, schedule the next due time. Returns the lag (s)."""
        now = self.now()
        due = self._due
        self._due = now + self.interval_s
        if due is None:
            return 0.0
        lag = max(0.0, now - due)
        self.histogram.observe(lag)
        if lag > self.max_lag_s:
            self.max_lag_s = lag
        if self.cpu is not None and self.busy_histogram is not None:
            cpu_now = self.cpu()
            busy = min(lag, max(0.0, cpu_now - self._cpu_at))
            self._cpu_at = cpu_now
            self.busy_histogram.observe(busy)
            if busy > self.max_busy_lag_s:
                self.max_busy_lag_s = busy
        if self.waited is not None and self.own_histogram is not None:
            waited_now = self.waited()
            own = max(0.0, lag - (waited_now - self._waited_at))
            self._waited_at = waited_now
            self.own_histogram.observe(own)
            if own > self.max_own_lag_s:
                self.max_own_lag_s = own
        if lag >= self.stall_log_s:
            if now - self._last_log >= self.log_interval_s:
                more = f" ({self._unlogged} more stalls over {self.stall_log_s:g} s since the last report)" \
                    if self._unlogged else ""
                log.warning("the event loop was blocked for %.3f s%s", lag, more)
                self._last_log = now
                self._unlogged = 0
            else:
                self._unlogged += 1
        return lag

