"""Retention (time, size, log start offset), delayed deletion, checkpoints, DeleteRecords."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_log_support import T0, batch, offsets_of, open_log, read_all

from strom.clock import ManualClock
from strom.log import OffsetOutOfRangeError, PartitionLog
from strom.log.errors import KafkaStorageError, PolicyViolationError

HOUR = 3_600_000


def fill_segments(log: PartitionLog, n_segments: int, per_segment: int = 3, ts: int = T0,
                  hw: int | None = None) -> None:
    """``n_segments`` closed segments of ``per_segment`` one-record batches each, plus an empty
    active segment; the high watermark moves to ``hw`` (default: the log end; it never moves
    back)."""
    for _ in range(n_segments):
        for _ in range(per_segment):
            log.append_as_leader(batch(1, ts=ts), leader_epoch=0)
        log.roll()
    log.update_high_watermark(log.log_end_offset if hw is None else hw)


def files(d: Path, suffix: str) -> list[str]:
    return sorted(n for n in os.listdir(d) if n.endswith(suffix))


def test_time_retention_deletes_old_closed_segments_oldest_first(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = open_log(tmp_path / "t-0", clock, retention_ms=HOUR, file_delete_delay_ms=1000)
    fill_segments(log, 2, ts=T0)  # offsets 0..5: old
    fill_segments(log, 2, ts=T0 + 2 * HOUR)  # offsets 6..11: newer
    clock.advance(HOUR)
    assert log.delete_old_segments() == 0  # by record time: exactly an hour is not older
    clock.advance(1)  # the first two segments are now > 1h old, the others in the future
    assert log.delete_old_segments() == 2
    assert log.log_start_offset == 6
    assert [s.base_offset for s in log.segments] == [6, 9, 12]
    assert offsets_of(read_all(log)) == list(range(6, 12))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 1000)
    # renamed at once, unlinked after file.delete.delay.ms
    assert len(files(log.directory, ".deleted")) == 6
    assert log.delete_expired_segments() == 0
    clock.advance(1000)
    assert log.delete_expired_segments() == 2
    assert files(log.directory, ".deleted") == []
    log.close()


def test_active_segment_is_never_deleted(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = open_log(tmp_path / "t-0", clock, retention_ms=1, retention_bytes=1)
    for _ in range(5):
        log.append_as_leader(batch(2), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    clock.advance(10 * HOUR)
    assert log.delete_old_segments() == 0
    assert offsets_of(read_all(log)) == list(range(10))
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() == 1
    assert log.log_start_offset == 10 and log.log_end_offset == 10
    assert len(log.segments) == 1
    log.close()


def test_segments_above_high_watermark_are_kept(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = open_log(tmp_path / "t-0", clock, retention_ms=1)
    fill_segments(log, 3, hw=4)  # only segment [0,3) is wholly below the HW
    clock.advance(HOUR)
    assert log.delete_old_segments() == 1
    assert log.log_start_offset == 3
    log.close()


def test_size_retention_keeps_the_log_under_retention_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", retention_bytes=-1)
    fill_segments(log, 5)
    seg_size = log.segments[0].size
    assert log.delete_old_segments() == 0  # -1: unlimited
    log.update_config(log.config.__class__(**{**log.config.__dict__, "retention_bytes": 2 * seg_size + 5}))
    # Kafka's rule: a segment goes only if the log stays at or above retention.bytes without it
    assert log.delete_old_segments() == 2
    assert 0 < log.size_bytes - (2 * seg_size + 5) < seg_size
    assert log.log_start_offset == 6
    assert offsets_of(read_all(log)) == list(range(6, 15))
    log.close()


def test_compact_only_policy_ignores_time_and_size(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = open_log(tmp_path / "t-0", clock, retention_ms=1, retention_bytes=1, cleanup_policy="compact")
    fill_segments(log, 3)
    clock.advance(HOUR)
    assert log.delete_old_segments() == 0
    log.update_config(log.config.__class__(**{**log.config.__dict__, "cleanup_policy": "compact,delete"}))
    assert log.delete_old_segments() == 3
    log.close()


def test_log_start_offset_survives_restart_clean_and_unclean(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    d = tmp_path / "t-0"
    log = open_log(d, clock, retention_ms=HOUR)
    fill_segments(log, 4)
    clock.advance(2 * HOUR)
    log.append_as_leader(batch(1, ts=clock.time_ms()), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() == 4
    assert log.log_start_offset == 12
    log.close()
    log = open_log(d, clock, retention_ms=HOUR)
    assert log.log_start_offset == 12
    assert files(d, ".deleted") == []  # close finished the pending deletes
    assert offsets_of(read_all(log)) == [12]
    # DeleteRecords then a crash (no clean shutdown): the checkpoint is already on disk
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_records(13) == 13
    log.close_without_flush()
    log = open_log(d, clock, retention_ms=HOUR)
    assert log.log_start_offset == 13
    log.close()


def test_pending_deleted_files_are_removed_by_recovery(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    d = tmp_path / "t-0"
    log = open_log(d, clock, retention_ms=HOUR, file_delete_delay_ms=60_000)
    fill_segments(log, 3)
    clock.advance(2 * HOUR)
    assert log.delete_old_segments() == 3
    assert files(d, ".log.deleted")
    log.close_without_flush()  # crash before the delayed unlink
    log = open_log(d, clock, retention_ms=HOUR)
    assert files(d, ".deleted") == []
    assert log.log_start_offset == 9 and log.log_end_offset == 9
    log.close()


def test_reader_of_removed_segment_keeps_working_until_unlinked(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = open_log(tmp_path / "t-0", clock, retention_ms=HOUR, file_delete_delay_ms=5000)
    fill_segments(log, 3)
    fetched = log.read(0, 1 << 20)  # a fetch response holding file regions
    expected = fetched.read_bytes()
    clock.advance(2 * HOUR)
    assert log.delete_old_segments() == 3
    assert fetched.read_bytes() == expected  # fds still open, files renamed
    dups = [os.dup(r.fd) for r in fetched.regions]  # the documented rule for slow writers
    clock.advance(5000)
    log.delete_expired_segments()
    assert (
        b"".join(os.pread(fd, r.length, r.position) for fd, r in zip(dups, fetched.regions, strict=True))
        == expected
    )
    for fd in dups:
        os.close(fd)
    log.close()


def test_producer_snapshots_below_first_segment_are_pruned(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = open_log(tmp_path / "t-0", clock, retention_ms=HOUR)
    fill_segments(log, 4)
    snaps = sorted(files(log.directory, ".snapshot"))
    assert len(snaps) == 4
    clock.advance(2 * HOUR)
    log.delete_old_segments()
    first = log.segments[0].base_offset
    assert all(int(n.split(".")[0]) >= first for n in files(log.directory, ".snapshot"))
    log.close()


# ---------------------------------------------------------------------------- DeleteRecords


def test_delete_records_moves_start_and_deletes_covered_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    fill_segments(log, 4)  # segments at 0, 3, 6, 9; active at 12
    assert log.delete_records(7) == 7
    assert log.log_start_offset == 7
    assert [s.base_offset for s in log.segments] == [6, 9, 12]  # [6,9) holds 7: kept
    data = read_all(log)
    assert [o for o in offsets_of(data) if o >= 7] == list(range(7, 12))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(6, 100)
    assert log.delete_records(3) == 7  # backwards: no-op
    assert log.delete_records(-1) == 12  # -1: the high watermark
    assert [s.base_offset for s in log.segments] == [12]
    log.close()


def test_delete_records_beyond_high_watermark_is_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    fill_segments(log, 2, hw=4)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(5)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(-2)
    assert log.delete_records(4) == 4
    log.close()


def test_delete_records_on_compact_only_topic_is_a_policy_violation(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", cleanup_policy="compact")
    fill_segments(log, 1)
    with pytest.raises(PolicyViolationError) as e:
        log.delete_records(1)
    assert e.value.error_code == 44
    log.close()


def test_failed_write_is_truncated_back_to_the_last_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(2), leader_epoch=0)
    seg = log.log_segments[-1]
    good = seg.size
    real_pwrite = os.pwrite

    def torn(fd: int, data: bytes | memoryview, pos: int) -> int:
        real_pwrite(fd, bytes(data)[:7], pos)  # part of the batch lands, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", torn)
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(batch(3), leader_epoch=0)
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    assert os.fstat(seg.fd).st_size == good == seg.size
    info = log.append_as_leader(batch(1), leader_epoch=0)
    assert info.first_offset == 2
    log.update_high_watermark(log.log_end_offset)
    assert offsets_of(read_all(log)) == [0, 1, 2]
    log.close_without_flush()
    log = open_log(tmp_path / "t-0")
    assert offsets_of(read_all(log)) == [0, 1, 2]
    log.close()


def test_empty_cleanup_policy_neither_deletes_nor_allows_delete_records(tmp_path: Path) -> None:
    """cleanup.policy="" (Kafka 4): retention.ms/retention.bytes do not apply, DeleteRecords is a
    policy violation as on a compact-only topic."""
    log = open_log(tmp_path / "t-0", cleanup_policy="", retention_ms=0, retention_bytes=0)
    assert log.config.cleanup_policies == frozenset()
    fill_segments(log, 4)
    segments = len(log.segments)
    assert log.delete_old_segments() == 0 and len(log.segments) == segments
    with pytest.raises(PolicyViolationError) as e:
        log.delete_records(1)
    assert e.value.error_code == 44
    log.close()
