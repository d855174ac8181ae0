"""Event-loop lag: how late the broker's event loop runs a timer that should fire every few ms.

Everything a strom broker does for its clients runs on one asyncio loop, so any call that blocks
it (an fsync, a large synchronous read, a long computation) delays every connection at once.
:class:`LoopLagMonitor` is the measurement: the scheduler runs :meth:`tick` every
``strom.event.loop.lag.sample.ms``; the time past the moment it was due is the lag (how long
the loop was busy with something else). It keeps a histogram (``strom_event_loop_lag_seconds``),
the largest lag seen (``strom_event_loop_lag_max_seconds``) and logs a WARN line for a stall of
``stall_log_s`` or more, at most once per ``log_interval_s`` (with how many more there were).

Sans-IO: the clock is passed in; the broker wires :meth:`tick` to its scheduler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .metrics import Histogram

log = logging.getLogger("strom.observability")

__all__ = ["LAG_BUCKETS", "LoopLagMonitor"]

# seconds: 0.25 ms .. 10 s (the goal is no stall over 5 ms; a stall of seconds must still show)
LAG_BUCKETS: tuple[float, ...] = (
    0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)


class LoopLagMonitor:
    """Lag of a periodic timer of ``interval_s`` (see the module docstring)."""

    def __init__(self, now: Callable[[], float], interval_s: float, *, stall_log_s: float = 1.0,
                 log_interval_s: float = 60.0) -> None:
        self.now = now
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

