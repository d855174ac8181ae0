"""Migration of a single-node data dir (JSON registries) into metadata records.

Before the metadata log, a strom node kept its cluster metadata in JSON documents in its log dir:
the topic registry (``strom-topics.json``: name, topic id, partition count, config overrides),
dynamic broker configs (``strom-dynamic-configs.json``: cluster default and per-broker), group
configs (``strom-group-configs.json``) and the producer-id block reservation
(``strom-producer-ids.json``). :func:`records_for_data_dir` reads them and
:func:`records_for_existing_topics` turns them into the records that describe the same state in
``__cluster_metadata``, to be appended once (after the bootstrap records) on the first start of
the node on the metadata log:

* each topic keeps its **topic id** (partition logs, fetch sessions and clients know it): a
  TopicRecord, then one PartitionRecord per partition with the node as the only replica, in-sync
  and leader, leader epoch 0 and partition epoch 0 (a single-node strom never bumped them);
* each topic override is a ConfigRecord on (TOPIC, name); dynamic broker configs are ConfigRecords
  on (BROKER, "") for the cluster default and (BROKER, "<id>") per broker; group overrides on
  (GROUP, name);
* the next producer-id block becomes a ProducerIdsRecord, so no producer id handed out before the
  migration is handed out again;
* each SCRAM credential of the local store (``strom-scram-credentials.json``, written by
  ``security/credentials.py``) becomes a UserScramCredentialRecord (:func:`scram_records`): the
  same salt, keys and iterations, so every login still works after the upgrade.

The file names and document shapes are those written by ``metadata/topics.py``,
``metadata/configs.py``, ``metadata/group_configs.py`` and ``server/producer_id_manager.py``;
they are read here as plain JSON (importing those modules would pull the broker in). A missing
file is an empty registry. Error contract: a document that is not valid JSON of the expected shape raises
:class:`MigrationError` naming the file.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .image import CONFIG_RESOURCE_BROKER, CONFIG_RESOURCE_GROUP, CONFIG_RESOURCE_TOPIC
from .records import (
    ConfigRecord,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    TopicRecord,
    UserScramCredentialRecord,
)

TOPICS_FILE = "strom-topics.json"
DYNAMIC_CONFIG_FILE = "strom-dynamic-configs.json"
GROUP_CONFIG_FILE = "strom-group-configs.json"
PRODUCER_IDS_FILE = "strom-producer-ids.json"
SCRAM_CREDENTIALS_FILE = "strom-scram-credentials.json"
# Kafka's ScramMechanism ids, by the names the credential store uses
_SCRAM_MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


class MigrationError(Exception):
    """A registry document in the data dir cannot be read."""


@dataclass(frozen=True)
class ExistingTopic:
    """A topic as the JSON registry knows it (the fields of ``metadata.topics.TopicInfo``)."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExistingState:
    """Everything a single-node data dir holds outside its partition logs."""

    topics: tuple[ExistingTopic, ...] = ()
    broker_default_configs: Mapping[str, str] = field(default_factory=dict)
    broker_configs: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    group_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    next_producer_id: int = -1  # the first id of the next block (-1: none reserved yet)


def records_for_existing_topics(
    topics: Iterable[Any],
    *,
    node_id: int,
    broker_default_configs: Mapping[str, str] | None = None,
    broker_configs: Mapping[int, Mapping[str, str]] | None = None,
    group_configs: Mapping[str, Mapping[str, str]] | None = None,
    next_producer_id: int = -1,
    metadata_version: int | None = None,
    directory_id: uuid.UUID | None = None,
) -> list[MetadataRecord]:
    """The records describing a single node's topics (objects with ``name``, ``topic_id``,
    ``partitions``, ``configs``: ``TopicInfo`` or :class:`ExistingTopic`) and its configs.

    ``metadata_version``: also start with its FeatureLevelRecord (when the records are not
    appended after bootstrap records that have one). ``directory_id``: the node's log directory
    id, recorded as each replica's directory.
    """
    out: list[MetadataRecord] = []
    if metadata_version is not None:
        out.append(FeatureLevelRecord(name="metadata.version", feature_level=metadata_version))
    dirs = () if directory_id is None else (directory_id,)
    for t in sorted(topics, key=lambda t: t.name):
        out.append(TopicRecord(name=t.name, topic_id=t.topic_id))
        for p in range(t.partitions):
            out.append(
                PartitionRecord(
                    partition_id=p,
                    topic_id=t.topic_id,
                    replicas=(node_id,),
                    isr=(node_id,),
                    leader=node_id,
                    leader_epoch=0,
                    partition_epoch=0,
                    directories=dirs,
                )
            )
        out.extend(_configs(CONFIG_RESOURCE_TOPIC, t.name, t.configs))
    out.extend(_configs(CONFIG_RESOURCE_BROKER, "", broker_default_configs or {}))
    for broker_id, configs in sorted((broker_configs or {}).items()):
        out.extend(_configs(CONFIG_RESOURCE_BROKER, str(broker_id), configs))
    for group, configs in sorted((group_configs or {}).items()):
        out.extend(_configs(CONFIG_RESOURCE_GROUP, group, configs))
    if next_producer_id >= 0:
        out.append(ProducerIdsRecord(broker_id=node_id, broker_epoch=-1, next_producer_id=next_producer_id))
    return out


def _configs(resource_type: int, name: str, configs: Mapping[str, str]) -> list[MetadataRecord]:
    return [
        ConfigRecord(resource_type=resource_type, resource_name=name, name=k, value=configs[k])
        for k in sorted(configs)
        if configs[k] is not None
    ]


def read_existing_state(log_dir: Path) -> ExistingState:
    """Read the JSON registries of a single-node data dir (missing files are empty)."""
    topics_doc = _load(log_dir / TOPICS_FILE)
    dyn_doc = _load(log_dir / DYNAMIC_CONFIG_FILE)
    groups_doc = _load(log_dir / GROUP_CONFIG_FILE)
    pids_doc = _load(log_dir / PRODUCER_IDS_FILE)
    try:
        topics = tuple(
            ExistingTopic(
                name=str(t["name"]),
                topic_id=uuid.UUID(str(t["id"])),
                partitions=int(t["partitions"]),
                configs=_strings(t.get("configs", {})),
            )
            for t in topics_doc.get("topics", [])
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise MigrationError(f"{log_dir / TOPICS_FILE}: not a topic registry ({e!r})") from e
    try:
        default = _strings(dyn_doc.get("default", {}))
        per_broker = {int(b): _strings(c) for b, c in dyn_doc.get("brokers", {}).items()}
    except (TypeError, ValueError, AttributeError) as e:
        raise MigrationError(f"{log_dir / DYNAMIC_CONFIG_FILE}: not a dynamic config document ({e!r})") from e
    try:
        groups = {str(g): _strings(c) for g, c in groups_doc.get("groups", {}).items()}
    except (TypeError, ValueError, AttributeError) as e:
        raise MigrationError(f"{log_dir / GROUP_CONFIG_FILE}: not a group config document ({e!r})") from e
    try:
        next_pid = int(pids_doc["next_block"]) if pids_doc else -1
    except (KeyError, TypeError, ValueError) as e:
        raise MigrationError(f"{log_dir / PRODUCER_IDS_FILE}: not a producer-id reservation ({e!r})") from e
    return ExistingState(topics, default, {b: c for b, c in per_broker.items() if c}, groups, next_pid)


def records_for_data_dir(
    log_dir: Path, *, node_id: int, metadata_version: int | None = None, directory_id: uuid.UUID | None = None
) -> list[MetadataRecord]:
    """:func:`records_for_existing_topics` over what :func:`read_existing_state` finds."""
    s = read_existing_state(log_dir)
    records = records_for_existing_topics(
        s.topics,
        node_id=node_id,
        broker_default_configs=s.broker_default_configs,
        broker_configs=s.broker_configs,
        group_configs=s.group_configs,
        next_producer_id=s.next_producer_id,
        metadata_version=metadata_version,
        directory_id=directory_id,
    )
    return records + scram_records(log_dir)  # (SCRAM credentials: read from their own store)


def scram_records(log_dir: Path) -> list[MetadataRecord]:
    """The UserScramCredentialRecords of the data dir's SCRAM credential store (by user, then
    mechanism; credentials of mechanisms strom does not know are skipped, as the store does)."""
    path = log_dir / SCRAM_CREDENTIALS_FILE
    doc = _load(path)
    out: list[MetadataRecord] = []
    try:
        for user, mechs in sorted(doc.get("users", {}).items()):
            for mech, c in sorted(mechs.items()):
                if mech not in _SCRAM_MECHANISM_IDS:
                    continue
                iterations = c["iterations"]
                if not isinstance(iterations, int):
                    raise TypeError("iterations is not an integer")
                out.append(
                    UserScramCredentialRecord(
                        name=str(user),
                        mechanism=_SCRAM_MECHANISM_IDS[mech],
                        salt=base64.b64decode(str(c["salt"]), validate=True),
                        stored_key=base64.b64decode(str(c["stored_key"]), validate=True),
                        server_key=base64.b64decode(str(c["server_key"]), validate=True),
                        iterations=iterations,
                    )
                )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise MigrationError(f"{path}: not a SCRAM credential store ({e!r})") from e
    return out


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MigrationError(f"{path}: cannot be read as JSON ({e})") from e
    if not isinstance(doc, dict):
        raise MigrationError(f"{path}: not a JSON object")
    return doc


def _strings(d: Any) -> dict[str, str]:
    if not isinstance(d, dict):
        raise TypeError(f"expected an object, got {type(d).__name__}")
    return {str(k): str(v) for k, v in d.items() if v is not None}
