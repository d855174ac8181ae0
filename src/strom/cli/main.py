"""The ``strom`` command: ``serve``, ``topics``, ``produce``, ``consume``, ``configs``,
``records``, ``dump-log``, and the cluster tools ``metadata-quorum``, ``cluster``,
``leader-election``, ``reassign-partitions``, ``dev-cluster``, ``storage``
(``kafka-storage.sh``), and ``connect`` (Kafka Connect's connectors on Spark).

Flag names follow Apache Kafka's tools (``kafka-server-start.sh``, ``kafka-topics.sh``,
``kafka-console-producer.sh``, ``kafka-console-consumer.sh``, ``kafka-configs.sh``,
``kafka-delete-records.sh``, ``kafka-dump-log.sh``, ``kafka-storage.sh``). Commands other
than ``serve``, ``storage`` and ``dump-log`` are thin over :mod:`strom.client` and work
against any Kafka-compatible broker.

Exit codes: 0 success, 1 runtime error (broker unreachable, Kafka error ...), 2 usage or
configuration error, 130 interrupted. Expected errors print one line on stderr, no traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import inspect
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from strom.cli import acls as cli_acls
from strom.cli import cluster_tools, commands, dump_log, storage
from strom.cli import configs as cli_configs
from strom.cli import connect as cli_connect
from strom.cli import dev_cluster as cli_dev_cluster
from strom.cli import groups as cli_groups
from strom.cli import leader_election as cli_leader_election
from strom.cli import mirror as cli_mirror
from strom.cli import reassign as cli_reassign
from strom.cli import share_groups as cli_share_groups
from strom.cli import transactions as cli_transactions
from strom.client.errors import KafkaError
from strom.console import cli as cli_console
from strom.streams import serve as streams_serve
from strom.streams.sql import shell as sql_shell

__all__ = ["build_parser", "main", "run"]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
TOPIC_ACTIONS = ("create", "list", "describe", "alter", "delete")


class UsageError(Exception):
    """Bad combination of arguments (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_bootstrap(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap-server",
        "--bootstrap-servers",
        dest="bootstrap_server",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT[,HOST:PORT...]",
        help=f"broker(s) to connect to (default {DEFAULT_BOOTSTRAP})",
    )
    p.add_argument(
        "--request-timeout-ms", type=int, default=30_000, help="per-request timeout (default 30000)"
    )
    p.add_argument(
        "--command-config",
        "--producer.config",
        "--consumer.config",
        dest="command_config",
        metavar="FILE",
        help="properties file of client security settings (security.protocol, sasl.*, ssl.*)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="strom", description="strom: a Kafka-compatible broker and its tools")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    serve = sub.add_parser("serve", help="run a broker (like kafka-server-start.sh)")
    serve.add_argument("config", nargs="?", metavar="server.properties", help="broker config file")
    serve.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="override a config (repeatable)"
    )

    storage.add_parser(sub)
    topics = sub.add_parser(
        "topics", help="create, list, describe, alter, delete topics (like kafka-topics.sh)"
    )
    _add_bootstrap(topics)
    topics.add_argument("action", nargs="?", choices=TOPIC_ACTIONS)
    for flag in TOPIC_ACTIONS:
        topics.add_argument(f"--{flag}", dest=f"flag_{flag}", action="store_true", help=f"same as '{flag}'")
    topics.add_argument("--topic", help="topic name")
    topics.add_argument(
        "--partitions", type=int, help="number of partitions (create: default broker's; alter: new total)"
    )
    topics.add_argument("--replication-factor", type=int, help="replication factor (default: broker's)")
    topics.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="topic config (repeatable)"
    )
    topics.add_argument("--if-not-exists", action="store_true", help="create: no error if it exists")
    topics.add_argument("--if-exists", action="store_true", help="describe/alter/delete: no error if absent")
    topics.add_argument("--exclude-internal", action="store_true", help="list/describe: skip internal topics")
    for flag, what in (
        ("under-replicated-partitions", "partitions whose ISR is smaller than their replicas"),
        ("unavailable-partitions", "partitions without a live leader"),
        ("under-min-isr-partitions", "partitions whose ISR is below min.insync.replicas"),
        ("at-min-isr-partitions", "partitions whose ISR is exactly min.insync.replicas"),
    ):
        topics.add_argument(f"--{flag}", action="store_true", help=f"describe: only {what}")

    produce = sub.add_parser("produce", help="send stdin lines as records (like kafka-console-producer.sh)")
    _add_bootstrap(produce)
    produce.add_argument("--topic", required=True)
    produce.add_argument("--partition", type=int, help="partition (default: by key hash, else spread)")
    produce.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="reader property: parse.key, key.separator, parse.headers, headers.delimiter, "
        "headers.separator, headers.key.separator, null.marker, ignore.error",
    )
    produce.add_argument(
        "--producer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="acks, compression.type, linger.ms, batch.size",
    )
    produce.add_argument("--key-separator", help="parse a key before SEP on each line (sets parse.key=true)")
    produce.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="K=V[,K=V]",
        help="header(s) added to every record (repeatable; pairs split by --headers-separator)",
    )
    produce.add_argument(
        "--headers-separator", default=",", help="separator between --header pairs (default ,)"
    )
    produce.add_argument("--compression-type", "--compression-codec", choices=COMPRESSION_TYPES, default=None)
    produce.add_argument("--acks", choices=("all", "-1", "0", "1"), default=None, help="default all")
    produce.add_argument("--batch-size", type=int, default=None, help="max bytes per batch (default 524288)")
    produce.add_argument("--linger-ms", type=int, default=None, help="wait to fill a batch (default 5)")

    consume = sub.add_parser("consume", help="print records (like kafka-console-consumer.sh)")
    _add_bootstrap(consume)
    consume.add_argument("--topic", required=True)
    consume.add_argument("--partition", type=int, help="only this partition (default: all)")
    consume.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    consume.add_argument("--offset", help="N, earliest or latest (default latest)")
    consume.add_argument("--max-messages", type=int, help="exit after N records")
    consume.add_argument("--timeout-ms", type=int, help="exit when no record arrives for this long")
    consume.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="print.key, print.offset, print.timestamp, print.headers, print.partition, print.value, "
        "key.separator, line.separator, headers.separator, headers.key.separator, null.literal",
    )
    consume.add_argument("--max-wait-ms", type=int, default=500, help="fetch long-poll wait (default 500)")
    consume.add_argument("--fetch-max-bytes", type=int, default=1 << 20, help="max bytes per fetch")
    consume.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
        help="read_committed: only committed transactional records (default read_uncommitted)",
    )
    _add_configs_parser(sub)
    _add_records_parser(sub)
    _add_dump_log_parser(sub)
    cli_groups.add_parser(sub, _add_bootstrap)
    cli_share_groups.add_parser(sub, _add_bootstrap)
    cli_transactions.add_parser(sub, _add_bootstrap)
    cluster_tools.add_parsers(sub, _add_bootstrap)
    cli_leader_election.add_parser(sub, _add_bootstrap)
    cli_acls.add_parser(sub, _add_bootstrap)
    cli_reassign.add_parser(sub, _add_bootstrap)
    cli_dev_cluster.add_parser(sub)
    registry = sub.add_parser(
        "schema-registry", help="serve Confluent Schema Registry's REST API, state in the _schemas topic"
    )
    registry.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT[,...]")
    registry.add_argument("--port", type=int, default=8081, help="HTTP port (default 8081)")
    registry.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
    registry.add_argument("--topic", default="_schemas", help="state topic (default _schemas)")
    registry.add_argument(
        "--group-id",
        default="schema-registry",
        help="consumer group of the leader election (default schema-registry)",
    )
    registry.add_argument(
        "--advertised-url", help="this instance's URL for the others (default http://HOST:PORT)"
    )
    registry.add_argument(
        "--command-config", metavar="FILE", help="properties file of client settings (security.protocol, ...)"
    )
    registry.add_argument(
        "--basic-auth-file",
        metavar="FILE",
        help="require HTTP basic auth: a realm file of 'user: password[,role ...]' lines "
        "(Confluent's authentication.method=BASIC; passwords plain or Jetty's OBF:/MD5:/CRYPT:; "
        "roles admin/developer write, other roles read only)",
    )
    registry.add_argument("--ssl-certfile", metavar="PEM", help="serve HTTPS with this certificate (chain)")
    registry.add_argument("--ssl-keyfile", metavar="PEM", help="the certificate's private key")
    cli_console.add_parser(sub, _add_bootstrap)
    cli_connect.add_parser(sub)
    cli_mirror.add_parser(sub)
    streams_serve.add_parser(sub)
    sql_shell.add_parser(sub)
    return parser


def _add_configs_parser(sub: Any) -> None:
    configs = sub.add_parser(
        "configs", help="describe and alter topic/broker configs (like kafka-configs.sh)"
    )
    _add_bootstrap(configs)
    configs.add_argument("action", nargs="?", choices=("describe", "alter"))
    configs.add_argument("--describe", dest="flag_describe", action="store_true", help="same as 'describe'")
    configs.add_argument("--alter", dest="flag_alter", action="store_true", help="same as 'alter'")
    configs.set_defaults(entity_seq=None)
    configs.add_argument(
        "--entity-type",
        choices=("topics", "brokers", "broker-loggers", "users", "clients", "ips", "groups"),
        action=cli_configs.EntityOrder,
        help="repeat with users and clients for a user+client-id quota entity",
    )
    configs.add_argument(
        "--entity-name",
        action=cli_configs.EntityOrder,
        help="topic name, broker id, user, client id or IP (describe: all when omitted)",
    )
    configs.add_argument(
        "--entity-default",
        action=cli_configs.EntityOrder,
        nargs=0,
        default=False,
        help="brokers: the cluster-wide dynamic default; users/clients/ips: the default quota entity",
    )
    configs.add_argument("--topic", help="same as --entity-type topics --entity-name TOPIC")
    configs.add_argument("--broker", help="same as --entity-type brokers --entity-name ID")
    configs.add_argument(
        "--broker-defaults", action="store_true", help="same as --entity-type brokers --entity-default"
    )
    configs.add_argument("--broker-logger", help="same as --entity-type broker-loggers --entity-name ID")
    configs.add_argument(
        "--add-config",
        action="append",
        default=[],
        metavar="K=V[,K=[A,B]]",
        help="set configs; list values in brackets (repeatable)",
    )
    configs.add_argument(
        "--add-config-file",
        action="append",
        default=[],
        metavar="FILE",
        help="set the configs in a properties file",
    )
    configs.add_argument(
        "--append-config", action="append", default=[], metavar="K=V", help="append to list configs"
    )
    configs.add_argument(
        "--subtract-config", action="append", default=[], metavar="K=V", help="remove from list configs"
    )
    configs.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="K[,K]",
        help="remove configs (back to defaults)",
    )
    configs.add_argument("--all", action="store_true", help="describe: every config, not only dynamic ones")


def _add_records_parser(sub: Any) -> None:
    records = sub.add_parser("records", help="delete records below an offset (like kafka-delete-records.sh)")
    _add_bootstrap(records)
    records.add_argument("action", choices=("delete",))
    records.add_argument(
        "--offset-json-file",
        metavar="FILE",
        help='{"partitions": [{"topic": T, "partition": P, "offset": O}], "version": 1}',
    )
    records.add_argument("--topic", help="topic (instead of --offset-json-file)")
    records.add_argument("--partition", type=int, help="partition (default: every partition)")
    records.add_argument("--offset", type=int, help="delete records before this offset (-1: high watermark)")


def _add_dump_log_parser(sub: Any) -> None:
    dump = sub.add_parser("dump-log", help="print log segments and indexes (like kafka-dump-log.sh)")
    dump.add_argument("segments", nargs="*", metavar="FILE", help=".log, .index or .timeindex files")
    dump.add_argument(
        "--files", action="append", metavar="F[,F]", help="files, comma separated (Kafka's flag)"
    )
    dump.add_argument("--print-data-log", action="store_true", help="print record keys and payloads")
    dump.add_argument("--deep-iteration", action="store_true", help="print every record, not just batches")
    dump.add_argument("--index-sanity-check", action="store_true", help="report whether each index is sane")
    dump.add_argument("--verify-index-only", action="store_true", help="print index mismatches only")
    dump.add_argument("--max-bytes", type=int, default=None, help="only the first N bytes of a .log")


def _topics_action(args: argparse.Namespace) -> str:
    chosen = [f for f in TOPIC_ACTIONS if getattr(args, f"flag_{f}")]
    if args.action:
        chosen.append(args.action)
    chosen = list(dict.fromkeys(chosen))
    if len(chosen) != 1:
        raise UsageError("give exactly one of create, list, describe, alter, delete")
    action = chosen[0]
    if action in ("create", "alter", "delete") and not args.topic:
        raise UsageError(f"{action} needs --topic")
    return action


def _configs_action(args: argparse.Namespace) -> str:
    chosen = [f for f in ("describe", "alter") if getattr(args, f"flag_{f}")]
    if args.action:
        chosen.append(args.action)
    chosen = list(dict.fromkeys(chosen))
    if len(chosen) != 1:
        raise UsageError("give exactly one of describe, alter")
    return chosen[0]


def _serve(args: argparse.Namespace) -> int:
    from strom.config import BrokerConfig, ConfigError

    try:
        config = BrokerConfig.from_sources(args.config, args.override)
    except ConfigError as e:
        print(f"strom serve: configuration error: {e}", file=sys.stderr)
        return 2
    try:
        broker: Any = importlib.import_module("strom.server.broker")
    except ImportError as e:
        print(f"strom serve: error: the broker cannot be loaded: {e}", file=sys.stderr)
        return 1
    result = broker.run(config)
    if inspect.isawaitable(result):
        result = asyncio.run(_await(result))
    return result if isinstance(result, int) else 0


async def _await(aw: Any) -> Any:
    return await aw


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    prog = f"strom {args.command}"
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "topics":
            action = _topics_action(args)
            if action == "alter":
                return asyncio.run(cli_configs.topics_alter(args))
            return asyncio.run(commands.topics(args, action))
        if args.command == "configs":
            return asyncio.run(cli_configs.configs(args, _configs_action(args)))
        if args.command == "records":
            return asyncio.run(cli_configs.records_delete(args))
        if args.command == "groups":
            return asyncio.run(cli_groups.groups(args))
        if args.command == "share-groups":
            return asyncio.run(cli_share_groups.share_groups(args))
        if args.command == "transactions":
            return asyncio.run(cli_transactions.transactions(args))
        if args.command == "metadata-quorum":
            return asyncio.run(cluster_tools.metadata_quorum(args))
        if args.command == "cluster":
            return asyncio.run(cluster_tools.cluster(args))
        if args.command == "acls":
            return asyncio.run(cli_acls.acls(args))
        if args.command == "leader-election":
            return asyncio.run(cli_leader_election.leader_election(args))
        if args.command == "reassign-partitions":
            return asyncio.run(cli_reassign.reassign_partitions(args))
        if args.command == "schema-registry":
            from strom.schema_registry.app import serve as serve_registry

            return serve_registry(
                args.bootstrap_server,
                args.host,
                args.port,
                args.command_config,
                args.topic,
                args.advertised_url,
                args.group_id,
                args.basic_auth_file,
                args.ssl_certfile,
                args.ssl_keyfile,
            )
        if args.command == "streams":
            return streams_serve.run(args)
        if args.command == "sql":
            return sql_shell.run(args)
        if args.command == "connect":
            return cli_connect.connect(args)
        if args.command == "mirror":
            return cli_mirror.mirror(args)
        if args.command == "console":
            return cli_console.console(args)
        if args.command == "dev-cluster":
            return cli_dev_cluster.dev_cluster(args)
        if args.command == "storage":
            return storage.run(args)
        if args.command == "dump-log":
            return dump_log.run(args)
        if args.command == "produce":
            return asyncio.run(commands.produce(args))
        if args.command == "consume":
            return asyncio.run(commands.consume(args))
    except KeyboardInterrupt:
        return 130
    except UsageError as e:
        parser.print_usage(sys.stderr)
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except commands.CommandError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KafkaError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 1
    except ValueError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    raise AssertionError(f"unknown command {args.command!r}")


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point."""
    code = run(argv)
    with contextlib.suppress(BrokenPipeError):
        sys.stdout.flush()
    sys.exit(code)
