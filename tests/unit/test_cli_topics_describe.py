"""``strom topics describe``: Leader/Replicas/Isr per partition, ongoing reassignments, and
kafka-topics.sh's report options (under-replicated, unavailable, under/at min ISR)."""

from __future__ import annotations

import pytest

from strom.cli.formatting import PartitionFilter, describe_lines
from strom.cli.main import build_parser
from strom.client.client import PartitionMetadata, TopicMetadata

TOPIC = TopicMetadata(
    "t",
    {
        0: PartitionMetadata(0, 1, (1, 2, 3), (1, 2, 3)),
        1: PartitionMetadata(1, 2, (2, 3, 1), (2,)),  # under-replicated, below min ISR 2
        2: PartitionMetadata(2, -1, (3, 1, 2), (3,)),  # no leader
        3: PartitionMetadata(3, 4, (4, 1, 2), (4, 1)),  # leader 4 is not live; at min ISR 2
    },
)
LIVE = {1, 2, 3}


def partitions(lines: list[str]) -> list[int]:
    return [int(line.split("\tPartition: ")[1].split("\t")[0]) for line in lines if line.startswith("\t")]


def test_every_partition_with_leader_replicas_isr() -> None:
    lines = describe_lines(TOPIC, {"retention.ms": "1"})
    assert lines[0].startswith("Topic: t\tTopicId: ") and lines[0].endswith(
        "PartitionCount: 4\tReplicationFactor: 3\tConfigs: retention.ms=1"
    )
    assert lines[1] == "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3"
    assert lines[3] == "\tTopic: t\tPartition: 2\tLeader: none\tReplicas: 3,1,2\tIsr: 3"


def test_ongoing_reassignment_shows_adding_and_removing() -> None:
    lines = describe_lines(TOPIC, {}, {1: ((1,), (3,))})
    assert lines[2] == (
        "\tTopic: t\tPartition: 1\tLeader: 2\tReplicas: 2,3,1\tIsr: 2"
        "\tAdding Replicas: 1\tRemoving Replicas: 3"
    )
    assert "Adding" not in lines[1]


@pytest.mark.parametrize(
    ("only", "expected"),
    [
        (PartitionFilter(under_replicated=True), [1, 2, 3]),
        (PartitionFilter(unavailable=True), [2, 3]),
        (PartitionFilter(under_min_isr=True), [1, 2]),
        (PartitionFilter(at_min_isr=True), [3]),
        (PartitionFilter(unavailable=True, at_min_isr=True), [2, 3]),
    ],
)
def test_report_options_select_partitions_and_drop_the_topic_line(
    only: PartitionFilter, expected: list[int]
) -> None:
    lines = describe_lines(TOPIC, {}, only=only, live_brokers=LIVE, min_isr=2)
    assert all(line.startswith("\t") for line in lines)
    assert partitions(lines) == expected


def test_report_flags_parse() -> None:
    a = build_parser().parse_args(
        ["topics", "describe", "--under-replicated-partitions", "--at-min-isr-partitions"]
    )
    assert (a.under_replicated_partitions, a.unavailable_partitions, a.at_min_isr_partitions) == (
        True,
        False,
        True,
    )
