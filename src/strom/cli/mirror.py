"""``strom mirror``: MirrorMaker 2 on Spark.

    strom mirror run mm2.properties [--clusters B ...] [--state-dir DIR] [--once]
                     [--trigger-interval-ms 1000] [--max-records-per-batch N]
    strom mirror validate mm2.properties
    strom mirror translate-offsets --bootstrap-server TARGET --source-alias A --group G
                     [--separator .]
    strom mirror upstream-clusters --bootstrap-server CLUSTER [--separator .]

``run`` is ``connect-mirror-maker.sh mm2.properties [--clusters ...]``: every enabled flow (or only
those into the named target clusters) as a Spark query, until Ctrl-C/SIGTERM (``--once``: mirror
what is there now, run the checkpoint/heartbeat/group-sync tasks once, exit). ``translate-offsets``
is RemoteClusterUtils.translateOffsets: a group's offsets on the target cluster, from the
checkpoints of source ``A``; ``upstream-clusters`` is upstreamClusters/replicationHops, from the
cluster's heartbeats topics. A bad config is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from strom.cli.spark_run import begin_run, stop_on_signals


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "mirror", help="MirrorMaker 2: replicate topics and consumer-group offsets between clusters"
    )
    msub = p.add_subparsers(dest="mirror_command", metavar="ACTION")
    msub.required = True
    run = msub.add_parser("run", help="run the enabled replication flows of an mm2.properties")
    run.add_argument("config", metavar="MM2_PROPERTIES")
    run.add_argument(
        "--clusters", nargs="+", metavar="ALIAS", help="only the flows into these target clusters"
    )
    run.add_argument(
        "--state-dir",
        default="strom-mirror",
        metavar="DIR",
        help="Spark checkpoints, one directory per flow (default ./strom-mirror)",
    )
    run.add_argument("--once", action="store_true", help="mirror what is there now, run the tasks once, exit")
    run.add_argument(
        "--trigger-interval-ms", type=int, default=1000, help="micro-batch interval (default 1000)"
    )
    run.add_argument(
        "--max-records-per-batch",
        type=int,
        default=500_000,
        help="records per micro-batch at most (default 500000; 0: no limit)",
    )
    val = msub.add_parser("validate", help="check an mm2.properties and print its flows")
    val.add_argument("config", metavar="MM2_PROPERTIES")
    val.add_argument("--clusters", nargs="+", metavar="ALIAS")
    tr = msub.add_parser(
        "translate-offsets", help="a consumer group's offsets on the target (RemoteClusterUtils)"
    )
    tr.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]", help="the target cluster")
    tr.add_argument("--source-alias", required=True, metavar="ALIAS", help="the source cluster's alias")
    tr.add_argument("--group", required=True)
    tr.add_argument("--separator", default=".", help="replication.policy.separator (default .)")
    tr.add_argument("--timeout-ms", type=int, default=15000)
    up = msub.add_parser(
        "upstream-clusters", help="clusters replicating into this one and their hops (RemoteClusterUtils)"
    )
    up.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    up.add_argument("--separator", default=".", help="replication.policy.separator (default .)")


def mirror(args: argparse.Namespace) -> int:
    from strom.mirror.config import MirrorConfigError, load_mm2

    if args.mirror_command == "upstream-clusters":
        from strom.mirror.runtime import upstream_clusters

        try:
            hops = upstream_clusters({"bootstrap.servers": args.bootstrap_server}, args.separator)
        except Exception as e:
            print(f"strom mirror: error: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        print(f"{'CLUSTER':<30} {'HOPS':>4}")
        for alias, n in sorted(hops.items()):
            print(f"{alias:<30} {n:>4}")
        return 0
    if args.mirror_command == "translate-offsets":
        from strom.mirror.runtime import translate_offsets

        if args.timeout_ms < 1:  # (a negative timeout is "wait forever" to librdkafka)
            print("strom mirror: error: --timeout-ms must be at least 1", file=sys.stderr)
            return 2
        try:
            got = translate_offsets(
                {"bootstrap.servers": args.bootstrap_server},
                args.source_alias,
                args.group,
                args.separator,
                args.timeout_ms / 1000,
            )
        except Exception as e:
            print(f"strom mirror: error: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        print(f"{'TOPIC':<40} {'PARTITION':>9} {'OFFSET':>12}")
        for (t, p), o in sorted(got.items()):
            print(f"{t:<40} {p:>9} {o:>12}")
        return 0
    try:
        cfg = load_mm2(args.config, args.clusters)
    except MirrorConfigError as e:
        print(f"strom mirror: error: {e}", file=sys.stderr)
        return 2
    if args.mirror_command == "validate":
        for f in cfg.flows:
            print(f"{f.name}: policy={f.policy().class_name} pattern={f.topic_filter().subscribe_pattern()}")
        if not cfg.flows:
            print("no enabled flows (set A->B.enabled = true)")
        return 0
    if not cfg.flows:
        print("strom mirror: error: no enabled flows (set A->B.enabled = true)", file=sys.stderr)
        return 2
    return _run(cfg, args)


def _run(cfg: Any, args: argparse.Namespace) -> int:
    from strom.connect.runtime import spark_session
    from strom.mirror.runtime import MirrorMaker

    if not begin_run("strom mirror", args.trigger_interval_ms):
        return 2
    if args.max_records_per_batch < 0:
        print("strom mirror: error: --max-records-per-batch must be at least 0", file=sys.stderr)
        return 2
    spark = spark_session("strom-mirror")
    mm = MirrorMaker(cfg, Path(args.state_dir), args.max_records_per_batch or None)
    stopping = stop_on_signals()
    try:
        if args.once:
            mm.run_once(spark)
        else:
            mm.start(spark, trigger_ms=args.trigger_interval_ms)
            print(f"mirroring {', '.join(f.cfg.name for f in mm.flows)}", flush=True)
            while not stopping.is_set() and mm.failed() is None:
                time.sleep(0.5)
        failed = mm.failed()
        for f in mm.flows:
            print(
                f"flow {f.cfg.name}: {f.batches} batches, {f.records} records, {f.bytes} bytes mirrored",
                flush=True,
            )
        if failed:
            print(f"strom mirror: {failed}", file=sys.stderr)
            return 1
        return 0
    except Exception as e:
        print(f"strom mirror: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        mm.stop()
        spark.stop()
