"""PartitionLog: append/read, offsets, segments, timestamps, validation errors, idempotence."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from test_log_support import T0, batch, batch_bases, offsets_of, open_log, read_all

from strom.clock import ManualClock
from strom.log import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    PartitionLog,
    RecordListTooLargeError,
)
from strom.protocol.records import build_control_batch, decode_records, iter_batches, parse_header, verify_crc


def fill(log: PartitionLog, n_batches: int, per_batch: int = 3, size: int = 10) -> list[tuple[int, int]]:
    out = []
    for i in range(n_batches):
        info = log.append_as_leader(batch(per_batch, size=size, tag=i, ts=T0 + 10 * i), leader_epoch=5)
        out.append((info.first_offset, info.last_offset))
    return out


def test_append_assigns_contiguous_offsets_and_stamps_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    ranges = fill(log, 4)
    assert ranges == [(0, 2), (3, 5), (6, 8), (9, 11)]
    assert log.log_end_offset == 12
    assert log.high_watermark == 0  # the caller moves it
    data = read_all(log)
    assert offsets_of(data) == list(range(12))
    for pos, h in iter_batches(data):
        assert h.partition_leader_epoch == 5
        verify_crc(data, pos, h)  # patching base offset / epoch keeps the CRC valid
    values = [r.value for r in decode_records(data)]
    assert values[4] is not None and values[4].startswith(b"1:1:")


def test_round_trip_across_many_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=400, index_interval_bytes=100)
    fill(log, 30)
    assert len(log.segments) > 5
    bases = [s.base_offset for s in log.segments]
    assert bases == sorted(bases) and bases[0] == 0
    for s in log.segments:
        assert s.size <= 400
        assert s.path.name == f"{s.base_offset:020d}.log"
        assert s.path.with_suffix(".index").exists() and s.path.with_suffix(".timeindex").exists()
    assert offsets_of(read_all(log)) == list(range(90))
    on_disk = sum(os.path.getsize(s.path) for s in log.segments)
    assert log.size_bytes == sum(s.size for s in log.segments) == on_disk
    # a read from every offset starts with the batch containing it
    for off in range(90):
        got = batch_bases(log.read_bytes(off, 1))
        assert got == [(off - off % 3, off - off % 3 + 2)]


def test_read_from_middle_of_batch_returns_whole_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    fill(log, 3, per_batch=10)
    data = log.read_bytes(15, 1 << 20)
    assert batch_bases(data) == [(10, 19), (20, 29)]


def test_max_bytes_cuts_at_batch_boundaries(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", index_interval_bytes=64)
    fill(log, 10)
    one = log.read(0, 1 << 20).regions[0].length // 10  # all batches have the same size
    for k in range(1, 10):
        fd = log.read(0, one * k + one // 2)
        assert fd.size == one * k
        assert batch_bases(log.read_bytes(0, one * k + one // 2)) == [(3 * i, 3 * i + 2) for i in range(k)]
    # smaller than one batch: min_one_message decides
    assert batch_bases(log.read_bytes(3, 10)) == [(3, 5)]
    assert log.read(3, 10, min_one_message=False).size == 0
    assert log.read(3, 0, min_one_message=False).regions == []


def test_read_spans_segments_and_respects_max_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    fill(log, 12)
    fd = log.read(0, 1 << 20)
    assert len(fd.regions) == len(log.segments)
    assert fd.size == log.size_bytes
    one = log.read(0, 1).size
    fd = log.read(0, one * 5)
    assert fd.size == one * 5 and len(fd.regions) > 1


def test_max_offset_high_watermark_cutoff(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    fill(log, 10)  # 30 offsets, batches of 3
    log.update_high_watermark(12)
    assert log.high_watermark == 12
    data = log.read_bytes(0, 1 << 20, max_offset=log.high_watermark)
    assert offsets_of(data) == list(range(12))
    # a high watermark inside a batch excludes that batch (its tail is not committed)
    data = log.read_bytes(0, 1 << 20, max_offset=13)
    assert offsets_of(data) == list(range(12))
    data = log.read_bytes(7, 1 << 20, max_offset=12)
    assert offsets_of(data) == list(range(6, 12))
    # at or past the HW but within the log: empty, not an error; min_one_message does not override
    assert log.read(12, 1 << 20, max_offset=12).size == 0
    assert log.read(20, 1 << 20, max_offset=12).size == 0
    assert log.read(10, 1 << 20, max_offset=11).size == 0
    log.update_high_watermark(10_000)
    assert log.high_watermark == 30


def test_fetch_offset_range(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    assert log.read(0, 100).regions == []  # empty log, offset == LEO
    fill(log, 2)
    assert log.read(6, 100).size == 0
    with pytest.raises(OffsetOutOfRangeError) as ei:
        log.read(7, 100)
    assert ei.value.error_code == 1
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_regions_work_with_sendfile(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    fill(log, 8)
    fd = log.read(0, 1 << 20)
    out = tmp_path / "out"
    with open(out, "wb") as f:
        for r in fd.regions:
            sent = 0
            while sent < r.length:
                sent += os.sendfile(f.fileno(), r.fd, r.position + sent, r.length - sent)
    assert out.read_bytes() == fd.read_bytes() == read_all(log)


def test_index_lookup_correctness(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", index_interval_bytes=150)
    fill(log, 40)
    seg = log.log_segments[0]
    entries = seg.offset_index.entries
    assert len(entries) > 5
    data = seg.read_batch(0, parse_header(os.pread(seg.fd, 61, 0)))
    assert data  # sanity
    for off, pos in entries:
        h = parse_header(os.pread(seg.fd, 61, pos))
        assert h.last_offset == off  # each entry points at the start of the batch it names
    for target in range(120):
        off, pos = seg.offset_index.lookup(target)
        assert off <= target or (off, pos) == (0, 0)
        found = seg.translate_offset(target)
        assert found is not None
        assert found[1].base_offset <= target <= found[1].last_offset
        assert found[0] >= pos
    # gaps between entries respect index.interval.bytes
    positions = [p for _, p in entries]
    one = log.read(0, 1).size
    assert all(b - a <= 150 + one for a, b in zip([0, *positions], positions, strict=False))


def test_time_index_and_offset_for_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=500, index_interval_bytes=100)
    # batch i: 3 records with timestamps T0+10i, +1, +2
    fill(log, 20)
    seg = log.log_segments[0]
    ts = [t for t, _ in seg.time_index.entries]
    assert ts == sorted(set(ts)) and len(ts) >= 1
    assert log.offset_for_timestamp(0) == (0, T0)
    assert log.offset_for_timestamp(T0) == (0, T0)
    assert log.offset_for_timestamp(T0 + 1) == (1, T0 + 1)
    assert log.offset_for_timestamp(T0 + 3) == (3, T0 + 10)  # first record >= ts
    assert log.offset_for_timestamp(T0 + 125) == (39, T0 + 130)
    assert log.offset_for_timestamp(T0 + 192) == (59, T0 + 192)
    assert log.offset_for_timestamp(T0 + 193) is None
    for i in range(20):
        for d in range(3):
            assert log.offset_for_timestamp(T0 + 10 * i + d) == (3 * i + d, T0 + 10 * i + d)
    assert log.max_timestamp_offset() == (59, T0 + 192)


def test_max_timestamp_offset_out_of_order(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    assert log.max_timestamp_offset() == (-1, -1)
    log.append_as_leader(batch(3, ts=T0), 0)
    log.append_as_leader(batch(3, ts=T0 + 1000), 0)  # max at offset 5
    log.append_as_leader(batch(3, ts=T0 + 5), 0)
    log.append_as_leader(batch(3, ts=T0 + 2), 0)
    assert len(log.segments) > 1
    assert log.max_timestamp_offset() == (5, T0 + 1002)
    assert log.offset_for_timestamp(T0 + 1001) == (4, T0 + 1001)
    assert log.offset_for_timestamp(T0 + 2) == (2, T0 + 2)
    assert log.offset_for_timestamp(T0 + 3) == (3, T0 + 1000)
    log.close()
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    assert log.max_timestamp_offset() == (5, T0 + 1002)
    assert log.offset_for_timestamp(T0 + 3) == (3, T0 + 1000)
    assert log.offset_for_timestamp(T0 + 1003) is None


def test_roll_on_size(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=1000)
    size = len(batch(3))
    per_segment = 1000 // size
    fill(log, per_segment)
    assert len(log.segments) == 1
    fill(log, 1)
    assert [s.base_offset for s in log.segments] == [0, 3 * per_segment]
    assert log.recovery_point == 3 * per_segment  # the old segment was flushed on roll
    assert (tmp_path / "t-0" / f"{3 * per_segment:020d}.snapshot").exists()


def test_roll_on_segment_ms(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = open_log(tmp_path / "t-0", clock, segment_ms=1000)
    log.append_as_leader(batch(1, ts=clock.time_ms()), 0)
    clock.advance(999)
    log.append_as_leader(batch(1, ts=clock.time_ms()), 0)
    assert len(log.segments) == 1
    clock.advance(2)
    log.append_as_leader(batch(1, ts=clock.time_ms()), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    # a segment with no timestamps rolls by creation time
    log2 = open_log(tmp_path / "u-0", clock, segment_ms=1000)
    log2.append_as_leader(batch(1, ts=-1), 0)
    clock.advance(1001)
    log2.append_as_leader(batch(1, ts=-1), 0)
    assert len(log2.segments) == 2


def test_log_append_time_restamps_with_valid_crc(tmp_path: Path) -> None:
    clock = ManualClock(T0 + 777)
    log = open_log(tmp_path / "t-0", clock, message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(batch(4, ts=123), 0)
    assert info.log_append_time == T0 + 777
    data = read_all(log)
    (pos, h), = list(iter_batches(data))
    assert h.timestamp_type == 1 and h.max_timestamp == T0 + 777
    verify_crc(data, pos, h)
    assert {r.timestamp for r in decode_records(data)} == {T0 + 777}
    assert log.offset_for_timestamp(T0 + 700) == (0, T0 + 777)
    assert log.max_timestamp_offset() == (0, T0 + 777)
    # CreateTime keeps the producer's timestamps and reports -1
    log2 = open_log(tmp_path / "u-0", clock)
    assert log2.append_as_leader(batch(2, ts=123), 0).log_append_time == -1
    assert [r.timestamp for r in decode_records(read_all(log2))] == [123, 124]


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_a_writable_view_is_patched_in_place_and_logged_as_a_copy_would_be(
    tmp_path: Path, timestamp_type: str
) -> None:
    """A large Produce frame's records arrive as a writable view of the request's buffer
    (strom.protocol.produce_request): offsets, epochs and LogAppendTime go into it in place, no
    copy, and the log is byte for byte what a copy gives; read-only records are copied."""
    clock = ManualClock(T0 + 777)
    raw = batch(3, ts=123) + batch(2, ts=456, tag=1)
    frame = bytearray(b"header" + raw + b"tail")
    view = memoryview(frame)[6:6 + len(raw)]
    in_place = open_log(tmp_path / "a-0", clock, message_timestamp_type=timestamp_type)
    copied = open_log(tmp_path / "b-0", clock, message_timestamp_type=timestamp_type)
    for log in (in_place, copied):
        log.append_as_leader(batch(1), 2)  # the appends start at offset 1
    in_place.append_as_leader(view, 2)
    copied.append_as_leader(memoryview(raw), 2)  # read-only: copied, not patched
    assert read_all(in_place) == read_all(copied)
    assert frame[:6] == b"header" and frame[-4:] == b"tail"
    assert offsets_of(bytes(view)) == [1, 2, 3, 4, 5]  # the request's buffer holds the patches
    assert bytes(view) != raw and offsets_of(raw) == [12345, 12346, 12347, 12345, 12346]
    for pos, h in iter_batches(read_all(in_place)):
        verify_crc(read_all(in_place), pos, h)


def test_corrupt_crc_rejected_and_nothing_appended(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    good = batch(2)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    log.append_as_leader(good, 0)
    before = (log.log_end_offset, log.size_bytes)
    with pytest.raises(CorruptRecordError) as ei:
        log.append_as_leader(good + bytes(bad), 0)  # second batch bad: whole request rejected
    assert ei.value.error_code == 2
    assert (log.log_end_offset, log.size_bytes) == before
    for junk in (b"\x00" * 10, good[:-3], good + b"\x00" * 20):
        with pytest.raises(CorruptRecordError):
            log.append_as_leader(junk, 0)
    wrong_magic = bytearray(good)
    wrong_magic[16] = 1
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytes(wrong_magic), 0)
    assert (log.log_end_offset, log.size_bytes) == before
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(b"", 0)


def test_inconsistent_record_count_rejected(tmp_path: Path) -> None:
    from crc32c import crc32c

    log = open_log(tmp_path / "t-0")
    b = bytearray(batch(3))
    struct.pack_into(">i", b, 57, 5)  # records count != lastOffsetDelta + 1
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    with pytest.raises(InvalidRecordError) as ei:
        log.append_as_leader(bytes(b), 0)
    assert ei.value.error_code == 87 and isinstance(ei.value, CorruptRecordError)
    assert log.log_end_offset == 0


def test_batch_too_large(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", max_message_bytes=500, segment_bytes=2000)
    log.append_as_leader(batch(1, size=400), 0)
    with pytest.raises(MessageTooLargeError) as ei:
        log.append_as_leader(batch(1, size=500), 0)
    assert ei.value.error_code == 10
    with pytest.raises(RecordListTooLargeError) as ei2:
        log.append_as_leader(batch(1, size=400) * 5, 0)
    assert ei2.value.error_code == 18
    assert log.log_end_offset == 1


def test_flush_messages_and_flush_ms(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = open_log(tmp_path / "t-0", clock, flush_messages=5)
    fill(log, 1)
    assert log.recovery_point == 0
    fill(log, 1)  # 6 unflushed >= 5
    assert log.recovery_point == 6
    log2 = open_log(tmp_path / "u-0", clock, flush_ms=1000)
    fill(log2, 2)
    log2.flush_if_due()
    assert log2.recovery_point == 0
    clock.advance(1000)
    log2.flush_if_due()
    assert log2.recovery_point == 6


# ---------------------------------------------------------------------------- idempotence


def pbatch(seq: int, n: int = 2, *, pid: int = 7, epoch: int = 0, tag: int = 0) -> bytes:
    return batch(n, tag=tag, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_idempotent_duplicate_returns_original_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    a = log.append_as_leader(pbatch(0), 0)
    log.append_as_leader(batch(3), 0)  # non-idempotent traffic in between
    b = log.append_as_leader(pbatch(2), 0)
    size = log.size_bytes
    dup_a = log.append_as_leader(pbatch(0), 0)
    dup_b = log.append_as_leader(pbatch(2), 0)
    assert (dup_a.first_offset, dup_a.last_offset, dup_a.duplicate) == (a.first_offset, a.last_offset, True)
    assert (dup_b.first_offset, dup_b.last_offset, dup_b.duplicate) == (b.first_offset, b.last_offset, True)
    assert dup_a.record_count == 2
    assert log.size_bytes == size and log.log_end_offset == 7
    c = log.append_as_leader(pbatch(4), 0)
    assert (c.first_offset, c.duplicate) == (7, False)


def test_only_last_five_batches_are_deduplicated(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(6):
        log.append_as_leader(pbatch(2 * i), 0)
    assert log.append_as_leader(pbatch(2), 0).duplicate  # 2nd batch: still cached
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(0), 0)  # 1st batch: evicted, now just out of order


def test_out_of_order_sequence(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(pbatch(0), 0)
    with pytest.raises(OutOfOrderSequenceError) as ei:
        log.append_as_leader(pbatch(3), 0)  # expected 2
    assert ei.value.error_code == 45
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(1), 0)  # overlaps, not a duplicate
    assert log.log_end_offset == 2
    # within one request the batches are checked in order
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(2) + pbatch(5), 0)
    assert log.log_end_offset == 2
    info = log.append_as_leader(pbatch(2) + pbatch(4), 0)
    assert (info.first_offset, info.last_offset) == (2, 5)


def test_fenced_and_new_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(pbatch(0, epoch=3), 0)
    with pytest.raises(InvalidProducerEpochError) as ei:
        log.append_as_leader(pbatch(2, epoch=2), 0)
    assert ei.value.error_code == 47
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(2, epoch=4), 0)  # new epoch must start at 0
    info = log.append_as_leader(pbatch(0, epoch=4), 0)
    assert info.first_offset == 2 and not info.duplicate
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(pbatch(2, epoch=3), 0)
    # unknown producer: any starting sequence is accepted (KIP-360)
    assert log.append_as_leader(pbatch(40, pid=99), 0).first_offset == 4


def test_sequence_wraps_around(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    top = 2**31 - 1
    log.append_as_leader(pbatch(top - 1, n=2), 0)  # seqs top-1, top
    log.append_as_leader(pbatch(0, n=2), 0)
    assert log.log_end_offset == 4
    log.append_as_leader(pbatch(top, n=3, pid=8), 0)  # seqs top, 0, 1
    log.append_as_leader(pbatch(2, n=1, pid=8), 0)
    assert log.append_as_leader(pbatch(top, n=3, pid=8), 0).duplicate


def test_producer_state_survives_clean_and_unclean_reopen(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, segment_bytes=300)
    for i in range(8):
        log.append_as_leader(pbatch(2 * i, tag=i), 0)
    first = log.append_as_leader(pbatch(16), 0)
    log.close()
    log = open_log(d, segment_bytes=300)
    assert log.append_as_leader(pbatch(16), 0).first_offset == first.first_offset
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(20), 0)
    second = log.append_as_leader(pbatch(18), 0)
    log.close_without_flush()  # crash: no snapshot at the end, no clean marker
    log = open_log(d, segment_bytes=300)
    dup = log.append_as_leader(pbatch(18), 0)
    assert dup.duplicate and dup.first_offset == second.first_offset
    assert log.append_as_leader(pbatch(20), 0).first_offset == second.last_offset + 1
    # rebuild from nothing: delete every snapshot
    log.close_without_flush()
    for p in d.glob("*.snapshot"):
        p.unlink()
    log = open_log(d, segment_bytes=300)
    assert log.append_as_leader(pbatch(20), 0).duplicate
    assert log.append_as_leader(pbatch(22), 0).first_offset == log.log_end_offset - 2


def test_transactional_batches_are_kept(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(2, producer_id=3, producer_epoch=0, base_sequence=0, transactional=True), 0)
    assert log.producer_state.first_unstable_offset() == 0
    with pytest.raises(InvalidRecordError):  # a client may not write markers
        log.append_as_leader(build_control_batch(3, 0, True, 0, 1), 0)
    log.append_as_leader(build_control_batch(3, 0, True, 0, 1), 0, from_coordinator=True)
    assert log.producer_state.first_unstable_offset() is None
    hs = [h for _, h in iter_batches(read_all(log))]
    assert [h.is_transactional for h in hs] == [True, True]  # markers are transactional too
    assert hs[1].is_control
