"""Log compaction (Kafka's LogCleaner / LogCleanerManager / Cleaner).

Theory of operation
-------------------
A compacted log (``cleanup.policy`` containing ``compact``) is split at the *first dirty offset*
(from the per-log-dir ``cleaner-offset-checkpoint``, never below the log start offset) into a
*clean* head, already compacted, and a *dirty* tail. The dirty tail ends at the *first
uncleanable offset*: the smallest of the active segment's base offset (the active segment is
never cleaned), the high watermark, the last stable offset (an open transaction), and the base
of the first segment whose largest timestamp is newer than ``min.compaction.lag.ms``; it is
rounded down to a segment boundary so only whole segments are ever dirty.

Choosing a log (:meth:`LogCleaner.grab_filthiest`): the dirty ratio is dirty bytes / (clean +
dirty bytes); logs at or above ``min.cleanable.dirty.ratio`` are candidates, and so is any log
whose first dirty segment is older than ``max.compaction.lag.ms`` (those go first). The dirtiest
candidate is cleaned.

Cleaning one log (:meth:`Cleaner.clean`):

1. Offset map: scan the dirty section and record, for every key, the offset of its latest record
   (``key -> offset``; Kafka hashes keys, we keep them exactly). The map is bounded by
   ``max_map_entries``; when full, it stops at a segment boundary and the rest stays dirty.
2. Recopy every closed segment below the map's end offset, grouped into runs whose total size
   fits ``segment.bytes`` (so repeated cleaning does not leave ever smaller segments), keeping a
   record iff it has a key, no later record of the key is in the map, and it is not an expired
   tombstone. A tombstone (null value) expires once it is in the clean section (it survived one
   cleaning, so the records it deletes are gone) and its batch timestamp is older than
   ``delete.retention.ms`` — record time on the injected clock, like time retention, where Kafka
   used file mtimes.
3. Batches: a batch whose records all survive is copied byte for byte; otherwise its surviving
   records are re-encoded into a batch with the same base offset, last offset delta, producer
   id/epoch/base sequence, attributes and compression codec (records keep their offset and
   timestamp deltas, so offsets never change). A batch that loses every record is dropped,
   unless it is the last batch of its producer, which is kept empty (idempotence state must
   survive a restart). Transactions (Kafka's rules, :class:`TxnTracker`): the walk from the
   log start knows the aborted transactions from the ``.txnindex`` files; an aborted
   transaction's batches lose every record (its records are not in the offset map either, so
   they never shadow older values), a committed transaction's records are compacted like any
   others, and a marker is kept while any batch of its transaction is left; once none is, it is
   stamped with a delete horizon (KIP-534's batch attribute, now + ``delete.retention.ms``) and a
   cleaning after that horizon removes it, with its ``.txnindex`` entry. A producer's last batch
   is kept (empty if its records go): its last data batch, or with none retained its marker at
   its current epoch (fencing survives a restart).
   If the group's last batch was dropped, an empty batch at the group's last offset ends the
   cleaned segment, so the segment covers exactly the offset range it replaces — recovery of an
   interrupted swap relies on that (:meth:`LocalLog.replace_segments`).
4. Swap: the group is written to ``<base>.log.cleaned`` (+ indexes), fsynced, then swapped in
   under the log's lock (:meth:`PartitionLog.replace_segments`). If the log changed meanwhile
   (retention deleted a segment of the group, the log was closed) the cleaned files are
   discarded and the next round starts over.
5. The checkpoint records the map's end offset as the new first dirty offset.

Threads and processes: the cleaner runs in one thread of the broker (:mod:`strom.server.log_tasks`).
It reads segments through descriptors dup'd under the log's lock, so segments it reads may be
removed concurrently; it touches the log's structures only in ``cleanable_segments`` and
``replace_segments`` (lock held). ``stop`` aborts at the next batch (or kills the worker).

Where the CPU work runs: with a :class:`CleanerWorker` (the broker's default,
``strom.log.cleaner.process=true``) steps 1-3 run in a child process that receives the dup'd
descriptors over a Unix socket and writes the ``*.cleaned`` files; the thread waits for it
without the GIL, then opens the cleaned segment (its indexes are trusted: written and fsynced
by the worker) and does step 4 itself. The lock discipline above is therefore unchanged: only
the thread ever takes a log's lock or touches its structures. Without a worker, the thread
does the work and ``pause_every_bytes`` makes it sleep briefly after that many bytes so the
event loop gets the GIL; but every time the loop gives the GIL up (each syscall) it waits up
to a switch interval to get it back, which is why the worker is the default.

Pacing: ``log.cleaner.io.max.bytes.per.second`` (Kafka's) throttles bytes read + written with
Kafka's :class:`Throttler` (unlimited by default).

Null keys: produce on a compacted topic rejects them (:class:`PartitionLog`); records without a key
that exist anyway (the policy changed) are removed by cleaning, as Kafka does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crc32c import crc32c

from strom.clock import Clock, RealClock
from strom.durable_file import replace_file
from strom.log.errors import CorruptIndexError, CorruptRecordError
from strom.log.faults import crash_point
from strom.log.partition_log import PartitionLog
from strom.log.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    filename_prefix,
)
from strom.log.transaction_index import AbortedTxn
from strom.protocol.batch_validation import ChunkStream, decompress_chunks
from strom.protocol.records import (
    BATCH_OVERHEAD,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    HEADER_STRUCT,
    BatchHeader,
    _write_varint,
    compress,
    control_type,
    decompress,
    parse_header,
)

log = logging.getLogger("strom.cleaner")

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_READ_CHUNK = 1 << 20
_WRITE_CHUNK = 1 << 20
_CRC_OFFSET = 17
_ATTR_OFFSET = 21
_MAX_RELATIVE_OFFSET = 0x7FFFFFFF
_MAX_OFFSET = (1 << 63) - 1

TopicPartition = tuple[str, int]


class CleanerAborted(Exception):
    """The cleaning of a log was abandoned (stop requested, or the log went away)."""


# --------------------------------------------------------------------------- checkpoint file


class CleanerCheckpoint:
    """``<log.dir>/cleaner-offset-checkpoint``: the first dirty offset of every compacted log,
    in Kafka's checkpoint format (``0`` / count / ``topic partition offset`` lines)."""

    def __init__(self, log_dir: Path) -> None:
        self.path = Path(log_dir) / CLEANER_CHECKPOINT_FILE
        self._lock = threading.Lock()
        self.offsets: dict[TopicPartition, int] = self._read()

    def _read(self) -> dict[TopicPartition, int]:
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return {}
        out: dict[TopicPartition, int] = {}
        try:
            if lines[0].strip() != "0":
                return {}
            for line in lines[2 : 2 + int(lines[1])]:
                topic, part, off = line.rsplit(" ", 2)
                out[(topic, int(part))] = int(off)
        except (IndexError, ValueError):
            return {}
        return out

    def get(self, tp: TopicPartition) -> int | None:
        return self.offsets.get(tp)

    def update(self, tp: TopicPartition, offset: int | None) -> None:
        """Set (or with None remove) one log's entry and rewrite the file atomically."""
        with self._lock:
            if offset is None:
                if self.offsets.pop(tp, None) is None:
                    return
            else:
                self.offsets[tp] = offset
            body = "".join(f"{t} {p} {o}\n" for (t, p), o in sorted(self.offsets.items()))
            data = f"0\n{len(self.offsets)}\n{body}".encode()
            replace_file(self.path, data, sync_dir=False)


# --------------------------------------------------------------------------- choosing a log


@dataclass
class LogToClean:
    log: PartitionLog
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    needs_compaction_now: bool = False

    @property
    def tp(self) -> TopicPartition:
        return (self.log.topic, self.log.partition)

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def is_compacted(plog: PartitionLog) -> bool:
    return plog.config.compact_enabled


def cleanable_range(plog: PartitionLog, checkpoint: int | None, now_ms: int) -> LogToClean | None:
    """The clean/dirty split of ``plog`` (see the module docstring), or None if it has nothing
    that could be cleaned."""
    with plog.lock:
        if plog.closed:
            return None
        segs = plog.log_segments
        cfg = plog.config
        start = plog.log_start_offset
        first_dirty = start if checkpoint is None or checkpoint < start else checkpoint
        if first_dirty > plog.log_end_offset:
            first_dirty = start  # the log was truncated below the checkpoint
        limit = min(segs[-1].base_offset, plog.high_watermark, plog.last_stable_offset)
        bounds = [s.base_offset for s in segs]
        # round down to a segment boundary
        uncleanable = max((b for b in bounds if b <= limit), default=bounds[0])
        if cfg.min_compaction_lag_ms > 0:
            horizon = now_ms - cfg.min_compaction_lag_ms
            for i, s in enumerate(segs[:-1]):
                if s.base_offset >= first_dirty and s.max_timestamp_so_far > horizon:
                    uncleanable = min(uncleanable, segs[i].base_offset)
                    break
        clean = dirty = 0
        first_dirty_ts = -1
        for i, s in enumerate(segs[:-1]):
            nxt = segs[i + 1].base_offset
            if nxt <= first_dirty:
                clean += s.size
            elif nxt <= uncleanable:
                dirty += s.size
                if first_dirty_ts < 0 and s.size:
                    first_dirty_ts = s.rolling_based_timestamp or s.max_timestamp_so_far
    if dirty == 0:
        return None
    now_due = (
        cfg.max_compaction_lag_ms > 0
        and first_dirty_ts >= 0
        and now_ms - first_dirty_ts > cfg.max_compaction_lag_ms
    )
    return LogToClean(plog, first_dirty, uncleanable, clean, dirty, now_due)


# --------------------------------------------------------------------------- record parsing


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long")


class RawRecord:
    """One record of a batch, undecoded except for what compaction needs."""

    __slots__ = ("end", "key", "offset_delta", "start", "timestamp_delta", "value_null")

    def __init__(
        self,
        start: int,
        end: int,
        offset_delta: int,
        timestamp_delta: int,
        key: bytes | None,
        value_null: bool,
    ) -> None:
        self.start = start
        self.end = end
        self.offset_delta = offset_delta
        self.timestamp_delta = timestamp_delta
        self.key = key
        self.value_null = value_null


def iter_raw_records(payload: bytes, count: int) -> Iterator[RawRecord]:
    """The records of an (uncompressed) batch payload; ``payload[start:end]`` is a record's
    complete encoding, length prefix included, and can be copied into another batch that has the
    same base offset and base timestamp."""
    pos = 0
    n = len(payload)
    for _ in range(count):
        start = pos
        length, pos = _varint(payload, pos)
        end = pos + length
        if length < 0 or end > n:
            raise CorruptRecordError("record length out of bounds")
        pos += 1  # attributes
        ts_delta, pos = _varint(payload, pos)
        off_delta, pos = _varint(payload, pos)
        klen, pos = _varint(payload, pos)
        key: bytes | None = None
        if klen >= 0:
            key = payload[pos : pos + klen]
            pos += klen
        vlen, _ = _varint(payload, pos)
        yield RawRecord(start, end, off_delta, ts_delta, key, vlen < 0)
        pos = end


_RECORD_HEAD = 1 + 10 + 5 + 5  # attributes, timestamp delta, offset delta, key length (at most)


def iter_streamed_records(
    batch: bytes | memoryview, h: BatchHeader, raw: Callable[[int], bool] | None = None
) -> Iterator[tuple[RawRecord, bytes | None]]:
    """The records of a compressed batch read from a streaming decompression, in bounded memory
    (a 1 GiB value is skipped, never held): each record with its key, and its complete encoding
    (length prefix included) only where ``raw(start)`` asks for it. ``start``/``end`` of the
    RawRecords are positions in the decompressed stream."""
    stream = ChunkStream(decompress_chunks(h.compression, memoryview(batch)[BATCH_OVERHEAD : h.size]))
    for _ in range(h.records_count):
        start = stream.tell()
        length = stream.varint(5)
        if length < 0:
            raise CorruptRecordError("negative record length")
        body_start = stream.tell()
        encoding: bytes | None = None
        if raw is not None and raw(start):
            if not stream.ensure(length):
                raise CorruptRecordError("record length out of bounds")
            prefix = bytearray()
            _write_varint(prefix, length)
            encoding = bytes(prefix) + stream.buf[stream.pos : stream.pos + length]
        stream.ensure(min(length, _RECORD_HEAD))
        stream.skip(1)  # attributes
        ts_delta = stream.varint(10)
        off_delta = stream.varint(5)
        klen = stream.varint(5)
        key: bytes | None = None
        if klen >= 0:
            if klen > length or not stream.ensure(klen):
                raise CorruptRecordError("record key out of bounds")
            key = stream.buf[stream.pos : stream.pos + klen]
            stream.skip(klen)
        vlen = stream.varint(5)
        consumed = stream.tell() - body_start
        if consumed > length:
            raise CorruptRecordError("record fields run past its length")
        stream.skip(length - consumed)
        yield RawRecord(start, stream.tell(), off_delta, ts_delta, key, vlen < 0), encoding


def batch_payload(batch: bytes | memoryview, h: BatchHeader) -> bytes:
    body = batch[BATCH_OVERHEAD : h.size]
    return decompress(h.compression, body) if h.compression else bytes(body)


def encode_batch(
    h: BatchHeader, *, records_count: int, payload: bytes, max_timestamp: int, attributes: int | None = None
) -> bytes:
    """A v2 batch with ``h``'s base offset, epochs, producer fields and last offset delta around
    an already encoded (and compressed) ``payload``; computes length and CRC."""
    attrs = h.attributes if attributes is None else attributes
    buf = bytearray(
        HEADER_STRUCT.pack(
            h.base_offset,
            BATCH_OVERHEAD - 12 + len(payload),
            h.partition_leader_epoch,
            2,
            0,
            attrs,
            h.last_offset_delta,
            h.base_timestamp,
            max_timestamp,
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            records_count,
        )
    )
    buf += payload
    buf[_CRC_OFFSET:_ATTR_OFFSET] = crc32c(memoryview(buf)[_ATTR_OFFSET:]).to_bytes(4, "big")
    return bytes(buf)


def empty_batch(
    h: BatchHeader,
    *,
    base_offset: int | None = None,
    last_offset_delta: int | None = None,
    producer: bool = True,
    control: bool = False,
) -> bytes:
    """A batch with no records (Kafka's writeEmptyHeader): keeps an offset range and, with
    ``producer``, the producer's id/epoch/sequence. Not transactional (it opens no transaction
    when producer state is rebuilt), unless ``control``: an emptied marker stays a marker."""
    hh = h._replace(
        base_offset=h.base_offset if base_offset is None else base_offset,
        last_offset_delta=h.last_offset_delta if last_offset_delta is None else last_offset_delta,
    )
    if not producer:
        hh = hh._replace(producer_id=-1, producer_epoch=-1, base_sequence=-1)
    return encode_batch(
        hh,
        records_count=0,
        payload=b"",
        max_timestamp=h.max_timestamp,
        attributes=h.attributes & ~0x07 & (~0 if control else ~0x30),
    )


def iter_file_batches(fd: int, start: int, end: int) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    """``(position, header, batch bytes)`` for the batches of a segment file in ``[start, end)``,
    read in large chunks. Stops at a torn tail."""
    pos = start
    buf = b""
    buf_start = start
    while pos + BATCH_OVERHEAD <= end:
        off = pos - buf_start
        if off + BATCH_OVERHEAD > len(buf):
            buf = os.pread(fd, min(_READ_CHUNK, end - pos), pos)
            buf_start, off = pos, 0
            if len(buf) < BATCH_OVERHEAD:
                return
        h = parse_header(buf, off)
        if h.magic != 2 or h.batch_length < BATCH_OVERHEAD - 12 or pos + h.size > end:
            return
        if off + h.size > len(buf):
            buf = os.pread(fd, max(h.size, min(_READ_CHUNK, end - pos)), pos)
            buf_start, off = pos, 0
            if len(buf) < h.size:
                return
        yield pos, h, memoryview(buf)[off : off + h.size]
        pos += h.size


# --------------------------------------------------------------------------- the cleaner


@dataclass
class CleanerStats:
    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    records_read: int = 0
    records_written: int = 0
    segments_swapped: int = 0
    aborted_groups: int = 0
    elapsed_s: float = 0.0
    map_elapsed_s: float = 0.0
    extra: dict[str, int] = field(default_factory=dict)

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.elapsed_s if self.elapsed_s > 0 else 0.0

    _COUNTERS = ("bytes_read", "bytes_written", "map_bytes_read", "records_read", "records_written")

    def counters(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self._COUNTERS}

    def add_counters(self, counters: dict[str, int]) -> None:
        for k in self._COUNTERS:
            setattr(self, k, getattr(self, k) + int(counters.get(k, 0)))


NO_THROTTLE = float(sys.float_info.max)  # Kafka's default: Double.MaxValue


class Throttler:
    """Kafka's ``Throttler`` (``log.cleaner.io.max.bytes.per.second``): counts bytes and, once a
    check interval has passed, sleeps long enough to bring the rate of the interval down to the
    desired rate. Kafka checks every 300 ms; shorter intervals give shorter, more even pauses."""

    def __init__(
        self,
        bytes_per_s: float = NO_THROTTLE,
        *,
        check_interval_s: float = 0.3,
        now: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self.rate = bytes_per_s
        self.check_interval_s = check_interval_s
        self._now = now
        self._sleep = sleep
        self._period_start = now()
        self._observed = 0.0
        self.slept_s = 0.0

    @property
    def enabled(self) -> bool:
        return 0 < self.rate < NO_THROTTLE

    def maybe_throttle(self, observed: int) -> None:
        if not self.enabled:
            return
        self._observed += observed
        now = self._now()
        elapsed = now - self._period_start
        if elapsed > self.check_interval_s and self._observed > 0:
            if self._observed / elapsed > self.rate:
                pause = self._observed / self.rate - elapsed
                if pause > 0:
                    self._sleep(pause)
                    self.slept_s += pause
            self._period_start = self._now()
            self._observed = 0.0


def _cleaned_paths(directory: Path, base_offset: int) -> list[Path]:
    prefix = filename_prefix(base_offset)
    return [directory / (prefix + s + CLEANED_SUFFIX) for s in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)]


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


_sync_file_range = _load_sync_file_range()
_SFR_WAIT_BEFORE, _SFR_WRITE = 1, 2


def start_writeback(fd: int, start: int, length: int) -> None:
    """Start writing ``[start, start + length)`` of ``fd`` back to disk and wait for the
    writeback started earlier up to ``start`` (Linux ``sync_file_range``; no-op elsewhere). The
    cleaned segment then reaches the disk as it is written instead of in one burst at its fsync,
    which on ext4 (data=ordered) holds the journal commit, and with it every other file's
    metadata update, for the whole burst."""
    if _sync_file_range is None:
        return
    _sync_file_range(fd, start, length, _SFR_WRITE)
    if start:
        _sync_file_range(fd, 0, start, _SFR_WAIT_BEFORE)


def remove_cleaned_files(directory: Path, base_offset: int) -> None:
    for p in _cleaned_paths(directory, base_offset):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)


def map_segments(
    spans: list[tuple[int, int]],
    first_dirty: int,
    max_map_entries: int,
    tick: Callable[[int], None],
    stats: CleanerStats,
    aborted: AbortedIndex | None = None,
) -> tuple[dict[bytes, int], int]:
    """Step 1 over segment files: ``spans`` is ``[(descriptor, next segment's base offset)]``.
    Returns ``key -> latest offset`` and the map's end offset (see :meth:`Cleaner.build_offset_map`).
    Records of aborted transactions (``aborted``) are not mapped: they must not shadow the
    values before them. Without ``aborted`` no transactional batch is mapped."""
    offset_map: dict[bytes, int] = {}
    end_offset = first_dirty
    for fd, next_base in spans:
        if next_base <= first_dirty:
            continue
        if len(offset_map) >= max_map_entries:
            break  # full: stop at this segment boundary
        size = os.fstat(fd).st_size
        for _pos, h, batch in iter_file_batches(fd, 0, size):
            tick(h.size)
            stats.map_bytes_read += h.size
            if h.last_offset < first_dirty or h.is_control:
                continue
            if h.is_transactional and (aborted is None or aborted.is_aborted(h)):
                continue
            base = h.base_offset
            records = (
                (r for r, _ in iter_streamed_records(batch, h))
                if h.compression
                else iter_raw_records(batch_payload(batch, h), h.records_count)
            )
            for rec in records:
                if rec.key is not None:
                    offset_map[rec.key] = base + rec.offset_delta
        end_offset = next_base
    return offset_map, end_offset


DELETE_HORIZON_FLAG = 0x40  # attributes bit 6: baseTimestamp holds the delete horizon (KIP-534)


def delete_horizon_ms(h: BatchHeader) -> int | None:
    return h.base_timestamp if h.attributes & DELETE_HORIZON_FLAG else None


class AbortedIndex:
    """The aborted transactions of a log (its ``.txnindex`` entries), to tell whether a
    transactional data batch belongs to an aborted transaction: one whose producer matches and
    whose ``[first_offset, marker offset]`` holds the batch."""

    def __init__(self, aborted: list[AbortedTxn] | list[tuple[int, int, int, int]]) -> None:
        self.by_pid: dict[int, list[tuple[int, int]]] = {}
        for t in aborted:
            self.by_pid.setdefault(t[0], []).append((t[1], t[2]))

    def is_aborted(self, h: BatchHeader) -> bool:
        return any(first <= h.base_offset <= last for first, last in self.by_pid.get(h.producer_id, ()))


class TxnTracker:
    """Kafka's CleanedTransactionMetadata, over one cleaning's walk of the log from its start (so
    across segment groups): which transactional batches to discard (an aborted transaction's) and
    which markers may go (no batch of their transaction is left before them).

    Markers are removed only after a pass that finds their transaction's data gone, and then
    only once the delete horizon stamped on them in that pass has passed (``delete.retention.ms``
    later): a consumer that read the data before it was cleaned still finds the marker."""

    def __init__(self, aborted: list[AbortedTxn] | list[tuple[int, int, int, int]]) -> None:
        self.pending = sorted((tuple(t) for t in aborted), key=lambda t: (t[1], t[2]))
        self._next = 0
        self.ongoing_aborted: dict[int, tuple[tuple[int, ...], bool]] = {}  # pid -> (txn, observed)
        self.ongoing_committed: set[int] = set()

    def _consume_up_to(self, offset: int) -> None:
        while self._next < len(self.pending) and self.pending[self._next][1] <= offset:
            txn = self.pending[self._next]
            self._next += 1
            self.ongoing_aborted.setdefault(int(txn[0]), (txn, False))

    def on_data(self, h: BatchHeader) -> bool:
        """A data batch: True if it belongs to an aborted transaction (discard its records)."""
        self._consume_up_to(h.last_offset)
        if not h.is_transactional:
            return False
        found = self.ongoing_aborted.get(h.producer_id)
        if found is not None:
            self.ongoing_aborted[h.producer_id] = (found[0], True)
            return True
        self.ongoing_committed.add(h.producer_id)
        return False

    def on_control(self, h: BatchHeader, batch: memoryview | bytes) -> bool:
        """A marker: True if no batch of its transaction was seen (it may go, after the horizon)."""
        self._consume_up_to(h.last_offset)
        if h.records_count == 0:
            return True  # already emptied by an earlier cleaning
        ctype = control_type(batch, 0, h)
        if ctype == CONTROL_ABORT:
            found = self.ongoing_aborted.pop(h.producer_id, None)
            return not (found is not None and found[1])
        if ctype == CONTROL_COMMIT:
            if h.producer_id in self.ongoing_committed:
                self.ongoing_committed.discard(h.producer_id)
                return False
            return True
        return False


def _with_delete_horizon(h: BatchHeader, batch: memoryview, horizon: int) -> tuple[bytes, BatchHeader]:
    """The control batch ``h`` with its delete horizon set (KIP-534: the flag, and the horizon as
    base timestamp; the record keeps its timestamp delta)."""
    data = encode_batch(
        h._replace(base_timestamp=horizon),
        records_count=h.records_count,
        payload=bytes(batch[BATCH_OVERHEAD : h.size]),
        max_timestamp=h.max_timestamp,
        attributes=h.attributes | DELETE_HORIZON_FLAG,
    )
    return data, parse_header(data)


def filter_batch(
    h: BatchHeader,
    batch: memoryview,
    offset_map: dict[bytes, int],
    first_dirty: int,
    delete_horizon: int,
    last_of_producer: dict[int, int],
    stats: CleanerStats,
    *,
    txns: TxnTracker | None = None,
    producer_epochs: dict[int, int] | None = None,
    now_ms: int = 0,
    marker_retention_ms: int = 0,
    removed_markers: list[tuple[int, int]] | None = None,
) -> tuple[bytes, BatchHeader] | None:
    """The batch to write for ``h`` (itself, re-encoded, or empty), or None to drop it.

    Transactions (Kafka's ``checkBatchRetention``, with ``txns`` tracking the walk): an aborted
    transaction's batches lose every record; a marker whose transaction has no batch left is
    stamped with a delete horizon (now + ``marker_retention_ms``) and dropped once a later
    cleaning finds the horizon passed (its ``(producer id, offset)`` then goes to
    ``removed_markers``). Whatever is dropped, a producer's last batch is kept, empty if need
    be: its last data batch (sequence) or, with no data retained, its marker at its current
    epoch (fencing). Without ``txns`` transactional batches and markers are kept as they are."""
    if h.is_control or h.is_transactional:
        if txns is None:
            stats.records_written += h.records_count
            return bytes(batch), h
        return _filter_txn_batch(
            h, batch, offset_map, first_dirty, delete_horizon, last_of_producer, stats, txns,
            producer_epochs or {}, now_ms, marker_retention_ms, removed_markers,
        )
    if txns is not None:
        txns.on_data(h)
    return _filter_records(h, batch, offset_map, first_dirty, delete_horizon, last_of_producer, stats)


def _last_of_producer(
    h: BatchHeader, last_of_producer: dict[int, int], producer_epochs: dict[int, int]
) -> bool:
    """Kafka's isBatchLastRecordOfProducer."""
    if h.producer_id < 0 or h.producer_id not in last_of_producer:
        return False
    last = last_of_producer[h.producer_id]
    if last >= 0:
        return h.last_offset == last
    return h.is_control and producer_epochs.get(h.producer_id) == h.producer_epoch


def _filter_txn_batch(
    h: BatchHeader,
    batch: memoryview,
    offset_map: dict[bytes, int],
    first_dirty: int,
    delete_horizon: int,
    last_of_producer: dict[int, int],
    stats: CleanerStats,
    txns: TxnTracker,
    producer_epochs: dict[int, int],
    now_ms: int,
    marker_retention_ms: int,
    removed_markers: list[tuple[int, int]] | None,
) -> tuple[bytes, BatchHeader] | None:
    if h.is_control:
        discardable = txns.on_control(h, batch)
        horizon = delete_horizon_ms(h)
        discard_records = discardable and horizon is not None and horizon <= now_ms
    else:
        discardable = discard_records = txns.on_data(h)
    keep_empty = _last_of_producer(h, last_of_producer, producer_epochs)
    if discard_records:
        if h.is_control and removed_markers is not None and h.records_count:
            removed_markers.append((h.producer_id, h.base_offset))
        if keep_empty:
            data = empty_batch(h, control=h.is_control)
            return data, parse_header(data)
        return None
    if h.is_control:
        stats.records_written += h.records_count
        if discardable and delete_horizon_ms(h) is None and h.records_count:
            return _with_delete_horizon(h, batch, now_ms + marker_retention_ms)
        return bytes(batch), h
    # a committed transaction's records are compacted like any others
    return _filter_records(h, batch, offset_map, first_dirty, delete_horizon, last_of_producer, stats)


def _filter_records(
    h: BatchHeader,
    batch: memoryview,
    offset_map: dict[bytes, int],
    first_dirty: int,
    delete_horizon: int,
    last_of_producer: dict[int, int],
    stats: CleanerStats,
) -> tuple[bytes, BatchHeader] | None:
    # compressed batches are read as a stream, keys only: a batch kept whole or dropped whole
    # (a decompression bomb's one record) is never decompressed into memory
    payload = None if h.compression else batch_payload(batch, h)
    base = h.base_offset
    tombstones_expire = h.max_timestamp <= delete_horizon
    keep: list[RawRecord] = []
    total = 0
    records = (
        (r for r, _ in iter_streamed_records(batch, h))
        if payload is None
        else iter_raw_records(payload, h.records_count)
    )
    for rec in records:
        total += 1
        key = rec.key
        if key is None:
            continue
        offset = base + rec.offset_delta
        latest = offset_map.get(key)
        if latest is not None and offset < latest:
            continue
        if rec.value_null and tombstones_expire and offset < first_dirty:
            continue
        keep.append(rec)
    stats.records_written += len(keep)
    if len(keep) == total:
        return bytes(batch), h
    if keep:
        if h.timestamp_type == 1:
            max_ts = h.max_timestamp
        else:
            max_ts = h.base_timestamp + max(r.timestamp_delta for r in keep)
        if payload is None:  # a second streaming pass copies out only the kept records
            wanted = {r.start for r in keep}
            raw = b"".join(
                enc
                for _r, enc in iter_streamed_records(batch, h, lambda start: start in wanted)
                if enc is not None
            )
        else:
            raw = b"".join(payload[r.start : r.end] for r in keep)
        data = encode_batch(
            h,
            records_count=len(keep),
            payload=compress(h.compression, raw) if h.compression else raw,
            max_timestamp=max_ts,
        )
        return data, parse_header(data)
    if h.producer_id >= 0 and last_of_producer.get(h.producer_id) == h.last_offset:
        data = empty_batch(h)
        return data, parse_header(data)
    return None


@dataclass
class TxnCleaning:
    """The transaction side of one cleaning (see :func:`filter_batch`): the tracker over the walk
    from the log start, the producers' current epochs, the clock, and the markers removed by
    the group being written (their ``.txnindex`` entries go with them)."""

    tracker: TxnTracker
    producer_epochs: dict[int, int]
    now_ms: int
    marker_retention_ms: int
    removed_markers: list[tuple[int, int]] = field(default_factory=list)


def write_cleaned_segment(
    directory: Path,
    base_offset: int,
    fds: list[int],
    *,
    index_interval_bytes: int,
    max_index_size: int,
    clock: Clock,
    offset_map: dict[bytes, int],
    first_dirty: int,
    delete_horizon: int,
    last_of_producer: dict[int, int],
    tick: Callable[[int], None],
    stats: CleanerStats,
    pace_writeback: bool = True,
    txn: TxnCleaning | None = None,
) -> LogSegment | None:
    """Steps 2-3 for one group: recopy the segment files ``fds`` into ``<base>.*.cleaned``
    (indexes included), fsynced. Returns the open cleaned segment, or None (no files left) if
    the group holds no batch. On an error the cleaned files are deleted."""
    remove_cleaned_files(directory, base_offset)
    cleaned = LogSegment.open(
        directory,
        base_offset,
        index_interval_bytes=index_interval_bytes,
        max_index_size=max_index_size,
        clock=clock,
        file_suffix=CLEANED_SUFFIX,
    )
    try:
        cleaned.recover()  # empty: resets state
        out = bytearray()
        placed: list[tuple[int, BatchHeader]] = []
        max_ts, max_ts_offset = -1, -1
        last_header: BatchHeader | None = None
        written_last: int | None = None

        def emit(data: bytes, hdr: BatchHeader) -> None:
            nonlocal out, placed, max_ts, max_ts_offset
            placed.append((len(out), hdr))
            out += data
            if hdr.max_timestamp > max_ts:
                max_ts, max_ts_offset = hdr.max_timestamp, hdr.base_offset
            if len(out) >= _WRITE_CHUNK:
                flush_out()

        def flush_out() -> None:
            nonlocal out, placed, max_ts, max_ts_offset
            if placed:
                start = cleaned.size
                cleaned.append(out, max_ts, max_ts_offset, placed)
                stats.bytes_written += len(out)
                if pace_writeback:
                    fd = cleaned.log_file.acquire()
                    try:
                        start_writeback(fd, start, len(out))
                    finally:
                        cleaned.log_file.release()
                tick(len(out))
            out, placed = bytearray(), []
            max_ts, max_ts_offset = -1, -1

        for fd in fds:
            size = os.fstat(fd).st_size
            for _pos, h, batch in iter_file_batches(fd, 0, size):
                tick(h.size)
                stats.bytes_read += h.size
                stats.records_read += h.records_count
                last_header = h
                if txn is None:
                    kept = filter_batch(
                        h, batch, offset_map, first_dirty, delete_horizon, last_of_producer, stats
                    )
                else:
                    kept = filter_batch(
                        h, batch, offset_map, first_dirty, delete_horizon, last_of_producer, stats,
                        txns=txn.tracker, producer_epochs=txn.producer_epochs, now_ms=txn.now_ms,
                        marker_retention_ms=txn.marker_retention_ms,
                        removed_markers=txn.removed_markers,
                    )
                if kept is not None:
                    data, hdr = kept
                    emit(data, hdr)
                    written_last = hdr.last_offset
        if last_header is None:
            cleaned.delete()
            return None
        if written_last != last_header.last_offset:
            # end on the group's last offset, so the cleaned segment covers exactly its range
            sentinel = empty_batch(
                last_header, base_offset=last_header.last_offset, last_offset_delta=0, producer=False
            )
            emit(sentinel, parse_header(sentinel))
        flush_out()
        cleaned.on_become_inactive()
        cleaned.flush()
    except BaseException as e:
        if isinstance(e, Exception):
            cleaned.delete()  # (a crash - BaseException in tests - leaves it for recovery)
        raise
    return cleaned


class Cleaner:
    """Cleans one log at a time (no state between calls except configuration).

    With a ``worker`` (:class:`CleanerWorker`), the offset map and the recopy run in that child
    process and this thread only waits (without the GIL) for it, then swaps; without one they
    run in the calling thread, which sleeps ``pause_s`` every ``pause_every_bytes``."""

    def __init__(
        self,
        clock: Clock,
        *,
        max_map_entries: int = 4_000_000,
        stop: threading.Event | None = None,
        pause_every_bytes: int = 256 * 1024,
        pause_s: float = 0.0005,
        throttler: Throttler | None = None,
        worker: CleanerWorker | None = None,
        pace_writeback: bool = True,
    ) -> None:
        self.clock = clock
        self.max_map_entries = max_map_entries
        self.stop = stop or threading.Event()
        self.pause_every_bytes = pause_every_bytes
        self.pause_s = pause_s
        self.throttler = throttler or Throttler(sleep=self.stop.wait)
        self.worker = worker
        self.pace_writeback = pace_writeback
        self._since_pause = 0

    def _tick(self, nbytes: int) -> None:
        if self.stop.is_set():
            raise CleanerAborted("cleaner stopping")
        self.throttler.maybe_throttle(nbytes)
        self._since_pause += nbytes
        if self.pause_every_bytes and self._since_pause >= self.pause_every_bytes:
            self._since_pause = 0
            time.sleep(self.pause_s)  # let the event loop take the GIL

    # ---------------------------------------------------------------- step 1: offset map

    @staticmethod
    def _spans(segments: list[tuple[LogSegment, int]], end: int) -> list[tuple[int, int]]:
        return [
            (fd, segments[i + 1][0].base_offset if i + 1 < len(segments) else end)
            for i, (_seg, fd) in enumerate(segments)
        ]

    def build_offset_map(
        self, ltc: LogToClean, stats: CleanerStats, aborted: list[AbortedTxn] | None = None
    ) -> tuple[dict[bytes, int], int]:
        """``key -> latest offset`` over the dirty section; returns the map and its end offset
        (the first offset not covered: the next first dirty offset). ``aborted``: the log's
        aborted transactions, whose records are left out."""
        if aborted is None:
            aborted = ltc.log.collect_aborted(-1, _MAX_OFFSET)
        segments = ltc.log.cleanable_segments(ltc.first_uncleanable)
        try:
            spans = self._spans(segments, ltc.first_uncleanable)
            return map_segments(
                spans, ltc.first_dirty, self.max_map_entries, self._tick, stats, AbortedIndex(aborted)
            )
        finally:
            for _, fd in segments:
                os.close(fd)

    def _build_offset_map_in_worker(
        self, worker: CleanerWorker, ltc: LogToClean, stats: CleanerStats, txn: TxnCleaning
    ) -> int:
        segments = ltc.log.cleanable_segments(ltc.first_uncleanable)
        try:
            spans = self._spans(segments, ltc.first_uncleanable)
            reply = worker.request(
                {
                    "op": "map",
                    "next_bases": [nb for _fd, nb in spans],
                    "first_dirty": ltc.first_dirty,
                    "max_map_entries": self.max_map_entries,
                    "aborted": [tuple(t) for t in txn.tracker.pending],
                    "producer_epochs": txn.producer_epochs,
                    "now_ms": txn.now_ms,
                    "marker_retention_ms": txn.marker_retention_ms,
                    "rate": self.throttler.rate,
                    "check_interval_s": self.throttler.check_interval_s,
                },
                [fd for fd, _nb in spans],
                self.stop,
            )
        finally:
            for _, fd in segments:
                os.close(fd)
        stats.add_counters(reply["stats"])
        return int(reply["end_offset"])

    # ---------------------------------------------------------------- step 2-4: recopy and swap

    def clean(self, ltc: LogToClean) -> tuple[int, CleanerStats]:
        """Clean ``ltc.log``; returns the new first dirty offset and statistics. Raises
        CleanerAborted if stopped; OSError propagates (the caller logs it), and so does
        CleanerWorkerError (the worker process failed or died)."""
        stats = CleanerStats()
        t0 = time.perf_counter()
        worker = self.worker
        offset_map: dict[bytes, int] = {}
        plog = ltc.log
        # the transactions' state as the walk from the log start needs it (Kafka collects the
        # aborted transactions of the range it cleans from the .txnindex files)
        aborted = plog.collect_aborted(-1, _MAX_OFFSET)
        with plog.lock:
            producers = plog.producer_state.producers
            last_of_producer = {pid: e.last_data_offset for pid, e in producers.items()}
            producer_epochs = {pid: e.producer_epoch for pid, e in producers.items()}
        txn = TxnCleaning(
            TxnTracker(aborted), producer_epochs, self.clock.time_ms(), plog.config.delete_retention_ms
        )
        if worker is not None:
            end_offset = self._build_offset_map_in_worker(worker, ltc, stats, txn)
        else:
            offset_map, end_offset = self.build_offset_map(ltc, stats, aborted)
        stats.map_elapsed_s = time.perf_counter() - t0
        try:
            if end_offset <= ltc.first_dirty:
                stats.elapsed_s = time.perf_counter() - t0
                return ltc.first_dirty, stats
            cfg = plog.config
            delete_horizon = txn.now_ms - cfg.delete_retention_ms
            segments = plog.cleanable_segments(end_offset)
            try:
                for group in self._group(segments, cfg.segment_bytes):
                    self._clean_group(
                        plog, group, offset_map, ltc.first_dirty, delete_horizon, last_of_producer, stats,
                        txn,
                    )
            finally:
                for _, fd in segments:
                    os.close(fd)
        finally:
            if worker is not None and worker.alive:
                with contextlib.suppress(CleanerWorkerError, OSError):
                    worker.request({"op": "reset"}, [], None)  # free the worker's offset map
        stats.elapsed_s = time.perf_counter() - t0
        return end_offset, stats

    @staticmethod
    def _group(segments: list[tuple[LogSegment, int]], max_bytes: int) -> list[list[tuple[LogSegment, int]]]:
        """Consecutive non-empty segments whose total size fits ``segment.bytes`` and whose
        offsets fit one segment (Kafka's groupSegmentsBySize)."""
        groups: list[list[tuple[LogSegment, int]]] = []
        current: list[tuple[LogSegment, int]] = []
        size = 0
        for i, (seg, fd) in enumerate(segments):
            seg_size = os.fstat(fd).st_size
            if seg_size == 0:
                continue
            next_base = segments[i + 1][0].base_offset if i + 1 < len(segments) else None
            fits_offsets = current and (
                next_base is None or next_base - 1 - current[0][0].base_offset <= _MAX_RELATIVE_OFFSET
            )
            if current and (size + seg_size > max_bytes or not fits_offsets):
                groups.append(current)
                current, size = [], 0
            current.append((seg, fd))
            size += seg_size
        if current:
            groups.append(current)
        return groups

    def _write_group_in_worker(
        self,
        worker: CleanerWorker,
        plog: PartitionLog,
        group: list[tuple[LogSegment, int]],
        first_dirty: int,
        delete_horizon: int,
        last_of_producer: dict[int, int],
        stats: CleanerStats,
        txn: TxnCleaning,
    ) -> LogSegment | None:
        cfg = plog.config
        base = group[0][0].base_offset
        try:
            reply = worker.request(
                {
                    "op": "group",
                    "directory": str(plog.directory),
                    "base_offset": base,
                    "index_interval_bytes": cfg.index_interval_bytes,
                    "max_index_size": cfg.segment_index_bytes,
                    "first_dirty": first_dirty,
                    "delete_horizon": delete_horizon,
                    "last_of_producer": last_of_producer,
                    "rate": self.throttler.rate,
                    "check_interval_s": self.throttler.check_interval_s,
                    "pace_writeback": self.pace_writeback,
                },
                [fd for _, fd in group],
                self.stop,
            )
        except (CleanerAborted, CleanerWorkerError):
            remove_cleaned_files(plog.directory, base)  # the worker may have died mid-write
            raise
        stats.add_counters(reply["stats"])
        txn.removed_markers = [(int(p), int(o)) for p, o in reply.get("removed_markers", ())]
        if not reply["written"]:
            return None
        cleaned = LogSegment.open(
            plog.directory,
            base,
            index_interval_bytes=cfg.index_interval_bytes,
            max_index_size=cfg.segment_index_bytes,
            clock=self.clock,
            file_suffix=CLEANED_SUFFIX,
        )
        try:
            cleaned.sanity_check()  # the worker wrote and fsynced the indexes; load timestamps
        except CorruptIndexError:
            cleaned.recover()
        return cleaned

    def _clean_group(
        self,
        plog: PartitionLog,
        group: list[tuple[LogSegment, int]],
        offset_map: dict[bytes, int],
        first_dirty: int,
        delete_horizon: int,
        last_of_producer: dict[int, int],
        stats: CleanerStats,
        txn: TxnCleaning | None = None,
    ) -> None:
        cfg = plog.config
        if txn is None:
            txn = TxnCleaning(TxnTracker([]), {}, self.clock.time_ms(), cfg.delete_retention_ms)
        txn.removed_markers = []
        if self.worker is not None:
            cleaned = self._write_group_in_worker(
                self.worker, plog, group, first_dirty, delete_horizon, last_of_producer, stats, txn
            )
        else:
            cleaned = write_cleaned_segment(
                plog.directory,
                group[0][0].base_offset,
                [fd for _, fd in group],
                index_interval_bytes=cfg.index_interval_bytes,
                max_index_size=cfg.segment_index_bytes,
                clock=self.clock,
                offset_map=offset_map,
                first_dirty=first_dirty,
                delete_horizon=delete_horizon,
                last_of_producer=last_of_producer,
                tick=self._tick,
                stats=stats,
                pace_writeback=self.pace_writeback,
                txn=txn,
            )
        if cleaned is None:
            return
        try:
            crash_point("cleaner.before_swap_lock")
            swapped = plog.replace_segments(
                cleaned, [s for s, _ in group], removed_markers=set(txn.removed_markers)
            )
            if swapped:
                stats.segments_swapped += len(group)
            else:
                stats.aborted_groups += 1
                log.info("cleaning of %r aborted: the log changed", plog)
        except Exception:
            cleaned.delete()
            raise
        if not swapped:
            cleaned.delete()


# --------------------------------------------------------------------------- the worker process


class CleanerWorkerError(Exception):
    """The cleaner's worker process failed a request or died."""


_FRAME = struct.Struct(">I")
_MAX_FDS_PER_MSG = 200  # the kernel's limit is 253 (SCM_MAX_FD)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    parts: list[bytes] = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise EOFError("cleaner worker connection closed")
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _send_msg(sock: socket.socket, obj: dict[str, Any], fds: list[int]) -> None:
    data = pickle.dumps({**obj, "nfds": len(fds)}, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_FRAME.pack(len(data)) + data)
    for i in range(0, len(fds), _MAX_FDS_PER_MSG):
        socket.send_fds(sock, [b"F"], fds[i : i + _MAX_FDS_PER_MSG])


def _recv_msg(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    (n,) = _FRAME.unpack(_recv_exact(sock, _FRAME.size))
    obj: dict[str, Any] = pickle.loads(_recv_exact(sock, n))
    fds: list[int] = []
    while len(fds) < obj["nfds"]:
        msg, got, _flags, _addr = socket.recv_fds(sock, 1, _MAX_FDS_PER_MSG)
        if not msg:
            for fd in fds + got:
                os.close(fd)
            raise EOFError("cleaner worker connection closed")
        fds += got
    return obj, fds


class CleanerWorker:
    """A child process (``python -c 'from strom.log.cleaner import worker_main; ...'``) that
    builds offset maps and writes cleaned segments for the cleaner thread, so the CPU-bound
    record work never holds the broker's GIL (with a thread, every event-loop wake-up waits up
    to a switch interval for it; that is what stalled produce latency during cleaning).

    Lock discipline is unchanged: the cleaner thread takes each log's lock exactly as before
    (``cleanable_segments`` dups the descriptors, ``replace_segments`` swaps); the worker only
    receives those descriptors (SCM_RIGHTS) and creates ``*.cleaned`` files, which recovery
    deletes if a crash leaves them. It never touches a log's structures or its other files. It
    dies with the broker (PR_SET_PDEATHSIG, EOF on its socket, parent-pid check per batch).
    ``nice`` lowers its CPU priority so produce/fetch win the CPU on a busy machine."""

    def __init__(self, *, nice: int = 0) -> None:
        self.nice = nice
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _start(self) -> socket.socket:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import sys; from strom.log.cleaner import worker_main; "
                    "worker_main(int(sys.argv[1]), int(sys.argv[2]))",
                    str(child.fileno()),
                    str(self.nice),
                ],
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self._sock = parent
        return parent

    def ensure_started(self) -> None:
        """Start the process now (else the first request does), so that its start-up (an
        interpreter and imports) is not part of a cleaning."""
        if not self.alive:
            self.close()
            self._start()

    def request(self, obj: dict[str, Any], fds: list[int], stop: threading.Event | None) -> dict[str, Any]:
        """Send one request (with descriptors) and wait for its reply, without holding the GIL.
        Raises CleanerAborted (worker killed) if ``stop`` is set meanwhile, CleanerWorkerError if
        the request failed or the worker died."""
        sock = self._sock if self.alive else None
        if sock is None:
            self.close()
            if obj["op"] != "map":  # a new process would not have the offset map
                raise CleanerWorkerError("cleaner worker died")
            sock = self._start()
        try:
            _send_msg(sock, obj, fds)
            # poll, not select: a broker with many segments open has descriptors >= FD_SETSIZE
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            while True:
                if poller.poll(200):
                    break
                if stop is not None and stop.is_set():
                    self.close()
                    raise CleanerAborted("cleaner stopping")
                if not self.alive:
                    raise EOFError("cleaner worker exited")
            reply, _ = _recv_msg(sock)
        except (OSError, EOFError, pickle.UnpicklingError) as e:
            self.close()
            raise CleanerWorkerError(f"cleaner worker died: {e}") from e
        if "error" in reply:
            raise CleanerWorkerError(f"cleaner worker failed: {reply['error']}")
        return reply

    def close(self) -> None:
        """Stop the worker (it exits on EOF; killed if it is busy)."""
        proc, sock = self._proc, self._sock
        self._proc = self._sock = None
        if sock is not None:
            sock.close()
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def worker_main(fd: int, nice: int = 0) -> None:
    """The worker process's loop: one request at a time (see :class:`CleanerWorker`)."""
    _die_with_parent()
    parent = os.getppid()
    if nice:
        with contextlib.suppress(OSError):
            os.nice(nice)
    sock = socket.socket(fileno=fd)
    throttler = Throttler()
    offset_map: dict[bytes, int] = {}
    txn: TxnCleaning | None = None
    clock = RealClock()

    def tick(nbytes: int) -> None:
        throttler.maybe_throttle(nbytes)
        if os.getppid() != parent:
            os._exit(1)

    while True:
        try:
            req, fds = _recv_msg(sock)
        except (EOFError, OSError):
            return
        stats = CleanerStats()
        reply: dict[str, Any] = {}
        try:
            throttler.rate = float(req.get("rate", NO_THROTTLE))
            throttler.check_interval_s = float(req.get("check_interval_s", 0.3))
            op = req["op"]
            if op == "map":
                offset_map = {}
                aborted = [tuple(t) for t in req.get("aborted", ())]
                txn = TxnCleaning(
                    TxnTracker(aborted),
                    dict(req.get("producer_epochs", {})),
                    int(req.get("now_ms", 0)),
                    int(req.get("marker_retention_ms", 0)),
                )
                offset_map, end = map_segments(
                    list(zip(fds, req["next_bases"], strict=True)),
                    req["first_dirty"],
                    req["max_map_entries"],
                    tick,
                    stats,
                    AbortedIndex(aborted),
                )
                reply["end_offset"] = end
            elif op == "group":
                cleaned = write_cleaned_segment(
                    Path(req["directory"]),
                    req["base_offset"],
                    fds,
                    index_interval_bytes=req["index_interval_bytes"],
                    max_index_size=req["max_index_size"],
                    clock=clock,
                    offset_map=offset_map,
                    first_dirty=req["first_dirty"],
                    delete_horizon=req["delete_horizon"],
                    last_of_producer=req["last_of_producer"],
                    tick=tick,
                    stats=stats,
                    pace_writeback=bool(req.get("pace_writeback", True)),
                    txn=txn,
                )
                if txn is not None:
                    reply["removed_markers"] = txn.removed_markers
                    txn.removed_markers = []
                reply["written"] = cleaned is not None
                if cleaned is not None:
                    cleaned.close_handles()
            elif op == "reset":
                offset_map = {}
                txn = None
            else:
                raise ValueError(f"unknown request {op!r}")
            reply["stats"] = stats.counters()
        except Exception as e:
            reply = {"error": f"{type(e).__name__}: {e}"}
        finally:
            for d in fds:
                os.close(d)
        try:
            _send_msg(sock, reply, [])
        except OSError:
            return


# --------------------------------------------------------------------------- the manager


class LogCleaner:
    """Chooses the filthiest compacted log of a log dir, cleans it, checkpoints the result
    (Kafka's LogCleanerManager + CleanerThread.cleanOrSleep, minus the thread: call
    :meth:`clean_once` from a worker thread)."""

    def __init__(
        self,
        log_dir: Path,
        clock: Clock,
        *,
        max_map_entries: int = 4_000_000,
        pause_every_bytes: int = 256 * 1024,
        io_max_bytes_per_second: float = NO_THROTTLE,
        use_process: bool = False,
        worker_nice: int = 0,
        pace_writeback: bool = True,
    ) -> None:
        self.clock = clock
        self.checkpoint = CleanerCheckpoint(log_dir)
        self.stop = threading.Event()
        self.worker = CleanerWorker(nice=worker_nice) if use_process else None
        self.cleaner = Cleaner(
            clock,
            max_map_entries=max_map_entries,
            stop=self.stop,
            pause_every_bytes=0 if use_process else pause_every_bytes,
            throttler=Throttler(io_max_bytes_per_second, sleep=self.stop.wait),
            worker=self.worker,
            pace_writeback=pace_writeback,
        )
        self.last_stats: CleanerStats | None = None

    def set_io_max_bytes_per_second(self, rate: float) -> None:
        """``log.cleaner.io.max.bytes.per.second`` changed (dynamic broker config)."""
        self.cleaner.throttler.rate = rate

    def start_worker(self) -> None:
        """Start the worker process, if cleaning runs in one (else the first clean starts it)."""
        if self.worker is not None:
            self.worker.ensure_started()

    def close(self) -> None:
        """Stop the worker process, if any (the next clean starts a new one)."""
        if self.worker is not None:
            self.worker.close()

    def grab_filthiest(self, logs: list[PartitionLog]) -> LogToClean | None:
        now = self.clock.time_ms()
        best: LogToClean | None = None
        for plog in logs:
            if plog.closed or not is_compacted(plog):
                continue
            ltc = cleanable_range(plog, self.checkpoint.get((plog.topic, plog.partition)), now)
            if ltc is None:
                continue
            if not ltc.needs_compaction_now and ltc.dirty_ratio < plog.config.min_cleanable_dirty_ratio:
                continue
            if best is None or (ltc.needs_compaction_now, ltc.dirty_ratio) > (
                best.needs_compaction_now,
                best.dirty_ratio,
            ):
                best = ltc
        return best

    def clean_once(self, logs: list[PartitionLog]) -> CleanerStats | None:
        """Clean the filthiest log, if any is cleanable. Returns its statistics."""
        ltc = self.grab_filthiest(logs)
        if ltc is None:
            return None
        log.info(
            "cleaning %s-%d: dirty [%d, %d), dirty ratio %.2f",
            ltc.log.topic,
            ltc.log.partition,
            ltc.first_dirty,
            ltc.first_uncleanable,
            ltc.dirty_ratio,
        )
        end, stats = self.cleaner.clean(ltc)
        if end > ltc.first_dirty and not ltc.log.closed:
            self.checkpoint.update(ltc.tp, end)
        self.last_stats = stats
        log.info(
            "cleaned %s-%d (dirty [%d, %d)): %.1f MB read in %.2fs (%.1f MB/s), %d -> %d records, "
            "%d segments swapped",
            ltc.log.topic,
            ltc.log.partition,
            ltc.first_dirty,
            end,
            stats.bytes_read / 1e6,
            stats.elapsed_s,
            stats.mb_per_s,
            stats.records_read,
            stats.records_written,
            stats.segments_swapped,
        )
        return stats

    def clean_all(self, logs: list[PartitionLog], max_rounds: int = 100) -> int:
        """Clean until nothing is cleanable (tests, tools). Returns the number of rounds."""
        rounds = 0
        while rounds < max_rounds and self.clean_once(logs) is not None:
            rounds += 1
        return rounds

    def forget(self, tp: TopicPartition) -> None:
        """Drop a deleted log's checkpoint entry."""
        self.checkpoint.update(tp, None)
