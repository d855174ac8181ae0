"""Cluster administration over :class:`strom.client.Client`: DescribeQuorum (55),
DescribeCluster (60), ElectLeaders (43), AlterPartitionReassignments (45) and
ListPartitionReassignments (46) — the calls behind ``strom metadata-quorum``, ``strom cluster``,
``strom leader-election`` and ``strom reassign-partitions``.

Each call returns plain frozen dataclasses decoded from Kafka's response, so the CLI formats them
without knowing kio, and tests build them by hand. Like Kafka's AdminClient, requests go to any
broker (a KRaft broker forwards them to the active controller), except that DescribeCluster asks
for fenced brokers too when the broker speaks v2 (KIP-1073).

Error contract: a top-level error is raised as :class:`~strom.client.errors.KafkaError` with the
broker's code and message; a broker that does not implement an API raises KafkaError
UNSUPPORTED_VERSION naming the API (:func:`require`). Per-partition results carry their error as a
value (``None`` for success).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from strom.client.client import Client
from strom.client.connection import KafkaConnection
from strom.client.errors import KafkaError

__all__ = [
    "ALTER_PARTITION_REASSIGNMENTS",
    "DESCRIBE_CLUSTER",
    "DESCRIBE_QUORUM",
    "ELECTION_TYPES",
    "ELECT_LEADERS",
    "LIST_PARTITION_REASSIGNMENTS",
    "METADATA_TOPIC",
    "BrokerInfo",
    "ClusterDescription",
    "PartitionReassignment",
    "QuorumInfo",
    "QuorumNode",
    "ReplicaState",
    "TopicPartition",
    "alter_partition_reassignments",
    "alter_reassignments_request",
    "alter_results_from",
    "cluster_from",
    "describe_cluster",
    "describe_cluster_request",
    "describe_quorum",
    "describe_quorum_request",
    "elect_leaders",
    "elect_leaders_request",
    "election_results_from",
    "list_partition_reassignments",
    "list_reassignments_request",
    "quorum_info_from",
    "reassignments_from",
    "require",
    "tp_str",
]

ELECT_LEADERS = 43
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
DESCRIBE_QUORUM = 55
DESCRIBE_CLUSTER = 60

API_NAMES = {
    ELECT_LEADERS: "ElectLeaders",
    ALTER_PARTITION_REASSIGNMENTS: "AlterPartitionReassignments",
    LIST_PARTITION_REASSIGNMENTS: "ListPartitionReassignments",
    DESCRIBE_QUORUM: "DescribeQuorum",
    DESCRIBE_CLUSTER: "DescribeCluster",
}

METADATA_TOPIC = "__cluster_metadata"
ELECTION_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}

TopicPartition = tuple[str, int]


def tp_str(tp: TopicPartition) -> str:
    """Kafka's ``TopicPartition.toString``: ``topic-partition``."""
    return f"{tp[0]}-{tp[1]}"


# ---------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ReplicaState:
    """One voter or observer of the metadata quorum, as the leader sees it (-1: unknown)."""

    replica_id: int
    log_end_offset: int
    directory_id: uuid.UUID | None = None
    last_fetch_timestamp: int = -1
    last_caught_up_timestamp: int = -1


@dataclass(frozen=True)
class QuorumNode:
    """A voter's endpoints (DescribeQuorum v2 ``Nodes``): ``[(listener, host, port)]``."""

    node_id: int
    listeners: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True)
class QuorumInfo:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaState, ...]
    observers: tuple[ReplicaState, ...]
    nodes: Mapping[int, QuorumNode]


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    fenced: bool = False


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerInfo, ...]


@dataclass(frozen=True)
class PartitionReassignment:
    """An ongoing reassignment: the full replica set and the replicas being added and removed."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()


# ---------------------------------------------------------------------------- calls


def require(conn: KafkaConnection, api_key: int) -> int:
    """The version to use for ``api_key`` on ``conn``; KafkaError UNSUPPORTED_VERSION with the
    API's name when the broker does not answer it."""
    if not conn.supports(api_key):
        name = API_NAMES.get(api_key, str(api_key))
        raise KafkaError(
            int(ErrorCode.unsupported_version),
            f"the broker at {conn.host}:{conn.port} does not support {name} (API key {api_key})",
        )
    return conn.version(api_key)


def _raise(code: int, message: str | None, what: str) -> None:
    if code:
        raise KafkaError(code, message or what)


async def describe_quorum(client: Client) -> QuorumInfo:
    """The state of the ``__cluster_metadata`` quorum (Kafka's ``Admin.describeMetadataQuorum``)."""
    conn = await client.any_connection()
    version = require(conn, DESCRIBE_QUORUM)
    resp = await conn.request(DESCRIBE_QUORUM, describe_quorum_request(), version=version)
    return quorum_info_from(resp)


def describe_quorum_request() -> dict[str, Any]:
    return {"topics": [{"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]}


def quorum_info_from(resp: Any) -> QuorumInfo:
    """A decoded DescribeQuorumResponse (any version) as :class:`QuorumInfo`."""
    _raise(int(resp.error_code), getattr(resp, "error_message", None), "describe quorum")
    for t in resp.topics:
        for p in t.partitions:
            _raise(int(p.error_code), getattr(p, "error_message", None), "describe quorum")
            nodes = {
                int(n.node_id): QuorumNode(
                    int(n.node_id), tuple((str(x.name), str(x.host), int(x.port)) for x in n.listeners)
                )
                for n in getattr(resp, "nodes", ())
            }
            return QuorumInfo(
                leader_id=int(p.leader_id),
                leader_epoch=int(p.leader_epoch),
                high_watermark=int(p.high_watermark),
                voters=tuple(_replica(r) for r in p.current_voters),
                observers=tuple(_replica(r) for r in p.observers),
                nodes=nodes,
            )
    raise KafkaError(int(ErrorCode.unknown_topic_or_partition), f"no {METADATA_TOPIC}-0 in the answer")


def _replica(r: object) -> ReplicaState:
    dir_id = getattr(r, "replica_directory_id", None)
    return ReplicaState(
        replica_id=int(r.replica_id),  # type: ignore[attr-defined]
        log_end_offset=int(r.log_end_offset),  # type: ignore[attr-defined]
        directory_id=dir_id if isinstance(dir_id, uuid.UUID) else None,
        last_fetch_timestamp=int(getattr(r, "last_fetch_timestamp", -1)),
        last_caught_up_timestamp=int(getattr(r, "last_caught_up_timestamp", -1)),
    )


async def describe_cluster(client: Client, *, include_fenced_brokers: bool = True) -> ClusterDescription:
    """Cluster id, active controller and brokers (with ``broker.rack`` and, from v2, fencing)."""
    conn = await client.any_connection()
    version = require(conn, DESCRIBE_CLUSTER)
    resp = await conn.request(
        DESCRIBE_CLUSTER, describe_cluster_request(include_fenced_brokers), version=version
    )
    return cluster_from(resp)


def describe_cluster_request(include_fenced_brokers: bool) -> dict[str, Any]:
    return {
        "include_cluster_authorized_operations": False,
        "endpoint_type": 1,  # brokers
        "include_fenced_brokers": include_fenced_brokers,
    }


def cluster_from(resp: Any) -> ClusterDescription:
    """A decoded DescribeClusterResponse (any version) as :class:`ClusterDescription`."""
    _raise(int(resp.error_code), getattr(resp, "error_message", None), "describe cluster")
    brokers = [
        BrokerInfo(int(b.broker_id), str(b.host), int(b.port), b.rack, bool(getattr(b, "is_fenced", False)))
        for b in resp.brokers
    ]
    return ClusterDescription(
        resp.cluster_id, int(resp.controller_id), tuple(sorted(brokers, key=lambda b: b.node_id))
    )


async def elect_leaders(
    client: Client,
    election_type: str,
    partitions: Iterable[TopicPartition] | None,
    *,
    timeout_ms: int = 30_000,
) -> dict[TopicPartition, KafkaError | None]:
    """Elect leaders (``PREFERRED`` or ``UNCLEAN``) of ``partitions`` (``None``: every partition
    the controller finds eligible). Per partition ``None`` or the error (ELECTION_NOT_NEEDED
    when the right leader already leads)."""
    body = elect_leaders_request(election_type, partitions, timeout_ms)
    conn = await client.any_connection()
    version = require(conn, ELECT_LEADERS)
    resp = await conn.request(
        ELECT_LEADERS, body, version=version, timeout=client.request_timeout + timeout_ms / 1000
    )
    return election_results_from(resp)


def elect_leaders_request(
    election_type: str, partitions: Iterable[TopicPartition] | None, timeout_ms: int
) -> dict[str, Any]:
    """ValueError for an election type other than PREFERRED/UNCLEAN."""
    kind = ELECTION_TYPES.get(election_type.upper())
    if kind is None:
        raise ValueError(f"unknown election type {election_type!r}: PREFERRED or UNCLEAN")
    topic_partitions = None
    if partitions is not None:
        topic_partitions = [{"topic": t, "partitions": ps} for t, ps in _by_topic(partitions).items()]
    return {"election_type": kind, "topic_partitions": topic_partitions, "timeout": timeout_ms}


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    return {t: sorted(ps) for t, ps in sorted(by_topic.items())}


def election_results_from(resp: Any) -> dict[TopicPartition, KafkaError | None]:
    """A decoded ElectLeadersResponse: per partition ``None`` or the error."""
    _raise(int(getattr(resp, "error_code", 0)), None, "elect leaders")
    out: dict[TopicPartition, KafkaError | None] = {}
    for r in resp.replica_election_results:
        for pr in r.partition_result:
            code = int(pr.error_code)
            out[(str(r.topic), int(pr.partition_id))] = KafkaError(code, pr.error_message) if code else None
    return out


async def alter_partition_reassignments(
    client: Client,
    reassignments: Mapping[TopicPartition, Sequence[int] | None],
    *,
    timeout_ms: int = 30_000,
) -> dict[TopicPartition, KafkaError | None]:
    """Start (target replicas) or cancel (``None``) reassignments. Per partition ``None`` or
    the error."""
    conn = await client.any_connection()
    version = require(conn, ALTER_PARTITION_REASSIGNMENTS)
    resp = await conn.request(
        ALTER_PARTITION_REASSIGNMENTS,
        alter_reassignments_request(reassignments, timeout_ms),
        version=version,
        timeout=client.request_timeout + timeout_ms / 1000,
    )
    return alter_results_from(resp)


def alter_reassignments_request(
    reassignments: Mapping[TopicPartition, Sequence[int] | None], timeout_ms: int
) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, object]]] = {}
    for (topic, p), replicas in sorted(reassignments.items()):
        by_topic.setdefault(topic, []).append(
            {"partition_index": p, "replicas": None if replicas is None else list(replicas)}
        )
    return {
        "timeout": timeout_ms,
        "allow_replication_factor_change": True,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }


def alter_results_from(resp: Any) -> dict[TopicPartition, KafkaError | None]:
    """A decoded AlterPartitionReassignmentsResponse: per partition ``None`` or the error."""
    _raise(int(resp.error_code), getattr(resp, "error_message", None), "alter partition reassignments")
    out: dict[TopicPartition, KafkaError | None] = {}
    for t in resp.responses:
        for pr in t.partitions:
            code = int(pr.error_code)
            out[(str(t.name), int(pr.partition_index))] = KafkaError(code, pr.error_message) if code else None
    return out


async def list_partition_reassignments(
    client: Client,
    partitions: Iterable[TopicPartition] | None = None,
    *,
    timeout_ms: int = 30_000,
) -> dict[TopicPartition, PartitionReassignment]:
    """Ongoing reassignments (of ``partitions``, or all when ``None``)."""
    conn = await client.any_connection()
    version = require(conn, LIST_PARTITION_REASSIGNMENTS)
    resp = await conn.request(
        LIST_PARTITION_REASSIGNMENTS, list_reassignments_request(partitions, timeout_ms), version=version
    )
    return reassignments_from(resp)


def list_reassignments_request(
    partitions: Iterable[TopicPartition] | None, timeout_ms: int
) -> dict[str, Any]:
    topics = None
    if partitions is not None:
        topics = [{"name": t, "partition_indexes": ps} for t, ps in _by_topic(partitions).items()]
    return {"timeout": timeout_ms, "topics": topics}


def reassignments_from(resp: Any) -> dict[TopicPartition, PartitionReassignment]:
    """A decoded ListPartitionReassignmentsResponse."""
    _raise(int(resp.error_code), getattr(resp, "error_message", None), "list partition reassignments")
    return {
        (str(t.name), int(p.partition_index)): PartitionReassignment(
            tuple(int(r) for r in p.replicas),
            tuple(int(r) for r in p.adding_replicas),
            tuple(int(r) for r in p.removing_replicas),
        )
        for t in resp.topics
        for p in t.partitions
    }
