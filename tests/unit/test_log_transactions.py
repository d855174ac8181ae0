"""Partition side of transactions: last stable offset, aborted-transaction index, recovery."""

from __future__ import annotations

from pathlib import Path

from test_log_support import T0, batch, open_log, read_all

from strom.log.transaction_index import AbortedTxn
from strom.protocol.records import build_control_batch, iter_batches


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0) -> bytes:
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)


def marker(pid: int, commit: bool, epoch: int = 0) -> bytes:
    return build_control_batch(pid, epoch, commit, 0, T0)


def test_lso_and_aborted_index(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(1), 0)  # 0: plain
    log.append_as_leader(txn_batch(7, 0), 0)  # 1-2: txn of producer 7
    log.append_as_leader(txn_batch(8, 0), 0)  # 3-4: txn of producer 8
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 1
    log.append_as_leader(marker(7, commit=False), 0, from_coordinator=True)  # 5: abort 7
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 3  # producer 8 still open
    log.append_as_leader(marker(8, commit=True), 0, from_coordinator=True)  # 6: commit 8
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset == 7
    assert log.collect_aborted(0, 7) == [AbortedTxn(7, 1, 5, 1)]
    assert log.collect_aborted(6, 7) == []  # ended before the range
    assert log.collect_aborted(0, 1) == []  # starts after the range
    producers = {p["producer_id"]: p for p in log.describe_producers()}
    assert producers[7]["current_txn_start_offset"] == -1


def test_aborted_index_survives_clean_and_unclean_reopen(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, segment_bytes=400)
    for i in range(6):
        pid = 10 + i
        log.append_as_leader(txn_batch(pid, 0), 0)
        log.append_as_leader(marker(pid, commit=i % 2 == 0), 0, from_coordinator=True)
    expected = log.collect_aborted(0, log.log_end_offset)
    assert [a.producer_id for a in expected] == [11, 13, 15]
    assert len(log.segments) > 1
    log.close()
    log = open_log(d, segment_bytes=400)
    assert log.collect_aborted(0, log.log_end_offset) == expected
    log.append_as_leader(txn_batch(99, 0), 0)
    log.close_without_flush()  # crash: the rebuild must not duplicate entries and must keep 99 open
    for p in d.glob("*.snapshot"):
        p.unlink()
    log = open_log(d, segment_bytes=400)
    assert log.collect_aborted(0, log.log_end_offset) == expected
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset - 2


def test_coordinator_transactional_appends_are_never_taken_for_retries(tmp_path: Path) -> None:
    """The group coordinator writes a producer's transactional offset commits with no sequence
    (-1), one batch per TxnOffsetCommit. Each is appended: none is answered as a duplicate of
    the last (Kafka looks for duplicates in client appends only). They were, and a restart then
    lost every transactional offset commit after a producer's first."""
    log = open_log(tmp_path / "t-0")
    for txn in range(7):  # more than the 5 batches a producer's entry keeps
        end = log.log_end_offset
        info = log.append_as_leader(txn_batch(7, -1, n=1), 0, from_coordinator=True)
        assert not info.duplicate and info.first_offset == end, txn
        log.append_as_leader(marker(7, commit=True), 0, from_coordinator=True)
    assert log.log_end_offset == 14
    data = read_all(log)
    assert [h.is_control for _, h in iter_batches(data)] == [False, True] * 7
    # a client's retried batch is still answered with its first offsets, nothing appended
    first = log.append_as_leader(txn_batch(8, 0), 0)
    again = log.append_as_leader(txn_batch(8, 0), 0)
    assert again.duplicate and again.first_offset == first.first_offset == 14
    assert log.log_end_offset == 16


def test_a_marker_from_an_older_transaction_coordinator_is_refused(tmp_path: Path) -> None:
    """Kafka's checkCoordinatorEpoch: once a producer's marker from coordinator epoch 5 is in
    the partition, a marker from epoch 4 (a coordinator that lost the transaction's
    __transaction_state partition, still retrying) is refused with TRANSACTION_COORDINATOR_FENCED
    and nothing is appended; the same or a newer epoch is taken. A follower replicating the
    leader's log takes every marker as it is."""
    import pytest

    from strom.log.errors import TransactionCoordinatorFencedError

    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn_batch(7, 0), 0)
    log.append_as_leader(build_control_batch(7, 0, True, 5, T0), 0, from_coordinator=True)
    log.append_as_leader(txn_batch(7, 2), 0)  # the producer's next transaction, same epoch
    end = log.log_end_offset
    with pytest.raises(TransactionCoordinatorFencedError) as e:
        log.append_as_leader(build_control_batch(7, 0, True, 4, T0), 0, from_coordinator=True)
    assert e.value.error_code == 52
    assert log.log_end_offset == end
    log.update_high_watermark(end)
    assert log.last_stable_offset == end - 2  # the next transaction is still open
    log.append_as_leader(build_control_batch(7, 0, False, 5, T0), 0, from_coordinator=True)
    assert [p["coordinator_epoch"] for p in log.describe_producers()] == [5]
    log.append_as_leader(txn_batch(7, 4), 0)
    log.append_as_leader(build_control_batch(7, 0, True, 6, T0), 0, from_coordinator=True)
    assert [p["coordinator_epoch"] for p in log.describe_producers()] == [6]
    # recovery without a producer snapshot rebuilds the epoch from the markers in the log
    log.close_without_flush()
    for snap in (tmp_path / "t-0").glob("*.snapshot"):
        snap.unlink()
    log = open_log(tmp_path / "t-0")
    assert [p["coordinator_epoch"] for p in log.describe_producers()] == [6]
    log.append_as_leader(txn_batch(7, 6), 0)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_as_leader(build_control_batch(7, 0, True, 5, T0), 0, from_coordinator=True)

    follower = open_log(tmp_path / "f-0")
    for b in (txn_batch(8, 0), build_control_batch(8, 0, True, 5, T0), txn_batch(8, 2),
              build_control_batch(8, 0, True, 4, T0)):
        data = bytearray(b)
        from strom.protocol.records import patch_base_offset
        patch_base_offset(data, 0, follower.log_end_offset)
        follower.append_as_follower(bytes(data))
    assert [p["coordinator_epoch"] for p in follower.describe_producers()] == [4]
