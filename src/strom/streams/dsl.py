"""Kafka Streams' DSL on PySpark: ``stream``/``table`` over strom topics, aggregations, windows,
joins, and exactly-once output through the strom sink.

Theory of operation
-------------------
A pipeline is one Spark Structured Streaming query. The input topic(s) are read with the strom
source (``read_committed``); the rows are grouped by the input partition (a Kafka Streams task,
so inputs of a join must be co-partitioned: same partition count, same keys in the same
partition) and each task's micro-batch goes to ``applyInPandasWithState``, which runs the
operator of :mod:`strom.streams.processors` on the records in offset order and keeps the task's
state (stream time plus the per-key state, pickled) in Spark's state store, versioned with the
checkpoint. The output rows are appended to the strom sink with ``exactlyOnce=true`` (each
micro-batch in Kafka transactions keyed by query and batch): a replayed batch restores the same
state version, computes the same rows and is not written twice.

Why ``applyInPandasWithState`` and not ``transformWithState``: with PySpark 4.3 both need pandas;
``transformWithState`` also needs the RocksDB state store and makes a JVM round trip per state
access (our first trial failed with state-store commit errors), while ``applyInPandasWithState``
hands the state to Python with the data, works with the default store and runs the operator as a
plain function. The cost: a task's state is one value, rewritten each micro-batch (fine for
thousands of keys per partition; not for millions).

Serdes: ``bytes`` (as read), ``string`` (UTF-8) and ``json``; windowed keys are written as JSON
``{"key": k, "start": ms, "end": ms}``.

Error contract: a bad serde name or window raises ``ValueError`` when the pipeline is defined; an
undecodable record fails the micro-batch with the topic, partition and offset in the message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from strom.streams import processors as P

__all__ = ["KGroupedStream", "KStream", "KTable", "stream", "table"]

SERDES = ("bytes", "string", "json")


def _check_serde(name: str) -> str:
    if name not in SERDES:
        raise ValueError(f"unknown serde {name!r}: expected one of {', '.join(SERDES)}")
    return name


def decode(serde: str, raw: bytes | None, where: str) -> Any:
    if raw is None:
        return None
    if serde == "bytes":
        return bytes(raw)
    try:
        text = bytes(raw).decode("utf-8")
        return text if serde == "string" else json.loads(text)
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"record {where} is not {serde}: {e}") from None


def encode(serde: str, v: Any) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, P.Windowed):
        return P.dumps_json(v).encode()
    if serde == "bytes":
        if not isinstance(v, (bytes, bytearray)):
            raise ValueError(f"serde bytes needs bytes, got {type(v).__name__}")
        return bytes(v)
    if serde == "string":
        return (
            v if isinstance(v, str) else json.dumps(v) if isinstance(v, (dict, list)) else str(v)
        ).encode()
    return P.dumps_json(v).encode()


@dataclass
class _Source:
    spark: SparkSession
    topic: str
    bootstrap: str
    key_serde: str
    value_serde: str
    options: Mapping[str, str]

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
    key_serde: str
    value_serde: str
    pre: list[Callable[[Any, Any], list[tuple[Any, Any]]] | None] = field(default_factory=list)

    def to(
        self,
        topic: str,
        checkpoint: str,
        *,
        key_serde: str | None = None,
        value_serde: str | None = None,
        bootstrap: str | None = None,
        trigger: Mapping[str, Any] | None = None,
        query_name: str | None = None,
    ) -> StreamingQuery:
        """Start the query: results appended exactly-once to ``topic`` (which should be compacted
        for tables). ``trigger`` is passed to ``DataStreamWriter.trigger`` (e.g.
        ``{"availableNow": True}``)."""
        ks = _check_serde(key_serde or self.key_serde)
        vs = _check_serde(value_serde or self.value_serde)
        df = self.frame(ks, vs)
        w = (
            df.writeStream.format("strom")
            .option("kafka.bootstrap.servers", bootstrap or self.sources[0].bootstrap)
            .option("topic", topic)
            .option("exactlyOnce", "true")
            .option("checkpointLocation", checkpoint)
            .outputMode("append")
        )
        if query_name:
            w = w.queryName(query_name)
        if trigger:
            w = w.trigger(**trigger)
        return w.start()

    def frame(self, out_key_serde: str, out_value_serde: str) -> DataFrame:
        """The result rows (``key``, ``value`` binary) as a streaming DataFrame."""
        import pandas as pd  # type: ignore[import-untyped,unused-ignore]
        from pyspark.sql.streaming.state import GroupStateTimeout

        df = self.sources[0].frame(0)
        for i, s in enumerate(self.sources[1:], 1):
            df = df.unionByName(s.frame(i))
        serdes = [(s.topic, s.key_serde, s.value_serde) for s in self.sources]
        make_op, pre = self.make_op, list(self.pre) + [None] * (len(self.sources) - len(self.pre))

        def task(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
            rows = pd.concat(list(pdfs), ignore_index=True)
            sides: list[list[tuple[Any, Any, int]]] = []
            for i, (topic, kser, vser) in enumerate(serdes):
                part = rows[rows["side"] == i].sort_values("offset", kind="stable")
                recs: list[tuple[Any, Any, int]] = []
                for off, ts, k, v in zip(part["offset"], part["ts"], part["key"], part["value"], strict=True):
                    where = f"{topic}-{key[0]} offset {off}"
                    kk = decode(kser, None if k is None or k is pd.NA else k, where)
                    vv = decode(vser, None if v is None or v is pd.NA else v, where)
                    f = pre[i]
                    if f is None:
                        recs.append((kk, vv, int(ts)))
                    else:
                        recs.extend((k2, v2, int(ts)) for k2, v2 in f(kk, vv))
                sides.append(recs)
            new_state, out = P.run_task(make_op(), state.get[0] if state.exists else None, sides)
            state.update((new_state,))
            yield pd.DataFrame(
                {
                    "key": [encode(out_key_serde, k) for k, _ in out],
                    "value": [encode(out_value_serde, v) for _, v in out],
                },
                columns=["key", "value"],
            )

        return df.groupBy("partition").applyInPandasWithState(
            task, "key binary, value binary", "state binary", "append", GroupStateTimeout.NoTimeout
        )


class KTable:
    """A table: the latest value per key of a topic (tombstones delete)."""

    def __init__(self, source: _Source) -> None:
        self.source = source

    def to(self, topic: str, checkpoint: str, **kw: Any) -> StreamingQuery:
        """The table's changelog (updates and tombstones of deleted keys) to a compacted topic."""
        return _Plan([self.source], P.TableSource, self.source.key_serde, self.source.value_serde).to(
            topic, checkpoint, **kw
        )


class KGroupedStream:
    def __init__(self, stream: KStream, windows: P.TimeWindows | P.SessionWindows | None = None) -> None:
        self.stream, self.windows = stream, windows

    def windowed_by(self, windows: P.TimeWindows | P.SessionWindows) -> KGroupedStream:
        return KGroupedStream(self.stream, windows)

    def aggregate(
        self,
        init: Callable[[], Any],
        adder: Callable[[Any, Any], Any],
        merger: Callable[[Any, Any], Any] | None = None,
        *,
        emit: str = "changes",
        value_serde: str = "json",
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
        else:
            if merger is None:
                raise ValueError("session windows need a merger")
            sw = w

            def make() -> P.Operator:
                return P.SessionAggregate(sw, init, adder, merger, emit)

        s = self.stream
        return _Plan([s.source], make, s.source.key_serde, value_serde, [s.mapper])

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


def _plus(a: Any, b: Any) -> Any:
    return a + b


class KStream:
    """A record stream of a topic, optionally mapped record by record (``flat_map``) before the
    next stateful operator."""

    def __init__(
        self, source: _Source, mapper: Callable[[Any, Any], list[tuple[Any, Any]]] | None = None
    ) -> None:
        self.source, self.mapper = source, mapper

    def flat_map(self, fn: Callable[[Any, Any], list[tuple[Any, Any]]]) -> KStream:
        """``fn(key, value) -> [(key, value), ...]``. Changing the key keeps each record in its
        task: the new keys must be partitioned like the input (Kafka Streams would repartition
        through a topic; here write the re-keyed stream to a topic with :meth:`to` and read it back)."""
        prev = self.mapper
        if prev is None:
            return KStream(self.source, fn)

        def both(k: Any, v: Any) -> list[tuple[Any, Any]]:
            return [kv2 for kv in prev(k, v) for kv2 in fn(*kv)]

        return KStream(self.source, both)

    def map_values(self, fn: Callable[[Any], Any]) -> KStream:
        return self.flat_map(lambda k, v: [(k, fn(v))])

    def filter(self, pred: Callable[[Any, Any], bool]) -> KStream:
        return self.flat_map(lambda k, v: [(k, v)] if pred(k, v) else [])

    def group_by_key(self) -> KGroupedStream:
        return KGroupedStream(self)

    def join(
        self,
        other: KTable | KStream,
        joiner: Callable[[Any, Any], Any],
        windows: P.JoinWindows | None = None,
        *,
        how: str = "inner",
        value_serde: str = "json",
    ) -> _Plan:
        """Stream-table join (``other`` a :class:`KTable`) or windowed stream-stream join
        (``other`` a :class:`KStream`, ``windows`` required); ``how``: ``inner`` or ``left``."""
        if how not in ("inner", "left"):
            raise ValueError("how must be 'inner' or 'left'")
        left = how == "left"
        make: Callable[[], P.Operator]
        if isinstance(other, KTable):
            if windows is not None:
                raise ValueError("a stream-table join has no window")

            def make() -> P.Operator:
                return P.StreamTableJoin(joiner, left)

            return _Plan(
                [other.source, self.source], make, self.source.key_serde, value_serde, [None, self.mapper]
            )
        if windows is None:
            raise ValueError("a stream-stream join needs JoinWindows")
        jw = windows

        def make2() -> P.Operator:
            return P.StreamStreamJoin(jw, joiner, left)

        return _Plan(
            [self.source, other.source],
            make2,
            self.source.key_serde,
            value_serde,
            [self.mapper, other.mapper],
        )

    def to(self, topic: str, checkpoint: str, **kw: Any) -> StreamingQuery:
        """The (mapped) stream to ``topic``, exactly-once."""
        return _Plan(
            [self.source], _Passthrough, self.source.key_serde, self.source.value_serde, [self.mapper]
        ).to(topic, checkpoint, **kw)


class _Passthrough(P.Operator):
    def process(self, side: int, key: Any, value: Any, ts: int) -> P.Out:
        return [(key, value)]


def _source(
    spark: SparkSession,
    topic: str,
    bootstrap: str,
    key_serde: str,
    value_serde: str,
    options: Mapping[str, str] | None,
) -> _Source:
    return _Source(
        spark, topic, bootstrap, _check_serde(key_serde), _check_serde(value_serde), dict(options or {})
    )


def stream(
    spark: SparkSession,
    topic: str,
    *,
    bootstrap: str,
    key_serde: str = "string",
    value_serde: str = "string",
    options: Mapping[str, str] | None = None,
) -> KStream:
    """A :class:`KStream` of ``topic`` from its first offset; ``options`` go to the strom source."""
    return KStream(_source(spark, topic, bootstrap, key_serde, value_serde, options))


def table(
    spark: SparkSession,
    topic: str,
    *,
    bootstrap: str,
    key_serde: str = "string",
    value_serde: str = "string",
    options: Mapping[str, str] | None = None,
) -> KTable:
    """A :class:`KTable` of (compacted) ``topic``: latest value per key, tombstones delete."""
    return KTable(_source(spark, topic, bootstrap, key_serde, value_serde, options))
