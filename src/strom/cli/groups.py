"""``strom groups``: list, describe, delete consumer groups and reset their offsets, like
``kafka-consumer-groups.sh`` (same flags, columns and messages), over :mod:`strom.client.groups`.

Works against any Kafka-compatible broker: ListGroups on every broker, DescribeGroups (or
ConsumerGroupDescribe for KIP-848 groups), OffsetFetch and OffsetCommit at the coordinator,
ListOffsets at the partition leaders, DeleteGroups.

Lag: committed offsets are fetched *before* the log end offsets, so with a producer running the
LAG shown is never negative (it is the lag at least as of the moment of the fetch).

Reset: Kafka's rule is kept — offsets are only reset while the group is inactive (``Empty``, or
``Dead``, i.e. unknown); otherwise the command refuses with Kafka's message. ``--dry-run`` is the
default; ``--execute`` commits the new offsets as an admin (generation -1, no member).

Error contract: usage mistakes raise :class:`~strom.cli.commands.CommandError` with exit code 2,
failures with exit code 1; Kafka errors propagate as :class:`~strom.client.errors.KafkaError`.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from strom.cli.commands import CommandError, _client
from strom.client.client import EARLIEST, LATEST, Client
from strom.client.errors import KafkaConnectionError, KafkaError
from strom.client.groups import (
    GroupDescription,
    OffsetAndMetadata,
    commit_offsets,
    delete_groups,
    describe_group,
    fetch_offsets,
    list_groups,
)

__all__ = [
    "ACTIONS",
    "OffsetRow",
    "add_parser",
    "format_table",
    "group_action",
    "groups",
    "parse_datetime",
    "parse_duration",
    "parse_reset_file",
    "parse_topic_spec",
]

ACTIONS = ("list", "describe", "delete", "reset-offsets")
RESET_MODES = (
    "to_earliest",
    "to_latest",
    "to_current",
    "to_offset",
    "shift_by",
    "to_datetime",
    "by_duration",
    "from_file",
)
INACTIVE_STATES = frozenset({"empty", "dead"})  # compared lower-cased
REBALANCING_STATES = frozenset({"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"})

# Kafka's exception messages for the codes these commands meet.
_MESSAGES = {
    int(ErrorCode.non_empty_group): "The group is not empty.",
    int(ErrorCode.group_id_not_found): "The group id does not exist.",
    int(ErrorCode.invalid_group_id): "The configured groupId is invalid.",
    int(ErrorCode.group_authorization_failed): "Not authorized to access group.",
    int(ErrorCode.unknown_member_id): "The coordinator is not aware of this member.",
    int(ErrorCode.rebalance_in_progress): "The group is rebalancing, so a rejoin is needed.",
}


def kafka_message(e: KafkaError) -> str:
    return f"{e.name}: {_MESSAGES.get(e.code, e.message or '')}".rstrip(": ")


# ---------------------------------------------------------------------------- parser


def add_parser(sub: Any, add_bootstrap: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``strom groups`` on the subparsers ``sub`` of the ``strom`` parser."""
    p = sub.add_parser(
        "groups",
        help="list, describe, delete consumer groups, reset offsets (like kafka-consumer-groups.sh)",
        description="List, describe and delete consumer groups and reset their committed offsets, "
        "with kafka-consumer-groups.sh's flags and output. Offsets can only be reset while the "
        "group is inactive (no member); --dry-run is the default, --execute applies.",
    )
    add_bootstrap(p)
    p.add_argument("action", nargs="?", choices=ACTIONS)
    p.add_argument("--list", dest="flag_list", action="store_true", help="same as 'list'")
    p.add_argument("--describe", dest="flag_describe", action="store_true", help="same as 'describe'")
    p.add_argument("--delete", dest="flag_delete", action="store_true", help="same as 'delete'")
    p.add_argument(
        "--reset-offsets", dest="flag_reset_offsets", action="store_true", help="same as 'reset-offsets'"
    )
    p.add_argument("--group", action="append", default=[], metavar="GROUP", help="group id (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="every consumer group")
    p.add_argument(
        "--state",
        nargs="?",
        const="",
        default=None,
        metavar="STATE[,STATE]",
        help="list: show the STATE column, or only groups in these states; "
        "describe: the group's coordinator, assignor, state and member count",
    )
    p.add_argument(
        "--type",
        dest="group_type",
        nargs="?",
        const="",
        default=None,
        metavar="TYPE[,TYPE]",
        help="list: show the TYPE column, or only groups of these types (classic, consumer)",
    )
    p.add_argument("--members", action="store_true", help="describe: the members and their partitions")
    p.add_argument("--offsets", action="store_true", help="describe: offsets and lag (the default view)")
    p.add_argument("--verbose", action="store_true", help="describe --members: show each assignment")
    p.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="TOPIC[:P,P...]",
        help="reset-offsets: this topic (all partitions, or the listed ones); repeatable",
    )
    p.add_argument(
        "--all-topics", action="store_true", help="reset-offsets: every topic the group has offsets for"
    )
    modes = p.add_argument_group("reset-offsets target (exactly one)")
    modes.add_argument("--to-earliest", action="store_true", help="the earliest offset")
    modes.add_argument("--to-latest", action="store_true", help="the log end offset")
    modes.add_argument("--to-current", action="store_true", help="the committed offset (else log end)")
    modes.add_argument("--to-offset", type=int, metavar="N", help="offset N (kept within the log)")
    modes.add_argument(
        "--shift-by",
        type=int,
        metavar="N",
        help="committed offset + N (N may be negative; kept within the log)",
    )
    modes.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS.sss[TZ]",
        help="first offset at or after this time (local time unless a zone like Z or +02:00 is given)",
    )
    modes.add_argument(
        "--by-duration", metavar="PnDTnHnMnS", help="first offset at or after now minus this duration"
    )
    modes.add_argument(
        "--from-file",
        metavar="CSV",
        help="offsets from a CSV file: 'topic,partition,offset' lines (or 'group,topic,partition,offset')",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="reset-offsets: only show the new offsets (default)"
    )
    p.add_argument("--execute", action="store_true", help="reset-offsets: commit the new offsets")
    p.add_argument("--export", action="store_true", help="reset-offsets: print the result as CSV")


def group_action(args: argparse.Namespace) -> str:
    chosen = [a for a in ACTIONS if getattr(args, "flag_" + a.replace("-", "_"))]
    if args.action:
        chosen.append(args.action)
    chosen = list(dict.fromkeys(chosen))
    if len(chosen) != 1:
        raise CommandError("give exactly one of list, describe, delete, reset-offsets", 2)
    action = chosen[0]
    if action != "list" and not args.group and not args.all_groups:
        raise CommandError(f"{action} needs --group or --all-groups", 2)
    if args.group and args.all_groups:
        raise CommandError("give --group or --all-groups, not both", 2)
    if (
        action == "describe"
        and sum(bool(x) for x in (args.members, args.offsets, args.state is not None)) > 1
    ):
        raise CommandError("give at most one of --members, --offsets, --state", 2)
    if action == "reset-offsets":
        modes = [m for m in RESET_MODES if getattr(args, m) not in (None, False)]
        if len(modes) != 1:
            raise CommandError(
                "reset-offsets needs exactly one of --to-earliest, --to-latest, --to-current, "
                "--to-offset, --shift-by, --to-datetime, --by-duration, --from-file",
                2,
            )
        if args.dry_run and args.execute:
            raise CommandError("give --dry-run or --execute, not both", 2)
        if modes[0] != "from_file" and not args.topic and not args.all_topics:
            raise CommandError("reset-offsets needs --topic or --all-topics", 2)
        if args.topic and args.all_topics:
            raise CommandError("give --topic or --all-topics, not both", 2)
    return action


# ---------------------------------------------------------------------------- pure helpers


def format_table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], min_widths: Sequence[int] = ()
) -> list[str]:
    """Left-aligned columns separated by one space, each as wide as its widest cell (at least
    ``min_widths``); the last column is not padded."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    for i, w in enumerate(min_widths):
        widths[i] = max(widths[i], w)
    lines = []
    for r in [list(headers), *cells]:
        padded = [c.ljust(widths[i]) for i, c in enumerate(r[:-1])] + [r[-1]]
        lines.append(" ".join(padded).rstrip())
    return lines


def parse_topic_spec(spec: str) -> tuple[str, list[int] | None]:
    """``"t"`` -> ``("t", None)`` (every partition); ``"t:0,2"`` -> ``("t", [0, 2])``."""
    topic, sep, parts = spec.partition(":")
    if not topic:
        raise CommandError(f"--topic {spec!r}: no topic name", 2)
    if not sep:
        return topic, None
    try:
        partitions = sorted({int(x) for x in parts.split(",") if x.strip()})
    except ValueError:
        raise CommandError(f"--topic {spec!r}: partitions must be integers, as in topic:0,1", 2) from None
    if not partitions or any(p < 0 for p in partitions):
        raise CommandError(f"--topic {spec!r}: give partitions as topic:0,1", 2)
    return topic, partitions


def parse_datetime(text: str, local_tz: datetime.tzinfo | None = None) -> int:
    """Kafka's ``--to-datetime`` format ``yyyy-MM-dd'T'HH:mm:ss.SSS`` with an optional zone
    (``Z``, ``+02:00``, ``-0500``); without one the local time zone applies. Returns epoch ms."""
    raw = text.strip()
    m = re.fullmatch(r"(.*?)([+-]\d{2})(\d{2})", raw)
    if m and "T" in m.group(1):
        raw = f"{m.group(1)}{m.group(2)}:{m.group(3)}"
    try:
        dt = datetime.datetime.fromisoformat(raw)
    except ValueError:
        raise CommandError(
            f"--to-datetime {text!r}: expected yyyy-MM-ddTHH:mm:ss.SSS with an optional zone (Z, +02:00)", 2
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=local_tz) if local_tz is not None else dt.astimezone()
    return int(dt.timestamp() * 1000)


_DURATION = re.compile(
    r"P(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)


def parse_duration(text: str) -> int:
    """An ISO-8601 duration as Java's ``Duration.parse`` takes it (``PnDTnHnMn.nS``) -> ms."""
    m = _DURATION.fullmatch(text.strip())
    if not m or not any(m.groupdict().values()) or text.strip().upper().endswith("T"):
        raise CommandError(f"--by-duration {text!r}: expected an ISO-8601 duration like PT1H or P1DT30M", 2)
    d, h, mi, s = (float(m.group(k) or 0) for k in ("d", "h", "m", "s"))
    return round(((d * 24 + h) * 60 + mi) * 60_000 + s * 1000)


def parse_reset_file(text: str, group: str) -> dict[tuple[str, int], int]:
    """A ``--from-file`` CSV: ``topic,partition,offset`` lines, or ``group,topic,partition,offset``
    (Kafka's multi-group export: only ``group``'s lines are used). Blank lines are ignored."""
    out: dict[tuple[str, int], int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 4:
            if fields[0] != group:
                continue
            fields = fields[1:]
        if len(fields) != 3 or not fields[0]:
            raise CommandError(f"--from-file line {n}: expected topic,partition,offset: {line!r}", 2)
        try:
            partition, offset = int(fields[1]), int(fields[2])
        except ValueError:
            raise CommandError(
                f"--from-file line {n}: partition and offset must be integers: {line!r}", 2
            ) from None
        out[(fields[0], partition)] = offset
    return out


@dataclass(frozen=True)
class OffsetRow:
    topic: str
    partition: int
    current: int | None
    log_end: int | None
    consumer_id: str = "-"
    host: str = "-"
    client_id: str = "-"

    @property
    def lag(self) -> int | None:
        if self.current is None or self.log_end is None:
            return None
        return max(self.log_end - self.current, 0)


def offset_rows(
    description: GroupDescription,
    committed: Mapping[tuple[str, int], OffsetAndMetadata],
    log_end: Mapping[tuple[str, int], int],
) -> list[OffsetRow]:
    """kafka-consumer-groups.sh's offsets view: one row per assigned partition (with its
    member) and one per partition that has a committed offset but no owner (``-``)."""
    rows: list[OffsetRow] = []
    assigned: set[tuple[str, int]] = set()
    for m in sorted(description.members, key=lambda m: m.member_id):
        for tp in m.partitions:
            assigned.add(tp)
            c = committed.get(tp)
            rows.append(
                OffsetRow(
                    tp[0], tp[1], c.offset if c else None, log_end.get(tp), m.member_id, m.host, m.client_id
                )
            )
    for tp, c in committed.items():
        if tp not in assigned:
            rows.append(OffsetRow(tp[0], tp[1], c.offset, log_end.get(tp)))
    return sorted(rows, key=lambda r: (r.topic, r.partition))


def _dash(v: int | None) -> str:
    return "-" if v is None else str(v)


def _assignment_text(assignment: Mapping[str, Sequence[int]]) -> str:
    parts = [f"{t}({','.join(str(p) for p in sorted(ps))})" for t, ps in sorted(assignment.items()) if ps]
    return ",".join(parts) or "-"


def clamp_offset(
    tp: tuple[str, int], wanted: int, earliest: int, latest: int, warn: Callable[[str], None]
) -> int:
    """Kafka's ``checkOffsetsRange``: keep a target within [log start, log end], warning."""
    name = f"{tp[0]}-{tp[1]}"
    if wanted > latest:
        warn(
            f"New offset ({wanted}) is higher than latest offset for topic partition {name}. "
            f"Value will be set to {latest}"
        )
        return latest
    if wanted < earliest:
        warn(
            f"New offset ({wanted}) is lower than earliest offset for topic partition {name}. "
            f"Value will be set to {earliest}"
        )
        return earliest
    return wanted


# ---------------------------------------------------------------------------- commands




def _split(value: str | None) -> list[str]:
    return [s.strip() for s in (value or "").split(",") if s.strip()]


async def groups(args: argparse.Namespace) -> int:
    """Run ``strom groups ACTION``; returns the exit code."""
    action = group_action(args)
    client = _client(args)
    try:
        async with client:
            if action == "list":
                return await _list(client, args)
            names = args.group or [g.group_id for g in await _consumer_groups(client)]
            if action == "describe":
                return await _describe(client, args, names)
            if action == "delete":
                return await _delete(client, names)
            return await _reset(client, args, names)
    except KafkaConnectionError as e:
        raise CommandError(e.message or str(e)) from None


async def _consumer_groups(
    client: Client, states: Sequence[str] = (), types: Sequence[str] = ()
) -> list[Any]:
    # Kafka's tool lists consumer groups: protocol type "consumer", or "" (offsets only).
    return [
        g
        for g in await list_groups(client, states=states, types=types)
        if g.protocol_type in ("consumer", "")
    ]


async def _list(client: Client, args: argparse.Namespace) -> int:
    states, types = _split(args.state), _split(args.group_type)
    listed = await _consumer_groups(client, states, types)
    show_state, show_type = args.state is not None, args.group_type is not None
    if not show_state and not show_type:
        for g in listed:
            print(g.group_id)
        return 0
    headers = ["GROUP"] + (["TYPE"] if show_type else []) + (["STATE"] if show_state else [])
    rows = [
        [g.group_id]
        + ([g.group_type.capitalize() or "Classic"] if show_type else [])
        + ([g.state or "Unknown"] if show_state else [])
        for g in listed
    ]
    for line in format_table(headers, rows):
        print(line)
    return 0


def _state_notice(d: GroupDescription) -> bool:
    """Kafka's ``shouldPrintMemberState``: messages for Dead/Empty/rebalancing groups."""
    if d.state == "Dead":
        print(f"Error: Consumer group '{d.group_id}' does not exist.", file=sys.stderr)
        return False
    if d.state == "Empty":
        print(f"\nConsumer group '{d.group_id}' has no active members.", file=sys.stderr)
    elif d.state in REBALANCING_STATES:
        print(f"\nWarning: Consumer group '{d.group_id}' is rebalancing.", file=sys.stderr)
    return True


async def _log_end_offsets(
    client: Client, partitions: Iterable[tuple[str, int]], timestamp: int = LATEST
) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    out: dict[tuple[str, int], int] = {}

    async def one(topic: str, parts: list[int]) -> None:
        try:
            res = await client.list_offsets(topic, {p: timestamp for p in parts})
        except KafkaError as e:
            if e.code in (ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id):
                return  # deleted topic: LOG-END-OFFSET "-"
            raise
        assert isinstance(res, dict)
        for p, off in res.items():
            out[(topic, p)] = off

    await asyncio.gather(*(one(t, ps) for t, ps in by_topic.items()))
    return out


async def _describe(client: Client, args: argparse.Namespace, names: list[str]) -> int:
    missing = 0
    for name in names:
        d = await describe_group(client, name)
        if args.state is not None:
            if d.state == "Dead":
                print(f"Error: Consumer group '{name}' does not exist.", file=sys.stderr)
                missing += 1
                continue
            c = d.coordinator
            print()
            for line in format_table(
                ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                [[name, f"{c.host}:{c.port}  ({c.node_id})", d.protocol or "-", d.state, len(d.members)]],
            ):
                print(line)
            continue
        if args.members:
            if not _state_notice(d):
                missing += 1
                continue
            if not d.members:
                continue
            headers = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
            if args.verbose:
                headers.append("ASSIGNMENT")
            rows = []
            for m in sorted(d.members, key=lambda m: m.member_id):
                row: list[object] = [
                    name,
                    m.member_id,
                    m.group_instance_id or "-",
                    m.host,
                    m.client_id,
                    len(m.partitions),
                ]
                if args.verbose:
                    row.append(_assignment_text(m.assignment))
                rows.append(row)
            print()
            for line in format_table(headers, rows):
                print(line)
            continue
        # offsets view (default): committed first, then log end, so lag is never negative
        committed = await fetch_offsets(client, name) if d.state != "Dead" else {}
        if not _state_notice(d):
            missing += 1
            continue
        assigned = {tp for m in d.members for tp in m.partitions}
        log_end = await _log_end_offsets(client, set(committed) | assigned)
        rows_ = offset_rows(d, committed, log_end)
        if not rows_:
            continue
        print()
        for line in format_table(
            [
                "GROUP",
                "TOPIC",
                "PARTITION",
                "CURRENT-OFFSET",
                "LOG-END-OFFSET",
                "LAG",
                "CONSUMER-ID",
                "HOST",
                "CLIENT-ID",
            ],
            [
                [
                    name,
                    r.topic,
                    r.partition,
                    _dash(r.current),
                    _dash(r.log_end),
                    _dash(r.lag),
                    r.consumer_id,
                    r.host,
                    r.client_id,
                ]
                for r in rows_
            ],
            min_widths=[15, 15, 10, 15, 15, 15, 15, 15],
        ):
            print(line)
    return 1 if missing else 0


async def _delete(client: Client, names: list[str]) -> int:
    if not names:
        print("No consumer groups to delete.", file=sys.stderr)
        return 0
    results = await delete_groups(client, names)
    ok = [g for g, e in results.items() if e is None]
    failed = {g: e for g, e in results.items() if e is not None}
    quoted = ", ".join(f"'{g}'" for g in ok)
    if not failed:
        print(f"Deletion of requested consumer groups ({quoted}) was successful.")
        return 0
    print("Error: Deletion of some consumer groups failed:", file=sys.stderr)
    for g, e in failed.items():
        print(f"* Group '{g}' could not be deleted due to: {kafka_message(e)}", file=sys.stderr)
    if ok:
        print(f"\nThese consumer groups were deleted successfully: {quoted}")
    return 1


async def _partitions_to_reset(
    client: Client, args: argparse.Namespace, group: str, file_offsets: Mapping[tuple[str, int], int] | None
) -> list[tuple[str, int]]:
    if file_offsets is not None and not args.topic and not args.all_topics:
        return sorted(file_offsets)
    if args.all_topics:
        return sorted(await fetch_offsets(client, group))
    out: set[tuple[str, int]] = set()
    for spec in args.topic:
        topic, parts = parse_topic_spec(spec)
        try:
            t = await client.topic(topic, refresh=True)
        except KafkaError as e:
            if e.code in (ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_topic_exception):
                raise CommandError(f"topic {topic!r} does not exist") from None
            raise
        if parts is None:
            parts = sorted(t.partitions)
        for p in parts:
            if p not in t.partitions:
                raise CommandError(f"partition {topic}-{p} does not exist")
            out.add((topic, p))
    return sorted(out)


async def _target_offsets(
    client: Client,
    args: argparse.Namespace,
    group: str,
    partitions: list[tuple[str, int]],
    file_offsets: Mapping[tuple[str, int], int] | None,
) -> dict[tuple[str, int], int]:
    def warn(msg: str) -> None:
        print(f"WARN: {msg}", file=sys.stderr)

    if file_offsets is not None:
        return {tp: file_offsets[tp] for tp in partitions if tp in file_offsets}
    if args.to_earliest:
        return await _log_end_offsets(client, partitions, EARLIEST)
    latest = await _log_end_offsets(client, partitions, LATEST)
    if args.to_latest:
        return latest
    if args.to_current or args.shift_by is not None:
        committed = await fetch_offsets(client, group)
        if args.to_current:
            return {tp: committed[tp].offset if tp in committed else latest[tp] for tp in partitions}
        without = [f"{t}-{p}" for t, p in partitions if (t, p) not in committed]
        if without:
            raise CommandError(
                f"--shift-by needs a committed offset to shift from; none for {', '.join(without)}"
            )
        earliest = await _log_end_offsets(client, partitions, EARLIEST)
        return {
            tp: clamp_offset(tp, committed[tp].offset + args.shift_by, earliest[tp], latest[tp], warn)
            for tp in partitions
        }
    if args.to_offset is not None:
        earliest = await _log_end_offsets(client, partitions, EARLIEST)
        return {tp: clamp_offset(tp, args.to_offset, earliest[tp], latest[tp], warn) for tp in partitions}
    if args.to_datetime is not None:
        ts = parse_datetime(args.to_datetime)
    else:
        ts = int(datetime.datetime.now(datetime.UTC).timestamp() * 1000) - parse_duration(args.by_duration)
    by_time = await _log_end_offsets(client, partitions, ts)
    # no record at or after the time: the log end (Kafka's answer)
    return {tp: by_time[tp] if by_time.get(tp, -1) >= 0 else latest[tp] for tp in partitions}


async def _reset(client: Client, args: argparse.Namespace, names: list[str]) -> int:
    file_text: str | None = None
    if args.from_file is not None:
        try:
            with open(args.from_file, encoding="utf-8") as f:
                file_text = f.read()
        except OSError as e:
            raise CommandError(f"--from-file: cannot read {args.from_file}: {e.strerror or e}", 2) from None
    results: dict[str, dict[tuple[str, int], int]] = {}
    failed = 0
    for name in names:
        d = await describe_group(client, name)
        if d.state.lower() not in INACTIVE_STATES:
            print(
                f"Error: Assignments can only be reset if the group '{name}' is inactive, "
                f"but the current state is {d.state}.",
                file=sys.stderr,
            )
            failed += 1
            continue
        file_offsets = parse_reset_file(file_text, name) if file_text is not None else None
        partitions = await _partitions_to_reset(client, args, name, file_offsets)
        if not partitions:
            print(f"No partitions to reset for group '{name}'.", file=sys.stderr)
            results[name] = {}
            continue
        targets = await _target_offsets(client, args, name, partitions, file_offsets)
        missing = [f"{t}-{p}" for t, p in partitions if (t, p) not in targets]
        if missing:
            raise CommandError(f"no offset found for {', '.join(missing)} (topic deleted?)")
        if args.execute:
            committed = await commit_offsets(client, name, targets)
            errors = {tp: err for tp, err in committed.items() if err is not None}
            if errors:
                # a member joined between the state check and the commit
                for (t, p), err in errors.items():
                    print(
                        f"Error: cannot reset {t}-{p} of group '{name}': {kafka_message(err)}",
                        file=sys.stderr,
                    )
                failed += 1
                continue
        results[name] = targets
    _print_reset(args, results)
    if not args.execute and not args.export and results:
        print("\nDry run: nothing was changed. Add --execute to commit these offsets.", file=sys.stderr)
    return 1 if failed else 0


def _print_reset(args: argparse.Namespace, results: Mapping[str, Mapping[tuple[str, int], int]]) -> None:
    if args.export:
        multi = len(results) > 1
        for name, targets in results.items():
            for (t, p), off in sorted(targets.items()):
                print(f"{name},{t},{p},{off}" if multi else f"{t},{p},{off}")
        return
    rows = [[name, t, p, off] for name, targets in results.items() for (t, p), off in sorted(targets.items())]
    if rows:
        print()
        for line in format_table(
            ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows, min_widths=[15, 15, 10]
        ):
            print(line)
