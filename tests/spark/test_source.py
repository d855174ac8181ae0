"""The strom source in a local Spark against a real strom broker: batch exactness and one test per
option (Spark's Kafka source names and semantics)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from strom.testing.broker_process import BrokerProcess

from .conftest import create_topic, produce, values

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def reader(spark: Any, broker: BrokerProcess, **opts: str) -> Any:
    r = spark.read.format("strom").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def stream(spark: Any, broker: BrokerProcess, **opts: str) -> Any:
    r = spark.readStream.format("strom").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def run_available_now(df: Any, ckpt: Path, name: str = "") -> tuple[list[Any], list[dict[str, Any]]]:
    """Run to the end of the data with Trigger.AvailableNow; rows collected with foreachBatch
    (a sink that, unlike the memory sink, restarts from a checkpoint)."""
    rows: list[Any] = []

    def collect(batch: Any, batch_id: int) -> None:
        rows.extend(batch.collect())

    q = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    if q.exception() is not None:
        raise q.exception()
    progress = [p for p in q.recentProgress if p["sources"]]
    return rows, progress


def three_partitions(broker: BrokerProcess, topic: str, n: int = 50) -> None:
    create_topic(broker.bootstrap, topic, 3)
    for p in range(3):
        produce(broker.bootstrap, topic, p, values(f"{topic}-p{p}", n))


def test_schema_is_sparks_kafka_schema(spark: Any, kbroker: BrokerProcess) -> None:
    three_partitions(kbroker, "schema", 1)
    df = reader(spark, kbroker, subscribe="schema")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    df = reader(spark, kbroker, subscribe="schema", includeHeaders="true")
    assert df.schema.simpleString().endswith(",headers:array<struct<key:string,value:binary>>>")


def test_batch_read_exact(spark: Any, kbroker: BrokerProcess) -> None:
    three_partitions(kbroker, "exact", 200)
    rows = reader(spark, kbroker, subscribe="exact").collect()
    assert len(rows) == 600
    got = sorted((r.partition, r.offset, r.key, r.value, r.topic, r.timestampType) for r in rows)
    want = sorted(
        (p, i, f"k{i}".encode(), f"exact-p{p}-{i}".encode(), "exact", 0) for p in range(3) for i in range(200)
    )
    assert got == want
    ts = {(r.partition, r.offset): int(r.timestamp.timestamp() * 1000) for r in rows}
    assert ts[(1, 7)] == 1_700_000_000_000 + 7


def test_subscribe_pattern(spark: Any, kbroker: BrokerProcess) -> None:
    for t in ("pat-a", "pat-b", "other-c"):
        create_topic(kbroker.bootstrap, t, 1)
        produce(kbroker.bootstrap, t, 0, values(t, 5))
    rows = reader(spark, kbroker, subscribePattern="pat-.*").collect()
    assert sorted({r.topic for r in rows}) == ["pat-a", "pat-b"] and len(rows) == 10


def test_assign(spark: Any, kbroker: BrokerProcess) -> None:
    three_partitions(kbroker, "assign", 10)
    rows = reader(spark, kbroker, assign='{"assign":[0,2]}').collect()
    assert sorted({r.partition for r in rows}) == [0, 2] and len(rows) == 20


def test_starting_and_ending_offsets_json(spark: Any, kbroker: BrokerProcess) -> None:
    three_partitions(kbroker, "range", 20)
    rows = reader(
        spark,
        kbroker,
        subscribe="range",
        startingOffsets='{"range":{"0":5,"1":-2,"2":19}}',
        endingOffsets='{"range":{"0":8,"1":2,"2":-1}}',
    ).collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(0, 5), (0, 6), (0, 7), (1, 0), (1, 1), (2, 19)]


def test_starting_offsets_must_cover_all_partitions(spark: Any, kbroker: BrokerProcess) -> None:
    three_partitions(kbroker, "cover", 2)
    with pytest.raises(Exception, match=r"you must specify all TopicPartitions"):
        reader(spark, kbroker, subscribe="cover", startingOffsets='{"cover":{"0":0}}').collect()


def test_starting_timestamp(spark: Any, kbroker: BrokerProcess) -> None:
    three_partitions(kbroker, "ts", 10)
    rows = reader(spark, kbroker, subscribe="ts", startingTimestamp=str(1_700_000_000_000 + 7)).collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(p, o) for p in range(3) for o in (7, 8, 9)]


def test_starting_offsets_by_timestamp(spark: Any, kbroker: BrokerProcess) -> None:
    three_partitions(kbroker, "tsj", 10)
    base = 1_700_000_000_000
    by_ts = json.dumps({"tsj": {"0": base + 8, "1": base, "2": base + 9}})
    rows = reader(spark, kbroker, subscribe="tsj", startingOffsetsByTimestamp=by_ts).collect()
    counts = {p: sum(1 for r in rows if r.partition == p) for p in range(3)}
    assert counts == {0: 2, 1: 10, 2: 1}
    late = json.dumps({"tsj": {"0": base + 99, "1": base, "2": base}})
    with pytest.raises(Exception, match=r"No offset matched from request of topic-partition tsj-0"):
        reader(spark, kbroker, subscribe="tsj", startingOffsetsByTimestamp=late).collect()
    rows = reader(
        spark,
        kbroker,
        subscribe="tsj",
        startingOffsetsByTimestamp=late,
        startingOffsetsByTimestampStrategy="latest",
    ).collect()
    assert len(rows) == 20


def test_include_headers(spark: Any, kbroker: BrokerProcess) -> None:
    create_topic(kbroker.bootstrap, "hdr", 1)
    produce(kbroker.bootstrap, "hdr", 0, [(b"a", b"1", [("x", b"y"), ("n", None)], 1), (b"b", b"2", [], 2)])
    rows = reader(spark, kbroker, subscribe="hdr", includeHeaders="true").orderBy("offset").collect()
    assert [(h.key, h.value) for h in rows[0].headers] == [("x", b"y"), ("n", None)]
    assert rows[1].headers is None  # Spark's Kafka source gives null for no headers


def test_min_partitions(spark: Any, kbroker: BrokerProcess) -> None:
    three_partitions(kbroker, "minp", 100)
    df = reader(spark, kbroker, subscribe="minp", minPartitions="12")
    assert df.rdd.getNumPartitions() >= 12
    assert df.count() == 300 and df.select("partition", "offset").distinct().count() == 300


def test_kafka_passthrough_and_refused_options(spark: Any, kbroker: BrokerProcess) -> None:
    three_partitions(kbroker, "pass", 3)
    df = reader(
        spark,
        kbroker,
        subscribe="pass",
        **{
            "kafka.client.id": "spark-x",
            "kafka.fetch.max.wait.ms": "10",
            "kafka.isolation.level": "read_committed",
        },
    )
    assert df.count() == 9
    with pytest.raises(Exception, match=r"auto.offset.reset' is not supported"):
        reader(spark, kbroker, subscribe="pass", **{"kafka.auto.offset.reset": "earliest"})
    with pytest.raises(Exception, match=r"Only one of the following options can be specified"):
        reader(spark, kbroker, subscribe="pass", subscribePattern="p.*")
    with pytest.raises(Exception, match=r"kafka.bootstrap.servers"):
        spark.read.format("strom").option("subscribe", "pass").load()


def test_stream_max_offsets_per_trigger(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    three_partitions(kbroker, "maxo", 40)
    df = stream(spark, kbroker, subscribe="maxo", startingOffsets="earliest", maxOffsetsPerTrigger="30")
    rows, progress = run_available_now(df, tmp_path / "ck", "maxo_q")
    assert len(rows) == 120
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert max(sizes) <= 30 and sum(sizes) == 120 and len(sizes) >= 4
    end = json.loads(progress[-1]["sources"][0]["endOffset"])
    assert end == {"maxo": {"0": 40, "1": 40, "2": 40}}


def test_stream_min_offsets_per_trigger(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    create_topic(kbroker.bootstrap, "mino", 1)
    produce(kbroker.bootstrap, "mino", 0, values("mino", 5))
    df = stream(
        spark,
        kbroker,
        subscribe="mino",
        startingOffsets="earliest",
        minOffsetsPerTrigger="10",
        maxTriggerDelay="1h",
    )
    q = (
        df.writeStream.format("memory")
        .queryName("mino_q")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        time.sleep(3)
        assert spark.table("mino_q").count() == 0  # 5 < 10: waits for more
        produce(kbroker.bootstrap, "mino", 0, values("mino", 6, start=5))
        deadline = time.time() + 60
        while spark.table("mino_q").count() < 11 and time.time() < deadline:
            time.sleep(0.3)
        assert spark.table("mino_q").count() == 11
    finally:
        q.stop()


def test_stream_starting_latest_then_new_data(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    three_partitions(kbroker, "late", 10)
    df = stream(spark, kbroker, subscribe="late")  # default startingOffsets=latest
    rows, _ = run_available_now(df, tmp_path / "ck", "late_q1")
    assert rows == []
    produce(kbroker.bootstrap, "late", 1, values("more", 4))
    rows, _ = run_available_now(df, tmp_path / "ck", "late_q2")
    assert sorted(r.offset for r in rows) == [10, 11, 12, 13]


def test_stream_latest_restart_before_first_commit(
    spark: Any, kbroker: BrokerProcess, tmp_path: Path
) -> None:
    """A driver that dies after writing batch 0's offsets but before committing it: on restart
    Spark runs batch 0 again from ``initialOffset()``, which resolves ``latest`` anew -- past
    batch 0's recorded end once more data came. Batch 0 of a ``latest`` start is empty by
    construction, so the restart neither fails nor skips nor repeats a record."""
    three_partitions(kbroker, "late0", 10)
    ck = tmp_path / "ck"
    df = stream(spark, kbroker, subscribe="late0")
    rows, _ = run_available_now(df, ck, "late0_q1")
    assert rows == []
    for name in ("0", ".0.crc"):  # the state a crash between the two leaves behind
        (ck / "commits" / name).unlink()
    produce(kbroker.bootstrap, "late0", 1, values("more", 4))
    rows, _ = run_available_now(stream(spark, kbroker, subscribe="late0"), ck, "late0_q2")
    assert sorted((r.partition, r.offset) for r in rows) == [(1, 10), (1, 11), (1, 12), (1, 13)]
    produce(kbroker.bootstrap, "late0", 2, values("again", 2))
    rows, _ = run_available_now(stream(spark, kbroker, subscribe="late0"), ck, "late0_q3")
    assert sorted((r.partition, r.offset) for r in rows) == [(2, 10), (2, 11)]


def test_stream_picks_up_new_topics(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    create_topic(kbroker.bootstrap, "grow-1", 1)
    produce(kbroker.bootstrap, "grow-1", 0, values("a", 3))
    df = stream(spark, kbroker, subscribePattern="grow-.*", startingOffsets="earliest")
    rows, _ = run_available_now(df, tmp_path / "ck", "grow_q1")
    assert len(rows) == 3
    create_topic(kbroker.bootstrap, "grow-2", 2)
    produce(kbroker.bootstrap, "grow-2", 1, values("b", 4))
    produce(kbroker.bootstrap, "grow-1", 0, values("a", 1, start=3))
    rows, _ = run_available_now(df, tmp_path / "ck", "grow_q2")
    assert sorted((r.topic, r.partition, r.offset) for r in rows) == [
        ("grow-1", 0, 3),
        ("grow-2", 1, 0),
        ("grow-2", 1, 1),
        ("grow-2", 1, 2),
        ("grow-2", 1, 3),
    ]


def test_fail_on_data_loss(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    """Offsets going backwards (topic deleted and re-created) is data loss."""
    import asyncio

    from strom.client import Client

    create_topic(kbroker.bootstrap, "loss", 1)
    produce(kbroker.bootstrap, "loss", 0, values("x", 10))
    ck_fail, ck_ok = tmp_path / "fail", tmp_path / "ok"
    for ck, q in ((ck_fail, "loss_q1"), (ck_ok, "loss_q2")):
        df = stream(spark, kbroker, subscribe="loss", startingOffsets="earliest")
        rows, _ = run_available_now(df, ck, q)
        assert len(rows) == 10

    async def recreate() -> None:
        async with Client(kbroker.bootstrap) as c:
            await c.delete_topics(["loss"])
            await asyncio.sleep(0.5)
            await c.create_topics({"loss": (1, 1)})

    asyncio.run(recreate())
    produce(kbroker.bootstrap, "loss", 0, values("y", 3))
    df = stream(spark, kbroker, subscribe="loss", startingOffsets="earliest")
    with pytest.raises(Exception, match=r"failOnDataLoss"):
        run_available_now(df, ck_fail, "loss_q3")
    df = stream(spark, kbroker, subscribe="loss", startingOffsets="earliest", failOnDataLoss="false")
    run_available_now(df, ck_ok, "loss_q4")  # does not raise
