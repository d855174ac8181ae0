"""Authorization checks for the request handlers: the broker's authorizer asked about the
request's principal and client address (Kafka's ``AuthHelper``).

With ``authorizer.class.name`` unset (``broker.authorizer`` None) everything is allowed, as
Kafka without an authorizer does; the checks cost one attribute test then.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..protocol.errors import ErrorCode, KafkaError
from ..security.authorizer import CLUSTER_NAME, AclOperation, ResourceType, StandardAuthorizer, normalize_host

if TYPE_CHECKING:
    from .context import RequestContext

__all__ = ["AclOperation", "ResourceType", "authorized", "authorized_cluster", "filter_authorized"]


def authorized(ctx: RequestContext, operation: int, resource_type: int, name: str) -> bool:
    authorizer: StandardAuthorizer | None = getattr(ctx.broker, "authorizer", None)
    if authorizer is None:
        return True
    return authorizer.authorize(
        ctx.session.principal, normalize_host(ctx.client_host), operation, resource_type, name
    )


def authorized_cluster(ctx: RequestContext, operation: int) -> bool:
    return authorized(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def authorized_by_resource_type(ctx: RequestContext, operation: int, resource_type: int) -> bool:
    authorizer: StandardAuthorizer | None = getattr(ctx.broker, "authorizer", None)
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(
        ctx.session.principal, normalize_host(ctx.client_host), operation, resource_type
    )


def filter_authorized(
    ctx: RequestContext, operation: int, resource_type: int, names: Iterable[str]
) -> set[str]:
    """The names among ``names`` the principal may do ``operation`` on."""
    authorizer: StandardAuthorizer | None = getattr(ctx.broker, "authorizer", None)
    if authorizer is None:
        return set(names)
    principal, host = ctx.session.principal, normalize_host(ctx.client_host)
    return {n for n in names if authorizer.authorize(principal, host, operation, resource_type, n)}


# APIs that need one operation on the CLUSTER for the whole request (Kafka's KafkaApis /
# ControllerApis checks), else CLUSTER_AUTHORIZATION_FAILED on every item: the inter-node RPCs
# need CLUSTER_ACTION, so with an authorizer the nodes' own principal (User:ANONYMOUS on a
# PLAINTEXT controller or inter-broker listener) must be in super.users, as in Kafka
CLUSTER_GATES: dict[int, int] = {
    27: AclOperation.CLUSTER_ACTION,  # WriteTxnMarkers
    34: AclOperation.ALTER,  # AlterReplicaLogDirs
    35: AclOperation.DESCRIBE,  # DescribeLogDirs
    43: AclOperation.ALTER,  # ElectLeaders
    45: AclOperation.ALTER,  # AlterPartitionReassignments
    46: AclOperation.DESCRIBE,  # ListPartitionReassignments
    50: AclOperation.DESCRIBE,  # DescribeUserScramCredentials
    52: AclOperation.CLUSTER_ACTION,  # Vote
    53: AclOperation.CLUSTER_ACTION,  # BeginQuorumEpoch
    54: AclOperation.CLUSTER_ACTION,  # EndQuorumEpoch
    55: AclOperation.DESCRIBE,  # DescribeQuorum
    56: AclOperation.CLUSTER_ACTION,  # AlterPartition
    57: AclOperation.ALTER,  # UpdateFeatures
    58: AclOperation.CLUSTER_ACTION,  # Envelope
    59: AclOperation.CLUSTER_ACTION,  # FetchSnapshot
    62: AclOperation.CLUSTER_ACTION,  # BrokerRegistration
    63: AclOperation.CLUSTER_ACTION,  # BrokerHeartbeat
    64: AclOperation.ALTER,  # UnregisterBroker
    67: AclOperation.CLUSTER_ACTION,  # AllocateProducerIds
}


def check_cluster_gate(ctx: RequestContext) -> None:
    """Raise CLUSTER_AUTHORIZATION_FAILED when the API needs a CLUSTER permission the request's
    principal lacks (only called with an authorizer configured)."""
    operation = CLUSTER_GATES.get(ctx.api_key)
    if operation is not None and not authorized_cluster(ctx, operation):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")


# the operations Kafka reports in authorized-operations bit fields, per resource type
# (AclEntry.supportedOperations)
SUPPORTED_OPERATIONS: dict[int, tuple[int, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
}


def authorized_operations(ctx: RequestContext, resource_type: int, name: str) -> int:
    """Kafka's ``authorizedOperations`` bit field (bit = operation code): the supported
    operations the principal may do on the resource (all of them without an authorizer)."""
    bits = 0
    for op in SUPPORTED_OPERATIONS[resource_type]:
        if authorized(ctx, op, resource_type, name):
            bits |= 1 << int(op)
    return bits
