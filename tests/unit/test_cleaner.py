"""Log compaction: latest value per key, tombstones, compression, offsets, producer state,
dirty-ratio selection, compaction lag, swap crash recovery, checkpoints."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_log_support import T0, open_log, read_all

from strom.clock import ManualClock
from strom.config import LogConfig
from strom.log import InvalidRecordError, PartitionLog
from strom.log.cleaner import CLEANER_CHECKPOINT_FILE, CleanerCheckpoint, LogCleaner, cleanable_range
from strom.log.segment import CLEANED_SUFFIX, SWAP_SUFFIX, LogSegment
from strom.protocol.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_ZSTD,
    build_batch,
    decode_records,
    iter_batches,
    verify_crc,
)

HOUR = 3_600_000
DAY = 24 * HOUR


def open_compacted(path: Path, clock: ManualClock | None = None, **cfg: object) -> PartitionLog:
    """A compacted log; its topic is the directory name without ``-<partition>``."""
    cfg.setdefault("cleanup_policy", "compact")
    cfg.setdefault("min_cleanable_dirty_ratio", 0.01)
    topic = path.name.rsplit("-", 1)[0]
    return PartitionLog.open(path, topic, 0, LogConfig(**cfg), clock or ManualClock(T0))  # type: ignore[arg-type]


def put(log: PartitionLog, *kvs: tuple[str, str | None], ts: int = T0, **kw: object) -> int:
    records = [(k.encode(), None if v is None else v.encode(), [], ts) for k, v in kvs]
    info = log.append_as_leader(build_batch(records, **kw), leader_epoch=0)  # type: ignore[arg-type]
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset


def view(log: PartitionLog) -> list[tuple[int, str, str | None]]:
    out = []
    for r in decode_records(read_all(log)):
        assert r.key is not None
        out.append((r.offset, r.key.decode(), None if r.value is None else r.value.decode()))
    return out


def latest(log: PartitionLog) -> dict[str, str | None]:
    return {k: v for _, k, v in view(log)}


_MODE = {"use_process": False}


@pytest.fixture(autouse=True, params=["thread", "process"])
def cleaner_mode(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test that cleans through :func:`clean` runs with the work in the calling thread and
    in the worker process (the broker's default)."""
    _MODE["use_process"] = request.param == "process"
    yield request.param
    _MODE["use_process"] = False


def clean(log: PartitionLog, clock: ManualClock | None = None) -> LogCleaner:
    cleaner = LogCleaner(
        log.directory.parent,
        clock or log.clock,  # type: ignore[arg-type]
        pause_every_bytes=0,
        use_process=_MODE["use_process"],
    )
    try:
        cleaner.clean_all([log])
    finally:
        cleaner.close()
    return cleaner


def test_keeps_latest_record_per_key_and_offsets(tmp_path: Path) -> None:
    log = open_compacted(tmp_path / "t-0")
    put(log, ("a", "1"), ("b", "1"))
    put(log, ("a", "2"))
    log.roll()
    put(log, ("c", "1"), ("b", "2"))
    log.roll()
    put(log, ("a", "3"))  # active segment: never cleaned
    before = latest(log)
    clean(log)
    assert view(log) == [(2, "a", "2"), (3, "c", "1"), (4, "b", "2"), (5, "a", "3")]
    assert latest(log) == before
    data = read_all(log)
    for pos, h in iter_batches(data):
        verify_crc(data, pos, h)
    log.close()


def test_active_segment_is_never_touched(tmp_path: Path) -> None:
    log = open_compacted(tmp_path / "t-0")
    for i in range(10):
        put(log, ("k", str(i)))
    active = log.log_segments[-1]
    size = active.size
    clean(log)
    assert view(log) == [(i, "k", str(i)) for i in range(10)]
    assert log.log_segments[-1] is active and active.size == size


def test_offsets_preserved_and_strictly_increasing_across_restart(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_compacted(d)
    for i in range(30):
        put(log, (f"k{i % 4}", str(i)), (f"x{i}", str(i)))
        if i % 5 == 4:
            log.roll()
    log.roll()
    expect = latest(log)
    clean(log)
    offsets = [o for o, _, _ in view(log)]
    assert offsets == sorted(set(offsets))
    assert latest(log) == expect
    log.close()
    log = open_compacted(d)
    assert latest(log) == expect
    assert [o for o, _, _ in view(log)] == offsets
    assert log.log_end_offset == 60
    log.close()


@pytest.mark.parametrize("codec", [COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_ZSTD])
def test_compression_is_retained(tmp_path: Path, codec: int) -> None:
    log = open_compacted(tmp_path / "t-0")
    put(log, ("a", "1"), ("b", "1"), ("c", "1"), compression=codec)
    put(log, ("a", "2"), compression=codec)
    log.roll()
    clean(log)
    data = read_all(log)
    headers = [h for _, h in iter_batches(data)]
    assert [h.compression for h in headers] == [codec, codec]
    assert headers[0].base_offset == 0 and headers[0].last_offset_delta == 2 and headers[0].records_count == 2
    assert view(log) == [(1, "b", "1"), (2, "c", "1"), (3, "a", "2")]
    for pos, h in iter_batches(data):
        verify_crc(data, pos, h)


def test_tombstone_lifecycle(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = open_compacted(tmp_path / "t-0", clock, delete_retention_ms=HOUR)
    put(log, ("a", "1"), ("b", "1"))
    put(log, ("a", None))  # tombstone for a
    log.roll()
    put(log, ("c", "1"))
    log.roll()
    cleaner = clean(log)
    # first clean: older 'a' gone, tombstone kept (it was dirty; consumers must see it)
    assert view(log) == [(1, "b", "1"), (2, "a", None), (3, "c", "1")]
    clock.advance(HOUR - 1)
    put(log, ("d", "1"))
    log.roll()
    cleaner.clean_all([log])
    assert (2, "a", None) in view(log)  # not older than delete.retention.ms yet
    clock.advance(2)
    put(log, ("e", "1"))
    log.roll()
    cleaner.clean_all([log])
    assert [k for _, k, _ in view(log)] == ["b", "c", "d", "e"]


def test_null_key_rejected_on_compacted_topic_only(tmp_path: Path) -> None:
    log = open_compacted(tmp_path / "c-0")
    bad = build_batch([(b"k", b"v", [], T0), (None, b"v", [], T0)])
    with pytest.raises(InvalidRecordError) as e:
        log.append_as_leader(bad, leader_epoch=0)
    assert e.value.error_code == 87
    assert log.log_end_offset == 0
    plain = open_log(tmp_path / "d-0")
    assert plain.append_as_leader(bad, leader_epoch=0).last_offset == 1


def test_producer_last_batch_kept_empty_and_idempotence_survives(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_compacted(d)
    put(log, ("a", "1"), producer_id=7, producer_epoch=0, base_sequence=0)
    put(log, ("b", "1"), producer_id=7, producer_epoch=0, base_sequence=1)
    log.roll()
    put(log, ("a", "2"), ("b", "2"))  # supersedes every record of producer 7
    log.roll()
    clean(log)
    headers = [h for _, h in iter_batches(read_all(log))]
    p7 = [h for h in headers if h.producer_id == 7]
    assert len(p7) == 1 and p7[0].records_count == 0 and p7[0].base_sequence == 1 and p7[0].base_offset == 1
    assert view(log) == [(2, "a", "2"), (3, "b", "2")]
    log.close_without_flush()
    log = open_compacted(d)
    entry = log.producer_state.last_entry(7)
    assert entry is not None and entry.last_seq == 1
    dup = log.append_as_leader(
        build_batch([(b"b", b"1", [], T0)], producer_id=7, producer_epoch=0, base_sequence=1), leader_epoch=0
    )
    assert dup.duplicate
    nxt = log.append_as_leader(
        build_batch([(b"c", b"1", [], T0)], producer_id=7, producer_epoch=0, base_sequence=2), leader_epoch=0
    )
    assert not nxt.duplicate


def test_transactional_batches_kept_intact(tmp_path: Path) -> None:
    log = open_compacted(tmp_path / "t-0")
    put(log, ("a", "t1"), producer_id=3, producer_epoch=0, base_sequence=0, transactional=True)
    put(log, ("a", "2"))
    log.roll()
    clean(log)
    assert view(log) == [(0, "a", "t1"), (1, "a", "2")]


def test_dirty_ratio_selects_filthiest_and_respects_threshold(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    cleaner = LogCleaner(tmp_path, clock, pause_every_bytes=0)
    a = open_compacted(tmp_path / "a-0", clock, min_cleanable_dirty_ratio=0.5)
    b = open_compacted(tmp_path / "b-0", clock, min_cleanable_dirty_ratio=0.5)
    for i in range(30):
        put(a, (f"k{i}", str(i)))  # distinct keys: a stays big after cleaning
    a.roll()
    for i in range(10):
        put(b, ("k", str(i)))  # one key: b shrinks to one record
    b.roll()
    cleaner.clean_all([a, b])
    # both fully cleaned once; now make b dirtier than a
    for i in range(2):
        put(a, (f"n{i}", "x"))
    a.roll()
    for i in range(20):
        put(b, (f"n{i}", "x"))
    b.roll()
    ra = cleanable_range(a, cleaner.checkpoint.get(("a", 0)), clock.time_ms())
    rb = cleanable_range(b, cleaner.checkpoint.get(("b", 0)), clock.time_ms())
    assert ra is not None and rb is not None and rb.dirty_ratio > 0.5 > ra.dirty_ratio
    chosen = cleaner.grab_filthiest([a, b])
    assert chosen is not None and chosen.log is b
    cleaner.clean_once([a, b])
    assert cleaner.grab_filthiest([a, b]) is None  # a is below min.cleanable.dirty.ratio
    # checkpoint file in Kafka's format, and it survives a new cleaner instance
    text = (tmp_path / CLEANER_CHECKPOINT_FILE).read_text().splitlines()
    assert text[0] == "0" and text[1] == "2" and "b 0 " + str(b.segments[-1].base_offset) in text
    assert CleanerCheckpoint(tmp_path).get(("b", 0)) == b.segments[-1].base_offset


def test_min_compaction_lag_holds_back_recent_segments(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = open_compacted(tmp_path / "t-0", clock, min_compaction_lag_ms=HOUR)
    put(log, ("k", "1"), ts=T0)
    log.roll()
    put(log, ("k", "2"), ts=T0 + HOUR)
    log.roll()
    put(log, ("k", "3"), ts=T0 + HOUR)
    log.roll()
    clock.advance(HOUR // 2)
    clean(log, clock)
    # only the first segment is old enough; nothing in it is superseded within the cleanable part
    assert [v for _, _, v in view(log)] == ["1", "2", "3"]
    clock.advance(2 * HOUR)
    clean(log, clock)
    assert [v for _, _, v in view(log)] == ["3"]


def test_max_compaction_lag_forces_cleaning_below_dirty_ratio(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    cleaner = LogCleaner(tmp_path, clock, pause_every_bytes=0)
    log = open_compacted(tmp_path / "t-0", clock, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=HOUR)
    for i in range(50):
        put(log, (f"k{i}", "x"), ts=T0)
    log.roll()
    cleaner.clean_all([log])
    put(log, ("k1", "y"), ts=T0)
    log.roll()
    assert cleaner.grab_filthiest([log]) is None  # tiny dirty ratio
    clock.advance(HOUR + 1)
    chosen = cleaner.grab_filthiest([log])
    assert chosen is not None and chosen.needs_compaction_now
    cleaner.clean_once([log])
    assert ("k1", "x") not in [(k, v) for _, k, v in view(log)]


def test_max_compaction_lag_rolls_the_active_segment(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = open_compacted(tmp_path / "t-0", clock, max_compaction_lag_ms=HOUR)
    put(log, ("k", "1"), ts=T0)
    clock.advance(HOUR + 1)
    put(log, ("k", "2"), ts=clock.time_ms())
    assert len(log.segments) == 2


def test_small_segments_are_grouped(tmp_path: Path) -> None:
    log = open_compacted(tmp_path / "t-0", segment_bytes=100_000)
    for i in range(20):
        put(log, (f"k{i}", "v"))
        log.roll()
    assert len(log.segments) == 21
    clean(log)
    assert len(log.segments) == 2
    assert [k for _, k, _ in view(log)] == [f"k{i}" for i in range(20)]


def test_compact_delete_policy_runs_both(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = open_compacted(tmp_path / "t-0", clock, cleanup_policy="compact,delete", retention_ms=DAY)
    put(log, ("a", "1"))
    put(log, ("a", "2"))
    log.roll()
    clean(log, clock)
    assert view(log) == [(1, "a", "2")]
    clock.advance(2 * DAY)
    put(log, ("b", "1"), ts=clock.time_ms())
    log.roll()
    assert log.delete_old_segments() == 1
    assert view(log) == [(2, "b", "1")]


def test_swap_removed_by_retention_meanwhile_is_aborted(tmp_path: Path) -> None:
    log = open_compacted(tmp_path / "t-0", cleanup_policy="compact,delete")
    put(log, ("a", "1"))
    put(log, ("a", "2"))
    log.roll()
    old = log.log_segments[0]
    cfg = log.config
    new = LogSegment.open(
        log.directory,
        0,
        clock=log.clock,
        file_suffix=CLEANED_SUFFIX,
        index_interval_bytes=cfg.index_interval_bytes,
    )
    new.recover()
    log.delete_records(2)  # retention takes the segment first
    assert not log.replace_segments(new, [old])
    new.delete()
    assert not any(n.endswith(CLEANED_SUFFIX) for n in os.listdir(log.directory))


@pytest.mark.parametrize("crash_at", ["before_swap", "after_swap_rename", "after_old_renamed"])
def test_interrupted_swap_is_discarded_or_completed_on_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_at: str
) -> None:
    """Simulate a crash at each step of the swap by raising at the crash point, then reopening
    the directory without a clean shutdown."""
    import strom.log.local_log as local_log_mod
    import strom.log.partition_log as plog_mod

    class Crash(BaseException):
        pass

    def crash_point(name: str) -> None:
        if name == "cleaner." + crash_at:
            raise Crash

    monkeypatch.setattr(local_log_mod, "crash_point", crash_point)
    monkeypatch.setattr(plog_mod, "crash_point", crash_point)
    d = tmp_path / "t-0"
    log = open_compacted(d)
    for i in range(12):
        put(log, (f"k{i % 3}", str(i)))
        if i % 4 == 3:
            log.roll()
    expect = latest(log)
    full = view(log)
    with pytest.raises(Crash):
        clean(log)
    log.close_without_flush()
    monkeypatch.undo()
    names = os.listdir(d)
    if crash_at == "before_swap":
        assert any(n.endswith(".log" + CLEANED_SUFFIX) for n in names)
    else:
        assert any(n.endswith(".log" + SWAP_SUFFIX) for n in names)
    log = open_compacted(d)
    assert not any(n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, ".deleted")) for n in os.listdir(d))
    assert latest(log) == expect
    got = view(log)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets))
    if crash_at == "before_swap":
        assert got == full  # discarded: the old segments are intact
    else:
        assert len(got) < len(full)  # completed
    assert log.log_end_offset == 12
    clean(log)  # and it can be cleaned again
    assert latest(log) == expect
    log.close()


def test_config_update_to_compact_then_clean_removes_null_keys(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(build_batch([(None, b"x", [], T0), (b"k", b"1", [], T0)]), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    log.roll()
    log.update_config(LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.0))
    clean(log)
    assert [(r.offset, r.key) for r in decode_records(read_all(log))] == [(1, b"k")]
