"""Property: after any sequence of writes, rolls, cleanings and clock moves, reading a compacted
log gives, for every key, the last value written — unless that was a tombstone that has expired,
in which case the key is absent or still shows the tombstone — and offsets strictly increase.
The same holds after reopening the log."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.clock import ManualClock
from strom.config import LogConfig
from strom.log import PartitionLog
from strom.log.cleaner import LogCleaner
from strom.protocol.records import (
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    build_batch,
    decode_records,
    iter_batches,
)

T0 = 1_700_000_000_000
RETAIN = 1000

keys = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"])
value = st.one_of(st.none(), st.binary(min_size=0, max_size=20))
write = st.tuples(st.just("write"), st.lists(st.tuples(keys, value), min_size=1, max_size=5), st.booleans())
op = st.one_of(
    write,
    st.tuples(st.just("roll")),
    st.tuples(st.just("clean")),
    st.tuples(st.just("tick"), st.integers(0, 2 * RETAIN)),
)


def read(log: PartitionLog) -> list[tuple[int, bytes, bytes | None]]:
    data = log.read_bytes(log.log_start_offset, 1 << 30)
    last = -1
    for _, h in iter_batches(data):
        assert h.base_offset > last
        last = h.last_offset
    out = []
    for r in decode_records(data):
        assert r.key is not None
        out.append((r.offset, r.key, r.value))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=40))
def test_latest_value_per_key_survives_cleaning(ops: list[tuple[object, ...]]) -> None:
    d = Path(tempfile.mkdtemp())
    try:
        clock = ManualClock(T0)
        cfg = LogConfig(
            cleanup_policy="compact",
            min_cleanable_dirty_ratio=0.0,
            delete_retention_ms=RETAIN,
            segment_bytes=600,
        )
        log = PartitionLog.open(d / "p-0", "p", 0, cfg, clock)
        cleaner = LogCleaner(d, clock, pause_every_bytes=0)
        last: dict[bytes, bytes | None] = {}
        last_ts: dict[bytes, int] = {}
        for o in ops:
            if o[0] == "write":
                kvs, compressed = o[1], o[2]
                assert isinstance(kvs, list)
                ts = clock.time_ms()
                codec = COMPRESSION_ZSTD if compressed else COMPRESSION_NONE
                log.append_as_leader(
                    build_batch([(k, v, [], ts) for k, v in kvs], compression=codec), leader_epoch=0
                )
                log.update_high_watermark(log.log_end_offset)
                for k, v in kvs:
                    last[k] = v
                    last_ts[k] = ts
            elif o[0] == "roll":
                log.roll()
            elif o[0] == "clean":
                cleaner.clean_all([log])
            else:
                clock.advance(int(o[1]))  # type: ignore[call-overload]
        for reopen in (False, True):
            if reopen:
                log.close()
                log = PartitionLog.open(d / "p-0", "p", 0, cfg, clock)
            got = read(log)
            offsets = [off for off, _, _ in got]
            assert offsets == sorted(set(offsets))
            seen: dict[bytes, bytes | None] = {}
            for _, k, v in got:
                seen[k] = v
            for k, v in last.items():
                if v is None:
                    assert seen.get(k) is None  # a tombstone: absent (expired) or the tombstone
                    if k not in seen:
                        assert clock.time_ms() - last_ts[k] >= RETAIN
                else:
                    assert seen.get(k) == v
            assert set(seen) <= set(last)
        log.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
