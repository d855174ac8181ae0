"""Rows/s through the strom Spark sink, beside a plain confluent-kafka producer, in the same run.

    PYTHONPATH=src python bench/spark_sink.py [--rows 2000000] [--partitions 2] [--repeat 3]
        [--baseline OTHER_CHECKOUT/src]

Starts a strom broker and a local Spark (``local[C]``, C = ``--partitions``), then per round:

* ``sink keyed``: ``spark.range(N)`` as ``key`` = the id modulo 100,000 as a string and ``value``
  = 100 bytes, written with ``df.write.format("strom")`` (Kafka's default partitioner places
  each key);
* ``sink no key``: the same values without a key (sticky partitions);
* ``confluent-kafka``: one Python process producing the same N keyed records with
  confluent-kafka (librdkafka, linger.ms=5, batch.size 1 MB) and flushing.

Rows/s is N over the wall time of the write (the Spark job's start included). With
``--baseline`` the two sink cases also run with another checkout's ``strom`` on the Spark
workers' and driver's path (e.g. the commit before a change), interleaved with this one.
Medians of ``--repeat`` rounds after one warm-up round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

_SPARK_CHILD = r"""
import sys, time, json
from pyspark.sql import SparkSession
bootstrap, topic = sys.argv[1], sys.argv[2]
rows, cores, keyed = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
spark = (SparkSession.builder.master(f"local[{cores}]").config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
def once():
    df = spark.range(rows, numPartitions=cores)
    cols = (["CAST(id % 100000 AS STRING) AS key"] if keyed else []) + ["repeat('x', 100) AS value"]
    t = time.perf_counter()
    df.selectExpr(*cols).write.mode("append").format("strom").option("kafka.bootstrap.servers", bootstrap) \
        .option("topic", topic).save()
    return time.perf_counter() - t
once()  # warm-up: JVM start, first job
print(json.dumps([once() for _ in range(int(sys.argv[6]))]))
"""

_CK_CHILD = r"""
import sys, time, json
from confluent_kafka import Producer
bootstrap, topic, rows, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
value = b"x" * 100
keys = [str(i % 100000).encode() for i in range(100000)]
out = []
for r in range(rounds + 1):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1000000,
                  "queue.buffering.max.messages": 2000000, "queue.buffering.max.kbytes": 2000000})
    t = time.perf_counter()
    for i in range(rows):
        while True:
            try:
                p.produce(topic, value, keys[i % 100000])
                break
            except BufferError:
                p.poll(0.01)
    p.flush()
    if r:
        out.append(time.perf_counter() - t)
print(json.dumps(out))
"""


def run_child(code: str, args: list[str], pythonpath: str) -> list[float]:
    import json

    env = dict(os.environ, PYTHONPATH=pythonpath, PYSPARK_PYTHON=sys.executable)
    p = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                       timeout=3600)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("[")]
    if p.returncode != 0 or not lines:
        raise SystemExit(f"child failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return [float(x) for x in json.loads(lines[-1])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", default="", help="another checkout's src directory, for an A/B")
    a = ap.parse_args()
    sys.path.insert(0, str(SRC))
    from strom.testing.broker_process import BrokerProcess

    tmp = Path(tempfile.mkdtemp(prefix="strom-sink-bench-"))
    broker = BrokerProcess(tmp / "data").start()
    try:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        names = [f"sink-{k}-{n}" for k in "kn" for n in (0, 9)] + ["ck"]
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic(t, a.partitions, 1) for t in names]).values():
            f.result(30)
        del admin  # (its librdkafka threads would retry the stopped broker)
        variants = [("", str(SRC))] + ([("baseline ", a.baseline)] if a.baseline else [])
        results: dict[str, list[float]] = {}
        for label, path in variants:
            for keyed in (True, False):
                name = f"{label}sink {'keyed' if keyed else 'no key'}"
                topic = f"sink-{'k' if keyed else 'n'}-{len(label)}"
                args = [broker.bootstrap, topic, str(a.rows), str(a.partitions), "1" if keyed else "0",
                        str(a.repeat)]
                results[name] = run_child(_SPARK_CHILD, args, path)
                print(f"{name}: {[round(a.rows / s) for s in results[name]]} rows/s", flush=True)
        ck_args = [broker.bootstrap, "ck", str(a.rows), str(a.repeat)]
        results["confluent-kafka"] = run_child(_CK_CHILD, ck_args, str(SRC))
        print(f"confluent-kafka: {[round(a.rows / s) for s in results['confluent-kafka']]} rows/s")
        print(f"\n== {a.rows:,} rows of 100 B (keys: id % 100000), {a.partitions} partitions, "
              f"local[{a.partitions}]; medians of {a.repeat} after a warm-up")
        ck = a.rows / statistics.median(results["confluent-kafka"])
        for name, secs in results.items():
            rps = a.rows / statistics.median(secs)
            print(f"  {name:24s} {rps:12,.0f} rows/s   {rps / ck:5.2f}x confluent-kafka")
    finally:
        broker.stop()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
