"""The strom sink: Spark's Kafka sink columns and option `topic`, batch and streaming."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from strom.client import Client
from strom.spark.sink import murmur2
from strom.testing.broker_process import BrokerProcess

from .conftest import create_topic

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def read_all(broker: BrokerProcess, topic: str) -> list[tuple[int, Any]]:
    async def go() -> list[tuple[int, Any]]:
        async with Client(broker.bootstrap) as c:
            tm = await c.topic(topic, refresh=True)
            out = []
            for p in tm.partitions:
                end = await c.list_offsets(topic, p)
                off = 0
                while off < end:
                    r = await c.fetch(topic, p, off)
                    out.extend((p, rec) for rec in r.records)
                    off = r.next_offset or end
            return out

    result: list[tuple[int, Any]] = asyncio.run(go())
    return result


def test_murmur2_matches_kafka() -> None:
    # Kafka's UtilsTest.testMurmur2 vectors
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107


def test_batch_write_with_topic_option(spark: Any, kbroker: BrokerProcess) -> None:
    create_topic(kbroker.bootstrap, "w1", 3)
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(300)], "key string, value string")
    df.write.mode("append").format("strom").option("kafka.bootstrap.servers", kbroker.bootstrap).option(
        "topic", "w1"
    ).save()
    got = read_all(kbroker, "w1")
    assert sorted(r.value for _, r in got) == sorted(f"v{i}".encode() for i in range(300))
    for p, r in got:  # Kafka's default partitioner: murmur2(key) % partitions
        assert p == (murmur2(r.key) & 0x7FFFFFFF) % 3
        assert r.key == b"k" + r.value[1:]


def test_batch_write_columns_topic_partition_headers(spark: Any, kbroker: BrokerProcess) -> None:
    create_topic(kbroker.bootstrap, "w2a", 2)
    create_topic(kbroker.bootstrap, "w2b", 2)
    df = spark.sql(
        """SELECT * FROM VALUES
           ('w2a', 1, CAST('a' AS BINARY), CAST('1' AS BINARY),
            array(named_struct('key','h','value',CAST('x' AS BINARY)))),
           ('w2b', 0, NULL, CAST('2' AS BINARY), NULL),
           ('w2b', 1, CAST('c' AS BINARY), NULL, array())
           AS t(topic, partition, key, value, headers)"""
    )
    df.write.mode("append").format("strom").option("kafka.bootstrap.servers", kbroker.bootstrap).save()
    a = read_all(kbroker, "w2a")
    b = read_all(kbroker, "w2b")
    assert [(p, r.key, r.value, r.headers) for p, r in a] == [(1, b"a", b"1", [("h", b"x")])]
    assert sorted((p, r.key, r.value) for p, r in b) == [(0, None, b"2"), (1, b"c", None)]


def test_write_schema_errors(spark: Any, kbroker: BrokerProcess) -> None:
    def w(df: Any) -> Any:
        return df.write.mode("append").format("strom").option("kafka.bootstrap.servers", kbroker.bootstrap)

    with pytest.raises(Exception, match=r"topic option required when no 'topic' attribute is present"):
        w(spark.createDataFrame([("v",)], "value string")).save()
    with pytest.raises(Exception, match=r"Required attribute 'value' not found"):
        w(spark.createDataFrame([("k",)], "key string")).option("topic", "x").save()
    with pytest.raises(Exception, match=r"value attribute type must be a StringType or BinaryType"):
        w(spark.createDataFrame([(1,)], "value int")).option("topic", "x").save()
    with pytest.raises(Exception, match=r"partition attribute type must be an IntegerType"):
        w(spark.createDataFrame([("v", "p")], "value string, partition string")).option("topic", "x").save()


def test_stream_roundtrip(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    """strom -> Spark -> strom: a streaming copy of a topic."""
    from .conftest import produce, values

    create_topic(kbroker.bootstrap, "src", 2)
    create_topic(kbroker.bootstrap, "dst", 2)
    for p in range(2):
        produce(kbroker.bootstrap, "src", p, values(f"s{p}", 100))
    df = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", kbroker.bootstrap)
        .option("subscribe", "src")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "UPPER(CAST(value AS STRING)) AS value")
    )
    q = (
        df.writeStream.format("strom")
        .option("kafka.bootstrap.servers", kbroker.bootstrap)
        .option("topic", "dst")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None
    got = sorted(r.value for _, r in read_all(kbroker, "dst"))
    assert got == sorted(f"S{p}-{i}".upper().encode() for p in range(2) for i in range(100))
