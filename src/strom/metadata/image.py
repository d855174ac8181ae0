"""The metadata image: an immutable picture of the cluster at one offset of ``__cluster_metadata``.

Theory of operation (Kafka's ``org.apache.kafka.image``)
-------------------------------------------------------
Every node replays the committed metadata log. The result at offset N is a :class:`MetadataImage`,
never mutated: a :class:`~strom.metadata.delta.MetadataDelta` replays records on top of an image and
``apply()`` builds the next image, reusing every part the records did not touch (an untouched
sub-image, topic or partition is the same object in both images). Readers (request handlers,
publishers) hold on to one image and see a consistent cluster for as long as they keep it.

The image is cut into Kafka's sub-images, each with its records:

==================  ================================================  ==========================
sub-image           what                                              records
==================  ================================================  ==========================
features            finalized feature levels, ``metadata.version``    FeatureLevelRecord
cluster             broker and controller registrations               (Un)RegisterBroker, Fence,
                                                                      Unfence, BrokerRegistration-
                                                                      Change, RegisterController
topics              topics by id and by name, their partitions        Topic, Partition,
                                                                      PartitionChange, RemoveTopic
configs             dynamic configs per (resource type, name)         ConfigRecord
client_quotas       quotas per entity                                 ClientQuotaRecord
producer_ids        the next producer id block start                  ProducerIdsRecord
acls                ACLs by id                                        (Remove)AccessControlEntry
scram               SCRAM credentials per (mechanism, user)           (Remove)UserScramCredential
delegation_tokens   delegation tokens by id                           (Remove)DelegationToken
==================  ================================================  ==========================

:meth:`MetadataImage.to_records` writes the records that rebuild the image from nothing (Kafka's
``MetadataImage.write`` for snapshots): replaying them into an empty image gives an equal image.

Maps are read-only views (``MappingProxyType``) over dicts built once by a delta; ``apply`` copies
the top-level dict of a changed sub-image (O(topics), not Kafka's persistent maps) and shares the
values. Partition ``directories`` are kept as the records carry them (Kafka fills missing ones with
a "migrating" placeholder; strom has one log directory per node and does not).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar, NamedTuple, TypeVar

from .records import (
    AccessControlEntryRecord,
    BrokerEndpoint,
    BrokerFeature,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    EntityData,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    TopicRecord,
    UserScramCredentialRecord,
)

K = TypeVar("K")
V = TypeVar("V")

METADATA_VERSION = "metadata.version"
NO_LEADER = -1
# ConfigResource.Type ids (Kafka's ConfigResource): the resource types a ConfigRecord names
CONFIG_RESOURCE_TOPIC = 2
CONFIG_RESOURCE_BROKER = 4
CONFIG_RESOURCE_BROKER_LOGGER = 8
CONFIG_RESOURCE_CLIENT_METRICS = 16
CONFIG_RESOURCE_GROUP = 32


class MetadataReplayError(Exception):
    """A record that contradicts the image it is replayed on (a partition of an unknown topic,
    fencing a broker at another epoch, ...). Kafka raises IllegalStateException/RuntimeException;
    a node that meets one has a metadata log it cannot follow."""


def frozen_map(d: Mapping[K, V] | None = None) -> Mapping[K, V]:
    """A read-only view of a private copy of ``d``."""
    return MappingProxyType(dict(d or {}))


_EMPTY: Mapping[object, object] = MappingProxyType({})


def _empty() -> Mapping[K, V]:
    return _EMPTY  # type: ignore[return-value]


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class ConfigResource(NamedTuple):
    type: int
    name: str


ClientQuotaEntity = tuple[tuple[str, str | None], ...]
"""A quota entity: its (entity type, name or None for the default) parts, sorted by type."""


class ScramKey(NamedTuple):
    mechanism: int
    name: str


@dataclass(frozen=True)
class MetadataProvenance:
    """Where an image comes from: the last offset and epoch it contains (Kafka's
    ``MetadataProvenance``), and the append time of that batch."""

    last_contained_offset: int = -1
    last_contained_epoch: int = -1
    last_contained_log_time_ms: int = -1


# --------------------------------------------------------------------------- features


@dataclass(frozen=True)
class FeaturesImage:
    finalized_versions: Mapping[str, int] = field(default_factory=_empty)
    metadata_version: int | None = None  # the metadata.version feature level, once known

    def records(self) -> Iterator[MetadataRecord]:
        if self.metadata_version is not None:
            yield FeatureLevelRecord(name=METADATA_VERSION, feature_level=self.metadata_version)
        for name in sorted(self.finalized_versions):
            yield FeatureLevelRecord(name=name, feature_level=self.finalized_versions[name])


# --------------------------------------------------------------------------- cluster


@dataclass(frozen=True)
class BrokerRegistration:
    """One registered broker (Kafka's ``BrokerRegistration``)."""

    id: int
    epoch: int
    incarnation_id: uuid.UUID
    listeners: tuple[BrokerEndpoint, ...] = ()
    supported_features: tuple[BrokerFeature, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    is_migrating_zk_broker: bool = False
    directories: tuple[uuid.UUID, ...] = ()

    @classmethod
    def from_record(cls, r: RegisterBrokerRecord) -> BrokerRegistration:
        return cls(
            id=r.broker_id,
            epoch=r.broker_epoch,
            incarnation_id=r.incarnation_id,
            listeners=r.end_points,
            supported_features=r.features,
            rack=r.rack,
            fenced=r.fenced,
            in_controlled_shutdown=r.in_controlled_shutdown,
            is_migrating_zk_broker=r.is_migrating_zk_broker,
            directories=r.log_dirs,
        )

    def to_record(self) -> RegisterBrokerRecord:
        return RegisterBrokerRecord(
            broker_id=self.id,
            is_migrating_zk_broker=self.is_migrating_zk_broker,
            incarnation_id=self.incarnation_id,
            broker_epoch=self.epoch,
            end_points=self.listeners,
            features=self.supported_features,
            rack=self.rack,
            fenced=self.fenced,
            in_controlled_shutdown=self.in_controlled_shutdown,
            log_dirs=self.directories,
        )

    def listener(self, name: str) -> BrokerEndpoint | None:
        return next((e for e in self.listeners if e.name == name), None)


@dataclass(frozen=True)
class ControllerRegistration:
    """One registered controller (KIP-919, Kafka's ``ControllerRegistration``)."""

    id: int
    incarnation_id: uuid.UUID
    zk_migration_ready: bool = False
    listeners: tuple[BrokerEndpoint, ...] = ()
    supported_features: tuple[BrokerFeature, ...] = ()

    @classmethod
    def from_record(cls, r: RegisterControllerRecord) -> ControllerRegistration:
        return cls(r.controller_id, r.incarnation_id, r.zk_migration_ready, r.end_points, r.features)

    def to_record(self) -> RegisterControllerRecord:
        return RegisterControllerRecord(
            controller_id=self.id,
            incarnation_id=self.incarnation_id,
            zk_migration_ready=self.zk_migration_ready,
            end_points=self.listeners,
            features=self.supported_features,
        )


@dataclass(frozen=True)
class ClusterImage:
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=_empty)
    controllers: Mapping[int, ControllerRegistration] = field(default_factory=_empty)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def unfenced_brokers(self) -> list[BrokerRegistration]:
        return [b for _, b in sorted(self.brokers.items()) if not b.fenced]

    def records(self) -> Iterator[MetadataRecord]:
        for broker_id in sorted(self.brokers):
            yield self.brokers[broker_id].to_record()
        for controller_id in sorted(self.controllers):
            yield self.controllers[controller_id].to_record()


# --------------------------------------------------------------------------- topics


@dataclass(frozen=True)
class PartitionRegistration:
    """One partition's replica assignment and leadership (Kafka's ``PartitionRegistration``).

    ``leader_epoch`` rises when the leader changes; ``partition_epoch`` on every change.
    """

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0  # 0 recovered, 1 recovering (after an unclean election)
    directories: tuple[uuid.UUID, ...] = ()
    elr: tuple[int, ...] | None = None  # eligible leader replicas (KIP-966), None when not in use
    last_known_elr: tuple[int, ...] | None = None

    @classmethod
    def from_record(cls, r: PartitionRecord) -> PartitionRegistration:
        return cls(
            replicas=r.replicas,
            isr=r.isr,
            leader=r.leader,
            leader_epoch=r.leader_epoch,
            partition_epoch=r.partition_epoch,
            removing_replicas=r.removing_replicas,
            adding_replicas=r.adding_replicas,
            leader_recovery_state=r.leader_recovery_state,
            directories=r.directories,
            elr=r.eligible_leader_replicas,
            last_known_elr=r.last_known_elr,
        )

    def to_record(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRecord:
        return PartitionRecord(
            partition_id=partition_id,
            topic_id=topic_id,
            replicas=self.replicas,
            isr=self.isr,
            removing_replicas=self.removing_replicas,
            adding_replicas=self.adding_replicas,
            leader=self.leader,
            leader_recovery_state=self.leader_recovery_state,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            directories=self.directories,
            eligible_leader_replicas=self.elr,
            last_known_elr=self.last_known_elr,
        )

    def merge(self, r: PartitionChangeRecord) -> PartitionRegistration:
        """This partition after ``r`` (Kafka's ``PartitionRegistration.merge``): a new leader
        bumps the leader epoch; every change bumps the partition epoch."""
        leader, leader_epoch = self.leader, self.leader_epoch
        if r.leader != -2:  # LEADER_NO_CHANGE
            leader, leader_epoch = r.leader, self.leader_epoch + 1
        return PartitionRegistration(
            replicas=self.replicas if r.replicas is None else r.replicas,
            isr=self.isr if r.isr is None else r.isr,
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            removing_replicas=self.removing_replicas if r.removing_replicas is None else r.removing_replicas,
            adding_replicas=self.adding_replicas if r.adding_replicas is None else r.adding_replicas,
            leader_recovery_state=(
                self.leader_recovery_state if r.leader_recovery_state == -1 else r.leader_recovery_state
            ),
            directories=self.directories if r.directories is None else r.directories,
            elr=self.elr if r.eligible_leader_replicas is None else r.eligible_leader_replicas,
            last_known_elr=self.last_known_elr if r.last_known_elr is None else r.last_known_elr,
        )

    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    def has_same_assignment(self, other: PartitionRegistration) -> bool:
        return (
            self.replicas == other.replicas
            and self.removing_replicas == other.removing_replicas
            and self.adding_replicas == other.adding_replicas
        )

    def directory(self, broker_id: int) -> uuid.UUID | None:
        """The log directory of ``broker_id``'s replica, if the partition records it."""
        if broker_id in self.replicas and len(self.directories) == len(self.replicas):
            return self.directories[self.replicas.index(broker_id)]
        return None


@dataclass(frozen=True)
class TopicImage:
    name: str
    id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration] = field(default_factory=_empty)

    def records(self) -> Iterator[MetadataRecord]:
        yield TopicRecord(name=self.name, topic_id=self.id)
        for pid in sorted(self.partitions):
            yield self.partitions[pid].to_record(self.id, pid)


@dataclass(frozen=True)
class TopicsImage:
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=_empty)
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=_empty)

    def get_topic(self, key: uuid.UUID | str) -> TopicImage | None:
        if isinstance(key, str):
            return self.topics_by_name.get(key)
        return self.topics_by_id.get(key)

    def get_partition(self, topic_id: uuid.UUID, partition: int) -> PartitionRegistration | None:
        topic = self.topics_by_id.get(topic_id)
        return None if topic is None else topic.partitions.get(partition)

    def records(self) -> Iterator[MetadataRecord]:
        for name in sorted(self.topics_by_name):
            yield from self.topics_by_name[name].records()


# --------------------------------------------------------------------------- the rest


@dataclass(frozen=True)
class ConfigurationsImage:
    resource_data: Mapping[ConfigResource, Mapping[str, str]] = field(default_factory=_empty)

    def configs(self, resource_type: int, name: str) -> Mapping[str, str]:
        return self.resource_data.get(ConfigResource(resource_type, name), _empty())

    def records(self) -> Iterator[MetadataRecord]:
        for res in sorted(self.resource_data):
            data = self.resource_data[res]
            for key in sorted(data):
                yield ConfigRecord(resource_type=res.type, resource_name=res.name, name=key, value=data[key])


def entity_key(parts: tuple[EntityData, ...]) -> ClientQuotaEntity:
    """The entity a quota record names: one name per entity type (a repeated type: the last
    wins, as in Kafka's map), sorted by type."""
    return tuple(sorted({p.entity_type: p.entity_name for p in parts}.items()))


@dataclass(frozen=True)
class ClientQuotasImage:
    entities: Mapping[ClientQuotaEntity, Mapping[str, float]] = field(default_factory=_empty)

    def records(self) -> Iterator[MetadataRecord]:
        for entity in sorted(self.entities, key=_entity_sort_key):
            quotas = self.entities[entity]
            parts = tuple(EntityData(entity_type=t, entity_name=n) for t, n in entity)
            for key in sorted(quotas):
                yield ClientQuotaRecord(entity=parts, key=key, value=quotas[key], remove=False)


def _entity_sort_key(entity: ClientQuotaEntity) -> tuple[tuple[str, bool, str], ...]:
    return tuple((t, n is None, n or "") for t, n in entity)


@dataclass(frozen=True)
class ProducerIdsImage:
    next_producer_id: int = -1  # -1: no block handed out yet

    def records(self) -> Iterator[MetadataRecord]:
        if self.next_producer_id >= 0:
            yield ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=self.next_producer_id)


@dataclass(frozen=True)
class AclsImage:
    acls: Mapping[uuid.UUID, AccessControlEntryRecord] = field(default_factory=_empty)

    def records(self) -> Iterator[MetadataRecord]:
        for acl_id in sorted(self.acls):
            yield self.acls[acl_id]


@dataclass(frozen=True)
class ScramCredentialData:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True)
class ScramImage:
    credentials: Mapping[ScramKey, ScramCredentialData] = field(default_factory=_empty)

    def records(self) -> Iterator[MetadataRecord]:
        for key in sorted(self.credentials):
            c = self.credentials[key]
            yield UserScramCredentialRecord(
                name=key.name,
                mechanism=key.mechanism,
                salt=c.salt,
                stored_key=c.stored_key,
                server_key=c.server_key,
                iterations=c.iterations,
            )


@dataclass(frozen=True)
class DelegationTokenImage:
    tokens: Mapping[str, DelegationTokenRecord] = field(default_factory=_empty)

    def records(self) -> Iterator[MetadataRecord]:
        for token_id in sorted(self.tokens):
            yield self.tokens[token_id]


# --------------------------------------------------------------------------- the image


@dataclass(frozen=True)
class MetadataImage:
    provenance: MetadataProvenance = MetadataProvenance()
    features: FeaturesImage = FeaturesImage()
    cluster: ClusterImage = ClusterImage()
    topics: TopicsImage = TopicsImage()
    configs: ConfigurationsImage = ConfigurationsImage()
    client_quotas: ClientQuotasImage = ClientQuotasImage()
    producer_ids: ProducerIdsImage = ProducerIdsImage()
    acls: AclsImage = AclsImage()
    scram: ScramImage = ScramImage()
    delegation_tokens: DelegationTokenImage = DelegationTokenImage()

    EMPTY: ClassVar[MetadataImage]  # the image of an empty log, set below

    @property
    def offset(self) -> int:
        """The last offset of the metadata log this image contains (-1: none)."""
        return self.provenance.last_contained_offset

    @property
    def epoch(self) -> int:
        return self.provenance.last_contained_epoch

    def is_empty(self) -> bool:
        return self.same_content(EMPTY_IMAGE)

    def same_content(self, other: MetadataImage) -> bool:
        """Equal in everything but provenance."""
        return (
            self.features == other.features
            and self.cluster == other.cluster
            and self.topics == other.topics
            and self.configs == other.configs
            and self.client_quotas == other.client_quotas
            and self.producer_ids == other.producer_ids
            and self.acls == other.acls
            and self.scram == other.scram
            and self.delegation_tokens == other.delegation_tokens
        )

    def to_records(self) -> list[MetadataRecord]:
        """The records that rebuild this image from an empty one (a snapshot's content), in
        Kafka's order: features (metadata.version first), cluster (brokers, controllers), topics,
        configs, quotas, producer ids, ACLs, SCRAM, delegation tokens."""
        out: list[MetadataRecord] = []
        for part in (
            self.features,
            self.cluster,
            self.topics,
            self.configs,
            self.client_quotas,
            self.producer_ids,
            self.acls,
            self.scram,
            self.delegation_tokens,
        ):
            out.extend(part.records())
        return out


EMPTY_IMAGE = MetadataImage()
MetadataImage.EMPTY = EMPTY_IMAGE
