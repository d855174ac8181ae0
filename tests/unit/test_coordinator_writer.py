"""The coordinators' partition writer: appends at once, durable off the event loop, answered at
the high watermark; concurrent commits share a flush; failures answer Kafka's errors."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest

from strom.clock import ManualClock
from strom.coordinator.group_coordinator import CoordinatorConfig, GroupCoordinator
from strom.coordinator.partition_writer import CoordinatorWriteError, coordinator_error
from strom.coordinator.storage import MemoryOffsetsStorage
from strom.log.errors import KafkaStorageError
from strom.protocol.errors import ErrorCode as E
from strom.server import coordinator_writer
from strom.testing.inprocess import lead_with_a_made_up_follower, replicas_of, started_broker
from strom.testing.scheduler import ManualScheduler


async def _commit(gc: GroupCoordinator, group: str, offset: int) -> dict[Any, int]:
    offsets = {("t", 0): (offset, -1, None)}
    return await gc.commit_offsets(group, member_id="", generation_id=-1, offsets=offsets)


def test_error_mapping_is_kafkas() -> None:
    def code(c: int) -> int:
        return coordinator_error(CoordinatorWriteError(c))

    assert code(E.KAFKA_STORAGE_ERROR) == E.NOT_COORDINATOR
    assert code(E.NOT_LEADER_OR_FOLLOWER) == E.NOT_COORDINATOR
    assert code(E.UNKNOWN_TOPIC_OR_PARTITION) == E.COORDINATOR_NOT_AVAILABLE
    assert code(E.REQUEST_TIMED_OUT) == E.COORDINATOR_NOT_AVAILABLE
    assert code(E.MESSAGE_TOO_LARGE) == E.UNKNOWN_SERVER_ERROR
    assert code(E.RECORD_LIST_TOO_LARGE) == E.UNKNOWN_SERVER_ERROR
    assert code(E.COORDINATOR_LOAD_IN_PROGRESS) == E.COORDINATOR_LOAD_IN_PROGRESS
    assert coordinator_error(OSError("anything else")) == E.COORDINATOR_NOT_AVAILABLE


def test_commits_are_answered_at_the_hw_which_follows_the_flush_thread(tmp_path: Path) -> None:
    async def go() -> None:
        async with started_broker(tmp_path / "data") as broker:
            gc = broker.group_coordinator
            plog = broker.logs[("__consumer_offsets", 0)]
            flush_threads: list[str] = []
            real_sync = coordinator_writer.sync_flush_plan

            def sync(plan: Any) -> None:
                flush_threads.append(threading.current_thread().name)
                assert plog.high_watermark < plan.upto  # not visible before it is durable
                real_sync(plan)

            coordinator_writer.sync_flush_plan = sync  # type: ignore[assignment]
            try:
                before = broker.coordinator_writer.rounds
                results = await asyncio.gather(*(_commit(gc, f"g{i}", i) for i in range(50)))
            finally:
                coordinator_writer.sync_flush_plan = real_sync  # type: ignore[assignment]
            assert all(r == {("t", 0): E.NONE} for r in results)
            rounds = broker.coordinator_writer.rounds - before
            assert 1 <= rounds <= 2, rounds  # 50 concurrent commits, one or two fsyncs
            assert flush_threads and all(n.startswith("strom-coordinator-flush") for n in flush_threads)
            assert plog.high_watermark == plog.log_end_offset == plog.recovery_point
            assert gc.fetch_offsets("g7", [("t", [0])])[1]["t"][0].offset == 7  # type: ignore[union-attr]

    asyncio.run(go())


def test_a_replicated_offsets_partition_answers_commits_once_the_isr_holds_them(tmp_path: Path) -> None:
    """With a follower in the ISR, a commit durable here is answered only when the follower's
    fetch moved the HW past it (it used to be answered at the local flush: a kill -9 of the
    coordinator then lost an acknowledged commit); a commit waiting when another broker takes
    the partition over is answered NOT_COORDINATOR."""

    async def go() -> None:
        async with started_broker(tmp_path / "data") as broker:
            rm = broker.replica_manager
            if not rm.partitions:
                pytest.skip("the registry path has no replication state")
            tp = ("__consumer_offsets", 0)
            me = broker.node_id
            other = lead_with_a_made_up_follower(broker, tp)
            p = rm.partitions[tp]
            plog = broker.logs[tp]
            rm.read_for_follower(other, *tp, plog.log_end_offset, 1 << 20,
                                 current_leader_epoch=p.leader_epoch)
            gc = broker.group_coordinator
            commit = asyncio.ensure_future(_commit(gc, "g", 5))
            await asyncio.sleep(0.3)
            assert plog.recovery_point == plog.log_end_offset  # durable here
            assert not commit.done() and plog.high_watermark < plog.log_end_offset
            rm.read_for_follower(other, *tp, plog.log_end_offset, 1 << 20,
                                 current_leader_epoch=p.leader_epoch)
            assert await asyncio.wait_for(commit, 5) == {("t", 0): E.NONE}
            assert plog.high_watermark == plog.log_end_offset
            # the follower takes over while a commit waits for it
            commit = asyncio.ensure_future(_commit(gc, "g", 6))
            await asyncio.sleep(0.3)
            assert not commit.done()
            rm.apply_partition(*tp, replicas_of(me, other, other, p.leader_epoch + 1))
            assert await asyncio.wait_for(commit, 5) == {("t", 0): E.NOT_COORDINATOR}

    asyncio.run(go())


@pytest.mark.parametrize("how", ["moved away", "dir offline"])
def test_a_commit_waiting_for_the_isr_is_answered_when_its_partition_leaves_this_broker(
    tmp_path: Path, how: str
) -> None:
    """A commit durable here waits for a follower; then the partition leaves this broker without
    it becoming a follower first: a reassignment moves it to other brokers (one metadata record
    takes this broker out of the replicas and moves the leadership), or its log dir fails. The
    commit is answered NOT_COORDINATOR; it used to wait forever (nothing appends to the
    partition any more), holding up the coordinator behind it."""

    async def go() -> None:
        async with started_broker(tmp_path / "data") as broker:
            rm = broker.replica_manager
            if not rm.partitions:
                pytest.skip("the registry path has no replication state")
            tp = ("__consumer_offsets", 0)
            lead_with_a_made_up_follower(broker, tp)
            plog = broker.logs[tp]
            commit = asyncio.ensure_future(_commit(broker.group_coordinator, "g", 5))
            await asyncio.sleep(0.3)
            assert plog.recovery_point == plog.log_end_offset  # durable here, waiting for the ISR
            assert not commit.done()
            if how == "moved away":
                rm.remove_replica(*tp)
            else:
                rm.metadata_log_dir = tmp_path / "elsewhere"  # (the metadata dir's failure halts)
                rm.mark_log_dir_offline(plog.directory.parent, "simulated I/O error")
            assert await asyncio.wait_for(commit, 5) == {("t", 0): E.NOT_COORDINATOR}

    asyncio.run(go())


def test_a_flush_round_finishing_after_a_resignation_does_not_bring_back_its_durable_offset(
    tmp_path: Path,
) -> None:
    """A flush round is on its worker thread when the partition is resigned (this broker becomes
    its follower). When the round finishes it must not record the partition as durable up to the
    old log end: as a follower the log may be truncated below it, and on leading again the HW
    would then never be raised past that stale mark (coordinator writes waiting forever)."""

    async def go() -> None:
        async with started_broker(tmp_path / "data") as broker:
            writer = broker.coordinator_writer
            tp = ("__consumer_offsets", 0)
            real_sync = coordinator_writer.sync_flush_plan
            entered, release = threading.Event(), threading.Event()

            def slow(plan: Any) -> None:
                entered.set()
                release.wait(10)
                real_sync(plan)

            coordinator_writer.sync_flush_plan = slow  # type: ignore[assignment]
            try:
                commit = asyncio.ensure_future(_commit(broker.group_coordinator, "g", 1))
                while not entered.is_set():
                    await asyncio.sleep(0.01)
                writer.resigned(tp)
                release.set()
                assert await asyncio.wait_for(commit, 5) == {("t", 0): E.NOT_COORDINATOR}
                for _ in range(100):
                    if not writer._in_flight:
                        break
                    await asyncio.sleep(0.01)
            finally:
                coordinator_writer.sync_flush_plan = real_sync  # type: ignore[assignment]
            assert not writer._in_flight
            assert tp not in writer._durable  # (was: the old log end, brought back by the round)

    asyncio.run(go())


def test_a_failed_flush_answers_not_coordinator_and_the_next_commit_works(tmp_path: Path) -> None:
    async def go() -> None:
        async with started_broker(tmp_path / "data") as broker:
            gc = broker.group_coordinator
            real_sync = coordinator_writer.sync_flush_plan

            def enospc(plan: Any) -> None:
                raise KafkaStorageError(f"flush failed: {os.strerror(errno.ENOSPC)}")

            coordinator_writer.sync_flush_plan = enospc  # type: ignore[assignment]
            try:
                assert await _commit(gc, "g", 1) == {("t", 0): E.NOT_COORDINATOR}
            finally:
                coordinator_writer.sync_flush_plan = real_sync  # type: ignore[assignment]
            plog = broker.logs[("__consumer_offsets", 0)]
            assert plog.high_watermark < plog.log_end_offset  # never acknowledged, not visible
            assert await _commit(gc, "g", 2) == {("t", 0): E.NONE}
            assert plog.high_watermark == plog.log_end_offset

    asyncio.run(go())


def test_offline_partition_answers_not_coordinator(tmp_path: Path) -> None:
    async def go() -> None:
        async with started_broker(tmp_path / "data") as broker:
            writer = broker.coordinator_writer
            tp = ("__consumer_offsets", 0)
            broker.replica_manager.offline_partitions[tp] = broker.logs.pop(tp).directory.parent
            with pytest.raises(CoordinatorWriteError) as e:
                writer.append(tp, [(b"k", b"v")])
            assert coordinator_error(e.value) == E.NOT_COORDINATOR
            assert await _commit(broker.group_coordinator, "g", 1) == {("t", 0): E.NOT_COORDINATOR}

    asyncio.run(go())


def test_transaction_markers_are_written_in_one_flush_round(tmp_path: Path) -> None:
    async def go() -> None:
        async with started_broker(tmp_path / "data") as broker:
            await broker.create_topic_async("d", 4)
            before = broker.coordinator_writer.rounds
            await broker.write_markers(5, 0, True, [("d", p) for p in range(4)])
            assert broker.coordinator_writer.rounds - before == 1
            for p in range(4):
                plog = broker.logs[("d", p)]
                assert plog.log_end_offset == 1 and plog.recovery_point == 1

    asyncio.run(go())


def test_group_coordinator_answers_only_once_durable_and_batches() -> None:
    """Concurrent steps of one partition are appended (and replayed) before any is durable:
    the lock is not held across the wait, so they share one flush."""

    async def go() -> None:
        storage = MemoryOffsetsStorage()
        storage.durable = asyncio.Event()
        gc = GroupCoordinator(CoordinatorConfig(num_partitions=1), ManualClock(), storage, run_timer=False)
        await gc.start()
        tasks = [asyncio.ensure_future(_commit(gc, f"g{i}", i)) for i in range(5)]
        for _ in range(10):
            await asyncio.sleep(0)
        assert len(storage.partitions[0]) == 5  # all appended
        assert not any(t.done() for t in tasks)  # none answered before the flush
        storage.durable.set()
        assert [await t for t in tasks] == [{("t", 0): E.NONE}] * 5

        storage.durable = asyncio.Event()
        storage.fail_flush = True
        task = asyncio.ensure_future(_commit(gc, "g0", 99))
        for _ in range(10):
            await asyncio.sleep(0)
        storage.durable.set()
        assert await task == {("t", 0): E.COORDINATOR_NOT_AVAILABLE}

    asyncio.run(go())


def test_a_commit_is_visible_to_offset_fetch_only_once_durable() -> None:
    """Kafka's coordinator shows a commit only once the log committed it: while the write waits
    for the HW, OffsetFetch answers the previous offset; a write that fails is never shown (a
    new coordinator would not have it: a reader must not have seen it either). Commits that
    become durable are shown in append order."""

    def fetched(gc: GroupCoordinator, group: str) -> int | None:
        err, topics = gc.fetch_offsets(group, [("t", [0])])
        assert err == E.NONE
        om = topics["t"][0]
        return None if om is None else om.offset

    async def go() -> None:
        storage = MemoryOffsetsStorage()
        gc = GroupCoordinator(CoordinatorConfig(num_partitions=1), ManualClock(), storage, run_timer=False)
        await gc.start()
        assert await _commit(gc, "g", 5) == {("t", 0): E.NONE}
        assert fetched(gc, "g") == 5

        storage.durable = asyncio.Event()
        first = asyncio.ensure_future(_commit(gc, "g", 6))
        second = asyncio.ensure_future(_commit(gc, "g", 7))
        for _ in range(10):
            await asyncio.sleep(0)
        assert len(storage.partitions[0]) == 3  # both appended, neither durable
        assert fetched(gc, "g") == 5
        storage.durable.set()
        assert await first == {("t", 0): E.NONE} and await second == {("t", 0): E.NONE}
        assert fetched(gc, "g") == 7

        storage.durable = asyncio.Event()
        storage.fail_flush = True
        failed = asyncio.ensure_future(_commit(gc, "g", 99))
        for _ in range(10):
            await asyncio.sleep(0)
        assert fetched(gc, "g") == 7
        storage.durable.set()
        assert await failed == {("t", 0): E.COORDINATOR_NOT_AVAILABLE}
        assert fetched(gc, "g") == 7  # the failed write was never shown

    asyncio.run(go())


def test_manual_scheduler_fires_in_due_order_and_repeats() -> None:
    async def go() -> None:
        clock = ManualClock()
        sched = ManualScheduler(clock)
        seen: list[tuple[str, int]] = []

        def rec(name: str) -> Any:
            return lambda: seen.append((name, clock.monotonic_ms()))

        sched.schedule(30, rec("b"))
        sched.schedule(10, rec("a"))
        sched.schedule(30, rec("c"))  # same due time: in the order scheduled
        periodic = sched.schedule_periodic(25, rec("p"))
        cancelled = sched.schedule(5, rec("x"))
        cancelled.cancel()
        assert sched.advance(60) == 5
        assert seen == [("a", 10), ("p", 25), ("b", 30), ("c", 30), ("p", 50)]
        assert clock.monotonic_ms() == 60
        periodic.cancel()
        assert sched.advance(100) == 0

        async def slow() -> None:
            seen.append(("s", clock.monotonic_ms()))

        seen.clear()
        sched.schedule_periodic(10, slow)
        sched.advance(10)
        await sched.settle()
        sched.advance(10)
        await sched.settle()
        assert seen == [("s", 170), ("s", 180)]  # every 10 ms from t=160
        sched.close()
        assert sched.pending == 0

    asyncio.run(go())


def test_txn_offset_commit_then_commit_marker_through_the_writer(tmp_path: Path) -> None:
    async def go() -> None:
        async with started_broker(tmp_path / "data") as broker:
            gc = broker.group_coordinator
            plog = broker.logs[("__consumer_offsets", 0)]
            r = await gc.txn_commit_offsets(
                "g", producer_id=7, producer_epoch=0, generation_id=-1, member_id="", group_instance_id=None,
                offsets={("t", 0): (42, -1, None)},
            )
            assert r == {("t", 0): E.NONE}
            assert plog.high_watermark == plog.log_end_offset == plog.recovery_point  # durable
            assert gc.has_pending_txn("g", ("t", 0))
            await broker.write_markers(7, 0, True, [("__consumer_offsets", 0)])
            assert not gc.has_pending_txn("g", ("t", 0))
            assert gc.fetch_offsets("g", [("t", [0])])[1]["t"][0].offset == 42  # type: ignore[union-attr]
            assert plog.high_watermark == plog.log_end_offset == plog.recovery_point

    asyncio.run(go())


def test_a_transaction_marker_is_answered_once_the_isr_has_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Kafka's WriteTxnMarkers (acks=-1): a marker durable on the leader alone is not written
    yet (a new leader would not have it, and the transaction would end without its marker); the
    partitions wait side by side; the writer is told which partitions' markers were not written
    and why: leadership moved meanwhile, the ISR did not catch up in time, or the ISR is below
    min.insync.replicas (refused before the append, or shrunk below it while the marker
    waited); the others are written."""
    from strom.server import broker as broker_module
    from strom.server.txn_marker_sender import MarkersNotWritten

    async def go() -> None:
        async with started_broker(tmp_path / "data") as broker:
            await broker.create_topic_async("d", 1)
            await broker.create_topic_async("m", 1, {"min.insync.replicas": "2"})
            tp, tm = ("d", 0), ("m", 0)
            rm = broker.replica_manager
            if not rm.partitions:
                pytest.skip("the registry path has no replication state")
            me = broker.node_id
            other = lead_with_a_made_up_follower(broker, tp)
            lead_with_a_made_up_follower(broker, tm)
            p = rm.partitions[tp]
            plog, mlog = broker.logs[tp], broker.logs[tm]

            def follower_fetch(t: tuple[str, int]) -> None:
                rm.read_for_follower(other, *t, broker.logs[t].log_end_offset, 1 << 20,
                                     current_leader_epoch=rm.partitions[t].leader_epoch)

            follower_fetch(tp)
            follower_fetch(tm)
            marker = asyncio.ensure_future(broker.write_local_markers(7, 0, False, [tp, tm]))
            await asyncio.sleep(0.3)
            assert plog.recovery_point == plog.log_end_offset  # durable here, not replicated
            assert not marker.done() and plog.high_watermark < plog.log_end_offset
            follower_fetch(tp)  # the follower has it: the HW passes the marker
            await asyncio.sleep(0.1)
            assert not marker.done()  # the other partition's marker is not replicated yet
            follower_fetch(tm)
            await asyncio.wait_for(marker, 5)
            assert plog.high_watermark == plog.log_end_offset
            assert mlog.high_watermark == mlog.log_end_offset

            monkeypatch.setattr(broker_module, "MARKER_REPLICATION_TIMEOUT_MS", 300)
            started = time.monotonic()
            with pytest.raises(MarkersNotWritten) as late:
                await broker.write_local_markers(7, 0, True, [tp, tm])
            assert time.monotonic() - started < 0.55  # side by side, not one after the other
            assert late.value.failed == {tp: E.REQUEST_TIMED_OUT, tm: E.REQUEST_TIMED_OUT}
            assert late.value.retriable and sorted(late.value.failed) == [tp, tm]
            follower_fetch(tp)
            follower_fetch(tm)

            # tm's ISR shrinks to the leader: below its min.insync.replicas, its marker is refused
            # (nothing appended); tp's is written once replicated
            mp = rm.partitions[tm]
            rm.apply_partition(*tm, types.SimpleNamespace(
                replicas=(me, other), isr=(me,), leader=me, leader_epoch=mp.leader_epoch,
                partition_epoch=mp.partition_epoch + 1))
            m_end = mlog.log_end_offset
            marker = asyncio.ensure_future(broker.write_local_markers(9, 0, True, [tp, tm]))
            await asyncio.sleep(0.1)
            follower_fetch(tp)
            with pytest.raises(MarkersNotWritten) as refused:
                await asyncio.wait_for(marker, 5)
            assert refused.value.failed == {tm: E.NOT_ENOUGH_REPLICAS}
            assert refused.value.retriable and sorted(refused.value.failed) == [tm]
            assert mlog.log_end_offset == m_end and plog.high_watermark == plog.log_end_offset

            # tm's ISR is whole again and its marker appended; the ISR shrinks to the leader while
            # it waits, so the HW passes it with the leader alone holding it: not written (Kafka's
            # NOT_ENOUGH_REPLICAS_AFTER_APPEND; the coordinator writes it again)
            def isr_of_tm(*isr: int) -> None:
                mp = rm.partitions[tm]
                rm.apply_partition(*tm, types.SimpleNamespace(
                    replicas=(me, other), isr=isr, leader=me, leader_epoch=mp.leader_epoch,
                    partition_epoch=mp.partition_epoch + 1))

            isr_of_tm(me, other)
            follower_fetch(tm)
            marker = asyncio.ensure_future(broker.write_local_markers(10, 0, True, [tm]))
            await asyncio.sleep(0.1)
            assert not marker.done() and mlog.log_end_offset == m_end + 1
            isr_of_tm(me)
            with pytest.raises(MarkersNotWritten) as shrunk:
                await asyncio.wait_for(marker, 5)
            assert shrunk.value.failed == {tm: E.NOT_ENOUGH_REPLICAS_AFTER_APPEND}
            assert shrunk.value.retriable and mlog.high_watermark == mlog.log_end_offset

            marker = asyncio.ensure_future(broker.write_local_markers(8, 0, True, [tp]))
            await asyncio.sleep(0.05)
            rm.apply_partition(*tp, replicas_of(me, other, other, p.leader_epoch + 1))  # it takes over
            with pytest.raises(MarkersNotWritten) as moved:
                await asyncio.wait_for(marker, 5)
            assert moved.value.failed == {tp: E.NOT_LEADER_OR_FOLLOWER}

    asyncio.run(go())


def test_markers_of_a_fenced_transaction_coordinator_are_refused_and_not_retried(tmp_path: Path) -> None:
    """Broker.write_markers with the coordinator epoch: a partition holding a newer coordinator's
    marker for the producer refuses an older one (TRANSACTION_COORDINATOR_FENCED), at once and
    without appending, while the other partitions take theirs."""
    from strom.server.txn_marker_sender import MarkersNotWritten

    async def go() -> None:
        async with started_broker(tmp_path / "data") as broker:
            await broker.create_topic_async("d", 2)
            a, b = ("d", 0), ("d", 1)
            await broker.write_markers(7, 0, True, [a], coordinator_epoch=3)
            ends = {tp: broker.logs[tp].log_end_offset for tp in (a, b)}
            with pytest.raises(MarkersNotWritten) as e:
                await asyncio.wait_for(broker.write_markers(7, 0, True, [a, b], coordinator_epoch=2), 5)
            assert e.value.failed == {a: E.TRANSACTION_COORDINATOR_FENCED}
            assert not e.value.retriable
            assert broker.logs[a].log_end_offset == ends[a]  # refused: nothing appended
            assert broker.logs[b].log_end_offset == ends[b] + 1  # the other partition took its marker
            await broker.write_markers(7, 0, False, [a, b], coordinator_epoch=3)
            assert broker.logs[a].log_end_offset == ends[a] + 1

    asyncio.run(go())


def test_a_fenced_follower_is_not_proposed_for_the_isr(tmp_path: Path) -> None:
    """KIP-841: a follower that caught up but whose broker the metadata shows fenced (dead, its
    session expired) is not proposed for the ISR, and does not keep a live follower that caught
    up out of it (a proposal naming the fenced one is refused whole). Seen under faults: the
    leader proposed a dead broker every 500 ms and the controller refused it each time."""
    from strom.server.metadata_cache import BrokerNode

    async def go() -> None:
        async with started_broker(tmp_path / "data") as broker:
            rm = broker.replica_manager
            if not rm.partitions:
                pytest.skip("the registry path has no replication state")
            await broker.create_topic_async("d", 1)
            tp = ("d", 0)
            me = broker.node_id
            dead = lead_with_a_made_up_follower(broker, tp)
            live = dead + 1
            p = rm.partitions[tp]
            rm.apply_partition(*tp, types.SimpleNamespace(  # both followers out of the ISR
                replicas=(me, dead, live), isr=(me,), leader=me,
                leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch + 1))
            proposed: list[Any] = []
            rm.isr_sender = lambda part, isr: proposed.append(tuple(sorted(isr)))
            fenced: list[BrokerNode] = [BrokerNode(dead, "127.0.0.1", 1, None)]
            rm.metadata_cache.fenced_brokers = lambda listener=None: fenced  # type: ignore[method-assign]
            end = broker.logs[tp].log_end_offset
            rm.read_for_follower(dead, *tp, end, 1 << 20, current_leader_epoch=p.leader_epoch)
            assert proposed == []  # caught up, but fenced
            rm.read_for_follower(live, *tp, end, 1 << 20, current_leader_epoch=p.leader_epoch)
            assert proposed == [(me, live)]  # the live one alone
            fenced.clear()  # the dead one registered again and was unfenced
            rm.read_for_follower(dead, *tp, end, 1 << 20, current_leader_epoch=p.leader_epoch)
            assert proposed[-1] == tuple(sorted((me, dead, live)))

    asyncio.run(go())
