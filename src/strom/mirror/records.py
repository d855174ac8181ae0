"""MirrorMaker 2's record formats and offset-translation rules (sans-IO).

The formats are Kafka's ``protocol.types`` structs written big-endian: STRING is an int16 length
and UTF-8 bytes, INT32/INT64 fixed width, INT16 a version header where MM2 has one.

* OffsetSync (``mm2-offset-syncs.<alias>.internal``, partition 0): key ``topic STRING,
  partition INT32`` (the *upstream* topic partition), value ``upstreamOffset INT64, offset INT64``.
* Checkpoint (``<source>.checkpoints.internal`` on the target): key ``group STRING, topic STRING,
  partition INT32`` (the *remote* topic partition), value ``version INT16 (0), upstreamOffset
  INT64, offset INT64, metadata STRING``.
* Heartbeat (``heartbeats``): key ``sourceClusterAlias STRING, targetClusterAlias STRING``, value
  ``version INT16 (0), timestamp INT64``.

Translation (MM2's OffsetSyncStore, 3.5+): a consumer offset ``U`` maps through the newest sync
``(u, d)`` with ``u <= U``: to ``d`` when ``U == u``, else to ``d + 1`` (records after the sync may
have been filtered or may not be replicated yet; one past the sync never skips a record). An
offset older than every known sync is not translated.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field

# the fixed-width (non-flexible) Kafka struct reader of the coordinators' records; its
# RecordFormatError is the one raised for bytes that are not the MM2 struct they were read as
from strom.coordinator.records import RecordFormatError, _Reader

__all__ = [
    "Checkpoint",
    "Heartbeat",
    "OffsetSync",
    "OffsetSyncStore",
    "PartitionState",
    "RecordFormatError",
]


def _version(v: _Reader, struct_name: str) -> None:
    """The INT16 version header of an MM2 value: only version 0 is known."""
    version = v.i16()
    if version != 0:
        raise RecordFormatError(f"unknown {struct_name} version {version}")


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > 0x7FFF:
        raise ValueError(f"string of {len(b)} bytes is longer than Kafka's STRING allows")
    return struct.pack(">h", len(b)) + b


@dataclass(frozen=True)
class OffsetSync:
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int

    def key(self) -> bytes:
        return _string(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return struct.pack(">qq", self.upstream_offset, self.downstream_offset)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> OffsetSync:
        k, v = _Reader(key), _Reader(value)
        topic, partition = k.string(), k.i32()
        return cls(topic, partition, v.i64(), v.i64())


@dataclass(frozen=True)
class Checkpoint:
    group: str
    topic: str  # the remote (target-side) topic
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    VERSION = 0

    def key(self) -> bytes:
        return _string(self.group) + _string(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return struct.pack(">hqq", self.VERSION, self.upstream_offset, self.downstream_offset) + _string(
            self.metadata
        )

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Checkpoint:
        k, v = _Reader(key), _Reader(value)
        group, topic, partition = k.string(), k.string(), k.i32()
        _version(v, "Checkpoint")
        return cls(group, topic, partition, v.i64(), v.i64(), v.string())


@dataclass(frozen=True)
class Heartbeat:
    source_cluster_alias: str
    target_cluster_alias: str
    timestamp: int

    VERSION = 0

    def key(self) -> bytes:
        return _string(self.source_cluster_alias) + _string(self.target_cluster_alias)

    def value(self) -> bytes:
        return struct.pack(">hq", self.VERSION, self.timestamp)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Heartbeat:
        k, v = _Reader(key), _Reader(value)
        source, target = k.string(), k.string()
        _version(v, "Heartbeat")
        return cls(source, target, v.i64())


@dataclass
class PartitionState:
    """OffsetSyncWriter's per-partition rule: whether a replicated record must be synced now."""

    max_offset_lag: int
    previous_upstream: int = -1
    previous_downstream: int = -1
    last_sync_downstream: int = -1

    def update(self, upstream: int, downstream: int) -> bool:
        fire = (
            self.last_sync_downstream == -1
            or downstream - (self.last_sync_downstream + 1) >= self.max_offset_lag
            or upstream - self.previous_upstream != 1
            or downstream < self.previous_downstream
        )
        if fire:
            self.last_sync_downstream = downstream
        self.previous_upstream, self.previous_downstream = upstream, downstream
        return fire


@dataclass
class OffsetSyncStore:
    """The offset syncs read so far, per upstream topic partition, in upstream offset order."""

    syncs: dict[tuple[str, int], list[tuple[int, int]]] = field(default_factory=dict)

    def add(self, sync: OffsetSync) -> None:
        lst = self.syncs.setdefault((sync.topic, sync.partition), [])
        pair = (sync.upstream_offset, sync.downstream_offset)
        if lst and pair[0] <= lst[-1][0]:
            # a rewound upstream (topic re-created, mirror restarted from older offsets): the
            # newer sync wins for its offset and everything after it, as MM2's store resets
            i = bisect.bisect_left(lst, (pair[0], -(1 << 63)))
            del lst[i:]
        lst.append(pair)

    def translate(self, topic: str, partition: int, upstream_offset: int) -> int | None:
        """The downstream offset for a group at ``upstream_offset``; None when no sync is known,
        -1 when the offset is older than every sync (MM2 then emits no checkpoint)."""
        lst = self.syncs.get((topic, partition))
        if not lst:
            return None
        i = bisect.bisect_right(lst, (upstream_offset, 1 << 63)) - 1
        if i < 0:
            return -1
        u, d = lst[i]
        return d if u == upstream_offset else d + 1
