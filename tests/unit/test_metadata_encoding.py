"""The Metadata answer assembled from topics encoded one by one (kept encoded between requests)
must be kio's encoding of the whole answer, byte for byte, in every version."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from strom.metadata.image import (
    BrokerRegistration,
    ClusterImage,
    MetadataImage,
    MetadataProvenance,
    PartitionRegistration,
    TopicImage,
    TopicsImage,
    frozen_map,
)
from strom.metadata.records import BrokerEndpoint
from strom.metadata.topics import TopicInfo, TopicRegistry
from strom.protocol import codec
from strom.protocol.errors import ErrorCode
from strom.server.context import RawResponse
from strom.server.handlers.metadata import (
    _answer,
    _EncodedTopics,
    _topic_type,
    encode_existing_topic,
    encode_topic,
)
from strom.server.metadata_cache import ImageMetadataCache, RegistryMetadataCache
from strom.server.network import _with_throttle


def _partition(p: int, leader: int, isr: tuple[int, ...]) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
        "partition_index": p,
        "leader_id": leader,
        "leader_epoch": 7,
        "replica_nodes": [1, 2, 3],
        "isr_nodes": list(isr),
        "offline_replicas": [3] if len(isr) < 3 else [],
    }


# more than 63 topics: the compact array's length takes two varint bytes
TOPICS: list[dict[str, Any]] = [
    {
        "error_code": 0,
        "name": f"topic-{i}",
        "topic_id": uuid.UUID(int=1000 + i),
        "is_internal": i == 0,
        "partitions": [_partition(p, 1 + p % 3, (1, 2) if p % 2 else (1, 2, 3)) for p in range(i % 4)],
        "topic_authorized_operations": 0x5F8 if i == 5 else -2147483648,
    }
    for i in range(70)
] + [
    {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": "missing", "partitions": []},
    {"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": uuid.UUID(int=5), "partitions": []},
]

TOP: dict[str, Any] = {
    "throttle_time": 0,
    "error_code": ErrorCode.NONE,
    "brokers": [
        {"node_id": 1, "host": "a.example", "port": 9092, "rack": "r1"},
        {"node_id": 2, "host": "b.example", "port": 9093, "rack": None},
    ],
    "cluster_id": "clu5ter",
    "controller_id": 2,
    "cluster_authorized_operations": 0x3F,
}


def _joined(resp: RawResponse) -> bytes:
    body = b"".join(bytes(p) for p in resp.parts if not isinstance(p, tuple))
    assert len(body) == resp.size
    return body


@pytest.mark.parametrize("version", range(0, 14))
@pytest.mark.parametrize("count", [0, 1, len(TOPICS)])
def test_assembled_answer_is_kios_encoding(version: int, count: int) -> None:
    topics = TOPICS[:count] if version >= 10 or count < len(TOPICS) else TOPICS[:-1]  # (ids: v10+)
    expected = codec.encode_response(codec.build(codec.response_type(3, version), {**TOP, "topics": topics}))
    resp = _answer(version, TOP, [encode_topic(version, t) for t in topics])
    assert _joined(resp) == expected
    assert resp.throttle_leads == (version >= 3)


@pytest.mark.parametrize("version", [3, 9, 13])
def test_a_request_quota_throttle_lands_in_the_assembled_answer(version: int) -> None:
    resp = _answer(version, TOP, [encode_topic(version, t) for t in TOPICS[:3]])
    _with_throttle(3, resp, 250)
    decoded = codec._reader(codec.response_type(3, version))(memoryview(_joined(resp)), 0)[0]
    assert decoded.throttle_time.total_seconds() == 0.25
    assert [t.name for t in decoded.topics] == ["topic-0", "topic-1", "topic-2"]
    assert len(decoded.topics[2].partitions) == 2


# ---------------------------------------------------------------- topics of a metadata cache

TID = uuid.UUID(int=7)


def _broker(i: int, *, fenced: bool = False, listeners: tuple[str, ...] = ("PLAINTEXT", "INTERNAL")
            ) -> BrokerRegistration:
    eps = tuple(BrokerEndpoint(name=n, host=f"h{i}", port=9000 + i) for n in listeners)
    return BrokerRegistration(id=i, epoch=100 + i, incarnation_id=uuid.UUID(int=i), listeners=eps,
                              fenced=fenced)


def _image(parts: dict[int, PartitionRegistration], brokers: list[BrokerRegistration]) -> MetadataImage:
    topic = TopicImage("t", TID, frozen_map(parts))
    return MetadataImage(
        provenance=MetadataProvenance(10, 1),
        cluster=ClusterImage(brokers=frozen_map({b.id: b for b in brokers})),
        topics=TopicsImage(frozen_map({TID: topic}), frozen_map({"t": topic})),
    )


PARTS = {
    0: PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=3),
    1: PartitionRegistration(replicas=(2, 1), isr=(2,), leader=2, leader_epoch=5),  # 2 is fenced
    2: PartitionRegistration(replicas=(3, 1), isr=(3, 1), leader=3, leader_epoch=1),  # 3: not on INTERNAL
    3: PartitionRegistration(replicas=(1,), isr=(1,), leader=1, leader_epoch=2),  # on a failed dir
}
BROKERS = [_broker(1), _broker(2, fenced=True), _broker(3, listeners=("PLAINTEXT",))]


def _ctx(cache: Any, version: int) -> Any:
    return SimpleNamespace(api_version=version, broker=SimpleNamespace(metadata_cache=cache),
                           session=SimpleNamespace(listener="INTERNAL"))


def _setup(tmp_path: Path) -> tuple[ImageMetadataCache, TopicInfo, set[tuple[str, int]]]:
    reg = TopicRegistry(tmp_path, persist=False)
    info = reg.create("t", 4, {}, topic_id=TID)
    offline = {("t", 3)}
    cache = ImageMetadataCache(reg, 1, "cid", "PLAINTEXT", offline)
    cache.update(_image(PARTS, BROKERS))
    return cache, info, offline


@pytest.mark.parametrize("version", range(0, 14))
def test_a_topic_of_the_cache_encodes_as_kio_would(tmp_path: Path, version: int) -> None:
    cache, info, _offline = _setup(tmp_path)
    not_here = ErrorCode.LISTENER_NOT_FOUND if version >= 6 else ErrorCode.LEADER_NOT_AVAILABLE
    expected = {
        "error_code": 0, "name": "t", "topic_id": TID, "is_internal": False,
        "topic_authorized_operations": 0x18 if version >= 8 else -2147483648,
        "partitions": [
            {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 3,
             "replica_nodes": [1, 2], "isr_nodes": [1, 2], "offline_replicas": [2]},
            {"error_code": ErrorCode.LEADER_NOT_AVAILABLE, "partition_index": 1, "leader_id": -1,
             "leader_epoch": 5, "replica_nodes": [2, 1], "isr_nodes": [2], "offline_replicas": [2]},
            {"error_code": not_here, "partition_index": 2, "leader_id": -1, "leader_epoch": 1,
             "replica_nodes": [3, 1], "isr_nodes": [3, 1], "offline_replicas": []},
            {"error_code": ErrorCode.LEADER_NOT_AVAILABLE, "partition_index": 3, "leader_id": -1,
             "leader_epoch": 2, "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": [1]},
        ],
    }
    ops = expected["topic_authorized_operations"]
    assert encode_existing_topic(_ctx(cache, version), info, ops) == encode_topic(version, expected)


def test_kept_entries_follow_the_image_and_the_failed_dirs(tmp_path: Path) -> None:
    cache, info, offline = _setup(tmp_path)
    kept = _EncodedTopics()
    ctx = _ctx(cache, 13)

    def get() -> bytes:
        return kept.get(ctx, info, dict(cache.offline_by_topic()))

    first = get()
    assert get() is first  # nothing changed: the same bytes, not encoded again
    cache.update(_image(PARTS, BROKERS))  # an image with equal content: still kept
    assert get() is first

    def decoded() -> Any:
        return codec._reader(_topic_type(13))(memoryview(get()), 0)[0]

    # the ISR of partition 0 shrinks: encoded again
    shrunk = PartitionRegistration(replicas=(1, 2), isr=(1,), leader=1, leader_epoch=4)
    cache.update(_image({**PARTS, 0: shrunk}, BROKERS))
    assert decoded().partitions[0].isr_nodes == (1,)
    assert decoded().partitions[0].leader_epoch == 4
    # broker 2 is unfenced: partition 1 has its leader back
    cache.update(_image(PARTS, [_broker(1), _broker(2), _broker(3, listeners=("PLAINTEXT",))]))
    assert decoded().partitions[1].leader_id == 2
    # the failed dir is back: partition 3 is led again
    offline.clear()
    assert decoded().partitions[3].leader_id == 1
    # more partitions
    added = PartitionRegistration(replicas=(1,), isr=(1,), leader=1, leader_epoch=0)
    cache.update(_image({**PARTS, 4: added}, BROKERS))
    info.partitions = 5
    assert [p.partition_index for p in decoded().partitions] == [0, 1, 2, 3, 4]
    # another API version, another listener: their own entries
    assert kept.get(_ctx(cache, 5), info, {}) != get()


def _states_from_partition(cache: Any, info: TopicInfo) -> list[tuple[Any, ...]]:
    out = []
    for p in range(info.partitions):
        pm = cache.partition(info.name, p)
        if pm is not None:
            out.append((p, pm.leader_id, pm.leader_epoch, pm.replicas, pm.isr, pm.offline_replicas))
    return out


def test_bulk_partition_states_agree_with_partition(tmp_path: Path) -> None:
    cache, info, offline = _setup(tmp_path)
    # an image without partition 2, a node-1 replica on a failed dir that 1 does not lead
    parts = {k: v for k, v in PARTS.items() if k != 2}
    parts[1] = PartitionRegistration(replicas=(2, 1), isr=(2, 1), leader=2, leader_epoch=5)
    for image_parts in (PARTS, parts):
        for failed in (set(), {("t", 3)}, {("t", 1), ("t", 3), ("other", 0)}):
            offline.clear()
            offline.update(failed)
            cache.update(_image(image_parts, BROKERS))
            assert cache.partition_states(info) == _states_from_partition(cache, info)
    registry = RegistryMetadataCache(TopicRegistry(tmp_path / "r", persist=False), 4, "cid",
                                     lambda _listener: ("h", 1), offline)
    rinfo = registry._registry.create("t", 5, {})
    for failed in (set(), {("t", 0), ("t", 4)}):
        offline.clear()
        offline.update(failed)
        assert registry.partition_states(rinfo) == _states_from_partition(registry, rinfo)
    assert cache.partition_states(TopicInfo("gone", uuid.UUID(int=1), 3)) == []
