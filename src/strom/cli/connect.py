"""``strom connect``: Kafka Connect's connectors on Spark.

    strom connect run CONFIG.json|CONFIG.properties [--bootstrap-server B] [--state-dir DIR]
                      [--once] [--trigger-interval-ms 1000]
    strom connect validate CONFIG.json|CONFIG.properties
    strom connect serve [--bootstrap-server B] [--port 8083] [--state-dir DIR]

``run`` runs one connector in the foreground until Ctrl-C/SIGTERM (``--once``: what is there
now, then exit). Its Spark checkpoint lives in ``--state-dir`` (default ``./strom-connect``)
under the connector's name. A bad config is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from strom.cli.spark_run import begin_run, stop_on_signals

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "connect", help="run Kafka Connect connectors (file source/sink, Parquet sink) on Spark"
    )
    csub = p.add_subparsers(dest="connect_command", metavar="ACTION")
    csub.required = True
    run = csub.add_parser("run", help="run one connector in the foreground")
    run.add_argument(
        "config", metavar="CONFIG", help="connector config: .json ({name, config}) or .properties"
    )
    run.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT[,...]")
    run.add_argument(
        "--state-dir",
        default="strom-connect",
        metavar="DIR",
        help="checkpoints, one directory per connector (default ./strom-connect)",
    )
    run.add_argument("--once", action="store_true", help="process what is available now, then exit")
    run.add_argument(
        "--trigger-interval-ms", type=int, default=1000, help="micro-batch interval (default 1000)"
    )
    srv = csub.add_parser(
        "serve", help="Kafka Connect's REST API; each connector a Spark query in this process"
    )
    srv.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT[,...]")
    srv.add_argument("--port", type=int, default=8083, help="HTTP port (default 8083, Connect's)")
    srv.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
    srv.add_argument(
        "--state-dir",
        default="strom-connect",
        metavar="DIR",
        help="connector configs and checkpoints (default ./strom-connect)",
    )
    val = csub.add_parser("validate", help="check a connector config and print it as Connect would store it")
    val.add_argument("config", metavar="CONFIG")


def connect(args: argparse.Namespace) -> int:
    from strom.connect.config import load_config
    from strom.connect.data import ConfigError

    if args.connect_command == "serve":
        from strom.connect.rest import serve

        return serve(args.bootstrap_server, args.host, args.port, Path(args.state_dir))

    if args.connect_command == "validate":
        # the unknown keys are printed below as warnings, once, instead of logged
        logging.getLogger("strom.connect").setLevel(logging.ERROR)
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(f"strom connect: error: {e}", file=sys.stderr)
        return 2
    if args.connect_command == "validate":
        import json

        for w in cfg.warnings:
            print(f"strom connect: warning: {w}", file=sys.stderr)
        print(json.dumps({"name": cfg.name, "config": cfg.props, "type": cfg.kind}, indent=2))
        return 0
    return _run(cfg, args)


def _run(cfg: Any, args: argparse.Namespace) -> int:
    from strom.connect.data import ConfigError
    from strom.connect.runtime import ConnectorRun, spark_session

    if not begin_run("strom connect", args.trigger_interval_ms):
        return 2
    spark = spark_session(f"strom-connect-{cfg.name}")
    runner = ConnectorRun(cfg, args.bootstrap_server, Path(args.state_dir) / cfg.name)
    stopping = stop_on_signals()
    try:
        q = runner.start(spark, once=args.once, trigger_ms=args.trigger_interval_ms)
        print(f"connector {cfg.name} ({cfg.connector_class}) running", flush=True)
        while not stopping.is_set():
            try:
                if q.awaitTermination(0.5):
                    break
            except Exception:  # the query failed: reported below, in one line
                break
        runner.stop()
        exc = q.exception()
        st = runner.status()["strom"]
        print(
            f"connector {cfg.name} stopped: {st['batches']} batches, {st['records_in']} records in, "
            f"{st['records_out']} out, {st['failed_records']} failed ({st['dead_lettered']} to the DLQ), "
            f"{st['filtered']} filtered",
            flush=True,
        )
        if exc is not None:
            print(f"strom connect: connector {cfg.name} failed: {runner.error or exc}", file=sys.stderr)
            return 1
        return 0
    except ConfigError as e:
        print(f"strom connect: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # the broker unreachable, the file unreadable ...: one line, no traceback
        print(
            f"strom connect: connector {cfg.name} could not start: {type(e).__name__}: {e}", file=sys.stderr
        )
        return 1
    finally:
        runner.stop()
        spark.stop()
