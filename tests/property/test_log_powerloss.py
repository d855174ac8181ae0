"""Power cuts under a real PartitionLog: what ``flush.messages`` / ``flush.ms`` promise, and that
recovery always yields a valid prefix of what was acknowledged.

The model of the disk is :class:`strom.testing.powerloss.PowerLossFS`: only what was fsynced (file
contents) and what a directory fsync saw (names) survives a cut; with ``torn`` the unflushed part
of each file may also survive whole, in part, or sector by sector.

The promise, as Kafka states it (``UnifiedLog.append``: ``unflushedMessages >= flushInterval``
flushes; ``flush.ms`` via the flush scheduler; a roll flushes the segment it closes):

* after an append, if ``log end - recovery point >= flush.messages`` everything is durable;
* after a ``flush_if_due`` at least ``flush.ms`` after the last flush, everything is durable;
* an explicit flush and a clean close make everything durable; a roll makes the closed segments
  durable.

The test keeps its own recovery point by those rules (it learns of rolls from the segment count)
and after each cut checks that everything below it survived, and that whatever survived is a
prefix of the acknowledged records, CRC-valid and contiguous, with consistent indexes,
producer state and leader epoch cache.

Replica operations run among the others: ``append_as_follower`` of batches a leader wrote (own
offsets and epochs) and ``truncate_to``, which is durable when it returns: the model forgets the
removed batches then, so a cut that brought any of them back fails the prefix check.
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.clock import ManualClock
from strom.config import LogConfig
from strom.log import PartitionLog
from strom.log.leader_epoch import LeaderEpochCache
from strom.log.producer_state import ProducerStateManager
from strom.log.transaction_index import AbortedTxn
from strom.protocol.records import (
    CONTROL_ABORT,
    build_batch,
    build_control_batch,
    control_type,
    iter_batches,
    parse_header,
    verify_crc,
)
from strom.testing.powerloss import PowerCut, PowerLossFS

T0 = 1_700_000_000_000
IDEMPOTENT_PID = 7
TXN_PID = 9

append = st.tuples(st.just("append"), st.integers(1, 4), st.sampled_from(["plain", "idempotent", "txn"]),
                   st.integers(0, 80))
op = st.one_of(
    append, append, append, append,
    st.tuples(st.just("marker"), st.booleans()),
    st.tuples(st.just("flush")),
    st.tuples(st.just("tick"), st.sampled_from([10, 100, 1000])),
    st.tuples(st.just("roll")),
    st.tuples(st.just("hw")),
    st.tuples(st.just("cut"), st.sampled_from([None, None, 1, 2, 3, 5])),  # n: crash in recovery
    st.tuples(st.just("crash_in"), st.integers(1, 8)),  # lose power inside a later operation
    st.tuples(st.just("close")),
    st.tuples(st.just("delete_records"), st.floats(0, 1)),
    st.tuples(st.just("retention")),
    st.tuples(st.just("epoch")),
    st.tuples(st.just("follower"), st.integers(1, 4), st.integers(0, 80)),
    st.tuples(st.just("truncate"), st.floats(0, 1)),
)
configs = st.fixed_dictionaries({
    "segment_bytes": st.sampled_from([700, 1200, 4000]),
    "index_interval_bytes": st.sampled_from([0, 100, 4096]),
    "flush_messages": st.sampled_from([1, 3, 10, 9223372036854775807]),
    "flush_ms": st.sampled_from([100, 1000, 9223372036854775807]),
})


@dataclass
class Model:
    """What was acknowledged, and the offset below which it must survive a cut."""

    batches: list[tuple[int, int, int]] = field(default_factory=list)  # (base, last offset, crc)
    durable: int = 0  # the promised recovery point
    last_flush_ms: int = 0
    batch_no: int = 0  # timestamps keep increasing across cuts
    min_log_start: int = 0  # the log start offset is in [min, max] (a DeleteRecords cut short)
    max_log_start: int = 0
    in_flight: bytes = b""  # the batch being appended
    epoch: int = 0  # the leader epoch of appends (never decreases)

    def flushed(self, leo: int, now: int) -> None:
        self.durable = max(self.durable, leo)
        self.last_flush_ms = now


def check_log(log: PartitionLog, model: Model) -> None:
    """Everything recovery must guarantee, whatever was lost."""
    leo = log.log_end_offset
    start = log.log_start_offset
    # DeleteRecords checkpoints the new log start offset before it answers
    assert log.log_segments[0].base_offset <= start
    # (never past the log end: unflushed records below it may have been lost)
    assert min(model.min_log_start, leo) <= start <= min(model.max_log_start, leo)
    data = log.read_bytes(start, 1 << 30) if start < leo else b""
    batches = list(iter_batches(data))
    if batches:
        assert batches[0][1].base_offset <= start <= batches[0][1].last_offset
    expected = batches[0][1].base_offset if batches else start
    for pos, h in batches:
        verify_crc(data, pos, h)
        assert h.base_offset == expected, "offsets are not contiguous"
        expected = h.next_offset
    assert expected == leo
    got = [(h.base_offset, h.last_offset, h.crc) for _, h in batches]
    # the CRC covers everything but the base offset and leader epoch: same batch, same CRC
    j = next((i for i, b in enumerate(model.batches) if got and b[0] == got[0][0]), 0)
    assert got == model.batches[j:j + len(got)], "recovered batches are not a prefix of the acknowledged ones"
    assert leo == 0 or leo in {b[1] + 1 for b in model.batches}, "recovery ended inside a batch"
    assert leo >= model.durable, f"lost flushed records: log end {leo} < durable {model.durable}"
    # indexes agree with the data
    for seg in log.log_segments:
        seg.offset_index.sanity_check(seg.size)
        seg.time_index.sanity_check()
        for off, pos in seg.offset_index.entries:
            assert parse_header(os.pread(seg.fd, 61, pos)).last_offset == off
    for _, h in batches:
        if not h.is_control and h.base_offset >= start:
            assert log.offset_for_timestamp(h.base_timestamp) == (h.base_offset, h.base_timestamp)
        first = max(h.base_offset, start)
        assert batch_holding(log, first) == (h.base_offset, h.last_offset)
    if start == 0:  # the aborted-transaction index is what the log says
        aborted, first_of = [], {}
        for pos, h in batches:
            if h.is_control:
                first = first_of.pop(h.producer_id, None)
                if first is not None and control_type(data, pos, h) == CONTROL_ABORT:
                    aborted.append(AbortedTxn(h.producer_id, first, h.base_offset, first))
            elif h.is_transactional:
                first_of.setdefault(h.producer_id, h.base_offset)
        assert log.collect_aborted(0, leo) == aborted
    # producer state is what the log says
    fresh = ProducerStateManager(Path("/nonexistent"))
    fresh.replay(h for _, h in batches)
    if start == 0:
        assert producer_view(log.producer_state) == producer_view(fresh)
    else:  # producers whose batches were deleted are kept; an old txn start may lie below
        kept = producer_view(log.producer_state)
        for pid, (epoch, seq, _) in producer_view(fresh).items():
            assert kept[pid][0] == epoch and (seq < 0 or kept[pid][1] == seq)
    # the epoch cache is what the batches say (and claims nothing past the log end)
    epochs = LeaderEpochCache()
    for _, h in batches:
        epochs.assign(h.partition_leader_epoch, h.base_offset)
    epochs.truncate_from_start(start)
    assert log.epoch_entries == epochs.entries
    assert start <= log.high_watermark <= leo
    assert log.last_stable_offset <= log.high_watermark
    assert log.recovery_point <= leo


def batch_holding(log: PartitionLog, offset: int) -> tuple[int, int]:
    data = log.read_bytes(offset, 1)
    _, h = next(iter(iter_batches(data)))
    return h.base_offset, h.last_offset


def producer_view(psm: ProducerStateManager) -> dict[int, tuple[int, int, int | None]]:
    return {pid: (e.producer_epoch, e.last_seq, e.current_txn_first_offset)
            for pid, e in psm.producers.items()}


def next_seq(log: PartitionLog, pid: int) -> int:
    e = log.producer_state.last_entry(pid)
    return 0 if e is None or e.last_seq < 0 else e.last_seq + 1


def run(ops: list[tuple[object, ...]], cfg: dict[str, int], torn: bool, seed: int) -> None:
    config = LogConfig(**cfg)
    clock = ManualClock(T0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        d = root / "t-0"
        root.mkdir()
        with PowerLossFS(root, torn=torn, rng=random.Random(seed)) as fs:
            log = PartitionLog.open(d, "t", 0, config, clock)
            model = Model(last_flush_ms=clock.monotonic_ms())

            def restart(crash_recovery_after: int | None = None) -> PartitionLog:
                """Power cut, then open again (optionally losing power once more while the
                recovery runs), check everything, and make the model what survived."""
                log.close_without_flush()
                fs.cut()
                if crash_recovery_after is not None:
                    fs.crash_after(crash_recovery_after)
                    with contextlib.suppress(PowerCut):
                        PartitionLog.open(d, "t", 0, config, clock).close_without_flush()
                    fs.disarm()
                    fs.cut()
                return reopened(PartitionLog.open(d, "t", 0, config, clock))

            def reopened(new: PartitionLog) -> PartitionLog:
                model.last_flush_ms = clock.monotonic_ms()
                check_log(new, model)
                # what was lost is gone for good: the log continues from its new end
                model.batches = [b for b in model.batches if b[1] < new.log_end_offset]
                model.min_log_start = model.max_log_start = new.log_start_offset
                model.durable = new.log_end_offset
                return new

            for o in ops:
                kind = o[0]
                if kind == "crash_in":
                    fs.crash_after(int(o[1]))  # type: ignore[call-overload]
                    continue
                if kind == "cut":
                    log = restart(int(o[1]) if o[1] else None)  # type: ignore[call-overload]
                    continue
                leo = log.log_end_offset
                segments_before = len(log.segments)
                raw = b""
                try:
                    if not apply_op(o, log, model, clock, config):
                        continue
                except PowerCut:
                    if raw_in_flight := model.in_flight:
                        # the append may or may not have reached the disk
                        h = parse_header(raw_in_flight)
                        model.batches.append((leo, leo + h.last_offset_delta, h.crc))
                    log = restart()
                    continue
                finally:
                    raw, model.in_flight = model.in_flight, b""
                if kind == "close":
                    model.flushed(leo, clock.monotonic_ms())
                    log = reopened(PartitionLog.open(d, "t", 0, config, clock))
                    continue
                new_leo = log.log_end_offset
                if kind == "truncate":  # durable now: what it removed is gone for good
                    model.batches = [b for b in model.batches if b[1] < new_leo]
                    model.durable = min(model.durable, new_leo)
                    model.min_log_start = model.max_log_start = log.log_start_offset
                    continue
                if new_leo != leo:
                    model.batches.append((leo, new_leo - 1, parse_header(raw).crc))
                if len(log.segments) > segments_before:
                    model.durable = max(model.durable, log.log_segments[-1].base_offset)
                appended = kind in ("append", "marker", "follower")
                if appended and new_leo - model.durable >= config.flush_messages:
                    model.flushed(new_leo, clock.monotonic_ms())
            fs.disarm()
            log = restart()
            log.close()


def apply_op(o: tuple[object, ...], log: PartitionLog, model: Model, clock: ManualClock,
             config: LogConfig) -> bool:
    """Run one operation; False if it did nothing. An append leaves its batch in
    ``model.in_flight`` (the caller decides whether it was acknowledged)."""
    kind = o[0]
    leo = log.log_end_offset
    if kind == "append":
        n, flavour, size = int(o[1]), o[2], int(o[3])  # type: ignore[call-overload]
        ts = T0 + 100 * model.batch_no
        model.batch_no += 1
        recs = [(None, f"{model.batch_no}:{i}:".encode() + b"v" * size, [], ts + i) for i in range(n)]
        if flavour == "plain":
            raw = build_batch(recs)  # type: ignore[arg-type]
        elif flavour == "idempotent":
            raw = build_batch(recs, producer_id=IDEMPOTENT_PID, producer_epoch=0,  # type: ignore[arg-type]
                              base_sequence=next_seq(log, IDEMPOTENT_PID))
        else:
            raw = build_batch(recs, producer_id=TXN_PID, producer_epoch=0,  # type: ignore[arg-type]
                              base_sequence=next_seq(log, TXN_PID), transactional=True)
        model.in_flight = raw
        info = log.append_as_leader(raw, model.epoch)
        assert not info.duplicate and info.first_offset == leo
    elif kind == "marker":
        e = log.producer_state.last_entry(TXN_PID)
        if e is None or e.current_txn_first_offset is None:
            return False
        ts = T0 + 100 * model.batch_no
        model.batch_no += 1
        raw = build_control_batch(TXN_PID, 0, bool(o[1]), 0, ts)
        model.in_flight = raw
        log.append_as_leader(raw, model.epoch, from_coordinator=True)
    elif kind == "flush":
        log.flush()
        model.flushed(log.log_end_offset, clock.monotonic_ms())
    elif kind == "tick":
        clock.advance(int(o[1]))  # type: ignore[call-overload]
        due = clock.monotonic_ms() - model.last_flush_ms >= config.flush_ms
        log.flush_if_due()
        if due and model.durable < leo:
            model.flushed(leo, clock.monotonic_ms())
    elif kind == "roll":
        log.roll()
    elif kind == "hw":
        log.update_high_watermark(leo)
    elif kind == "delete_records":
        ls, hw = log.log_start_offset, log.high_watermark
        target = ls + int(float(o[1]) * (hw - ls))  # type: ignore[arg-type]
        model.max_log_start = max(model.max_log_start, target)  # if it is cut short: either
        log.delete_records(target)
        model.min_log_start = model.max_log_start = log.log_start_offset
    elif kind == "retention":
        log.delete_old_segments()
        log.delete_expired_segments(force=True)
    elif kind == "close":
        log.close()
    elif kind == "epoch":
        model.epoch += 1
        return False
    elif kind == "follower":  # a batch a leader wrote at our log end, in the current epoch
        n, size = int(o[1]), int(o[2])  # type: ignore[call-overload]
        ts = T0 + 100 * model.batch_no
        model.batch_no += 1
        recs = [(None, f"{model.batch_no}:{i}:".encode() + b"f" * size, [], ts + i) for i in range(n)]
        raw = build_batch(recs, base_offset=leo, partition_leader_epoch=model.epoch)  # type: ignore[arg-type]
        model.in_flight = raw
        assert log.append_as_follower(raw + raw[:30]) == leo + n  # (a partial batch follows)
    elif kind == "truncate":
        ls = log.log_start_offset
        if leo == ls:
            return False
        target = ls + int(float(o[1]) * (leo - ls))  # type: ignore[arg-type]
        cut = next((b[0] for b in model.batches if b[0] <= target <= b[1]), target)
        # cut short, it leaves the old log or a prefix of it; the log start may drop to the cut
        model.durable = min(model.durable, cut)
        model.min_log_start = min(model.min_log_start, cut)
        log.truncate_to(target)
        assert log.log_end_offset == min(cut, leo)
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=5, max_size=60), cfg=configs, torn=st.booleans(), seed=st.integers(0, 2**32))
def test_power_cut_keeps_flushed_data_and_recovers_a_valid_prefix(
    ops: list[tuple[object, ...]], cfg: dict[str, int], torn: bool, seed: int
) -> None:
    run(ops, cfg, torn, seed)
