"""``strom leader-election`` — Kafka's ``kafka-leader-election.sh`` (ElectLeaders, API 43).

``--election-type PREFERRED|UNCLEAN`` (case-insensitive) and exactly one of ``--topic T
--partition P``, ``--all-topic-partitions`` (the controller picks every eligible partition) or
``--path-to-json-file F`` with ``{"partitions": [{"topic": "foo", "partition": 1}]}``.

Output as Kafka's: "Successfully completed leader election (PREFERRED) for partitions foo-0,
foo-1", "Valid replica already elected for partitions ..." (ELECTION_NOT_NEEDED) and one
"Error completing leader election (PREFERRED) for partition: foo-2: ..." line per failure, after
which the command exits 1 ("N replica(s) could not be elected").

Parsing and rendering are pure; the command is thin. Error contract as :mod:`strom.cli.commands`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from strom.cli.commands import CommandError, _client
from strom.client.cluster_admin import ELECTION_TYPES, TopicPartition, elect_leaders, tp_str
from strom.client.errors import KafkaConnectionError, KafkaError

__all__ = ["add_parser", "election_lines", "leader_election", "parse_election_json", "partitions_of"]


def add_parser(sub: Any, add_bootstrap: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "leader-election", help="elect preferred or unclean leaders (like kafka-leader-election.sh)"
    )
    add_bootstrap(p)
    p.add_argument(
        "--admin.config",
        dest="command_config_legacy",
        metavar="FILE",
        help="(deprecated) same as --command-config",
    )
    p.add_argument(
        "--election-type",
        type=str.upper,
        choices=tuple(ELECTION_TYPES),
        help="PREFERRED: move leadership back to the first replica; UNCLEAN: elect a replica out "
        "of the ISR for a partition without a leader",
    )
    p.add_argument("--topic", help="the topic (with --partition)")
    p.add_argument("--partition", type=int, help="the partition (with --topic)")
    p.add_argument("--all-topic-partitions", action="store_true", help="every eligible partition")
    p.add_argument(
        "--path-to-json-file", metavar="FILE", help='{"partitions": [{"topic": "foo", "partition": 1}]}'
    )
    p.add_argument(
        "--timeout", type=int, default=30_000, metavar="MS", help="election timeout (default 30000)"
    )


def parse_election_json(text: str) -> list[TopicPartition]:
    try:
        js = json.loads(text)
    except json.JSONDecodeError as e:
        raise CommandError(f"Replica election data is not valid JSON: {e}") from None
    if not isinstance(js, dict):
        raise CommandError("Replica election data is empty")
    if "partitions" not in js:
        raise CommandError('Replica election data is missing "partitions" field')
    entries = js["partitions"]
    if not isinstance(entries, list):
        raise CommandError('"partitions" must be a list')
    out: list[TopicPartition] = []
    for entry in entries:
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("topic"), str)
            or not isinstance(entry.get("partition"), int)
            or isinstance(entry.get("partition"), bool)
        ):
            raise CommandError(
                f'each partition needs a "topic" string and a "partition" integer: {json.dumps(entry)}'
            )
        out.append((entry["topic"], entry["partition"]))
    dups = sorted({tp for tp in out if out.count(tp) > 1})
    if dups:
        raise CommandError(
            "Replica election data contains duplicate partitions: " + ",".join(map(tp_str, dups))
        )
    return out


def partitions_of(args: argparse.Namespace) -> list[TopicPartition] | None:
    """The partitions to elect (``None``: all), after Kafka's option checks."""
    if args.election_type is None:
        raise CommandError("Missing required option(s): election-type", 2)
    chosen = [args.topic is not None, args.all_topic_partitions, args.path_to_json_file is not None]
    if sum(chosen) != 1:
        raise CommandError(
            "One and only one of the following options is required: "
            "topic, all-topic-partitions, path-to-json-file",
            2,
        )
    if args.topic is not None and args.partition is None:
        raise CommandError("Missing required option(s): partition", 2)
    if args.topic is None and args.partition is not None:
        raise CommandError("Option partition is only allowed if topic is used", 2)
    if args.topic is not None:
        return [(args.topic, args.partition)]
    if args.path_to_json_file is not None:
        try:
            text = Path(args.path_to_json_file).read_text()
        except OSError as e:
            raise CommandError(f"cannot read {args.path_to_json_file}: {e.strerror or e}") from None
        return parse_election_json(text)
    return None


def election_lines(
    election_type: str, results: Mapping[TopicPartition, KafkaError | None]
) -> tuple[list[str], int]:
    """Kafka's output lines and the number of failed partitions."""
    succeeded = sorted(tp for tp, e in results.items() if e is None)
    noop = sorted(
        tp for tp, e in results.items() if e is not None and e.code == ErrorCode.election_not_needed
    )
    failed = sorted(
        tp for tp, e in results.items() if e is not None and e.code != ErrorCode.election_not_needed
    )
    lines = []
    if succeeded:
        lines.append(
            f"Successfully completed leader election ({election_type}) for partitions "
            + ", ".join(map(tp_str, succeeded))
        )
    if noop:
        lines.append("Valid replica already elected for partitions " + ", ".join(map(tp_str, noop)))
    for tp in failed:
        lines.append(
            f"Error completing leader election ({election_type}) for partition: {tp_str(tp)}: {results[tp]}"
        )
    return lines, len(failed)


async def leader_election(args: argparse.Namespace) -> int:
    if args.command_config_legacy and not args.command_config:
        args.command_config = args.command_config_legacy
    partitions = partitions_of(args)
    client = _client(args)
    try:
        async with client:
            results = await elect_leaders(client, args.election_type, partitions, timeout_ms=args.timeout)
    except KafkaConnectionError as e:
        raise CommandError(e.message or str(e)) from None
    lines, failed = election_lines(args.election_type, results)
    for line in lines:
        print(line)
    if failed:
        raise CommandError(f"{failed} replica(s) could not be elected")
    return 0
