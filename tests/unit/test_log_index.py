"""OffsetIndex / TimeIndex on their own, and ProducerStateManager snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.log.errors import CorruptIndexError, InvalidProducerEpochError, OutOfOrderSequenceError
from strom.log.index import OffsetIndex, TimeIndex
from strom.log.producer_state import ProducerStateManager, in_sequence, increment_sequence
from strom.protocol.records import build_batch, parse_header


def test_offset_index_lookup_and_persistence(tmp_path: Path) -> None:
    p = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(p, 100)
    assert idx.lookup(500) == (100, 0)
    for i in range(1, 50):
        idx.append(100 + 10 * i, 1000 * i)
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(109) == (100, 0)
    assert idx.lookup(110) == (110, 1000)
    assert idx.lookup(155) == (150, 5000)
    assert idx.lookup(10_000) == (590, 49000)
    assert idx.floor_position(5999) == 5000 and idx.floor_position(10) == 0
    assert p.stat().st_size == 49 * 8  # no preallocation: the file holds exactly the entries
    with pytest.raises(ValueError):
        idx.append(590, 50000)  # not increasing
    idx.close()
    again = OffsetIndex(p, 100)
    again.sanity_check(log_size=50000)
    assert again.lookup(155) == (150, 5000) and len(again) == 49
    again.truncate_to(300)
    assert again.lookup(10_000) == (290, 19000) and p.stat().st_size == 19 * 8
    with pytest.raises(CorruptIndexError):
        again.sanity_check(log_size=19000)  # last entry at the log end: points past it
    again.close()


def test_offset_index_full(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "x.index", 0, max_index_size=32)
    for i in range(1, 5):
        assert not idx.is_full
        idx.append(i, i * 10)
    assert idx.is_full
    idx.close()


def test_time_index_lookup(tmp_path: Path) -> None:
    p = tmp_path / "00000000000000000000.timeindex"
    ti = TimeIndex(p, 0)
    assert ti.lookup(5) == (-1, 0) and ti.last_entry == (-1, 0)
    ti.maybe_append(100, 0)
    ti.maybe_append(100, 5)  # not larger: skipped
    ti.maybe_append(90, 6)
    ti.maybe_append(200, 10)
    assert ti.entries == [(100, 0), (200, 10)]
    assert ti.lookup(99) == (-1, 0)
    assert ti.lookup(150) == (100, 0)
    assert ti.lookup(10**15) == (200, 10)
    ti.close()
    again = TimeIndex(p, 0)
    again.sanity_check()
    assert again.entries == [(100, 0), (200, 10)]
    again.truncate_to(10)
    assert again.entries == [(100, 0)]
    again.close()
    p.write_bytes(p.read_bytes() + b"\x01")
    with pytest.raises(CorruptIndexError):
        TimeIndex(p, 0).sanity_check()


def test_sequence_arithmetic() -> None:
    top = 2**31 - 1
    assert increment_sequence(5, 3) == 8
    assert increment_sequence(top, 1) == 0
    assert increment_sequence(top - 1, 3) == 1
    assert in_sequence(top, 0) and in_sequence(4, 5) and not in_sequence(4, 6)


def hdr(pid: int, epoch: int, seq: int, n: int = 1, base: int = 0) -> object:
    b = build_batch([(None, b"v", [], 0)] * n, base_offset=base, producer_id=pid, producer_epoch=epoch,
                    base_sequence=seq)
    return parse_header(b)


def test_producer_state_snapshot_round_trip(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    psm.replay([hdr(1, 0, 0, 2, 0), hdr(2, 3, 10, 1, 2), hdr(1, 0, 2, 2, 3)])  # type: ignore[list-item]
    assert psm.map_end_offset == 5
    psm.take_snapshot()
    assert (tmp_path / f"{5:020d}.snapshot").exists()
    fresh = ProducerStateManager(tmp_path)
    assert fresh.load(0, 5) == 5
    e1 = fresh.last_entry(1)
    assert e1 is not None and e1.producer_epoch == 0 and e1.last_seq == 3
    assert [(b.first_offset, b.last_offset) for b in e1.batches] == [(0, 1), (3, 4)]
    info = fresh.prepare_update(1, validate=True)
    with pytest.raises(OutOfOrderSequenceError):
        info.append_data_batch(hdr(1, 0, 5), 5, 5, 0)  # type: ignore[arg-type]
    with pytest.raises(InvalidProducerEpochError):
        fresh.prepare_update(2, validate=True).append_data_batch(hdr(2, 2, 11), 5, 5, 0)  # type: ignore[arg-type]
    # snapshots past the log end are dropped; corrupt snapshots are ignored
    assert ProducerStateManager(tmp_path).load(0, 4) == 0
    assert not (tmp_path / f"{5:020d}.snapshot").exists()
    psm.take_snapshot()
    snap = tmp_path / f"{5:020d}.snapshot"
    raw = bytearray(snap.read_bytes())
    raw[-2] ^= 1
    snap.write_bytes(bytes(raw))
    assert ProducerStateManager(tmp_path).load(0, 5) == 0
    assert not snap.exists()
