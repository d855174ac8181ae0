"""GroupCoordinator runtime: offsets commit/fetch, append-before-ack, replay, retention, admin."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable
from typing import Any, TypeVar

from strom.clock import ManualClock
from strom.coordinator.classic import ClassicConfig, GroupState
from strom.coordinator.group_coordinator import CoordinatorConfig, GroupCoordinator
from strom.coordinator.records import (
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    java_string_hash,
    partition_for,
)
from strom.coordinator.storage import MemoryOffsetsStorage, StoredEntry
from strom.protocol.errors import ErrorCode as E

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


def make(
    storage: MemoryOffsetsStorage | None = None, clock: ManualClock | None = None, retention_ms: int = 60_000
) -> tuple[GroupCoordinator, MemoryOffsetsStorage, ManualClock]:
    storage = storage or MemoryOffsetsStorage()
    clock = clock or ManualClock()
    counter = itertools.count(1)
    cfg = CoordinatorConfig(
        offsets_retention_ms=retention_ms, classic=ClassicConfig(initial_rebalance_delay_ms=0)
    )
    return (
        GroupCoordinator(
            cfg, clock, storage, run_timer=False, new_member_id=lambda c: f"{c}-{next(counter)}"
        ),
        storage,
        clock,
    )


async def join_stable(gc: GroupCoordinator, group: str, n: int = 1) -> tuple[list[str], int]:
    ids = []
    for i in range(n):
        r = await gc.join_group(
            group,
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[("range", b"")],
            session_timeout_ms=10000,
            rebalance_timeout_ms=10000,
            client_id=f"c{i}",
            client_host="/h",
        )
        assert r.error == E.MEMBER_ID_REQUIRED
        ids.append(r.member_id)
    tasks = [
        asyncio.ensure_future(
            gc.join_group(
                group,
                member_id=m,
                group_instance_id=None,
                protocol_type="consumer",
                protocols=[("range", b"")],
                session_timeout_ms=10000,
                rebalance_timeout_ms=10000,
                client_id="c",
                client_host="/h",
            )
        )
        for m in ids
    ]
    results = await asyncio.gather(*tasks)
    gen = results[0].generation_id
    leader = results[0].leader
    syncs = [
        asyncio.ensure_future(
            gc.sync_group(
                group,
                member_id=m,
                generation_id=gen,
                assignments={x: x.encode() for x in ids} if m == leader else {},
            )
        )
        for m in ids
    ]
    for s in await asyncio.gather(*syncs):
        assert s.error == E.NONE
    return ids, gen


def test_java_hash_and_partition_for() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("abc") == 96354
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    # the well-known string whose Java hashCode is Integer.MIN_VALUE: Utils.abs maps it to 0
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("abc", 50) == 96354 % 50
    assert 0 <= partition_for("\uffff" * 7, 50) < 50


def test_record_round_trips() -> None:
    v = OffsetCommitValue(42, "meta", 1000, leader_epoch=3)
    assert decode_offset_commit_value(encode_offset_commit_value(v)) == v
    v1 = OffsetCommitValue(42, "", 1000, expire_timestamp=5000)
    assert decode_offset_commit_value(encode_offset_commit_value(v1)) == v1
    gm = GroupMetadataValue(
        "consumer",
        3,
        "range",
        "m1",
        77,
        (MemberMetadataValue("m1", "cid", "/h", 10000, 20000, b"sub", b"asg", "inst"),),
    )
    for version in (3, 4):
        assert decode_group_metadata_value(encode_group_metadata_value(gm, version)) == gm
    k = decode_key(encode_offset_commit_key("g", "t", 7))
    assert (k.group, k.topic, k.partition) == ("g", "t", 7)  # type: ignore[union-attr]
    # Kafka's exact bytes for an OffsetCommitKey v1: version, group, topic, partition
    assert encode_offset_commit_key("g", "t", 1) == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x01"
    assert encode_group_metadata_key("g") == b"\x00\x02\x00\x01g"


def test_simple_commit_fetch_and_ack_after_append() -> None:
    async def go() -> None:
        gc, storage, _clock = make()
        await gc.start()
        errs = await gc.commit_offsets(
            "simple",
            member_id="",
            generation_id=-1,
            offsets={("t", 0): (10, 2, "hello"), ("t", 1): (20, -1, None)},
        )
        assert errs == {("t", 0): E.NONE, ("t", 1): E.NONE}
        err, got = gc.fetch_offsets("simple", [("t", [0, 1, 2])])
        assert err == E.NONE
        assert got["t"][0] is not None and got["t"][0].offset == 10 and got["t"][0].leader_epoch == 2
        assert got["t"][0].metadata == "hello" and got["t"][2] is None
        assert storage.partitions[gc.partition_for("simple")]
        # a failed append is not acknowledged and not visible
        storage.fail_next = 1
        errs = await gc.commit_offsets(
            "simple", member_id="", generation_id=-1, offsets={("t", 0): (99, -1, "")}
        )
        assert errs == {("t", 0): E.COORDINATOR_NOT_AVAILABLE}
        assert gc.fetch_offsets("simple", [("t", [0])])[1]["t"][0].offset == 10  # type: ignore[union-attr]
        # unknown group with a generation: rejected
        errs = await gc.commit_offsets(
            "nope", member_id="m", generation_id=3, offsets={("t", 0): (1, -1, "")}
        )
        assert errs == {("t", 0): E.GROUP_ID_NOT_FOUND}
        errs = await gc.commit_offsets(
            "nope", member_id="m", generation_id=3, offsets={("t", 0): (1, -1, "")}, api_version=8
        )
        assert errs == {("t", 0): E.ILLEGAL_GENERATION}
        errs = await gc.commit_offsets(
            "simple", member_id="", generation_id=-1, offsets={("t", 0): (1, -1, "x" * 5000)}
        )
        assert errs == {("t", 0): E.OFFSET_METADATA_TOO_LARGE}

    run(go())


def test_group_commit_and_replay_reproduces_state() -> None:
    async def go() -> None:
        gc, storage, clock = make()
        await gc.start()
        ids, gen = await join_stable(gc, "grp", 2)
        errs = await gc.commit_offsets(
            "grp",
            member_id=ids[0],
            generation_id=gen,
            offsets={("t", 0): (5, 1, "m0"), ("t", 1): (6, 1, "m1")},
        )
        assert set(errs.values()) == {E.NONE}
        bad = await gc.commit_offsets(
            "grp", member_id=ids[0], generation_id=gen + 1, offsets={("t", 0): (7, 1, "")}
        )
        assert bad == {("t", 0): E.ILLEGAL_GENERATION}
        bad = await gc.commit_offsets("grp", member_id="", generation_id=-1, offsets={("t", 0): (7, 1, "")})
        assert bad == {("t", 0): E.UNKNOWN_MEMBER_ID}
        await gc.stop()

        # a new coordinator over the same records (a broker restart)
        gc2, _s, _c = make(storage, clock)
        await gc2.start()
        err, got = gc2.fetch_offsets("grp", None)
        assert err == E.NONE
        assert {p: om.offset for p, om in got["t"].items() if om} == {0: 5, 1: 6}
        assert got["t"][0].metadata == "m0" and got["t"][0].leader_epoch == 1  # type: ignore[union-attr]
        g = gc2.groups["grp"]
        assert g.state == GroupState.STABLE and g.generation_id == gen  # type: ignore[union-attr]
        # members are restored: their heartbeats and commits keep working across the restart
        assert await gc2.heartbeat("grp", member_id=ids[1], generation_id=gen) == E.NONE
        # compaction keeps the same state
        gc3, _s, _c = make(MemoryOffsetsStorage(), clock)
        for p in range(gc3.config.num_partitions):
            gc3.storage.partitions[p] = storage.compacted(p)  # type: ignore[attr-defined]
        await gc3.start()
        assert gc3.fetch_offsets("grp", None)[1] == got

    run(go())


def test_loading_answers_coordinator_load_in_progress() -> None:
    async def go() -> None:
        gc, _s, _c = make()
        r = await gc.join_group(
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
        assert r.error == E.COORDINATOR_LOAD_IN_PROGRESS
        assert gc.fetch_offsets("g", None)[0] == E.COORDINATOR_LOAD_IN_PROGRESS
        await gc.start()
        assert gc.fetch_offsets("g", None)[0] == E.NONE

    run(go())


def test_join_validation_errors() -> None:
    async def go() -> None:
        gc, _s, _c = make()
        await gc.start()
        kw = dict(
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[("range", b"")],
            rebalance_timeout_ms=10000,
            client_id="c",
            client_host="/h",
        )
        assert (
            await gc.join_group("", member_id="", session_timeout_ms=10000, **kw)
        ).error == E.INVALID_GROUP_ID  # type: ignore[arg-type]
        assert (
            await gc.join_group("g", member_id="", session_timeout_ms=10, **kw)
        ).error == E.INVALID_SESSION_TIMEOUT  # type: ignore[arg-type]
        assert (
            await gc.join_group("g", member_id="x", session_timeout_ms=10000, **kw)
        ).error == E.UNKNOWN_MEMBER_ID  # type: ignore[arg-type]
        assert await gc.heartbeat("none", member_id="x", generation_id=1) == E.UNKNOWN_MEMBER_ID

    run(go())


def test_retention_expires_offsets_of_empty_groups_only() -> None:
    async def go() -> None:
        gc, storage, clock = make(retention_ms=60_000)
        await gc.start()
        await gc.commit_offsets("simple", member_id="", generation_id=-1, offsets={("t", 0): (1, -1, "")})
        ids, gen = await join_stable(gc, "active", 1)
        await gc.commit_offsets(
            "active", member_id=ids[0], generation_id=gen, offsets={("t", 0): (2, -1, "")}
        )
        clock.advance(30_000)
        assert await gc.expire_offsets() == 0
        await gc.heartbeat("active", member_id=ids[0], generation_id=gen)
        clock.advance(30_001)
        assert await gc.heartbeat("active", member_id=ids[0], generation_id=gen) == E.NONE
        # the simple group's offset is older than retention; the active group's (no subscription
        # metadata parsed -> unknown topics) is kept while the group is Stable
        assert await gc.expire_offsets() == 1
        assert "simple" not in gc.groups and gc.fetch_offsets("simple", None)[1] == {}
        assert gc.fetch_offsets("active", None)[1]["t"][0] is not None
        # once the group is Empty, retention counts from when it became Empty
        _top, errs = await gc.leave_group("active", [(ids[0], None)])
        assert errs == [E.NONE] and gc.groups["active"].state == GroupState.EMPTY  # type: ignore[union-attr]
        clock.advance(59_000)
        assert await gc.expire_offsets() == 0
        clock.advance(1_001)
        assert await gc.expire_offsets() == 1
        assert "active" not in gc.groups
        # the deletion is durable: a restart does not bring them back
        gc2, _s, _c = make(storage, clock)
        await gc2.start()
        assert "simple" not in gc2.groups and "active" not in gc2.groups

    run(go())


def test_timer_tick_evicts_expired_members() -> None:
    async def go() -> None:
        gc, _s, clock = make()
        await gc.start()
        ids, gen = await join_stable(gc, "g", 2)
        clock.advance(9000)
        await gc.heartbeat("g", member_id=ids[0], generation_id=gen)
        clock.advance(2000)
        assert gc.next_deadline() is not None and gc.next_deadline() <= clock.monotonic_ms()  # type: ignore[operator]
        await gc.tick()
        assert ids[1] not in gc.groups["g"].members
        assert await gc.heartbeat("g", member_id=ids[0], generation_id=gen) == E.REBALANCE_IN_PROGRESS

    run(go())


def test_admin_list_describe_delete_offset_delete() -> None:
    async def go() -> None:
        gc, storage, clock = make()
        await gc.start()
        ids, _gen = await join_stable(gc, "busy", 1)
        await gc.commit_offsets(
            "idle", member_id="", generation_id=-1, offsets={("t", 0): (1, -1, ""), ("u", 0): (2, -1, "")}
        )
        listed = {g["group_id"]: g for g in gc.list_groups()}
        assert listed["busy"]["group_state"] == "Stable" and listed["idle"]["group_state"] == "Empty"
        assert [g["group_id"] for g in gc.list_groups(states=["stable"])] == ["busy"]
        assert [g["group_id"] for g in gc.list_groups(types=["consumer"])] == []
        d = gc.describe_group("busy")
        assert d["group_state"] == "Stable" and d["protocol_data"] == "range"
        assert d["members"][0]["member_assignment"] == ids[0].encode()
        assert gc.describe_group("missing")["group_state"] == "Dead"
        assert await gc.delete_groups(["busy", "missing", "idle"]) == {
            "busy": E.NON_EMPTY_GROUP,
            "missing": E.GROUP_ID_NOT_FOUND,
            "idle": E.NONE,
        }
        assert "idle" not in gc.groups and gc.fetch_offsets("idle", None)[1] == {}
        await gc.commit_offsets(
            "idle2", member_id="", generation_id=-1, offsets={("t", 0): (1, -1, ""), ("u", 0): (2, -1, "")}
        )
        err, res = await gc.delete_offsets("idle2", [("t", 0)])
        assert err == E.NONE and res == {("t", 0): E.NONE}
        assert list(gc.fetch_offsets("idle2", None)[1]) == ["u"]
        assert (await gc.delete_offsets("nope", [("t", 0)]))[0] == E.GROUP_ID_NOT_FOUND
        assert (await gc.delete_offsets("busy", [("t", 0)]))[
            0
        ] == E.NON_EMPTY_GROUP  # no parsable subscription
        gc2, _s, _c = make(storage, clock)
        await gc2.start()
        assert "idle" not in gc2.groups and list(gc2.fetch_offsets("idle2", None)[1]) == ["u"]

    run(go())


def test_describe_groups_v6_reports_missing_and_non_classic_groups() -> None:
    """Kafka 4 (KIP-1043): from v6 a group that is not there, or not a classic group, is
    GROUP_ID_NOT_FOUND with a message; older versions still see ``Dead`` and no error."""

    async def go() -> None:
        gc = GroupCoordinator(CoordinatorConfig(), ManualClock(), run_timer=False)
        await gc.start()
        old = gc.describe_group("missing", 5)
        assert (old["error_code"], old["group_state"], old["members"]) == (E.NONE, "Dead", [])
        new = gc.describe_group("missing", 6)
        assert (new["error_code"], new["error_message"]) == (E.GROUP_ID_NOT_FOUND, "Group missing not found.")
        # the empty id is described like any other (Kafka keeps DescribeGroups("") working)
        assert gc.describe_group("", 5)["group_state"] == "Dead"
        assert gc.describe_group("", 6)["error_code"] == E.GROUP_ID_NOT_FOUND
        # a KIP-848 group: DescribeGroups is for classic groups only
        hb = await gc.consumer_group_heartbeat(
            "modern",
            member_id="",
            member_epoch=0,
            rebalance_timeout_ms=30000,
            subscribed_topic_names=["t"],
            resolve=lambda name: None,
        )
        assert hb.error == E.NONE
        assert gc.describe_group("modern", 5)["group_state"] == "Dead"
        d = gc.describe_group("modern", 6)
        assert d["error_code"] == E.GROUP_ID_NOT_FOUND
        assert d["error_message"] == "Group modern is not a classic group."

    asyncio.run(go())


def test_partition_ownership_election_and_resignation() -> None:
    """In a cluster: only the __consumer_offsets partitions led here are loaded and served
    (others: NOT_COORDINATOR); one elected here later is loaded from its log; one resigned is
    forgotten, and a member waiting in a join is answered NOT_COORDINATOR."""

    async def main() -> None:
        storage = MemoryOffsetsStorage()
        gc, _, clock = make(storage)
        await gc.start()
        offsets = {("t", 0): (5, -1, None)}
        assert await gc.commit_offsets("g", member_id="", generation_id=-1, offsets=offsets) == {("t", 0): 0}
        part = gc.partition_for("g")

        gc2, _, _ = make(storage, clock)
        gc2.owns = lambda p: p != part  # "g"'s partition is led by another broker
        await gc2.start()
        assert "g" not in gc2.groups and "g" not in gc2.offsets
        assert gc2.fetch_offsets("g", None)[0] == E.NOT_COORDINATOR
        assert await gc2.commit_offsets("g", member_id="", generation_id=-1, offsets=offsets) == {
            ("t", 0): E.NOT_COORDINATOR
        }
        gc2.on_election(part)
        err, got = gc2.fetch_offsets("g", None)
        assert err == 0 and got["t"][0] is not None and got["t"][0].offset == 5
        # a member waiting for the others in a join is told to find the new coordinator
        def join(member: str) -> asyncio.Future[Any]:
            return asyncio.ensure_future(gc2.join_group(
                "g", member_id=member, group_instance_id=None, protocol_type="consumer",
                protocols=[("range", b"")], session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                client_id="c", client_host="/h", api_version=3,
            ))

        first = await join("")
        assert first.error == 0
        second = join("")  # a rebalance: it waits for the first member to join again
        for _ in range(5):
            await asyncio.sleep(0)
        assert not second.done()
        gc2.on_resignation(part)
        assert "g" not in gc2.groups and "g" not in gc2.offsets
        assert gc2.fetch_offsets("g", None)[0] == E.NOT_COORDINATOR
        assert (await asyncio.wait_for(second, 5)).error == E.NOT_COORDINATOR
        await gc.stop()
        await gc2.stop()

    asyncio.run(main())


class TwoPhaseTxnStorage(MemoryOffsetsStorage):
    """Transactional offsets appended at once and durable when ``durable`` is set (the broker's
    InternalTopicStorage: the append under the partition lock, the wait for the ISR outside)."""

    def write_txn(self, partition: int, records: list[tuple[bytes, bytes | None]],
                  producer_id: int, producer_epoch: int) -> Awaitable[None]:
        self.entries.setdefault(partition, []).extend(
            StoredEntry(k, v, producer_id, True) for k, v in records
        )
        return self._completion()


def test_a_txn_offset_commit_completing_after_a_resignation_leaves_no_group_behind() -> None:
    """A TxnOffsetCommit for a group this broker has no state for waits for the ISR; the
    partition is resigned meanwhile. Its completion must not create the group here again (an
    empty leftover group, listed by ListGroups, on a broker that does not coordinate it)."""

    async def main() -> None:
        storage = TwoPhaseTxnStorage()
        gc, _, _ = make(storage)
        gc.owns = lambda p: True
        await gc.start()
        storage.durable = asyncio.Event()
        commit = asyncio.ensure_future(gc.txn_commit_offsets(
            "g", producer_id=7, producer_epoch=0, generation_id=-1, member_id="",
            group_instance_id=None, offsets={("t", 0): (5, -1, None)},
        ))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not commit.done()
        gc.on_resignation(gc.partition_for("g"))
        storage.durable.set()
        await asyncio.wait_for(commit, 5)
        assert "g" not in gc.groups and "g" not in gc.offsets
        await gc.stop()

    asyncio.run(main())
