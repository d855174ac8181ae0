"""A Spark driver program for the restart tests (run as a subprocess so it can be killed -9).

    python driver_job.py BOOTSTRAP TOPIC CHECKPOINT OUTDIR MODE

MODE ``continuous`` runs micro-batches every 100 ms until killed; ``available-now`` runs with
Trigger.AvailableNow and exits. Each micro-batch is written by foreachBatch to its own file
``OUTDIR/batch-<batchId>-<random>.json`` (write-then-rename), so a replayed batch leaves a second
file with the same batch id: the test checks replays are identical and nothing is lost.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from typing import Any


def main() -> None:
    bootstrap, topic, ckpt, outdir, mode = sys.argv[1:6]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "50")
        .load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
    )

    def write(batch: Any, batch_id: int) -> None:
        rows = [[r.partition, r.offset, r.value] for r in batch.collect()]
        path = os.path.join(outdir, f"batch-{batch_id}-{uuid.uuid4().hex}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(rows, f)
        os.rename(path + ".tmp", path)

    w = df.writeStream.foreachBatch(write).option("checkpointLocation", ckpt)
    if mode == "available-now":
        q = w.trigger(availableNow=True).start()
    else:
        q = w.trigger(processingTime="100 milliseconds").start()
    q.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
