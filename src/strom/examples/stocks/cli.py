"""``python -m strom.examples.stocks``: stock statistics on ``strom.streams`` (the shape of Kafka
Streams' StockStats example): quotes in, per-symbol statistics of 5 s hopping windows out.

Theory of operation
-------------------
Topic ``stocks-quotes`` holds quotes keyed by symbol, value ``{"symbol", "ask", "size", "ts"}``
with the record timestamp = the quote's time. One query groups by symbol, windows by
``TimeWindows(size=5000, advance=1000)`` (every quote falls in five windows) and aggregates
``{"count", "min_ask", "sum_ask", "avg_ask"}``; every update of a window goes exactly-once to
the compacted topic ``stocks-stats`` keyed ``{"key": symbol, "start": ms, "end": ms}``, so the
latest record per key is the window's statistics. The query resumes from ``--checkpoint``.

Commands: ``produce [--count N --seed S]`` (seeded random quotes, deterministic), ``run``
(``--available-now`` processes what is there and stops), ``show`` (the latest statistics per
window and symbol, read_committed).

Error contract: a missing broker or topic gives a one-line error and exit status 1.
"""

from __future__ import annotations

import argparse
import os
import random
from collections.abc import Sequence
from typing import Any

from strom.examples import _io

QUOTES, STATS = "stocks-quotes", "stocks-stats"
SYMBOLS = ("ACME", "BOLT", "CRAB", "DUNE")
BASE = 1_700_000_000_000
SIZE, ADVANCE = 5000, 1000
WHO = "stocks"


def quotes(count: int, seed: int, start: int = BASE) -> list[dict[str, Any]]:
    """``count`` seeded quotes, 0-700 ms apart, asks in cents-exact dollars."""
    rng = random.Random(seed)
    out, t = [], start
    for _ in range(count):
        t += rng.randint(0, 700)
        out.append(
            {
                "symbol": rng.choice(SYMBOLS),
                "ask": rng.randint(5000, 15000) / 100,
                "size": rng.randint(1, 100),
                "ts": t,
            }
        )
    return out


def init() -> dict[str, Any]:
    return {"count": 0, "min_ask": None, "sum_ask": 0.0, "avg_ask": None}


def add(agg: dict[str, Any], q: dict[str, Any]) -> dict[str, Any]:
    n, s = agg["count"] + 1, agg["sum_ask"] + q["ask"]
    m = q["ask"] if agg["min_ask"] is None else min(agg["min_ask"], q["ask"])
    return {"count": n, "min_ask": m, "sum_ask": s, "avg_ask": round(s / n, 4)}


def reference(qs: Sequence[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """The statistics per (symbol, window start) computed directly (no grace: quotes in order)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for q in qs:
        last = q["ts"] - q["ts"] % ADVANCE
        for start in range(last, q["ts"] - SIZE, -ADVANCE):
            if start >= 0:
                k = (q["symbol"], start)
                out[k] = add(out.get(k, init()), q)
    return out


def produce(bootstrap: str, qs: Sequence[dict[str, Any]], partitions: int = 1) -> int:
    _io.create_topics(bootstrap, [(QUOTES, partitions, False), (STATS, partitions, True)], WHO)
    return _io.produce_json(bootstrap, QUOTES, [(q["symbol"], q, q["ts"]) for q in qs], WHO)


def start(spark: Any, bootstrap: str, checkpoint: str, trigger: dict[str, Any]) -> Any:
    from strom import streams
    from strom.streams.processors import TimeWindows

    return (
        streams.stream(spark, QUOTES, bootstrap=bootstrap, value_serde="json")
        .group_by_key()
        .windowed_by(TimeWindows(SIZE, ADVANCE))
        .aggregate(init, add)
        .to(STATS, os.path.join(checkpoint, "stats"), trigger=trigger)
    )


def stats(bootstrap: str) -> dict[tuple[str, int], dict[str, Any]]:
    """The latest committed statistics per (symbol, window start)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for k, v in _io.read_committed(bootstrap, STATS, WHO):
        if isinstance(k, dict):
            out[(k["key"], k["start"])] = v
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m strom.examples.stocks", description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce", help="write seeded random quotes to stocks-quotes")
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    r = sub.add_parser("run", help="run the statistics query")
    r.add_argument("--checkpoint", required=True)
    r.add_argument("--available-now", action="store_true")
    sub.add_parser("show", help="print the latest statistics per window and symbol")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "produce":
            print(f"produced {produce(a.bootstrap, quotes(a.count, a.seed))} quotes")
        elif a.cmd == "run":
            spark = _io.spark_session("strom-stocks")
            try:
                q = start(
                    spark,
                    a.bootstrap,
                    a.checkpoint,
                    {"availableNow": True} if a.available_now else {"processingTime": "1 second"},
                )
                _io.run_queries([q], WHO)
            except KeyboardInterrupt:
                pass
            finally:
                spark.stop()
        else:
            print("window_start\tsymbol\tcount\tmin_ask\tavg_ask")
            for (sym, st), v in sorted(stats(a.bootstrap).items(), key=lambda x: (x[0][1], x[0][0])):
                print(f"{st}\t{sym}\t{v['count']}\t{v['min_ask']}\t{v['avg_ask']}")
    except Exception as e:  # broker down, bad topic: one line, status 1
        if isinstance(e, SystemExit):
            raise
        raise SystemExit(f"{WHO}: {e}") from None
    return 0
