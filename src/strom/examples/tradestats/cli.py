"""``python -m strom.examples.tradestats``: a trade-statistics service that answers queries from
its own state, with no database (the Kafka Streams Interactive Queries demo, "who needs a
database").

Theory of operation
-------------------
Topic ``tradestats-trades`` holds trades, key = the symbol, value = JSON
``{"symbol", "price", "volume", "ts"}`` with the record timestamp = ``ts`` (epoch ms). Two
``strom.streams`` queries (exactly-once, resuming from ``--checkpoint``) read it:

* ``stats``: per symbol ``{"count", "volume", "min", "max", "avg", "notional"}`` (``avg`` = the
  mean trade price, ``notional`` = sum of price * volume) to the compacted ``tradestats-stats``;
* ``windows``: the same statistics per symbol and tumbling window of ``WINDOW_MS`` to the
  compacted ``tradestats-windows``, keyed in Kafka Streams' windowed layout (symbol bytes + the
  8-byte big-endian window start) in the partition of the symbol, so that ``strom streams serve``
  answers window fetches. (The DSL writes windowed keys as JSON; :func:`to_windowed_layout`
  re-encodes them after the operator, a local addition of this example.)

``serve`` runs ``strom streams serve`` over both topics (tables ``stats`` and ``windows``);
``query`` asks it: ``query SYMBOL``, ``query --from A --to B`` (key range), ``query SYMBOL
--windows [--since MS] [--until MS]``.

Error contract: a missing broker or server gives a one-line error and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

TRADES, STATS, WINDOWS = "tradestats-trades", "tradestats-stats", "tradestats-windows"
PARTITIONS = 3
WINDOW_MS = 60_000
APP = "tradestats"


def empty() -> dict[str, Any]:
    return {"count": 0, "volume": 0, "min": None, "max": None, "avg": None, "notional": 0.0, "_sum": 0.0}


def add(agg: dict[str, Any], trade: dict[str, Any]) -> dict[str, Any]:
    """The statistics with one more trade (a new dict: the previous one may have been emitted)."""
    price, volume = float(trade["price"]), int(trade["volume"])
    a = dict(agg)
    a["count"] += 1
    a["volume"] += volume
    a["min"] = price if a["min"] is None else min(a["min"], price)
    a["max"] = price if a["max"] is None else max(a["max"], price)
    a["_sum"] += price
    a["avg"] = round(a["_sum"] / a["count"], 6)
    a["notional"] = round(a["notional"] + price * volume, 6)
    return a


def parse_trade(key: Any, value: Any) -> list[tuple[Any, Any]]:
    """A trade keyed by its symbol; a record that is not a trade is skipped."""
    if not isinstance(value, dict) or "price" not in value or "volume" not in value:
        return []
    return [(str(value.get("symbol") or key), value)]


def reference(trades: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], dict[tuple[str, int], Any]]:
    """The same statistics in plain Python (per symbol in production order): the tests' oracle.
    Windows are never closed here (no grace is configured, so none is dropped in order)."""
    stats: dict[str, Any] = {}
    wins: dict[tuple[str, int], Any] = {}
    for t in trades:
        s = t["symbol"]
        stats[s] = add(stats.get(s) or empty(), t)
        start = int(t["ts"]) // WINDOW_MS * WINDOW_MS
        wins[(s, start)] = add(wins.get((s, start)) or empty(), t)
    return stats, wins


def _admin(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    a = AdminClient({"bootstrap.servers": bootstrap})
    compact = {"cleanup.policy": "compact"}
    topics = [
        NewTopic(TRADES, PARTITIONS, 1),
        NewTopic(STATS, PARTITIONS, 1, config=compact),
        NewTopic(WINDOWS, PARTITIONS, 1, config=compact),
    ]
    for t, f in a.create_topics(topics, operation_timeout=30).items():
        try:
            f.result(30)
        except Exception as e:  # already exists is fine
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise SystemExit(f"tradestats: cannot create {t}: {e}") from None


def produce(bootstrap: str, trades: Sequence[dict[str, Any]]) -> int:
    """Trades keyed by symbol (murmur2, as Java clients), record timestamp = ``ts``."""
    from confluent_kafka import Producer

    _admin(bootstrap)
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "partitioner": "murmur2_random"}
    p = Producer(conf)
    for t in trades:
        key, value = str(t["symbol"]).encode(), json.dumps(t).encode()
        p.produce(TRADES, key=key, value=value, timestamp=int(t["ts"]))
    left = p.flush(30)
    if left:
        raise SystemExit(f"tradestats: {left} trades not delivered to {bootstrap}")
    return len(trades)


def public(agg: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in agg.items() if not k.startswith("_")}


def to_windowed_layout(pdfs: Iterator[Any]) -> Iterator[Any]:
    """The DSL's windowed rows (key = JSON ``{"key", "start", "end"}``) as Kafka Streams' windowed
    key (key bytes + 8-byte start) in the partition of the inner key (murmur2)."""
    import pandas as pd  # type: ignore[import-untyped,unused-ignore]

    from strom.client.partitioner import partition_for_key

    for pdf in pdfs:
        keys, parts = [], []
        for raw in pdf["key"]:
            w = json.loads(bytes(raw))
            inner = str(w["key"]).encode()
            keys.append(inner + struct.pack(">q", int(w["start"])))
            parts.append(partition_for_key(inner, PARTITIONS))
        yield pd.DataFrame(
            {"key": keys, "value": list(pdf["value"]), "partition": pd.Series(parts, dtype="int32")}
        )


def start(spark: Any, bootstrap: str, checkpoint: str, trigger: dict[str, Any]) -> tuple[Any, Any]:
    """Both queries (statistics and windowed statistics), exactly-once to their topics."""
    from strom import streams
    from strom.streams import processors as P

    trades = streams.stream(spark, TRADES, bootstrap=bootstrap, value_serde="json").flat_map(parse_trade)
    q1 = (
        trades.group_by_key()
        .aggregate(empty, add)
        .to(STATS, os.path.join(checkpoint, "stats"), trigger=trigger, query_name="tradestats_stats")
    )
    plan = trades.group_by_key().windowed_by(P.TimeWindows(WINDOW_MS)).aggregate(empty, add)
    df = plan.frame("json", "json").mapInPandas(to_windowed_layout, "key binary, value binary, partition int")
    w = (
        df.writeStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", WINDOWS)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", os.path.join(checkpoint, "windows"))
        .outputMode("append")
        .queryName("tradestats_windows")
        .trigger(**trigger)
    )
    return q1, w.start()


def run(bootstrap: str, checkpoint: str, available_now: bool) -> None:
    from strom.examples import _io

    _admin(bootstrap)
    _io.run_pipeline(
        "strom-tradestats", "tradestats",
        lambda spark, trigger: start(spark, bootstrap, checkpoint, trigger), available_now,
    )


def serve_args(bootstrap: str, server: str) -> list[str]:
    """``strom streams serve`` arguments for this service's two tables."""
    return [
        "--bootstrap-server", bootstrap, "--application-id", APP, "--application-server", server,
        "--table", f"stats={STATS}:json", "--windowed-table", f"windows={WINDOWS}:json@{WINDOW_MS}",
    ]


def query_path(symbol: str | None, lo: str | None, hi: str | None, windows: bool,
               since: int | None, until: int | None) -> str:
    if windows:
        if symbol is None:
            raise SystemExit("tradestats: --windows needs a SYMBOL")
        q = {k: v for k, v in (("from", since), ("to", until)) if v is not None}
        return f"/tables/windows/windows/{urllib.parse.quote(symbol, safe='')}?{urllib.parse.urlencode(q)}"
    if symbol is not None:
        return f"/tables/stats/keys/{urllib.parse.quote(symbol, safe='')}"
    q2 = {k: v for k, v in (("from", lo), ("to", hi)) if v is not None}
    return f"/tables/stats/range?{urllib.parse.urlencode(q2)}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m strom.examples.tradestats", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce", help="write trades: SYMBOL:PRICE:VOLUME[:TS_MS] ...")
    p.add_argument("trades", nargs="+")
    r = sub.add_parser("run", help="run the two streams queries")
    r.add_argument("--checkpoint", required=True)
    r.add_argument("--available-now", action="store_true")
    s = sub.add_parser("serve", help="the interactive-query state server (strom streams serve)")
    s.add_argument("--application-server", default="127.0.0.1:8089", metavar="HOST:PORT")
    q = sub.add_parser("query", help="ask the state server")
    q.add_argument("symbol", nargs="?")
    q.add_argument("--server", default="127.0.0.1:8089")
    q.add_argument("--from", dest="lo")
    q.add_argument("--to", dest="hi")
    q.add_argument("--windows", action="store_true")
    q.add_argument("--since", type=int)
    q.add_argument("--until", type=int)
    a = ap.parse_args(argv)
    if a.cmd == "produce":
        trades = []
        now = int(time.time() * 1000)
        for text in a.trades:
            f = text.split(":")
            try:
                if len(f) not in (3, 4):
                    raise ValueError
                trades.append({"symbol": f[0], "price": float(f[1]), "volume": int(f[2]),
                               "ts": int(f[3]) if len(f) == 4 else now})
            except ValueError:
                ap.error(f"bad trade {text!r}: expected SYMBOL:PRICE:VOLUME[:TS_MS]")
        print(f"produced {produce(a.bootstrap, trades)} trades")
    elif a.cmd == "run":
        run(a.bootstrap, a.checkpoint, a.available_now)
    elif a.cmd == "serve":
        from strom.streams import serve

        return serve.main(serve_args(a.bootstrap, a.application_server))
    else:
        url = f"http://{a.server}" + query_path(a.symbol, a.lo, a.hi, a.windows, a.since, a.until)
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = resp.read()
        except urllib.error.HTTPError as e:
            print(e.read().decode(), file=sys.stderr)
            return 1
        except (OSError, urllib.error.URLError) as e:
            print(f"tradestats: cannot reach {a.server}: {e}", file=sys.stderr)
            return 1
        print(json.dumps(json.loads(body), indent=2))
    return 0
