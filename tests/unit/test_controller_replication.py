"""Topics, partitions, AlterPartition, elections and reassignment (ReplicationControlManager)."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.alter_partition_reassignments.v0 import request as apr
from kio.schema.create_partitions.v3 import request as cp
from kio.schema.delete_topics.v6 import request as dt
from kio.schema.elect_leaders.v2 import request as el
from kio.schema.list_partition_reassignments.v0 import request as lpr
from kio.static.primitive import i8, i32, i64

from strom.controller import ControllerConfig, PartitionRegistration
from strom.controller.partitions import is_reassigning
from strom.metadata.records import ConfigRecord, PartitionRecord, RemoveTopicRecord, TopicRecord
from strom.protocol.errors import ErrorCode
from strom.testing.controller import ControllerHarness, alter_partition_request, create_topic_request


def part(h: ControllerHarness, topic: str, p: int) -> PartitionRegistration:
    info = h.controller.replication.topic(topic)
    assert info is not None
    return info.parts[p]


def topic_id(h: ControllerHarness, topic: str) -> uuid.UUID:
    info = h.controller.replication.topic(topic)
    assert info is not None
    return info.id


def alter(h: ControllerHarness, topic: str, p: int, isr: list[int], **kw: Any) -> dict[str, Any]:
    cur = part(h, topic, p)
    leader = kw.pop("leader", cur.leader)
    request = alter_partition_request(
        leader,
        h.epoch(leader),
        kw.pop("topic_id", topic_id(h, topic)),
        p,
        kw.pop("leader_epoch", cur.leader_epoch),
        kw.pop("partition_epoch", cur.partition_epoch),
        [(b, h.epoch(b) if h.controller.cluster.registration(b) else -1) for b in isr],
        **kw,
    )
    response: dict[str, Any] = h.commit(h.controller.alter_partition(request))
    result: dict[str, Any] = response["topics"][0]["partitions"][0]
    return result


# ---- CreateTopics -------------------------------------------------------------------------


def test_create_topic_records_and_response() -> None:
    h = ControllerHarness()
    h.start_brokers(3)
    start = h.next_offset
    r = h.create_topic("orders", 3, 2, configs={"cleanup.policy": "compact"})
    assert r["error_code"] == 0 and r["num_partitions"] == 3 and r["replication_factor"] == 2
    records = h.log[start:]
    assert isinstance(records[0], TopicRecord) and records[0].name == "orders"
    assert records[0].topic_id == r["topic_id"]
    assert (
        ConfigRecord(resource_type=2, resource_name="orders", name="cleanup.policy", value="compact")
        in records
    )
    parts = [rec for rec in records if isinstance(rec, PartitionRecord)]
    assert [p.partition_id for p in parts] == [0, 1, 2]
    for p in parts:
        assert len(p.replicas) == 2 and p.isr == p.replicas and p.leader == p.replicas[0]
        assert p.leader_epoch == 0 and p.partition_epoch == 0
    assert h.controller.configs.topic_config("orders", "cleanup.policy") == "compact"


def test_create_topic_defaults_from_config() -> None:
    h = ControllerHarness(ControllerConfig(num_partitions=4, default_replication_factor=2))
    h.start_brokers(2)
    r = h.create_topic("d")
    assert (r["num_partitions"], r["replication_factor"]) == (4, 2)


def test_create_topic_refusals() -> None:
    h = ControllerHarness()
    h.start_brokers(2)
    h.create_topic("exists", 1, 1)
    cases = [
        (
            ("x", 1, 3),
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be "
            "reached because only 2 broker(s) are registered.",
        ),
        (
            ("x", 1, 0),
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        ),
        (
            ("x", 0, 1),
            ErrorCode.INVALID_PARTITIONS,
            "Number of partitions was set to an invalid non-positive value.",
        ),
        (("exists", 1, 1), ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'exists' already exists."),
        (("bad name", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION, None),
    ]
    for args, code, message in cases:
        r = h.create_topic(*args)
        assert r["error_code"] == code, args
        if message:
            assert r["error_message"] == message
    assert h.create_topic("ex.ists")["error_code"] == 0  # collides with nothing
    h.create_topic("a.b", 1, 1)
    r = h.create_topic("a_b", 1, 1)
    assert r["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION and "collides" in r["error_message"]


def test_create_topic_with_all_brokers_fenced_or_none_unfenced() -> None:
    h = ControllerHarness()
    h.register(0)
    r = h.create_topic("x", 1, 1)
    assert r["error_code"] == ErrorCode.INVALID_REPLICATION_FACTOR
    assert (
        r["error_message"] == "Unable to replicate the partition 1 time(s): All brokers are currently fenced."
    )


def test_manual_assignments() -> None:
    h = ControllerHarness()
    h.start_brokers(3)
    r = h.create_topic("m", assignments={0: [2, 1], 1: [0, 2]})
    assert r["error_code"] == 0 and r["num_partitions"] == 2 and r["replication_factor"] == 2
    assert part(h, "m", 0).replicas == (2, 1) and part(h, "m", 0).leader == 2
    bad = {
        "r1": ({0: [0, 0]}, "includes the broker 0 more than once"),
        "r2": ({0: [7]}, "includes broker 7, but no such broker is registered"),
        "r3": ({0: [0], 1: [0, 1]}, "includes a partition with 2 replica(s)"),
        "r4": ({1: [0]}, "consecutive 0-based"),
        "r5": ({0: []}, "empty replica list"),
    }
    for name, (assignment, message) in bad.items():
        r = h.create_topic(name, assignments=assignment)
        assert r["error_code"] == ErrorCode.INVALID_REPLICA_ASSIGNMENT, name
        assert message in r["error_message"]
    r = h.create_topic("r6", 1, -1, assignments={0: [0]})
    assert r["error_code"] == ErrorCode.INVALID_REQUEST
    h.heartbeat(2, want_fence=True)
    r = h.create_topic("r7", assignments={0: [2]})
    assert r["error_code"] == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "fenced" in r["error_message"]
    r = h.create_topic("r8", assignments={0: [2, 0]})  # fenced replica: not in the ISR
    assert r["error_code"] == 0 and part(h, "r8", 0).isr == (0,) and part(h, "r8", 0).leader == 0


def test_validate_only_and_duplicates_write_nothing() -> None:
    h = ControllerHarness()
    h.start_brokers(1)
    result = h.controller.create_topics(create_topic_request("v", 1, 1, validate_only=True))
    assert result.records == [] and result.response is not None
    assert result.response["topics"][0]["error_code"] == 0
    request = create_topic_request("d", 1, 1)
    doubled = type(request)(topics=request.topics * 2, timeout=request.timeout, validate_only=False)
    result = h.controller.create_topics(doubled)
    assert result.records == []
    assert {t["error_code"] for t in result.response["topics"]} == {ErrorCode.INVALID_REQUEST}  # type: ignore[index]


# ---- DeleteTopics / CreatePartitions -------------------------------------------------------


def test_delete_topics_by_name_and_id() -> None:
    h = ControllerHarness()
    h.start_brokers(1)
    a = h.create_topic("a", 1, 1, configs={"retention.ms": "1"})["topic_id"]
    b = h.create_topic("b", 1, 1)["topic_id"]
    request = dt.DeleteTopicsRequest(
        topics=(
            dt.DeleteTopicState(name="a", topic_id=uuid.UUID(int=0)),  # type: ignore[arg-type]
            dt.DeleteTopicState(name=None, topic_id=b),
            dt.DeleteTopicState(name="nope", topic_id=uuid.UUID(int=0)),  # type: ignore[arg-type]
            dt.DeleteTopicState(name=None, topic_id=uuid.uuid4()),
        ),
        timeout=i32(1000),  # type: ignore[arg-type]
    )
    result = h.controller.delete_topics(request)
    assert result.records == [RemoveTopicRecord(topic_id=a), RemoveTopicRecord(topic_id=b)]
    codes = [(r["name"], r["error_code"]) for r in result.response["responses"]]  # type: ignore[index]
    assert codes == [
        ("a", 0),
        ("b", 0),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (None, ErrorCode.UNKNOWN_TOPIC_ID),
    ]
    h.commit(result)
    assert h.controller.replication.topics == {} and h.controller.configs.get(2, "a") == {}
    assert h.create_topic("a", 1, 1)["error_code"] == 0


def _create_partitions(
    h: ControllerHarness, name: str, count: int, assignments: Any = None
) -> dict[str, Any]:
    request = cp.CreatePartitionsRequest(
        topics=(
            cp.CreatePartitionsTopic(
                name=name,  # type: ignore[arg-type]
                count=i32(count),
                assignments=None
                if assignments is None
                else tuple(
                    cp.CreatePartitionsAssignment(broker_ids=tuple(i32(b) for b in a)) for a in assignments
                ),  # type: ignore[misc]
            ),
        ),
        timeout=i32(1000),  # type: ignore[arg-type]
        validate_only=False,
    )
    response: dict[str, Any] = h.commit(h.controller.create_partitions(request))
    result: dict[str, Any] = response["results"][0]
    return result


def test_create_partitions() -> None:
    h = ControllerHarness()
    h.start_brokers(3)
    h.create_topic("t", 2, 2)
    assert _create_partitions(h, "t", 4)["error_code"] == 0
    info = h.controller.replication.topic("t")
    assert info is not None and sorted(info.parts) == [0, 1, 2, 3]
    assert all(len(p.replicas) == 2 for p in info.parts.values())
    r = _create_partitions(h, "t", 4)
    assert (r["error_code"], r["error_message"]) == (
        ErrorCode.INVALID_PARTITIONS,
        "Topic already has 4 partition(s).",
    )
    r = _create_partitions(h, "t", 3)
    assert r["error_message"] == "The topic t currently has 4 partition(s); 3 would not be an increase."
    assert _create_partitions(h, "nope", 3)["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    r = _create_partitions(h, "t", 6, [[0, 1]])
    assert r["error_code"] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert (
        r["error_message"]
        == "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."
    )
    assert _create_partitions(h, "t", 5, [[2, 0]])["error_code"] == 0
    assert part(h, "t", 4).replicas == (2, 0)


# ---- AlterPartition (KIP-841) --------------------------------------------------------------


def test_alter_partition_shrink_and_expand() -> None:
    h = ControllerHarness()
    h.start_brokers(3)
    h.create_topic("t", assignments={0: [0, 1, 2]})
    r = alter(h, "t", 0, [0, 1])
    assert (
        r["error_code"] == 0 and r["isr"] == [0, 1] and r["partition_epoch"] == 1 and r["leader_epoch"] == 0
    )
    r = alter(h, "t", 0, [0, 1, 2])
    assert r["error_code"] == 0 and r["isr"] == [0, 1, 2] and r["partition_epoch"] == 2
    assert part(h, "t", 0).isr == (0, 1, 2)


def test_alter_partition_epoch_and_sender_checks() -> None:
    h = ControllerHarness()
    h.start_brokers(3)
    h.create_topic("t", assignments={0: [0, 1, 2]})
    alter(h, "t", 0, [0, 1])  # partition epoch 1
    assert (
        alter(h, "t", 0, [0], partition_epoch=0)["error_code"] == ErrorCode.INVALID_UPDATE_VERSION
    )
    assert alter(h, "t", 0, [0], partition_epoch=5)["error_code"] == ErrorCode.NOT_CONTROLLER
    assert alter(h, "t", 0, [0], leader_epoch=-1)["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
    assert alter(h, "t", 0, [1], leader=1)["error_code"] == ErrorCode.INVALID_REQUEST  # not the leader
    assert alter(h, "t", 0, [1])["error_code"] == ErrorCode.INVALID_REQUEST  # leader left out
    assert alter(h, "t", 0, [0, 5])["error_code"] == ErrorCode.INVALID_REQUEST  # not a replica
    assert alter(h, "t", 0, [0], topic_id=uuid.uuid4())["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID
    stale = alter_partition_request(0, h.epoch(0) - 1, topic_id(h, "t"), 0, 0, 1, [(0, -1)])
    assert (
        h.controller.alter_partition(stale).response["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    )  # type: ignore[index]
    assert part(h, "t", 0).partition_epoch == 1


def test_fenced_or_shutting_down_replicas_never_join_the_isr() -> None:
    h = ControllerHarness()
    h.start_brokers(4)
    h.create_topic("t", assignments={0: [0, 1, 2, 3]})
    alter(h, "t", 0, [0])
    h.heartbeat(1, want_fence=True)
    assert alter(h, "t", 0, [0, 1])["error_code"] == ErrorCode.INELIGIBLE_REPLICA
    assert (
        alter(h, "t", 0, [0, 1], leader_recovery_state=0)["error_code"]
        == ErrorCode.INELIGIBLE_REPLICA
    )
    h.heartbeat(2, want_shut_down=True)
    assert alter(h, "t", 0, [0, 2])["error_code"] == ErrorCode.INELIGIBLE_REPLICA
    cur = part(h, "t", 0)
    v1 = alter_partition_request(
        0, h.epoch(0), topic_id(h, "t"), 0, cur.leader_epoch, cur.partition_epoch, [(0, -1), (1, -1)]
    )
    response = h.controller.alter_partition(v1, api_version=1).response
    assert response["topics"][0]["partitions"][0]["error_code"] == ErrorCode.OPERATION_NOT_ATTEMPTED  # type: ignore[index]
    # a broker epoch other than the registered one: a restarted replica the leader has not seen yet
    stale = alter_partition_request(
        0,
        h.epoch(0),
        topic_id(h, "t"),
        0,
        cur.leader_epoch,
        cur.partition_epoch,
        [(0, -1), (3, h.epoch(3) - 1)],
    )
    response = h.controller.alter_partition(stale).response
    assert response["topics"][0]["partitions"][0]["error_code"] == ErrorCode.INELIGIBLE_REPLICA  # type: ignore[index]
    assert alter(h, "t", 0, [0, 3])["error_code"] == 0


# ---- elections -----------------------------------------------------------------------------


def _elect(h: ControllerHarness, election_type: int, tps: dict[str, list[int]] | None) -> dict[str, Any]:
    request = el.ElectLeadersRequest(
        election_type=i8(election_type),
        topic_partitions=None
        if tps is None
        else tuple(
            el.TopicPartitions(topic=t, partitions=tuple(i32(p) for p in ps)) for t, ps in tps.items()
        ),  # type: ignore[arg-type]
        timeout=i32(1000),  # type: ignore[arg-type]
    )
    response: dict[str, Any] = h.commit(h.controller.elect_leaders(request))
    return response


def _codes(response: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {
        (r["topic"], p["partition_id"]): p["error_code"]
        for r in response["replica_election_results"]
        for p in r["partition_result"]
    }


def test_preferred_election() -> None:
    h = ControllerHarness(ControllerConfig(auto_leader_rebalance_enable=False))
    h.start_brokers(3)
    h.create_topic("t", assignments={0: [0, 1], 1: [1, 0], 2: [2, 1]})
    h.heartbeat(0, want_fence=True)
    assert part(h, "t", 0).leader == 1
    h.heartbeat(0)  # back, but not in the ISR yet
    codes = _codes(_elect(h, 0, {"t": [0, 1, 7], "x": [0]}))
    assert codes == {
        ("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ("t", 1): ErrorCode.ELECTION_NOT_NEEDED,
        ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("x", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    alter(h, "t", 0, [1, 0])
    assert _codes(_elect(h, 0, None)) == {("t", 0): 0}  # all partitions: only those elected are listed
    assert part(h, "t", 0).leader == 0 and part(h, "t", 0).leader_epoch == 2


def test_unclean_election_only_when_asked_or_configured() -> None:
    h = ControllerHarness()
    h.start_brokers(2)
    h.create_topic("t", assignments={0: [0, 1]})
    alter(h, "t", 0, [0])
    h.heartbeat(0, want_fence=True)
    p = part(h, "t", 0)
    assert p.leader == -1 and p.isr == (0,)  # unclean.leader.election.enable=false: nobody may lead
    assert _codes(_elect(h, 0, {"t": [0]})) == {("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    assert _codes(_elect(h, 1, {"t": [0]})) == {("t", 0): 0}
    p = part(h, "t", 0)
    assert p.leader == 1 and p.isr == (1,) and p.leader_recovery_state == 1  # RECOVERING
    assert _codes(_elect(h, 1, {"t": [0]})) == {("t", 0): ErrorCode.ELECTION_NOT_NEEDED}


def test_unclean_leader_election_enable_topic_config() -> None:
    h = ControllerHarness()
    h.start_brokers(2)
    h.create_topic("t", assignments={0: [0, 1]}, configs={"unclean.leader.election.enable": "true"})
    alter(h, "t", 0, [0])
    h.heartbeat(0, want_fence=True)
    p = part(h, "t", 0)
    assert p.leader == 1 and p.isr == (1,) and p.leader_recovery_state == 1


def test_turning_unclean_election_on_elects_leaderless_partitions_at_the_next_check() -> None:
    from kio.schema.incremental_alter_configs.v1 import request as iac

    h = ControllerHarness(ControllerConfig(auto_leader_rebalance_enable=False))
    h.start_brokers(2)
    h.create_topic("t", assignments={0: [0, 1]})
    alter(h, "t", 0, [0])
    h.heartbeat(0, want_fence=True)
    assert part(h, "t", 0).leader == -1
    request = iac.IncrementalAlterConfigsRequest(
        resources=(
            iac.AlterConfigsResource(
                resource_type=i8(2),
                resource_name="t",
                configs=(
                    iac.AlterableConfig(
                        name="unclean.leader.election.enable", config_operation=i8(0), value="true"
                    ),
                ),
            ),
        ),
        validate_only=False,
    )
    h.commit(h.controller.incremental_alter_configs(request))
    h.advance(300_000)
    h.keep_alive()
    assert h.poll() == 1
    p = part(h, "t", 0)
    assert p.leader == 1 and p.isr == (1,) and p.leader_recovery_state == 1


def test_auto_leader_rebalance_after_check_interval() -> None:
    h = ControllerHarness(ControllerConfig(leader_imbalance_check_interval_seconds=300))
    h.start_brokers(2)
    h.create_topic("t", assignments={0: [0, 1], 1: [0, 1], 2: [1, 0]})
    h.heartbeat(0, want_fence=True)
    h.heartbeat(0)
    for p in (0, 1):
        alter(h, "t", p, [1, 0])
    assert [part(h, "t", p).leader for p in range(3)] == [1, 1, 1]
    h.advance(299_999)
    h.keep_alive()
    assert h.poll() == 0
    h.advance(1)
    h.keep_alive()
    assert h.poll() == 2
    assert [part(h, "t", p).leader for p in range(3)] == [0, 0, 1]


def test_rebalance_respects_the_imbalance_percentage() -> None:
    h = ControllerHarness(ControllerConfig(leader_imbalance_per_broker_percentage=50))
    h.start_brokers(2)
    h.create_topic("t", assignments={0: [0, 1], 1: [0, 1], 2: [0, 1], 3: [0, 1]})
    h.heartbeat(0, want_fence=True)
    h.heartbeat(0)
    for p in (0, 1, 2, 3):
        alter(h, "t", p, [1, 0])
    _elect(h, 0, {"t": [0, 1]})  # broker 0 leads 2 of its 4: 50 % is not above 50 %
    h.advance(300_000)
    h.keep_alive()
    assert h.poll() == 0
    assert h.controller.replication.imbalanced_partitions(49) == [("t", 2), ("t", 3)]


# ---- reassignment --------------------------------------------------------------------------


def _reassign(h: ControllerHarness, topic: str, p: int, replicas: list[int] | None) -> dict[str, Any]:
    request = apr.AlterPartitionReassignmentsRequest(
        timeout=i32(1000),  # type: ignore[arg-type]
        topics=(
            apr.ReassignableTopic(
                name=topic,  # type: ignore[arg-type]
                partitions=(
                    apr.ReassignablePartition(
                        partition_index=i32(p),
                        replicas=None if replicas is None else tuple(i32(b) for b in replicas),  # type: ignore[misc]
                    ),
                ),
            ),
        ),
    )
    response: dict[str, Any] = h.commit(h.controller.alter_partition_reassignments(request))
    result: dict[str, Any] = response["responses"][0]["partitions"][0]
    return result


def _listed(h: ControllerHarness) -> list[dict[str, Any]]:
    result = h.controller.list_partition_reassignments(
        lpr.ListPartitionReassignmentsRequest(timeout=i32(1), topics=None)
    )  # type: ignore[arg-type]
    assert result.records == []
    topics: list[dict[str, Any]] = result.response["topics"]  # type: ignore[index]
    return topics


def test_reassignment_add_catch_up_move_leader_remove() -> None:
    h = ControllerHarness()
    h.start_brokers(4)
    h.create_topic("t", assignments={0: [0, 1]})
    assert _reassign(h, "t", 0, [2, 3])["error_code"] == 0
    p = part(h, "t", 0)
    assert p.replicas == (2, 3, 0, 1) and p.adding_replicas == (2, 3) and p.removing_replicas == (0, 1)
    assert p.leader == 0 and p.isr == (0, 1)
    assert _listed(h) == [
        {
            "name": "t",
            "partitions": [
                {
                    "partition_index": 0,
                    "replicas": [2, 3, 0, 1],
                    "adding_replicas": [2, 3],
                    "removing_replicas": [0, 1],
                }
            ],
        }
    ]
    assert alter(h, "t", 0, [0, 1, 2])["error_code"] == 0  # one new replica caught up: not done yet
    assert is_reassigning(part(h, "t", 0))
    epoch = part(h, "t", 0).leader_epoch
    r = alter(h, "t", 0, [0, 1, 2, 3])  # all caught up: old replicas leave, leadership moves
    assert r["error_code"] == ErrorCode.NEW_LEADER_ELECTED
    p = part(h, "t", 0)
    assert p.replicas == (2, 3) and p.isr == (2, 3) and p.leader == 2 and not is_reassigning(p)
    assert p.leader_epoch == epoch + 1
    assert _listed(h) == []


def test_reassignment_cancel_and_errors() -> None:
    h = ControllerHarness()
    h.start_brokers(3)
    h.create_topic("t", assignments={0: [0, 1]})
    r = _reassign(h, "t", 0, None)
    assert r["error_code"] == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    assert _reassign(h, "t", 0, [0, 9])["error_code"] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert _reassign(h, "x", 0, [0])["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    _reassign(h, "t", 0, [1, 2])
    assert part(h, "t", 0).adding_replicas == (2,)
    assert _reassign(h, "t", 0, None)["error_code"] == 0
    p = part(h, "t", 0)
    assert p.replicas == (1, 0) and not is_reassigning(p) and p.leader == 0  # Kafka's revert keeps this order


def test_reassignment_shrinking_completes_at_once() -> None:
    h = ControllerHarness()
    h.start_brokers(3)
    h.create_topic("t", assignments={0: [0, 1, 2]})
    _reassign(h, "t", 0, [1, 2])
    p = part(h, "t", 0)
    assert p.replicas == (1, 2) and p.isr == (1, 2) and p.leader == 1 and not is_reassigning(p)


# ---- KIP-858: log dirs (AssignReplicasToDirs, offline_log_dirs in heartbeats) ---------------


def test_a_failed_log_dir_moves_only_the_replicas_assigned_to_it() -> None:
    import dataclasses

    from kio.schema.assign_replicas_to_dirs.v0 import request as ard

    from strom.testing.controller import heartbeat_request, registration_request

    h = ControllerHarness()
    a, b = uuid.UUID(int=1 << 100), uuid.UUID(int=2 << 100)
    for broker in range(3):
        h._incarnations[broker] = uuid.uuid4()
        request = registration_request(broker, h._incarnations[broker])
        if broker == 2:
            request = dataclasses.replace(request, log_dirs=(a, b))
        h.commit(h.controller.register_broker(request, h.next_offset, h.now_ms))
    for broker in range(3):
        h.heartbeat(broker)
    assert h.controller.cluster.registration(2).directories == (a, b)  # type: ignore[union-attr]
    h.create_topic("t", 4, 3)
    tid = topic_id(h, "t")

    def assign(epoch: int, dirs: dict[uuid.UUID, list[int]], topic: uuid.UUID = tid) -> dict[str, Any]:
        request = ard.AssignReplicasToDirsRequest(
            broker_id=i32(2), broker_epoch=i64(epoch),  # type: ignore[arg-type]
            directories=tuple(ard.DirectoryData(id_=d, topics=(ard.TopicData(topic_id=topic, partitions=tuple(
                ard.PartitionData(partition_index=i32(p)) for p in ps)),)) for d, ps in dirs.items()))
        result: dict[str, Any] = h.commit(h.controller.assign_replicas_to_dirs(request))
        return result

    assert assign(h.epoch(2) + 1, {a: [0]})["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    unknown = assign(h.epoch(2), {a: [0]}, topic=uuid.uuid4())
    assert unknown["directories"][0]["topics"][0]["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID
    ok = assign(h.epoch(2), {a: [0, 1], b: [2, 3]})
    assert ok["error_code"] == 0
    assert all(p["error_code"] == 0 for d in ok["directories"] for t in d["topics"] for p in t["partitions"])
    assert [part(h, "t", p).directory(2) for p in range(4)] == [a, a, b, b]
    assert part(h, "t", 0).directory(0) == uuid.UUID(int=0)  # the others: UNASSIGNED
    leaders_before = {p: part(h, "t", p).leader for p in range(4)}

    request = dataclasses.replace(heartbeat_request(2, h.epoch(2), h.next_offset), offline_log_dirs=(b,))
    h.commit(h.controller.broker_heartbeat(request, h.now_ms))
    for p in (2, 3):  # in the failed dir: out of the ISR, leadership moved
        assert 2 not in part(h, "t", p).isr and part(h, "t", p).leader not in (2, -1)
    for p in (0, 1):  # in the healthy dir: untouched
        assert 2 in part(h, "t", p).isr and part(h, "t", p).leader == leaders_before[p]
    assert h.controller.cluster.registration(2).directories == (a,)  # type: ignore[union-attr]
    again = h.controller.broker_heartbeat(
        dataclasses.replace(heartbeat_request(2, h.epoch(2), h.next_offset), offline_log_dirs=(b,)), h.now_ms)
    assert again.records == []  # once per failed dir
    assert not h.controller.cluster.registration(2).fenced  # type: ignore[union-attr]
