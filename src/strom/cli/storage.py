"""``strom storage``: Kafka's ``kafka-storage.sh`` (``random-uuid``, ``format``, ``info``).

A node with ``controller.quorum.voters`` set starts only on formatted dirs, as every Kafka node:

    strom storage random-uuid                         # once per cluster
    strom storage format -t <cluster-id> -c server.properties   # on every node

``format`` writes a v1 ``meta.properties`` (``cluster.id``, ``node.id``, a new
``directory.id``) in every dir of ``log.dirs`` and in ``metadata.log.dir``; ``info`` prints what
the dirs hold and the problems found. Plain ``strom serve`` (no voters: a quorum of itself)
needs none of this; its dirs are formatted at first start.

Exit codes: 0 success, 1 the dirs are not as the command needs (already formatted, another
cluster or node, problems found by ``info``), 2 usage or configuration error. Not written yet:
the ``bootstrap.checkpoint`` Kafka writes beside meta.properties (the initial metadata records:
``metadata.version`` ...); ``--release-version``, ``--feature``, ``--add-scram`` and
``--initial-controllers`` are not offered.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from strom.cli.commands import CommandError
from strom.config import BrokerConfig, ConfigError
from strom.log.log_dirs import META_FILE, MetaProperties, format_dirs, random_uuid, read_meta_properties

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    storage = sub.add_parser("storage", help="format and inspect log dirs (like kafka-storage.sh)")
    commands = storage.add_subparsers(dest="storage_command", metavar="{random-uuid,format,info}")
    commands.required = True
    commands.add_parser("random-uuid", help="print a random UUID (a new cluster id)")
    fmt = commands.add_parser("format", help="format the log dirs of this node")
    fmt.add_argument("--config", "-c", required=True, metavar="FILE", help="the node's server.properties")
    fmt.add_argument("--cluster-id", "-t", required=True, help="the cluster id (strom storage random-uuid)")
    fmt.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="override a setting of --config"
    )
    fmt.add_argument(
        "--ignore-formatted",
        "-g",
        action="store_true",
        help="skip dirs formatted already (they must be of this cluster and node) instead of failing",
    )
    fmt.add_argument(
        "--standalone",
        "-s",
        action="store_true",
        help="a controller that is a quorum of itself (needs no controller.quorum.voters)",
    )
    info = commands.add_parser("info", help="print what the log dirs of this node hold")
    info.add_argument("--config", "-c", required=True, metavar="FILE", help="the node's server.properties")
    info.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="override a setting of --config"
    )


def _config(args: argparse.Namespace) -> BrokerConfig:
    try:
        return BrokerConfig.from_sources(args.config, args.override)
    except ConfigError as e:
        raise CommandError(f"configuration error: {e}", 2) from None


def _dirs(config: BrokerConfig) -> list[Path]:
    """Kafka's ``configToLogDirectories``: log.dirs and metadata.log.dir, sorted, once each."""
    return sorted(set(config.log_dirs) | {config.metadata_log_dir}, key=str)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    sink = out or sys.stdout
    if args.storage_command == "random-uuid":
        print(random_uuid(), file=sink)
        return 0
    config = _config(args)
    if args.storage_command == "format":
        return _format(args, config, sink)
    return _info(config, sink)


def _format(args: argparse.Namespace, config: BrokerConfig, sink: TextIO) -> int:
    kraft = config.kraft()
    cluster_id = str(args.cluster_id).strip()
    given = config.explicit.get("cluster.id")
    if given is not None and str(given) != cluster_id:
        raise CommandError(f"cluster.id {given} set in the config differs from --cluster-id {cluster_id}", 2)
    if args.standalone:
        if not kraft.is_controller:
            raise CommandError("You can only use --standalone on a controller.", 2)
        if kraft.voters:
            raise CommandError(
                "--standalone makes this controller a quorum of itself, but controller.quorum.voters "
                "is set: drop one of them",
                2,
            )
    try:
        result = format_dirs(
            config.log_dirs,
            config.metadata_log_dir,
            kraft.node_id,
            cluster_id,
            ignore_formatted=args.ignore_formatted,
        )
    except ConfigError as e:
        raise CommandError(str(e), 1) from None
    for line in result.messages:
        print(line, file=sink)
    return 0


def _info(config: BrokerConfig, sink: TextIO) -> int:
    """Kafka's ``StorageTool.infoCommand``, plus a check of the ids against the config."""
    problems: list[str] = []
    found: list[Path] = []
    first: MetaProperties | None = None
    dirs = _dirs(config)
    for d in dirs:
        if not d.is_dir():
            problems.append(f"{d} does not exist" if not d.exists() else f"{d} is not a directory")
            continue
        found.append(d)
        try:
            meta = read_meta_properties(d / META_FILE)
        except (OSError, ValueError) as e:
            problems.append(f"Error loading {d / META_FILE}: {e}")
            continue
        if meta is None:
            problems.append(f"{d} is not formatted.")
            continue
        if first is None:
            first = meta
            if meta.node_id is not None and meta.node_id != config.node_id:
                problems.append(
                    f"{d / META_FILE} has node.id {meta.node_id}, but the config's node.id is "
                    f"{config.node_id}."
                )
            given = config.explicit.get("cluster.id")
            if given is not None and meta.cluster_id != str(given):
                problems.append(
                    f"{d / META_FILE} has cluster.id {meta.cluster_id}, but the config's cluster.id "
                    f"is {given}."
                )
        elif first.cluster_id != meta.cluster_id:
            problems.append("Mismatched cluster IDs between storage directories.")
        elif first.node_id != meta.node_id:
            problems.append("Mismatched node IDs between storage directories.")
    if first is not None and first.version == 0:
        problems.append(
            "The configuration file appears to be for a cluster in KRaft mode, but the directories "
            "are formatted for legacy mode."
        )
    if found:
        print("Found log directory:" if len(found) == 1 else "Found log directories:", file=sink)
        for d in found:
            print(f"  {d}", file=sink)
        print("", file=sink)
    if first is not None:
        shown = ", ".join(f"{k}={v}" for k, v in first.properties().items())
        print("Found metadata: {" + shown + "}", file=sink)
        print("", file=sink)
    if problems:
        print("Found problem:" if len(problems) == 1 else "Found problems:", file=sink)
        for p in problems:
            print(f"  {p}", file=sink)
        print("", file=sink)
        return 1
    return 0

