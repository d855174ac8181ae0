"""Transaction coordinator driven directly (no sockets), on a ManualClock."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.clock import ManualClock
from strom.coordinator.transaction import TransactionStateMachine, TxnState
from strom.coordinator.transaction_coordinator import MARKER_RETRY_BACKOFF_MS, TransactionCoordinator
from strom.coordinator.transaction_records import decode_key, decode_value, encode_key, encode_value
from strom.protocol.errors import ErrorCode, KafkaError
from strom.testing.scheduler import ManualScheduler

TP = tuple[str, int]


class MemoryStorage:
    def __init__(self) -> None:
        self.parts: dict[int, list[tuple[bytes, bytes | None]]] = {}

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        self.parts.setdefault(partition, []).extend(records)

    def read_all(self, partition: int) -> Iterable[tuple[bytes, bytes | None]]:
        return list(self.parts.get(partition, []))


class RecordingMarkers:
    """Stands in for the partition logs: records which markers were written, in order."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.written: list[tuple[int, int, bool, TP]] = []
        self.fail_after = fail_after

    async def write_markers(
        self, producer_id: int, producer_epoch: int, commit: bool, partitions: Iterable[TP],
        coordinator_epoch: int = 0,
    ) -> None:
        for tp in partitions:
            if self.fail_after is not None and len(self.written) >= self.fail_after:
                raise OSError("simulated crash while writing markers")
            self.written.append((producer_id, producer_epoch, commit, tp))


class GatedMarkers(RecordingMarkers):
    """Markers for ``("slow", 0)`` wait for ``gate`` (a partition's new leader, its ISR); every
    write's coordinator epoch is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()
        self.epochs: list[int] = []

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool,
                            partitions: Iterable[TP], coordinator_epoch: int = 0) -> None:
        partitions = list(partitions)
        self.epochs.append(coordinator_epoch)
        if ("slow", 0) in partitions:
            self.waiting.set()
            await self.gate.wait()
        await super().write_markers(producer_id, producer_epoch, commit, partitions)


def make(
    clock: ManualClock | None = None,
    storage: MemoryStorage | None = None,
    markers: RecordingMarkers | None = None,
    scheduler: ManualScheduler | None = None,
) -> tuple[TransactionCoordinator, MemoryStorage, RecordingMarkers]:
    storage = storage or MemoryStorage()
    markers = markers or RecordingMarkers()
    ids = itertools.count(1000)
    coord = TransactionCoordinator(
        clock=clock or ManualClock(),
        storage=storage,
        markers=markers,
        allocate_producer_id=lambda: next(ids),
        num_partitions=5,
        max_timeout_ms=60_000,
        scheduler=scheduler,
    )
    return coord, storage, markers


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_commit_flow_writes_markers_then_completes() -> None:
    async def go() -> None:
        coord, _storage, markers = make()
        await coord.start()
        err, pid, epoch = await coord.init_producer_id("app", 10_000)
        assert (err, epoch) == (0, 0)
        res = await coord.add_partitions("app", pid, epoch, [("out", 0), ("out", 1)])
        assert res == {("out", 0): 0, ("out", 1): 0}
        assert coord.sm.txns["app"].state == TxnState.ONGOING
        assert await coord.end_txn("app", pid, epoch, True) == 0
        assert markers.written == [(pid, 0, True, ("out", 0)), (pid, 0, True, ("out", 1))]
        assert coord.sm.txns["app"].state == TxnState.COMPLETE_COMMIT
        # a retried EndTxn(commit) succeeds; EndTxn(abort) now is invalid
        assert await coord.end_txn("app", pid, epoch, True) == 0
        assert await coord.end_txn("app", pid, epoch, False) == ErrorCode.INVALID_TXN_STATE
        await coord.stop()

    run(go())


def test_out_of_order_and_wrong_ids() -> None:
    async def go() -> None:
        coord, _, _ = make()
        await coord.start()
        err, pid, epoch = await coord.init_producer_id("a", 10_000)
        assert await coord.end_txn("a", pid, epoch, True) == ErrorCode.INVALID_TXN_STATE
        assert await coord.end_txn("a", pid + 1, epoch, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert await coord.end_txn("nobody", 5, 0, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        bad = await coord.add_partitions("a", pid, epoch + 3, [("t", 0)])
        assert bad == {("t", 0): ErrorCode.INVALID_PRODUCER_EPOCH}
        err, _, _ = await coord.init_producer_id("b", 10**9)
        assert err == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        await coord.stop()

    run(go())


def test_second_producer_fences_the_first_and_aborts_its_transaction() -> None:
    async def go() -> None:
        coord, _, markers = make()
        await coord.start()
        _, pid, e0 = await coord.init_producer_id("app", 10_000)
        await coord.add_partitions("app", pid, e0, [("out", 0)])
        err, pid2, e1 = await coord.init_producer_id("app", 10_000)
        assert err == 0 and pid2 == pid and e1 == e0 + 2
        assert markers.written == [(pid, e0 + 1, False, ("out", 0))]  # aborted with the fencing epoch
        assert await coord.end_txn("app", pid, e0, True) == ErrorCode.PRODUCER_FENCED
        assert await coord.add_partitions("app", pid, e0, [("x", 0)]) == {("x", 0): ErrorCode.PRODUCER_FENCED}
        await coord.stop()

    run(go())


def test_timeout_aborts_and_fences() -> None:
    async def go() -> None:
        clock = ManualClock()
        coord, _, markers = make(clock)
        await coord.start()
        _, pid, e0 = await coord.init_producer_id("slow", 5_000)
        await coord.add_partitions("slow", pid, e0, [("out", 3)])
        clock.advance(4_000)
        assert await coord.abort_expired() == 0
        clock.advance(2_000)
        assert await coord.abort_expired() == 1
        assert markers.written == [(pid, e0 + 1, False, ("out", 3))]
        assert coord.sm.txns["slow"].state == TxnState.COMPLETE_ABORT
        assert await coord.end_txn("slow", pid, e0, True) == ErrorCode.PRODUCER_FENCED
        await coord.stop()

    run(go())


def test_restart_replays_state_and_completes_prepared_transactions() -> None:
    async def go() -> None:
        storage = MemoryStorage()
        crashing = RecordingMarkers(fail_after=1)
        coord, _, _ = make(storage=storage, markers=crashing)
        await coord.start()
        _, pid, e = await coord.init_producer_id("app", 10_000)
        await coord.add_partitions("app", pid, e, [("a", 0), ("b", 0)])
        with pytest.raises(KafkaError) as failed:  # NOT_COORDINATOR: the client retries elsewhere
            await coord.end_txn("app", pid, e, True)  # crash after one marker
        assert failed.value.code == ErrorCode.NOT_COORDINATOR
        await coord.stop()
        # a new coordinator over the same storage: PrepareCommit found, markers written again
        markers2 = RecordingMarkers()
        coord2, _, _ = make(storage=storage, markers=markers2)
        await coord2.start()
        assert [m[3] for m in markers2.written] == [("a", 0), ("b", 0)]
        assert all(m[2] for m in markers2.written)
        meta = coord2.sm.txns["app"]
        assert (meta.state, meta.producer_id, meta.producer_epoch) == (TxnState.COMPLETE_COMMIT, pid, e)
        # and the id keeps its epoch lineage
        err, pid2, e2 = await coord2.init_producer_id("app", 10_000)
        assert (err, pid2, e2) == (0, pid, e + 1)
        await coord2.stop()

    run(go())


def test_markers_not_written_are_retried_until_written() -> None:
    """As Kafka's marker channel, which retries until the markers are written: a transaction
    whose markers failed (a leader moving, an ISR below min.insync.replicas) stays prepared, the
    producer's EndTxn retries get CONCURRENT_TRANSACTIONS, other transactions go on meanwhile,
    and the markers are written again every MARKER_RETRY_BACKOFF_MS until they are; then the
    transaction completes."""
    from strom.coordinator.transaction_coordinator import MARKER_RETRY_BACKOFF_MS as BACKOFF

    class Failing(RecordingMarkers):
        failing: set[TP] = {("a", 0)}

        async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool,
                                partitions: Iterable[TP], coordinator_epoch: int = 0) -> None:
            partitions = list(partitions)
            if self.failing & set(partitions):
                raise OSError("NOT_ENOUGH_REPLICAS")
            await super().write_markers(producer_id, producer_epoch, commit, partitions)

    async def go() -> None:
        clock = ManualClock()
        sched = ManualScheduler(clock)
        markers = Failing()
        ids = itertools.count(1000)
        coord = TransactionCoordinator(clock=clock, storage=MemoryStorage(), markers=markers,
                                       allocate_producer_id=lambda: next(ids), num_partitions=5,
                                       scheduler=sched)
        await coord.start()
        _, pid, e = await coord.init_producer_id("app", 60_000)
        await coord.add_partitions("app", pid, e, [("a", 0), ("b", 0)])
        with pytest.raises(KafkaError) as failed:
            await coord.end_txn("app", pid, e, True)
        assert failed.value.code == ErrorCode.NOT_COORDINATOR
        assert coord.sm.txns["app"].state == TxnState.PREPARE_COMMIT
        assert await coord.end_txn("app", pid, e, True) == ErrorCode.CONCURRENT_TRANSACTIONS
        # another transaction, on healthy partitions, commits meanwhile
        _, pid2, e2 = await coord.init_producer_id("other", 60_000)
        await coord.add_partitions("other", pid2, e2, [("b", 1)])
        assert await coord.end_txn("other", pid2, e2, True) == 0
        assert markers.written == [(pid2, e2, True, ("b", 1))]
        sched.advance(BACKOFF)  # still failing: still prepared
        await sched.settle()
        assert coord.sm.txns["app"].state == TxnState.PREPARE_COMMIT and len(markers.written) == 1
        markers.failing = set()  # the partition is writable again
        sched.advance(BACKOFF)
        await sched.settle()
        assert [m[3] for m in markers.written[1:]] == [("a", 0), ("b", 0)]
        assert all(m[2] for m in markers.written)
        assert coord.sm.txns["app"].state == TxnState.COMPLETE_COMMIT
        assert await coord.end_txn("app", pid, e, True) == 0  # the producer's retry: done
        sched.advance(10 * BACKOFF)  # nothing due: nothing written again
        await sched.settle()
        assert len(markers.written) == 3
        await coord.stop()

    run(go())


def test_markers_waiting_for_a_partition_hold_up_only_their_own_transaction() -> None:
    """Markers are written outside the coordinator's lock (Kafka's marker channel sends them
    apart from request handling): while one transaction's markers wait (a partition's ISR or
    new leader, up to 30 s), other transactional ids init, add partitions, commit and abort;
    the waiting transaction's own requests get CONCURRENT_TRANSACTIONS; its EndTxn answers once
    its markers are written and its completion logged."""

    async def go() -> None:
        markers = GatedMarkers()
        coord, _storage, _ = make(markers=markers)
        await coord.start()
        _, pid, e = await coord.init_producer_id("app", 60_000)
        await coord.add_partitions("app", pid, e, [("slow", 0)])
        commit = asyncio.create_task(coord.end_txn("app", pid, e, True))
        await asyncio.wait_for(markers.waiting.wait(), 5)
        assert coord.sm.txns["app"].state == TxnState.PREPARE_COMMIT
        # other transactional ids are served meanwhile (before: they waited for the lock)
        for tid, finish in (("other", True), ("third", False)):
            err, pid2, e2 = await asyncio.wait_for(coord.init_producer_id(tid, 60_000), 1)
            assert err == 0
            assert await asyncio.wait_for(coord.add_partitions(tid, pid2, e2, [("b", 1)]), 1) == {("b", 1): 0}
            assert await asyncio.wait_for(coord.end_txn(tid, pid2, e2, finish), 1) == 0
            done = TxnState.COMPLETE_COMMIT if finish else TxnState.COMPLETE_ABORT
            assert coord.sm.txns[tid].state == done
        # the waiting transaction's own requests: CONCURRENT_TRANSACTIONS
        retry = await asyncio.wait_for(coord.end_txn("app", pid, e, True), 1)
        assert retry == ErrorCode.CONCURRENT_TRANSACTIONS
        assert (await asyncio.wait_for(coord.init_producer_id("app", 60_000), 1))[0] == (
            ErrorCode.CONCURRENT_TRANSACTIONS)
        assert not commit.done()
        markers.gate.set()
        assert await asyncio.wait_for(commit, 5) == 0
        assert coord.sm.txns["app"].state == TxnState.COMPLETE_COMMIT
        assert [m[3] for m in markers.written] == [("b", 1), ("b", 1), ("slow", 0)]
        await coord.stop()

    run(go())


def test_id_expiration_tombstones() -> None:
    async def go() -> None:
        clock = ManualClock()
        coord, storage, _ = make(clock)
        coord.id_expiration_ms = 1000
        await coord.start()
        await coord.init_producer_id("old", 10_000)
        clock.advance(2000)
        await coord.abort_expired()
        assert "old" not in coord.sm.txns
        part = coord.partition_for("old")
        assert storage.parts[part][-1] == (encode_key("old"), None)
        await coord.stop()

    run(go())


def test_records_roundtrip() -> None:
    sm = TransactionStateMachine(ManualClock(), lambda: 7, 60_000)
    res = sm.init_producer_id("t-1", 1000)
    assert res.record is not None
    sm.replay(res.record)
    res2 = sm.add_partitions("t-1", 7, 0, [("x", 1), ("y", 0), ("x", 0)])
    assert res2.record is not None
    m = res2.record
    assert decode_value(decode_key(encode_key("t-1")), encode_value(m)) == m


ops = st.lists(
    st.tuples(
        st.sampled_from(["init", "add", "commit", "abort", "tick"]),
        st.sampled_from(["a", "b"]),
        st.integers(0, 2),
    ),
    max_size=40,
)


@given(ops)
@settings(max_examples=80, deadline=None)
def test_random_operations_keep_invariants(seq: list[tuple[str, str, int]]) -> None:
    async def go() -> None:
        clock = ManualClock()
        coord, storage, _markers = make(clock)
        await coord.start()
        known: dict[str, tuple[int, int]] = {}
        for op, tid, n in seq:
            pid, epoch = known.get(tid, (1, 0))
            if op == "init":
                err, p, e = await coord.init_producer_id(tid, 3000)
                if err == 0:
                    assert e > known.get(tid, (p, -1))[1] or p != known.get(tid, (p, -1))[0]
                    known[tid] = (p, e)
            elif op == "add":
                await coord.add_partitions(tid, pid, epoch, [("t", n)])
            elif op in ("commit", "abort"):
                await coord.end_txn(tid, pid, epoch, op == "commit")
            else:
                clock.advance(2000)
                await coord.abort_expired()
            for meta in coord.sm.txns.values():
                assert meta.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
                if meta.state != TxnState.ONGOING:
                    assert not meta.partitions
        # replaying the log gives the same state
        coord2, _, _ = make(storage=storage)
        await coord2.start()
        assert coord2.sm.txns == coord.sm.txns
        await coord.stop()
        await coord2.stop()

    run(go())


def test_partition_ownership_election_and_resignation() -> None:
    """In a cluster: only the __transaction_state partitions led here are loaded and served
    (others: NOT_COORDINATOR); a partition elected here later is loaded and its prepared
    transactions completed; one resigned is forgotten."""

    async def go() -> None:
        storage = MemoryStorage()
        crashing = RecordingMarkers(fail_after=1)
        coord, _, _ = make(storage=storage, markers=crashing)
        await coord.start()
        _, pid, e = await coord.init_producer_id("app", 10_000)
        await coord.add_partitions("app", pid, e, [("a", 0), ("b", 0)])
        with pytest.raises(KafkaError):
            await coord.end_txn("app", pid, e, True)  # prepared, one marker written
        await coord.stop()
        part = coord.partition_for("app")
        other = next(f"t{i}" for i in range(100) if coord.partition_for(f"t{i}") != part)

        markers = RecordingMarkers()
        coord2, _, _ = make(storage=storage, markers=markers)
        coord2.owns = lambda p: p != part  # "app"'s partition is led by another broker
        await coord2.start()
        assert "app" not in coord2.sm.txns and markers.written == []
        assert (await coord2.init_producer_id("app", 10_000))[0] == ErrorCode.NOT_COORDINATOR
        assert (await coord2.init_producer_id(other, 10_000))[0] == ErrorCode.NONE
        coord2.on_election(part)  # its leadership moves here
        for _ in range(50):
            await asyncio.sleep(0)
        assert [m[3] for m in markers.written] == [("a", 0), ("b", 0)]
        assert coord2.sm.txns["app"].state == TxnState.COMPLETE_COMMIT
        err, pid2, e2 = await coord2.init_producer_id("app", 10_000)
        assert (err, pid2, e2) == (0, pid, e + 1)
        await coord2.add_partitions("app", pid2, e2, [("a", 0)])
        assert coord2.verify_partitions("app", pid2, e2, [("a", 0)]) == {("a", 0): ErrorCode.NONE}
        coord2.on_resignation(part)  # and away again
        assert "app" not in coord2.sm.txns
        assert (await coord2.init_producer_id("app", 10_000))[0] == ErrorCode.NOT_COORDINATOR
        # a leader asking with stale metadata (AddPartitionsToTxn verify_only) is sent on to the
        # new coordinator, not told the id is unknown (INVALID_PRODUCER_ID_MAPPING is fatal)
        assert coord2.verify_partitions("app", pid2, e2, [("a", 0)]) == {("a", 0): ErrorCode.NOT_COORDINATOR}
        assert coord2.describe("app")["error_code"] == ErrorCode.NOT_COORDINATOR  # (the admin asks again)
        assert coord2.describe(other)["error_code"] == ErrorCode.NONE
        unknown = next(f"u{i}" for i in range(100) if coord2.partition_for(f"u{i}") != part)
        assert coord2.describe(unknown)["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        await coord2.stop()

    run(go())


class GatedStorage(MemoryStorage):
    """An append waits for ``gate`` (a __transaction_state write waiting for the ISR)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        if self.gate is not None:
            await self.gate.wait()
        await super().append(partition, records)


def test_a_request_waiting_for_the_lock_when_the_partition_is_resigned_gets_not_coordinator() -> None:
    """Seen under faults (a controlled shutdown, a paused coordinator): one producer's EndTxn
    holds the coordinator's lock while its write waits; another's EndTxn, AddPartitionsToTxn or
    InitProducerId waits for the lock; the partition is resigned meanwhile. The waiting request
    must get NOT_COORDINATOR (the client finds the new coordinator and retries), not the state
    machine's INVALID_PRODUCER_ID_MAPPING for an id it just forgot (fatal for the client)."""

    async def go() -> None:
        storage = GatedStorage()
        coord, _, _ = make(storage=storage)
        coord.owns = lambda p: True
        await coord.start()
        a = next(f"a{i}" for i in range(100))
        part = coord.partition_for(a)
        b = next(f"b{i}" for i in range(100) if coord.partition_for(f"b{i}") == part)
        ids = {}
        for t in (a, b):
            _, pid, e = await coord.init_producer_id(t, 10_000)
            await coord.add_partitions(t, pid, e, [("out", 0)])
            ids[t] = (pid, e)
        storage.gate = asyncio.Event()
        first = asyncio.create_task(coord.end_txn(a, *ids[a], True))  # holds the lock, waits
        waiting = [
            asyncio.create_task(coord.end_txn(b, *ids[b], True)),
            asyncio.create_task(coord.add_partitions(b, *ids[b], [("out", 1)])),
            asyncio.create_task(coord.init_producer_id(b, 10_000)),
        ]
        for _ in range(10):
            await asyncio.sleep(0)
        assert not first.done() and not any(t.done() for t in waiting)
        coord.on_resignation(part)  # its leadership moved away
        storage.gate.set()
        with pytest.raises(KafkaError) as err:  # its own write completed after the resignation
            await first
        assert err.value.code == ErrorCode.NOT_COORDINATOR
        end_b, add_b, init_b = await asyncio.gather(*waiting)
        assert end_b == ErrorCode.NOT_COORDINATOR
        assert add_b == {("out", 1): ErrorCode.NOT_COORDINATOR}
        assert init_b[0] == ErrorCode.NOT_COORDINATOR
        await coord.stop()

    run(go())


def test_a_write_that_waited_across_a_resignation_does_not_bring_its_state_back() -> None:
    """EndTxn's write of PREPARE_COMMIT waits for the ISR; the partition is resigned meanwhile
    (its ids forgotten). When the write completes, the coordinator must not put the id's state
    back (a leftover ONGOING/PREPARE entry on a broker that no longer coordinates it would time
    out and be aborted here, and fail every later timeout check): the producer is answered
    NOT_COORDINATOR and finds the new coordinator, which reads the write from the log."""

    async def go() -> None:
        storage = GatedStorage()
        markers = RecordingMarkers()
        coord, _, _ = make(storage=storage, markers=markers)
        coord.owns = lambda p: True
        await coord.start()
        _, pid, e = await coord.init_producer_id("app", 10_000)
        await coord.add_partitions("app", pid, e, [("out", 0)])
        part = coord.partition_for("app")
        storage.gate = asyncio.Event()
        end = asyncio.create_task(coord.end_txn("app", pid, e, True))
        for _ in range(10):
            await asyncio.sleep(0)
        assert not end.done()
        coord.on_resignation(part)
        storage.gate.set()
        with pytest.raises(KafkaError) as err:
            await end
        assert err.value.code == ErrorCode.NOT_COORDINATOR
        assert "app" not in coord.sm.txns and markers.written == []
        # the write is in the log: the next coordinator (here: this one, elected again) completes it
        coord.on_election(part)
        for _ in range(50):
            await asyncio.sleep(0)
        assert coord.sm.txns["app"].state == TxnState.COMPLETE_COMMIT
        assert [m[3] for m in markers.written] == [("out", 0)]
        await coord.stop()

    run(go())


class FailingPartitionStorage(MemoryStorage):
    """Appends to ``failing`` partitions fail (a partition without an ISR, a full disk)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: set[int] = set()

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        if partition in self.failing:
            raise OSError("simulated: not enough replicas")
        await super().append(partition, records)


def test_a_timed_out_transaction_that_cannot_be_aborted_does_not_hold_up_the_others() -> None:
    """The timeout check aborts every expired transaction it can; one whose partition refuses
    the write is tried again next round instead of ending the round for all the others."""

    async def go() -> None:
        clock = ManualClock()
        storage = FailingPartitionStorage()
        coord, _, _ = make(clock=clock, storage=storage)
        await coord.start()
        ids = [f"t{i}" for i in range(40)]
        parts = {coord.partition_for(t) for t in ids}
        assert len(parts) > 1
        for t in ids:
            _, pid, e = await coord.init_producer_id(t, 1_000)
            await coord.add_partitions(t, pid, e, [("out", 0)])
        bad = coord.partition_for(ids[0])
        storage.failing.add(bad)
        clock.advance(2_000)
        await coord.abort_expired()
        for t in ids:
            state = coord.sm.txns[t].state
            if coord.partition_for(t) == bad:
                assert state == TxnState.ONGOING, t
            else:
                assert state == TxnState.COMPLETE_ABORT, (t, state)
        storage.failing.clear()
        await coord.abort_expired()
        assert all(coord.sm.txns[t].state == TxnState.COMPLETE_ABORT for t in ids)
        await coord.stop()

    run(go())


def test_stale_markers_written_across_a_resignation_do_not_complete_the_next_transaction() -> None:
    """The coordinator writes a transaction's markers (slow: a partition's new leader); its
    __transaction_state partition is resigned meanwhile, another coordinator completes that
    transaction, the producer (same id and epoch: transaction version 1) prepares its next one
    on other partitions, and the partition is elected here again (loaded from the log). When
    the stale write ends, the old transaction's completion must not be logged over the new one
    (the new one's markers would never be written: its partitions stay open, read_committed
    consumers stall); the new one is completed with its own markers. The markers carry the
    coordinator epoch of the partition here."""

    async def go() -> None:
        clock = ManualClock()
        sched = ManualScheduler(clock)
        markers = GatedMarkers()
        storage = MemoryStorage()
        coord, _, _ = make(clock, storage, markers, scheduler=sched)
        coord.owns = lambda p: True
        leader_epochs = {p: 7 for p in range(5)}
        coord.coordinator_epoch = lambda p: leader_epochs[p]
        await coord.start()
        _, pid, e = await coord.init_producer_id("app", 60_000)
        await coord.add_partitions("app", pid, e, [("slow", 0)])
        part = coord.partition_for("app")
        commit = asyncio.create_task(coord.end_txn("app", pid, e, True))
        await asyncio.wait_for(markers.waiting.wait(), 5)
        first = coord.sm.txns["app"]
        assert first.state == TxnState.PREPARE_COMMIT
        coord.on_resignation(part)
        # another coordinator completes it; the producer prepares its next transaction there
        done = first.with_(state=TxnState.COMPLETE_COMMIT, partitions=frozenset())
        nxt = first.with_(state=TxnState.PREPARE_COMMIT, partitions=frozenset({("next", 0)}))
        for meta in (done, nxt):
            await storage.append(part, [(encode_key("app"), encode_value(meta))])
        leader_epochs[part] = 9
        coord.on_election(part)  # led here again: loaded from the log
        for _ in range(20):
            await asyncio.sleep(0)
        assert coord.sm.txns["app"].state == TxnState.PREPARE_COMMIT
        markers.gate.set()  # the stale write ends
        with pytest.raises(KafkaError) as err:
            await asyncio.wait_for(commit, 5)
        assert err.value.code == ErrorCode.NOT_COORDINATOR
        assert coord.sm.txns["app"].partitions == frozenset({("next", 0)})  # not completed by it
        sched.advance(MARKER_RETRY_BACKOFF_MS)
        await sched.settle()
        assert [m[3] for m in markers.written] == [("slow", 0), ("next", 0)]
        assert coord.sm.txns["app"].state == TxnState.COMPLETE_COMMIT
        assert markers.epochs == [7, 9]
        await coord.stop()

    run(go())


def test_a_stale_completion_waiting_for_the_lock_is_not_logged_after_a_reload() -> None:
    """As above, but the partition is resigned and loaded again after the markers were written,
    while the completion waits for the coordinator's lock (held by another id's write waiting for
    the ISR): the completion must still not be logged over the producer's next transaction."""

    async def go() -> None:
        clock = ManualClock()
        sched = ManualScheduler(clock)
        markers = GatedMarkers()
        storage = GatedStorage()
        coord, _, _ = make(clock, storage, markers, scheduler=sched)
        coord.owns = lambda p: True
        await coord.start()
        part = coord.partition_for("app")
        other = next(f"b{i}" for i in range(100) if coord.partition_for(f"b{i}") != part)
        _, pid, e = await coord.init_producer_id("app", 60_000)
        await coord.add_partitions("app", pid, e, [("slow", 0)])
        _, pid_b, e_b = await coord.init_producer_id(other, 60_000)
        await coord.add_partitions(other, pid_b, e_b, [("b", 0)])
        commit = asyncio.create_task(coord.end_txn("app", pid, e, True))
        await asyncio.wait_for(markers.waiting.wait(), 5)
        first = coord.sm.txns["app"]
        storage.gate = asyncio.Event()  # the next write (the other id's) waits for the ISR
        holder = asyncio.create_task(coord.end_txn(other, pid_b, e_b, True))
        for _ in range(10):
            await asyncio.sleep(0)
        markers.gate.set()  # app's markers are written; its completion waits for the lock
        for _ in range(10):
            await asyncio.sleep(0)
        assert not commit.done() and not holder.done()
        coord.on_resignation(part)
        nxt = first.with_(state=TxnState.PREPARE_COMMIT, partitions=frozenset({("next", 0)}))
        storage.parts.setdefault(part, []).extend([
            (encode_key("app"), encode_value(first.with_(state=TxnState.COMPLETE_COMMIT,
                                                          partitions=frozenset()))),
            (encode_key("app"), encode_value(nxt)),
        ])
        coord.on_election(part)  # loaded again, the producer's next transaction prepared
        storage.gate.set()
        assert await asyncio.wait_for(holder, 5) == ErrorCode.NONE
        with pytest.raises(KafkaError) as err:
            await asyncio.wait_for(commit, 5)
        assert err.value.code == ErrorCode.NOT_COORDINATOR
        # the next transaction is completed with its own markers (by the election's task, or
        # the retry), never by the stale completion (which would leave ("next", 0) open)
        sched.advance(MARKER_RETRY_BACKOFF_MS)
        await sched.settle()
        for _ in range(20):
            await asyncio.sleep(0)
        assert ("next", 0) in [m[3] for m in markers.written]
        assert coord.sm.txns["app"].state == TxnState.COMPLETE_COMMIT
        await coord.stop()

    run(go())


def test_markers_carry_the_coordinator_epoch_read_when_the_partition_was_loaded() -> None:
    """Kafka's coordinatorEpoch: the leader epoch of the __transaction_state partition when this
    broker loaded it, not the live one. Between the replica manager learning of a new leader (a
    higher epoch) and the coordinator's resignation, markers written here must carry the old
    epoch, so partitions that already have the new coordinator's markers refuse them."""

    async def go() -> None:
        markers = GatedMarkers()  # (no ("slow", 0) here: nothing waits)
        coord, _, _ = make(markers=markers)
        coord.owns = lambda p: True
        live = {p: 4 for p in range(5)}
        coord.coordinator_epoch = lambda p: live[p]
        await coord.start()
        _, pid, e = await coord.init_producer_id("app", 60_000)
        await coord.add_partitions("app", pid, e, [("out", 0)])
        live[coord.partition_for("app")] = 5  # another broker leads it now; not resigned here yet
        assert await coord.end_txn("app", pid, e, True) == ErrorCode.NONE
        assert markers.epochs == [4]
        await coord.stop()

    run(go())
