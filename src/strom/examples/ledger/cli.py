"""Command line of the ledger example (``strom-ledger``, or ``python -m strom.examples.ledger``)::

    strom-ledger item SKU-A --name "bolts (box)" [--unit-weight-kg 2]   # catalogue: add/replace an item
    strom-ledger cell A-1 --capacity-kg 100                              # catalogue: add/replace a cell
    strom-ledger book --date 2024-03-04 --item SKU-A --cell A-1 --qty 20 --description "opening balance"
                      [--worker anna] [--time HH:MM:SS] [--unit-weight-kg W]
    strom-ledger transfer --date 2024-03-04 --item SKU-A --from A-1 --to B-1 --qty 5 [--worker anna]
    strom-ledger storno ROW_ID [--date D] [--worker anna] [--reason "wrong cell"]
    strom-ledger generate --bootstrap-server HOST:PORT [--days 5 ...]
    strom-ledger run      --bootstrap-server HOST:PORT --checkpoint DIR [--available-now]
    strom-ledger serve    --bootstrap-server HOST:PORT [--port 8080] [--pay-per-movement X --pay-per-piece Y]
    strom-ledger streams  run --checkpoint DIR [--available-now] | serve | query ITEM [CELL] [--cells]
                          (the stock table on strom.streams, see streams_job)
    strom-ledger query    [--url http://127.0.0.1:8080] item SKU-0001 | cell A-01-1 | workers |
                          worker anna [2024-03-04] | corrections [ITEM] | over | stock | dead-letters | health

Exit status: 0 on success, 1 on a failure (one line on stderr), 2 on bad usage, 130 when
interrupted (Ctrl-C), 143 on SIGTERM.
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
from typing import Any
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

    s.add_argument(
        "--pay-per-movement",
        type=float,
        default=float(os.environ.get("LEDGER_PAY_PER_MOVEMENT", "0")),
        help="pay per movement booked (default $LEDGER_PAY_PER_MOVEMENT or 0)",
    )
    s.add_argument(
        "--pay-per-piece",
        type=float,
        default=float(os.environ.get("LEDGER_PAY_PER_PIECE", "0")),
        help="pay per piece moved (default $LEDGER_PAY_PER_PIECE or 0)",
    )

    q = sub.add_parser("query", help="ask the service")
    q.add_argument("--url", default=os.environ.get("LEDGER_URL", "http://127.0.0.1:8080"))
    q.add_argument(
        "what",
        choices=[
            "item",
            "cell",
            "worker",
            "workers",
            "corrections",
            "over",
            "stock",
            "dead-letters",
            "health",
        ],
    )
    q.add_argument("args", nargs="*")

    it = sub.add_parser("item", help="add or replace an item in the catalogue")
    _bootstrap(it)
    it.add_argument("item")
    it.add_argument("--name", required=True)
    it.add_argument("--unit-weight-kg", type=float, default=None)

    ce = sub.add_parser("cell", help="add or replace a cell in the catalogue")
    _bootstrap(ce)
    ce.add_argument("cell")
    ce.add_argument("--capacity-kg", type=float, required=True)

    b = sub.add_parser("book", help="book one movement (one transaction)")
    _bootstrap(b)
    _day(b, required=True)
    b.add_argument("--item", required=True)
    b.add_argument("--cell", required=True)
    b.add_argument("--qty", type=int, required=True, help="pieces: + into the cell, - out of it")
    b.add_argument("--description", required=True)
    b.add_argument("--worker", default=None, help="who booked it (optional: opening balances have none)")
    b.add_argument("--time", type=_time, default=None, help="HH:MM:SS (default now)")
    b.add_argument("--unit-weight-kg", type=float, default=None, help="default: the item's master weight")

    t = sub.add_parser("transfer", help="move pieces between cells: both legs in one transaction")
    _bootstrap(t)
    _day(t, required=True)
    t.add_argument("--item", required=True)
    t.add_argument("--from", dest="from_cell", required=True, metavar="CELL")
    t.add_argument("--to", dest="to_cell", required=True, metavar="CELL")
    t.add_argument("--qty", type=int, required=True, help="pieces moved (positive)")
    t.add_argument("--description", default="")
    t.add_argument("--worker", default=None)
    t.add_argument("--time", type=_time, default=None, help="HH:MM:SS (default now)")
    t.add_argument("--unit-weight-kg", type=float, default=None)

    st = sub.add_parser("storno", help="reverse a ledger row (both legs of a transfer)")
    _bootstrap(st)
    st.add_argument("row_id", metavar="ROW_ID")
    _day(st, required=False)
    st.add_argument("--worker", default=None)
    st.add_argument("--reason", default="correction")
    st.add_argument("--time", type=_time, default=None, help="HH:MM:SS (default now)")
    return ap


def _iso_date(text: str) -> str:
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid date {text!r} (YYYY-MM-DD)") from None


def _time(text: str) -> str:
    parts = text.split(":")
    if len(parts) == 2:
        parts.append("00")
    ok = len(parts) == 3 and all(p.isdigit() and len(p) == 2 for p in parts)
    if not ok or int(parts[0]) > 23 or int(parts[1]) > 59 or int(parts[2]) > 59:
        raise argparse.ArgumentTypeError(f"invalid time {text!r} (HH:MM[:SS])")
    return ":".join(parts)


def _day(p: argparse.ArgumentParser, required: bool) -> None:
    extra = "" if required else " (default today)"
    p.add_argument("--date", type=_iso_date, required=required, help=f"YYYY-MM-DD{extra}")


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
    import signal
    import threading

    from strom.examples.ledger.topics import ensure_topics

    stop = threading.Event()
    got: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        got.append(signum)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    # fail fast, in one line, when the broker is not there (before starting a JVM)
    asyncio.run(ensure_topics(a.bootstrap))
    if stop.is_set():
        return _signalled(got)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from strom.examples.ledger.job import JobConfig, run

    spark = (
        SparkSession.builder.master(a.master)
        .appName("strom-ledger")
        .config("spark.sql.shuffle.partitions", str(a.shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    # SparkContext installs its own SIGINT handler (cancel all jobs, then KeyboardInterrupt in
    # whatever py4j call is running: tracebacks); ours stops the query between calls instead
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if not stop.is_set():
            print(f"ledger job: {a.bootstrap} -> views, checkpoint {a.checkpoint}", flush=True)
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
                progress=lambda line: print(line, flush=True),
                stop=stop,
            )
    except Exception as e:
        if stop.is_set():
            return _signalled(got)  # the stop interrupted a batch: it is replayed at the next start
        raise RuntimeError(_one_line(e)) from None
    finally:
        spark.stop()
    if stop.is_set():
        return _signalled(got)
    return 0


def _signalled(got: list[int]) -> int:
    import signal

    signum = got[0] if got else signal.SIGINT
    print(f"ledger job stopped ({signal.Signals(signum).name})", file=sys.stderr, flush=True)
    return 128 + int(signum)


def _one_line(e: BaseException) -> str:
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return lines[0].strip() if lines else type(e).__name__


def _query(a: argparse.Namespace) -> int:
    need = {"item": (1, 1), "cell": (1, 1), "worker": (1, 2), "corrections": (0, 1)}.get(a.what, (0, 0))
    if not need[0] <= len(a.args) <= need[1]:
        n = str(need[0]) if need[0] == need[1] else f"{need[0]} to {need[1]}"
        print(f"query {a.what}: expected {n} argument(s)", file=sys.stderr)
        return 2
    args = [quote(x, safe="") for x in a.args]
    if a.what == "worker":
        path = f"/workers/{args[0]}" + (f"/days/{args[1]}" if len(args) == 2 else "")
    else:
        paths = {
            "item": "/items/{0}",
            "cell": "/cells/{0}",
            "workers": "/workers",
            "corrections": "/corrections?item={0}" if args else "/corrections",
            "over": "/over-capacity",
            "stock": "/stock",
            "dead-letters": "/dead-letters",
            "health": "/health?sync=1",
        }
        path = paths[a.what].format(*args)
    url = a.url.rstrip("/") + path
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            body = json.load(resp)
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace")
        try:
            msg = json.loads(text).get("error") or text
        except (ValueError, AttributeError):
            msg = text
        print(f"error: {e.code} {msg}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        print(f"error: ledger service at {a.url} not reachable: {reason}", file=sys.stderr)
        return 1
    print(json.dumps(body, indent=2))
    return 0


def _master(a: argparse.Namespace) -> int:
    from strom.examples.ledger.producer import produce_master

    if a.command == "item":
        item = model_item(a)
        produce_master(a.bootstrap, items=[item])
        print(f"item {item.item} in the catalogue: {item.to_json().decode()}")
    else:
        from strom.examples.ledger.model import Cell

        if a.capacity_kg <= 0:
            print("error: --capacity-kg must be positive", file=sys.stderr)
            return 2
        cell = Cell(a.cell, a.capacity_kg)
        produce_master(a.bootstrap, cells=[cell])
        print(f"cell {cell.cell} in the catalogue: {cell.to_json().decode()}")
    return 0


def model_item(a: argparse.Namespace) -> Any:
    from strom.examples.ledger.model import Item

    if a.unit_weight_kg is not None and a.unit_weight_kg < 0:
        raise argparse.ArgumentTypeError("--unit-weight-kg must not be negative")
    return Item(a.item, a.name, a.unit_weight_kg)


def _book(a: argparse.Namespace) -> int:
    from strom.examples.ledger import book

    if a.command == "book":
        rows = book.book(
            a.bootstrap,
            date=a.date,
            item=a.item,
            cell=a.cell,
            qty=a.qty,
            description=a.description,
            worker=a.worker,
            time=a.time,
            unit_weight_kg=a.unit_weight_kg,
        )
    elif a.command == "transfer":
        rows = book.transfer(
            a.bootstrap,
            date=a.date,
            item=a.item,
            from_cell=a.from_cell,
            to_cell=a.to_cell,
            qty=a.qty,
            description=a.description,
            worker=a.worker,
            time=a.time,
            unit_weight_kg=a.unit_weight_kg,
        )
    else:
        rows = book.storno(a.bootstrap, a.row_id, date=a.date, worker=a.worker, reason=a.reason, time=a.time)
    for m in rows:
        mark = f" (storno of {m.reverses})" if m.is_storno else ""
        leg = f" [transfer {m.transfer}]" if m.transfer else ""
        who = m.worker or "no worker"
        print(f"booked {m.id}: {m.date} {m.time} {m.item} {m.cell} {m.qty:+d} ({who}){mark}{leg}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["streams"]:  # the ledger on strom.streams (its own parser)
        from strom.examples.ledger import streams_job

        return streams_job.main(args[1:])
    a = _parser().parse_args(args)
    from confluent_kafka import KafkaException

    from strom.client import KafkaError
    from strom.examples.ledger.book import BookingError

    try:
        if a.command == "generate":
            return _generate(a)
        if a.command == "run":
            return _run(a)
        if a.command == "serve":
            from strom.examples.ledger.model import PayRates
            from strom.examples.ledger.service import serve

            serve(a.bootstrap, a.host, a.port, a.sync_timeout, PayRates(a.pay_per_movement, a.pay_per_piece))
            return 0
        if a.command in ("item", "cell"):
            return _master(a)
        if a.command in ("book", "transfer", "storno"):
            return _book(a)
        return _query(a)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except argparse.ArgumentTypeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KafkaError as e:
        print(f"error: broker {a.bootstrap}: {_one_line(e)}", file=sys.stderr)
        return 1
    except (OSError, RuntimeError, BookingError, KafkaException) as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 1
