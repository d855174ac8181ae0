from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol.connection import ServerConnection
from strom.protocol.errors import ProtocolError
from strom.protocol.records import (
    CorruptRecordError,
    build_batch,
    decode_records,
    iter_batches,
    parse_header,
    patch_base_offset,
    verify_crc,
)

records_st = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=20)),
        st.one_of(st.none(), st.binary(max_size=200)),
        st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=3),
        st.integers(0, 2**40),
    ),
    min_size=1,
    max_size=20,
)


@given(records_st, st.integers(0, 4), st.integers(0, 2**40))
@settings(max_examples=150, deadline=None)
def test_batch_roundtrip_and_offset_patch_keeps_crc(recs, codec, base) -> None:  # type: ignore[no-untyped-def]
    buf = bytearray(build_batch(recs, compression=codec))
    patch_base_offset(buf, 0, base)
    h = parse_header(buf)
    verify_crc(buf, 0, h)
    out = list(decode_records(buf))
    assert [r.offset for r in out] == list(range(base, base + len(recs)))
    assert [(r.key, r.value, [tuple(x) for x in r.headers]) for r in out] == [
        (k, v, [tuple(x) for x in hs]) for k, v, hs, _ in recs
    ]


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_garbage_batches_raise_only_corrupt_record(data: bytes) -> None:
    try:
        for pos, h in iter_batches(data):
            verify_crc(data, pos, h)
            list(decode_records(data))
    except CorruptRecordError:
        pass


@given(st.binary(max_size=400))
@settings(max_examples=300, deadline=None)
def test_garbage_frames_raise_only_protocol_error(data: bytes) -> None:
    conn = ServerConnection(1 << 16)
    with contextlib.suppress(ProtocolError):
        conn.receive_data(data)


def test_flipped_byte_fails_crc() -> None:
    buf = bytearray(build_batch([(b"k", b"value", [], 1)]))
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        verify_crc(buf, 0, parse_header(buf))
