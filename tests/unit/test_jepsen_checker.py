"""The Jepsen-style checker of :mod:`strom.testing.jepsen` finds each anomaly it names."""

from __future__ import annotations

from strom.testing.jepsen import History, TxnHistory, check, check_txn


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


# ------------------------------------------------------------------ transactions
def txn_history() -> TxnHistory:
    h = TxnHistory()
    h.txns = {
        "x0-0": [(0, "x0-0:0/2"), (1, "x0-0:1/2")],  # committed
        "x0-1": [(0, "x0-1:0/2"), (2, "x0-1:1/2")],  # aborted
        "x1-0": [(1, "x1-0:0/3"), (2, "x1-0:1/3"), (1, "x1-0:2/3")],  # uncertain
    }
    h.outcome = {"x0-0": "committed", "x0-1": "aborted", "x1-0": "uncertain"}
    return h


# the log: x0-0 and x1-0 committed, x0-1's records present (read_uncommitted sees them)
UNCOMMITTED = [(0, 0, "x0-0:0/2"), (1, 0, "x0-0:1/2"), (0, 2, "x0-1:0/2"), (2, 0, "x0-1:1/2"),
               (1, 2, "x1-0:0/3"), (2, 2, "x1-0:1/3"), (1, 3, "x1-0:2/3")]
COMMITTED = [rec for rec in UNCOMMITTED if not rec[2].startswith("x0-1")]


def test_a_clean_transactional_history_passes() -> None:
    h = txn_history()
    h.read_committed = list(COMMITTED)
    h.read_uncommitted = list(UNCOMMITTED)
    h.reached_end = {"read_committed", "read_uncommitted"}
    r = check_txn(h, COMMITTED, UNCOMMITTED)
    assert r.ok, r.details()
    assert (r.committed, r.aborted, r.uncertain, r.uncertain_committed) == (1, 1, 1, 1)
    assert r.aborted_seen_uncommitted == 2  # allowed for read_uncommitted
    assert r.summary().startswith("transactions: committed 1 (2 records), aborted 1")
    # an uncertain transaction may be absent too (whole either way)
    absent = [rec for rec in COMMITTED if not rec[2].startswith("x1-0")]
    h.read_committed = absent
    r = check_txn(h, absent, UNCOMMITTED)
    assert r.ok, r.details()
    assert (r.uncertain_committed, r.uncertain_absent) == (0, 1)


def test_each_transactional_anomaly_is_found() -> None:
    h = txn_history()
    h.read_uncommitted = list(UNCOMMITTED)
    h.reached_end = {"read_committed", "read_uncommitted"}
    # read_committed saw an aborted record, and only part of the uncertain transaction
    h.read_committed = [*COMMITTED[:3], (0, 2, "x0-1:0/2"), (1, 9, "x0-0:0/2")]
    final_rc = [rec for rec in COMMITTED if rec[2] != "x0-0:1/2"]  # a committed record lost
    final_ru = [*UNCOMMITTED, (0, 5, "x0-0:0/2"), (0, 6, "y")]  # a duplicate, one never sent
    final_ru = [rec if rec[2] != "x1-0:2/3" else (1, 1, rec[2]) for rec in final_ru]  # reordered
    r = check_txn(h, final_rc, final_ru)
    assert not r.ok
    assert r.aborted_reads == [("live read_committed", (0, 2, "x0-1:0/2"))]
    assert ("live read_committed", "x1-0", 1, 3) in r.torn
    assert ("final read_committed", "x0-0", 1, 2) in r.torn
    assert r.lost == [("x0-0", 1, "x0-0:1/2")]
    assert set(r.duplicated) == {"x0-0:0/2"}
    assert ("final read_uncommitted", (0, 6, "y")) in r.unexpected
    assert ("live read_committed", (1, 9, "x0-0:0/2"), None) in r.phantom
    assert [t for t, _a, _b in r.reordered] == ["x1-0"]


def test_a_live_reader_stopped_short_of_the_end_is_reported_not_taken_for_torn() -> None:
    h = txn_history()
    h.read_committed = COMMITTED[:3]  # stopped before x1-0's last record
    h.read_uncommitted = list(UNCOMMITTED)
    h.reached_end = {"read_uncommitted"}
    r = check_txn(h, COMMITTED, UNCOMMITTED)
    assert not r.ok
    assert r.short == ["read_committed"] and r.torn == []
