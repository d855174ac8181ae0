"""A scheduler driven by :class:`strom.clock.ManualClock`, for deterministic tests.

Nothing runs by itself: :meth:`ManualScheduler.advance` moves the clock forward and, on the way,
fires every task that falls due, in the order of (due time, order of scheduling), with the clock
set to each task's due time when it runs. A task scheduled at the current time (``delay_ms=0``)
runs at the next :meth:`advance` (``advance(0)`` runs just those). Tasks that return a coroutine
run as asyncio tasks (so :meth:`advance` must be called with a loop running, from a test's
coroutine); :meth:`settle` lets them, and whatever they wake, run to quiescence.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

from ..clock import ManualClock
from ..scheduler import SchedulerBase, _Task


class ManualScheduler(SchedulerBase):
    def __init__(self, clock: ManualClock) -> None:
        super().__init__()
        self.clock = clock
        self._heap: list[tuple[int, int, _Task]] = []
        self._seq = itertools.count()

    # how a task is armed: an entry in the heap (a cancelled task's entry is skipped when popped)
    def _arm(self, task: _Task, delay_ms: float) -> None:
        due = self.clock.monotonic_ms() + int(delay_ms)
        entry = (due, next(self._seq), task)
        task.timer = entry
        heapq.heappush(self._heap, entry)

    def _disarm(self, task: _Task) -> None:
        task.timer = None

    # ------------------------------------------------------------------ driving

    def next_due(self) -> int | None:
        """The monotonic time of the earliest pending task, or None."""
        while self._heap and self._heap[0][2].timer is not self._heap[0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def advance(self, ms: int) -> int:
        """Move the clock ``ms`` forward, firing due tasks in order; returns how many fired."""
        if ms < 0:
            raise ValueError("a clock does not go backwards")
        target = self.clock.monotonic_ms() + ms
        fired = 0
        while True:
            due = self.next_due()
            if due is None or due > target:
                break
            _due, _seq, task = heapq.heappop(self._heap)
            now = self.clock.monotonic_ms()
            if due > now:
                self.clock.advance(due - now)
            task.fire()
            fired += 1
        now = self.clock.monotonic_ms()
        if target > now:
            self.clock.advance(target - now)
        return fired

    async def settle(self, rounds: int = 20) -> None:
        """Let the loop run what is ready (tasks fired, responses woken) for a few rounds."""
        for _ in range(rounds):
            await asyncio.sleep(0)

    @property
    def pending(self) -> int:
        return sum(1 for _d, _s, t in self._heap if t.timer is not None and not t.cancelled)
