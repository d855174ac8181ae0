"""What is particular to the on-disk metadata log: Kafka's file layout and formats, recovery of a
damaged directory, segments deleted before a snapshot. The behaviour every RaftLog shares is in
test_raft_log_contract.py."""

from __future__ import annotations

import io
import os
import struct
from pathlib import Path

import pytest
from kio.schema.snapshot_footer_record.v0 import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0 import SnapshotHeaderRecord
from kio.serial import entity_writer
from kio.static.primitive import i16, i64

from strom.clock import ManualClock
from strom.config import LogConfig
from strom.log.partition_log import LOG_START_FILE, _write_checkpoint
from strom.protocol.records import build_batch, decode_batch_records, iter_batches, verify_crc
from strom.raft.log import OffsetAndEpoch, RaftStorageError
from strom.raft.metadata_log import (
    LEADER_EPOCH_FILE,
    METADATA_PARTITION_DIR,
    LeaderEpochCache,
    MetadataLog,
    snapshot_file_name,
)

T0 = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=400, index_interval_bytes=100)


def open_log(root: Path, config: LogConfig = SMALL) -> MetadataLog:
    return MetadataLog.open(root, clock=ManualClock(T0), config=config)


def fill(log: MetadataLog, plan: list[tuple[int, int]], ts: int = T0) -> None:
    for epoch, n in plan:
        log.append_as_leader([f"e{epoch}-{i}".encode() for i in range(n)], epoch, ts)


def image(n: int) -> bytes:
    return b"".join(build_batch([(None, f"img{i}".encode(), [], T0)], base_offset=i) for i in range(n))


def kio_bytes(entity: object) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def test_kafka_layout(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, [(1, 3), (1, 2), (3, 4)])
    log.update_high_watermark(9)
    log.create_snapshot(OffsetAndEpoch(5, 1), image(1))
    log.close()
    d = tmp_path / METADATA_PARTITION_DIR
    names = set(os.listdir(d))
    assert {"00000000000000000000.log", "00000000000000000000.index", "00000000000000000000.timeindex",
            "00000000000000000005-0000000001.checkpoint", "leader-epoch-checkpoint",
            "recovery-point-offset-checkpoint", "log-start-offset-checkpoint", ".clean-shutdown"} <= names
    assert (d / LEADER_EPOCH_FILE).read_text() == "0\n2\n1 0\n3 5\n"
    assert (d / "recovery-point-offset-checkpoint").read_text() == "0\n1\n__cluster_metadata 0 9\n"
    assert snapshot_file_name(OffsetAndEpoch(123, 45)) == "00000000000000000123-0000000045.checkpoint"


def test_snapshot_file_is_framed_by_kafkas_header_and_footer(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, [(2, 2)], ts=T0 + 7)
    fill(log, [(2, 1)], ts=T0 + 9)
    log.update_high_watermark(3)
    log.create_snapshot(OffsetAndEpoch(3, 2), image(2))
    raw = (tmp_path / METADATA_PARTITION_DIR / snapshot_file_name(OffsetAndEpoch(3, 2))).read_bytes()
    batches = list(iter_batches(raw))
    assert len(batches) == 4
    (hpos, head), (fpos, foot) = batches[0], batches[-1]
    assert head.is_control and foot.is_control
    assert head.partition_leader_epoch == foot.partition_leader_epoch == 2
    (hrec,) = decode_batch_records(raw, hpos, head)
    (frec,) = decode_batch_records(raw, fpos, foot)
    assert hrec.key == struct.pack(">hh", 0, 3) and frec.key == struct.pack(">hh", 0, 4)
    # the value is Kafka's SnapshotHeaderRecord: the append time of the last record it contains
    expected = SnapshotHeaderRecord(version=i16(0), last_contained_log_timestamp=i64(T0 + 9))
    assert hrec.value == kio_bytes(expected)
    assert frec.value == kio_bytes(SnapshotFooterRecord(version=i16(0)))
    assert raw[batches[1][0]:fpos] == image(2)
    log.close()


def test_partial_and_deleted_snapshots_are_removed_on_open(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, [(1, 2)])
    log.close()
    d = tmp_path / METADATA_PARTITION_DIR
    (d / "00000000000000000002-0000000001.checkpoint.part").write_bytes(b"half a snapsh")
    (d / "00000000000000000001-0000000001.checkpoint.deleted").write_bytes(b"old")
    log = open_log(tmp_path)
    assert log.latest_snapshot_id() is None
    assert not [n for n in os.listdir(d) if ".checkpoint" in n]
    log.close()


def test_torn_tail_is_cut_and_epochs_rebuilt(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig())
    fill(log, [(1, 2), (4, 1), (6, 3)])
    log.flush()
    log.close_without_flush()
    d = tmp_path / METADATA_PARTITION_DIR
    seg = d / "00000000000000000000.log"
    data = seg.read_bytes()
    last = list(iter_batches(data))[-1][0]
    torn = bytearray(data)
    torn[-5] ^= 0x55  # the last batch fails its CRC
    seg.write_bytes(bytes(torn) + b"\x00" * 100)
    log = open_log(tmp_path, LogConfig())
    assert log.end_offset == 3
    assert seg.stat().st_size == last
    assert log.epoch_entries == [(1, 0), (4, 2)]
    assert log.last_fetched_epoch() == 4
    assert log.flushed_offset == 3
    log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_damaged_or_stale_epoch_checkpoint_is_rebuilt(tmp_path: Path, clean: bool) -> None:
    log = open_log(tmp_path)
    fill(log, [(1, 3), (2, 3), (2, 3), (5, 3), (5, 3)])
    log.close() if clean else log.close_without_flush()
    path = tmp_path / METADATA_PARTITION_DIR / LEADER_EPOCH_FILE
    path.write_text("0\n3\n1 0\n2 3\n")  # one entry short, as if written before epoch 5
    if not clean:
        log = open_log(tmp_path)
        assert log.epoch_entries == [(1, 0), (2, 3), (5, 9)]
        log.close_without_flush()
    path.write_text("0\n2\n1 0\n9 900\n")  # an entry past the log end
    log = open_log(tmp_path)
    assert log.epoch_entries[0] == (1, 0) and (9, 900) not in log.epoch_entries
    log.close_without_flush()
    path.write_bytes(b"garbage \xff")
    log = open_log(tmp_path)
    assert log.epoch_entries == [(1, 0), (2, 3), (5, 9)]
    log.close()
    assert path.read_text() == "0\n3\n1 0\n2 3\n5 9\n"


def test_delete_before_snapshot_deletes_whole_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, [(1, 2)] * 20)
    bases = log.segment_base_offsets
    assert len(bases) > 4
    target = bases[3] + 1  # inside the fourth segment
    log.update_high_watermark(target)
    log.create_snapshot(OffsetAndEpoch(target, 1), image(1))
    log.delete_before_snapshot(OffsetAndEpoch(target, 1))
    assert log.segment_base_offsets == bases[3:]
    d = tmp_path / METADATA_PARTITION_DIR
    assert not (d / f"{bases[2]:020d}.log").exists()
    assert not [n for n in os.listdir(d) if n.endswith(".deleted")]
    log.close()
    log = open_log(tmp_path)
    assert (log.start_offset, log.segment_base_offsets) == (target, bases[3:])
    log.close()


def test_log_start_without_a_snapshot_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, [(1, 5)])
    log.close()
    d = tmp_path / METADATA_PARTITION_DIR
    _write_checkpoint(d / LOG_START_FILE, "__cluster_metadata", 0, 3)
    with pytest.raises(RaftStorageError, match="no snapshot at or after"):
        open_log(tmp_path)
    assert (d / "00000000000000000000.log").stat().st_size > 0  # nothing deleted by the refusal


def test_interrupted_restart_at_a_snapshot_is_completed_on_open(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, [(1, 2)] * 10)
    log.create_snapshot(OffsetAndEpoch(50, 3), image(2))  # fetched from a leader, then a crash
    log.close_without_flush()
    log = open_log(tmp_path)  # the open finishes what truncate_to_latest_snapshot would do
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch()) == (50, 50, 3)
    assert log.segment_base_offsets == [50]
    log.close()
    d = tmp_path / METADATA_PARTITION_DIR
    _write_checkpoint(d / LOG_START_FILE, "__cluster_metadata", 0, 50)
    log = open_log(tmp_path)
    assert (log.start_offset, log.end_offset) == (50, 50)
    log.close()


def test_log_start_past_the_log_end_restarts_there(tmp_path: Path) -> None:
    """A log start checkpointed past what survived a crash (delete_before_snapshot of a snapshot
    above the flushed offset): the log restarts at its start."""
    log = open_log(tmp_path)
    fill(log, [(1, 4)])
    log.create_snapshot(OffsetAndEpoch(3, 1), image(1))
    log.close_without_flush()
    d = tmp_path / METADATA_PARTITION_DIR
    (d / "00000000000000000000.log").write_bytes(b"")  # the tail was lost
    _write_checkpoint(d / LOG_START_FILE, "__cluster_metadata", 0, 3)
    log = open_log(tmp_path)
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch()) == (3, 3, 1)
    log.close()


def test_snapshots_below_the_log_start_are_deleted_on_open(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, [(1, 10)])
    log.update_high_watermark(10)
    log.create_snapshot(OffsetAndEpoch(4, 1), image(1))
    log.create_snapshot(OffsetAndEpoch(8, 1), image(1))
    log.close()
    d = tmp_path / METADATA_PARTITION_DIR
    _write_checkpoint(d / LOG_START_FILE, "__cluster_metadata", 0, 8)  # a crash before the unlink
    log = open_log(tmp_path)
    assert log.snapshot_ids == [OffsetAndEpoch(8, 1)]
    assert not (d / snapshot_file_name(OffsetAndEpoch(4, 1))).exists()
    log.close()


def test_damaged_snapshot_raises_storage_error(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, [(1, 3)])
    sid = OffsetAndEpoch(3, 1)
    log.create_snapshot(sid, image(2))
    path = tmp_path / METADATA_PARTITION_DIR / snapshot_file_name(sid)
    raw = path.read_bytes()
    path.write_bytes(raw[:-3])
    with pytest.raises(RaftStorageError, match="damaged"):
        log.read_snapshot(sid)
    footer_start = list(iter_batches(raw))[-1][0]
    path.write_bytes(raw[:footer_start])  # whole batches, but no footer
    with pytest.raises(RaftStorageError, match="SnapshotFooterRecord"):
        log.read_snapshot(sid)
    log.close()


def test_closed_log_refuses_work(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.close()
    with pytest.raises(RaftStorageError):
        log.append_as_leader([b"x"], 1, T0)


def test_epoch_cache_kafka_rules() -> None:
    cache = LeaderEpochCache([(1, 0), (3, 10), (4, 20)])
    cache.assign(4, 25)  # the latest epoch again: nothing
    assert cache.entries == [(1, 0), (3, 10), (4, 20)]
    cache.truncate_from_start(15)
    assert cache.entries == [(3, 15), (4, 20)]
    cache.truncate_from_end(20)
    assert cache.entries == [(3, 15)]
    cache.assign(2, 5)  # contradicting entries go (only happens while rebuilding from a log)
    assert cache.entries == [(2, 5)]
    assert LeaderEpochCache.parse_checkpoint(b"0\n2\n1 0\n3 10\n") == [(1, 0), (3, 10)]
    for bad in (b"1\n0\n", b"0\n2\n1 0\n", b"0\n2\n3 0\n1 10\n", b"0\nx\n", b""):
        assert LeaderEpochCache.parse_checkpoint(bad) is None


# --------------------------------------------------------------------------- every crash point


def _history(log: MetadataLog) -> None:
    """A log with several segments, epochs, a flushed prefix, an unflushed tail and a snapshot."""
    fill(log, [(1, 2)] * 5 + [(2, 2)] * 5 + [(4, 2)] * 3)
    log.flush()
    log.update_high_watermark(20)
    log.create_snapshot(OffsetAndEpoch(10, 1), image(2))
    fill(log, [(4, 2), (5, 1)])


CRASH_OPS = {
    "append_roll": lambda log: fill(log, [(6, 30)]),
    "flush": lambda log: log.flush(),
    "truncate": lambda log: log.truncate_to(21),
    "truncate_segments": lambda log: log.truncate_to(20),
    "snapshot": lambda log: log.create_snapshot(OffsetAndEpoch(20, 2), image(3)),
    "delete_before": lambda log: log.delete_before_snapshot(OffsetAndEpoch(10, 1)),
    "install": lambda log: (log.create_snapshot(OffsetAndEpoch(40, 6), image(1)),
                            log.truncate_to_latest_snapshot()),
    "close": lambda log: log.close(),
}


@pytest.mark.parametrize("name", sorted(CRASH_OPS))
def test_power_cut_after_every_fsync_of_an_operation(tmp_path: Path, name: str) -> None:
    """Lose power after the 1st, 2nd, ... fsync of the operation until it completes: every time
    the log opens, holds CRC-valid contiguous batches from before (or, for a truncation, the
    prefix), keeps what was flushed, and its epoch cache is what its batches say."""
    from strom.testing.powerloss import PowerCut, PowerLossFS

    op = CRASH_OPS[name]
    n = 0
    while True:
        n += 1
        root = tmp_path / f"cut{n}"
        with PowerLossFS(root) as fs:
            log = open_log(root)
            _history(log)
            before = [(h.base_offset, h.crc) for _, h in iter_batches(log.read(0, 1 << 20))]
            flushed = log.flushed_offset
            fs.crash_after(n)
            try:
                op(log)
                completed = True
            except PowerCut:
                completed = False
            fs.disarm()
            log.close_without_flush()
            fs.cut()
            log = open_log(root)
            start, end = log.start_offset, log.end_offset
            data = log.read(start, 1 << 20)
            got = [(h.base_offset, h.crc) for _, h in iter_batches(data)]
            expected = start
            for pos, h in iter_batches(data):
                verify_crc(data, pos, h)
                assert h.base_offset == expected, (name, n, "not contiguous")
                expected = h.next_offset
            assert expected == end
            implied: list[tuple[int, int]] = []
            for _, h in iter_batches(data):
                if not implied or implied[-1][0] != h.partition_leader_epoch:
                    implied.append((h.partition_leader_epoch, max(h.base_offset, start)))
            assert log.epoch_entries == implied, (name, n)
            if name == "install" and start == 40:
                assert (end, log.last_fetched_epoch()) == (40, 6)
            else:
                assert start in (0, 10)
                kept = [b for b in before if b[0] >= start]
                assert got == kept[:len(got)] or name == "append_roll", (name, n)
                assert end >= min(flushed, 20 if name.startswith("truncate") else flushed), (name, n)
            assert not [p for p in os.listdir(root / METADATA_PARTITION_DIR) if p.endswith(".part")]
            log.close()
        if completed:
            break
    assert n > 1, f"{name} made no fsync"


def test_a_gap_between_segments_ends_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, [(1, 2)] * 8 + [(3, 2)] * 8)
    bases = log.segment_base_offsets
    assert len(bases) >= 3
    log.close_without_flush()
    d = tmp_path / METADATA_PARTITION_DIR
    for suffix in (".log", ".index", ".timeindex"):
        (d / f"{bases[1]:020d}{suffix}").unlink()  # as if a crash had undone a later deletion
    log = open_log(tmp_path)
    assert (log.end_offset, log.segment_base_offsets) == (bases[1], bases[:1])
    assert log.epoch_entries == [(1, 0)]
    log.close()
