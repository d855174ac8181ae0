"""Produce responses (v3..12) encoded by hand: one answer per produce request.

Through kio, a Produce answer is a dict turned into kio's entities (one per partition, with
datetime and timedelta fields), then walked field by field by kio's writer: ~33 µs for the
one-partition answer a producer gets for each request, a few per cent of a broker's loop under
small-record produce. Here the answer is written with ``struct`` straight from the append's
results, byte for byte what kio writes (Kafka's generated ``write``):

* v3..12: ``index``, ``error_code``, ``base_offset``, ``log_append_time_ms``; v5+
  ``log_start_offset``; v8+ ``record_errors`` and ``error_message``; ``throttle_time_ms`` last;
* v9+ flexible: compact lengths and tagged-field sections;
* v10+ (KIP-951): a partition's ``current_leader`` (tag 0) where known, and the answer's
  ``node_endpoints`` (tag 0) where any leader is named; like Kafka, a tagged field is written
  only when it differs from its default.

``tests/property/test_produce_response_codec.py`` compares it with kio.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Protocol

from .framing import write_compact_string, write_uvarint

__all__ = [
    "FIRST_VERSION", "LAST_VERSION", "NodeEndpoint", "PartitionEntry", "PartitionResult",
    "encode_produce_response",
]

FIRST_VERSION = 3
LAST_VERSION = 12
FLEXIBLE_FROM = 9

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_V3 = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... log_start_offset
_LEADER = struct.Struct(">ii")


class PartitionResult(Protocol):
    """One partition's outcome (the replica manager's ``PartitionResponse`` is one)."""

    @property
    def error_code(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def log_append_time(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def error_message(self) -> str | None: ...
    @property
    def record_errors(self) -> Sequence[tuple[int, str | None]]: ...


# a partition: (index, result, current leader as (leader id, leader epoch) or None)
PartitionEntry = tuple[int, PartitionResult, "tuple[int, int] | None"]
# a node endpoint: (node id, host, port, rack)
NodeEndpoint = tuple[int, str, int, "str | None"]


def _array_length(out: bytearray, n: int, flexible: bool) -> None:
    if flexible:
        write_uvarint(out, n + 1)
    else:
        out += _I32.pack(n)


def _string(out: bytearray, s: str | None, flexible: bool) -> None:
    """A nullable string: compact in flexible versions, else an int16 length (-1: null)."""
    if flexible:
        write_compact_string(out, s)
    elif s is None:
        out += _I16.pack(-1)
    else:
        raw = s.encode()
        out += _I16.pack(len(raw))
        out += raw


def encode_produce_response(
    version: int,
    topics: Sequence[tuple[str, Sequence[PartitionEntry]]],
    throttle_ms: int = 0,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> bytes:
    """The body (after the response header) of a Produce answer of ``version`` (3..12).
    ``current_leader`` and ``node_endpoints`` are written from v10 only, as Kafka's schema
    has them."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise ValueError(
            f"Produce answers are encoded here for v{FIRST_VERSION}..{LAST_VERSION}, not v{version}"
        )
    flexible = version >= FLEXIBLE_FROM
    kip951 = version >= 10
    v5 = version >= 5
    v8 = version >= 8
    out = bytearray()
    _array_length(out, len(topics), flexible)
    for name, partitions in topics:
        _string(out, name, flexible)
        _array_length(out, len(partitions), flexible)
        for index, r, leader in partitions:
            if v5:
                out += _PARTITION_V5.pack(index, r.error_code, r.base_offset, r.log_append_time,
                                          r.log_start_offset)
            else:
                out += _PARTITION_V3.pack(index, r.error_code, r.base_offset, r.log_append_time)
            if v8:
                errors = r.record_errors
                _array_length(out, len(errors), flexible)
                for batch_index, message in errors:
                    out += _I32.pack(batch_index)
                    _string(out, message, flexible)
                    if flexible:
                        out.append(0)
                _string(out, r.error_message, flexible)
            if flexible:
                if kip951 and leader is not None and leader != (-1, -1):
                    # one tagged field: tag 0, its size (two int32 and an empty tag section)
                    out += b"\x01\x00\x09"
                    out += _LEADER.pack(*leader)
                    out.append(0)
                else:
                    out.append(0)
        if flexible:
            out.append(0)
    out += _I32.pack(throttle_ms)
    if flexible:
        if kip951 and node_endpoints:
            tagged = bytearray()
            write_uvarint(tagged, len(node_endpoints) + 1)
            for node_id, host, port, rack in node_endpoints:
                tagged += _I32.pack(node_id)
                write_compact_string(tagged, host)
                tagged += _I32.pack(port)
                write_compact_string(tagged, rack)
                tagged.append(0)
            out += b"\x01\x00"
            write_uvarint(out, len(tagged))
            out += tagged
        else:
            out.append(0)
    return bytes(out)
