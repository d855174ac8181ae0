"""The cleaner and transactions (Kafka's LogCleaner rules), step by step, in the cleaner thread
and in the worker process: aborted data goes at the first cleaning, the marker once its data is
gone and delete.retention.ms has passed (with its .txnindex entry); a committed transaction's
records are compacted like others; a producer's last batch keeps its epoch and sequence."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.clock import ManualClock
from strom.config import LogConfig
from strom.log import PartitionLog
from strom.log.cleaner import DELETE_HORIZON_FLAG, LogCleaner
from strom.protocol.records import build_batch, build_control_batch, decode_batch_records, iter_batches

T0 = 1_700_000_000_000
RETAIN = 1000


def batches(log: PartitionLog) -> list[tuple[int, bool, bool, int, list[bytes]]]:
    """(offset, control, transactional, producer id, values) per batch."""
    data = log.read_bytes(log.log_start_offset, 1 << 30)
    out = []
    for pos, h in iter_batches(data):
        vals = [] if h.is_control else [r.value or b"" for r in decode_batch_records(data, pos, h)]
        out.append((h.base_offset, h.is_control, h.is_transactional, h.producer_id, vals))
    return out


def markers(log: PartitionLog) -> list[tuple[int, int, int]]:
    data = log.read_bytes(log.log_start_offset, 1 << 30)
    return [
        (h.base_offset, h.records_count, h.attributes & DELETE_HORIZON_FLAG)
        for _pos, h in iter_batches(data)
        if h.is_control
    ]


@pytest.mark.parametrize("use_process", [False, True])
def test_aborted_data_then_markers_go(tmp_path: Path, use_process: bool) -> None:
    clock = ManualClock(T0)
    cfg = LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.0, delete_retention_ms=RETAIN)
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, cfg, clock)
    cleaner = LogCleaner(tmp_path, clock, pause_every_bytes=0, use_process=use_process)

    def txn(
        pid: int, epoch: int, seq: int, vals: list[tuple[bytes, bytes]], commit: bool, bump: bool
    ) -> None:
        recs = [(k, v, [], clock.time_ms()) for k, v in vals]
        log.append_as_leader(
            build_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True), 0
        )
        marker = build_control_batch(pid, epoch + 1 if bump else epoch, commit, 0, clock.time_ms())
        log.append_as_leader(marker, 0, from_coordinator=True)

    def plain(k: bytes, v: bytes) -> None:
        log.append_as_leader(build_batch([(k, v, [], clock.time_ms())]), 0)

    def round_() -> None:
        plain(b"z", b"dirt")
        log.roll()
        log.update_high_watermark(log.log_end_offset)
        cleaner.clean_all([log])

    try:
        plain(b"k", b"old")  # 0
        txn(7, 0, 0, [(b"k", b"aborted")], commit=False, bump=False)  # 1, marker 2
        txn(8, 0, 0, [(b"k", b"committed-1")], commit=True, bump=True)  # 3, marker 4 (epoch 1)
        txn(8, 1, 0, [(b"k", b"committed-2")], commit=True, bump=True)  # 5, marker 6 (epoch 2)
        txn(9, 0, 0, [(b"j", b"aborted-9")], commit=False, bump=True)  # 7, marker 8 (epoch 1)
        assert len(log.collect_aborted(0, 100)) == 2
        round_()
        got = batches(log)
        values = [v for *_x, vals in got for v in vals]
        # aborted records gone; the aborted one did not shadow "old"... which committed-2 does
        assert b"aborted" not in values and b"aborted-9" not in values
        assert b"committed-2" in values and b"old" not in values and b"committed-1" not in values
        # all markers still there (data of each was seen in this pass, or it is its producer's last)
        assert [m[0] for m in markers(log)] == [2, 4, 6, 8]
        round_()  # no data left for markers 2 and 4 and 8: they get a delete horizon
        stamped = {off for off, _n, flag in markers(log) if flag}
        assert {2, 4} <= stamped and 6 not in stamped
        clock.advance(RETAIN + 1)
        round_()
        left = {off: n for off, n, _f in markers(log)}
        assert 2 not in left and 4 not in left  # gone
        assert left.get(6) == 1  # committed-2 still there
        assert left.get(8) == 0  # producer 9's last batch: kept empty, for its epoch
        assert log.collect_aborted(0, 100) == []  # entries went with their markers
        # producer state from the log alone
        log.close()
        for snap in (tmp_path / "t-0").glob("*.snapshot"):
            snap.unlink()
        log = PartitionLog.open(tmp_path / "t-0", "t", 0, cfg, clock)
        ps = log.producer_state.producers
        assert ps[9].producer_epoch == 1 and ps[8].producer_epoch == 2
        log.update_high_watermark(log.log_end_offset)
        assert log.last_stable_offset == log.high_watermark
    finally:
        log.close()
        cleaner.close()
