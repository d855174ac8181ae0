"""Dynamic broker configs and group configs in a real three-node cluster (``strom serve`` nodes,
combined broker+controller): they are ConfigRecords in the metadata log, so a change sent to any
node reaches every broker. A cluster-default broker config set through node 1 is described by
nodes 2 and 3 and takes effect there; a per-broker config of broker 2 set through node 3 applies
to broker 2 alone; a group config set through one node is what the group's coordinator uses."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strom.client import admin as sadmin
from strom.client import groups
from strom.protocol import records as rec
from strom.protocol.errors import ErrorCode
from strom.testing.cluster_process import ClusterProcess

pytestmark = pytest.mark.integration

INCREMENTAL_ALTER_CONFIGS = 44
DESCRIBE_CONFIGS = 32
PRODUCE = 0
CONSUMER_GROUP_HEARTBEAT = 68


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    c = ClusterProcess(
        tmp_path_factory.mktemp("cluster-configs") / "dc",
        3,
        overrides=["offsets.topic.num.partitions=3", "group.initial.rebalance.delay.ms=0"],
    )
    c.start()
    try:
        c.wait_ready(90)
        yield c
    finally:
        c.close()


def wait_for(what: str, check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def alter(c: ClusterProcess, node: int, rtype: int, name: str, *ops: tuple[str, int, str | None]) -> Any:
    """IncrementalAlterConfigs sent to ``node`` itself; the resource's (error code, message)."""
    resp = c.request(
        node,
        INCREMENTAL_ALTER_CONFIGS,
        {
            "resources": [
                {
                    "resource_type": rtype,
                    "resource_name": name,
                    "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops],
                }
            ],
            "validate_only": False,
        },
    )
    (r,) = resp.responses
    return int(r.error_code), r.error_message


def describe(c: ClusterProcess, node: int, rtype: int, name: str) -> dict[str, tuple[str | None, int]]:
    """DescribeConfigs answered by ``node`` itself: name -> (value, source)."""
    resp = c.request(
        node,
        DESCRIBE_CONFIGS,
        {
            "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": None}],
            "include_synonyms": True,
            "include_documentation": False,
        },
    )
    (r,) = resp.results
    assert int(r.error_code) == 0, (node, rtype, name, r.error_message)
    return {str(e.name): (e.value, int(e.config_source)) for e in r.configs}


DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, DEFAULT_CONFIG, DYNAMIC_GROUP_CONFIG = 2, 3, 5, 8


def produce_error(c: ClusterProcess, node: int, topic: str, partition: int, size: int) -> int:
    """The error of one Produce of a ``size``-byte record sent to ``node`` (the leader)."""

    async def call(client: Any) -> int:
        host, port = c.node_bootstrap(node).rsplit(":", 1)
        conn = await client.connection(host, int(port))
        batch = rec.build_batch([(None, b"x" * size, [], -1)])
        resp = await conn.request(
            PRODUCE,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": 10000,
                "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
            },
            max_version=12,
        )
        return int(resp.responses[0].partition_responses[0].error_code)

    return int(c.run(node, call))


def test_cluster_default_set_through_node_1_reaches_every_broker(cluster: ClusterProcess) -> None:
    topic = f"big-{uuid.uuid4().hex[:6]}"
    created = cluster.create_topics(1, {topic: (3, 1)})
    assert created[topic][0] == 0, created
    cluster.wait_topic(topic)
    leaders = {p: m.leader for p, m in cluster.metadata(1, [topic]).topics[topic].partitions.items()}
    on3 = next(p for p, leader in leaders.items() if leader == 3)
    assert produce_error(cluster, 3, topic, on3, 5000) == 0

    assert alter(cluster, 1, sadmin.BROKER, "", ("message.max.bytes", sadmin.SET, "2000")) == (0, None)
    for node in (2, 3):
        wait_for(
            f"node {node} to describe the default",
            lambda node=node: describe(cluster, node, sadmin.BROKER, "").get("message.max.bytes")
            == ("2000", DYNAMIC_DEFAULT_BROKER_CONFIG),
        )
        own = describe(cluster, node, sadmin.BROKER, str(node))
        assert own["message.max.bytes"] == ("2000", DYNAMIC_DEFAULT_BROKER_CONFIG)
    # in force on node 3: its partition refuses a record over the new limit
    assert produce_error(cluster, 3, topic, on3, 5000) == ErrorCode.MESSAGE_TOO_LARGE
    assert produce_error(cluster, 3, topic, on3, 500) == 0

    assert alter(cluster, 2, sadmin.BROKER, "", ("message.max.bytes", sadmin.DELETE, None)) == (0, None)
    wait_for(
        "node 3 to drop the default",
        lambda: "message.max.bytes" not in describe(cluster, 3, sadmin.BROKER, ""),
    )
    assert produce_error(cluster, 3, topic, on3, 5000) == 0


def test_per_broker_config_of_broker_2_set_through_node_3(cluster: ClusterProcess) -> None:
    assert alter(cluster, 3, sadmin.BROKER, "2", ("log.retention.ms", sadmin.SET, "7200000")) == (0, None)
    wait_for(
        "broker 2 to apply its config",
        lambda: describe(cluster, 2, sadmin.BROKER, "2").get("log.retention.ms")
        == ("7200000", DYNAMIC_BROKER_CONFIG),
    )
    for node in (1, 3):
        value, source = describe(cluster, node, sadmin.BROKER, str(node))["log.retention.ms"]
        assert source != DYNAMIC_BROKER_CONFIG and value != "7200000", (node, value, source)
        assert "log.retention.ms" not in describe(cluster, node, sadmin.BROKER, "")
    # validation is the receiving broker's, with today's messages
    code, message = alter(cluster, 3, sadmin.BROKER, "2", ("listeners", sadmin.SET, "PLAINTEXT://x:1"))
    assert code == ErrorCode.INVALID_CONFIG and "Cannot update these configs dynamically" in message
    code, message = alter(cluster, 3, sadmin.BROKER, "two", ("log.retention.ms", sadmin.SET, "1"))
    assert code == ErrorCode.INVALID_REQUEST
    assert alter(cluster, 1, sadmin.BROKER, "2", ("log.retention.ms", sadmin.DELETE, None)) == (0, None)
    wait_for(
        "broker 2 to drop its config",
        lambda: describe(cluster, 2, sadmin.BROKER, "2")["log.retention.ms"][1] != DYNAMIC_BROKER_CONFIG,
    )


def heartbeat_interval(c: ClusterProcess, node: int, group: str, topic: str) -> int:
    """A new member's ConsumerGroupHeartbeat to ``node``: the interval the coordinator hands out."""
    resp = c.request(
        node,
        CONSUMER_GROUP_HEARTBEAT,
        {
            "group_id": group,
            "member_id": str(uuid.uuid4()),
            "member_epoch": 0,
            "rebalance_timeout": 30000,
            "subscribed_topic_names": [topic],
            "topic_partitions": [],
        },
    )
    assert int(resp.error_code) == 0, (node, resp.error_code, resp.error_message)
    return round(resp.heartbeat_interval.total_seconds() * 1000)


def test_group_config_set_through_one_node_is_used_by_the_coordinator(cluster: ClusterProcess) -> None:
    topic = f"gt-{uuid.uuid4().hex[:6]}"
    assert cluster.create_topics(1, {topic: (1, 1)})[topic][0] == 0
    cluster.wait_topic(topic)
    group = f"g-{uuid.uuid4().hex[:6]}"
    coordinator = wait_for(
        "a coordinator", lambda: cluster.run(1, lambda cl: groups.find_coordinator(cl, group)).node_id
    )
    other = next(n for n in (1, 2, 3) if n != coordinator)
    assert heartbeat_interval(cluster, coordinator, group, topic) == 5000  # the broker default
    op = ("consumer.heartbeat.interval.ms", sadmin.SET, "7000")
    assert alter(cluster, other, sadmin.GROUP, group, op) == (0, None)
    wait_for(
        "the coordinator to see the group config",
        lambda: describe(cluster, coordinator, sadmin.GROUP, group)["consumer.heartbeat.interval.ms"]
        == ("7000", DYNAMIC_GROUP_CONFIG),
    )
    assert heartbeat_interval(cluster, coordinator, group, topic) == 7000
    for node in (1, 2, 3):  # every broker describes it alike
        assert describe(cluster, node, sadmin.GROUP, group)["consumer.heartbeat.interval.ms"][0] == "7000"
