"""Deferred roll flush (strom.log.partition_log.set_roll_flusher, strom.server.roll_flusher) and
the event-loop lag monitor (strom.observability.loop_lag)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_log_support import T0, batch, offsets_of, open_log, read_all

from strom.clock import ManualClock
from strom.log.partition_log import PartitionLog, RollFlush, set_roll_flusher
from strom.log.segment import LogSegment
from strom.observability.loop_lag import LoopLagMonitor
from strom.server.roll_flusher import RollFlusher


@pytest.fixture
def jobs() -> Iterator[list[tuple[PartitionLog, RollFlush]]]:
    """A roll flusher that only records what rolls leave behind (the test runs them)."""
    seen: list[tuple[PartitionLog, RollFlush]] = []
    set_roll_flusher(lambda plog, job: seen.append((plog, job)))
    try:
        yield seen
    finally:
        set_roll_flusher(None)


def _checkpoint(path: Path) -> int:
    return int(path.read_text().split()[-1])


def fill(log: PartitionLog, n: int) -> None:
    for i in range(n):
        log.append_as_leader(batch(3, size=40, tag=i, ts=T0 + i), leader_epoch=1)


def test_a_roll_leaves_the_flush_to_the_flusher(
    tmp_path: Path, jobs: list[tuple[PartitionLog, RollFlush]]
) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=600)
    fill(log, 12)
    assert len(log.segments) >= 3
    assert log.recovery_point == 0  # nothing made durable yet
    assert [job.upto for _, job in jobs] == [s.base_offset for s in log.segments[1:]]
    assert all(plog is log for plog, _ in jobs)
    first = jobs[0][1]
    assert first.segment.base_offset == 0 and first.snapshot.name.endswith(".snapshot")
    for _, job in jobs:  # in roll order, as the broker's single worker runs them
        job.sync()
        log.finish_roll_flush(job)
        assert log.recovery_point == job.upto
    assert _checkpoint(tmp_path / "t-0" / "recovery-point-offset-checkpoint") == jobs[-1][1].upto
    assert offsets_of(read_all(log)) == list(range(36))


def test_a_crash_before_the_flush_recovers_from_the_old_recovery_point(
    tmp_path: Path, jobs: list[tuple[PartitionLog, RollFlush]]
) -> None:
    clock = ManualClock(T0)
    log = open_log(tmp_path / "t-0", clock, segment_bytes=600)
    fill(log, 6)
    jobs[0][1].sync()
    log.finish_roll_flush(jobs[0][1])
    durable = log.recovery_point
    fill(log, 6)
    assert log.recovery_point == durable  # the later rolls' flushes never ran
    # a crash: no close, the files as they are; the next open recovers from the checkpoint
    reopened = open_log(tmp_path / "t-0", clock, segment_bytes=600)
    assert reopened.log_end_offset == 36
    assert offsets_of(read_all(reopened)) == list(range(36))


def test_a_flush_of_a_segment_retention_removed_is_skipped(
    tmp_path: Path, jobs: list[tuple[PartitionLog, RollFlush]]
) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=600, retention_bytes=700, file_delete_delay_ms=0)
    fill(log, 12)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() > 0
    log.delete_expired_segments(force=True)
    job = jobs[0][1]
    assert not job.segment.log_path.exists()
    job.sync()  # no error: the segment's files are gone
    log.finish_roll_flush(job)
    assert log.recovery_point >= job.upto


def test_the_broker_flusher_runs_off_the_loop_in_roll_order(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    async def main() -> tuple[int, int, int, PartitionLog, set[int]]:
        flusher = RollFlusher(asyncio.get_running_loop(), lambda _plog, e: errors.append(e))
        threads: set[int] = set()
        real_sync = RollFlush.sync

        def spy(self: RollFlush) -> None:
            threads.add(threading.get_ident())
            real_sync(self)

        RollFlush.sync = spy  # type: ignore[method-assign]
        flusher.install()
        try:
            log = open_log(tmp_path / "t-0", segment_bytes=600)
            fill(log, 12)
            rolls = len(log.segments) - 1
            for _ in range(200):
                if flusher.done == rolls:
                    break
                await asyncio.sleep(0.01)
            return rolls, flusher.done, flusher.pending, log, threads
        finally:
            RollFlush.sync = real_sync  # type: ignore[method-assign]
            flusher.close()

    rolls, done, pending, log, threads = asyncio.run(main())
    assert rolls >= 3 and done == rolls and pending == 0 and not errors
    assert threading.get_ident() not in threads  # fsyncs ran on the worker thread
    assert log.recovery_point == log.segments[-1].base_offset


def test_retention_renames_checkpoints_and_unlinks_off_the_loop(tmp_path: Path) -> None:
    """With the broker's flusher installed, retention takes segments out of the log at once and
    leaves their renames, the log-start checkpoint and the unlinks to the worker, in order; the
    checkpoints of a finished roll flush are written there too."""
    errors: list[BaseException] = []
    renamers: set[int] = set()
    writers: set[int] = set()
    real_rename = LogSegment.rename_to_deleted
    real_write = PartitionLog._write_checkpoints

    def spy_rename(self: LogSegment) -> None:
        renamers.add(threading.get_ident())
        real_rename(self)

    def spy_write(self: PartitionLog, sync: bool = True) -> None:
        writers.add(threading.get_ident())
        real_write(self, sync)

    async def main() -> tuple[PartitionLog, list[Path], int]:
        flusher = RollFlusher(asyncio.get_running_loop(), lambda _plog, e: errors.append(e))
        LogSegment.rename_to_deleted = spy_rename  # type: ignore[method-assign]
        PartitionLog._write_checkpoints = spy_write  # type: ignore[method-assign]
        flusher.install()
        try:
            log = open_log(tmp_path / "t-0", segment_bytes=600, retention_bytes=700, file_delete_delay_ms=0)
            writers.clear()  # the open's own checkpoints
            fill(log, 12)
            log.update_high_watermark(log.log_end_offset)
            old = sorted((tmp_path / "t-0").glob("*.log"))
            removed = log.delete_old_segments()
            assert removed > 0 and log.log_start_offset == log.segments[0].base_offset
            assert log.delete_expired_segments() == removed  # queued behind the renames
            for _ in range(300):
                if flusher.pending == 0:
                    break
                await asyncio.sleep(0.01)
            return log, old[:removed], flusher.pending
        finally:
            LogSegment.rename_to_deleted = real_rename  # type: ignore[method-assign]
            PartitionLog._write_checkpoints = real_write  # type: ignore[method-assign]
            flusher.close()

    log, gone, pending = asyncio.run(main())
    assert pending == 0 and not errors
    assert renamers and threading.get_ident() not in renamers
    assert threading.get_ident() not in writers  # roll flushes' and retention's checkpoints
    assert all(not p.exists() and not p.with_name(p.name + ".deleted").exists() for p in gone)
    assert _checkpoint(tmp_path / "t-0" / "log-start-offset-checkpoint") == log.log_start_offset
    assert offsets_of(read_all(log)) == list(range(log.log_start_offset, 36))


def test_a_closed_flusher_flushes_inline(tmp_path: Path) -> None:
    async def main() -> PartitionLog:
        flusher = RollFlusher(asyncio.get_running_loop(), lambda _p, _e: None)
        flusher.install()
        flusher.close()  # uninstalls itself: rolls fsync inline again
        log = open_log(tmp_path / "t-0", segment_bytes=600)
        fill(log, 6)
        return log

    log = asyncio.run(main())
    assert log.recovery_point == log.segments[-1].base_offset


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_loop_lag_is_how_late_the_timer_ran(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    mon = LoopLagMonitor(clock, 0.01, stall_log_s=1.0, log_interval_s=60.0)
    mon.start()
    clock.t += 0.01
    assert mon.tick() == 0.0
    clock.t += 0.01 + 0.05  # the loop was busy 50 ms past the due time
    assert mon.tick() == pytest.approx(0.05)
    assert mon.max_lag_s == pytest.approx(0.05)
    buckets = dict(mon.histogram.cumulative())
    assert buckets["0.025"] == 1 and buckets["0.05"] == 2 and mon.histogram.count == 2
    with caplog.at_level(logging.WARNING, logger="strom.observability"):
        clock.t += 0.01 + 2.0
        mon.tick()
        clock.t += 0.01 + 1.5  # within log_interval_s of the last line: counted, not logged
        mon.tick()
        clock.t += 61.0
        mon.tick()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "blocked for 2.000 s" in lines[0]
    assert "1 more stalls" in lines[1]
    assert mon.max_lag_s == pytest.approx(60.99)


def test_busy_lag_is_the_part_the_loop_thread_ran() -> None:
    wall, cpu = _Clock(), _Clock()
    mon = LoopLagMonitor(wall, 0.01, cpu=cpu)
    mon.start()
    # idle in epoll for the interval, then runnable but without a core for 30 ms: late, not busy
    wall.t += 0.04
    cpu.t += 0.0004
    assert mon.tick() == pytest.approx(0.03)
    # idle for the interval, then one 20 ms callback: all of the lag is the loop's own work
    wall.t += 0.03
    cpu.t += 0.02
    assert mon.tick() == pytest.approx(0.02)
    # busy the whole time (many callbacks, a GC pause): bounded by the lag itself
    wall.t += 0.07
    cpu.t += 0.07
    mon.tick()
    assert mon.busy_histogram is not None
    got = dict(mon.busy_histogram.cumulative())
    assert got["0.0005"] == 1 and got["0.025"] == 2 and got["0.1"] == 3
    assert mon.max_busy_lag_s == pytest.approx(0.06)
    assert mon.max_lag_s == pytest.approx(0.06)


def test_busy_lag_is_off_without_a_cpu_clock() -> None:
    mon = LoopLagMonitor(_Clock(), 0.01)
    mon.start()
    mon.tick()
    assert mon.busy_histogram is None and mon.max_busy_lag_s == 0.0


def test_own_lag_is_the_lag_less_the_wait_for_a_core() -> None:
    wall, waited = _Clock(), _Clock()
    mon = LoopLagMonitor(wall, 0.01, waited=waited)
    mon.start()
    wall.t += 0.04  # 30 ms late, 25 ms of it on a run queue: 5 ms the loop's own
    waited.t += 0.025
    assert mon.tick() == pytest.approx(0.03)
    wall.t += 0.012  # 2 ms late, waited 4 ms (partly before the due time): no own lag
    waited.t += 0.004
    mon.tick()
    assert mon.own_histogram is not None and mon.own_histogram.count == 2
    assert dict(mon.own_histogram.cumulative())["0.00025"] == 1
    assert mon.max_own_lag_s == pytest.approx(0.005)


def test_runqueue_wait_clock_reads_this_threads_schedstat() -> None:
    from strom.observability.loop_lag import runqueue_wait_clock

    clock = runqueue_wait_clock()
    if clock is None:
        pytest.skip("no /proc/self/task/<tid>/schedstat here")
    a = clock()
    sum(range(200_000))
    assert 0 <= a <= clock()


def test_runqueue_wait_clock_keeps_one_descriptor_and_closes_it_with_the_clock() -> None:
    import gc
    import os

    from strom.observability.loop_lag import runqueue_wait_clock

    def schedstat_fds() -> set[int]:
        """This process's descriptors open on a schedstat file (other threads of the test run
        open and close descriptors of their own meanwhile)."""
        out = set()
        for name in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{name}").endswith("/schedstat"):
                    out.add(int(name))
            except OSError:
                continue
        return out

    before = schedstat_fds()
    clock = runqueue_wait_clock()
    if clock is None:
        pytest.skip("no /proc/self/task/<tid>/schedstat here")
    readings = [clock() for _ in range(100)]
    assert readings == sorted(readings)  # one open file read again and again, never going back
    assert len(schedstat_fds() - before) == 1
    del clock
    gc.collect()
    assert schedstat_fds() - before == set()
