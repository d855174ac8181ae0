"""InitProducerId (22) for idempotent producers (transactional ids come with the transactions issue)."""

from __future__ import annotations

from typing import Any

from ...protocol.errors import ErrorCode
from ..context import RequestContext
from . import handler


@handler(22)
async def handle_init_producer_id(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if request.transactional_id is not None:
        # No transaction coordinator yet: refuse clearly rather than pretend.
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    pid = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < 32766:
        # KIP-360: an idempotent producer asks to bump its epoch after an error.
        return {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": epoch + 1}
    return {
        "throttle_time": 0,
        "error_code": 0,
        "producer_id": ctx.broker.producer_ids.allocate(),
        "producer_epoch": 0,
    }
