"""Exactly-once sink (``exactlyOnce=true``). Needs Kafka transactions in the broker: skipped until
the strom broker advertises EndTxn / TxnOffsetCommit."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from strom.client import Client
from strom.testing.broker_process import BrokerProcess

from .conftest import create_topic, produce, values

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def supports_transactions(bootstrap: str) -> bool:
    async def go() -> bool:
        async with Client(bootstrap) as c:
            conn = await c.any_connection()
            return all(k in conn.api_versions for k in (24, 25, 26, 28))

    return bool(asyncio.run(go()))


def count(spark: Any, broker: BrokerProcess, topic: str, isolation: str) -> int:
    df = (
        spark.read.format("strom")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("kafka.isolation.level", isolation)
        .load()
    )
    return int(df.count())


def test_exactly_once_replay_is_not_written_twice(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    if not supports_transactions(kbroker.bootstrap):
        pytest.skip("broker has no Kafka transactions yet")
    create_topic(kbroker.bootstrap, "eos-src", 2)
    create_topic(kbroker.bootstrap, "eos-dst", 2)
    for p in range(2):
        produce(kbroker.bootstrap, "eos-src", p, values(f"e{p}", 50))
    ck = tmp_path / "ck"

    def run() -> None:
        df = (
            spark.readStream.format("strom")
            .option("kafka.bootstrap.servers", kbroker.bootstrap)
            .option("subscribe", "eos-src")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "40")
            .load()
            .select("key", "value")
        )
        q = (
            df.writeStream.format("strom")
            .option("kafka.bootstrap.servers", kbroker.bootstrap)
            .option("topic", "eos-dst")
            .option("exactlyOnce", "true")
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None

    run()
    assert count(spark, kbroker, "eos-dst", "read_committed") == 100
    # Simulate a crash after the transactions committed but before Spark recorded the batch:
    # drop the last commit-log entry so the last micro-batch is replayed.
    commits = sorted((ck / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    last = commits[-1]
    last.unlink()
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
    run()
    assert count(spark, kbroker, "eos-dst", "read_committed") == 100
