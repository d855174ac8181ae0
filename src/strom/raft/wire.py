"""The KRaft RPCs on the wire: :mod:`strom.raft.messages` <-> kio's request/response classes.

Theory of operation
-------------------
The state machine speaks flat dataclasses of one partition (``__cluster_metadata``-0); the wire
speaks Kafka's messages with their topic/partition nesting. This module is the sans-IO mapping
between them, both ways, at the versions Kafka 4.0 sends for a static quorum:

=================  =======  ==========================================================
RPC                version  notes
=================  =======  ==========================================================
Vote (52)          1        KIP-853 fields: directory ids None, ``voter_id`` the receiver
BeginQuorumEpoch   1        ``leader_endpoints`` empty (static voters: known endpoints)
EndQuorumEpoch     1        ``preferred_candidates`` with no directory ids
Fetch (1)          17       topic id ``AAAAAAAAAAAAAAAAAAAAAQ`` (Kafka's fixed id of
                            ``__cluster_metadata``), ``replica_state.replica_id``
FetchSnapshot      1        topic by name ``__cluster_metadata``
=================  =======  ==========================================================

Who sent a request is in the request (KRaft has no authenticated node identity): the
candidate of a Vote, the leader of a Begin/EndQuorumEpoch, the ``replica_id`` of a Fetch or
FetchSnapshot; :func:`decode_request` returns it beside the message. A Fetch is a KRaft fetch
when :func:`is_raft_fetch` says so (a replica id >= 0 and the metadata topic id); ordinary
consumer fetches never reach this module.

Errors: :class:`WireError` (a ``ValueError``) for a message that is not for
``__cluster_metadata``-0 or that has the wrong shape.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.begin_quorum_epoch.v1 import request as bqe_req
from kio.schema.begin_quorum_epoch.v1 import response as bqe_resp
from kio.schema.end_quorum_epoch.v1 import request as eqe_req
from kio.schema.end_quorum_epoch.v1 import response as eqe_resp
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17 import request as fetch_req
from kio.schema.fetch.v17 import response as fetch_resp
from kio.schema.fetch_snapshot.v1 import request as fs_req
from kio.schema.fetch_snapshot.v1 import response as fs_resp
from kio.schema.types import BrokerId, TopicName
from kio.schema.vote.v1 import request as vote_req
from kio.schema.vote.v1 import response as vote_resp
from kio.static.primitive import Records, i8, i32, i32Timedelta, i64

from strom.protocol.codec import duration_ms
from strom.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    EpochEndOffset,
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    RaftRequest,
    RaftResponse,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)

__all__ = [
    "API_VERSIONS",
    "METADATA_TOPIC",
    "METADATA_TOPIC_ID",
    "WireError",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "is_raft_fetch",
]

METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = uuid.UUID(int=1)  # base64url "AAAAAAAAAAAAAAAAAAAAAQ" (Kafka's Uuid.METADATA_TOPIC_ID)
FETCH, VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, FETCH_SNAPSHOT = 1, 52, 53, 54, 59
API_VERSIONS = {FETCH: 17, VOTE: 1, BEGIN_QUORUM_EPOCH: 1, END_QUORUM_EPOCH: 1, FETCH_SNAPSHOT: 1}

_TOPIC = TopicName(METADATA_TOPIC)


class WireError(ValueError):
    pass


def _ms(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def _err(code: Errors) -> ErrorCode:
    return ErrorCode(int(code))


def _errors(code: Any) -> Errors:
    try:
        return Errors(int(code))
    except ValueError:
        return Errors.INVALID_REQUEST  # an error this state machine has no rule for


def _one(items: tuple[Any, ...], what: str) -> Any:
    if len(items) != 1:
        raise WireError(f"{what}: expected exactly one topic/partition, got {len(items)}")
    return items[0]


def _topic(topics: tuple[Any, ...], name_attr: str, what: str) -> Any:
    topic = _one(topics, what)
    name = getattr(topic, name_attr)
    if name_attr == "topic_id":
        if name != METADATA_TOPIC_ID:
            raise WireError(f"{what}: topic id {name} is not {METADATA_TOPIC}'s")
    elif name != METADATA_TOPIC:
        raise WireError(f"{what}: topic {name!r} is not {METADATA_TOPIC}")
    part = _one(topic.partitions, what)
    index = getattr(part, "partition_index", getattr(part, "partition", getattr(part, "index", 0)))
    if index != 0:
        raise WireError(f"{what}: partition {index} is not 0")
    return part


# --------------------------------------------------------------------------- requests


def encode_request(msg: RaftRequest, destination: int = -1) -> tuple[int, int, Any]:
    """``(api_key, version, kio request)`` for ``msg`` sent to node ``destination``."""
    if isinstance(msg, VoteRequest):
        return (
            VOTE,
            1,
            vote_req.VoteRequest(
                cluster_id=msg.cluster_id,
                voter_id=BrokerId(destination),
                topics=(
                    vote_req.TopicData(
                        topic_name=_TOPIC,
                        partitions=(
                            vote_req.PartitionData(
                                partition_index=i32(0),
                                replica_epoch=i32(msg.candidate_epoch),
                                replica_id=BrokerId(msg.candidate_id),
                                replica_directory_id=None,
                                voter_directory_id=None,
                                last_offset_epoch=i32(msg.last_offset_epoch),
                                last_offset=i64(msg.last_offset),
                            ),
                        ),
                    ),
                ),
            ),
        )
    if isinstance(msg, BeginQuorumEpochRequest):
        return (
            BEGIN_QUORUM_EPOCH,
            1,
            bqe_req.BeginQuorumEpochRequest(
                cluster_id=msg.cluster_id,
                voter_id=BrokerId(destination),
                topics=(
                    bqe_req.TopicData(
                        topic_name=_TOPIC,
                        partitions=(
                            bqe_req.PartitionData(
                                partition_index=i32(0),
                                voter_directory_id=None,
                                leader_id=BrokerId(msg.leader_id),
                                leader_epoch=i32(msg.leader_epoch),
                            ),
                        ),
                    ),
                ),
                leader_endpoints=(),
            ),
        )
    if isinstance(msg, EndQuorumEpochRequest):
        return (
            END_QUORUM_EPOCH,
            1,
            eqe_req.EndQuorumEpochRequest(
                cluster_id=msg.cluster_id,
                topics=(
                    eqe_req.TopicData(
                        topic_name=_TOPIC,
                        partitions=(
                            eqe_req.PartitionData(
                                partition_index=i32(0),
                                leader_id=BrokerId(msg.leader_id),
                                leader_epoch=i32(msg.leader_epoch),
                                preferred_candidates=tuple(
                                    eqe_req.ReplicaInfo(candidate_id=BrokerId(c), candidate_directory_id=None)
                                    for c in msg.preferred_successors
                                ),
                            ),
                        ),
                    ),
                ),
                leader_endpoints=(),
            ),
        )
    if isinstance(msg, FetchRequest):
        return (
            FETCH,
            17,
            fetch_req.FetchRequest(
                cluster_id=msg.cluster_id,
                replica_state=fetch_req.ReplicaState(
                    replica_id=BrokerId(msg.replica_id), replica_epoch=i64(-1)
                ),
                max_wait=_ms(msg.max_wait_ms),
                min_bytes=i32(0),
                max_bytes=i32(msg.partition_max_bytes),
                isolation_level=i8(0),
                topics=(
                    fetch_req.FetchTopic(
                        topic_id=METADATA_TOPIC_ID,
                        partitions=(
                            fetch_req.FetchPartition(
                                partition=i32(0),
                                current_leader_epoch=i32(msg.current_leader_epoch),
                                fetch_offset=i64(msg.fetch_offset),
                                last_fetched_epoch=i32(msg.last_fetched_epoch),
                                log_start_offset=i64(msg.log_start_offset),
                                partition_max_bytes=i32(msg.partition_max_bytes),
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
            ),
        )
    if isinstance(msg, FetchSnapshotRequest):
        return (
            FETCH_SNAPSHOT,
            1,
            fs_req.FetchSnapshotRequest(
                cluster_id=msg.cluster_id,
                replica_id=BrokerId(msg.replica_id),
                max_bytes=i32(msg.max_bytes),
                topics=(
                    fs_req.TopicSnapshot(
                        name=_TOPIC,
                        partitions=(
                            fs_req.PartitionSnapshot(
                                partition=i32(0),
                                current_leader_epoch=i32(msg.current_leader_epoch),
                                snapshot_id=fs_req.SnapshotId(
                                    end_offset=i64(msg.snapshot_id.end_offset),
                                    epoch=i32(msg.snapshot_id.epoch),
                                ),
                                position=i64(msg.position),
                            ),
                        ),
                    ),
                ),
            ),
        )
    raise TypeError(f"not a KRaft request: {msg!r}")


def is_raft_fetch(req: Any) -> bool:
    """A Fetch (v15+) from a KRaft replica for ``__cluster_metadata``: goes to the quorum."""
    state = getattr(req, "replica_state", None)
    if state is None or int(state.replica_id) < 0:
        return False
    return any(getattr(t, "topic_id", None) == METADATA_TOPIC_ID for t in req.topics)


def decode_request(req: Any) -> tuple[int, RaftRequest]:
    """``(sender, message)`` for a kio KRaft request (any version with these fields)."""
    if isinstance(req, vote_req.VoteRequest) or type(req).__name__ == "VoteRequest":
        p = _topic(req.topics, "topic_name", "Vote")
        epoch = getattr(p, "replica_epoch", getattr(p, "candidate_epoch", -1))
        cand = getattr(p, "replica_id", getattr(p, "candidate_id", -1))
        return int(cand), VoteRequest(
            int(epoch), int(cand), int(p.last_offset_epoch), int(p.last_offset), req.cluster_id
        )
    name = type(req).__name__
    if name == "BeginQuorumEpochRequest":
        p = _topic(req.topics, "topic_name", "BeginQuorumEpoch")
        return int(p.leader_id), BeginQuorumEpochRequest(
            int(p.leader_id), int(p.leader_epoch), req.cluster_id
        )
    if name == "EndQuorumEpochRequest":
        p = _topic(req.topics, "topic_name", "EndQuorumEpoch")
        if hasattr(p, "preferred_candidates"):
            succ = tuple(int(c.candidate_id) for c in p.preferred_candidates)
        else:
            succ = tuple(int(c) for c in p.preferred_successors)
        return int(p.leader_id), EndQuorumEpochRequest(
            int(p.leader_id), int(p.leader_epoch), succ, req.cluster_id
        )
    if name == "FetchRequest":
        if not is_raft_fetch(req):
            raise WireError("Fetch: not a KRaft replica fetch of __cluster_metadata")
        p = _topic(req.topics, "topic_id", "Fetch")
        rid = int(req.replica_state.replica_id)
        max_wait = duration_ms(req.max_wait)
        return rid, FetchRequest(
            rid,
            int(p.current_leader_epoch),
            int(p.fetch_offset),
            int(p.last_fetched_epoch),
            int(p.log_start_offset),
            int(p.partition_max_bytes),
            max_wait,
            req.cluster_id,
        )
    if name == "FetchSnapshotRequest":
        p = _topic(req.topics, "name", "FetchSnapshot")
        rid = int(req.replica_id)
        return rid, FetchSnapshotRequest(
            rid,
            int(p.current_leader_epoch),
            SnapshotId(int(p.snapshot_id.end_offset), int(p.snapshot_id.epoch)),
            int(p.position),
            int(req.max_bytes),
            req.cluster_id,
        )
    raise WireError(f"not a KRaft request: {name}")


# --------------------------------------------------------------------------- responses


def encode_response(msg: RaftResponse) -> Any:
    """The kio response (at :data:`API_VERSIONS`) for ``msg``."""
    if isinstance(msg, VoteResponse):
        return vote_resp.VoteResponse(
            error_code=ErrorCode.none,
            topics=(
                vote_resp.TopicData(
                    topic_name=_TOPIC,
                    partitions=(
                        vote_resp.PartitionData(
                            partition_index=i32(0),
                            error_code=_err(msg.error_code),
                            leader_id=BrokerId(msg.leader_id),
                            leader_epoch=i32(msg.leader_epoch),
                            vote_granted=msg.vote_granted,
                        ),
                    ),
                ),
            ),
        )
    if isinstance(msg, BeginQuorumEpochResponse | EndQuorumEpochResponse):
        mod: Any = bqe_resp if isinstance(msg, BeginQuorumEpochResponse) else eqe_resp
        cls = mod.BeginQuorumEpochResponse if mod is bqe_resp else mod.EndQuorumEpochResponse
        return cls(
            error_code=ErrorCode.none,
            topics=(
                mod.TopicData(
                    topic_name=_TOPIC,
                    partitions=(
                        mod.PartitionData(
                            partition_index=i32(0),
                            error_code=_err(msg.error_code),
                            leader_id=BrokerId(msg.leader_id),
                            leader_epoch=i32(msg.leader_epoch),
                        ),
                    ),
                ),
            ),
        )
    if isinstance(msg, FetchResponse):
        div = msg.diverging_epoch
        snap = msg.snapshot_id
        return fetch_resp.FetchResponse(
            throttle_time=_ms(0),
            error_code=ErrorCode.none,
            responses=(
                fetch_resp.FetchableTopicResponse(
                    topic_id=METADATA_TOPIC_ID,
                    partitions=(
                        fetch_resp.PartitionData(
                            partition_index=i32(0),
                            error_code=_err(msg.error_code),
                            high_watermark=i64(msg.high_watermark),
                            log_start_offset=i64(msg.log_start_offset),
                            diverging_epoch=fetch_resp.EpochEndOffset(
                                epoch=i32(div.epoch), end_offset=i64(div.end_offset)
                            )
                            if div is not None
                            else fetch_resp.EpochEndOffset(),
                            current_leader=fetch_resp.LeaderIdAndEpoch(
                                leader_id=BrokerId(msg.current_leader.leader_id),
                                leader_epoch=i32(msg.current_leader.leader_epoch),
                            ),
                            snapshot_id=fetch_resp.SnapshotId(
                                end_offset=i64(snap.end_offset), epoch=i32(snap.epoch)
                            )
                            if snap is not None
                            else fetch_resp.SnapshotId(),
                            aborted_transactions=None,
                            records=Records(msg.records) if msg.records else None,
                        ),
                    ),
                ),
            ),
        )
    if isinstance(msg, FetchSnapshotResponse):
        return fs_resp.FetchSnapshotResponse(
            throttle_time=_ms(0),
            error_code=ErrorCode.none,
            topics=(
                fs_resp.TopicSnapshot(
                    name=_TOPIC,
                    partitions=(
                        fs_resp.PartitionSnapshot(
                            index=i32(0),
                            error_code=_err(msg.error_code),
                            snapshot_id=fs_resp.SnapshotId(
                                end_offset=i64(msg.snapshot_id.end_offset), epoch=i32(msg.snapshot_id.epoch)
                            ),
                            current_leader=fs_resp.LeaderIdAndEpoch(
                                leader_id=BrokerId(msg.current_leader.leader_id),
                                leader_epoch=i32(msg.current_leader.leader_epoch),
                            ),
                            size=i64(msg.size),
                            position=i64(msg.position),
                            unaligned_records=Records(msg.unaligned_records),
                        ),
                    ),
                ),
            ),
        )
    raise TypeError(f"not a KRaft response: {msg!r}")


def decode_response(resp: Any) -> RaftResponse:
    """The state machine's response for a kio KRaft response. A top-level error (the request
    was refused as a whole) becomes the partition's error."""
    name = type(resp).__name__
    top = _errors(resp.error_code)
    if name == "VoteResponse":
        p = _topic(resp.topics, "topic_name", "Vote") if resp.topics else None
        if p is None:
            return VoteResponse(top, -1, -1, False)
        return VoteResponse(
            top if top != Errors.NONE else _errors(p.error_code),
            int(p.leader_id),
            int(p.leader_epoch),
            bool(p.vote_granted),
        )
    if name in ("BeginQuorumEpochResponse", "EndQuorumEpochResponse"):
        rcls = BeginQuorumEpochResponse if name == "BeginQuorumEpochResponse" else EndQuorumEpochResponse
        p = _topic(resp.topics, "topic_name", name) if resp.topics else None
        if p is None:
            return rcls(top, -1, -1)
        return rcls(
            top if top != Errors.NONE else _errors(p.error_code), int(p.leader_id), int(p.leader_epoch)
        )
    if name == "FetchResponse":
        if not resp.responses:
            return FetchResponse(top)
        p = _topic(resp.responses, "topic_id", "Fetch")
        div = p.diverging_epoch
        snap = p.snapshot_id
        return FetchResponse(
            top if top != Errors.NONE else _errors(p.error_code),
            int(p.high_watermark),
            int(p.log_start_offset),
            EpochEndOffset(int(div.epoch), int(div.end_offset)) if int(div.epoch) >= 0 else None,
            LeaderIdAndEpoch(int(p.current_leader.leader_id), int(p.current_leader.leader_epoch)),
            SnapshotId(int(snap.end_offset), int(snap.epoch)) if int(snap.end_offset) >= 0 else None,
            bytes(p.records or b""),
        )
    if name == "FetchSnapshotResponse":
        if not resp.topics:
            return FetchSnapshotResponse(top, SnapshotId(-1, -1))
        p = _topic(resp.topics, "name", "FetchSnapshot")
        return FetchSnapshotResponse(
            top if top != Errors.NONE else _errors(p.error_code),
            SnapshotId(int(p.snapshot_id.end_offset), int(p.snapshot_id.epoch)),
            LeaderIdAndEpoch(int(p.current_leader.leader_id), int(p.current_leader.leader_epoch)),
            int(p.size),
            int(p.position),
            bytes(p.unaligned_records),
        )
    raise WireError(f"not a KRaft response: {name}")
