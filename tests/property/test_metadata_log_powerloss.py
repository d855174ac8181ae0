"""Random histories of the on-disk metadata log against a simple model, with power cuts anywhere.

Operations: leader, control (LeaderChangeMessage) and follower appends (epochs going up now and
then), flushes, high watermark moves, truncations (to a batch boundary at or above the high
watermark), snapshots at committed batch boundaries, ``delete_before_snapshot``, a follower
installing a snapshot past its log end (``create_snapshot`` + ``truncate_to_latest_snapshot``),
clean restarts, and power cuts
(:class:`strom.testing.powerloss.PowerLossFS`: only fsynced content and fsynced directory entries
survive; with ``torn`` the unsynced part of a file may survive whole, partly or sector by
sector), including cuts *inside* a later operation and inside the recovery that follows a cut.

The model holds the batches the log acknowledged (base, last offset, epoch, CRC), the offset below
which they must survive (the flushed offset at the last flush, lowered by truncations), the log
start offset and the snapshots. After every cut the reopened log must: open; start where the
model says (either side of an interrupted operation); hold contiguous CRC-valid batches, each one
the model knows, and at least everything that was flushed; have an epoch cache equal to the one
its batches imply; list every durable snapshot with its data and no partial one; be flushed to
its end, with the high watermark at its start.
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
from strom.protocol.records import build_batch, iter_batches, verify_crc
from strom.raft.log import OffsetAndEpoch
from strom.raft.metadata_log import METADATA_PARTITION_DIR, MetadataLog
from strom.testing.powerloss import PowerCut, PowerLossFS

T0 = 1_700_000_000_000

Batch = tuple[int, int, int, int]  # base, last offset, epoch, crc

leader = st.tuples(st.just("leader"), st.integers(1, 4), st.sampled_from([0, 0, 0, 1, 2]), st.integers(0, 60))
op = st.one_of(
    leader, leader, leader,
    st.tuples(st.just("follower"), st.integers(1, 3), st.sampled_from([0, 0, 1]), st.integers(1, 3)),
    st.tuples(st.just("control"), st.sampled_from([0, 1])),  # a new leader's LeaderChangeMessage
    st.tuples(st.just("flush")),
    st.tuples(st.just("hw"), st.floats(0, 1)),
    st.tuples(st.just("commit")),  # flush, then the high watermark to the end (a leader's commit)
    st.tuples(st.just("commit")),
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("snapshot"), st.floats(0, 1), st.integers(0, 3)),
    st.tuples(st.just("snapshot"), st.floats(0, 1), st.integers(0, 3)),
    st.tuples(st.just("delete_before")),
    st.tuples(st.just("install"), st.integers(1, 20), st.sampled_from([0, 1]), st.integers(0, 2),
              st.sampled_from([True, False, False])),  # rarely: it empties the log
    st.tuples(st.just("restart")),
    st.tuples(st.just("cut"), st.sampled_from([None, None, 1, 2, 4])),  # n: lose power in recovery
    st.tuples(st.just("crash_in"), st.integers(1, 6)),  # lose power inside a later operation
)
configs = st.fixed_dictionaries({
    "segment_bytes": st.sampled_from([300, 700, 1 << 20]),
    "index_interval_bytes": st.sampled_from([0, 100, 4096]),
})


@dataclass
class Model:
    batches: list[Batch] = field(default_factory=list)
    durable: int = 0
    start: int = 0
    hw: int = 0
    snapshots: dict[OffsetAndEpoch, bytes] = field(default_factory=dict)
    ts: int = T0


@dataclass
class Allowed:
    """What may be found after a cut that interrupted an operation."""

    batches: set[Batch]
    durable: int
    starts: set[int]
    snapshots: dict[OffsetAndEpoch, bytes]  # must be there (if at or after the start)
    maybe_snapshots: dict[OffsetAndEpoch, bytes]


def image(seed: int, n: int) -> bytes:
    return b"".join(build_batch([(None, f"img{seed}-{i}".encode(), [], T0)], base_offset=i) for i in range(n))


def log_batches(log: MetadataLog) -> tuple[bytes, list[Batch]]:
    data = log.read(log.start_offset, 1 << 30)
    out = []
    for pos, h in iter_batches(data):
        verify_crc(data, pos, h)
        out.append((h.base_offset, h.last_offset, h.partition_leader_epoch, h.crc))
    return data, out


def implied_epochs(batches: list[Batch], start: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for base, _, epoch, _ in batches:
        if not out or out[-1][0] != epoch:
            out.append((epoch, max(base, start)))
    return out


def check(log: MetadataLog, allowed: Allowed, directory: Path) -> None:
    start, end = log.start_offset, log.end_offset
    assert start in allowed.starts, (start, allowed.starts)
    assert start <= end
    _, batches = log_batches(log)
    expected = batches[0][0] if batches else start
    if batches:
        assert batches[0][0] <= start <= batches[0][1]
    for b in batches:
        assert b[0] == expected, "offsets are not contiguous"
        assert b in allowed.batches, f"batch {b} was never acknowledged"
        expected = b[1] + 1
    assert expected == end
    assert end >= allowed.durable, f"lost flushed records: end {end} < durable {allowed.durable}"
    assert log.flushed_offset == end
    ids = log.snapshot_ids
    assert log.high_watermark == min(max(start, ids[-1].offset if ids else 0), end)  # not persisted
    # the epoch cache is what the batches say
    epochs = implied_epochs(batches, start)
    assert log.epoch_entries == epochs
    assert log.last_fetched_epoch() == (epochs[-1][0] if epochs else ids[-1].epoch if ids else 0)
    # snapshots: every durable one (at or after the start) is there with its data; no partial one
    assert not [n for n in os.listdir(directory) if n.endswith((".part", ".deleted"))]
    for sid in allowed.snapshots:
        if sid.offset >= start:
            assert sid in ids, f"durable snapshot {sid} lost"
    for sid in ids:
        assert sid.offset >= start
        want = allowed.snapshots.get(sid, allowed.maybe_snapshots.get(sid))
        assert want is not None, f"unknown snapshot {sid}"
        assert log.read_snapshot(sid) == want
    if start > 0:
        assert any(s.offset >= start for s in ids)


def run(ops: list[tuple[object, ...]], cfg: dict[str, int], torn: bool, seed: int) -> None:
    config = LogConfig(**cfg)
    clock = ManualClock(T0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "meta"
        directory = root / METADATA_PARTITION_DIR
        root.mkdir()
        with PowerLossFS(root, torn=torn, rng=random.Random(seed)) as fs:
            log = MetadataLog.open(root, clock=clock, config=config)
            model = Model()

            def reopen(allowed: Allowed, crash_recovery_after: int | None = None) -> MetadataLog:
                fs.disarm()  # a crash_in that no operation reached
                if crash_recovery_after is not None:
                    fs.crash_after(crash_recovery_after)
                    with contextlib.suppress(PowerCut):
                        MetadataLog.open(root, clock=clock, config=config).close_without_flush()
                    fs.disarm()
                    fs.cut()
                new = MetadataLog.open(root, clock=clock, config=config)
                check(new, allowed, directory)
                # what was lost is gone for good; what survived is the model now
                _, model.batches = log_batches(new)
                model.durable = new.end_offset
                model.start, model.hw = new.start_offset, new.high_watermark
                model.snapshots = {s: new.read_snapshot(s) or b"" for s in new.snapshot_ids}
                return new

            def settled() -> Allowed:
                return Allowed(set(model.batches), model.durable, {model.start}, dict(model.snapshots), {})

            for o in ops:
                kind = o[0]
                if kind == "crash_in":
                    fs.crash_after(int(o[1]))  # type: ignore[call-overload]
                    continue
                if kind == "cut":
                    log.close_without_flush()
                    fs.disarm()
                    fs.cut()
                    log = reopen(settled(), int(o[1]) if o[1] else None)  # type: ignore[call-overload]
                    continue
                allowed = settled()
                try:
                    apply_op(o, log, model, allowed)
                except PowerCut:
                    log.close_without_flush()
                    fs.disarm()
                    fs.cut()
                    log = reopen(allowed)
                    continue
                if kind == "restart":
                    log = reopen(settled())
                    continue
                # the log agrees with the model after every operation
                assert (log.start_offset, log.end_offset) == (model.start, model.batches[-1][1] + 1
                                                              if model.batches else model.start)
                assert log.epoch_entries == implied_epochs(log_batches(log)[1], log.start_offset)
            fs.disarm()
            log.close_without_flush()
            fs.cut()
            log = reopen(settled())
            log.close()


def apply_op(o: tuple[object, ...], log: MetadataLog, model: Model, allowed: Allowed) -> None:
    """Run one operation, updating ``model`` when it returns and widening ``allowed`` first with
    whatever an interruption may leave behind."""
    kind = o[0]
    end = log.end_offset
    if kind in ("leader", "follower"):
        n, bump = int(o[1]), int(o[2])  # type: ignore[call-overload]
        epoch = log.last_fetched_epoch() + bump
        model.ts += 10
        if kind == "leader":
            size = int(o[3])  # type: ignore[call-overload]
            raw = build_batch([(None, b"v" * size + bytes([i]), [], model.ts) for i in range(n)],
                              base_offset=end, partition_leader_epoch=epoch)
            shipped = [raw]
        else:
            per = int(o[3])  # type: ignore[call-overload]
            shipped, base = [], end
            for _ in range(n):
                shipped.append(build_batch([(None, b"f%d" % base, [], model.ts)] * per, base_offset=base,
                                           partition_leader_epoch=epoch))
                base += per
        new = []
        for raw in shipped:
            ((_, h),) = iter_batches(raw)
            new.append((h.base_offset, h.last_offset, h.partition_leader_epoch, h.crc))
        allowed.batches.update(new)
        if kind == "leader":
            info = log.append_as_leader([b"v" * int(o[3]) + bytes([i]) for i in range(n)],  # type: ignore[call-overload]
                                        epoch, model.ts)
            assert info.first_offset == end
        else:
            log.append_as_follower(b"".join(shipped))
        model.batches.extend(new)
        _, got = log_batches(log)
        assert got[-len(new):] == new, "the log holds other bytes than appended"
    elif kind == "control":
        epoch = log.last_fetched_epoch() + int(o[1])  # type: ignore[call-overload]
        model.ts += 10
        raw = build_batch([(b"\x00\x00\x00\x02", b"leader-change", [], model.ts)], control=True,
                          partition_leader_epoch=epoch)
        ((_, h),) = iter_batches(raw)
        new_batch = (end, end, epoch, h.crc)
        allowed.batches.add(new_batch)
        log.append_control_as_leader(raw, epoch)
        model.batches.append(new_batch)
    elif kind == "flush":
        log.flush()
        model.durable = log.end_offset
    elif kind == "commit":
        log.flush()
        model.durable = log.end_offset
        log.update_high_watermark(log.flushed_offset)
        model.hw = log.high_watermark
    elif kind == "hw":
        target = model.start + int(float(o[1]) * (log.flushed_offset - model.start))  # type: ignore[arg-type]
        log.update_high_watermark(target)
        model.hw = max(model.hw, target)
        assert log.high_watermark == model.hw
    elif kind == "truncate":
        bounds = [b[0] for b in model.batches if b[0] >= max(model.hw, model.start)] + [end]
        cut = bounds[min(len(bounds) - 1, int(float(o[1]) * len(bounds)))]  # type: ignore[arg-type]
        allowed.durable = min(allowed.durable, cut)
        log.truncate_to(cut)
        model.batches = [b for b in model.batches if b[0] < cut]
        model.durable = min(model.durable, cut)
        assert log.end_offset == cut
    elif kind == "snapshot":
        ends = [b for b in model.batches if model.start < b[1] + 1 <= model.hw]
        if not ends:
            return
        b = ends[min(len(ends) - 1, int(float(o[1]) * len(ends)))]  # type: ignore[arg-type]
        sid = OffsetAndEpoch(b[1] + 1, b[2])
        if sid in model.snapshots:
            return
        data = image(sid.offset, int(o[2]))  # type: ignore[call-overload]
        allowed.maybe_snapshots[sid] = data
        log.create_snapshot(sid, data)
        model.snapshots[sid] = data
    elif kind == "delete_before":
        latest = log.latest_snapshot_id()
        if latest is None or latest.offset <= model.start or latest.offset > end:
            return
        allowed.starts.add(latest.offset)
        allowed.maybe_snapshots.update(allowed.snapshots)
        allowed.snapshots = {s: d for s, d in allowed.snapshots.items() if s.offset >= latest.offset}
        log.delete_before_snapshot(latest)
        model.start = latest.offset
        model.hw = max(model.hw, model.start)
        model.snapshots = {s: d for s, d in model.snapshots.items() if s.offset >= model.start}
    elif kind == "install":
        if not o[4]:
            return
        gap, bump, n = int(o[1]), int(o[2]), int(o[3])  # type: ignore[call-overload]
        sid = OffsetAndEpoch(end + gap, log.last_fetched_epoch() + bump)
        data = image(sid.offset, n)
        allowed.starts.add(sid.offset)
        allowed.maybe_snapshots.update(allowed.snapshots)
        allowed.maybe_snapshots[sid] = data
        log.create_snapshot(sid, data)
        assert log.truncate_to_latest_snapshot() is True
        model.batches = []
        model.start = model.hw = model.durable = sid.offset
        model.snapshots = {sid: data}
    elif kind == "restart":
        log.close()
        model.durable = end


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=20, max_size=60), cfg=configs, torn=st.booleans(),
       seed=st.integers(0, 2**32))
def test_power_cuts_never_lose_flushed_records_or_corrupt_the_epoch_cache(
    ops: list[tuple[object, ...]], cfg: dict[str, int], torn: bool, seed: int
) -> None:
    run(ops, cfg, torn, seed)
