"""strom connect throughput: FileStreamSource (file -> topic), ParquetSink (topic -> Parquet) and
DeltaSink (topic -> Delta table),
each one `--once` run of the connector on a local Spark (local[2]) against a strom broker started
here. Prints rows/s for each, wall time from the query's start to its end (Spark's start-up of
the query included, the SparkSession's not).

    python bench/connect.py [--lines 200000] [--line-bytes 100]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from strom.connect.config import parse_config
from strom.connect.runtime import ConnectorRun, spark_session
from strom.testing.broker_process import BrokerProcess


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--line-bytes", type=int, default=100)
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="connect-bench-"))
    b = BrokerProcess(d / "data")
    b.start()
    spark = spark_session("connect-bench")
    try:
        src = d / "in.txt"
        pad = "x" * max(0, args.line_bytes - 12)
        src.write_text("".join(f"{i:010d} {pad}\n" for i in range(args.lines)))
        conv = {"value.converter": "org.apache.kafka.connect.storage.StringConverter"}
        runs = [
            ("file -> topic (FileStreamSource)", {"name": "bench-src", "config": {
                "connector.class": "FileStreamSource", "file": str(src), "topic": "bench", **conv}}),
            ("topic -> Parquet (ParquetSink)", {"name": "bench-pq", "config": {
                "connector.class": "strom.connect.ParquetSinkConnector", "topics": "bench",
                "path": str(d / "pq"), **conv}}),
            ("topic -> Delta (DeltaSink)", {"name": "bench-delta", "config": {
                "connector.class": "strom.connect.DeltaSinkConnector", "topics": "bench",
                "table.path": str(d / "delta"), **conv}}),
        ]
        for label, cfg in runs:
            run = ConnectorRun(parse_config(cfg), b.bootstrap, d / cfg["name"])  # type: ignore[index]
            t0 = time.monotonic()
            q = run.start(spark, once=True)
            q.awaitTermination()
            run.stop()
            dt = time.monotonic() - t0
            assert q.exception() is None, q.exception()
            assert run.records_out == args.lines, (run.records_out, args.lines)
            print(f"{label}: {args.lines} rows of {args.line_bytes} bytes in {dt:.1f} s = "
                  f"{args.lines / dt:,.0f} rows/s ({run.batches} micro-batches)", flush=True)
    finally:
        spark.stop()
        b.stop()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
