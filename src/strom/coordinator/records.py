"""Records of the internal topic ``__consumer_offsets``, in Apache Kafka's on-disk formats.

Every record key starts with an int16 "version" that is really the record type:

====  ==================  =======================================================
key   record              value versions (value starts with its own int16 version)
====  ==================  =======================================================
0, 1  OffsetCommitKey     OffsetCommitValue 0-4 (group, topic, partition)
2     GroupMetadataKey    GroupMetadataValue 0-4 (group)
3     ConsumerGroupMetadata               group epoch (group)
4     ConsumerGroupPartitionMetadata      subscribed topics' id/name/partitions (group)
5     ConsumerGroupMemberMetadata         a member's subscription (group, member)
6     ConsumerGroupTargetAssignmentMetadata   assignment epoch (group)
7     ConsumerGroupTargetAssignmentMember     a member's target partitions (group, member)
8     ConsumerGroupCurrentMemberAssignment    a member's epochs, state, partitions (group, member)
16    ConsumerGroupRegularExpression          topics a subscribed regex resolved to (group, regex)
====  ==================  =======================================================

Values of version 4 are "flexible" (compact strings, unsigned-varint lengths, tagged fields); older
versions use int16/int32 length prefixes. We write OffsetCommitValue v3 (v1 when an explicit
expire timestamp was requested) and GroupMetadataValue v3, as Kafka 3.x/4.0 brokers do, and read
every version, so a ``__consumer_offsets`` log written by Kafka replays here and vice versa.
A ``None`` value is a tombstone (the compacted topic then forgets the key).

Types 3-8 are the KIP-848 consumer-group records of Kafka's new group coordinator: non-flexible
keys, values of version 0 that are flexible (tagged fields written empty, skipped on read), topics
in assignments identified by topic id. Type 16 (Kafka 4.0, KIP-848 regex subscriptions) keys a
group's resolution of one regular expression by the expression itself. Keys of other types
(share/streams groups ...) are reported as :class:`UnknownKey` by :func:`decode_key` so replay can
skip them.

Error contract: decoders raise :class:`RecordFormatError` (a ``ValueError``) on malformed bytes.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2

# KIP-848 consumer-group record types (the key "version")
CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
CONSUMER_GROUP_REGULAR_EXPRESSION = 16
_CONSUMER_MEMBER_TYPES = (
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
)


class RecordFormatError(ValueError):
    pass


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, int32 overflow)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`` (Kafka's partitionFor)."""
    h = java_string_hash(group_id)
    a = 0 if h == -(1 << 31) else abs(h)
    return a % num_partitions


# --------------------------------------------------------------------------- data


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """A KIP-848 consumer-group record key: ``kind`` is the record type (3-8, 16); ``member_id``
    is set for the per-member types (5, 7, 8), ``regex`` for type 16."""

    kind: int
    group: str
    member_id: str | None = None
    regex: str | None = None


@dataclass(frozen=True, slots=True)
class UnknownKey:
    version: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    rebalance_timeout: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadataValue, ...] = field(default_factory=tuple)


# --------------------------------------------------------------------------- writer / reader


class _Writer:
    def __init__(self, flexible: bool = False) -> None:
        self.buf = bytearray()
        self.flexible = flexible

    def i16(self, v: int) -> None:
        self.buf += struct.pack(">h", v)

    def i32(self, v: int) -> None:
        self.buf += struct.pack(">i", v)

    def i64(self, v: int) -> None:
        self.buf += struct.pack(">q", v)

    def uvarint(self, v: int) -> None:
        while v >= 0x80:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)

    def string(self, s: str | None) -> None:
        if s is None:
            if self.flexible:
                self.uvarint(0)
            else:
                self.i16(-1)
            return
        b = s.encode()
        if self.flexible:
            self.uvarint(len(b) + 1)
        else:
            self.i16(len(b))
        self.buf += b

    def bytes_(self, b: bytes) -> None:
        if self.flexible:
            self.uvarint(len(b) + 1)
        else:
            self.i32(len(b))
        self.buf += b

    def array_len(self, n: int) -> None:
        if self.flexible:
            self.uvarint(n + 1)
        else:
            self.i32(n)

    def tags(self) -> None:
        if self.flexible:
            self.uvarint(0)

    def uuid(self, u: uuid.UUID) -> None:
        self.buf += u.bytes

    def i8(self, v: int) -> None:
        self.buf += struct.pack(">b", v)


class _Reader:
    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError("record truncated")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def i16(self) -> int:
        v: int = struct.unpack(">h", self._take(2))[0]
        return v

    def i32(self) -> int:
        v: int = struct.unpack(">i", self._take(4))[0]
        return v

    def i64(self) -> int:
        v: int = struct.unpack(">q", self._take(8))[0]
        return v

    def uvarint(self) -> int:
        shift = 0
        out = 0
        while True:
            if shift > 28:
                raise RecordFormatError("varint too long")
            b = self._take(1)[0]
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def nullable_string(self) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.i16()
        if n < 0:
            return None
        try:
            return self._take(n).decode()
        except UnicodeDecodeError as e:
            raise RecordFormatError(f"bad utf-8 string: {e}") from e

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise RecordFormatError("unexpected null string")
        return s

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        if n < 0:
            return b""
        return self._take(n)

    def array_len(self) -> int:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        if n > len(self.data):
            raise RecordFormatError("array length beyond record")
        return max(n, 0)

    def tags(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def i8(self) -> int:
        v: int = struct.unpack(">b", self._take(1))[0]
        return v

    def end(self) -> None:
        if self.pos != len(self.data):
            raise RecordFormatError("trailing bytes after record")


# --------------------------------------------------------------------------- keys


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    w = _Writer()
    w.i16(OFFSET_COMMIT_KEY_VERSION)
    w.string(group)
    w.string(topic)
    w.i32(partition)
    return bytes(w.buf)


def encode_group_metadata_key(group: str) -> bytes:
    w = _Writer()
    w.i16(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return bytes(w.buf)


def encode_consumer_group_key(kind: int, group: str, member_id: str | None = None) -> bytes:
    """Key of a consumer-group record; ``member_id`` is required exactly for types 5, 7, 8."""
    if (member_id is not None) != (kind in _CONSUMER_MEMBER_TYPES):
        raise ValueError(f"record type {kind} {'needs' if member_id is None else 'takes no'} member id")
    w = _Writer()
    w.i16(kind)
    w.string(group)
    if member_id is not None:
        w.string(member_id)
    return bytes(w.buf)


def encode_consumer_group_regex_key(group: str, regex: str) -> bytes:
    """ConsumerGroupRegularExpressionKey (type 16): group id, regular expression."""
    w = _Writer()
    w.i16(CONSUMER_GROUP_REGULAR_EXPRESSION)
    w.string(group)
    w.string(regex)
    return bytes(w.buf)


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey | UnknownKey:
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.i32())
    if version == 2:
        return GroupMetadataKey(r.string())
    if CONSUMER_GROUP_METADATA <= version <= CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        group = r.string()
        member = r.string() if version in _CONSUMER_MEMBER_TYPES else None
        return ConsumerGroupKey(version, group, member)
    if version == CONSUMER_GROUP_REGULAR_EXPRESSION:
        group = r.string()
        return ConsumerGroupKey(version, group, regex=r.string())
    return UnknownKey(version)


# --------------------------------------------------------------------------- values


def encode_offset_commit_value(v: OffsetCommitValue) -> bytes:
    w = _Writer()
    if v.expire_timestamp >= 0:
        w.i16(1)
        w.i64(v.offset)
        w.string(v.metadata)
        w.i64(v.commit_timestamp)
        w.i64(v.expire_timestamp)
    else:
        w.i16(3)
        w.i64(v.offset)
        w.i32(v.leader_epoch)
        w.string(v.metadata)
        w.i64(v.commit_timestamp)
    return bytes(w.buf)


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    version = _Reader(data).i16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
    r = _Reader(data, flexible=version >= 4)
    r.pos = 2
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.nullable_string() or ""
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    r.tags()
    return OffsetCommitValue(offset, metadata, commit_ts, leader_epoch, expire_ts)


def encode_group_metadata_value(v: GroupMetadataValue, version: int = 3) -> bytes:
    w = _Writer(flexible=version >= 4)
    w.i16(version)
    w.string(v.protocol_type)
    w.i32(v.generation)
    w.string(v.protocol)
    w.string(v.leader)
    if version >= 2:
        w.i64(v.current_state_timestamp)
    w.array_len(len(v.members))
    for m in v.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.i32(m.rebalance_timeout)
        w.i32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
        w.tags()
    w.tags()
    return bytes(w.buf)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    version = _Reader(data).i16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
    r = _Reader(data, flexible=version >= 4)
    r.pos = 2
    protocol_type = r.nullable_string() or ""
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len()):
        member_id = r.string()
        instance = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.tags()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        members.append(
            MemberMetadataValue(
                member_id,
                client_id,
                client_host,
                session_timeout,
                rebalance_timeout,
                subscription,
                assignment,
                instance,
            )
        )
    r.tags()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, ts, tuple(members))


# --------------------------------------------------------------------------- consumer protocol


def subscribed_topics(subscription: bytes) -> set[str] | None:
    """Topics of a ``consumer`` protocol Subscription (ConsumerProtocolSubscription, any
    version), or None if the bytes do not parse."""
    try:
        r = _Reader(subscription)
        version = r.i16()
        if version < 0:
            return None
        # All released versions (0-3) are non-flexible and start with the topic array.
        return {r.string() for _ in range(r.array_len())}
    except RecordFormatError:
        return None


# --------------------------------------------------------------------------- KIP-848 consumer groups

TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]  # (topic id, partitions) per topic


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    topics: tuple[tuple[uuid.UUID, str, int], ...]  # (topic id, name, partition count)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # Kafka's MemberState: 0 stable, 1 unrevoked, 2 unreleased partitions
    assigned: TopicPartitions
    pending_revocation: TopicPartitions


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    """What a regex resolved to: topic names, the metadata version and the wall-clock time of
    the resolution."""

    topics: tuple[str, ...]
    version: int
    timestamp: int


ConsumerGroupValue = (
    ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
    | ConsumerGroupRegularExpressionValue
)

_VALUE_KIND: dict[type, int] = {
    ConsumerGroupMetadataValue: CONSUMER_GROUP_METADATA,
    ConsumerGroupPartitionMetadataValue: CONSUMER_GROUP_PARTITION_METADATA,
    ConsumerGroupMemberMetadataValue: CONSUMER_GROUP_MEMBER_METADATA,
    ConsumerGroupTargetAssignmentMetadataValue: CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    ConsumerGroupTargetAssignmentMemberValue: CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    ConsumerGroupCurrentMemberAssignmentValue: CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    ConsumerGroupRegularExpressionValue: CONSUMER_GROUP_REGULAR_EXPRESSION,
}


def _write_topic_partitions(w: _Writer, tps: TopicPartitions) -> None:
    w.array_len(len(tps))
    for tid, parts in tps:
        w.uuid(tid)
        w.array_len(len(parts))
        for p in parts:
            w.i32(p)
        w.tags()


def _read_topic_partitions(r: _Reader) -> TopicPartitions:
    out = []
    for _ in range(r.array_len()):
        tid = r.uuid()
        parts = tuple(r.i32() for _ in range(r.array_len()))
        r.tags()  # e.g. AssignmentEpochs (KIP-1251), not used here
        out.append((tid, parts))
    return tuple(out)


def encode_consumer_group_value(v: ConsumerGroupValue) -> bytes:
    """Version 0 (flexible) of the value matching ``v``'s record type."""
    w = _Writer(flexible=True)
    w.i16(0)
    if isinstance(v, ConsumerGroupMetadataValue):
        w.i32(v.epoch)
    elif isinstance(v, ConsumerGroupPartitionMetadataValue):
        w.array_len(len(v.topics))
        for tid, name, n in v.topics:
            w.uuid(tid)
            w.string(name)
            w.i32(n)
            w.array_len(0)  # PartitionMetadata (racks): not tracked, stored empty as Kafka does
            w.tags()
    elif isinstance(v, ConsumerGroupMemberMetadataValue):
        w.string(v.instance_id)
        w.string(v.rack_id)
        w.string(v.client_id)
        w.string(v.client_host)
        w.array_len(len(v.subscribed_topic_names))
        for t in v.subscribed_topic_names:
            w.string(t)
        w.string(v.subscribed_topic_regex)
        w.i32(v.rebalance_timeout_ms)
        w.string(v.server_assignor)
    elif isinstance(v, ConsumerGroupTargetAssignmentMetadataValue):
        w.i32(v.assignment_epoch)
    elif isinstance(v, ConsumerGroupTargetAssignmentMemberValue):
        _write_topic_partitions(w, v.topic_partitions)
    elif isinstance(v, ConsumerGroupRegularExpressionValue):
        w.array_len(len(v.topics))
        for t in v.topics:
            w.string(t)
        w.i64(v.version)
        w.i64(v.timestamp)
    else:
        w.i32(v.member_epoch)
        w.i32(v.previous_member_epoch)
        w.i8(v.state)
        _write_topic_partitions(w, v.assigned)
        _write_topic_partitions(w, v.pending_revocation)
    w.tags()
    return bytes(w.buf)


def consumer_group_record_kind(v: ConsumerGroupValue) -> int:
    return _VALUE_KIND[type(v)]


def decode_consumer_group_value(kind: int, data: bytes) -> ConsumerGroupValue:
    """Decode the value of record type ``kind`` (3-8, 16). Raises RecordFormatError."""
    r = _Reader(data, flexible=True)
    version = r.i16()
    if version != 0:
        raise RecordFormatError(f"unknown version {version} of consumer-group record type {kind}")
    out: ConsumerGroupValue
    if kind == CONSUMER_GROUP_METADATA:
        out = ConsumerGroupMetadataValue(r.i32())
    elif kind == CONSUMER_GROUP_PARTITION_METADATA:
        topics = []
        for _ in range(r.array_len()):
            tid = r.uuid()
            name = r.string()
            n = r.i32()
            for _ in range(r.array_len()):  # PartitionMetadata: partition, racks
                r.i32()
                for _ in range(r.array_len()):
                    r.string()
                r.tags()
            r.tags()
            topics.append((tid, name, n))
        out = ConsumerGroupPartitionMetadataValue(tuple(topics))
    elif kind == CONSUMER_GROUP_MEMBER_METADATA:
        instance_id = r.nullable_string()
        rack_id = r.nullable_string()
        client_id = r.string()
        client_host = r.string()
        names = tuple(r.string() for _ in range(r.array_len()))
        regex = r.nullable_string()
        rebalance_timeout = r.i32()
        assignor = r.nullable_string()
        out = ConsumerGroupMemberMetadataValue(
            instance_id, rack_id, client_id, client_host, names, regex, rebalance_timeout, assignor
        )
    elif kind == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        out = ConsumerGroupTargetAssignmentMetadataValue(r.i32())
    elif kind == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        out = ConsumerGroupTargetAssignmentMemberValue(_read_topic_partitions(r))
    elif kind == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        epoch = r.i32()
        previous = r.i32()
        state = r.i8()
        assigned = _read_topic_partitions(r)
        pending = _read_topic_partitions(r)
        out = ConsumerGroupCurrentMemberAssignmentValue(epoch, previous, state, assigned, pending)
    elif kind == CONSUMER_GROUP_REGULAR_EXPRESSION:
        matched = tuple(r.string() for _ in range(r.array_len()))
        out = ConsumerGroupRegularExpressionValue(matched, r.i64(), r.i64())
    else:
        raise RecordFormatError(f"not a consumer-group record type: {kind}")
    r.tags()
    r.end()
    return out
