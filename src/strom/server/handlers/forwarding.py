"""Client requests a broker forwards to the active controller and answers with its answer:
ElectLeaders (43), AlterPartitionReassignments (45), ListPartitionReassignments (46), as
Kafka 4's ``KafkaApis.forwardToController`` (CreateTopics, DeleteTopics, CreatePartitions and
the config APIs go through the broker's own paths to the same channel; DescribeQuorum in
:mod:`strom.server.handlers.raft`).

The request goes through the broker's controller channel (``broker.quorum.channel``): to this
node's controller when it is the active one, else in an Envelope, with the client's principal
and address, to the active controller (:mod:`strom.server.controller_channel`). A node that runs
no metadata quorum answers BROKER_NOT_AVAILABLE; no controller answering within the channel's
timeout is NOT_CONTROLLER (clients refresh their metadata and retry).
"""

from __future__ import annotations

from typing import Any

from ...controller.server import NotControllerError
from ...protocol.errors import ErrorCode, KafkaError
from ..context import RequestContext
from . import handler


async def forward_to_controller(ctx: RequestContext, request: Any) -> dict[str, Any]:
    channel = getattr(getattr(ctx.broker, "quorum", None), "channel", None)
    if channel is None:
        raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "this node runs no KRaft quorum")
    try:
        return await channel.call(  # type: ignore[no-any-return]
            ctx.api_key,
            request,
            ctx.api_version,
            principal=ctx.session.principal,
            client_host=ctx.client_host,
        )
    except NotControllerError as e:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, str(e)) from None


@handler(43)
async def handle_elect_leaders(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return await forward_to_controller(ctx, request)


@handler(45)
async def handle_alter_partition_reassignments(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return await forward_to_controller(ctx, request)


@handler(46)
async def handle_list_partition_reassignments(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return await forward_to_controller(ctx, request)
