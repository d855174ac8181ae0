"""``strom reassign-partitions``: Kafka's JSON formats, the client-side ``--generate`` placement
(AdminUtils.assignReplicasToBrokers), ``--verify``/``--list`` rendering and option checks."""

from __future__ import annotations

import json
import random

import pytest

from strom.cli.commands import CommandError
from strom.cli.main import run
from strom.cli.reassign import (
    ReassignmentState,
    assign_replicas_to_brokers,
    calculate_assignment,
    current_reassignments_text,
    format_reassignment_json,
    parse_broker_list,
    parse_reassignment_json,
    parse_topics_to_move,
    reassignment_states,
    states_text,
    validate_execute,
)
from strom.client.cluster_admin import PartitionReassignment

# ---------------------------------------------------------------------------- JSON


def test_topics_to_move() -> None:
    assert parse_topics_to_move('{"topics": [{"topic": "a"}, {"topic": "b"}], "version": 1}') == ["a", "b"]
    assert parse_topics_to_move('{"topics": [{"topic": "a"}]}') == ["a"]  # version defaults to 1
    with pytest.raises(CommandError, match="duplicate entries: a"):
        parse_topics_to_move('{"topics": [{"topic": "a"}, {"topic": "a"}]}')
    with pytest.raises(CommandError, match="Not supported version field value 2"):
        parse_topics_to_move('{"version": 2, "topics": []}')
    with pytest.raises(CommandError, match="not a valid JSON"):
        parse_topics_to_move("{nope")


def test_broker_list() -> None:
    assert parse_broker_list("3,1,2") == [3, 1, 2]
    with pytest.raises(CommandError, match="Broker list contains duplicate entries: 1"):
        parse_broker_list("1,2,1")
    with pytest.raises(CommandError, match="comma-separated"):
        parse_broker_list("1,x")


def test_reassignment_json_round_trip_and_log_dirs() -> None:
    text = json.dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": "b", "partition": 1, "replicas": [3, 1], "log_dirs": ["any", "/d1"]},
                {"topic": "a", "partition": 0, "replicas": [1, 2]},
            ],
        }
    )
    parts, dirs = parse_reassignment_json(text)
    assert parts == [(("b", 1), [3, 1]), (("a", 0), [1, 2])]
    assert dirs == {("b", 1, 1): "/d1"}
    out = format_reassignment_json(dict(parts), dirs)
    # Kafka's compact Jackson output, partitions sorted by topic then partition
    assert out == (
        '{"version":1,"partitions":['
        '{"topic":"a","partition":0,"replicas":[1,2],"log_dirs":["any","any"]},'
        '{"topic":"b","partition":1,"replicas":[3,1],"log_dirs":["any","/d1"]}]}'
    )
    assert parse_reassignment_json(out)[0] == sorted(parts)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"topic": "a", "partition": 0, "replicas": [1], "log_dirs": ["any", "any"]},
            "Size of replicas list",
        ),
        ({"topic": "a", "replicas": [1]}, 'needs "partition"'),
        ({"topic": 1, "partition": 0, "replicas": [1]}, '"topic" must be a string'),
        ({"topic": "a", "partition": 0, "replicas": ["1"]}, '"replicas" must be an integer'),
    ],
)
def test_reassignment_json_errors(entry: dict[str, object], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        parse_reassignment_json(json.dumps({"partitions": [entry]}))


def test_validate_execute_like_kafka() -> None:
    with pytest.raises(CommandError, match="Partition reassignment list cannot be empty"):
        validate_execute([])
    with pytest.raises(CommandError, match="Partition replica list cannot be empty"):
        validate_execute([(("a", 0), [])])
    with pytest.raises(CommandError, match="duplicate topic partitions: a-0"):
        validate_execute([(("a", 0), [1]), (("a", 0), [2])])
    with pytest.raises(CommandError, match="a-1 contains multiple entries for 2"):
        validate_execute([(("a", 1), [2, 1, 2])])
    assert validate_execute([(("a", 0), [1, 2])]) == {("a", 0): [1, 2]}


# ---------------------------------------------------------------------------- placement


def test_rack_unaware_placement_matches_kafkas_fixed_start_example() -> None:
    brokers = [(b, None) for b in range(5)]
    got = assign_replicas_to_brokers(brokers, 10, 3, random.Random(0), fixed_start_index=0)
    assert got == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }


def test_rack_aware_placement_alternates_racks() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    got = assign_replicas_to_brokers(list(racks.items()), 7, 3, random.Random(0), fixed_start_index=0)
    assert got == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],
    }


def test_placement_errors() -> None:
    rnd = random.Random(1)
    with pytest.raises(CommandError, match=r"Replication factor: 3 larger than available brokers: 2\."):
        assign_replicas_to_brokers([(1, None), (2, None)], 1, 3, rnd)
    with pytest.raises(CommandError, match=r"Number of partitions must be larger than 0\."):
        assign_replicas_to_brokers([(1, None)], 0, 1, rnd)
    with pytest.raises(CommandError, match="Not all brokers have rack information"):
        assign_replicas_to_brokers([(1, "a"), (2, None)], 1, 1, rnd)


def test_calculate_assignment_keeps_partition_count_and_replication_factor() -> None:
    current = {("a", 0): [1, 2], ("a", 1): [2, 3], ("b", 0): [1]}
    got = calculate_assignment(current, [(4, None), (5, None), (6, None)], random.Random(3))
    assert set(got) == set(current)
    assert all(len(got[tp]) == len(current[tp]) for tp in current)
    assert {b for r in got.values() for b in r} <= {4, 5, 6}


# ---------------------------------------------------------------------------- verify / list


def test_verify_states_and_text() -> None:
    targets = [(("a", 1), [1, 2]), (("a", 0), [2, 3]), (("b", 0), [3]), (("c", 0), [1])]
    ongoing = {("a", 1): PartitionReassignment((1, 2, 3), (1,), (3,))}
    now = {("a", 0): [2, 3], ("b", 0): [1]}
    states = reassignment_states(targets, ongoing, now)
    assert states[("a", 1)] == ReassignmentState((1, 2, 3), (1, 2), False)
    assert states[("c", 0)] == ReassignmentState((), (1,), True)
    assert states_text(states) == [
        "Status of partition reassignment:",
        "Reassignment of partition a-0 is completed.",
        "Reassignment of partition a-1 is still in progress.",
        "There is no active reassignment of partition b-0, but replica set is 1 rather than 3.",
        "There is no active reassignment of partition c-0, but replica set is  rather than 1.",
    ]


def test_list_text() -> None:
    assert current_reassignments_text({}) == ["No partition reassignments found."]
    assert current_reassignments_text(
        {
            ("b", 0): PartitionReassignment((1, 2), (2,), ()),
            ("a", 3): PartitionReassignment((4, 5, 6), (6,), (4,)),
        }
    ) == [
        "Current partition reassignments:",
        "a-3: replicas: 4,5,6. adding: 6. removing: 4.",
        "b-0: replicas: 1,2. adding: 2.",
    ]


# ---------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "exactly one action: --generate, --execute, --verify, --cancel, --list"),
        (["--generate", "--verify"], "exactly one action"),
        (["--generate", "--broker-list", "1"], "topics-to-move-json-file"),
        (["--execute"], "reassignment-json-file"),
        (["--execute", "--reassignment-json-file", "f", "--throttle", "100"], "no replication quotas"),
    ],
)
def test_option_errors_are_one_line_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["reassign-partitions", "--bootstrap-server", "127.0.0.1:1", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_missing_file_is_one_line_exit_1(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "--bootstrap-server",
        "127.0.0.1:1",
        "--verify",
        "--reassignment-json-file",
        "/nonexistent/r.json",
    ]
    assert run(["reassign-partitions", *argv]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot read /nonexistent/r.json" in err[0]
