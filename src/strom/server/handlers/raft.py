"""The KRaft quorum's APIs on a node's listeners: Vote (52), BeginQuorumEpoch (53),
EndQuorumEpoch (54), FetchSnapshot (59), the KRaft form of Fetch (1) and DescribeQuorum (55).

Each handler maps the kio request to the state machine's message (:mod:`strom.raft.wire`), hands
it to the broker's :class:`~strom.raft.manager.RaftManager` (``broker.raft_manager``, set by the
broker's composition root when it runs the quorum) and answers with the node's response, mapped
back and built at the version the peer sent. A Fetch is routed here by
:func:`strom.server.handlers.fetch.handle_fetch` when :func:`strom.raft.wire.is_raft_fetch` says
it is a replica's fetch of ``__cluster_metadata``; the node may park it (long poll) and answers
it when it has data or its wait ends. DescribeQuorum sent to a node that does not lead is
forwarded to the active controller through the broker's controller channel.

A node without a raft manager (no quorum running) answers the quorum RPCs with
BROKER_NOT_AVAILABLE, as Kafka's broker-only node does for APIs of the controller listener
(it refuses them); DescribeQuorum answers NOT_LEADER_OR_FOLLOWER on any node that is not the
quorum's leader, as Kafka does, with ``nodes`` (v2, KIP-853) listing the voters'
controller endpoints when the broker's KRaft config knows them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...protocol.errors import ErrorCode, KafkaError
from ...raft import wire
from ...raft.quorum import NotLeaderError
from ..context import RequestContext
from . import handler


def _manager(ctx: RequestContext) -> Any:
    mgr = getattr(ctx.broker, "raft_manager", None)
    if mgr is None:
        raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "this node runs no KRaft quorum")
    return mgr


async def handle_raft_request(ctx: RequestContext, request: Any) -> dict[str, Any]:
    mgr = _manager(ctx)
    try:
        sender, msg = wire.decode_request(request)
    except wire.WireError as e:
        raise KafkaError(ErrorCode.INVALID_REQUEST, str(e)) from None
    try:
        resp = await mgr.handle_request(sender, msg)
    except TimeoutError:
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the quorum did not answer in time") from None
    return dataclasses.asdict(wire.encode_response(resp))


@handler(52)
async def handle_vote(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return await handle_raft_request(ctx, request)


@handler(53)
async def handle_begin_quorum_epoch(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return await handle_raft_request(ctx, request)


@handler(54)
async def handle_end_quorum_epoch(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return await handle_raft_request(ctx, request)


@handler(59)
async def handle_fetch_snapshot(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return await handle_raft_request(ctx, request)


@handler(55)
async def handle_describe_quorum(ctx: RequestContext, request: Any) -> dict[str, Any]:
    """A node that does not lead the quorum forwards the request to the active controller (as
    Kafka 4's brokers do) and answers what it answers; with no controller reachable, or no
    quorum of its own, it answers from its own view (NOT_LEADER_OR_FOLLOWER)."""
    mgr = _manager(ctx)
    quorum = getattr(ctx.broker, "quorum", None)
    channel = getattr(quorum, "channel", None)
    leader = mgr.leader_and_epoch.leader_id
    # on a CONTROLLER listener a voter answers for itself (Kafka's ControllerApis; the brokers'
    # listeners forward)
    config = getattr(ctx.broker, "config", None)
    on_controller_listener = (
        config is not None and ctx.session.listener in config.kraft().controller_listener_names
    )
    if (channel is not None and leader is not None and not on_controller_listener
            and leader != getattr(ctx.broker, "node_id", leader)):
        from ...controller.server import NotControllerError

        try:
            return await channel.call(  # type: ignore[no-any-return]
                55, request, ctx.api_version, principal=ctx.session.principal, client_host=ctx.client_host
            )
        except (NotControllerError, KeyError):  # (KeyError: this node just became the leader)
            pass
    return await describe_quorum(ctx, request)


async def describe_quorum(ctx: RequestContext, request: Any) -> dict[str, Any]:
    """DescribeQuorum answered from this node's Raft manager."""
    mgr = _manager(ctx)
    topics = request.topics
    if (
        len(topics) != 1
        or topics[0].topic_name != wire.METADATA_TOPIC
        or [int(p.partition_index) for p in topics[0].partitions] != [0]
    ):
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "only __cluster_metadata-0 has a quorum")
    try:
        info = mgr.describe_quorum()
    except NotLeaderError as e:
        leader = mgr.leader_and_epoch
        part: dict[str, Any] = {
            "partition_index": 0,
            "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER,
            "error_message": str(e),
            "leader_id": -1 if leader.leader_id is None else leader.leader_id,
            "leader_epoch": leader.epoch,
            "high_watermark": -1,
            "current_voters": [],
            "observers": [],
        }
    else:

        def replica(r: Any) -> dict[str, Any]:
            caught_up = r.last_fetch_timestamp if r.log_end_offset >= info.high_watermark else -1
            return {
                "replica_id": r.replica_id,
                "replica_directory_id": None,
                "log_end_offset": r.log_end_offset,
                "last_fetch_timestamp": _wall(mgr.clock, r.last_fetch_timestamp),
                "last_caught_up_timestamp": _wall(mgr.clock, caught_up),
            }

        part = {
            "partition_index": 0,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "leader_id": info.leader_id,
            "leader_epoch": info.leader_epoch,
            "high_watermark": info.high_watermark,
            "current_voters": [replica(r) for r in info.current_voters],
            "observers": [replica(r) for r in info.observers],
        }
    nodes = []
    kraft = getattr(getattr(ctx.broker, "config", None), "kraft", None)
    if callable(kraft):
        k = kraft()
        names = k.controller_listener_names
        name = names[0] if names else "CONTROLLER"
        nodes = [
            {"node_id": v.node_id, "listeners": [{"name": name, "host": v.host, "port": v.port}]}
            for v in k.voters
        ]
    return {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "topics": [{"topic_name": wire.METADATA_TOPIC, "partitions": [part]}],
        "nodes": nodes,
    }


def _wall(clock: Any, monotonic_ms: int) -> int:
    """The node tracks fetch times on the manager's monotonic clock; DescribeQuorum reports
    wall time."""
    if monotonic_ms < 0:
        return -1
    return int(clock.time_ms() - (clock.monotonic_ms() - monotonic_ms))
