"""Hostile record batches for tests: valid CRCs around payloads a broker must survive
(decompression bombs, corrupt compressed data, records that do not add up)."""

from __future__ import annotations

import struct
import zlib
from typing import Any

from crc32c import crc32c

from ..protocol.records import (
    BATCH_OVERHEAD,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_ZSTD,
    HEADER_STRUCT,
    _write_varint,
)

__all__ = ["bomb_payload", "raw_batch"]


def raw_batch(
    payload: bytes,
    count: int,
    compression: int = 0,
    *,
    last_offset_delta: int | None = None,
    timestamp: int = 1,
) -> bytes:
    """A v2 batch with a correct CRC32C around ``payload`` (the records, already compressed if
    ``compression``), declaring ``count`` records."""
    last = count - 1 if last_offset_delta is None else last_offset_delta
    buf = bytearray(
        HEADER_STRUCT.pack(
            0, BATCH_OVERHEAD - 12 + len(payload), -1, 2, 0, compression, last, timestamp, timestamp,
            -1, -1, -1, count,
        )
    )
    buf += payload
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def bomb_payload(codec: int, value_size: int, key: bytes | None = b"k") -> bytes:
    """The compressed records payload of ONE valid record whose value is ``value_size`` zero
    bytes (gzip, lz4 or zstd; 1 GiB compresses to ~1 MB with gzip, ~4 MB with lz4, ~32 KB with
    zstd). Built in 1 MiB steps, never whole in memory."""
    body = bytearray(b"\x00\x00\x00")  # attributes, timestamp delta 0, offset delta 0
    if key is None:
        _write_varint(body, -1)
    else:
        _write_varint(body, len(key))
        body += key
    _write_varint(body, value_size)
    prefix = bytearray()
    _write_varint(prefix, len(body) + value_size + 1)  # + the header count byte
    prefix += body
    out: list[bytes] = []
    comp: Any
    if codec == COMPRESSION_ZSTD:
        import zstandard

        comp = zstandard.ZstdCompressor(level=3).compressobj()
    elif codec == COMPRESSION_LZ4:
        import lz4.frame

        comp = lz4.frame.LZ4FrameCompressor()
        out.append(comp.begin())
    elif codec == COMPRESSION_GZIP:
        comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    else:
        raise ValueError(f"no bomb for codec {codec}")
    out.append(comp.compress(bytes(prefix)))
    step = bytes(1 << 20)
    left = value_size
    while left:
        n = min(left, len(step))
        out.append(comp.compress(step[:n]))
        left -= n
    out.append(comp.compress(b"\x00"))  # no headers
    out.append(comp.flush())
    return b"".join(out)
