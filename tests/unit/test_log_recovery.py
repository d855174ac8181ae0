"""Recovery: torn tails, garbage, CRC damage, lost or corrupt indexes, clean vs unclean reopen."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_log_support import T0, batch, batch_bases, offsets_of, open_log, read_all

from strom.log import PartitionLog
from strom.protocol.records import parse_header

CFG = {"segment_bytes": 600, "index_interval_bytes": 100}


def build(d: Path, n: int = 30) -> tuple[list[tuple[int, int]], int]:
    """n batches of 3 records (ts T0+10i), then crash (no clean shutdown). Returns batch ranges
    and the batch size in bytes."""
    log = open_log(d, **CFG)
    ranges = []
    for i in range(n):
        info = log.append_as_leader(batch(3, tag=i, ts=T0 + 10 * i), 0)
        ranges.append((info.first_offset, info.last_offset))
    size = log.read(0, 1).size
    log.close_without_flush()
    return ranges, size


def last_log(d: Path) -> Path:
    return sorted(d.glob("*.log"))[-1]


def check_consistent(log: PartitionLog, expected_ranges: list[tuple[int, int]]) -> None:
    n = expected_ranges[-1][1] + 1 if expected_ranges else 0
    assert log.log_end_offset == n
    data = read_all(log)
    assert batch_bases(data) == expected_ranges
    assert offsets_of(data) == list(range(n))
    for seg in log.log_segments:
        seg.offset_index.sanity_check(seg.size)
        seg.time_index.sanity_check()
        for off, pos in seg.offset_index.entries:
            assert parse_header(os.pread(seg.fd, 61, pos)).last_offset == off
    for off in range(0, n, 2):
        got = batch_bases(log.read_bytes(off, 1))
        assert got == [r for r in expected_ranges if r[0] <= off <= r[1]]
    for i, (first, _) in enumerate(expected_ranges):
        assert log.offset_for_timestamp(T0 + 10 * i) == (first, T0 + 10 * i)


def append_more(log: PartitionLog, expected: list[tuple[int, int]]) -> None:
    info = log.append_as_leader(batch(3, tag=99, ts=T0 + 10 * len(expected)), 0)
    start = expected[-1][1] + 1 if expected else 0
    assert (info.first_offset, info.last_offset) == (start, start + 2)
    expected.append((start, start + 2))
    check_consistent(log, expected)


def test_unclean_reopen_without_damage(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    ranges, _ = build(d)
    assert not (d / ".clean-shutdown").exists()
    log = open_log(d, **CFG)
    check_consistent(log, ranges)
    append_more(log, ranges)


def test_clean_reopen_skips_recovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, **CFG)
    for i in range(30):
        log.append_as_leader(batch(3, tag=i, ts=T0 + 10 * i), 0)
    log.update_high_watermark(60)
    log.close()
    assert (d / ".clean-shutdown").exists()
    from strom.log.segment import LogSegment

    calls: list[int] = []
    orig = LogSegment.recover
    monkeypatch.setattr(LogSegment, "recover", lambda self: calls.append(self.base_offset) or orig(self))
    log = open_log(d, **CFG)
    assert calls == []
    assert log.high_watermark == 60
    check_consistent(log, [(3 * i, 3 * i + 2) for i in range(30)])
    # only read so far: still clean, and closing it again changes nothing on disk
    assert (d / ".clean-shutdown").exists()
    log.close()
    log = open_log(d, **CFG)
    assert calls == []
    log.append_as_leader(batch(1, tag=99, ts=T0 + 300), 0)
    assert not (d / ".clean-shutdown").exists()  # changed: a crash from now on is unclean
    log.close_without_flush()
    log = open_log(d, **CFG)
    assert calls != []  # recovered
    check_consistent(log, [*[(3 * i, 3 * i + 2) for i in range(30)], (90, 90)])


def test_torn_tail_mid_batch(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    ranges, size = build(d)
    p = last_log(d)
    full = os.path.getsize(p)
    os.truncate(p, full - size // 2)  # last batch half written
    log = open_log(d, **CFG)
    assert os.path.getsize(p) == full - size
    expected = ranges[:-1]
    check_consistent(log, expected)
    append_more(log, expected)


def test_torn_tail_inside_header(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    ranges, size = build(d)
    p = last_log(d)
    os.truncate(p, os.path.getsize(p) - size + 20)
    log = open_log(d, **CFG)
    check_consistent(log, ranges[:-1])


def test_garbage_appended(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    ranges, _ = build(d)
    p = last_log(d)
    with open(p, "ab") as f:
        f.write(os.urandom(333))
    log = open_log(d, **CFG)
    check_consistent(log, ranges)
    append_more(log, ranges)


def test_zeros_appended(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    ranges, _ = build(d)
    with open(last_log(d), "ab") as f:
        f.write(b"\x00" * 4096)
    log = open_log(d, **CFG)
    check_consistent(log, ranges)


def test_flipped_byte_truncates_from_that_batch_and_drops_later_segments(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    ranges, size = build(d)
    # recover everything: forget the recovery point
    (d / "recovery-point-offset-checkpoint").unlink()
    logs = sorted(d.glob("*.log"))
    assert len(logs) > 3
    victim = logs[1]
    base = int(victim.stem)
    # flip a byte in the records of the third batch of segment 1
    with open(victim, "r+b") as f:
        f.seek(2 * size + 70)
        b = f.read(1)
        f.seek(2 * size + 70)
        f.write(bytes([b[0] ^ 0x40]))
    log = open_log(d, **CFG)
    expected = [r for r in ranges if r[1] < base + 6]
    check_consistent(log, expected)
    assert [s.base_offset for s in log.segments] == [int(p.stem) for p in logs[:2]]
    for p in logs[2:]:
        assert not p.exists() and not p.with_suffix(".index").exists()
    append_more(log, expected)


def test_damage_before_recovery_point_is_not_rechecked(tmp_path: Path) -> None:
    """Kafka trusts flushed segments below the recovery point (only their indexes are checked)."""
    d = tmp_path / "t-0"
    ranges, _ = build(d)
    log = open_log(d, **CFG)
    assert log.recovery_point == log.log_end_offset
    log.close_without_flush()
    log = open_log(d, **CFG)
    check_consistent(log, ranges)


@pytest.mark.parametrize("which", [".index", ".timeindex", "both"])
def test_missing_indexes_rebuilt(tmp_path: Path, which: str) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, **CFG)
    for i in range(30):
        log.append_as_leader(batch(3, tag=i, ts=T0 + 10 * i), 0)
    before = {s.base_offset: (s.offset_index.entries, s.time_index.entries) for s in log.log_segments}
    log.close()  # clean: only the sanity check can notice
    for p in d.glob("*.log"):
        for suffix in ([".index", ".timeindex"] if which == "both" else [which]):
            p.with_suffix(suffix).unlink()
    log = open_log(d, **CFG)
    after = {s.base_offset: (s.offset_index.entries, s.time_index.entries) for s in log.log_segments}
    assert after == before
    for p in d.glob("*.log"):
        assert p.with_suffix(".index").exists() and p.with_suffix(".timeindex").exists()
    ranges = [(3 * i, 3 * i + 2) for i in range(30)]
    check_consistent(log, ranges)
    append_more(log, ranges)


@pytest.mark.parametrize(
    "damage",
    ["garbage", "odd_length", "zeros", "points_past_log", "points_inside_batch", "not_increasing"],
)
def test_corrupt_offset_index_rebuilt(tmp_path: Path, damage: str) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, **CFG)
    for i in range(30):
        log.append_as_leader(batch(3, tag=i, ts=T0 + 10 * i), 0)
    seg0 = log.log_segments[0]
    good = seg0.offset_index.entries
    assert len(good) >= 2
    log.close()
    idx = d / f"{0:020d}.index"
    raw = bytearray(idx.read_bytes())
    if damage == "garbage":
        raw = bytearray(os.urandom(len(raw)))
        raw[0:8] = b"\xff" * 8  # make sure the garbage is detectably bad
    elif damage == "odd_length":
        raw = raw[:-3]
    elif damage == "zeros":
        raw = bytearray(len(raw))
    elif damage == "points_past_log":
        raw[-4:] = (10**6).to_bytes(4, "big")
    elif damage == "points_inside_batch":
        raw[-4:] = (int.from_bytes(raw[-4:], "big") + 5).to_bytes(4, "big")
    elif damage == "not_increasing":
        raw[8:16] = raw[0:8]
    idx.write_bytes(bytes(raw))
    log = open_log(d, **CFG)
    assert log.log_segments[0].offset_index.entries == good
    assert idx.read_bytes() == b"".join(o.to_bytes(4, "big") + p.to_bytes(4, "big") for o, p in good)
    ranges = [(3 * i, 3 * i + 2) for i in range(30)]
    check_consistent(log, ranges)


def test_corrupt_time_index_rebuilt(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, **CFG)
    for i in range(30):
        log.append_as_leader(batch(3, tag=i, ts=T0 + 10 * i), 0)
    good = log.log_segments[0].time_index.entries
    log.close()
    tidx = d / f"{0:020d}.timeindex"
    raw = tidx.read_bytes()
    tidx.write_bytes(raw[12:24] + raw[0:12] + raw[24:])  # swap entries: not increasing
    log = open_log(d, **CFG)
    assert log.log_segments[0].time_index.entries[: len(good)] == good
    check_consistent(log, [(3 * i, 3 * i + 2) for i in range(30)])


def test_everything_corrupt_yields_empty_log(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    build(d, n=3)
    for p in d.glob("*.log"):
        p.write_bytes(os.urandom(500))
    (d / "recovery-point-offset-checkpoint").unlink(missing_ok=True)  # a new log writes none
    log = open_log(d, **CFG)
    assert log.log_end_offset == 0 and log.size_bytes == 0
    append_more(log, [])


def test_deleted_leftovers_are_removed(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    ranges, _ = build(d)
    (d / f"{999:020d}.log.deleted").write_bytes(b"x")
    (d / f"{999:020d}.index").write_bytes(b"x")  # orphan index
    log = open_log(d, **CFG)
    assert not (d / f"{999:020d}.log.deleted").exists()
    assert not (d / f"{999:020d}.index").exists()
    check_consistent(log, ranges)


def test_delete_removes_everything(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, **CFG)
    log.append_as_leader(batch(3), 0)
    log.delete()
    assert not d.exists()
    assert list(tmp_path.iterdir()) == []


def test_torn_tail_after_clean_shutdown_is_still_recovered(tmp_path: Path) -> None:
    """A clean-shutdown marker does not make a segment whose tail is not whole batches trusted."""
    d = tmp_path / "t-0"
    log = open_log(d, **CFG)
    for i in range(30):
        log.append_as_leader(batch(3, tag=i, ts=T0 + 10 * i), 0)
    log.close()
    p = last_log(d)
    with open(p, "ab") as f:
        f.write(b"\x00" * 7)
    log = open_log(d, **CFG)
    check_consistent(log, [(3 * i, 3 * i + 2) for i in range(30)])
