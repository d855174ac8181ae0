"""A quorum broker's view of a cluster of three (ImageMetadataCache), in one process.

Broker 1 runs on its one-voter quorum (the in-memory network, no sockets); brokers 2 and 3 are
registered and kept unfenced at its controller through the broker's controller channel, as their
own processes would do, so the published image names three brokers. Topics are placed by hand
on them. What broker 1 answers must then be a member's of a three-broker cluster: Metadata and
DescribeCluster list the three, partitions led by 2 are NOT_LEADER_OR_FOLLOWER here and have no
log here, FindCoordinator names the leader of the group's __consumer_offsets partition, a group
whose partition moved away answers NOT_COORDINATOR.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path
from typing import Any

from strom.client import cluster_admin, groups
from strom.client.messages import ApiKey
from strom.config import BrokerConfig
from strom.controller.quorum_controller import (
    ALTER_PARTITION,
    ALTER_PARTITION_REASSIGNMENTS,
    BROKER_HEARTBEAT,
    BROKER_REGISTRATION,
    CREATE_TOPICS,
)
from strom.coordinator.records import partition_for
from strom.protocol.errors import ErrorCode
from strom.server.broker import OFFSETS_TOPIC, Broker
from strom.testing.controller import (
    alter_partition_request,
    create_topic_request,
    heartbeat_request,
    registration_request,
)
from strom.testing.network import MemoryNetwork

PEER_PORTS = {2: 29092, 3: 39092}


def _config(data: Path) -> BrokerConfig:
    return BrokerConfig.from_sources(None, {
        "log.dirs": str(data),
        # never opened (start(listen=False)); the peers have no INTERNAL listener
        "listeners": "PLAINTEXT://127.0.0.1:19092,INTERNAL://127.0.0.1:19093",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "log.cleaner.enable": "false",
        "strom.metadata.quorum.enable": "true",
        "controller.quorum.append.linger.ms": "0",
        "broker.session.timeout.ms": "600000",  # the peers heartbeat only when the test says
        # the peers never catch up with the controlled shutdown: the stop gives up after this
        "strom.controlled.shutdown.timeout.ms": "500",
    })


async def _call(broker: Broker, api_key: int, request: Any) -> dict[str, Any]:
    assert broker.quorum is not None
    response = await broker.quorum.channel.call(api_key, request)
    await broker.quorum._settle()  # applied by the broker before the test looks
    return response


async def _add_peer(broker: Broker, node_id: int) -> int:
    assert broker.quorum is not None
    req = registration_request(node_id, uuid.uuid4(), port=PEER_PORTS[node_id])
    req = dataclasses.replace(req, cluster_id=broker.cluster_id, log_dirs=(uuid.uuid4(),))
    response = await _call(broker, BROKER_REGISTRATION, req)
    assert response["error_code"] == 0, response
    epoch = int(response["broker_epoch"])
    for _ in range(500):
        offset = broker.quorum.loader.last_offset + 1
        hb = await _call(broker, BROKER_HEARTBEAT, heartbeat_request(node_id, epoch, offset))
        if not hb["is_fenced"]:
            return epoch
        await asyncio.sleep(0.01)
    raise AssertionError(f"broker {node_id} stays fenced")


async def _produce_error(conn: Any, topic: str, partition: int) -> int:
    from strom.protocol import records as rec

    batch = rec.build_batch([(None, b"v", [], -1)])
    resp = await conn.request(ApiKey.PRODUCE, {
        "transactional_id": None, "acks": 1, "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
    }, max_version=12)
    return int(resp.responses[0].partition_responses[0].error_code)


async def _list_offsets_error(conn: Any, topic: str, partition: int) -> int:
    resp = await conn.request(ApiKey.LIST_OFFSETS, {
        "replica_id": -1, "isolation_level": 0, "timeout": 5000,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": partition, "timestamp": -1, "current_leader_epoch": -1}]}],
    })
    return int(resp.topics[0].partitions[0].error_code)


async def _fetch_error(conn: Any, topic: str, partition: int) -> int:
    resp = await conn.request(ApiKey.FETCH, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                    "fetch_offset": 0, "log_start_offset": -1,
                                                    "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": "",
    }, max_version=12)
    return int(resp.responses[0].partitions[0].error_code)


def test_a_member_of_three_brokers_answers_from_the_image(tmp_path: Path) -> None:
    async def go() -> None:
        broker = Broker(_config(tmp_path / "data"))
        await broker.start(listen=False)
        net = MemoryNetwork(broker)
        client = net.client()
        try:
            assert broker.quorum is not None
            epochs = {1: broker.quorum.broker_epoch}
            for peer in (2, 3):
                epochs[peer] = await _add_peer(broker, peer)
            req = create_topic_request("x", assignments={0: [2, 3], 1: [1, 2], 2: [3, 1]})
            created = await _call(broker, CREATE_TOPICS, req)
            assert created["topics"][0]["error_code"] == 0, created

            # a topic with no replica here: visible as soon as the image has it, no log here
            req_y = create_topic_request("y", assignments={0: [2], 1: [3]})
            created = await _call(broker, CREATE_TOPICS, req_y)
            assert created["topics"][0]["error_code"] == 0, created
            assert broker.metadata_cache.topic("y") is not None
            assert not any(tp[0] == "y" for tp in broker.logs)
            md = await client.metadata(["y"])
            assert {p: m.leader for p, m in md.topics["y"].partitions.items()} == {0: 2, 1: 3}
            # logs only for the partitions hosted here; the topic is visible at once
            assert ("x", 1) in broker.logs and ("x", 2) in broker.logs  # (2: a follower here)
            assert ("x", 0) not in broker.logs
            md = await client.metadata(["x"])
            assert sorted(md.brokers) == [1, 2, 3]
            assert (md.brokers[2].host, md.brokers[2].port) == ("localhost", PEER_PORTS[2])
            assert (md.brokers[1].host, md.brokers[1].port) == ("127.0.0.1", 19092)
            assert md.controller_id in (1, 2, 3)
            parts = md.topics["x"].partitions
            assert (parts[0].leader, parts[0].replicas, parts[0].isr) == (2, (2, 3), (2, 3))
            assert (parts[1].leader, parts[1].replicas) == (1, (1, 2))
            assert (parts[2].leader, parts[2].replicas) == (3, (3, 1))
            assert all(p.error_code == 0 and p.offline_replicas == () for p in parts.values())

            cluster = await cluster_admin.describe_cluster(client)
            assert [b.node_id for b in cluster.brokers] == [1, 2, 3]

            # on a listener the peers do not have: only this broker; a leader without an
            # endpoint there is not given (LISTENER_NOT_FOUND), as Kafka answers
            internal_net = MemoryNetwork(broker, "INTERNAL")
            internal = internal_net.client()
            try:
                md = await internal.metadata(["x"])
                assert sorted(md.brokers) == [1] and md.brokers[1].port == 19093
                parts = md.topics["x"].partitions
                assert (parts[0].error_code, parts[0].leader) == (ErrorCode.LISTENER_NOT_FOUND, -1)
                assert (parts[1].error_code, parts[1].leader) == (0, 1)
            finally:
                await internal.close()
                internal_net.close()
            assert cluster.controller_id in (1, 2, 3)

            # led by 2 or 3 (a follower here or not): NOT_LEADER_OR_FOLLOWER here; led here: served
            conn = await client.any_connection()
            assert await _produce_error(conn, "x", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert await _produce_error(conn, "x", 2) == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert await _produce_error(conn, "x", 1) == ErrorCode.NONE
            assert await _produce_error(conn, "x", 3) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert await _list_offsets_error(conn, "x", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert await _list_offsets_error(conn, "x", 1) == ErrorCode.NONE
            assert await _fetch_error(conn, "x", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert await _fetch_error(conn, "x", 1) == ErrorCode.NONE

            # a fenced broker leaves the broker list; its replicas are offline
            offset = broker.quorum.loader.last_offset + 1
            await _call(broker, BROKER_HEARTBEAT, heartbeat_request(3, epochs[3], offset, want_fence=True))
            md = await client.metadata(["x"])
            assert sorted(md.brokers) == [1, 2]
            p0 = md.topics["x"].partitions[0]
            assert p0.leader == 2 and p0.offline_replicas == (3,)
            cluster = await cluster_admin.describe_cluster(client, include_fenced_brokers=True)
            assert [(b.node_id, b.fenced) for b in cluster.brokers] == [(1, False), (2, False), (3, True)]
            cluster = await cluster_admin.describe_cluster(client, include_fenced_brokers=False)
            assert [b.node_id for b in cluster.brokers] == [1, 2] and cluster.controller_id in (1, 2)
            # x-2's leader 3 is fenced: the controller elected 1, which now serves it
            assert md.topics["x"].partitions[2].leader == 1
            assert await _produce_error(conn, "x", 2) == ErrorCode.NONE

            # the coordinator of a group is the leader of its __consumer_offsets partition
            assert (await groups.find_coordinator(client, "g")).node_id == 1
            assert await groups.commit_offsets(client, "g", {("x", 1): 1}) == {("x", 1): None}
            gp = partition_for("g", 4)
            # move that partition to broker 2: reassign, 2 joins the ISR, leadership moves
            from kio.schema.alter_partition_reassignments.v0 import request as apr
            from kio.static.primitive import i32

            reassign = apr.AlterPartitionReassignmentsRequest(
                timeout=i32(1000),  # type: ignore[arg-type]
                topics=(apr.ReassignableTopic(name=OFFSETS_TOPIC, partitions=(  # type: ignore[arg-type]
                    apr.ReassignablePartition(partition_index=i32(gp), replicas=(i32(2),)),)),),
            )
            r = await _call(broker, ALTER_PARTITION_REASSIGNMENTS, reassign)
            assert r["responses"][0]["partitions"][0]["error_code"] == 0, r
            image = broker.quorum.publisher.image
            assert image is not None
            t = image.topics.topics_by_name[OFFSETS_TOPIC]
            pr = t.partitions[gp]
            alter = alter_partition_request(1, epochs[1], t.id, gp, pr.leader_epoch, pr.partition_epoch,
                                            [(1, epochs[1]), (2, epochs[2])])
            await _call(broker, ALTER_PARTITION, alter)
            md = await client.metadata([OFFSETS_TOPIC])
            assert md.topics[OFFSETS_TOPIC].partitions[gp].leader == 2
            assert md.topics[OFFSETS_TOPIC].partitions[gp].replicas == (2,)
            # broker 1 no longer hosts it: its log is gone, the coordinator resigned it
            assert (OFFSETS_TOPIC, gp) not in broker.logs
            assert broker.group_coordinator.owned is not None and gp not in broker.group_coordinator.owned
            coordinator = await groups.find_coordinator(client, "g")
            assert (coordinator.node_id, coordinator.port) == (2, PEER_PORTS[2])
            resp = await conn.request(groups.OFFSET_COMMIT, {
                "group_id": "g", "generation_id_or_member_epoch": -1, "generation_id": -1, "member_id": "",
                "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": "x", "partitions": [{"partition_index": 1, "committed_offset": 1,
                                                         "committed_leader_epoch": -1,
                                                         "committed_metadata": "", "commit_timestamp": -1}]}],
            })
            assert int(resp.topics[0].partitions[0].error_code) == ErrorCode.NOT_COORDINATOR
            # a reassignment that adds this broker to x-0's replicas: its (empty) log is made here
            # (replication would fill it); still led by 2, so not served here
            reassign_x = apr.AlterPartitionReassignmentsRequest(
                timeout=i32(1000),  # type: ignore[arg-type]
                topics=(apr.ReassignableTopic(name="x", partitions=(  # type: ignore[arg-type]
                    apr.ReassignablePartition(partition_index=i32(0), replicas=(i32(2), i32(1))),)),),
            )
            r = await _call(broker, ALTER_PARTITION_REASSIGNMENTS, reassign_x)
            assert r["responses"][0]["partitions"][0]["error_code"] == 0, r
            assert ("x", 0) in broker.logs and broker.logs[("x", 0)].log_end_offset == 0
            assert await _produce_error(conn, "x", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
            path = broker.logs[("x", 0)].directory
            # cancelled: this broker is no longer a replica, its log is deleted
            cancel = dataclasses.replace(reassign_x, topics=(apr.ReassignableTopic(name="x", partitions=(  # type: ignore[arg-type]
                apr.ReassignablePartition(partition_index=i32(0), replicas=None),)),))
            r = await _call(broker, ALTER_PARTITION_REASSIGNMENTS, cancel)
            assert r["responses"][0]["partitions"][0]["error_code"] == 0, r
            assert ("x", 0) not in broker.logs and not path.exists()
            # a group of a partition still led here is served
            other = next(f"h{i}" for i in range(1000) if partition_for(f"h{i}", 4) != gp)
            assert (await groups.find_coordinator(client, other)).node_id == 1
            assert await groups.commit_offsets(client, other, {("x", 1): 1}) == {("x", 1): None}
        finally:
            await client.close()
            net.close()
            await broker.stop()

    asyncio.run(go())
