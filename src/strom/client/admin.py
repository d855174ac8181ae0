"""Config and partition administration over :class:`strom.client.Client`: DescribeConfigs,
IncrementalAlterConfigs, AlterConfigs, CreatePartitions, DeleteRecords, DescribeLogDirs,
Describe/AlterUserScramCredentials.

Works against any Kafka-compatible broker. Broker resources are sent to the broker they name
(the cluster default, ``""``, to any broker), like Kafka's AdminClient.

Error contract: a resource-level error is raised as :class:`~strom.client.errors.KafkaError`
carrying the broker's code and message; per-topic/partition results return errors as values.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from strom.client.client import Client
from strom.client.connection import KafkaConnection
from strom.client.errors import KafkaError
from strom.security.scram_keys import SCRAM_MECHANISMS, salted_password

__all__ = [
    "SOURCE_NAMES",
    "ConfigInfo",
    "alter_configs",
    "alter_user_scram_credentials",
    "create_partitions",
    "delete_records",
    "describe_configs",
    "describe_log_dirs",
    "describe_user_scram_credentials",
    "incremental_alter_configs",
]

DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
INCREMENTAL_ALTER_CONFIGS = 44
CREATE_PARTITIONS = 37
DELETE_RECORDS = 21
DESCRIBE_LOG_DIRS = 35
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
SCRAM_MECHANISM_IDS = {name: wire_id for name, (wire_id, _hash) in SCRAM_MECHANISMS.items()}

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
GROUP = 32

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

SOURCE_NAMES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}


@dataclass(frozen=True)
class ConfigInfo:
    name: str
    value: str | None
    source: int
    read_only: bool = False
    sensitive: bool = False
    synonyms: tuple[tuple[str, str | None, int], ...] = field(default=())

    @property
    def source_name(self) -> str:
        return SOURCE_NAMES.get(self.source, str(self.source))


async def _conn_for(client: Client, resource_type: int, name: str) -> KafkaConnection:
    if resource_type in (BROKER, BROKER_LOGGER) and name.strip().isdigit():
        return await client.broker_connection(int(name))
    return await client.any_connection()


def _raise_resource_error(code: int, message: str | None, what: str) -> None:
    if code:
        raise KafkaError(code, message or what)


async def describe_configs(
    client: Client,
    resource_type: int,
    name: str,
    *,
    keys: Sequence[str] | None = None,
    include_synonyms: bool = True,
) -> list[ConfigInfo]:
    """Every config of one resource (topic ``2``, broker ``4``, broker logger ``8``)."""
    conn = await _conn_for(client, resource_type, name)
    resp = await conn.request(
        DESCRIBE_CONFIGS,
        {
            "resources": [
                {
                    "resource_type": resource_type,
                    "resource_name": name,
                    "configuration_keys": list(keys) if keys else None,
                }
            ],
            "include_synonyms": include_synonyms,
            "include_documentation": False,
        },
    )
    out: list[ConfigInfo] = []
    for res in resp.results:
        _raise_resource_error(int(res.error_code), res.error_message, f"describe configs of {name!r}")
        for c in res.configs:
            source = int(getattr(c, "config_source", -1))
            if source < 0:
                source = 5 if getattr(c, "is_default", False) else (1 if resource_type == TOPIC else 4)
            out.append(
                ConfigInfo(
                    name=c.name,
                    value=c.value,
                    source=source,
                    read_only=bool(c.read_only),
                    sensitive=bool(c.is_sensitive),
                    synonyms=tuple(
                        (s.name, s.value, int(s.source)) for s in getattr(c, "synonyms", ()) or ()
                    ),
                )
            )
    return out


async def incremental_alter_configs(
    client: Client,
    resource_type: int,
    name: str,
    ops: Iterable[tuple[str, int, str | None]],
    *,
    validate_only: bool = False,
) -> None:
    """Apply ``(config, operation, value)`` operations (SET 0, DELETE 1, APPEND 2, SUBTRACT 3)."""
    configs = [{"name": n, "config_operation": op, "value": v} for n, op, v in ops]
    await _alter(client, INCREMENTAL_ALTER_CONFIGS, resource_type, name, configs, validate_only)


async def alter_configs(
    client: Client,
    resource_type: int,
    name: str,
    configs: Mapping[str, str],
    *,
    validate_only: bool = False,
) -> None:
    """Legacy AlterConfigs: ``configs`` replace every dynamic config of the resource."""
    entries = [{"name": k, "value": v} for k, v in configs.items()]
    await _alter(client, ALTER_CONFIGS, resource_type, name, entries, validate_only)


async def _alter(
    client: Client,
    api_key: int,
    resource_type: int,
    name: str,
    configs: list[dict[str, Any]],
    validate_only: bool,
) -> None:
    """One AlterConfigs or IncrementalAlterConfigs request for one resource."""
    conn = await _conn_for(client, resource_type, name)
    resource = {"resource_type": resource_type, "resource_name": name, "configs": configs}
    resp = await conn.request(api_key, {"resources": [resource], "validate_only": validate_only})
    for r in resp.responses:
        _raise_resource_error(int(r.error_code), r.error_message, f"alter configs of {name!r}")


async def create_partitions(
    client: Client, counts: Mapping[str, int], *, timeout_ms: int = 30_000, validate_only: bool = False
) -> dict[str, KafkaError | None]:
    """Grow topics to ``{topic: total partition count}``; per-topic ``None`` or the error."""
    conn = await client.any_connection()
    resp = await conn.request(
        CREATE_PARTITIONS,
        {
            "topics": [{"name": t, "count": n, "assignments": None} for t, n in counts.items()],
            "timeout": timeout_ms,
            "validate_only": validate_only,
        },
        timeout=client.request_timeout + timeout_ms / 1000,
    )
    out: dict[str, KafkaError | None] = {}
    for r in resp.results:
        code = int(r.error_code)
        out[str(r.name)] = KafkaError(code, getattr(r, "error_message", None)) if code else None
    return out


async def delete_records(
    client: Client, topic: str, offsets: Mapping[int, int], *, timeout_ms: int = 30_000
) -> dict[int, int | KafkaError]:
    """Delete records before ``{partition: offset}`` (-1: the high watermark). Returns per
    partition the new low watermark or the error. Each request goes to the partition leader."""
    t = await client.topic(topic, refresh=True)
    by_leader: dict[int, dict[int, int]] = {}
    out: dict[int, int | KafkaError] = {}
    for p, off in offsets.items():
        pm = t.partitions.get(p)
        if pm is None:
            out[p] = KafkaError(int(ErrorCode.unknown_topic_or_partition), f"partition {topic}-{p}")
            continue
        by_leader.setdefault(pm.leader, {})[p] = off
    for leader, parts in by_leader.items():
        conn = await client.broker_connection(leader)
        resp = await conn.request(
            DELETE_RECORDS,
            {
                "topics": [
                    {
                        "name": topic,
                        "partitions": [{"partition_index": p, "offset": o} for p, o in parts.items()],
                    }
                ],
                "timeout": timeout_ms,
            },
            timeout=client.request_timeout + timeout_ms / 1000,
        )
        for rt in resp.topics:
            for rp in rt.partitions:
                code = int(rp.error_code)
                p = int(rp.partition_index)
                out[p] = KafkaError(code, f"delete records {topic}-{p}") if code else int(rp.low_watermark)
    return dict(sorted(out.items()))


async def describe_log_dirs(
    client: Client, node_id: int | None = None, topics: Mapping[str, Sequence[int]] | None = None
) -> list[tuple[str, int, dict[tuple[str, int], int]]]:
    """``[(log_dir, error_code, {(topic, partition): size_bytes})]`` of one broker."""
    conn = await (client.broker_connection(node_id) if node_id is not None else client.any_connection())
    resp = await conn.request(
        DESCRIBE_LOG_DIRS,
        {
            "topics": None
            if topics is None
            else [{"topic": t, "partitions": list(ps)} for t, ps in topics.items()]
        },
    )
    out = []
    for r in resp.results:
        sizes = {
            (str(t.name), int(p.partition_index)): int(p.partition_size)
            for t in r.topics
            for p in t.partitions
        }
        out.append((str(r.log_dir), int(r.error_code), sizes))
    return out


async def alter_user_scram_credentials(
    client: Client,
    upsertions: Sequence[tuple[str, str, str, int]] = (),
    deletions: Sequence[tuple[str, str]] = (),
) -> dict[str, KafkaError | None]:
    """Set SCRAM credentials ``(user, mechanism, password, iterations)`` and delete
    ``(user, mechanism)`` ones (mechanism ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``). As Kafka's
    AdminClient, the password never leaves the client: a random salt and the salted password
    (RFC 5802 ``Hi``, PBKDF2-HMAC) are sent. Per user ``None`` or the (first) error.

    A Kafka 4 controller refuses two changes of one user in one request (DUPLICATE_RESOURCE,
    even for two mechanisms), so the changes go in as many requests as the most-changed user
    needs, each naming a user once."""
    changes: list[tuple[str, str, dict[str, Any]]] = []  # (user, "deletions"/"upsertions", entry)
    for user, mech in deletions:
        changes.append((user, "deletions", {"name": user, "mechanism": _scram_mechanism_id(mech)}))
    for user, mech, password, iterations in upsertions:
        mech_id = _scram_mechanism_id(mech)
        salt = os.urandom(32)
        salted = salted_password(SCRAM_MECHANISMS[mech.upper()][1], password, salt, iterations)
        entry = {
            "name": user,
            "mechanism": mech_id,
            "iterations": iterations,
            "salt": salt,
            "salted_password": salted,
        }
        changes.append((user, "upsertions", entry))
    rounds: list[dict[str, list[dict[str, Any]]]] = []
    times: dict[str, int] = {}
    for user, kind, entry in changes:
        n = times[user] = times.get(user, -1) + 1
        while len(rounds) <= n:
            rounds.append({"deletions": [], "upsertions": []})
        rounds[n][kind].append(entry)
    conn = await client.any_connection()
    out: dict[str, KafkaError | None] = {}
    for body in rounds or [{"deletions": [], "upsertions": []}]:
        resp = await conn.request(ALTER_USER_SCRAM_CREDENTIALS, body)
        for r in resp.results:
            code = int(r.error_code)
            if out.get(str(r.user)) is None:
                out[str(r.user)] = KafkaError(code, r.error_message) if code else None
    return out


async def describe_user_scram_credentials(
    client: Client, users: Sequence[str] | None = None
) -> dict[str, list[tuple[str, int]] | KafkaError]:
    """``{user: [(mechanism, iterations)]}`` (all users when ``users`` is None), or per user the
    error (RESOURCE_NOT_FOUND for a user without credentials)."""
    conn = await client.any_connection()
    resp = await conn.request(
        DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": None if users is None else [{"name": u} for u in users]}
    )
    _raise_resource_error(int(resp.error_code), resp.error_message, "describe SCRAM credentials")
    names = {v: k for k, v in SCRAM_MECHANISM_IDS.items()}
    out: dict[str, list[tuple[str, int]] | KafkaError] = {}
    for r in resp.results:
        code = int(r.error_code)
        if code:
            out[str(r.user)] = KafkaError(code, r.error_message)
        else:
            out[str(r.user)] = [
                (names.get(int(c.mechanism), str(int(c.mechanism))), int(c.iterations))
                for c in r.credential_infos
            ]
    return out


def _scram_mechanism_id(mechanism: str) -> int:
    mech_id = SCRAM_MECHANISM_IDS.get(mechanism.upper())
    if mech_id is None:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}: SCRAM-SHA-256 or SCRAM-SHA-512")
    return mech_id


# ---------------------------------------------------------------------------- ACLs
# an ACL binding as plain codes: (resource type, name, pattern type, principal, host, operation,
# permission type), Kafka's numeric codes (strom.security.authorizer)
AclTuple = tuple[int, str, int, str, str, int, int]


async def create_acls(client: Client, bindings: Sequence[AclTuple]) -> list[KafkaError | None]:
    """CreateAcls (30): per binding ``None`` or its error."""
    conn = await client.any_connection()
    resp = await conn.request(
        30,
        {
            "creations": [
                {
                    "resource_type": rt,
                    "resource_name": name,
                    "resource_pattern_type": pt,
                    "principal": principal,
                    "host": host,
                    "operation": op,
                    "permission_type": perm,
                }
                for rt, name, pt, principal, host, op, perm in bindings
            ]
        },
    )
    return [
        KafkaError(int(r.error_code), r.error_message) if int(r.error_code) else None for r in resp.results
    ]


def _filter_body(flt: tuple[int, str | None, int, str | None, str | None, int, int]) -> dict[str, Any]:
    rt, name, pt, principal, host, op, perm = flt
    return {
        "resource_type_filter": rt,
        "resource_name_filter": name,
        "pattern_type_filter": pt,
        "principal_filter": principal,
        "host_filter": host,
        "operation": op,
        "permission_type": perm,
    }


async def describe_acls(
    client: Client, flt: tuple[int, str | None, int, str | None, str | None, int, int]
) -> list[AclTuple]:
    """DescribeAcls (29): the ACLs a filter matches (raises the request's error)."""
    conn = await client.any_connection()
    resp = await conn.request(29, _filter_body(flt))
    code = int(resp.error_code)
    if code:
        raise KafkaError(code, resp.error_message)
    return [
        (int(r.resource_type), str(r.resource_name), int(r.pattern_type), str(a.principal), str(a.host),
         int(a.operation), int(a.permission_type))
        for r in resp.resources
        for a in r.acls
    ]


async def delete_acls(
    client: Client, filters: Sequence[tuple[int, str | None, int, str | None, str | None, int, int]]
) -> list[list[AclTuple] | KafkaError]:
    """DeleteAcls (31): per filter the ACLs it deleted, or its error."""
    conn = await client.any_connection()
    resp = await conn.request(31, {"filters": [_filter_body(f) for f in filters]})
    out: list[list[AclTuple] | KafkaError] = []
    for r in resp.filter_results:
        code = int(r.error_code)
        if code:
            out.append(KafkaError(code, r.error_message))
            continue
        out.append(
            [
                (int(m.resource_type), str(m.resource_name), int(m.pattern_type), str(m.principal),
                 str(m.host), int(m.operation), int(m.permission_type))
                for m in r.matching_acls
            ]
        )
    return out
