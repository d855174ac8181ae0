"""The leader's view of a replicated partition (strom.server.partition): roles from leader
epochs, the HW over the maximal ISR, ISR expansion and shrink decisions (Kafka's rules)."""

from __future__ import annotations

from strom.server.partition import Partition, PendingIsr, RoleChange


def leader(node: int = 1, isr: tuple[int, ...] = (1, 2, 3), now: int = 1000, leo: int = 0) -> Partition:
    p = Partition("t", 0, node)
    assert p.update((1, 2, 3), isr, 1, 5, 7, now, leo) is RoleChange.LEADER
    return p


def test_roles_follow_leader_epochs() -> None:
    p = Partition("t", 0, 2)
    assert p.update((1, 2, 3), (1, 2, 3), 1, 0, 0, 0, 0) is RoleChange.FOLLOWER
    assert not p.is_leader
    # an older or equal registration changes nothing
    assert p.update((1, 2, 3), (2,), 2, 0, 0, 0, 0) is RoleChange.NONE
    assert p.leader_id == 1
    # same leader epoch, newer partition epoch: only the ISR moves
    assert p.update((1, 2, 3), (1, 2), 1, 0, 1, 0, 0) is RoleChange.NONE
    assert p.isr == (1, 2)
    assert p.update((1, 2, 3), (2, 3), 2, 1, 2, 0, 50) is RoleChange.LEADER
    assert p.is_leader and p.leader_epoch_start_offset == 50
    assert set(p.remote) == {1, 3}


def test_high_watermark_is_min_over_isr_and_waits_for_unknown_followers() -> None:
    p = leader(leo=0)
    assert p.high_watermark_bound(10) == -1  # no follower fetched at this epoch yet
    p.update_follower(2, 10, 10, 1001)
    assert p.high_watermark_bound(10) == -1
    p.update_follower(3, 4, 10, 1001)
    assert p.high_watermark_bound(10) == 4
    p.update_follower(3, 10, 10, 1002)
    assert p.high_watermark_bound(12) == 10
    # a replica out of the ISR does not hold the HW
    p.update((1, 2, 3), (1, 2), 1, 5, 8, 1003, 12)
    p.update_follower(2, 12, 12, 1004)
    assert p.high_watermark_bound(12) == 12


def test_expansion_counts_for_the_hw_while_pending() -> None:
    p = leader(isr=(1, 2))
    p.update_follower(2, 10, 10, 1001)
    p.update_follower(3, 3, 10, 1001)
    assert p.isr_to_expand(10) is None  # 3 is behind the HW
    p.update_follower(3, 10, 10, 1002)
    assert p.isr_to_expand(10) == (1, 2, 3)
    p.pending = PendingIsr((1, 2, 3), p.partition_epoch, 1002)
    assert p.maximal_isr == (1, 2, 3)
    assert p.isr_to_expand(10) is None  # one change at a time
    # the answer (a newer partition epoch) clears the pending change
    p.update((1, 2, 3), (1, 2, 3), 1, 5, 8, 1003, 10)
    assert p.pending is None and p.isr == (1, 2, 3)


def test_expansion_needs_the_start_of_the_leaders_epoch() -> None:
    p = leader(isr=(1, 2), leo=20)  # became leader with 20 records
    p.update_follower(2, 20, 20, 1001)
    p.update_follower(3, 15, 20, 1001)
    assert p.isr_to_expand(15) is None  # at the HW but not at the epoch start
    p.update_follower(3, 20, 20, 1002)
    assert p.isr_to_expand(20) == (1, 2, 3)


def test_shrink_after_lag_time_but_not_for_a_follower_keeping_pace() -> None:
    p = leader(now=0)
    lag = 30_000
    # 2 fetches regularly, always reaching the LEO the leader had at its previous fetch
    leo = 0
    for t in range(0, 60_000, 500):
        p.update_follower(2, leo, leo + 5, t)
        leo += 5
    # 3 never fetched since the leader took over at t=0
    assert p.isr_to_shrink(29_000, lag, leo) is None
    assert p.isr_to_shrink(60_000, lag, leo) == (1, 2)
    # a follower at the leader's log end is never out of sync
    p.update_follower(2, leo, leo, 60_000)
    p.update_follower(3, leo, leo, 60_000)
    assert p.isr_to_shrink(200_000, lag, leo) is None


def test_a_follower_never_decides() -> None:
    p = Partition("t", 0, 2)
    p.update((1, 2, 3), (1, 2, 3), 1, 0, 0, 0, 0)
    assert p.isr_to_expand(0) is None
    assert p.isr_to_shrink(10**9, 1, 0) is None
