"""Property: compaction under power cuts (strom.testing.powerloss), including cuts inside a clean
(the ``.cleaned`` -> ``.swap`` -> plain renames and their fsyncs) and inside recovery.

With ``flush.messages=1`` every acknowledged write is durable, so after any cut the log must hold,
for every key, the last value acknowledged for it (tombstones do not expire here), every record
it holds was acknowledged at that offset, offsets strictly increase and every batch is valid.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.clock import ManualClock
from strom.config import LogConfig
from strom.log import PartitionLog
from strom.log.cleaner import LogCleaner
from strom.protocol.records import build_batch, decode_records, iter_batches, verify_crc
from strom.testing.powerloss import PowerCut, PowerLossFS

T0 = 1_700_000_000_000

keys = st.sampled_from([b"a", b"b", b"c", b"d"])
value = st.one_of(st.none(), st.binary(min_size=0, max_size=30))
op = st.one_of(
    st.tuples(st.just("write"), st.lists(st.tuples(keys, value), min_size=1, max_size=4)),
    st.tuples(st.just("write"), st.lists(st.tuples(keys, value), min_size=1, max_size=4)),
    st.tuples(st.just("roll")),
    st.tuples(st.just("clean")),
    st.tuples(st.just("cut"), st.sampled_from([None, 1, 2, 4])),
    st.tuples(st.just("crash_in"), st.integers(1, 12)),
)

Record = tuple[int, bytes, bytes | None]


def records(log: PartitionLog) -> list[Record]:
    if log.log_end_offset == log.log_start_offset:
        return []
    data = log.read_bytes(log.log_start_offset, 1 << 30)
    for pos, h in iter_batches(data):
        verify_crc(data, pos, h)
    out = []
    for r in decode_records(data):
        assert r.key is not None
        out.append((r.offset, r.key, r.value))
    return out


def check(log: PartitionLog, acked: dict[int, tuple[bytes, bytes | None]], maybe: set[int]) -> None:
    got = records(log)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets)), "offsets do not strictly increase"
    for o, k, v in got:
        assert acked.get(o) == (k, v), f"record at {o} was never acknowledged there"
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for o, (k, v) in sorted(acked.items()):
        if o not in maybe:
            latest[k] = (o, v)
    have = {k: (o, v) for o, k, v in got}
    for k, (o, v) in latest.items():
        # the last acknowledged value, or a later one written by the append cut short
        assert k in have and (have[k] == (o, v) or have[k][0] in maybe), f"key {k!r} lost its last value"
    assert log.log_end_offset == (offsets[-1] + 1 if offsets else log.log_end_offset)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=5, max_size=50), segment_bytes=st.sampled_from([300, 600]))
def test_compaction_survives_power_cuts(ops: list[tuple[object, ...]], segment_bytes: int) -> None:
    config = LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.01, segment_bytes=segment_bytes,
                       flush_messages=1, file_delete_delay_ms=0)
    clock = ManualClock(T0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        root.mkdir()
        d = root / "t-0"
        with PowerLossFS(root) as fs:
            log = PartitionLog.open(d, "t", 0, config, clock)
            acked: dict[int, tuple[bytes, bytes | None]] = {}
            maybe: set[int] = set()  # offsets of an append cut short

            def restart(crash_recovery_after: int | None = None) -> PartitionLog:
                log.close_without_flush()
                fs.cut()
                if crash_recovery_after is not None:
                    fs.crash_after(crash_recovery_after)
                    with contextlib.suppress(PowerCut):
                        PartitionLog.open(d, "t", 0, config, clock).close_without_flush()
                    fs.disarm()
                    fs.cut()
                new = PartitionLog.open(d, "t", 0, config, clock)
                check(new, acked, maybe)
                for o in [o for o in acked if o >= new.log_end_offset]:
                    del acked[o]
                maybe.clear()
                new.update_high_watermark(new.log_end_offset)
                return new

            for o in ops:
                kind = o[0]
                try:
                    if kind == "write":
                        kvs = o[1]
                        start = log.log_end_offset
                        for i, (k, v) in enumerate(kvs):  # type: ignore[arg-type]
                            acked[start + i] = (k, v)
                            maybe.add(start + i)
                        clock.advance(1)
                        log.append_as_leader(build_batch([(k, v, [], clock.time_ms())  # type: ignore[misc]
                                                          for k, v in kvs]), 0)  # type: ignore[attr-defined]
                        maybe.clear()
                        log.update_high_watermark(log.log_end_offset)
                    elif kind == "roll":
                        log.roll()
                    elif kind == "clean":
                        cleaner = LogCleaner(root, clock, pause_every_bytes=0, use_process=False)
                        cleaner.clean_all([log])
                        log.delete_expired_segments(force=True)
                    elif kind == "crash_in":
                        fs.crash_after(int(o[1]))  # type: ignore[call-overload]
                    elif kind == "cut":
                        log = restart(int(o[1]) if o[1] else None)  # type: ignore[call-overload]
                except PowerCut:
                    log = restart()
            fs.disarm()
            log = restart()
            log.close()
