"""Metadata (3): brokers, controller, topics and partition leadership, from the metadata cache."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from ...metadata.topics import TopicError, TopicInfo, validate_topic_name
from ...protocol.errors import ErrorCode
from ...security.authorizer import CLUSTER_NAME
from ..authz import AclOperation, ResourceType, authorized, authorized_cluster, authorized_operations
from ..context import RequestContext
from . import handler


def partition_entries(ctx: RequestContext, info: TopicInfo) -> list[dict[str, Any]]:
    # a partition on a failed log dir has no leader (Kafka's controller takes the replica
    # offline: LEADER_NOT_AVAILABLE, leader -1, the replica listed in offline_replicas). A leader
    # that is not alive on the client's listener is not given (Kafka's KRaftMetadataCache):
    # LISTENER_NOT_FOUND from v6 when it is alive on another listener, else LEADER_NOT_AVAILABLE
    cache = ctx.broker.metadata_cache
    listener = ctx.session.listener
    out = []
    for p in range(info.partitions):
        pm = cache.partition(info.name, p)
        if pm is None:  # a partition of the registry the image does not have (yet)
            continue
        leader, error = pm.leader_id, ErrorCode.NONE
        if not pm.has_leader:
            error = ErrorCode.LEADER_NOT_AVAILABLE
        elif cache.alive_broker(leader, listener) is None:
            elsewhere = ctx.api_version >= 6 and cache.alive_broker(leader) is not None
            leader, error = -1, ErrorCode.LISTENER_NOT_FOUND if elsewhere else ErrorCode.LEADER_NOT_AVAILABLE
        out.append({
            "error_code": error,
            "partition_index": p,
            "leader_id": leader,
            "leader_epoch": pm.leader_epoch,
            "replica_nodes": list(pm.replicas),
            "isr_nodes": list(pm.isr),
            "offline_replicas": list(pm.offline_replicas),
        })
    return out


def topic_entry(ctx: RequestContext, info: TopicInfo) -> dict[str, Any]:
    return {
        "error_code": 0,
        "name": info.name,
        "topic_id": info.topic_id,
        "is_internal": info.internal,
        "partitions": partition_entries(ctx, info),
        "topic_authorized_operations": -2147483648,
    }


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
    topics_out: list[dict[str, Any]],
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
                topic_entry(ctx, info)
                if info is not None
                else {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []}
            )


@handler(3)
async def handle_metadata(ctx: RequestContext, request: Any) -> dict[str, Any]:
    broker = ctx.broker
    cache = broker.metadata_cache
    version = ctx.api_version
    topics_out: list[dict[str, Any]] = []
    requested = request.topics
    authorizer = getattr(broker, "authorizer", None)
    if requested is None or (version == 0 and not requested):
        # all topics: those the principal may not DESCRIBE are left out, as Kafka does
        topics_out = [
            topic_entry(ctx, t)
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
                    topics_out.append(topic_entry(ctx, info))
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
                topics_out.append(topic_entry(ctx, info))
        if creating:
            await _answer_auto_created(ctx, creating, topics_out)
    if getattr(request, "include_topic_authorized_operations", False):
        for entry in topics_out:
            if entry.get("error_code") == 0 and entry.get("name"):
                ops = authorized_operations(ctx, ResourceType.TOPIC, entry["name"])
                entry["topic_authorized_operations"] = ops
    cluster_ops = -2147483648
    if getattr(request, "include_cluster_authorized_operations", False):  # (v8-v10)
        cluster_ops = authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
    return {
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
        "topics": topics_out,
        "cluster_authorized_operations": cluster_ops,
    }
