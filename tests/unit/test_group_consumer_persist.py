"""KIP-848 consumer groups persisted in ``__consumer_offsets`` (record types 3-8) and rebuilt by
replay: a new coordinator over the same storage (or its compacted form) has the same groups, and
members continue with their member id and epoch without a rebalance."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from typing import TypeVar

from strom.clock import ManualClock
from strom.coordinator.classic import ClassicConfig
from strom.coordinator.consumer import ConsumerGroup, GroupView, HeartbeatResult
from strom.coordinator.group_coordinator import CoordinatorConfig, GroupCoordinator
from strom.coordinator.records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    consumer_group_record_kind,
    decode_consumer_group_value,
    decode_key,
    encode_consumer_group_key,
    encode_consumer_group_value,
)
from strom.coordinator.storage import MemoryOffsetsStorage
from strom.protocol.errors import ErrorCode as E

T = TypeVar("T")
TID = uuid.UUID(int=11)
TID2 = uuid.UUID(int=12)
TOPICS: dict[str, tuple[uuid.UUID, int]] = {"t": (TID, 6), "u": (TID2, 2)}


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


def resolve(name: str) -> tuple[uuid.UUID, int] | None:
    return TOPICS.get(name)


def make(storage: MemoryOffsetsStorage, clock: ManualClock) -> GroupCoordinator:
    cfg = CoordinatorConfig(num_partitions=4, classic=ClassicConfig(initial_rebalance_delay_ms=0))
    gc = GroupCoordinator(cfg, clock, storage, run_timer=False)
    gc.verify_replay = True
    run(gc.start())
    return gc


def reload(storage: MemoryOffsetsStorage, clock: ManualClock, *, compact: bool = False) -> GroupCoordinator:
    if compact:
        c = MemoryOffsetsStorage()
        for p in list(storage.partitions):
            c.partitions[p] = storage.compacted(p)
        storage = c
    return make(storage, clock)


class Member:
    """A client-side KIP-848 member: reports what it owns, adopts what it is told."""

    def __init__(self, mid: str, subs: list[str] | None = None, instance: str | None = None) -> None:
        self.mid = mid
        self.epoch = 0
        self.owned: dict[str, set[int]] = {}
        self.subs = subs or ["t"]
        self.instance = instance

    def hb(self, gc: GroupCoordinator, group: str = "g", epoch: int | None = None) -> HeartbeatResult:
        e = self.epoch if epoch is None else epoch
        r = run(
            gc.consumer_group_heartbeat(
                group,
                member_id=self.mid,
                member_epoch=e,
                instance_id=self.instance,
                rebalance_timeout_ms=30000,
                subscribed_topic_names=self.subs if e == 0 else None,
                owned=None if e == 0 else {t: set(ps) for t, ps in self.owned.items()},
                client_id=f"client-{self.mid}",
                client_host="/127.0.0.1",
                resolve=resolve,
            )
        )
        if r.error == E.NONE and e >= 0:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                names = {tid: name for name, (tid, _n) in TOPICS.items()}
                self.owned = {names[tid]: set(ps) for tid, ps in r.assignment if ps}
        return r


def group(gc: GroupCoordinator, gid: str = "g") -> ConsumerGroup:
    g = gc.groups[gid]
    assert isinstance(g, ConsumerGroup)
    return g


def converge(gc: GroupCoordinator, members: list[Member], rounds: int = 10) -> None:
    for _ in range(rounds):
        for m in members:
            assert m.hb(gc).error == E.NONE
        g = group(gc)
        if g.state == "Stable" and all(
            m.owned == {t: ps for t, ps in g.members[m.mid].assigned.items() if ps} for m in members
        ):
            return
    raise AssertionError(f"group did not converge: {group(gc).state}")


def owned_all(members: list[Member]) -> list[tuple[str, int]]:
    return sorted((t, p) for m in members for t, ps in m.owned.items() for p in ps)


def three_member_group() -> tuple[MemoryOffsetsStorage, ManualClock, GroupCoordinator, list[Member]]:
    storage, clock = MemoryOffsetsStorage(), ManualClock()
    gc = make(storage, clock)
    members = [Member("a"), Member("b"), Member("c")]
    for m in members:
        assert m.hb(gc).error == E.NONE
    converge(gc, members)
    assert owned_all(members) == [("t", p) for p in range(6)]
    return storage, clock, gc, members


def test_record_formats_round_trip() -> None:
    values: list[ConsumerGroupValue] = [
        ConsumerGroupMetadataValue(7),
        ConsumerGroupPartitionMetadataValue(((TID, "t", 6), (TID2, "u", 2))),
        ConsumerGroupMemberMetadataValue("i", None, "cid", "/h", ("t", "u"), None, 30000, "uniform"),
        ConsumerGroupTargetAssignmentMetadataValue(7),
        ConsumerGroupTargetAssignmentMemberValue(((TID, (0, 3)),)),
        ConsumerGroupCurrentMemberAssignmentValue(7, 6, 1, ((TID, (0,)),), ((TID2, (1,)),)),
    ]
    for v in values:
        kind = consumer_group_record_kind(v)
        data = encode_consumer_group_value(v)
        assert data[:2] == b"\x00\x00"  # value version 0
        assert decode_consumer_group_value(kind, data) == v
    # keys: int16 type, then non-flexible strings, as Kafka writes them
    assert encode_consumer_group_key(CONSUMER_GROUP_METADATA, "g") == b"\x00\x03\x00\x01g"
    k = encode_consumer_group_key(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, "g", "m")
    assert k == b"\x00\x08\x00\x01g\x00\x01m"
    assert decode_key(k) == ConsumerGroupKey(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, "g", "m")
    # Kafka's ConsumerGroupMetadataValue with a tagged MetadataHash (4.1+) still decodes
    tagged = b"\x00\x00" + (9).to_bytes(4, "big") + b"\x01\x00\x08" + (5).to_bytes(8, "big")
    assert decode_consumer_group_value(CONSUMER_GROUP_METADATA, tagged) == ConsumerGroupMetadataValue(9)


def test_reload_reproduces_group_epoch_members_target_and_current_assignments() -> None:
    storage, clock, gc, _members = three_member_group()
    before: GroupView = group(gc).view()
    assert before.group_epoch == 3 and set(before.members) == {"a", "b", "c"}
    run(gc.stop())
    for compact in (False, True):
        gc2 = reload(storage, clock, compact=compact)
        g2 = group(gc2)
        assert g2.view() == before
        assert g2.state == "Stable"
        assert g2.owners == group(gc).owners
        assert g2.static_members == {}
        d = gc2.consumer_group_describe("g")
        assert d["group_epoch"] == 3 and len(d["members"]) == 3
        assert {m["client_id"] for m in d["members"]} == {"client-a", "client-b", "client-c"}


def test_members_continue_after_reload_without_rebalance() -> None:
    storage, clock, gc, members = three_member_group()
    epochs = {m.mid: m.epoch for m in members}
    owned = owned_all(members)
    appended = storage.appends
    run(gc.stop())
    clock.advance(20000)  # the broker was down for a while
    gc2 = reload(storage, clock)
    for m in members:
        r = m.hb(gc2)
        assert r.error == E.NONE and r.member_id == m.mid and r.member_epoch == epochs[m.mid]
    assert owned_all(members) == owned
    assert group(gc2).group_epoch == 3 and group(gc2).state == "Stable"
    # nothing about the group changed: plain heartbeats write nothing
    assert storage.appends == appended
    # session timers restarted at load: 45 s after the load the members are still alive when
    # they keep heartbeating, and a silent one is fenced then
    clock.advance(40000)
    for m in members[:2]:
        assert m.hb(gc2).error == E.NONE
    clock.advance(6000)
    run(gc2.tick())
    assert set(group(gc2).members) == {"a", "b"}
    # the fencing was persisted: after another reload "c" is gone and the epoch bumped
    gc3 = reload(storage, clock)
    assert set(group(gc3).members) == {"a", "b"} and group(gc3).group_epoch == 4


def test_previous_epoch_after_reload_is_tolerated_when_it_owns_a_subset() -> None:
    storage, clock, gc, members = three_member_group()
    a = members[0]
    g = group(gc)
    assert g.members["a"].previous_member_epoch < a.epoch
    run(gc.stop())
    gc2 = reload(storage, clock)
    prev = group(gc2).members["a"].previous_member_epoch
    r = a.hb(gc2, epoch=prev)  # lost the response that moved it to its epoch
    assert r.error == E.NONE and r.member_epoch == a.epoch
    assert a.hb(gc2, epoch=a.epoch + 5).error == E.FENCED_MEMBER_EPOCH
    assert Member("zz").hb(gc2, epoch=3).error == E.UNKNOWN_MEMBER_ID


def test_reload_in_the_middle_of_a_revocation() -> None:
    storage, clock = MemoryOffsetsStorage(), ManualClock()
    gc = make(storage, clock)
    a, b = Member("a"), Member("b")
    a.hb(gc)
    assert len(a.owned["t"]) == 6
    b.hb(gc)  # a must revoke three partitions first
    a.hb(gc)
    assert group(gc).members["a"].state == "unrevoked_partitions"
    view = group(gc).view()
    run(gc.stop())
    gc2 = reload(storage, clock, compact=True)
    assert group(gc2).view() == view
    assert group(gc2).members["a"].revocation_deadline is not None
    converge(gc2, [a, b])
    assert owned_all([a, b]) == [("t", p) for p in range(6)]
    assert len(a.owned["t"]) == len(b.owned["t"]) == 3


def test_leave_writes_tombstones_and_stays_gone_after_reload() -> None:
    storage, clock, gc, members = three_member_group()
    p = gc.partition_for("g")
    n = len(storage.partitions[p])
    r = members[2].hb(gc, epoch=-1)
    assert r.error == E.NONE
    new = storage.partitions[p][n:]
    tombstones = {(decode_key(k).kind, decode_key(k).member_id) for k, v in new if v is None}  # type: ignore[union-attr]
    assert {
        (CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, "c"),
        (CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, "c"),
        (CONSUMER_GROUP_MEMBER_METADATA, "c"),
    } <= tombstones
    epoch = group(gc).group_epoch
    converge(gc, members[:2])
    view = group(gc).view()
    run(gc.stop())
    for compact in (False, True):
        g2 = group(reload(storage, clock, compact=compact))
        assert "c" not in g2.members and g2.group_epoch == epoch
        assert g2.view() == view


def test_deleted_group_stays_deleted_after_reload() -> None:
    storage, clock, gc, members = three_member_group()
    assert (
        run(
            gc.commit_offsets(
                "g", member_id="a", generation_id=members[0].epoch, offsets={("t", 0): (5, -1, "")}
            )
        )[("t", 0)]
        == E.NONE
    )
    assert run(gc.delete_groups(["g"]))["g"] == E.NON_EMPTY_GROUP
    for m in members:
        m.hb(gc, epoch=-1)
    assert group(gc).state == "Empty"
    # an empty consumer group survives a reload, with its offsets
    gc2 = reload(storage, clock)
    assert group(gc2).state == "Empty" and gc2.offsets["g"][("t", 0)].offset == 5
    assert run(gc2.delete_groups(["g"]))["g"] == E.NONE
    assert "g" not in gc2.groups
    for compact in (False, True):
        gc3 = reload(storage, clock, compact=compact)
        assert "g" not in gc3.groups and "g" not in gc3.offsets
        assert gc3.consumer_group_describe("g")["error_code"] == E.GROUP_ID_NOT_FOUND
    assert storage.compacted(gc.partition_for("g")) == []  # every key of the group tombstoned


def test_static_member_temporary_leave_survives_reload() -> None:
    storage, clock = MemoryOffsetsStorage(), ManualClock()
    gc = make(storage, clock)
    a = Member("a", instance="i-a")
    b = Member("b")
    assert a.hb(gc).error == E.NONE and b.hb(gc).error == E.NONE
    converge(gc, [a, b])
    had = dict(a.owned)
    assert a.hb(gc, epoch=-2).error == E.NONE
    gc2 = reload(storage, clock)
    g2 = group(gc2)
    assert g2.members["a"].member_epoch == -2 and g2.static_members == {"i-a": "a"}
    a2 = Member("a2", instance="i-a")
    r = a2.hb(gc2)
    assert r.error == E.NONE and a2.owned == had
    assert Member("a3", instance="i-a").hb(gc2).error == E.UNRELEASED_INSTANCE_ID
    g3 = group(reload(storage, clock))
    assert g3.static_members == {"i-a": "a2"} and "a" not in g3.members


def test_subscription_change_and_topic_metadata_persisted() -> None:
    storage, clock = MemoryOffsetsStorage(), ManualClock()
    gc = make(storage, clock)
    a, b = Member("a"), Member("b", subs=["t", "u"])
    a.hb(gc)
    b.hb(gc)
    converge(gc, [a, b])
    assert set(group(gc).topic_meta) == {"t", "u"}
    view = group(gc).view()
    # a fresh coordinator knows the topic names only from the records (ids in assignments)
    for compact in (False, True):
        gc2 = reload(storage, clock, compact=compact)
        assert group(gc2).view() == view
        assert gc2.topic_names == {TID: "t", TID2: "u"}


def test_failed_append_changes_nothing_and_answers_coordinator_not_available() -> None:
    storage, _clock, gc, _members = three_member_group()
    view = group(gc).view()
    storage.fail_next = 1
    r = Member("d").hb(gc)
    assert r.error == E.COORDINATOR_NOT_AVAILABLE
    assert group(gc).view() == view
    storage.fail_next = 1
    assert Member("x").hb(gc, group="fresh").error == E.COORDINATOR_NOT_AVAILABLE
    assert "fresh" not in gc.groups
    # a first heartbeat that fails validation creates no group and writes nothing
    n = storage.appends
    bad = run(
        gc.consumer_group_heartbeat(
            "other", member_id="", member_epoch=0, server_assignor="nope", resolve=resolve
        )
    )
    assert bad.error == E.UNSUPPORTED_ASSIGNOR and "other" not in gc.groups and storage.appends == n


def test_classic_and_consumer_conversions_survive_reload() -> None:
    storage, clock = MemoryOffsetsStorage(), ManualClock()
    gc = make(storage, clock)
    # an empty classic group (offsets only) becomes a consumer group
    assert (
        run(gc.commit_offsets("g", member_id="", generation_id=-1, offsets={("t", 1): (3, -1, "")}))[("t", 1)]
        == E.NONE
    )
    a = Member("a")
    assert a.hb(gc).error == E.NONE
    assert isinstance(reload(storage, clock).groups["g"], ConsumerGroup)
    # and back: the empty consumer group is replaced by a classic group on JoinGroup
    a.hb(gc, epoch=-1)
    r = run(
        gc.join_group(
            "g",
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[("range", b"")],
            session_timeout_ms=10000,
            rebalance_timeout_ms=10000,
            client_id="c",
            client_host="/h",
        )
    )
    assert r.error == E.MEMBER_ID_REQUIRED
    for compact in (False, True):
        gc2 = reload(storage, clock, compact=compact)
        assert not isinstance(gc2.groups["g"], ConsumerGroup)
        assert gc2.offsets["g"][("t", 1)].offset == 3
