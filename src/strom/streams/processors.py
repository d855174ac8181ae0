"""The operators of ``strom.streams`` as plain Python state machines (no Spark in here).

Theory of operation
-------------------
A *task* is one partition of the input topic(s), as in Kafka Streams: every operator keeps, per
task, a ``stream_time`` (the largest record timestamp the task has seen) and its state per key in
one picklable dict. :func:`run_task` feeds a task's records in Kafka Streams' order: each input
side in offset order; with two sides (joins), the side whose next record has the smaller timestamp
goes first (ties: the table / left side first), as Kafka Streams' ``PartitionGroup`` picks the
partition with the lowest head timestamp. Operators return the records they emit, in order, as
``(key, value)`` pairs of Python objects (``None`` value = tombstone).

Late records (Kafka Streams' grace): windowed aggregations accept a record for a time window
``[start, end)`` while ``end + grace > stream_time`` (``TimeWindows``) and for a session while
``session end + grace >= stream_time`` (``SessionWindows``); ``emit="final"`` (``suppress(
untilWindowCloses)``) emits a window once ``stream_time >= end + grace`` (sessions:
``> end + grace``) and only then. Stream-stream joins drop a record older than
``stream_time - grace``.

Error contract: user functions' exceptions propagate (the Spark task fails, Spark retries it).
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Aggregate",
    "JoinWindows",
    "Record",
    "SessionAggregate",
    "SessionWindows",
    "StreamStreamJoin",
    "StreamTableJoin",
    "TableSource",
    "TimeWindows",
    "Windowed",
    "WindowedAggregate",
    "merge_sides",
    "run_task",
]

Record = tuple[int, Any, Any, int]  # side, key, value, timestamp
Out = list[tuple[Any, Any]]


@dataclass(frozen=True)
class Windowed:
    """A windowed result's key (Kafka Streams' ``Windowed<K>``): ``[start, end)`` in ms."""

    key: Any
    start: int
    end: int

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "start": self.start, "end": self.end}


@dataclass(frozen=True)
class TimeWindows:
    """Tumbling (``advance == size``) or hopping windows, sizes in ms, as Kafka Streams'
    ``TimeWindows.ofSizeAndGrace(size, grace).advanceBy(advance)``."""

    size: int
    advance: int = 0
    grace: int = 0

    def __post_init__(self) -> None:
        if self.size <= 0 or self.grace < 0 or self.advance < 0 or self.advance > self.size:
            raise ValueError("TimeWindows needs size > 0, 0 < advance <= size and grace >= 0")

    @property
    def step(self) -> int:
        return self.advance or self.size

    def windows_for(self, ts: int) -> list[tuple[int, int]]:
        """Every window ``[start, start + size)`` holding ``ts`` (starts aligned to the epoch)."""
        first = max(0, ts - self.size + self.step) // self.step * self.step
        out = []
        s = first
        while s <= ts:
            if s + self.size > ts:
                out.append((s, s + self.size))
            s += self.step
        return out


@dataclass(frozen=True)
class SessionWindows:
    """Sessions of one key: records at most ``gap`` ms apart fall into one session."""

    gap: int
    grace: int = 0

    def __post_init__(self) -> None:
        if self.gap <= 0 or self.grace < 0:
            raise ValueError("SessionWindows needs gap > 0 and grace >= 0")


@dataclass(frozen=True)
class JoinWindows:
    """Stream-stream join window: a left record at ``t`` joins right records in
    ``[t - before, t + after]`` (Kafka Streams' ``JoinWindows.ofTimeDifferenceAndGrace``)."""

    before: int
    after: int
    grace: int = 0

    @classmethod
    def of(cls, difference: int, grace: int = 0) -> JoinWindows:
        return cls(difference, difference, grace)


class Operator:
    """Base: ``state`` is a picklable dict; ``process`` handles one record."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {"st": -1}

    def process(self, side: int, key: Any, value: Any, ts: int) -> Out:
        raise NotImplementedError

    def advance(self, ts: int) -> int:
        st: int = max(self.state["st"], ts)
        self.state["st"] = st
        return st


Adder = Callable[[Any, Any], Any]


class Aggregate(Operator):
    """``groupByKey().aggregate(init, adder)`` (count, sum and reduce are made of it); emits the
    new aggregate of the key on every record (a changelog, Kafka Streams with caching off). A null
    key or value is skipped, as Kafka Streams does."""

    def __init__(self, init: Callable[[], Any], adder: Adder) -> None:
        super().__init__()
        self.init, self.adder = init, adder
        self.state["agg"] = {}

    def process(self, side: int, key: Any, value: Any, ts: int) -> Out:
        self.advance(ts)
        if key is None or value is None:
            return []
        aggs = self.state["agg"]
        agg = self.adder(aggs[key] if key in aggs else self.init(), value)
        aggs[key] = agg
        return [(key, agg)]


class WindowedAggregate(Operator):
    """``windowedBy(TimeWindows).aggregate``: ``emit="changes"`` emits each updated window,
    ``"final"`` each window once, when it closes."""

    def __init__(self, windows: TimeWindows, init: Callable[[], Any], adder: Adder, emit: str) -> None:
        super().__init__()
        self.windows, self.init, self.adder, self.final = windows, init, adder, emit == "final"
        self.state["win"] = {}  # (key, start) -> agg
        self.state["dropped"] = 0

    def process(self, side: int, key: Any, value: Any, ts: int) -> Out:
        st = self.advance(ts)
        out: Out = []
        if key is not None and value is not None:
            wins = self.state["win"]
            for start, end in self.windows.windows_for(ts):
                if end + self.windows.grace <= st:
                    self.state["dropped"] += 1
                    continue
                agg = self.adder(wins[(key, start)] if (key, start) in wins else self.init(), value)
                wins[(key, start)] = agg
                if not self.final:
                    out.append((Windowed(key, start, end), agg))
        out.extend(self._close(st))
        return out

    def _close(self, st: int) -> Out:
        size, grace = self.windows.size, self.windows.grace
        wins = self.state["win"]
        closed = sorted(
            ((s, k) for (k, s) in wins if s + size + grace <= st), key=lambda x: (x[0], repr(x[1]))
        )
        out: Out = []
        for s, k in closed:
            agg = wins.pop((k, s))
            if self.final:
                out.append((Windowed(k, s, s + size), agg))
        return out


class SessionAggregate(Operator):
    """``windowedBy(SessionWindows).aggregate(init, adder, merger)``. In ``"changes"`` mode a merge
    emits a tombstone for every session it replaces, then the merged session (Kafka Streams)."""

    def __init__(
        self, windows: SessionWindows, init: Callable[[], Any], adder: Adder, merger: Adder, emit: str
    ) -> None:
        super().__init__()
        self.windows, self.init, self.adder, self.merger = windows, init, adder, merger
        self.final = emit == "final"
        self.state["sess"] = {}  # key -> list[[start, end, agg]]
        self.state["dropped"] = 0

    def process(self, side: int, key: Any, value: Any, ts: int) -> Out:
        st = self.advance(ts)
        out: Out = []
        if key is not None and value is not None:
            gap, grace = self.windows.gap, self.windows.grace
            sessions = self.state["sess"].setdefault(key, [])
            overlap = [s for s in sessions if s[0] - gap <= ts <= s[1] + gap]
            start = min([ts] + [s[0] for s in overlap])
            end = max([ts] + [s[1] for s in overlap])
            if end + grace < st:
                self.state["dropped"] += 1
            else:
                agg = self.adder(self.init(), value)
                for s in sorted(overlap, key=lambda s: s[0]):
                    agg = self.merger(s[2], agg) if s[0] <= ts else self.merger(agg, s[2])
                    sessions.remove(s)
                    if not self.final:
                        out.append((Windowed(key, s[0], s[1]), None))
                sessions.append([start, end, agg])
                if not self.final:
                    out.append((Windowed(key, start, end), agg))
        out.extend(self._close(st))
        return out

    def _close(self, st: int) -> Out:
        grace = self.windows.grace
        closed = []
        for key, sessions in self.state["sess"].items():
            for s in [s for s in sessions if s[1] + grace < st]:
                sessions.remove(s)
                closed.append((s[1], s[0], key, s[2]))
        self.state["sess"] = {k: v for k, v in self.state["sess"].items() if v}
        if not self.final:
            return []
        closed.sort(key=lambda c: (c[0], c[1], repr(c[2])))
        return [(Windowed(k, s, e), agg) for e, s, k, agg in closed]


class TableSource(Operator):
    """``table(topic)``: the latest value per key; a tombstone deletes the key (and is passed on
    only if the key existed, as Kafka Streams' KTable source does)."""

    def __init__(self) -> None:
        super().__init__()
        self.state["table"] = {}

    def process(self, side: int, key: Any, value: Any, ts: int) -> Out:
        self.advance(ts)
        if key is None:
            return []
        table = self.state["table"]
        if value is None:
            if key in table:
                del table[key]
                return [(key, None)]
            return []
        table[key] = value
        return [(key, value)]


Joiner = Callable[[Any, Any], Any]


class StreamTableJoin(Operator):
    """Side 0 is the table (a compacted topic), side 1 the stream: each stream record is joined
    with the table's value for its key at that point (inner: skipped when absent; left: ``None``)."""

    def __init__(self, joiner: Joiner, left: bool) -> None:
        super().__init__()
        self.joiner, self.left = joiner, left
        self.state["table"] = {}

    def process(self, side: int, key: Any, value: Any, ts: int) -> Out:
        self.advance(ts)
        table = self.state["table"]
        if side == 0:
            if key is not None:
                if value is None:
                    table.pop(key, None)
                else:
                    table[key] = value
            return []
        if key is None or value is None:
            return []
        other = table.get(key)
        if other is None and not self.left:
            return []
        return [(key, self.joiner(value, other))]


class StreamStreamJoin(Operator):
    """Windowed stream-stream join (side 0 = left, 1 = right). Each record joins the other side's
    buffered records of its key within the window and is buffered itself; a record older than
    ``stream_time - grace`` is dropped. Left join: a left record that found no partner is emitted
    with ``None`` once no acceptable right record can match it any more
    (``stream_time - grace > t + after``), as Kafka Streams (3.1+) holds back such results."""

    def __init__(self, windows: JoinWindows, joiner: Joiner, left: bool) -> None:
        super().__init__()
        self.w, self.joiner, self.left = windows, joiner, left
        self.state["buf"] = [{}, {}]  # side -> key -> list[[ts, value, matched]]
        self.state["dropped"] = 0

    def process(self, side: int, key: Any, value: Any, ts: int) -> Out:
        st = self.advance(ts)
        out: Out = []
        w = self.w
        if key is not None and value is not None:
            if ts < st - w.grace:
                self.state["dropped"] += 1
            else:
                mine, other = self.state["buf"][side], self.state["buf"][1 - side]
                entry = [ts, value, False]
                for o in other.get(key, []):
                    lt, rt = (ts, o[0]) if side == 0 else (o[0], ts)
                    if lt - w.before <= rt <= lt + w.after:
                        entry[2] = o[2] = True
                        out.append((key, self.joiner(value, o[1]) if side == 0 else self.joiner(o[1], value)))
                mine.setdefault(key, []).append(entry)
        out.extend(self._expire(st))
        return out

    def _expire(self, st: int) -> Out:
        w = self.w
        out: Out = []
        horizon = st - w.grace
        lefts, rights = self.state["buf"]
        expired = []
        for key, entries in lefts.items():
            for e in [e for e in entries if e[0] + w.after < horizon]:
                entries.remove(e)
                if self.left and not e[2]:
                    expired.append((e[0], repr(key), key, e[1]))
        for entries in rights.values():
            entries[:] = [e for e in entries if e[0] + w.before >= horizon]
        self.state["buf"] = [{k: v for k, v in lefts.items() if v}, {k: v for k, v in rights.items() if v}]
        expired.sort(key=lambda x: (x[0], x[1]))
        out.extend((key, self.joiner(v, None)) for _, _, key, v in expired)
        return out


def merge_sides(sides: Sequence[Sequence[tuple[Any, Any, int]]]) -> Iterable[Record]:
    """Records of each side (already in offset order) merged by head timestamp; ties go to the
    lower side."""
    pos = [0] * len(sides)
    while True:
        best = -1
        for s, recs in enumerate(sides):
            if pos[s] < len(recs) and (best < 0 or recs[pos[s]][2] < sides[best][pos[best]][2]):
                best = s
        if best < 0:
            return
        k, v, ts = sides[best][pos[best]]
        pos[best] += 1
        yield best, k, v, ts


def run_task(
    op: Operator, state: bytes | None, sides: Sequence[Sequence[tuple[Any, Any, int]]]
) -> tuple[bytes, Out]:
    """One micro-batch of one task: restore ``state``, process, return the new state and output."""
    if state is not None:
        op.state = pickle.loads(state)
    out: Out = []
    for side, k, v, ts in merge_sides(sides):
        out.extend(op.process(side, k, v, ts))
    return pickle.dumps(op.state, protocol=5), out


def dumps_json(v: Any) -> str:
    return json.dumps(v.to_json() if isinstance(v, Windowed) else v, separators=(",", ":"), sort_keys=True)
