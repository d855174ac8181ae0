"""ACLs in the metadata log: Kafka's ``AclControlManager`` (KIP-801).

Theory of operation
-------------------
Replicated state: the cluster's ACL bindings by id, each an ``AccessControlEntryRecord``; a
``RemoveAccessControlEntryRecord`` deletes one. Every broker's authorizer loads the ACLs of its
metadata image (:class:`strom.metadata.image.AclsImage`), so an ACL created through any node is
enforced by all of them, and survives restarts with the log.

CreateAcls (30): each creation is checked as Kafka checks it (broker side and controller side
together): a CLUSTER resource must be named ``kafka-cluster``, a name must not be empty, the
pattern type must be LITERAL or PREFIXED, the operation and permission concrete (not ANY), the
principal ``Type:name``; a failing creation is INVALID_REQUEST with Kafka's message, the others
are created. A binding that exists already (or twice in one request) gets no new record and
answers success, as Kafka's does.

DeleteAcls (31): every filter deletes the ACLs it matches; each filter's result lists them (an
ACL matched by two filters of one request is listed by both, removed once).

A request with UNKNOWN (or unknown-code) elements is refused whole by Kafka's request parser
(INVALID_REQUEST for every creation/filter): :func:`unknown_creation`, which the broker applies
before forwarding.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from ..metadata.records import AccessControlEntryRecord, RemoveAccessControlEntryRecord
from ..protocol.errors import ErrorCode
from ..security.authorizer import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    parse_principal,
)

__all__ = ["AclControlManager", "creation_error", "unknown_creation"]


def _known(value: int, cls: type) -> bool:
    return value != 0 and value in cls._value2member_map_  # type: ignore[attr-defined]


def unknown_creation(b: AclBinding) -> bool:
    """Kafka's ``AclBinding.isUnknown``: an element UNKNOWN or a code it does not know."""
    return not (
        _known(b.resource_type, ResourceType)
        and _known(b.pattern_type, PatternType)
        and _known(b.operation, AclOperation)
        and _known(b.permission_type, AclPermissionType)
    )


def creation_error(b: AclBinding) -> str | None:
    """Why Kafka refuses this creation (INVALID_REQUEST), or None."""
    if b.resource_type == ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not b.resource_name:
        return "Invalid empty resource name"
    if b.resource_type == ResourceType.ANY:
        return "Invalid resourceType ANY"
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {PatternType(b.pattern_type).name}"
    if b.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        return f"Invalid operation {AclOperation(b.operation).name}"
    if b.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {AclPermissionType(b.permission_type).name}"
    try:
        parse_principal(b.principal)
    except ValueError as e:
        return str(e)
    if not b.host:
        return "Invalid empty host"
    return None


def binding_of_record(r: AccessControlEntryRecord) -> AclBinding:
    return AclBinding(
        r.resource_type, r.resource_name, r.pattern_type, r.principal, r.host, r.operation, r.permission_type
    )


def record_of(acl_id: uuid.UUID, b: AclBinding) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=acl_id,
        resource_type=b.resource_type,
        resource_name=b.resource_name,
        pattern_type=b.pattern_type,
        principal=b.principal,
        host=b.host,
        operation=b.operation,
        permission_type=b.permission_type,
    )


def matching_acl(b: AclBinding, code: int = 0, message: str | None = None) -> dict[str, Any]:
    """A DeleteAcls ``matching_acls`` entry."""
    return {
        "error_code": code,
        "error_message": message,
        "resource_type": b.resource_type,
        "resource_name": b.resource_name,
        "pattern_type": b.pattern_type,
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation,
        "permission_type": b.permission_type,
    }


class AclControlManager:
    def __init__(self, rnd: random.Random | None = None) -> None:
        self.random = rnd or random.Random()
        self.acls: dict[uuid.UUID, AclBinding] = {}

    def _new_id(self) -> uuid.UUID:
        while True:
            acl_id = uuid.UUID(int=self.random.getrandbits(128), version=4)
            if acl_id not in self.acls:
                return acl_id

    def create_acls(self, request: Any) -> tuple[list[Any], dict[str, Any]]:
        records: list[Any] = []
        results: list[dict[str, Any]] = []
        existing = set(self.acls.values())
        for c in request.creations:
            b = AclBinding.of(c)
            error = "Invalid ACL creation" if unknown_creation(b) else creation_error(b)
            if error is not None:
                results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": error})
                continue
            if b not in existing:
                existing.add(b)
                records.append(record_of(self._new_id(), b))
            results.append({"error_code": 0, "error_message": None})
        return records, {"throttle_time": 0, "results": results}

    def delete_acls(self, request: Any) -> tuple[list[Any], dict[str, Any]]:
        records: list[Any] = []
        removed: set[uuid.UUID] = set()
        results: list[dict[str, Any]] = []
        for raw in request.filters:
            flt = AclBindingFilter.of(raw)
            unknown = flt.unknown_part()
            if unknown is not None:
                results.append(
                    {
                        "error_code": ErrorCode.INVALID_REQUEST,
                        "error_message": f"Unknown {unknown} in the filter",
                        "matching_acls": [],
                    }
                )
                continue
            matched = []
            for acl_id, b in sorted(self.acls.items()):
                if flt.matches(b):
                    matched.append(matching_acl(b))
                    if acl_id not in removed:
                        removed.add(acl_id)
                        records.append(RemoveAccessControlEntryRecord(id=acl_id))
            results.append({"error_code": 0, "error_message": None, "matching_acls": matched})
        return records, {"throttle_time": 0, "filter_results": results}

    def replay(self, record: AccessControlEntryRecord | RemoveAccessControlEntryRecord) -> None:
        if isinstance(record, AccessControlEntryRecord):
            self.acls[record.id] = binding_of_record(record)
        else:
            self.acls.pop(record.id, None)

    def to_records(self) -> list[AccessControlEntryRecord]:
        return [record_of(acl_id, b) for acl_id, b in sorted(self.acls.items())]
