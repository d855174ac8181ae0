"""The ledger's Spark Structured Streaming job: the ledger in, the views out, exactly once.

Theory of operation
-------------------
The ledger is read with the strom source (``startingOffsets=earliest``, ``read_committed``) and
parsed from JSON. A record the job cannot use (not JSON, a required field missing or invalid, a
zero quantity: the rules of :func:`strom.examples.ledger.model.check_record`) is not dropped: it
goes to the dead-letter topic ``ledger-dead-letters`` with the reason, in the same transaction as
the batch's view rows, and is counted in the progress line. A blank ``worker`` is no worker.
Each movement is enriched with its item's master unit weight (a broadcast stream-static join;
master data is read from the compacted ``items`` and ``cells`` topics when the job starts) and
weighed in whole grams.

One streaming query maintains every view: each movement is exploded into one contribution row per
view it touches (``view``, ``key``, qty, weight, counters...), and a single stateful
``groupBy(view, key)`` with sums, counts and maxima keeps the totals, in update output mode with
the state in the checkpoint. Sums do not depend on arrival order, so a storno may even arrive
before the movement it reverses (the generator still keeps an item's movements in one partition).

Exactly-once output: ``foreachBatch`` hands each micro-batch's updated rows to
:class:`TransactionalWriter`, which writes them to the compacted view topics (and over-capacity
rows to ``alerts``) in ONE Kafka transaction per micro-batch, with transactional id
``strom-ledger-<query id>`` and the batch id committed inside the same transaction as the offset
of a marker consumer group of the same name. ``init_transactions`` fences an older driver and
aborts its open transaction; then a batch whose marker is already committed (a replay after a
crash between the Kafka commit and Spark's commit log) is skipped. The query id lives in the
checkpoint, so a new checkpoint starts a new marker.

Why not the strom sink's ``exactlyOnce`` mode: Spark gives Python data-source sinks (PythonTable)
only Append and Complete modes, not Update, so a stateful update-mode aggregation cannot be
written to any Python sink; Complete mode would rewrite every key every batch. ``foreachBatch``
also makes all views change together in one transaction, so a ``read_committed`` reader (the
service) never sees the stock per item disagree with the stock per cell. The rows of a batch are
streamed to the driver with ``toLocalIterator`` (only the keys the batch touched).

Capacities enter as a dict when the job starts (a changed capacity shows in ``cell-weight`` and
``alerts`` when the job restarts and the cell is next updated); the service answers "over
capacity" from the current ``cells`` topic.

Error contract: :func:`start` raises what ``DataStreamWriter.start`` raises; a failed transaction
is aborted and fails the micro-batch (the query stops with it; a restart replays the batch).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from strom.examples.ledger import model
from strom.examples.ledger.topics import ensure_topics, latest_values

__all__ = ["LEDGER_SCHEMA", "JobConfig", "TransactionalWriter", "contributions", "run", "start", "view_rows"]

log = logging.getLogger(__name__)

LEDGER_SCHEMA = StructType(
    [
        StructField("id", StringType()),
        StructField("date", StringType()),
        StructField("time", StringType()),
        StructField("item", StringType()),
        StructField("cell", StringType()),
        StructField("qty", LongType()),
        StructField("worker", StringType()),
        StructField("description", StringType()),
        StructField("unit_weight_kg", DoubleType()),
        StructField("reverses", StringType()),
        StructField("transfer", StringType()),
    ]
)


@dataclass(frozen=True)
class JobConfig:
    bootstrap: str
    checkpoint: str
    available_now: bool = True
    trigger_ms: int = 1000
    max_offsets_per_trigger: int | None = None
    ledger_partitions: int = 3
    view_partitions: int = 3


def _master(spark: SparkSession, bootstrap: str) -> tuple[list[model.Item], list[model.Cell]]:
    items = [model.Item.from_json(v) for v in asyncio.run(latest_values(bootstrap, model.ITEMS)).values()]
    cells = [model.Cell.from_json(v) for v in asyncio.run(latest_values(bootstrap, model.CELLS)).values()]
    return items, cells


def movements(spark: SparkSession, cfg: JobConfig, items: Sequence[model.Item]) -> DataFrame:
    """The parsed ledger stream, with ``weight_g`` and ``is_storno``."""
    reader = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", cfg.bootstrap)
        .option("subscribe", model.LEDGER)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
    )
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    raw = reader.load()
    m = raw.select(
        F.from_json(F.col("value").cast("string"), LEDGER_SCHEMA).alias("m"),
        F.col("value").cast("string").alias("raw"),
        F.col("key").cast("string").alias("ledger_key"),
        "partition",
        "offset",
    ).select("m.*", "raw", "ledger_key", "partition", "offset")

    def blank_to_null(c: str) -> Column:
        return F.when(F.trim(F.col(c)) == "", F.lit(None)).otherwise(F.trim(F.col(c)))

    m = (
        m.withColumn("worker", blank_to_null("worker"))
        .withColumn("reverses", blank_to_null("reverses"))
        .withColumn("transfer", blank_to_null("transfer"))
        .withColumn("time", F.coalesce(F.col("time"), F.lit("00:00:00")))
        .withColumn("description", F.coalesce(F.col("description"), F.lit("")))
        .withColumn("reason", _reason())
    )
    master = spark.createDataFrame(
        [(i.item, i.unit_weight_kg) for i in items],
        StructType([StructField("item", StringType()), StructField("master_unit_weight_kg", DoubleType())]),
    )
    m = m.join(F.broadcast(master), "item", "left")
    unit_g = F.round(F.coalesce(F.col("unit_weight_kg"), F.col("master_unit_weight_kg")) * 1000).cast("long")
    return m.withColumn("weight_g", F.coalesce(F.col("qty") * unit_g, F.lit(0).cast("long"))).withColumn(
        "is_storno", F.col("reverses").isNotNull()
    )


def _reason() -> Column:
    """Why a parsed record cannot be used (null: it can); the rules of ``model.check_record``."""
    obj = F.try_parse_json(F.col("raw"))

    def blank(c: str) -> Column:
        return F.col(c).isNull() | (F.trim(F.col(c)) == "")

    r = F.when(
        F.col("raw").isNull() | obj.isNull() | ~F.ltrim(F.col("raw")).startswith("{"),
        F.lit("not a JSON object"),
    )
    for f in ("id", "date", "item", "cell"):
        r = r.when(blank(f), F.lit(f"missing or invalid {f!r} (a non-empty string)"))
    r = r.when(
        ~F.col("date").rlike(r"^\d{4}-\d{2}-\d{2}$") | F.try_to_date(F.col("date"), "yyyy-MM-dd").isNull(),
        F.lit("invalid 'date' (YYYY-MM-DD)"),
    )
    return r.when(F.col("qty").isNull() | (F.col("qty") == 0), F.lit("'qty' must be a non-zero integer"))


_CONTRIB = StructType(
    [
        StructField("view", StringType()),
        StructField("key", StringType()),
        StructField("a", StringType()),
        StructField("b", StringType()),
        StructField("qty", LongType()),
        StructField("weight_g", LongType()),
        StructField("movements", LongType()),
        StructField("items", LongType()),
        StructField("stornos", LongType()),
        StructField("date", StringType()),
        StructField("raw", StringType()),
    ]
)


def _contribution(
    view: str,
    key: Column,
    a: Column,
    b: Column | None,
    *,
    movements: Column,
    items: Column,
    stornos: Column,
    raw: Column | None = None,
) -> Column:
    nul = F.lit(None).cast("string")
    return F.struct(
        F.lit(view).alias("view"),
        key.alias("key"),
        a.alias("a"),
        (b if b is not None else nul).alias("b"),
        F.col("qty").alias("qty"),
        F.col("weight_g").alias("weight_g"),
        movements.alias("movements"),
        items.alias("items"),
        stornos.alias("stornos"),
        F.col("date").alias("date"),
        (raw if raw is not None else nul).alias("raw"),
    )


_MOVEMENT_FIELDS = [f.name for f in LEDGER_SCHEMA.fields]


def contributions(m: DataFrame) -> DataFrame:
    """One row per (movement, view it touches); a record that cannot be used gives one
    dead-letter row instead."""
    one, zero = F.lit(1).cast("long"), F.lit(0).cast("long")
    storno = F.col("is_storno")
    transfer_in = F.col("transfer").isNotNull() & (F.col("qty") > 0)
    has_worker = F.col("worker").isNotNull()
    every = {"movements": one, "items": zero, "stornos": zero}
    normalized = F.to_json(F.struct(*(F.col(c) for c in _MOVEMENT_FIELDS)), {"ignoreNullFields": "false"})
    per_view = F.array(
        _contribution(
            model.STOCK_BY_ITEM_CELL, F.concat_ws("|", "item", "cell"), F.col("item"), F.col("cell"), **every
        ),
        _contribution(model.STOCK_BY_ITEM, F.col("item"), F.col("item"), None, **every),
        F.when(
            has_worker,
            _contribution(
                model.WORKER_DAY,
                F.concat_ws("|", "worker", "date"),
                F.col("worker"),
                F.col("date"),
                movements=F.when(storno | transfer_in, zero).otherwise(one),
                items=F.when(storno | transfer_in, zero).otherwise(F.abs("qty")),
                stornos=F.when(storno & ~transfer_in, one).otherwise(zero),
            ),
        ),
        F.when(
            has_worker,
            _contribution(
                model.WORKER_MOVEMENTS,
                F.concat_ws("|", "worker", "date", "id"),
                F.col("worker"),
                F.col("date"),
                **every,
                raw=normalized,
            ),
        ),
        _contribution(model.CELL_WEIGHT, F.col("cell"), F.col("cell"), None, **every),
        F.when(
            storno,
            _contribution(
                model.CORRECTIONS, F.col("id"), F.col("id"), None, **every, raw=F.col("raw").cast("string")
            ),
        ),
    )
    dead = F.to_json(
        F.struct(
            F.col("partition"),
            F.col("offset"),
            F.col("ledger_key").alias("key"),
            F.col("raw").alias("value"),
            F.col("reason"),
        ),
        {"ignoreNullFields": "false"},
    )
    nul = F.lit(None).cast("long")
    dead_letter = F.struct(
        F.lit(DEAD).alias("view"),
        F.concat_ws("-", F.col("partition").cast("string"), F.col("offset").cast("string")).alias("key"),
        F.lit(None).cast("string").alias("a"),
        F.lit(None).cast("string").alias("b"),
        nul.alias("qty"),
        nul.alias("weight_g"),
        one.alias("movements"),
        zero.alias("items"),
        zero.alias("stornos"),
        F.lit(None).cast("string").alias("date"),
        dead.alias("raw"),
    )
    arr = F.when(F.col("reason").isNull(), per_view).otherwise(F.array(dead_letter))
    return m.select(F.explode(arr).alias("c")).where(F.col("c").isNotNull()).select("c.*")


DEAD = "dead-letter"
"""The (internal) view name of dead letters: written to :data:`model.DEAD_LETTERS`."""


def aggregate(c: DataFrame) -> DataFrame:
    """The views' totals: one row per (view, key), updated rows only (update mode)."""
    return c.groupBy("view", "key").agg(
        F.max("a").alias("a"),
        F.max("b").alias("b"),
        F.sum("qty").alias("qty"),
        F.sum("weight_g").alias("weight_g"),
        F.sum("movements").alias("movements"),
        F.sum("items").alias("items"),
        F.sum("stornos").alias("stornos"),
        F.max("date").alias("last_date"),
        F.max("raw").alias("raw"),
    )


def view_rows(row: Mapping[str, Any], capacities_g: Mapping[str, int]) -> list[tuple[str, str, bytes]]:
    """(topic, key, value) records for one aggregated row (plus an alert when over capacity)."""
    view, key = str(row["view"]), str(row["key"])
    if view == DEAD:
        return [(model.DEAD_LETTERS, key, str(row["raw"]).encode())]
    if view == model.WORKER_MOVEMENTS:
        return [(view, key, str(row["raw"]).encode())]
    qty, weight, n, date = int(row["qty"]), int(row["weight_g"]), int(row["movements"]), row["last_date"]
    value: dict[str, Any]
    if view == model.STOCK_BY_ITEM_CELL:
        value = {"item": row["a"], "cell": row["b"], "qty": qty, "weight_g": weight, "movements": n}
        value["last_date"] = date
    elif view == model.STOCK_BY_ITEM:
        value = {"item": row["a"], "qty": qty, "weight_g": weight, "movements": n, "last_date": date}
    elif view == model.WORKER_DAY:
        value = {"worker": row["a"], "date": row["b"], "movements": n}
        value.update(items=int(row["items"]), stornos=int(row["stornos"]))
    elif view == model.CORRECTIONS:
        return [(view, key, str(row["raw"]).encode())]
    elif view == model.CELL_WEIGHT:
        cap = capacities_g.get(key)
        value = {"cell": key, "qty": qty, "weight_g": weight}
        if cap is not None:
            value["capacity_g"] = cap
        value.update(over=cap is not None and weight > cap, last_date=date)
        if cap is not None and weight > cap:
            alert = {**value, "excess_g": weight - cap}
            return [(view, key, _dumps(value)), (model.ALERTS, key, _dumps(alert))]
    else:
        raise ValueError(f"unknown view {view!r}")
    return [(view, key, _dumps(value))]


def _dumps(v: Mapping[str, Any]) -> bytes:
    return json.dumps(v, separators=(",", ":")).encode()


class TransactionalWriter:
    """``foreachBatch`` function: a micro-batch's rows in one Kafka transaction, at most once per
    batch id (see the module docstring). Runs on the driver."""

    MARKER_PARTITION = 0  # of the ledger topic; only the committed offset (batch id + 1) matters

    def __init__(self, bootstrap: str, capacities_g: Mapping[str, int]) -> None:
        self.bootstrap = bootstrap
        self.capacities_g = dict(capacities_g)
        self.query_id: str | None = None
        self._known = threading.Event()
        self._producer: Any = None
        self._consumer: Any = None
        self.written_batches: list[int] = []
        self.skipped_batches: list[int] = []
        self.batch_stats: dict[int, tuple[int, int]] = {}  # batch id -> (view rows, dead letters)

    def set_query_id(self, query_id: str) -> None:
        self.query_id = query_id
        self._known.set()

    @property
    def transactional_id(self) -> str:
        return f"strom-ledger-{self.query_id}"

    def _init(self) -> None:
        from confluent_kafka import Consumer, Producer

        if not self._known.wait(120):
            raise RuntimeError("query id unknown: start() did not return")
        tid = self.transactional_id
        self._producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": tid,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "transaction.timeout.ms": 120_000,
            }
        )
        self._producer.init_transactions(60)  # fences an older driver, ends its open transaction
        self._consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": tid,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )

    def close(self) -> None:
        """Release the clients (a later batch makes new ones)."""
        if self._consumer is not None:
            self._consumer.close()
        if self._producer is not None:
            self._producer.flush(10)
        self._producer = self._consumer = None

    def committed_batch(self) -> int:
        """The last batch id whose transaction committed (-1: none)."""
        from confluent_kafka import TopicPartition

        tp = self._consumer.committed([TopicPartition(model.LEDGER, self.MARKER_PARTITION)], timeout=30)[0]
        if tp.error is not None:
            raise RuntimeError(f"marker of {self.transactional_id}: {tp.error}")
        return int(tp.offset) - 1 if tp.offset >= 0 else -1

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        if self._producer is None:
            self._init()
        if self.committed_batch() >= batch_id:
            # still run the plan: the aggregation's state for this batch must be written
            df.write.format("noop").mode("overwrite").save()
            log.info("batch %d already written by %s: skipped", batch_id, self.transactional_id)
            self.skipped_batches.append(batch_id)
            self.batch_stats[batch_id] = (0, 0)
            return
        p = self._producer
        rows = dead = 0
        try:
            p.begin_transaction()
            for row in df.toLocalIterator():
                for topic, key, value in view_rows(row.asDict(), self.capacities_g):
                    if topic == model.DEAD_LETTERS:
                        dead += 1
                    elif topic != model.ALERTS:
                        rows += 1
                    while True:
                        try:
                            p.produce(topic, key=key.encode(), value=value)
                            break
                        except BufferError:
                            p.poll(0.1)
                    p.poll(0)
            marker = [TopicPartition(model.LEDGER, self.MARKER_PARTITION, batch_id + 1)]
            p.send_offsets_to_transaction(marker, self._consumer.consumer_group_metadata(), 60)
            p.commit_transaction(120)
        except BaseException as e:
            try:
                if isinstance(e, KafkaException) and e.args[0].fatal():
                    raise
                p.abort_transaction(60)
            finally:
                self.close()  # the next attempt starts with a fresh producer (and fences this one)
            raise
        self.written_batches.append(batch_id)
        self.batch_stats[batch_id] = (rows, dead)


def start(spark: SparkSession, cfg: JobConfig) -> tuple[StreamingQuery, TransactionalWriter]:
    """Create missing topics, load master data, start the query. Close the writer when the
    query has ended."""
    from strom.spark import StromDataSource

    spark.dataSource.register(StromDataSource)
    asyncio.run(ensure_topics(cfg.bootstrap, cfg.ledger_partitions, cfg.view_partitions))
    items, cells = _master(spark, cfg.bootstrap)
    caps = {c.cell: model.grams(c.capacity_kg) or 0 for c in cells}
    writer = TransactionalWriter(cfg.bootstrap, caps)
    totals = aggregate(contributions(movements(spark, cfg, items)))
    w: Any = (
        totals.writeStream.queryName("ledger-views")
        .outputMode("update")
        .foreachBatch(writer)
        .option("checkpointLocation", cfg.checkpoint)
    )
    if cfg.available_now:
        w = w.trigger(availableNow=True)
    else:
        w = w.trigger(processingTime=f"{cfg.trigger_ms} milliseconds")
    q: StreamingQuery = w.start()
    writer.set_query_id(str(q.id))
    return q, writer


def _offsets_total(v: Any) -> int | None:
    """Sum of a source offset (``{"topic": {"partition": offset}}``, as JSON text or parsed)."""
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return None
    if not isinstance(v, dict):
        return None
    try:
        return sum(int(o) for parts in v.values() for o in parts.values())
    except (AttributeError, TypeError, ValueError):
        return None


def _progress_dict(p: Any) -> dict[str, Any]:
    if isinstance(p, dict):
        return p
    text = getattr(p, "json", None)
    if isinstance(text, str):
        parsed: dict[str, Any] = json.loads(text)
        return parsed
    return {}


def progress_line(p: Mapping[str, Any], writer: TransactionalWriter) -> str | None:
    """The line reported for a finished micro-batch (``None`` for an idle trigger)."""
    batch = p.get("batchId")
    if not isinstance(batch, int) or batch not in writer.batch_stats:
        return None
    rows, dead = writer.batch_stats[batch]
    read = int(p.get("numInputRows") or 0)
    lag: int | None = None
    for src in p.get("sources") or []:
        latest, end = _offsets_total(src.get("latestOffset")), _offsets_total(src.get("endOffset"))
        if latest is not None and end is not None:
            lag = (lag or 0) + max(0, latest - end)
    skipped = " (already written: skipped)" if batch in writer.skipped_batches else ""
    return (
        f"batch {batch}: read {read} records, wrote {rows} view rows, {dead} dead letters, "
        f"lag {'?' if lag is None else lag}{skipped}"
    )


def run(
    spark: SparkSession,
    cfg: JobConfig,
    timeout: float | None = None,
    progress: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Run the query: until it has processed what is there (available-now), until ``stop`` is
    set, it failed or ``timeout`` seconds passed. ``progress`` gets one line per micro-batch.
    Raises :class:`RuntimeError` (one line) with the query's failure."""
    from pyspark.errors import StreamingQueryException

    q, writer = start(spark, cfg)
    deadline = None if timeout is None else time.monotonic() + timeout
    reported: set[int] = set()

    def report() -> None:
        if progress is None:
            return
        for raw in q.recentProgress:
            p = _progress_dict(raw)
            line = progress_line(p, writer)
            b = p.get("batchId")
            if line is not None and b not in reported:
                reported.add(int(b))  # type: ignore[arg-type]
                progress(line)

    try:
        while q.isActive:
            if stop is not None and stop.is_set():
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
            try:
                q.awaitTermination(1)
            except StreamingQueryException:
                break
            report()
        report()
    finally:
        if q.isActive:
            q.stop()
        writer.close()
    exc = q.exception()
    if exc is not None:
        first = str(getattr(exc, "desc", None) or exc).strip().splitlines()
        raise RuntimeError(f"query {q.name} failed: {first[0] if first else exc}")
