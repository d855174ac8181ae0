"""Kafka's ACL authorizer, sans-IO: the semantics of ``StandardAuthorizer`` (KRaft, KIP-801).

Theory of operation
-------------------
An ACL binding is a resource pattern (resource type, name, pattern type LITERAL or PREFIXED)
and an entry (principal, host, operation, permission ALLOW or DENY), with Kafka's numeric codes
for every enum (they are what CreateAcls/DescribeAcls/DeleteAcls and AccessControlEntryRecord
carry). :meth:`StandardAuthorizer.authorize` decides one action (principal, client host,
operation, resource type and name) as Kafka does:

1. a principal named in ``super.users`` is allowed everything;
2. the ACLs that *apply to the resource* are those of its type that are LITERAL with its exact
   name, LITERAL ``*``, or PREFIXED with a prefix of its name;
3. of those, an ACL *matches* when its principal is the caller's or ``User:*``, its host the
   caller's address or ``*``, and its operation: for a DENY the very operation or ALL (a DENY of
   READ does not deny DESCRIBE); for an ALLOW the operation, ALL, or an operation that implies
   it (READ, WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS);
4. any matching DENY denies (DENY beats ALLOW); else any matching ALLOW allows; else, when no
   ACL applies to the resource at all, ``allow.everyone.if.no.acl.found`` decides (false by
   default); else denied.

:meth:`StandardAuthorizer.authorize_by_resource_type` is Kafka's ``authorizeByResourceType``
(used for an idempotent producer without IDEMPOTENT_WRITE on the cluster): is the principal
allowed the operation on *some* resource of the type, i.e. is there an ALLOW ACL (operation or
ALL, principal, host matching) whose pattern no matching DENY covers.

:class:`AclBindingFilter` is Kafka's ``AclBindingFilter`` (DescribeAcls, DeleteAcls): ANY
matches every value of a field, a null name/principal/host any; the pattern type MATCH with a
name matches the ACLs that would apply to a resource of that name (LITERAL of the name, LITERAL
``*``, PREFIXED prefixes of it).

Nothing here does I/O; the broker loads the ACLs of its metadata image with :meth:`load`.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

__all__ = [
    "AUTHORIZER_CLASS_NAMES",
    "CLUSTER_NAME",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourceType",
    "StandardAuthorizer",
    "parse_principal",
    "parse_super_users",
]

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the only name of the CLUSTER resource
# ``authorizer.class.name`` values that turn the authorizer on
AUTHORIZER_CLASS_NAMES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "strom.security.authorizer.StandardAuthorizer",
)


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# operations an ALLOW ACL of which also allows DESCRIBE / DESCRIBE_CONFIGS
_IMPLIES_DESCRIBE = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


def _enum_name(e: IntEnum | int, cls: type[IntEnum]) -> str:
    try:
        return cls(int(e)).name
    except ValueError:
        return str(int(e))


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: what AccessControlEntryRecord and CreateAcls carry (codes as ints)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    @classmethod
    def of(cls, record: Any) -> AclBinding:
        """From anything with the fields of AccessControlEntryRecord / an AclCreation (whose
        pattern field is ``resource_pattern_type``)."""
        pattern = getattr(record, "pattern_type", None)
        if pattern is None:
            pattern = record.resource_pattern_type
        return cls(
            int(record.resource_type),
            str(record.resource_name),
            int(pattern),
            str(record.principal),
            str(record.host),
            int(record.operation),
            int(record.permission_type),
        )

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, "
            f"operation={_enum_name(self.operation, AclOperation)}, "
            f"permissionType={_enum_name(self.permission_type, AclPermissionType)}) on "
            f"{_enum_name(self.resource_type, ResourceType)}:"
            f"{_enum_name(self.pattern_type, PatternType)}:{self.resource_name}"
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter: ``None`` name/principal/host and ANY codes match everything."""

    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = AclOperation.ANY
    permission_type: int = AclPermissionType.ANY

    @classmethod
    def of(cls, request: Any) -> AclBindingFilter:
        """From a DescribeAcls request or a DeleteAcls filter (Kafka's field names)."""
        name = request.resource_name_filter
        principal = request.principal_filter
        host = request.host_filter
        return cls(
            int(request.resource_type_filter),
            None if name is None else str(name),
            int(request.pattern_type_filter),
            None if principal is None else str(principal),
            None if host is None else str(host),
            int(request.operation),
            int(request.permission_type),
        )

    def unknown_part(self) -> str | None:
        """What of the filter is UNKNOWN (or not a code Kafka knows), or None (Kafka's
        ``isUnknown``: such filters are refused with INVALID_REQUEST)."""
        for what, value, cls in (
            ("resource type", self.resource_type, ResourceType),
            ("pattern type", self.pattern_type, PatternType),
            ("operation", self.operation, AclOperation),
            ("permission type", self.permission_type, AclPermissionType),
        ):
            if value not in cls._value2member_map_ or value == 0:
                return f"{what} {value}"
        return None

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        if not self._pattern_matches(acl):
            return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission_type == AclPermissionType.ANY or self.permission_type == acl.permission_type

    def _pattern_matches(self, acl: AclBinding) -> bool:
        pt = self.pattern_type
        if pt not in (PatternType.ANY, PatternType.MATCH) and pt != acl.pattern_type:
            return False
        name = self.resource_name
        if name is None:
            return True
        if pt == acl.pattern_type or pt == PatternType.ANY:
            return name == acl.resource_name
        # MATCH: the ACLs that apply to a resource named ``name``
        if acl.pattern_type == PatternType.LITERAL:
            return name == acl.resource_name or acl.resource_name == WILDCARD
        if acl.pattern_type == PatternType.PREFIXED:
            return name.startswith(acl.resource_name)
        return False


def parse_principal(text: str) -> tuple[str, str]:
    """``Type:name`` -> (type, name); ValueError without a colon (Kafka's message)."""
    i = text.find(":")
    if i < 0:
        raise ValueError(
            f"Could not parse principal from `{text}` (no colon is present separating the "
            "principal type from the principal name)"
        )
    return text[:i], text[i + 1 :]


def parse_super_users(value: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:alice;User:bob``)."""
    if not value:
        return frozenset()
    return frozenset(p.strip() for p in value.split(";") if p.strip())


@functools.lru_cache(maxsize=4096)
def normalize_host(host: str) -> str:
    """A client address as Kafka prints it (``InetAddress.getHostAddress``): IPv4-mapped IPv6
    addresses as IPv4."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


class StandardAuthorizer:
    """Decides actions from a set of ACLs (see the module docstring)."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.acls: dict[Any, AclBinding] = {}
        # resource type -> name -> ACLs, for LITERAL (incl. ``*``) and PREFIXED patterns
        self._literal: dict[int, dict[str, list[AclBinding]]] = {}
        self._prefixed: dict[int, dict[str, list[AclBinding]]] = {}
        self._prefix_lengths: dict[int, list[int]] = {}
        self._source: object = None

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> StandardAuthorizer | None:
        """The authorizer ``authorizer.class.name`` asks for, or None (no authorization).
        ValueError for a class strom does not have."""
        name = str(values.get("authorizer.class.name") or "").strip()
        if not name:
            return None
        if name not in AUTHORIZER_CLASS_NAMES:
            raise ValueError(
                f"authorizer.class.name {name!r} is not supported; use one of "
                + ", ".join(AUTHORIZER_CLASS_NAMES)
            )
        allow = values.get("allow.everyone.if.no.acl.found", False)
        if isinstance(allow, str):
            allow = allow.strip().lower() == "true"
        return cls(parse_super_users(values.get("super.users")), bool(allow))

    # ---- the ACL set ---------------------------------------------------------------------
    def load(self, acls: Mapping[Any, AclBinding | Any], source: object = None) -> None:
        """Replace the ACLs (by id). ``source``: the object they came from; loading the same
        object again is skipped (the broker passes each published image's ACL map)."""
        if source is not None and source is self._source:
            return
        self._source = source
        bindings = {k: v if isinstance(v, AclBinding) else AclBinding.of(v) for k, v in acls.items()}
        literal: dict[int, dict[str, list[AclBinding]]] = {}
        prefixed: dict[int, dict[str, list[AclBinding]]] = {}
        for b in bindings.values():
            table = prefixed if b.pattern_type == PatternType.PREFIXED else literal
            table.setdefault(b.resource_type, {}).setdefault(b.resource_name, []).append(b)
        self.acls = bindings
        self._literal = literal
        self._prefixed = prefixed
        self._prefix_lengths = {rt: sorted({len(p) for p in names}) for rt, names in prefixed.items()}

    def matching(self, flt: AclBindingFilter) -> list[tuple[Any, AclBinding]]:
        """The ACLs (with their ids) a filter matches."""
        return [(k, b) for k, b in self.acls.items() if flt.matches(b)]

    # ---- decisions -----------------------------------------------------------------------
    def _applying(self, resource_type: int, name: str) -> Iterable[AclBinding]:
        literal = self._literal.get(resource_type)
        if literal:
            yield from literal.get(name, ())
            if name != WILDCARD:
                yield from literal.get(WILDCARD, ())
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            for n in self._prefix_lengths[resource_type]:
                if n > len(name):
                    break
                yield from prefixed.get(name[:n], ())

    @staticmethod
    def _result(acl: AclBinding, principal: str, host: str, operation: int) -> bool | None:
        """True (allows), False (denies) or None (does not match) for one applying ACL."""
        if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
            return None
        if acl.host != WILDCARD and acl.host != host:
            return None
        allow = acl.permission_type == AclPermissionType.ALLOW
        if acl.operation != AclOperation.ALL:
            if not allow:
                if acl.operation != operation:
                    return None
            elif operation == AclOperation.DESCRIBE:
                if acl.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif operation == AclOperation.DESCRIBE_CONFIGS:
                if acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif acl.operation != operation:
                return None
        if acl.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            return None
        return allow

    def authorize(
        self, principal: str, host: str, operation: int, resource_type: int, resource_name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        found = False
        allowed = False
        for acl in self._applying(resource_type, resource_name):
            found = True
            r = self._result(acl, principal, host, operation)
            if r is False:
                return False
            if r:
                allowed = True
        if allowed:
            return True
        return not found and self.allow_everyone_if_no_acl_found

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: int, resource_type: int
    ) -> bool:
        """May the principal do ``operation`` on at least one resource of the type (Kafka's
        ``Authorizer.authorizeByResourceType``)?"""
        if principal in self.super_users:
            return True
        literal = self._literal.get(resource_type, {})
        prefixed = self._prefixed.get(resource_type, {})
        denied_literal: set[str] = set()
        denied_prefixes: set[str] = set()
        allows: list[AclBinding] = []

        def op_matches(acl: AclBinding) -> bool:
            return acl.operation in (AclOperation.ALL, operation)

        def who_matches(acl: AclBinding) -> bool:
            return acl.principal in (principal, WILDCARD_PRINCIPAL) and acl.host in (host, WILDCARD)

        for table, denied in ((literal, denied_literal), (prefixed, denied_prefixes)):
            for name, acls in table.items():
                for acl in acls:
                    if not (op_matches(acl) and who_matches(acl)):
                        continue
                    if acl.permission_type == AclPermissionType.DENY:
                        denied.add(name)
                    elif acl.permission_type == AclPermissionType.ALLOW:
                        allows.append(acl)
        if WILDCARD in denied_literal:
            return False
        for acl in allows:
            name = acl.resource_name
            if any(name.startswith(p) for p in denied_prefixes):
                continue
            if acl.pattern_type == PatternType.LITERAL and name in denied_literal:
                continue
            return True
        return bool(self.allow_everyone_if_no_acl_found and not literal and not prefixed)
