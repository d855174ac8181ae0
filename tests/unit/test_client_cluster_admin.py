"""The cluster admin calls' wire side, for every version kio knows: each request body is built
into kio's message, encoded and decoded again (a misspelt field would be dropped silently by
``build``, so the values are checked after the round trip), and each response parser reads
responses encoded by kio."""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from strom.client.cluster_admin import (
    ALTER_PARTITION_REASSIGNMENTS,
    DESCRIBE_CLUSTER,
    DESCRIBE_QUORUM,
    ELECT_LEADERS,
    LIST_PARTITION_REASSIGNMENTS,
    BrokerInfo,
    PartitionReassignment,
    QuorumNode,
    ReplicaState,
    alter_reassignments_request,
    alter_results_from,
    cluster_from,
    describe_cluster_request,
    describe_quorum_request,
    elect_leaders_request,
    election_results_from,
    list_reassignments_request,
    quorum_info_from,
    reassignments_from,
)
from strom.client.errors import KafkaError
from strom.client.messages import kio_versions
from strom.protocol.codec import build


def round_trip(cls: type, data: dict[str, Any]) -> Any:
    buf = io.BytesIO()
    entity_writer(cls)(buf, build(cls, data))
    obj, _ = entity_reader(cls)(buf.getvalue(), 0)
    return obj


def request(api_key: int, version: int, data: dict[str, Any]) -> Any:
    return round_trip(load_request_schema(api_key, version), data)


def response(api_key: int, version: int, data: dict[str, Any]) -> Any:
    return round_trip(load_response_schema(api_key, version), data)


# ---------------------------------------------------------------------------- requests


@pytest.mark.parametrize("version", kio_versions(DESCRIBE_QUORUM))
def test_describe_quorum_request(version: int) -> None:
    r = request(DESCRIBE_QUORUM, version, describe_quorum_request())
    assert [(t.topic_name, [int(p.partition_index) for p in t.partitions]) for t in r.topics] == [
        ("__cluster_metadata", [0])
    ]


@pytest.mark.parametrize("version", kio_versions(DESCRIBE_CLUSTER))
def test_describe_cluster_request(version: int) -> None:
    r = request(DESCRIBE_CLUSTER, version, describe_cluster_request(True))
    assert r.include_cluster_authorized_operations is False
    if version >= 2:
        assert r.include_fenced_brokers is True


@pytest.mark.parametrize("version", kio_versions(ELECT_LEADERS))
def test_elect_leaders_request(version: int) -> None:
    body = elect_leaders_request("unclean", [("b", 2), ("a", 1), ("b", 0)], 5_000)
    r = request(ELECT_LEADERS, version, body)
    assert [(t.topic, [int(p) for p in t.partitions]) for t in r.topic_partitions] == [
        ("a", [1]),
        ("b", [0, 2]),
    ]
    assert int(r.timeout.total_seconds() * 1000) == 5_000
    if version >= 1:
        assert int(r.election_type) == 1
    assert (
        request(ELECT_LEADERS, version, elect_leaders_request("PREFERRED", None, 1)).topic_partitions is None
    )
    with pytest.raises(ValueError, match="PREFERRED or UNCLEAN"):
        elect_leaders_request("other", None, 1)


@pytest.mark.parametrize("version", kio_versions(ALTER_PARTITION_REASSIGNMENTS))
def test_alter_reassignments_request(version: int) -> None:
    r = request(
        ALTER_PARTITION_REASSIGNMENTS,
        version,
        alter_reassignments_request({("t", 1): [3, 1], ("t", 0): None}, 7_000),
    )
    (t,) = r.topics
    assert t.name == "t"
    assert [
        (int(p.partition_index), None if p.replicas is None else [int(b) for b in p.replicas])
        for p in t.partitions
    ] == [
        (0, None),
        (1, [3, 1]),
    ]


@pytest.mark.parametrize("version", kio_versions(LIST_PARTITION_REASSIGNMENTS))
def test_list_reassignments_request(version: int) -> None:
    r = request(LIST_PARTITION_REASSIGNMENTS, version, list_reassignments_request([("x", 4), ("x", 2)], 100))
    assert [(t.name, [int(p) for p in t.partition_indexes]) for t in r.topics] == [("x", [2, 4])]
    assert (
        request(LIST_PARTITION_REASSIGNMENTS, version, list_reassignments_request(None, 100)).topics is None
    )


# ---------------------------------------------------------------------------- responses


@pytest.mark.parametrize("version", kio_versions(DESCRIBE_QUORUM))
def test_describe_quorum_response(version: int) -> None:
    d = uuid.uuid4()
    voter = {
        "replica_id": 1,
        "replica_directory_id": d,
        "log_end_offset": 50,
        "last_fetch_timestamp": 10,
        "last_caught_up_timestamp": 9,
    }
    data = {
        "error_code": 0,
        "topics": [
            {
                "topic_name": "__cluster_metadata",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "leader_id": 1,
                        "leader_epoch": 4,
                        "high_watermark": 48,
                        "current_voters": [voter, {"replica_id": 2, "log_end_offset": 40}],
                        "observers": [{"replica_id": 7, "log_end_offset": 30}],
                    }
                ],
            }
        ],
        "nodes": [{"node_id": 1, "listeners": [{"name": "CONTROLLER", "host": "h", "port": 9093}]}],
    }
    q = quorum_info_from(response(DESCRIBE_QUORUM, version, data))
    assert (q.leader_id, q.leader_epoch, q.high_watermark) == (1, 4, 48)
    assert [v.replica_id for v in q.voters] == [1, 2] and [o.replica_id for o in q.observers] == [7]
    if version >= 1:  # timestamps from v1
        assert q.voters[0] == ReplicaState(1, 50, d if version >= 2 else None, 10, 9)
    if version >= 2:  # directory ids and nodes from v2 (KIP-853)
        assert q.nodes == {1: QuorumNode(1, (("CONTROLLER", "h", 9093),))}
    else:
        assert q.nodes == {}
    data["topics"][0]["partitions"][0]["error_code"] = 6  # type: ignore[index]
    with pytest.raises(KafkaError) as e:
        quorum_info_from(response(DESCRIBE_QUORUM, version, data))
    assert e.value.code == 6


@pytest.mark.parametrize("version", kio_versions(DESCRIBE_CLUSTER))
def test_describe_cluster_response(version: int) -> None:
    data = {
        "error_code": 0,
        "cluster_id": "cid",
        "controller_id": 2,
        "brokers": [
            {"broker_id": 2, "host": "b", "port": 2, "rack": None, "is_fenced": True},
            {"broker_id": 1, "host": "a", "port": 1, "rack": "r1"},
        ],
    }
    c = cluster_from(response(DESCRIBE_CLUSTER, version, data))
    assert (c.cluster_id, c.controller_id) == ("cid", 2)
    assert c.brokers == (BrokerInfo(1, "a", 1, "r1", False), BrokerInfo(2, "b", 2, None, version >= 2))


@pytest.mark.parametrize("version", kio_versions(ELECT_LEADERS))
def test_elect_leaders_response(version: int) -> None:
    data = {
        "error_code": 0,
        "replica_election_results": [
            {
                "topic": "t",
                "partition_result": [
                    {"partition_id": 0, "error_code": 0},
                    {"partition_id": 1, "error_code": 84, "error_message": "not needed"},
                ],
            }
        ],
    }
    got = election_results_from(response(ELECT_LEADERS, version, data))
    assert got[("t", 0)] is None
    err = got[("t", 1)]
    assert err is not None and err.code == 84


@pytest.mark.parametrize("version", kio_versions(ALTER_PARTITION_REASSIGNMENTS))
def test_alter_reassignments_response(version: int) -> None:
    data = {
        "error_code": 0,
        "responses": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "error_code": 0},
                    {"partition_index": 1, "error_code": 3, "error_message": "no such partition"},
                ],
            }
        ],
    }
    got = alter_results_from(response(ALTER_PARTITION_REASSIGNMENTS, version, data))
    assert got[("t", 0)] is None
    err = got[("t", 1)]
    assert err is not None and (err.code, err.message) == (3, "no such partition")
    data["error_code"] = 41
    with pytest.raises(KafkaError):
        alter_results_from(response(ALTER_PARTITION_REASSIGNMENTS, version, data))


@pytest.mark.parametrize("version", kio_versions(LIST_PARTITION_REASSIGNMENTS))
def test_list_reassignments_response(version: int) -> None:
    data = {
        "error_code": 0,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition_index": 5,
                        "replicas": [1, 2, 3],
                        "adding_replicas": [3],
                        "removing_replicas": [1],
                    }
                ],
            }
        ],
    }
    got = reassignments_from(response(LIST_PARTITION_REASSIGNMENTS, version, data))
    assert got == {("t", 5): PartitionReassignment((1, 2, 3), (3,), (1,))}
