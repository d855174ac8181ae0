"""strom.streams windowed count vs the same query in plain Spark, one run, same data.

Fills a topic with ``--rows`` records (1,000 keys, each in its murmur2 partition, 100-byte
values, timestamps 1 ms apart) on a
real strom broker, then counts per key in 2 s tumbling windows with 1 s grace / watermark:

- plain Spark: ``withWatermark("timestamp", "1 second").groupBy(window(timestamp, "2 seconds"),
  key).count()`` in append mode (final results only) into the noop sink;
- strom.streams: ``group_by_key().windowed_by(TimeWindows(2000, grace=1000)).count(emit="final")``
  into the noop sink, and the same written exactly-once to a strom topic.

and a plain Python consumer (confluent-kafka, one process, no Spark) doing the same count with
the same window rules. Then a stream-table join of the same records with a 1,000-key table topic
(``{"region": ...}`` per key): strom.streams ``stream.join(table, how="left")``; plain Spark's
nearest equivalent, a stream-static left join with the table read once as a batch (latest value
per key; it does not see table updates while running); and the plain Python consumer (table into
a dict, then a lookup per record).

Each query runs ``availableNow`` on a fresh checkpoint; rows/s = input rows / wall time of the
query (start to end, Spark's planning included, the same for all); the Python consumer's time
runs from subscribe to the last record. Usage::

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

from _common import await_query, produce_rows

from strom.client import Client
from strom.protocol import records as rec
from strom.testing.broker_process import BrokerProcess

TOPIC = "bench-streams"


USERS = "bench-streams-users"


async def fill(bootstrap: str, rows: int, partitions: int) -> int:
    async with Client(bootstrap) as c:
        await c.create_topics(
            {TOPIC: (partitions, 1), TOPIC + "-out": (partitions, 1), USERS: (partitions, 1)}
        )
        from strom.client.partitioner import partition_for_key

        by_part: dict[int, list[Any]] = {}
        for i in range(1000):
            k = f"key{i:05d}".encode()
            by_part.setdefault(partition_for_key(k, partitions), []).append(
                (k, b'{"region": "r%d"}' % (i % 7), [], 1_699_999_999_000)
            )
        for p, recs in by_part.items():
            await c.produce(USERS, p, rec.build_batch(recs))
        base = 1_700_000_000_000
        keys = {p: [k for k, _, _, _ in recs] for p, recs in by_part.items()}  # each key in its partition
        return await produce_rows(
            c, TOPIC, partitions, rows, lambda p, i: (keys[p][i % len(keys[p])], b"x" * 100, [], base + i)
        )


def python_count(bootstrap: str, rows: int, size_ms: int = 2000, grace_ms: int = 1000) -> float:
    """The windowed count in plain Python: per partition stream time, a record accepted while
    its window's end + grace is after stream time, final counts as windows close. Seconds."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"py-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    t = time.perf_counter()
    c.subscribe([TOPIC])
    seen = 0
    wins: dict[int, dict[tuple[bytes, int], int]] = {}
    st: dict[int, int] = {}
    final = 0
    while seen < rows:
        for m in c.consume(10_000, 1.0):
            if m.error() is not None:
                continue
            seen += 1
            p, ts = m.partition(), m.timestamp()[1]
            s = st[p] = max(st.get(p, ts), ts)
            start = ts - ts % size_ms
            w = wins.setdefault(p, {})
            if start + size_ms + grace_ms > s:
                w[(m.key(), start)] = w.get((m.key(), start), 0) + 1
            if len(w) > 4 * 1000:  # close due windows now and then
                for kk in [kk for kk in w if kk[1] + size_ms + grace_ms <= s]:
                    del w[kk]
                    final += 1
    c.close()
    return time.perf_counter() - t


def python_join(bootstrap: str, rows: int) -> float:
    """The stream-table left join in plain Python: the table into a dict, a lookup per record."""
    import json

    from confluent_kafka import Consumer

    t = time.perf_counter()
    users: dict[bytes, Any] = {}
    for topic, n in ((USERS, 1000), (TOPIC, rows)):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"py-{time.monotonic_ns()}",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe([topic])
        seen = 0
        while seen < n:
            for m in c.consume(10_000, 1.0):
                if m.error() is not None:
                    continue
                seen += 1
                if topic == USERS:
                    users[m.key()] = json.loads(m.value())
                else:
                    u = users.get(m.key())
                    _ = {"v": m.value().decode(), "region": None if u is None else u["region"]}
        c.close()
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

        def join_plain(ck: str) -> Any:
            table = (
                spark.read.format("strom").option("kafka.bootstrap.servers", boot).option("subscribe", USERS)
                .load()
                .groupBy("key").agg(F.max_by("value", "offset").alias("user"))
            )
            stream = (
                spark.readStream.format("strom").option("kafka.bootstrap.servers", boot)
                .option("subscribe", TOPIC).option("startingOffsets", "earliest").load()
            )
            j = stream.join(table, "key", "left").select(
                "key", F.get_json_object(F.col("user").cast("string"), "$.region").alias("region"), "value"
            )
            w = j.writeStream.format("noop").option("checkpointLocation", ck)
            return w.trigger(availableNow=True).start()

        def join_ours(ck: str) -> Any:
            users = streams.table(spark, USERS, bootstrap=boot, value_serde="json")
            j = streams.stream(spark, TOPIC, bootstrap=boot).join(
                users, lambda v, u: {"v": v, "region": None if u is None else u["region"]}, how="left"
            )
            w = j.frame("string", "json").writeStream.format("noop").option("checkpointLocation", ck)
            return w.trigger(availableNow=True).start()

        results: dict[str, list[float]] = {}
        starts = {
            "count: plain Spark -> noop": plain,
            "count: strom.streams -> noop": ours_noop,
            "count: strom.streams -> topic (exactly-once)": ours_topic,
            "count: plain Python consumer": None,
            "join: plain Spark stream-static -> noop": join_plain,
            "join: strom.streams stream-table -> noop": join_ours,
            "join: plain Python consumer": None,
        }
        for r in range(args.repeat):
            for name, start in starts.items():
                ck = str(tmp / f"ck-{r}-{len(results.get(name, []))}-{abs(hash(name))}")
                if start is not None:
                    secs = await_query(start(ck))
                elif name.startswith("count"):
                    secs = python_count(boot, rows)
                else:
                    secs = python_join(boot, rows)
                results.setdefault(name, []).append(rows / secs)
                print(f"round {r}: {name}: {rows / secs:,.0f} rows/s ({secs:.1f} s)", flush=True)
        print(f"{rows} rows, {args.partitions} partitions, local[{args.partitions}] (the Python consumer: "
              f"one process); median rows/s, and per core (/{args.partitions} for Spark):")
        med = {k: statistics.median(v) for k, v in results.items()}
        for k, v in med.items():
            cores = 1 if "Python consumer" in k else args.partitions
            print(f"  {k}: {v:,.0f} ({v / cores:,.0f} per core)")
        for what in ("count", "join"):
            if what == "count":
                ours, sp = med["count: strom.streams -> noop"], med["count: plain Spark -> noop"]
            else:
                ours = med["join: strom.streams stream-table -> noop"]
                sp = med["join: plain Spark stream-static -> noop"]
            py = med[f"{what}: plain Python consumer"]
            print(f"  {what}: strom.streams / plain Spark {ours / sp:.2f}x, / plain Python {ours / py:.2f}x")
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
