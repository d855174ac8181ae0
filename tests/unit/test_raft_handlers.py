"""The KRaft handlers (strom.server.handlers.raft) on a one-voter RaftManager: DescribeQuorum
from the leader (and NOT_LEADER_OR_FOLLOWER elsewhere), the quorum RPCs answered at every
version the broker accepts (built and encoded as network.py does), a replica's Fetch of
__cluster_metadata routed to the quorum, and a node without a quorum refusing them."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest

from strom.clock import ManualClock
from strom.config import LogConfig
from strom.protocol import codec
from strom.protocol.api_versions import KAFKA_API_RANGES
from strom.protocol.errors import ErrorCode, KafkaError
from strom.raft import wire
from strom.raft.manager import RaftManager, RaftManagerConfig
from strom.raft.messages import BeginQuorumEpochRequest, FetchRequest, VoteRequest
from strom.raft.quorum import RaftConfig
from strom.server.context import RequestContext
from strom.server.handlers import fetch as fetch_handlers
from strom.server.handlers import raft as raft_handlers
from strom.testing.scheduler import ManualScheduler


@dataclasses.dataclass
class FakeBroker:
    raft_manager: Any
    clock: ManualClock
    config: Any = None


def ctx(broker: FakeBroker, api_key: int, version: int) -> RequestContext:
    return RequestContext(api_key, version, 1, "test", "127.0.0.1", "c1", broker)  # type: ignore[arg-type]


def encodable(api_key: int, version: int, result: dict[str, Any]) -> Any:
    obj = codec.build(codec.response_type(api_key, version), result)
    codec.encode_response(obj)
    return obj


def describe_request(version: int, topic: str = "__cluster_metadata") -> Any:
    cls = codec.request_type(55, version)
    return codec.build(cls, {"topics": [{"topic_name": topic, "partitions": [{"partition_index": 0}]}]})


async def one_voter(tmp: Path, clock: ManualClock) -> RaftManager:
    m = RaftManager(
        RaftConfig(1, frozenset({1}), cluster_id="c"),
        RaftManagerConfig(tmp, LogConfig()),
        clock=clock,
        scheduler=ManualScheduler(clock),
        rng=random.Random(1),
    )
    m.start()
    return m


def test_describe_quorum_on_the_leader(tmp_path: Path) -> None:
    async def body() -> None:
        clock = ManualClock()
        m = await one_voter(tmp_path, clock)
        broker = FakeBroker(m, clock)
        for v in range(KAFKA_API_RANGES[55][1], KAFKA_API_RANGES[55][2] + 1):
            result = await raft_handlers.handle_describe_quorum(ctx(broker, 55, v), describe_request(v))
            resp = encodable(55, v, result)
            part = resp.topics[0].partitions[0]
            assert part.error_code == ErrorCode.NONE
            assert part.leader_id == 1 and part.leader_epoch == m.leader_and_epoch.epoch
            assert [r.replica_id for r in part.current_voters] == [1]
            assert part.high_watermark == m.high_watermark
            if v >= 1:  # timestamps are wall-clock ms (the leader counts as fetched "now")
                assert part.current_voters[0].last_fetch_timestamp == clock.time_ms()
            if v >= 2:
                assert resp.nodes == ()  # no broker config here: no voter endpoints to list
        with pytest.raises(KafkaError) as e:
            await raft_handlers.handle_describe_quorum(ctx(broker, 55, 2), describe_request(2, "other"))
        assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        await m.shutdown()

    asyncio.run(body())


def test_describe_quorum_and_fetch_on_a_non_leader(tmp_path: Path) -> None:
    async def body() -> None:
        clock = ManualClock()
        m = await one_voter(tmp_path, clock)
        broker = FakeBroker(m, clock)
        # a peer claims a higher epoch's leadership: this node follows it (a one-voter config
        # would never see this in practice; it makes a non-leader without a network)
        _k, _v, req = wire.encode_request(BeginQuorumEpochRequest(2, m.leader_and_epoch.epoch + 5, "c"), 1)
        result = await raft_handlers.handle_begin_quorum_epoch(ctx(broker, 53, 1), req)
        assert encodable(53, 1, result).topics[0].partitions[0].error_code == ErrorCode.NONE
        assert not m.is_leader
        result = await raft_handlers.handle_describe_quorum(ctx(broker, 55, 2), describe_request(2))
        part = encodable(55, 2, result).topics[0].partitions[0]
        assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and part.leader_id == 2
        # a replica fetch goes through the Fetch handler to the quorum, which says who leads
        _k, _v, freq = wire.encode_request(FetchRequest(3, m.leader_and_epoch.epoch, 0, 0, max_wait_ms=0), 1)
        result = await fetch_handlers.handle_fetch(ctx(broker, 1, 17), freq)
        assert isinstance(result, dict)
        fresp = encodable(1, 17, result)
        p = fresp.responses[0].partitions[0]
        assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and p.current_leader.leader_id == 2
        await m.shutdown()

    asyncio.run(body())


@pytest.mark.parametrize("version", [0, 1])
def test_vote_answered_at_each_version(tmp_path: Path, version: int) -> None:
    async def body() -> None:
        clock = ManualClock()
        m = await one_voter(tmp_path, clock)
        broker = FakeBroker(m, clock)
        epoch = m.leader_and_epoch.epoch
        _k, _v, v1 = wire.encode_request(VoteRequest(epoch + 1, 1, 0, 0, "c"), 1)
        if version == 0:
            p = v1.topics[0].partitions[0]
            req = codec.build(
                codec.request_type(52, 0),
                {
                    "cluster_id": "c",
                    "topics": [
                        {
                            "topic_name": "__cluster_metadata",
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "replica_epoch": p.replica_epoch,
                                    "replica_id": p.replica_id,
                                    "last_offset_epoch": 0,
                                    "last_offset": 0,
                                }
                            ],
                        }
                    ],
                },
            )
        else:
            req = v1
        result = await raft_handlers.handle_vote(ctx(broker, 52, version), req)
        resp = encodable(52, version, result)
        part = resp.topics[0].partitions[0]
        # answered in the candidate's epoch; refused: its log (empty) is behind this node's
        assert int(part.error_code) == 0 and part.leader_epoch == epoch + 1 and not part.vote_granted
        await m.shutdown()

    asyncio.run(body())


def test_no_quorum_no_answer() -> None:
    async def body() -> None:
        broker = FakeBroker(None, ManualClock())
        with pytest.raises(KafkaError) as e:
            await raft_handlers.handle_describe_quorum(ctx(broker, 55, 2), describe_request(2))
        assert e.value.code == ErrorCode.BROKER_NOT_AVAILABLE == 8

    asyncio.run(body())
