"""MetadataDelta / MetadataImage / MetadataLoader: Kafka's replay rules, what a delta reports, and
the loader's publishing (transactions, catch-up, snapshots, late publishers, failing publishers)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from strom.metadata import records as r
from strom.metadata.delta import MetadataDelta
from strom.metadata.image import (
    EMPTY_IMAGE,
    ConfigResource,
    MetadataImage,
    MetadataReplayError,
    TopicPartition,
)
from strom.metadata.loader import LogDeltaManifest, MetadataLoader, SnapshotManifest
from strom.protocol.records import build_control_batch

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def replay(image: MetadataImage, *recs: r.MetadataRecord) -> tuple[MetadataDelta, MetadataImage]:
    d = MetadataDelta(image)
    for rec in recs:
        d.replay(rec)
    return d, d.apply()


def topic(
    tid: uuid.UUID, name: str, *parts: tuple[int, ...], leader_first: bool = True
) -> list[r.MetadataRecord]:
    out: list[r.MetadataRecord] = [r.TopicRecord(name=name, topic_id=tid)]
    for i, reps in enumerate(parts):
        out.append(
            r.PartitionRecord(
                partition_id=i,
                topic_id=tid,
                replicas=reps,
                isr=reps,
                leader=reps[0],
                leader_epoch=0,
                partition_epoch=0,
            )
        )
    return out


def broker(bid: int, epoch: int) -> r.RegisterBrokerRecord:
    return r.RegisterBrokerRecord(broker_id=bid, broker_epoch=epoch, incarnation_id=uuid.UUID(int=100 + bid))


def test_partition_change_bumps_epochs_like_kafka() -> None:
    _, img = replay(EMPTY_IMAGE, *topic(T1, "a", (1, 2, 3)))
    _, img2 = replay(img, r.PartitionChangeRecord(partition_id=0, topic_id=T1, isr=(1, 2)))
    p = img2.topics.get_partition(T1, 0)
    assert p is not None
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.isr) == (1, 0, 1, (1, 2))
    _, img3 = replay(
        img2, r.PartitionChangeRecord(partition_id=0, topic_id=T1, leader=2, leader_recovery_state=1)
    )
    p3 = img3.topics.get_partition(T1, 0)
    assert p3 is not None
    assert (p3.leader, p3.leader_epoch, p3.partition_epoch, p3.leader_recovery_state) == (2, 1, 2, 1)
    assert p3.replicas == (1, 2, 3) and p3.isr == (1, 2)
    with pytest.raises(MetadataReplayError):
        replay(img, r.PartitionChangeRecord(partition_id=5, topic_id=T1))
    with pytest.raises(MetadataReplayError):
        replay(img, r.PartitionRecord(partition_id=0, topic_id=T2))


def test_untouched_parts_are_shared_and_maps_are_read_only() -> None:
    _, img = replay(EMPTY_IMAGE, broker(1, 10), *topic(T1, "a", (1,)), *topic(T2, "b", (1,)))
    _, img2 = replay(img, r.PartitionChangeRecord(partition_id=0, topic_id=T1, isr=(1,)))
    assert img2.cluster is img.cluster
    assert img2.configs is img.configs
    assert img2.topics.topics_by_id[T2] is img.topics.topics_by_id[T2]
    assert img2.topics.topics_by_name["b"] is img.topics.topics_by_name["b"]
    assert img2.topics.topics_by_id[T1] is not img.topics.topics_by_id[T1]
    with pytest.raises(TypeError):
        img2.topics.topics_by_id[T1] = img.topics.topics_by_id[T1]  # type: ignore[index]


def test_remove_topic_drops_its_configs_and_reports_deletes() -> None:
    _, img = replay(
        EMPTY_IMAGE,
        *topic(T1, "a", (1, 2), (2, 3)),
        r.ConfigRecord(resource_type=2, resource_name="a", name="retention.ms", value="1"),
        r.ConfigRecord(resource_type=4, resource_name="", name="x", value="y"),
    )
    d, img2 = replay(img, r.RemoveTopicRecord(topic_id=T1), *topic(T2, "a", (3,)))
    assert img2.topics.get_topic("a") is not None and img2.topics.get_topic("a").id == T2  # type: ignore[union-attr]
    assert T1 not in img2.topics.topics_by_id
    assert img2.configs.configs(2, "a") == {}
    assert img2.configs.resource_data[ConfigResource(4, "")] == {"x": "y"}
    assert d.deleted_topic_ids == {T1} and d.created_topic_ids == {T2}
    assert d.topics_delta is not None and d.topics_delta.topic_was_deleted("a")
    assert d.local_changes(2).deletes == {TopicPartition("a", 0), TopicPartition("a", 1)}
    assert set(d.local_changes(3).leaders) == {TopicPartition("a", 0)}  # the new topic's partition
    # created and deleted in one delta: no trace
    d2, img3 = replay(img2, *topic(T1, "z", (1,)), r.RemoveTopicRecord(topic_id=T1))
    assert d2.created_topic_ids == set() and d2.deleted_topic_ids == set()
    assert img3.topics == img2.topics
    with pytest.raises(MetadataReplayError):
        replay(img3, r.RemoveTopicRecord(topic_id=T1))


def test_local_changes_leader_follower_elected() -> None:
    _, img = replay(EMPTY_IMAGE, *topic(T1, "a", (1, 2), (2, 1), (3, 4)))
    d, _ = replay(
        img,
        r.PartitionChangeRecord(partition_id=0, topic_id=T1, isr=(1,)),  # 1 still leads: epoch bump only
        r.PartitionChangeRecord(partition_id=1, topic_id=T1, leader=1),  # 1 elected
        r.PartitionChangeRecord(
            partition_id=2, topic_id=T1, replicas=(3, 1), isr=(3,)
        ),  # 1 becomes a follower
    )
    ch = d.local_changes(1)
    assert set(ch.leaders) == {TopicPartition("a", 0), TopicPartition("a", 1)}
    assert set(ch.elected_leaders) == {TopicPartition("a", 1)}
    assert set(ch.followers) == {TopicPartition("a", 2)}
    assert ch.topic_ids == {"a": T1} and not ch.deletes
    ch2 = d.local_changes(2)
    assert set(ch2.followers) == {TopicPartition("a", 0), TopicPartition("a", 1)}
    assert d.local_changes(4).deletes == {TopicPartition("a", 2)}
    assert set(d.changed_partitions()) == {TopicPartition("a", p) for p in range(3)}


def test_broker_fencing_needs_the_current_epoch() -> None:
    _, img = replay(EMPTY_IMAGE, broker(1, 10))
    b = img.cluster.broker(1)
    assert b is not None and b.fenced
    _, img2 = replay(img, r.UnfenceBrokerRecord(id=1, epoch=10))
    assert img2.cluster.brokers[1].fenced is False
    with pytest.raises(MetadataReplayError, match="epoch"):
        replay(img2, r.FenceBrokerRecord(id=1, epoch=9))
    with pytest.raises(MetadataReplayError, match="not registered"):
        replay(img2, r.FenceBrokerRecord(id=2, epoch=9))
    _, img3 = replay(
        img2, r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, in_controlled_shutdown=1)
    )
    assert img3.cluster.brokers[1].in_controlled_shutdown and not img3.cluster.brokers[1].fenced
    _, img4 = replay(img3, r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=1))
    assert img4.cluster.brokers[1].fenced
    with pytest.raises(MetadataReplayError, match="fencing"):
        replay(img3, r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=2))
    _, img5 = replay(img4, r.UnregisterBrokerRecord(broker_id=1, broker_epoch=10))
    assert img5.cluster.brokers == {}


def test_features_quotas_acls_scram_producer_ids() -> None:
    acl = r.AccessControlEntryRecord(id=T1, resource_type=2, resource_name="a", principal="User:x", host="*")
    quota = r.ClientQuotaRecord(
        entity=(r.EntityData(entity_type="user", entity_name=None),), key="k", value=5.0
    )
    _, img = replay(
        EMPTY_IMAGE,
        r.FeatureLevelRecord(name="metadata.version", feature_level=25),
        r.FeatureLevelRecord(name="group.version", feature_level=1),
        acl,
        quota,
        r.UserScramCredentialRecord(name="u", mechanism=1, salt=b"s", iterations=4096),
        r.ProducerIdsRecord(broker_id=1, broker_epoch=1, next_producer_id=1000),
    )
    assert img.features.metadata_version == 25 and img.features.finalized_versions == {"group.version": 1}
    assert img.acls.acls == {T1: acl}
    assert img.client_quotas.entities == {(("user", None),): {"k": 5.0}}
    assert img.producer_ids.next_producer_id == 1000
    assert len(img.scram.credentials) == 1
    _, img2 = replay(
        img,
        r.FeatureLevelRecord(name="group.version", feature_level=0),
        r.RemoveAccessControlEntryRecord(id=T1),
        r.ClientQuotaRecord(entity=quota.entity, key="k", remove=True),
        r.RemoveUserScramCredentialRecord(name="u", mechanism=1),
    )
    assert img2.features.finalized_versions == {} and img2.features.metadata_version == 25
    assert img2.acls.acls == {} and img2.client_quotas.entities == {} and img2.scram.credentials == {}
    with pytest.raises(MetadataReplayError):
        replay(img2, r.RemoveAccessControlEntryRecord(id=T1))
    # added and removed in one delta
    _, img3 = replay(img2, acl, r.RemoveAccessControlEntryRecord(id=T1))
    assert img3.acls.acls == {}


def test_to_records_starts_with_metadata_version() -> None:
    _, img = replay(
        EMPTY_IMAGE, broker(1, 1), r.FeatureLevelRecord(name="metadata.version", feature_level=25)
    )
    recs = img.to_records()
    assert recs[0] == r.FeatureLevelRecord(name="metadata.version", feature_level=25)
    assert replay(EMPTY_IMAGE, *recs)[1] == img


# --------------------------------------------------------------------------- loader


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[MetadataDelta, MetadataImage, Any]] = []
        self.closed = False

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage, manifest: Any) -> None:
        self.calls.append((delta, image, manifest))

    def close(self) -> None:
        self.closed = True


def batch(offset: int, *recs: r.MetadataRecord, epoch: int = 1) -> bytes:
    return r.build_records_batch(recs, base_offset=offset, leader_epoch=epoch, timestamp_ms=77)


def test_loader_publishes_each_commit_with_a_log_manifest() -> None:
    loader = MetadataLoader()
    pub = Recorder()
    loader.install_publishers([pub])
    loader.handle_leader_change(1, 4)
    loader.handle_commit([batch(0, *topic(T1, "a", (1,))), batch(2, r.NoOpRecord())])
    assert len(pub.calls) == 1
    delta, image, manifest = pub.calls[0]
    assert isinstance(manifest, LogDeltaManifest)
    assert manifest.num_batches == 2 and manifest.leader_and_epoch.leader_id == 1
    assert (
        manifest.provenance.last_contained_offset == 2
        and manifest.provenance.last_contained_log_time_ms == 77
    )
    assert image is loader.image and image.offset == 2 and image.epoch == 1
    assert delta.created_topic_ids == {T1}
    # a control batch alone moves the offset but publishes nothing
    control = bytearray(build_control_batch(1, 0, True, 0, 5))
    control[0:8] = (3).to_bytes(8, "big")
    loader.handle_commit(bytes(control))
    assert len(pub.calls) == 1 and loader.last_offset == 3
    loader.handle_commit(batch(4, r.NoOpRecord()))
    assert len(pub.calls) == 2 and loader.image.offset == 4
    loader.close()
    assert pub.closed


def test_loader_skips_control_batches() -> None:
    loader = MetadataLoader()
    control = bytearray(build_control_batch(1, 0, True, 0, 5))
    control[0:8] = (1).to_bytes(8, "big")
    loader.handle_commit(batch(0, r.TopicRecord(name="a", topic_id=T1)) + bytes(control))
    assert loader.last_offset == 1
    assert loader.image.offset == 1 and loader.image.topics.get_topic("a") is not None


def test_loader_transactions_publish_whole_or_not_at_all() -> None:
    loader = MetadataLoader()
    pub = Recorder()
    loader.install_publishers([pub])
    loader.handle_commit(
        batch(0, r.TopicRecord(name="a", topic_id=T1), r.BeginTransactionRecord(name="t"))
        + batch(2, r.TopicRecord(name="b", topic_id=T2))
    )
    # what preceded the transaction was published; the open transaction was not
    assert len(pub.calls) == 1 and pub.calls[0][1].offset == 0
    assert loader.image.topics.get_topic("b") is None
    loader.handle_commit(batch(3, r.EndTransactionRecord()))
    assert len(pub.calls) == 2 and loader.image.topics.get_topic("b") is not None
    assert loader.image.offset == 3
    loader.handle_commit(
        batch(4, r.BeginTransactionRecord(), r.RemoveTopicRecord(topic_id=T1), r.AbortTransactionRecord())
    )
    assert loader.image.topics.get_topic("a") is not None and loader.image.offset == 6
    with pytest.raises(MetadataReplayError, match="outside a transaction"):
        loader.handle_commit(batch(7, r.EndTransactionRecord()))


def test_loader_waits_for_the_high_watermark_then_initializes_publishers() -> None:
    loader = MetadataLoader(high_watermark=3)
    pub = Recorder()
    loader.install_publishers([pub])
    loader.handle_commit(batch(0, *topic(T1, "a", (1,))))
    assert pub.calls == [] and loader.catching_up
    loader.handle_commit(batch(2, r.NoOpRecord()))
    assert not loader.catching_up
    assert len(pub.calls) == 1
    delta, image, manifest = pub.calls[0]
    assert isinstance(manifest, SnapshotManifest)  # first call: the whole image
    assert delta.created_topic_ids == {T1} and image.offset == 2


def test_late_publisher_gets_the_whole_image_and_failing_publishers_do_not_stop_others() -> None:
    loader = MetadataLoader()

    class Boom:
        def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage, manifest: Any) -> None:
            raise RuntimeError("boom")

    early = Recorder()
    loader.install_publishers([Boom(), early])
    loader.handle_commit(batch(0, *topic(T1, "a", (1,))))
    late = Recorder()
    loader.install_publishers([late])
    assert len(late.calls) == 1 and isinstance(late.calls[0][2], SnapshotManifest)
    assert late.calls[0][1] is loader.image and late.calls[0][0].created_topic_ids == {T1}
    loader.handle_commit(batch(2, r.RemoveTopicRecord(topic_id=T1)))
    assert len(early.calls) == 2 and len(late.calls) == 2
    assert late.calls[1][0].deleted_topic_ids == {T1}
    with pytest.raises(ValueError):
        loader.install_publishers([late])
    loader.remove_publisher(late)
    assert late.closed


def test_loader_snapshot_replaces_the_image() -> None:
    loader = MetadataLoader()
    pub = Recorder()
    loader.install_publishers([pub])
    loader.handle_commit(batch(0, *topic(T1, "a", (1,)), r.BeginTransactionRecord()))
    _, target = replay(EMPTY_IMAGE, *topic(T2, "b", (2,)), broker(2, 5))
    loader.handle_load_snapshot(100, 7, r.build_records_batch(target.to_records()), timestamp_ms=9)
    delta, image, manifest = pub.calls[-1]
    assert isinstance(manifest, SnapshotManifest) and manifest.provenance.last_contained_offset == 99
    assert image.same_content(target) and image.epoch == 7
    assert delta.deleted_topic_ids == {T1} and delta.created_topic_ids == {T2}
    # the transaction that was open before the snapshot is gone with the log it came from
    loader.handle_commit(batch(100, r.TopicRecord(name="c", topic_id=uuid.UUID(int=3))))
    assert loader.image.topics.get_topic("c") is not None


def test_loader_errors_name_the_offset() -> None:
    loader = MetadataLoader()
    with pytest.raises(MetadataReplayError, match="offset 5"):
        loader.handle_commit(batch(5, r.PartitionChangeRecord(topic_id=T1, partition_id=0)))
    bad = r.build_records_batch([r.NoOpRecord()])[:-1]
    with pytest.raises(r.MetadataParseError):
        MetadataLoader().handle_commit(bad)


def test_clear_elr_clears_partitions_that_have_one() -> None:
    recs = [
        r.TopicRecord(name="a", topic_id=T1),
        r.PartitionRecord(
            partition_id=0,
            topic_id=T1,
            replicas=(1, 2),
            isr=(1,),
            leader=1,
            leader_epoch=0,
            partition_epoch=0,
            eligible_leader_replicas=(2,),
            last_known_elr=(),
        ),
        r.PartitionRecord(
            partition_id=1,
            topic_id=T1,
            replicas=(1, 2),
            isr=(1,),
            leader=1,
            leader_epoch=0,
            partition_epoch=0,
        ),
        *topic(T2, "b", (1,)),
    ]
    _, img = replay(
        EMPTY_IMAGE, *recs, r.PartitionChangeRecord(partition_id=0, topic_id=T2, last_known_elr=(1,))
    )
    d, img2 = replay(img, r.ClearElrRecord(topic_name="a"))
    p0, p1 = img2.topics.get_partition(T1, 0), img2.topics.get_partition(T1, 1)
    assert p0 is not None and p0.elr == () and p0.last_known_elr == () and p0.partition_epoch == 1
    assert p1 is img.topics.get_partition(T1, 1)  # had no ELR: untouched
    assert img2.topics.get_partition(T2, 0) == img.topics.get_partition(T2, 0)
    assert set(d.changed_partitions()) == {TopicPartition("a", 0)}
    _, img3 = replay(img, r.ClearElrRecord(topic_name=""))
    b0 = img3.topics.get_partition(T2, 0)
    assert b0 is not None and b0.last_known_elr == () and b0.partition_epoch == 2
    with pytest.raises(MetadataReplayError):
        replay(img, r.ClearElrRecord(topic_name="nope"))
