"""Random operation sequences on the classic group and on KIP-848 consumer groups never crash
and keep their invariants; the consumer groups also converge once their members cooperate."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.clock import ManualClock
from strom.coordinator.classic import ClassicConfig, ClassicGroup, GroupState
from strom.coordinator.consumer import ConsumerConfig, ConsumerGroup
from strom.coordinator.effects import Effects, Pending
from strom.coordinator.group_coordinator import CoordinatorConfig, GroupCoordinator
from strom.coordinator.storage import MemoryOffsetsStorage
from strom.protocol.errors import ErrorCode

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


# --------------------------------------------------------------------------- KIP-848 groups
#
# Clients modelled as Kafka's consumers behave: a member reports what it owns (or nothing, as
# the Java client does when it has not changed), applies a new assignment -- revoking what is no
# longer in it -- only when it gets round to it ("ack"), may lose a heartbeat response, leaves
# (static members temporarily, epoch -2), rejoins after being fenced, and commits offsets of
# what it owns with its member epoch, plainly or in a transaction (TxnOffsetCommit, generation =
# member epoch) while partitions are being moved around it.

K_TOPICS: dict[str, tuple[uuid.UUID, int]] = {"t": (uuid.UUID(int=1), 5), "u": (uuid.UUID(int=2), 3)}
K_SUBS = [["t"], ["u"], ["t", "u"]]
K_NAMES = {tid: n for n, (tid, _) in K_TOPICS.items()}
K_SESSION = 10000

k_op = st.one_of(
    st.tuples(st.just("join"), st.integers(0, 5), st.integers(0, 2), st.booleans(), st.booleans()),
    st.tuples(st.just("hb"), st.integers(0, 5), st.booleans(), st.booleans()),
    st.tuples(st.just("ack"), st.integers(0, 5)),
    st.tuples(st.just("leave"), st.integers(0, 5)),
    st.tuples(st.just("commit"), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("tick"), st.integers(0, 12000)),
)


@dataclass
class Client:
    slot: int
    instance: str | None
    subs: list[str]
    member_id: str = ""
    epoch: int = 0
    owned: set[tuple[str, int]] = field(default_factory=set)
    received: set[tuple[str, int]] | None = None  # the last assignment, not yet applied


def _tps(assignment: list[tuple[uuid.UUID, list[int]]]) -> set[tuple[str, int]]:
    return {(K_NAMES[tid], p) for tid, ps in assignment for p in ps}


def _owned_arg(tps: set[tuple[str, int]]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for t, p in tps:
        out.setdefault(t, set()).add(p)
    return out


def check_consumer_invariants(g: ConsumerGroup | None, clients: dict[int, Client]) -> None:
    if g is None:
        return
    held: dict[tuple[str, int], str] = {}
    for mid, m in g.members.items():
        mine = {(t, p) for t, ps in m.assigned.items() for p in ps}
        pending = {(t, p) for t, ps in m.pending_revocation.items() for p in ps}
        assert not mine & pending, mid
        for tp in mine | pending:
            assert tp not in held, f"{tp} owned by {held.get(tp)} and {mid}"  # one owner at most
            held[tp] = mid
        if m.state == "unrevoked_partitions" and m.member_epoch != -2:
            assert pending, f"{mid} waits for nothing"
        if m.member_epoch == -2:
            assert not pending, f"{mid} left but still revokes {pending}"
    assert g.owners == held  # the owner index is exactly the members' holdings
    alive = {c.member_id: c for c in clients.values() if c.member_id in g.members}
    seen: dict[tuple[str, int], str] = {}
    for mid, c in alive.items():
        m = g.members[mid]
        server = {(t, p) for a in (m.assigned, m.pending_revocation) for t, ps in a.items() for p in ps}
        # a live member's partitions are never handed to anyone else before it gave them up
        assert c.owned <= server, (mid, c.owned, server)
        for tp in c.owned:
            assert tp not in seen, f"{tp} consumed by {seen.get(tp)} and {mid}"
            seen[tp] = mid


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(k_op, max_size=50), st.sampled_from(["uniform", "range"]))
def test_consumer_group_random_operations_keep_invariants_and_converge(
    ops: list[tuple[Any, ...]], assignor: str
) -> None:
    async def main() -> None:
        clock = ManualClock()
        cfg = CoordinatorConfig(num_partitions=1, consumer=ConsumerConfig(session_timeout_ms=K_SESSION))
        ids = itertools.count()
        gc = GroupCoordinator(
            cfg, clock, MemoryOffsetsStorage(), run_timer=False, new_member_id=lambda c: f"x{next(ids)}"
        )
        gc.verify_replay = True
        await gc.start()
        clients: dict[int, Client] = {}
        pids = itertools.count(100)

        def group() -> ConsumerGroup | None:
            g = gc.groups.get("g")
            return g if isinstance(g, ConsumerGroup) else None

        def forget(c: Client) -> None:
            c.member_id, c.epoch, c.owned, c.received = "", 0, set(), None

        async def heartbeat(c: Client, report: bool = True, lose: bool = False) -> None:
            joining = not c.member_id
            r = await gc.consumer_group_heartbeat(
                "g",
                member_id=c.member_id or f"m{c.slot}-{next(ids)}",
                member_epoch=0 if joining else c.epoch,
                instance_id=c.instance,
                rebalance_timeout_ms=K_SESSION * 3,
                subscribed_topic_names=c.subs if joining else None,
                server_assignor=assignor if joining else None,
                owned=_owned_arg(c.owned) if report else None,
                resolve=K_TOPICS.get,
            )
            if r.error in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
                forget(c)  # the client abandons its partitions and rejoins later
                return
            if r.error != ErrorCode.NONE:
                assert joining and r.error == ErrorCode.UNRELEASED_INSTANCE_ID, r
                return
            if lose and not joining:
                # the answer never arrives; an assignment received earlier and not applied yet
                # may be outdated by what this heartbeat changed (its report already lacked
                # what the assignment adds): the client does not apply it, as the Java client
                # drops a reconciliation that a newer epoch overtook
                c.received = None
                return
            c.member_id, c.epoch = r.member_id or c.member_id, r.member_epoch
            if r.assignment is not None:
                c.received = _tps(r.assignment)

        async def commit(c: Client, txn: bool) -> None:
            if not c.member_id:
                return
            g = group()
            offsets = {tp: (1, -1, None) for tp in sorted(c.owned)}
            if txn:
                pid = next(pids)
                res = await gc.txn_commit_offsets(
                    "g",
                    producer_id=pid,
                    producer_epoch=0,
                    generation_id=c.epoch,
                    member_id=c.member_id,
                    group_instance_id=c.instance,
                    offsets=offsets,
                )
                await gc.complete_txn(gc.partition_for("g"), pid, commit=True)
                errors = set(res.values())
                assert ErrorCode.STALE_MEMBER_EPOCH not in errors  # producers know ILLEGAL_GENERATION
            else:
                res = await gc.commit_offsets(
                    "g", member_id=c.member_id, generation_id=c.epoch, offsets=offsets
                )
                errors = set(res.values())
            m = g.members.get(c.member_id) if g is not None else None
            if m is not None and c.epoch in (m.member_epoch, m.previous_member_epoch):
                # a member, even one revoking or one whose epoch bump it has not heard of, may
                # commit what it owns: fencing it would keep it from ever acking the revocation
                assert errors <= {ErrorCode.NONE}, (c, m, res)
            if m is None:
                assert ErrorCode.NONE not in errors or not offsets, (c, res)  # a zombie is fenced

        for o in ops:
            kind, slot = o[0], o[1]
            c = clients.get(slot)
            if kind == "join":
                if c is None or not c.member_id:
                    c = clients[slot] = Client(slot, f"i{slot}" if o[3] else None, K_SUBS[o[2]])
                    await heartbeat(c, report=o[4])
            elif kind == "hb" and c is not None and c.member_id:
                await heartbeat(c, report=o[2], lose=o[3])
            elif kind == "ack" and c is not None and c.received is not None:
                c.owned, c.received = c.received, None
            elif kind == "leave" and c is not None and c.member_id:
                await gc.consumer_group_heartbeat(
                    "g",
                    member_id=c.member_id,
                    member_epoch=-2 if c.instance else -1,
                    instance_id=c.instance,
                    resolve=K_TOPICS.get,
                )
                del clients[slot]
            elif kind == "commit" and c is not None:
                await commit(c, o[2])
            elif kind == "tick":
                clock.advance(o[1])
                await gc.tick()
            check_consumer_invariants(group(), clients)

        # liveness: everyone alive heartbeats, reports and applies what it is given, commits in
        # transactions; those fenced meanwhile rejoin. The group must settle with every
        # subscribed partition owned, by the member the target names.
        for _ in range(3 * K_SESSION // 1000):
            for c in list(clients.values()):
                if c.received is not None:
                    c.owned, c.received = c.received, None
                await heartbeat(c)
                await commit(c, True)
            clock.advance(1000)
            await gc.tick()
            check_consumer_invariants(group(), clients)
        g = group()
        if not clients:
            return
        assert g is not None
        assert g.state == "Stable", {mid: (m.state, m.member_epoch) for mid, m in g.members.items()}
        subscribed = {(t, p) for c in clients.values() for t in c.subs for p in range(K_TOPICS[t][1])}
        assert set(g.owners) == subscribed, "partitions with no owner"
        for c in clients.values():
            m = g.members[c.member_id]
            target = {(t, p) for t, ps in g.target.get(c.member_id, {}).items() for p in ps}
            assert c.owned == target == {(t, p) for t, ps in m.assigned.items() for p in ps}
            assert c.epoch == m.member_epoch == g.assignment_epoch
        await gc.stop()

    asyncio.run(main())
