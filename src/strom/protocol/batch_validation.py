"""Record-level validation of produced v2 batches, in bounded memory (Kafka's ``LogValidator``).

Theory of operation
-------------------
Kafka walks every record of every produced batch before appending it (``LogValidator``;
``DefaultRecord.readFrom`` does the per-record checks). strom keeps batches opaque on the hot path,
so the work is split by cost:

* :func:`check_record_chain` — uncompressed batches on a topic that is not compacted. Runs on the
  event loop for every append, so it only follows the record length chain: exactly
  ``recordsCount`` records whose length prefixes tile the payload to its last byte. Runs of equal
  length prefixes (the common case: records of one size) are checked with strided slice
  comparisons in C, so the cost is a few slice operations per batch, not a Python step per record.
* :func:`validate_batch_records` — everything else (compressed batches, compacted topics). Walks
  every record: length, attributes byte, timestamp delta (varlong), offset delta (must be the
  record's index, ``0..n-1``), key and value lengths, header count and each header, the record
  length matching what was read, and nothing left after the last record; a missing key on a
  compacted topic is a per-record error (Kafka's ``record_errors``). Compressed payloads are
  decompressed as a stream in chunks of at most ``chunk_size`` bytes and only the unread rest of a
  chunk (plus, for records up to ``CONTIGUOUS_RECORD_MAX``, one record) is ever held: a 1 GiB bomb
  costs the same memory as a small batch. The broker runs this in a worker thread. After a
  record passes, the next ones are tried as copies of its layout (:func:`_same_layout_run`: the
  same length prefix, key and value lengths and header count, offset deltas counting on), proved
  with strided comparisons instead of a Python step each; any difference falls back to the walk.

Memory per call is bounded by the chunk size, ``CONTIGUOUS_RECORD_MAX``, the codec's own state
(zlib 32 KiB window; lz4 frame blocks <= 4 MiB; zstd window <= ``ZSTD_MAX_WINDOW``) and, for
snappy, whose blocks are not streamable, one block's output — which snappy's format caps at about
21x the block's compressed size, so a declared size above that is refused before decompressing.

Differences from Kafka, on purpose: Kafka rewrites (recompresses) a compressed batch whose inner
offsets are not ``0..n-1``; strom never rewrites batches, so it refuses them (INVALID_RECORD).
Trailing bytes after the compressed stream are refused too, and so are zstd frames that need a
window over ``ZSTD_MAX_WINDOW`` (Kafka's zstd-jni accepts up to 128 MiB; producers at levels up to
19 use at most 8 MiB). Uncompressed batches of topics that are not compacted get only the length
chain on the hot path (Kafka walks them fully): offset deltas and field lengths inside those
records are not checked.

Error contract: :class:`CorruptRecordError` (CORRUPT_MESSAGE, 2) when the compressed payload cannot
be decompressed; :class:`InvalidRecordError` (INVALID_RECORD, 87) for a record structure that does
not add up, with Kafka's messages; :class:`RecordValidationError` (87, with ``record_errors``:
``(index in batch, message)``) for records that are well formed but not acceptable (no key on a
compacted topic, wrong offset delta).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

import cramjam

from .records import (
    _XERIAL_MAGIC,
    BATCH_OVERHEAD,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
)

__all__ = [
    "CHUNK_SIZE",
    "CONTIGUOUS_RECORD_MAX",
    "ZSTD_MAX_WINDOW",
    "ChunkStream",
    "RecordValidationError",
    "any_compressed",
    "check_record_chain",
    "decompress_chunks",
    "validate_batch_records",
]

_I32 = struct.Struct(">i")
CHUNK_SIZE = 256 * 1024  # decompressed bytes produced per step
CONTIGUOUS_RECORD_MAX = 1 << 20  # records up to this size are checked in one contiguous buffer
ZSTD_MAX_WINDOW = 1 << 24  # 16 MiB: zstd levels <= 19 use <= 8 MiB; a larger window is refused
_INPUT_STEP = 64 * 1024  # compressed bytes fed to a decompressor per step
_MAX_RECORD_ERRORS = 1000  # record_errors kept per batch (the count goes on)
_MIN_RECORD_BODY = 6  # attributes + timestamp delta + offset delta + key + value + header count
_SNAPPY_MAX_RATIO = 22  # snappy's densest element, a 3-byte copy of 64 bytes, gives 21.3x


class RecordValidationError(InvalidRecordError):
    """Records that parse but are refused (Kafka's RecordValidationException, INVALID_RECORD):
    ``record_errors`` lists ``(index in its batch, message)``, at most a thousand."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(message)
        self.record_errors = record_errors


def _premature_eof() -> InvalidRecordError:
    return InvalidRecordError("Incorrect declared batch size, premature EOF reached")


def _records_remaining() -> InvalidRecordError:
    return InvalidRecordError("Incorrect declared batch size, records still remaining in file")


def _invalid_structure() -> InvalidRecordError:
    return InvalidRecordError("Found invalid record structure")


# --------------------------------------------------------------------------- hot path


def any_compressed(buf: bytes | bytearray | memoryview) -> bool:
    """Whether any batch in ``buf`` is compressed. Reads two fields per batch and no more:
    framing is left to :func:`~strom.protocol.records.iter_batches` (a walk that stops early
    on bad framing answers False and the append reports the error)."""
    pos = 0
    end = len(buf) - BATCH_OVERHEAD
    while pos <= end:
        if buf[pos + 22] & 0x07:  # the low byte of the attributes (i16 at 21)
            return True
        length = _I32.unpack_from(buf, pos + 8)[0]
        if length <= 0:
            return False
        pos += 12 + length
    return False


def check_record_chain(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> None:
    """Check that the records of the uncompressed batch at ``pos`` tile its payload: exactly
    ``records_count`` length-prefixed records ending on the batch's last byte. Raises
    :class:`InvalidRecordError`. Cheap (see the module notes); record contents are not read."""
    p = pos + BATCH_OVERHEAD
    end = pos + header.batch_length + 12
    n = header.records_count
    i = 0
    run = 8
    while i < n:
        # one record: its length prefix (1 or 2 bytes in practice), then skip its body
        start = p
        b = buf[p] if p < end else -1
        if 0 <= b < 0x80:
            p += 1
            z = b
        elif b >= 0 and p + 1 < end and buf[p + 1] < 0x80:
            z = (b & 0x7F) | (buf[p + 1] << 7)
            p += 2
        else:
            z, p = _chain_varint(buf, p, end)
        length = z >> 1
        if z & 1 or length < _MIN_RECORD_BODY or p + length > end:
            raise InvalidRecordError(
                f"Invalid record size: expected {length if not z & 1 else -length - 1} bytes in record "
                f"payload, but instead the buffer has only {end - p} remaining bytes."
            )
        p += length
        i += 1
        if not run:
            _chain_tail(buf, p, end, n - i)
            return
        # Gallop: try the next ``k`` records as having this record's length prefix; a strided
        # slice per prefix byte compares them all in C. If record j starts at p + j*stride with
        # this prefix, record j+1 starts at p + (j+1)*stride: one comparison proves the chain.
        # A miss halves the run; at zero, galloping stops for this batch.
        stride = p - start
        k = min(run, n - i, (end - p) // stride)
        if k >= 2:
            last = (k - 1) * stride + 1
            for j in range(stride - length):
                if buf[p + j : p + j + last : stride] != bytes((buf[start + j],)) * k:
                    run = run // 2 if run > 2 else 0
                    break
            else:
                p += k * stride
                i += k
                run = min(run * 2, 1 << 16)
    if p != end:
        raise _records_remaining()


def _chain_tail(buf: bytes | bytearray | memoryview, p: int, end: int, n: int) -> None:
    """:func:`check_record_chain` for the rest of a batch whose record lengths vary: one step
    per record, kept to the fewest Python operations (a copy of the rest, so running past its
    end shows up as IndexError instead of a bounds check per step)."""
    data = bytes(buf[p:end])
    q = 0
    try:
        for _ in range(n):
            b = data[q]
            if b < 0x80:
                if b & 1 or b < 2 * _MIN_RECORD_BODY:
                    raise InvalidRecordError(f"Invalid record size {(b >> 1) ^ -(b & 1)}")
                q += 1 + (b >> 1)
            else:
                b2 = data[q + 1]
                if b2 < 0x80:
                    z = (b & 0x7F) | (b2 << 7)
                    q += 2
                else:
                    z, q = _chain_varint(data, q, len(data))
                if z & 1:
                    raise InvalidRecordError("Invalid negative record size")
                q += z >> 1
    except IndexError:
        raise _premature_eof() from None
    if q != len(data):
        raise _records_remaining() if q < len(data) else _premature_eof()


def _chain_varint(buf: bytes | bytearray | memoryview, p: int, end: int) -> tuple[int, int]:
    """The unsigned (still zigzagged) varint at ``p``; at most 5 bytes, within ``end``."""
    z = 0
    shift = 0
    while shift <= 28:
        if p >= end:
            raise _premature_eof()
        b = buf[p]
        p += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            return z, p
        shift += 7
    raise _invalid_structure()


# --------------------------------------------------------------------------- decompression


def decompress_chunks(
    codec: int, data: bytes | bytearray | memoryview, chunk_size: int = CHUNK_SIZE
) -> Iterator[bytes]:
    """Decompress a batch payload as a stream of pieces of at most ``chunk_size`` bytes (snappy:
    at most one block's output). Raises :class:`CorruptRecordError` for an undecodable,
    truncated or over-long stream."""
    src = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    try:
        if codec == COMPRESSION_GZIP:
            yield from _gzip_chunks(src, chunk_size)
        elif codec == COMPRESSION_SNAPPY:
            yield from _snappy_chunks(src)
        elif codec == COMPRESSION_LZ4:
            yield from _lz4_chunks(src, chunk_size)
        elif codec == COMPRESSION_ZSTD:
            yield from _zstd_chunks(src, chunk_size)
        elif codec == COMPRESSION_NONE:
            yield bytes(src)
        else:
            raise CorruptRecordError(f"unknown compression codec {codec}")
    except CorruptRecordError:
        raise
    except Exception as e:  # the codec libraries raise their own error types
        raise CorruptRecordError(f"cannot decompress record batch (codec {codec}): {e}") from e


def _gzip_chunks(src: memoryview, chunk_size: int) -> Iterator[bytes]:
    d = zlib.decompressobj(31)  # gzip wrapper
    pos = 0
    n = len(src)
    while True:
        if d.unconsumed_tail:
            inp: bytes | memoryview = d.unconsumed_tail
        elif pos < n:
            inp = src[pos : pos + _INPUT_STEP]
            pos += len(inp)
        else:
            inp = b""
        out = d.decompress(inp, chunk_size)
        if out:
            yield out
        if d.eof:
            rest = d.unused_data + bytes(src[pos:])
            if not rest:
                return
            if rest[:2] != b"\x1f\x8b":  # another gzip member may follow (GZIPInputStream reads it)
                raise CorruptRecordError("unexpected bytes after the gzip stream")
            d = zlib.decompressobj(31)
            src = memoryview(rest)
            pos, n = 0, len(rest)
        elif not inp and not out:
            raise CorruptRecordError("gzip stream truncated")


def _snappy_block(block: bytes | memoryview) -> bytes:
    declared = 0
    shift = 0
    for i in range(5):
        if i >= len(block):
            raise CorruptRecordError("snappy block truncated")
        b = block[i]
        declared |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    else:
        raise CorruptRecordError("snappy block length varint too long")
    if declared > _SNAPPY_MAX_RATIO * len(block) + 64:
        raise CorruptRecordError(
            f"snappy block of {len(block)} bytes declares {declared} bytes uncompressed, more than "
            "the format can encode"
        )
    out = bytes(cramjam.snappy.decompress_raw(bytes(block)))
    if len(out) != declared:
        raise CorruptRecordError("snappy block does not decompress to its declared length")
    return out


def _snappy_chunks(src: memoryview) -> Iterator[bytes]:
    n = len(src)
    if n >= 16 and src[:8] == _XERIAL_MAGIC:  # snappy-java's framing: blocks of i32 size | raw
        pos = 16
        while pos < n:
            if n - pos < 4:
                raise CorruptRecordError("xerial snappy block header truncated")
            (size,) = struct.unpack_from(">i", src, pos)
            pos += 4
            if size < 0 or pos + size > n:
                raise CorruptRecordError(f"xerial snappy block of invalid size {size}")
            out = _snappy_block(src[pos : pos + size])
            pos += size
            if out:
                yield out
        return
    out = _snappy_block(src)
    if out:
        yield out


def _lz4_chunks(src: memoryview, chunk_size: int) -> Iterator[bytes]:
    import lz4.frame

    d = lz4.frame.LZ4FrameDecompressor()
    pos = 0
    n = len(src)
    while not d.eof:
        if d.needs_input:
            if pos >= n:
                raise CorruptRecordError("lz4 frame truncated")
            inp = bytes(src[pos : pos + _INPUT_STEP])
            pos += len(inp)
        else:
            inp = b""
        out = d.decompress(inp, max_length=chunk_size)
        if out:
            yield out
        elif not inp and not d.eof and not d.needs_input:
            raise CorruptRecordError("lz4 frame decompression made no progress")
    if d.unused_data or pos < n:
        raise CorruptRecordError("unexpected bytes after the lz4 frame")


_ZSTD_MAGIC = 0xFD2FB528


def _check_zstd_frames(src: memoryview) -> None:
    """Walk the frame and block headers of a zstd stream (every block states its size) and
    check that it ends exactly on a frame boundary: the stream reader ends a truncated stream
    quietly, so truncation is caught here, before decompressing anything."""
    pos = 0
    n = len(src)
    while pos < n:
        if n - pos < 8:
            raise CorruptRecordError("zstd frame header truncated")
        (magic,) = struct.unpack_from("<I", src, pos)
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            (size,) = struct.unpack_from("<I", src, pos + 4)
            pos += 8 + size
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError("not a zstd frame")
        fhd = src[pos + 4]
        single = (fhd >> 5) & 1
        fcs = (single, 2, 4, 8)[fhd >> 6]  # frame content size field
        pos += 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + fcs
        while True:
            if n - pos < 3:
                raise CorruptRecordError("zstd block header truncated")
            bh = src[pos] | (src[pos + 1] << 8) | (src[pos + 2] << 16)
            kind = (bh >> 1) & 3
            if kind == 3:
                raise CorruptRecordError("reserved zstd block type")
            pos += 3 + (1 if kind == 1 else bh >> 3)
            if bh & 1:
                break
        if fhd & 4:
            pos += 4  # content checksum
    if pos != n:
        raise CorruptRecordError("zstd stream truncated")


def _zstd_chunks(src: memoryview, chunk_size: int) -> Iterator[bytes]:
    import zstandard

    _check_zstd_frames(src)
    dctx = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    with dctx.stream_reader(src, read_size=_INPUT_STEP, read_across_frames=True) as reader:
        while True:
            out = reader.read(chunk_size)
            if not out:
                return
            yield out


# --------------------------------------------------------------------------- full walk


class _Stream:
    """Reads a sequence of chunks as one stream; holds at most one chunk plus the unread rest of
    the previous one (and, when asked by :meth:`ensure`, one record)."""

    __slots__ = ("buf", "chunks", "offset", "pos")

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks
        self.buf = b""
        self.pos = 0
        self.offset = 0  # stream position of buf[0]

    def tell(self) -> int:
        return self.offset + self.pos

    def _fill(self) -> bool:
        for chunk in self.chunks:
            if chunk:
                rest = self.buf[self.pos :]
                self.offset += self.pos
                self.buf = rest + chunk if rest else chunk
                self.pos = 0
                return True
        return False

    def ensure(self, n: int) -> bool:
        """Make ``n`` bytes available contiguously at ``buf[pos:]``; False at end of stream."""
        while len(self.buf) - self.pos < n:
            if not self._fill():
                return False
        return True

    def at_end(self) -> bool:
        return self.pos >= len(self.buf) and not self._fill()

    def skip(self, n: int) -> None:
        avail = len(self.buf) - self.pos
        while n > avail:
            n -= avail
            self.offset += len(self.buf)
            self.buf, self.pos = b"", 0
            if not self._fill():
                raise _premature_eof()
            avail = len(self.buf)
        self.pos += n

    def varint(self, max_bytes: int) -> int:
        """A zigzag varint of at most ``max_bytes`` bytes (5: int32, 10: int64)."""
        z = 0
        shift = 0
        for _ in range(max_bytes):
            if self.pos >= len(self.buf) and not self._fill():
                raise _premature_eof()
            b = self.buf[self.pos]
            self.pos += 1
            z |= (b & 0x7F) << shift
            if not b & 0x80:
                return (z >> 1) ^ -(z & 1)
            shift += 7
        raise _invalid_structure()


ChunkStream = _Stream
"""A decompressed payload read as one stream (the log cleaner reads keys with it)."""


def _varint(buf: bytes, p: int, stop: int, max_bytes: int) -> tuple[int, int]:
    z = 0
    shift = 0
    for _ in range(max_bytes):
        if p >= stop:
            raise _invalid_structure()
        b = buf[p]
        p += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            return (z >> 1) ^ -(z & 1), p
        shift += 7
    raise _invalid_structure()


def _check_body(buf: bytes, p: int, stop: int, index: int, compacted: bool) -> str | None:
    """Check one record body ``buf[p:stop]`` (after its length prefix). Returns a per-record
    error message (Kafka's record_errors) or None; raises InvalidRecordError for bad structure.

    The per-record cost of compressed produce: one- and two-byte varints (offset deltas below
    8192, keys and values below 8 KiB) are read inline, longer ones by :func:`_varint`."""
    length = stop - p
    p += 1  # attributes (unused in v2 records; Kafka does not check them)
    if p < stop and buf[p] < 0x80:  # timestamp delta (only its encoding matters)
        p += 1
    else:
        p = _varint(buf, p, stop, 10)[1]
    # offset delta, key length, value length: zigzag varints
    if p + 1 < stop and (b := buf[p]) < 0x80:
        offset_delta = (b >> 1) ^ -(b & 1)
        p += 1
    elif p + 1 < stop and (c := buf[p + 1]) < 0x80:
        z = (b & 0x7F) | (c << 7)
        offset_delta = (z >> 1) ^ -(z & 1)
        p += 2
    else:
        offset_delta, p = _varint(buf, p, stop, 5)
    if p + 1 < stop and (b := buf[p]) < 0x80:
        key_len = (b >> 1) ^ -(b & 1)
        p += 1
    elif p + 1 < stop and (c := buf[p + 1]) < 0x80:
        z = (b & 0x7F) | (c << 7)
        key_len = (z >> 1) ^ -(z & 1)
        p += 2
    else:
        key_len, p = _varint(buf, p, stop, 5)
    if key_len > 0:
        p += key_len
    if p + 1 < stop and (b := buf[p]) < 0x80:
        value_len = (b >> 1) ^ -(b & 1)
        p += 1
    elif p + 1 < stop and (c := buf[p + 1]) < 0x80:
        z = (b & 0x7F) | (c << 7)
        value_len = (z >> 1) ^ -(z & 1)
        p += 2
    else:
        value_len, p = _varint(buf, p, stop, 5)
    if value_len > 0:
        p += value_len
    if p + 1 == stop and buf[p] == 0:  # no headers, the usual end of a record
        if offset_delta == index and (key_len >= 0 or not compacted):
            return None
        return _record_error(index, offset_delta, key_len, compacted)
    count, p = _varint(buf, p, stop, 5)
    if count < 0:
        raise InvalidRecordError(f"Found invalid number of record headers {count}")
    if count > stop - p:
        raise InvalidRecordError(
            f"Found invalid number of record headers. {count} is larger than the remaining size of the buffer"
        )
    for _ in range(count):
        hk, p = _varint(buf, p, stop, 5)
        if hk < 0:
            raise InvalidRecordError(f"Invalid negative header key size {hk}")
        p += hk
        hv, p = _varint(buf, p, stop, 5)
        if hv >= 0:
            p += hv
    if p != stop:
        raise InvalidRecordError(
            f"Invalid record size: expected to read {length} bytes in record payload, but instead "
            f"read {length + p - stop}"
        )
    return _record_error(index, offset_delta, key_len, compacted)


def _record_error(index: int, offset_delta: int, key_len: int, compacted: bool) -> str | None:
    if offset_delta != index:
        return f"Record {index} has offset delta {offset_delta}; offset deltas must be 0..n-1 in order"
    if compacted and key_len < 0:
        return "Compacted topic cannot accept message without key"
    return None


def _check_body_streaming(s: _Stream, length: int, index: int, compacted: bool) -> str | None:
    """:func:`_check_body` for a record too large to hold: fields read from the stream, key,
    value and header bytes skipped."""
    stop = s.tell() + length

    def bounded(n: int) -> None:
        if n < 0 or s.tell() + n > stop:
            raise _invalid_structure()
        s.skip(n)

    bounded(1)
    s.varint(10)
    offset_delta = s.varint(5)
    key_len = s.varint(5)
    if key_len >= 0:
        bounded(key_len)
    value_len = s.varint(5)
    if value_len >= 0:
        bounded(value_len)
    count = s.varint(5)
    if count < 0 or count > stop - s.tell():
        raise InvalidRecordError(f"Found invalid number of record headers {count}")
    for _ in range(count):
        hk = s.varint(5)
        if hk < 0:
            raise InvalidRecordError(f"Invalid negative header key size {hk}")
        bounded(hk)
        hv = s.varint(5)
        if hv >= 0:
            bounded(hv)
    if s.tell() != stop:
        raise InvalidRecordError(
            f"Invalid record size: expected to read {length} bytes in record payload, but instead "
            f"read {length + s.tell() - stop}"
        )
    return _record_error(index, offset_delta, key_len, compacted)


# continuation bits, for bytes.translate: 1 where a varint goes on, 0 where it ends
_CONTINUES = bytes(1 if b & 0x80 else 0 for b in range(256))
# the two bytes of the zigzag varints of offset deltas 64..8191
_DELTA2_LOW = bytes((2 * v) & 0x7F | 0x80 for v in range(64, 8192))
_DELTA2_HIGH = bytes((2 * v) >> 7 for v in range(64, 8192))


def _same_layout_run(buf: bytes, prev: int, stride: int, index: int, k: int) -> bool:
    """Whether the ``k`` records after the valid record at ``prev`` (``stride`` bytes long,
    without headers) are laid out exactly like it — same length prefix, timestamp delta of the
    same width, key and value of the same lengths, no headers — with offset deltas ``index``,
    ``index + 1``, ... A strided slice per field byte compares all ``k`` in C; then each of them
    is as valid as the one at ``prev`` and need not be walked. False means: walk them."""
    t = prev
    while buf[t] & 0x80:  # the length prefix
        t += 1
    t += 2  # past its last byte and the attributes: the timestamp delta
    o = t
    while buf[o] & 0x80:
        o += 1
    o += 1  # the offset delta
    wide = buf[o] & 0x80
    kp = o + 2 if wide else o + 1  # the key length
    if (wide and (buf[o + 1] & 0x80 or index < 64)) or index + k > (8192 if wide else 64):
        return False  # three-byte or over-long offset deltas, or deltas that change width: walk
    key_len, vp = _varint(buf, kp, prev + stride, 5)
    vp += max(key_len, 0)
    value_len, hp = _varint(buf, vp, prev + stride, 5)
    hp += max(value_len, 0)
    if hp != prev + stride - 1:  # the template has headers
        return False
    first = prev + stride
    span = (k - 1) * stride + 1

    def same(at: int, width: int) -> bool:
        for j in range(at - prev, at - prev + width):
            if buf[first + j : first + j + span : stride] != bytes((buf[prev + j],)) * k:
                return False
        return True

    # length prefix, key length, value length, header count: byte for byte as in the template
    key_width = vp - max(key_len, 0) - kp
    value_width = hp - max(value_len, 0) - vp
    if not (same(prev, t - 1 - prev) and same(kp, key_width) and same(vp, value_width) and same(hp, 1)):
        return False
    # the timestamp delta: the same continuation bits (its value may differ)
    for j in range(t - prev, o - prev):
        bits = buf[first + j : first + j + span : stride].translate(_CONTINUES)
        if bits != bytes((_CONTINUES[buf[prev + j]],)) * k:
            return False
    # offset deltas index .. index + k - 1
    j = o - prev
    if not wide:
        return buf[first + j : first + j + span : stride] == bytes(range(2 * index, 2 * (index + k), 2))
    lo = index - 64
    return (
        buf[first + j : first + j + span : stride] == _DELTA2_LOW[lo : lo + k]
        and buf[first + j + 1 : first + j + 1 + span : stride] == _DELTA2_HIGH[lo : lo + k]
    )


def validate_batch_records(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: BatchHeader,
    *,
    compacted: bool,
    chunk_size: int = CHUNK_SIZE,
    contiguous_max: int = CONTIGUOUS_RECORD_MAX,
    gallop: bool = True,
) -> None:
    """Walk every record of the batch at ``pos`` (decompressing as a stream); see the module
    notes for what is checked and the errors raised. The batch header (CRC, counts) must have
    been checked already. ``gallop=False`` checks one record at a time (tests compare)."""
    payload = memoryview(buf)[pos + BATCH_OVERHEAD : pos + header.batch_length + 12]
    if header.compression == COMPRESSION_NONE:
        chunks: Iterator[bytes] = iter((bytes(payload),))
    else:
        chunks = decompress_chunks(header.compression, payload, chunk_size)
    s = _Stream(chunks)
    errors: list[tuple[int, str]] = []
    failed = 0
    n = header.records_count
    i = 0
    run = 8 if gallop else 0
    while i < n:
        # fast path: a one- or two-byte length prefix and the whole record in the current chunk
        buf = s.buf
        start = p = s.pos
        if p + 1 < len(buf):
            z = buf[p]
            if z < 0x80:
                p += 1
            elif buf[p + 1] < 0x80:
                z = (z & 0x7F) | (buf[p + 1] << 7)
                p += 2
            else:
                z = 1  # a longer prefix: the general path below
            length = (z >> 1) ^ -(z & 1)
            if length >= _MIN_RECORD_BODY and p + length <= len(buf):
                err = _check_body(buf, p, p + length, i, compacted)
                s.pos = p + length
                i += 1
                if err is not None:
                    failed += 1
                    if len(errors) < _MAX_RECORD_ERRORS:
                        errors.append((i - 1, err))
                elif run:
                    stride = s.pos - start
                    k = min(run, n - i, (len(buf) - s.pos) // stride)
                    if k >= 2 and _same_layout_run(buf, start, stride, i, k):
                        s.pos += k * stride
                        i += k
                        run = min(run * 2, 1 << 12)
                    elif k >= 2:
                        run = run // 2 if run > 2 else 0
                continue
        i += 1
        i_rec = i - 1
        length = s.varint(5)
        if length < _MIN_RECORD_BODY:
            raise InvalidRecordError(f"Invalid record size {length} in record {i_rec}")
        if length <= contiguous_max:
            if not s.ensure(length):
                raise _premature_eof()
            p = s.pos
            err = _check_body(s.buf, p, p + length, i_rec, compacted)
            s.pos = p + length
        else:
            err = _check_body_streaming(s, length, i_rec, compacted)
        if err is not None:
            failed += 1
            if len(errors) < _MAX_RECORD_ERRORS:
                errors.append((i_rec, err))
    if not s.at_end():
        raise _records_remaining()
    if errors:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
        raise RecordValidationError(
            f"One or more records have been rejected due to {failed} record errors in total, and "
            f"only showing the first three errors at most: [{shown}]",
            errors,
        )
