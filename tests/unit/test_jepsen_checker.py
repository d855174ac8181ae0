"""The Jepsen-style checker of :mod:`strom.testing.jepsen` finds each anomaly it names."""

from __future__ import annotations

from strom.testing.jepsen import History, check


def history() -> History:
    h = History()
    h.sent = {"p0-0", "p0-1", "p0-2", "p1-0"}
    h.acked = [(0, 0, "p0-0"), (0, 1, "p0-1"), (1, 0, "p1-0")]
    h.observed = [(0, (0, 0, "p0-0")), (0, (0, 1, "p0-1")), (1, (1, 0, "p1-0"))]
    h.commits = [(1.0, 0, 1, "c0"), (2.0, 0, 2, "c1")]
    h.offset_reads = [(1.5, 0, 1), (2.5, 0, 2)]
    h.final_committed = {0: 2}
    return h


def test_a_clean_history_passes() -> None:
    r = check(history(), {0: [(0, "p0-0"), (1, "p0-1"), (2, "p0-2")], 1: [(0, "p1-0")]})
    assert r.ok, r.details()
    assert (r.acked, r.read, r.indeterminate) == (3, 3, 1)
    assert r.summary().startswith("acked 3, read 3, lost 0, duplicated 0, phantom 0")


def test_each_anomaly_is_found() -> None:
    h = history()
    h.observed.append((0, (0, 2, "p0-9")))  # seen, then truncated away
    h.commits.append((3.0, 0, 1, "c0"))  # the group's offset went back
    h.offset_reads.append((2.5, 0, 1))  # a stale read (reported, not an error)
    h.final_committed = {0: 1}  # a lost commit
    h.acked.append((1, 1, "p1-1"))  # acknowledged before p1-0's offset: reordered
    h.sent.add("p1-1")
    final = {
        0: [(0, "p0-0"), (2, "p0-1"), (3, "p0-1"), (4, "x")],  # p0-1 moved and twice, x never sent
        1: [(0, "p1-0")],
    }
    r = check(h, final)
    assert not r.ok
    assert [v for _p, _o, v in r.lost] == ["p1-1"]
    assert [v for _p, _o, v in r.unseen] == ["p1-1"]
    assert r.duplicated == {"p0-1": [(0, 2), (0, 3)]}
    assert r.misplaced == [((0, 1, "p0-1"), None)]
    assert r.phantom == [((0, 1, "p0-1"), None), ((0, 2, "p0-9"), "p0-1")]  # p0-1 moved
    assert r.unexpected == [(0, 4, "x")]
    assert r.regressions == [(0, 2, 1, "c1 at 2.0 -> c0 at 3.0")]
    assert r.lost_commits == [(0, 2, 1)]
    assert r.stale_offset_reads == [(0, 2, 1, "acked at 2.0, read at 2.5")]
    h2 = history()
    h2.acked = [(0, 1, "p0-0"), (0, 0, "p0-1")]
    r2 = check(h2, {0: [(0, "p0-1"), (1, "p0-0")], 1: [(0, "p1-0")]})
    assert len(r2.reordered) == 1 and r2.lost == []
    r3 = check(history(), {0: [(1, "p0-1"), (0, "p0-0")], 1: [(0, "p1-0")]})
    assert r3.non_monotonic == [(0, 1, 0)]
