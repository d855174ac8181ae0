"""Group APIs: FindCoordinator (10), OffsetCommit (8), OffsetFetch (9), JoinGroup (11),
Heartbeat (12), LeaveGroup (13), SyncGroup (14), DescribeGroups (15), ListGroups (16),
DeleteGroups (42), OffsetDelete (47), ConsumerGroupHeartbeat (68), ConsumerGroupDescribe (69).

Thin glue: each handler maps the request of any version onto :class:`GroupCoordinator` and the
result onto the response dict (the codec drops what the version lacks). The coordinator of a group
or transactional id is the leader of its internal-topic partition (a single node: itself); the
:class:`GroupCoordinator` answers NOT_COORDINATOR for a group whose partition is led elsewhere.
"""

from __future__ import annotations

import uuid
from typing import Any

from ...coordinator.consumer import TopicCatalog
from ...coordinator.group_coordinator import GroupCoordinator, OffsetAndMetadata
from ...coordinator.records import partition_for
from ...protocol.codec import optional_duration_ms
from ...protocol.errors import ErrorCode, KafkaError
from ..authz import AclOperation, ResourceType, authorized, authorized_cluster, authorized_operations
from ..context import RequestContext
from . import handler


def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    coord = getattr(ctx.broker, "group_coordinator", None)
    if coord is None:
        from ...protocol.errors import KafkaError

        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert isinstance(coord, GroupCoordinator)
    return coord


def _require_group(ctx: RequestContext, operation: int, group_id: str) -> None:
    """The whole request fails with GROUP_AUTHORIZATION_FAILED without ``operation`` on the group."""
    if not authorized(ctx, operation, ResourceType.GROUP, group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)


def _client_host(ctx: RequestContext) -> str:
    host = ctx.client_host or ""
    return host if host.startswith("/") else f"/{host}"


# --------------------------------------------------------------------------- FindCoordinator


@handler(10)
async def handle_find_coordinator(ctx: RequestContext, request: Any) -> dict[str, Any]:
    """The coordinator of a group (key type 0) or transactional id (1) is the leader of its
    partition of ``__consumer_offsets`` / ``__transaction_state`` (Kafka's ``partitionFor`` then
    the partition's leader), at its endpoint of the listener the request came in on;
    COORDINATOR_NOT_AVAILABLE when that partition has no leader (or the leader no endpoint
    there), as Kafka answers. A single node leads every partition: itself."""
    broker = ctx.broker
    cache = broker.metadata_cache
    listener = ctx.session.listener
    key_type = int(getattr(request, "key_type", 0))

    def none(key: str, code: int, message: str | None) -> dict[str, Any]:
        return {"key": key, "error_code": code, "error_message": message,
                "node_id": -1, "host": "", "port": -1}

    def one(key: str) -> dict[str, Any]:
        if key_type not in (0, 1):
            return none(key, ErrorCode.INVALID_REQUEST, f"unknown key type {key_type}")
        # Kafka: DESCRIBE on the group / transactional id
        if key_type == 0 and not authorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
            return none(key, ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
        if key_type == 1 and not authorized(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return none(key, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None)
        topic = "__consumer_offsets" if key_type == 0 else "__transaction_state"
        count = cache.num_partitions(topic)
        leader = cache.leader_id(topic, partition_for(key, count)) if count else None
        node = cache.alive_broker(leader, listener) if leader is not None and leader >= 0 else None
        if node is None:
            return none(key, ErrorCode.COORDINATOR_NOT_AVAILABLE, None)
        return {
            "key": key,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "node_id": node.node_id,
            "host": node.host,
            "port": node.port,
        }

    if ctx.api_version >= 4:
        return {"throttle_time": 0, "coordinators": [one(str(k)) for k in request.coordinator_keys]}
    entry = one(str(request.key))
    entry.pop("key")
    return {"throttle_time": 0, **entry}


# --------------------------------------------------------------------------- classic protocol


def _is_share_group(ctx: RequestContext, group_id: str) -> bool:
    share = getattr(ctx.broker, "share_coordinator", None)
    return share is not None and group_id in share.groups


@handler(11)
async def handle_join_group(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    _require_group(ctx, AclOperation.READ, str(request.group_id))
    if _is_share_group(ctx, str(request.group_id)):  # a share group's id (KIP-932)
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": None,
            "leader": "",
            "member_id": str(request.member_id or ""),
            "members": [],
        }
    session_ms = optional_duration_ms(request.session_timeout, -1)
    result = await coord.join_group(
        str(request.group_id),
        member_id=str(request.member_id or ""),
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=str(request.protocol_type),
        protocols=[(str(p.name), bytes(p.metadata)) for p in request.protocols],
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=optional_duration_ms(getattr(request, "rebalance_timeout", None), session_ms),
        client_id=ctx.client_id or "",
        client_host=_client_host(ctx),
        api_version=ctx.api_version,
    )
    members = [
        {"member_id": mid, "group_instance_id": iid, "metadata": meta} for mid, iid, meta in result.members
    ]
    return {
        "throttle_time": 0,
        "error_code": result.error,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "leader": result.leader,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": members,
    }


@handler(14)
async def handle_sync_group(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    _require_group(ctx, AclOperation.READ, str(request.group_id))
    result = await coord.sync_group(
        str(request.group_id),
        member_id=str(request.member_id),
        generation_id=int(request.generation_id),
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments={str(a.member_id): bytes(a.assignment) for a in request.assignments},
    )
    return {
        "throttle_time": 0,
        "error_code": result.error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }


@handler(12)
async def handle_heartbeat(ctx: RequestContext, request: Any) -> dict[str, Any]:
    _require_group(ctx, AclOperation.READ, str(request.group_id))
    err = await _coordinator(ctx).heartbeat(
        str(request.group_id),
        member_id=str(request.member_id),
        generation_id=int(request.generation_id),
        group_instance_id=getattr(request, "group_instance_id", None),
    )
    return {"throttle_time": 0, "error_code": err}


@handler(13)
async def handle_leave_group(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    _require_group(ctx, AclOperation.READ, str(request.group_id))
    if ctx.api_version >= 3:
        members = [(str(m.member_id or ""), m.group_instance_id) for m in request.members]
    else:
        members = [(str(request.member_id), None)]
    top, errs = await coord.leave_group(str(request.group_id), members)
    if ctx.api_version < 3:
        if top == ErrorCode.NONE and errs:
            top = errs[0]
        return {"throttle_time": 0, "error_code": top}
    return {
        "throttle_time": 0,
        "error_code": top,
        "members": [
            {"member_id": mid, "group_instance_id": iid, "error_code": e}
            for (mid, iid), e in zip(members, errs, strict=False)
        ],
    }


# --------------------------------------------------------------------------- offsets


@handler(8)
async def handle_offset_commit(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    broker = ctx.broker
    # Kafka: READ on the group (else every partition GROUP_AUTHORIZATION_FAILED) and on each topic
    _require_group(ctx, AclOperation.READ, str(request.group_id))
    offsets: dict[tuple[str, int], tuple[int, int, str | None]] = {}
    errors: dict[tuple[str, int], int] = {}
    order: list[tuple[str, list[int]]] = []
    for t in request.topics:
        name = str(t.name)
        count = broker.metadata_cache.num_partitions(name)
        readable = authorized(ctx, AclOperation.READ, ResourceType.TOPIC, name)
        parts = []
        for p in t.partitions:
            tp = (name, int(p.partition_index))
            parts.append(tp[1])
            if not readable:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif count is None or not 0 <= tp[1] < count:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                offsets[tp] = (
                    int(p.committed_offset),
                    int(getattr(p, "committed_leader_epoch", -1)),
                    p.committed_metadata,
                )
        order.append((name, parts))
    if offsets or not errors:
        retention = optional_duration_ms(getattr(request, "retention_time", None), -1)
        errors.update(
            await coord.commit_offsets(
                str(request.group_id),
                member_id=str(getattr(request, "member_id", "") or ""),
                generation_id=int(getattr(request, "generation_id_or_member_epoch", -1)),
                group_instance_id=getattr(request, "group_instance_id", None),
                offsets=offsets,
                retention_ms=retention,
                api_version=ctx.api_version,
            )
        )
    return {
        "throttle_time": 0,
        "topics": [
            {
                "name": name,
                "partitions": [{"partition_index": p, "error_code": errors.get((name, p), 0)} for p in parts],
            }
            for name, parts in order
        ],
    }


def _fetch_topics(
    coord: GroupCoordinator,
    group_id: str,
    topics: Any,
    member_id: str | None,
    member_epoch: int,
    partition_errors: bool,
    require_stable: bool = False,
) -> tuple[int, list[dict[str, Any]]]:
    wanted = (
        None if topics is None else [(str(t.name), [int(p) for p in t.partition_indexes]) for t in topics]
    )
    err, found = coord.fetch_offsets(group_id, wanted, member_id=member_id, member_epoch=member_epoch)
    out: list[dict[str, Any]] = []
    if err != ErrorCode.NONE and partition_errors and wanted is not None:
        # v0/v1 have no group-level error: report it on every partition
        for name, wanted_parts in wanted:
            out.append(
                {
                    "name": name,
                    "partitions": [
                        {
                            "partition_index": p,
                            "committed_offset": -1,
                            "committed_leader_epoch": -1,
                            "metadata": "",
                            "error_code": err,
                        }
                        for p in wanted_parts
                    ],
                }
            )
        return err, out
    for name, parts_map in found.items():
        parts: list[dict[str, Any]] = []
        for p, om in parts_map.items():
            if require_stable and coord.has_pending_txn(group_id, (name, p)):
                # KIP-447: a transactional commit for this partition is not finished yet
                parts.append(
                    {
                        "partition_index": p,
                        "committed_offset": -1,
                        "committed_leader_epoch": -1,
                        "metadata": "",
                        "error_code": ErrorCode.UNSTABLE_OFFSET_COMMIT,
                    }
                )
            elif isinstance(om, OffsetAndMetadata):
                parts.append(
                    {
                        "partition_index": p,
                        "committed_offset": om.offset,
                        "committed_leader_epoch": om.leader_epoch,
                        "metadata": om.metadata,
                        "error_code": 0,
                    }
                )
            else:
                parts.append(
                    {
                        "partition_index": p,
                        "committed_offset": -1,
                        "committed_leader_epoch": -1,
                        "metadata": "",
                        "error_code": 0,
                    }
                )
        out.append({"name": name, "partitions": parts})
    return err, out


@handler(9)
async def handle_offset_fetch(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    if ctx.api_version >= 8:
        groups = []
        for g in request.groups:
            if not authorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, str(g.group_id)):
                code = ErrorCode.GROUP_AUTHORIZATION_FAILED
                groups.append({"group_id": str(g.group_id), "topics": [], "error_code": code})
                continue
            err, topics = _fetch_topics(
                coord,
                str(g.group_id),
                g.topics,
                getattr(g, "member_id", None),
                int(getattr(g, "member_epoch", -1)),
                False,
                bool(getattr(request, "require_stable", False)),
            )
            groups.append(
                {
                    "group_id": str(g.group_id),
                    "topics": _describable_topics(ctx, topics, g.topics is not None) if err == 0 else [],
                    "error_code": err,
                }
            )
        return {"throttle_time": 0, "groups": groups}
    _require_group(ctx, AclOperation.DESCRIBE, str(request.group_id))
    err, topics = _fetch_topics(
        coord,
        str(request.group_id),
        request.topics,
        None,
        -1,
        ctx.api_version < 2,
        bool(getattr(request, "require_stable", False)),
    )
    return {
        "throttle_time": 0,
        "topics": _describable_topics(ctx, topics, request.topics is not None)
        if err == 0 or ctx.api_version < 2
        else [],
        "error_code": err,
    }


def _describable_topics(
    ctx: RequestContext, topics: list[dict[str, Any]], named: bool
) -> list[dict[str, Any]]:
    """OffsetFetch's topics the principal may DESCRIBE: the others are left out of an
    all-topics fetch and answered TOPIC_AUTHORIZATION_FAILED when named (Kafka)."""
    if getattr(ctx.broker, "authorizer", None) is None:
        return topics
    out = []
    for t in topics:
        if authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, t["name"]):
            out.append(t)
        elif named:
            out.append(
                {
                    "name": t["name"],
                    "partitions": [
                        {**p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                         "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
                        for p in t["partitions"]
                    ],
                }
            )
    return out


@handler(47)
async def handle_offset_delete(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    broker = ctx.broker
    if not authorized(ctx, AclOperation.DELETE, ResourceType.GROUP, str(request.group_id)):
        return {"throttle_time": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "topics": []}
    wanted: list[tuple[str, int]] = []
    errors: dict[tuple[str, int], int] = {}
    for t in request.topics:
        name = str(t.name)
        count = broker.metadata_cache.num_partitions(name)
        readable = authorized(ctx, AclOperation.READ, ResourceType.TOPIC, name)
        for p in t.partitions:
            tp = (name, int(p.partition_index))
            if not readable:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif count is None or not 0 <= tp[1] < count:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                wanted.append(tp)
    err, result = await coord.delete_offsets(str(request.group_id), wanted)
    if err != ErrorCode.NONE:
        return {"throttle_time": 0, "error_code": err, "topics": []}
    errors.update(result)
    return {
        "throttle_time": 0,
        "error_code": 0,
        "topics": [
            {
                "name": str(t.name),
                "partitions": [
                    {
                        "partition_index": int(p.partition_index),
                        "error_code": errors.get((str(t.name), int(p.partition_index)), 0),
                    }
                    for p in t.partitions
                ],
            }
            for t in request.topics
        ],
    }


# --------------------------------------------------------------------------- admin


@handler(15)
async def handle_describe_groups(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    version = ctx.api_version
    groups = [
        coord.describe_group(str(g), version)
        if authorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, str(g))
        else {
            "group_id": str(g),
            "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
            "error_message": None,
            "group_state": "",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
        }
        for g in request.groups
    ]
    if getattr(request, "include_authorized_operations", False):  # (v3+)
        for entry in groups:
            if not entry.get("error_code"):
                ops = authorized_operations(ctx, ResourceType.GROUP, entry["group_id"])
                entry["authorized_operations"] = ops
    return {"throttle_time": 0, "groups": groups}


@handler(16)
async def handle_list_groups(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    states = [str(s) for s in getattr(request, "states_filter", ()) or ()]
    types = [str(t) for t in getattr(request, "types_filter", ()) or ()]
    groups = coord.list_groups(states, types)
    share = getattr(ctx.broker, "share_coordinator", None)
    if share is not None:  # share groups (KIP-932): type "share", protocol type "share"
        want_states = {s.lower() for s in states}
        want_types = {t.lower() for t in types}
        for g in share.list_groups():
            if want_states and g.state.lower() not in want_states:
                continue
            if want_types and "share" not in want_types:
                continue
            groups.append(
                {
                    "group_id": g.group_id,
                    "protocol_type": "share",
                    "group_state": g.state,
                    "group_type": "share",
                }
            )
        groups.sort(key=lambda g: g["group_id"])
    if getattr(ctx.broker, "authorizer", None) is not None and not authorized_cluster(
        ctx, AclOperation.DESCRIBE
    ):
        # Kafka: without DESCRIBE on the cluster, only the groups the principal may DESCRIBE
        groups = [
            g for g in groups if authorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g["group_id"])
        ]
    return {"throttle_time": 0, "error_code": 0, "groups": groups}


@handler(42)
async def handle_delete_groups(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    names = [str(g) for g in request.groups_names]
    denied = {g for g in names if not authorized(ctx, AclOperation.DELETE, ResourceType.GROUP, g)}
    share = getattr(ctx.broker, "share_coordinator", None)
    share_names = [g for g in names if share is not None and g in share.groups and g not in denied]
    result: dict[str, int] = dict.fromkeys(denied, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    result |= await coord.delete_groups([g for g in names if g not in share_names and g not in denied])
    for g in share_names:
        assert share is not None
        result[g] = await share.delete_group(g)
    return {"throttle_time": 0, "results": [{"group_id": g, "error_code": result[g]} for g in names]}


# --------------------------------------------------------------------------- KIP-848


@handler(68)
async def handle_consumer_group_heartbeat(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    _require_group(ctx, AclOperation.READ, str(request.group_id))
    if _is_share_group(ctx, str(request.group_id)):  # a share group's id (KIP-932)
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.GROUP_ID_NOT_FOUND,
            "error_message": f"Group {request.group_id} is not a consumer group.",
            "member_id": None,
            "member_epoch": -1,
            "heartbeat_interval": 0,
            "assignment": None,
        }
    cache = ctx.broker.metadata_cache

    def resolve(name: str) -> tuple[uuid.UUID, int] | None:
        info = cache.topic(name)
        return (info.topic_id, info.partitions) if info is not None else None

    owned: dict[str, set[int]] | None = None
    if request.topic_partitions is not None:
        owned = {}
        for tp in request.topic_partitions:
            info = cache.topic_by_id(tp.topic_id)
            if info is not None:
                owned.setdefault(info.name, set()).update(int(p) for p in tp.partitions)
    names = request.subscribed_topic_names
    if names and not all(authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, str(n)) for n in names):
        # Kafka: a member may not subscribe to a topic it may not DESCRIBE (the whole heartbeat
        # is refused, nothing is assigned)
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            "error_message": "The member is not authorized to describe some of its subscribed topics.",
            "member_id": None,
            "member_epoch": -1,
            "heartbeat_interval": 0,
            "assignment": None,
        }

    def describable() -> list[str]:  # a regex subscription matches only topics it may DESCRIBE
        return [
            info.name
            for info in cache.topics()
            if not info.internal and authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, info.name)
        ]

    result = await coord.consumer_group_heartbeat(
        str(request.group_id),
        member_id=str(request.member_id or ""),
        member_epoch=int(request.member_epoch),
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=optional_duration_ms(request.rebalance_timeout, -1),
        subscribed_topic_names=None if names is None else [str(n) for n in names],
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned=owned,
        client_id=ctx.client_id or "",
        client_host=_client_host(ctx),
        resolve=resolve,
        catalog=TopicCatalog(cache.topics_version(), describable),
    )
    return heartbeat_response(result)


def heartbeat_response(result: Any, *, assignment_on_error: bool = True) -> dict[str, Any]:
    """A ConsumerGroupHeartbeat or ShareGroupHeartbeat response from the coordinator's result
    (the two responses share these fields)."""
    assignment = None
    if result.assignment is not None and (assignment_on_error or result.error == ErrorCode.NONE):
        assignment = {
            "topic_partitions": [{"topic_id": tid, "partitions": parts} for tid, parts in result.assignment]
        }
    return {
        "throttle_time": 0,
        "error_code": result.error,
        "error_message": result.error_message,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": result.heartbeat_interval_ms,
        "assignment": assignment,
    }


@handler(69)
async def handle_consumer_group_describe(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    groups = []
    for g in request.group_ids:
        if authorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, str(g)):
            groups.append(coord.consumer_group_describe(str(g)))
        else:
            groups.append({"group_id": str(g), "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                           "error_message": None, "group_state": "", "group_epoch": -1,
                           "assignment_epoch": -1, "assignor_name": "", "members": []})
    return {"throttle_time": 0, "groups": groups}
