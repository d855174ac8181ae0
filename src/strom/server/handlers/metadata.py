"""Metadata (3): brokers, controller, topics and partition leadership, from the metadata cache.

The answer for all topics of a broker with 10,000 partitions has 10,000 partition entries: built
as dicts and kio entities and encoded field by field on every request they cost 150-350 ms of
the event loop. So

* a topic's partitions are struct-packed by :func:`encode_partitions` from the metadata cache's
  ``partition_states`` (plain tuples: no dict, entity or other object per partition), its other
  fields encoded by kio (10,000 partitions: ~15 ms instead of 150-350);
* each topic's entry is kept encoded (:class:`_EncodedTopics`), per API version and listener,
  while the metadata cache's ``topic_state`` of the topic (and its partitions on failed log
  dirs) stays equal: a Metadata request re-encodes only the topics whose leadership, ISR,
  partition count or brokers changed;
* the answer is the top-level fields encoded by kio around the topics' bytes (:func:`_answer`).

All of it is byte for byte what kio encodes for the whole answer, in every version
(``tests/unit/test_metadata_encoding.py``). A topic entry that carries the principal's
authorized operations is encoded for its request only.
"""

from __future__ import annotations

import asyncio
import io
import struct
import uuid
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from ...metadata.topics import TopicError, TopicInfo, validate_topic_name
from ...protocol import codec
from ...protocol.errors import ErrorCode
from ...security.authorizer import CLUSTER_NAME
from ..authz import AclOperation, ResourceType, authorized, authorized_cluster, authorized_operations
from ..context import RawResponse, RequestContext
from ..metadata_cache import NO_LEADER, MetadataCache
from . import handler

_NO_OPS = -2147483648  # topic/cluster_authorized_operations not asked for (Kafka's INT32_MIN)


# one partition's entry: (error, index, leader, leader epoch, replicas, ISR, offline replicas)
PartitionRow = tuple[int, int, int, int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def partition_rows(ctx: RequestContext, info: TopicInfo) -> list[PartitionRow]:
    # a partition on a failed log dir has no leader (Kafka's controller takes the replica
    # offline: LEADER_NOT_AVAILABLE, leader -1, the replica listed in offline_replicas). A leader
    # that is not alive on the client's listener is not given (Kafka's KRaftMetadataCache):
    # LISTENER_NOT_FOUND from v6 when it is alive on another listener, else LEADER_NOT_AVAILABLE
    cache = ctx.broker.metadata_cache
    listener = ctx.session.listener
    errors: dict[int, int] = {NO_LEADER: ErrorCode.LEADER_NOT_AVAILABLE}  # leader -> error (memo)
    out = []
    for p, leader, epoch, replicas, isr, offline in cache.partition_states(info):
        error = errors.get(leader)
        if error is None:
            if cache.alive_broker(leader, listener) is not None:
                error = ErrorCode.NONE
            elif ctx.api_version >= 6 and cache.alive_broker(leader) is not None:
                error = ErrorCode.LISTENER_NOT_FOUND
            else:
                error = ErrorCode.LEADER_NOT_AVAILABLE
            errors[leader] = error = int(error)
        shown = leader if error == ErrorCode.NONE else NO_LEADER
        out.append((error, p, shown, epoch, replicas, isr, offline))
    return out


def _int32s(flexible: bool, values: tuple[int, ...]) -> bytes:
    return codec.array_length(flexible, len(values)) + struct.pack(f">{len(values)}i", *values)


_ROW = struct.Struct(">hii")  # error, index, leader
_I32 = struct.Struct(">i")


def encode_partitions(version: int, rows: list[PartitionRow]) -> bytes:
    """The partitions array of a topic's entry, encoded as kio would (the byte-for-byte tests):
    every field of every version, without building kio entities (10,000 partitions are
    ~30 ms this way, ~250 ms through dicts and kio)."""
    flexible = version >= 9
    out = bytearray(codec.array_length(flexible, len(rows)))
    tails: dict[tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]], bytes] = {}  # (memo)
    pack = _ROW.pack
    for error, index, leader, epoch, replicas, isr, offline in rows:
        out += pack(error, index, leader)
        key = (epoch, replicas, isr, offline)
        tail = tails.get(key)
        if tail is None:
            tail = _I32.pack(epoch) if version >= 7 else b""
            tail += _int32s(flexible, replicas) + _int32s(flexible, isr)
            if version >= 5:
                tail += _int32s(flexible, offline)
            if flexible:
                tail += b"\0"  # no tagged fields
            tails[key] = tail
        out += tail
    return bytes(out)


def _topic_type(version: int) -> type:
    """kio's entity of one topic of the answer of ``version``."""
    return codec.array_entry_type(codec.response_type(3, version), "topics")


def encode_topic(version: int, entry: dict[str, Any]) -> bytes:
    """One topic entry (a dict of kio's field names), encoded as in the answer of ``version``."""
    cls = _topic_type(version)
    buf = io.BytesIO()
    codec._writer(cls)(buf, codec.build(cls, entry))
    return buf.getvalue()


def encode_existing_topic(ctx: RequestContext, info: TopicInfo, ops: int = _NO_OPS) -> bytes:
    """The entry of a topic that exists: kio encodes its fields, :func:`encode_partitions` its
    partitions."""
    version = ctx.api_version
    before, after = codec.encode_around(_topic_type(version), {
        "error_code": 0,
        "name": info.name,
        "topic_id": info.topic_id,
        "is_internal": info.internal,
        "topic_authorized_operations": ops,
    }, "partitions")
    return before + encode_partitions(version, partition_rows(ctx, info)) + after


class _EncodedTopics:
    """Topic entries kept encoded, by (API version, listener) and topic name, each with the
    state it was encoded from (the metadata cache's ``topic_state`` and the topic's offline
    partitions); an entry whose state moved is encoded again. Entries of deleted topics are
    dropped once they outnumber the live topics."""

    __slots__ = ("entries", "limits")

    def __init__(self) -> None:
        self.entries: dict[tuple[int, str | None], dict[str, tuple[Hashable, bytes]]] = {}
        self.limits: dict[tuple[int, str | None], int] = {}

    def get(
        self, ctx: RequestContext, info: TopicInfo, offline: dict[str, frozenset[int]]
    ) -> bytes:
        cache = ctx.broker.metadata_cache
        state = (cache.topic_state(info), offline.get(info.name))
        key = (ctx.api_version, ctx.session.listener)
        topics = self.entries.setdefault(key, {})
        held = topics.get(info.name)
        if held is not None and held[0] == state:
            return held[1]
        data = encode_existing_topic(ctx, info)
        if held is None and len(topics) >= self.limits.get(key, 64):
            for name in [n for n in topics if cache.topic(n) is None]:
                del topics[name]
            self.limits[key] = 2 * len(topics) + 64
        topics[info.name] = (state, data)
        return data


# one per metadata cache (a broker's; tests swap caches)
_ENCODED: weakref.WeakKeyDictionary[MetadataCache, _EncodedTopics] = weakref.WeakKeyDictionary()


def _encoded_topics(ctx: RequestContext) -> _EncodedTopics:
    cache = ctx.broker.metadata_cache
    held = _ENCODED.get(cache)
    if held is None:
        held = _ENCODED[cache] = _EncodedTopics()
    return held


def _answer(version: int, top: dict[str, Any], topics: list[bytes]) -> RawResponse:
    """The whole answer: ``top`` (every field but the topics) encoded by kio with an empty topics
    array, and the encoded ``topics`` put in that array's place."""
    resp_type = codec.response_type(3, version)
    before, after = codec.encode_around(resp_type, top, "topics")
    flexible = bool(getattr(resp_type, "__flexible__", False))
    parts: list[bytes | bytearray | memoryview | tuple[int, int, int]] = [
        before, codec.array_length(flexible, len(topics)), *topics, after,
    ]
    return RawResponse(parts, sum(len(p) for p in parts), throttle_leads=version >= 3)  # type: ignore[arg-type]


def _describable(ctx: RequestContext, name: str) -> bool:
    return authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)


def _unauthorized(name: str | None, topic_id: uuid.UUID | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        "name": name,
        "is_internal": False,
        "partitions": [],
    }
    if topic_id is not None:
        entry["topic_id"] = topic_id
    return entry


# How long a Metadata request waits for the topics it auto-creates: a small topic is usually
# ready and returned at once; a creation that takes longer (many partitions, a busy disk) goes on
# in the background and is answered LEADER_NOT_AVAILABLE, as Kafka answers while its controller
# creates the topic, so the client retries instead of waiting on this request.
AUTO_CREATE_WAIT_S = 1.0


def _settle(task: asyncio.Future[Any]) -> None:
    """A creation left running in the background: its outcome is the broker's, not a request's."""
    if not task.cancelled():
        task.exception()


async def _answer_auto_created(
    ctx: RequestContext,
    creating: dict[str, tuple[int, asyncio.Future[TopicInfo | None]]],
    topics_out: list[dict[str, Any] | bytes],
    entry: Callable[[TopicInfo], bytes],
) -> None:
    tasks = [task for _slot, task in creating.values()]
    await asyncio.wait(tasks, timeout=AUTO_CREATE_WAIT_S)
    for name, (slot, task) in creating.items():
        if not task.done():
            task.add_done_callback(_settle)
            topics_out[slot] = {"error_code": ErrorCode.LEADER_NOT_AVAILABLE, "name": name, "partitions": []}
            continue
        error = task.exception()
        if isinstance(error, TopicError):
            topics_out[slot] = {"error_code": error.code, "name": name, "partitions": []}
        elif error is not None:
            raise error
        else:
            info = task.result()
            topics_out[slot] = (
                entry(info)
                if info is not None
                else {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []}
            )


@handler(3)
async def handle_metadata(ctx: RequestContext, request: Any) -> RawResponse:
    broker = ctx.broker
    cache = broker.metadata_cache
    version = ctx.api_version
    # a topic's entry: kept encoded, unless it carries the principal's authorized operations
    want_ops = bool(getattr(request, "include_topic_authorized_operations", False))
    encoded = _encoded_topics(ctx)
    offline = dict(cache.offline_by_topic())

    def entry(info: TopicInfo) -> bytes:
        if want_ops:
            return encode_existing_topic(ctx, info, authorized_operations(ctx, ResourceType.TOPIC, info.name))
        return encoded.get(ctx, info, offline)

    topics_out: list[dict[str, Any] | bytes] = []
    requested = request.topics
    authorizer = getattr(broker, "authorizer", None)
    if requested is None or (version == 0 and not requested):
        # all topics: those the principal may not DESCRIBE are left out, as Kafka does
        topics_out = [
            entry(t)
            for t in cache.topics()
            if authorizer is None or _describable(ctx, t.name)
        ]
    else:
        auto = getattr(request, "allow_auto_topic_creation", True)
        creating: dict[str, tuple[int, asyncio.Future[TopicInfo | None]]] = {}
        for t in requested:
            name = t.name
            tid = getattr(t, "topic_id", None)
            # by id (v12+): the Java consumer of a broker-side regex subscription (KIP-848) asks
            # for the topic ids of its assignment with an empty name, not a null one; Kafka looks
            # up every topic that carries a non-zero id
            if not name and tid is not None and tid.int != 0:
                info = cache.topic_by_id(tid)
                if info is not None and not _describable(ctx, info.name):
                    # (topic ids are not secret: Kafka answers TOPIC_AUTHORIZATION_FAILED with it)
                    topics_out.append(_unauthorized(None, tid))
                elif info is None:
                    topics_out.append(
                        {
                            "error_code": ErrorCode.UNKNOWN_TOPIC_ID,
                            "name": None,
                            "topic_id": tid,
                            "partitions": [],
                        }
                    )
                else:
                    topics_out.append(entry(info))
                continue
            name = str(name)
            if authorizer is not None and not _describable(ctx, name):
                topics_out.append(_unauthorized(name))
                continue
            info = cache.topic(name)
            if info is None:
                try:
                    validate_topic_name(name)
                except TopicError as e:
                    topics_out.append({"error_code": e.code, "name": name, "partitions": []})
                    continue
                if (
                    auto
                    and authorizer is not None
                    and broker.config["auto.create.topics.enable"]
                    and not authorized_cluster(ctx, AclOperation.CREATE)
                    and not authorized(ctx, AclOperation.CREATE, ResourceType.TOPIC, name)
                ):
                    # auto-creation needs CREATE on the cluster or the topic
                    topics_out.append(_unauthorized(name))
                    continue
                if auto and name not in creating and not broker.is_being_created(name):
                    creating[name] = (len(topics_out), asyncio.ensure_future(broker.auto_create_async(name)))
                    topics_out.append({})  # answered below
                    continue
            if info is None:
                topics_out.append(
                    {
                        # being created: Kafka answers LEADER_NOT_AVAILABLE and the client retries
                        "error_code": ErrorCode.LEADER_NOT_AVAILABLE
                        if broker.is_being_created(name)
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        "name": name,
                        "partitions": [],
                    }
                )
            else:
                topics_out.append(entry(info))
        if creating:
            await _answer_auto_created(ctx, creating, topics_out, entry)
    cluster_ops = _NO_OPS
    if getattr(request, "include_cluster_authorized_operations", False):  # (v8-v10)
        cluster_ops = authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
    top = {
        "throttle_time": 0,
        # v13's top-level error (KIP-1102): Kafka's broker sets it only for REBOOTSTRAP_REQUIRED,
        # which a single node never needs
        "error_code": ErrorCode.NONE,
        "brokers": [
            {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
            for b in cache.alive_brokers(ctx.session.listener)
        ],
        "cluster_id": cache.cluster_id(),
        "controller_id": cache.controller_id(),
        "cluster_authorized_operations": cluster_ops,
    }
    topics = [out if isinstance(out, bytes) else encode_topic(version, out) for out in topics_out]
    return _answer(version, top, topics)
