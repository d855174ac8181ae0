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

Tables: a table-table join (:class:`TableTableJoin`), a foreign-key join (:class:`ForeignKeyJoin`)
and a table aggregation (:class:`TableGroupByMap` then :class:`TableAggregate`) emit the changelog of
their result: the new value of every key whose result changed, a tombstone when a result goes away
(only for a result that existed; Kafka Streams may also forward tombstones for results that never
existed - the materialised table is the same). Sliding windows (:class:`SlidingAggregate`) follow
KIP-450: a record at ``t`` is dropped when ``t + 1 + d <= stream_time - grace`` and windows accept
it while ``end > stream_time - grace``.

Error contract: user functions' exceptions propagate (the Spark task fails, Spark retries it).
"""

from __future__ import annotations

import bisect
import heapq
import json
import pickle
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Aggregate",
    "ForeignKeyJoin",
    "JoinWindows",
    "Record",
    "SessionAggregate",
    "SessionWindows",
    "SlidingAggregate",
    "SlidingWindows",
    "StreamGlobalTableJoin",
    "StreamStreamJoin",
    "StreamTableJoin",
    "TableAggregate",
    "TableGroupByMap",
    "TableSource",
    "TableTableJoin",
    "TimeWindows",
    "Windowed",
    "WindowedAggregate",
    "merge_sides",
    "run_task",
    "run_task_ts",
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
_MISSING_SENTINEL: Any = object()


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
        if "starts" not in self.state:  # a state saved before the index existed
            self._index()
        if key is not None and value is not None:
            wins = self.state["win"]
            starts, heap = self.state["starts"], self.state["heap"]
            for start, end in self.windows.windows_for(ts):
                if end + self.windows.grace <= st:
                    self.state["dropped"] += 1
                    continue
                if (key, start) in wins:
                    agg = self.adder(wins[(key, start)], value)
                else:
                    agg = self.adder(self.init(), value)
                    keys = starts.get(start)
                    if keys is None:
                        starts[start] = keys = []
                        heapq.heappush(heap, start)
                    keys.append(key)
                wins[(key, start)] = agg
                if not self.final:
                    out.append((Windowed(key, start, end), agg))
        out.extend(self._close(st))
        return out

    def _index(self) -> None:
        """The windows by start (``starts``: start -> keys) and a heap of the starts, so closing
        looks only at the windows due instead of scanning all of them per record."""
        starts: dict[int, list[Any]] = {}
        for k, s in self.state["win"]:
            starts.setdefault(s, []).append(k)
        heap = list(starts)
        heapq.heapify(heap)
        self.state["starts"], self.state["heap"] = starts, heap

    def _close(self, st: int) -> Out:
        size, grace = self.windows.size, self.windows.grace
        wins, starts, heap = self.state["win"], self.state["starts"], self.state["heap"]
        out: Out = []
        while heap and heap[0] + size + grace <= st:
            s = heapq.heappop(heap)
            for k in sorted(starts.pop(s), key=repr):
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
        # a session is final once no record can extend it any more: one within the gap after its
        # end is accepted until stream time passes that record's time + grace (Kafka Streams'
        # emit-on-window-close for sessions: end + gap + grace)
        horizon = self.windows.gap + self.windows.grace
        closed = []
        for key, sessions in self.state["sess"].items():
            for s in [s for s in sessions if s[1] + horizon < st]:
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
    (``stream_time - grace > t + after``), as Kafka Streams (3.1+) holds back such results.
    Outer join (``outer=True``, implies left): a right record that found no partner is emitted as
    ``joiner(None, right)`` once ``stream_time - grace > t + before``. The unmatched records that
    expire on one record come out ordered by (timestamp, side, key)."""

    def __init__(self, windows: JoinWindows, joiner: Joiner, left: bool, *, outer: bool = False) -> None:
        super().__init__()
        self.w, self.joiner, self.left, self.outer = windows, joiner, left or outer, outer
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
                    expired.append((e[0], 0, repr(key), key, e[1]))
        for key, entries in rights.items():
            for e in [e for e in entries if e[0] + w.before < horizon]:
                entries.remove(e)
                if self.outer and not e[2]:
                    expired.append((e[0], 1, repr(key), key, e[1]))
        self.state["buf"] = [{k: v for k, v in lefts.items() if v}, {k: v for k, v in rights.items() if v}]
        expired.sort(key=lambda x: (x[0], x[1], x[2]))
        for _, side, _, key, v in expired:
            out.append((key, self.joiner(v, None) if side == 0 else self.joiner(None, v)))
        return out


@dataclass(frozen=True)
class SlidingWindows:
    """Kafka Streams' sliding windows (KIP-450, ``SlidingWindows.ofTimeDifferenceAndGrace``):
    windows ``[start, start + time_difference]`` (both ends inclusive) of one key, defined by the
    records: each record at ``t`` has its *left* window ``[t - d, t]`` and, when a record falls in
    ``[t + 1, t + 1 + d]``, its *right* window ``[t + 1, t + 1 + d]``. Every distinct non-empty set
    of records at most ``d`` apart is one window; nothing is aligned to the epoch."""

    time_difference: int
    grace: int = 0

    def __post_init__(self) -> None:
        if self.time_difference <= 0 or self.grace < 0:
            raise ValueError("SlidingWindows needs time_difference > 0 and grace >= 0")


class SlidingAggregate(Operator):
    """``windowedBy(SlidingWindows).aggregate`` with Kafka Streams' rules: a record at ``t`` is
    dropped when ``t + 1 + d <= stream_time - grace``; otherwise it is added to every existing
    window holding it whose end is ``> stream_time - grace`` and it creates (when missing) the
    right window of the previous record if that window now holds it, its own left window (if
    ``t > stream_time - grace``) and its own right window if a record falls in it (an
    out-of-order record). A created window's aggregate is the adder folded, from ``init()``,
    over the accepted records inside it in timestamp order (Kafka builds it from a neighbouring
    window's aggregate; equal for commutative aggregations). ``emit="changes"`` emits every
    created or updated window, ``"final"`` each window once when ``end + grace <= stream_time``.
    Windowed keys carry ``end = start + d`` (inclusive). Timestamps below ``d`` are not
    special-cased (Kafka's ``processEarly`` folds them into ``[0, d]``)."""

    def __init__(self, windows: SlidingWindows, init: Callable[[], Any], adder: Adder, emit: str) -> None:
        super().__init__()
        self.windows, self.init, self.adder, self.final = windows, init, adder, emit == "final"
        self.state["win"] = {}  # key -> {start: agg}
        self.state["recs"] = {}  # key -> list[[ts, value]] sorted by ts (ties: arrival order)
        self.state["heap"] = []  # (start, repr(key), key) of every open window: closes in order
        self.state["dropped"] = 0

    def _fold(self, recs: list[list[Any]], lo: int, hi: int, extra: Any = _MISSING_SENTINEL) -> Any:
        agg = self.init()
        i, j = bisect.bisect_left(recs, lo, key=_ts), bisect.bisect_right(recs, hi, key=_ts)
        for _, v in recs[i:j]:
            agg = self.adder(agg, v)
        if extra is not _MISSING_SENTINEL:
            agg = self.adder(agg, extra)
        return agg

    def _create(self, key: Any, start: int, agg: Any, emitted: list[tuple[int, Any]]) -> None:
        self.state["win"].setdefault(key, {})[start] = agg
        heapq.heappush(self.state["heap"], (start, repr(key), key))
        emitted.append((start, agg))

    def process(self, side: int, key: Any, value: Any, ts: int) -> Out:
        st = self.advance(ts)
        out: Out = []
        d, grace = self.windows.time_difference, self.windows.grace
        close = st - grace
        if key is not None and value is not None:
            if ts + 1 + d <= close:
                self.state["dropped"] += 1
            else:
                wins = self.state["win"].get(key, {})
                recs = self.state["recs"].setdefault(key, [])
                emitted: list[tuple[int, Any]] = []
                for s in sorted(s for s in wins if ts - d <= s <= ts):
                    if s + d > close:
                        wins[s] = self.adder(wins[s], value)
                        emitted.append((s, wins[s]))
                below = bisect.bisect_left(recs, ts, key=_ts)
                prev = recs[below - 1][0] if below else None
                if prev is not None and prev + 1 not in wins and prev + 1 + d >= max(ts, close + 1):
                    self._create(key, prev + 1, self._fold(recs, prev + 1, prev + 1 + d, value), emitted)
                if ts - d not in wins and ts > close:
                    self._create(key, ts - d, self._fold(recs, ts - d, ts, value), emitted)
                above = bisect.bisect_right(recs, ts, key=_ts)
                if ts + 1 not in wins and above < len(recs) and recs[above][0] <= ts + 1 + d:
                    self._create(key, ts + 1, self._fold(recs, ts + 1, ts + 1 + d), emitted)
                recs.insert(above, [ts, value])
                self._prune(key, close)
                if not self.final:
                    out.extend((Windowed(key, s, s + d), agg) for s, agg in emitted)
        out.extend(self._close(st))
        return out

    def _prune(self, key: Any, close: int) -> None:
        """A record is needed while a window holding it can still be created (those end at most
        at ``t + d``, and are created only with ``end > close``)."""
        recs = self.state["recs"]
        rs = recs.get(key)
        if rs is None:
            return
        i = bisect.bisect_right(rs, close - self.windows.time_difference, key=_ts)
        if i:
            del rs[:i]
        if not rs:
            del recs[key]

    def _close(self, st: int) -> Out:
        d, grace = self.windows.time_difference, self.windows.grace
        heap, wins = self.state["heap"], self.state["win"]
        out: Out = []
        while heap and heap[0][0] + d + grace <= st:
            s, _, k = heapq.heappop(heap)
            kw = wins[k]
            agg = kw.pop(s)
            if not kw:
                del wins[k]
                self._prune(k, st - grace)
            if self.final:
                out.append((Windowed(k, s, s + d), agg))
        return out


def _ts(r: list[Any]) -> int:
    ts: int = r[0]
    return ts


class TableTableJoin(Operator):
    """KTable-KTable join on the key (side 0 = left table, side 1 = right table, co-partitioned).
    ``how``: ``inner`` (a result while both sides have the key), ``left`` (while the left side
    has it; right ``None`` when absent) or ``outer`` (while either has it). Every update of either
    side emits the key's new result ``joiner(left, right)``; when the key's result goes away a
    tombstone is emitted (only for a result that existed), so the output is the join result's
    changelog, as Kafka Streams' ``KTable.join/leftJoin/outerJoin``."""

    def __init__(self, joiner: Joiner, how: str) -> None:
        super().__init__()
        if how not in ("inner", "left", "outer"):
            raise ValueError("how must be 'inner', 'left' or 'outer'")
        self.joiner, self.how = joiner, how
        self.state["t"] = [{}, {}]

    def _present(self, key: Any) -> bool:
        left, right = (key in t for t in self.state["t"])
        return (left and right) if self.how == "inner" else left if self.how == "left" else (left or right)

    def process(self, side: int, key: Any, value: Any, ts: int) -> Out:
        self.advance(ts)
        if key is None:
            return []
        table = self.state["t"][side]
        if value is None and key not in table:
            return []
        before = self._present(key)
        if value is None:
            del table[key]
        else:
            table[key] = value
        if self._present(key):
            left, right = (t.get(key) for t in self.state["t"])
            return [(key, self.joiner(left, right))]
        return [(key, None)] if before else []


class ForeignKeyJoin(Operator):
    """KTable-KTable foreign-key join (KIP-213): side 0 the left table (its key is the result's
    key), side 1 the right table keyed by the foreign key ``fk(left value)`` (hashable). The
    result of a left key is ``joiner(left, right[fk(left)])``; inner: only while the right value
    exists, left: always (``None`` right). A left update re-joins the key (a changed foreign key
    replaces the result, or deletes it with a tombstone when the new key has no match in an
    inner join); a left tombstone deletes the result; a right update re-joins every left key that
    points to it, a right tombstone deletes them (inner) or joins them with ``None`` (left).
    Kafka computes the same results through subscription/response topics; here every task holds
    the whole right table (the right side is broadcast to every left task)."""

    def __init__(self, fk: Callable[[Any], Any], joiner: Joiner, left: bool) -> None:
        super().__init__()
        self.fk, self.joiner, self.left = fk, joiner, left
        self.state["l"], self.state["r"], self.state["idx"] = {}, {}, {}

    def _present(self, value: Any) -> bool:
        if value is None:
            return False
        if self.left:
            return True
        f = self.fk(value)
        return f is not None and f in self.state["r"]

    def process(self, side: int, key: Any, value: Any, ts: int) -> Out:
        self.advance(ts)
        if key is None:
            return []
        lt, rt, idx = self.state["l"], self.state["r"], self.state["idx"]
        if side == 1:
            if value is None:
                if key not in rt:
                    return []
                del rt[key]
            else:
                rt[key] = value
            out: Out = []
            for k in sorted(idx.get(key, ()), key=repr):
                if value is None and not self.left:
                    out.append((k, None))
                else:
                    out.append((k, self.joiner(lt[k], value)))
            return out
        old = lt.get(key)
        existed = self._present(old)
        if old is not None:
            of = self.fk(old)
            if of is not None:
                idx[of].discard(key)
                if not idx[of]:
                    del idx[of]
        if value is None:
            lt.pop(key, None)
            return [(key, None)] if existed else []
        lt[key] = value
        f = self.fk(value)
        if f is not None:
            idx.setdefault(f, set()).add(key)
        right = rt.get(f) if f is not None else None
        if right is None and not self.left:
            return [(key, None)] if existed else []
        return [(key, self.joiner(value, right))]


class StreamGlobalTableJoin(Operator):
    """KStream-GlobalKTable join: side 0 the global table (every task holds all of it), side 1 the
    stream. A stream record joins ``table[key_mapper(key, value)]``; inner: skipped when absent
    (or the mapped key is ``None``), left: joined with ``None``. The result keeps the stream's
    key. As Kafka Streams' global table (fully restored before processing, then updated apart
    from the stream), the table records of a micro-batch are applied before its stream records
    (``table_first``), not interleaved by timestamp."""

    table_first = True

    def __init__(self, key_mapper: Callable[[Any, Any], Any], joiner: Joiner, left: bool) -> None:
        super().__init__()
        self.key_mapper, self.joiner, self.left = key_mapper, joiner, left
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
        if value is None:
            return []
        tk = self.key_mapper(key, value)
        other = None if tk is None else table.get(tk)
        if other is None and not self.left:
            return []
        return [(key, self.joiner(value, other))]


class TableGroupByMap(Operator):
    """The first half of ``KTable.groupBy(selector)`` (Kafka Streams' ``KTableRepartitionMap``),
    run per table partition before the repartition topic: for an update of key ``k`` from
    ``old`` to ``new`` it emits ``(selector(k, old).key, {"o": old value})`` then
    ``(selector(k, new).key, {"n": new value})``, or one ``{"o": .., "n": ..}`` record when both
    map to the same key (KIP-904: the subtractor runs before the adder). Null keys are dropped."""

    def __init__(self, selector: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        super().__init__()
        self.selector = selector
        self.state["table"] = {}

    def process(self, side: int, key: Any, value: Any, ts: int) -> Out:
        self.advance(ts)
        if key is None:
            return []
        table = self.state["table"]
        old = table.get(key)
        if value is None:
            if old is None:
                return []
            del table[key]
        else:
            table[key] = value
        op = None if old is None else self.selector(key, old)
        np_ = None if value is None else self.selector(key, value)
        if op is not None and op[0] is not None and np_ is not None and np_[0] == op[0]:
            return [(op[0], {"o": op[1], "n": np_[1]})]
        out: Out = []
        if op is not None and op[0] is not None:
            out.append((op[0], {"o": op[1]}))
        if np_ is not None and np_[0] is not None:
            out.append((np_[0], {"n": np_[1]}))
        return out


class TableAggregate(Operator):
    """The second half of ``KGroupedTable.aggregate(init, adder, subtractor)`` (Kafka Streams'
    ``KTableAggregate``), after the repartition topic: for a change ``{"o": old, "n": new}`` of a
    group key, ``subtractor(agg, old)`` (if the group has an aggregate) then ``adder(agg or
    init(), new)``; emits the group's new aggregate, or a tombstone when it becomes ``None``.
    ``init=None`` is ``reduce``: the first value is the aggregate."""

    def __init__(self, init: Callable[[], Any] | None, adder: Adder, subtractor: Adder) -> None:
        super().__init__()
        self.init, self.adder, self.subtractor = init, adder, subtractor
        self.state["agg"] = {}

    def process(self, side: int, key: Any, value: Any, ts: int) -> Out:
        self.advance(ts)
        if key is None or not isinstance(value, dict):
            return []
        aggs = self.state["agg"]
        old = aggs.get(key)
        agg = old
        if value.get("o") is not None and agg is not None:
            agg = self.subtractor(agg, value["o"])
        if value.get("n") is not None:
            if agg is None:
                agg = value["n"] if self.init is None else self.adder(self.init(), value["n"])
            else:
                agg = self.adder(agg, value["n"])
        if agg is None:
            aggs.pop(key, None)
            return [(key, None)] if old is not None else []
        aggs[key] = agg
        return [(key, agg)]


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
    new_state, out = run_task_ts(op, state, sides)
    return new_state, [(k, v) for k, v, _ in out]


def run_task_ts(
    op: Operator, state: bytes | None, sides: Sequence[Sequence[tuple[Any, Any, int]]]
) -> tuple[bytes, list[tuple[Any, Any, int]]]:
    """:func:`run_task` with each output record's timestamp: the timestamp of the input record
    that produced it (what a repartition topic carries on). An operator with ``table_first``
    takes all of side 0 before the other sides (a global table)."""
    if state is not None:
        op.state = pickle.loads(state)
    out: list[tuple[Any, Any, int]] = []
    if getattr(op, "table_first", False):
        order: Iterable[Record] = [
            *((0, k, v, ts) for k, v, ts in sides[0]),
            *((s + 1, k, v, ts) for s, k, v, ts in merge_sides(sides[1:])),
        ]
    else:
        order = merge_sides(sides)
    for side, k, v, ts in order:
        out.extend((k2, v2, ts) for k2, v2 in op.process(side, k, v, ts))
    return pickle.dumps(op.state, protocol=5), out


def dumps_json(v: Any) -> str:
    return json.dumps(v.to_json() if isinstance(v, Windowed) else v, separators=(",", ":"), sort_keys=True)
