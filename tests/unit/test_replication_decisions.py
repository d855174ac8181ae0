"""strom.replication: the leader's handling of one follower fetch and the follower's handling of
the answer, on real PartitionLogs (the simulation runs them under faults: tests/simulation)."""

from __future__ import annotations

from pathlib import Path

from test_log_support import batch, open_log

from strom.protocol.errors import ErrorCode as E
from strom.replication import FetchAnswer, FollowerOutcome, handle_fetch_answer, handle_follower_fetch
from strom.replication.follower import fetch_partition, truncation_target
from strom.server.partition import Partition, RoleChange


def test_leader_answers_epochs_divergence_range_and_moves_the_hw(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "l")
    plog.assign_epoch_start_offset(3, 0)
    plog.append_as_leader(batch(2), 3)
    plog.assign_epoch_start_offset(5, 2)
    plog.append_as_leader(batch(3), 5)  # epoch 3: [0, 2), epoch 5: [2, 5)
    p = Partition("t", 0, 1)
    assert p.update((1, 2, 3), (1, 2), 1, 5, 0, 0, 2) is RoleChange.LEADER

    def fetch(replica: int, offset: int, current: int = 5, last: int = -1):  # type: ignore[no-untyped-def]
        return handle_follower_fetch(p, plog, replica, offset, current_leader_epoch=current,
                                     last_fetched_epoch=last, broker_epoch=-1, leader_cap=5, now_ms=10)

    assert fetch(9, 0).error_code == E.NOT_LEADER_OR_FOLLOWER
    assert fetch(2, 0, current=4).error_code == E.FENCED_LEADER_EPOCH
    assert fetch(2, 0, current=6).error_code == E.UNKNOWN_LEADER_EPOCH
    assert fetch(2, 3, last=3).diverging_epoch == (3, 2)  # epoch 3 ends at 2 here
    assert fetch(2, 9).error_code == E.OFFSET_OUT_OF_RANGE
    assert plog.high_watermark == 0
    r = fetch(2, 4, last=5)
    assert (r.error_code, r.high_watermark, r.read_to, r.expand_isr) == (E.NONE, 4, 5, None)
    r = fetch(3, 5, last=5)  # replica 3 caught up: proposed for the ISR; the HW stays over the ISR
    assert r.expand_isr == (1, 2, 3) and r.read_to == -1 and plog.high_watermark == 4


def test_follower_appends_truncates_and_restarts(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "l")
    leader.assign_epoch_start_offset(1, 0)
    leader.append_as_leader(batch(2), 1)
    records = leader.read_bytes(0, 1 << 20)
    f = open_log(tmp_path / "f")
    req = fetch_partition(f, 1, 100)
    assert (req["fetch_offset"], req["last_fetched_epoch"], req["current_leader_epoch"]) == (0, -1, 1)
    r = handle_fetch_answer(("t", 0), f, FetchAnswer(E.NONE, 1, 0, None, records))
    assert r.outcome is FollowerOutcome.FETCHED and r.high_watermark_advanced
    assert (f.log_end_offset, f.high_watermark, f.latest_epoch) == (2, 1, 1)
    f.append_as_leader(batch(1), 2)  # a tail of epoch 2 the leader never had
    assert truncation_target(f, 1, 2) == 2
    r = handle_fetch_answer(("t", 0), f, FetchAnswer(E.NONE, 1, 0, (1, 2)))
    assert r.outcome is FollowerOutcome.TRUNCATED and f.log_end_offset == 2
    r = handle_fetch_answer(("t", 0), f, FetchAnswer(E.OFFSET_OUT_OF_RANGE, 7, 7))
    assert r.outcome is FollowerOutcome.OUT_OF_RANGE and f.log_start_offset == f.log_end_offset == 7
    r = handle_fetch_answer(("t", 0), f, FetchAnswer(E.FENCED_LEADER_EPOCH, -1, -1))
    assert r.outcome is FollowerOutcome.ERROR
