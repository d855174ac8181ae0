"""Metadata deltas: replay records on top of an image, then ``apply()`` the next image.

Theory of operation (Kafka's ``MetadataDelta`` and its per-area deltas)
----------------------------------------------------------------------
A :class:`MetadataDelta` starts from an image and replays records in log order. Each area has its
own delta, created the first time a record touches it (an area no record touched is shared as is
by the next image). A delta records *changes*, not a copy: ``changed_brokers`` maps a broker id to
its new registration or to ``None`` (unregistered), ``TopicsDelta`` keeps the changed topics with
their changed partitions, the ids of topics created and of topics deleted, and so on.
``apply(provenance)`` builds the new image; the delta stays readable afterwards, which is how a
publisher learns what changed (``on_metadata_update(delta, new_image, manifest)``):

* topics created / deleted: ``topics_delta.created_topic_ids`` / ``deleted_topic_ids``;
* partitions changed: :meth:`TopicsDelta.changed_partitions`;
* what it means for one broker: :meth:`TopicsDelta.local_changes` (Kafka's ``localChanges``):
  partitions to delete, partitions it now leads (``elected_leaders`` when the leader epoch moved,
  ``leaders`` on any partition-epoch change) and partitions it now follows.

Loading a snapshot is a delta too: replay the snapshot's records over the current image, then
:meth:`MetadataDelta.finish_snapshot` marks everything the snapshot did not mention as removed, so
the delta describes exactly how the snapshot differs from the image it replaces.

Rules kept from Kafka: a new leader in a PartitionChangeRecord bumps the leader epoch, every
PartitionChangeRecord bumps the partition epoch; RemoveTopicRecord also drops the topic's configs;
a FeatureLevelRecord at level 0 removes the feature; a quota record with ``remove`` drops the key;
fencing, unfencing or changing a broker requires its current epoch. Departure: configs set on a topic
created and deleted inside one delta are dropped with it (Kafka keeps them).

ZkMigrationStateRecord (ZooKeeper migration, gone in Kafka 4.0) is read and ignored. The
transaction markers (Begin/End/AbortTransactionRecord) are no-ops here: what an aborted
transaction leaves out is decided by the :class:`~strom.metadata.loader.MetadataLoader`.

Error contract: a record that contradicts the image raises :class:`MetadataReplayError`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .image import (
    CONFIG_RESOURCE_TOPIC,
    METADATA_VERSION,
    AclsImage,
    BrokerRegistration,
    ClientQuotaEntity,
    ClientQuotasImage,
    ClusterImage,
    ConfigResource,
    ConfigurationsImage,
    ControllerRegistration,
    DelegationTokenImage,
    FeaturesImage,
    MetadataImage,
    MetadataProvenance,
    MetadataReplayError,
    PartitionRegistration,
    ProducerIdsImage,
    ScramCredentialData,
    ScramImage,
    ScramKey,
    TopicImage,
    TopicPartition,
    TopicsImage,
    entity_key,
    frozen_map,
)
from .records import (
    AbortTransactionRecord,
    AccessControlEntryRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ClearElrRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
    ZkMigrationStateRecord,
)

# --------------------------------------------------------------------------- features


class FeaturesDelta:
    def __init__(self, image: FeaturesImage) -> None:
        self.image = image
        self.changes: dict[str, int | None] = {}
        self.metadata_version_change: int | None = None
        self._clear_metadata_version = False  # a snapshot without metadata.version

    def replay(self, r: FeatureLevelRecord) -> None:
        if r.name == METADATA_VERSION:
            self.metadata_version_change = r.feature_level
        else:
            self.changes[r.name] = r.feature_level or None

    def finish_snapshot(self) -> None:
        for name in self.image.finalized_versions:
            self.changes.setdefault(name, None)
        self._clear_metadata_version = self.metadata_version_change is None

    def apply(self) -> FeaturesImage:
        versions = _merge(self.image.finalized_versions, self.changes)
        mv = self.metadata_version_change
        if mv is None and not self._clear_metadata_version:
            mv = self.image.metadata_version
        return FeaturesImage(versions, mv)


def _merge(base: Any, changes: dict[Any, Any]) -> Any:
    """``base`` with ``changes`` applied (a ``None`` value removes the key), as a frozen map."""
    out = dict(base)
    for k, v in changes.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return frozen_map(out)


# --------------------------------------------------------------------------- cluster


class ClusterDelta:
    def __init__(self, image: ClusterImage) -> None:
        self.image = image
        self.changed_brokers: dict[int, BrokerRegistration | None] = {}
        self.changed_controllers: dict[int, ControllerRegistration | None] = {}

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self.changed_brokers:
            return self.changed_brokers[broker_id]
        return self.image.broker(broker_id)

    def _broker_at(self, broker_id: int, epoch: int, action: str) -> BrokerRegistration:
        b = self.broker(broker_id)
        if b is None:
            raise MetadataReplayError(f"tried to {action} broker {broker_id}, but it is not registered")
        if b.epoch != epoch:
            raise MetadataReplayError(
                f"tried to {action} broker {broker_id} at epoch {epoch}, but its epoch is {b.epoch}"
            )
        return b

    def replay(self, r: MetadataRecord) -> None:
        if isinstance(r, RegisterBrokerRecord):
            self.changed_brokers[r.broker_id] = BrokerRegistration.from_record(r)
        elif isinstance(r, RegisterControllerRecord):
            self.changed_controllers[r.controller_id] = ControllerRegistration.from_record(r)
        elif isinstance(r, UnregisterBrokerRecord):
            self.changed_brokers[r.broker_id] = None
        elif isinstance(r, FenceBrokerRecord | UnfenceBrokerRecord):
            fence = isinstance(r, FenceBrokerRecord)
            b = self._broker_at(r.id, r.epoch, "fence" if fence else "unfence")
            self.changed_brokers[r.id] = _replace(b, fenced=fence)
        elif isinstance(r, BrokerRegistrationChangeRecord):
            b = self._broker_at(r.broker_id, r.broker_epoch, "change")
            if r.fenced not in (-1, 0, 1):
                raise MetadataReplayError(f"unknown fencing change {r.fenced} for broker {r.broker_id}")
            if r.in_controlled_shutdown not in (0, 1):
                raise MetadataReplayError(
                    f"unknown controlled-shutdown change {r.in_controlled_shutdown} for broker {r.broker_id}"
                )
            new = _replace(
                b,
                fenced=b.fenced if r.fenced == 0 else r.fenced == 1,
                in_controlled_shutdown=b.in_controlled_shutdown or r.in_controlled_shutdown == 1,
                directories=r.log_dirs or b.directories,
            )
            if new != b:
                self.changed_brokers[r.broker_id] = new

    def finish_snapshot(self) -> None:
        for broker_id in self.image.brokers:
            self.changed_brokers.setdefault(broker_id, None)
        for controller_id in self.image.controllers:
            self.changed_controllers.setdefault(controller_id, None)

    def apply(self) -> ClusterImage:
        return ClusterImage(
            _merge(self.image.brokers, self.changed_brokers),
            _merge(self.image.controllers, self.changed_controllers),
        )


def _replace(b: BrokerRegistration, **changes: Any) -> BrokerRegistration:
    return replace(b, **changes)


# --------------------------------------------------------------------------- topics


@dataclass(frozen=True)
class PartitionInfo:
    topic_id: uuid.UUID
    partition: PartitionRegistration


@dataclass
class LocalReplicaChanges:
    """What a delta means for one broker's replicas (Kafka's ``LocalReplicaChanges``)."""

    deletes: set[TopicPartition] = field(default_factory=set)
    elected_leaders: dict[TopicPartition, PartitionInfo] = field(default_factory=dict)
    leaders: dict[TopicPartition, PartitionInfo] = field(default_factory=dict)
    followers: dict[TopicPartition, PartitionInfo] = field(default_factory=dict)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    directory_ids: dict[tuple[uuid.UUID, int], uuid.UUID] = field(default_factory=dict)


class TopicDelta:
    def __init__(self, image: TopicImage) -> None:
        self.image = image
        self.partition_changes: dict[int, PartitionRegistration] = {}

    @property
    def name(self) -> str:
        return self.image.name

    @property
    def id(self) -> uuid.UUID:
        return self.image.id

    def new_partitions(self) -> dict[int, PartitionRegistration]:
        return {p: r for p, r in self.partition_changes.items() if p not in self.image.partitions}

    def replay(self, r: PartitionRecord | PartitionChangeRecord) -> None:
        if isinstance(r, PartitionRecord):
            self.partition_changes[r.partition_id] = PartitionRegistration.from_record(r)
            return
        current = self.partition_changes.get(r.partition_id) or self.image.partitions.get(r.partition_id)
        if current is None:
            raise MetadataReplayError(f"unable to find partition {r.topic_id}:{r.partition_id}")
        self.partition_changes[r.partition_id] = current.merge(r)

    def clear_elr(self) -> None:
        """ClearElrRecord: partitions with eligible leader replicas lose them (a partition change:
        the partition epoch moves)."""
        for p in sorted(set(self.image.partitions) | set(self.partition_changes)):
            current = self.partition_changes.get(p) or self.image.partitions[p]
            if current.elr or current.last_known_elr:
                self.partition_changes[p] = current.merge(
                    PartitionChangeRecord(
                        partition_id=p, topic_id=self.id, eligible_leader_replicas=(), last_known_elr=()
                    )
                )

    def apply(self) -> TopicImage:
        if not self.partition_changes:
            return self.image
        partitions = dict(self.image.partitions)
        partitions.update(self.partition_changes)
        return TopicImage(self.image.name, self.image.id, frozen_map(partitions))

    def has_partitions_with_assignment_changes(self) -> bool:
        for p, new in self.partition_changes.items():
            old = self.image.partitions.get(p)
            if old is None or not old.has_same_assignment(new):
                return True
        return False

    def local_changes(self, broker_id: int, out: LocalReplicaChanges | None = None) -> LocalReplicaChanges:
        out = out if out is not None else LocalReplicaChanges()
        for p, new in self.partition_changes.items():
            prev = self.image.partitions.get(p)
            tp = TopicPartition(self.name, p)
            if broker_id not in new.replicas:
                if prev is not None and broker_id in prev.replicas:
                    out.deletes.add(tp)
            elif prev is None or prev.partition_epoch != new.partition_epoch:
                info = PartitionInfo(self.id, new)
                if new.leader == broker_id:
                    out.leaders[tp] = info
                    if prev is None or prev.leader_epoch != new.leader_epoch:
                        out.elected_leaders[tp] = info
                else:
                    out.followers[tp] = info
                out.topic_ids.setdefault(self.name, self.id)
            directory = new.directory(broker_id)
            if directory is not None and (prev is None or prev.directory(broker_id) != directory):
                out.directory_ids[(self.id, p)] = directory
        return out


class TopicsDelta:
    def __init__(self, image: TopicsImage) -> None:
        self.image = image
        self.changed_topics: dict[uuid.UUID, TopicDelta] = {}
        self.created_topic_ids: set[uuid.UUID] = set()
        # topics of the image that are deleted (a topic created and deleted in this delta leaves no trace)
        self.deleted_topic_ids: set[uuid.UUID] = set()

    def _topic_delta(self, topic_id: uuid.UUID) -> TopicDelta:
        d = self.changed_topics.get(topic_id)
        if d is None:
            topic = self.image.topics_by_id.get(topic_id)
            if topic is None:
                raise MetadataReplayError(f"no topic with id {topic_id}")
            d = self.changed_topics[topic_id] = TopicDelta(topic)
        return d

    def replay(self, r: MetadataRecord) -> str | None:
        """Replay a topic record; for a RemoveTopicRecord, returns the removed topic's name."""
        if isinstance(r, TopicRecord):
            self.changed_topics[r.topic_id] = TopicDelta(TopicImage(r.name, r.topic_id))
            self.created_topic_ids.add(r.topic_id)
        elif isinstance(r, PartitionRecord | PartitionChangeRecord):
            self._topic_delta(r.topic_id).replay(r)
        elif isinstance(r, ClearElrRecord):
            if r.topic_name:
                ids = [tid for tid, d in self.changed_topics.items() if d.name == r.topic_name]
                topic = self.image.topics_by_name.get(r.topic_name)
                if not ids and topic is not None and topic.id not in self.deleted_topic_ids:
                    ids = [topic.id]
                if not ids:
                    raise MetadataReplayError(f"unable to clear ELRs of topic {r.topic_name}: no such topic")
            else:
                alive = (tid for tid in self.image.topics_by_id if tid not in self.deleted_topic_ids)
                ids = list(dict.fromkeys([*alive, *self.changed_topics]))
            for tid in ids:
                self._topic_delta(tid).clear_elr()
        elif isinstance(r, RemoveTopicRecord):
            d = self.changed_topics.pop(r.topic_id, None)
            self.created_topic_ids.discard(r.topic_id)
            if r.topic_id in self.image.topics_by_id:
                self.deleted_topic_ids.add(r.topic_id)
                return self.image.topics_by_id[r.topic_id].name
            if d is None:
                raise MetadataReplayError(f"unable to delete topic with id {r.topic_id}: no such topic")
            return d.name
        return None

    def finish_snapshot(self) -> None:
        for topic_id in self.image.topics_by_id:
            if topic_id not in self.changed_topics:
                self.deleted_topic_ids.add(topic_id)

    def apply(self) -> TopicsImage:
        by_id = dict(self.image.topics_by_id)
        by_name = dict(self.image.topics_by_name)
        for topic_id in self.deleted_topic_ids:
            gone = by_id.pop(topic_id)
            if by_name.get(gone.name) is gone:
                del by_name[gone.name]
        for topic_id, d in self.changed_topics.items():
            old = by_id.get(topic_id)
            new = d.apply()
            if old is not None and old.name != new.name and by_name.get(old.name) is old:
                del by_name[old.name]
            by_id[topic_id] = new
            by_name[new.name] = new
        return TopicsImage(frozen_map(by_id), frozen_map(by_name))

    def changed_topic(self, topic_id: uuid.UUID) -> TopicDelta | None:
        return self.changed_topics.get(topic_id)

    def topic_was_deleted(self, name: str) -> bool:
        """True if the image's topic ``name`` was deleted (even if a new one took its name)."""
        topic = self.image.topics_by_name.get(name)
        return topic is not None and topic.id in self.deleted_topic_ids

    def changed_partitions(self) -> dict[TopicPartition, PartitionRegistration]:
        """Every partition created or changed by this delta, with its new registration."""
        return {
            TopicPartition(d.name, p): reg
            for d in self.changed_topics.values()
            for p, reg in d.partition_changes.items()
        }

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        out = LocalReplicaChanges()
        for d in self.changed_topics.values():
            d.local_changes(broker_id, out)
        for topic_id in self.deleted_topic_ids:
            topic = self.image.topics_by_id[topic_id]
            for p, reg in topic.partitions.items():
                if broker_id in reg.replicas:
                    out.deletes.add(TopicPartition(topic.name, p))
        return out


# --------------------------------------------------------------------------- configs, quotas, ...


class ConfigurationsDelta:
    def __init__(self, image: ConfigurationsImage) -> None:
        self.image = image
        self.changes: dict[ConfigResource, dict[str, str | None]] = {}

    def replay(self, r: ConfigRecord) -> None:
        res = ConfigResource(r.resource_type, r.resource_name)
        self.changes.setdefault(res, {})[r.name] = r.value

    def delete_all(self, res: ConfigResource) -> None:
        existing = self.image.resource_data.get(res)
        if existing is None:
            self.changes.pop(res, None)
        else:
            self.changes[res] = dict.fromkeys(existing)

    def remove_topic(self, topic_name: str) -> None:
        self.delete_all(ConfigResource(CONFIG_RESOURCE_TOPIC, topic_name))

    def finish_snapshot(self) -> None:
        for res, data in self.image.resource_data.items():
            changes = self.changes.setdefault(res, {})
            for key in data:
                changes.setdefault(key, None)

    def apply(self) -> ConfigurationsImage:
        data = dict(self.image.resource_data)
        for res, changes in self.changes.items():
            merged = _merge(data.get(res, {}), changes)
            if merged:
                data[res] = merged
            else:
                data.pop(res, None)
        return ConfigurationsImage(frozen_map(data))


class ClientQuotasDelta:
    def __init__(self, image: ClientQuotasImage) -> None:
        self.image = image
        self.changes: dict[ClientQuotaEntity, dict[str, float | None]] = {}

    def replay(self, r: ClientQuotaRecord) -> None:
        self.changes.setdefault(entity_key(r.entity), {})[r.key] = None if r.remove else r.value

    def finish_snapshot(self) -> None:
        for entity, quotas in self.image.entities.items():
            changes = self.changes.setdefault(entity, {})
            for key in quotas:
                changes.setdefault(key, None)

    def apply(self) -> ClientQuotasImage:
        data = dict(self.image.entities)
        for entity, changes in self.changes.items():
            merged = _merge(data.get(entity, {}), changes)
            if merged:
                data[entity] = merged
            else:
                data.pop(entity, None)
        return ClientQuotasImage(frozen_map(data))


class ProducerIdsDelta:
    def __init__(self, image: ProducerIdsImage) -> None:
        self.next_producer_id = image.next_producer_id
        self._replayed = False

    def replay(self, r: ProducerIdsRecord) -> None:
        self.next_producer_id = r.next_producer_id
        self._replayed = True

    def finish_snapshot(self) -> None:
        if not self._replayed:  # the snapshot has no block handed out (Kafka keeps the old value)
            self.next_producer_id = -1

    def apply(self) -> ProducerIdsImage:
        return ProducerIdsImage(self.next_producer_id)


class AclsDelta:
    def __init__(self, image: AclsImage) -> None:
        self.image = image
        self.changes: dict[uuid.UUID, AccessControlEntryRecord | None] = {}

    def replay(self, r: AccessControlEntryRecord | RemoveAccessControlEntryRecord) -> None:
        if isinstance(r, AccessControlEntryRecord):
            self.changes[r.id] = r
        elif r.id in self.image.acls:
            self.changes[r.id] = None
        elif self.changes.get(r.id) is not None:
            del self.changes[r.id]
        else:
            raise MetadataReplayError(f"attempt to remove a non-existent ACL {r.id}")

    def finish_snapshot(self) -> None:
        for acl_id in self.image.acls:
            self.changes.setdefault(acl_id, None)

    def apply(self) -> AclsImage:
        return AclsImage(_merge(self.image.acls, self.changes))


class ScramDelta:
    def __init__(self, image: ScramImage) -> None:
        self.image = image
        self.changes: dict[ScramKey, ScramCredentialData | None] = {}

    def replay(self, r: UserScramCredentialRecord | RemoveUserScramCredentialRecord) -> None:
        key = ScramKey(r.mechanism, r.name)
        if isinstance(r, UserScramCredentialRecord):
            self.changes[key] = ScramCredentialData(r.salt, r.stored_key, r.server_key, r.iterations)
        else:
            self.changes[key] = None

    def finish_snapshot(self) -> None:
        for key in self.image.credentials:
            self.changes.setdefault(key, None)

    def apply(self) -> ScramImage:
        return ScramImage(_merge(self.image.credentials, self.changes))


class DelegationTokenDelta:
    def __init__(self, image: DelegationTokenImage) -> None:
        self.image = image
        self.changes: dict[str, DelegationTokenRecord | None] = {}

    def replay(self, r: DelegationTokenRecord | RemoveDelegationTokenRecord) -> None:
        self.changes[r.token_id] = r if isinstance(r, DelegationTokenRecord) else None

    def finish_snapshot(self) -> None:
        for token_id in self.image.tokens:
            self.changes.setdefault(token_id, None)

    def apply(self) -> DelegationTokenImage:
        return DelegationTokenImage(_merge(self.image.tokens, self.changes))


# --------------------------------------------------------------------------- the delta


class MetadataDelta:
    """Records replayed on top of ``image``; :meth:`apply` gives the next image."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.features_delta: FeaturesDelta | None = None
        self.cluster_delta: ClusterDelta | None = None
        self.topics_delta: TopicsDelta | None = None
        self.configs_delta: ConfigurationsDelta | None = None
        self.client_quotas_delta: ClientQuotasDelta | None = None
        self.producer_ids_delta: ProducerIdsDelta | None = None
        self.acls_delta: AclsDelta | None = None
        self.scram_delta: ScramDelta | None = None
        self.delegation_tokens_delta: DelegationTokenDelta | None = None

    # -- lazily created area deltas
    def features(self) -> FeaturesDelta:
        if self.features_delta is None:
            self.features_delta = FeaturesDelta(self.image.features)
        return self.features_delta

    def cluster(self) -> ClusterDelta:
        if self.cluster_delta is None:
            self.cluster_delta = ClusterDelta(self.image.cluster)
        return self.cluster_delta

    def topics(self) -> TopicsDelta:
        if self.topics_delta is None:
            self.topics_delta = TopicsDelta(self.image.topics)
        return self.topics_delta

    def configs(self) -> ConfigurationsDelta:
        if self.configs_delta is None:
            self.configs_delta = ConfigurationsDelta(self.image.configs)
        return self.configs_delta

    def client_quotas(self) -> ClientQuotasDelta:
        if self.client_quotas_delta is None:
            self.client_quotas_delta = ClientQuotasDelta(self.image.client_quotas)
        return self.client_quotas_delta

    def producer_ids(self) -> ProducerIdsDelta:
        if self.producer_ids_delta is None:
            self.producer_ids_delta = ProducerIdsDelta(self.image.producer_ids)
        return self.producer_ids_delta

    def acls(self) -> AclsDelta:
        if self.acls_delta is None:
            self.acls_delta = AclsDelta(self.image.acls)
        return self.acls_delta

    def scram(self) -> ScramDelta:
        if self.scram_delta is None:
            self.scram_delta = ScramDelta(self.image.scram)
        return self.scram_delta

    def delegation_tokens(self) -> DelegationTokenDelta:
        if self.delegation_tokens_delta is None:
            self.delegation_tokens_delta = DelegationTokenDelta(self.image.delegation_tokens)
        return self.delegation_tokens_delta

    # -- replay
    def replay(self, record: MetadataRecord) -> None:
        """Replay one record (raises :class:`MetadataReplayError` if it contradicts the image)."""
        handler = _REPLAY.get(type(record))
        if handler is None:
            raise MetadataReplayError(f"unknown metadata record {record!r}")
        handler(self, record)

    def _remove_topic(self, r: RemoveTopicRecord) -> None:
        name = self.topics().replay(r)
        assert name is not None
        self.configs().remove_topic(name)

    def finish_snapshot(self) -> None:
        """After replaying a whole snapshot: whatever the image has and the snapshot did not
        mention is removed."""
        self.features().finish_snapshot()
        self.cluster().finish_snapshot()
        self.topics().finish_snapshot()
        self.configs().finish_snapshot()
        self.client_quotas().finish_snapshot()
        self.producer_ids().finish_snapshot()
        self.acls().finish_snapshot()
        self.scram().finish_snapshot()
        self.delegation_tokens().finish_snapshot()

    def apply(self, provenance: MetadataProvenance | None = None) -> MetadataImage:
        i = self.image
        quotas = self.client_quotas_delta
        pids = self.producer_ids_delta
        tokens = self.delegation_tokens_delta
        return MetadataImage(
            provenance=i.provenance if provenance is None else provenance,
            features=i.features if self.features_delta is None else self.features_delta.apply(),
            cluster=i.cluster if self.cluster_delta is None else self.cluster_delta.apply(),
            topics=i.topics if self.topics_delta is None else self.topics_delta.apply(),
            configs=i.configs if self.configs_delta is None else self.configs_delta.apply(),
            client_quotas=i.client_quotas if quotas is None else quotas.apply(),
            producer_ids=i.producer_ids if pids is None else pids.apply(),
            acls=i.acls if self.acls_delta is None else self.acls_delta.apply(),
            scram=i.scram if self.scram_delta is None else self.scram_delta.apply(),
            delegation_tokens=i.delegation_tokens if tokens is None else tokens.apply(),
        )

    # -- what changed
    @property
    def created_topic_ids(self) -> set[uuid.UUID]:
        return set() if self.topics_delta is None else set(self.topics_delta.created_topic_ids)

    @property
    def deleted_topic_ids(self) -> set[uuid.UUID]:
        return set() if self.topics_delta is None else set(self.topics_delta.deleted_topic_ids)

    def changed_partitions(self) -> dict[TopicPartition, PartitionRegistration]:
        return {} if self.topics_delta is None else self.topics_delta.changed_partitions()

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        if self.topics_delta is None:
            return LocalReplicaChanges()
        return self.topics_delta.local_changes(broker_id)


def _nothing(delta: MetadataDelta, record: Any) -> None:
    pass


_REPLAY: dict[type, Callable[[MetadataDelta, Any], object]] = {
    RegisterBrokerRecord: lambda d, r: d.cluster().replay(r),
    RegisterControllerRecord: lambda d, r: d.cluster().replay(r),
    DelegationTokenRecord: lambda d, r: d.delegation_tokens().replay(r),
    RemoveDelegationTokenRecord: lambda d, r: d.delegation_tokens().replay(r),
    ZkMigrationStateRecord: _nothing,
    UnregisterBrokerRecord: lambda d, r: d.cluster().replay(r),
    FenceBrokerRecord: lambda d, r: d.cluster().replay(r),
    UnfenceBrokerRecord: lambda d, r: d.cluster().replay(r),
    BrokerRegistrationChangeRecord: lambda d, r: d.cluster().replay(r),
    TopicRecord: lambda d, r: d.topics().replay(r),
    PartitionRecord: lambda d, r: d.topics().replay(r),
    PartitionChangeRecord: lambda d, r: d.topics().replay(r),
    ClearElrRecord: lambda d, r: d.topics().replay(r),
    RemoveTopicRecord: MetadataDelta._remove_topic,
    ConfigRecord: lambda d, r: d.configs().replay(r),
    FeatureLevelRecord: lambda d, r: d.features().replay(r),
    ClientQuotaRecord: lambda d, r: d.client_quotas().replay(r),
    ProducerIdsRecord: lambda d, r: d.producer_ids().replay(r),
    AccessControlEntryRecord: lambda d, r: d.acls().replay(r),
    RemoveAccessControlEntryRecord: lambda d, r: d.acls().replay(r),
    UserScramCredentialRecord: lambda d, r: d.scram().replay(r),
    RemoveUserScramCredentialRecord: lambda d, r: d.scram().replay(r),
    NoOpRecord: _nothing,
    BeginTransactionRecord: _nothing,
    EndTransactionRecord: _nothing,
    AbortTransactionRecord: _nothing,
}
