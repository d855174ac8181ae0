"""KIP-848 consumer groups: assignors, epochs, revocation before assignment, fencing."""

from __future__ import annotations

import uuid

from strom.clock import ManualClock
from strom.coordinator.consumer import (
    ConsumerConfig,
    ConsumerGroup,
    HeartbeatResult,
    range_assign,
    uniform_assign,
)
from strom.protocol.errors import ErrorCode as E

TID = uuid.UUID(int=7)
TOPICS = {"t": (TID, 6)}


def resolve(name: str) -> tuple[uuid.UUID, int] | None:
    return TOPICS.get(name)


def hb(
    g: ConsumerGroup,
    mid: str,
    epoch: int,
    owned: dict[str, set[int]] | None = None,
    subs: list[str] | None = None,
    **kw: object,
) -> HeartbeatResult:
    return g.heartbeat(
        member_id=mid,
        member_epoch=epoch,
        instance_id=kw.get("instance"),  # type: ignore[arg-type]
        rack_id=None,
        rebalance_timeout_ms=30000,
        subscribed_topic_names=subs if subs is not None else (["t"] if epoch == 0 else None),
        subscribed_topic_regex=None,
        server_assignor=None,
        owned=owned,
        client_id="c",
        client_host="/h",
        resolve=resolve,
    )


def parts(r: HeartbeatResult) -> set[int]:
    assert r.assignment is not None
    return {p for _tid, ps in r.assignment for p in ps}


def test_assignors_balance() -> None:
    out = uniform_assign({"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 6}, {})
    assert sorted(len(a["t"]) for a in out.values()) == [2, 2, 2]
    sticky = uniform_assign({"a": ["t"], "b": ["t"], "c": ["t"], "d": ["t"]}, {"t": 6}, out)
    moved = sum(len(out[m]["t"] - sticky[m].get("t", set())) for m in out)
    assert moved == 1  # only what must move
    r = range_assign({"a": ["t"], "b": ["t"]}, {"t": 5}, {})
    assert r["a"]["t"] == {0, 1, 2} and r["b"]["t"] == {3, 4}


def test_join_gets_everything_then_revocation_before_reassignment() -> None:
    clock = ManualClock()
    g = ConsumerGroup("g", clock)
    r1 = hb(g, "a", 0)
    assert r1.error == E.NONE and r1.member_epoch == 1 and parts(r1) == set(range(6))
    assert g.state == "Stable"
    r2 = hb(g, "b", 0)
    assert r2.member_epoch == 2 and parts(r2) == set()  # a still owns them
    ra = hb(g, "a", 1, owned={"t": set(range(6))})
    assert ra.member_epoch == 1 and len(parts(ra)) == 3  # revoke first, same epoch
    rb = hb(g, "b", 2)
    assert rb.assignment is None or parts(rb) == set()  # not released yet
    ra2 = hb(g, "a", 1, owned={"t": parts(ra)})
    assert ra2.member_epoch == 2
    rb2 = hb(g, "b", 2, owned=set())
    assert rb2.member_epoch == 2 and parts(rb2) == set(range(6)) - parts(ra)
    assert g.state == "Stable"


def test_fencing_and_leave_and_session_timeout() -> None:
    clock = ManualClock()
    g = ConsumerGroup("g", clock)
    hb(g, "a", 0)
    assert hb(g, "a", 5).error == E.FENCED_MEMBER_EPOCH
    assert hb(g, "zz", 3).error == E.UNKNOWN_MEMBER_ID
    hb(g, "b", 0)
    assert hb(g, "b", -1).member_epoch == -1 and "b" not in g.members
    clock.advance(45001)
    assert g.tick() == ["a"] and g.state == "Empty"


def test_commit_validation_uses_member_epoch() -> None:
    g = ConsumerGroup("g", ManualClock())
    assert g.validate_offset_commit("", -1) == E.NONE
    r = hb(g, "a", 0)
    assert g.validate_offset_commit("a", r.member_epoch) == E.NONE
    assert g.validate_offset_commit("a", r.member_epoch + 3) == E.STALE_MEMBER_EPOCH
    assert g.validate_offset_commit("x", 1) == E.UNKNOWN_MEMBER_ID


def test_static_member_temporary_leave_and_rejoin_keeps_partitions() -> None:
    g = ConsumerGroup("g", ManualClock())
    r = hb(g, "a", 0, instance="i-a")
    before = parts(r)
    assert hb(g, "a", -2).member_epoch == -2
    r2 = hb(g, "a2", 0, instance="i-a")
    assert r2.error == E.NONE and parts(r2) == before and r2.member_epoch == r.member_epoch
    assert hb(g, "a3", 0, instance="i-a").error == E.UNRELEASED_INSTANCE_ID


def test_member_that_finishes_revoking_after_the_target_moved_gets_its_new_partitions() -> None:
    # Kafka's CurrentAssignmentBuilder: once the member revoked, it is reconciled towards the
    # latest target, not parked at the assignment epoch with only what it kept.
    g = ConsumerGroup("g", ManualClock())
    hb(g, "a", 0)
    hb(g, "b", 0)
    ra = hb(g, "a", 1, owned={"t": set(range(6))})
    assert g.members["a"].state == "unrevoked_partitions" and len(parts(ra)) == 3
    hb(g, "b", -1)  # the target moves on while a is revoking: a is to get everything
    ra2 = hb(g, "a", 1, owned={"t": parts(ra)})
    assert ra2.member_epoch == g.assignment_epoch and parts(ra2) == set(range(6))
    assert g.state == "Stable" and g.owners == {("t", p): "a" for p in range(6)}


def converge(g: ConsumerGroup, epochs: dict[str, int], owned: dict[str, set[int]]) -> None:
    """Heartbeat every member, reporting what it owns, until nothing changes."""
    for _ in range(6):
        for m in sorted(epochs):
            x = hb(g, m, epochs[m], owned={"t": owned[m]})
            assert x.error == E.NONE
            epochs[m] = x.member_epoch
            if x.assignment is not None:
                owned[m] = parts(x)


def test_range_member_that_loses_and_gains_in_one_rebalance_converges() -> None:
    g = ConsumerGroup("g", ManualClock(), ConsumerConfig(assignors=("range", "uniform")))
    epochs: dict[str, int] = {}
    owned: dict[str, set[int]] = {}
    for m in ("m1", "m2"):
        epochs[m], owned[m] = hb(g, m, 0).member_epoch, set()
    converge(g, epochs, owned)
    assert owned == {"m1": {0, 1, 2}, "m2": {3, 4, 5}}
    epochs["m0"], owned["m0"] = hb(g, "m0", 0).member_epoch, set()  # sorts first
    converge(g, epochs, owned)  # m1 gives up 0-1 and takes 3 from m2
    assert owned == {"m0": {0, 1}, "m1": {2, 3}, "m2": {4, 5}}
    assert g.state == "Stable"


def test_static_member_leaving_temporarily_releases_what_it_was_revoking() -> None:
    g = ConsumerGroup("g", ManualClock())
    ra = hb(g, "a", 0, instance="i-a")
    hb(g, "b", 0)
    ra = hb(g, "a", ra.member_epoch, owned={"t": set(range(6))})
    pending = set(g.members["a"].pending_revocation["t"])
    assert pending
    assert hb(g, "a", -2).member_epoch == -2
    rb = hb(g, "b", g.members["b"].member_epoch, owned={"t": set()})
    assert parts(rb) == pending  # b need not wait for a's rejoin or session timeout
    r2 = hb(g, "a2", 0, instance="i-a", owned={"t": set()})
    assert r2.error == E.NONE and parts(r2) == set(range(6)) - pending


def test_partitions_already_given_up_are_not_waited_for() -> None:
    g = ConsumerGroup("g", ManualClock())
    hb(g, "a", 0)
    hb(g, "b", 0)
    keep = set(g.target["a"]["t"])
    ra = hb(g, "a", 1, owned={"t": keep})  # its report already lacks what it is to give up
    assert ra.member_epoch == 2 and g.members["a"].state == "stable"
    rb = hb(g, "b", 2, owned={"t": set()})
    assert parts(rb) == set(range(6)) - keep


def test_commit_with_previous_epoch_only_for_partitions_still_held() -> None:
    g = ConsumerGroup("g", ManualClock())
    ra = hb(g, "a", 0)
    hb(g, "b", 0)
    ra = hb(g, "a", 1, owned={"t": set(range(6))})  # revoking: still epoch 1
    kept, pending = parts(ra), set(g.members["a"].pending_revocation["t"])
    assert g.validate_offset_commit("a", 1, [("t", p) for p in range(6)]) == E.NONE
    hb(g, "a", 1, owned={"t": kept})  # revoked: epoch 2, previous 1
    assert g.members["a"].member_epoch == 2 and g.members["a"].previous_member_epoch == 1
    # a commit racing the epoch bump is accepted for what it still holds ...
    assert g.validate_offset_commit("a", 1, [("t", p) for p in kept]) == E.NONE
    # ... not for what has moved on (a zombie's commit), nor with an older epoch
    assert g.validate_offset_commit("a", 1, [("t", min(pending))]) == E.STALE_MEMBER_EPOCH
    assert g.validate_offset_commit("a", 0, []) == E.STALE_MEMBER_EPOCH
    # a static member that left temporarily commits nothing
    rs = hb(g, "s", 0, instance="i-s")
    assert hb(g, "s", -2).member_epoch == -2
    assert g.validate_offset_commit("s", rs.member_epoch, []) == E.STALE_MEMBER_EPOCH
    assert g.validate_offset_commit("s", -2, []) == E.STALE_MEMBER_EPOCH


def test_static_member_rejoining_after_leaving_mid_revocation_reconciles_without_a_report() -> None:
    g = ConsumerGroup("g", ManualClock())
    ra = hb(g, "a", 0, instance="i-a")
    hb(g, "b", 0)
    hb(g, "a", ra.member_epoch, owned={"t": set(range(6))})  # a revoking
    hb(g, "a", -2)
    r2 = hb(g, "a2", 0, instance="i-a")  # a join that reports no owned partitions at all
    assert r2.error == E.NONE and g.members["a2"].state == "stable"
    assert r2.member_epoch == g.assignment_epoch and parts(r2) == set(g.target["a2"]["t"])
