"""On one node, the metadata quorum's cache (ImageMetadataCache) answers Metadata,
DescribeCluster, DescribeTopicPartitions, FindCoordinator and OffsetForLeaderEpoch exactly as
the registry's (RegistryMetadataCache) does: two brokers in one process, one per path, the same
topics, the responses compared field by field (topic and cluster ids aside)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path
from typing import Any

from strom.client.messages import ApiKey
from strom.config import BrokerConfig
from strom.server.broker import Broker
from strom.server.metadata_cache import ImageMetadataCache, RegistryMetadataCache
from strom.testing.network import MemoryNetwork

DESCRIBE_CLUSTER, DESCRIBE_TOPIC_PARTITIONS, FIND_COORDINATOR, OFFSET_FOR_LEADER_EPOCH = 60, 75, 10, 23


def _config(data: Path, quorum: bool) -> BrokerConfig:
    return BrokerConfig.from_sources(None, {
        "log.dirs": str(data),
        "listeners": "PLAINTEXT://127.0.0.1:19092",  # never opened: start(listen=False)
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.num.partitions": "2",
        "share.coordinator.state.topic.num.partitions": "1",
        "log.cleaner.enable": "false",
        "strom.metadata.quorum.enable": "true" if quorum else "false",
        "controller.quorum.append.linger.ms": "0",
    })


def _plain(value: Any) -> Any:
    """A response as plain data, without the ids that differ between the two brokers."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: (None if f.name in ("topic_id", "cluster_id") else _plain(getattr(value, f.name)))
                for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, uuid.UUID):
        return None
    return value


async def _answers(broker: Broker) -> list[Any]:
    net = MemoryNetwork(broker)
    client = net.client()
    try:
        assert await client.create_topics({"a": (3, 1), "b": (1, 1)}) == {"a": None, "b": None}
        await client.produce("a", 1, [(None, b"v", [], -1)])
        conn = await client.any_connection()
        out = []
        for version in (1, 9, 12):
            out.append(await conn.request(ApiKey.METADATA, {
                "topics": None, "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False,
            }, version=version))
        out.append(await conn.request(ApiKey.METADATA, {
            "topics": [{"name": "a"}, {"name": "nope"}], "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False,
        }))
        for fenced in (False, True):
            out.append(await conn.request(DESCRIBE_CLUSTER, {
                "include_cluster_authorized_operations": False, "endpoint_type": 1,
                "include_fenced_brokers": fenced,
            }))
        out.append(await conn.request(DESCRIBE_TOPIC_PARTITIONS, {
            "topics": [{"name": "a"}, {"name": "b"}, {"name": "__consumer_offsets"}, {"name": "nope"}],
            "response_partition_limit": 4, "cursor": None,
        }))
        keys = [f"group-{i}" for i in range(8)]
        for key_type in (0, 1):
            out.append(await conn.request(FIND_COORDINATOR, {
                "key": keys[0], "key_type": key_type, "coordinator_keys": keys,
            }))
        out.append(await conn.request(OFFSET_FOR_LEADER_EPOCH, {
            "replica_id": -1,
            "topics": [{"topic": "a", "partitions": [
                {"partition": 1, "current_leader_epoch": -1, "leader_epoch": 0},
                {"partition": 2, "current_leader_epoch": 0, "leader_epoch": 0},
                {"partition": 0, "current_leader_epoch": 1, "leader_epoch": 0},
                {"partition": 9, "current_leader_epoch": -1, "leader_epoch": 0},
            ]}],
        }))
        return [_plain(r) for r in out]
    finally:
        await client.close()
        net.close()


def test_one_node_answers_the_same_on_both_paths(tmp_path: Path) -> None:
    async def run(quorum: bool) -> list[Any]:
        broker = Broker(_config(tmp_path / ("q" if quorum else "r"), quorum))
        await broker.start(listen=False)
        try:
            expected = ImageMetadataCache if quorum else RegistryMetadataCache
            assert isinstance(broker.metadata_cache, expected)
            return await _answers(broker)
        finally:
            await broker.stop()

    registry = asyncio.run(run(False))
    image = asyncio.run(run(True))
    assert len(registry) == len(image) == 10
    for r, i in zip(registry, image, strict=True):
        assert r == i
    # (not vacuous: the answers name the topics, this node, and the errors expected)
    assert {"a", "b", "__consumer_offsets"} <= {t["name"] for t in registry[0]["topics"]}
    assert [b["broker_id"] for b in registry[4]["brokers"]] == [1]
    assert {c["node_id"] for c in registry[7]["coordinators"]} == {1}
    codes = [p["error_code"] for p in registry[9]["topics"][0]["partitions"]]
    assert codes == [0, 0, 75, 3]  # -, current 0, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION


def test_leader_epoch_after_a_restart_and_offset_for_leader_epoch_agree(tmp_path: Path) -> None:
    """On the quorum a restart re-elects the leader (fenced, then unfenced: the epoch rises, as in
    Kafka). Metadata gives the image's epoch; a client that validates its position with that
    epoch (the Java consumer's OffsetsForLeaderEpoch) is answered, not UNKNOWN_LEADER_EPOCH."""
    data = tmp_path / "q"

    async def first() -> None:
        broker = Broker(_config(data, True))
        await broker.start(listen=False)
        net = MemoryNetwork(broker)
        client = net.client()
        try:
            assert await client.create_topics({"a": (1, 1)}) == {"a": None}
            await client.produce("a", 0, [(None, b"v", [], -1), (None, b"w", [], -1)])
        finally:
            await client.close()
            net.close()
            await broker.stop()

    async def second() -> None:
        broker = Broker(_config(data, True))
        await broker.start(listen=False)
        net = MemoryNetwork(broker)
        client = net.client()
        try:
            md = await client.metadata(["a"])
            epoch = md.topics["a"].partitions[0].leader_epoch
            assert epoch > 0 and md.topics["a"].partitions[0].leader == 1
            conn = await client.any_connection()
            resp = await conn.request(OFFSET_FOR_LEADER_EPOCH, {"replica_id": -1, "topics": [
                {"topic": "a", "partitions": [
                    {"partition": 0, "current_leader_epoch": epoch, "leader_epoch": 0},
                    {"partition": 0, "current_leader_epoch": epoch, "leader_epoch": epoch},
                    {"partition": 0, "current_leader_epoch": epoch - 1, "leader_epoch": 0},
                    {"partition": 0, "current_leader_epoch": epoch + 1, "leader_epoch": 0},
                ]}]})
            parts = resp.topics[0].partitions
            got = [(int(p.error_code), int(p.leader_epoch), int(p.end_offset)) for p in parts]
            assert got == [(0, 0, 2), (0, epoch, 2), (74, -1, -1), (75, -1, -1)]
        finally:
            await client.close()
            net.close()
            await broker.stop()

    asyncio.run(first())
    asyncio.run(second())
