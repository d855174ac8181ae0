"""Topic administration and cluster description: CreateTopics (19), DeleteTopics (20),
DescribeCluster (60)."""

from __future__ import annotations

from typing import Any

from ...metadata.topics import TopicError
from ...protocol.errors import ErrorCode
from ...security.authorizer import CLUSTER_NAME
from ..authz import AclOperation, ResourceType, authorized, authorized_cluster, authorized_operations
from ..client_quotas import ThrottlingQuotaExceeded
from ..context import RequestContext
from . import handler


def record_mutations(ctx: RequestContext, permits: int, strict: bool) -> str | None:
    """KIP-599: take ``permits`` partition mutations from the principal's
    ``controller_mutation_rate``; the error message when a strict request is over its quota."""
    broker = ctx.broker
    entities = getattr(broker, "client_quota_entities", None)
    if not entities:
        return None
    try:
        broker.mutation_quotas.record(
            entities, ctx.session.principal, ctx.client_id or "", permits, broker.clock.monotonic_ms(), strict
        )
    except ThrottlingQuotaExceeded as e:
        return str(e)
    return None


def mutation_throttle(ctx: RequestContext) -> int:
    """The response's throttle time for the mutation quota (the channel is muted as long)."""
    broker = ctx.broker
    entities = getattr(broker, "client_quota_entities", None)
    if not entities:
        return 0
    throttle = broker.mutation_quotas.throttle_ms(
        entities, ctx.session.principal, ctx.client_id or "", broker.clock.monotonic_ms()
    )
    ctx.session.throttle_ms = max(ctx.session.throttle_ms, throttle)
    return throttle


@handler(19)
async def handle_create_topics(ctx: RequestContext, request: Any) -> dict[str, Any]:
    broker = ctx.broker
    out = []
    validate_only = getattr(request, "validate_only", False)
    seen: set[str] = set()
    # Kafka: CREATE on the cluster, else CREATE on each topic (TOPIC_AUTHORIZATION_FAILED)
    cluster_create = authorized_cluster(ctx, AclOperation.CREATE)
    for t in request.topics:
        name = str(t.name)
        entry: dict[str, Any] = {
            "name": name,
            "topic_id": None,
            "error_code": 0,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
        }
        if name in seen:
            entry.update(
                error_code=ErrorCode.INVALID_REQUEST, error_message="Duplicate topic name in request"
            )
            out.append(entry)
            continue
        seen.add(name)
        if not cluster_create and not authorized(ctx, AclOperation.CREATE, ResourceType.TOPIC, name):
            entry.update(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Authorization failed."
            )
            out.append(entry)
            continue
        partitions = t.num_partitions
        rf = t.replication_factor
        if t.assignments:
            partitions = len(t.assignments)
            if broker.quorum is None and any(list(a.broker_ids) != [broker.node_id] for a in t.assignments):
                # (on the quorum the controller checks the assignment against its brokers)
                entry.update(
                    error_code=ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    error_message="Replica assignment names brokers that do not exist",
                )
                out.append(entry)
                continue
        if partitions == -1:
            partitions = broker.config["num.partitions"]
        if rf == -1:
            rf = broker.config["default.replication.factor"]
        if rf != 1 and not t.assignments and broker.quorum is None:  # (the controller places replicas)
            entry.update(
                error_code=ErrorCode.INVALID_REPLICATION_FACTOR,
                error_message=f"Replication factor: {rf} larger than available brokers: 1.",
            )
            out.append(entry)
            continue
        configs = {c.name: c.value for c in t.configs if c.value is not None}
        exists = broker.metadata_cache.topic(name) is not None  # (answered TOPIC_ALREADY_EXISTS below)
        if not validate_only and not exists:  # Kafka: v6+ refuses a topic past the quota, older throttle
            over = record_mutations(ctx, max(int(partitions), 0), strict=ctx.api_version >= 6)
            if over is not None:
                entry.update(error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, error_message=over)
                out.append(entry)
                continue
        try:
            # off the event loop, published only once every partition exists (Broker docstring)
            assignments = [
                [int(b) for b in a.broker_ids] for a in sorted(t.assignments, key=lambda a: a.partition_index)
            ]
            info = await broker.create_topic_async(
                name, partitions, configs, validate_only=validate_only, replication_factor=rf,
                assignments=assignments,
            )
        except TopicError as e:
            entry.update(error_code=e.code, error_message=str(e))
            out.append(entry)
            continue
        entry.update(
            topic_id=info.topic_id, num_partitions=info.partitions, replication_factor=rf, configs=[]
        )
        out.append(entry)
    return {"throttle_time": mutation_throttle(ctx), "topics": out}


@handler(20)
async def handle_delete_topics(ctx: RequestContext, request: Any) -> dict[str, Any]:
    broker = ctx.broker
    out = []
    if ctx.api_version >= 6:
        items = [(t.name, t.topic_id) for t in request.topics]
    else:
        items = [(n, None) for n in request.topic_names]
    for name, tid in items:
        if name is None and tid is not None:
            info = broker.metadata_cache.topic_by_id(tid)
            if info is None:
                out.append(
                    {
                        "name": None,
                        "topic_id": tid,
                        "error_code": ErrorCode.UNKNOWN_TOPIC_ID,
                        "error_message": "Topic id not found",
                    }
                )
                continue
            name = info.name
        name = str(name)
        if not authorized(ctx, AclOperation.DELETE, ResourceType.TOPIC, name):
            # Kafka: a topic named by id is not named back to who may not DESCRIBE it
            hidden = tid is not None and not authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)
            out.append(
                {
                    "name": None if hidden else name,
                    "topic_id": tid,
                    "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    "error_message": "Authorization failed.",
                }
            )
            continue
        if not broker.config["delete.topic.enable"]:
            out.append({"name": name, "error_code": ErrorCode.TOPIC_DELETION_DISABLED})
            continue
        existing = broker.metadata_cache.topic(name)
        if existing is not None:  # KIP-599: v5+ refuses a topic past the quota
            over = record_mutations(ctx, existing.partitions, strict=ctx.api_version >= 5)
            if over is not None:
                out.append({"name": name, "topic_id": tid,
                            "error_code": ErrorCode.THROTTLING_QUOTA_EXCEEDED, "error_message": over})
                continue
        try:
            info = await broker.delete_topic_async(name)
        except TopicError as e:
            out.append({"name": name, "topic_id": tid, "error_code": e.code, "error_message": str(e)})
            continue
        out.append({"name": name, "topic_id": info.topic_id, "error_code": 0, "error_message": None})
    return {"throttle_time": mutation_throttle(ctx), "responses": out}


# DescribeCluster endpoint types (KIP-919): brokers answer for brokers only
_ENDPOINT_BROKER, _ENDPOINT_CONTROLLER = 1, 2


@handler(60)
async def handle_describe_cluster(ctx: RequestContext, request: Any) -> dict[str, Any]:
    """Kafka's broker answer: the brokers of this listener (v2 ``include_fenced_brokers`` adds
    the fenced ones, ``is_fenced``; a single running node is never fenced) and a random live
    broker as controller id (KRaft hides the controllers). An endpoint type other than brokers is
    refused as Kafka does: UNSUPPORTED_ENDPOINT_TYPE for an unknown one, MISMATCHED_ENDPOINT_TYPE
    for controllers (INVALID_REQUEST on v0, which has no such codes)."""
    cache = ctx.broker.metadata_cache
    endpoint_type = int(getattr(request, "endpoint_type", _ENDPOINT_BROKER))
    v0 = ctx.api_version == 0
    if endpoint_type not in (_ENDPOINT_BROKER, _ENDPOINT_CONTROLLER):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.INVALID_REQUEST if v0 else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            "error_message": f"Unsupported endpoint type {endpoint_type}",
        }
    if endpoint_type != _ENDPOINT_BROKER:
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.INVALID_REQUEST if v0 else ErrorCode.MISMATCHED_ENDPOINT_TYPE,
            "error_message": "The request was sent to an endpoint of type BROKER, "
            "but we wanted an endpoint of type CONTROLLER",
        }
    listener = ctx.session.listener
    brokers = [(b, False) for b in cache.alive_brokers(listener)]
    if getattr(request, "include_fenced_brokers", False):
        brokers += [(b, True) for b in cache.fenced_brokers(listener)]
        brokers.sort(key=lambda e: e[0].node_id)
    return {
        "throttle_time": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": _ENDPOINT_BROKER,
        "cluster_id": cache.cluster_id(),
        "controller_id": cache.controller_id(),
        "brokers": [
            {"broker_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack, "is_fenced": fenced}
            for b, fenced in brokers
        ],
        "cluster_authorized_operations": authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
        if getattr(request, "include_cluster_authorized_operations", False)
        else -2147483648,
    }
