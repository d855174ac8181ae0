"""The streaming record validator (strom.protocol.batch_validation): valid batches pass, every
mutation either passes as a valid batch or raises the documented error, memory stays bounded."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.protocol.batch_validation import (
    RecordValidationError,
    any_compressed,
    check_record_chain,
    decompress_chunks,
    validate_batch_records,
)
from strom.protocol.records import (
    BATCH_OVERHEAD,
    CorruptRecordError,
    InvalidRecordError,
    _encode_record,
    build_batch,
    compress,
    decode_batch_records,
    iter_batches,
    parse_header,
)
from strom.testing.hostile import bomb_payload, raw_batch

CODECS = [0, 1, 2, 3, 4]


def make_batch(payload: bytes, count: int, compression: int = 0) -> bytes:
    return raw_batch(payload, count, compression)


def records_payload(
    records: list[tuple[bytes | None, bytes | None]], deltas: list[int] | None = None
) -> bytes:
    out = bytearray()
    for i, (k, v) in enumerate(records):
        _encode_record(out, i if deltas is None else deltas[i], 0, k, v, [("h", b"x")] if i % 2 else [])
    return bytes(out)


def validate(batch: bytes, compacted: bool = False, **kw: int) -> None:
    ((pos, h),) = list(iter_batches(batch))
    validate_batch_records(batch, pos, h, compacted=compacted, **kw)


def chain(batch: bytes) -> None:
    ((pos, h),) = list(iter_batches(batch))
    check_record_chain(batch, pos, h)


record_lists = st.lists(
    st.tuples(st.one_of(st.none(), st.binary(max_size=40)), st.one_of(st.none(), st.binary(max_size=300))),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_lists, st.sampled_from(CODECS))
def test_valid_batches_pass(records: list[tuple[bytes | None, bytes | None]], codec: int) -> None:
    batch = build_batch([(k, v, [("a", b"b")], 5) for k, v in records], compression=codec)
    validate(batch)
    # the streaming path for large records and tiny chunks gives the same answer
    validate(batch, chunk_size=7, contiguous_max=8)
    if codec == 0:
        chain(batch)
    keyless = any(k is None for k, _v in records)
    if keyless:
        with pytest.raises(RecordValidationError) as e:
            validate(batch, compacted=True)
        assert e.value.error_code == 87
        assert [i for i, _m in e.value.record_errors] == [i for i, (k, _v) in enumerate(records) if k is None]
    else:
        validate(batch, compacted=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_lists, st.data())
def test_mutated_uncompressed_batches_pass_or_raise_corrupt(
    records: list[tuple[bytes | None, bytes | None]], data: st.DataObject
) -> None:
    batch = bytearray(build_batch([(k, v, [], 5) for k, v in records]))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(BATCH_OVERHEAD, len(batch) - 1))
        batch[i] = data.draw(st.integers(0, 255))
    b = bytes(batch)
    h = parse_header(b)
    for check in (
        lambda: validate(b),
        lambda: validate(b, chunk_size=5, contiguous_max=3),
        lambda: chain(b),
    ):
        try:
            check()
        except CorruptRecordError:
            continue
    try:
        validate(b)
    except CorruptRecordError:
        return
    # accepted: then it decodes to exactly the declared records, offsets 0..n-1
    assert [r.offset for r in decode_batch_records(b, 0, h)] == list(range(h.records_count))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_lists, st.sampled_from([1, 2, 3, 4]), st.data())
def test_mutated_compressed_payloads_pass_or_raise_corrupt(
    records: list[tuple[bytes | None, bytes | None]], codec: int, data: st.DataObject
) -> None:
    payload = bytearray(compress(codec, records_payload(records)))
    op = data.draw(st.sampled_from(["flip", "truncate", "append"]))
    if op == "flip":
        i = data.draw(st.integers(0, len(payload) - 1))
        payload[i] ^= data.draw(st.integers(1, 255))
    elif op == "truncate":
        del payload[data.draw(st.integers(0, len(payload) - 1)) :]
    else:
        payload += data.draw(st.binary(min_size=1, max_size=20))
    batch = make_batch(bytes(payload), len(records), codec)
    try:
        validate(batch)
    except CorruptRecordError:
        return
    h = parse_header(batch)
    assert [r.offset for r in decode_batch_records(batch, 0, h)] == list(range(h.records_count))


@pytest.mark.parametrize("codec", CODECS)
def test_wrong_record_count(codec: int) -> None:
    payload = compress(codec, records_payload([(b"k", b"v")] * 3))
    for count in (2, 4):
        with pytest.raises(InvalidRecordError, match="Incorrect declared batch size"):
            validate(make_batch(payload, count, codec))


@pytest.mark.parametrize("codec", CODECS)
def test_bad_offset_deltas(codec: int) -> None:
    payload = compress(codec, records_payload([(b"k", b"v")] * 3, deltas=[0, 2, 1]))
    with pytest.raises(RecordValidationError) as e:
        validate(make_batch(payload, 3, codec))
    assert [i for i, _m in e.value.record_errors] == [1, 2]


def test_truncated_and_overlong_records_uncompressed() -> None:
    body = records_payload([(b"k", b"value")] * 3)
    with pytest.raises(InvalidRecordError):
        chain(make_batch(body[:-2], 3))
    with pytest.raises(InvalidRecordError):
        chain(make_batch(body + b"\x00", 3))
    with pytest.raises(InvalidRecordError):
        validate(make_batch(body[:-2], 3))
    # a record whose declared length covers the next one's bytes
    bad = bytearray(body)
    bad[0] += 2  # zigzag: length + 1
    with pytest.raises(InvalidRecordError):
        validate(make_batch(bytes(bad), 3))


def test_chain_gallops_over_equal_records_and_still_counts() -> None:
    recs = [(None, b"x" * 100, [], 1 + i // 50) for i in range(5000)]
    batch = build_batch(recs)
    chain(batch)
    h = parse_header(batch)
    short = bytearray(batch)
    struct.pack_into(">i", short, 23, h.last_offset_delta - 1)  # one record fewer declared
    struct.pack_into(">i", short, 57, h.records_count - 1)
    with pytest.raises(InvalidRecordError):
        check_record_chain(bytes(short), 0, parse_header(short))
    # a change of length in the middle of a long run of equal ones
    mixed = [*recs[:3000], (None, b"y" * 7, [], 1), *recs[3001:]]
    chain(build_batch(mixed))


@pytest.mark.parametrize("codec", [1, 3, 4])
def test_bomb_of_valid_records_passes_in_bounded_memory(codec: int) -> None:
    payload = bomb_payload(codec, 64 << 20)
    batch = make_batch(payload, 1, codec)
    tracemalloc.start()
    try:
        validate(batch, compacted=True)
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak
    # the same bomb declaring two records: refused, still bounded
    with pytest.raises(InvalidRecordError, match="premature EOF"):
        validate(make_batch(payload, 2, codec))


def test_any_compressed_reads_attributes_per_batch() -> None:
    plain = build_batch([(b"k", b"v", [], 1)])
    packed = build_batch([(b"k", b"v", [], 1)], compression=4)
    assert not any_compressed(plain + plain)
    assert any_compressed(plain + packed) and any_compressed(packed)
    assert not any_compressed(b"") and not any_compressed(plain[:30])


def test_zstd_window_over_the_limit_is_refused() -> None:
    params = zstandard.ZstdCompressionParameters(window_log=26)
    payload = zstandard.ZstdCompressor(compression_params=params).compress(bytes(1 << 27))
    with pytest.raises(CorruptRecordError):
        for _chunk in decompress_chunks(4, payload):
            pass


def test_snappy_block_declaring_an_impossible_size_is_refused() -> None:
    block = b"\xff\xff\xff\xff\x07" + b"\x00" * 10  # declares 2 GiB from 15 bytes
    with pytest.raises(CorruptRecordError, match="more than the format can encode"):
        list(decompress_chunks(2, block))


def _outcome(batch: bytes, compacted: bool, gallop: bool) -> tuple[str, str, list[int]] | None:
    try:
        validate(batch, compacted, gallop=gallop)
    except CorruptRecordError as e:
        return type(e).__name__, str(e), [i for i, _m in getattr(e, "record_errors", [])]
    return None


uniform_batches = st.builds(
    lambda n, key, value, ts_step, codec: build_batch(
        [(key, value, [], 1_000 + (i * ts_step) // 7) for i in range(n)], compression=codec
    ),
    st.integers(1, 300),
    st.one_of(st.none(), st.binary(min_size=0, max_size=3)),
    st.binary(min_size=0, max_size=150),
    st.integers(0, 40),
    st.sampled_from([0, 4]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(uniform_batches, st.data(), st.booleans())
def test_galloping_over_equal_records_agrees_with_walking_each(
    batch: bytes, data: st.DataObject, compacted: bool
) -> None:
    """The strided comparison of runs of equally laid-out records accepts exactly what the
    record-by-record walk accepts, with the same errors."""
    h = parse_header(batch)
    payload = bytearray(decompress_all(h.compression, batch[BATCH_OVERHEAD:]))
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(payload) - 1))
        payload[i] = data.draw(st.integers(0, 255))
    mutated = make_batch(compress(h.compression, bytes(payload)), h.records_count, h.compression)
    assert _outcome(mutated, compacted, True) == _outcome(mutated, compacted, False)


def decompress_all(codec: int, data: bytes) -> bytes:
    return b"".join(decompress_chunks(codec, data)) if codec else data


def test_galloping_over_equal_records_checks_offset_deltas_past_64() -> None:
    def payload(deltas: list[int]) -> bytes:
        out = bytearray()
        for d in deltas:
            _encode_record(out, d, 3, b"k", b"x" * 100, [])
        return compress(4, bytes(out))

    deltas = list(range(3000))
    validate(make_batch(payload(deltas), 3000, 4))
    # swap two offset deltas deep in a run of equal records (two-byte deltas)
    deltas[2000], deltas[2001] = 2001, 2000
    with pytest.raises(RecordValidationError) as e:
        validate(make_batch(payload(deltas), 3000, 4))
    assert [i for i, _m in e.value.record_errors] == [2000, 2001]
