"""Encode Arrow key and value columns straight into the records of a Kafka record batch (v2).

The sink's rows arrive as Arrow record batches. Encoding them record by record in Python (a
varint at a time, ``bytearray +=`` per field) cost several microseconds per row. Here a whole
column of rows becomes the records section of one batch in a few vectorised steps:

1. The varints every record needs (its offset delta, the key and value lengths, -1 for a null)
   are zig-zag encoded for all rows at once with numpy: a rows x bytes matrix of 7-bit groups
   with their continuation bits, of which a row-major boolean mask keeps each row's bytes, in
   order; with the cumulative byte counts as offsets that is an Arrow ``binary`` array.
2. Arrow's ``binary_join_element_wise`` concatenates, row by row, the constant attributes and
   timestamp delta (0: the rows of a batch share its timestamp), the offset delta, key length,
   key, value length, value and the header count (0) into each record's body; then once more
   with the varint of each body's length in front.
3. The data buffer of that array, between its first and last offset, is the records section:
   already contiguous, no Python object per row.

Records with headers take the per-record path (:func:`strom.protocol.records.build_batch`); so
does everything :func:`encodable` refuses.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["byte_lengths", "encodable", "encode_records", "murmur2", "partitions_for_keys", "varints"]

_ATTRS_AND_TS_DELTA = pa.scalar(b"\x00\x00", pa.binary())  # attributes 0, timestamp delta 0
_NO_HEADERS = pa.scalar(b"\x00", pa.binary())  # header count 0
_NULL_LENGTH = pa.scalar(b"\x01", pa.binary())  # varint(-1)
_EMPTY = pa.scalar(b"", pa.binary())


def varints(values: npt.NDArray[np.int64]) -> pa.BinaryArray:
    """Kafka's zig-zag varints of ``values``, one Arrow binary item each."""
    v = values.astype(np.int64, copy=False)
    n = len(v)
    z = ((v << 1) ^ (v >> 63)).astype(np.uint64)
    nbytes = np.ones(n, dtype=np.int64)
    for k in range(1, 10):
        nbytes += z >= np.uint64(1 << (7 * k))
    width = int(nbytes.max()) if n else 1
    mat = np.empty((n, width), dtype=np.uint8)
    for j in range(width):
        group = ((z >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
        mat[:, j] = group | ((nbytes > j + 1).astype(np.uint8) << 7)
    data = mat[np.arange(width)[None, :] < nbytes[:, None]]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(nbytes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _as_binary(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if col.type != pa.binary():
        col = col.cast(pa.binary())
    return col


def encodable(col: pa.Array | pa.ChunkedArray | None) -> bool:
    """Whether a key or value column can take this path: binary or string, or absent."""
    if col is None:
        return True
    t = col.type
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_string(t)
                or pa.types.is_large_string(t) or pa.types.is_null(t))


def byte_lengths(col: pa.Array) -> npt.NDArray[np.int64]:
    """Each item's length in bytes (UTF-8 for strings), -1 for a null (Kafka's null length)."""
    return np.asarray(pc.binary_length(_as_binary(col)).fill_null(-1).to_numpy(zero_copy_only=False),
                      dtype=np.int64)


def _length_and_bytes(col: pa.Array | None, n: int) -> tuple[pa.Array | pa.Scalar, pa.Array | pa.Scalar]:
    if col is None or col.null_count == n:
        return _NULL_LENGTH, _EMPTY
    col = _as_binary(col)
    return varints(byte_lengths(col)), col.fill_null(b"") if col.null_count else col


def encode_records(keys: pa.Array | None, values: pa.Array | None) -> tuple[bytes, int]:
    """The records section of one batch holding ``values`` (with ``keys``, None: all null),
    offset deltas 0..n-1, timestamp delta 0, no headers; and each row's encoded size summed
    (the same as the section's length). Nulls are Kafka's -1 lengths (a null value is a
    tombstone)."""
    n = len(values) if values is not None else len(keys) if keys is not None else 0
    if n == 0:
        return b"", 0
    klen, kbytes = _length_and_bytes(keys, n)
    vlen, vbytes = _length_and_bytes(values, n)
    body = pc.binary_join_element_wise(
        _ATTRS_AND_TS_DELTA, varints(np.arange(n, dtype=np.int64)), klen, kbytes, vlen, vbytes, _NO_HEADERS,
        _EMPTY,
    )
    blen = pc.binary_length(body).to_numpy(zero_copy_only=False).astype(np.int64)
    recs = pc.binary_join_element_wise(varints(blen), body, _EMPTY)
    _validity, offsets, data = recs.buffers()
    offs = np.frombuffer(offsets, dtype=np.int32, count=n + 1, offset=recs.offset * 4)
    start, end = int(offs[0]), int(offs[-1])
    return data.slice(start, end - start).to_pybytes(), end - start


_M = np.uint32(0x5BD1E995)


def murmur2(keys: pa.Array) -> npt.NDArray[np.uint32]:
    """Kafka's ``Utils.murmur2`` of every (non-null) key, vectorised over the keys of each
    length (:func:`strom.client.partitioner.murmur2` is the reference)."""
    keys = _as_binary(keys)
    n = len(keys)
    _validity, offsets_buf, data_buf = keys.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1, offset=keys.offset * 4).astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, dtype=np.uint8)
    lengths = offsets[1:] - offsets[:-1]
    out = np.empty(n, dtype=np.uint32)
    with np.errstate(over="ignore"):
        for length in np.unique(lengths):
            ln = int(length)
            idx = np.flatnonzero(lengths == ln)
            mat = data[offsets[idx][:, None] + np.arange(ln)[None, :]].astype(np.uint32) if ln else \
                np.zeros((len(idx), 0), dtype=np.uint32)
            h = np.full(len(idx), (0x9747B28C ^ ln) & 0xFFFFFFFF, dtype=np.uint32)
            for i in range(0, ln - ln % 4, 4):
                k = mat[:, i] | (mat[:, i + 1] << 8) | (mat[:, i + 2] << 16) | (mat[:, i + 3] << 24)
                k = k * _M
                k ^= k >> np.uint32(24)
                k = k * _M
                h = h * _M
                h ^= k
            tail, extra = ln & ~3, ln % 4
            if extra == 3:
                h ^= mat[:, tail + 2] << 16
            if extra >= 2:
                h ^= mat[:, tail + 1] << 8
            if extra >= 1:
                h ^= mat[:, tail]
                h = h * _M
            h ^= h >> np.uint32(13)
            h = h * _M
            h ^= h >> np.uint32(15)
            out[idx] = h
    return out


def partitions_for_keys(keys: pa.Array, num_partitions: int) -> npt.NDArray[np.int64]:
    """Kafka's default partitioner for every key: ``toPositive(murmur2(key)) % partitions``."""
    return (murmur2(keys).astype(np.int64) & 0x7FFFFFFF) % num_partitions
