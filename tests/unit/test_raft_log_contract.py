"""The storage contract of the Raft state machine (:mod:`strom.raft.log`), run against every
implementation.

The ``harness`` fixture yields one :class:`Harness` per implementation: the log under test plus
the two ways a node stops — :meth:`Harness.restart` (a clean close and reopen) and
:meth:`Harness.kill` (a crash: what was not flushed may be lost, and for the implementations here
*is* lost). The on-disk :class:`~strom.raft.metadata_log.MetadataLog` runs under
:class:`~strom.testing.powerloss.PowerLossFS` so that a kill is a power cut; the simulation's
in-memory :class:`~strom.testing.raft.MemoryRaftLog` runs as ``memory`` (a kill drops its
unflushed tail). To add an implementation, add a parameter to the fixture that builds a Harness
around it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

from strom.clock import ManualClock
from strom.config import LogConfig
from strom.protocol.records import build_batch, decode_records, iter_batches, parse_header
from strom.raft.log import AppendInfo, OffsetAndEpoch, RaftLog
from strom.raft.metadata_log import MetadataLog
from strom.testing.powerloss import PowerLossFS
from strom.testing.raft import MemoryRaftLog

T0 = 1_700_000_000_000


class Harness(Protocol):
    log: RaftLog

    def restart(self) -> None:
        """Close cleanly and open again."""
        ...

    def kill(self) -> None:
        """Crash (losing everything after ``flushed_offset``) and open again."""
        ...

    def other(self) -> RaftLog:
        """A second, empty log of the same kind (another node's); closed by :meth:`close`."""
        ...

    def close(self) -> None: ...


class DiskHarness:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = ManualClock(T0)
        # small segments, so that rolls and whole-segment deletion happen in these tests too
        self.config = LogConfig(segment_bytes=400, index_interval_bytes=100)
        self.fs = PowerLossFS(root).install()
        self.log: MetadataLog = self._open()
        self.others: list[MetadataLog] = []

    def _open(self) -> MetadataLog:
        return MetadataLog.open(self.root, clock=self.clock, config=self.config)

    def restart(self) -> None:
        self.log.close()
        self.log = self._open()

    def kill(self) -> None:
        self.log.close_without_flush()
        self.fs.cut()
        self.log = self._open()

    def other(self) -> RaftLog:
        log = MetadataLog.open(self.root / f"other-{len(self.others)}", clock=self.clock, config=self.config)
        self.others.append(log)
        return log

    def close(self) -> None:
        for log in [self.log, *self.others]:
            log.close()
        self.fs.uninstall()


class MemoryHarness:
    """The simulation's in-memory log (:class:`strom.testing.raft.MemoryRaftLog`)."""

    def __init__(self) -> None:
        self.log: MemoryRaftLog = MemoryRaftLog()

    def restart(self) -> None:
        self.log.restart()

    def kill(self) -> None:
        self.log.crash()

    def other(self) -> RaftLog:
        return MemoryRaftLog()

    def close(self) -> None:
        pass


@pytest.fixture(params=["disk", "memory"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    h: DiskHarness | MemoryHarness
    h = DiskHarness(tmp_path / "metadata") if request.param == "disk" else MemoryHarness()
    try:
        yield h
    finally:
        h.close()


def values(data: bytes) -> list[bytes | None]:
    return [r.value for r in decode_records(data)]


def epochs_of(data: bytes) -> list[tuple[int, int, int]]:
    """(base offset, last offset, epoch) of each batch."""
    return [(h.base_offset, h.last_offset, h.partition_leader_epoch) for _, h in iter_batches(data)]


def everything(log: RaftLog) -> bytes:
    return log.read(log.start_offset, 1 << 30)


def fill(log: RaftLog, plan: list[tuple[int, int]]) -> None:
    """Append, for each (epoch, n), one leader batch of n records."""
    for epoch, n in plan:
        log.append_as_leader([f"e{epoch}-{i}".encode() for i in range(n)], epoch, T0)


def follower_batch(base: int, epoch: int, n: int = 1, ts: int = T0) -> bytes:
    return build_batch([(None, f"f{base}-{i}".encode(), [], ts) for i in range(n)], base_offset=base,
                       partition_leader_epoch=epoch)


# --------------------------------------------------------------------------- empty log


def test_a_new_log_is_empty(harness: Harness) -> None:
    log = harness.log
    assert (log.start_offset, log.end_offset, log.flushed_offset, log.high_watermark) == (0, 0, 0, 0)
    assert log.last_fetched_epoch() == 0
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(0, 0)
    assert log.read(0, 100) == b""
    assert log.latest_snapshot_id() is None
    assert log.truncate_to_latest_snapshot() is False


# --------------------------------------------------------------------------- appends


def test_append_as_leader_writes_one_batch_with_the_epoch(harness: Harness) -> None:
    log = harness.log
    assert log.append_as_leader([b"a", b"b", b"c"], 2, T0 + 5) == AppendInfo(0, 2)
    assert log.append_as_leader([b"d"], 2, T0 + 6) == AppendInfo(3, 3)
    assert log.end_offset == 4
    data = everything(log)
    assert epochs_of(data) == [(0, 2, 2), (3, 3, 2)]
    assert values(data) == [b"a", b"b", b"c", b"d"]
    assert [r.key for r in decode_records(data)] == [None] * 4
    assert [r.timestamp for r in decode_records(data)] == [T0 + 5] * 3 + [T0 + 6]
    assert log.last_fetched_epoch() == 2


def test_append_at_a_lower_epoch_or_of_nothing_is_refused(harness: Harness) -> None:
    log = harness.log
    fill(log, [(3, 1)])
    with pytest.raises(ValueError):
        log.append_as_leader([b"x"], 2, T0)
    with pytest.raises(ValueError):
        log.append_as_leader([], 3, T0)
    with pytest.raises(ValueError):
        log.append_as_follower(follower_batch(1, 2))
    assert log.end_offset == 1
    fill(log, [(3, 1), (5, 1)])  # the same epoch again, then a higher one
    assert epochs_of(everything(log)) == [(0, 0, 3), (1, 1, 3), (2, 2, 5)]


def test_append_control_as_leader_places_a_prebuilt_batch(harness: Harness) -> None:
    log = harness.log
    fill(log, [(1, 2)])
    marker = build_batch([(b"\x00\x00\x00\x02", b"leader-change", [], T0)], control=True,
                         partition_leader_epoch=3)
    assert log.append_control_as_leader(marker, 3) == AppendInfo(2, 2)
    (_, h), = iter_batches(log.read(2, 100))
    assert (h.base_offset, h.partition_leader_epoch, h.is_control) == (2, 3, True)
    assert log.last_fetched_epoch() == 3
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(2, 1)
    with pytest.raises(ValueError):
        log.append_control_as_leader(marker, 2)  # a lower epoch
    assert log.end_offset == 3


def test_append_as_follower_keeps_the_leaders_batches(harness: Harness) -> None:
    leader = harness.log
    fill(leader, [(1, 2), (1, 1), (4, 3)])
    shipped = everything(leader)
    follower = harness.other()
    assert follower.append_as_follower(shipped) == AppendInfo(0, 5)
    assert everything(follower) == shipped
    assert follower.last_fetched_epoch() == 4
    assert follower.end_offset_for_epoch(1) == OffsetAndEpoch(3, 1)
    # fetched in pieces cut anywhere, as fetch responses with a size limit are
    piecewise = harness.other()
    while piecewise.end_offset < leader.end_offset:
        data = leader.read(piecewise.end_offset, 1 << 20)
        assert piecewise.append_as_follower(data[:parse_header(data).size + 37]) is not None
    assert everything(piecewise) == shipped


def test_append_as_follower_ignores_a_trailing_partial_batch(harness: Harness) -> None:
    log = harness.log
    first, second = follower_batch(0, 1, 2), follower_batch(2, 1, 1)
    assert log.append_as_follower(first + second[:30]) == AppendInfo(0, 1)
    assert log.append_as_follower(second[:-1]) is None
    assert log.append_as_follower(b"") is None
    assert log.end_offset == 2
    assert log.append_as_follower(second) == AppendInfo(2, 2)


def test_append_as_follower_checks_offsets_crc_and_epochs(harness: Harness) -> None:
    log = harness.log
    log.append_as_follower(follower_batch(0, 2))
    with pytest.raises(ValueError):  # a gap
        log.append_as_follower(follower_batch(5, 2))
    with pytest.raises(ValueError):  # an overlap
        log.append_as_follower(follower_batch(0, 2))
    with pytest.raises(ValueError):  # not contiguous inside the fetched data
        log.append_as_follower(follower_batch(1, 2) + follower_batch(3, 2))
    bad = bytearray(follower_batch(1, 2))
    bad[-1] ^= 0xFF
    with pytest.raises(ValueError):  # CRC
        log.append_as_follower(bytes(bad))
    with pytest.raises(ValueError):  # epochs go down
        log.append_as_follower(follower_batch(1, 3) + follower_batch(2, 2))
    assert log.end_offset == 1


# --------------------------------------------------------------------------- epochs


def test_end_offset_for_epoch_follows_kafka(harness: Harness) -> None:
    log = harness.log
    fill(log, [(2, 3), (2, 2), (4, 2), (5, 1), (7, 2)])  # 2 at 0, 4 at 5, 5 at 7, 7 at 8; end 10
    got = {e: log.end_offset_for_epoch(e) for e in range(10)}
    assert got == {
        0: OffsetAndEpoch(0, 0),  # below every epoch: (first epoch's start, the epoch asked)
        1: OffsetAndEpoch(0, 1),
        2: OffsetAndEpoch(5, 2),
        3: OffsetAndEpoch(5, 2),  # no epoch 3: the largest below it, ending where 4 starts
        4: OffsetAndEpoch(7, 4),
        5: OffsetAndEpoch(8, 5),
        6: OffsetAndEpoch(8, 5),
        7: OffsetAndEpoch(10, 7),  # the latest epoch ends at the log end
        8: OffsetAndEpoch(10, 7),
        9: OffsetAndEpoch(10, 7),
    }
    assert log.last_fetched_epoch() == 7


# --------------------------------------------------------------------------- reads


def test_read_returns_whole_batches_and_at_least_one(harness: Harness) -> None:
    log = harness.log
    fill(log, [(1, 3), (1, 2), (1, 4)])  # batches [0,2] [3,4] [5,8]
    sizes = [h.size for _, h in iter_batches(everything(log))]
    assert epochs_of(log.read(0, 1)) == [(0, 2, 1)]  # larger than max_bytes, still one batch
    assert epochs_of(log.read(0, sizes[0] + sizes[1])) == [(0, 2, 1), (3, 4, 1)]
    assert epochs_of(log.read(0, sizes[0] + sizes[1] - 1)) == [(0, 2, 1)]
    assert epochs_of(log.read(4, 1 << 20)) == [(3, 4, 1), (5, 8, 1)]  # from the batch holding 4
    assert log.read(9, 100) == b""
    for bad in (-1, 10):
        with pytest.raises(ValueError):
            log.read(bad, 100)


# --------------------------------------------------------------------------- truncation, HW


def test_truncate_to_removes_the_tail_and_its_epochs(harness: Harness) -> None:
    log = harness.log
    fill(log, [(1, 2), (3, 2), (3, 1), (4, 1)])  # 1 at 0, 3 at 2, 4 at 5; end 6
    log.truncate_to(6)
    log.truncate_to(99)
    assert log.end_offset == 6
    log.truncate_to(4)
    assert log.end_offset == 4
    assert log.last_fetched_epoch() == 3
    assert log.end_offset_for_epoch(4) == OffsetAndEpoch(4, 3)
    fill(log, [(6, 1)])
    assert epochs_of(everything(log)) == [(0, 1, 1), (2, 3, 3), (4, 4, 6)]
    assert log.end_offset_for_epoch(4) == OffsetAndEpoch(4, 3)
    assert log.end_offset_for_epoch(6) == OffsetAndEpoch(5, 6)
    log.truncate_to(2)
    assert (log.end_offset, log.last_fetched_epoch()) == (2, 1)
    log.truncate_to(0)
    assert (log.end_offset, log.last_fetched_epoch(), everything(log)) == (0, 0, b"")


def test_truncate_inside_a_batch_removes_the_whole_batch(harness: Harness) -> None:
    log = harness.log
    fill(log, [(1, 2), (2, 3)])
    log.truncate_to(3)
    assert log.end_offset == 2
    assert log.last_fetched_epoch() == 1


def test_high_watermark_rules(harness: Harness) -> None:
    log = harness.log
    fill(log, [(1, 3), (2, 3)])
    log.update_high_watermark(2)
    assert log.high_watermark == 2
    log.update_high_watermark(1)  # never backwards
    assert log.high_watermark == 2
    log.update_high_watermark(100)  # clamped to the log end
    assert log.high_watermark == 6
    with pytest.raises(ValueError):
        log.truncate_to(5)
    assert log.end_offset == 6


def test_truncating_below_the_high_watermark_is_refused(harness: Harness) -> None:
    log = harness.log
    fill(log, [(1, 3), (2, 3)])
    log.update_high_watermark(4)
    with pytest.raises(ValueError):
        log.truncate_to(3)
    with pytest.raises(ValueError):  # 4 is inside the batch [3, 5]: it would go too
        log.truncate_to(4)
    assert log.end_offset == 6


def test_flush_moves_flushed_offset(harness: Harness) -> None:
    log = harness.log
    fill(log, [(1, 2)])
    assert log.flushed_offset <= 2
    log.flush()
    assert log.flushed_offset == 2
    fill(log, [(1, 1)])
    assert log.flushed_offset == 2
    log.flush()
    assert log.flushed_offset == 3


# --------------------------------------------------------------------------- snapshots


def image(n: int) -> bytes:
    return b"".join(build_batch([(None, f"img{i}".encode(), [], T0)], base_offset=i) for i in range(n))


def test_snapshot_create_and_read(harness: Harness) -> None:
    log = harness.log
    fill(log, [(1, 3), (2, 3)])
    log.update_high_watermark(6)
    for sid, data in ((OffsetAndEpoch(3, 1), image(2)), (OffsetAndEpoch(6, 2), image(3))):
        log.create_snapshot(sid, data)
        assert log.read_snapshot(sid) == data
        assert log.latest_snapshot_id() == sid
    log.create_snapshot(OffsetAndEpoch(6, 2), image(1))  # exists: left as it is
    assert log.read_snapshot(OffsetAndEpoch(6, 2)) == image(3)
    assert log.read_snapshot(OffsetAndEpoch(5, 2)) is None
    log.create_snapshot(OffsetAndEpoch(4, 2), b"")  # an empty image
    assert log.read_snapshot(OffsetAndEpoch(4, 2)) == b""
    assert log.latest_snapshot_id() == OffsetAndEpoch(6, 2)
    with pytest.raises(ValueError):
        log.create_snapshot(OffsetAndEpoch(7, 2), b"not batches")


def test_delete_before_snapshot_moves_the_log_start(harness: Harness) -> None:
    log = harness.log
    fill(log, [(1, 3)] * 4 + [(2, 3)] * 4)  # epoch 1 at 0, 2 at 12; end 24
    log.update_high_watermark(24)
    log.create_snapshot(OffsetAndEpoch(6, 1), image(1))
    log.create_snapshot(OffsetAndEpoch(15, 2), image(2))
    log.delete_before_snapshot(OffsetAndEpoch(5, 1))  # no such snapshot: nothing happens
    assert log.start_offset == 0
    log.delete_before_snapshot(OffsetAndEpoch(15, 2))
    assert log.start_offset == 15
    assert log.read_snapshot(OffsetAndEpoch(6, 1)) is None  # older snapshots go
    assert log.read_snapshot(OffsetAndEpoch(15, 2)) == image(2)
    with pytest.raises(ValueError):
        log.read(14, 100)
    assert epochs_of(log.read(15, 1 << 20))[0] == (15, 17, 2)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(24, 2)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(15, 1)  # below every epoch left
    assert log.last_fetched_epoch() == 2
    with pytest.raises(ValueError):
        log.create_snapshot(OffsetAndEpoch(12, 2), image(1))  # below the log start
    log.delete_before_snapshot(OffsetAndEpoch(15, 2))  # again: nothing to do
    assert log.start_offset == 15


def test_a_log_wholly_in_its_snapshot(harness: Harness) -> None:
    log = harness.log
    fill(log, [(1, 2), (3, 2)])
    log.update_high_watermark(4)
    log.create_snapshot(OffsetAndEpoch(4, 3), image(1))
    log.delete_before_snapshot(OffsetAndEpoch(4, 3))
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch()) == (4, 4, 3)
    assert log.flushed_offset == 4  # what lies before the log start is in the snapshot
    assert log.truncate_to_latest_snapshot() is False  # the log is not behind it
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(4, 3)
    with pytest.raises(ValueError):
        log.append_as_leader([b"x"], 2, T0)
    fill(log, [(3, 1)])
    assert epochs_of(log.read(4, 100)) == [(4, 4, 3)]


def test_snapshot_past_the_log_end_restarts_the_log(harness: Harness) -> None:
    log = harness.log
    fill(log, [(1, 2), (2, 2)])
    log.create_snapshot(OffsetAndEpoch(3, 2), image(1))  # inside the log, same epoch: no restart
    assert log.truncate_to_latest_snapshot() is False
    log.create_snapshot(OffsetAndEpoch(10, 2), image(2))  # same epoch, past the end
    assert log.truncate_to_latest_snapshot() is True
    assert (log.start_offset, log.end_offset, log.high_watermark) == (10, 10, 10)
    assert log.last_fetched_epoch() == 2
    assert log.read(10, 100) == b""
    assert log.read_snapshot(OffsetAndEpoch(3, 2)) is None
    assert log.read_snapshot(OffsetAndEpoch(10, 2)) == image(2)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(10, 2)
    log.append_as_follower(follower_batch(10, 3, 2))
    assert (log.end_offset, log.last_fetched_epoch()) == (12, 3)


def test_snapshot_of_a_higher_epoch_restarts_the_log(harness: Harness) -> None:
    log = harness.log
    fill(log, [(1, 5)])
    log.create_snapshot(OffsetAndEpoch(3, 4), image(1))  # epoch 4 > the log's 1: the log diverged
    assert log.truncate_to_latest_snapshot() is True
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch()) == (3, 3, 4)


# --------------------------------------------------------------------------- restarts


def test_restart_keeps_everything(harness: Harness) -> None:
    log = harness.log
    fill(log, [(1, 3)] * 3 + [(3, 2)] * 3 + [(4, 1)])
    log.update_high_watermark(15)
    log.create_snapshot(OffsetAndEpoch(9, 1), image(2))
    log.delete_before_snapshot(OffsetAndEpoch(9, 1))
    before = (everything(log), log.start_offset, log.end_offset, log.latest_snapshot_id(),
              [log.end_offset_for_epoch(e) for e in range(6)], log.last_fetched_epoch())
    harness.restart()
    log = harness.log
    after = (everything(log), log.start_offset, log.end_offset, log.latest_snapshot_id(),
             [log.end_offset_for_epoch(e) for e in range(6)], log.last_fetched_epoch())
    assert after == before
    assert log.flushed_offset == log.end_offset
    assert log.high_watermark == 9  # not persisted: the latest snapshot's offset
    assert log.read_snapshot(OffsetAndEpoch(9, 1)) == image(2)


def test_kill_keeps_what_was_flushed(harness: Harness) -> None:
    log = harness.log
    fill(log, [(1, 2), (2, 2)])
    log.flush()
    flushed = everything(log)
    fill(log, [(2, 1), (5, 2)])
    harness.kill()
    log = harness.log
    assert log.end_offset == 4
    assert everything(log) == flushed
    assert log.last_fetched_epoch() == 2
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(4, 2)
    fill(log, [(6, 1)])  # and it goes on from there
    assert epochs_of(log.read(4, 100)) == [(4, 4, 6)]


def test_kill_after_truncation_and_reappend(harness: Harness) -> None:
    log = harness.log
    fill(log, [(1, 2)] * 4)
    log.flush()
    log.truncate_to(2)
    fill(log, [(3, 1)])
    log.flush()
    harness.kill()
    log = harness.log
    assert epochs_of(everything(log)) == [(0, 1, 1), (2, 2, 3)]
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(2, 1)


def test_kill_after_snapshot_keeps_it(harness: Harness) -> None:
    log = harness.log
    fill(log, [(1, 2), (2, 2)])
    log.flush()
    log.update_high_watermark(4)
    log.create_snapshot(OffsetAndEpoch(4, 2), image(3))
    log.delete_before_snapshot(OffsetAndEpoch(4, 2))
    harness.kill()
    log = harness.log
    assert log.latest_snapshot_id() == OffsetAndEpoch(4, 2)
    assert log.read_snapshot(OffsetAndEpoch(4, 2)) == image(3)
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch()) == (4, 4, 2)


def test_header_of_appended_batch_parses(harness: Harness) -> None:
    """The stored batch is a valid v2 batch whose header the state machine can read alone."""
    log = harness.log
    fill(log, [(9, 2)])
    h = parse_header(log.read(0, 1))
    assert (h.magic, h.base_offset, h.last_offset_delta, h.partition_leader_epoch, h.is_control) == (
        2, 0, 1, 9, False)
