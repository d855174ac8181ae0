"""Transactional offset commits in the group coordinator: pending until the marker, replayable."""

from __future__ import annotations

import asyncio
import uuid

from strom.clock import ManualClock
from strom.coordinator.group_coordinator import GroupCoordinator
from strom.coordinator.storage import MemoryOffsetsStorage
from strom.protocol.errors import ErrorCode as E


def _coord(storage: MemoryOffsetsStorage) -> GroupCoordinator:
    return GroupCoordinator(None, ManualClock(), storage, run_timer=False)


def test_txn_offsets_pending_until_commit_and_dropped_on_abort() -> None:
    async def go() -> None:
        storage = MemoryOffsetsStorage()
        gc = _coord(storage)
        await gc.start()
        part = gc.partition_for("g")
        res = await gc.txn_commit_offsets(
            "g",
            producer_id=5,
            producer_epoch=0,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            offsets={("t", 0): (42, -1, "m")},
        )
        assert res == {("t", 0): 0}
        assert gc.fetch_offsets("g", None)[1] == {}  # not visible before the marker
        assert gc.has_pending_txn("g", ("t", 0))
        storage.write_marker(part, 5, commit=True)
        await gc.complete_txn(part, 5, commit=True)
        assert gc.fetch_offsets("g", None)[1]["t"][0].offset == 42  # type: ignore[union-attr]
        await gc.txn_commit_offsets(
            "g",
            producer_id=6,
            producer_epoch=0,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            offsets={("t", 0): (99, -1, None)},
        )
        storage.write_marker(part, 6, commit=False)
        await gc.complete_txn(part, 6, commit=False)
        assert gc.fetch_offsets("g", None)[1]["t"][0].offset == 42  # type: ignore[union-attr]
        await gc.txn_commit_offsets(
            "g",
            producer_id=7,
            producer_epoch=0,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            offsets={("t", 1): (7, -1, None)},
        )
        await gc.stop()
        # replay: committed stays, aborted stays dropped, the unfinished one is pending again
        gc2 = _coord(storage)
        await gc2.start()
        offs = gc2.fetch_offsets("g", None)[1]
        assert offs["t"][0].offset == 42 and 1 not in offs["t"]  # type: ignore[union-attr]
        assert gc2.has_pending_txn("g", ("t", 1))
        storage.write_marker(part, 7, commit=True)
        await gc2.complete_txn(part, 7, commit=True)
        assert gc2.fetch_offsets("g", None)[1]["t"][1].offset == 7  # type: ignore[union-attr]
        await gc2.stop()

    asyncio.run(go())


def test_txn_offset_commit_with_a_stale_member_epoch_is_illegal_generation() -> None:
    # Kafka's OffsetMetadataManager.validateTransactionalOffsetCommit turns STALE_MEMBER_EPOCH
    # into ILLEGAL_GENERATION: the Java producer treats that as an abortable
    # CommitFailedException, while STALE_MEMBER_EPOCH would be a fatal "unexpected error".
    topics = {"t": (uuid.UUID(int=3), 2)}

    async def go() -> None:
        gc = _coord(MemoryOffsetsStorage())
        await gc.start()
        r = await gc.consumer_group_heartbeat(
            "g", member_id="m", member_epoch=0, subscribed_topic_names=["t"], resolve=topics.get
        )
        assert r.error == 0

        async def commit(gen: int, member: str, group: str = "g") -> int:
            res = await gc.txn_commit_offsets(
                group,
                producer_id=5,
                producer_epoch=0,
                generation_id=gen,
                member_id=member,
                group_instance_id=None,
                offsets={("t", 0): (1, -1, None)},
            )
            return res[("t", 0)]

        assert await commit(r.member_epoch, "m") == E.NONE
        assert await commit(r.member_epoch + 5, "m") == E.ILLEGAL_GENERATION
        assert await commit(r.member_epoch, "nobody") == E.UNKNOWN_MEMBER_ID
        assert await commit(3, "m", group="missing") == E.ILLEGAL_GENERATION
        await gc.stop()

    asyncio.run(go())
