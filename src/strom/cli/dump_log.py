"""``strom dump-log``: print log segments and their indexes (like kafka-dump-log.sh).

Offline and read-only: files are memory-mapped, never opened for writing, so it is safe on a
running broker's data dir. For a ``.log``: every batch header (and with ``--deep-iteration`` or
``--print-data-log`` every record), CRC validity, and trailing bytes that do not form a batch.
For a ``.index`` / ``.timeindex``: every entry, checked against the segment's ``.log`` (an offset
index entry must name the last offset of the batch at its position; a time index entry the max
timestamp of the batch ending at its offset; both must increase), reported as mismatches.

Exit code: 0 when everything is valid, 1 when a file is missing, corrupt or mismatched.
"""

from __future__ import annotations

import argparse
import mmap
import struct
import sys
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from strom.protocol.records import (
    BATCH_OVERHEAD,
    CorruptRecordError,
    compute_crc,
    decode_batch_records,
    parse_header,
)

__all__ = ["DumpResult", "dump_file", "run"]

_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")


@dataclass
class DumpResult:
    ok: bool = True
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        self.ok = False
        self.problems.append(text)


@contextmanager
def _mapped(path: Path) -> Iterator[memoryview]:
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            yield memoryview(b"")
            return
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        mv = memoryview(mm)
        try:
            yield mv
        finally:
            mv.release()
            mm.close()


def _base_offset(path: Path) -> int:
    try:
        return int(path.name.split(".", 1)[0])
    except ValueError:
        return 0


def _text(data: bytes | None) -> str:
    if data is None:
        return "null"
    return data.decode("utf-8", "replace")


def _control_text(key: bytes | None, value: bytes | None) -> str:
    if key is None or len(key) < 4:
        return "controlType: UNKNOWN"
    ctype = struct.unpack_from(">h", key, 2)[0]
    name = {0: "ABORT", 1: "COMMIT"}.get(ctype)
    if name is not None and value is not None and len(value) >= 6:
        epoch = struct.unpack_from(">i", value, 2)[0]
        return f"endTxnMarker: {name} coordinatorEpoch: {epoch}"
    return f"controlType: {name or ctype}"


def _batches(data: memoryview) -> Iterator[tuple[int, int]]:
    """(position, size) of every complete batch; stops at the first bad framing."""
    pos = 0
    end = len(data)
    while end - pos >= BATCH_OVERHEAD:
        h = parse_header(data, pos)
        if h.magic != 2 or h.size < BATCH_OVERHEAD or pos + h.size > end:
            return
        yield pos, h.size
        pos += h.size


def dump_log(path: Path, out: TextIO, *, records: bool, payload: bool, max_bytes: int | None) -> DumpResult:
    result = DumpResult()
    print(f"Log starting offset: {_base_offset(path)}", file=out)
    with _mapped(path) as data:
        pos = 0
        end = len(data) if max_bytes is None else min(len(data), max_bytes)
        while end - pos >= BATCH_OVERHEAD:
            h = parse_header(data, pos)
            if h.magic != 2 or h.size < BATCH_OVERHEAD or pos + h.size > len(data):
                break
            valid = compute_crc(data, pos, h) == h.crc
            ts_name = "LogAppendTime" if h.timestamp_type else "CreateTime"
            print(
                f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
                f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
                f"producerId: {h.producer_id} "
                f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
                f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
                f"position: {pos} {ts_name}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
                f"compresscodec: {_CODECS.get(h.compression, str(h.compression))} crc: {h.crc} "
                f"isvalid: {str(valid).lower()}",
                file=out,
            )
            if not valid:
                result.problem(f"batch at position {pos} (offset {h.base_offset}) fails its CRC check")
            if records and valid:
                try:
                    for i, r in enumerate(decode_batch_records(data, pos, h)):
                        seq = h.base_sequence + i if h.base_sequence >= 0 else -1
                        line = (
                            f"| offset: {r.offset} {ts_name}: {r.timestamp} "
                            f"keySize: {-1 if r.key is None else len(r.key)} "
                            f"valueSize: {-1 if r.value is None else len(r.value)} sequence: {seq} "
                            f"headerKeys: [{','.join(k for k, _ in r.headers)}]"
                        )
                        if h.is_control:
                            line += " " + _control_text(r.key, r.value)
                        elif payload:
                            if r.key is not None:
                                line += f" key: {_text(r.key)}"
                            line += f" payload: {_text(r.value)}"
                        print(line, file=out)
                except CorruptRecordError as e:
                    result.problem(f"batch at position {pos}: {e}")
                    print(f"| corrupt records: {e}", file=out)
            pos += h.size
        if max_bytes is None and pos < len(data):
            result.problem(f"Found {len(data) - pos} invalid bytes at the end of {path.name}")
            print(f"Found {len(data) - pos} invalid bytes at the end of {path.name}", file=out)
    return result


def _log_headers(log_path: Path) -> dict[int, tuple[int, int, int]] | None:
    """position -> (base offset, last offset, max timestamp) of every batch in the .log, or None."""
    if not log_path.exists():
        return None
    out: dict[int, tuple[int, int, int]] = {}
    with _mapped(log_path) as data:
        for pos, _size in _batches(data):
            h = parse_header(data, pos)
            out[pos] = (h.base_offset, h.last_offset, h.max_timestamp)
    return out


def _open_index(
    path: Path, entry_size: int
) -> tuple[DumpResult, int, Path, dict[int, tuple[int, int, int]] | None, bytes]:
    """What both index dumps start from: (result, base offset, the .log beside the index, its
    batch headers or None, the index bytes), with a missing log or a partial entry noted."""
    result = DumpResult()
    log_path = path.with_suffix(".log")
    headers = _log_headers(log_path)
    if headers is None:
        result.problem(f"no log file {log_path.name} to check {path.name} against")
    raw = path.read_bytes()
    if len(raw) % entry_size:
        result.problem(
            f"{path.name} has a partial entry: size {len(raw)} is not a multiple of {entry_size}"
        )
    return result, _base_offset(path), log_path, headers, raw


def dump_offset_index(path: Path, out: TextIO, *, verify_only: bool) -> DumpResult:
    result, base, log_path, headers, raw = _open_index(path, _OFFSET_ENTRY.size)
    mismatches: list[str] = []
    prev_off = prev_pos = -1
    for i in range(len(raw) // _OFFSET_ENTRY.size):
        rel, position = _OFFSET_ENTRY.unpack_from(raw, i * _OFFSET_ENTRY.size)
        offset = base + rel
        if not verify_only:
            print(f"offset: {offset} position: {position}", file=out)
        if offset <= prev_off or position <= prev_pos:
            mismatches.append(f"  Index entry {i} (offset {offset}, position {position}) is not increasing")
        prev_off, prev_pos = offset, position
        if headers is not None:
            h = headers.get(position)
            if h is None:
                mismatches.append(
                    f"  Index position {position} is not the start of a batch in {log_path.name}"
                )
            elif h[1] != offset:
                mismatches.append(f"  Index offset: {offset}, log offset: {h[1]}")
    _report(result, mismatches, path, f"Mismatches in :{path}", out)
    return result


def _report(result: DumpResult, mismatches: list[str], path: Path, title: str, out: TextIO) -> None:
    if mismatches:
        result.problem(f"{len(mismatches)} mismatches in {path.name}")
        print(title, file=out)
        for m in mismatches:
            print(m, file=out)


def dump_time_index(path: Path, out: TextIO, *, verify_only: bool) -> DumpResult:
    result, base, log_path, headers, raw = _open_index(path, _TIME_ENTRY.size)
    spans = sorted((headers or {}).values())
    bases = [b for b, _, _ in spans]
    mismatches: list[str] = []
    prev_ts = prev_off = -1
    for i in range(len(raw) // _TIME_ENTRY.size):
        ts, rel = _TIME_ENTRY.unpack_from(raw, i * _TIME_ENTRY.size)
        offset = base + rel
        if not verify_only:
            print(f"timestamp: {ts} offset: {offset}", file=out)
        if ts <= prev_ts or offset < prev_off:
            mismatches.append(f"  Found out of order entry {i}: timestamp {ts} offset {offset}")
        prev_ts, prev_off = ts, offset
        if headers is not None:
            # the entry's offset lies in the batch that first reached the segment's max timestamp
            k = bisect_right(bases, offset) - 1
            log_ts = spans[k][2] if k >= 0 and spans[k][1] >= offset else None
            if log_ts is None:
                mismatches.append(f"  Index offset {offset} is in no batch of {log_path.name}")
            elif log_ts != ts:
                mismatches.append(f"  Index timestamp: {ts}, log timestamp: {log_ts}")
    _report(result, mismatches, path, f"Found timestamp mismatch in :{path}", out)
    return result


def dump_file(
    path: Path,
    out: TextIO,
    *,
    records: bool = False,
    payload: bool = False,
    verify_index_only: bool = False,
    max_bytes: int | None = None,
) -> DumpResult:
    print(f"Dumping {path}", file=out)
    if not path.exists():
        r = DumpResult()
        r.problem(f"{path} does not exist")
        print(f"{path} does not exist", file=out)
        return r
    suffix = path.suffix
    if suffix in (".log", ".deleted", ".cleaned", ".swap") or path.name.endswith(".log.deleted"):
        return dump_log(path, out, records=records or payload, payload=payload, max_bytes=max_bytes)
    if suffix == ".index":
        return dump_offset_index(path, out, verify_only=verify_index_only)
    if suffix == ".timeindex":
        return dump_time_index(path, out, verify_only=verify_index_only)
    r = DumpResult()
    r.problem(f"cannot dump {path.name}: expected a .log, .index or .timeindex file")
    print(f"Ignoring unknown file {path}", file=out)
    return r


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    sink = out or sys.stdout
    files: list[str] = list(args.segments)
    for item in args.files or []:
        files += [f for f in item.split(",") if f]
    if not files:
        from strom.cli.commands import CommandError

        raise CommandError("give at least one segment file (positional or --files)", 2)
    ok = True
    for name in files:
        res = dump_file(
            Path(name),
            sink,
            records=args.deep_iteration,
            payload=args.print_data_log,
            verify_index_only=args.verify_index_only,
            max_bytes=args.max_bytes,
        )
        if args.index_sanity_check and Path(name).suffix in (".index", ".timeindex"):
            print(f"{name} passed sanity check." if res.ok else f"{name} failed sanity check.", file=sink)
        for p in res.problems:
            print(f"strom dump-log: {p}", file=sys.stderr)
        ok = ok and res.ok
    return 0 if ok else 1
