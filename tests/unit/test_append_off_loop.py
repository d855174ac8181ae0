"""Leader appends whose write (the pwrite) runs off the event loop: PartitionLog's three steps
(prepare, write, complete) and the replica manager's use of them (``strom.log.append.threads``)."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from strom.clock import ManualClock
from strom.config import BrokerConfig, LogConfig
from strom.log.errors import KafkaStorageError
from strom.log.partition_log import AppendInfo, PartitionLog, PreparedAppend
from strom.log.segment import LogSegment
from strom.protocol.errors import ErrorCode as E
from strom.protocol.records import build_batch
from strom.server.broker import Broker

T0 = 1_700_000_000_000


def batch(n: int, ts: int = T0) -> bytes:
    return build_batch([(f"k{i}".encode(), f"v{i}".encode(), [], ts + i) for i in range(n)])


@pytest.fixture
def plog(tmp_path: Path) -> Any:
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), ManualClock(T0))
    yield log
    log.close()


def prepare(log: PartitionLog, n: int) -> PreparedAppend:
    p = log.prepare_append_as_leader(batch(n), 0)
    assert isinstance(p, PreparedAppend)
    return p


def test_an_append_is_invisible_until_completed(plog: PartitionLog) -> None:
    plog.append_as_leader(batch(2), 0)
    p = prepare(plog, 3)
    assert (p.first_offset, p.last_offset) == (2, 4)
    p.write()
    # written to the file, but not yet part of the log: readers see the old end
    seg = plog.log_segments[-1]
    assert seg.file_size() > seg.size
    assert plog.log_end_offset == 2
    assert plog.read(2, 1 << 20).size == 0
    info = plog.complete_append(p)
    assert (info.first_offset, info.last_offset, info.duplicate) == (2, 4, False)
    assert plog.log_end_offset == 5 and seg.file_size() == seg.size
    assert plog.read(2, 1 << 20).size > 0
    assert plog.complete_append(p) == info  # completing again gives the same answer


def test_any_other_change_first_settles_the_append_in_flight(plog: PartitionLog) -> None:
    first = prepare(plog, 2)
    second = prepare(plog, 1)  # settles (writes and completes) the first
    assert first.result is not None and plog.log_end_offset == 2
    assert (second.first_offset, second.last_offset) == (2, 2)
    assert plog.complete_append(first).last_offset == 1  # its own caller gets its answer
    plog.complete_append(second)
    third = prepare(plog, 4)
    assert plog.truncate_to(3)  # a truncation completes it first, then cuts it away
    assert third.result is not None and plog.log_end_offset == 3
    assert plog.complete_append(third).first_offset == 3  # its caller learns it was appended


def test_a_failed_write_is_undone(plog: PartitionLog, monkeypatch: pytest.MonkeyPatch) -> None:
    plog.append_as_leader(batch(1), 0)
    p = prepare(plog, 2)
    real = os.pwrite

    def full(fd: int, data: Any, pos: int) -> int:
        real(fd, bytes(data)[:5], pos)  # part of it lands, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    t = threading.Thread(target=p.write)
    t.start()
    t.join()
    monkeypatch.setattr(os, "pwrite", real)
    assert isinstance(p.error, OSError)
    with pytest.raises(KafkaStorageError, match="No space left"):
        plog.complete_append(p)
    seg = plog.log_segments[-1]
    assert plog.log_end_offset == 1 and seg.file_size() == seg.size
    again = plog.append_as_leader(batch(2), 0)  # the same offsets, on a batch boundary
    assert (again.first_offset, again.last_offset) == (1, 2)
    plog.close()
    reopened = PartitionLog.open(plog.directory, "t", 0, LogConfig(), ManualClock(T0))
    assert reopened.log_end_offset == 3
    reopened.close()


def test_a_retried_batch_is_answered_at_once(plog: PartitionLog) -> None:
    b = build_batch([(b"k", b"v", [], T0)], producer_id=7, producer_epoch=0, base_sequence=0)
    plog.append_as_leader(b, 0)
    dup = plog.prepare_append_as_leader(b, 0)
    assert isinstance(dup, AppendInfo) and dup.duplicate and dup.first_offset == 0


# ------------------------------------------------------------------ the replica manager


def make_broker(tmp_path: Path, threads: int) -> Broker:
    config = BrokerConfig.from_sources(None, {
        "log.dirs": str(tmp_path / "data"),
        "listeners": "PLAINTEXT://127.0.0.1:9092",
        "node.id": "1",
        "strom.metadata.quorum.enable": "false",
        "strom.log.append.threads": str(threads),
    })
    b = Broker(config)
    b.create_topic("t", 2)
    return b


class HeldWrites:
    """Segment writes that wait until released, noting the thread each ran on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.threads: list[int] = []
        real = LogSegment.write_at

        def write_at(seg: LogSegment, start: int, records: Any) -> None:
            self.threads.append(threading.get_ident())
            self.started.set()
            assert self.release.wait(10)
            real(seg, start, records)

        monkeypatch.setattr(LogSegment, "write_at", write_at)


def test_the_event_loop_goes_on_while_a_write_waits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = make_broker(tmp_path, threads=1)
    rm = b.replica_manager
    held = HeldWrites(monkeypatch)
    plog = rm.logs[("t", 0)]

    async def run() -> tuple[Any, Any, int, int, int]:
        first = asyncio.ensure_future(rm.append_records([("t", 0, batch(3))], acks=1, timeout_ms=5000))
        second = asyncio.ensure_future(rm.append_records([("t", 0, batch(2))], acks=-1, timeout_ms=5000))
        ticks = 0
        while not held.started.is_set() or ticks < 5:  # the loop runs while the write waits
            await asyncio.sleep(0.002)
            ticks += 1
        leo_meanwhile, hw_meanwhile = plog.log_end_offset, plog.high_watermark
        assert not first.done() and not second.done()
        held.release.set()
        (r1,), (r2,) = await asyncio.gather(first, second)
        return r1, r2, ticks, leo_meanwhile, hw_meanwhile

    try:
        r1, r2, ticks, leo, hw = asyncio.run(run())
    finally:
        held.release.set()
        rm.shutdown()
    assert ticks >= 5  # the loop ran while the write waited
    assert (leo, hw) == (0, 0)  # nothing visible before the write was done
    assert (r1.error_code, r1.base_offset, r1.last_offset) == (E.NONE, 0, 2)
    assert (r2.error_code, r2.base_offset, r2.last_offset) == (E.NONE, 3, 4)  # in arrival order
    assert plog.log_end_offset == plog.high_watermark == 5
    assert threading.get_ident() not in held.threads and len(held.threads) == 2


def test_zero_threads_write_on_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = make_broker(tmp_path, threads=0)
    rm = b.replica_manager
    assert rm.append_executor is None
    held = HeldWrites(monkeypatch)
    held.release.set()
    try:
        (r,) = asyncio.run(rm.append_records([("t", 1, batch(2))], acks=1, timeout_ms=1000))
    finally:
        rm.shutdown()
    assert r.error_code == E.NONE and r.last_offset == 1
    assert held.threads == [threading.get_ident()]


def test_a_coordinator_append_waits_for_the_write_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transaction coordinator's markers are appended synchronously (append_to_leader): an
    append in flight on the same partition is completed first, so offsets never overlap."""
    b = make_broker(tmp_path, threads=1)
    rm = b.replica_manager
    held = HeldWrites(monkeypatch)
    plog = rm.logs[("t", 0)]

    async def run() -> tuple[Any, AppendInfo]:
        produce = asyncio.ensure_future(rm.append_records([("t", 0, batch(3))], acks=1, timeout_ms=5000))
        while not held.started.is_set():
            await asyncio.sleep(0.002)
        threading.Timer(0.05, held.release.set).start()
        info = rm.append_to_leader("t", 0, batch(1))  # blocks until the write in flight is done
        (r,) = await produce
        return r, info

    try:
        r, info = asyncio.run(run())
    finally:
        held.release.set()
        rm.shutdown()
    assert (r.error_code, r.base_offset, r.last_offset) == (E.NONE, 0, 2)
    assert (info.first_offset, info.last_offset) == (3, 3)
    assert plog.log_end_offset == plog.high_watermark == 4
