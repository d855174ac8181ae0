"""``strom share-groups`` (like kafka-share-groups.sh): list, describe, delete share groups (KIP-932),
reset their start offsets and delete their offsets of a topic.

Output follows Kafka's ShareGroupCommand: ``list`` prints group ids (``--state``: GROUP STATE);
``describe`` prints GROUP TOPIC PARTITION START-OFFSET LAG (``--verbose`` adds LEADER-EPOCH),
``--members`` GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT, ``--state`` GROUP
COORDINATOR (ID) STATE #MEMBERS. ``reset-offsets`` works on inactive groups only, is a dry run
unless ``--execute``, and prints GROUP TOPIC PARTITION NEW-OFFSET.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from strom.cli.commands import CommandError, _client
from strom.cli.groups import format_table, parse_datetime, parse_duration, parse_topic_spec
from strom.client.client import EARLIEST, LATEST, Client
from strom.client.errors import KafkaConnectionError, KafkaError
from strom.client.groups import GROUP, list_groups, with_coordinator

SHARE_GROUP_DESCRIBE = 77
DESCRIBE_SHARE_GROUP_OFFSETS = 90
ALTER_SHARE_GROUP_OFFSETS = 91
DELETE_SHARE_GROUP_OFFSETS = 92
DELETE_GROUPS = 42
ACTIONS = ("list", "describe", "delete", "reset-offsets", "delete-offsets")


def add_parser(sub: Any, add_bootstrap: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "share-groups",
        help="list, describe, delete share groups, reset their offsets (like kafka-share-groups.sh)",
        description="Share groups (KIP-932, queues): list, describe, delete, reset start offsets "
        "(inactive groups only; --dry-run is the default, --execute applies), delete offsets.",
    )
    add_bootstrap(p)
    p.add_argument("action", nargs="?", choices=ACTIONS)
    for a in ACTIONS:
        p.add_argument(
            f"--{a}", dest="flag_" + a.replace("-", "_"), action="store_true", help=f"same as '{a}'"
        )
    p.add_argument("--group", action="append", default=[], metavar="GROUP", help="group id (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="every share group")
    p.add_argument(
        "--state",
        nargs="?",
        const="",
        default=None,
        metavar="STATE[,STATE]",
        help="list: the STATE column, or only groups in these states; describe: the state view",
    )
    p.add_argument("--members", action="store_true", help="describe: the members and their partitions")
    p.add_argument("--offsets", action="store_true", help="describe: start offsets and lag (the default)")
    p.add_argument("--verbose", action="store_true", help="describe: more columns")
    p.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="TOPIC[:P,P...]",
        help="reset-offsets/delete-offsets: this topic (repeatable)",
    )
    p.add_argument(
        "--all-topics", action="store_true", help="reset-offsets: every topic the group has state for"
    )
    modes = p.add_argument_group("reset-offsets target (exactly one)")
    modes.add_argument("--to-earliest", action="store_true", help="the earliest offset")
    modes.add_argument("--to-latest", action="store_true", help="the log end offset")
    modes.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    modes.add_argument(
        "--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss[TZ]", help="first offset at or after this time"
    )
    modes.add_argument("--by-duration", metavar="PnDTnHnMnS", help="first offset at or after now minus this")
    p.add_argument(
        "--dry-run", action="store_true", help="reset-offsets: only show the new offsets (default)"
    )
    p.add_argument("--execute", action="store_true", help="reset-offsets: apply the new offsets")


def _action(args: argparse.Namespace) -> str:
    chosen = [a for a in ACTIONS if getattr(args, "flag_" + a.replace("-", "_"))]
    if args.action:
        chosen.append(args.action)
    chosen = list(dict.fromkeys(chosen))
    if len(chosen) != 1:
        raise CommandError("give exactly one of " + ", ".join(ACTIONS), 2)
    action = chosen[0]
    if action != "list" and not args.group and not args.all_groups:
        raise CommandError(f"{action} needs --group or --all-groups", 2)
    if action in ("reset-offsets", "delete-offsets") and len(args.group) != 1:
        raise CommandError(f"{action} needs exactly one --group", 2)
    if action == "reset-offsets":
        modes = [
            m
            for m in ("to_earliest", "to_latest", "to_offset", "to_datetime", "by_duration")
            if getattr(args, m) not in (None, False)
        ]
        if len(modes) != 1:
            raise CommandError(
                "reset-offsets needs exactly one of --to-earliest, --to-latest, --to-offset, "
                "--to-datetime, --by-duration",
                2,
            )
        if not args.topic and not args.all_topics:
            raise CommandError("reset-offsets needs --topic or --all-topics", 2)
    if action == "delete-offsets" and not args.topic:
        raise CommandError("delete-offsets needs --topic", 2)
    return action


async def share_groups(args: argparse.Namespace) -> int:
    action = _action(args)
    client = _client(args)
    try:
        async with client:
            if action == "list":
                return await _list(client, args)
            names = args.group or [g.group_id for g in await list_groups(client, types=["share"])]
            if action == "describe":
                return await _describe(client, args, names)
            if action == "delete":
                return await _delete(client, names)
            if action == "delete-offsets":
                return await _delete_offsets(client, args, names[0])
            return await _reset(client, args, names[0])
    except KafkaConnectionError as e:
        raise CommandError(e.message or str(e)) from None


async def _list(client: Client, args: argparse.Namespace) -> int:
    states = [s.strip() for s in (args.state or "").split(",") if s.strip()]
    listed = [g for g in await list_groups(client, types=["share"]) if g.group_type.lower() == "share"]
    if states:
        listed = [g for g in listed if g.state.lower() in {s.lower() for s in states}]
    if args.state is None:
        for g in listed:
            print(g.group_id)
        return 0
    for line in format_table(["GROUP", "STATE"], [[g.group_id, g.state] for g in listed], [15]):
        print(line)
    return 0


async def _call(client: Client, group: str, api: int, data: dict[str, Any]) -> Any:
    async def call(_coord: Any, conn: Any) -> Any:
        return await conn.request(api, data)

    return await with_coordinator(client, group, GROUP, call)


async def _describe_one(client: Client, group: str) -> Any:
    resp = await _call(
        client, group, SHARE_GROUP_DESCRIBE, {"group_ids": [group], "include_authorized_operations": False}
    )
    g = resp.groups[0]
    if int(g.error_code) == ErrorCode.group_id_not_found:
        return None
    if int(g.error_code):
        raise KafkaError(int(g.error_code), g.error_message or f"describe share group {group!r}")
    return g


async def _describe(client: Client, args: argparse.Namespace, names: list[str]) -> int:
    missing = 0
    for name in sorted(names):
        g = await _describe_one(client, name)
        if g is None:
            print(f"\nError: Share group '{name}' does not exist.")
            missing += 1
            continue
        if g.group_state == "Empty" and (args.members or args.state is not None):
            print(f"\nShare group '{name}' has no active members.", file=sys.stderr)
        if args.state is not None:
            md = await client.metadata([])
            b = next(iter(md.brokers.values()))
            coord = f"{b.host}:{b.port}  ({b.node_id})"
            headers = ["GROUP", "COORDINATOR (ID)", "STATE"]
            row: list[object] = [name, coord, g.group_state]
            if args.verbose:
                headers += ["GROUP-EPOCH", "ASSIGNMENT-EPOCH"]
                row += [g.group_epoch, g.assignment_epoch]
            print()
            for line in format_table([*headers, "#MEMBERS"], [[*row, len(g.members)]], [15, 25, 15]):
                print(line)
            continue
        if args.members:
            if not g.members:
                continue
            rows = []
            for m in sorted(g.members, key=lambda m: m.member_id):
                parts = sorted((tp.topic_name, sorted(tp.partitions)) for tp in m.assignment.topic_partitions)
                text = ";".join(f"{t}:{','.join(str(p) for p in ps)}" for t, ps in parts)
                n = sum(len(ps) for _t, ps in parts)
                row = [name, m.member_id, m.client_host, m.client_id, n]
                rows.append([*row, m.member_epoch, text] if args.verbose else [*row, text])
            headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
            headers += ["MEMBER-EPOCH", "ASSIGNMENT"] if args.verbose else ["ASSIGNMENT"]
            print()
            for line in format_table(headers, rows, [15, 15, 15, 15, 12]):
                print(line)
            continue
        resp = await _call(
            client, name, DESCRIBE_SHARE_GROUP_OFFSETS, {"groups": [{"group_id": name, "topics": None}]}
        )
        rg = resp.groups[0]
        rows = []
        for t in sorted(rg.topics, key=lambda t: t.topic_name):
            for p in sorted(t.partitions, key=lambda p: p.partition_index):
                start = "-" if p.start_offset < 0 else str(p.start_offset)
                lag = "-" if p.lag < 0 else str(p.lag)
                epoch = "-" if p.leader_epoch < 0 else str(p.leader_epoch)
                base = [name, t.topic_name, p.partition_index]
                rows.append([*base, epoch, start, lag] if args.verbose else [*base, start, lag])
        if not rows:
            print(f"\nShare group '{name}' has no offset information.")
            continue
        headers = ["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if args.verbose else [])
        print()
        for line in format_table([*headers, "START-OFFSET", "LAG"], rows, [15, 15, 10, 13]):
            print(line)
    return 1 if missing else 0


async def _delete(client: Client, names: list[str]) -> int:
    listed = {g.group_id: g for g in await list_groups(client, types=["share"])}
    failed: dict[str, str] = {}
    ok: list[str] = []
    for name in dict.fromkeys(names):
        g = listed.get(name)
        if g is None or g.group_type.lower() != "share":
            failed[name] = f"GroupIdNotFoundException: Group '{name}' is not a share group."
            continue
        if g.state != "Empty":
            failed[name] = f"GroupNotEmptyException: Share group '{name}' is not EMPTY."
            continue
        resp = await _call(client, name, DELETE_GROUPS, {"groups_names": [name]})
        code = int(resp.results[0].error_code)
        if code:
            failed[name] = KafkaError(code, "").name
        else:
            ok.append(name)
    quoted = ", ".join(f"'{g}'" for g in ok)
    if not failed:
        print(f"Deletion of requested share groups ({quoted}) was successful.")
        return 0
    print("\nError: Deletion of some share groups failed:")
    for gid, e in failed.items():
        print(f"* Group '{gid}' could not be deleted due to: {e}")
    if ok:
        print(f"\nThese share groups were deleted successfully: {quoted}")
    return 1


async def _delete_offsets(client: Client, args: argparse.Namespace, group: str) -> int:
    topics = [parse_topic_spec(t)[0] for t in args.topic]
    resp = await _call(
        client,
        group,
        DELETE_SHARE_GROUP_OFFSETS,
        {"group_id": group, "topics": [{"topic_name": t} for t in topics]},
    )
    if int(resp.error_code):
        print(f"\nError: {resp.error_message or KafkaError(int(resp.error_code), '').name}")
        return 1
    rows = [
        [r.topic_name, "Successful" if not int(r.error_code) else f"Error: {r.error_message}"]
        for r in sorted(resp.responses, key=lambda r: r.topic_name)
    ]
    print()
    for line in format_table(["TOPIC", "STATUS"], rows, [15]):
        print(line)
    return 1 if any(int(r.error_code) for r in resp.responses) else 0


async def _reset(client: Client, args: argparse.Namespace, group: str) -> int:
    g = await _describe_one(client, group)
    if g is not None and g.group_state not in ("Empty", "Dead"):
        raise CommandError(f"Share group '{group}' is not empty.")
    partitions: list[tuple[str, int]] = []
    if args.all_topics:
        resp = await _call(
            client, group, DESCRIBE_SHARE_GROUP_OFFSETS, {"groups": [{"group_id": group, "topics": None}]}
        )
        partitions = sorted(
            (t.topic_name, p.partition_index) for t in resp.groups[0].topics for p in t.partitions
        )
    for spec in args.topic:
        topic, parts = parse_topic_spec(spec)
        try:
            t = await client.topic(topic, refresh=True)
        except KafkaError as e:
            raise CommandError(f"topic {topic!r} does not exist: {e.name}") from None
        partitions += [(topic, p) for p in (parts if parts is not None else sorted(t.partitions))]
    if args.to_earliest or args.to_latest:
        ts = EARLIEST if args.to_earliest else LATEST
    elif args.to_offset is not None:
        ts = None
    elif args.to_datetime is not None:
        ts = parse_datetime(args.to_datetime)
    else:
        ts = int(datetime.datetime.now(datetime.UTC).timestamp() * 1000) - parse_duration(args.by_duration)
    targets: dict[tuple[str, int], int] = {}
    for topic in sorted({t for t, _p in partitions}):
        parts = [p for t, p in partitions if t == topic]
        if ts is None:
            targets.update({(topic, p): args.to_offset for p in parts})
            continue
        res = await client.list_offsets(topic, {p: ts for p in parts})
        latest = await client.list_offsets(topic, {p: LATEST for p in parts})
        assert isinstance(res, dict) and isinstance(latest, dict)
        targets.update({(topic, p): (o if o >= 0 else latest[p]) for p, o in res.items()})
    if args.execute:
        by_topic: dict[str, list[dict[str, int]]] = {}
        for (tname, p), off in sorted(targets.items()):
            by_topic.setdefault(tname, []).append({"partition_index": p, "start_offset": off})
        resp = await _call(
            client,
            group,
            ALTER_SHARE_GROUP_OFFSETS,
            {
                "group_id": group,
                "topics": [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()],
            },
        )
        if int(resp.error_code):
            raise CommandError(resp.error_message or KafkaError(int(resp.error_code), "").name)
    rows = [[group, t, p, off] for (t, p), off in sorted(targets.items())]
    print()
    for line in format_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows, [15, 15, 10]):
        print(line)
    if not args.execute:
        print("\nDry run: nothing was changed. Add --execute to apply these offsets.", file=sys.stderr)
    return 0
