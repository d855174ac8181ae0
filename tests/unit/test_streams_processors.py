"""strom.streams' session windows (operator only, no Spark) against sessions computed
declaratively: a key's sorted timestamps split where two neighbours are more than ``gap`` apart."""

from __future__ import annotations

import itertools
import random

import pytest

from strom.streams import processors as P


def _events(seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    t, out = 0, []
    for _ in range(400):
        t += rng.randint(0, 40)
        out.append((rng.choice("abcd"), t - rng.randint(0, 900)))
    return out


def _clusters(ts: list[int], gap: int) -> list[tuple[int, int, int]]:
    ts = sorted(ts)
    out, start, n = [], ts[0], 1
    for prev, cur in itertools.pairwise(ts):
        if cur - prev > gap:
            out.append((start, prev, n))
            start, n = cur, 0
        n += 1
    out.append((start, ts[-1], n))
    return out


def test_session_count_final_and_changes_match_reference() -> None:
    gap, grace = 50, 1000  # disorder < grace - gap: nothing dropped, no session reopened
    for seed in range(5):
        ev = _events(seed)
        w = P.SessionWindows(gap, grace)
        results = {}
        for emit in ("final", "changes"):
            op = P.SessionAggregate(w, lambda: 0, lambda a, v: a + 1, lambda a, b: a + b, emit)
            _, out = P.run_task(op, None, [[(k, 1, ts) for k, ts in ev]])
            results[emit] = out
        st = max(ts for _, ts in ev)
        ref = {(k, s, e): n for k in "abcd" for s, e, n in _clusters([ts for kk, ts in ev if kk == k], gap)}
        final = [((wk.key, wk.start, wk.end), v) for wk, v in results["final"]]
        assert len(final) == len({f for f, _ in final})
        assert dict(final) == {s: n for s, n in ref.items() if s[2] + gap + grace < st}
        latest: dict[tuple[str, int, int], int | None] = {}
        for wk, v in results["changes"]:
            latest[(wk.key, wk.start, wk.end)] = v
        assert {s: v for s, v in latest.items() if v is not None} == ref


def test_a_session_is_final_only_once_nothing_can_extend_it() -> None:
    # grace shorter than the gap: a record 230 ms after a session's end still joins it although
    # stream time (other keys) passed end + grace; the final session holds both records
    w = P.SessionWindows(300, 200)
    op = P.SessionAggregate(w, lambda: 0, lambda a, v: a + 1, lambda a, b: a + b, "final")
    recs = [("a", 1, 1000), ("b", 1, 1250), ("a", 1, 1230), ("b", 1, 3000)]
    _, out = P.run_task(op, None, [recs])
    got = [((wk.key, wk.start, wk.end), n) for wk, n in out]
    assert got == [(("a", 1000, 1230), 2), (("b", 1250, 1250), 1)]


def test_run_task_state_round_trip_equals_one_pass() -> None:
    ev = _events(9)
    w = P.TimeWindows(200, advance=50, grace=100)

    def op() -> P.Operator:
        return P.WindowedAggregate(w, lambda: 0, lambda a, v: a + v, "final")

    recs = [(k, ts % 7, ts) for k, ts in ev]
    _, whole = P.run_task(op(), None, [recs])
    state, first = P.run_task(op(), None, [recs[:150]])
    _, second = P.run_task(op(), state, [recs[150:]])
    assert first + second == whole
    assert len(whole) > 50


def test_hopping_windows_final_and_changes_equal_reference() -> None:
    for seed in range(4):
        ev = _events(seed)
        size, advance, grace = 200, 50, 100
        w = P.TimeWindows(size, advance=advance, grace=grace)
        # reference: a record is counted in each window holding it unless the window had closed
        # (end + grace <= the largest timestamp seen so far, this record's included)
        counts: dict[tuple[str, int], int] = {}
        st = -1
        for k, ts in ev:
            st = max(st, ts)
            for s in range(max(0, ts - size + advance) // advance * advance, ts + 1, advance):
                if s + size > ts and s + size + grace > st:
                    counts[(k, s)] = counts.get((k, s), 0) + 1
        closed = {ks: n for ks, n in counts.items() if ks[1] + size + grace <= st}
        recs = [(k, 1, ts) for k, ts in ev]
        _, final = P.run_task(P.WindowedAggregate(w, lambda: 0, lambda a, v: a + v, "final"), None, [recs])
        got = [((wk.key, wk.start), v) for wk, v in final]
        assert len(got) == len(set(got)) and dict(got) == closed and len(closed) > 20
        assert [wk.start for wk, _ in final] == sorted(wk.start for wk, _ in final)  # closed in order
        changes_op = P.WindowedAggregate(w, lambda: 0, lambda a, v: a + v, "changes")
        _, changes = P.run_task(changes_op, None, [recs])
        latest = {(wk.key, wk.start): v for wk, v in changes}
        assert latest == counts


def test_windowed_state_saved_without_the_close_index_still_closes() -> None:
    ev = _events(3)
    w = P.TimeWindows(200, advance=50, grace=100)

    def op() -> P.Operator:
        return P.WindowedAggregate(w, lambda: 0, lambda a, v: a + v, "final")

    recs = [(k, 1, ts) for k, ts in ev]
    _, whole = P.run_task(op(), None, [recs])
    first_op = op()
    P.run_task(first_op, None, [recs[:200]])
    old_state = {k: v for k, v in first_op.state.items() if k not in ("starts", "heap")}  # the old layout
    resumed = op()
    resumed.state.update(old_state)
    out = [o for r in recs[200:] for o in resumed.process(0, r[0], r[1], r[2])]
    closed_first = [o for o in whole if o[0].start + 300 <= max(ts for _, ts in ev[:200])]
    assert closed_first + out == whole


# ---------------------------------------------------------------- joins, sliding windows, table aggregations


def _table_ops(rng: random.Random, n: int, keys: str, p_del: float = 0.25) -> list[tuple[str, int | None]]:
    return [(rng.choice(keys), None if rng.random() < p_del else rng.randint(0, 99)) for _ in range(n)]


def _apply(view: dict, out: list) -> None:
    for k, v in out:
        if v is None:
            assert k in view, f"tombstone for {k!r}, which has no result"
            del view[k]
        else:
            view[k] = v


def _ref_kk_join(lt: dict, rt: dict, how: str) -> dict:
    keys = set(lt) & set(rt) if how == "inner" else set(lt) if how == "left" else set(lt) | set(rt)
    return {k: (lt.get(k), rt.get(k)) for k in keys}


def test_table_table_joins_changelog_equals_reference_at_every_step() -> None:
    for seed in range(6):
        rng = random.Random(seed)
        ops = [(rng.randint(0, 1), k, v) for k, v in _table_ops(rng, 300, "abcdef")]
        for how in ("inner", "left", "outer"):
            op = P.TableTableJoin(lambda a, b: (a, b), how)
            view: dict = {}
            tables: list[dict] = [{}, {}]
            tombstones = 0
            for side, k, v in ops:
                out = op.process(side, k, v, 0)
                tombstones += sum(1 for _, x in out if x is None)
                _apply(view, out)
                if v is None:
                    tables[side].pop(k, None)
                else:
                    tables[side][k] = v
                assert view == _ref_kk_join(tables[0], tables[1], how)
            assert tombstones > 5


def test_foreign_key_join_across_fk_changes_and_deletes() -> None:
    """Left rows {"fk": f, "n": n} point to right rows keyed by f; the result of every left key is
    checked after every update of either side (fk changes, deletes of both sides)."""
    for seed in range(6):
        rng = random.Random(100 + seed)
        ops: list[tuple[int, str, object]] = []
        for _ in range(400):
            if rng.random() < 0.55:
                k = rng.choice("abcdefgh")
                v = None if rng.random() < 0.2 else {"fk": rng.choice("xyzw"), "n": rng.randint(0, 9)}
                ops.append((0, k, v))
            else:
                ops.append((1, rng.choice("xyzw"), None if rng.random() < 0.3 else rng.randint(0, 99)))
        for how in ("inner", "left"):
            op = P.ForeignKeyJoin(lambda v: v["fk"], lambda lv, rv: [lv["n"], rv], how == "left")
            view: dict = {}
            lt: dict = {}
            rt: dict = {}
            fk_moves = 0
            for side, k, v in ops:
                if side == 0 and v is not None and k in lt and lt[k]["fk"] != v["fk"]:
                    fk_moves += 1
                _apply(view, op.process(side, k, v, 0))
                table = lt if side == 0 else rt
                if v is None:
                    table.pop(k, None)
                else:
                    table[k] = v
                ref = {
                    k2: [lv["n"], rt.get(lv["fk"])]
                    for k2, lv in lt.items()
                    if how == "left" or lv["fk"] in rt
                }
                assert view == ref
            assert fk_moves > 20


def test_stream_global_table_join_sees_the_batch_table_first() -> None:
    rng = random.Random(3)
    for how in ("inner", "left"):
        op_state = None
        table: dict = {}
        got, want = [], []
        for _ in range(4):
            trecs = [(k, v, rng.randint(0, 10**6)) for k, v in _table_ops(rng, 20, "pqrs")]
            srecs = [(f"o{i}", {"p": rng.choice("pqrst")}, rng.randint(0, 10**6)) for i in range(40)]
            op = P.StreamGlobalTableJoin(lambda k, v: v["p"], lambda s, t: [s["p"], t], how == "left")
            op_state, out = P.run_task(op, op_state, [trecs, srecs])
            got.extend(out)
            for k, v, _ in trecs:  # the whole batch's table first, whatever the timestamps
                if v is None:
                    table.pop(k, None)
                else:
                    table[k] = v
            for k, v, _ in srecs:
                if v["p"] in table or how == "left":
                    want.append((k, [v["p"], table.get(v["p"])]))
        assert got == want
        assert any(t is None for _, (_, t) in got) == (how == "left")


def _ss_events(rng: random.Random, n: int) -> list[tuple[int, str, int]]:
    t, out = 10_000, []
    for i in range(n):
        t += rng.randint(0, 30)
        ts = t - rng.randint(0, 60)
        if i % 11 == 10:
            ts = t - rng.randint(300, 600)  # late: behind stream time by more than the grace
        out.append((rng.randint(0, 1), rng.choice("abc"), ts))
    return out


def test_outer_stream_stream_join_against_declarative_reference() -> None:
    w = P.JoinWindows(before=40, after=70, grace=100)
    for seed in range(8):
        rng = random.Random(seed)
        ev = _ss_events(rng, 300)
        sides: list[list] = [[], []]
        for i, (side, k, ts) in enumerate(ev):
            sides[side].append((k, (side, i), ts))
        # the task's processing order (merge by head timestamp), as run_task does
        order = list(P.merge_sides(sides))
        st, accepted = -1, []
        for side, k, v, ts in order:
            st = max(st, ts)
            if ts >= st - w.grace:
                accepted.append((side, k, v, ts))
        lefts = [a for a in accepted if a[0] == 0]
        rights = [a for a in accepted if a[0] == 1]
        pairs = [
            (lk, [lv, rv])
            for _, lk, lv, lt in lefts
            for _, rk, rv, rt in rights
            if lk == rk and lt - w.before <= rt <= lt + w.after
        ]
        matched_l = {p[1][0] for p in pairs}
        matched_r = {p[1][1] for p in pairs}
        horizon = st - w.grace
        alone = [(k, [v, None]) for _, k, v, t in lefts if v not in matched_l and t + w.after < horizon]
        alone += [(k, [None, v]) for _, k, v, t in rights if v not in matched_r and t + w.before < horizon]
        op = P.StreamStreamJoin(w, lambda a, b: [a, b], False, outer=True)
        _, out = P.run_task(op, None, sides)
        out = [(k, [tuple(x) if x else None for x in v]) for k, v in out]
        key = lambda kv: repr(kv)  # noqa: E731
        assert sorted(out, key=key) == sorted(pairs + alone, key=key)
        assert any(v[0] is None for _, v in alone) and any(v[1] is None for _, v in alone)
        assert len(accepted) < len(ev)  # some records were late


def test_sliding_windows_hand_checked() -> None:
    """d = 10: A@10, A@15, then A@12 out of order (windows as KIP-450 draws them)."""
    op = P.SlidingAggregate(P.SlidingWindows(10, grace=100), lambda: 0, lambda a, v: a + 1, "changes")
    got = []
    for ts in (10, 15, 12):
        got.append([((w.start, w.end), n) for w, n in op.process(0, "A", 1, ts)])
    assert got == [
        [((0, 10), 1)],
        [((11, 21), 1), ((5, 15), 2)],
        [((5, 15), 3), ((11, 21), 2), ((2, 12), 2), ((13, 23), 1)],
    ]


def _sliding_ref(ev: list[tuple[str, int]], d: int, grace: int) -> tuple[dict, int]:
    st, acc = -1, []
    for k, ts in ev:
        st = max(st, ts)
        if ts + 1 + d > st - grace:
            acc.append((k, ts))
    wins: dict[tuple[str, int], int] = {}
    for k in {k for k, _ in acc}:
        tss = [t for kk, t in acc if kk == k]
        starts = {t - d for t in tss} | {t + 1 for t in tss if any(t < u <= t + 1 + d for u in tss)}
        for s in starts:
            wins[(k, s)] = sum(1 for t in tss if s <= t <= s + d)
    return wins, st


def test_sliding_window_count_final_and_changes_match_definition() -> None:
    d, grace = 100, 300
    for seed in range(6):
        rng = random.Random(seed)
        t, ev = 5_000, []
        for i in range(400):
            t += rng.randint(0, 25)
            ts = t - rng.randint(0, 250)  # out of order, within the grace
            if i % 13 == 12:
                ts = t - rng.randint(800, 2_000)  # too late: dropped
            ev.append((rng.choice("abc"), ts))
        ref, st = _sliding_ref(ev, d, grace)
        res = {}
        for emit in ("final", "changes"):
            op = P.SlidingAggregate(P.SlidingWindows(d, grace), lambda: 0, lambda a, v: a + 1, emit)
            _, res[emit] = P.run_task(op, None, [[(k, 1, ts) for k, ts in ev]])
            assert op.state["dropped"] > 10
        final = [((w.key, w.start), n) for w, n in res["final"]]
        assert all(w.end == w.start + d for w, _ in res["final"])
        assert len(final) == len({f for f, _ in final})
        assert dict(final) == {w: n for w, n in ref.items() if w[1] + d + grace <= st}
        seqs: dict = {}
        for w, n in res["changes"]:
            seqs.setdefault((w.key, w.start), []).append(n)
        assert {w: s[-1] for w, s in seqs.items()} == ref
        assert all(s == list(range(s[0], s[-1] + 1)) for s in seqs.values())


def test_table_group_by_aggregate_subtracts_and_adds() -> None:
    """A table of user -> {"region", "n"} grouped by region: count and sum of n per region after
    every update (region changes move a user between groups), checked against the groups of the
    current table; the changes pass through a simulated repartition (per group key partition)."""
    for seed in range(6):
        rng = random.Random(seed)
        ops = [
            (
                rng.choice("abcdefghij"),
                None if rng.random() < 0.2 else {"r": rng.choice("xyz"), "n": rng.randint(1, 9)},
            )
            for _ in range(300)
        ]
        first = P.TableGroupByMap(lambda k, v: (v["r"], v["n"]))
        counts = P.TableAggregate(lambda: 0, lambda a, v: a + 1, lambda a, v: a - 1)
        sums = P.TableAggregate(None, lambda a, v: a + v, lambda a, v: a - v)
        cview: dict = {}
        sview: dict = {}
        table: dict = {}
        seen: set = set()
        for k, v in ops:
            for gk, change in first.process(0, k, v, 0):
                _apply(cview, counts.process(0, gk, change, 0))
                _apply(sview, sums.process(0, gk, change, 0))
            if v is None:
                table.pop(k, None)
            else:
                table[k] = v
                seen.add(v["r"])
            assert cview == {g: sum(1 for r in table.values() if r["r"] == g) for g in seen}
            assert sview == {g: sum(r["n"] for r in table.values() if r["r"] == g) for g in seen}


def test_new_operators_state_pickled_between_batches_equals_one_pass() -> None:
    rng = random.Random(42)
    two_tables = [[(k, v, i) for i, (k, v) in enumerate(_table_ops(rng, 150, "abcde"))] for _ in range(2)]
    fk_left = [(k, None if v is None else {"fk": "xyz"[v % 3]}, i) for k, v, i in two_tables[0]]
    fk_right = [("xyz"[ord(k) % 3], v, i) for k, v, i in two_tables[1]]
    ss = _ss_events(rng, 200)
    ss_sides = [[(k, i, ts) for i, (s, k, ts) in enumerate(ss) if s == side] for side in (0, 1)]
    cases: list[tuple[object, list]] = [
        (lambda: P.TableTableJoin(lambda a, b: [a, b], "outer"), two_tables),
        (lambda: P.ForeignKeyJoin(lambda v: v["fk"], lambda a, b: [a, b], False), [fk_left, fk_right]),
        (
            lambda: P.StreamStreamJoin(P.JoinWindows(40, 70, 100), lambda a, b: [a, b], False, outer=True),
            ss_sides,
        ),
        (
            lambda: P.SlidingAggregate(P.SlidingWindows(100, 200), lambda: 0, lambda a, v: a + 1, "final"),
            [[(k, 1, ts) for _, k, ts in ss]],
        ),
        (lambda: P.TableGroupByMap(lambda k, v: (v % 4, v)), [two_tables[0]]),
    ]
    for make, sides in cases:
        _, whole = P.run_task(make(), None, sides)  # type: ignore[operator]
        order = list(P.merge_sides(sides))  # cut the processing order into three batches
        state, cut = None, []
        for lo, hi in itertools.pairwise([0, len(order) // 3, 2 * len(order) // 3, len(order)]):
            part: list[list] = [[] for _ in sides]
            for side, k, v, ts in order[lo:hi]:
                part[side].append((k, v, ts))
            state, out = P.run_task(make(), state, part)  # type: ignore[operator]
            cut.extend(out)
        assert cut == whole and len(whole) > 20, make


def test_repartition_record_round_trip() -> None:
    """A repartition topic's value carries the record timestamp and JSON or bytes values."""
    pytest.importorskip("pyspark")
    from strom.streams import dsl

    for v in ({"a": [1, b"\x00\xff", None]}, b"raw", "text", None, {"o": {"n": 2}}):
        assert dsl._unwire(dsl._wire(1_700_000_000_123, v), "t-0 offset 0") == (1_700_000_000_123, v)
    assert dsl._unwire(dsl._wire(5, (1, 2)), "w") == (5, [1, 2])
    with pytest.raises(ValueError, match="must be JSON"):
        dsl._wire(1, object())
    with pytest.raises(ValueError, match=r"t-1 offset 7 is not a strom\.streams repartition record"):
        dsl._unwire(b"not json", "t-1 offset 7")
