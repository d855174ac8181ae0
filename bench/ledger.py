"""The warehouse-ledger pipeline under load: generate, produce, the Spark job, the query service.

    python bench/ledger.py [--days 20] [--movements-per-day 2000] [--cores 2] [--queries 500]

Starts a strom broker, then reports, in the same run:

* generation (Python simulation) and idempotent produce into ``ledger`` (movements/s);
* the reference projection in pure Python (movements/s, single thread; the floor any engine
  must beat to be worth it);
* the Spark job over the whole ledger as one ``Trigger.AvailableNow`` micro-batch (first batch:
  includes the JVM-side warm-up) and over one more day appended afterwards (an incremental batch),
  as movements/s of the trigger and view rows written;
* the service: time to materialise every view from the compacted topics, and request latency
  (median and p99) for ``/items/<item>`` with read-your-writes sync and with ``?sync=0``.

Everything shares the machine (broker, Spark ``local[C]``, service), as in the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from strom.examples.ledger import model
from strom.examples.ledger.generator import GeneratorConfig, day_slice, generate
from strom.examples.ledger.producer import produce_ledger, produce_master
from strom.testing.broker_process import BrokerProcess


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=20)
    ap.add_argument("--movements-per-day", type=int, default=2000)
    ap.add_argument("--items", type=int, default=500)
    ap.add_argument("--cells", type=int, default=200)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--queries", type=int, default=500)
    a = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable

    cfg = GeneratorConfig(
        seed=1,
        items=a.items,
        cells=a.cells,
        workers=12,
        days=a.days + 1,
        movements_per_day=a.movements_per_day,
    )
    t = time.perf_counter()
    w = generate(cfg)
    gen_s = time.perf_counter() - t
    last = list(day_slice(w, cfg.start, a.days))
    first = w.movements[: len(w.movements) - len(last)]
    print(f"ledger: {len(w.movements)} movements ({sum(m.is_storno for m in w.movements)} stornos)")
    print(f"generate           {len(w.movements) / gen_s:12,.0f} movements/s")
    t = time.perf_counter()
    model.project(w.movements, w.items, w.cells)
    proj_s = time.perf_counter() - t
    print(f"python projection  {len(w.movements) / proj_s:12,.0f} movements/s")

    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", overrides=["group.initial.rebalance.delay.ms=0"]).start()
        try:
            bs = broker.bootstrap
            produce_master(bs, w.items, w.cells)
            t = time.perf_counter()
            produce_ledger(bs, first)
            prod_s = time.perf_counter() - t
            print(f"idempotent produce {len(first) / prod_s:12,.0f} movements/s")

            from pyspark.sql import SparkSession

            from strom.examples.ledger.job import JobConfig, start

            spark = (
                SparkSession.builder.master(f"local[{a.cores}]")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", str(a.cores * 2))
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            job = JobConfig(bootstrap=bs, checkpoint=str(Path(tmp) / "ck"))
            for label, n in (("job, first batch ", len(first)), ("job, one more day", len(last))):
                if label.startswith("job, one"):
                    produce_ledger(bs, last)
                q, writer = start(spark, job)
                q.awaitTermination()
                writer.close()
                if q.exception() is not None:
                    raise SystemExit(str(q.exception()))
                ms = sum(p.durationMs.get("triggerExecution", 0) for p in q.recentProgress if p.numInputRows)
                print(f"{label}  {n / (ms / 1000):12,.0f} movements/s ({n} in {ms / 1000:.1f} s)")
                if os.environ.get("LEDGER_BENCH_VERBOSE"):
                    print([p.durationMs for p in q.recentProgress if p.numInputRows])
            spark.stop()

            from strom.examples.ledger.service import Service

            t = time.perf_counter()
            svc = Service(bs, port=0).start()
            base = "http://{}:{}".format(*svc.address)
            urllib.request.urlopen(base + "/health?sync=1", timeout=120).read()
            mat_s = time.perf_counter() - t
            rows = json.load(urllib.request.urlopen(base + "/health"))["records"]
            print(f"service: materialised {rows} view rows in {mat_s:.2f} s")
            items = [i.item for i in w.items]
            for suffix in ("", "?sync=0"):
                lat = []
                for i in range(a.queries):
                    t = time.perf_counter()
                    urllib.request.urlopen(f"{base}/items/{items[i % len(items)]}{suffix}").read()
                    lat.append((time.perf_counter() - t) * 1000)
                lat.sort()
                p99 = lat[int(len(lat) * 0.99) - 1]
                print(f"/items/<item>{suffix:8s} median {statistics.median(lat):6.2f} ms, p99 {p99:6.2f} ms")
            svc.stop()
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
