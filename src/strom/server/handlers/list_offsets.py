"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3), earliest local (-4),
latest tiered (-5), or the first offset whose timestamp is >= a given time; answered by the
replica manager (:meth:`~strom.server.replica_manager.ReplicaManager.fetch_offset`).

A consumer group's members, or a tool, may ask for thousands of partitions at once; the answer's
partitions are struct-packed (:func:`encode_list_offsets`) instead of built as dicts and kio
entities (10,000 partitions: ~100 ms of the event loop that way), and kio encodes the rest,
byte for byte what it encodes for the whole answer (``tests/unit/test_list_offsets_encoding.py``).
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Any

from ...protocol import codec
from ...protocol.errors import ErrorCode
from ..authz import AclOperation, ResourceType, authorized
from ..context import RawResponse, RequestContext
from . import handler

# one partition's answer: (partition, error, timestamp, offset, leader epoch)
OffsetRow = tuple[int, int, int, int, int]


@cache
def _row(version: int) -> tuple[struct.Struct, bytes]:
    """The packing of a partition's fields in ``version`` (leader_epoch from v4) and what
    follows them (the empty tagged fields of flexible versions, v6+)."""
    return struct.Struct(">ihqqi" if version >= 4 else ">ihqq"), b"\0" if version >= 6 else b""


def _topic_type(version: int) -> type:
    """kio's entity of one topic of the answer of ``version``."""
    return codec.array_entry_type(codec.response_type(2, version), "topics")


def encode_list_offsets(version: int, topics: list[tuple[str, list[OffsetRow]]]) -> RawResponse:
    """The answer of ``version`` to ListOffsets, with a throttle time of 0."""
    resp_type = codec.response_type(2, version)
    flexible = bool(getattr(resp_type, "__flexible__", False))
    row, tail = _row(version)
    fields = 5 if version >= 4 else 4
    before, after = codec.encode_around(resp_type, {"throttle_time": 0}, "topics")
    parts: list[bytes | bytearray | memoryview | tuple[int, int, int]] = [
        before, codec.array_length(flexible, len(topics))]
    for name, rows in topics:
        head, end = codec.encode_around(_topic_type(version), {"name": name}, "partitions")
        body = bytearray(head)
        body += codec.array_length(flexible, len(rows))
        pack = row.pack
        for r in rows:
            body += pack(*r[:fields])
            body += tail
        body += end
        parts.append(bytes(body))
    parts.append(after)
    size = sum(len(p) for p in parts)  # type: ignore[arg-type]
    return RawResponse(parts, size, throttle_leads=version >= 2)


@handler(2)
async def handle_list_offsets(ctx: RequestContext, request: Any) -> RawResponse:
    rm = ctx.broker.replica_manager
    isolation = getattr(request, "isolation_level", 0)
    fetch_offset = rm.fetch_offset
    topics: list[tuple[str, list[OffsetRow]]] = []
    for t in request.topics:
        name = str(t.name)
        rows: list[OffsetRow] = []
        # Kafka: DESCRIBE on the topic, else TOPIC_AUTHORIZATION_FAILED for its partitions
        if not authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            denied = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            rows = [(p.partition_index, denied, -1, -1, -1) for p in t.partitions]
            topics.append((name, rows))
            continue
        for p in t.partitions:
            idx = p.partition_index
            r = fetch_offset(name, idx, p.timestamp, isolation,
                             current_leader_epoch=int(getattr(p, "current_leader_epoch", -1)))
            if r.error_code != ErrorCode.NONE:
                rows.append((idx, int(r.error_code), -1, -1, -1))
            else:
                rows.append((idx, 0, r.timestamp, r.offset, r.leader_epoch))
        topics.append((name, rows))
    return encode_list_offsets(ctx.api_version, topics)
