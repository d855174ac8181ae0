"""InitProducerId (22): idempotent producers get a fresh id here; transactional ids go to the
transaction coordinator (epoch bumps, fencing)."""

from __future__ import annotations

from typing import Any

from ...protocol.codec import duration_ms
from ...protocol.errors import ErrorCode
from ..authz import AclOperation, ResourceType, authorized, authorized_by_resource_type, authorized_cluster
from ..context import RequestContext
from . import handler


def _error(code: int) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}


@handler(22)
async def handle_init_producer_id(ctx: RequestContext, request: Any) -> dict[str, Any]:
    pid = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if getattr(ctx.broker, "authorizer", None) is not None:
        if request.transactional_id is not None:
            txn_id = str(request.transactional_id)
            if not authorized(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
                return _error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        elif not authorized_cluster(ctx, AclOperation.IDEMPOTENT_WRITE) and not authorized_by_resource_type(
            ctx, AclOperation.WRITE, ResourceType.TOPIC
        ):
            # Kafka (KIP-679): IDEMPOTENT_WRITE on the cluster or WRITE on some topic
            return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if request.transactional_id is not None:
        timeout_ms = duration_ms(request.transaction_timeout)
        err, pid, epoch = await ctx.broker.txn_coordinator.init_producer_id(
            str(request.transactional_id), timeout_ms, pid, epoch
        )
        return {"throttle_time": 0, "error_code": err, "producer_id": pid, "producer_epoch": epoch}
    if pid >= 0 and 0 <= epoch < 32766:
        # KIP-360: an idempotent producer asks to bump its epoch after an error.
        return {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": epoch + 1}
    return {
        "throttle_time": 0,
        "error_code": 0,
        "producer_id": ctx.broker.producer_ids.allocate(),
        "producer_epoch": 0,
    }
