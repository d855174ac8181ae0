"""A strom.streams driver for the kill -9 test (run as a subprocess so it can be killed -9).

    python streams_driver_job.py BOOTSTRAP IN_TOPIC OUT_TOPIC CHECKPOINT MODE

The pipeline: a count per key of ``IN_TOPIC`` (string keys), every update written exactly-once to
``OUT_TOPIC`` (emit changes). MODE ``continuous`` runs a micro-batch every 200 ms (at most 40
records per partition each) until killed; ``available-now`` processes what is there and exits.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    bootstrap, in_topic, out_topic, ckpt, mode = sys.argv[1:6]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from strom import streams as S
    from strom.spark import StromDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(StromDataSource)
    trigger = {"availableNow": True} if mode == "available-now" else {"processingTime": "200 milliseconds"}
    q = (
        S.stream(spark, in_topic, bootstrap=bootstrap, options={"maxOffsetsPerTrigger": "80"})
        .group_by_key()
        .count()
        .to(out_topic, ckpt, trigger=trigger)
    )
    print("started", flush=True)
    q.awaitTermination()
    if q.exception() is not None:
        print(f"failed: {q.exception()}", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
