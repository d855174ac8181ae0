"""Kafka's metadata records (``__cluster_metadata``), byte-compatible with Kafka's ``MetadataRecordSerde``.

Theory of operation
-------------------
Each record of the metadata log is a Kafka "metadata" message (``metadata/src/main/resources/
common/metadata/*.json`` in apache/kafka) framed as Kafka's ``AbstractApiMessageSerde`` writes it::

    frame version (unsigned varint, always 1) | api key (uvarint) | version (uvarint) | body

and stored as the *value* of a record (null key) in an ordinary RecordBatch v2. Every metadata
message is flexible from version 0, so the body uses the "compact" encodings: strings and byte
strings as ``uvarint(len + 1)`` then the bytes (0 = null), arrays as ``uvarint(count + 1)`` then
the elements (0 = null), uuids as 16 raw bytes, fixed-width big-endian integers, then a tagged-field
section: ``uvarint(count)`` and for each field in ascending tag order ``uvarint(tag) |
uvarint(size) | value``. A tagged field is written only when it differs from its default, exactly
as Kafka's generated ``write()`` does; an unknown tag is skipped on read. Structs inside arrays
(broker endpoints, features, quota entity parts) carry their own (empty) tagged-field section.

The schemas are data: one :class:`_Field` list per record type, read by one generic encoder and
decoder, with Kafka's field names in snake_case as the dataclass attribute names and Kafka's
defaults as the dataclass defaults (a field absent from the version being read keeps its default).
Record classes are frozen dataclasses; lists are tuples so records are hashable and shareable.

Besides the records strom's controller writes, the codec reads (and writes) the other record types
a Kafka 4.0 metadata log may hold: RegisterControllerRecord (KIP-919), DelegationTokenRecord /
RemoveDelegationTokenRecord, ClearElrRecord (KIP-966) and the ZooKeeper-migration
ZkMigrationStateRecord. Record types added after Kafka 4.0 are not covered: :func:`decode` reports
them as unknown types.

Versions written: :func:`encode` picks what a Kafka 4.0 controller writes at metadata.version
4.0-IV3 (``RegisterBrokerRecord`` v3, ``BrokerRegistrationChangeRecord`` v2, ``PartitionRecord`` and
``PartitionChangeRecord`` v2 (their eligible-leader-replica fields are tagged and written only when
not None), everything else v0) unless a version is given. :func:`decode` reads every valid version.

Error contract: :func:`decode` (and :func:`decode_versioned`, :func:`iter_batch_records`) raise
only :class:`MetadataParseError` on malformed input: unknown frame version, api key or version,
truncation, bad lengths, nulls where the version forbids them, invalid UTF-8, trailing garbage.
:func:`encode` raises ``ValueError`` for a record the requested version cannot carry (a non-default
value in a field the version lacks, a null in a non-nullable field, a string over 32767 bytes).
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..protocol.records import CorruptRecordError, build_batch, decode_batch_records, iter_batches

FRAME_VERSION = 1
ZERO_UUID = uuid.UUID(int=0)
_MAX_STRING = 0x7FFF


class MetadataParseError(ValueError):
    """Malformed metadata record bytes (Kafka's ``MetadataParseException``)."""


# --------------------------------------------------------------------------- schema


@dataclass(frozen=True)
class _Field:
    """One field of a Kafka message schema.

    ``kind`` is a primitive type name (``int8`` ... ``uuid``), ``[]int32`` / ``[]uuid`` / ``[]string``, or
    ``[]`` with ``struct`` naming the element dataclass. ``since``: first version carrying the field
    (every metadata field is "N+"); ``nullable_since``: first version in which it may be null;
    ``tag``: its tag if it is a tagged field (tagged from ``since``, as in every metadata schema).
    """

    attr: str
    kind: str
    since: int = 0
    nullable_since: int | None = None
    tag: int | None = None
    struct: type | None = None

    def present(self, version: int) -> bool:
        return version >= self.since

    def nullable(self, version: int) -> bool:
        return self.nullable_since is not None and version >= self.nullable_since


@dataclass(frozen=True)
class _Schema:
    api_key: int
    name: str
    min_version: int
    max_version: int
    fields: tuple[_Field, ...]


# Filled in by @_message / @_struct below: dataclass -> schema, api key -> dataclass.
_SCHEMAS: dict[type, _Schema] = {}
_STRUCT_FIELDS: dict[type, tuple[_Field, ...]] = {}
_BY_API_KEY: dict[int, type] = {}


def _message(api_key: int, versions: tuple[int, int], *fields: _Field) -> Any:
    def register(cls: type) -> type:
        _check_attrs(cls, fields)
        _SCHEMAS[cls] = _Schema(api_key, cls.__name__, versions[0], versions[1], fields)
        _BY_API_KEY[api_key] = cls
        return cls

    return register


def _struct(*fields: _Field) -> Any:
    def register(cls: type) -> type:
        _check_attrs(cls, fields)
        _STRUCT_FIELDS[cls] = fields
        return cls

    return register


def _check_attrs(cls: type, fields: tuple[_Field, ...]) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    if names != [f.attr for f in fields]:  # pragma: no cover - a programming error, caught on import
        raise TypeError(f"{cls.__name__}: dataclass fields {names} do not match its schema")


F = _Field


# --------------------------------------------------------------------------- struct types


@_struct(F("name", "string"), F("host", "string"), F("port", "uint16"), F("security_protocol", "int16"))
@dataclass(frozen=True, kw_only=True)
class BrokerEndpoint:
    """RegisterBrokerRecord.EndPoints element (``security_protocol``: Kafka SecurityProtocol id)."""

    name: str = ""
    host: str = ""
    port: int = 0
    security_protocol: int = 0


@_struct(F("name", "string"), F("min_supported_version", "int16"), F("max_supported_version", "int16"))
@dataclass(frozen=True, kw_only=True)
class BrokerFeature:
    name: str = ""
    min_supported_version: int = 0
    max_supported_version: int = 0


@_struct(F("entity_type", "string"), F("entity_name", "string", nullable_since=0))
@dataclass(frozen=True, kw_only=True)
class EntityData:
    """ClientQuotaRecord.Entity element; ``entity_name`` None means the default entity."""

    entity_type: str = ""
    entity_name: str | None = ""


# --------------------------------------------------------------------------- records


@_message(
    0,
    (0, 3),
    F("broker_id", "int32"),
    F("is_migrating_zk_broker", "bool", since=2),
    F("incarnation_id", "uuid"),
    F("broker_epoch", "int64"),
    F("end_points", "[]", struct=BrokerEndpoint),
    F("features", "[]", struct=BrokerFeature),
    F("rack", "string", nullable_since=0),
    F("fenced", "bool"),
    F("in_controlled_shutdown", "bool", since=1),
    F("log_dirs", "[]uuid", since=3, tag=0),
)
@dataclass(frozen=True, kw_only=True)
class RegisterBrokerRecord:
    API_KEY: ClassVar[int] = 0
    broker_id: int = 0
    is_migrating_zk_broker: bool = False
    incarnation_id: uuid.UUID = ZERO_UUID
    broker_epoch: int = 0
    end_points: tuple[BrokerEndpoint, ...] = ()
    features: tuple[BrokerFeature, ...] = ()
    rack: str | None = ""
    fenced: bool = True
    in_controlled_shutdown: bool = False
    log_dirs: tuple[uuid.UUID, ...] = ()


@_message(1, (0, 0), F("broker_id", "int32"), F("broker_epoch", "int64"))
@dataclass(frozen=True, kw_only=True)
class UnregisterBrokerRecord:
    API_KEY: ClassVar[int] = 1
    broker_id: int = 0
    broker_epoch: int = 0


@_message(2, (0, 0), F("name", "string"), F("topic_id", "uuid"))
@dataclass(frozen=True, kw_only=True)
class TopicRecord:
    API_KEY: ClassVar[int] = 2
    name: str = ""
    topic_id: uuid.UUID = ZERO_UUID


@_message(
    3,
    (0, 2),
    F("partition_id", "int32"),
    F("topic_id", "uuid"),
    F("replicas", "[]int32"),
    F("isr", "[]int32"),
    F("removing_replicas", "[]int32"),
    F("adding_replicas", "[]int32"),
    F("leader", "int32"),
    F("leader_recovery_state", "int8", tag=0),
    F("leader_epoch", "int32"),
    F("partition_epoch", "int32"),
    F("directories", "[]uuid", since=1),
    F("eligible_leader_replicas", "[]int32", since=2, nullable_since=2, tag=1),
    F("last_known_elr", "[]int32", since=2, nullable_since=2, tag=2),
)
@dataclass(frozen=True, kw_only=True)
class PartitionRecord:
    API_KEY: ClassVar[int] = 3
    partition_id: int = -1
    topic_id: uuid.UUID = ZERO_UUID
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader: int = -1
    leader_recovery_state: int = 0
    leader_epoch: int = -1
    partition_epoch: int = -1
    directories: tuple[uuid.UUID, ...] = ()
    eligible_leader_replicas: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None


@_message(
    4,
    (0, 0),
    F("resource_type", "int8"),
    F("resource_name", "string"),
    F("name", "string"),
    F("value", "string", nullable_since=0),
)
@dataclass(frozen=True, kw_only=True)
class ConfigRecord:
    """A config set (``value``) or deleted (``value`` None) on a resource (ConfigResource.Type id:
    2 topic, 4 broker, 8 broker logger, 16 client metrics, 32 group)."""

    API_KEY: ClassVar[int] = 4
    resource_type: int = 0
    resource_name: str = ""
    name: str = ""
    value: str | None = ""


LEADER_NO_CHANGE = -2  # PartitionChangeRecord.leader: the leader did not change
NO_LEADER = -1


@_message(
    5,
    (0, 2),
    F("partition_id", "int32"),
    F("topic_id", "uuid"),
    F("isr", "[]int32", nullable_since=0, tag=0),
    F("leader", "int32", tag=1),
    F("replicas", "[]int32", nullable_since=0, tag=2),
    F("removing_replicas", "[]int32", nullable_since=0, tag=3),
    F("adding_replicas", "[]int32", nullable_since=0, tag=4),
    F("leader_recovery_state", "int8", tag=5),
    F("directories", "[]uuid", since=1, nullable_since=1, tag=8),
    F("eligible_leader_replicas", "[]int32", since=2, nullable_since=2, tag=6),
    F("last_known_elr", "[]int32", since=2, nullable_since=2, tag=7),
)
@dataclass(frozen=True, kw_only=True)
class PartitionChangeRecord:
    """A change to one partition: None (or ``leader`` -2, ``leader_recovery_state`` -1) = unchanged."""

    API_KEY: ClassVar[int] = 5
    partition_id: int = -1
    topic_id: uuid.UUID = ZERO_UUID
    isr: tuple[int, ...] | None = None
    leader: int = LEADER_NO_CHANGE
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    leader_recovery_state: int = -1
    directories: tuple[uuid.UUID, ...] | None = None
    eligible_leader_replicas: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None


@_message(7, (0, 0), F("id", "int32"), F("epoch", "int64"))
@dataclass(frozen=True, kw_only=True)
class FenceBrokerRecord:
    API_KEY: ClassVar[int] = 7
    id: int = 0
    epoch: int = 0


@_message(8, (0, 0), F("id", "int32"), F("epoch", "int64"))
@dataclass(frozen=True, kw_only=True)
class UnfenceBrokerRecord:
    API_KEY: ClassVar[int] = 8
    id: int = 0
    epoch: int = 0


@_message(9, (0, 0), F("topic_id", "uuid"))
@dataclass(frozen=True, kw_only=True)
class RemoveTopicRecord:
    API_KEY: ClassVar[int] = 9
    topic_id: uuid.UUID = ZERO_UUID


@_message(
    10,
    (0, 0),
    F("owner", "string"),
    F("requester", "string"),
    F("renewers", "[]string"),
    F("issue_timestamp", "int64"),
    F("max_timestamp", "int64"),
    F("expiration_timestamp", "int64"),
    F("token_id", "string"),
)
@dataclass(frozen=True, kw_only=True)
class DelegationTokenRecord:
    API_KEY: ClassVar[int] = 10
    owner: str = ""
    requester: str = ""
    renewers: tuple[str, ...] = ()
    issue_timestamp: int = 0
    max_timestamp: int = 0
    expiration_timestamp: int = 0
    token_id: str = ""


@_message(
    11,
    (0, 0),
    F("name", "string"),
    F("mechanism", "int8"),
    F("salt", "bytes"),
    F("stored_key", "bytes"),
    F("server_key", "bytes"),
    F("iterations", "int32"),
)
@dataclass(frozen=True, kw_only=True)
class UserScramCredentialRecord:
    """``mechanism``: Kafka's ScramMechanism id (1 SCRAM-SHA-256, 2 SCRAM-SHA-512)."""

    API_KEY: ClassVar[int] = 11
    name: str = ""
    mechanism: int = 0
    salt: bytes = b""
    stored_key: bytes = b""
    server_key: bytes = b""
    iterations: int = 0


@_message(12, (0, 0), F("name", "string"), F("feature_level", "int16"))
@dataclass(frozen=True, kw_only=True)
class FeatureLevelRecord:
    API_KEY: ClassVar[int] = 12
    name: str = ""
    feature_level: int = 0


@_message(
    14,
    (0, 0),
    F("entity", "[]", struct=EntityData),
    F("key", "string"),
    F("value", "float64"),
    F("remove", "bool"),
)
@dataclass(frozen=True, kw_only=True)
class ClientQuotaRecord:
    API_KEY: ClassVar[int] = 14
    entity: tuple[EntityData, ...] = ()
    key: str = ""
    value: float = 0.0
    remove: bool = False


@_message(15, (0, 0), F("broker_id", "int32"), F("broker_epoch", "int64"), F("next_producer_id", "int64"))
@dataclass(frozen=True, kw_only=True)
class ProducerIdsRecord:
    API_KEY: ClassVar[int] = 15
    broker_id: int = 0
    broker_epoch: int = -1
    next_producer_id: int = 0


BROKER_FENCE_UNFENCED = -1  # BrokerRegistrationChangeRecord.fenced values
BROKER_FENCE_NONE = 0
BROKER_FENCE_FENCED = 1


@_message(
    17,
    (0, 2),
    F("broker_id", "int32"),
    F("broker_epoch", "int64"),
    F("fenced", "int8", tag=0),
    F("in_controlled_shutdown", "int8", since=1, tag=1),
    F("log_dirs", "[]uuid", since=2, tag=2),
)
@dataclass(frozen=True, kw_only=True)
class BrokerRegistrationChangeRecord:
    """``fenced``: -1 unfenced, 0 no change, 1 fenced; ``in_controlled_shutdown``: 0 no change, 1 yes."""

    API_KEY: ClassVar[int] = 17
    broker_id: int = 0
    broker_epoch: int = 0
    fenced: int = 0
    in_controlled_shutdown: int = 0
    log_dirs: tuple[uuid.UUID, ...] = ()


@_message(
    18,
    (0, 0),
    F("id", "uuid"),
    F("resource_type", "int8"),
    F("resource_name", "string"),
    F("pattern_type", "int8"),
    F("principal", "string"),
    F("host", "string"),
    F("operation", "int8"),
    F("permission_type", "int8"),
)
@dataclass(frozen=True, kw_only=True)
class AccessControlEntryRecord:
    API_KEY: ClassVar[int] = 18
    id: uuid.UUID = ZERO_UUID
    resource_type: int = 0
    resource_name: str = ""
    pattern_type: int = 0
    principal: str = ""
    host: str = ""
    operation: int = 0
    permission_type: int = 0


@_message(19, (0, 0), F("id", "uuid"))
@dataclass(frozen=True, kw_only=True)
class RemoveAccessControlEntryRecord:
    API_KEY: ClassVar[int] = 19
    id: uuid.UUID = ZERO_UUID


@_message(20, (0, 0))
@dataclass(frozen=True, kw_only=True)
class NoOpRecord:
    API_KEY: ClassVar[int] = 20


@_message(21, (0, 0), F("zk_migration_state", "int8"))
@dataclass(frozen=True, kw_only=True)
class ZkMigrationStateRecord:
    """ZooKeeper-to-KRaft migration state (Kafka 3.4-3.9); read for compatibility, never written."""

    API_KEY: ClassVar[int] = 21
    zk_migration_state: int = 0


@_message(22, (0, 0), F("name", "string"), F("mechanism", "int8"))
@dataclass(frozen=True, kw_only=True)
class RemoveUserScramCredentialRecord:
    API_KEY: ClassVar[int] = 22
    name: str = ""
    mechanism: int = 0


@_message(23, (0, 0), F("name", "string", nullable_since=0, tag=0))
@dataclass(frozen=True, kw_only=True)
class BeginTransactionRecord:
    API_KEY: ClassVar[int] = 23
    name: str | None = None


@_message(24, (0, 0))
@dataclass(frozen=True, kw_only=True)
class EndTransactionRecord:
    API_KEY: ClassVar[int] = 24


@_message(25, (0, 0), F("reason", "string", nullable_since=0, tag=0))
@dataclass(frozen=True, kw_only=True)
class AbortTransactionRecord:
    API_KEY: ClassVar[int] = 25
    reason: str | None = None


@_message(26, (0, 0), F("token_id", "string"))
@dataclass(frozen=True, kw_only=True)
class RemoveDelegationTokenRecord:
    API_KEY: ClassVar[int] = 26
    token_id: str = ""


@_message(
    27,
    (0, 0),
    F("controller_id", "int32"),
    F("incarnation_id", "uuid"),
    F("zk_migration_ready", "bool"),
    F("end_points", "[]", struct=BrokerEndpoint),
    F("features", "[]", struct=BrokerFeature),
)
@dataclass(frozen=True, kw_only=True)
class RegisterControllerRecord:
    """A controller's registration (KIP-919); its endpoints and features have the same layout as a
    broker's (Kafka's ControllerEndpoint / ControllerFeature)."""

    API_KEY: ClassVar[int] = 27
    controller_id: int = 0
    incarnation_id: uuid.UUID = ZERO_UUID
    zk_migration_ready: bool = False
    end_points: tuple[BrokerEndpoint, ...] = ()
    features: tuple[BrokerFeature, ...] = ()


@_message(28, (0, 0), F("topic_name", "string"))
@dataclass(frozen=True, kw_only=True)
class ClearElrRecord:
    """Clear the eligible leader replicas (KIP-966) of a topic's partitions, or of every topic's
    when ``topic_name`` is empty (Kafka 4.0, written when ``min.insync.replicas`` changes)."""

    API_KEY: ClassVar[int] = 28
    topic_name: str = ""


MetadataRecord = (
    RegisterBrokerRecord
    | UnregisterBrokerRecord
    | TopicRecord
    | PartitionRecord
    | ConfigRecord
    | PartitionChangeRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | RemoveTopicRecord
    | UserScramCredentialRecord
    | FeatureLevelRecord
    | ClientQuotaRecord
    | ProducerIdsRecord
    | BrokerRegistrationChangeRecord
    | AccessControlEntryRecord
    | RemoveAccessControlEntryRecord
    | NoOpRecord
    | RemoveUserScramCredentialRecord
    | BeginTransactionRecord
    | EndTransactionRecord
    | AbortTransactionRecord
    | DelegationTokenRecord
    | RemoveDelegationTokenRecord
    | ZkMigrationStateRecord
    | RegisterControllerRecord
    | ClearElrRecord
)

RECORD_TYPES: tuple[type, ...] = tuple(_BY_API_KEY[k] for k in sorted(_BY_API_KEY))


def api_key_of(record: MetadataRecord) -> int:
    return _SCHEMAS[type(record)].api_key


def valid_versions(record_type: type) -> tuple[int, int]:
    s = _SCHEMAS[record_type]
    return s.min_version, s.max_version


def default_version(record: MetadataRecord) -> int:
    """The version a Kafka 4.x controller writes this record at (see the module docstring)."""
    if isinstance(record, RegisterBrokerRecord):
        return 3
    if isinstance(record, BrokerRegistrationChangeRecord):
        return 2
    if isinstance(record, PartitionRecord | PartitionChangeRecord):
        return 2  # from metadata.version 4.0-IV1 (ELR fields: tagged, absent when None)
    return 0


# --------------------------------------------------------------------------- writing

_FIXED: dict[str, struct.Struct] = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "uint16": struct.Struct(">H"),
    "float64": struct.Struct(">d"),
}
_DEFAULTS: dict[type, dict[str, Any]] = {}


def _defaults(cls: type) -> dict[str, Any]:
    d = _DEFAULTS.get(cls)
    if d is None:
        d = {f.name: f.default for f in dataclasses.fields(cls)}
        _DEFAULTS[cls] = d
    return d


def _uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _write_value(out: bytearray, f: _Field, value: Any, version: int) -> None:
    kind = f.kind
    if value is None:
        if not f.nullable(version):
            raise ValueError(f"field {f.attr} is not nullable at version {version}")
        out.append(0)  # compact null: uvarint(0) for strings, bytes and arrays alike
        return
    fixed = _FIXED.get(kind)
    if fixed is not None:
        try:
            out += fixed.pack(value)
        except struct.error as e:
            raise ValueError(f"field {f.attr}: {e}") from e
    elif kind == "bool":
        out.append(1 if value else 0)
    elif kind == "uuid":
        out += value.bytes
    elif kind == "string":
        b = value.encode()
        if len(b) > _MAX_STRING:
            raise ValueError(f"field {f.attr} is too long to be serialized ({len(b)} bytes)")
        _uvarint(out, len(b) + 1)
        out += b
    elif kind == "bytes":
        _uvarint(out, len(value) + 1)
        out += value
    elif kind == "[]int32":
        _uvarint(out, len(value) + 1)
        for v in value:
            try:
                out += _FIXED["int32"].pack(v)
            except struct.error as e:
                raise ValueError(f"field {f.attr}: {e}") from e
    elif kind == "[]uuid":
        _uvarint(out, len(value) + 1)
        for v in value:
            out += v.bytes
    elif kind == "[]string":
        _uvarint(out, len(value) + 1)
        for v in value:
            _write_value(out, _Field(f.attr, "string"), v, version)
    else:  # "[]" of structs
        assert f.struct is not None
        sub = _STRUCT_FIELDS[f.struct]
        _uvarint(out, len(value) + 1)
        for element in value:
            _write_body(out, sub, element, version)


def _write_body(out: bytearray, fields: Sequence[_Field], obj: Any, version: int) -> None:
    defaults = _defaults(type(obj))
    tagged: list[tuple[int, bytes]] = []
    for f in fields:
        value = getattr(obj, f.attr)
        if not f.present(version):
            if value != defaults[f.attr]:
                raise ValueError(f"cannot write a non-default {f.attr} at version {version}")
            continue
        if f.tag is None:
            _write_value(out, f, value, version)
        elif value != defaults[f.attr]:
            buf = bytearray()
            _write_value(buf, f, value, version)
            tagged.append((f.tag, bytes(buf)))
    tagged.sort()
    _uvarint(out, len(tagged))
    for tag, data in tagged:
        _uvarint(out, tag)
        _uvarint(out, len(data))
        out += data


def encode(record: MetadataRecord, version: int | None = None) -> bytes:
    """``record`` framed as Kafka's MetadataRecordSerde writes it (see the module docstring)."""
    schema = _SCHEMAS.get(type(record))
    if schema is None:
        raise ValueError(f"not a metadata record: {record!r}")
    if version is None:
        version = default_version(record)
    if not schema.min_version <= version <= schema.max_version:
        raise ValueError(f"{schema.name} has no version {version}")
    out = bytearray()
    _uvarint(out, FRAME_VERSION)
    _uvarint(out, schema.api_key)
    _uvarint(out, version)
    _write_body(out, schema.fields, record, version)
    return bytes(out)


# --------------------------------------------------------------------------- reading


class _Reader:
    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise MetadataParseError("metadata record truncated")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def uvarint(self) -> int:
        result = 0
        shift = 0
        while True:
            if self.pos >= self.end:
                raise MetadataParseError("metadata record truncated in a varint")
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise MetadataParseError("varint too long")


_ValueReader = Callable[[_Reader], Any]
_Plan = tuple[tuple[tuple[str, _ValueReader], ...], dict[int, tuple[str, _ValueReader]]]
_PLANS: dict[tuple[int, int], tuple[Sequence[_Field], _Plan]] = {}


def _fixed_reader(f: _Field) -> _ValueReader:
    st = _FIXED[f.kind]
    size, unpack = st.size, st.unpack_from

    def read(r: _Reader) -> Any:
        pos = r.pos
        if pos + size > r.end:
            raise MetadataParseError(f"metadata record truncated in field {f.attr}")
        r.pos = pos + size
        return unpack(r.data, pos)[0]

    return read


def _value_reader(f: _Field, version: int) -> _ValueReader:
    """A reader for field ``f`` at ``version``, specialised once per (schema, version)."""
    kind = f.kind
    nullable = f.nullable(version)
    if kind in _FIXED:
        return _fixed_reader(f)
    if kind == "bool":
        return lambda r: r.take(1)[0] != 0
    if kind == "uuid":
        return lambda r: uuid.UUID(bytes=r.take(16))

    def length(r: _Reader, min_element: int) -> int | None:
        n = r.uvarint() - 1
        if n < 0:
            if not nullable:
                raise MetadataParseError(f"non-nullable field {f.attr} was serialized as null")
            return None
        if n * min_element > r.end - r.pos:
            raise MetadataParseError(f"field {f.attr} has length {n} beyond the record")
        return n

    if kind == "bytes":

        def read_bytes(r: _Reader) -> Any:
            n = length(r, 1)
            return None if n is None else r.take(n)

        return read_bytes
    if kind == "string":

        def read_string(r: _Reader) -> Any:
            n = length(r, 1)
            if n is None:
                return None
            if n > _MAX_STRING:
                raise MetadataParseError(f"string field {f.attr} had invalid length {n}")
            try:
                return r.take(n).decode()
            except UnicodeDecodeError as e:
                raise MetadataParseError(f"string field {f.attr} is not valid UTF-8") from e

        return read_string
    if kind == "[]int32":

        def read_ints(r: _Reader) -> Any:
            n = length(r, 4)
            return None if n is None else struct.unpack(f">{n}i", r.take(4 * n))

        return read_ints
    if kind == "[]uuid":

        def read_uuids(r: _Reader) -> Any:
            n = length(r, 16)
            return None if n is None else tuple(uuid.UUID(bytes=r.take(16)) for _ in range(n))

        return read_uuids
    if kind == "[]string":
        element = _value_reader(_Field(f.attr, "string"), version)

        def read_strings(r: _Reader) -> Any:
            n = length(r, 1)
            return None if n is None else tuple(element(r) for _ in range(n))

        return read_strings
    struct_cls = f.struct
    assert struct_cls is not None
    sub = _STRUCT_FIELDS[struct_cls]

    def read_structs(r: _Reader) -> Any:
        n = length(r, 1)
        return None if n is None else tuple(_read_body(r, struct_cls, sub, version) for _ in range(n))

    return read_structs


def _plan(fields: Sequence[_Field], version: int) -> _Plan:
    cached = _PLANS.get((id(fields), version))
    if cached is not None and cached[0] is fields:  # the cache holds ``fields``: its id is not reused
        return cached[1]
    present = [f for f in fields if f.present(version)]
    regular = tuple((f.attr, _value_reader(f, version)) for f in present if f.tag is None)
    tagged = {f.tag: (f.attr, _value_reader(f, version)) for f in present if f.tag is not None}
    plan = (regular, tagged)
    _PLANS[(id(fields), version)] = (fields, plan)
    return plan


def _read_value(r: _Reader, f: _Field, version: int) -> Any:
    return _value_reader(f, version)(r)


def _read_body(r: _Reader, cls: type, fields: Sequence[_Field], version: int) -> Any:
    regular, by_tag = _plan(fields, version)
    values = {attr: read(r) for attr, read in regular}
    count = r.uvarint()
    if count:
        if count > r.end - r.pos:
            raise MetadataParseError(f"{count} tagged fields declared in a shorter record")
        last = -1
        for _ in range(count):
            tag = r.uvarint()
            if tag <= last:
                raise MetadataParseError(f"tagged fields out of order (tag {tag} after {last})")
            last = tag
            size = r.uvarint()
            end = r.pos + size
            if end > r.end:
                raise MetadataParseError("tagged field truncated")
            known = by_tag.get(tag)
            if known is None:
                r.pos = end  # unknown tag: skipped, as Kafka keeps it only to write it back
                continue
            attr, read = known
            sub = _Reader(r.data, r.pos, end)
            values[attr] = read(sub)
            if sub.pos != end:
                raise MetadataParseError(f"tagged field {attr} has {end - sub.pos} byte(s) left over")
            r.pos = end
    return cls(**values)


def decode_versioned(data: bytes | bytearray | memoryview) -> tuple[MetadataRecord, int]:
    """Decode one framed metadata record; returns it with the version it was written at."""
    r = _Reader(bytes(data))
    frame = r.uvarint()
    if frame != FRAME_VERSION:
        raise MetadataParseError(
            f"could not deserialize metadata record with frame version {frame} "
            f"(only frame version {FRAME_VERSION} is supported)"
        )
    api_key = r.uvarint()
    version = r.uvarint()
    cls = _BY_API_KEY.get(api_key)
    if cls is None:
        raise MetadataParseError(f"unknown metadata record type {api_key}")
    schema = _SCHEMAS[cls]
    if not schema.min_version <= version <= schema.max_version:
        raise MetadataParseError(f"{schema.name} has no version {version}")
    record = _read_body(r, cls, schema.fields, version)
    if r.pos != r.end:
        raise MetadataParseError(f"found {r.end - r.pos} byte(s) of garbage after {schema.name}")
    return record, version


def decode(data: bytes | bytearray | memoryview) -> MetadataRecord:
    """Decode one framed metadata record (raises only :class:`MetadataParseError`)."""
    return decode_versioned(data)[0]


# --------------------------------------------------------------------------- batches


def build_records_batch(
    records: Iterable[MetadataRecord],
    *,
    base_offset: int = 0,
    timestamp_ms: int = 0,
    leader_epoch: int = -1,
) -> bytes:
    """Pack records into one RecordBatch v2 (values = encoded records, null keys), as Kafka's
    controller appends them to ``__cluster_metadata``."""
    return build_batch(
        [(None, encode(rec), [], timestamp_ms) for rec in records],
        base_offset=base_offset,
        partition_leader_epoch=leader_epoch,
    )


def build_records_batches(
    records: Iterable[MetadataRecord],
    *,
    base_offset: int = 0,
    timestamp_ms: int = 0,
    leader_epoch: int = -1,
    max_batch_records: int = 1000,
) -> bytes:
    """Records packed into consecutive batches of at most ``max_batch_records`` each (a snapshot's
    data, or a large controller write); offsets continue from ``base_offset``. ``b""`` for none.
    A snapshot's header and footer control batches are the Raft layer's to add."""
    if max_batch_records < 1:
        raise ValueError("max_batch_records must be at least 1")
    recs = list(records)
    out = bytearray()
    for i in range(0, len(recs), max_batch_records):
        out += build_records_batch(
            recs[i : i + max_batch_records],
            base_offset=base_offset + i,
            timestamp_ms=timestamp_ms,
            leader_epoch=leader_epoch,
        )
    return bytes(out)


def iter_batch_records(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, MetadataRecord]]:
    """Yield ``(offset, record)`` for every metadata record in a concatenation of batches.

    Control batches (Raft's LeaderChange, snapshot header/footer, voters records) are skipped.
    Raises only :class:`MetadataParseError`, for malformed batches as for malformed records.
    """
    try:
        for pos, header in iter_batches(buf):
            if header.is_control:
                continue
            for rec in decode_batch_records(buf, pos, header):
                if rec.value is None:
                    raise MetadataParseError(f"metadata record at offset {rec.offset} has no value")
                yield rec.offset, decode(rec.value)
    except CorruptRecordError as e:
        raise MetadataParseError(f"malformed metadata batch: {e}") from e
