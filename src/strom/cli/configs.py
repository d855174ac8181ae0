"""``strom configs`` (like kafka-configs.sh), ``strom topics alter --partitions`` and
``strom records delete`` (like kafka-delete-records.sh), thin over :mod:`strom.client.admin`.

Output follows the Kafka tools::

    Dynamic configs for topic t are:
      retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, ...}

Error contract: as :mod:`strom.cli.commands` — :class:`CommandError` for expected failures
(usage problems exit 2), :class:`~strom.client.errors.KafkaError` for broker errors.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from strom.cli.commands import CommandError, _client, _connection_error, topic_outcome
from strom.client import admin
from strom.client.client import Client
from strom.client.errors import KafkaConnectionError, KafkaError

__all__ = [
    "ConfigTarget",
    "configs",
    "describe_config_lines",
    "parse_config_list",
    "parse_delete_list",
    "records_delete",
    "topics_alter",
]

ENTITY_TYPES = {
    "topics": admin.TOPIC,
    "brokers": admin.BROKER,
    "broker-loggers": admin.BROKER_LOGGER,
    "groups": admin.GROUP,
}
_SINGULAR = {
    "topics": "topic",
    "brokers": "broker",
    "broker-loggers": "broker-logger",
    "users": "user",
    "clients": "client",
    "ips": "ip",
    "groups": "group",
}
_DYNAMIC_SOURCE = {"topics": 1, "brokers": 2, "broker-loggers": 6, "groups": 8}


# ---------------------------------------------------------------------------- parsing


def parse_config_list(text: str) -> list[tuple[str, str]]:
    """Kafka's ``--add-config`` syntax: ``k1=v1,k2=[v1,v2],k3=v3`` (brackets hold list values
    that contain commas). Raises ``CommandError`` (exit 2) for malformed input."""
    out: list[tuple[str, str]] = []
    items: list[str] = []
    depth = 0
    cur: list[str] = []
    # bracket errors give a position, never the text: values may be passwords (SCRAM configs)
    for pos, ch in enumerate(text, 1):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise CommandError(f"unbalanced ']' at character {pos} of the config list", 2)
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise CommandError(f"unbalanced '[' in the config list ({depth} not closed)", 2)
    items.append("".join(cur))
    for item in items:
        if not item.strip():
            continue
        if "=" not in item:
            raise CommandError(f"config {item.strip()!r} is not of the form key=value", 2)
        k, v = item.split("=", 1)
        k = k.strip()
        v = v.strip()
        if not k:
            raise CommandError(f"config {item.strip()!r} has an empty name", 2)
        if v.startswith("[") and v.endswith("]"):
            v = ",".join(s.strip() for s in v[1:-1].split(",") if s.strip())
        out.append((k, v))
    return out


def parse_delete_list(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def _read_config_file(path: str) -> list[tuple[str, str]]:
    from strom.config import parse_properties

    try:
        return list(parse_properties(Path(path).read_text()).items())
    except OSError as e:
        raise CommandError(f"cannot read --add-config-file {path}: {e.strerror or e}", 2) from None


# ---------------------------------------------------------------------------- targets


class EntityOrder(argparse.Action):
    """``--entity-type/--entity-name/--entity-default`` in command-line order (``entity_seq``),
    so that kafka-configs.sh's ``--entity-type users --entity-name alice --entity-type clients
    --entity-default`` pairs each name with the type before it; the attribute keeps the last
    value as a plain option would."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        seq = list(getattr(namespace, "entity_seq", None) or [])
        value = True if self.nargs == 0 else values
        seq.append((self.dest, value))
        namespace.entity_seq = seq
        setattr(namespace, self.dest, value)


def quota_entity_from_args(args: argparse.Namespace) -> list[tuple[str, str | bool | None]] | None:
    """A quota entity of several types (users + clients), as ``[(type, name)]`` with name None
    for ``--entity-default`` and False for none given (describe: every such entity); None when
    one entity type (or none) was given. Raises ``CommandError`` (exit 2) for bad pairings."""
    seq = getattr(args, "entity_seq", None) or []
    if sum(1 for dest, _ in seq if dest == "entity_type") < 2:
        return None
    pairs: list[list[Any]] = []
    for dest, value in seq:
        if dest == "entity_type":
            pairs.append([value, False])
        elif not pairs:
            raise CommandError("--entity-name/--entity-default must follow an --entity-type", 2)
        elif pairs[-1][1] is not False:
            raise CommandError(f"more than one --entity-name/--entity-default for {pairs[-1][0]}", 2)
        else:
            pairs[-1][1] = None if dest == "entity_default" else value
    types = [t for t, _ in pairs]
    if sorted(types) != ["clients", "users"]:
        raise CommandError(
            "only --entity-type users and --entity-type clients can be combined "
            f"(a user+client-id quota entity), not {' and '.join(types)}", 2
        )
    return [(t, n) for t, n in pairs]


@dataclass(frozen=True)
class ConfigTarget:
    entity_type: str  # topics | brokers | broker-loggers
    name: str | None  # None: every entity of the type; "" for brokers: the cluster default

    @property
    def resource_type(self) -> int:
        return ENTITY_TYPES[self.entity_type]

    @property
    def is_default(self) -> bool:
        return self.entity_type == "brokers" and self.name == ""

    def header(self, all_configs: bool) -> str:
        if self.is_default:
            return "Default configs for brokers in the cluster are:"
        kind = "All" if all_configs else "Dynamic"
        return f"{kind} configs for {_SINGULAR[self.entity_type]} {self.name} are:"

    def done(self) -> str:
        if self.is_default:
            return "Completed updating default config for brokers in the cluster."
        return f"Completed updating config for {_SINGULAR[self.entity_type]} {self.name}."


def target_from_args(args: argparse.Namespace) -> ConfigTarget:
    """Resolve ``--entity-type/--entity-name/--entity-default`` and the shortcuts ``--topic``,
    ``--broker``, ``--broker-defaults``, ``--broker-logger``."""
    chosen: list[ConfigTarget] = []
    if args.topic is not None:
        chosen.append(ConfigTarget("topics", args.topic))
    if args.broker is not None:
        chosen.append(ConfigTarget("brokers", args.broker))
    if args.broker_defaults:
        chosen.append(ConfigTarget("brokers", ""))
    if args.broker_logger is not None:
        chosen.append(ConfigTarget("broker-loggers", args.broker_logger))
    if args.entity_type is not None:
        etype = args.entity_type
        if args.entity_default and args.entity_name is not None:
            raise CommandError("--entity-name and --entity-default cannot be used together", 2)
        if args.entity_default:
            if etype in ("users", "clients", "ips"):  # (the default quota entity: name None there)
                chosen.append(ConfigTarget(etype, ""))
                return chosen[0]
            if etype != "brokers":
                raise CommandError(f"--entity-default is not supported for --entity-type {etype}", 2)
            chosen.append(ConfigTarget(etype, ""))
        else:
            chosen.append(ConfigTarget(etype, args.entity_name))
    elif args.entity_name is not None or args.entity_default:
        raise CommandError("--entity-name/--entity-default need --entity-type", 2)
    if len(chosen) != 1:
        raise CommandError(
            "give exactly one entity: --entity-type with --entity-name/--entity-default, "
            "or one of --topic, --broker, --broker-defaults, --broker-logger",
            2,
        )
    target = chosen[0]
    name = target.name
    if target.entity_type in ("brokers", "broker-loggers") and name and not name.strip().isdigit():
        raise CommandError(f"the entity name for {target.entity_type} must be a broker id, not {name!r}", 2)
    if target.entity_type == "topics" and target.name == "":
        raise CommandError("the topic name must not be empty", 2)
    return target


# ---------------------------------------------------------------------------- describe


def _show(value: str | None) -> str:
    return "null" if value is None else value


def describe_config_lines(
    target: ConfigTarget, entries: Sequence[admin.ConfigInfo], all_configs: bool
) -> list[str]:
    """The lines kafka-configs.sh prints for one entity."""
    lines = [target.header(all_configs)]
    dynamic = 3 if target.is_default else _DYNAMIC_SOURCE[target.entity_type]
    for e in sorted(entries, key=lambda e: e.name):
        if not all_configs and e.source != dynamic:
            continue
        value = None if e.sensitive else e.value
        synonyms = ", ".join(
            f"{admin.SOURCE_NAMES.get(src, str(src))}:{name}={_show(None if e.sensitive else val)}"
            for name, val, src in e.synonyms
        )
        lines.append(
            f"  {e.name}={_show(value)} sensitive={str(e.sensitive).lower()} synonyms={{{synonyms}}}"
        )
    return lines


async def _expand(client: Client, target: ConfigTarget) -> list[ConfigTarget]:
    if target.name is not None:
        return [target]
    if target.entity_type == "topics":
        return [ConfigTarget("topics", n) for n in await client.list_topics()]
    if target.entity_type == "groups":
        from ..client.groups import list_groups

        return [ConfigTarget("groups", g.group_id) for g in await list_groups(client)]
    md = await client.metadata([])
    ids = [ConfigTarget(target.entity_type, str(b)) for b in sorted(md.brokers)]
    if target.entity_type == "brokers":
        ids.append(ConfigTarget("brokers", ""))
    return ids


async def _describe(client: Client, target: ConfigTarget, all_configs: bool) -> int:
    for t in await _expand(client, target):
        try:
            entries = await admin.describe_configs(client, t.resource_type, t.name or "")
        except KafkaError as e:
            if e.code == ErrorCode.unknown_topic_or_partition:
                raise CommandError(f"topic {t.name!r} does not exist") from None
            raise
        for line in describe_config_lines(t, entries, all_configs):
            print(line)
    return 0


# ---------------------------------------------------------------------------- alter


def alter_ops(args: argparse.Namespace) -> list[tuple[str, int, str | None]]:
    ops: list[tuple[str, int, str | None]] = []
    for text in args.add_config:
        ops += [(k, admin.SET, v) for k, v in parse_config_list(text)]
    for path in args.add_config_file:
        ops += [(k, admin.SET, v) for k, v in _read_config_file(path)]
    for text in args.append_config:
        ops += [(k, admin.APPEND, v) for k, v in parse_config_list(text)]
    for text in args.subtract_config:
        ops += [(k, admin.SUBTRACT, v) for k, v in parse_config_list(text)]
    for text in args.delete_config:
        ops += [(k, admin.DELETE, None) for k in parse_delete_list(text)]
    if not ops:
        raise CommandError(
            "alter needs --add-config, --add-config-file, --append-config, --subtract-config "
            "or --delete-config",
            2,
        )
    seen: set[str] = set()
    for name, _, _ in ops:
        if name in seen:
            raise CommandError(f"config {name!r} is given more than once", 2)
        seen.add(name)
    return ops


async def _alter(client: Client, target: ConfigTarget, ops: list[tuple[str, int, str | None]]) -> int:
    if target.name is None:
        raise CommandError("alter needs --entity-name or --entity-default", 2)
    try:
        await admin.incremental_alter_configs(client, target.resource_type, target.name, ops)
    except KafkaError as e:
        if e.code == ErrorCode.unknown_topic_or_partition:
            raise CommandError(f"topic {target.name!r} does not exist") from None
        raise CommandError(f"cannot alter configs: {e}") from None
    print(target.done())
    return 0


async def configs(args: argparse.Namespace, action: str) -> int:
    combined = quota_entity_from_args(args)
    if combined is not None:
        return await _combined_quotas(args, action, combined)
    target = target_from_args(args)
    ops = alter_ops(args) if action == "alter" else []
    quota_ops = [op for op in ops if op[0] in QUOTA_KEYS]
    if target.entity_type in ("clients", "ips") or (quota_ops and target.entity_type == "users"):
        if len(quota_ops) != len(ops):
            bad = sorted({op[0] for op in ops} - QUOTA_KEYS)
            allowed = ", ".join(sorted(QUOTA_KEYS))
            raise CommandError(f"only quota configs ({allowed}) can be set here, not {bad}", 2)
        client = _client(args)
        try:
            async with client:
                if action == "describe":
                    return await _describe_quotas(client, target)
                return await _alter_quotas(client, target, quota_ops)
        except KafkaConnectionError as e:
            raise _connection_error(e) from None
    scram = scram_changes(target, ops) if target.entity_type == "users" and action == "alter" else None
    client = _client(args)
    try:
        async with client:
            if target.entity_type == "users":
                if scram is None:
                    # kafka-configs.sh lists a user's quotas, then its SCRAM credentials
                    await _describe_quotas(client, target, quiet=True)
                    if target.name == "":
                        return 0
                    return await _describe_users(client, target)
                return await _alter_users(client, target, *scram)
            if action == "describe":
                return await _describe(client, target, args.all)
            return await _alter(client, target, ops)
    except KafkaConnectionError as e:
        raise _connection_error(e) from None


# ---------------------------------------------------------------------------- quotas (users, clients)

QUOTA_KEYS = frozenset(
    {
        "producer_byte_rate",
        "consumer_byte_rate",
        "request_percentage",
        "controller_mutation_rate",
        "connection_creation_rate",
    }
)
_QUOTA_TYPE = {"users": "user", "clients": "client-id", "ips": "ip"}
_QUOTA_TEXT = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}


def _quota_entity_text(target: ConfigTarget) -> str:
    what = _QUOTA_TEXT[_QUOTA_TYPE[target.entity_type]]
    return f"the default {what}" if target.name == "" else f"{what} '{target.name}'"


def _entity_text(entity: Sequence[Any]) -> str:
    """Kafka's order and words: user first, then client id, then IP."""
    parts = {str(e.entity_type): e.entity_name for e in entity}
    out = []
    for etype in ("user", "client-id", "ip"):
        if etype in parts:
            name = parts[etype]
            what = _QUOTA_TEXT[etype]
            out.append(f"the default {what}" if name is None else f"{what} '{name}'")
    return ", ".join(out)


async def _combined_quotas(
    args: argparse.Namespace, action: str, entity: list[tuple[str, str | bool | None]]
) -> int:
    """users + clients: describe or alter the user+client-id quota entity (or its defaults)."""
    ops = alter_ops(args) if action == "alter" else []
    bad = sorted({op[0] for op in ops} - QUOTA_KEYS)
    if bad:
        allowed = ", ".join(sorted(QUOTA_KEYS))
        raise CommandError(f"only quota configs ({allowed}) can be set here, not {bad}", 2)
    client = _client(args)
    try:
        async with client:
            conn = await client.any_connection()
            if action == "describe":
                components = []
                for etype, name in entity:
                    qtype = _QUOTA_TYPE[etype]
                    if name is False:
                        components.append({"entity_type": qtype, "match_type": 2, "match": None})
                    elif name is None:
                        components.append({"entity_type": qtype, "match_type": 1, "match": None})
                    else:
                        components.append({"entity_type": qtype, "match_type": 0, "match": name})
                resp = await conn.request(48, {"components": components, "strict": True})
                if int(resp.error_code):
                    raise CommandError(
                        f"cannot describe quotas: {KafkaError(int(resp.error_code), resp.error_message)}"
                    )
                for e in resp.entries or ():
                    values = ",".join(f"{v.key}={float(v.value)}" for v in e.values)
                    print(f"Quota configs for {_entity_text(e.entity)} are {values}")
                return 0
            if any(name is False for _, name in entity):
                raise CommandError("alter needs --entity-name or --entity-default for each --entity-type", 2)
            body = [{"entity_type": _QUOTA_TYPE[t], "entity_name": n} for t, n in entity]
            resp = await conn.request(
                49, {"entries": [{"entity": body, "ops": _quota_body_ops(ops)}], "validate_only": False}
            )
            for e in resp.entries:
                if int(e.error_code):
                    err = KafkaError(int(e.error_code), e.error_message)
                    raise CommandError(f"cannot alter quotas: {err}")
            head_type, head_name = entity[0]
            if head_name is None:
                print(f"Completed updating default config for {head_type} in the cluster.")
            else:
                print(f"Completed updating config for {_SINGULAR[head_type]} {head_name}.")
            return 0
    except KafkaConnectionError as e:
        raise _connection_error(e) from None


def _quota_body_ops(ops: list[tuple[str, int, str | None]]) -> list[dict[str, Any]]:
    body_ops = []
    for key, op, value in ops:
        if op == admin.DELETE:
            body_ops.append({"key": key, "value": 0.0, "remove": True})
            continue
        if op != admin.SET:
            raise CommandError("quota configs are set with --add-config or removed with --delete-config", 2)
        try:
            number = float(value or "")
        except ValueError:
            raise CommandError(f"the value of {key} must be a number, not {value!r}", 2) from None
        body_ops.append({"key": key, "value": number, "remove": False})
    return body_ops


async def _describe_quotas(client: Client, target: ConfigTarget, quiet: bool = False) -> int:
    """kafka-configs.sh's "Quota configs for user-principal 'alice' are k=v,..." lines."""
    etype = _QUOTA_TYPE[target.entity_type]
    if target.name is None:
        component = {"entity_type": etype, "match_type": 2, "match": None}  # every named one
    elif target.name == "":
        component = {"entity_type": etype, "match_type": 1, "match": None}
    else:
        component = {"entity_type": etype, "match_type": 0, "match": target.name}
    conn = await client.any_connection()
    resp = await conn.request(48, {"components": [component], "strict": True})
    if int(resp.error_code):
        if quiet:  # (users: a broker off the metadata quorum has no quotas, SCRAM still answers)
            return 0
        raise CommandError(f"cannot describe quotas: {KafkaError(int(resp.error_code), resp.error_message)}")
    for entry in resp.entries or ():
        name = next(str(e.entity_name) if e.entity_name is not None else "" for e in entry.entity)
        values = ",".join(f"{v.key}={float(v.value)}" for v in entry.values)
        print(f"Quota configs for {_quota_entity_text(ConfigTarget(target.entity_type, name))} are {values}")
    return 0


async def _alter_quotas(client: Client, target: ConfigTarget, ops: list[tuple[str, int, str | None]]) -> int:
    if target.name is None:
        raise CommandError("alter needs --entity-name or --entity-default", 2)
    entity = [{"entity_type": _QUOTA_TYPE[target.entity_type], "entity_name": target.name or None}]
    body_ops = _quota_body_ops(ops)
    conn = await client.any_connection()
    resp = await conn.request(49, {"entries": [{"entity": entity, "ops": body_ops}], "validate_only": False})
    for e in resp.entries:
        if int(e.error_code):
            raise CommandError(f"cannot alter quotas: {KafkaError(int(e.error_code), e.error_message)}")
    if target.name == "":
        print(f"Completed updating default config for {target.entity_type} in the cluster.")
    else:
        print(target.done())
    return 0


# ---------------------------------------------------------------------------- users (SCRAM)

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_SCRAM_ITERATIONS = 4096  # kafka-configs.sh's default when iterations= is not given


def scram_changes(
    target: ConfigTarget, ops: list[tuple[str, int, str | None]]
) -> tuple[list[tuple[str, str, str, int]], list[tuple[str, str]]]:
    """``--add-config 'SCRAM-SHA-256=[iterations=8192,password=secret]'`` and
    ``--delete-config SCRAM-SHA-512`` for ``--entity-type users`` -> (upsertions, deletions)."""
    if not target.name:
        raise CommandError("alter of users needs --entity-name", 2)
    ups: list[tuple[str, str, str, int]] = []
    dels: list[tuple[str, str]] = []
    for name, op, value in ops:
        mech = name.upper()
        if mech not in SCRAM_MECHANISMS:
            raise CommandError(f"only {' and '.join(SCRAM_MECHANISMS)} configs are supported for users", 2)
        if op == admin.DELETE:
            dels.append((target.name, mech))
            continue
        if op != admin.SET:
            raise CommandError(f"{mech} can only be added (--add-config) or deleted (--delete-config)", 2)
        # the value holds a password: errors name fields, never the text
        usage = f"{mech} needs [iterations=N,]password=P"
        try:
            fields = dict(parse_config_list(value or ""))
        except CommandError:
            raise CommandError(f"{usage}: malformed value", 2) from None
        unknown = set(fields) - {"iterations", "password"}
        if unknown or "password" not in fields:
            got = ", ".join(sorted(fields)) or "none"
            raise CommandError(f"{usage}, got fields: {got}", 2)
        try:
            iterations = int(fields.get("iterations", DEFAULT_SCRAM_ITERATIONS))
        except ValueError:
            raise CommandError(f"{mech}: iterations must be an integer", 2) from None
        ups.append((target.name, mech, fields["password"], iterations))
    return ups, dels


async def _describe_users(client: Client, target: ConfigTarget) -> int:
    users = None if target.name is None else [target.name]
    result = await admin.describe_user_scram_credentials(client, users)
    for user, infos in sorted(result.items()):
        if isinstance(infos, KafkaError):
            if infos.code == ErrorCode.resource_not_found:
                print(f"SCRAM credential configs for user-principal '{user}' are ")
                continue
            raise CommandError(f"cannot describe user {user!r}: {infos}")
        creds = ", ".join(f"{m}=iterations={i}" for m, i in sorted(infos))
        print(f"SCRAM credential configs for user-principal '{user}' are {creds}")
    return 0


async def _alter_users(
    client: Client, target: ConfigTarget, ups: list[tuple[str, str, str, int]], dels: list[tuple[str, str]]
) -> int:
    result = await admin.alter_user_scram_credentials(client, ups, dels)
    for user, err in result.items():
        if err is not None:
            raise CommandError(f"cannot alter SCRAM credentials of user {user!r}: {err}")
    print(target.done())
    return 0


# ---------------------------------------------------------------------------- topics alter


async def topics_alter(args: argparse.Namespace) -> int:
    """``strom topics alter --topic T --partitions N`` (CreatePartitions)."""
    if args.partitions is None:
        raise CommandError("alter needs --partitions", 2)
    if args.partitions < 1:
        raise CommandError("--partitions must be at least 1", 2)
    if args.config:
        raise CommandError("topic configs are altered with 'strom configs alter --topic ... --add-config'", 2)
    client = _client(args)
    try:
        async with client:
            result = await admin.create_partitions(client, {args.topic: args.partitions})
    except KafkaConnectionError as e:
        raise _connection_error(e) from None
    return topic_outcome(result.get(args.topic), args, "alter")


# ---------------------------------------------------------------------------- records delete


def parse_offset_json(text: str) -> dict[str, dict[int, int]]:
    """kafka-delete-records.sh's ``--offset-json-file`` document:
    ``{"partitions": [{"topic": "t", "partition": 0, "offset": 3}], "version": 1}``."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise CommandError(f"the offset JSON is not valid JSON: {e}", 2) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise CommandError('the offset JSON must be an object with a "partitions" list', 2)
    out: dict[str, dict[int, int]] = {}
    for item in doc["partitions"]:
        try:
            topic = str(item["topic"])
            partition = int(item["partition"])
            offset = int(item["offset"])
        except (KeyError, TypeError, ValueError):
            raise CommandError(f"bad partition entry in the offset JSON: {item!r}", 2) from None
        parts = out.setdefault(topic, {})
        if partition in parts:
            raise CommandError(f"offset JSON names partition {topic}-{partition} more than once", 2)
        parts[partition] = offset
    if not out:
        raise CommandError("the offset JSON names no partition", 2)
    return out


def _records_targets(args: argparse.Namespace) -> dict[str, dict[int, int]]:
    if args.offset_json_file is not None:
        if args.topic is not None:
            raise CommandError("give either --offset-json-file or --topic/--partition/--offset", 2)
        try:
            text = Path(args.offset_json_file).read_text()
        except OSError as e:
            raise CommandError(f"cannot read {args.offset_json_file}: {e.strerror or e}", 2) from None
        return parse_offset_json(text)
    if args.topic is None or args.offset is None:
        raise CommandError("delete needs --offset-json-file, or --topic and --offset (and --partition)", 2)
    parts = [args.partition] if args.partition is not None else None
    return {args.topic: dict.fromkeys(parts or [-1], args.offset)}


async def records_delete(args: argparse.Namespace) -> int:
    wanted = _records_targets(args)
    client = _client(args)
    failed = False
    try:
        async with client:
            print("Executing records delete operation")
            results: list[tuple[str, int, int | KafkaError]] = []
            for topic, parts in wanted.items():
                if -1 in parts and len(parts) == 1 and args.offset_json_file is None:
                    t = await client.topic(topic, refresh=True)
                    parts = dict.fromkeys(t.partitions, parts[-1])
                res = await admin.delete_records(client, topic, parts)
                results += [(topic, p, r) for p, r in res.items()]
    except KafkaConnectionError as e:
        raise _connection_error(e) from None
    print("Records delete operation completed:")
    for topic, p, r in results:
        if isinstance(r, KafkaError):
            failed = True
            print(f"partition: {topic}-{p}\terror: {r}")
        else:
            print(f"partition: {topic}-{p}\tlow_watermark: {r}")
    return 1 if failed else 0
