"""Kafka's ``__share_group_state`` record formats (the share coordinator's, KIP-932).

Key: int16 record type (0 = ShareSnapshot, 1 = ShareUpdate) then, not flexible, GroupId (string),
TopicId (uuid), Partition (int32). Value: int16 version 0, flexible: SnapshotEpoch (uint16),
StateEpoch (int32, snapshots only), LeaderEpoch (int32), StartOffset (int64; -1 in an update
that leaves it), StateBatches (compact array of FirstOffset int64, LastOffset int64,
DeliveryState int8, DeliveryCount int16, each with tagged fields), tagged fields.

The partition of ``__share_group_state`` holding a share-partition's records is Kafka's
``SharePartitionKey.asCoordinatorKey()`` ("group:topicId:partition") hashed like a group id.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from ..protocol.errors import ProtocolError
from ..protocol.framing import read_uvarint, skip_tagged_fields, write_uvarint
from .records import RecordFormatError, partition_for

SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1

StateBatch = tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    kind: int
    group: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ShareStateValue:
    snapshot_epoch: int
    state_epoch: int  # -1 in updates (the field is not in ShareUpdateValue)
    leader_epoch: int
    start_offset: int
    batches: list[StateBatch] = field(default_factory=list)


def coordinator_key(group: str, topic_id: uuid.UUID, partition: int) -> str:
    """Kafka's ``SharePartitionKey.asCoordinatorKey``; the topic id in Kafka's base64 form."""
    import base64

    tid = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    return f"{group}:{tid}:{partition}"


def state_partition_for(group: str, topic_id: uuid.UUID, partition: int, num_partitions: int) -> int:
    return partition_for(coordinator_key(group, topic_id, partition), num_partitions)


def encode_key(k: ShareStateKey) -> bytes:
    g = k.group.encode()
    return struct.pack(">hh", k.kind, len(g)) + g + k.topic_id.bytes + struct.pack(">i", k.partition)


def decode_key(data: bytes) -> ShareStateKey:
    try:
        kind, n = struct.unpack_from(">hh", data, 0)
        if kind not in (SHARE_SNAPSHOT, SHARE_UPDATE) or n < 0:
            raise RecordFormatError(f"not a share state key (type {kind})")
        group = data[4 : 4 + n].decode()
        pos = 4 + n
        tid = uuid.UUID(bytes=bytes(data[pos : pos + 16]))
        (partition,) = struct.unpack_from(">i", data, pos + 16)
        if pos + 20 != len(data):
            raise RecordFormatError("trailing bytes in share state key")
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise RecordFormatError(f"bad share state key: {e}") from e
    return ShareStateKey(kind, group, tid, partition)


def encode_value(kind: int, v: ShareStateValue) -> bytes:
    out = bytearray(struct.pack(">hH", 0, v.snapshot_epoch & 0xFFFF))
    if kind == SHARE_SNAPSHOT:
        out += struct.pack(">i", v.state_epoch)
    out += struct.pack(">iq", v.leader_epoch, v.start_offset)
    write_uvarint(out, len(v.batches) + 1)
    for first, last, state, count in v.batches:
        out += struct.pack(">qqbh", first, last, state, count)
        out += b"\x00"
    out += b"\x00"
    return bytes(out)


def decode_value(kind: int, data: bytes) -> ShareStateValue:
    try:
        version, snapshot_epoch = struct.unpack_from(">hH", data, 0)
        if version != 0:
            raise RecordFormatError(f"unknown share state value version {version}")
        pos = 4
        state_epoch = -1
        if kind == SHARE_SNAPSHOT:
            (state_epoch,) = struct.unpack_from(">i", data, pos)
            pos += 4
        leader_epoch, start = struct.unpack_from(">iq", data, pos)
        pos += 12
        n, pos = read_uvarint(data, pos)
        batches: list[StateBatch] = []
        for _ in range(max(n - 1, 0)):
            first, last, state, count = struct.unpack_from(">qqbh", data, pos)
            pos = skip_tagged_fields(data, pos + 19)
            batches.append((first, last, state, count))
        skip_tagged_fields(data, pos)
    except (struct.error, ProtocolError) as e:
        raise RecordFormatError(f"bad share state value: {e}") from e
    return ShareStateValue(snapshot_epoch, state_epoch, leader_epoch, start, batches)
