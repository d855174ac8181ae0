"""The broker's read-only view of cluster metadata (Kafka's ``MetadataCache``).

Handlers ask it what the cluster looks like: which topics exist (by name and by id), how many
partitions each has, who leads a partition at which epoch with which replicas and ISR, which
brokers are alive at which endpoints, who the controller is, the cluster id. They never read
the topic registry or the broker's fields for that.

:class:`MetadataCache` is the interface (a protocol); :class:`RegistryMetadataCache` is the
single-node implementation over the :class:`~strom.metadata.topics.TopicRegistry`: this node
leads every partition at epoch 0 and is its only replica, and a partition on a failed log dir has
no leader (leader -1, this node among its offline replicas), as Kafka's controller answers once
a broker reports the dir offline.

:class:`ImageMetadataCache` is the broker's cache on the metadata quorum (Kafka's
``KRaftMetadataCache``), over the latest :class:`~strom.metadata.image.MetadataImage` the
:class:`~strom.server.metadata_publisher.BrokerMetadataPublisher` applied:

* brokers: the registered, unfenced brokers of ``image.cluster`` with their endpoint of the
  listener the client connected on (a broker without that listener is left out, as Kafka's
  ``getAliveBrokerNodes``); the controller id clients are told is a random alive broker (Kafka 4's
  ``getRandomAliveBrokerId``: KRaft brokers hide the controllers);
* topics: which topics and how many of their partitions exist is still the topic registry, which
  the publisher fills as the broker applies the image, so the broker's rule holds: a topic (or a
  new partition) with a replica here is visible only once its log exists here; one without a
  replica here is published as soon as the image has it;
* partitions: leader, leader epoch, replicas and ISR are the image's ``PartitionRegistration``;
  offline replicas are the replicas whose broker is not registered or fenced, plus this node for a
  partition on one of its failed log dirs (it then has no leader if this node led it, as today).

The :class:`~strom.server.replica_manager.ReplicaManager` decides NOT_LEADER_OR_FOLLOWER from
:meth:`MetadataCache.leader_id`: a partition led by another broker is answered so.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from ..metadata.image import EMPTY_IMAGE, BrokerRegistration, MetadataImage, PartitionRegistration
from ..metadata.topics import TopicInfo, TopicRegistry

TopicPartition = tuple[str, int]

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class BrokerNode:
    """An alive broker as clients of one listener see it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


def broker_nodes(cache: MetadataCache, node_ids: Iterable[int], listener: str | None) -> list[BrokerNode]:
    """The alive brokers among ``node_ids`` on ``listener``, by id (KIP-951's ``node_endpoints``
    of Produce and Fetch answers)."""
    nodes = (cache.alive_broker(n, listener) for n in sorted(set(node_ids)))
    return [n for n in nodes if n is not None]


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """Leadership of one partition (Kafka's ``PartitionRegistration`` / ``LeaderAndIsr``)."""

    topic: str
    partition: int
    leader_id: int  # NO_LEADER (-1) when no replica can lead
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()

    @property
    def has_leader(self) -> bool:
        return self.leader_id != NO_LEADER


# (partition, leader, leader epoch, replicas, ISR, offline replicas): PartitionMetadata's values
PartitionLeadership = tuple[int, int, int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]


class MetadataCache(Protocol):
    """What a handler may ask about the cluster. Every method answers from memory."""

    def cluster_id(self) -> str: ...

    def controller_id(self) -> int: ...

    def alive_brokers(self, listener: str | None = None) -> list[BrokerNode]:
        """The alive brokers with the endpoints of ``listener`` (default: the first listener)."""
        ...

    def alive_broker(self, node_id: int, listener: str | None = None) -> BrokerNode | None: ...

    def fenced_brokers(self, listener: str | None = None) -> list[BrokerNode]:
        """The registered but fenced brokers (DescribeCluster's ``include_fenced_brokers``)."""
        ...

    def topics(self) -> Iterable[TopicInfo]:
        """Every topic, in creation order."""
        ...

    def topics_version(self) -> int:
        """A number that moves whenever a topic is created or deleted (Kafka: the metadata
        image's offset); consumer groups resolve their regular expressions again when it does."""
        ...

    def topic(self, name: str) -> TopicInfo | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...

    def num_partitions(self, topic: str) -> int | None:
        """The partition count, or None for a topic that does not exist."""
        ...

    def contains(self, topic: str, partition: int) -> bool: ...

    def partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        """Leader, epoch, replicas and ISR of the partition; None if it does not exist."""
        ...

    def leader_id(self, topic: str, partition: int) -> int | None:
        """The partition's leader (NO_LEADER if none), None if it does not exist (hot path)."""
        ...

    def partition_states(self, info: TopicInfo) -> list[PartitionLeadership]:
        """Every partition of the topic that :meth:`partition` knows, in order, as plain tuples
        with the same values (the Metadata handler's bulk read: no object per partition)."""
        ...

    def topic_state(self, info: TopicInfo) -> Hashable:
        """A value equal between two calls (``==``) as long as what :meth:`partition` and
        :meth:`alive_broker` answer for the topic's partitions did not change, failed log dirs
        aside (:meth:`offline_by_topic`): the Metadata handler keeps each topic's encoded answer
        while it stays equal. Cheap: no walk over the partitions."""
        ...

    def offline_by_topic(self) -> Mapping[str, frozenset[int]]:
        """The partitions on this node's failed log dirs, by topic (empty while every dir is fine)."""
        ...


class RegistryMetadataCache:
    """:class:`MetadataCache` of a single node, over the topic registry.

    ``endpoint(listener)`` gives this node's advertised (host, port) for a listener;
    ``offline_replicas`` holds the partitions whose replica here is on a failed log dir (the
    replica manager's ``offline_partitions``: what a controller learns from the broker's log
    dir failure reports).
    """

    LEADER_EPOCH = 0  # one leader, never elected again (until replication)

    def __init__(
        self,
        registry: TopicRegistry,
        node_id: int,
        cluster_id: str,
        endpoint: Callable[[str | None], tuple[str, int]],
        offline_replicas: Collection[TopicPartition] = frozenset(),
        rack: str | None = None,
    ) -> None:
        self._registry = registry
        self._node_id = node_id
        self._cluster_id = cluster_id
        self._endpoint = endpoint
        self._offline = offline_replicas
        self._rack = rack
        self._replicas = (node_id,)

    # ------------------------------------------------------------------ cluster
    def cluster_id(self) -> str:
        return self._cluster_id

    def controller_id(self) -> int:
        # KRaft brokers hide the controllers: clients are given a live broker as controller
        return self._node_id

    def alive_brokers(self, listener: str | None = None) -> list[BrokerNode]:
        host, port = self._endpoint(listener)
        return [BrokerNode(self._node_id, host, port, self._rack)]

    def alive_broker(self, node_id: int, listener: str | None = None) -> BrokerNode | None:
        if node_id != self._node_id:
            return None
        return self.alive_brokers(listener)[0]

    def fenced_brokers(self, listener: str | None = None) -> list[BrokerNode]:
        return []  # a running single node is never fenced

    # ------------------------------------------------------------------ topics
    def topics(self) -> Iterable[TopicInfo]:
        return list(self._registry.topics.values())

    def topics_version(self) -> int:
        return self._registry.version

    def topic(self, name: str) -> TopicInfo | None:
        return self._registry.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._registry.by_id.get(topic_id)

    def num_partitions(self, topic: str) -> int | None:
        info = self._registry.topics.get(topic)
        return info.partitions if info is not None else None

    def contains(self, topic: str, partition: int) -> bool:
        info = self._registry.topics.get(topic)
        return info is not None and 0 <= partition < info.partitions

    # ------------------------------------------------------------------ partitions
    def partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        if not self.contains(topic, partition):
            return None
        nid = self._node_id
        if (topic, partition) in self._offline:
            return PartitionMetadata(topic, partition, NO_LEADER, self.LEADER_EPOCH, self._replicas,
                                     self._replicas, self._replicas)
        return PartitionMetadata(topic, partition, nid, self.LEADER_EPOCH, self._replicas, self._replicas)

    def leader_id(self, topic: str, partition: int) -> int | None:
        info = self._registry.topics.get(topic)
        if info is None or not 0 <= partition < info.partitions:
            return None
        offline = self._offline
        return NO_LEADER if offline and (topic, partition) in offline else self._node_id

    def partition_states(self, info: TopicInfo) -> list[PartitionLeadership]:
        name = info.name
        known = self._registry.topics.get(name)
        if known is None:
            return []
        r, nid, epoch, offline = self._replicas, self._node_id, self.LEADER_EPOCH, self._offline
        return [
            (p, NO_LEADER, epoch, r, r, r) if offline and (name, p) in offline else (p, nid, epoch, r, r, ())
            for p in range(known.partitions)
        ]

    def topic_state(self, info: TopicInfo) -> Hashable:
        # one replica, this node, at a fixed epoch: only the partition count (and the topic id,
        # should the name be created again) can change
        return (info.topic_id, info.partitions)

    def offline_by_topic(self) -> Mapping[str, frozenset[int]]:
        return _by_topic(self._offline)


class ImageMetadataCache:
    """:class:`MetadataCache` of a broker on the metadata quorum, over the applied image and the
    topic registry (see the module docstring).

    ``default_listener`` names the listener a caller that names none means (the broker's first
    non-controller listener); ``offline_replicas`` holds the partitions whose replica here is on a
    failed log dir; ``rng`` picks the controller id clients are given.
    """

    def __init__(
        self,
        registry: TopicRegistry,
        node_id: int,
        cluster_id: str,
        default_listener: str,
        offline_replicas: Collection[TopicPartition] = frozenset(),
        rng: random.Random | None = None,
    ) -> None:
        self._registry = registry
        self._node_id = node_id
        self._cluster_id = cluster_id
        self._default_listener = default_listener
        self._offline = offline_replicas
        self._rng = rng if rng is not None else random.Random()
        self._image: MetadataImage = EMPTY_IMAGE
        self._image_version = 0  # moves with every image applied

    # ------------------------------------------------------------------ the image
    @property
    def image(self) -> MetadataImage:
        return self._image

    def update(self, image: MetadataImage) -> None:
        """The publisher applies ``image`` (called before the registry changes for it)."""
        if image is not self._image:
            self._image = image
            self._image_version += 1

    # ------------------------------------------------------------------ cluster
    def cluster_id(self) -> str:
        return self._cluster_id

    def controller_id(self) -> int:
        """A random alive broker (Kafka's KRaft brokers answer clients so), -1 if none."""
        alive = [b.id for b in self._image.cluster.unfenced_brokers()]
        if not alive:
            return NO_LEADER  # MetadataResponse.NO_CONTROLLER_ID
        return alive[self._rng.randrange(len(alive))]

    def _node(self, reg: BrokerRegistration, listener: str | None) -> BrokerNode | None:
        ep = reg.listener(listener or self._default_listener)
        if ep is None:
            return None
        return BrokerNode(reg.id, ep.host, ep.port, reg.rack)

    def alive_brokers(self, listener: str | None = None) -> list[BrokerNode]:
        out = []
        for reg in self._image.cluster.unfenced_brokers():
            node = self._node(reg, listener)
            if node is not None:
                out.append(node)
        return out

    def fenced_brokers(self, listener: str | None = None) -> list[BrokerNode]:
        brokers = self._image.cluster.brokers
        nodes = (self._node(brokers[i], listener) for i in sorted(brokers) if brokers[i].fenced)
        return [n for n in nodes if n is not None]

    def alive_broker(self, node_id: int, listener: str | None = None) -> BrokerNode | None:
        reg = self._image.cluster.broker(node_id)
        if reg is None or reg.fenced:
            return None
        return self._node(reg, listener)

    # ------------------------------------------------------------------ topics (the registry)
    def topics(self) -> Iterable[TopicInfo]:
        return list(self._registry.topics.values())

    def topics_version(self) -> int:
        # both only grow: the sum moves when the registry or the image does
        return self._registry.version + self._image_version

    def topic(self, name: str) -> TopicInfo | None:
        return self._registry.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._registry.by_id.get(topic_id)

    def num_partitions(self, topic: str) -> int | None:
        info = self._registry.topics.get(topic)
        return info.partitions if info is not None else None

    def contains(self, topic: str, partition: int) -> bool:
        return self._registration(topic, partition) is not None

    # ------------------------------------------------------------------ partitions (the image)
    def _registration(self, topic: str, partition: int) -> PartitionRegistration | None:
        info = self._registry.topics.get(topic)
        if info is None or not 0 <= partition < info.partitions:
            return None
        t = self._image.topics.topics_by_name.get(topic)
        if t is None or t.id != info.topic_id:
            return None
        return t.partitions.get(partition)

    def partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        reg = self._registration(topic, partition)
        if reg is None:
            return None
        brokers = self._image.cluster.brokers
        offline = [r for r in reg.replicas if (b := brokers.get(r)) is None or b.fenced]
        leader = reg.leader
        if (topic, partition) in self._offline:
            if self._node_id not in offline and self._node_id in reg.replicas:
                offline.append(self._node_id)
            if leader == self._node_id:
                leader = NO_LEADER
        return PartitionMetadata(topic, partition, leader, reg.leader_epoch, reg.replicas, reg.isr,
                                 tuple(r for r in reg.replicas if r in offline))

    def leader_id(self, topic: str, partition: int) -> int | None:
        reg = self._registration(topic, partition)
        if reg is None:
            return None
        leader = reg.leader
        offline = self._offline
        if leader == self._node_id and offline and (topic, partition) in offline:
            return NO_LEADER
        return leader

    def partition_states(self, info: TopicInfo) -> list[PartitionLeadership]:
        name = info.name
        known = self._registry.topics.get(name)
        if known is None:
            return []
        t = self._image.topics.topics_by_name.get(name)
        if t is None or t.id != known.topic_id:
            return []
        brokers = self._image.cluster.brokers
        here, offline_here = self._node_id, self._offline
        down: dict[tuple[int, ...], tuple[int, ...]] = {}  # replicas -> those not alive (memo)
        out: list[PartitionLeadership] = []
        registrations = t.partitions
        for p in range(known.partitions):
            reg = registrations.get(p)
            if reg is None:
                continue
            replicas = reg.replicas
            offline = down.get(replicas)
            if offline is None:
                offline = down[replicas] = tuple(
                    r for r in replicas if (b := brokers.get(r)) is None or b.fenced)
            leader = reg.leader
            if offline_here and (name, p) in offline_here:  # as partition() answers it
                if here in replicas and here not in offline:
                    offline = tuple(r for r in replicas if r in offline or r == here)
                if leader == here:
                    leader = NO_LEADER
            out.append((p, leader, reg.leader_epoch, replicas, reg.isr, offline))
        return out

    def topic_state(self, info: TopicInfo) -> Hashable:
        # images are immutable and share what a delta did not change: the topic's image (its
        # partitions' registrations) and the cluster image (which brokers are alive, at which
        # endpoints) are the same objects until a record changes them, and compare cheaply
        image = self._image
        return (info.topic_id, info.partitions, image.topics.topics_by_name.get(info.name), image.cluster)

    def offline_by_topic(self) -> Mapping[str, frozenset[int]]:
        return _by_topic(self._offline)


def _by_topic(offline: Collection[TopicPartition]) -> Mapping[str, frozenset[int]]:
    if not offline:
        return {}
    groups: dict[str, set[int]] = {}
    for topic, partition in offline:
        groups.setdefault(topic, set()).add(partition)
    return {t: frozenset(ps) for t, ps in groups.items()}
