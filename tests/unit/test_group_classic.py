"""The classic group state machine, driven directly with a ManualClock (no sockets, no asyncio)."""

from __future__ import annotations

import itertools

import pytest

from strom.clock import ManualClock
from strom.coordinator.classic import (
    ClassicConfig,
    ClassicGroup,
    GroupState,
    IllegalStateTransition,
    JoinResult,
    SyncResult,
)
from strom.coordinator.effects import Effects, Pending
from strom.coordinator.records import decode_group_metadata_value, decode_key
from strom.protocol.errors import ErrorCode as E

PROTOS = [("range", b"meta-range"), ("roundrobin", b"meta-rr")]


class Harness:
    def __init__(self, delay: int = 0) -> None:
        self.clock = ManualClock()
        counter = itertools.count(1)
        self.g = ClassicGroup(
            "g",
            self.clock,
            ClassicConfig(initial_rebalance_delay_ms=delay),
            new_member_id=lambda client: f"{client}-{next(counter)}",
        )
        self.records: list[tuple[bytes, bytes | None]] = []

    def _run(self, fn):  # type: ignore[no-untyped-def]
        eff = Effects()
        out = fn(eff)
        self.records += eff.records
        eff.deliver()
        return out

    def join(
        self,
        member_id: str = "",
        *,
        instance: str | None = None,
        protos=PROTOS,  # type: ignore[no-untyped-def]
        session: int = 10000,
        rebalance: int = 30000,
        version: int = 9,
        client: str = "c",
    ) -> Pending[JoinResult]:
        return self._run(
            lambda eff: self.g.join(
                eff,
                member_id=member_id,
                group_instance_id=instance,
                protocol_type="consumer",
                protocols=protos,
                session_timeout_ms=session,
                rebalance_timeout_ms=rebalance,
                client_id=client,
                client_host="/h",
                require_known_member_id=version >= 4,
                supports_skip_assignment=version >= 9,
            )
        )

    def join_new(self, **kw) -> Pending[JoinResult]:  # type: ignore[no-untyped-def]
        """Both rounds of a v4+ join of a new member."""
        p = self.join(**kw)
        assert p.result().error == E.MEMBER_ID_REQUIRED
        kw.pop("member_id", None)
        return self.join(p.result().member_id, **kw)

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        instance: str | None = None,
    ) -> Pending[SyncResult]:
        return self._run(
            lambda eff: self.g.sync(
                eff,
                member_id=member_id,
                generation_id=generation,
                group_instance_id=instance,
                protocol_type="consumer",
                protocol_name=self.g.protocol_name,
                assignments=assignments or {},
            )
        )

    def tick(self, ms: int = 0) -> None:
        self.clock.advance(ms)
        self._run(self.g.tick)

    def leave(self, *members: tuple[str, str | None]) -> list[int]:
        return self._run(lambda eff: self.g.leave(eff, list(members)))  # type: ignore[no-any-return]

    def stable_group(self, n: int) -> list[str]:
        """n members joined (all in one generation) and synced; returns member ids, leader first."""
        firsts = [self.join(client=f"c{i}") for i in range(n)]
        pend = [self.join(f.result().member_id) for f in firsts]
        assert all(p.done for p in pend)
        ids = [p.result().member_id for p in pend]
        leader = pend[0].result().leader
        gen = self.g.generation_id
        syncs = [self.sync(m, gen) for m in ids if m != leader]
        syncs.append(self.sync(leader, gen, {m: f"assign-{m}".encode() for m in ids}))
        assert all(s.result().error == E.NONE for s in syncs)
        assert self.g.state == GroupState.STABLE
        return [leader] + [m for m in ids if m != leader]


def test_member_id_required_round() -> None:
    h = Harness()
    p = h.join()
    r = p.result()
    assert r.error == E.MEMBER_ID_REQUIRED and r.member_id == "c-1"
    assert h.g.state == GroupState.EMPTY and "c-1" in h.g.pending_members
    p2 = h.join("c-1")
    r2 = p2.result()
    assert r2.error == E.NONE and r2.generation_id == 1 and r2.leader == "c-1"
    assert r2.protocol_name == "range" and r2.members == [("c-1", None, b"meta-range")]
    assert h.g.state == GroupState.COMPLETING_REBALANCE


def test_v3_join_without_member_id_round() -> None:
    h = Harness()
    r = h.join(version=3).result()
    assert r.error == E.NONE and r.member_id == "c-1" and r.generation_id == 1


@pytest.mark.parametrize("n", [1, 2, 3])
def test_join_and_sync_n_members(n: int) -> None:
    h = Harness()
    ids = h.stable_group(n)
    assert h.g.generation_id == 1 and len(h.g.members) == n
    for m in ids:
        assert h.g.members[m].assignment == f"assign-{m}".encode()
    # the leader got everyone's metadata, followers got none
    assert h.g.leader_id == ids[0]
    # a GroupMetadata record was written with the assignment
    key, value = h.records[-1]
    assert decode_key(key).group == "g"  # type: ignore[union-attr]
    assert value is not None
    gm = decode_group_metadata_value(value)
    assert gm.generation == 1 and gm.protocol == "range" and len(gm.members) == n


def test_second_member_triggers_rebalance_and_followers_wait_for_leader() -> None:
    h = Harness()
    [a] = h.stable_group(1)
    b_first = h.join(client="b")
    b = h.join(b_first.result().member_id)
    assert not b.done and h.g.state == GroupState.PREPARING_REBALANCE
    assert h.g.heartbeat(a, 1, None) == E.REBALANCE_IN_PROGRESS
    a_join = h.join(a)
    assert a_join.done and b.done
    assert a_join.result().generation_id == 2 and len(a_join.result().members) == 2
    assert b.result().members == []
    follower_sync = h.sync(b.result().member_id, 2)
    assert not follower_sync.done
    leader_sync = h.sync(a, 2, {a: b"A", b.result().member_id: b"B"})
    assert follower_sync.result().assignment == b"B" and leader_sync.result().assignment == b"A"
    assert h.g.state == GroupState.STABLE


def test_protocol_selection_votes_and_inconsistent_protocol() -> None:
    h = Harness()
    p1 = h.join_new(protos=[("roundrobin", b"1"), ("range", b"1")], client="a")
    assert p1.result().protocol_name == "roundrobin"
    h.sync(p1.result().member_id, 1, {})
    bad = h.join(protos=[("sticky", b"x")], client="b")
    assert bad.result().error == E.INCONSISTENT_GROUP_PROTOCOL


def test_errors_unknown_member_illegal_generation_fenced() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    assert h.g.heartbeat("nobody", 1, None) == E.UNKNOWN_MEMBER_ID
    assert h.g.heartbeat(a, 7, None) == E.ILLEGAL_GENERATION
    assert h.g.heartbeat(a, 1, None) == E.NONE
    assert h.sync(b, 9).result().error == E.ILLEGAL_GENERATION
    assert h.join("ghost").result().error == E.UNKNOWN_MEMBER_ID


def test_session_timeout_evicts_member_and_rebalances() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    h.tick(6000)
    assert h.g.heartbeat(a, 1, None) == E.NONE  # a keeps heartbeating, b does not
    h.tick(4500)  # b's 10 s session expired
    assert b not in h.g.members
    assert h.g.state == GroupState.PREPARING_REBALANCE
    r = h.join(a)
    assert r.result().generation_id == 2 and [m[0] for m in r.result().members] == [a]


def test_rebalance_timeout_removes_members_that_did_not_rejoin() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    h.leave()  # no-op
    c_first = h.join(client="c")
    c = h.join(c_first.result().member_id, rebalance=30000)
    a_join = h.join(a)
    assert not c.done and not a_join.done
    for _ in range(6):  # b heartbeats but never rejoins
        h.tick(5000)
        h.g.heartbeat(b, 1, None)
    h.tick(1)
    assert c.done and a_join.done
    assert b not in h.g.members and h.g.generation_id == 2
    assert {m[0] for m in a_join.result().members} == {a, c.result().member_id}


def test_sync_timeout_removes_members_that_never_sync() -> None:
    h = Harness()
    a = h.join_new(client="a").result().member_id
    assert h.g.state == GroupState.COMPLETING_REBALANCE
    h.tick(30001)
    assert a not in h.g.members
    h.tick(0)
    assert h.g.state == GroupState.EMPTY and h.g.generation_id == 2


def test_leave_batched_and_rebalance() -> None:
    h = Harness()
    a, b, c = h.stable_group(3)
    errs = h.leave((b, None), (c, None), ("ghost", None))
    assert errs == [E.NONE, E.NONE, E.UNKNOWN_MEMBER_ID]
    assert h.g.state == GroupState.PREPARING_REBALANCE
    r = h.join(a)
    assert r.result().generation_id == 2 and len(h.g.members) == 1
    assert h.leave((a, None)) == [E.NONE]
    assert h.g.state == GroupState.EMPTY and h.g.generation_id == 3


def test_last_member_leaving_stable_group_empties_it() -> None:
    h = Harness()
    [a] = h.stable_group(1)
    h.leave((a, None))
    assert h.g.state == GroupState.EMPTY and h.g.generation_id == 2
    gm = decode_group_metadata_value(h.records[-1][1])  # type: ignore[arg-type]
    assert gm.members == () and gm.generation == 2


def test_static_member_restart_keeps_assignment_without_rebalance() -> None:
    h = Harness()
    a = h.join(instance="i-a", client="a")  # static members skip MEMBER_ID_REQUIRED
    b = h.join(instance="i-b", client="b")
    a2 = h.join(a.result().member_id, instance="i-a")  # completes the join phase
    assert a2.done and b.done
    gen = h.g.generation_id
    h.sync(b.result().member_id, gen, instance="i-b")
    h.sync(
        a.result().member_id, gen, {a.result().member_id: b"A", b.result().member_id: b"B"}, instance="i-a"
    )
    assert h.g.state == GroupState.STABLE
    old_b = b.result().member_id
    # b restarts: new process, empty member id, same instance id
    b2 = h.join(instance="i-b", client="b")
    r = b2.result()
    assert r.error == E.NONE and r.member_id != old_b and r.generation_id == gen
    assert h.g.state == GroupState.STABLE and h.g.generation_id == gen
    assert h.sync(r.member_id, gen, instance="i-b").result().assignment == b"B"
    # the old member id is fenced
    assert h.g.heartbeat(old_b, gen, "i-b") == E.FENCED_INSTANCE_ID
    assert h.sync(old_b, gen, instance="i-b").result().error == E.FENCED_INSTANCE_ID
    assert h.leave((old_b, "i-b")) == [E.FENCED_INSTANCE_ID]


def test_static_leader_restart_skips_assignment_v9_and_not_leader_before() -> None:
    h = Harness()
    a = h.join(instance="i-a", client="a")
    a_id = a.result().member_id
    h.sync(a_id, 1, {a_id: b"A"}, instance="i-a")
    r9 = h.join(instance="i-a", client="a").result()
    assert r9.skip_assignment and r9.leader == r9.member_id and len(r9.members) == 1
    r8 = h.join(instance="i-a", client="a", version=8).result()
    assert not r8.skip_assignment and r8.leader != r8.member_id and r8.members == []
    assert h.g.generation_id == 1 and h.g.state == GroupState.STABLE


def test_static_member_not_removed_when_missing_a_rebalance() -> None:
    h = Harness()
    a = h.join(instance="i-a", client="a").result().member_id
    h.sync(a, 1, {a: b"A"}, instance="i-a")
    d = h.join_new(client="d")
    assert not d.done
    for _ in range(5):  # a heartbeats (alive) but never rejoins; being static it is kept
        h.tick(5000)
        assert h.g.heartbeat(a, 1, "i-a") == E.REBALANCE_IN_PROGRESS
    h.tick(5000)  # the join phase's rebalance timeout
    assert d.done and a in h.g.members and h.g.generation_id == 2


def test_initial_rebalance_delay_groups_joiners() -> None:
    h = Harness(delay=3000)
    a = h.join_new(client="a")
    assert not a.done
    h.tick(2000)
    b = h.join_new(client="b")
    h.tick(1001)  # first delay over, but b arrived: extended
    assert not a.done
    h.tick(3000)
    assert a.done and b.done and a.result().generation_id == 1 == b.result().generation_id


def test_pending_member_expires() -> None:
    h = Harness()
    h.join()
    assert h.g.pending_members
    h.tick(10001)
    assert not h.g.pending_members


def test_commit_validation() -> None:
    h = Harness()
    assert h.g.validate_offset_commit("", None, -1) == E.NONE  # simple consumer on empty group
    a, _b = h.stable_group(2)
    assert h.g.validate_offset_commit("", None, -1) == E.UNKNOWN_MEMBER_ID
    assert h.g.validate_offset_commit(a, None, 1) == E.NONE
    assert h.g.validate_offset_commit(a, None, 0) == E.ILLEGAL_GENERATION
    assert h.g.validate_offset_commit("x", None, 1) == E.UNKNOWN_MEMBER_ID
    h.join_new(client="c")
    assert h.g.validate_offset_commit(a, None, 1) == E.NONE  # PreparingRebalance accepts old gen


def test_transition_table_is_enforced() -> None:
    h = Harness()
    with pytest.raises(IllegalStateTransition):
        h.g.transition(GroupState.STABLE)


def test_load_rebuilds_stable_group() -> None:
    h = Harness()
    ids = h.stable_group(2)
    gm = decode_group_metadata_value(h.records[-1][1])  # type: ignore[arg-type]
    g2 = ClassicGroup.load("g", gm, h.clock)
    assert g2.state == GroupState.STABLE and g2.generation_id == 1 and g2.leader_id == ids[0]
    assert g2.heartbeat(ids[1], 1, None) == E.NONE
    assert g2.members[ids[1]].assignment == f"assign-{ids[1]}".encode()
