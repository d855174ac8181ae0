"""Consumer-group administration over :class:`strom.client.Client`: FindCoordinator,
ListGroups, DescribeGroups (and ConsumerGroupDescribe for KIP-848 groups), OffsetFetch,
OffsetCommit (as an admin: no member, generation -1) and DeleteGroups.

Works against any Kafka-compatible broker, like Kafka's AdminClient: ListGroups goes to every
broker (each answers for the groups it coordinates); everything else goes to the group's
coordinator, found with FindCoordinator and found again when the broker answers
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS.

Error contract: group-level errors raise :class:`~strom.client.errors.KafkaError`;
per-partition and per-group results of batch calls return errors as values.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from strom.client.client import BrokerMetadata, Client
from strom.client.connection import KafkaConnection
from strom.client.errors import KafkaConnectionError, KafkaError, KafkaProtocolError

__all__ = [
    "GROUP",
    "TRANSACTION",
    "GroupDescription",
    "ListedGroup",
    "MemberDescription",
    "OffsetAndMetadata",
    "commit_offsets",
    "delete_groups",
    "delete_offsets",
    "describe_group",
    "fetch_offsets",
    "find_coordinator",
    "list_groups",
    "parse_consumer_assignment",
    "with_coordinator",
]

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42
OFFSET_DELETE = 47
CONSUMER_GROUP_DESCRIBE = 69

GROUP = 0
TRANSACTION = 1

COORDINATOR_RETRY_CODES = frozenset(
    {
        int(ErrorCode.coordinator_not_available),
        int(ErrorCode.coordinator_load_in_progress),
        int(ErrorCode.not_coordinator),
    }
)

T = TypeVar("T")


@dataclass(frozen=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str
    coordinator: int


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def partitions(self) -> list[tuple[str, int]]:
        return sorted((t, p) for t, ps in self.assignment.items() for p in ps)


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    """The assignor (classic: the chosen protocol name; KIP-848: the server assignor)."""
    members: tuple[MemberDescription, ...]
    coordinator: BrokerMetadata
    group_type: str = "classic"


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


# ---------------------------------------------------------------------------- coordinators


async def find_coordinator(client: Client, key: str, key_type: int = GROUP) -> BrokerMetadata:
    """The coordinator of group (``key_type`` 0) or transactional id (1) ``key``; retried
    while the broker answers COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS."""
    for attempt in range(client.retries + 1):
        conn = await client.any_connection()
        version = conn.version(FIND_COORDINATOR)
        resp = await conn.request(
            FIND_COORDINATOR,
            {"key": key, "key_type": key_type, "coordinator_keys": [key]},
            version=version,
        )
        if version >= 4:
            entries = [c for c in resp.coordinators if c.key == key] or list(resp.coordinators)
            if not entries:
                raise KafkaProtocolError(f"FindCoordinator response lacks {key!r}")
            c = entries[0]
            code, message, node, host, port = (
                int(c.error_code),
                c.error_message,
                int(c.node_id),
                c.host,
                int(c.port),
            )
        else:
            code, message = int(resp.error_code), getattr(resp, "error_message", None)
            node, host, port = int(resp.node_id), resp.host, int(resp.port)
        if not code:
            return BrokerMetadata(node, host, port)
        if code not in COORDINATOR_RETRY_CODES or attempt == client.retries:
            what = "group" if key_type == GROUP else "transactional id"
            raise KafkaError(code, message or f"find coordinator of {what} {key!r}")
        await asyncio.sleep(client.retry_backoff * (attempt + 1))
    raise AssertionError("unreachable")


async def with_coordinator(
    client: Client,
    key: str,
    key_type: int,
    call: Callable[[BrokerMetadata, KafkaConnection], Awaitable[T]],
) -> T:
    """Run ``call(coordinator, connection)``; when it raises a coordinator error (moved,
    loading, unavailable) or the connection breaks, find the coordinator again and retry."""
    for attempt in range(client.retries + 1):
        coordinator = await find_coordinator(client, key, key_type)
        try:
            conn = await client.connection(coordinator.host, coordinator.port)
            return await call(coordinator, conn)
        except KafkaError as e:
            retriable = e.code in COORDINATOR_RETRY_CODES or isinstance(e, KafkaConnectionError)
            if not retriable or attempt == client.retries:
                raise
        await asyncio.sleep(client.retry_backoff * (attempt + 1))
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------- list / describe


async def list_groups(
    client: Client, *, states: Sequence[str] = (), types: Sequence[str] = ()
) -> list[ListedGroup]:
    """Every group of the cluster (ListGroups sent to every broker), sorted by id. ``states``
    (ListGroups v4+) and ``types`` (v5+) filter on the broker; with an older broker the
    filter is applied here."""
    md = await client.metadata([])
    brokers: list[BrokerMetadata | None] = [*md.brokers.values()] or [None]
    out: dict[str, ListedGroup] = {}

    async def one(b: BrokerMetadata | None) -> None:
        conn = await (client.any_connection() if b is None else client.connection(b.host, b.port))
        resp = await conn.request(LIST_GROUPS, {"states_filter": list(states), "types_filter": list(types)})
        code = int(resp.error_code)
        if code:
            raise KafkaError(code, f"list groups on broker {b.node_id if b else '?'}")
        for g in resp.groups:
            state = str(getattr(g, "group_state", "") or "")
            gtype = str(getattr(g, "group_type", "") or "")
            if states and state and state.lower() not in {s.lower() for s in states}:
                continue
            if types and gtype and gtype.lower() not in {t.lower() for t in types}:
                continue
            out[str(g.group_id)] = ListedGroup(
                group_id=str(g.group_id),
                protocol_type=str(g.protocol_type),
                state=state,
                group_type=gtype,
                coordinator=b.node_id if b else -1,
            )

    await asyncio.gather(*(one(b) for b in brokers))
    return [out[k] for k in sorted(out)]


def parse_consumer_assignment(data: bytes | None) -> dict[str, tuple[int, ...]]:
    """Decode a classic ``ConsumerProtocolAssignment`` (versions 0-3: int16 version, then
    [topic string, [int32 partition]], user data ignored). Empty input gives ``{}``.
    Raises :class:`KafkaProtocolError` for malformed bytes."""
    if not data:
        return {}
    try:
        pos = 2  # version
        (n_topics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out: dict[str, tuple[int, ...]] = {}
        for _ in range(max(n_topics, 0)):
            (tlen,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if tlen < 0 or pos + tlen > len(data):
                raise ValueError("bad topic length")
            topic = data[pos : pos + tlen].decode()
            pos += tlen
            (n_parts,) = struct.unpack_from(">i", data, pos)
            pos += 4
            parts = struct.unpack_from(f">{max(n_parts, 0)}i", data, pos)
            pos += 4 * max(n_parts, 0)
            out[topic] = tuple(sorted(set(out.get(topic, ()) + parts)))
        return out
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise KafkaProtocolError(f"malformed consumer assignment: {e}") from None


async def describe_group(client: Client, group: str) -> GroupDescription:
    """Describe one group. KIP-848 (``consumer`` type) groups are described with
    ConsumerGroupDescribe when the broker has it; classic groups with DescribeGroups. A group
    that does not exist is described as state ``Dead`` with no members (Kafka's answer)."""

    async def call(coordinator: BrokerMetadata, conn: KafkaConnection) -> GroupDescription:
        if conn.supports(CONSUMER_GROUP_DESCRIBE):
            resp = await conn.request(
                CONSUMER_GROUP_DESCRIBE, {"group_ids": [group], "include_authorized_operations": False}
            )
            for g in resp.groups:
                code = int(g.error_code)
                if code in COORDINATOR_RETRY_CODES:
                    raise KafkaError(code, g.error_message or f"describe group {group!r}")
                if code == 0 and g.group_id == group:
                    return _from_consumer_group(g, coordinator)
        resp = await conn.request(
            DESCRIBE_GROUPS, {"groups": [group], "include_authorized_operations": False}
        )
        for g in resp.groups:
            if g.group_id != group:
                continue
            code = int(g.error_code)
            if code == ErrorCode.group_id_not_found:
                return GroupDescription(group, "Dead", "", "", (), coordinator)
            if code:
                raise KafkaError(code, f"describe group {group!r}")
            members = tuple(
                MemberDescription(
                    member_id=m.member_id,
                    group_instance_id=getattr(m, "group_instance_id", None),
                    client_id=m.client_id,
                    host=m.client_host,
                    assignment=parse_consumer_assignment(bytes(m.member_assignment))
                    if g.protocol_type in ("consumer", "")
                    else {},
                )
                for m in g.members
            )
            return GroupDescription(
                group_id=group,
                state=g.group_state,
                protocol_type=g.protocol_type,
                protocol=g.protocol_data,
                members=members,
                coordinator=coordinator,
            )
        raise KafkaProtocolError(f"DescribeGroups response lacks group {group!r}")

    return await with_coordinator(client, group, GROUP, call)


def _from_consumer_group(g: Any, coordinator: BrokerMetadata) -> GroupDescription:
    members = []
    for m in g.members:
        assignment: dict[str, tuple[int, ...]] = {}
        for tp in m.assignment.topic_partitions:
            assignment[str(tp.topic_name)] = tuple(sorted(int(p) for p in tp.partitions))
        members.append(
            MemberDescription(
                member_id=m.member_id,
                group_instance_id=getattr(m, "instance_id", None),
                client_id=m.client_id,
                host=m.client_host,
                assignment=assignment,
            )
        )
    return GroupDescription(
        group_id=g.group_id,
        state=g.group_state,
        protocol_type="consumer",
        protocol=g.assignor_name,
        members=tuple(members),
        coordinator=coordinator,
        group_type="consumer",
    )


# ---------------------------------------------------------------------------- offsets


async def fetch_offsets(
    client: Client,
    group: str,
    partitions: Mapping[str, Sequence[int]] | None = None,
    *,
    require_stable: bool = False,
) -> dict[tuple[str, int], OffsetAndMetadata]:
    """Committed offsets of ``group`` (all of them when ``partitions`` is ``None``), keyed by
    ``(topic, partition)``; partitions without a committed offset are left out."""

    async def call(_: BrokerMetadata, conn: KafkaConnection) -> dict[tuple[str, int], OffsetAndMetadata]:
        topics = (
            None
            if partitions is None
            else [{"name": t, "partition_indexes": list(ps)} for t, ps in partitions.items()]
        )
        version = conn.version(OFFSET_FETCH)
        resp = await conn.request(
            OFFSET_FETCH,
            {
                "group_id": group,
                "topics": topics,
                "require_stable": require_stable,
                "groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}],
            },
            version=version,
        )
        if version >= 8:
            found = [g for g in resp.groups if g.group_id == group]
            if not found:
                raise KafkaProtocolError(f"OffsetFetch response lacks group {group!r}")
            code, topic_results = int(found[0].error_code), found[0].topics
        else:
            code, topic_results = int(getattr(resp, "error_code", 0)), resp.topics
        if code:
            raise KafkaError(code, f"fetch offsets of group {group!r}")
        out: dict[tuple[str, int], OffsetAndMetadata] = {}
        for t in topic_results:
            for p in t.partitions:
                pcode = int(p.error_code)
                if pcode in COORDINATOR_RETRY_CODES or pcode == ErrorCode.unstable_offset_commit:
                    raise KafkaError(pcode, f"fetch offsets of group {group!r}")
                if pcode:
                    raise KafkaError(pcode, f"fetch offset of {t.name}-{p.partition_index}")
                if int(p.committed_offset) < 0:
                    continue
                out[(str(t.name), int(p.partition_index))] = OffsetAndMetadata(
                    int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)), p.metadata
                )
        return dict(sorted(out.items()))

    return await with_coordinator(client, group, GROUP, call)


async def commit_offsets(
    client: Client, group: str, offsets: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], KafkaError | None]:
    """Commit ``{(topic, partition): offset}`` for ``group`` as an admin (no member id,
    generation -1), like Kafka's ``alterConsumerGroupOffsets``: the coordinator accepts it only
    while the group has no active members (else UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION /
    REBALANCE_IN_PROGRESS per partition). Returns per partition ``None`` or the error."""
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (t, p), off in sorted(offsets.items()):
        by_topic.setdefault(t, []).append((p, off))

    async def call(_: BrokerMetadata, conn: KafkaConnection) -> dict[tuple[str, int], KafkaError | None]:
        resp = await conn.request(
            OFFSET_COMMIT,
            {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "generation_id": -1,
                "member_id": "",
                "group_instance_id": None,
                "retention_time_ms": -1,
                "topics": [
                    {
                        "name": t,
                        "partitions": [
                            {
                                "partition_index": p,
                                "committed_offset": off,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                                "commit_timestamp": -1,
                            }
                            for p, off in parts
                        ],
                    }
                    for t, parts in by_topic.items()
                ],
            },
        )
        out: dict[tuple[str, int], KafkaError | None] = {}
        for rt in resp.topics:
            for rp in rt.partitions:
                code = int(rp.error_code)
                if code in COORDINATOR_RETRY_CODES:
                    raise KafkaError(code, f"commit offsets of group {group!r}")
                key = (str(rt.name), int(rp.partition_index))
                out[key] = KafkaError(code, f"commit offset of {key[0]}-{key[1]}") if code else None
        return dict(sorted(out.items()))

    return await with_coordinator(client, group, GROUP, call)


async def delete_groups(client: Client, groups: Iterable[str]) -> dict[str, KafkaError | None]:
    """Delete groups (each sent to its coordinator). Per group ``None`` or the error
    (NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND ...)."""
    names = list(dict.fromkeys(groups))

    async def one(group: str) -> tuple[str, KafkaError | None]:
        async def call(_: BrokerMetadata, conn: KafkaConnection) -> KafkaError | None:
            resp = await conn.request(DELETE_GROUPS, {"groups_names": [group]})
            for r in resp.results:
                if r.group_id != group:
                    continue
                code = int(r.error_code)
                if code in COORDINATOR_RETRY_CODES:
                    raise KafkaError(code, f"delete group {group!r}")
                return KafkaError(code, f"group {group!r}") if code else None
            raise KafkaProtocolError(f"DeleteGroups response lacks group {group!r}")

        try:
            return group, await with_coordinator(client, group, GROUP, call)
        except KafkaConnectionError:
            raise
        except KafkaError as e:
            return group, e

    results = await asyncio.gather(*(one(g) for g in names))
    return dict(results)


async def delete_offsets(
    client: Client, group: str, partitions: Iterable[tuple[str, int]]
) -> tuple[KafkaError | None, dict[tuple[str, int], KafkaError | None]]:
    """Delete a group's committed offsets of some partitions (OffsetDelete, as
    ``kafka-consumer-groups --delete-offsets``): the group-level error (GROUP_ID_NOT_FOUND,
    NON_EMPTY_GROUP ...) and per partition ``None`` or its error
    (GROUP_SUBSCRIBED_TO_TOPIC while a member consumes the topic)."""
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(set(partitions)):
        by_topic.setdefault(t, []).append(p)

    async def call(
        _: BrokerMetadata, conn: KafkaConnection
    ) -> tuple[KafkaError | None, dict[tuple[str, int], KafkaError | None]]:
        resp = await conn.request(OFFSET_DELETE, {
            "group_id": group,
            "topics": [{"name": t, "partitions": [{"partition_index": p} for p in ps]}
                       for t, ps in by_topic.items()],
        })
        code = int(resp.error_code)
        if code in COORDINATOR_RETRY_CODES:
            raise KafkaError(code, f"delete offsets of group {group!r}")
        out: dict[tuple[str, int], KafkaError | None] = {}
        for rt in resp.topics:
            for rp in rt.partitions:
                key = (str(rt.name), int(rp.partition_index))
                pcode = int(rp.error_code)
                out[key] = KafkaError(pcode, f"delete offset of {key[0]}-{key[1]}") if pcode else None
        return (KafkaError(code, f"group {group!r}") if code else None), dict(sorted(out.items()))

    return await with_coordinator(client, group, GROUP, call)
