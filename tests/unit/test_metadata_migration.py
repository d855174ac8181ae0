"""Migration of a single-node data dir's JSON registries into metadata records (topic ids kept)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from strom.metadata import configs as cfg
from strom.metadata import group_configs
from strom.metadata import records as r
from strom.metadata.delta import MetadataDelta
from strom.metadata.image import EMPTY_IMAGE, MetadataImage
from strom.metadata.migration import (
    DYNAMIC_CONFIG_FILE,
    GROUP_CONFIG_FILE,
    PRODUCER_IDS_FILE,
    TOPICS_FILE,
    MigrationError,
    read_existing_state,
    records_for_data_dir,
    records_for_existing_topics,
)
from strom.metadata.topics import TopicRegistry
from strom.server.producer_id_manager import LocalProducerIdManager


def replay(recs: list[r.MetadataRecord]) -> MetadataImage:
    d = MetadataDelta(EMPTY_IMAGE)
    for rec in recs:
        d.replay(rec)
    return d.apply()


def test_file_names_are_the_ones_the_registries_write() -> None:
    assert TopicRegistry.FILE == TOPICS_FILE
    assert cfg.DYNAMIC_CONFIG_FILE == DYNAMIC_CONFIG_FILE
    assert group_configs.GROUP_CONFIG_FILE == GROUP_CONFIG_FILE


def test_a_data_dir_written_by_the_registries_migrates_with_its_ids(tmp_path: Path) -> None:
    reg = TopicRegistry(tmp_path)
    a = reg.create("orders", 3, {"cleanup.policy": "compact"})
    b = reg.create("__consumer_offsets", 2)
    reg.create("gone", 1)
    reg.delete("gone")
    dyn = cfg.DynamicBrokerConfigs(
        tmp_path / cfg.DYNAMIC_CONFIG_FILE, 1, {"log.retention.ms": "5"}, {"x": "1"}
    )
    dyn.save()
    group_configs.GroupConfigStore(tmp_path / GROUP_CONFIG_FILE).set(
        "g1", {"consumer.session.timeout.ms": "50000"}
    )
    pids = LocalProducerIdManager(tmp_path / PRODUCER_IDS_FILE)
    used = [pids.allocate() for _ in range(3)]

    recs = records_for_data_dir(tmp_path, node_id=1, metadata_version=25, directory_id=uuid.UUID(int=9))
    assert recs[0] == r.FeatureLevelRecord(name="metadata.version", feature_level=25)
    # every record encodes and decodes (what the integrator appends to the metadata log)
    assert [rec for _, rec in r.iter_batch_records(r.build_records_batch(recs))] == recs

    img = replay(recs)
    orders = img.topics.get_topic("orders")
    assert orders is not None and orders.id == a.topic_id and sorted(orders.partitions) == [0, 1, 2]
    p = orders.partitions[2]
    assert (p.replicas, p.isr, p.leader, p.leader_epoch, p.directories) == (
        (1,),
        (1,),
        1,
        0,
        (uuid.UUID(int=9),),
    )
    offsets = img.topics.get_topic("__consumer_offsets")
    assert offsets is not None and offsets.id == b.topic_id
    assert img.topics.get_topic("gone") is None
    assert img.configs.configs(2, "orders") == {"cleanup.policy": "compact"}
    assert img.configs.configs(4, "") == {"log.retention.ms": "5"}
    assert img.configs.configs(4, "1") == {"x": "1"}
    assert img.configs.configs(32, "g1") == {"consumer.session.timeout.ms": "50000"}
    assert img.producer_ids.next_producer_id > max(used)


def test_an_empty_data_dir_has_nothing_to_migrate(tmp_path: Path) -> None:
    assert records_for_data_dir(tmp_path, node_id=0) == []
    assert read_existing_state(tmp_path).next_producer_id == -1


def test_records_for_existing_topics_directly() -> None:
    class Info:
        def __init__(self, name: str, n: int) -> None:
            self.name, self.topic_id, self.partitions, self.configs = name, uuid.uuid4(), n, {}

    infos = [Info("b", 1), Info("a", 2)]
    recs = records_for_existing_topics(infos, node_id=7)
    assert [type(x).__name__ for x in recs] == [
        "TopicRecord",
        "PartitionRecord",
        "PartitionRecord",
        "TopicRecord",
        "PartitionRecord",
    ]
    img = replay(recs)
    assert {t.name: t.id for t in img.topics.topics_by_id.values()} == {i.name: i.topic_id for i in infos}
    assert img.to_records() == recs  # already in snapshot order


@pytest.mark.parametrize(
    "name, content",
    [
        (TOPICS_FILE, "{not json"),
        (TOPICS_FILE, json.dumps({"topics": [{"name": "a", "id": "nope", "partitions": 1}]})),
        (TOPICS_FILE, json.dumps([1, 2])),
        (DYNAMIC_CONFIG_FILE, json.dumps({"brokers": {"x": {}}})),
        (GROUP_CONFIG_FILE, json.dumps({"groups": {"g": 5}})),
        (PRODUCER_IDS_FILE, json.dumps({"next": 1})),
    ],
)
def test_unreadable_documents_raise_migration_error(tmp_path: Path, name: str, content: str) -> None:
    (tmp_path / name).write_text(content)
    with pytest.raises(MigrationError, match=name):
        records_for_data_dir(tmp_path, node_id=1)


def test_the_scram_credential_store_migrates_to_records_and_logins_still_work(tmp_path: Path) -> None:
    from strom.metadata.migration import SCRAM_CREDENTIALS_FILE
    from strom.security import credentials as sc

    assert sc.FILE_NAME == SCRAM_CREDENTIALS_FILE
    store = sc.CredentialStore(tmp_path)
    alice = sc.ScramCredential.from_password("SCRAM-SHA-256", "alice-secret", 4096)
    bob = sc.ScramCredential.from_password("SCRAM-SHA-512", "bob-secret", 8192)
    store.apply([("alice", "SCRAM-SHA-256", alice), ("bob", "SCRAM-SHA-512", bob)])

    recs = records_for_data_dir(tmp_path, node_id=1)
    scram = [x for x in recs if isinstance(x, r.UserScramCredentialRecord)]
    assert [(x.name, x.mechanism, x.iterations) for x in scram] == [("alice", 1, 4096), ("bob", 2, 8192)]
    # the image the brokers authenticate from holds the very same credentials
    migrated = sc.ImageCredentials(replay(recs).scram)
    assert migrated.get("alice", "SCRAM-SHA-256") == alice
    assert migrated.get("bob", "SCRAM-SHA-512") == bob
    assert migrated.get("alice", "SCRAM-SHA-512") is None
    assert migrated.users() == store.users()


def test_a_corrupt_scram_store_is_a_migration_error(tmp_path: Path) -> None:
    from strom.metadata.migration import SCRAM_CREDENTIALS_FILE

    (tmp_path / SCRAM_CREDENTIALS_FILE).write_text(json.dumps({"users": {"u": {"SCRAM-SHA-256": {}}}}))
    with pytest.raises(MigrationError, match=SCRAM_CREDENTIALS_FILE):
        records_for_data_dir(tmp_path, node_id=1)
