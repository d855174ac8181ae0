"""The KRaft RPCs (KIP-595) as the state machine sees them: one partition, no wire format.

Kafka's Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch and FetchSnapshot carry a topic and
partition list; the metadata quorum has exactly one (``__cluster_metadata``-0), so these
dataclasses flatten that nesting away and keep the per-partition fields under Kafka's names
(``kio.schema.vote``, ``begin_quorum_epoch``, ``end_quorum_epoch``, ``fetch``, ``fetch_snapshot``).
A driver maps them 1:1 onto kio's request/response classes: the single partition's fields here,
the topic/partition wrapping and the header (correlation id) there.

Field-name choices where Kafka's versions differ: Vote uses v0's ``candidate_epoch`` /
``candidate_id`` (v1+ calls them ``replica_epoch`` / ``replica_id``). Fetch keeps KRaft's use of
``replica_id`` (v15+: ``replica_state.replica_id``), ``current_leader_epoch``, ``fetch_offset``,
``last_fetched_epoch``. ``-1`` means "none" in every id and epoch field, as on the wire.

Error codes are Kafka's numbers (:class:`Errors`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Errors(IntEnum):
    """The error codes the state machine has rules for (values are ``ErrorCode``'s; any other
    code from the wire maps to INVALID_REQUEST in :mod:`strom.raft.wire`)."""

    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    INVALID_REQUEST = 42
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    INCONSISTENT_VOTER_SET = 94
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    INCONSISTENT_CLUSTER_ID = 104


NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class LeaderIdAndEpoch:
    leader_id: int = NO_LEADER
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """Fetch response ``diverging_epoch``: the follower's log diverges after ``end_offset`` of
    ``epoch`` (the largest epoch of the leader's log not greater than the requested one)."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class SnapshotId:
    end_offset: int
    epoch: int


# --------------------------------------------------------------------------- Vote (api key 52)


@dataclass(frozen=True, slots=True)
class VoteRequest:
    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int
    last_offset: int
    cluster_id: str | None = None


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error_code: Errors
    leader_id: int
    leader_epoch: int
    vote_granted: bool


# --------------------------------------------------------------------------- BeginQuorumEpoch (53)


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    leader_id: int
    leader_epoch: int
    cluster_id: str | None = None


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error_code: Errors
    leader_id: int
    leader_epoch: int


# --------------------------------------------------------------------------- EndQuorumEpoch (54)


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...] = ()
    """Kafka's ``preferred_successors`` (v0) / ``preferred_candidates`` (v1): voters ordered by
    how far their logs reach, best first."""
    cluster_id: str | None = None


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error_code: Errors
    leader_id: int
    leader_epoch: int


# --------------------------------------------------------------------------- Fetch (1)


@dataclass(frozen=True, slots=True)
class FetchRequest:
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int = -1
    partition_max_bytes: int = 1024 * 1024
    max_wait_ms: int = 500
    cluster_id: str | None = None


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error_code: Errors
    high_watermark: int = -1
    log_start_offset: int = -1
    diverging_epoch: EpochEndOffset | None = None
    current_leader: LeaderIdAndEpoch = LeaderIdAndEpoch()
    snapshot_id: SnapshotId | None = None
    records: bytes = b""


# --------------------------------------------------------------------------- FetchSnapshot (59)


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    replica_id: int
    current_leader_epoch: int
    snapshot_id: SnapshotId
    position: int
    max_bytes: int = 1024 * 1024
    cluster_id: str | None = None


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    error_code: Errors
    snapshot_id: SnapshotId
    current_leader: LeaderIdAndEpoch = LeaderIdAndEpoch()
    size: int = -1
    position: int = -1
    unaligned_records: bytes = b""


RaftRequest = (
    VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest | FetchSnapshotRequest
)
RaftResponse = (
    VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse | FetchSnapshotResponse
)
RaftMessage = RaftRequest | RaftResponse


@dataclass(frozen=True, slots=True)
class Outbound:
    """A message for the driver to send. A response echoes its request's ``correlation_id``;
    a node accepts only the response it is waiting for from that peer (one request in flight per
    destination, as Kafka's ``RequestManager``)."""

    destination: int
    correlation_id: int
    message: RaftMessage
