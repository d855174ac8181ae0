"""Injected timers, beside the injected clock (:mod:`strom.clock`).

Broker logic never calls ``asyncio.sleep``/``loop.call_later`` for its timers: it asks a
:class:`Scheduler` (Kafka's ``org.apache.kafka.server.util.Scheduler`` / ``Timer``) to run a
function after a delay, or periodically. The broker runs on :class:`AsyncioScheduler`; tests and
simulations run on :class:`strom.testing.scheduler.ManualScheduler`, which fires due tasks in a
deterministic order when a :class:`strom.clock.ManualClock` is advanced.

Rules shared by both implementations:

* ``fn`` is called with no argument. If it returns an awaitable (an ``async def``), that runs as
  a task; a *periodic* task's next run is then scheduled only once it has finished, so a slow
  round never overlaps the next (the ``while True: await fn(); await asyncio.sleep(x)`` shape
  the loops had).
* An exception from ``fn`` is logged and, for a periodic task, the task keeps running: a timer
  that dies silently is worse than one that logs every round.
* :meth:`TaskHandle.cancel` is idempotent; a cancelled task never runs again (a coroutine
  already running is cancelled too).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("strom.scheduler")

TaskFn = Callable[[], Any]


class TaskHandle(Protocol):
    def cancel(self) -> None: ...

    @property
    def cancelled(self) -> bool: ...


class Scheduler(Protocol):
    def schedule(self, delay_ms: float, fn: TaskFn, *, name: str = "") -> TaskHandle:
        """Run ``fn`` once, ``delay_ms`` from now (0: as soon as the loop gets to it)."""
        ...

    def schedule_periodic(
        self, interval_ms: float | Callable[[], float], fn: TaskFn, *, initial_delay_ms: float | None = None,
        name: str = "",
    ) -> TaskHandle:
        """Run ``fn`` every ``interval_ms`` (first after ``initial_delay_ms``, by default one
        interval). ``interval_ms`` may be a function, asked after each run (a delay that depends
        on the state, e.g. the nearest deadline)."""
        ...

    def close(self) -> None:
        """Cancel every task (shutdown)."""
        ...


def _interval(interval_ms: float | Callable[[], float]) -> float:
    return max(0.0, float(interval_ms() if callable(interval_ms) else interval_ms))


class _Task:
    """One scheduled task (once or periodic), driven by its scheduler's ``_arm``."""

    __slots__ = ("_cancelled", "_owner", "fn", "interval_ms", "name", "running", "timer")

    def __init__(
        self, owner: Any, fn: TaskFn, interval_ms: float | Callable[[], float] | None, name: str
    ) -> None:
        self._owner = owner
        self.fn = fn
        self.interval_ms = interval_ms
        self.name = name or getattr(fn, "__qualname__", "task")
        self._cancelled = False
        self.timer: Any = None  # the implementation's pending timer
        self.running: asyncio.Future[Any] | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        if self._cancelled:
            return
        self._cancelled = True
        self._owner._disarm(self)
        if self.running is not None and not self.running.done():
            self.running.cancel()
        self._owner._tasks.discard(self)

    def fire(self) -> None:
        """The timer is due: run ``fn``; re-arm a periodic task when it (and its coroutine) is done."""
        self.timer = None
        if self._cancelled:
            return
        try:
            result = self.fn()
        except Exception:
            log.exception("scheduled task %s failed", self.name)
            result = None
        if inspect.isawaitable(result):
            fut = asyncio.ensure_future(result)
            self.running = fut
            fut.add_done_callback(self._finished)
            return
        self._after_run()

    def _finished(self, fut: asyncio.Future[Any]) -> None:
        self.running = None
        if not fut.cancelled() and fut.exception() is not None:
            log.error("scheduled task %s failed", self.name, exc_info=fut.exception())
        self._after_run()

    def _after_run(self) -> None:
        if self._cancelled:
            return
        if self.interval_ms is None:
            self._owner._tasks.discard(self)
            return
        try:
            delay = _interval(self.interval_ms)
        except Exception:
            log.exception("scheduled task %s: computing its next delay failed; retrying in 1 s", self.name)
            delay = 1000.0
        self._owner._arm(self, delay)


class SchedulerBase:
    """What both schedulers share; a subclass says how a task is armed (``_arm``) and disarmed."""

    def __init__(self) -> None:
        self._tasks: set[_Task] = set()

    def _arm(self, task: _Task, delay_ms: float) -> None:
        raise NotImplementedError

    def _disarm(self, task: _Task) -> None:
        raise NotImplementedError

    def schedule(self, delay_ms: float, fn: TaskFn, *, name: str = "") -> _Task:
        task = _Task(self, fn, None, name)
        self._tasks.add(task)
        self._arm(task, max(0.0, delay_ms))
        return task

    def schedule_periodic(
        self, interval_ms: float | Callable[[], float], fn: TaskFn, *, initial_delay_ms: float | None = None,
        name: str = "",
    ) -> _Task:
        task = _Task(self, fn, interval_ms, name)
        self._tasks.add(task)
        self._arm(task, _interval(interval_ms) if initial_delay_ms is None else max(0.0, initial_delay_ms))
        return task

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()


class AsyncioScheduler(SchedulerBase):
    """The broker's scheduler: timers of the running asyncio loop (``loop.call_later``), or of
    ``loop`` if given (then it may be called from outside the loop's coroutines)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__()
        self._loop = loop

    def _get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop if self._loop is not None else asyncio.get_running_loop()

    def _arm(self, task: _Task, delay_ms: float) -> None:
        loop = self._get_loop()
        if delay_ms > 0:
            task.timer = loop.call_later(delay_ms / 1000, task.fire)
        else:
            task.timer = loop.call_soon(task.fire)

    def _disarm(self, task: _Task) -> None:
        if task.timer is not None:
            task.timer.cancel()
            task.timer = None


class DeadlineTimer:
    """A task kept armed for the nearest deadline of some state: the coordinators' timers
    (sessions, rebalance and join phases, acquisition locks, offsets expiry).

    ``fn`` (sync or async) runs when the nearest ``next_deadline()`` (monotonic ms, None: none)
    is due, but at least every ``max_delay_ms`` and at most every ``min_delay_ms``; after each
    run the timer is armed again. :meth:`poke` after a state change moves the timer earlier if
    the nearest deadline now is; a poke during a run is left to the re-arm after it."""

    def __init__(
        self,
        scheduler: Scheduler,
        now_ms: Callable[[], int],
        fn: TaskFn,
        next_deadline: Callable[[], int | None],
        *,
        name: str,
        min_delay_ms: int = 5,
        max_delay_ms: int = 1000,
    ) -> None:
        self.scheduler = scheduler
        self.now_ms = now_ms
        self.fn = fn
        self.next_deadline = next_deadline
        self.name = name
        self.min_delay_ms = min_delay_ms
        self.max_delay_ms = max_delay_ms
        self._handle: TaskHandle | None = None
        self._due = 0
        self._running = False
        self._on = False

    def start(self) -> None:
        self._on = True
        self.poke()

    def stop(self) -> None:
        self._on = False
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def poke(self) -> None:
        if not self._on or self._running:
            return
        now = self.now_ms()
        nxt = self.next_deadline()
        if nxt is None:
            delay = self.max_delay_ms
        else:
            delay = min(max(nxt - now, self.min_delay_ms), self.max_delay_ms)
        if self._handle is not None and not self._handle.cancelled:
            if self._due <= now + delay:
                return
            self._handle.cancel()
        self._due = now + delay
        self._handle = self.scheduler.schedule(delay, self._fire, name=self.name)

    async def _fire(self) -> None:
        self._handle = None
        self._running = True
        try:
            result = self.fn()
            if inspect.isawaitable(result):
                await result
        except Exception:  # keep the timer alive; a bug here must not stop every group
            log.exception("%s step failed", self.name)
        finally:
            self._running = False
        self.poke()
