"""Command line of the ledger example::

    python -m strom.examples.ledger generate --bootstrap-server HOST:PORT [--days 5 ...]
    python -m strom.examples.ledger run      --bootstrap-server HOST:PORT --checkpoint DIR [--available-now]
    python -m strom.examples.ledger serve    --bootstrap-server HOST:PORT [--port 8080]
    python -m strom.examples.ledger query    [--url http://127.0.0.1:8080] item SKU-0001 | cell A-01-1 |
                                             worker anna 2024-03-04 | corrections | over | stock | health

Exit status: 0 on success, 1 on a failure (message on stderr), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import replace
from datetime import date
from urllib.parse import quote

__all__ = ["main"]


def _bootstrap(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap-server",
        "--bootstrap",
        dest="bootstrap",
        default=os.environ.get("STROM_BOOTSTRAP", "127.0.0.1:9092"),
        help="broker address (default $STROM_BOOTSTRAP or 127.0.0.1:9092)",
    )


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m strom.examples.ledger", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="write a generated ledger (and master data)")
    _bootstrap(g)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--days", type=int, default=5, help="days simulated (default 5)")
    g.add_argument(
        "--from-day", type=int, default=0, help="write only days >= this (0-based): extends a ledger"
    )
    g.add_argument("--movements-per-day", type=int, default=200)
    g.add_argument("--items", type=int, default=40)
    g.add_argument("--cells", type=int, default=30)
    g.add_argument("--workers", type=int, default=6)
    g.add_argument("--mistake-rate", type=float, default=0.03)
    g.add_argument(
        "--start", type=date.fromisoformat, default=date(2024, 3, 4), help="first day (YYYY-MM-DD)"
    )
    g.add_argument("--partitions", type=int, default=3, help="ledger partitions if the topic is created")
    g.add_argument("--dry-run", action="store_true", help="print the movements as JSON lines instead")

    r = sub.add_parser("run", help="run the Spark job")
    _bootstrap(r)
    r.add_argument("--checkpoint", required=True, help="checkpoint directory (one sub-directory per view)")
    r.add_argument("--available-now", action="store_true", help="process what is there, then exit")
    r.add_argument("--trigger-ms", type=int, default=1000, help="micro-batch interval when continuous")
    r.add_argument("--max-offsets-per-trigger", type=int, default=None)
    r.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    r.add_argument(
        "--shuffle-partitions", type=int, default=4, help="state partitions (fixed by the checkpoint)"
    )
    r.add_argument("--timeout", type=int, default=None, help="give up after this many seconds")

    s = sub.add_parser("serve", help="run the interactive-query HTTP service")
    _bootstrap(s)
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8080)
    s.add_argument("--sync-timeout", type=float, default=10.0, help="read-your-writes wait per request")

    q = sub.add_parser("query", help="ask the service")
    q.add_argument("--url", default=os.environ.get("LEDGER_URL", "http://127.0.0.1:8080"))
    q.add_argument("what", choices=["item", "cell", "worker", "corrections", "over", "stock", "health"])
    q.add_argument("args", nargs="*")
    return ap


def _generate(a: argparse.Namespace) -> int:
    from strom.examples.ledger.generator import GeneratorConfig, day_slice, generate

    cfg = GeneratorConfig(
        seed=a.seed,
        items=a.items,
        cells=a.cells,
        workers=a.workers,
        days=a.days,
        movements_per_day=a.movements_per_day,
        mistake_rate=a.mistake_rate,
        start=a.start,
    )
    w = generate(replace(cfg))
    movements = day_slice(w, cfg.start, a.from_day)
    if a.dry_run:
        for m in movements:
            sys.stdout.write(m.to_json().decode() + "\n")
        return 0
    from strom.examples.ledger.producer import produce_ledger, produce_master
    from strom.examples.ledger.topics import ensure_topics

    asyncio.run(ensure_topics(a.bootstrap, ledger_partitions=a.partitions))
    produce_master(a.bootstrap, w.items, w.cells, create=False)
    n = produce_ledger(a.bootstrap, movements, create=False)
    stornos = sum(m.is_storno for m in movements)
    print(
        f"wrote {n} movements ({stornos} stornos), {len(w.items)} items, {len(w.cells)} cells "
        f"to {a.bootstrap}"
    )
    return 0


def _run(a: argparse.Namespace) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from strom.examples.ledger.job import JobConfig, run

    spark = (
        SparkSession.builder.master(a.master)
        .appName("strom-ledger")
        .config("spark.sql.shuffle.partitions", str(a.shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        run(
            spark,
            JobConfig(
                bootstrap=a.bootstrap,
                checkpoint=a.checkpoint,
                available_now=a.available_now,
                trigger_ms=a.trigger_ms,
                max_offsets_per_trigger=a.max_offsets_per_trigger,
            ),
            timeout=a.timeout,
        )
    finally:
        spark.stop()
    return 0


def _query(a: argparse.Namespace) -> int:
    need = {"item": 1, "cell": 1, "worker": 2}.get(a.what, 0)
    if a.what == "corrections":
        need = len(a.args[:1])
    if len(a.args) != need:
        print(f"query {a.what}: expected {need} argument(s)", file=sys.stderr)
        return 2
    args = [quote(x, safe="") for x in a.args]
    paths = {
        "item": "/items/{0}",
        "cell": "/cells/{0}",
        "worker": "/workers/{0}/days/{1}",
        "corrections": "/corrections?item={0}" if args else "/corrections",
        "over": "/over-capacity",
        "stock": "/stock",
        "health": "/health?sync=1",
    }
    path = paths[a.what].format(*args)
    try:
        with urllib.request.urlopen(a.url.rstrip("/") + path, timeout=30) as resp:
            body = json.load(resp)
    except urllib.error.HTTPError as e:
        print(e.read().decode(errors="replace"), file=sys.stderr)
        return 1
    print(json.dumps(body, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    try:
        if a.command == "generate":
            return _generate(a)
        if a.command == "run":
            return _run(a)
        if a.command == "serve":
            from strom.examples.ledger.service import serve

            serve(a.bootstrap, a.host, a.port, a.sync_timeout)
            return 0
        return _query(a)
    except (OSError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
