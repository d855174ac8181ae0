"""Delayed operations: fetches that wait for data (``fetch.min.bytes``/``fetch.max.wait.ms``).

A waiting fetch registers an :class:`asyncio.Event` under each partition it reads; an append to
one of them sets the event so the fetch re-reads at once instead of sleeping out its wait. The
wait's timeout is a task of the injected :class:`~strom.scheduler.Scheduler` (:meth:`FetchPurgatory.wait`),
so on the manual scheduler a long poll ends exactly when the manual clock passes its deadline.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable

from ..scheduler import AsyncioScheduler, Scheduler

TopicPartition = tuple[str, int]


class FetchPurgatory:
    def __init__(self, scheduler: Scheduler | None = None) -> None:
        self._watchers: defaultdict[TopicPartition, set[asyncio.Event]] = defaultdict(set)
        self.scheduler: Scheduler = scheduler if scheduler is not None else AsyncioScheduler()
        self.waiting = 0  # fetches waiting now (the fetch purgatory's size, a metric)

    def size(self) -> int:
        return self.waiting

    async def wait(self, partitions: list[TopicPartition], timeout_ms: float) -> bool:
        """Wait until one of ``partitions`` is appended to (True) or ``timeout_ms`` passes (False)."""
        ev = self.watch(partitions)
        timed_out = False

        def expire() -> None:
            nonlocal timed_out
            timed_out = True
            ev.set()

        timer = self.scheduler.schedule(max(0.0, timeout_ms), expire, name="fetch-timeout")
        self.waiting += 1
        try:
            await ev.wait()
        finally:
            self.waiting -= 1
            timer.cancel()
            self.unwatch(ev, partitions)
        return not timed_out

    def watch(self, partitions: Iterable[TopicPartition]) -> asyncio.Event:
        ev = asyncio.Event()
        for tp in partitions:
            self._watchers[tp].add(ev)
        return ev

    def unwatch(self, ev: asyncio.Event, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            s = self._watchers.get(tp)
            if s is not None:
                s.discard(ev)
                if not s:
                    del self._watchers[tp]

    def notify(self, tp: TopicPartition) -> None:
        s = self._watchers.get(tp)
        if s:
            for ev in s:
                ev.set()
