"""Authorization checks for the request handlers: the broker's authorizer asked about the
request's principal and client address (Kafka's ``AuthHelper``).

With ``authorizer.class.name`` unset (``broker.authorizer`` None) everything is allowed, as
Kafka without an authorizer does; the checks cost one attribute test then.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..security.authorizer import CLUSTER_NAME, AclOperation, ResourceType, normalize_host

if TYPE_CHECKING:
    from .context import RequestContext

__all__ = ["AclOperation", "ResourceType", "authorized", "authorized_cluster", "filter_authorized"]


def authorized(ctx: RequestContext, operation: int, resource_type: int, name: str) -> bool:
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize(
        ctx.session.principal, normalize_host(ctx.client_host), operation, resource_type, name
    )


def authorized_cluster(ctx: RequestContext, operation: int) -> bool:
    return authorized(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def authorized_by_resource_type(ctx: RequestContext, operation: int, resource_type: int) -> bool:
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(
        ctx.session.principal, normalize_host(ctx.client_host), operation, resource_type
    )


def filter_authorized(
    ctx: RequestContext, operation: int, resource_type: int, names: Iterable[str]
) -> set[str]:
    """The names among ``names`` the principal may do ``operation`` on."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return set(names)
    principal, host = ctx.session.principal, normalize_host(ctx.client_host)
    return {n for n in names if authorizer.authorize(principal, host, operation, resource_type, n)}
