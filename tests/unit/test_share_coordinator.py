"""The share coordinator without I/O: membership (ShareGroupHeartbeat rules), share-session
epochs, acknowledgements durable before they are answered, a failed append changing nothing,
lock and session timeouts on a manual clock, and replay of ShareSnapshot/ShareUpdate records
rebuilding exactly the state that was answered."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from strom.clock import ManualClock
from strom.coordinator.share_coordinator import ShareConfig, ShareCoordinator
from strom.coordinator.share_partition import AckType, RecordState
from strom.coordinator.share_records import SHARE_SNAPSHOT, SHARE_UPDATE, decode_key
from strom.coordinator.storage import MemoryOffsetsStorage
from strom.protocol.errors import ErrorCode

TID = uuid.UUID(int=7)


class Logs:
    def __init__(self) -> None:
        self.hw = 100
        self.start = 0

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return "t" if topic_id == TID else None

    def partitions(self, topic_id: uuid.UUID) -> int | None:
        return 2 if topic_id == TID else None

    def log_start_offset(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.start

    def initial_offset(self, topic_id: uuid.UUID, partition: int, strategy: str) -> int:
        return self.start if strategy == "earliest" else self.hw


def resolve(name: str) -> tuple[uuid.UUID, int] | None:
    return (TID, 2) if name == "t" else None


def make(
    storage: MemoryOffsetsStorage | None = None, clock: ManualClock | None = None, **cfg: str
) -> ShareCoordinator:
    group_cfg = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "1000", **cfg}
    return ShareCoordinator(
        storage if storage is not None else MemoryOffsetsStorage(),
        Logs(),
        config=ShareConfig(num_partitions=3, snapshot_every=4),
        clock=clock or ManualClock(),
        group_config=lambda g: group_cfg,
        run_timer=False,
    )


def reader(last: int):  # type: ignore[no-untyped-def]
    def read(offset: int) -> tuple[bytes, int] | None:
        return (b"x", last) if offset <= last else None

    return read


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


async def join(c: ShareCoordinator, member: str = "m1", epoch: int = 0, topics: list[str] | None = None):  # type: ignore[no-untyped-def]
    return await c.heartbeat(
        "g",
        member_id=member,
        member_epoch=epoch,
        rack_id=None,
        subscribed_topic_names=topics if topics is not None else (["t"] if epoch == 0 else None),
        client_id="c",
        client_host="/h",
        resolve=resolve,
    )


def test_heartbeat_rules() -> None:
    async def go() -> None:
        c = make()
        r = await c.heartbeat(
            "",
            member_id="m",
            member_epoch=0,
            rack_id=None,
            subscribed_topic_names=["t"],
            client_id="",
            client_host="",
            resolve=resolve,
        )
        assert r.error == ErrorCode.INVALID_REQUEST
        r = await c.heartbeat(
            "g",
            member_id="",
            member_epoch=0,
            rack_id=None,
            subscribed_topic_names=["t"],
            client_id="",
            client_host="",
            resolve=resolve,
        )
        assert r.error == ErrorCode.INVALID_REQUEST
        assert (await join(c, epoch=0, topics=[])).error == ErrorCode.INVALID_REQUEST
        assert (await join(c, epoch=3)).error == ErrorCode.UNKNOWN_MEMBER_ID
        r1 = await join(c, "m1")
        assert r1.error == ErrorCode.NONE and r1.member_epoch == 1
        assert r1.assignment == [(TID, [0, 1])]
        r2 = await join(c, "m2")
        assert r2.member_epoch == 2 and r2.assignment == [(TID, [0, 1])]  # every member, every partition
        assert (await join(c, "m1", epoch=7)).error == ErrorCode.FENCED_MEMBER_EPOCH
        assert (await join(c, "m1", epoch=1)).error == ErrorCode.NONE
        assert c.describe("g")["group_state"] == "Stable"
        assert (await join(c, "m1", epoch=-1)).member_epoch == -1
        assert (await join(c, "m2", epoch=-1)).member_epoch == -1
        assert c.describe("g")["group_state"] == "Empty"
        assert c.describe("nope")["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        c.other_group_exists = lambda g: g == "classic"
        r = await c.heartbeat(
            "classic",
            member_id="m",
            member_epoch=0,
            rack_id=None,
            subscribed_topic_names=["t"],
            client_id="",
            client_host="",
            resolve=resolve,
        )
        assert r.error == ErrorCode.GROUP_ID_NOT_FOUND

    run(go())


def test_share_session_epochs() -> None:
    c = make()
    assert c.open_session("g", "m", 1, [], [])[0] == ErrorCode.SHARE_SESSION_NOT_FOUND
    err, s = c.open_session("g", "m", 0, [(TID, 0)], [])
    assert err == ErrorCode.NONE and s is not None and s.partitions == {(TID, 0)}
    assert c.open_session("g", "m", 2, [], [])[0] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert c.open_session("g", "m", 1, [(TID, 1)], [(TID, 0)])[1].partitions == {(TID, 1)}  # type: ignore[union-attr]
    assert c.check_ack_session("g", "m", 2) == ErrorCode.NONE
    assert c.check_ack_session("g", "m", 0) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert c.check_ack_session("g", "m", -1) == ErrorCode.NONE
    assert ("g", "m") not in c.sessions


def test_acks_are_durable_and_replayed() -> None:
    async def go() -> None:
        storage = MemoryOffsetsStorage()
        clock = ManualClock()
        c = make(storage, clock)
        await join(c)
        err, data, ranges = await c.acquire("g", "m1", TID, 0, reader(9), 100)
        assert err == ErrorCode.NONE and data == b"x"
        assert [(r.first_offset, r.last_offset, r.delivery_count) for r in ranges] == [(0, 9, 1)]
        # another member gets nothing while the locks hold
        assert (await c.acquire("g", "m2", TID, 0, reader(9), 100))[2] == []
        assert await c.acknowledge("g", "m1", TID, 0, [(0, 3, [AckType.ACCEPT])]) == ErrorCode.NONE
        assert await c.acknowledge("g", "m1", TID, 0, [(4, 4, [AckType.REJECT])]) == ErrorCode.NONE
        assert await c.acknowledge("g", "m1", TID, 0, [(5, 6, [AckType.RELEASE])]) == ErrorCode.NONE
        assert (
            await c.acknowledge("g", "m2", TID, 0, [(7, 7, [AckType.ACCEPT])])
            == ErrorCode.INVALID_RECORD_STATE
        )
        # a failed append answers an error and changes nothing
        storage.fail_next = 1
        assert (
            await c.acknowledge("g", "m1", TID, 0, [(7, 7, [AckType.ACCEPT])])
            == ErrorCode.COORDINATOR_NOT_AVAILABLE
        )
        assert c.partitions[("g", TID, 0)].state_of(7) == RecordState.ACQUIRED
        kinds = [decode_key(k).kind for p in storage.partitions.values() for k, _v in p]
        assert SHARE_SNAPSHOT in kinds and SHARE_UPDATE in kinds
        # lock timeout: 7..9 come back with delivery count 2
        clock.advance(1000)
        await c.expire()
        sp = c.partitions[("g", TID, 0)]
        assert sp.start_offset == 5
        again = await c.acquire("g", "m2", TID, 0, reader(9), 100)
        assert [(r.first_offset, r.last_offset, r.delivery_count) for r in again[2]] == [(5, 9, 2)]
        assert await c.acknowledge("g", "m2", TID, 0, [(5, 9, [AckType.ACCEPT])]) == ErrorCode.NONE
        # replay from the records rebuilds the answered state
        c2 = make(storage, ManualClock())
        await c2.start()
        sp2 = c2.partitions[("g", TID, 0)]
        assert (sp2.start_offset, sp2.state_batches()) == (10, [])
        assert "g" in c2.groups and c2.groups["g"].state == "Empty"

    run(go())


def test_member_session_timeout_releases_its_records() -> None:
    async def go() -> None:
        clock = ManualClock()
        c = make(
            clock=clock, **{"share.session.timeout.ms": "45000", "share.record.lock.duration.ms": "60000"}
        )
        await join(c)
        c.open_session("g", "m1", 0, [(TID, 0)], [])
        assert (await c.acquire("g", "m1", TID, 0, reader(4), 100))[2]
        clock.advance(45000)
        await c.expire()
        assert "m1" not in c.groups["g"].members
        assert ("g", "m1") not in c.sessions
        assert c.partitions[("g", TID, 0)].state_of(0) == RecordState.AVAILABLE

    run(go())


def test_alter_and_delete_offsets_need_an_empty_group() -> None:
    async def go() -> None:
        storage = MemoryOffsetsStorage()
        c = make(storage)
        await join(c)
        err, _msg, _r = await c.alter_offsets("g", {(TID, 0): 50})
        assert err == ErrorCode.NON_EMPTY_GROUP
        await join(c, epoch=-1)
        err, _msg, res = await c.alter_offsets("g", {(TID, 0): 50})
        assert err == ErrorCode.NONE and res == {(TID, 0): ErrorCode.NONE}
        assert c.partitions[("g", TID, 0)].start_offset == 50
        err, _msg, dres = await c.delete_offsets("g", [TID])
        assert err == ErrorCode.NONE and dres == {TID: ErrorCode.NONE}
        assert not c.start_offsets("g")
        assert await c.delete_group("g") == ErrorCode.NONE
        c2 = make(storage)
        await c2.start()
        assert not c2.partitions and "g" not in c2.groups

    run(go())


@pytest.mark.parametrize("every", [1, 2, 3, 500])
def test_replay_with_updates_equals_live_state(every: int) -> None:
    async def go() -> None:
        storage = MemoryOffsetsStorage()
        c = make(storage)
        c.config.snapshot_every = every
        await join(c)
        for i in range(6):
            _e, _d, ranges = await c.acquire("g", "m1", TID, 1, reader(3 * i + 2), 2)
            for r in ranges:
                t = [AckType.ACCEPT, AckType.RELEASE, AckType.REJECT][(r.first_offset + i) % 3]
                await c.acknowledge("g", "m1", TID, 1, [(r.first_offset, r.last_offset, [t])])
        live = c.partitions[("g", TID, 1)]
        c2 = make(storage)
        await c2.start()
        back = c2.partitions[("g", TID, 1)]
        assert (back.start_offset, back.state_batches()) == (live.start_offset, live.state_batches())
        # log compaction keeps the newest snapshot and the newest update: enough (updates are
        # cumulative since their snapshot)
        compacted = MemoryOffsetsStorage()
        compacted.partitions = {p: storage.compacted(p) for p in storage.partitions}
        c3 = make(compacted)
        await c3.start()
        back = c3.partitions[("g", TID, 1)]
        assert (back.start_offset, back.state_batches()) == (live.start_offset, live.state_batches())

    run(go())


def test_closed_connection_closes_its_share_sessions() -> None:
    async def go() -> None:
        c = make(**{"share.record.lock.duration.ms": "60000"})
        await join(c)
        c.open_session("g", "m1", 0, [(TID, 0)], [], "conn-1")
        c.open_session("g", "m2", 0, [(TID, 0)], [], "conn-2")
        assert (await c.acquire("g", "m1", TID, 0, reader(4), 100))[2]
        c.connection_closed("conn-1")
        await asyncio.gather(*c._background)
        assert ("g", "m1") not in c.sessions and ("g", "m2") in c.sessions
        assert c.partitions[("g", TID, 0)].state_of(0) == RecordState.AVAILABLE

    run(go())


def test_aborted_records_are_archived_not_delivered() -> None:
    async def go() -> None:
        c = make()
        await join(c)

        def read(offset: int) -> tuple[bytes, int, list[tuple[int, int]]] | None:
            return (b"x", 9, [(2, 4), (9, 9)]) if offset <= 9 else None

        _e, _d, ranges = await c.acquire("g", "m1", TID, 0, read, 100)
        assert [(r.first_offset, r.last_offset) for r in ranges] == [(0, 1), (5, 8)]
        sp = c.partitions[("g", TID, 0)]
        assert all(sp.in_flight[o].state == RecordState.ARCHIVED for o in (2, 3, 4, 9))
        await c.acknowledge("g", "m1", TID, 0, [(0, 1, [AckType.ACCEPT]), (5, 8, [AckType.ACCEPT])])
        assert sp.start_offset == 10 or c.partitions[("g", TID, 0)].start_offset == 10

    run(go())


def test_deleted_topic_state_goes() -> None:
    async def go() -> None:
        storage = MemoryOffsetsStorage()
        c = make(storage)
        await join(c)
        assert c.start_offsets("g")
        c.topic_deleted(TID)
        await asyncio.gather(*c._background)
        assert not c.start_offsets("g")
        c2 = make(storage)
        await c2.start()
        assert not c2.partitions

    run(go())
