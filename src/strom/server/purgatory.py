"""Delayed operations: fetches that wait for data (``fetch.min.bytes``/``fetch.max.wait.ms``).

A waiting fetch registers an :class:`asyncio.Event` under each partition it reads; an append to
one of them sets the event so the fetch re-reads at once instead of sleeping out its wait.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable

TopicPartition = tuple[str, int]


class FetchPurgatory:
    def __init__(self) -> None:
        self._watchers: defaultdict[TopicPartition, set[asyncio.Event]] = defaultdict(set)

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
