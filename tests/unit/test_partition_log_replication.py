"""The replica side of PartitionLog: leader epochs, append_as_follower, truncate_to,
truncate_fully_and_start_at, end_offset_for_epoch (Kafka's UnifiedLog contracts)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_log_support import T0, batch, batch_bases, open_log, read_all

from strom.clock import ManualClock
from strom.log import PartitionLog
from strom.log.errors import (
    CorruptRecordError,
    CorruptReplicaRecordsError,
    LogError,
    OffsetsOutOfOrderError,
    OutOfOrderSequenceError,
    UnexpectedAppendOffsetError,
)
from strom.log.leader_epoch import LEADER_EPOCH_FILE, LeaderEpochCache
from strom.log.transaction_index import AbortedTxn
from strom.protocol.records import RecordInput, build_batch, build_control_batch, iter_batches

UNDEFINED = (-1, -1)


def txn_batch(pid: int, seq: int, n: int = 2) -> bytes:
    return batch(n, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)


def idem_batch(pid: int, seq: int, n: int = 1, tag: int = 0) -> bytes:
    return batch(n, producer_id=pid, producer_epoch=0, base_sequence=seq, tag=tag)


def marker(pid: int, commit: bool) -> bytes:
    return build_control_batch(pid, 0, commit, 0, T0)


def replicated(base: int, epoch: int, n: int = 1, tag: int = 0) -> bytes:
    """A batch as a leader wrote it: offsets from ``base``, leader epoch ``epoch``."""
    recs: list[RecordInput] = [(None, f"{tag}:{i}".encode(), [], T0 + i) for i in range(n)]
    return build_batch(recs, base_offset=base, partition_leader_epoch=epoch)


def replicate(leader: PartitionLog, follower: PartitionLog, max_bytes: int = 1 << 30) -> None:
    """Fetch from the leader until the follower has everything, ``max_bytes`` at a time (a
    response may end inside a batch: what follows is fetched again)."""
    while follower.log_end_offset < leader.log_end_offset:
        data = leader.read_bytes(follower.log_end_offset, max_bytes, min_one_message=False)
        if not data:
            data = leader.read_bytes(follower.log_end_offset, max_bytes)
        follower.append_as_follower(data)


def segment_files(log: PartitionLog) -> list[tuple[str, bytes]]:
    return [(s.path.name, s.path.read_bytes()) for s in log.segments]


def state(log: PartitionLog) -> tuple[object, ...]:
    psm = {pid: (e.producer_epoch, e.last_seq, e.current_txn_first_offset, list(e.batches))
           for pid, e in log.producer_state.producers.items()}
    return (log.log_end_offset, log.epoch_entries, psm, log.collect_aborted(0, log.log_end_offset))


# --------------------------------------------------------------------------- leader epochs


def test_leader_appends_assign_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    assert log.latest_epoch is None and log.epoch_entries == []
    assert log.end_offset_for_epoch(0) == UNDEFINED
    log.append_as_leader(batch(2), 0)  # 0-1
    log.append_as_leader(batch(1), 0)  # 2
    log.append_as_leader(batch(3), 2)  # 3-5
    log.append_as_leader(batch(1), 2)  # 6
    log.append_as_leader(batch(1), 5)  # 7
    assert log.epoch_entries == [(0, 0), (2, 3), (5, 7)]
    assert log.latest_epoch == 5
    h = [h for _, h in iter_batches(read_all(log))]
    assert [x.partition_leader_epoch for x in h] == [0, 0, 2, 2, 5]
    assert log.end_offset_for_epoch(5) == (5, 8)  # the latest: the log end
    assert log.end_offset_for_epoch(2) == (2, 7)
    assert log.end_offset_for_epoch(3) == (2, 7)  # no epoch 3: the one below, to the next start
    assert log.end_offset_for_epoch(0) == (0, 3)
    assert log.end_offset_for_epoch(6) == UNDEFINED
    assert log.end_offset_for_epoch(-1) == UNDEFINED
    log.close()
    assert LeaderEpochCache.parse_checkpoint((tmp_path / "t-0" / LEADER_EPOCH_FILE).read_bytes()) == [
        (0, 0), (2, 3), (5, 7)]


def test_epoch_below_the_first_entry_after_retention(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = open_log(tmp_path / "t-0", clock)
    for epoch in (1, 1, 3, 3, 4):
        log.append_as_leader(batch(1), epoch)
        log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_records(3) == 3
    assert log.epoch_entries == [(3, 3), (4, 4)]  # epoch 1 is gone; epoch 3 starts at the log start
    assert log.end_offset_for_epoch(1) == (1, 3)  # Kafka: (requested, first entry's start)
    assert log.end_offset_for_epoch(2) == (2, 3)
    log.close()
    log = open_log(tmp_path / "t-0", clock)
    assert log.epoch_entries == [(3, 3), (4, 4)]
    log.close()


def test_assign_epoch_start_offset_for_a_new_leader(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(3), 1)
    log.assign_epoch_start_offset(4, log.log_end_offset)  # becoming leader, nothing appended yet
    assert log.end_offset_for_epoch(2) == (1, 3)
    assert log.end_offset_for_epoch(4) == (4, 3)
    with pytest.raises(ValueError):
        log.assign_epoch_start_offset(5, 10)
    log.append_as_leader(batch(1), 4)
    assert log.epoch_entries == [(1, 0), (4, 3)]
    log.close()


@pytest.mark.parametrize("damage", ["clean", "crash", "missing", "corrupt", "stale"])
def test_epoch_cache_after_reopen(tmp_path: Path, damage: str) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, segment_bytes=300)
    for i, epoch in enumerate([0, 0, 1, 1, 1, 3, 3, 7, 7, 7, 7]):
        log.append_as_leader(batch(2, tag=i), epoch)
    entries = log.epoch_entries
    assert entries == [(0, 0), (1, 4), (3, 10), (7, 14)]
    assert len(log.segments) > 2
    if damage == "crash":
        log.close_without_flush()
    else:
        log.close()
    f = d / LEADER_EPOCH_FILE
    if damage == "missing":
        f.unlink()
    elif damage == "corrupt":
        f.write_bytes(b"0\n3\n1 0\n")
    elif damage == "stale":  # a file claiming epochs past the log end, unclean shutdown
        f.write_bytes(b"0\n5\n0 0\n1 4\n3 10\n7 14\n9 40\n")
        (d / ".clean-shutdown").unlink()
    log = open_log(d, segment_bytes=300)
    assert log.epoch_entries == entries
    log.close()
    assert LeaderEpochCache.parse_checkpoint(f.read_bytes()) == entries


def test_crash_keeps_only_epochs_of_recovered_data(tmp_path: Path) -> None:
    """Unflushed batches of a new epoch torn off by a crash leave no epoch entry behind."""
    d = tmp_path / "t-0"
    log = open_log(d)
    log.append_as_leader(batch(2), 1)
    log.flush()
    log.close()
    log = open_log(d)
    log.append_as_leader(batch(2), 2)
    assert log.epoch_entries == [(1, 0), (2, 2)]
    seg = log.log_segments[-1]
    log.close_without_flush()
    with open(seg.log_path, "r+b") as f:
        f.truncate(seg.size - 5)  # the epoch-2 batch is torn
    log = open_log(d)
    assert log.log_end_offset == 2
    assert log.epoch_entries == [(1, 0)]
    log.close()


# --------------------------------------------------------------------------- follower append


def test_follower_copy_is_byte_identical(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    cfg = {"segment_bytes": 500}
    leader = open_log(tmp_path / "leader" / "t-0", clock, **cfg)
    follower = open_log(tmp_path / "follower" / "t-0", clock, **cfg)
    seq = 0
    for i in range(12):
        if i % 4 == 1:
            raw = txn_batch(70 + i, 0)
        elif i % 4 == 2:
            raw = marker(70 + i - 1, commit=i % 8 == 2)
        else:
            raw = idem_batch(5, seq, tag=i)
            seq += 1
        leader.append_as_leader(raw, i // 3, from_coordinator=i % 4 == 2)
    # batch by batch: the follower makes the same roll decisions, so the files are identical
    for _, h in iter_batches(read_all(leader)):
        data = leader.read_bytes(h.base_offset, 1)
        assert follower.append_as_follower(data) == h.next_offset
    assert segment_files(follower) == segment_files(leader)
    assert state(follower) == state(leader)
    assert follower.last_stable_offset == follower.high_watermark  # (0: nothing committed yet)
    # in one go, from another follower: the same log bytes
    other = open_log(tmp_path / "other" / "t-0", clock, **cfg)
    replicate(leader, other, max_bytes=150)  # responses end inside batches
    assert read_all(other) == read_all(leader)
    assert state(other) == state(leader)
    for log in (leader, follower, other):
        log.close()
    follower = open_log(tmp_path / "follower" / "t-0", clock, **cfg)
    assert state(follower)[:2] == state(leader)[:2]
    follower.close()


def test_trailing_partial_batch_is_ignored(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    data = replicated(0, 1, 2) + replicated(2, 1, 3)
    assert log.append_as_follower(data[:-7]) == 2
    assert log.append_as_follower(data[len(replicated(0, 1, 2)):][:40]) == 2  # not even a header
    assert log.append_as_follower(b"") == 2
    assert log.append_as_follower(data[len(replicated(0, 1, 2)):]) == 5
    assert log.epoch_entries == [(1, 0)]
    log.close()


def test_follower_appends_assign_epochs_from_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_follower(replicated(0, 1, 2) + replicated(2, 1) + replicated(3, 4, 2) + replicated(5, 6))
    assert log.epoch_entries == [(1, 0), (4, 3), (6, 5)]
    assert log.end_offset_for_epoch(5) == (4, 5)
    log.close()


def bad_input_cases() -> list[tuple[str, bytes, type[Exception]]]:
    good = replicated(3, 2, 2)
    bad_crc = bytearray(replicated(5, 2, 2))
    bad_crc[-1] ^= 0xFF
    bad_magic = bytearray(replicated(5, 2))
    bad_magic[16] = 1
    return [
        ("gap at the start", replicated(4, 2), UnexpectedAppendOffsetError),
        ("before the log end", replicated(2, 2), UnexpectedAppendOffsetError),
        ("inside a batch", replicated(1, 2, 3), UnexpectedAppendOffsetError),
        ("gap between batches", good + replicated(6, 2), OffsetsOutOfOrderError),
        ("overlap between batches", good + replicated(4, 2), OffsetsOutOfOrderError),
        ("bad CRC in the second batch", good + bytes(bad_crc), CorruptReplicaRecordsError),
        ("bad magic", good + bytes(bad_magic), CorruptReplicaRecordsError),
    ]


@pytest.mark.parametrize("case", bad_input_cases(), ids=lambda c: c[0])
def test_bad_follower_input_is_refused_with_nothing_appended(
    tmp_path: Path, case: tuple[str, bytes, type[Exception]]
) -> None:
    _, data, error = case
    log = open_log(tmp_path / "t-0")
    log.append_as_follower(replicated(0, 1, 3))
    before = (state(log), segment_files(log), log.high_watermark, log.recovery_point)
    with pytest.raises(error) as info:
        log.append_as_follower(data)
    assert isinstance(info.value, LogError)
    if error is CorruptReplicaRecordsError:
        assert isinstance(info.value, CorruptRecordError) and info.value.error_code == 2
    if error is UnexpectedAppendOffsetError:
        first = next(iter(iter_batches(data)))[1]
        assert isinstance(info.value, UnexpectedAppendOffsetError)
        assert (info.value.first_offset, info.value.last_offset) == (first.base_offset, first.last_offset)
    assert (state(log), segment_files(log), log.high_watermark, log.recovery_point) == before
    log.append_as_follower(replicated(3, 2))  # still usable
    assert log.log_end_offset == 4
    log.close()


def test_empty_log_restarts_at_the_batch_holding_its_end(tmp_path: Path) -> None:
    """Kafka's Partition.appendRecordsToFollowerOrFutureReplica: the leader's log start lies
    inside a batch, the follower (or future log) starts at that offset."""
    log = open_log(tmp_path / "t-0")
    log.truncate_fully_and_start_at(5)
    assert (log.log_start_offset, log.log_end_offset) == (5, 5)
    assert log.append_as_follower(replicated(3, 1, 4) + replicated(7, 1)) == 8
    assert (log.log_start_offset, log.log_end_offset) == (3, 8)
    assert batch_bases(read_all(log)) == [(3, 6), (7, 7)]
    assert log.epoch_entries == [(1, 3)]
    with pytest.raises(UnexpectedAppendOffsetError):  # not empty any more
        log.append_as_follower(replicated(6, 1, 4))
    log.close()


def test_compacted_log_accepts_gaps(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", cleanup_policy="compact")
    assert log.append_as_follower(replicated(0, 1) + replicated(3, 1, 2) + replicated(9, 2)) == 10
    assert log.append_as_follower(replicated(12, 2)) == 13
    with pytest.raises(OffsetsOutOfOrderError):
        log.append_as_follower(replicated(13, 2) + replicated(13, 2))
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(replicated(12, 2))
    assert log.epoch_entries == [(1, 0), (2, 9)]
    log.close()


# --------------------------------------------------------------------------- truncation


def test_divergent_follower_truncates_and_ends_equal_to_the_leader(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    cfg = {"segment_bytes": 400}
    leader = open_log(tmp_path / "leader" / "t-0", clock, **cfg)
    follower = open_log(tmp_path / "follower" / "t-0", clock, **cfg)
    for i in range(6):
        leader.append_as_leader(idem_batch(5, i, tag=i), 1)
    replicate(leader, follower)
    # the follower was leader in epoch 2 and wrote what nobody else got
    for i in range(6, 12):
        follower.append_as_leader(idem_batch(5, i, tag=100 + i), 2)
    # the other replica became leader in epoch 3 and took other writes
    leader.assign_epoch_start_offset(3, leader.log_end_offset)
    for i in range(6, 9):
        leader.append_as_leader(idem_batch(5, i, tag=200 + i), 3)
    leader.append_as_leader(txn_batch(9, 0), 3)
    leader.append_as_leader(marker(9, commit=False), 3, from_coordinator=True)
    # OffsetForLeaderEpoch with the follower's latest epoch, then truncate (Kafka's rule)
    epoch, end = leader.end_offset_for_epoch(follower.latest_epoch)  # type: ignore[arg-type]
    assert (epoch, end) == (1, 6)
    assert follower.truncate_to(min(end, follower.log_end_offset))
    assert follower.log_end_offset == 6 and follower.epoch_entries == [(1, 0)]
    replicate(leader, follower, max_bytes=200)
    assert read_all(follower) == read_all(leader)
    assert state(follower) == state(leader)
    assert follower.epoch_entries == [(1, 0), (3, 6)]
    for log in (leader, follower):
        log.close()


def test_truncate_through_transactions(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=350)
    log.append_as_leader(batch(1), 0)  # 0
    log.append_as_leader(txn_batch(7, 0), 0)  # 1-2: txn of 7
    log.append_as_leader(txn_batch(8, 0), 0)  # 3-4: txn of 8
    log.append_as_leader(marker(7, commit=False), 0, from_coordinator=True)  # 5: abort 7
    log.append_as_leader(txn_batch(9, 0), 0)  # 6-7: txn of 9
    log.append_as_leader(marker(8, commit=True), 0, from_coordinator=True)  # 8: commit 8
    log.append_as_leader(marker(9, commit=False), 0, from_coordinator=True)  # 9: abort 9
    log.update_high_watermark(log.log_end_offset)
    assert len(log.segments) > 1
    assert log.collect_aborted(0, 10) == [AbortedTxn(7, 1, 5, 1), AbortedTxn(9, 6, 9, 6)]
    assert log.last_stable_offset == 10
    log.truncate_to(9)  # the abort of 9 goes: 9's transaction is open again
    assert log.collect_aborted(0, 10) == [AbortedTxn(7, 1, 5, 1)]
    assert log.high_watermark == 9
    assert log.last_stable_offset == 6
    log.truncate_to(5)  # the abort of 7 goes too: 7 and 8 are open
    assert log.collect_aborted(0, 10) == []
    assert log.last_stable_offset == 1
    producers = {p["producer_id"]: p for p in log.describe_producers()}
    assert set(producers) == {7, 8}
    assert producers[7]["current_txn_start_offset"] == 1 and producers[8]["current_txn_start_offset"] == 3
    # the transactions go on after the truncation as if the removed batches never were
    log.append_as_leader(marker(7, commit=False), 0, from_coordinator=True)  # 5: abort 7 again
    assert log.collect_aborted(0, 10) == [AbortedTxn(7, 1, 5, 1)]
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 3
    log.close_without_flush()
    log = open_log(tmp_path / "t-0", segment_bytes=350)
    assert log.collect_aborted(0, 10) == [AbortedTxn(7, 1, 5, 1)]
    assert log.last_stable_offset == 3
    log.close()


def test_producer_state_after_truncation(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    for seq in range(8):
        log.append_as_leader(idem_batch(5, seq, tag=seq), 0)  # offset == seq
    assert len(log.segments) > 2  # so snapshots exist at the rolls
    log.truncate_to(5)
    assert log.producer_state.last_entry(5).last_seq == 4  # type: ignore[union-attr]
    dup = log.append_as_leader(idem_batch(5, 3, tag=3), 0)  # a retry of a batch still in the log
    assert dup.duplicate and dup.first_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idem_batch(5, 6), 0)  # 5 is expected next
    again = log.append_as_leader(idem_batch(5, 5, tag=55), 0)  # the removed one is not a duplicate
    assert not again.duplicate and again.first_offset == 5
    log.truncate_to(1)  # below every snapshot: replayed from the log start
    assert log.producer_state.last_entry(5).last_seq == 0  # type: ignore[union-attr]
    assert log.append_as_leader(idem_batch(5, 0), 0).duplicate
    log.truncate_to(0)
    assert log.producer_state.last_entry(5) is None
    assert not log.append_as_leader(idem_batch(5, 3), 0).duplicate  # unknown producer: any sequence
    log.close()


def test_truncate_to_details(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, segment_bytes=300)
    for i in range(10):
        log.append_as_leader(batch(3, tag=i), i // 3)  # batches of offsets 3i..3i+2
    log.update_high_watermark(log.log_end_offset)
    log.flush()
    assert not log.truncate_to(30) and not log.truncate_to(99)  # at or past the end: nothing
    assert log.log_end_offset == 30
    assert log.truncate_to(17)  # inside the batch 15..17: it goes whole
    assert log.log_end_offset == 15
    assert (log.high_watermark, log.recovery_point) == (15, 15)
    assert batch_bases(read_all(log))[-1] == (12, 14)
    assert log.epoch_entries == [(0, 0), (1, 9), (2, 18)][:2]
    assert all(s.base_offset < 15 for s in log.segments)
    assert log.offset_for_timestamp(T0 + 1) == (1, T0 + 1)
    with pytest.raises(ValueError):
        log.truncate_to(-1)
    log.close()
    log = open_log(d, segment_bytes=300)
    assert (log.log_end_offset, log.high_watermark) == (15, 15)
    assert LeaderEpochCache.parse_checkpoint((d / LEADER_EPOCH_FILE).read_bytes()) == [(0, 0), (1, 9)]
    log.close()


def test_truncate_below_the_first_segment_starts_over(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    log.truncate_fully_and_start_at(10)
    log.append_as_follower(replicated(10, 1, 5))
    log.update_high_watermark(15)
    assert log.truncate_to(4)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (4, 4, 4)
    assert log.epoch_entries == [] and read_all(log) == b""
    log.close()


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, segment_bytes=300)
    for i in range(6):
        log.append_as_leader(txn_batch(7 + i, 0), 1)
        log.append_as_leader(marker(7 + i, commit=False), 1, from_coordinator=True)
    log.update_high_watermark(log.log_end_offset)
    assert len(log.segments) > 1 and log.collect_aborted(0, 100)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark, log.recovery_point) == (100,) * 4
    assert log.epoch_entries == [] and log.describe_producers() == [] and log.collect_aborted(0, 200) == []
    assert [s.base_offset for s in log.segments] == [100]
    assert not list(d.glob("*.snapshot")) and not list(d.glob("*.txnindex"))
    log.append_as_follower(replicated(100, 4, 2))
    log.close_without_flush()
    log = open_log(d, segment_bytes=300)
    assert (log.log_start_offset, log.log_end_offset) == (100, 102)
    assert log.epoch_entries == [(4, 100)] and log.describe_producers() == []
    log.close()


def test_high_watermark_moves_back_only_on_truncation(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_follower(replicated(0, 1, 10))
    log.update_high_watermark(8)
    log.update_high_watermark(3)  # a leader's stale (lower) high watermark: ignored
    assert log.high_watermark == 8
    log.update_high_watermark(99)  # clamped to the log end
    assert log.high_watermark == 10
    log.truncate_to(0)
    assert log.high_watermark == 0
    log.close()


def test_restart_after_truncation_resurrects_nothing(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, segment_bytes=300)
    for i in range(12):
        log.append_as_leader(idem_batch(5, i, tag=i), i // 4)
    log.update_high_watermark(log.log_end_offset)
    log.close()  # everything durable, checkpoints at the end
    log = open_log(d, segment_bytes=300)
    log.truncate_to(5)
    log.append_as_follower(replicated(5, 7, 2, tag=9))  # new history over the removed offsets
    expected = read_all(log)
    log.close_without_flush()  # a crash: the recovery point on disk is below the new data
    log = open_log(d, segment_bytes=300)
    assert read_all(log) == expected
    assert log.epoch_entries == [(0, 0), (1, 4), (7, 5)]
    assert log.high_watermark <= 5
    assert log.producer_state.last_entry(5).last_seq == 4  # type: ignore[union-attr]
    log.close()
