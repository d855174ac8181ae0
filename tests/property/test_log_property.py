"""Property tests: random appends, reads from random offsets, clean and unclean reopen."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.clock import ManualClock
from strom.config import LogConfig
from strom.log import PartitionLog
from strom.protocol.records import build_batch, decode_records, iter_batches

T0 = 1_700_000_000_000

batch_spec = st.tuples(st.integers(1, 6), st.integers(0, 100))  # (records, value size)
requests = st.lists(st.lists(batch_spec, min_size=1, max_size=3), min_size=1, max_size=25)
configs = st.fixed_dictionaries(
    {"segment_bytes": st.integers(2600, 5000), "index_interval_bytes": st.sampled_from([0, 50, 300, 4096])}
)


def make_request(spec: list[tuple[int, int]], n: int) -> bytes:
    out = b""
    for j, (count, size) in enumerate(spec):
        recs = [(None, bytes([65 + (n + j + i) % 26]) * size, [], T0 + n * 10 + i) for i in range(count)]
        out += build_batch(recs, base_offset=999)  # type: ignore[arg-type]
    return out


def contents(log: PartitionLog) -> list[tuple[int, int, bytes | None]]:
    data = log.read_bytes(log.log_start_offset, 1 << 30)
    return [(r.offset, r.timestamp, r.value) for r in decode_records(data)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=requests, cfg=configs, data=st.data())
def test_appends_reads_and_reopen(reqs: list[list[tuple[int, int]]], cfg: dict[str, int],
                                  data: st.DataObject) -> None:
    config = LogConfig(**cfg)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "t-0"
        log = PartitionLog.open(d, "t", 0, config, ManualClock(T0))
        ranges: list[tuple[int, int]] = []
        expected_leo = 0
        for n, spec in enumerate(reqs):
            info = log.append_as_leader(make_request(spec, n), leader_epoch=1)
            total = sum(c for c, _ in spec)
            assert (info.first_offset, info.last_offset) == (expected_leo, expected_leo + total - 1)
            for count, _ in spec:
                ranges.append((expected_leo, expected_leo + count - 1))
                expected_leo += count
        assert log.log_end_offset == expected_leo
        everything = contents(log)
        assert [o for o, _, _ in everything] == list(range(expected_leo))  # contiguous

        # reads from random offsets start with the batch containing the offset
        for _ in range(10):
            off = data.draw(st.integers(0, expected_leo - 1))
            max_bytes = data.draw(st.integers(0, 2000))
            hw = data.draw(st.one_of(st.none(), st.integers(off, expected_leo)))
            got = [(h.base_offset, h.last_offset) for _, h in
                   iter_batches(log.read_bytes(off, max_bytes, max_offset=hw))]
            containing = next(r for r in ranges if r[0] <= off <= r[1])
            if got:
                assert got[0] == containing
                i = ranges.index(containing)
                assert got == ranges[i: i + len(got)]  # consecutive whole batches
            else:
                assert hw is not None and containing[1] >= hw
            if hw is not None:
                assert all(last < hw for _, last in got)
            if hw is None or containing[1] < hw:
                assert got  # min_one_message
            fd = log.read(off, max_bytes, max_offset=hw)
            try:
                assert fd.size == sum(r.length for r in fd.regions)
                if len(got) > 1:
                    assert fd.size <= max_bytes
            finally:
                fd.close()  # the read's duplicated descriptors are the reader's to close

        clean = data.draw(st.booleans())
        if clean:
            log.close()
        else:
            log.close_without_flush()
        log = PartitionLog.open(d, "t", 0, config, ManualClock(T0))
        assert log.log_end_offset == expected_leo
        assert contents(log) == everything
        info = log.append_as_leader(make_request([(2, 5)], 99), leader_epoch=1)
        assert info.first_offset == expected_leo
        log.close_without_flush()
        log = PartitionLog.open(d, "t", 0, config, ManualClock(T0))
        assert [o for o, _, _ in contents(log)] == list(range(expected_leo + 2))
        log.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=requests, cut=st.floats(0, 1), junk=st.binary(max_size=200))
def test_torn_tail_recovers_to_a_batch_prefix(
    reqs: list[list[tuple[int, int]]], cut: float, junk: bytes
) -> None:
    config = LogConfig(segment_bytes=3000, index_interval_bytes=100)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "t-0"
        log = PartitionLog.open(d, "t", 0, config, ManualClock(T0))
        for n, spec in enumerate(reqs):
            log.append_as_leader(make_request(spec, n), leader_epoch=1)
        everything = contents(log)
        batches = [(h.base_offset, h.last_offset) for _, h in iter_batches(log.read_bytes(0, 1 << 30))]
        log.close_without_flush()
        last = sorted(d.glob("*.log"))[-1]
        raw = last.read_bytes()
        last.write_bytes(raw[: int(len(raw) * cut)] + junk)
        log = PartitionLog.open(d, "t", 0, config, ManualClock(T0))
        leo = log.log_end_offset
        got = contents(log)
        assert got == everything[:leo]
        assert leo == int(last.stem) or any(b[1] + 1 == leo for b in batches)
        assert log.append_as_leader(make_request([(1, 1)], 0), 1).first_offset == leo
        log.close()
