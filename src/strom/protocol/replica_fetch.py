"""A follower's Fetch (v12..17), encoded and decoded by hand: the hot path of replication.

A follower sends one Fetch per round trip and reads back up to ``replica.fetch.response.max.bytes``
of records. Built through kio, the request cost about 110 µs (dict -> entity -> bytes) and the
decode of a 1 MiB answer about 100 µs, most of it copying the records into a new ``bytes``; a
follower's share of a replicated produce was 0.2 CPU-s per GB on these two alone. Here:

* :func:`encode_replica_fetch` writes the whole request frame (size prefix, request header v2,
  body) with ``struct`` from plain values;
* :func:`decode_replica_fetch_response` reads the answer (response header v1 included) and gives
  each partition's records as a ``memoryview`` slice of the frame: no copy. The fields a follower
  does not use (aborted transactions, preferred read replica, snapshot id, node endpoints) are
  checked for bounds and skipped.

Both are sans-IO and bounded: every length and count is checked against the bytes left before it
is trusted (:class:`~strom.protocol.errors.ProtocolError` otherwise). kio stays the reference:
``tests/property/test_replica_fetch_codec.py`` compares both directions with it.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from .errors import ProtocolError
from .framing import read_uvarint, skip_tagged_fields, write_compact_string, write_uvarint

__all__ = [
    "FIRST_VERSION",
    "LAST_VERSION",
    "ReplicaFetchPartition",
    "ReplicaFetchPartitionAnswer",
    "ReplicaFetchResponse",
    "ReplicaFetchTopic",
    "ReplicaFetchTopicAnswer",
    "decode_replica_fetch_response",
    "encode_replica_fetch",
]

FETCH = 1
FIRST_VERSION = 12  # the first flexible version, with last_fetched_epoch and diverging_epoch
LAST_VERSION = 17

_HEADER = struct.Struct(">ihhi")  # size, api key, version, correlation id (then client id)
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_TOP = struct.Struct(">iiib")  # max wait, min bytes, max bytes, isolation level
_SESSION = struct.Struct(">ii")  # session id, session epoch
_PART = struct.Struct(">iiqiqi")  # partition, current leader epoch, fetch offset, last fetched
#                                  epoch, log start offset, partition max bytes
_REPLICA_STATE = struct.Struct(">iq")  # replica id, replica epoch
_RESP_TOP = struct.Struct(">ihi")  # throttle time, error code, session id
_RESP_PART = struct.Struct(">ihqqq")  # partition, error, high watermark, last stable, log start
_EPOCH_END = struct.Struct(">iq")  # diverging epoch: epoch, end offset
_LEADER = struct.Struct(">ii")  # current leader: id, epoch


@dataclass(frozen=True, slots=True)
class ReplicaFetchPartition:
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


@dataclass(frozen=True, slots=True)
class ReplicaFetchTopic:
    topic_id: uuid.UUID  # sent from v13
    name: str  # sent up to v12
    partitions: list[ReplicaFetchPartition]


def encode_replica_fetch(
    version: int,
    correlation_id: int,
    client_id: str,
    topics: list[ReplicaFetchTopic],
    *,
    replica_id: int,
    replica_epoch: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
) -> bytes:
    """A follower's whole Fetch request frame (size prefix included) for ``version`` 12..17:
    no fetch session (id 0, epoch -1), READ_UNCOMMITTED, nothing forgotten, no rack; the
    replica's id as the ``replica_id`` field (v12-14) or the ``replica_state`` tagged field
    (v15+, with its broker epoch)."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise ValueError(
            f"a follower's Fetch is encoded here for v{FIRST_VERSION}..{LAST_VERSION}, not v{version}"
        )
    cid = client_id.encode()
    out = bytearray(_HEADER.pack(0, FETCH, version, correlation_id))
    out += _I16.pack(len(cid)) + cid  # request header v2: client id is a nullable (non-compact) string
    out.append(0)  # header tagged fields
    if version < 15:
        out += _I32.pack(replica_id)
    out += _TOP.pack(max_wait_ms, min_bytes, max_bytes, 0)
    out += _SESSION.pack(0, -1)
    write_uvarint(out, len(topics) + 1)
    for t in topics:
        if version >= 13:
            out += t.topic_id.bytes
        else:
            write_compact_string(out, t.name)
        write_uvarint(out, len(t.partitions) + 1)
        for p in t.partitions:
            out += _PART.pack(
                p.partition,
                p.current_leader_epoch,
                p.fetch_offset,
                p.last_fetched_epoch,
                p.log_start_offset,
                p.partition_max_bytes,
            )
            out.append(0)  # partition tagged fields (no replica directory id)
        out.append(0)  # topic tagged fields
    out.append(1)  # forgotten topics: empty compact array
    out.append(1)  # rack id: empty compact string
    if version >= 15:
        out += b"\x01\x01" + bytes([_REPLICA_STATE.size + 1])  # one tagged field: tag 1, its size
        out += _REPLICA_STATE.pack(replica_id, replica_epoch)
        out.append(0)  # ReplicaState's own tagged fields
    else:
        out.append(0)
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


@dataclass(frozen=True, slots=True)
class ReplicaFetchPartitionAnswer:
    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    diverging_epoch: tuple[int, int] | None  # (epoch, end offset); None when absent or (-1, -1)
    current_leader: tuple[int, int] | None  # (leader id, leader epoch); None when absent
    records: memoryview | None  # a slice of the response frame


@dataclass(frozen=True, slots=True)
class ReplicaFetchTopicAnswer:
    topic_id: uuid.UUID | None  # from v13
    name: str | None  # up to v12
    partitions: list[ReplicaFetchPartitionAnswer]


@dataclass(frozen=True, slots=True)
class ReplicaFetchResponse:
    correlation_id: int
    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: list[ReplicaFetchTopicAnswer]


def _need(buf: memoryview, pos: int, n: int, what: str) -> None:
    if n < 0 or pos + n > len(buf):
        raise ProtocolError(f"Fetch response: {what} ({n} bytes at {pos}) exceeds the {len(buf)}-byte frame")


def _count(buf: memoryview, pos: int, min_size: int, what: str) -> tuple[int, int]:
    """A compact array's length (-1 for null), checked against the bytes left (each entry takes
    at least ``min_size`` bytes)."""
    n, pos = read_uvarint(buf, pos)
    n -= 1
    if n > 0 and n * min_size > len(buf) - pos:
        raise ProtocolError(f"Fetch response: {n} {what} declared in {len(buf) - pos} bytes")
    return n, pos


def decode_replica_fetch_response(
    frame: bytes | bytearray | memoryview, version: int
) -> ReplicaFetchResponse:
    """A Fetch response v12..17 (its frame without the size prefix: response header v1, body)."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise ValueError(
            f"a follower's Fetch is decoded here for v{FIRST_VERSION}..{LAST_VERSION}, not v{version}"
        )
    buf = memoryview(frame)
    _need(buf, 0, 4, "correlation id")
    (cid,) = _I32.unpack_from(buf, 0)
    pos = skip_tagged_fields(buf, 4)
    _need(buf, pos, _RESP_TOP.size, "header")
    throttle, error, session = _RESP_TOP.unpack_from(buf, pos)
    pos += _RESP_TOP.size
    ntopics, pos = _count(buf, pos, 2, "topics")
    topics: list[ReplicaFetchTopicAnswer] = []
    for _ in range(max(ntopics, 0)):
        topic_id: uuid.UUID | None = None
        name: str | None = None
        if version >= 13:
            _need(buf, pos, 16, "topic id")
            topic_id = uuid.UUID(bytes=bytes(buf[pos : pos + 16]))
            pos += 16
        else:
            n, pos = read_uvarint(buf, pos)
            _need(buf, pos, n - 1, "topic name")
            try:
                name = bytes(buf[pos : pos + n - 1]).decode()
            except UnicodeDecodeError:
                raise ProtocolError("Fetch response: a topic name is not UTF-8") from None
            pos += max(n - 1, 0)
        nparts, pos = _count(buf, pos, _RESP_PART.size + 4, "partitions")
        parts: list[ReplicaFetchPartitionAnswer] = []
        for _ in range(max(nparts, 0)):
            _need(buf, pos, _RESP_PART.size, "partition")
            index, perr, hw, lso, lstart = _RESP_PART.unpack_from(buf, pos)
            pos += _RESP_PART.size
            naborted, pos = _count(buf, pos, 17, "aborted transactions")
            for _ in range(max(naborted, 0)):
                _need(buf, pos, 16, "aborted transaction")
                pos = skip_tagged_fields(buf, pos + 16)
            _need(buf, pos, 4, "preferred read replica")
            pos += 4
            size, pos = read_uvarint(buf, pos)
            records: memoryview | None = None
            if size > 0:
                _need(buf, pos, size - 1, "records")
                records = buf[pos : pos + size - 1]
                pos += size - 1
            diverging: tuple[int, int] | None = None
            leader: tuple[int, int] | None = None
            ntags, pos = read_uvarint(buf, pos)
            if ntags * 2 > len(buf) - pos:
                raise ProtocolError(
                    f"Fetch response: {ntags} tagged fields declared in {len(buf) - pos} bytes"
                )
            for _ in range(ntags):
                tag, pos = read_uvarint(buf, pos)
                tsize, pos = read_uvarint(buf, pos)
                _need(buf, pos, tsize, "tagged field")
                if tag == 0 and tsize >= _EPOCH_END.size:
                    epoch, end = _EPOCH_END.unpack_from(buf, pos)
                    if epoch >= 0 or end >= 0:
                        diverging = (epoch, end)
                elif tag == 1 and tsize >= _LEADER.size:
                    leader = _LEADER.unpack_from(buf, pos)
                pos += tsize
            parts.append(
                ReplicaFetchPartitionAnswer(index, perr, hw, lso, lstart, diverging, leader, records)
            )
        pos = skip_tagged_fields(buf, pos)
        topics.append(ReplicaFetchTopicAnswer(topic_id, name, parts))
    pos = skip_tagged_fields(buf, pos)  # node endpoints (v16+) are not needed by a follower
    if pos != len(buf):
        raise ProtocolError(f"Fetch response: {len(buf) - pos} bytes left after the last field")
    return ReplicaFetchResponse(cid, throttle, error, session, topics)
