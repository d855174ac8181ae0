"""strom.raft.wire: every KRaft message survives raft dataclass -> kio -> bytes (kio's encoder)
-> kio (kio's decoder) -> raft dataclass unchanged; the KRaft fetch is told apart from a
consumer fetch; messages for another topic or partition are refused."""

from __future__ import annotations

import dataclasses
import io
import uuid
from typing import Any

import pytest
from kio.serial import entity_reader, entity_writer

from strom.protocol.records import build_batch
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
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from strom.raft.wire import (
    API_VERSIONS,
    METADATA_TOPIC_ID,
    WireError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    is_raft_fetch,
)


def through_bytes(obj: Any) -> Any:
    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    data = buf.getvalue()
    back, _size = entity_reader(type(obj))(data, 0)
    return back


REQUESTS = [
    VoteRequest(7, 2, 6, 120, "cid"),
    BeginQuorumEpochRequest(3, 9, "cid"),
    EndQuorumEpochRequest(3, 9, (2, 1), "cid"),
    EndQuorumEpochRequest(3, 9, (), None),
    FetchRequest(2, 9, 1000, 8, 0, 8 * 1024 * 1024, 500, "cid"),
    FetchSnapshotRequest(2, 9, SnapshotId(500, 4), 1024, 65536, "cid"),
]

BATCH = build_batch([(None, b"v", [], 0)], base_offset=10, partition_leader_epoch=3)

RESPONSES = [
    VoteResponse(Errors.NONE, -1, 7, True),
    VoteResponse(Errors.FENCED_LEADER_EPOCH, 3, 8, False),
    BeginQuorumEpochResponse(Errors.NONE, 3, 9),
    EndQuorumEpochResponse(Errors.INCONSISTENT_CLUSTER_ID, -1, 9),
    FetchResponse(Errors.NONE, 11, 0, None, LeaderIdAndEpoch(3, 9), None, BATCH),
    FetchResponse(Errors.NONE, 11, 0, EpochEndOffset(4, 77), LeaderIdAndEpoch(3, 9)),
    FetchResponse(Errors.NONE, 11, 500, None, LeaderIdAndEpoch(3, 9), SnapshotId(500, 4)),
    FetchResponse(Errors.NOT_LEADER_OR_FOLLOWER, current_leader=LeaderIdAndEpoch(1, 10)),
    FetchSnapshotResponse(Errors.NONE, SnapshotId(500, 4), LeaderIdAndEpoch(3, 9), 4096, 1024, b"\x01" * 100),
    FetchSnapshotResponse(Errors.SNAPSHOT_NOT_FOUND, SnapshotId(500, 4), LeaderIdAndEpoch(3, 9)),
]


@pytest.mark.parametrize("msg", REQUESTS, ids=lambda m: type(m).__name__)
def test_request_round_trip(msg: Any) -> None:
    api_key, version, kio_req = encode_request(msg, destination=5)
    assert API_VERSIONS[api_key] == version
    assert type(kio_req).__api_key__ == api_key and type(kio_req).__version__ == version
    sender, back = decode_request(through_bytes(kio_req))
    assert back == msg
    assert sender == getattr(msg, "candidate_id", getattr(msg, "leader_id", getattr(msg, "replica_id", None)))


@pytest.mark.parametrize("msg", RESPONSES, ids=lambda m: f"{type(m).__name__}-{m.error_code.name}")
def test_response_round_trip(msg: Any) -> None:
    kio_resp = encode_response(msg)
    assert type(kio_resp).__version__ == API_VERSIONS[type(kio_resp).__api_key__]
    assert decode_response(through_bytes(kio_resp)) == msg


def test_fetch_wire_shape_is_kafkas() -> None:
    _k, _v, req = encode_request(REQUESTS[4])
    assert req.replica_state.replica_id == 2
    assert req.topics[0].topic_id == METADATA_TOPIC_ID
    assert str(METADATA_TOPIC_ID) == "00000000-0000-0000-0000-000000000001"
    assert req.max_wait.total_seconds() == 0.5
    assert is_raft_fetch(req)
    consumer = dataclasses.replace(req, replica_state=dataclasses.replace(req.replica_state, replica_id=-1))
    assert not is_raft_fetch(consumer)
    other_topic = dataclasses.replace(
        req, topics=(dataclasses.replace(req.topics[0], topic_id=uuid.uuid4()),)
    )
    assert not is_raft_fetch(other_topic)
    with pytest.raises(WireError):
        decode_request(other_topic)


def test_wrong_partition_or_topic_is_refused() -> None:
    _k, _v, req = encode_request(REQUESTS[1])
    part = req.topics[0].partitions[0]
    bad = dataclasses.replace(
        req,
        topics=(
            dataclasses.replace(req.topics[0], partitions=(dataclasses.replace(part, partition_index=1),)),
        ),
    )
    with pytest.raises(WireError):
        decode_request(bad)
    bad_topic = dataclasses.replace(req, topics=(dataclasses.replace(req.topics[0], topic_name="other"),))
    with pytest.raises(WireError):
        decode_request(bad_topic)


def test_top_level_error_becomes_the_partition_error() -> None:
    from kio.schema.errors import ErrorCode

    resp = dataclasses.replace(
        encode_response(RESPONSES[2]), error_code=ErrorCode.cluster_authorization_failed
    )
    back = decode_response(resp)
    assert back.error_code == Errors.INVALID_REQUEST  # not an error the state machine knows
    resp = dataclasses.replace(encode_response(RESPONSES[2]), error_code=ErrorCode.inconsistent_cluster_id)
    assert decode_response(resp).error_code == Errors.INCONSISTENT_CLUSTER_ID
