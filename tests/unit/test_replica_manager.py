"""ReplicaManager and MetadataCache: the one answer for a partition that cannot be served here
(unknown, offline, led by another broker), the append path's results, reads and ListOffsets."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from strom.config import BrokerConfig
from strom.metadata.topics import TopicInfo
from strom.protocol.errors import ErrorCode as E
from strom.protocol.records import build_batch, build_control_batch
from strom.server.broker import Broker
from strom.server.metadata_cache import (
    NO_LEADER,
    BrokerNode,
    PartitionLeadership,
    PartitionMetadata,
    RegistryMetadataCache,
)
from strom.server.replica_manager import (
    EARLIEST,
    LATEST,
    LATEST_TIERED,
    MAX_TIMESTAMP,
    READ_COMMITTED,
    AppendOrigin,
    NotLeaderOrFollowerError,
    PartitionState,
    ReplicaManager,
)

T0 = 1_700_000_000_000


def make_broker(tmp_path: Path) -> Broker:
    config = BrokerConfig.from_sources(
        None,
        {
            "log.dirs": str(tmp_path / "data"),
            "listeners": "PLAINTEXT://127.0.0.1:9092,OTHER://127.0.0.1:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
            "advertised.listeners": "PLAINTEXT://a.example:9092,OTHER://b.example:9093",
            "node.id": "3",
            # registry-only (also under STROM_TEST_QUORUM=1): never started, topics made with
            # the synchronous Broker.create_topic (on the metadata quorum: the started controller)
            "strom.metadata.quorum.enable": "false",
        },
    )
    return Broker(config)


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    b = make_broker(tmp_path)
    b.create_topic("t", 2)
    b.create_topic("__consumer_offsets", 1, {"cleanup.policy": "compact"})
    yield b
    b.replica_manager.shutdown()


def batch(n: int, ts: int = T0, **kw: Any) -> bytes:
    return build_batch([(f"k{i}".encode(), f"v{i}".encode(), [], ts + i) for i in range(n)], **kw)


def append(rm: ReplicaManager, entries: list[tuple[str, int, Any]], acks: int = 1, **kw: Any) -> Any:
    return asyncio.run(rm.append_records(entries, acks=acks, timeout_ms=kw.pop("timeout_ms", 1000), **kw))


class OtherLeader(RegistryMetadataCache):
    """The cache as a follower of ``t`` sees it: broker 7 leads every partition."""

    def partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        pm = super().partition(topic, partition)
        if pm is None or topic != "t":
            return pm
        return PartitionMetadata(topic, partition, 7, 4, (7, pm.leader_id), (7, pm.leader_id))

    def leader_id(self, topic: str, partition: int) -> int | None:
        pm = self.partition(topic, partition)
        return None if pm is None else pm.leader_id

    def partition_states(self, info: TopicInfo) -> list[PartitionLeadership]:
        pms = (self.partition(info.name, p) for p in range(info.partitions))
        return [(pm.partition, pm.leader_id, pm.leader_epoch, pm.replicas, pm.isr, pm.offline_replicas)
                for pm in pms if pm is not None]

    def alive_broker(self, node_id: int, listener: str | None = None) -> BrokerNode | None:
        # broker 7 is alive too (Metadata gives only a leader alive on the client's listener)
        if node_id == 7:
            return BrokerNode(7, "seven.example", 9092)
        return super().alive_broker(node_id, listener)


def follow(b: Broker) -> None:
    cache = b.metadata_cache
    assert isinstance(cache, RegistryMetadataCache)
    b.metadata_cache = b.replica_manager.metadata_cache = OtherLeader(
        b.topics, 3, b.cluster_id, b.config.advertised
    )


# ------------------------------------------------------------------ MetadataCache


def test_metadata_cache_answers_from_the_registry(broker: Broker) -> None:
    cache = broker.metadata_cache
    info = cache.topic("t")
    assert info is not None and info.partitions == 2
    assert cache.topic_by_id(info.topic_id) is info
    assert cache.topic("nope") is None and cache.topic_by_id(uuid.uuid4()) is None
    assert cache.num_partitions("t") == 2 and cache.num_partitions("nope") is None
    assert cache.contains("t", 1) and not cache.contains("t", 2) and not cache.contains("t", -1)
    assert {i.name for i in cache.topics()} >= {"t", "__consumer_offsets"}
    assert cache.partition("t", 1) == PartitionMetadata("t", 1, 3, 0, (3,), (3,), ())
    assert cache.leader_id("t", 0) == 3 and cache.leader_id("t", 5) is None
    assert cache.partition("t", 2) is None
    assert cache.cluster_id() == broker.cluster_id and cache.controller_id() == 3


def test_metadata_cache_brokers_per_listener(broker: Broker) -> None:
    cache = broker.metadata_cache
    assert cache.alive_brokers() == [BrokerNode(3, "a.example", 9092)]
    assert cache.alive_brokers("OTHER") == [BrokerNode(3, "b.example", 9093)]
    assert cache.alive_broker(3, "OTHER") == BrokerNode(3, "b.example", 9093)
    assert cache.alive_broker(4) is None


def test_metadata_cache_version_moves_with_topics(broker: Broker) -> None:
    cache = broker.metadata_cache
    v = cache.topics_version()
    broker.create_topic("u", 1)
    assert cache.topics_version() > v
    v = cache.topics_version()
    broker.delete_topic("u")
    assert cache.topics_version() > v and cache.topic("u") is None


def test_offline_partition_has_no_leader(broker: Broker) -> None:
    rm = broker.replica_manager
    d = rm.logs[("t", 1)].directory.parent
    rm.offline_partitions[("t", 1)] = d  # as mark_log_dir_offline leaves it
    del rm.logs[("t", 1)]
    pm = broker.metadata_cache.partition("t", 1)
    assert pm is not None and pm.leader_id == NO_LEADER and not pm.has_leader
    assert pm.offline_replicas == (3,) and pm.replicas == (3,)
    assert rm.partition_error("t", 1) == E.KAFKA_STORAGE_ERROR
    assert rm.partition_error("t", 0) == E.NONE
    (r,) = append(rm, [("t", 1, batch(1))])
    assert r.error_code == E.KAFKA_STORAGE_ERROR
    assert rm.read("t", 1, 0, 100).error_code == E.KAFKA_STORAGE_ERROR
    assert rm.fetch_offset("t", 1, LATEST).error_code == E.KAFKA_STORAGE_ERROR


# ------------------------------------------------------------------ errors


def test_unknown_partitions(broker: Broker) -> None:
    rm = broker.replica_manager
    for topic, p in (("nope", 0), ("t", 2), ("t", -1)):
        assert rm.partition_error(topic, p) == E.UNKNOWN_TOPIC_OR_PARTITION
        assert rm.leader_log_or_error(topic, p) == (None, E.UNKNOWN_TOPIC_OR_PARTITION)
        assert rm.read(topic, p, 0, 100).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
        assert rm.fetch_offset(topic, p, EARLIEST).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
        assert rm.delete_records(topic, p, 0) == (-1, E.UNKNOWN_TOPIC_OR_PARTITION)
        (r,) = append(rm, [(topic, p, batch(1))])
        assert r.error_code == E.UNKNOWN_TOPIC_OR_PARTITION and r.base_offset == -1


def test_not_leader_when_the_cache_names_another_broker(broker: Broker) -> None:
    rm = broker.replica_manager
    follow(broker)
    assert rm.partition_error("t", 0) == E.NOT_LEADER_OR_FOLLOWER
    assert rm.get_log("t", 0) is not None  # the replica is here, it just does not lead
    (r,) = append(rm, [("t", 0, batch(2))])
    assert r.error_code == E.NOT_LEADER_OR_FOLLOWER
    assert rm.read("t", 0, 0, 100).error_code == E.NOT_LEADER_OR_FOLLOWER
    assert rm.fetch_offset("t", 0, LATEST).error_code == E.NOT_LEADER_OR_FOLLOWER
    assert rm.delete_records("t", 0, 0) == (-1, E.NOT_LEADER_OR_FOLLOWER)
    with pytest.raises(NotLeaderOrFollowerError):
        rm.append_to_leader("t", 0, batch(1))
    assert rm.logs[("t", 0)].log_end_offset == 0  # nothing appended
    assert rm.partition_error("__consumer_offsets", 0) == E.NONE  # other topics still led here


def test_a_partition_this_broker_does_not_host_but_another_leads(broker: Broker) -> None:
    rm = broker.replica_manager
    follow(broker)
    rm.logs.pop(("t", 1)).close()
    assert rm.partition_error("t", 1) == E.NOT_LEADER_OR_FOLLOWER


# ------------------------------------------------------------------ appends


def test_append_results(broker: Broker) -> None:
    rm = broker.replica_manager
    r0, r1, r2 = append(rm, [("t", 0, batch(3)), ("t", 1, batch(1)), ("t", 0, batch(2))], acks=-1)
    assert (r0.error_code, r0.base_offset, r0.last_offset, r0.log_start_offset) == (E.NONE, 0, 2, 0)
    assert (r1.base_offset, r2.base_offset) == (0, 3)
    assert r0.log_append_time == -1  # CreateTime topic
    assert rm.logs[("t", 0)].high_watermark == 5


def test_append_refusals(broker: Broker) -> None:
    rm = broker.replica_manager
    (bad_acks,) = append(rm, [("t", 0, batch(1))], acks=2)
    assert bad_acks.error_code == E.INVALID_REQUIRED_ACKS
    (empty,) = append(rm, [("t", 0, b"")])
    assert empty.error_code == E.CORRUPT_MESSAGE
    (internal,) = append(rm, [("__consumer_offsets", 0, batch(1))])
    assert internal.error_code == E.INVALID_TOPIC_EXCEPTION
    (coordinator,) = append(rm, [("__consumer_offsets", 0, batch(1))], origin=AppendOrigin.COORDINATOR)
    assert coordinator.error_code == E.NONE
    (corrupt,) = append(rm, [("t", 0, b"\x00" * 70)])
    assert corrupt.error_code == E.CORRUPT_MESSAGE
    assert rm.logs[("t", 0)].log_end_offset == 0


def test_acks_all_waits_for_the_high_watermark(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    rm = broker.replica_manager
    plog = rm.logs[("t", 0)]
    monkeypatch.setattr(plog, "update_high_watermark", lambda hw: None)  # a follower lags behind

    (late,) = append(rm, [("t", 0, batch(1))], acks=-1, timeout_ms=30)
    assert late.error_code == E.REQUEST_TIMED_OUT
    assert not rm._hw_waiters  # the timed-out waiter is gone
    (leader_only,) = append(rm, [("t", 0, batch(1))], acks=1)
    assert leader_only.error_code == E.NONE and leader_only.base_offset == 1

    async def caught_up() -> Any:
        task = asyncio.ensure_future(rm.append_records([("t", 0, batch(1))], acks=-1, timeout_ms=5000))
        await asyncio.sleep(0.01)
        assert not task.done()
        rm._high_watermark_advanced(("t", 0), 3)  # the ISR has the append now
        return await task

    (r,) = asyncio.run(caught_up())
    assert r.error_code == E.NONE and r.base_offset == 2

    async def dir_failed() -> Any:
        task = asyncio.ensure_future(rm.append_records([("t", 0, batch(1))], acks=-1, timeout_ms=5000))
        await asyncio.sleep(0.01)
        rm.mark_log_dir_offline(plog.directory.parent, "EIO")
        return await task

    (gone,) = asyncio.run(dir_failed())
    assert gone.error_code == E.KAFKA_STORAGE_ERROR and not rm._hw_waiters


def test_a_full_disk_takes_the_dir_offline_only_while_other_brokers_are_alive(broker: Broker) -> None:
    """ENOSPC: on a broker alone the dir stays online (appends fail until space returns); with
    another broker alive it fails the dir as Kafka does (the first dir: the broker halts), so
    the controller moves leaderships and ISR places to replicas that can still write."""
    import errno

    from strom.log.errors import KafkaStorageError

    rm = broker.replica_manager
    halted: list[bool] = []
    rm._halt = lambda: halted.append(True)
    plog = rm.logs[("t", 0)]
    full = KafkaStorageError("append to t-0 failed")
    full.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    rm.note_storage_error(plog, full)
    assert not rm.offline_dirs and not halted and ("t", 0) in rm.logs
    follow(broker)  # broker 7 is alive too
    alive = rm.metadata_cache.alive_brokers()
    rm.metadata_cache.alive_brokers = lambda listener=None: [*alive, BrokerNode(7, "seven.example", 9092)]  # type: ignore[method-assign]
    rm.note_storage_error(plog, full)
    d = plog.directory.parent
    assert "No space left on device" in rm.offline_dirs[d]
    assert ("t", 0) not in rm.logs and rm.offline_partitions[("t", 0)] == d
    assert rm.partition_error("t", 0) == E.KAFKA_STORAGE_ERROR
    assert halted == [True]  # the first log dir holds the broker's metadata


# ------------------------------------------------------------------ reads and offsets


def test_read_and_offsets(broker: Broker) -> None:
    rm = broker.replica_manager
    append(rm, [("t", 0, batch(3, ts=T0))])
    append(rm, [("t", 0, batch(2, ts=T0 + 100))])
    r = rm.read("t", 0, 0, 1 << 20)
    try:
        assert (r.error_code, r.high_watermark, r.last_stable_offset, r.log_start_offset) == (E.NONE, 5, 5, 0)
        assert r.records.size > 0 and r.aborted is None
    finally:
        r.records.close()
    assert rm.partition_state("t", 0) == (PartitionState(0, 5, 5, 5), E.NONE)
    assert rm.partition_state("t", 9) == (None, E.UNKNOWN_TOPIC_OR_PARTITION)
    assert rm.read("t", 0, 6, 100).error_code == E.OFFSET_OUT_OF_RANGE
    at_end = rm.read("t", 0, 5, 100)
    assert at_end.error_code == E.NONE and at_end.records.size == 0 and at_end.high_watermark == 5
    assert rm.read("t", 0, 0, 0, min_one_message=False).records.size == 0

    def offset(ts: int, isolation: int = 0) -> tuple[int, int, int, int]:
        o = rm.fetch_offset("t", 0, ts, isolation)
        return o.error_code, o.offset, o.timestamp, o.leader_epoch

    assert offset(EARLIEST) == (E.NONE, 0, -1, 0)
    assert offset(LATEST) == (E.NONE, 5, -1, 0)
    assert offset(MAX_TIMESTAMP) == (E.NONE, 4, T0 + 101, 0)
    assert offset(T0 + 1) == (E.NONE, 1, T0 + 1, 0)
    assert offset(T0 + 100) == (E.NONE, 3, T0 + 100, 0)
    assert offset(T0 + 500) == (E.NONE, -1, -1, -1)
    assert offset(LATEST_TIERED) == (E.NONE, -1, -1, -1)
    assert offset(-7)[0] == E.INVALID_REQUEST
    assert rm.delete_records("t", 0, 2) == (2, E.NONE)
    assert offset(EARLIEST) == (E.NONE, 2, -1, 0)


def test_read_committed_stops_at_the_last_stable_offset(broker: Broker) -> None:
    rm = broker.replica_manager
    append(rm, [("t", 0, batch(2))])
    txn = batch(2, producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)
    (r,) = append(rm, [("t", 0, txn)])
    assert r.error_code == E.NONE and r.base_offset == 2
    assert rm.fetch_offset("t", 0, LATEST).offset == 4
    assert rm.fetch_offset("t", 0, LATEST, READ_COMMITTED).offset == 2
    committed = rm.read("t", 0, 0, 1 << 20, isolation_level=READ_COMMITTED)
    assert committed.last_stable_offset == 2 and committed.aborted == []
    committed.records.close()
    rm.append_to_leader("t", 0, build_control_batch(9, 0, False, 0, T0), from_coordinator=True)
    aborted = rm.read("t", 0, 0, 1 << 20, isolation_level=READ_COMMITTED)
    assert aborted.last_stable_offset == 5 and aborted.aborted == [(9, 2)]
    aborted.records.close()


# ------------------------------------------------------------------ handlers answer through them


def _call(b: Broker, key: int, version: int, fields: dict[str, Any]) -> dict[str, Any]:
    from strom.protocol.codec import build, request_type
    from strom.server.context import RequestContext
    from strom.server.handlers import load_all

    handler = load_all()[key]
    ctx = RequestContext(key, version, 1, "client", "127.0.0.1", "c1", b)
    result = asyncio.run(handler(ctx, build(request_type(key, version), fields)))
    assert isinstance(result, dict)
    return result


def _call_raw(b: Broker, key: int, version: int, fields: dict[str, Any]) -> Any:
    """A handler that answers encoded bytes (Metadata, Produce): its answer decoded by kio."""
    from strom.protocol import codec
    from strom.server.context import RawResponse, RequestContext
    from strom.server.handlers import load_all

    ctx = RequestContext(key, version, 1, "client", "127.0.0.1", "c1", b)
    result = asyncio.run(load_all()[key](ctx, codec.build(codec.request_type(key, version), fields)))
    assert isinstance(result, RawResponse)
    body = b"".join(bytes(p) for p in result.parts if not isinstance(p, tuple))
    return codec._reader(codec.response_type(key, version))(memoryview(body), 0)[0]


def test_handlers_answer_not_leader_when_another_broker_leads(broker: Broker) -> None:
    follow(broker)
    produced = _call_raw(broker, 0, 9, {
        "transactional_id": None, "acks": -1, "timeout": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch(1)}]}],
    })
    assert produced.responses[0].partition_responses[0].error_code == E.NOT_LEADER_OR_FOLLOWER
    listed = _call_raw(broker, 2, 7, {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": "t", "partitions": [{"partition_index": 1, "timestamp": LATEST}]}],
    })
    assert listed.topics[0].partitions[0].error_code == E.NOT_LEADER_OR_FOLLOWER
    described = _call_raw(broker, 3, 12, {"topics": [{"name": "t", "topic_id": None}],
                                          "allow_auto_topic_creation": False})
    part = described.topics[0].partitions[0]
    assert (part.error_code, part.leader_id, part.leader_epoch) == (0, 7, 4)
    assert part.replica_nodes == part.isr_nodes == (7, 3)
