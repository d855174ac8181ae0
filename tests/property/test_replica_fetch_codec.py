"""The follower's hand-written Fetch codec (strom.protocol.replica_fetch) against kio, the
reference generated from Kafka's JSON schemas, for every version a follower uses (12..17):

* a request encoded by hand is the request kio reads (header and every field);
* a response kio writes, with random partitions, errors, diverging epochs, current leaders,
  snapshot ids, aborted transactions, node endpoints and records (null, empty or bytes), is the
  response read by hand, the records a zero-copy view of the frame;
* a truncated or inflated response is refused with ProtocolError, never IndexError or a read
  past the frame.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32, i64

from strom.protocol.errors import ProtocolError
from strom.protocol.framing import parse_request_header, skip_tagged_fields
from strom.protocol.replica_fetch import (
    ReplicaFetchPartition,
    ReplicaFetchTopic,
    decode_replica_fetch_response,
    encode_replica_fetch,
)

VERSIONS = range(12, 18)
i32s = st.integers(-(2**31), 2**31 - 1)
i64s = st.integers(-(2**63), 2**63 - 1)

partitions_st = st.lists(
    st.builds(ReplicaFetchPartition, st.integers(0, 2**31 - 1), i32s, i64s, i32s, i64s, i32s), max_size=4
)
topics_st = st.lists(
    st.builds(ReplicaFetchTopic, st.uuids(), st.text(min_size=1, max_size=20), partitions_st), max_size=3
)


@settings(max_examples=150, deadline=None)
@given(
    version=st.sampled_from(VERSIONS),
    cid=i32s,
    client=st.text(max_size=30),
    topics=topics_st,
    replica_id=st.integers(0, 2**31 - 1),
    replica_epoch=i64s,
    wait=st.integers(0, 2**31 - 1),
    min_bytes=i32s,
    max_bytes=i32s,
)
def test_a_request_encoded_by_hand_is_what_kio_reads(
    version: int,
    cid: int,
    client: str,
    topics: list[ReplicaFetchTopic],
    replica_id: int,
    replica_epoch: int,
    wait: int,
    min_bytes: int,
    max_bytes: int,
) -> None:
    frame = encode_replica_fetch(
        version,
        cid,
        client,
        topics,
        replica_id=replica_id,
        replica_epoch=replica_epoch,
        max_wait_ms=wait,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
    )
    (size,) = struct.unpack_from(">i", frame, 0)
    assert size == len(frame) - 4
    body = memoryview(frame)[4:]
    header, pos = parse_request_header(body)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        1,
        version,
        cid,
        client,
    )
    pos = skip_tagged_fields(body, pos)
    req, n = entity_reader(load_request_schema(1, version))(body, pos)
    assert pos + n == len(body)
    if version >= 15:
        assert (req.replica_state.replica_id, req.replica_state.replica_epoch) == (replica_id, replica_epoch)
    else:
        assert req.replica_id == replica_id
    assert (req.max_wait, req.min_bytes, req.max_bytes) == (
        datetime.timedelta(milliseconds=wait),
        min_bytes,
        max_bytes,
    )
    assert (req.isolation_level, req.session_id, req.session_epoch) == (0, 0, -1)
    assert req.forgotten_topics_data == () and req.rack_id == "" and req.cluster_id is None
    assert len(req.topics) == len(topics)
    for got, want in zip(req.topics, topics, strict=True):
        assert (got.topic_id if version >= 13 else got.topic) == (
            want.topic_id if version >= 13 else want.name
        )
        assert list(map(_partition_fields, got.partitions)) == list(map(_partition_fields, want.partitions))


def _partition_fields(p: Any) -> tuple[int, ...]:
    return (p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch, p.log_start_offset,
            p.partition_max_bytes)


def _response_strategy(version: int) -> st.SearchStrategy[Any]:
    m = load_response_schema(1, version)
    mod = __import__(m.__module__, fromlist=["x"])
    epoch_end = st.builds(mod.EpochEndOffset, epoch=st.builds(i32, i32s), end_offset=st.builds(i64, i64s))
    leader = st.builds(
        mod.LeaderIdAndEpoch, leader_id=st.builds(i32, i32s), leader_epoch=st.builds(i32, i32s)
    )
    snapshot = st.builds(mod.SnapshotId, end_offset=st.builds(i64, i64s), epoch=st.builds(i32, i32s))
    aborted = st.builds(
        mod.AbortedTransaction, producer_id=st.builds(i64, i64s), first_offset=st.builds(i64, i64s)
    )
    error = st.sampled_from(
        [
            ErrorCode.none,
            ErrorCode.not_leader_or_follower,
            ErrorCode.offset_out_of_range,
            ErrorCode.fenced_leader_epoch,
        ]
    )
    partition = st.builds(
        mod.PartitionData,
        partition_index=st.builds(i32, st.integers(0, 2**31 - 1)),
        error_code=error,
        high_watermark=st.builds(i64, i64s),
        last_stable_offset=st.builds(i64, i64s),
        log_start_offset=st.builds(i64, i64s),
        diverging_epoch=st.one_of(st.just(mod.EpochEndOffset()), epoch_end),
        current_leader=st.one_of(st.just(mod.LeaderIdAndEpoch()), leader),
        snapshot_id=st.one_of(st.just(mod.SnapshotId()), snapshot),
        aborted_transactions=st.one_of(st.none(), st.lists(aborted, max_size=3).map(tuple)),
        preferred_read_replica=st.builds(i32, i32s),
        records=st.one_of(st.none(), st.binary(max_size=300)),
    )
    if version >= 13:
        topic = st.builds(
            mod.FetchableTopicResponse,
            topic_id=st.uuids(),
            partitions=st.lists(partition, max_size=3).map(tuple),
        )
    else:
        topic = st.builds(
            mod.FetchableTopicResponse,
            topic=st.text(max_size=20).map(lambda s: s),
            partitions=st.lists(partition, max_size=3).map(tuple),
        )
    kwargs: dict[str, Any] = {}
    if version >= 16:
        endpoint = st.builds(
            mod.NodeEndpoint,
            node_id=st.builds(i32, i32s),
            host=st.text(max_size=10),
            port=st.builds(i32, i32s),
            rack=st.one_of(st.none(), st.text(max_size=5)),
        )
        kwargs["node_endpoints"] = st.lists(endpoint, max_size=2).map(tuple)
    return st.builds(
        m,
        throttle_time=st.integers(0, 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms)),
        error_code=error,
        session_id=st.builds(i32, i32s),
        responses=st.lists(topic, max_size=3).map(tuple),
        **kwargs,
    )


def _kio_frame(resp: Any, cid: int) -> bytes:
    buf = io.BytesIO()
    header_cls = type(resp).__header_schema__
    entity_writer(header_cls)(buf, header_cls(correlation_id=i32(cid)))
    entity_writer(type(resp))(buf, resp)
    return buf.getvalue()


@st.composite
def responses(draw: st.DrawFn) -> tuple[int, Any]:
    version = draw(st.sampled_from(VERSIONS))
    return version, draw(_response_strategy(version))


@settings(max_examples=200, deadline=None)
@given(vr=responses(), cid=i32s)
def test_a_response_written_by_kio_is_read_by_hand(vr: tuple[int, Any], cid: int) -> None:
    version, resp = vr
    frame = _kio_frame(resp, cid)
    got = decode_replica_fetch_response(frame, version)
    assert (got.correlation_id, got.throttle_time_ms, got.error_code, got.session_id) == (
        cid,
        resp.throttle_time // datetime.timedelta(milliseconds=1),
        resp.error_code,
        resp.session_id,
    )
    assert len(got.responses) == len(resp.responses)
    for gt, wt in zip(got.responses, resp.responses, strict=True):
        if version >= 13:
            assert gt.topic_id == wt.topic_id and gt.name is None
        else:
            assert gt.name == wt.topic and gt.topic_id is None
        assert len(gt.partitions) == len(wt.partitions)
        for gp, wp in zip(gt.partitions, wt.partitions, strict=True):
            assert (
                gp.partition_index,
                gp.error_code,
                gp.high_watermark,
                gp.last_stable_offset,
                gp.log_start_offset,
            ) == (
                wp.partition_index,
                wp.error_code,
                wp.high_watermark,
                wp.last_stable_offset,
                wp.log_start_offset,
            )
            de = wp.diverging_epoch
            assert gp.diverging_epoch == (
                None if de.epoch < 0 and de.end_offset < 0 else (de.epoch, de.end_offset)
            )
            cl = wp.current_leader
            if (cl.leader_id, cl.leader_epoch) == (-1, -1):
                assert gp.current_leader is None  # the default is not written
            else:
                assert gp.current_leader == (cl.leader_id, cl.leader_epoch)
            if wp.records is None:
                assert gp.records is None
            else:
                assert gp.records is not None and bytes(gp.records) == wp.records
                assert gp.records.obj is frame  # a view of the frame, not a copy


@settings(max_examples=150, deadline=None)
@given(vr=responses(), cid=i32s, data=st.data())
def test_a_damaged_response_is_refused_cleanly(vr: tuple[int, Any], cid: int, data: st.DataObject) -> None:
    version, resp = vr
    frame = _kio_frame(resp, cid)
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(ProtocolError):
        decode_replica_fetch_response(frame[:cut], version)
    with pytest.raises(ProtocolError):
        decode_replica_fetch_response(frame + b"\x00", version)
    # a byte changed anywhere: a clean answer or ProtocolError, nothing else
    pos = data.draw(st.integers(0, len(frame) - 1))
    bad = bytearray(frame)
    bad[pos] = data.draw(st.integers(0, 255))
    with contextlib.suppress(ProtocolError):
        decode_replica_fetch_response(bytes(bad), version)


def test_versions_outside_12_to_17_are_not_encoded_here() -> None:
    with pytest.raises(ValueError):
        encode_replica_fetch(
            11, 1, "c", [], replica_id=1, replica_epoch=1, max_wait_ms=1, min_bytes=1, max_bytes=1
        )
    with pytest.raises(ValueError):
        decode_replica_fetch_response(b"\x00" * 16, 18)
