"""The controller's APIs on a node's listeners: AlterPartition (56), BrokerRegistration (62),
BrokerHeartbeat (63), AllocateProducerIds (67), AssignReplicasToDirs (73) and Envelope (58,
KIP-590), Kafka's ``ControllerApis``.

Theory of operation
-------------------
A broker whose own controller is not the active one reaches the active controller here (its
:class:`~strom.server.controller_channel.QuorumControllerChannel`). The broker's own requests
(registration, heartbeat, producer-id blocks) arrive as themselves; the admin requests it
forwards for its clients arrive inside an Envelope: ``request_data`` is the client's request
with its header, which this handler decodes and runs on the node's
:class:`~strom.controller.server.ControllerServer` (``broker.quorum.controller``), then answers
with the inner response, header included, in ``response_data``. The APIs an Envelope may carry
are those Kafka's brokers forward (:data:`FORWARDABLE`); anything else is INVALID_REQUEST.

When this node's controller is not the active one (or stops being it before the result is
committed) the answer is NOT_CONTROLLER: in the response's ``error_code`` for the direct APIs,
in the EnvelopeResponse's for enveloped ones, so the sender retries at the new controller.
DescribeQuorum in an Envelope is answered from this node's Raft manager
(:func:`strom.server.handlers.raft.describe_quorum`).

Not here: authorization of the Envelope's sender (Kafka requires CLUSTER_ACTION on the cluster
and accepts Envelope on controller listeners only; strom has no ACLs yet and, as for the KRaft
RPCs, serves these APIs on every listener while advertising them on controller listeners only,
see :mod:`strom.server.handlers.api_versions`). The forwarded request's principal and client
address are decoded and logged at debug level.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from ...controller.server import NotControllerError
from ...protocol import codec, envelope
from ...protocol.api_versions import KAFKA_API_RANGES
from ...protocol.error_responses import error_response
from ...protocol.errors import ErrorCode, KafkaError, ProtocolError
from ..context import RequestContext
from . import handler

if TYPE_CHECKING:
    from ...controller.server import ControllerServer

log = logging.getLogger("strom.controller.apis")

DESCRIBE_QUORUM = 55
# what a broker forwards to the controller in an Envelope (Kafka 4's ``forwardToController``;
# AllocateProducerIds normally goes as itself, accepted enveloped too)
FORWARDABLE = frozenset({19, 20, 30, 31, 33, 37, 43, 44, 45, 46, 49, 51, 55, 67})


def active_controller(ctx: RequestContext) -> ControllerServer | None:
    """This node's controller if it is the active one."""
    quorum = getattr(ctx.broker, "quorum", None)
    controller = getattr(quorum, "controller", None)
    if controller is None or not controller.is_active:
        return None
    return controller  # type: ignore[no-any-return]


async def _direct(ctx: RequestContext, request: Any) -> dict[str, Any]:
    controller = active_controller(ctx)
    if controller is None:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node is not the active controller")
    try:
        return await controller.call(ctx.api_key, request, ctx.api_version)
    except NotControllerError as e:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, str(e)) from None


@handler(62)
async def handle_broker_registration(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return await _direct(ctx, request)


@handler(63)
async def handle_broker_heartbeat(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return await _direct(ctx, request)


@handler(56)
async def handle_alter_partition(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return await _direct(ctx, request)


@handler(73)
async def handle_assign_replicas_to_dirs(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return await _direct(ctx, request)


@handler(67)
async def handle_allocate_producer_ids(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return await _direct(ctx, request)


async def run_forwarded(ctx: RequestContext, api_key: int, api_version: int, request: Any) -> dict[str, Any]:
    """The controller's answer to a forwarded request (raises NotControllerError)."""
    if api_key == DESCRIBE_QUORUM:
        from .raft import describe_quorum

        inner = dataclasses.replace(ctx, api_key=api_key, api_version=api_version)
        return await describe_quorum(inner, request)
    controller = active_controller(ctx)
    if controller is None:
        raise NotControllerError("this node is not the active controller")
    return await controller.call(api_key, request, api_version)


@handler(58)
async def handle_envelope(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if active_controller(ctx) is None:
        return {"error_code": ErrorCode.NOT_CONTROLLER, "response_data": None}
    try:
        header, inner = envelope.decode_request(request.request_data)
        principal = (
            envelope.decode_principal(request.request_principal)
            if request.request_principal is not None
            else None
        )
        client = envelope.decode_address(request.client_host_address)
    except ProtocolError as e:
        log.info("envelope from %s refused: %s", ctx.client_host, e)
        return {"error_code": ErrorCode.INVALID_REQUEST, "response_data": None}
    key, version = header.api_key, header.api_version
    entry = KAFKA_API_RANGES.get(key)
    if key not in FORWARDABLE or entry is None:
        log.info("envelope from %s refused: api %d is not forwarded to the controller", ctx.client_host, key)
        return {"error_code": ErrorCode.INVALID_REQUEST, "response_data": None}
    if not entry[1] <= version <= entry[2]:
        return {"error_code": ErrorCode.UNSUPPORTED_VERSION, "response_data": None}
    log.debug("forwarded %s v%d from %s for %s at %s", entry[0], version, ctx.client_host, principal, client)
    resp_type = codec.response_type(key, version)
    try:
        result = await run_forwarded(ctx, key, version, inner)
    except NotControllerError:
        return {"error_code": ErrorCode.NOT_CONTROLLER, "response_data": None}
    except KafkaError as e:
        result = error_response(resp_type, inner, e.code, str(e))
    data = envelope.encode_response(codec.build(resp_type, result), header.correlation_id)
    return {"error_code": ErrorCode.NONE, "response_data": data}
