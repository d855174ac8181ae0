"""Share-group APIs (KIP-932): ShareGroupHeartbeat (76), ShareGroupDescribe (77), ShareFetch (78),
ShareAcknowledge (79), DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91),
DeleteShareGroupOffsets (92).

Glue between the requests and :class:`~strom.coordinator.share_coordinator.ShareCoordinator`.
ShareFetch: the share session is checked and updated first; then the acknowledgements piggybacked
on the request are applied (each partition's result in ``acknowledge_error_code``); a closing
request (epoch -1) releases the member's records and fetches nothing; otherwise every partition
of the session is read from the next acquirable offset and what the share-partition lets this
member acquire is returned with the acquired ranges (the client skips records outside them). If
nothing was acquired the request waits up to ``max_wait`` for new data or released records.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from ...coordinator.share_coordinator import ShareCoordinator
from ...protocol.codec import optional_duration_ms
from ...protocol.errors import ErrorCode, KafkaError
from ...protocol.records import iter_batches
from ..context import RequestContext
from . import handler
from .groups import heartbeat_response

log = logging.getLogger(__name__)


def _coordinator(ctx: RequestContext) -> ShareCoordinator:
    coord = getattr(ctx.broker, "share_coordinator", None)
    if coord is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert isinstance(coord, ShareCoordinator)
    if not coord.config.enabled:  # Kafka without share.version: the share APIs are refused
        raise KafkaError(
            ErrorCode.UNSUPPORTED_VERSION, "Share groups are not enabled (group.share.enable=false)"
        )
    return coord


def _client_host(ctx: RequestContext) -> str:
    host = ctx.client_host or ""
    return host if host.startswith("/") else f"/{host}"


# --------------------------------------------------------------------------- membership


@handler(76)
async def handle_share_group_heartbeat(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    cache = ctx.broker.metadata_cache

    def resolve(name: str) -> tuple[uuid.UUID, int] | None:
        info = cache.topic(name)
        return (info.topic_id, info.partitions) if info is not None and not info.internal else None

    names = request.subscribed_topic_names
    result = await coord.heartbeat(
        str(request.group_id),
        member_id=str(request.member_id or ""),
        member_epoch=int(request.member_epoch),
        rack_id=request.rack_id,
        subscribed_topic_names=None if names is None else [str(n) for n in names],
        client_id=ctx.client_id or "",
        client_host=_client_host(ctx),
        resolve=resolve,
    )
    return heartbeat_response(result, assignment_on_error=False)


@handler(77)
async def handle_share_group_describe(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    return {"throttle_time": 0, "groups": [coord.describe(str(g)) for g in request.group_ids]}


# --------------------------------------------------------------------------- fetch / acknowledge


def _leader(ctx: RequestContext) -> dict[str, int]:
    return {"leader_id": ctx.broker.node_id, "leader_epoch": 0}


def _node_endpoints(ctx: RequestContext) -> list[dict[str, Any]]:
    return [
        {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
        for b in ctx.broker.metadata_cache.alive_brokers(ctx.session.listener)
    ]


def _partition_error(ctx: RequestContext, topic_id: uuid.UUID | None, partition: int) -> int:
    info = ctx.broker.metadata_cache.topic_by_id(topic_id) if topic_id is not None else None
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_ID
    if not ctx.broker.replica_manager.is_online(info.name, partition):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NONE


async def _apply_acks(
    ctx: RequestContext, coord: ShareCoordinator, group: str, member: str, topics: Any
) -> dict[tuple[uuid.UUID, int], int]:
    out: dict[tuple[uuid.UUID, int], int] = {}
    renew_ok = coord.group_config(group)["share.renew.acknowledge.enable"] == "true"
    for t in topics:
        tid = t.topic_id if t.topic_id is not None else uuid.UUID(int=0)
        for p in t.partitions:
            batches = [
                (int(b.first_offset), int(b.last_offset), [int(x) for x in b.acknowledge_types])
                for b in p.acknowledgement_batches
            ]
            if not batches:
                continue
            err = _partition_error(ctx, tid, int(p.partition_index))
            if not renew_ok and any(4 in types for _f, _l, types in batches):
                err = ErrorCode.INVALID_REQUEST  # RENEW with share.renew.acknowledge.enable=false
            if err == ErrorCode.NONE:
                err = await coord.acknowledge(group, member, tid, int(p.partition_index), batches)
            out[(tid, int(p.partition_index))] = err
    return out


def _reader(ctx: RequestContext, name: str, partition: int, budget: int, isolation: str) -> Any:
    plog = ctx.broker.replica_manager.get_log(name, partition)

    def read(offset: int) -> tuple[bytes, int, list[tuple[int, int]]] | None:
        if plog is None:
            return None
        committed = isolation == "read_committed"
        upper = plog.last_stable_offset if committed else plog.high_watermark
        if offset >= upper or offset < plog.log_start_offset:
            return None
        data = plog.read_bytes(offset, max(budget, 1), max_offset=upper, min_one_message=True)
        aborted = plog.collect_aborted(offset, upper) if committed else []
        last = -1
        skips: list[tuple[int, int]] = []
        for _pos, h in iter_batches(data):
            last = h.next_offset - 1
            if (
                aborted
                and h.is_transactional
                and not h.is_control
                and any(
                    a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset
                    for a in aborted
                )
            ):
                skips.append((h.base_offset, h.last_offset))
        if last < offset:
            return None
        return data, last, skips

    return read


@handler(78)
async def handle_share_fetch(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    group = str(request.group_id or "")
    member = str(request.member_id or "")
    epoch = int(request.share_session_epoch)
    lock_ms = coord.lock_duration_ms(group) if group else 0
    base: dict[str, Any] = {
        "throttle_time": 0,
        "error_code": ErrorCode.NONE,
        "acquisition_lock_timeout": lock_ms,
        "responses": [],
        "node_endpoints": [],
    }
    if not group or not member:
        return {
            **base,
            "error_code": ErrorCode.INVALID_REQUEST,
            "error_message": "GroupId and MemberId must be set in a ShareFetch request.",
        }
    has_acks = any(p.acknowledgement_batches for t in request.topics for p in t.partitions)
    if epoch == 0 and has_acks:
        return {
            **base,
            "error_code": ErrorCode.INVALID_REQUEST,
            "error_message": "Acknowledge data present on initial fetch request",
        }
    add = [
        (t.topic_id if t.topic_id is not None else uuid.UUID(int=0), int(p.partition_index))
        for t in request.topics
        for p in t.partitions
    ]
    forget = [
        (t.topic_id if t.topic_id is not None else uuid.UUID(int=0), int(p))
        for t in request.forgotten_topics_data
        for p in t.partitions
    ]
    err, session = coord.open_session(group, member, epoch, add, forget, ctx.connection_id)
    if err != ErrorCode.NONE or session is None:
        return {**base, "error_code": err}
    results: dict[uuid.UUID, dict[int, dict[str, Any]]] = {}

    def part(tid: uuid.UUID, p: int) -> dict[str, Any]:
        d = results.setdefault(tid, {})
        if p not in d:
            d[p] = {
                "partition_index": p,
                "error_code": ErrorCode.NONE,
                "acknowledge_error_code": ErrorCode.NONE,
                "current_leader": _leader(ctx),
                "records": b"",
                "acquired_records": [],
            }
        return d[p]

    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "ShareFetch %s %s epoch %d: %s forget %s",
            group,
            member,
            epoch,
            request.topics,
            request.forgotten_topics_data,
        )
    for (tid, p), code in (await _apply_acks(ctx, coord, group, member, request.topics)).items():
        part(tid, p)["acknowledge_error_code"] = code
    if epoch == -1:
        await coord.release_member(group, member)
        return {**base, "responses": _responses(results), "node_endpoints": _node_endpoints(ctx)}
    if getattr(request, "is_renew_ack", False):  # KIP-1222: renewing locks fetches nothing
        return {**base, "responses": _responses(results), "node_endpoints": _node_endpoints(ctx)}
    cfg = coord.group_config(group)
    isolation = cfg["share.isolation.level"]
    max_records = max(int(getattr(request, "max_records", 500) or 500), 1)
    max_bytes = int(getattr(request, "max_bytes", 0x7FFFFFFF) or 0x7FFFFFFF)
    max_wait_ms = optional_duration_ms(request.max_wait, 0)
    clock = ctx.broker.clock
    deadline = clock.monotonic_ms() + max_wait_ms
    for tid, p in sorted(session.partitions, key=lambda x: (str(x[0]), x[1])):
        perr = _partition_error(ctx, tid, p)
        if perr != ErrorCode.NONE:
            part(tid, p)["error_code"] = perr
    while True:
        acquired_total = 0
        bytes_total = 0
        for tid, p in sorted(session.partitions, key=lambda x: (str(x[0]), x[1])):
            if acquired_total >= max_records:
                break
            info = ctx.broker.metadata_cache.topic_by_id(tid)
            if info is None or not ctx.broker.replica_manager.is_online(info.name, p):
                continue
            read = _reader(ctx, info.name, p, max_bytes - bytes_total, isolation)
            code, data, ranges = await coord.acquire(
                group, member, tid, p, read, max_records - acquired_total
            )
            if code != ErrorCode.NONE:
                part(tid, p)["error_code"] = code
                continue
            if not ranges or data is None:
                continue
            d = part(tid, p)
            d["records"] = data
            d["acquired_records"] = [
                {
                    "first_offset": r.first_offset,
                    "last_offset": r.last_offset,
                    "delivery_count": r.delivery_count,
                }
                for r in ranges
            ]
            acquired_total += sum(r.last_offset - r.first_offset + 1 for r in ranges)
            bytes_total += len(data)
            if bytes_total >= max_bytes:
                break
        remaining = deadline - clock.monotonic_ms()
        if acquired_total or remaining <= 0 or not session.partitions:
            break
        if (group, member) not in coord.sessions:
            break  # the session closed meanwhile
        tps = []
        for tid, p in session.partitions:
            info = ctx.broker.metadata_cache.topic_by_id(tid)
            if info is not None:
                tps.append((info.name, p))
        await ctx.broker.replica_manager.purgatory.wait(tps, min(remaining, 500))
    return {**base, "responses": _responses(results), "node_endpoints": _node_endpoints(ctx)}


def _responses(results: dict[uuid.UUID, dict[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [
        {"topic_id": tid, "partitions": [parts[p] for p in sorted(parts)]} for tid, parts in results.items()
    ]


@handler(79)
async def handle_share_acknowledge(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    group = str(request.group_id or "")
    member = str(request.member_id or "")
    epoch = int(request.share_session_epoch)
    base: dict[str, Any] = {
        "throttle_time": 0,
        "error_code": ErrorCode.NONE,
        "acquisition_lock_timeout": coord.lock_duration_ms(group) if group else 0,
        "responses": [],
        "node_endpoints": [],
    }
    if not group or not member:
        return {**base, "error_code": ErrorCode.INVALID_REQUEST}
    if log.isEnabledFor(logging.DEBUG):
        log.debug("ShareAcknowledge %s %s epoch %d: %s", group, member, epoch, request.topics)
    err = coord.check_ack_session(group, member, epoch, ctx.connection_id)
    if err != ErrorCode.NONE:
        return {**base, "error_code": err}
    acks = await _apply_acks(ctx, coord, group, member, request.topics)
    if epoch == -1:
        await coord.release_member(group, member)
    by_topic: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for (tid, p), code in acks.items():
        by_topic.setdefault(tid, []).append(
            {"partition_index": p, "error_code": code, "current_leader": _leader(ctx)}
        )
    return {
        **base,
        "responses": [{"topic_id": tid, "partitions": parts} for tid, parts in by_topic.items()],
        "node_endpoints": _node_endpoints(ctx),
    }


# --------------------------------------------------------------------------- offsets admin


@handler(90)
async def handle_describe_share_group_offsets(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    broker = ctx.broker
    groups = []
    for g in request.groups:
        gid = str(g.group_id)
        state = coord.start_offsets(gid)
        topics_out = []
        if g.topics is None:  # every topic-partition the group has state for
            wanted: dict[str, list[int]] = {}
            for (tid, p), _sp in sorted(state.items(), key=lambda x: (str(x[0][0]), x[0][1])):
                info = broker.metadata_cache.topic_by_id(tid)
                if info is not None:
                    wanted.setdefault(info.name, []).append(p)
        else:
            wanted = {str(t.topic_name): [int(p) for p in t.partitions] for t in g.topics}
        for name, parts in wanted.items():
            info = broker.metadata_cache.topic(name)
            tid = info.topic_id if info is not None else uuid.UUID(int=0)
            out_parts = []
            for p in parts:
                sp = state.get((tid, p))
                plog = broker.replica_manager.get_log(name, p)
                if info is None or plog is None:
                    out_parts.append(
                        {
                            "partition_index": p,
                            "start_offset": -1,
                            "leader_epoch": -1,
                            "lag": -1,
                            "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            "error_message": "This server does not host this topic-partition.",
                        }
                    )
                    continue
                if sp is None:
                    out_parts.append(
                        {
                            "partition_index": p,
                            "start_offset": -1,
                            "leader_epoch": -1,
                            "lag": -1,
                            "error_code": ErrorCode.NONE,
                        }
                    )
                    continue
                done = sum(
                    1 for rec in sp.in_flight.values() if rec.state.name in ("ACKNOWLEDGED", "ARCHIVED")
                )
                lag = max(plog.high_watermark - sp.start_offset - done, 0)
                out_parts.append(
                    {
                        "partition_index": p,
                        "start_offset": sp.start_offset,
                        "leader_epoch": 0,
                        "lag": lag,
                        "error_code": ErrorCode.NONE,
                    }
                )
            topics_out.append({"topic_name": name, "topic_id": tid, "partitions": out_parts})
        err = ErrorCode.NONE
        msg = None
        if gid not in coord.groups and coord.other_group_exists(gid):
            err, msg, topics_out = ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.", []
        groups.append({"group_id": gid, "topics": topics_out, "error_code": err, "error_message": msg})
    return {"throttle_time": 0, "groups": groups}


@handler(91)
async def handle_alter_share_group_offsets(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    broker = ctx.broker
    gid = str(request.group_id)
    offsets: dict[tuple[uuid.UUID, int], int] = {}
    topic_results: list[dict[str, Any]] = []
    tids: list[uuid.UUID | None] = []
    for t in request.topics:
        info = broker.metadata_cache.topic(str(t.topic_name))
        parts = []
        for p in t.partitions:
            pi = int(p.partition_index)
            if info is None or not broker.replica_manager.is_online(info.name, pi):
                parts.append(
                    {
                        "partition_index": pi,
                        "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        "error_message": "This server does not host this topic-partition.",
                    }
                )
            else:
                offsets[(info.topic_id, pi)] = int(p.start_offset)
                parts.append({"partition_index": pi, "error_code": ErrorCode.NONE})
        topic_results.append(
            {
                "topic_name": str(t.topic_name),
                "topic_id": info.topic_id if info else uuid.UUID(int=0),
                "partitions": parts,
            }
        )
        tids.append(info.topic_id if info else None)
    err, msg, result = await coord.alter_offsets(gid, offsets)
    for tr, tid in zip(topic_results, tids, strict=True):
        for pr in tr["partitions"]:
            if err != ErrorCode.NONE:
                pr["error_code"], pr["error_message"] = err, msg
            elif tid is not None and (tid, pr["partition_index"]) in result:
                pr["error_code"] = result[(tid, pr["partition_index"])]
    return {"throttle_time": 0, "error_code": err, "error_message": msg, "responses": topic_results}


@handler(92)
async def handle_delete_share_group_offsets(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    broker = ctx.broker
    gid = str(request.group_id)
    known: list[uuid.UUID] = []
    out: list[dict[str, Any]] = []
    for t in request.topics:
        info = broker.metadata_cache.topic(str(t.topic_name))
        if info is None:
            out.append(
                {
                    "topic_name": str(t.topic_name),
                    "topic_id": uuid.UUID(int=0),
                    "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    "error_message": "This server does not host this topic-partition.",
                }
            )
        else:
            known.append(info.topic_id)
            out.append({"topic_name": info.name, "topic_id": info.topic_id, "error_code": ErrorCode.NONE})
    err, msg, result = await coord.delete_offsets(gid, known)
    if err != ErrorCode.NONE:
        return {"throttle_time": 0, "error_code": err, "error_message": msg, "responses": []}
    for r in out:
        if r["topic_id"] in result:
            r["error_code"] = result[r["topic_id"]]
    return {"throttle_time": 0, "error_code": ErrorCode.NONE, "error_message": None, "responses": out}
