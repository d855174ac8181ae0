"""Garbage-collector pauses: how long each collection of CPython's cyclic GC stopped the broker.

A collection runs inside whatever call allocated the object that crossed a generation's
threshold, so on the event loop's thread it is a stall like any other: a full (generation 2)
collection walks every tracked object of the process. :class:`GcPauseMonitor` times each
collection through ``gc.callbacks`` and keeps a histogram per generation
(``strom_gc_pause_seconds{generation=...}``) and the longest pause.

``gc.callbacks`` is process-wide: :meth:`install` adds the monitor's callback, :meth:`close`
removes it (several brokers in one test process each have their own).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from .loop_lag import LAG_BUCKETS
from .metrics import Histogram

__all__ = ["GcPauseMonitor"]


class GcPauseMonitor:
    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.histograms: dict[int, Histogram] = {g: Histogram(LAG_BUCKETS) for g in range(3)}
        self.max_pause_s = 0.0
        self._started: float | None = None

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def close(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = self.clock()
            return
        started, self._started = self._started, None
        if started is None:
            return
        pause = self.clock() - started
        h = self.histograms.get(int(info.get("generation", 2)))
        if h is not None:
            h.observe(pause)
        if pause > self.max_pause_s:
            self.max_pause_s = pause
