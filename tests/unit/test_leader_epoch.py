"""LeaderEpochCache / LeaderEpochFileCache: Kafka's LeaderEpochFileCache rules and file format."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.log.leader_epoch import (
    LEADER_EPOCH_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochCache,
    LeaderEpochFileCache,
)

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def test_assign_adds_only_new_epochs_and_drops_contradicting_entries() -> None:
    cache = LeaderEpochCache()
    assert cache.latest_epoch is None
    assert cache.assign(1, 0)
    assert not cache.assign(1, 5)  # the latest epoch again, later: nothing
    assert cache.assign(3, 10)
    assert cache.entries == [(1, 0), (3, 10)]
    assert cache.assign(3, 8)  # same epoch, earlier start: replaces it (Kafka's isUpdateNeeded)
    assert cache.entries == [(1, 0), (3, 8)]
    assert cache.assign(2, 4)  # an epoch below the latest: the entries >= it go
    assert cache.entries == [(1, 0), (2, 4)]
    assert cache.assign(5, 2)  # a start below the latest start: those entries go
    assert cache.entries == [(1, 0), (5, 2)]
    assert not cache.assign(-1, 20)  # a batch without an epoch
    assert cache.latest_epoch == 5


def test_truncate_from_end_and_start() -> None:
    cache = LeaderEpochCache([(1, 0), (3, 10), (4, 20)])
    assert not cache.truncate_from_end(21)
    assert cache.truncate_from_end(20)
    assert cache.entries == [(1, 0), (3, 10)]
    assert cache.truncate_from_start(15)
    assert cache.entries == [(3, 15)]
    assert not cache.truncate_from_start(15)
    assert not cache.truncate_from_start(3)  # below every entry
    cache.clear()
    assert cache.entries == [] and cache.latest_epoch is None


def test_epoch_for_offset() -> None:
    cache = LeaderEpochCache([(1, 5), (3, 10)])
    assert cache.epoch_for_offset(4) is None
    assert cache.epoch_for_offset(5) == 1
    assert cache.epoch_for_offset(9) == 1
    assert cache.epoch_for_offset(100) == 3


@pytest.mark.parametrize(("epoch", "expected"), [
    (UNDEFINED_EPOCH, UNDEFINED),  # a bootstrapping follower
    (6, (6, 50)),  # the latest epoch: the log end
    (7, UNDEFINED),  # above the latest (a leader never sees it)
    (5, (4, 30)),  # between: the epoch below it, ending where the next starts
    (4, (4, 30)),
    (3, (3, 25)),
    (2, (2, 20)),  # below every entry: itself, ending at the first start (KIP-101's case)
    (0, (0, 20)),
])
def test_end_offset_for_follows_kafka(epoch: int, expected: tuple[int, int]) -> None:
    cache = LeaderEpochCache([(3, 20), (4, 25), (6, 30)])
    assert cache.end_offset_for(epoch, 50) == expected


def test_end_offset_for_empty_cache_is_undefined() -> None:
    assert LeaderEpochCache().end_offset_for(0, 10) == UNDEFINED
    assert LeaderEpochCache().end_offset_for(UNDEFINED_EPOCH, 10) == UNDEFINED


def test_checkpoint_format_is_kafkas() -> None:
    cache = LeaderEpochCache([(1, 0), (3, 10)])
    assert cache.to_checkpoint() == b"0\n2\n1 0\n3 10\n"
    assert LeaderEpochCache().to_checkpoint() == b"0\n0\n"
    assert LeaderEpochCache.parse_checkpoint(b"0\n2\n1 0\n3 10\n") == [(1, 0), (3, 10)]
    assert LeaderEpochCache.parse_checkpoint(b"0\n0\n") == []
    for bad in (b"1\n0\n", b"0\n2\n1 0\n", b"0\n2\n3 0\n1 10\n", b"0\n1\n-1 0\n", b"0\nx\n", b"",
                b"0\n1\n1\n", b"\xff"):
        assert LeaderEpochCache.parse_checkpoint(bad) is None, bad


def test_file_cache_writes_only_changes_atomically(tmp_path: Path) -> None:
    cache = LeaderEpochFileCache(tmp_path)
    assert LeaderEpochFileCache.read_file(tmp_path) is None
    assert cache.write()  # an empty cache is written too: the file then exists
    assert (tmp_path / LEADER_EPOCH_FILE).read_bytes() == b"0\n0\n"
    assert not cache.write()
    cache.assign(2, 7)
    assert cache.dirty
    assert cache.write()
    assert not cache.dirty
    assert LeaderEpochFileCache.read_file(tmp_path) == [(2, 7)]
    assert not (tmp_path / (LEADER_EPOCH_FILE + ".tmp")).exists()
    (tmp_path / LEADER_EPOCH_FILE).write_bytes(b"garbage")
    assert LeaderEpochFileCache.read_file(tmp_path) is None
    again = LeaderEpochFileCache(tmp_path, [(2, 7)])
    again.mark_written([(2, 7)])  # as an open that read the file would
    assert not again.dirty
