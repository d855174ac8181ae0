"""Configs, producer ids, features, bootstrap and snapshots of the QuorumController."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.allocate_producer_ids.v0.request import AllocateProducerIdsRequest
from kio.schema.alter_configs.v2 import request as ac
from kio.schema.describe_configs.v4 import request as dc
from kio.schema.incremental_alter_configs.v1 import request as iac
from kio.static.primitive import i8, i16, i32, i64

from strom.controller import ControllerResult, QuorumController
from strom.controller.config_control import default_validator
from strom.metadata.records import ConfigRecord, FeatureLevelRecord, ProducerIdsRecord
from strom.protocol.errors import ErrorCode
from strom.testing.controller import ControllerHarness


def _incremental(
    h: ControllerHarness,
    rtype: int,
    name: str,
    ops: list[tuple[str, int, str | None]],
    validate_only: bool = False,
) -> dict[str, Any]:
    request = iac.IncrementalAlterConfigsRequest(
        resources=(
            iac.AlterConfigsResource(
                resource_type=i8(rtype),
                resource_name=name,
                configs=tuple(
                    iac.AlterableConfig(name=k, config_operation=i8(op), value=v) for k, op, v in ops
                ),
            ),
        ),
        validate_only=validate_only,
    )
    response: dict[str, Any] = h.commit(h.controller.incremental_alter_configs(request))
    result: dict[str, Any] = response["responses"][0]
    return result


def test_incremental_alter_configs_set_delete_append_subtract() -> None:
    h = ControllerHarness()
    h.start_brokers(1)
    h.create_topic("t", 1, 1)
    assert (
        _incremental(h, 2, "t", [("retention.ms", 0, "1000"), ("cleanup.policy", 2, "compact")])["error_code"]
        == 0
    )
    assert h.controller.configs.get(2, "t") == {"retention.ms": "1000", "cleanup.policy": "compact"}
    _incremental(h, 2, "t", [("cleanup.policy", 2, "delete")])
    assert h.controller.configs.topic_config("t", "cleanup.policy") == "compact,delete"
    _incremental(h, 2, "t", [("cleanup.policy", 3, "compact"), ("retention.ms", 1, None)])
    assert h.controller.configs.get(2, "t") == {"cleanup.policy": "delete"}
    start = h.next_offset
    assert _incremental(h, 2, "t", [("cleanup.policy", 0, "compact")], validate_only=True)["error_code"] == 0
    assert h.next_offset == start
    r = _incremental(h, 2, "nope", [("retention.ms", 0, "1")])
    assert r["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    r = _incremental(h, 2, "t", [("retention.ms", 0, "1"), ("retention.ms", 1, None)])
    assert r["error_code"] == ErrorCode.INVALID_REQUEST
    r = _incremental(h, 4, "x", [("log.retention.ms", 0, "1")])
    assert r["error_code"] == ErrorCode.INVALID_REQUEST
    assert _incremental(h, 4, "", [("log.retention.ms", 0, "5")])["error_code"] == 0
    assert h.controller.configs.cluster_config("log.retention.ms") == "5"


def test_the_default_validator_is_stroms_config_checks() -> None:
    h = ControllerHarness(validator=default_validator)
    h.start_brokers(1)
    h.create_topic("t", 1, 1)
    r = _incremental(h, 2, "t", [("retention.ms", 0, "not a number")])
    assert r["error_code"] == ErrorCode.INVALID_CONFIG
    r = h.create_topic("u", 1, 1, configs={"no.such.config": "1"})
    assert r["error_code"] == ErrorCode.INVALID_CONFIG
    assert h.controller.replication.topic("u") is None


def test_legacy_alter_configs_replaces_the_whole_set() -> None:
    h = ControllerHarness()
    h.start_brokers(1)
    h.create_topic("t", 1, 1, configs={"retention.ms": "1", "segment.ms": "2"})
    request = ac.AlterConfigsRequest(
        resources=(
            ac.AlterConfigsResource(
                resource_type=i8(2),
                resource_name="t",
                configs=(ac.AlterableConfig(name="segment.ms", value="3"),),
            ),
        ),
        validate_only=False,
    )
    result = h.controller.legacy_alter_configs(request)
    assert result.records == [
        ConfigRecord(resource_type=2, resource_name="t", name="retention.ms", value=None),
        ConfigRecord(resource_type=2, resource_name="t", name="segment.ms", value="3"),
    ]
    h.commit(result)
    describe = dc.DescribeConfigsRequest(
        resources=(
            dc.DescribeConfigsResource(resource_type=i8(2), resource_name="t", configuration_keys=None),
        ),
        include_synonyms=False,
        include_documentation=False,
    )
    response = h.controller.describe_configs(describe).response
    assert response is not None
    [entry] = response["results"][0]["configs"]
    assert (entry["name"], entry["value"], entry["config_source"]) == ("segment.ms", "3", 1)


def test_allocate_producer_ids_in_blocks_of_1000_with_broker_epoch_check() -> None:
    h = ControllerHarness()
    h.start_brokers(2)

    def allocate(b: int, epoch: int) -> dict[str, Any]:
        request = AllocateProducerIdsRequest(broker_id=i32(b), broker_epoch=i64(epoch))  # type: ignore[arg-type]
        response: dict[str, Any] = h.commit(h.controller.allocate_producer_ids(request))
        return response

    assert allocate(0, h.epoch(0))["producer_id_start"] == 0
    r = allocate(1, h.epoch(1))
    assert (r["producer_id_start"], r["producer_id_len"]) == (1000, 1000)
    assert h.log[-1] == ProducerIdsRecord(broker_id=1, broker_epoch=h.epoch(1), next_producer_id=2000)
    assert allocate(1, h.epoch(1) - 1)["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    assert allocate(7, 0)["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    assert h.rebuilt().producer_ids.next_producer_id == 2000  # survives a failover: no block twice


def test_bootstrap_features() -> None:
    records = QuorumController.bootstrap_records()
    assert {r.name: r.feature_level for r in records if isinstance(r, FeatureLevelRecord)} == {
        "metadata.version": 25,
        "kraft.version": 1,
        "transaction.version": 2,
        "group.version": 1,
    }
    h = ControllerHarness()
    assert h.controller.features.level("metadata.version") == 25


def _state(c: QuorumController) -> Any:
    return (
        c.cluster.registrations,
        {t.name: (t.id, t.parts) for t in c.replication.topics.values()},
        c.configs.configs,
        c.producer_ids.next_producer_id,
        c.features.finalized,
    )


def test_snapshot_records_rebuild_the_same_state() -> None:
    h = ControllerHarness()
    h.start_brokers(3)
    h.create_topic("a", 3, 2, configs={"retention.ms": "9"})
    h.create_topic("b", 2, 3)
    h.heartbeat(1, want_fence=True)
    _incremental(h, 4, "", [("log.retention.ms", 0, "5")])
    fresh = QuorumController()
    for record in h.controller.snapshot_records():
        fresh.replay(record)
    assert _state(fresh) == _state(h.controller) == _state(h.rebuilt())


def test_handle_dispatches_by_api_key() -> None:
    from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest

    from strom.controller.quorum_controller import CONTROLLER_APIS
    from strom.testing.controller import create_topic_request, heartbeat_request, registration_request

    h = ControllerHarness()
    c = h.controller
    reg = c.handle(62, registration_request(3, uuid.uuid4()), now_ms=0, next_offset=h.next_offset)
    assert reg.response is not None and reg.response["broker_epoch"] == h.next_offset
    h.commit(reg)
    hb = c.handle(63, heartbeat_request(3, h.epoch(3), h.next_offset), now_ms=0)
    assert hb.response is not None and hb.response["is_fenced"] is False
    h.commit(hb)
    created = c.handle(19, create_topic_request("t", 1, 1))
    assert created.response is not None and created.response["topics"][0]["error_code"] == 0
    listed = c.handle(46, ListPartitionReassignmentsRequest(timeout=i32(1), topics=None))  # type: ignore[arg-type]
    assert listed.response is not None and listed.response["topics"] == []
    # (51: AlterUserScramCredentials, 73: AssignReplicasToDirs; 30, 31: (Create|Delete)Acls; 49)
    assert len(CONTROLLER_APIS) == 20
    with pytest.raises(KeyError):
        c.handle(0, None)  # Produce is no controller API


def test_a_migrated_single_node_log_is_replayed_and_served() -> None:
    from strom.metadata.migration import ExistingTopic, records_for_existing_topics

    topic = ExistingTopic(name="old", topic_id=uuid.UUID(int=7), partitions=2, configs={"retention.ms": "5"})
    migrated = records_for_existing_topics(
        [topic],
        node_id=0,
        group_configs={"g": {"consumer.session.timeout.ms": "45000"}},
        next_producer_id=4000,
    )
    h = ControllerHarness(validator=default_validator)
    h.commit(ControllerResult(migrated))
    info = h.controller.replication.topic("old")
    assert info is not None and info.id == uuid.UUID(int=7) and sorted(info.parts) == [0, 1]
    assert h.controller.configs.get(32, "g") == {"consumer.session.timeout.ms": "45000"}
    h.start_brokers(2)
    assert h.create_topic("new", 2, 2)["error_code"] == 0
    r = _incremental(h, 32, "g", [("consumer.heartbeat.interval.ms", 0, "6000")])
    assert r["error_code"] == 0
    assert (
        _incremental(h, 32, "g", [("consumer.heartbeat.interval.ms", 0, "x")])["error_code"]
        == ErrorCode.INVALID_CONFIG
    )
    request = AllocateProducerIdsRequest(broker_id=i32(0), broker_epoch=i64(h.epoch(0)))  # type: ignore[arg-type]
    response = h.commit(h.controller.allocate_producer_ids(request))
    assert response["producer_id_start"] == 4000


def _update_features(
    h: ControllerHarness, updates: list[tuple[str, int, int]], validate_only: bool = False
) -> Any:
    from kio.schema.update_features.v1 import request as uf

    request = uf.UpdateFeaturesRequest(
        timeout=i32(1000),  # type: ignore[arg-type]
        feature_updates=tuple(
            uf.FeatureUpdateKey(feature=name, max_version_level=i16(level), upgrade_type=i8(kind))
            for name, level, kind in updates
        ),
        validate_only=validate_only,
    )
    return h.controller.update_features(request)


def test_update_features() -> None:
    h = ControllerHarness()
    h.start_brokers(2)
    # downgrade transaction.version 2 -> 1: needs a downgrade type
    r = _update_features(h, [("transaction.version", 1, 1)])
    assert r.records == [] and r.response["error_code"] == ErrorCode.INVALID_UPDATE_VERSION
    assert r.response["results"][0]["error_message"] == (
        "Invalid update version 1 for feature transaction.version. Can't downgrade the version of this "
        "feature without setting the upgrade type to either safe or unsafe downgrade."
    )
    assert _update_features(h, [("transaction.version", 1, 2)], validate_only=True).records == []
    h.commit(_update_features(h, [("transaction.version", 1, 2)]))
    assert h.controller.features.level("transaction.version") == 1
    assert (
        _update_features(h, [("transaction.version", 2, 2)])
        .response["results"][0]["error_message"]
        .endswith("Can't downgrade to a newer version.")
    )
    h.commit(_update_features(h, [("transaction.version", 2, 1)]))
    assert h.controller.features.level("transaction.version") == 2
    # beyond what this controller speaks, metadata.version lowered, unknown feature: refused, all or nothing
    r = _update_features(h, [("group.version", 0, 2), ("transaction.version", 3, 1)])
    assert r.records == [] and [x["error_code"] for x in r.response["results"]] == [0, 95]
    assert _update_features(h, [("metadata.version", 24, 3)]).response["error_code"] == 95
    assert _update_features(h, [("no.such.feature", 1, 1)]).response["error_code"] == 95
    h.commit(_update_features(h, [("group.version", 0, 2)]))
    assert "group.version" not in h.controller.features.finalized


def test_same_seed_same_inputs_same_log() -> None:
    def scenario(seed: int) -> list[Any]:
        h = ControllerHarness(seed=seed)
        h.start_brokers(4, racks=["a", "b", "a", "b"])
        h.create_topic("x", 8, 3)
        h.advance(5000)
        h.heartbeat(0, want_fence=True)
        h.create_topic("y", 4, 2)
        h.advance(10_000)
        h.keep_alive()
        h.poll()
        return h.log

    assert scenario(5) == scenario(5)
    assert scenario(5) != scenario(6)  # other topic ids and placements
