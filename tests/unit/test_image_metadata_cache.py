"""ImageMetadataCache (the broker's cache on the metadata quorum) over hand-built images."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

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
from strom.metadata.topics import TopicRegistry
from strom.server.metadata_cache import NO_LEADER, BrokerNode, ImageMetadataCache

TID = uuid.UUID(int=7)


def _broker(i: int, *, fenced: bool = False, listeners: tuple[str, ...] = ("PLAINTEXT", "INTERNAL"),
            rack: str | None = None) -> BrokerRegistration:
    eps = tuple(BrokerEndpoint(name=n, host=f"h{i}-{n.lower()}", port=9000 + 10 * i + k)
                for k, n in enumerate(listeners))
    return BrokerRegistration(id=i, epoch=100 + i, incarnation_id=uuid.UUID(int=i), listeners=eps,
                              rack=rack, fenced=fenced)


def _image(brokers: list[BrokerRegistration], partitions: dict[int, PartitionRegistration],
           name: str = "t", offset: int = 10) -> MetadataImage:
    topic = TopicImage(name, TID, frozen_map(partitions))
    return MetadataImage(
        provenance=MetadataProvenance(offset, 1),
        cluster=ClusterImage(brokers=frozen_map({b.id: b for b in brokers})),
        topics=TopicsImage(frozen_map({TID: topic}), frozen_map({name: topic})),
    )


def _cache(tmp_path: Path, node_id: int = 1, offline: set[tuple[str, int]] | None = None,
           partitions: int = 2) -> tuple[ImageMetadataCache, TopicRegistry]:
    reg = TopicRegistry(tmp_path, persist=False)
    reg.create("t", partitions, {}, topic_id=TID)
    cache = ImageMetadataCache(reg, node_id, "cid", "PLAINTEXT", offline if offline is not None else set(),
                               rng=random.Random(3))
    return cache, reg


def test_two_brokers_leader_isr_epochs(tmp_path: Path) -> None:
    cache, _reg = _cache(tmp_path)
    parts = {
        0: PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=3),
        1: PartitionRegistration(replicas=(2, 1), isr=(2,), leader=2, leader_epoch=5),
    }
    cache.update(_image([_broker(1), _broker(2, rack="r2")], parts))
    assert cache.alive_brokers() == [BrokerNode(1, "h1-plaintext", 9010),
                                     BrokerNode(2, "h2-plaintext", 9020, "r2")]
    assert cache.alive_brokers("INTERNAL") == [BrokerNode(1, "h1-internal", 9011),
                                               BrokerNode(2, "h2-internal", 9021, "r2")]
    assert cache.alive_broker(2, "INTERNAL") == BrokerNode(2, "h2-internal", 9021, "r2")
    p0 = cache.partition("t", 0)
    assert p0 is not None
    assert (p0.leader_id, p0.leader_epoch, p0.replicas, p0.isr) == (1, 3, (1, 2), (1, 2))
    assert p0.offline_replicas == ()
    p1 = cache.partition("t", 1)
    assert p1 is not None
    assert (p1.leader_id, p1.leader_epoch, p1.replicas, p1.isr) == (2, 5, (2, 1), (2,))
    assert cache.leader_id("t", 0) == 1 and cache.leader_id("t", 1) == 2
    assert cache.leader_id("t", 2) is None and cache.partition("t", 2) is None
    assert cache.leader_id("nope", 0) is None and not cache.contains("nope", 0)
    assert cache.contains("t", 1) and cache.num_partitions("t") == 2


def test_three_brokers_fenced_hidden_and_listener_without_endpoint(tmp_path: Path) -> None:
    cache, _reg = _cache(tmp_path)
    parts = {
        0: PartitionRegistration(replicas=(2, 3, 1), isr=(2, 1), leader=2, leader_epoch=1),
        1: PartitionRegistration(replicas=(3, 4), isr=(3,), leader=3),
    }
    brokers = [_broker(1), _broker(2, listeners=("PLAINTEXT",)), _broker(3, fenced=True)]
    cache.update(_image(brokers, parts))
    # the fenced broker 3 is hidden; broker 2 has no INTERNAL listener: left out of its answer
    assert [b.node_id for b in cache.alive_brokers()] == [1, 2]
    assert [b.node_id for b in cache.alive_brokers("INTERNAL")] == [1]
    assert cache.alive_broker(3) is None and cache.alive_broker(2, "INTERNAL") is None
    assert cache.alive_broker(9) is None
    # replicas of a fenced (3) or unregistered (4) broker are offline
    p0 = cache.partition("t", 0)
    assert p0 is not None and p0.offline_replicas == (3,)
    p1 = cache.partition("t", 1)
    assert p1 is not None and p1.offline_replicas == (3, 4)
    # the controller clients are told: a random alive broker, never a fenced one
    assert {cache.controller_id() for _ in range(50)} == {1, 2}


def test_controller_id_of_a_lone_broker_and_of_none(tmp_path: Path) -> None:
    cache, _reg = _cache(tmp_path)
    assert cache.controller_id() == -1  # no image yet: no broker
    cache.update(_image([_broker(1)], {p: PartitionRegistration((1,), (1,), 1) for p in range(2)}))
    assert {cache.controller_id() for _ in range(10)} == {1}


def test_visibility_follows_the_registry_and_version_moves(tmp_path: Path) -> None:
    cache, reg = _cache(tmp_path, partitions=1)
    parts = {p: PartitionRegistration((1,), (1,), 1) for p in range(3)}
    v0 = cache.topics_version()
    cache.update(_image([_broker(1)], parts))
    v1 = cache.topics_version()
    assert v1 != v0
    # the image has 3 partitions, the registry (logs made) 1: only partition 0 exists yet
    assert cache.leader_id("t", 0) == 1 and cache.leader_id("t", 1) is None
    reg.set_partitions("t", 3)
    assert cache.leader_id("t", 2) == 1
    # a topic of the registry that the image does not have (yet) has no partitions
    reg.create("u", 1, {}, topic_id=uuid.UUID(int=8))
    assert cache.topics_version() != v1
    assert cache.topic("u") is not None and cache.partition("u", 0) is None
    # a topic recreated under another id: the image's registration is not the registry's topic
    reg.delete("t")
    reg.create("t", 3, {}, topic_id=uuid.UUID(int=9))
    assert cache.partition("t", 0) is None


def test_offline_replica_here_has_no_leader(tmp_path: Path) -> None:
    offline = {("t", 0), ("t", 1)}
    cache, _reg = _cache(tmp_path, offline=offline)
    parts = {
        0: PartitionRegistration(replicas=(1,), isr=(1,), leader=1),
        1: PartitionRegistration(replicas=(2, 1), isr=(2, 1), leader=2, leader_epoch=4),
    }
    cache.update(_image([_broker(1), _broker(2)], parts))
    p0 = cache.partition("t", 0)
    assert p0 is not None and (p0.leader_id, p0.offline_replicas, p0.has_leader) == (NO_LEADER, (1,), False)
    assert cache.leader_id("t", 0) == NO_LEADER
    # led elsewhere: the leader stays, this node's replica is offline
    p1 = cache.partition("t", 1)
    assert p1 is not None and (p1.leader_id, p1.offline_replicas) == (2, (1,))
    assert cache.leader_id("t", 1) == 2
