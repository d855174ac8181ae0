"""Kafka Streams' DSL on PySpark: ``stream``/``table`` over strom topics, aggregations, windows,
joins, and exactly-once output through the strom sink.

Theory of operation
-------------------
A pipeline is one Spark Structured Streaming query (two when it repartitions, below). The input
topic(s) are read with the strom source (``read_committed``); the rows are grouped by the input
partition (a Kafka Streams task, so inputs of a join must be co-partitioned: same partition
count, same keys in the same partition) and each task's micro-batch goes to
``applyInPandasWithState``, which runs the operator of :mod:`strom.streams.processors` on the
records in offset order and keeps the task's state (stream time plus the per-key state,
pickled) in Spark's state store, versioned with the
checkpoint. The output rows are appended to the strom sink with ``exactlyOnce=true`` (each
micro-batch in Kafka transactions keyed by query and batch): a replayed batch restores the same
state version, computes the same rows and is not written twice.

Why ``applyInPandasWithState`` and not ``transformWithState``: with PySpark 4.3 both need pandas;
``transformWithState`` also needs the RocksDB state store and makes a JVM round trip per state
access (our first trial failed with state-store commit errors), while ``applyInPandasWithState``
hands the state to Python with the data, works with the default store and runs the operator as a
plain function. The cost: a task's state is one value, rewritten each micro-batch (fine for
thousands of keys per partition; not for millions).

Two sides in one query. A join's inputs are the union of both sources (a ``side`` column) grouped
by partition, so one task sees both sides' records of its partition and merges them by timestamp
(:func:`strom.streams.processors.merge_sides`). Inputs read directly must be co-partitioned (the
query refuses to start otherwise, as Kafka Streams' topology check). A *broadcast* side is
cross-joined (a stream-static join) with the task numbers ``0..n-1`` of the other side, so every
task gets all of its records: that is a global table (``global_table`` joined with a
``key_mapper``; no co-partitioning) and the right table of a foreign-key join (``KTable.join(
other, fk_extractor, joiner)``), where Kafka Streams routes subscriptions and responses through
two internal topics instead. ``n`` is the partition count of the other side when the query
starts; each task keeps its own full copy of the broadcast table (memory: tasks x table).

Repartitioning. After a key-changing step (``flat_map``, ``map``, ``select_key``, ``group_by``)
a stateful operator (aggregation, windowing, a join with a table or stream) and every
``KTable.group_by`` read their input back from a repartition topic
``<application_id>-<name>-repartition``, as Kafka Streams does: :meth:`_Plan.to` starts a first
query (the mapping, for ``KTable.group_by`` the stateful ``TableGroupByMap``, exactly-once) that
writes the re-keyed records to that topic - created with the partition count of the join side
read directly, else of the source, keys placed by Kafka's default partitioner (murmur2) so they
line up with a co-partitioned table - and the main query reads it ``read_committed``. Two queries,
not one: Spark's own shuffle (hash partitioning by Spark's Murmur3 of the row) neither matches
Kafka's partitioner nor keeps Kafka's per-partition record order, and each stateful stage keeps
its state per Kafka partition; a topic between the queries gives Kafka Streams' exact semantics,
its own exactly-once transactions and restartability (each query its own checkpoint under
``<checkpoint>/repartition-<side>`` and ``<checkpoint>/main``). :class:`StreamingQueries` handles
both. The record timestamp travels in the repartition record's value (JSON ``[ts, value]``, bytes
base64-tagged), because the sink stamps records with the time of writing; so values crossing a
repartition topic must be JSON or bytes (tuples come back as lists).

Serdes: ``bytes`` (as read), ``string`` (UTF-8) and ``json``; windowed keys are written as JSON
``{"key": k, "start": ms, "end": ms}``.

Error contract: a bad serde name or window raises ``ValueError`` when the pipeline is defined; an
undecodable record fails the micro-batch with the topic, partition and offset in the message.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from strom.streams import processors as P
from strom.streams.serdes import NAMES, DecodeError, Serde, decode, encode
from strom.streams.serdes import check as _check_serde

__all__ = [
    "GlobalKTable",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "StreamingQueries",
    "global_table",
    "stream",
    "table",
]

SERDES = NAMES
ON_ERROR = ("fail", "skip", "dlq")
log = logging.getLogger("strom.streams")


@dataclass
class _Source:
    spark: SparkSession
    topic: str
    bootstrap: str
    key_serde: Serde
    value_serde: Serde
    options: Mapping[str, str]
    internal: bool = False  # a repartition topic: values are _wire([timestamp, value])
    # an undecodable record: fail the micro-batch, skip it (logged), or write it to dlq_topic
    on_error: str = "fail"
    dlq_topic: str | None = None

    def frame(self, side: int) -> DataFrame:
        r = (
            self.spark.readStream.format("strom")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", self.topic)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
        )
        for k, v in self.options.items():
            r = r.option(k, v)
        return r.load().select(
            F.lit(side).alias("side"),
            "partition",
            "offset",
            F.unix_millis("timestamp").alias("ts"),
            "key",
            "value",
        )


@dataclass
class _Plan:
    """Sources (side 0, 1), the operator, the pre-operator record map, and the output serdes."""

    sources: list[_Source]
    make_op: Callable[[], P.Operator]
    key_serde: Serde
    value_serde: Serde
    pre: list[Callable[[Any, Any], list[tuple[Any, Any]]] | None] = field(default_factory=list)
    # per side: the operator of the query that writes the side to a repartition topic (None: read
    # directly), and whether the side is broadcast to every task of the first other side
    stage1: list[Callable[[], P.Operator] | None] = field(default_factory=list)
    broadcast: list[bool] = field(default_factory=list)
    name: str = "repartition"
    internal_out: bool = False

    def _side_flags(self) -> tuple[list[Callable[[], P.Operator] | None], list[bool]]:
        n = len(self.sources)
        return (
            list(self.stage1) + [None] * (n - len(self.stage1)),
            list(self.broadcast) + [False] * (n - len(self.broadcast)),
        )

    def to(
        self,
        topic: str,
        checkpoint: str,
        *,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        bootstrap: str | None = None,
        trigger: Mapping[str, Any] | None = None,
        query_name: str | None = None,
        application_id: str | None = None,
    ) -> StreamingQuery | StreamingQueries:
        """Start the query: results appended exactly-once to ``topic`` (which should be compacted
        for tables). ``trigger`` is passed to ``DataStreamWriter.trigger`` (e.g.
        ``{"availableNow": True}``).

        A pipeline whose stateful operator follows a key change (or a table ``group_by``) runs as
        two queries joined by the repartition topic ``<application_id>-<name>-repartition``
        (created if missing; ``application_id`` defaults to ``strom-<topic>``): checkpoints
        ``<checkpoint>/repartition-<side>`` and ``<checkpoint>/main``; a
        :class:`StreamingQueries` is returned. With ``availableNow`` the repartitioning query runs
        to its end before the main query starts."""
        stage1, _ = self._side_flags()
        boot = bootstrap or self.sources[0].bootstrap
        if not any(stage1):
            return self._start(topic, checkpoint, key_serde, value_serde, boot, trigger, query_name)
        app = application_id or f"strom-{topic}"
        main, firsts = self._repartitioned(app, checkpoint, trigger, query_name)
        q = main._start(topic, f"{checkpoint}/main", key_serde, value_serde, boot, trigger, query_name)
        return StreamingQueries([*firsts, q])

    def _repartitioned(
        self, app: str, checkpoint: str, trigger: Mapping[str, Any] | None, query_name: str | None
    ) -> tuple[_Plan, list[StreamingQuery]]:
        """Start the repartitioning queries; the plan that reads their topics instead."""
        stage1, broadcast = self._side_flags()
        many = sum(1 for f in stage1 if f is not None) > 1
        direct = [s for s, f, b in zip(self.sources, stage1, broadcast, strict=True) if f is None and not b]
        sources, pre, queries = list(self.sources), list(self.pre) + [None] * len(self.sources), []
        # co-partitioned with the side read directly (Kafka's co-partitioning), else the largest source
        parts = (
            _partition_count(direct[0].bootstrap, direct[0].topic)
            if direct
            else max(
                _partition_count(s.bootstrap, s.topic) for s, f in zip(self.sources, stage1, strict=True) if f
            )
        )
        for i, (src, make) in enumerate(zip(self.sources, stage1, strict=True)):
            if make is None:
                continue
            suffix = ("-left" if i == 0 else "-right") if many else ""
            rtopic = f"{app}-{self.name}{suffix}-repartition"
            _ensure_topic(src.bootstrap, rtopic, parts)
            first = _Plan([src], make, src.key_serde, "json", [pre[i]], internal_out=True)
            q = first._start(
                rtopic,
                f"{checkpoint}/repartition-{i}",
                src.key_serde,
                "json",
                src.bootstrap,
                trigger,
                f"{query_name}-repartition-{i}" if query_name else None,
            )
            if trigger and trigger.get("availableNow"):
                q.awaitTermination()
                if q.exception() is not None:
                    raise RuntimeError(f"repartition query to {rtopic} failed: {q.exception()}")
            queries.append(q)
            sources[i] = _Source(
                src.spark, rtopic, src.bootstrap, src.key_serde, "json", src.options, internal=True
            )
            pre[i] = None
        plan = _Plan(
            sources,
            self.make_op,
            self.key_serde,
            self.value_serde,
            pre,
            [None] * len(sources),
            broadcast,
            self.name,
            self.internal_out,
        )
        return plan, queries

    def _start(
        self,
        topic: str,
        checkpoint: str,
        key_serde: Serde | None,
        value_serde: Serde | None,
        bootstrap: str,
        trigger: Mapping[str, Any] | None,
        query_name: str | None,
    ) -> StreamingQuery:
        ks = _check_serde(key_serde or self.key_serde)
        vs = _check_serde(value_serde or self.value_serde)
        df = self.frame(ks, vs, topic)
        w = (
            df.writeStream.format("strom")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("exactlyOnce", "true")
            .option("checkpointLocation", checkpoint)
            .outputMode("append")
        )
        # with dead letters the rows carry their topic (the output or a dead-letter topic), all in
        # the batch's transactions; the batch marker stays on the output topic
        w = w.option("exactlyOnce.markerTopic", topic) if self._dead_letters() else w.option("topic", topic)
        if query_name:
            w = w.queryName(query_name)
        if trigger:
            w = w.trigger(**trigger)
        return w.start()

    def _dead_letters(self) -> bool:
        return any(src.on_error == "dlq" for src in self.sources)

    def frame(self, out_key_serde: Serde, out_value_serde: Serde, out_topic: str = "") -> DataFrame:
        """The result rows (``key``, ``value`` binary; with a dead-letter topic also ``topic``
        and ``headers``) as a streaming DataFrame."""
        import pandas as pd  # type: ignore[import-untyped,unused-ignore]
        from pyspark.sql.streaming.state import GroupStateTimeout

        _, broadcast = self._side_flags()
        if any(broadcast) and all(broadcast):
            raise ValueError("a broadcast (global) table needs a side that is not broadcast")
        main = broadcast.index(False)
        direct = [s for s, b in zip(self.sources, broadcast, strict=True) if not b]
        if len(direct) > 1:
            counts = {s.topic: _partition_count(s.bootstrap, s.topic) for s in direct}
            if len(set(counts.values())) > 1:
                raise ValueError(
                    "the inputs of a join must be co-partitioned (same partition count): "
                    + ", ".join(f"{t} has {n}" for t, n in counts.items())
                )
        tasks = None
        if any(broadcast):
            n = _partition_count(self.sources[main].bootstrap, self.sources[main].topic)
            spark = self.sources[main].spark
            tasks = spark.range(n).select(F.col("id").cast("int").alias("partition"))
        df = None
        for i, s in enumerate(self.sources):
            f = s.frame(i).withColumn("src", F.col("partition"))
            if broadcast[i]:
                assert tasks is not None
                f = f.drop("partition").crossJoin(tasks)  # every task gets every record of the side
            df = f if df is None else df.unionByName(f)
        assert df is not None
        serdes = [(s.topic, s.key_serde, s.value_serde, s.internal, s.on_error, s.dlq_topic)
                  for s in self.sources]
        make_op, pre = self.make_op, list(self.pre) + [None] * (len(self.sources) - len(self.pre))
        internal_out = self.internal_out
        dead_letters = self._dead_letters()

        def task(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
            rows = pd.concat(list(pdfs), ignore_index=True)
            sides: list[list[tuple[Any, Any, int]]] = []
            dlq: list[tuple[str, Any, Any, list[dict[str, Any]]]] = []
            for i, (topic, kser, vser, internal, on_error, dlq_topic) in enumerate(serdes):
                part = rows[rows["side"] == i].sort_values(["src", "offset"], kind="stable")
                per_src: dict[int, list[tuple[Any, Any, int]]] = {}
                cols = (part["src"], part["offset"], part["ts"], part["key"], part["value"])
                for src, off, ts, k, v in zip(*cols, strict=True):
                    where = f"{topic}-{src} offset {off}"
                    rawk = None if k is None or k is pd.NA else k
                    raw = None if v is None or v is pd.NA else v
                    t = int(ts)
                    try:
                        kk = decode(kser, rawk, where)
                        if internal:
                            t, vv = _unwire(raw, where)
                        else:
                            vv = decode(vser, raw, where)
                    except DecodeError as e:
                        if on_error == "fail" or internal:
                            raise
                        if on_error == "skip":
                            log.warning("skipping %s", e)
                        else:
                            assert dlq_topic is not None
                            dlq.append((dlq_topic, rawk, raw, _dlq_headers(e, topic, int(src), int(off))))
                        continue
                    f = pre[i]
                    recs = per_src.setdefault(int(src), [])
                    if f is None:
                        recs.append((kk, vv, t))
                    else:
                        recs.extend((k2, v2, t) for k2, v2 in f(kk, vv))
                lists = [per_src[p] for p in sorted(per_src)]
                # several source partitions in one task (a broadcast side): merged by timestamp
                sides.append(
                    lists[0] if len(lists) == 1 else [(k, v, t) for _, k, v, t in P.merge_sides(lists)]
                )
            new_state, out = P.run_task_ts(make_op(), state.get[0] if state.exists else None, sides)
            state.update((new_state,))
            res = {
                "key": [encode(out_key_serde, k, out_topic, True) for k, _, _ in out],
                "value": [
                    _wire(t, v) if internal_out else encode(out_value_serde, v, out_topic) for _, v, t in out
                ],
            }
            if not dead_letters:
                yield pd.DataFrame(res, columns=["key", "value"])
                return
            yield pd.DataFrame(
                {
                    "key": res["key"] + [bytes(k) if k is not None else None for _, k, _, _ in dlq],
                    "value": res["value"] + [bytes(v) if v is not None else None for _, _, v, _ in dlq],
                    "topic": [out_topic] * len(out) + [t for t, _, _, _ in dlq],
                    "headers": [None] * len(out) + [h for _, _, _, h in dlq],
                },
                columns=["key", "value", "topic", "headers"],
            )

        schema = "key binary, value binary"
        if dead_letters:
            schema += ", topic string, headers array<struct<key: string, value: binary>>"
        return df.groupBy("partition").applyInPandasWithState(
            task, schema, "state binary", "append", GroupStateTimeout.NoTimeout
        )


class StreamingQueries:
    """The queries of one pipeline that goes through a repartition topic (first the
    repartitioning queries, last the main one), handled as one; other attributes are the main
    query's."""

    def __init__(self, queries: list[StreamingQuery]) -> None:
        self.queries = queries

    def awaitTermination(self, timeout: int | None = None) -> bool:
        done = True
        for q in reversed(self.queries):
            done = bool(q.awaitTermination(timeout) if timeout is not None else q.awaitTermination()) and done
        return done

    def exception(self) -> Any:
        return next((e for e in (q.exception() for q in self.queries) if e is not None), None)

    def stop(self) -> None:
        for q in self.queries:
            q.stop()

    @property
    def isActive(self) -> bool:
        return any(q.isActive for q in self.queries)

    def processAllAvailable(self) -> None:
        for q in self.queries:
            q.processAllAvailable()

    def __getattr__(self, name: str) -> Any:
        """Anything else (``id``, ``lastProgress``, ``status``, ...) is the main query's."""
        if name == "queries":
            raise AttributeError(name)
        return getattr(self.queries[-1], name)


def _wire(ts: int, v: Any) -> bytes:
    """A repartition topic's value: JSON ``[timestamp, value]`` (bytes as ``{"$bytes": b64}``);
    the record timestamp travels in the value because the sink stamps records with "now"."""

    def default(o: Any) -> Any:
        if isinstance(o, (bytes, bytearray)):
            return {"$bytes": base64.b64encode(bytes(o)).decode()}
        if isinstance(o, P.Windowed):
            return o.to_json()
        if isinstance(o, (set, frozenset)):
            return sorted(o, key=repr)
        raise ValueError(
            f"a value crossing a repartition topic must be JSON (or bytes), got {type(o).__name__}"
        )

    return json.dumps([ts, v], default=default, separators=(",", ":")).encode()


def _unwire(raw: bytes | None, where: str) -> tuple[int, Any]:
    def hook(d: dict[str, Any]) -> Any:
        return base64.b64decode(d["$bytes"]) if len(d) == 1 and "$bytes" in d else d

    try:
        ts, v = json.loads(bytes(raw or b""), object_hook=hook)
        return int(ts), v
    except (ValueError, TypeError) as e:
        raise ValueError(f"record {where} is not a strom.streams repartition record: {e}") from None


def _partition_count(bootstrap: str, topic: str) -> int:
    import asyncio

    from strom.client import Client

    async def go() -> int:
        async with Client(bootstrap) as c:
            md = await c.metadata([topic])
            tm = md.topics.get(topic)
            if tm is None or tm.error_code or not tm.partitions:
                raise ValueError(f"topic {topic!r} does not exist (needed for its partition count)")
            return len(tm.partitions)

    return asyncio.run(go())


def _ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create the repartition topic (broker-default replication); an existing one must have
    ``partitions`` partitions."""
    import asyncio

    from strom.client import Client

    async def go() -> None:
        async with Client(bootstrap) as c:
            res = await c.create_topics({topic: (partitions, -1)})
            err = res.get(topic)
            if err is not None and getattr(err, "code", None) != 36:  # TOPIC_ALREADY_EXISTS
                raise err

    asyncio.run(go())
    have = _partition_count(bootstrap, topic)
    if have != partitions:
        raise ValueError(
            f"repartition topic {topic!r} has {have} partitions, the pipeline needs {partitions}"
        )


class KTable:
    """A table: the latest value per key of a topic (tombstones delete)."""

    def __init__(
        self, source: _Source, pre: Callable[[Any, Any], list[tuple[Any, Any]]] | None = None
    ) -> None:
        self.source, self.pre = source, pre

    def _then(self, fn: Callable[[Any, Any], Any]) -> KTable:
        """A table whose every update (key, value or None) is also passed through ``fn``."""
        prev = self.pre

        def both(k: Any, v: Any) -> list[tuple[Any, Any]]:
            if prev is None:
                return [(k, fn(k, v))]
            return [(k2, fn(k2, v2)) for k2, v2 in prev(k, v)]

        return KTable(self.source, both)

    def map_values(self, fn: Callable[[Any], Any]) -> KTable:
        """Kafka Streams' ``KTable.mapValues``: each value mapped (a deleted key stays deleted; a
        value mapped to None deletes the key)."""
        return self._then(lambda k, v: None if v is None else fn(v))

    def filter(self, pred: Callable[[Any, Any], bool]) -> KTable:
        """Kafka Streams' ``KTable.filter``: a row that does not match is deleted (a tombstone),
        so a row that stops matching leaves the table."""
        return self._then(lambda k, v: v if v is not None and pred(k, v) else None)

    def filter_not(self, pred: Callable[[Any, Any], bool]) -> KTable:
        return self.filter(lambda k, v: not pred(k, v))

    def to_stream(self) -> KStream:
        """The table's updates as a stream (tombstones as records with a None value)."""
        return KStream(self.source, self.pre)

    def to(self, topic: str, checkpoint: str, **kw: Any) -> StreamingQuery | StreamingQueries:
        """The table's changelog (updates and tombstones of deleted keys) to a compacted topic."""
        return _Plan(
            [self.source], P.TableSource, self.source.key_serde, self.source.value_serde, [self.pre]
        ).to(topic, checkpoint, **kw)

    def join(
        self,
        other: KTable,
        fn: Callable[[Any, Any], Any] | Callable[[Any], Any],
        joiner: Callable[[Any, Any], Any] | None = None,
        *,
        how: str = "inner",
        value_serde: Serde = "json",
    ) -> _Plan:
        """``join(other, joiner, how=)``: table-table join on the key (``inner``, ``left``,
        ``outer``; inputs co-partitioned), the result's changelog with tombstones for deleted
        results. ``join(other, fk_extractor, joiner, how=)``: foreign-key join (KIP-213;
        ``inner`` or ``left``): ``fk_extractor(value)`` is ``other``'s key; ``other`` is broadcast
        to every task of this table, so it need not be co-partitioned."""
        if not isinstance(other, KTable):
            raise ValueError("KTable.join needs a KTable")
        if joiner is None:
            jn = fn
            if how not in ("inner", "left", "outer"):
                raise ValueError("how must be 'inner', 'left' or 'outer'")

            def make() -> P.Operator:
                return P.TableTableJoin(jn, how)  # type: ignore[arg-type]

            return _Plan(
                [self.source, other.source], make, self.source.key_serde, value_serde, [self.pre, other.pre]
            )
        if how not in ("inner", "left"):
            raise ValueError("a foreign-key join's how must be 'inner' or 'left'")
        fk, jn2, left = fn, joiner, how == "left"

        def make_fk() -> P.Operator:
            return P.ForeignKeyJoin(fk, jn2, left)  # type: ignore[arg-type]

        return _Plan(
            [self.source, other.source],
            make_fk,
            self.source.key_serde,
            value_serde,
            [self.pre, other.pre],
            broadcast=[False, True],
        )

    def group_by(
        self, selector: Callable[[Any, Any], tuple[Any, Any]], *, name: str = "groupby"
    ) -> KGroupedTable:
        """``selector(key, value) -> (new key, new value)``; always repartitioned (through
        ``<app>-<name>-repartition``), as Kafka Streams' ``KTable.groupBy``."""
        return KGroupedTable(self, selector, name)


class KGroupedTable:
    """``KTable.group_by(...)``: aggregations that subtract a row's old value from its old group
    and add its new value to its new group on every update."""

    def __init__(self, table: KTable, selector: Callable[[Any, Any], tuple[Any, Any]], name: str) -> None:
        self.table, self.selector, self.name = table, selector, name

    def aggregate(
        self,
        init: Callable[[], Any] | None,
        adder: Callable[[Any, Any], Any],
        subtractor: Callable[[Any, Any], Any],
        *,
        value_serde: Serde = "json",
    ) -> _Plan:
        """``adder(agg, value)``, ``subtractor(agg, value)``; emits each group's new aggregate
        (a tombstone if it becomes ``None``)."""
        sel = self.selector

        def first() -> P.Operator:
            return P.TableGroupByMap(sel)

        def make() -> P.Operator:
            return P.TableAggregate(init, adder, subtractor)

        src = self.table.source
        return _Plan(
            [src], make, src.key_serde, value_serde, [self.table.pre], stage1=[first], name=self.name
        )

    def count(self) -> _Plan:
        return self.aggregate(_zero, _count, _minus_one)

    def reduce(self, adder: Callable[[Any, Any], Any], subtractor: Callable[[Any, Any], Any]) -> _Plan:
        return self.aggregate(None, adder, subtractor)


class GlobalKTable:
    """A table every task holds whole (Kafka Streams' ``GlobalKTable``): join a stream to it with
    ``stream.join(global_table, joiner, key_mapper=...)``; no co-partitioning needed."""

    def __init__(self, source: _Source) -> None:
        self.source = source


Windows = P.TimeWindows | P.SessionWindows | P.SlidingWindows


class KGroupedStream:
    def __init__(self, stream: KStream, windows: Windows | None = None, name: str = "groupby") -> None:
        self.stream, self.windows, self.name = stream, windows, name

    def windowed_by(self, windows: Windows) -> KGroupedStream:
        return KGroupedStream(self.stream, windows, self.name)

    def aggregate(
        self,
        init: Callable[[], Any],
        adder: Callable[[Any, Any], Any],
        merger: Callable[[Any, Any], Any] | None = None,
        *,
        emit: str = "changes",
        value_serde: Serde = "json",
    ) -> _Plan:
        """``adder(aggregate, value)``; ``merger(a, b)`` joins two sessions (session windows only).
        ``emit``: ``"changes"`` (every update) or ``"final"`` (once, when the window closes)."""
        if emit not in ("changes", "final"):
            raise ValueError("emit must be 'changes' or 'final'")
        w = self.windows
        make: Callable[[], P.Operator]
        if w is None:
            if emit == "final":
                raise ValueError("emit='final' needs windowed_by(...)")

            def make() -> P.Operator:
                return P.Aggregate(init, adder)
        elif isinstance(w, P.TimeWindows):

            def make() -> P.Operator:
                return P.WindowedAggregate(w, init, adder, emit)
        elif isinstance(w, P.SlidingWindows):
            sl = w

            def make() -> P.Operator:
                return P.SlidingAggregate(sl, init, adder, emit)
        else:
            if merger is None:
                raise ValueError("session windows need a merger")
            sw = w

            def make() -> P.Operator:
                return P.SessionAggregate(sw, init, adder, merger, emit)

        return self.stream._plan1(make, value_serde, self.name)

    def count(self, *, emit: str = "changes") -> _Plan:
        return self.aggregate(_zero, _count, _plus, emit=emit)

    def sum(self, fn: Callable[[Any], Any] = lambda v: v, *, emit: str = "changes") -> _Plan:
        return self.aggregate(_zero, lambda a, v: a + fn(v), _plus, emit=emit)

    def reduce(self, fn: Callable[[Any, Any], Any], *, emit: str = "changes") -> _Plan:
        def add(a: Any, v: Any) -> Any:
            return v if a is _NONE else fn(a, v)

        def merge(a: Any, b: Any) -> Any:
            return b if a is _NONE else a if b is _NONE else fn(a, b)

        return self.aggregate(_none, add, merge, emit=emit)


class _NoneType:
    def __reduce__(self) -> str:
        return "_NONE"


_NONE = _NoneType()


def _none() -> Any:
    return _NONE


def _zero() -> int:
    return 0


def _count(a: int, v: Any) -> int:
    return a + 1


def _minus_one(a: int, v: Any) -> int:
    return a - 1


def _plus(a: Any, b: Any) -> Any:
    return a + b


Mapper = Callable[[Any, Any], list[tuple[Any, Any]]]


class KStream:
    """A record stream of a topic, optionally mapped record by record (``flat_map``) before the
    next stateful operator. ``key_changed``: a key-changing step (``flat_map``, ``map``,
    ``select_key``, ``group_by``) happened, so the next stateful operator reads the records back
    from a repartition topic (Kafka Streams' automatic repartitioning)."""

    def __init__(self, source: _Source, mapper: Mapper | None = None, key_changed: bool = False) -> None:
        self.source, self.mapper, self.key_changed = source, mapper, key_changed

    def _then(self, fn: Mapper, key_changed: bool) -> KStream:
        prev = self.mapper
        changed = self.key_changed or key_changed
        if prev is None:
            return KStream(self.source, fn, changed)

        def both(k: Any, v: Any) -> list[tuple[Any, Any]]:
            return [kv2 for kv in prev(k, v) for kv2 in fn(*kv)]

        return KStream(self.source, both, changed)

    def flat_map(self, fn: Mapper) -> KStream:
        """``fn(key, value) -> [(key, value), ...]``; may change keys (the next stateful operator
        repartitions, as Kafka Streams)."""
        return self._then(fn, True)

    def map(self, fn: Callable[[Any, Any], tuple[Any, Any]]) -> KStream:
        """``fn(key, value) -> (key, value)`` (repartitions before the next stateful operator)."""
        return self._then(lambda k, v: [fn(k, v)], True)

    def select_key(self, fn: Callable[[Any, Any], Any]) -> KStream:
        """``fn(key, value) -> new key`` (repartitions before the next stateful operator)."""
        return self._then(lambda k, v: [(fn(k, v), v)], True)

    def flat_map_values(self, fn: Callable[[Any], list[Any]]) -> KStream:
        return self._then(lambda k, v: [(k, v2) for v2 in fn(v)], False)

    def map_values(self, fn: Callable[[Any], Any]) -> KStream:
        return self._then(lambda k, v: [(k, fn(v))], False)

    def filter(self, pred: Callable[[Any, Any], bool]) -> KStream:
        return self._then(lambda k, v: [(k, v)] if pred(k, v) else [], False)

    def repartition(self) -> KStream:
        """Kafka Streams' ``KStream.repartition()``: the next stateful operator reads this stream
        back from its repartition topic (``<app>-<name>-repartition``, Kafka's default
        partitioner) even though the key did not change, e.g. to spread a skewed or
        differently-partitioned topic by key."""
        return KStream(self.source, self.mapper, True)

    def group_by_key(self, *, name: str = "groupby") -> KGroupedStream:
        """Group by the current key; after a key change the records go through
        ``<app>-<name>-repartition`` first."""
        return KGroupedStream(self, None, name)

    def group_by(self, selector: Callable[[Any, Any], Any], *, name: str = "groupby") -> KGroupedStream:
        """``select_key(selector).group_by_key()``: always repartitioned."""
        return self.select_key(selector).group_by_key(name=name)

    def _plan1(self, make: Callable[[], P.Operator], value_serde: Serde, name: str) -> _Plan:
        s = self.source
        if self.key_changed:
            return _Plan([s], make, s.key_serde, value_serde, [self.mapper], [_Passthrough], name=name)
        return _Plan([s], make, s.key_serde, value_serde, [self.mapper])

    def join(
        self,
        other: KTable | KStream | GlobalKTable,
        joiner: Callable[[Any, Any], Any],
        windows: P.JoinWindows | None = None,
        *,
        how: str = "inner",
        value_serde: Serde = "json",
        key_mapper: Callable[[Any, Any], Any] | None = None,
        name: str = "join",
    ) -> _Plan:
        """Stream-table join (``other`` a :class:`KTable`), stream-global-table join (``other``
        a :class:`GlobalKTable`; ``key_mapper(key, value)`` gives the table key, default the
        stream key), or windowed stream-stream join (``other`` a :class:`KStream`, ``windows``
        required). ``how``: ``inner`` or ``left``; stream-stream also ``outer``. A stream side
        whose key changed is repartitioned first (not for a global table: none needed)."""
        if how not in ("inner", "left", "outer"):
            raise ValueError("how must be 'inner', 'left' or 'outer'")
        left = how == "left"
        s = self.source
        mine = _Passthrough if self.key_changed else None
        if isinstance(other, GlobalKTable):
            if windows is not None or how == "outer":
                raise ValueError("a stream-global-table join has no window and no outer join")
            km = key_mapper or _stream_key

            def make_g() -> P.Operator:
                return P.StreamGlobalTableJoin(km, joiner, left)

            return _Plan(
                [other.source, s],
                make_g,
                s.key_serde,
                value_serde,
                [None, self.mapper],
                broadcast=[True, False],
            )
        if key_mapper is not None:
            raise ValueError("key_mapper is for a join with a GlobalKTable")
        if isinstance(other, KTable):
            if windows is not None or how == "outer":
                raise ValueError("a stream-table join has no window and no outer join")

            def make() -> P.Operator:
                return P.StreamTableJoin(joiner, left)

            return _Plan(
                [other.source, s],
                make,
                s.key_serde,
                value_serde,
                [other.pre, self.mapper],
                [None, mine],
                name=name,
            )
        if windows is None:
            raise ValueError("a stream-stream join needs JoinWindows")
        jw, outer = windows, how == "outer"

        def make2() -> P.Operator:
            return P.StreamStreamJoin(jw, joiner, left, outer=outer)

        theirs = _Passthrough if other.key_changed else None
        return _Plan(
            [s, other.source],
            make2,
            s.key_serde,
            value_serde,
            [self.mapper, other.mapper],
            [mine, theirs],
            name=name,
        )

    def to(self, topic: str, checkpoint: str, **kw: Any) -> StreamingQuery | StreamingQueries:
        """The (mapped) stream to ``topic``, exactly-once (keys partitioned by Kafka's default
        partitioner: no repartition topic needed)."""
        return _Plan(
            [self.source], _Passthrough, self.source.key_serde, self.source.value_serde, [self.mapper]
        ).to(topic, checkpoint, **kw)


def _stream_key(k: Any, v: Any) -> Any:
    return k


class _Passthrough(P.Operator):
    def process(self, side: int, key: Any, value: Any, ts: int) -> P.Out:
        return [(key, value)]


def _dlq_headers(e: DecodeError, topic: str, partition: int, offset: int) -> list[dict[str, Any]]:
    """Kafka Streams' dead-letter headers (KIP-1034) for a record that did not decode."""
    pairs = [
        ("__streams.errors.exception", type(e).__name__),
        ("__streams.errors.message", str(e)),
        ("__streams.errors.topic", topic),
        ("__streams.errors.partition", str(partition)),
        ("__streams.errors.offset", str(offset)),
    ]
    return [{"key": k, "value": v.encode()} for k, v in pairs]


def _source(
    spark: SparkSession,
    topic: str,
    bootstrap: str,
    key_serde: Serde,
    value_serde: Serde,
    options: Mapping[str, str] | None,
    on_error: str = "fail",
    dlq_topic: str | None = None,
) -> _Source:
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)}, got {on_error!r}")
    if (on_error == "dlq") != bool(dlq_topic):
        raise ValueError("on_error='dlq' needs dlq_topic=..., and dlq_topic needs on_error='dlq'")
    return _Source(
        spark, topic, bootstrap, _check_serde(key_serde), _check_serde(value_serde), dict(options or {}),
        on_error=on_error, dlq_topic=dlq_topic,
    )


def stream(
    spark: SparkSession,
    topic: str,
    *,
    bootstrap: str,
    key_serde: Serde = "string",
    value_serde: Serde = "string",
    options: Mapping[str, str] | None = None,
    on_error: str = "fail",
    dlq_topic: str | None = None,
) -> KStream:
    """A :class:`KStream` of ``topic`` from its first offset; ``options`` go to the strom source."""
    return KStream(
        _source(spark, topic, bootstrap, key_serde, value_serde, options, on_error, dlq_topic)
    )


def table(
    spark: SparkSession,
    topic: str,
    *,
    bootstrap: str,
    key_serde: Serde = "string",
    value_serde: Serde = "string",
    options: Mapping[str, str] | None = None,
    on_error: str = "fail",
    dlq_topic: str | None = None,
) -> KTable:
    """A :class:`KTable` of (compacted) ``topic``: latest value per key, tombstones delete."""
    return KTable(
        _source(spark, topic, bootstrap, key_serde, value_serde, options, on_error, dlq_topic)
    )


def global_table(
    spark: SparkSession,
    topic: str,
    *,
    bootstrap: str,
    key_serde: Serde = "string",
    value_serde: Serde = "string",
    options: Mapping[str, str] | None = None,
    on_error: str = "fail",
    dlq_topic: str | None = None,
) -> GlobalKTable:
    """A :class:`GlobalKTable` of (compacted) ``topic``: every task of a stream joined to it holds
    all of its partitions."""
    return GlobalKTable(
        _source(spark, topic, bootstrap, key_serde, value_serde, options, on_error, dlq_topic)
    )
