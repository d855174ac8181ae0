"""``strom leader-election``: option checks, the JSON file and Kafka's result lines."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from strom.cli.commands import CommandError
from strom.cli.leader_election import election_lines, parse_election_json, partitions_of
from strom.cli.main import build_parser, run
from strom.client.errors import KafkaError


def args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["leader-election", "--bootstrap-server", "h:1", *argv])


def test_election_type_is_case_insensitive_and_checked() -> None:
    assert args("--election-type", "preferred", "--all-topic-partitions").election_type == "PREFERRED"
    assert args("--election-type", "UNCLEAN", "--all-topic-partitions").election_type == "UNCLEAN"
    with pytest.raises(SystemExit):
        args("--election-type", "random")


def test_partitions_of(tmp_path: Path) -> None:
    assert partitions_of(args("--election-type", "preferred", "--all-topic-partitions")) is None
    assert partitions_of(args("--election-type", "preferred", "--topic", "t", "--partition", "3")) == [
        ("t", 3)
    ]
    f = tmp_path / "e.json"
    f.write_text('{"partitions": [{"topic": "a", "partition": 1}, {"topic": "b", "partition": 0}]}')
    got = partitions_of(args("--election-type", "unclean", "--path-to-json-file", str(f)))
    assert got == [("a", 1), ("b", 0)]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--all-topic-partitions"], "Missing required option(s): election-type"),
        (["--election-type", "preferred"], "One and only one of the following options is required"),
        (["--election-type", "preferred", "--topic", "t", "--all-topic-partitions"], "One and only one"),
        (["--election-type", "preferred", "--topic", "t"], "Missing required option(s): partition"),
        (
            ["--election-type", "preferred", "--all-topic-partitions", "--partition", "1"],
            "only allowed if topic",
        ),
    ],
)
def test_option_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(CommandError) as e:
        partitions_of(args(*argv))
    assert message in str(e.value) and e.value.exit_code == 2
    assert run(["leader-election", "--bootstrap-server", "127.0.0.1:1", *argv]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"partitions": [{"topic": "a", "partition": 1}, {"topic": "a", "partition": 1}]}',
            "duplicate partitions: a-1",
        ),
        ('{"other": []}', 'missing "partitions" field'),
        ('{"partitions": [{"topic": "a"}]}', '"partition" integer'),
        ("[1]", "Replica election data is empty"),
        ("{", "not valid JSON"),
    ],
)
def test_json_errors(text: str, message: str) -> None:
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        parse_election_json(text)


def test_result_lines_like_kafka() -> None:
    results = {
        ("b", 0): None,
        ("a", 1): None,
        ("a", 2): KafkaError(84, "Leader election not needed for topic partition"),
        ("c", 0): KafkaError(80, "Failed to elect leader for partition c-0 under strategy PreferredElection"),
    }
    lines, failed = election_lines("PREFERRED", results)
    assert lines[:2] == [
        "Successfully completed leader election (PREFERRED) for partitions a-1, b-0",
        "Valid replica already elected for partitions a-2",
    ]
    assert lines[2].startswith("Error completing leader election (PREFERRED) for partition: c-0: ")
    assert lines[2].endswith(
        "PREFERRED_LEADER_NOT_AVAILABLE: "
        "Failed to elect leader for partition c-0 under strategy PreferredElection"
    )
    assert failed == 1
    assert election_lines("UNCLEAN", {}) == ([], 0)
