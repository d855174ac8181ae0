"""``strom metadata-quorum`` (kafka-metadata-quorum.sh) and ``strom cluster`` (kafka-cluster.sh).

``metadata-quorum describe --status`` prints Kafka's ``MetadataQuorumCommand`` summary: the
cluster id (DescribeCluster), then from DescribeQuorum the leader, its epoch, the high watermark,
the largest follower lag (leader's log end offset minus the smallest voter log end offset) and how
long that voter has been behind (difference of last-caught-up timestamps; 0 when the leader is the
laggard, -1 when a timestamp is unknown), and the voters and observers as Kafka's JSON-ish lists
(``{"id": 1, "directoryId": "...", "endpoints": ["CONTROLLER://host:port"]}``; the directory id
is left out when zero/unknown, the endpoints when none are known).
``describe --replication`` prints one row per replica, the leader first, then the other voters,
then the observers: NodeId, DirectoryId, LogEndOffset, Lag, LastFetchTimestamp,
LastCaughtUpTimestamp, Status — in Kafka's ``prettyPrintTable`` layout (each cell padded to its
column width and followed by a tab). ``--human-readable`` shows timestamps as "N ms ago".

``cluster cluster-id`` prints ``Cluster ID: X`` as kafka-cluster.sh. ``cluster list-endpoints``
lists the brokers (id, host, port, rack, fenced or unfenced); plain ``strom cluster`` prints both,
fenced brokers included, plus the active controller.

Formatting is pure (functions of decoded responses and a clock value) so tests pin it without a
broker. Error contract as :mod:`strom.cli.commands`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

from strom.cli.commands import CommandError, _client
from strom.client.client import topic_id_str
from strom.client.cluster_admin import (
    ClusterDescription,
    QuorumInfo,
    ReplicaState,
    describe_cluster,
    describe_quorum,
)
from strom.client.errors import KafkaConnectionError

__all__ = [
    "REPLICATION_HEADERS",
    "add_parsers",
    "cluster",
    "cluster_lines",
    "metadata_quorum",
    "pretty_table",
    "replication_lines",
    "status_lines",
]

REPLICATION_HEADERS = (
    "NodeId",
    "DirectoryId",
    "LogEndOffset",
    "Lag",
    "LastFetchTimestamp",
    "LastCaughtUpTimestamp",
    "Status",
)
ENDPOINT_HEADERS = ("ID", "HOST", "PORT", "RACK", "STATE", "ENDPOINT_TYPE")


def add_parsers(sub: Any, add_bootstrap: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``strom metadata-quorum`` and ``strom cluster``."""
    mq = sub.add_parser(
        "metadata-quorum", help="describe the KRaft metadata quorum (like kafka-metadata-quorum.sh)"
    )
    add_bootstrap(mq)
    mq.add_argument("action", choices=("describe",))
    mq.add_argument("--status", action="store_true", help="a summary of the quorum")
    mq.add_argument("--replication", action="store_true", help="each voter's and observer's progress")
    mq.add_argument("--human-readable", action="store_true", help="--replication: timestamps as 'N ms ago'")

    cl = sub.add_parser("cluster", help="cluster id and brokers (like kafka-cluster.sh)")
    add_bootstrap(cl)
    cl.add_argument("action", nargs="?", choices=("cluster-id", "list-endpoints"))
    cl.add_argument(
        "--include-fenced-brokers", action="store_true", help="list-endpoints: fenced brokers too"
    )


# ---------------------------------------------------------------------------- formatting


def pretty_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Kafka's ``ToolsUtils.prettyPrintTable``: every cell left-aligned to its column's width and
    followed by a tab (the last one too)."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    return ["".join(c.ljust(widths[i]) + "\t" for i, c in enumerate(r)) for r in [list(headers), *rows]]


def _leader(q: QuorumInfo) -> ReplicaState:
    for v in q.voters:
        if v.replica_id == q.leader_id:
            return v
    raise CommandError(f"the quorum has no elected leader (leader id {q.leader_id}, epoch {q.leader_epoch})")


def _node_json(q: QuorumInfo, r: ReplicaState) -> str:
    parts = [f'"id": {r.replica_id}']
    if r.directory_id is not None and r.directory_id.int != 0:
        parts.append(f'"directoryId": "{topic_id_str(r.directory_id)}"')
    node = q.nodes.get(r.replica_id)
    if node is not None and node.listeners:
        eps = []
        for name, host, port in node.listeners:
            shown = f"[{host}]" if ":" in host else host
            eps.append(f'"{name}://{shown}:{port}"')
        parts.append(f'"endpoints": [{", ".join(eps)}]')
    return "{" + ", ".join(parts) + "}"


def status_lines(cluster_id: str | None, q: QuorumInfo) -> list[str]:
    """``describe --status`` output."""
    leader = _leader(q)
    laggard = min(q.voters, key=lambda v: v.log_end_offset)
    max_lag = leader.log_end_offset - laggard.log_end_offset
    if laggard.replica_id == leader.replica_id:
        lag_ms = 0
    elif leader.last_caught_up_timestamp >= 0 and laggard.last_caught_up_timestamp >= 0:
        lag_ms = leader.last_caught_up_timestamp - laggard.last_caught_up_timestamp
    else:
        lag_ms = -1
    voters = ", ".join(_node_json(q, v) for v in q.voters)
    observers = ", ".join(_node_json(q, o) for o in q.observers)
    return [
        f"ClusterId:              {cluster_id}",
        f"LeaderId:               {q.leader_id}",
        f"LeaderEpoch:            {q.leader_epoch}",
        f"HighWatermark:          {q.high_watermark}",
        f"MaxFollowerLag:         {max_lag}",
        f"MaxFollowerLagTimeMs:   {lag_ms}",
        f"CurrentVoters:          [{voters}]",
        f"CurrentObservers:       [{observers}]",
    ]


def _timestamp(ts: int, now_ms: int, human: bool, what: str) -> str:
    if ts < 0:
        return "-1"
    if not human:
        return str(ts)
    if not 0 < ts <= now_ms:
        raise CommandError(
            f"Error while computing relative time, possible drift in system clock. "
            f"Current timestamp is {now_ms}, {what} timestamp is {ts}"
        )
    return f"{now_ms - ts} ms ago"


def replication_lines(q: QuorumInfo, *, now_ms: int, human_readable: bool = False) -> list[str]:
    """``describe --replication`` output (the leader's row first)."""
    leader = _leader(q)
    groups = [
        ([leader], "Leader"),
        ([v for v in q.voters if v.replica_id != q.leader_id], "Follower"),
        (list(q.observers), "Observer"),
    ]
    rows = []
    for replicas, status in groups:
        for r in replicas:
            rows.append(
                [
                    str(r.replica_id),
                    topic_id_str(r.directory_id),
                    str(r.log_end_offset),
                    str(leader.log_end_offset - r.log_end_offset),
                    _timestamp(r.last_fetch_timestamp, now_ms, human_readable, "last fetch"),
                    _timestamp(r.last_caught_up_timestamp, now_ms, human_readable, "last caught up"),
                    status,
                ]
            )
    return pretty_table(REPLICATION_HEADERS, rows)


def endpoint_lines(desc: ClusterDescription, *, include_fenced: bool) -> list[str]:
    rows = [
        [
            str(b.node_id),
            b.host,
            str(b.port),
            b.rack or "null",
            "fenced" if b.fenced else "unfenced",
            "broker",
        ]
        for b in desc.brokers
        if include_fenced or not b.fenced
    ]
    return pretty_table(ENDPOINT_HEADERS, rows)


def cluster_lines(desc: ClusterDescription) -> list[str]:
    """Plain ``strom cluster``: the id, the active controller, every broker."""
    controller = str(desc.controller_id) if desc.controller_id >= 0 else "none"
    return [
        f"Cluster ID: {desc.cluster_id}",
        f"Controller: {controller}",
        *endpoint_lines(desc, include_fenced=True),
    ]


# ---------------------------------------------------------------------------- commands


async def metadata_quorum(args: argparse.Namespace) -> int:
    if args.status and args.replication:
        raise CommandError(
            "Only one of --status or --replication should be specified with describe sub-command", 2
        )
    if not args.status and not args.replication:
        raise CommandError("One of --status or --replication must be specified with describe sub-command", 2)
    if args.status and args.human_readable:
        raise CommandError("The option --human-readable is only supported along with --replication", 2)
    client = _client(args)
    try:
        async with client:
            if args.status:
                desc = await describe_cluster(client, include_fenced_brokers=False)
                lines = status_lines(desc.cluster_id, await describe_quorum(client))
            else:
                q = await describe_quorum(client)
                lines = replication_lines(
                    q, now_ms=int(time.time() * 1000), human_readable=args.human_readable
                )
    except KafkaConnectionError as e:
        raise CommandError(e.message or str(e)) from None
    for line in lines:
        print(line)
    return 0


async def cluster(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        async with client:
            desc = await describe_cluster(client, include_fenced_brokers=True)
    except KafkaConnectionError as e:
        raise CommandError(e.message or str(e)) from None
    if args.action == "cluster-id":
        lines = [f"Cluster ID: {desc.cluster_id}" if desc.cluster_id else "No cluster ID found."]
    elif args.action == "list-endpoints":
        lines = endpoint_lines(desc, include_fenced=args.include_fenced_brokers)
    else:
        lines = cluster_lines(desc)
    for line in lines:
        print(line)
    return 0
