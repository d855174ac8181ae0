"""strom.streams windowed count vs the same query in plain Spark, one run, same data.

Fills a topic with ``--rows`` records (1,000 keys, 100-byte values, timestamps 1 ms apart) on a
real strom broker, then counts per key in 2 s tumbling windows with 1 s grace / watermark:

- plain Spark: ``withWatermark("timestamp", "1 second").groupBy(window(timestamp, "2 seconds"),
  key).count()`` in append mode (final results only) into the noop sink;
- strom.streams: ``group_by_key().windowed_by(TimeWindows(2000, grace=1000)).count(emit="final")``
  into the noop sink, and the same written exactly-once to a strom topic.

Each query runs ``availableNow`` on a fresh checkpoint; rows/s = input rows / wall time of the
query (start to end, Spark's planning included, the same for all). Usage::

    PYTHONPATH=src python bench/streams.py --rows 200000 --repeat 2
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from strom.client import Client
from strom.protocol import records as rec
from strom.testing.broker_process import BrokerProcess

TOPIC = "bench-streams"


async def fill(bootstrap: str, rows: int, partitions: int) -> int:
    async with Client(bootstrap) as c:
        await c.create_topics({TOPIC: (partitions, 1), TOPIC + "-out": (partitions, 1)})
        per = rows // partitions
        base = 1_700_000_000_000
        chunk = 2000
        sends = []
        n = 0
        for p in range(partitions):
            for b in range(per // chunk):
                off = b * chunk
                batch = rec.build_batch(
                    [(f"key{i % 1000:05d}".encode(), b"x" * 100, [], base + off + i) for i in range(chunk)]
                )
                sends.append(c.produce(TOPIC, p, batch))
                n += chunk
                if len(sends) >= 16:
                    await asyncio.gather(*sends)
                    sends = []
        await asyncio.gather(*sends)
        return n


def timed(q: Any) -> float:
    t = time.perf_counter()
    q.awaitTermination()
    if q.exception() is not None:
        raise SystemExit(str(q.exception()))
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="strom-streams-bench-"))
    broker = BrokerProcess(tmp / "data").start()
    try:
        rows = asyncio.run(fill(broker.bootstrap, args.rows, args.partitions))
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        import strom.streams as streams
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

        def plain(ck: str) -> Any:
            df = (
                spark.readStream.format("strom")
                .option("kafka.bootstrap.servers", boot)
                .option("subscribe", TOPIC)
                .option("startingOffsets", "earliest")
                .load()
            )
            agg = (
                df.withWatermark("timestamp", "1 second")
                .groupBy(F.window("timestamp", "2 seconds"), "key")
                .count()
            )
            w = agg.writeStream.format("noop").outputMode("append").option("checkpointLocation", ck)
            return w.trigger(availableNow=True).start()

        def plan() -> Any:
            g = streams.stream(spark, TOPIC, bootstrap=boot).group_by_key()
            return g.windowed_by(streams.TimeWindows(2000, grace=1000)).count(emit="final")

        def ours_noop(ck: str) -> Any:
            w = plan().frame("json", "string").writeStream.format("noop").option("checkpointLocation", ck)
            return w.trigger(availableNow=True).start()

        def ours_topic(ck: str) -> Any:
            return plan().to(TOPIC + "-out", ck, value_serde="string", trigger={"availableNow": True})

        results: dict[str, list[float]] = {
            "plain Spark -> noop": [],
            "strom.streams -> noop": [],
            "strom.streams -> topic (exactly-once)": [],
        }
        starts = {
            "plain Spark -> noop": plain,
            "strom.streams -> noop": ours_noop,
            "strom.streams -> topic (exactly-once)": ours_topic,
        }
        for r in range(args.repeat):
            for name, start in starts.items():
                ck = str(tmp / f"ck-{r}-{len(results[name])}-{abs(hash(name))}")
                secs = timed(start(ck))
                results[name].append(rows / secs)
                print(f"round {r}: {name}: {rows / secs:,.0f} rows/s ({secs:.1f} s)", flush=True)
        print(f"{rows} rows, {args.partitions} partitions, local[{args.partitions}]; median rows/s:")
        med = {k: statistics.median(v) for k, v in results.items()}
        for k, v in med.items():
            print(f"  {k}: {v:,.0f}")
        ratio = med["strom.streams -> noop"] / med["plain Spark -> noop"]
        print(f"  strom.streams / plain Spark (noop): {ratio:.2f}x")
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
