"""Rows/s through the strom Spark source, compared in the same run with Spark's built-in rate
source and with a plain confluent-kafka consumer reading the same topic.

    python bench/spark_throughput.py [--rows 4000000] [--partitions 2] [--warmup 3] [--repeat 5]

Starts a strom broker, fills a topic with 100-byte values (8-byte keys, 1000 distinct), then runs
each query as a single streaming micro-batch under Trigger.AvailableNow (the strom source from the
earliest offsets; Spark's ``rate-micro-batch`` source with ``rowsPerBatch`` = the same number of
rows) into (a) the noop sink and (b) groupBy(key).count(), and reports Spark's
processedRowsPerSecond for the batch (rows / trigger duration, so fixed per-batch costs count),
and the CPU seconds per million rows the JVM, the Python workers and the broker spent on the
query (from /proc; query start-up included, a Python worker that exits during it not).

``--warmup`` rounds (reported apart: the first is a cold JVM, whose JIT needs several rounds to
reach steady speed -- the rate source runs 2.9 M rows/s on its first 4 M-row batch and 14 M
rows/s from its fourth), then ``--repeat`` rounds; each round runs every query once
(interleaved, so load on a shared machine hits all of them alike) and the median per query is
reported, with the spread.
``local[C]`` with C = ``--cores`` (default: ``--partitions``), and the rate and python-arrow
sources get C partitions; the broker runs on the same machine and competes for the same cores.
With fewer topic partitions than cores, ``--min-partitions C`` splits each partition's offset
range into several Spark tasks (the source option ``minPartitions``).

``rate (Kafka rows)`` is the rate source shaped like the Kafka schema (binary 8-byte key, binary
100-byte value, topic, partition, offset, timestamp, timestampType): the same bytes per row for
the JVM to carry as strom's rows, to tell the cost of the row shape from the cost of the source.

A fourth source, ``python-arrow``, is a Python data source that yields pre-built Arrow batches of
the Kafka schema (70,000 rows, as one 8 MiB fetch gives) and does no I/O: the ceiling of Spark's
Python data source path on this machine (the JVM ingesting Arrow from a Python worker), which
bounds any Python source, strom's included.

The confluent-kafka consumer (one thread, librdkafka fetching in the background) reads the same
topic from offset 0 and touches each message (``len(value)``); it is configured not to throttle
its prefetch (librdkafka's default ``fetch.queue.backoff.ms`` of 1 s stalls it at this rate).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from strom.client import Client
from strom.protocol import records as rec
from strom.testing.broker_process import BrokerProcess

TOPIC = "bench"
CEILING_BATCH = 70_000


def ceiling_source(rows: int, partitions: int) -> Any:
    """A Python data source yielding pre-built Arrow batches of the Kafka schema, no I/O."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from strom.spark.source import kafka_schema

    class Part(InputPartition):
        def __init__(self, rows: int) -> None:
            super().__init__(None)
            self.rows = rows

    class Reader(DataSourceStreamReader):
        def initialOffset(self) -> dict[str, int]:
            return {"o": 0}

        def latestOffset(self) -> dict[str, int]:
            return {"o": rows}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Part]:
            n = end["o"] - start["o"]
            return [Part(n // partitions) for _ in range(partitions)] if n else []

        def read(self, part: Part) -> Any:
            import numpy as np
            import pyarrow as pa

            from strom.spark.arrow_decode import KAFKA_ARROW_SCHEMA

            n = CEILING_BATCH

            def binary(width: int) -> pa.Array:
                offsets = pa.py_buffer((np.arange(n + 1) * width).astype(np.int32))
                return pa.Array.from_buffers(pa.binary(), n, [None, offsets, pa.py_buffer(b"x" * width * n)])

            batch = pa.RecordBatch.from_arrays(
                [
                    binary(8),
                    binary(100),
                    pa.array([TOPIC] * n, pa.string()),
                    pa.array(np.zeros(n, np.int32)),
                    pa.array(np.arange(n, dtype=np.int64)),
                    pa.array(np.full(n, 1_700_000_000_000_000), pa.timestamp("us", tz="UTC")),
                    pa.array(np.zeros(n, np.int32)),
                ],
                schema=KAFKA_ARROW_SCHEMA,
            )
            left = part.rows
            while left > 0:
                yield batch.slice(0, min(left, n))
                left -= n

        def commit(self, end: dict[str, int]) -> None:
            pass

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "python-arrow"

        def schema(self) -> Any:
            return kafka_schema()

        def streamReader(self, schema: Any) -> Reader:
            return Reader()

    return Ceiling


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


def cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) so far of this process tree's JVM, its Python workers
    (``pyspark.daemon``) and the strom broker, from /proc (zeros where there is no /proc).
    Only descendants of this process count: the machine may run other Sparks and brokers."""
    out = {"jvm": 0.0, "python workers": 0.0, "broker": 0.0}
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    procs: dict[int, tuple[int, float, bytes]] = {}
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ")
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        procs[int(pid)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / hz, cmd)
    me = os.getpid()
    for ppid, cpu, cmd in procs.values():
        while ppid not in (me, 0, 1) and ppid in procs:
            ppid = procs[ppid][0]
        if ppid != me:
            continue
        kind = (
            "jvm"
            if b"java" in cmd and b"pyspark-shell" in cmd
            else "python workers"
            if b"pyspark.daemon" in cmd
            else "broker"
            if b"strom serve" in cmd
            else None
        )
        if kind:
            out[kind] += cpu
    return out


def run_stream(df: Any, ckpt: str, aggregate: bool) -> dict[str, Any]:
    w = df.writeStream.option("checkpointLocation", ckpt).format("noop")
    if aggregate:
        w = w.outputMode("complete")
    before = cpu_seconds()
    q = w.trigger(availableNow=True).start()
    q.awaitTermination()
    after = cpu_seconds()
    best = max(q.recentProgress, key=lambda p: p["numInputRows"])
    return {
        "rows": best["numInputRows"],
        "rps": best["processedRowsPerSecond"],
        "ms": best["durationMs"],
        "cpu": {k: after[k] - before[k] for k in after},
    }


def confluent_rate(bootstrap: str, rows: int, partitions: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * 1024 * 1024,
            "max.partition.fetch.bytes": 8 * 1024 * 1024,
            "fetch.queue.backoff.ms": 1,
            "queued.min.messages": 1_000_000,
            "queued.max.messages.kbytes": 1_000_000,
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
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--partitions", type=int, default=2, help="topic partitions")
    ap.add_argument("--cores", type=int, default=0, help="local[N] (default: --partitions)")
    ap.add_argument("--warmup", type=int, default=3, help="rounds before the measured ones")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--min-partitions", type=int, default=0, help="strom option minPartitions")
    args = ap.parse_args()
    cores = args.cores or args.partitions
    os.environ["PYSPARK_PYTHON"] = sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="strom-spark-bench-"))
    broker = BrokerProcess(tmp / "data").start()
    try:
        t = time.perf_counter()
        asyncio.run(fill(broker.bootstrap, args.rows, args.partitions))
        rows = args.rows // args.partitions // 2000 * 2000 * args.partitions
        print(f"filled {rows} rows in {time.perf_counter() - t:.1f}s", flush=True)
        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master(f"local[{cores}]")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", str(cores))
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        reader = (
            spark.readStream.format("strom")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
        )
        if args.min_partitions:
            reader = reader.option("minPartitions", args.min_partitions)
        strom_df = reader.load()
        rate_df = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", rows)
            .option("numPartitions", cores)
            .load()
            .selectExpr("CAST(value % 1000 AS STRING) AS key", "value")
        )
        kafka_rows_df = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", rows)
            .option("numPartitions", cores)
            .load()
            .selectExpr(
                "CAST(lpad(CAST(value % 1000 AS STRING), 8, 'k') AS BINARY) AS key",
                "CAST(repeat('x', 100) AS BINARY) AS value",
                f"'{TOPIC}' AS topic",
                "CAST(value % 2 AS INT) AS partition",
                "value AS offset",
                "timestamp",
                "0 AS timestampType",
            )
        )
        spark.dataSource.register(ceiling_source(rows, cores))
        ceiling_df = spark.readStream.format("python-arrow").load()
        runs: dict[str, list[dict[str, Any]]] = {}
        warm: dict[str, list[float]] = {}
        sources = (
            ("strom", strom_df),
            ("rate", rate_df),
            ("rate (Kafka rows)", kafka_rows_df),
            ("python-arrow", ceiling_df),
        )
        for rnd in range(args.warmup + args.repeat):
            measured = rnd >= args.warmup
            for name, df in sources:
                for sink in ("noop", "groupBy(key).count()"):
                    agg = sink != "noop"
                    q = df.groupBy("key").count() if agg else df
                    r = run_stream(q, tempfile.mkdtemp(dir=tmp), agg)
                    assert r["rows"] == rows, (name, sink, r)
                    if measured:
                        runs.setdefault(f"{name} -> {sink}", []).append(r)
                    else:
                        warm.setdefault(f"{name} -> {sink}", []).append(r["rps"])
            if measured:
                runs.setdefault("confluent", []).append(
                    {"rps": confluent_rate(broker.bootstrap, rows, args.partitions), "ms": {}, "cpu": {}}
                )
            print(f"round {rnd} done", file=sys.stderr, flush=True)
        print(
            f"rows={rows} topic partitions={args.partitions} value=100B local[{cores}] "
            f"minPartitions={args.min_partitions or '-'} warm-up rounds={args.warmup} "
            f"rounds={args.repeat} (median, min..max)"
        )
        if warm:
            print("warm-up rounds, M rows/s (the first on a cold JVM):")
            for k, rps_w in warm.items():
                print(f"  {k:44s} " + " ".join(f"{v / 1e6:6.2f}" for v in rps_w))
        med: dict[str, float] = {}
        for k, rs in runs.items():
            rps = sorted(r["rps"] for r in rs)
            med[k] = statistics.median(rps)
            label = "confluent-kafka consumer (1 thread)" if k == "confluent" else k
            extra = ""
            if rs[0]["ms"]:
                add = statistics.median(r["ms"].get("addBatch", 0) for r in rs)
                trig = statistics.median(r["ms"].get("triggerExecution", 0) for r in rs)
                extra = f"  trigger {trig:.0f} ms, addBatch {add:.0f} ms"
                cpu = {c: statistics.median(r["cpu"][c] for r in rs) * 1e6 / rows for c in rs[0]["cpu"]}
                extra += "; CPU s/M rows: " + ", ".join(f"{c} {v:.2f}" for c, v in cpu.items() if v)
            print(
                f"{label:44s} {med[k] / 1e6:6.2f} M rows/s ({rps[0] / 1e6:.2f}..{rps[-1] / 1e6:.2f})"
                f"  {med[k] / cores / 1e6:5.2f} per core{extra}"
            )
        for sink in ("noop", "groupBy(key).count()"):
            ratio = med[f"strom -> {sink}"] / med[f"rate -> {sink}"]
            ceil = med[f"strom -> {sink}"] / med[f"python-arrow -> {sink}"]
            shaped = med[f"strom -> {sink}"] / med[f"rate (Kafka rows) -> {sink}"]
            bound = med[f"python-arrow -> {sink}"] / med[f"rate -> {sink}"]
            print(
                f"strom / rate ({sink}): {ratio:.2f}x   strom / rate (Kafka rows): {shaped:.2f}x   "
                f"strom / python-arrow ceiling: {ceil:.2f}x   (ceiling / rate: {bound:.2f}x)"
            )
        print(f"strom -> noop / confluent-kafka: {med['strom -> noop'] / med['confluent']:.2f}x")
        spark.stop()
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
