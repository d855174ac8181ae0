"""Random operation sequences on the classic group never crash and keep its invariants."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.clock import ManualClock
from strom.coordinator.classic import ClassicConfig, ClassicGroup, GroupState
from strom.coordinator.effects import Effects, Pending

PROTOCOL_SETS = [[("range", b"r")], [("range", b"r2"), ("roundrobin", b"x")], [("sticky", b"s")]]

op = st.one_of(
    st.tuples(
        st.just("join"),
        st.integers(0, 5),
        st.sampled_from([None, "i1", "i2"]),
        st.integers(0, 2),
        st.booleans(),
    ),
    st.tuples(st.just("sync"), st.integers(0, 5), st.integers(-1, 1)),
    st.tuples(st.just("heartbeat"), st.integers(0, 5), st.integers(-1, 1)),
    st.tuples(st.just("leave"), st.integers(0, 5), st.sampled_from([None, "i1", "i2"])),
    st.tuples(st.just("tick"), st.integers(0, 40000)),
)


def check_invariants(g: ClassicGroup) -> None:
    if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
        assert g.members, g.state
        assert g.protocol_name is not None
    if g.state == GroupState.EMPTY:
        assert not g.members
    if g.members:
        assert g.leader_id in g.members
    for inst, mid in g.static_members.items():
        assert g.members[mid].group_instance_id == inst
    assert g.pending_sync <= set(g.members)
    if g.state == GroupState.STABLE:
        # every member of a Stable group is answered for this generation: none waits to join
        assert all(m.join_pending is None for m in g.members.values())
        assert all(m.sync_pending is None for m in g.members.values())
    if g.state != GroupState.PREPARING_REBALANCE:
        assert all(m.join_pending is None for m in g.members.values())
    # everyone supports the selected protocol
    for m in g.members.values():
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            assert g.protocol_name in m.protocol_names()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=60), st.sampled_from([0, 3000]))
def test_random_operations_keep_invariants(ops: list[tuple[Any, ...]], delay: int) -> None:
    clock = ManualClock()
    counter = itertools.count()
    g = ClassicGroup(
        "g",
        clock,
        ClassicConfig(initial_rebalance_delay_ms=delay),
        new_member_id=lambda c: f"m{next(counter)}",
    )
    known: list[str] = []
    pendings: list[Pending[Any]] = []

    def member(i: int) -> str:
        return known[i % len(known)] if known and i < 5 else ""

    for o in ops:
        eff = Effects()
        kind = o[0]
        if kind == "join":
            _, i, inst, proto, v4 = o
            p = g.join(
                eff,
                member_id=member(i),
                group_instance_id=inst,
                protocol_type="consumer",
                protocols=PROTOCOL_SETS[proto],
                session_timeout_ms=10000,
                rebalance_timeout_ms=20000,
                client_id="c",
                client_host="/h",
                require_known_member_id=v4,
                supports_skip_assignment=True,
            )
            pendings.append(p)
        elif kind == "sync":
            _, i, dgen = o
            mid = member(i)
            p2 = g.sync(
                eff,
                member_id=mid,
                generation_id=g.generation_id + dgen,
                group_instance_id=None,
                protocol_type=None,
                protocol_name=None,
                assignments={m: m.encode() for m in g.members},
            )
            pendings.append(p2)
        elif kind == "heartbeat":
            _, i, dgen = o
            g.heartbeat(member(i), g.generation_id + dgen, None)
        elif kind == "leave":
            _, i, inst = o
            g.leave(eff, [(member(i), inst)])
        else:
            clock.advance(o[1])
            g.tick(eff)
        eff.deliver()
        for p in pendings:
            if p.done and p.value is not None:
                mid = getattr(p.value, "member_id", "")
                if mid and mid not in known:
                    known.append(mid)
        check_invariants(g)
    # liveness: once time passes every deadline, every request has been answered
    for _ in range(10):
        eff = Effects()
        clock.advance(60000)
        g.tick(eff)
        eff.deliver()
        check_invariants(g)
    assert all(p.done for p in pendings)
    assert g.state == GroupState.EMPTY and not g.members
