"""Record batch v2 (magic 2): header parsing, CRC32C, in-place patching, and (de)coding.

Theory of operation
-------------------
A v2 batch is ``baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32 |
attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 | producerId i64 |
producerEpoch i16 | baseSequence i32 | recordsCount i32 | records...``. ``batchLength`` counts the
bytes after itself. The CRC32C covers ``attributes`` to the end, so the broker patches
``baseOffset`` and ``partitionLeaderEpoch`` in place without recomputing it.

The hot path (produce, fetch) only touches headers: :func:`iter_batches`, :func:`verify_crc`,
:func:`patch_base_offset`. Record-level decoding (:func:`decode_records`) and building
(:func:`build_batch`) are for clients, tools, compaction and Spark.

Error contract: malformed input raises :class:`CorruptRecordError` (a ``ValueError``), never
``struct.error`` or ``IndexError``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import cramjam
from crc32c import crc32c

BATCH_OVERHEAD = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
_CRC_OFFSET = 17
_ATTR_OFFSET = 21
_BASE_TS_OFFSET = 27
_MAX_TS_OFFSET = 35

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_NAMES = {"none": 0, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

_ATTR_TIMESTAMP_TYPE = 0x08
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20


class CorruptRecordError(ValueError):
    """Malformed record batch bytes (Kafka CORRUPT_MESSAGE, error code 2)."""

    error_code = 2


class InvalidRecordError(CorruptRecordError):
    """A well-framed batch whose header or records contradict themselves (e.g. zero records, a
    lastOffsetDelta that disagrees with the record count, a record length that does not add up).
    Kafka INVALID_RECORD (87); it is a CorruptRecordError so old Produce versions can answer
    CORRUPT_MESSAGE (2) instead."""

    error_code = 87


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies (header and records)."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & 0x07

    @property
    def timestamp_type(self) -> int:
        return (self.attributes >> 3) & 1

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _ATTR_CONTROL)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % 0x80000000


class Record(NamedTuple):
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``pos``. Raises CorruptRecordError if truncated."""
    if len(buf) - pos < BATCH_OVERHEAD:
        raise CorruptRecordError(f"record batch header truncated at position {pos}")
    return BatchHeader._make(HEADER_STRUCT.unpack_from(buf, pos))


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch in a concatenation of v2 batches.

    Validates framing only (length, magic, completeness); not the CRC.
    """
    pos = 0
    end = len(buf)
    unpack = HEADER_STRUCT.unpack_from
    while pos < end:
        if end - pos < BATCH_OVERHEAD:
            raise CorruptRecordError(f"record batch truncated at position {pos}")
        header = BatchHeader._make(unpack(buf, pos))
        if header.magic != 2:
            raise CorruptRecordError(f"unsupported record batch magic {header.magic} at position {pos}")
        size = header.batch_length + LOG_OVERHEAD
        if size < BATCH_OVERHEAD or pos + size > end:
            raise CorruptRecordError(
                f"record batch at position {pos} has invalid length {header.batch_length}"
            )
        if header.last_offset_delta < 0 or header.records_count < 0:
            raise CorruptRecordError(f"record batch at position {pos} has negative counts")
        yield pos, header
        pos += size


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> int:
    mv = memoryview(buf)
    result: int = crc32c(mv[pos + _ATTR_OFFSET : pos + header.size])
    return result


def verify_crc(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> None:
    if compute_crc(buf, pos, header) != header.crc:
        raise CorruptRecordError(f"record batch at position {pos} failed its CRC32C check")


def patch_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    struct.pack_into(">q", buf, pos, base_offset)


def patch_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    struct.pack_into(">i", buf, pos + 12, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp_ms: int) -> None:
    """Stamp LogAppendTime: timestamp-type bit, base and max timestamps; recompute the CRC."""
    header = parse_header(buf, pos)
    struct.pack_into(">h", buf, pos + _ATTR_OFFSET, header.attributes | _ATTR_TIMESTAMP_TYPE)
    struct.pack_into(">q", buf, pos + _BASE_TS_OFFSET, timestamp_ms)
    struct.pack_into(">q", buf, pos + _MAX_TS_OFFSET, timestamp_ms)
    new = parse_header(buf, pos)
    struct.pack_into(">I", buf, pos + _CRC_OFFSET, compute_crc(buf, pos, new))


# --------------------------------------------------------------------------- varints


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _write_varint(out: bytearray, n: int) -> None:
    v = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    result = 0
    while True:
        if pos >= len(buf):
            raise CorruptRecordError("varint truncated")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long")
    return (result >> 1) ^ -(result & 1), pos


def _read_bytes(buf: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise CorruptRecordError("record field truncated")
    return bytes(buf[pos : pos + n]), pos + n


# --------------------------------------------------------------------------- compression


def compress(codec: int, data: bytes) -> bytes:
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == COMPRESSION_SNAPPY:
        # Kafka (Java's snappy-java) writes the xerial-framed format; every client reads it.
        return _xerial_snappy_compress(data)
    if codec == COMPRESSION_LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise CorruptRecordError(f"unknown compression codec {codec}")


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _xerial_snappy_compress(data: bytes, block: int = 32 * 1024) -> bytes:
    out = bytearray(_XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), block):
        chunk = bytes(cramjam.snappy.compress_raw(data[i : i + block]))
        out += struct.pack(">i", len(chunk)) + chunk
    return bytes(out)


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    try:
        if codec == COMPRESSION_NONE:
            return bytes(data)
        if codec == COMPRESSION_GZIP:
            return bytes(cramjam.gzip.decompress(bytes(data)))
        if codec == COMPRESSION_SNAPPY:
            raw = bytes(data)
            if raw.startswith(_XERIAL_MAGIC):
                out = bytearray()
                pos = 16
                while pos < len(raw):
                    (n,) = struct.unpack_from(">i", raw, pos)
                    pos += 4
                    out += bytes(cramjam.snappy.decompress_raw(raw[pos : pos + n]))
                    pos += n
                return bytes(out)
            return bytes(cramjam.snappy.decompress_raw(raw))
        if codec == COMPRESSION_LZ4:
            return bytes(cramjam.lz4.decompress(bytes(data)))
        if codec == COMPRESSION_ZSTD:
            return bytes(cramjam.zstd.decompress(bytes(data)))
    except CorruptRecordError:
        raise
    except Exception as e:  # codec libraries raise their own error types
        raise CorruptRecordError(f"cannot decompress record batch (codec {codec}): {e}") from e
    raise CorruptRecordError(f"unknown compression codec {codec}")


# --------------------------------------------------------------------------- build / decode

RecordInput = tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int]


def _encode_record(
    out: bytearray,
    delta: int,
    ts_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
) -> None:
    body = bytearray(b"\x00")  # attributes
    _write_varint(body, ts_delta)
    _write_varint(body, delta)
    for field in (key, value):
        if field is None:
            _write_varint(body, -1)
        else:
            _write_varint(body, len(field))
            body += field
    _write_varint(body, len(headers))
    for hk, hv in headers:
        kb = hk.encode()
        _write_varint(body, len(kb))
        body += kb
        if hv is None:
            _write_varint(body, -1)
        else:
            _write_varint(body, len(hv))
            body += hv
    _write_varint(out, len(body))
    out += body


def build_batch(
    records: Iterable[RecordInput],
    *,
    base_offset: int = 0,
    compression: int = COMPRESSION_NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    timestamp_type: int = TIMESTAMP_CREATE_TIME,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode records into one v2 batch. ``records``: (key, value, headers, timestamp_ms)."""
    recs = list(records)
    if not recs:
        raise ValueError("a record batch needs at least one record")
    base_ts = recs[0][3]
    max_ts = max(r[3] for r in recs)
    body = bytearray()
    for i, (key, value, headers, ts) in enumerate(recs):
        _encode_record(body, i, ts - base_ts, key, value, headers)
    return build_batch_from_records(
        bytes(body), len(recs), base_ts, max_ts, base_offset=base_offset, compression=compression,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        transactional=transactional, control=control, timestamp_type=timestamp_type,
        partition_leader_epoch=partition_leader_epoch,
    )


def build_batch_from_records(
    body: bytes,
    count: int,
    base_ts: int,
    max_ts: int,
    *,
    base_offset: int = 0,
    compression: int = COMPRESSION_NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    timestamp_type: int = TIMESTAMP_CREATE_TIME,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One v2 batch around ``body``, the ``count`` records already encoded (offset deltas
    0..count-1, timestamps relative to ``base_ts``), e.g. by :mod:`strom.spark.arrow_encode`."""
    if count <= 0:
        raise ValueError("a record batch needs at least one record")
    payload = compress(compression, body)
    attributes = compression & 0x07
    if timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
        attributes |= _ATTR_TIMESTAMP_TYPE
    if transactional:
        attributes |= _ATTR_TRANSACTIONAL
    if control:
        attributes |= _ATTR_CONTROL
    batch_length = BATCH_OVERHEAD - LOG_OVERHEAD + len(payload)
    buf = bytearray(
        HEADER_STRUCT.pack(
            base_offset,
            batch_length,
            partition_leader_epoch,
            2,
            0,
            attributes,
            count - 1,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    buf += payload
    struct.pack_into(">I", buf, _CRC_OFFSET, crc32c(memoryview(buf)[_ATTR_OFFSET:]))
    return bytes(buf)


def decode_batch_records(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader
) -> Iterator[Record]:
    """Decode the records of one batch (decompressing if needed)."""
    mv = memoryview(buf)
    payload: bytes | memoryview = mv[pos + BATCH_OVERHEAD : pos + header.size]
    if header.compression:
        payload = decompress(header.compression, payload)
    data = bytes(payload)
    p = 0
    ts_type = header.timestamp_type
    for _ in range(header.records_count):
        length, p = _read_varint(data, p)
        end = p + length
        if length < 0 or end > len(data):
            raise CorruptRecordError("record length out of bounds")
        p += 1  # attributes
        ts_delta, p = _read_varint(data, p)
        off_delta, p = _read_varint(data, p)
        key, p = _read_bytes(data, p)
        value, p = _read_bytes(data, p)
        nh, p = _read_varint(data, p)
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(max(nh, 0)):
            hk, p = _read_bytes(data, p)
            hv, p = _read_bytes(data, p)
            headers.append(((hk or b"").decode("utf-8", "replace"), hv))
        if p != end:
            raise CorruptRecordError("record length does not match its contents")
        ts = (
            header.max_timestamp if ts_type == TIMESTAMP_LOG_APPEND_TIME else header.base_timestamp + ts_delta
        )
        yield Record(header.base_offset + off_delta, ts, ts_type, key, value, headers)


def decode_records(buf: bytes | bytearray | memoryview, *, skip_control: bool = True) -> Iterator[Record]:
    """Decode every record in a concatenation of batches; a partial trailing batch is ignored
    (a fetch response may end with one)."""
    pos = 0
    end = len(buf)
    while end - pos >= BATCH_OVERHEAD:
        header = parse_header(buf, pos)
        if header.size > end - pos:
            return  # truncated trailing batch (allowed in fetch responses)
        if header.magic != 2:
            raise CorruptRecordError(f"unsupported record batch magic {header.magic}")
        if not (skip_control and header.is_control):
            yield from decode_batch_records(buf, pos, header)
        pos += header.size


# --------------------------------------------------------------------------- control batches

CONTROL_ABORT = 0
CONTROL_COMMIT = 1


def build_control_batch(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp_ms: int
) -> bytes:
    """A transaction marker: one record, key ``version i16 | type i16``, value
    ``version i16 | coordinator_epoch i32`` (Kafka's EndTransactionMarker)."""
    key = struct.pack(">hh", 0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        [(key, value, [], timestamp_ms)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


def control_type(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> int:
    """CONTROL_COMMIT or CONTROL_ABORT for a control batch (decodes its single small record)."""
    return control_marker(buf, pos, header)[0]


def control_marker(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> tuple[int, int]:
    """A control batch's type (CONTROL_COMMIT or CONTROL_ABORT) and, for a transaction marker,
    the coordinator epoch its value carries (-1 when it has none)."""
    for rec in decode_batch_records(buf, pos, header):
        if rec.key is None or len(rec.key) < 4:
            raise CorruptRecordError("control record without a valid key")
        ctype: int = struct.unpack_from(">hh", rec.key)[1]
        value = rec.value
        epoch: int = struct.unpack_from(">i", value, 2)[0] if value is not None and len(value) >= 6 else -1
        return ctype, epoch
    raise CorruptRecordError("control batch without records")
