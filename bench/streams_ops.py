"""strom.streams' joins, sliding windows, table aggregations and repartitioning: throughput of
each against a plain per-key count, one run, same data.

Fills a topic with ``--rows`` records (1,000 keys, JSON values ``{"n": i % 10}``, timestamps 1 ms
apart) on a real strom broker; each pipeline runs ``availableNow`` on a fresh checkpoint, written
exactly-once to its own topic, after one warm-up run of the baseline (not reported); rows/s =
input rows / wall time (Spark planning included; for the repartitioning pipelines both
queries). Usage::

    PYTHONPATH=src python bench/streams_ops.py --rows 100000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import await_query, produce_rows

from strom.client import Client
from strom.testing.broker_process import BrokerProcess

TOPIC = "bench-ops"
OUTS = ("warmup", "count", "groupby-count", "sliding", "table-join", "table-groupby", "global-join")


async def fill(bootstrap: str, rows: int, partitions: int) -> int:
    async with Client(bootstrap) as c:
        await c.create_topics({t: (partitions, 1) for t in (TOPIC, *(f"{TOPIC}-{o}" for o in OUTS))})
        base = 1_700_000_000_000
        return await produce_rows(
            c, TOPIC, partitions, rows,
            lambda _p, i: (f"key{i % 1000:05d}".encode(), b'{"n":%d}' % (i % 10), [], base + i),
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="strom-streams-ops-bench-"))
    broker = BrokerProcess(tmp / "data").start()
    try:
        rows = asyncio.run(fill(broker.bootstrap, args.rows, args.partitions))
        from pyspark.sql import SparkSession

        import strom.streams as S
        from strom.spark import StromDataSource

        spark = (
            SparkSession.builder.master(f"local[{args.partitions}]")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", str(args.partitions))
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(StromDataSource)
        boot = broker.bootstrap

        def st() -> Any:
            return S.stream(spark, TOPIC, bootstrap=boot, value_serde="json")

        def tb() -> Any:
            return S.table(spark, TOPIC, bootstrap=boot, value_serde="json")

        plans: dict[str, Callable[[], Any]] = {
            "count": lambda: st().group_by_key().count(),
            "groupby-count": lambda: st().group_by(lambda k, v: k).count(),
            "sliding": lambda: (
                st().group_by_key().windowed_by(S.SlidingWindows(2000, 1000)).count(emit="final")
            ),
            "table-join": lambda: tb().join(tb(), lambda a, b: [a, b], how="outer"),
            "table-groupby": lambda: tb().group_by(lambda k, v: (k[-1], v["n"])).count(),
            "global-join": lambda: st().join(
                S.global_table(spark, TOPIC, bootstrap=boot, value_serde="json"), lambda a, b: [a, b]
            ),
        }
        descr = {
            "count": "group_by_key().count() (baseline)",
            "groupby-count": "group_by(key).count() via a repartition topic (2 queries)",
            "sliding": "SlidingWindows(2 s, grace 1 s) count, final",
            "table-join": "table-table outer join (the topic with itself)",
            "table-groupby": "table group_by(last char).count() via a repartition topic",
            "global-join": "stream join global table (the topic, broadcast)",
        }
        print(f"{rows} rows, 1,000 keys, {args.partitions} partitions, local[{args.partitions}]")
        once = {"availableNow": True}
        warmup = plans["count"]().to(f"{TOPIC}-warmup", str(tmp / "ck-warmup"), trigger=once)
        await_query(warmup)
        for name, make in plans.items():
            secs = await_query(
                make().to(f"{TOPIC}-{name}", str(tmp / f"ck-{name}"), trigger={"availableNow": True})
            )
            print(f"| {descr[name]} | {rows / secs:,.0f} rows/s | {secs:.1f} s |", flush=True)
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
