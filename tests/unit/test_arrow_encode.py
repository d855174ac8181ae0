"""strom.spark.arrow_encode against the per-record reference encoders (records, murmur2)."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from strom.client.partitioner import murmur2 as murmur2_ref
from strom.client.partitioner import partition_for_key
from strom.protocol import records as rec
from strom.protocol.records import decode_records, iter_batches, verify_crc
from strom.spark.arrow_encode import encode_records, murmur2, partitions_for_keys, varints
from strom.spark.producer import _chunks


@pytest.mark.parametrize("v", [0, 1, -1, 63, 64, -64, -65, 127, 128, 300, 1 << 20, -(1 << 31), (1 << 31) - 1,
                               1 << 40, -(1 << 62)])
def test_varints_are_kafkas(v: int) -> None:
    exp = bytearray()
    rec._write_varint(exp, v)
    assert varints(np.array([v, 0, v], dtype=np.int64)).to_pylist() == [bytes(exp), b"\x00", bytes(exp)]


def test_records_are_byte_for_byte_the_per_record_encoders() -> None:
    rnd = random.Random(1)
    for trial in range(40):
        n = rnd.randint(1, 300)
        keys: list[bytes | None] | None = [
            None if rnd.random() < 0.2 else rnd.randbytes(rnd.randint(0, 200)) for _ in range(n)
        ]
        if trial % 3 == 0:
            keys = None
        values = [None if rnd.random() < 0.1 else rnd.randbytes(rnd.randint(0, 300)) for _ in range(n)]
        karr = None if keys is None else pa.array(keys, pa.binary())
        body, size = encode_records(karr, pa.array(values, pa.binary()))
        exp = bytearray()
        for i in range(n):
            rec._encode_record(exp, i, 0, None if keys is None else keys[i], values[i], [])
        assert body == bytes(exp) and size == len(body)


def test_string_columns_and_a_sliced_array_encode_as_utf8() -> None:
    values = pa.array(["zero", "éin", None, "drei"], pa.string()).slice(1)
    keys = pa.array(["a", "b", "c", "d"], pa.large_string()).slice(1)
    body, _ = encode_records(keys, values)
    batch = rec.build_batch_from_records(body, 3, 1000, 1000)
    (pos, h), = iter_batches(batch)
    verify_crc(batch, pos, h)
    got = [(r.offset, r.key, r.value, r.timestamp) for r in decode_records(batch)]
    assert got == [(0, b"b", "éin".encode(), 1000), (1, b"c", None, 1000), (2, b"d", b"drei", 1000)]


def test_murmur2_and_partitions_are_kafkas() -> None:
    rnd = random.Random(3)
    keys = [rnd.randbytes(rnd.randint(0, 40)) for _ in range(3000)] + [b"21", b"foobar", b"abc"]
    arr = pa.array(keys, pa.binary())
    signed = murmur2(arr).astype(np.int64)
    signed = np.where(signed >= 1 << 31, signed - (1 << 32), signed)
    assert list(signed) == [murmur2_ref(k) for k in keys]
    assert list(partitions_for_keys(arr, 7)) == [partition_for_key(k, 7) for k in keys]
    assert list(partitions_for_keys(arr.slice(5, 10), 3)) == [partition_for_key(k, 3) for k in keys[5:15]]


def test_chunks_follow_the_record_and_byte_limits() -> None:
    idx = np.arange(10, dtype=np.int64) * 2
    sizes = np.array([10, 10, 10, 50, 10, 10, 10, 10, 10, 10], dtype=np.int64)
    assert [list(c) for c in _chunks(idx, sizes, 4, 30)] == [[0, 2, 4], [6], [8, 10, 12], [14, 16, 18]]
    assert [len(c) for c in _chunks(idx, sizes, 3, 10_000)] == [3, 3, 3, 1]
