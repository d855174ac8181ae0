"""Rows/s through the strom Spark source, compared in the same run with Spark's built-in rate
source and with a plain confluent-kafka consumer reading the same topic.

    python bench/spark_throughput.py [--rows 1000000] [--partitions 2]

Starts a strom broker, fills a topic with 100-byte values (8-byte keys, 1000 distinct), then runs
each query once as a single streaming micro-batch (Trigger.AvailableNow for strom; one batch of
the rate-micro-batch source with the same number of rows) into (a) the noop sink and (b)
groupBy(key).count(), and reports Spark's processedRowsPerSecond for the batch. local[N] with N =
partitions; figures are per run, not per core.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from strom.client import Client
from strom.protocol import records as rec
from strom.testing.broker_process import BrokerProcess

TOPIC = "bench"


async def fill(bootstrap: str, rows: int, partitions: int) -> None:
    async with Client(bootstrap) as c:
        await c.create_topics({TOPIC: (partitions, 1)})
        per = rows // partitions
        value = b"x" * 100
        ts = int(time.time() * 1000)
        chunk = 2000
        template = [rec.build_batch([(f"key{i % 1000:05d}".encode(), value, [], ts) for i in range(chunk)])]
        sends = []
        for p in range(partitions):
            for _ in range(per // chunk):
                sends.append(c.produce(TOPIC, p, template[0]))
                if len(sends) >= 32:
                    await asyncio.gather(*sends)
                    sends = []
        await asyncio.gather(*sends)


def run_stream(df: Any, ckpt: str, sink: str, available_now: bool) -> dict[str, Any]:
    w = df.writeStream.option("checkpointLocation", ckpt).format("noop")
    if sink != "noop":
        w = w.outputMode("complete")
    if available_now:
        q = w.trigger(availableNow=True).start()
        q.awaitTermination()
    else:
        q = w.trigger(processingTime="1 second").start()
        while not any(p["numInputRows"] for p in q.recentProgress):
            time.sleep(0.2)
        q.stop()
    best = max(q.recentProgress, key=lambda p: p["numInputRows"])
    return {"rows": best["numInputRows"], "rps": best["processedRowsPerSecond"], "ms": best["durationMs"]}


def confluent_rate(bootstrap: str, rows: int, partitions: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * 1024 * 1024,
            "max.partition.fetch.bytes": 8 * 1024 * 1024,
        }
    )
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    n = 0
    nbytes = 0
    t = time.perf_counter()
    while n < rows:
        for m in c.consume(num_messages=10_000, timeout=5):
            if m.error() is None:
                n += 1
                nbytes += len(m.value())
    elapsed = time.perf_counter() - t
    c.close()
    return n / elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="strom-spark-bench-"))
    broker = BrokerProcess(tmp / "data").start()
    try:
        t = time.perf_counter()
        asyncio.run(fill(broker.bootstrap, args.rows, args.partitions))
        rows = args.rows // args.partitions // 2000 * 2000 * args.partitions
        print(f"filled {rows} rows in {time.perf_counter() - t:.1f}s")
        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master(f"local[{args.partitions}]")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", str(args.partitions))
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        strom_df = (
            spark.readStream.format("strom")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .load()
        )
        rate_df = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", rows)
            .option("numPartitions", args.partitions)
            .load()
            .selectExpr("CAST(value % 1000 AS STRING) AS key", "value")
        )
        results: dict[str, dict[str, Any]] = {}
        for warm in (True, False):
            for name, df, avail in (("strom", strom_df, True), ("rate", rate_df, False)):
                for sink in ("noop", "groupBy(key).count()"):
                    q = df if sink == "noop" else df.groupBy("key").count()
                    r = run_stream(q, tempfile.mkdtemp(dir=tmp), "noop" if sink == "noop" else "agg", avail)
                    if not warm:
                        results[f"{name} -> {sink}"] = r
        ck = confluent_rate(broker.bootstrap, rows, args.partitions)
        print(f"rows={rows} partitions={args.partitions} value=100B local[{args.partitions}]")
        for k, r in results.items():
            print(f"{k:32s} {r['rps'] / 1e6:6.2f} M rows/s  ({r['rows']} rows)")
        for sink in ("noop", "groupBy(key).count()"):
            ratio = results[f"strom -> {sink}"]["rps"] / results[f"rate -> {sink}"]["rps"]
            print(f"strom / rate ({sink}): {ratio:.2f}x")
        print(f"{'confluent-kafka consumer (1 thread)':32s} {ck / 1e6:6.2f} M rows/s")
        spark.stop()
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
