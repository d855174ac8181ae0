"""``strom reassign-partitions`` — Kafka's ``kafka-reassign-partitions.sh``.

Actions, exactly one of:

* ``--generate --topics-to-move-json-file F --broker-list 1,2,3``: reads
  ``{"version": 1, "topics": [{"topic": "foo"}]}``, prints the current assignment of those topics
  and a proposed one over the listed brokers. As in Kafka the proposal is computed here, in the
  client, with the classic ``AdminUtils.assignReplicasToBrokers`` algorithm (see
  :func:`assign_replicas_to_brokers`); nothing is changed on the cluster.
* ``--execute --reassignment-json-file F``: reads
  ``{"version": 1, "partitions": [{"topic": "foo", "partition": 0, "replicas": [1, 2],
  "log_dirs": ["any", "any"]}]}``, prints the current assignment of those partitions (to save
  for a rollback) and starts the reassignments (AlterPartitionReassignments). Refused while other
  reassignments run unless ``--additional``.
* ``--verify --reassignment-json-file F``: for each partition, "is completed", "is still in
  progress" (ListPartitionReassignments lists it) or "There is no active reassignment ... but
  replica set is X rather than Y".
* ``--cancel --reassignment-json-file F``: cancels the listed reassignments still running.
* ``--list``: the ongoing reassignments.

JSON is printed as Kafka's Jackson prints it (compact, keys in Kafka's order, partitions sorted by
topic then partition). Gaps, refused with a one-line message rather than silently ignored:
``--throttle``/``--replica-alter-log-dirs-throttle`` (strom has no replication quotas yet) and
``log_dirs`` other than ``"any"`` (moves between a broker's log directories). Because no throttle
is ever set, ``--verify`` has none to clear and prints no "Clearing ... throttles" lines.

The JSON parsing, validation, placement and state rendering are pure functions tested without a
broker. Error contract as :mod:`strom.cli.commands`.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from strom.cli.commands import CommandError, _client
from strom.client.client import Client
from strom.client.cluster_admin import (
    PartitionReassignment,
    TopicPartition,
    alter_partition_reassignments,
    describe_cluster,
    list_partition_reassignments,
    tp_str,
)
from strom.client.errors import KafkaConnectionError, KafkaError

__all__ = [
    "ANY_LOG_DIR",
    "CANNOT_EXECUTE_MESSAGE",
    "ReassignmentState",
    "add_parser",
    "assign_replicas_to_brokers",
    "calculate_assignment",
    "current_reassignments_text",
    "format_reassignment_json",
    "parse_broker_list",
    "parse_reassignment_json",
    "parse_topics_to_move",
    "reassign_partitions",
    "states_text",
    "validate_execute",
]

ANY_LOG_DIR = "any"
ACTIONS = ("generate", "execute", "verify", "cancel", "list")
CANNOT_EXECUTE_MESSAGE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to "
    "override this and create a new partition assignment in addition to the existing one. The "
    "--additional flag can also be used to change the throttle by resubmitting the current "
    "reassignment."
)


def add_parser(sub: Any, add_bootstrap: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "reassign-partitions", help="move partitions between brokers (like kafka-reassign-partitions.sh)"
    )
    add_bootstrap(p)
    for action in ACTIONS:
        p.add_argument(f"--{action}", dest=f"do_{action}", action="store_true")
    p.add_argument(
        "--topics-to-move-json-file", metavar="FILE", help='generate: {"topics": [{"topic": "foo"}]}'
    )
    p.add_argument("--broker-list", metavar="1,2,3", help="generate: brokers to place replicas on")
    p.add_argument("--reassignment-json-file", metavar="FILE", help="execute/verify/cancel: the reassignment")
    p.add_argument("--disable-rack-aware", action="store_true", help="generate: ignore broker.rack")
    p.add_argument("--additional", action="store_true", help="execute: even if reassignments are running")
    p.add_argument("--preserve-throttles", action="store_true", help="verify/cancel: accepted (no throttles)")
    p.add_argument("--throttle", type=int, default=-1, metavar="B/s", help="not supported (refused)")
    p.add_argument(
        "--replica-alter-log-dirs-throttle", type=int, default=-1, metavar="B/s", help="not supported"
    )
    p.add_argument(
        "--timeout", type=int, default=10_000, metavar="MS", help="execute/cancel: request timeout"
    )


# ---------------------------------------------------------------------------- JSON


def _load_json(text: str) -> dict[str, Any]:
    try:
        js = json.loads(text)
    except json.JSONDecodeError as e:
        raise CommandError(f"The input string is not a valid JSON: {e}") from None
    if not isinstance(js, dict):
        raise CommandError("The input JSON is not an object")
    version = js.get("version", 1)
    if version != 1:
        raise CommandError(f"Not supported version field value {version}")
    return js


def _str(v: object, what: str) -> str:
    if not isinstance(v, str):
        raise CommandError(f"{what} must be a string, not {json.dumps(v)}")
    return v


def _int(v: object, what: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise CommandError(f"{what} must be an integer, not {json.dumps(v)}")
    return v


def _list(v: object, what: str) -> list[Any]:
    if not isinstance(v, list):
        raise CommandError(f"{what} must be a list, not {json.dumps(v)}")
    return v


def parse_topics_to_move(text: str) -> list[str]:
    """The topics of a ``--topics-to-move-json-file`` (duplicates refused, as Kafka)."""
    js = _load_json(text)
    topics = []
    for entry in _list(js.get("topics", []), '"topics"'):
        if not isinstance(entry, dict) or "topic" not in entry:
            raise CommandError(f'each of "topics" needs a "topic": {json.dumps(entry)}')
        topics.append(_str(entry["topic"], '"topic"'))
    dups = sorted(t for t, n in Counter(topics).items() if n > 1)
    if dups:
        raise CommandError(f"List of topics to reassign contains duplicate entries: {', '.join(dups)}")
    return topics


def parse_broker_list(text: str) -> list[int]:
    try:
        brokers = [int(b) for b in text.split(",")]
    except ValueError:
        raise CommandError(f"--broker-list {text!r} is not a comma-separated list of broker ids", 2) from None
    dups = sorted(b for b, n in Counter(brokers).items() if n > 1)
    if dups:
        raise CommandError(f"Broker list contains duplicate entries: {', '.join(map(str, dups))}")
    return brokers


def parse_reassignment_json(
    text: str,
) -> tuple[list[tuple[TopicPartition, list[int]]], dict[tuple[str, int, int], str]]:
    """``(partitions with target replicas in file order, {(topic, partition, broker): log dir})``
    of a ``--reassignment-json-file``; log dirs ``"any"`` are left out of the second part."""
    js = _load_json(text)
    parts: list[tuple[TopicPartition, list[int]]] = []
    dirs: dict[tuple[str, int, int], str] = {}
    for entry in _list(js.get("partitions", []), '"partitions"'):
        if not isinstance(entry, dict):
            raise CommandError(f'each of "partitions" must be an object: {json.dumps(entry)}')
        for key in ("topic", "partition", "replicas"):
            if key not in entry:
                raise CommandError(f'a partition needs "{key}": {json.dumps(entry)}')
        topic = _str(entry["topic"], '"topic"')
        partition = _int(entry["partition"], '"partition"')
        replicas = [_int(r, '"replicas"') for r in _list(entry["replicas"], '"replicas"')]
        log_dirs = [
            _str(d, '"log_dirs"')
            for d in _list(entry.get("log_dirs", [ANY_LOG_DIR] * len(replicas)), '"log_dirs"')
        ]
        if len(log_dirs) != len(replicas):
            raise CommandError(
                f"Size of replicas list {replicas} is different from size of log dirs list "
                f"{log_dirs} for partition {topic}-{partition}"
            )
        parts.append(((topic, partition), replicas))
        for r, d in zip(replicas, log_dirs, strict=True):
            if d != ANY_LOG_DIR:
                dirs[(topic, partition, r)] = d
    return parts, dirs


def validate_execute(parts: Sequence[tuple[TopicPartition, list[int]]]) -> dict[TopicPartition, list[int]]:
    """Kafka's checks before ``--execute``: not empty, no empty replica list, no partition twice,
    no broker twice in one replica list."""
    if not parts:
        raise CommandError("Partition reassignment list cannot be empty")
    if any(not replicas for _, replicas in parts):
        raise CommandError("Partition replica list cannot be empty")
    dup_parts = sorted(tp for tp, n in Counter(tp for tp, _ in parts).items() if n > 1)
    if dup_parts:
        raise CommandError(
            "Partition reassignment contains duplicate topic partitions: " + ",".join(map(tp_str, dup_parts))
        )
    dup_msgs = []
    for tp, replicas in parts:
        dups = sorted(b for b, n in Counter(replicas).items() if n > 1)
        if dups:
            dup_msgs.append(f"{tp_str(tp)} contains multiple entries for {','.join(map(str, dups))}")
    if dup_msgs:
        raise CommandError(
            "Partition replica lists may not contain duplicate entries: " + ". ".join(dup_msgs)
        )
    return dict(parts)


def format_reassignment_json(
    assignment: Mapping[TopicPartition, Sequence[int]],
    log_dirs: Mapping[tuple[str, int, int], str] | None = None,
) -> str:
    """Kafka's ``formatAsReassignmentJson``: compact, partitions sorted."""
    dirs = log_dirs or {}
    partitions = [
        {
            "topic": tp[0],
            "partition": tp[1],
            "replicas": list(assignment[tp]),
            "log_dirs": [dirs.get((tp[0], tp[1], r), ANY_LOG_DIR) for r in assignment[tp]],
        }
        for tp in sorted(assignment)
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


# ---------------------------------------------------------------------------- placement


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def _rack_alternated(brokers: Mapping[int, str]) -> list[int]:
    """Brokers ordered rack by rack, one at a time (racks sorted, ids sorted within a rack):
    ``{1: a, 2: a, 3: b}`` -> ``[1, 3, 2]``."""
    by_rack: dict[str, list[int]] = {}
    for b, rack in sorted(brokers.items()):
        by_rack.setdefault(rack, []).append(b)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    i = 0
    while len(out) < len(brokers):
        q = queues[i % len(queues)]
        if q:
            out.append(q.pop(0))
        i += 1
    return out


def assign_replicas_to_brokers(
    brokers: Sequence[tuple[int, str | None]],
    n_partitions: int,
    replication_factor: int,
    rnd: random.Random,
    *,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
) -> dict[int, list[int]]:
    """Kafka's ``AdminUtils.assignReplicasToBrokers`` (the tool's client-side placement).

    Rack-unaware (no broker has a rack): partition ``p``'s first replica is broker
    ``(p + start) % n`` of the id-sorted list; the others follow at a shift that grows by one
    after every ``n`` partitions, so leaders and followers spread evenly. Rack-aware (every
    broker has a rack): the same walk over a list alternating racks, skipping a broker while a
    rack without a replica of this partition, or a broker without one, remains. ``start`` and the
    initial shift are random unless ``fixed_start_index`` is given.
    """
    if n_partitions <= 0:
        raise CommandError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise CommandError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise CommandError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}."
        )
    racks = {b: r for b, r in brokers if r is not None}
    if racks and len(racks) != len(brokers):
        raise CommandError("Not all brokers have rack information for replica rack aware assignment.")
    order = _rack_alternated(racks) if racks else sorted(b for b, _ in brokers)
    n = len(order)
    start = fixed_start_index if fixed_start_index >= 0 else rnd.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rnd.randrange(n)
    n_racks = len(set(racks.values()))
    out: dict[int, list[int]] = {}
    p = max(0, start_partition_id)
    for _ in range(n_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [order[first]]
        if not racks:
            replicas += [order[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        else:
            racks_used = {racks[order[first]]}
            k = 0
            while len(replicas) < replication_factor:
                b = order[_replica_index(first, shift * n_racks, k, n)]
                k += 1
                rack_ok = racks[b] not in racks_used or len(racks_used) == n_racks
                broker_ok = b not in replicas or len(replicas) == n
                if rack_ok and broker_ok:
                    replicas.append(b)
                    racks_used.add(racks[b])
        out[p] = replicas
        p += 1
    return out


def calculate_assignment(
    current: Mapping[TopicPartition, Sequence[int]],
    brokers: Sequence[tuple[int, str | None]],
    rnd: random.Random,
) -> dict[TopicPartition, list[int]]:
    """A proposal per topic: as many partitions as it has, at the replication factor of its
    first listed partition, placed over ``brokers``."""
    by_topic: dict[str, list[tuple[int, Sequence[int]]]] = {}
    for (topic, p), replicas in current.items():
        by_topic.setdefault(topic, []).append((p, replicas))
    out: dict[TopicPartition, list[int]] = {}
    for topic, parts in sorted(by_topic.items()):
        rf = len(parts[0][1])
        for p, replicas in assign_replicas_to_brokers(brokers, len(parts), rf, rnd).items():
            out[(topic, p)] = replicas
    return out


# ---------------------------------------------------------------------------- verify


@dataclass(frozen=True)
class ReassignmentState:
    current: tuple[int, ...]
    target: tuple[int, ...]
    done: bool


def reassignment_states(
    targets: Sequence[tuple[TopicPartition, list[int]]],
    ongoing: Mapping[TopicPartition, PartitionReassignment],
    replicas_now: Mapping[TopicPartition, Sequence[int]],
) -> dict[TopicPartition, ReassignmentState]:
    """Each target's state: still in progress while listed as ongoing, else done with the
    partition's replica set now (empty when the partition does not exist)."""
    out = {}
    for tp, target in targets:
        if tp in ongoing:
            out[tp] = ReassignmentState(ongoing[tp].replicas, tuple(target), False)
        else:
            out[tp] = ReassignmentState(tuple(replicas_now.get(tp, ())), tuple(target), True)
    return out


def states_text(states: Mapping[TopicPartition, ReassignmentState]) -> list[str]:
    lines = ["Status of partition reassignment:"]
    for tp in sorted(states):
        s = states[tp]
        if not s.done:
            lines.append(f"Reassignment of partition {tp_str(tp)} is still in progress.")
        elif s.current == s.target:
            lines.append(f"Reassignment of partition {tp_str(tp)} is completed.")
        else:
            lines.append(
                f"There is no active reassignment of partition {tp_str(tp)}, but replica set is "
                f"{','.join(map(str, s.current))} rather than {','.join(map(str, s.target))}."
            )
    return lines


def current_reassignments_text(ongoing: Mapping[TopicPartition, PartitionReassignment]) -> list[str]:
    """``--list`` output."""
    if not ongoing:
        return ["No partition reassignments found."]
    lines = ["Current partition reassignments:"]
    for tp in sorted(ongoing):
        r = ongoing[tp]
        line = f"{tp_str(tp)}: replicas: {','.join(map(str, r.replicas))}."
        if r.adding:
            line += f" adding: {','.join(map(str, r.adding))}."
        if r.removing:
            line += f" removing: {','.join(map(str, r.removing))}."
        lines.append(line)
    return lines


# ---------------------------------------------------------------------------- commands


def _action(args: argparse.Namespace) -> str:
    chosen = [a for a in ACTIONS if getattr(args, f"do_{a}")]
    if len(chosen) != 1:
        raise CommandError(
            "Command must include exactly one action: " + ", ".join(f"--{a}" for a in ACTIONS), 2
        )
    action = chosen[0]
    required = {
        "generate": ("topics_to_move_json_file", "broker_list"),
        "execute": ("reassignment_json_file",),
        "verify": ("reassignment_json_file",),
        "cancel": ("reassignment_json_file",),
        "list": (),
    }[action]
    for name in required:
        if getattr(args, name) is None:
            raise CommandError(f'Missing required argument "[{name.replace("_", "-")}]"', 2)
    if args.throttle >= 0 or args.replica_alter_log_dirs_throttle >= 0:
        raise CommandError(
            "--throttle and --replica-alter-log-dirs-throttle are not supported: strom has no "
            "replication quotas yet; run without them",
            2,
        )
    return action


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise CommandError(f"cannot read {path}: {e.strerror or e}") from None


async def _replicas_of(client: Client, topics: Sequence[str]) -> dict[TopicPartition, list[int]]:
    md = await client.metadata(list(dict.fromkeys(topics)))
    out: dict[TopicPartition, list[int]] = {}
    for name in topics:
        t = md.topics.get(name)
        if t is None or t.error_code == ErrorCode.unknown_topic_or_partition:
            raise CommandError(f"Topic {name} not found.")
        if t.error_code:
            raise KafkaError(t.error_code, f"topic {name!r}")
        for p in t.partitions.values():
            out[(name, p.partition)] = list(p.replicas)
    return out


async def reassign_partitions(args: argparse.Namespace, rnd: random.Random | None = None) -> int:
    action = _action(args)
    client = _client(args)
    try:
        async with client:
            if action == "generate":
                return await _generate(client, args, rnd or random.Random())
            if action == "execute":
                return await _execute(client, args)
            if action == "verify":
                return await _verify(client, args)
            if action == "cancel":
                return await _cancel(client, args)
            for line in current_reassignments_text(await list_partition_reassignments(client)):
                print(line)
            return 0
    except KafkaConnectionError as e:
        raise CommandError(e.message or str(e)) from None


async def _generate(client: Client, args: argparse.Namespace, rnd: random.Random) -> int:
    wanted = parse_broker_list(args.broker_list)
    topics = parse_topics_to_move(_read(args.topics_to_move_json_file))
    current = await _replicas_of(client, topics)
    desc = await describe_cluster(client, include_fenced_brokers=False)
    brokers = [
        (b.node_id, None if args.disable_rack_aware else b.rack) for b in desc.brokers if b.node_id in wanted
    ]
    rackless = sum(1 for _, r in brokers if r is None)
    if 0 < rackless < len(brokers):
        raise CommandError(
            "Not all brokers have rack information. Add --disable-rack-aware in command line to "
            "make replica assignment without rack information."
        )
    proposed = calculate_assignment(current, brokers, rnd)
    print("Current partition replica assignment")
    print(format_reassignment_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(format_reassignment_json(proposed))
    return 0


async def _execute(client: Client, args: argparse.Namespace) -> int:
    parts, dirs = parse_reassignment_json(_read(args.reassignment_json_file))
    proposed = validate_execute(parts)
    if dirs:
        raise CommandError(
            'log_dirs other than "any" (moving replicas between log directories) are not supported by strom'
        )
    ongoing = await list_partition_reassignments(client, timeout_ms=args.timeout)
    if ongoing and not args.additional:
        raise CommandError(CANNOT_EXECUTE_MESSAGE)
    # as Kafka: the brokers DescribeCluster lists by default, i.e. not fenced ones
    known = {b.node_id for b in (await describe_cluster(client, include_fenced_brokers=False)).brokers}
    for replicas in proposed.values():
        for b in replicas:
            if b not in known:
                raise CommandError(f"Unknown broker id {b}")
    current_all = await _replicas_of(client, [t for t, _ in proposed])
    missing = sorted(tp for tp in proposed if tp not in current_all)
    if missing:
        raise CommandError("Unable to find partition: " + ", ".join(map(tp_str, missing)))
    current = {tp: current_all[tp] for tp in proposed}
    print("Current partition replica assignment")
    print()
    print(format_reassignment_json(current))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    results = await alter_partition_reassignments(
        client, dict(proposed), timeout_ms=args.timeout
    )
    errors = {tp: e for tp, e in results.items() if e is not None}
    if errors:
        raise CommandError(
            "Error reassigning partition(s): "
            + "; ".join(f"{tp_str(tp)}: {errors[tp]}" for tp in sorted(errors))
        )
    plural = "" if len(proposed) == 1 else "s"
    print(
        f"Successfully started partition reassignment{plural} for {','.join(map(tp_str, sorted(proposed)))}"
    )
    return 0


async def _verify(client: Client, args: argparse.Namespace) -> int:
    parts, _dirs = parse_reassignment_json(_read(args.reassignment_json_file))
    ongoing = await list_partition_reassignments(client)
    not_found = [t for (t, p), _ in parts if (t, p) not in ongoing]
    replicas_now: dict[TopicPartition, list[int]] = {}
    if not_found:
        md = await client.metadata(list(dict.fromkeys(not_found)))
        for t in md.topics.values():
            for p in t.partitions.values():
                replicas_now[(t.name, p.partition)] = list(p.replicas)
    for line in states_text(reassignment_states(parts, ongoing, replicas_now)):
        print(line)
    print()  # Kafka prints the (here always empty) log-dir move states after a newline
    return 0


async def _cancel(client: Client, args: argparse.Namespace) -> int:
    parts, _dirs = parse_reassignment_json(_read(args.reassignment_json_file))
    targets = [tp for tp, _ in parts]
    ongoing = await list_partition_reassignments(client, targets)
    cancel = sorted(tp for tp, r in ongoing.items() if not r.adding or r.removing)
    if cancel:
        results = await alter_partition_reassignments(client, dict.fromkeys(cancel), timeout_ms=args.timeout)
        errors = {tp: e for tp, e in results.items() if e is not None}
        if errors:
            plural = "" if len(errors) == 1 else "s"
            raise CommandError(
                f"Error cancelling partition reassignment{plural} for: "
                + "; ".join(f"{tp_str(tp)}: {errors[tp]}" for tp in sorted(errors))
            )
        plural = "" if len(cancel) == 1 else "s"
        print(f"Successfully cancelled partition reassignment{plural} for: {','.join(map(tp_str, cancel))}")
    else:
        print("None of the specified partition reassignments are active.")
    return 0
