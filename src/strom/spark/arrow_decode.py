"""Decode raw Kafka record batches (v2) straight into Arrow record batches with Spark's Kafka
source schema.

Theory of operation
-------------------
A fetch answer is a concatenation of v2 batches. Per *batch* we do Python work (header parse,
transaction filtering, decompression): that is cheap. Per *record* Python work is what costs, so
the records are decoded column-wise:

1. The payloads of the wanted batches are joined into one buffer. A tight Python loop walks the
   record-length varints only, giving each record's start (a record's position depends on the
   previous record's length, so this chain is inherently sequential; the loop is ~6 bytecodes
   per record).
2. Every other field is decoded for all records at once with numpy: a vectorised zig-zag varint
   decoder runs over the array of positions for attributes, timestamp delta, offset delta, key
   length, value length and header count, in record order.
3. Key and value columns are built without a Python object per record. When every value of a
   column has one size (fixed-size keys and values, the common case), the buffer is viewed as
   an array of items of that size starting at every byte, and one numpy gather of the items at
   the value starts copies the values out, contiguous. Otherwise an Arrow ``binary`` array whose
   offsets alternate value-start / value-end over the joined buffer has the values at its even
   elements and the gaps between them at the odd ones; ``take`` of the even elements copies them
   out in C++. Nulls (length -1) come from a validity bitmap.
4. Headers (only with ``includeHeaders``) are decoded per record in Python, but only for the
   records that have any; the rest get a null ``headers`` value, as Spark's Kafka source does.

Transactions (read_committed): batches of aborted transactions are dropped using the fetch
response's aborted-transaction list, the way Kafka's consumer does it: a producer id becomes
"aborted" at the first offset of its aborted transaction and stops being so at its ABORT marker.

Error contract: malformed bytes raise :class:`strom.protocol.records.CorruptRecordError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from strom.protocol import records as rec

__all__ = ["KAFKA_ARROW_SCHEMA", "DecodedChunk", "arrow_schema", "decode_to_arrow"]

_HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

KAFKA_ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
)
KAFKA_ARROW_SCHEMA_HEADERS = KAFKA_ARROW_SCHEMA.append(pa.field("headers", _HEADER_TYPE))

I64 = npt.NDArray[np.int64]

_MAX_ROUNDS = 8  # vectorised rounds of record-start finding before walking the rest in Python
_FIRST_ROUND = 64  # records per batch the first round checks


def arrow_schema(include_headers: bool) -> pa.Schema:
    return KAFKA_ARROW_SCHEMA_HEADERS if include_headers else KAFKA_ARROW_SCHEMA


@dataclass
class DecodedChunk:
    """Rows decoded from one fetch answer and where to fetch next."""

    batch: pa.RecordBatch | None
    next_offset: int | None  # offset after the last complete batch looked at (None: none complete)
    rows: int


def _varints(a: npt.NDArray[np.uint8], pos: I64) -> tuple[I64, I64]:
    """Zig-zag varints at every position of ``pos`` -> (values, positions after them).

    A varint running past the end of ``a`` reads its last byte again (and so ends up "too long"
    or inconsistent with the record lengths, both reported as corruption by the callers)."""
    b = a[pos]
    cont = b >= 0x80
    if not cont.any():  # every varint is one byte (small lengths and deltas): the common case
        v = b.astype(np.int64)
        return (v >> 1) ^ -(v & 1), pos + 1
    nxt = pos + cont
    try:
        b1 = a[nxt]  # the second byte of two-byte varints (the first byte again of one-byte ones)
    except IndexError:  # one runs past the end (at a wrongly guessed record start, say)
        return _varints_long(a, pos, b, cont)
    if not (b1[cont] >= 0x80).any():  # none longer than two bytes: the next most common case
        v = (b1 * cont).astype(np.int64)
        v <<= 7
        v |= b & 0x7F
        nxt += 1
        return (v >> 1) ^ -(v & 1), nxt
    return _varints_long(a, pos, b, cont)


def _varints_long(
    a: npt.NDArray[np.uint8], pos: I64, b: npt.NDArray[np.uint8], cont: npt.NDArray[np.bool_]
) -> tuple[I64, I64]:
    """:func:`_varints` of any length (``b`` the first bytes, ``cont`` which go on)."""
    last = len(a) - 1
    value = (b & 0x7F).astype(np.uint64)
    n = np.ones(pos.shape, dtype=np.int64)
    shift = 7
    while cont.any():
        if shift > 63:
            raise rec.CorruptRecordError("varint too long")
        b = a[np.minimum(pos + n, last)]
        value |= np.where(cont, (b & 0x7F).astype(np.uint64) << np.uint64(shift), np.uint64(0))
        n += cont
        cont &= b >= 0x80
        shift += 7
    signed = (value >> np.uint64(1)).astype(np.int64) ^ -(value & np.uint64(1)).astype(np.int64)
    return signed, pos + n


def _record_starts(
    buf: bytes | bytearray | memoryview, a: npt.NDArray[np.uint8], segments: Sequence[tuple[int, int, int]]
) -> tuple[I64, I64, I64]:
    """Start of every record, its length and the position after its length varint:
    ``segments`` are (payload start, payload end, record count) in ``buf`` (``a`` is the same
    bytes as a numpy array).

    A record's position depends on the lengths of all records before it, but lengths mostly come
    in long runs (fixed-size keys and values; the offset and timestamp deltas grow a varint byte
    only at 64 and 8192), so this is done in vectorised rounds over all batches at once: from the
    last known start of each batch, *assume* the rest of the batch repeats that record's size,
    and check it: record k's length varint must put its end exactly at the assumed start of
    record k+1. Everything before the first record that fails the check is right (by induction
    from the known start), and so is that record's own start and end, so each round fixes at
    least one record per batch and usually all of them. Batches still unresolved after a few
    rounds, or that stop converging (lengths that vary record by record), are walked in Python.
    """
    seg = np.array(segments, dtype=np.int64).reshape(-1, 3)
    s0, s1, cnt = seg[:, 0], seg[:, 1], seg[:, 2]
    total = int(cnt.sum())
    starts = np.zeros(total, dtype=np.int64)
    lengths = np.zeros(total, dtype=np.int64)
    after = np.zeros(total, dtype=np.int64)
    if total == 0:
        return starts, lengths, after
    first = np.zeros(len(seg), dtype=np.int64)
    np.cumsum(cnt[:-1], out=first[1:])
    cur = s0.copy()  # next unknown record start of each batch
    done = np.zeros(len(seg), dtype=np.int64)  # records of each batch already placed
    walk = np.zeros(len(seg), dtype=bool)  # left to the Python walk
    active = np.nonzero(cnt > 0)[0]
    never = np.int64(1 << 62)
    for _round in range(_MAX_ROUNDS):
        c0 = cur[active]
        end = s1[active]
        off = c0 >= end
        if off.any():  # records left but no bytes: corrupt, the walk says so
            walk[active[off]] = True
            active, c0, end = active[~off], c0[~off], end[~off]
        if active.size == 0:
            break
        try:
            l0, after0 = _varints(a, c0)
        except rec.CorruptRecordError:
            walk[active] = True
            break
        stride = np.maximum(after0 - c0 + l0, 1)
        rem_all = cnt[active] - done[active]
        # the first round checks only the first records of each batch: the deltas' varints
        # typically grow a byte at record 64, and checking the rest against the first record's
        # size would be wasted
        rem = np.minimum(rem_all, _FIRST_ROUND) if _round == 0 else rem_all
        base = np.zeros(active.size, dtype=np.int64)
        np.cumsum(rem[:-1], out=base[1:])
        k = np.arange(int(rem.sum()), dtype=np.int64) - np.repeat(base, rem)
        c0_of = np.repeat(c0, rem)
        stride_of = np.repeat(stride, rem)
        cand = k * stride_of
        cand += c0_of
        inb = cand < np.repeat(end, rem)
        try:
            reclen, p = _varints(a, np.where(inb, cand, c0_of))
        except rec.CorruptRecordError:
            walk[active] = True
            break
        good = inb & (reclen >= 0) & (p + reclen == cand + stride_of)
        if good.all():
            first_bad = np.full(active.size, never)
            at = k + np.repeat(first[active] + done[active], rem)
            starts[at] = cand
            lengths[at] = reclen
            after[at] = p
        else:
            first_bad = np.minimum.reduceat(np.where(good, never, k), base)
            placed = k <= np.repeat(first_bad, rem)
            at = np.repeat(first[active] + done[active], rem)[placed] + k[placed]
            starts[at] = cand[placed]
            lengths[at] = reclen[placed]
            after[at] = p[placed]
        partial = first_bad < never
        fb_at = base[partial] + first_bad[partial]
        stopped = active[partial]
        walk[stopped[~inb[fb_at]]] = True
        cur[stopped] = p[fb_at] + reclen[fb_at]
        done[stopped] += first_bad[partial] + 1
        whole = active[~partial]
        cur[whole] = c0[~partial] + rem[~partial] * stride[~partial]
        done[whole] += rem[~partial]
        left = cnt[active] - done[active]
        finished = active[left == 0]
        walk[finished[cur[finished] != s1[finished]]] = True  # must end exactly at the payload end
        n_active = active.size
        active = active[(left > 0) & ~walk[active]]
        if int(rem_all.sum()) - int(left.sum()) < 8 * n_active:
            break  # under 8 records a batch placed this round: lengths vary record by record
    walked: list[tuple[int, int]] = []
    for i in np.nonzero(walk)[0].tolist():  # corrupt or odd batches: from the start, for the error
        f = int(first[i])
        starts[f : f + int(cnt[i])] = _walk_starts(buf, int(s0[i]), int(s1[i]), int(cnt[i]))
        walked.append((f, f + int(cnt[i])))
    for i in active.tolist():  # unresolved after the rounds: walk the rest of the batch
        f, d = int(first[i]), int(done[i])
        starts[f + d : f + int(cnt[i])] = _walk_starts(buf, int(cur[i]), int(s1[i]), int(cnt[i]) - d)
        walked.append((f + d, f + int(cnt[i])))
    if walked:
        idx = np.concatenate([np.arange(f, e, dtype=np.int64) for f, e in walked])
        lengths[idx], after[idx] = _varints(a, starts[idx])
    return starts, lengths, after


def _walk_starts(buf: bytes | bytearray | memoryview, seg_start: int, seg_end: int, count: int) -> list[int]:
    """The record starts of one batch payload, walking the record-length varints in Python."""
    starts: list[int] = []
    append = starts.append
    p = seg_start
    for _ in range(count):
        append(p)
        b = buf[p]
        if b < 0x80:
            p += 1 + (b >> 1)
            continue
        b2 = buf[p + 1]
        if b2 < 0x80:
            p += 2 + (((b & 0x7F) | (b2 << 7)) >> 1)
            continue
        shift, v, q = 0, 0, p
        while True:
            c = buf[q]
            q += 1
            v |= (c & 0x7F) << shift
            if c < 0x80:
                break
            shift += 7
            if shift > 35:
                raise rec.CorruptRecordError("record length varint too long")
        if v & 1:
            raise rec.CorruptRecordError("negative record length")
        p = q + (v >> 1)
    if p != seg_end:
        raise rec.CorruptRecordError(
            f"record batch payload of {seg_end - seg_start} bytes does not hold its {count} records"
        )
    return starts


def _binary_column(a: npt.NDArray[np.uint8], data: pa.Buffer, starts: I64, lengths: I64) -> pa.Array:
    """A contiguous ``binary`` column of the byte ranges (start, length) of ``a`` (the same bytes
    as ``data``); length -1 is null."""
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    nulls = lengths < 0
    null_count = int(nulls.sum())
    lens = np.maximum(lengths, 0)
    present = lengths[~nulls] if null_count else lengths
    width = int(present[0]) if len(present) else 0
    if not (present == width).all():
        return _binary_column_take(data, starts, lens, nulls, null_count)
    # Every value has the same size (fixed-size keys and values: the common case). Seen as an
    # array of ``width``-byte items starting at every byte, the buffer holds each value as one
    # item, so one gather copies them all, contiguous and in order.
    if width:
        items = np.ndarray(shape=(len(a) - width + 1,), dtype=f"V{width}", buffer=a, strides=(1,))
        values = pa.py_buffer(items[starts[~nulls] if null_count else starts])
    else:
        values = pa.py_buffer(b"")
    offs = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lens, out=offs[1:])
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(
        pa.binary(), n, [validity, pa.py_buffer(offs), values], null_count=null_count
    )


def _binary_column_take(
    data: pa.Buffer, starts: I64, lens: I64, nulls: npt.NDArray[np.bool_], null_count: int
) -> pa.Array:
    """:func:`_binary_column` for ranges of varying size or spacing: a ``binary`` array whose
    offsets alternate start / end over the whole buffer has the wanted ranges at its even
    elements (and the gaps at the odd ones); ``take`` of the even elements copies them out."""
    n = len(starts)
    ends = starts + lens
    offs = np.empty(2 * n + 1, dtype=np.int32)
    offs[0 : 2 * n : 2] = starts
    offs[1 : 2 * n : 2] = ends
    offs[2 * n] = ends[-1]
    validity = None
    if null_count:
        valid = np.ones(2 * n, dtype=bool)
        valid[0::2] = ~nulls
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    spread = pa.Array.from_buffers(
        pa.binary(), 2 * n, [validity, pa.py_buffer(offs), data], null_count=null_count
    )
    return spread.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))


def _constant_string(value: str, n: int) -> pa.Array:
    raw = value.encode()
    offs = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offs), pa.py_buffer(raw * n)])


def _constant_int32(value: int, n: int) -> pa.Array:
    return pa.array(np.full(n, value, dtype=np.int32))


def _headers_column(buf: bytes | bytearray | memoryview, hpos: I64, hcount: I64, body_end: I64) -> pa.Array:
    n = len(hpos)
    offsets = np.zeros(n + 1, dtype=np.int32)
    keys: list[str] = []
    values: list[bytes | None] = []
    has = np.nonzero(hcount > 0)[0]
    mv = memoryview(buf)
    for i in has.tolist():
        p = int(hpos[i])
        for _ in range(int(hcount[i])):
            kb, p = rec._read_bytes(mv, p)
            vb, p = rec._read_bytes(mv, p)
            keys.append((kb or b"").decode("utf-8", "replace"))
            values.append(vb)
        if p != int(body_end[i]):
            raise rec.CorruptRecordError("record length does not match its headers")
    counts = np.maximum(hcount, 0).astype(np.int32)
    np.cumsum(counts, out=offsets[1:])
    structs = pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(values, pa.binary())], fields=list(_HEADER_TYPE.value_type)
    )
    mask = pa.array(hcount <= 0)
    return pa.ListArray.from_arrays(pa.array(offsets), structs, type=_HEADER_TYPE, mask=mask)


def _control_type(buf: bytes | bytearray | memoryview, pos: int, header: rec.BatchHeader) -> int:
    """ABORT (0) or COMMIT (1) of a control batch; -1 if unreadable."""
    for r in rec.decode_batch_records(buf, pos, header):
        if r.key is not None and len(r.key) >= 4:
            return int.from_bytes(r.key[2:4], "big", signed=True)
    return -1


def decode_to_arrow(
    data: bytes | bytearray | memoryview,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    include_headers: bool = False,
    read_committed: bool = False,
    aborted: Sequence[tuple[int, int]] = (),
) -> DecodedChunk:
    """Rows with ``start <= offset < end`` of the complete batches in ``data`` as one Arrow
    record batch (``None`` if there are none), and the offset to fetch next."""
    segments: list[tuple[int, int, int]] = []  # payload start, end, record count
    payloads: list[bytes | memoryview] = []  # decompressed payloads (when any batch is compressed)
    codecs: list[int] = []  # compression of each wanted batch
    meta: list[tuple[int, int, int, int]] = []  # base offset, base ts, max ts, ts type
    mv = data if isinstance(data, memoryview) else memoryview(data)
    compressed = False
    nxt: int | None = None
    pos = 0
    total = len(data)
    pending_aborts = sorted(aborted, key=lambda a: a[1])
    ai = 0
    aborted_pids: set[int] = set()
    while total - pos >= rec.BATCH_OVERHEAD:
        h = rec.parse_header(data, pos)
        if h.size > total - pos:
            break  # a fetch answer may end with a partial batch
        if h.magic != 2:
            raise rec.CorruptRecordError(f"unsupported record batch magic {h.magic} in {topic}-{partition}")
        if h.base_offset >= end:
            # nothing in [nxt, end) exists (a gap left by compaction or aborted data): done
            nxt = max(nxt if nxt is not None else end, end)
            break
        if read_committed:
            while ai < len(pending_aborts) and pending_aborts[ai][1] <= h.last_offset:
                aborted_pids.add(pending_aborts[ai][0])
                ai += 1
        skip = h.next_offset <= start or h.is_control or h.records_count == 0
        if read_committed and h.is_transactional:
            if h.is_control:
                if _control_type(data, pos, h) == 0:
                    aborted_pids.discard(h.producer_id)
            elif h.producer_id in aborted_pids:
                skip = True
        if not skip:
            codecs.append(h.compression)
            compressed = compressed or bool(h.compression)
            segments.append((pos + rec.BATCH_OVERHEAD, pos + h.size, h.records_count))
            meta.append((h.base_offset, h.base_timestamp, h.max_timestamp, h.timestamp_type))
        nxt = h.next_offset
        pos += h.size
    if not segments:
        return DecodedChunk(None, nxt, 0)
    buf: bytes | bytearray | memoryview
    if compressed:
        # decompress into one new buffer of all the wanted payloads, compressed or not
        size = 0
        for i, (a0, a1, count) in enumerate(segments):
            body: bytes | memoryview = mv[a0:a1]
            if codecs[i]:
                body = rec.decompress(codecs[i], body)
            payloads.append(body)
            segments[i] = (size, size + len(body), count)
            size += len(body)
        buf = b"".join(payloads)
    else:
        buf = data  # records are read in place: no copy of the fetched bytes
    a = np.frombuffer(buf, dtype=np.uint8)
    try:
        _p0, reclen, p = _record_starts(buf, a, segments)
        body_end = p + reclen
        p = p + 1  # record attributes (unused)
        ts_delta, p = _varints(a, p)
        off_delta, p = _varints(a, p)
        key_len, p = _varints(a, p)
        key_start = p
        p = p + np.maximum(key_len, 0)
        val_len, p = _varints(a, p)
        val_start = p
        p = p + np.maximum(val_len, 0)
        hcount, p = _varints(a, p)
    except IndexError:
        raise rec.CorruptRecordError(f"record batch payload truncated in {topic}-{partition}") from None
    if hcount.any():  # some records have headers (or a corrupt negative count)
        bad = (p > body_end).any() or ((hcount == 0) & (p != body_end)).any() or (hcount < 0).any()
    else:
        bad = (p != body_end).any()
    if bad:
        raise rec.CorruptRecordError(f"record fields overrun their record in {topic}-{partition}")

    m = np.array(meta, dtype=np.int64)
    counts = np.array([s[2] for s in segments], dtype=np.int64)
    offsets = np.repeat(m[:, 0], counts)
    offsets += off_delta
    ts_types = m[:, 3]
    ts_type: int | npt.NDArray[np.int32] = int(ts_types[0])  # one for all rows, or one per row
    if not ts_types.any():  # all CreateTime (the usual): base timestamp + delta
        ts = np.repeat(m[:, 1], counts)
        ts += ts_delta
    elif ts_types.all():  # all LogAppendTime: the batch's max timestamp
        ts = np.repeat(m[:, 2], counts)
    else:
        tt = np.repeat(ts_types, counts)
        ts = np.where(tt == 1, np.repeat(m[:, 2], counts), np.repeat(m[:, 1], counts) + ts_delta)
        ts_type = tt.astype(np.int32)
    if not (offsets.min() >= start and offsets.max() < end):
        idx = np.nonzero((offsets >= start) & (offsets < end))[0]
        offsets, ts = offsets[idx], ts[idx]
        if not isinstance(ts_type, int):
            ts_type = ts_type[idx]
        key_start, key_len, val_start, val_len = key_start[idx], key_len[idx], val_start[idx], val_len[idx]
        p, hcount, body_end = p[idx], hcount[idx], body_end[idx]
    n = len(offsets)
    if n == 0:
        return DecodedChunk(None, nxt, 0)
    data_buf = pa.py_buffer(buf)
    ts *= 1000
    columns = [
        _binary_column(a, data_buf, key_start, key_len),
        _binary_column(a, data_buf, val_start, val_len),
        _constant_string(topic, n),
        _constant_int32(partition, n),
        pa.array(offsets),
        pa.array(ts, pa.timestamp("us", tz="UTC")),
        _constant_int32(ts_type, n) if isinstance(ts_type, int) else pa.array(ts_type),
    ]
    if include_headers:
        columns.append(_headers_column(buf, p, hcount, body_end))
    batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))
    return DecodedChunk(batch, nxt, n)
