"""The cleaner's worker process and pacing: same output as in-thread cleaning, a dead or
stopped worker leaves no ``.cleaned`` files and the next round works, Kafka's Throttler."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from test_log_support import T0, read_all

from strom.clock import ManualClock
from strom.config import LogConfig
from strom.log import PartitionLog
from strom.log.cleaner import (
    NO_THROTTLE,
    CleanerAborted,
    CleanerWorker,
    CleanerWorkerError,
    LogCleaner,
    Throttler,
)
from strom.log.segment import CLEANED_SUFFIX
from strom.protocol.records import COMPRESSION_LZ4, COMPRESSION_NONE, build_batch


def make_log(path: Path, codec: int, segments: int = 4) -> PartitionLog:
    log = PartitionLog.open(
        path,
        path.name.rsplit("-", 1)[0],
        0,
        LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.01, index_interval_bytes=256),
        ManualClock(T0),
    )
    i = 0
    for _ in range(segments):
        for _ in range(20):
            recs = [
                (b"k%d" % ((i + j) % 37), None if (i + j) % 11 == 0 else b"v%d" % (i + j), [], T0 + i)
                for j in range(10)
            ]
            log.append_as_leader(build_batch(recs, compression=codec), leader_epoch=0)  # type: ignore[arg-type]
            i += 10
        log.roll()
    log.update_high_watermark(log.log_end_offset)
    return log


def files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if not p.name.endswith(".snapshot")}


@pytest.mark.parametrize("codec", [COMPRESSION_NONE, COMPRESSION_LZ4])
def test_process_and_thread_write_identical_segments(tmp_path: Path, codec: int) -> None:
    logs = {}
    for mode in ("thread", "process"):
        log = make_log(tmp_path / mode / "t-0", codec)
        cleaner = LogCleaner(tmp_path / mode, log.clock, pause_every_bytes=0, use_process=mode == "process")  # type: ignore[arg-type]
        try:
            stats = cleaner.clean_once([log])
        finally:
            cleaner.close()
        assert (
            stats is not None and stats.segments_swapped == 4 and stats.records_written < stats.records_read
        )
        assert stats.map_bytes_read > 0 and stats.bytes_written > 0
        logs[mode] = log
    assert read_all(logs["thread"]) == read_all(logs["process"])
    thread_files = {k: v for k, v in files(tmp_path / "thread" / "t-0").items() if ".deleted" not in k}
    process_files = {k: v for k, v in files(tmp_path / "process" / "t-0").items() if ".deleted" not in k}
    assert thread_files == process_files
    seg = logs["process"].log_segments[0]
    assert seg.max_timestamp_so_far >= T0 and seg.rolling_based_timestamp is not None
    for log in logs.values():
        log.close()


def test_dead_worker_fails_the_round_and_the_next_round_cleans(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", COMPRESSION_NONE)
    cleaner = LogCleaner(tmp_path, log.clock, pause_every_bytes=0, use_process=True)  # type: ignore[arg-type]
    worker = cleaner.worker
    assert worker is not None
    real_request = worker.request
    calls = {"n": 0}

    def dying_request(
        obj: dict[str, object], fds: list[int], stop: threading.Event | None
    ) -> dict[str, object]:
        calls["n"] += 1
        if obj["op"] == "group" and calls["n"] == 2:
            assert worker._proc is not None
            worker._proc.kill()
            worker._proc.wait()
        return real_request(obj, fds, stop)  # type: ignore[arg-type]

    worker.request = dying_request  # type: ignore[method-assign]
    with pytest.raises(CleanerWorkerError):
        cleaner.clean_once([log])
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith(CLEANED_SUFFIX)]
    worker.request = real_request  # type: ignore[method-assign]
    stats = cleaner.clean_once([log])
    cleaner.close()
    assert stats is not None and stats.segments_swapped == 4
    assert not worker.alive
    log.close()


def test_stop_kills_a_busy_worker(tmp_path: Path) -> None:
    log = make_log(tmp_path / "t-0", COMPRESSION_NONE)
    # a crawl: 1 kB/s, so the worker is still mapping when stop is set
    cleaner = LogCleaner(tmp_path, log.clock, use_process=True, io_max_bytes_per_second=1000.0)  # type: ignore[arg-type]
    cleaner.cleaner.throttler.check_interval_s = 0.0
    cleaner.start_worker()
    timer = threading.Timer(0.5, cleaner.stop.set)
    timer.start()
    with pytest.raises(CleanerAborted):
        cleaner.clean_once([log])
    timer.join()
    assert cleaner.worker is not None and not cleaner.worker.alive
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith(CLEANED_SUFFIX)]
    cleaner.close()
    log.close()


def test_worker_reports_errors() -> None:
    worker = CleanerWorker()
    try:
        with pytest.raises(CleanerWorkerError, match="died"):
            worker.request({"op": "group"}, [], None)  # a fresh process would have no offset map
        worker.ensure_started()
        with pytest.raises(CleanerWorkerError, match="unknown request"):
            worker.request({"op": "nonsense"}, [], None)
        r, w = os.pipe()
        try:
            assert worker.request({"op": "reset"}, [r], None)["stats"]["bytes_read"] == 0
        finally:
            os.close(r)
            os.close(w)
    finally:
        worker.close()


def test_throttler_sleeps_to_the_desired_rate() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    t = Throttler(1000.0, check_interval_s=0.3, now=lambda: now[0], sleep=sleep)
    now[0] = 0.1
    t.maybe_throttle(500)  # within the check interval: no decision yet
    assert slept == []
    now[0] = 0.5
    t.maybe_throttle(500)  # 1000 bytes in 0.5 s at 1000 B/s: sleep 0.5 s
    assert slept == [pytest.approx(0.5)]
    now[0] += 1.0
    t.maybe_throttle(100)  # 100 B in 1 s: under the rate
    assert len(slept) == 1
    off = Throttler(NO_THROTTLE, now=lambda: now[0], sleep=sleep)
    assert not off.enabled
    off.maybe_throttle(10**12)
    assert len(slept) == 1
