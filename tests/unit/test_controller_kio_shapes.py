"""Every controller response dict has exactly kio's field names and encodes as its response type
(what strom's network layer does with a handler's dict: ``codec.build`` then ``encode_response``)."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from kio.schema.allocate_producer_ids.v0.request import AllocateProducerIdsRequest
from kio.schema.alter_partition_reassignments.v0 import request as apr
from kio.schema.describe_configs.v4 import request as dc
from kio.schema.elect_leaders.v2 import request as el
from kio.schema.incremental_alter_configs.v1 import request as iac
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.unregister_broker.v0.request import UnregisterBrokerRequest
from kio.static.primitive import i8, i32, i64

from strom.protocol import codec
from strom.testing.controller import ControllerHarness, alter_partition_request, create_topic_request


def _check_keys(cls: type, data: Any, path: str) -> None:
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    assert set(data) <= set(fields), f"{path}: {set(data) - set(fields)} not in {cls.__name__}"
    for name, value in data.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            inner = _element_type(cls, name)
            for i, item in enumerate(value):
                _check_keys(inner, item, f"{path}.{name}[{i}]")


def _element_type(cls: type, name: str) -> type:
    import typing

    hint = typing.get_type_hints(cls)[name]
    args = [a for a in typing.get_args(hint) if a is not Ellipsis and a is not type(None)]
    while args and typing.get_args(args[0]):
        args = [a for a in typing.get_args(args[0]) if a is not Ellipsis and a is not type(None)]
    return args[0]  # type: ignore[no-any-return]


def _encodes(api_key: int, version: int, data: dict[str, Any]) -> None:
    cls = codec.response_type(api_key, version)
    _check_keys(cls, data, cls.__name__)
    assert codec.encode_response(codec.build(cls, data))


def test_every_controller_response_is_a_kio_response() -> None:
    h = ControllerHarness()
    reg = h.register(0)
    _encodes(62, 4, reg)
    _encodes(63, 1, h.heartbeat(0))
    h.start_brokers(3)
    c = h.controller
    created = c.create_topics(create_topic_request("t", 2, 2))
    _encodes(19, 7, created.response)  # type: ignore[arg-type]
    h.commit(created)
    info = c.replication.topic("t")
    assert info is not None
    p = info.parts[0]
    alter = alter_partition_request(
        p.leader, h.epoch(p.leader), info.id, 0, p.leader_epoch, p.partition_epoch, [(p.leader, -1)]
    )
    _encodes(56, 3, c.alter_partition(alter).response)  # type: ignore[arg-type]
    elect = el.ElectLeadersRequest(
        election_type=i8(0),
        topic_partitions=(el.TopicPartitions(topic="t", partitions=(i32(0), i32(1))),),  # type: ignore[arg-type]
        timeout=i32(1),  # type: ignore[arg-type]
    )
    _encodes(43, 2, c.elect_leaders(elect).response)  # type: ignore[arg-type]
    reassign = apr.AlterPartitionReassignmentsRequest(
        timeout=i32(1),  # type: ignore[arg-type]
        topics=(
            apr.ReassignableTopic(
                name="t",  # type: ignore[arg-type]
                partitions=(
                    apr.ReassignablePartition(partition_index=i32(0), replicas=(i32(0), i32(1), i32(2))),
                ),  # type: ignore[arg-type]
            ),
        ),
    )
    result = c.alter_partition_reassignments(reassign)
    _encodes(45, 0, result.response)  # type: ignore[arg-type]
    h.commit(result)
    listed = c.list_partition_reassignments(ListPartitionReassignmentsRequest(timeout=i32(1), topics=None))  # type: ignore[arg-type]
    assert listed.response is not None and listed.response["topics"]
    _encodes(46, 0, listed.response)
    iac_request = iac.IncrementalAlterConfigsRequest(
        resources=(
            iac.AlterConfigsResource(
                resource_type=i8(2),
                resource_name="t",
                configs=(iac.AlterableConfig(name="retention.ms", config_operation=i8(0), value="1"),),
            ),
        ),
        validate_only=False,
    )
    result = c.incremental_alter_configs(iac_request)
    _encodes(44, 1, result.response)  # type: ignore[arg-type]
    _encodes(33, 2, result.response)  # type: ignore[arg-type]  # AlterConfigs answers the same shape
    h.commit(result)
    describe = dc.DescribeConfigsRequest(
        resources=(
            dc.DescribeConfigsResource(resource_type=i8(2), resource_name="t", configuration_keys=None),
        ),
        include_synonyms=False,
        include_documentation=False,
    )
    described = c.describe_configs(describe).response
    assert described is not None and described["results"][0]["configs"]
    _encodes(32, 4, described)
    pids = AllocateProducerIdsRequest(broker_id=i32(0), broker_epoch=i64(h.epoch(0)))  # type: ignore[arg-type]
    _encodes(67, 0, c.allocate_producer_ids(pids).response)  # type: ignore[arg-type]
    from kio.schema.create_partitions.v3 import request as cp
    from kio.schema.delete_topics.v6 import request as dt

    grow = cp.CreatePartitionsRequest(
        topics=(cp.CreatePartitionsTopic(name="t", count=i32(3), assignments=None),),  # type: ignore[arg-type]
        timeout=i32(1),  # type: ignore[arg-type]
        validate_only=False,
    )
    _encodes(37, 3, c.create_partitions(grow).response)  # type: ignore[arg-type]
    delete = dt.DeleteTopicsRequest(
        topics=(dt.DeleteTopicState(name="t", topic_id=uuid.UUID(int=0)),),  # type: ignore[arg-type]
        timeout=i32(1),  # type: ignore[arg-type]
    )
    _encodes(20, 6, c.delete_topics(delete).response)  # type: ignore[arg-type]
    from kio.schema.update_features.v1 import request as uf

    features = uf.UpdateFeaturesRequest(
        timeout=i32(1),  # type: ignore[arg-type]
        feature_updates=(
            uf.FeatureUpdateKey(feature="group.version", max_version_level=0, upgrade_type=i8(2)),
        ),  # type: ignore[arg-type]
        validate_only=True,
    )
    _encodes(57, 1, c.update_features(features).response)  # type: ignore[arg-type]
    _encodes(64, 0, c.unregister_broker(UnregisterBrokerRequest(broker_id=i32(2))).response)  # type: ignore[arg-type]
