"""Shared plumbing of the ``strom.streams`` examples: topics, JSON records in, committed records out."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any


def create_topics(bootstrap: str, topics: Sequence[tuple[str, int, bool]], who: str) -> None:
    """``(name, partitions, compacted)``; existing topics are left alone."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    a = AdminClient({"bootstrap.servers": bootstrap})
    new = [
        NewTopic(t, n, 1, config={"cleanup.policy": "compact"} if compact else {}) for t, n, compact in topics
    ]
    for t, f in a.create_topics(new).items():
        try:
            f.result(30)
        except Exception as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise SystemExit(f"{who}: cannot create {t}: {e}") from None


def produce_json(bootstrap: str, topic: str, records: Iterable[tuple[str, Any, int | None]], who: str) -> int:
    """``(key, value, timestamp ms or None for now)``; values as JSON, ``None`` a tombstone."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    n = 0
    for k, v, ts in records:
        kw: dict[str, Any] = {} if ts is None else {"timestamp": ts}
        p.produce(topic, key=k.encode(), value=None if v is None else json.dumps(v).encode(), **kw)
        n += 1
    left = p.flush(30)
    if left:
        raise SystemExit(f"{who}: {left} records not delivered to {bootstrap}")
    return n


def read_committed(bootstrap: str, topic: str, who: str, timeout: float = 60.0) -> list[tuple[Any, Any]]:
    """Every committed record of ``topic`` (partition by partition, in offset order), key and value
    decoded as JSON when they parse, else as text."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    def dec(b: bytes | None) -> Any:
        if b is None:
            return None
        try:
            return json.loads(b)
        except ValueError:
            return b.decode()

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{who}-show-{os.getpid()}-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        if md.error is not None:
            raise SystemExit(f"{who}: {topic}: {md.error}")
        parts = sorted(md.partitions)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: dict[int, list[tuple[Any, Any]]] = {p: [] for p in parts}
        eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(eof) < len(parts) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    eof.add(int(m.partition() or 0))
                    continue
                raise SystemExit(f"{who}: {err}")
            out[int(m.partition() or 0)].append((dec(m.key()), dec(m.value())))
        if len(eof) < len(parts):
            raise SystemExit(f"{who}: {topic} not read to its end within {timeout:.0f} s")
        return [r for p in parts for r in out[p]]
    finally:
        c.close()


def spark_session(app: str) -> Any:
    from pyspark.sql import SparkSession

    from strom.spark import StromDataSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(StromDataSource)
    return spark


def run_queries(queries: Sequence[Any], who: str) -> None:
    """Wait for queries started with ``availableNow`` (in order) and fail on their errors."""
    for q in queries:
        q.awaitTermination()
        if q.exception() is not None:
            raise SystemExit(f"{who}: {q.exception()}")


def run_pipeline(app: str, who: str, start: Callable[[Any, dict[str, Any]], Sequence[Any]],
                 available_now: bool) -> None:
    """An example's ``run``: a local Spark session, ``start(spark, trigger)`` -> its queries;
    with ``available_now`` wait for each in order, else until one stops or Ctrl-C; a failed query
    is one line (``who: error``) and exit status 1."""
    spark = spark_session(app)
    trigger = {"availableNow": True} if available_now else {"processingTime": "1 second"}
    try:
        queries = list(start(spark, trigger))
        if available_now:
            run_queries(queries, who)
            return
        while all(q.isActive for q in queries):
            time.sleep(1)
        for q in queries:
            if q.exception() is not None:
                raise SystemExit(f"{who}: {q.exception()}")
    except KeyboardInterrupt:
        pass
    finally:
        spark.stop()
