"""strom mirror throughput and lag between two strom brokers (clusters A and B), on local Spark.

    PYTHONPATH=src python bench/mirror.py [--records 500000] [--bytes 100] [--partitions 4]
        [--rate 20000] [--seconds 20]

1. Catch-up: ``--records`` records of ``--bytes`` (key, value, one header) are produced to A's
   ``bench`` topic first; then one ``--once`` run of flow A->B (availableNow, micro-batches of
   at most 200,000 records, each one transaction on B) mirrors them. Prints records/s and MB/s
   (value + key bytes) over the query's wall time (its start included, the SparkSession's not),
   beside a plain Python copy loop in the same run (confluent-kafka consumer -> idempotent
   producer, no transactions, no Spark): the per-record ceiling of one Python process.
2. Lag: the flow runs continuously (trigger every 500 ms) while a producer writes ``--rate``
   records/s to A for ``--seconds``; every 0.5 s the records on A not yet mirrored are counted
   (A's high watermarks against the offsets committed on B), and a consumer on B measures each
   record's replication latency (arrival on B minus its CreateTime on A). Prints the lag's
   median/max and the latency's p50/p99/max.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.connect.runtime import spark_session
from strom.mirror.config import parse_mm2
from strom.mirror.runtime import MirrorMaker
from strom.testing.broker_process import BrokerProcess

RF1 = {
    "replication.factor": "1",
    "offset-syncs.topic.replication.factor": "1",
    "checkpoints.topic.replication.factor": "1",
    "heartbeats.topic.replication.factor": "1",
    "offset.storage.replication.factor": "1",
}


def produce(bootstrap: str, topic: str, n: int, size: int, start: int = 0) -> None:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "enable.idempotence": True,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    pad = b"x" * max(0, size - 10)
    for i in range(start, start + n):
        while True:
            try:
                p.produce(topic, key=b"%09d" % i, value=b"%09d " % i + pad, headers=[("h", b"1")])
                break
            except BufferError:
                p.poll(0.05)
    p.flush(120)


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def copy_loop(src: str, dst: str, topic: str, n: int) -> float:
    c = Consumer(
        {
            "bootstrap.servers": src,
            "group.id": "bench-copy",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    p = Producer(
        {
            "bootstrap.servers": dst,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "enable.idempotence": True,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    c.subscribe([topic])
    t0 = time.monotonic()
    done = 0
    while done < n:
        for m in c.consume(10000, 1.0):
            if m.error():
                continue
            while True:
                try:
                    p.produce(
                        "copy." + topic,
                        key=m.key(),
                        value=m.value(),
                        headers=m.headers(),
                        partition=m.partition(),
                        timestamp=m.timestamp()[1],
                    )
                    break
                except BufferError:
                    p.poll(0.05)
            done += 1
    p.flush(120)
    dt = time.monotonic() - t0
    c.close()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rate", type=int, default=20_000)
    ap.add_argument("--seconds", type=float, default=20)
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="mirror-bench-"))
    a, b = BrokerProcess(d / "a" / "data"), BrokerProcess(d / "b" / "data")
    a.start()
    b.start()
    spark = spark_session("mirror-bench")
    try:
        create(a.bootstrap, "bench", args.partitions)
        create(a.bootstrap, "live", args.partitions)
        create(b.bootstrap, "copy.bench", args.partitions)
        produce(a.bootstrap, "bench", args.records, args.bytes)
        mb = args.records * (args.bytes + 9) / 1e6
        props = {
            "clusters": "A, B",
            "A.bootstrap.servers": a.bootstrap,
            "B.bootstrap.servers": b.bootstrap,
            "A->B.enabled": "true",
            "A->B.topics": "bench",
            **RF1,
        }
        mm = MirrorMaker(parse_mm2(props), d / "state", max_records_per_batch=200_000)
        f = mm.flows[0]
        f.prepare()
        t0 = time.monotonic()
        q = f.start(spark, once=True)
        q.awaitTermination()
        dt = time.monotonic() - t0
        assert q.exception() is None, q.exception()
        assert f.records == args.records, (f.records, args.records)
        mm.stop()
        busy = f.last_batch_end - (f.first_batch_at or 0)
        print(
            f"catch-up, strom mirror: {args.records:,} records of {args.bytes} B in {dt:.1f} s = "
            f"{args.records / dt:,.0f} records/s, {mb / dt:.1f} MB/s; from the first batch's start to the "
            f"last one's end {busy:.1f} s = {args.records / busy:,.0f} records/s, {mb / busy:.1f} MB/s "
            f"({f.batches} transactions; driver: Spark->Arrow {f.collect_s:.1f} s, "
            f"produce {f.produce_s:.1f} s, flush+commit {f.commit_s:.1f} s)",
            flush=True,
        )
        dt2 = copy_loop(a.bootstrap, b.bootstrap, "bench", args.records)
        print(
            f"catch-up, Python copy loop (no Spark, no transactions): {args.records / dt2:,.0f} records/s, "
            f"{mb / dt2:.1f} MB/s",
            flush=True,
        )

        # continuous: lag and latency
        props["A->B.topics"] = "live"
        shutil.rmtree(d / "state")
        mm = MirrorMaker(parse_mm2(props), d / "state")
        mm.start(spark, trigger_ms=500)
        f = mm.flows[0]
        lat: list[float] = []
        stop = threading.Event()

        def measure() -> None:
            c = Consumer(
                {
                    "bootstrap.servers": b.bootstrap,
                    "group.id": "bench-lat",
                    "auto.offset.reset": "earliest",
                    "isolation.level": "read_committed",
                }
            )
            c.subscribe(["A.live"])
            while not stop.is_set():
                for m in c.consume(10000, 0.2):
                    if not m.error():
                        lat.append(time.time() * 1000 - m.timestamp()[1])
            c.close()

        th = threading.Thread(target=measure, daemon=True)
        th.start()
        lags: list[int] = []
        p = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5, "enable.idempotence": True})
        t0 = time.monotonic()
        sent = 0
        next_sample = t0
        while time.monotonic() - t0 < args.seconds:
            due = int((time.monotonic() - t0) * args.rate)
            while sent < due:
                p.produce("live", key=b"%09d" % sent, value=b"y" * args.bytes)
                sent += 1
            p.poll(0)
            if time.monotonic() >= next_sample:
                lags.append(sum(f.lag().values()))
                next_sample += 0.5
            time.sleep(0.005)
        p.flush(30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(lat) < sent:
            time.sleep(0.2)
        stop.set()
        th.join(10)
        failed = mm.failed()
        mm.stop()
        assert failed is None, failed
        lat.sort()
        print(
            f"continuous at {args.rate:,} records/s for {args.seconds:.0f} s ({sent:,} records, "
            f"{len(lat):,} seen on B): lag median {statistics.median(lags):,.0f} records, max {max(lags):,}; "
            f"latency p50 {lat[len(lat) // 2] / 1000:.2f} s, p99 {lat[int(len(lat) * 0.99)] / 1000:.2f} s, "
            f"max {lat[-1] / 1000:.2f} s",
            flush=True,
        )
    finally:
        spark.stop()
        a.stop()
        b.stop()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
