"""DescribeClientQuotas (48) and AlterClientQuotas (49): Kafka's client quotas (KIP-546).

Quotas live in the metadata log (ClientQuotaRecord): AlterClientQuotas goes to the active
controller (:class:`strom.controller.quota_control.ClientQuotaControlManager`, forwarded from
any node) and answers once this broker applied the records; DescribeClientQuotas reads this
broker's metadata image. Authorization as Kafka's: DESCRIBE_CONFIGS on the CLUSTER to describe
(else CLUSTER_AUTHORIZATION_FAILED), ALTER_CONFIGS to alter (else every entry fails with it).
Without the metadata quorum both answer UNSUPPORTED_VERSION with a message (quotas are kept in
the metadata log only).
"""

from __future__ import annotations

from typing import Any

from ...controller.quota_control import describe
from ...metadata.image import MetadataImage
from ...protocol.errors import ErrorCode
from ..authz import AclOperation, authorized_cluster
from ..context import RequestContext
from . import handler
from .forwarding import forward_to_controller

_NO_QUORUM = "client quotas are kept in the metadata log: strom.metadata.quorum.enable must be true"


@handler(48)
async def handle_describe_client_quotas(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not authorized_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": "Cluster authorization failed.",
            "entries": None,
        }
    quorum = getattr(ctx.broker, "quorum", None)
    image = getattr(getattr(quorum, "publisher", None), "image", None) if quorum is not None else None
    if quorum is None:
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.UNSUPPORTED_VERSION,
            "error_message": _NO_QUORUM,
            "entries": None,
        }
    entities = image.client_quotas.entities if image is not None else {}
    return describe(entities, request)


@handler(49)
async def handle_alter_client_quotas(ctx: RequestContext, request: Any) -> dict[str, Any]:
    def every(code: int, message: str) -> dict[str, Any]:
        return {
            "throttle_time": 0,
            "entries": [
                {
                    "error_code": code,
                    "error_message": message,
                    "entity": [
                        {"entity_type": p.entity_type, "entity_name": p.entity_name} for p in e.entity
                    ],
                }
                for e in request.entries
            ],
        }

    if not authorized_cluster(ctx, AclOperation.ALTER_CONFIGS):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    quorum = getattr(ctx.broker, "quorum", None)
    if quorum is None:
        return every(ErrorCode.UNSUPPORTED_VERSION, _NO_QUORUM)
    response = await forward_to_controller(ctx, request)
    if request.validate_only:
        return response
    wanted = []
    for e, r in zip(request.entries, response.get("entries", ()), strict=False):
        if r["error_code"]:
            continue
        entity = tuple(sorted({str(p.entity_type): p.entity_name for p in e.entity}.items()))
        for op in e.ops:
            wanted.append((entity, str(op.key), None if op.remove else float(op.value)))

    def applied(image: MetadataImage) -> bool:
        ents = image.client_quotas.entities
        return all(ents.get(entity, {}).get(key) == value for entity, key, value in wanted)

    if wanted:
        await quorum.settle_image(applied)
    return response
