"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31): Kafka's ``AclApis`` on a KRaft broker.

- No authorizer configured (``authorizer.class.name`` unset): SECURITY_DISABLED, "No Authorizer
  is configured.", for the whole request, as Kafka answers.
- DescribeAcls needs DESCRIBE on the CLUSTER, CreateAcls and DeleteAcls ALTER on it, else
  CLUSTER_AUTHORIZATION_FAILED (every creation's / filter's result for the latter two).
- A creation or filter with UNKNOWN elements fails the whole request with INVALID_REQUEST (Kafka's
  request parser refuses it).
- DescribeAcls is answered from this broker's authorizer (the ACLs of its metadata image),
  grouped by resource pattern. CreateAcls and DeleteAcls go to the active controller
  (:class:`strom.controller.acl_control.AclControlManager`), forwarded in an Envelope with the
  client's principal when this node's controller is not the active one; the answer waits until
  this broker applied the resulting records, so a DescribeAcls or an authorized request right
  after sees them.
"""

from __future__ import annotations

from typing import Any

from ...controller.acl_control import unknown_creation
from ...metadata.image import MetadataImage
from ...protocol.errors import ErrorCode
from ...security.authorizer import AclBinding, AclBindingFilter, AclOperation
from ..authz import authorized_cluster
from ..context import RequestContext
from . import handler
from .forwarding import forward_to_controller

_NO_AUTHORIZER = "No Authorizer is configured."
_NO_QUORUM = "ACLs are kept in the metadata log: strom.metadata.quorum.enable must be true"


def _refusal(ctx: RequestContext, operation: int) -> tuple[int, str] | None:
    if getattr(ctx.broker, "authorizer", None) is None:
        return ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER
    if not authorized_cluster(ctx, operation):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    if getattr(ctx.broker, "quorum", None) is None and operation != AclOperation.DESCRIBE:
        return ErrorCode.SECURITY_DISABLED, _NO_QUORUM
    return None


@handler(29)
async def handle_describe_acls(ctx: RequestContext, request: Any) -> dict[str, Any]:
    def error(code: int, message: str) -> dict[str, Any]:
        return {"throttle_time": 0, "error_code": code, "error_message": message, "resources": []}

    refused = _refusal(ctx, AclOperation.DESCRIBE)
    if refused is not None:
        return error(*refused)
    flt = AclBindingFilter.of(request)
    unknown = flt.unknown_part()
    if unknown is not None:
        return error(ErrorCode.INVALID_REQUEST, f"Filter contains an unknown {unknown}")
    authorizer = getattr(ctx.broker, "authorizer", None)
    assert authorizer is not None
    groups: dict[tuple[int, str, int], list[AclBinding]] = {}
    for _, b in authorizer.matching(flt):
        groups.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    resources = [
        {
            "resource_type": rt,
            "resource_name": name,
            "pattern_type": pt,
            "acls": [
                {
                    "principal": b.principal,
                    "host": b.host,
                    "operation": b.operation,
                    "permission_type": b.permission_type,
                }
                for b in sorted(groups[(rt, name, pt)], key=lambda b: (b.principal, b.host, b.operation,
                                                                       b.permission_type))
            ],
        }
        for rt, name, pt in sorted(groups)
    ]
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "resources": resources}


@handler(30)
async def handle_create_acls(ctx: RequestContext, request: Any) -> dict[str, Any]:
    def every(code: int, message: str) -> dict[str, Any]:
        return {
            "throttle_time": 0,
            "results": [{"error_code": code, "error_message": message} for _ in request.creations],
        }

    refused = _refusal(ctx, AclOperation.ALTER)
    if refused is not None:
        return every(*refused)
    bindings = [AclBinding.of(c) for c in request.creations]
    if any(unknown_creation(b) for b in bindings):
        return every(ErrorCode.INVALID_REQUEST, "Contain UNKNOWN elements")
    response = await forward_to_controller(ctx, request)
    created = {b for b, r in zip(bindings, response.get("results", ()), strict=False) if not r["error_code"]}
    if created:
        await _settle(ctx, lambda image: created <= _bindings(image))
    return response


@handler(31)
async def handle_delete_acls(ctx: RequestContext, request: Any) -> dict[str, Any]:
    def every(code: int, message: str) -> dict[str, Any]:
        return {
            "throttle_time": 0,
            "filter_results": [
                {"error_code": code, "error_message": message, "matching_acls": []} for _ in request.filters
            ],
        }

    refused = _refusal(ctx, AclOperation.ALTER)
    if refused is not None:
        return every(*refused)
    for f in request.filters:
        unknown = AclBindingFilter.of(f).unknown_part()
        if unknown is not None:
            return every(ErrorCode.INVALID_REQUEST, f"Filter contains an unknown {unknown}")
    response = await forward_to_controller(ctx, request)
    deleted = {
        AclBinding(
            int(m["resource_type"]), str(m["resource_name"]), int(m["pattern_type"]), str(m["principal"]),
            str(m["host"]), int(m["operation"]), int(m["permission_type"]),
        )
        for r in response.get("filter_results", ())
        for m in r.get("matching_acls", ())
        if not r["error_code"]
    }
    if deleted:
        await _settle(ctx, lambda image: not (deleted & _bindings(image)))
    return response


def _bindings(image: MetadataImage) -> set[AclBinding]:
    return {AclBinding.of(r) for r in image.acls.acls.values()}


async def _settle(ctx: RequestContext, until: Any) -> None:
    quorum = getattr(ctx.broker, "quorum", None)
    if quorum is not None:
        await quorum.settle_image(until)
