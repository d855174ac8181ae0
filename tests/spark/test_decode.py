"""The Arrow column decoder against the per-record reference decoder (no Spark needed)."""

from __future__ import annotations

import random

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

from strom.protocol import records as rec  # noqa: E402
from strom.spark.arrow_decode import arrow_schema, decode_to_arrow  # noqa: E402


def _reference(data: bytes, topic: str, partition: int, start: int, end: int, headers: bool) -> list[dict]:
    rows = []
    for r in rec.decode_records(data):
        if start <= r.offset < end:
            row = {
                "key": r.key,
                "value": r.value,
                "topic": topic,
                "partition": partition,
                "offset": r.offset,
                "timestamp_ms": r.timestamp,
                "timestampType": r.timestamp_type,
            }
            if headers:
                row["headers"] = [{"key": k, "value": v} for k, v in r.headers] or None
            rows.append(row)
    return rows


def _rows(batch: pa.RecordBatch | None) -> list[dict]:
    if batch is None:
        return []
    out = []
    for row in batch.to_pylist():
        ts = row.pop("timestamp")
        row["timestamp_ms"] = int(ts.timestamp() * 1000)
        out.append(row)
    return out


def _random_batches(seed: int, compression: int, n_batches: int = 12) -> bytes:
    rnd = random.Random(seed)
    out = bytearray()
    off = 0
    for _ in range(n_batches):
        k = rnd.randint(1, 60)
        recs = []
        for _i in range(k):
            key = None if rnd.random() < 0.2 else rnd.randbytes(rnd.choice([0, 1, 5, 70, 300]))
            value = None if rnd.random() < 0.1 else rnd.randbytes(rnd.choice([0, 3, 100, 200, 20000]))
            hdrs = [(f"h{j}", None if j == 2 else rnd.randbytes(j)) for j in range(rnd.choice([0, 0, 1, 3]))]
            recs.append((key, value, hdrs, 1_600_000_000_000 + rnd.randint(-5, 10_000_000)))
        out += rec.build_batch(recs, base_offset=off, compression=compression)
        off += k + rnd.choice([0, 0, 3])  # gaps as left by compaction
    return bytes(out)


@pytest.mark.parametrize("compression", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_matches_reference_decoder(compression: int, headers: bool, seed: int) -> None:
    data = _random_batches(seed, compression)
    offsets = [r.offset for r in rec.decode_records(data)]
    for start, end in [(0, 1 << 62), (offsets[7], offsets[-3]), (offsets[-1], offsets[-1] + 1)]:
        chunk = decode_to_arrow(data, "topic-x", 3, start, end, include_headers=headers)
        assert _rows(chunk.batch) == _reference(data, "topic-x", 3, start, end, headers)
        if chunk.batch is not None:
            assert chunk.batch.schema.equals(arrow_schema(headers))


def test_next_offset_and_partial_trailing_batch() -> None:
    a = rec.build_batch([(b"k", b"v", [], 1)] * 3, base_offset=10)
    b = rec.build_batch([(b"k", b"w", [], 2)] * 2, base_offset=13)
    chunk = decode_to_arrow(a + b[:-5], "t", 0, 0, 100)
    assert chunk.rows == 3 and chunk.next_offset == 13
    chunk = decode_to_arrow(a + b, "t", 0, 14, 100)
    assert chunk.rows == 1 and chunk.next_offset == 15
    assert decode_to_arrow(b"", "t", 0, 0, 10).next_offset is None


def test_log_append_time_uses_max_timestamp() -> None:
    data = bytearray(rec.build_batch([(None, b"a", [], 5), (None, b"b", [], 9)]))
    rec.set_log_append_time(data, 0, 777)
    batch = decode_to_arrow(bytes(data), "t", 0, 0, 10).batch
    assert batch is not None
    assert batch.column("timestampType").to_pylist() == [1, 1]
    assert [int(t.timestamp() * 1000) for t in batch.column("timestamp").to_pylist()] == [777, 777]


def _control(pid: int, offset: int, commit: bool) -> bytes:
    key = (0).to_bytes(2, "big") + (1 if commit else 0).to_bytes(2, "big")
    return rec.build_batch(
        [(key, b"\x00\x00\x00\x00\x00\x00", [], 1)],
        base_offset=offset,
        producer_id=pid,
        producer_epoch=0,
        transactional=True,
        control=True,
    )


def test_read_committed_drops_aborted_transactions() -> None:
    data = (
        rec.build_batch([(None, b"plain", [], 1)], base_offset=0)
        + rec.build_batch(
            [(None, b"aborted", [], 1)] * 2,
            base_offset=1,
            producer_id=7,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        )
        + rec.build_batch(
            [(None, b"committed", [], 1)],
            base_offset=3,
            producer_id=8,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        )
        + _control(7, 4, commit=False)
        + _control(8, 5, commit=True)
        + rec.build_batch(
            [(None, b"later", [], 1)],
            base_offset=6,
            producer_id=7,
            producer_epoch=0,
            base_sequence=2,
            transactional=True,
        )
        + _control(7, 7, commit=True)
    )
    committed = decode_to_arrow(data, "t", 0, 0, 100, read_committed=True, aborted=[(7, 1)])
    assert committed.batch is not None
    assert committed.batch.column("value").to_pylist() == [b"plain", b"committed", b"later"]
    assert committed.next_offset == 8
    everything = decode_to_arrow(data, "t", 0, 0, 100)
    assert everything.batch is not None
    assert everything.batch.column("value").to_pylist() == [
        b"plain",
        b"aborted",
        b"aborted",
        b"committed",
        b"later",
    ]


def test_corrupt_payload_raises() -> None:
    data = bytearray(rec.build_batch([(b"key", b"value", [], 1)] * 4))
    data[rec.BATCH_OVERHEAD] = 0x7E  # first record claims 63 bytes
    with pytest.raises(rec.CorruptRecordError):
        decode_to_arrow(bytes(data), "t", 0, 0, 10)


def _run_batches(seed: int, n_batches: int = 20) -> bytes:
    """Batches whose records come in runs of one size (the vectorised start finder's rounds),
    with size changes at random places, single-record and empty-key/-value runs."""
    rnd = random.Random(seed)
    out = bytearray()
    off = 0
    for _ in range(n_batches):
        recs = []
        for _run in range(rnd.choice([1, 1, 2, 3, 6])):
            key = None if rnd.random() < 0.2 else b"k" * rnd.choice([0, 1, 8, 70, 200])
            value = None if rnd.random() < 0.1 else b"v" * rnd.choice([0, 5, 100, 150, 9000])
            ts = 1_700_000_000_000 + rnd.choice([0, 1])
            recs += [(key, value, [], ts) for _ in range(rnd.randint(1, 300))]
        out += rec.build_batch(recs, base_offset=off)
        off += len(recs)
    return bytes(out)


@pytest.mark.parametrize("seed", range(8))
def test_runs_of_equal_records_match_reference(seed: int) -> None:
    data = _run_batches(seed)
    chunk = decode_to_arrow(memoryview(data), "t", 1, 0, 1 << 62)
    assert _rows(chunk.batch) == _reference(data, "t", 1, 0, 1 << 62, False)


def test_corrupt_record_inside_a_run_raises() -> None:
    from strom.spark.arrow_decode import _walk_starts

    data = bytearray(rec.build_batch([(b"key", b"value", [], 1)] * 200))
    starts = _walk_starts(data, rec.BATCH_OVERHEAD, len(data), 200)
    for victim in (3, 100, 199):  # records 3 and 100 claim 1 byte more, the last one 1 less
        bad = bytearray(data)
        bad[starts[victim]] += -2 if victim == 199 else 2
        with pytest.raises(rec.CorruptRecordError):
            decode_to_arrow(bytes(bad), "t", 0, 0, 1000)


def test_gap_before_end_completes_the_range() -> None:
    a = rec.build_batch([(b"k", b"v", [], 1)] * 3, base_offset=0)
    b = rec.build_batch([(b"k", b"w", [], 2)] * 2, base_offset=10)  # 3..9 compacted away
    chunk = decode_to_arrow(a + b, "t", 0, 0, 7)
    assert chunk.rows == 3 and chunk.next_offset == 7
    chunk = decode_to_arrow(b, "t", 0, 4, 7)
    assert chunk.rows == 0 and chunk.next_offset == 7


def test_guessed_record_start_on_the_last_byte() -> None:
    # the start finding reads length varints at guessed record starts; a wrong guess may be the
    # payload's last byte, here a header value's 0xff (a varint that goes on past the end)
    for v0 in range(8, 20):
        for v1 in range(4):
            for v2 in range(4):
                recs = [
                    (b"k", b"a" * v0, [], 1),
                    (b"k", b"b" * v1, [], 2),
                    (b"k", b"c" * v2, [("h", b"\xff")], 3),
                ]
                data = rec.build_batch(recs)
                chunk = decode_to_arrow(data, "t", 0, 0, 1 << 62, include_headers=True)
                assert _rows(chunk.batch) == _reference(data, "t", 0, 0, 1 << 62, True)


@pytest.mark.parametrize(
    "values",
    [
        [b"v" * 100] * 50,  # one size: gathered
        [b"v" * 100, None] * 25,  # one size and nulls: gathered, nulls masked
        [b""] * 10 + [None] * 5,  # empty values and nulls
        [None] * 7,  # all null
        [b"a" * 8] * 30 + [b"b" * 9] * 30,  # two sizes: the take path
    ],
)
def test_fixed_and_mixed_value_sizes(values: list[bytes | None]) -> None:
    ts = 1_700_000_000_000
    recs = [(None if i % 3 == 0 else b"key%05d" % i, v, [], ts + i) for i, v in enumerate(values)]
    half = len(recs) // 2
    data = rec.build_batch(recs[:half]) + rec.build_batch(recs[half:], base_offset=half)
    chunk = decode_to_arrow(data, "t", 0, 0, 1 << 62)
    assert _rows(chunk.batch) == _reference(data, "t", 0, 0, 1 << 62, False)
    assert [r["value"] for r in _rows(chunk.batch)] == values
