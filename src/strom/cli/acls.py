"""``strom acls`` — Kafka's ``kafka-acls.sh`` (CreateAcls, DescribeAcls, DeleteAcls).

Exactly one of ``--add``, ``--remove``, ``--list``. Resources: ``--topic T``, ``--group G``,
``--transactional-id X`` (each repeatable), ``--cluster``, with ``--resource-pattern-type
literal|prefixed`` (``any``/``match`` too for --list and --remove; default literal). Entries:
``--allow-principal``/``--deny-principal`` (``Type:name``), ``--allow-host``/``--deny-host``
(default ``*``), ``--operation`` (repeatable, default All; Kafka's names such as Read,
DescribeConfigs, IdempotentWrite); the ``--producer`` / ``--consumer`` (``--idempotent``)
conveniences add the ACLs kafka-acls.sh adds. ``--remove`` asks for confirmation unless
``--force``. ``--list --principal P`` lists one principal's ACLs.

Output is kafka-acls.sh's: "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC,
name=t, patternType=LITERAL)`:" followed by tab-indented "(principal=User:alice, host=*,
operation=READ, permissionType=ALLOW)" lines, and "Current ACLs for resource `...`:" blocks.
Option checks are pure (:func:`plan`); the command is thin. Error contract as
:mod:`strom.cli.commands`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from strom.cli.commands import CommandError, _client
from strom.client.admin import AclTuple, create_acls, delete_acls, describe_acls
from strom.client.errors import KafkaConnectionError
from strom.security.authorizer import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

__all__ = ["AclPlan", "acls", "add_parser", "entry_str", "parse_operation", "pattern_str", "plan"]

Op = AclOperation
# the operations kafka-acls.sh accepts for each resource type
_VALID_OPS: dict[int, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        Op.READ,
        Op.WRITE,
        Op.CREATE,
        Op.DESCRIBE,
        Op.DELETE,
        Op.ALTER,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.ALL,
    ),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.ALL),
    ResourceType.CLUSTER: (
        Op.CREATE,
        Op.CLUSTER_ACTION,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE,
        Op.ALTER,
        Op.DESCRIBE,
        Op.ALL,
    ),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE, Op.TWO_PHASE_COMMIT, Op.ALL),
}

_NO_PRINCIPAL = "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
Filter = tuple[int, str | None, int, str | None, str | None, int, int]


def add_parser(sub: Any, add_bootstrap: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("acls", help="add, remove and list ACLs (like kafka-acls.sh)")
    add_bootstrap(p)
    p.add_argument("--add", action="store_true", help="add ACLs")
    p.add_argument("--remove", action="store_true", help="remove ACLs")
    p.add_argument("--list", action="store_true", help="list ACLs")
    p.add_argument("--topic", action="append", default=[], metavar="T", help="a topic (repeatable)")
    p.add_argument("--group", action="append", default=[], metavar="G", help="a consumer group (repeatable)")
    p.add_argument("--cluster", action="store_true", help="the cluster")
    p.add_argument(
        "--transactional-id", action="append", default=[], metavar="X", help="a transactional id (repeatable)"
    )
    p.add_argument(
        "--resource-pattern-type",
        default="literal",
        type=str.lower,
        choices=("literal", "prefixed", "any", "match"),
        help="literal (default) or prefixed; any or match for --list and --remove",
    )
    p.add_argument("--allow-principal", action="append", default=[], metavar="P", help="e.g. User:alice")
    p.add_argument("--deny-principal", action="append", default=[], metavar="P")
    p.add_argument("--allow-host", action="append", default=[], metavar="H", help="default * (any host)")
    p.add_argument("--deny-host", action="append", default=[], metavar="H")
    p.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OP",
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, AlterConfigs, "
        "DescribeConfigs, IdempotentWrite, All (repeatable; default All)",
    )
    p.add_argument("--producer", action="store_true", help="the ACLs a producer needs")
    p.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs (with --group)")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE")
    p.add_argument(
        "--principal", action="append", default=[], metavar="P", help="with --list: this principal's"
    )
    p.add_argument("--force", action="store_true", help="remove without asking")


def parse_operation(text: str) -> AclOperation:
    key = text.replace("_", "").replace("-", "").upper()
    for op in AclOperation:
        if op.name.replace("_", "") == key and op not in (Op.UNKNOWN, Op.ANY):
            return op
    raise CommandError(f"Invalid operation: {text}", 2)


def pattern_str(rt: int, name: str | None, pt: int, *, filter_: bool = False) -> str:
    kind = "ResourcePatternFilter" if filter_ else "ResourcePattern"
    return f"{kind}(resourceType={ResourceType(rt).name}, name={name}, patternType={PatternType(pt).name})"


def entry_str(principal: str, host: str, op: int, perm: int) -> str:
    return (
        f"(principal={principal}, host={host}, operation={AclOperation(op).name}, "
        f"permissionType={AclPermissionType(perm).name})"
    )


def _check_principal(p: str) -> str:
    if ":" not in p:
        raise CommandError(
            f"Could not parse principal from `{p}` (no colon is present separating the principal "
            "type from the principal name)",
            2,
        )
    return p


@dataclass
class AclPlan:
    action: str
    resources: list[tuple[int, str, int]] = field(default_factory=list)  # (type, name, pattern type)
    bindings: dict[tuple[int, str, int], list[tuple[str, str, int, int]]] = field(default_factory=dict)
    principals: list[str] = field(default_factory=list)  # --list --principal


def _resources(args: argparse.Namespace, pattern: int) -> list[tuple[int, str, int]]:
    out = [(int(ResourceType.TOPIC), t, pattern) for t in args.topic]
    out += [(int(ResourceType.GROUP), g, pattern) for g in args.group]
    out += [(int(ResourceType.TRANSACTIONAL_ID), x, pattern) for x in args.transactional_id]
    if args.cluster:
        out.append((int(ResourceType.CLUSTER), CLUSTER_NAME, int(PatternType.LITERAL)))
    return out


def _entries(args: argparse.Namespace, ops: Iterable[AclOperation]) -> list[tuple[str, str, int, int]]:
    out: list[tuple[str, str, int, int]] = []
    for principals, hosts, perm in (
        (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host, AclPermissionType.DENY),
    ):
        for p in principals:
            for h in hosts or ["*"]:
                for op in ops:
                    out.append((_check_principal(p), h, int(op), int(perm)))
    return out


def plan(args: argparse.Namespace) -> AclPlan:
    """What the command does, after kafka-acls.sh's option checks."""
    actions = [a for a in ("add", "remove", "list") if getattr(args, a)]
    if len(actions) != 1:
        raise CommandError("Command must include exactly one action: --list, --add, --remove. ", 2)
    action = actions[0]
    pattern = int(PatternType[args.resource_pattern_type.upper()])
    if action == "add" and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise CommandError(
            "A '--resource-pattern-type' value of '"
            + args.resource_pattern_type
            + "' is not valid when adding acls.",
            2,
        )
    if args.idempotent and not args.producer:
        raise CommandError("Option idempotent is only allowed if producer is used", 2)
    if args.consumer and not args.group and action != "list":
        raise CommandError("With --consumer you must specify a --group", 2)
    if action == "list":
        if args.allow_principal or args.deny_principal or args.operation:
            raise CommandError(
                "Option list only allows --principal, resources and --resource-pattern-type", 2
            )
        return AclPlan(
            action, _resources(args, pattern), principals=[_check_principal(p) for p in args.principal]
        )
    resources = _resources(args, pattern)
    if not resources and not (args.producer or args.consumer):
        raise CommandError(
            "You must provide at least one resource: --topic <topic> or --cluster or --group <group> "
            "or --transactional-id <id>",
            2,
        )
    out = AclPlan(action, resources)
    if args.producer or args.consumer:
        if args.operation:
            raise CommandError("Option operation is not allowed with --producer or --consumer", 2)
        topics = [r for r in resources if r[0] == ResourceType.TOPIC]
        for r in topics:
            ops = []
            if args.producer:
                ops += [Op.WRITE, Op.DESCRIBE, Op.CREATE]
            if args.consumer:
                ops += [Op.READ, Op.DESCRIBE]
            out.bindings[r] = _entries(args, dict.fromkeys(ops))
        if args.producer:
            for r in resources:
                if r[0] == ResourceType.TRANSACTIONAL_ID:
                    out.bindings[r] = _entries(args, [Op.WRITE, Op.DESCRIBE])
            if args.idempotent:
                cluster = (int(ResourceType.CLUSTER), CLUSTER_NAME, int(PatternType.LITERAL))
                out.bindings[cluster] = _entries(args, [Op.IDEMPOTENT_WRITE])
                if cluster not in out.resources:
                    out.resources.append(cluster)
        if args.consumer:
            for r in resources:
                if r[0] == ResourceType.GROUP:
                    out.bindings[r] = _entries(args, [Op.READ])
        if action == "add" and not any(out.bindings.values()):
            raise CommandError(_NO_PRINCIPAL, 2)
        return out
    ops = [parse_operation(o) for o in args.operation] or [Op.ALL]
    for r in resources:
        valid = _VALID_OPS[r[0]]
        bad = [o for o in ops if o not in valid]
        if bad:
            raise CommandError(
                f"ResourceType {ResourceType(r[0]).name} only supports operations "
                + ",".join(o.name for o in valid),
                2,
            )
        out.bindings[r] = _entries(args, ops)
    if action == "add" and not any(out.bindings.values()):
        raise CommandError(_NO_PRINCIPAL, 2)
    return out


def _block(header: str, entries: list[str]) -> str:
    """kafka-acls.sh's block: header line, tab-indented entries, a blank line."""
    return f"{header}: \n " + "\n".join("\t" + e for e in entries) + " \n"


def _grouped(acls: Iterable[AclTuple]) -> dict[tuple[int, str, int], list[AclTuple]]:
    out: dict[tuple[int, str, int], list[AclTuple]] = {}
    for a in acls:
        out.setdefault((a[0], a[1], a[2]), []).append(a)
    return out


def _list_filters(p: AclPlan) -> list[Filter]:
    if not p.resources:
        return [
            (
                int(ResourceType.ANY),
                None,
                int(PatternType.ANY),
                None,
                None,
                int(Op.ANY),
                int(AclPermissionType.ANY),
            )
        ]
    return [
        (rt, name, pt, None, None, int(Op.ANY), int(AclPermissionType.ANY)) for rt, name, pt in p.resources
    ]


async def _print_current(client: Any, p: AclPlan) -> None:
    found: dict[AclTuple, None] = {}
    for f in _list_filters(p):
        for a in await describe_acls(client, f):
            found[a] = None
    groups = _grouped(found)
    principals: list[str | None] = list(p.principals) or [None]
    for principal in principals:
        if principal is not None:
            print(f"ACLs for principal `{principal}`")
        for key in sorted(groups):
            entries = [entry_str(a[3], a[4], a[5], a[6]) for a in groups[key] if principal in (None, a[3])]
            if entries:
                print(_block(f"Current ACLs for resource `{pattern_str(*key)}`", entries))


def _confirm(question: str) -> bool:
    print(question)
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


async def acls(args: argparse.Namespace) -> int:
    p = plan(args)
    client = _client(args)
    try:
        async with client:
            if p.action == "add":
                for r, entries in p.bindings.items():
                    if not entries:
                        continue
                    print(
                        _block(
                            f"Adding ACLs for resource `{pattern_str(*r)}`", [entry_str(*e) for e in entries]
                        )
                    )
                    errors = await create_acls(client, [(*r, *e) for e in entries])
                    failed = [e for e in errors if e is not None]
                    if failed:
                        raise CommandError(f"Error while adding ACLs: {failed[0]}")
                await _print_current(client, AclPlan("list", list(p.bindings)))
            elif p.action == "remove":
                filters: list[Filter] = []
                for r in p.resources:
                    entries = p.bindings.get(r, [])
                    shown = pattern_str(*r, filter_=True)
                    if not entries:
                        if not args.force and not _confirm(
                            f"Are you sure you want to delete all ACLs for resource filter `{shown}`? (y/n)"
                        ):
                            return 0
                        filters.append(
                            (r[0], r[1], r[2], None, None, int(Op.ANY), int(AclPermissionType.ANY))
                        )
                        continue
                    if not args.force and not _confirm(
                        "Are you sure you want to remove ACLs: \n "
                        + "\n".join("\t" + entry_str(*e) for e in entries)
                        + f" \n from resource filter `{shown}`? (y/n)"
                    ):
                        return 0
                    filters += [(r[0], r[1], r[2], e[0], e[1], e[2], e[3]) for e in entries]
                for res in await delete_acls(client, filters):
                    if not isinstance(res, list):
                        raise CommandError(f"Error while removing ACLs: {res}")
                await _print_current(client, AclPlan("list", p.resources))
            else:
                await _print_current(client, p)
    except KafkaConnectionError as e:
        raise CommandError(e.message or str(e)) from None
    return 0
