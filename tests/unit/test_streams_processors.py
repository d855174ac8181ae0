"""strom.streams' session windows (operator only, no Spark) against sessions computed
declaratively: a key's sorted timestamps split where two neighbours are more than ``gap`` apart."""

from __future__ import annotations

import itertools
import random

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
        assert dict(final) == {s: n for s, n in ref.items() if s[2] + grace < st}
        latest: dict[tuple[str, int, int], int | None] = {}
        for wk, v in results["changes"]:
            latest[(wk.key, wk.start, wk.end)] = v
        assert {s: v for s, v in latest.items() if v is not None} == ref


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
