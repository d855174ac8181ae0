"""``strom sql``'s executor: ksqlDB statements (parsed by :mod:`.parser`) run as Spark SQL over
strom topics.

Translation
-----------
A source (``CREATE STREAM/TABLE``) becomes, per query, a streaming DataFrame of the strom source
(``read_committed``, from ``auto.offset.reset``) with its columns decoded: the key column from
the record key (``KAFKA``: UTF-8 text; ``JSON``), the value columns with ``from_json`` (``JSON``)
or ``from_csv`` (``DELIMITED``), plus ksqlDB's pseudo columns ``ROWTIME`` (ms), ``ROWPARTITION``,
``ROWOFFSET``. The event time of windows is ``ROWTIME`` or the ``TIMESTAMP='col'`` column. The
query's projection, ``WHERE``, ``GROUP BY`` and ``HAVING`` are handed to ``spark.sql`` as
written (ksqlDB and Spark share most functions), with ``WINDOWSTART``/``WINDOWEND`` rewritten to
the Spark window's bounds.

* Projections and filters (``CREATE STREAM AS SELECT``): Spark, appended exactly-once to the
  output topic by the strom sink (``exactlyOnce=true``).
* Stream-table joins: ``strom.streams``' ``StreamTableJoin`` (the table as of each stream
  record, in timestamp order per task; Spark has no such join) produces the joined rows, and the
  projection/aggregation continues in Spark SQL in the same streaming query.
* Aggregations (``CREATE TABLE AS SELECT ... GROUP BY``, windowed or not): Spark's own
  streaming aggregation in update mode. Chosen over ``strom.streams``' per-task aggregates
  because ksqlDB's GROUP BY re-keys (``GROUP BY regionid`` of page views keyed by user): Spark
  shuffles by the grouping keys itself, where a per-partition operator would need a repartition
  topic first; and any Spark aggregate function (COUNT, SUM, AVG, MIN, MAX, COLLECT_LIST, ...)
  works unchanged. The strom sink is append-only (Spark's Python data sources cannot take update
  mode), so each micro-batch's updated rows are written by ``foreachBatch`` in one Kafka
  transaction together with a marker offset (``batch + 1`` committed for the group
  ``strom-sql-<QUERY_ID>``): a replayed batch whose transaction committed is skipped — the same
  protocol as the strom sink's exactly-once mode.

Output records: key = the GROUP BY value (windowed: ``{"end":ms,"key":k,"start":ms}``, the JSON
strom.streams writes for a ``Windowed`` key) or the source's key for streams, value = the other
projected columns as JSON. Tables go to compacted topics.

Error contract: :class:`SqlError` for anything wrong with a statement (unknown source, column,
type mismatch from Spark's analyzer: first line of Spark's message), never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from strom.streams.sql.metastore import Metastore, QueryInfo, SourceInfo
from strom.streams.sql.parser import (
    CreateAs,
    CreateSource,
    Describe,
    Drop,
    Insert,
    Select,
    SelectItem,
    SetProperty,
    Show,
    SqlError,
    Statement,
    Terminate,
    Token,
    render,
)

__all__ = ["Engine"]

PSEUDO = ("ROWTIME", "ROWPARTITION", "ROWOFFSET")
PROPERTIES = {"auto.offset.reset": ("earliest", "latest")}


def _first_line(e: BaseException) -> str:
    text = str(getattr(e, "desc", None) or e).strip()
    line = text.splitlines()[0] if text else type(e).__name__
    return line[:400]


def ksql_type(dt: Any) -> str:
    """ksqlDB's name of a Spark type."""
    from pyspark.sql import types as T

    if isinstance(dt, T.StringType):
        return "VARCHAR"
    if isinstance(dt, (T.IntegerType, T.ShortType, T.ByteType)):
        return "INT"
    if isinstance(dt, T.LongType):
        return "BIGINT"
    if isinstance(dt, (T.DoubleType, T.FloatType)):
        return "DOUBLE"
    if isinstance(dt, T.BooleanType):
        return "BOOLEAN"
    if isinstance(dt, T.DecimalType):
        return f"DECIMAL({dt.precision}, {dt.scale})"
    if isinstance(dt, T.TimestampType):
        return "TIMESTAMP"
    if isinstance(dt, T.DateType):
        return "DATE"
    if isinstance(dt, T.BinaryType):
        return "BYTES"
    if isinstance(dt, T.ArrayType):
        return f"ARRAY<{ksql_type(dt.elementType)}>"
    if isinstance(dt, T.MapType):
        return f"MAP<{ksql_type(dt.keyType)}, {ksql_type(dt.valueType)}>"
    if isinstance(dt, T.StructType):
        return "STRUCT<" + ", ".join(f"{f.name} {ksql_type(f.dataType)}" for f in dt.fields) + ">"
    return str(dt.simpleString()).upper()


class _JoinWithTime:
    """``StreamTableJoin`` whose joined value carries the stream record's timestamp (the result's
    ROWTIME, as in ksqlDB)."""

    def __new__(cls, left: bool) -> Any:
        from strom.streams import processors as P

        class Op(P.StreamTableJoin):
            def process(self, side: int, key: Any, value: Any, ts: int) -> Any:
                return [
                    (k, {"l": v[0], "r": v[1], "ts": ts}) for k, v in super().process(side, key, value, ts)
                ]

        return Op(lambda v, t: (v, t), left)


def _table_rows(header: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(h) for h in header]] + [["null" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    lines = [sep, "|" + "|".join(f" {c:<{w}} " for c, w in zip(cells[0], widths, strict=True)) + "|", sep]
    lines += ["|" + "|".join(f" {c:<{w}} " for c, w in zip(r, widths, strict=True)) + "|" for r in cells[1:]]
    lines.append(sep)
    return "\n".join(lines)


def _cell(v: Any) -> Any:
    if hasattr(v, "asDict"):
        return json.dumps(v.asDict(recursive=True), default=str)
    if isinstance(v, (list, dict)):
        return json.dumps(v, default=str)
    return v


class Engine:
    """Runs statements; output lines go to ``out``."""

    def __init__(
        self,
        bootstrap: str,
        state_dir: Path,
        *,
        state_server: str | None = None,
        spark: Any = None,
        once: bool = False,
        out: Callable[[str], None] = print,
    ) -> None:
        self.bootstrap, self.state_dir, self.state_server = bootstrap, Path(state_dir), state_server
        self._spark, self._own_spark = spark, spark is None
        self.once, self.out = once, out
        self.meta = Metastore.load(self.state_dir)
        self.running: dict[str, Any] = {}
        self.writers: dict[str, _TxnBatchWriter] = {}
        self._views = 0

    # -- plumbing ------------------------------------------------------------------------------

    @property
    def spark(self) -> Any:
        if self._spark is None:
            import os

            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
            from pyspark.sql import SparkSession

            from strom.spark import StromDataSource

            self._spark = (
                SparkSession.builder.master(os.environ.get("STROM_SQL_SPARK_MASTER", "local[2]"))
                .appName("strom-sql")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.sql.session.timeZone", "UTC")
                .getOrCreate()
            )
            self._spark.sparkContext.setLogLevel("FATAL")
            self._spark.dataSource.register(StromDataSource)
        return self._spark

    def _admin(self, fn: Callable[[Any], Any]) -> Any:
        import asyncio

        from strom.client import Client

        async def go() -> Any:
            async with Client(self.bootstrap) as c:
                return await fn(c)

        try:
            return asyncio.run(go())
        except SqlError:
            raise
        except Exception as e:
            raise SqlError(f"broker {self.bootstrap}: {_first_line(e)}") from None

    def _partitions(self, topic: str) -> int | None:
        async def f(c: Any) -> int | None:
            md = await c.metadata([topic])
            t = md.topics.get(topic)
            return None if t is None or t.error_code else len(t.partitions)

        result: int | None = self._admin(f)
        return result

    def _create_topic(self, topic: str, partitions: int, replicas: int, compact: bool) -> None:
        async def f(c: Any) -> None:
            conf = {"cleanup.policy": "compact"} if compact else {}
            res = await c.create_topics({topic: (partitions, replicas, conf)})
            if res[topic] is not None and "exist" not in str(res[topic]).lower():
                raise SqlError(f"cannot create topic {topic}: {res[topic]}")

        self._admin(f)

    def close(self) -> None:
        for q in list(self.running.values()):
            with contextlib.suppress(Exception):  # stopping on exit; the checkpoint stays valid
                q.stop()
        self.running.clear()
        for w in self.writers.values():
            w.close()
        self.writers.clear()
        if self._own_spark and self._spark is not None:
            self._spark.stop()
            self._spark = None

    def source(self, name: str, tok: Token | None = None) -> SourceInfo:
        s = self.meta.sources.get(name)
        if s is None:
            msg = f"{name} does not exist (SHOW STREAMS; SHOW TABLES; list what does)"
            raise tok.err(msg) if tok else SqlError(msg)
        return s

    @property
    def offset_reset(self) -> str:
        return self.meta.props.get("auto.offset.reset", "latest")

    # -- statements ----------------------------------------------------------------------------

    def execute(self, stmt: Statement) -> None:
        if isinstance(stmt, CreateSource):
            self._create_source(stmt)
        elif isinstance(stmt, CreateAs):
            self._create_as(stmt)
        elif isinstance(stmt, Select):
            if stmt.emit_changes:
                self._push(stmt)
            else:
                self._pull(stmt)
        elif isinstance(stmt, Show):
            self._show(stmt)
        elif isinstance(stmt, Describe):
            self._describe(stmt)
        elif isinstance(stmt, Drop):
            self._drop(stmt)
        elif isinstance(stmt, Terminate):
            self._terminate(stmt)
        elif isinstance(stmt, SetProperty):
            self._set(stmt)
        elif isinstance(stmt, Insert):
            self._insert(stmt)

    def _set(self, s: SetProperty) -> None:
        if s.name not in PROPERTIES:
            raise SqlError(f"property {s.name!r} is not supported (one of: {', '.join(PROPERTIES)})")
        if s.value is None:
            self.meta.props.pop(s.name, None)
            self.out(f"Successfully unset {s.name}")
        else:
            if s.value.lower() not in PROPERTIES[s.name]:
                raise SqlError(f"{s.name} must be one of {', '.join(PROPERTIES[s.name])}, not {s.value!r}")
            self.meta.props[s.name] = s.value.lower()
            self.out(f"Successfully changed local property '{s.name}' to '{s.value.lower()}'.")
        self.meta.save()

    def _create_source(self, s: CreateSource) -> None:
        if s.name in self.meta.sources:
            if s.if_not_exists:
                self.out(f"{s.name} already exists")
                return
            if not s.or_replace:
                raise SqlError(
                    f"Cannot add {s.kind.lower()} {s.name}: A {self.meta.sources[s.name].kind.lower()} with the same name already exists"  # noqa: E501
                )
        fmt = s.props.get("FORMAT")
        vf = s.props.get("VALUE_FORMAT", fmt or "JSON")
        kf = s.props.get("KEY_FORMAT", fmt if fmt in ("KAFKA", "JSON") else "KAFKA")
        if kf == "DELIMITED":
            raise SqlError("KEY_FORMAT DELIMITED is not supported (KAFKA or JSON)")
        values = [c for c in s.columns if not c.key]
        if vf == "KAFKA" and (len(values) != 1 or values[0].spark != "string"):
            raise SqlError("VALUE_FORMAT 'KAFKA' holds one VARCHAR value column here; use JSON for more")
        keycol = next((c for c in s.columns if c.key), None)
        if kf == "KAFKA" and keycol is not None and keycol.spark != "string":
            raise SqlError(
                f"KEY_FORMAT 'KAFKA' keys are VARCHAR here ({keycol.name} is {keycol.type_text}); use KEY_FORMAT='JSON'"  # noqa: E501
            )
        ts = s.props.get("TIMESTAMP")
        if ts is not None:
            col = next((c for c in s.columns if c.name.upper() == str(ts).upper()), None)
            if col is None:
                raise SqlError(f"TIMESTAMP column {ts} is not a column of {s.name}")
            if col.spark not in ("bigint", "timestamp", "string"):
                raise SqlError(
                    f"TIMESTAMP column {ts} must be BIGINT, TIMESTAMP or VARCHAR (with TIMESTAMP_FORMAT)"
                )
            if col.spark == "string" and "TIMESTAMP_FORMAT" not in s.props:
                raise SqlError(f"TIMESTAMP column {ts} is VARCHAR: give TIMESTAMP_FORMAT")
            ts = col.name
        topic = str(s.props["KAFKA_TOPIC"])
        parts = self._partitions(topic)
        if parts is None:
            if "PARTITIONS" not in s.props:
                raise SqlError(
                    f"Topic '{topic}' does not exist. If you want to create a new topic for the {s.kind.lower()} please re-run the statement providing the required 'PARTITIONS' configuration in the WITH clause"  # noqa: E501
                )
            self._create_topic(
                topic, int(s.props["PARTITIONS"]), int(s.props.get("REPLICAS", -1)), s.kind == "TABLE"
            )
        self.meta.sources[s.name] = SourceInfo(
            s.kind,
            s.name,
            topic,
            kf,
            vf,
            [{"name": c.name, "type": c.type_text, "spark": c.spark, "key": c.key} for c in s.columns],
            ts,
            s.props.get("TIMESTAMP_FORMAT"),
            str(s.props.get("VALUE_DELIMITER", ",")),
        )
        self.meta.save()
        self.out(f"{s.kind.capitalize()} created")

    def _show(self, s: Show) -> None:
        if s.what in ("STREAMS", "TABLES"):
            kind = s.what[:-1]
            rows = [
                [x.name, x.topic, x.key_format, x.value_format] + ([x.query or ""] if s.extended else [])
                for x in sorted(self.meta.sources.values(), key=lambda x: x.name)
                if x.kind == kind
            ]
            header = [f"{kind.capitalize()} Name", "Kafka Topic", "Key Format", "Value Format"]
            self.out(_table_rows(header + (["Query"] if s.extended else []), rows))
        elif s.what == "TOPICS":

            async def f(c: Any) -> list[list[Any]]:
                md = await c.metadata(None)
                return [
                    [n, len(t.partitions), t.replication_factor]
                    for n, t in sorted(md.topics.items())
                    if not t.is_internal and not n.startswith("__")
                ]

            self.out(_table_rows(["Kafka Topic", "Partitions", "Partition Replicas"], self._admin(f)))
        elif s.what == "QUERIES":
            rows = []
            for q in self.meta.queries.values():
                live = self.running.get(q.id)
                state = q.state
                if live is not None and not live.isActive:
                    state = "ERROR" if live.exception() else "DONE"
                elif live is None and q.state == "RUNNING":
                    state = "NOT RUNNING (resumed when strom sql starts)"
                rows.append(
                    [
                        q.id,
                        state,
                        q.sink,
                        self.meta.sources[q.sink].topic if q.sink in self.meta.sources else "",
                        q.sql,
                    ]
                )
            self.out(
                _table_rows(["Query ID", "Status", "Sink Name", "Sink Kafka Topic", "Query String"], rows)
            )
        else:
            rows = [
                [k, self.meta.props.get(k, "latest" if k == "auto.offset.reset" else "")] for k in PROPERTIES
            ]
            self.out(_table_rows(["Property", "Value"], rows))

    def _describe(self, d: Describe) -> None:
        s = self.source(d.name)
        rows = [
            [
                c["name"],
                c["type"]
                + (" (primary key)" if c["key"] and s.kind == "TABLE" else " (key)" if c["key"] else ""),
            ]
            for c in s.columns
        ]
        self.out(f"Name                 : {s.name}")
        self.out(f"Type                 : {s.kind}")
        self.out(
            f"Kafka topic          : {s.topic} (key format {s.key_format}, value format {s.value_format})"
        )
        if s.timestamp:
            self.out(f"Timestamp field      : {s.timestamp}")
        if s.window:
            self.out(
                f'Windowed             : {s.window["kind"]} {s.window["size_ms"]} ms (keys {{"end","key","start"}})'  # noqa: E501
            )
        writers = [q.id for q in self.meta.queries.values() if q.sink == s.name]
        readers = [q.id for q in self.meta.queries.values() if s.name in q.sources]
        self.out(_table_rows(["Field", "Type"], rows))
        self.out(f"Queries that write from this {s.kind}: {', '.join(writers) or '-'}")
        self.out(f"Queries that read from this {s.kind}: {', '.join(readers) or '-'}")

    def _drop(self, d: Drop) -> None:
        s = self.meta.sources.get(d.name)
        if s is None:
            if d.if_exists:
                self.out(f"{d.name} does not exist")
                return
            raise SqlError(f"{d.kind.lower()} {d.name} does not exist")
        if s.kind != d.kind:
            raise SqlError(f"{d.name} is a {s.kind}: DROP {s.kind} {d.name}")
        users = [q.id for q in self.meta.queries.values() if q.sink == d.name or d.name in q.sources]
        if users:
            raise SqlError(
                f"Cannot drop {d.name}: the following queries read from or write to it: {', '.join(users)}. You need to terminate them before dropping {d.name}."  # noqa: E501
            )
        if d.delete_topic:
            topic = s.topic

            async def f(c: Any) -> None:
                res = await c.delete_topics([topic])
                if res.get(topic) is not None:
                    raise SqlError(f"cannot delete topic {topic}: {res[topic]}")

            self._admin(f)
        del self.meta.sources[d.name]
        self.meta.save()
        self.out(f"Source `{d.name}` (topic: {s.topic}) was dropped.")

    def _terminate(self, t: Terminate) -> None:
        ids = list(self.meta.queries) if t.query_id == "ALL" else [t.query_id]
        for qid in ids:
            q = self.meta.queries.get(qid)
            if q is None:
                raise SqlError(f"Unknown queryId: {qid} (SHOW QUERIES; lists them)")
            live = self.running.pop(qid, None)
            if live is not None:
                live.stop()
            writer = self.writers.pop(qid, None)
            if writer is not None:
                writer.close()
            del self.meta.queries[qid]
            if q.sink in self.meta.sources:
                self.meta.sources[q.sink].query = None
            shutil.rmtree(self.state_dir / "queries" / qid, ignore_errors=True)
            self.meta.save()
            self.out(f"Query terminated: {qid}")

    def _insert(self, ins: Insert) -> None:
        s = self.source(ins.name)
        names = ins.columns or [c["name"] for c in s.columns]
        cols = {c["name"].upper(): c for c in s.columns}
        row: dict[str, Any] = {}
        for n, v in zip(names, ins.values, strict=True):
            c = cols.get(n.upper())
            if c is None:
                raise SqlError(f"{n} is not a column of {s.name}")
            row[c["name"]] = v
        keycol = s.key_column
        key = row.pop(keycol["name"], None) if keycol else None
        value: bytes | None
        if s.value_format == "JSON":
            value = json.dumps(row).encode()
        elif s.value_format == "KAFKA":
            v = next(iter(row.values()), None)
            value = None if v is None else str(v).encode()
        else:
            value = s.delimiter.join(
                "" if row.get(c["name"]) is None else str(row[c["name"]]) for c in s.value_columns
            ).encode()
        kb = None if key is None else (json.dumps(key) if s.key_format == "JSON" else str(key)).encode()
        from confluent_kafka import Producer

        p = Producer(
            {"bootstrap.servers": self.bootstrap, "partitioner": "murmur2_random", "enable.idempotence": True}
        )
        errors: list[str] = []
        p.produce(
            s.topic, key=kb, value=value, on_delivery=lambda err, m: errors.append(str(err)) if err else None
        )
        if p.flush(30) or errors:
            raise SqlError(f"INSERT INTO {s.name}: {errors[0] if errors else 'not delivered in 30 s'}")

    # -- queries -------------------------------------------------------------------------------

    def _source_frame(self, s: SourceInfo) -> Any:
        """The decoded streaming DataFrame of a source: its columns, pseudo columns, ``__ts``."""
        from pyspark.sql import functions as F

        df = (
            self.spark.readStream.format("strom")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", s.topic)
            .option("startingOffsets", self.offset_reset)
            .option("kafka.isolation.level", "read_committed")
            .load()
        )
        cols = []
        for c in s.columns:
            if c["key"]:
                if s.window:
                    k = F.from_json(
                        F.col("key").cast("string"), f"`end` bigint, `key` {c['spark']}, `start` bigint"
                    )
                    cols += [
                        k["key"].alias(c["name"]),
                        k["start"].alias("WINDOWSTART"),
                        k["end"].alias("WINDOWEND"),
                    ]
                elif s.key_format == "JSON":
                    cols.append(
                        F.from_json(
                            F.concat(F.lit('{"k":'), F.col("key").cast("string"), F.lit("}")),
                            f"k {c['spark']}",
                        )["k"].alias(c["name"])
                    )
                else:
                    cols.append(F.col("key").cast("string").alias(c["name"]))
        vals = s.value_columns
        schema = ", ".join(f"`{c['name']}` {c['spark']}" for c in vals)
        if s.value_format == "JSON":
            v = F.from_json(F.col("value").cast("string"), schema)
            cols += [v[c["name"]].alias(c["name"]) for c in vals]
        elif s.value_format == "DELIMITED":
            v = F.from_csv(F.col("value").cast("string"), schema, {"sep": s.delimiter})
            cols += [v[c["name"]].alias(c["name"]) for c in vals]
        else:
            cols += [F.col("value").cast("string").alias(vals[0]["name"])]
        cols += [
            F.unix_millis("timestamp").alias("ROWTIME"),
            F.col("partition").alias("ROWPARTITION"),
            F.col("offset").alias("ROWOFFSET"),
        ]
        df = df.select(*cols, "timestamp")
        return df.select("*", self._event_time(s).alias("__ts")).drop("timestamp")

    def _event_time(self, s: SourceInfo) -> Any:
        from pyspark.sql import functions as F

        if not s.timestamp:
            return F.col("timestamp")
        col = next(c for c in s.columns if c["name"] == s.timestamp)
        if col["spark"] == "bigint":
            return F.timestamp_millis(F.col(s.timestamp))
        if col["spark"] == "string":
            return F.to_timestamp(F.col(s.timestamp), s.timestamp_format or "")
        return F.col(s.timestamp)

    def _join_frame(
        self, sel: Select, left: SourceInfo, right: SourceInfo
    ) -> tuple[Any, list[tuple[str, str]]]:
        """The stream-table join as a DataFrame with one struct column per side (named by the
        side's alias), top-level columns for names only one side has, ``ROWTIME`` and ``__ts``;
        and the ``*`` expansion."""
        from pyspark.sql import functions as F

        from strom.streams import dsl

        j = sel.join
        assert j is not None
        if j.within_ms is not None or right.kind != "TABLE":
            raise (
                j.right.tok.err(
                    "stream-stream joins (WITHIN) are not supported yet: join a stream with a TABLE"
                )
            )
        if left.kind != "STREAM":
            raise sel.source.tok.err(
                "the left side of a join must be a STREAM (table-table joins are not supported yet)"
            )
        for s in (left, right):
            if s.value_format != "JSON":
                raise SqlError(f"joins need VALUE_FORMAT 'JSON' ({s.name} is {s.value_format})")
            if s.window:
                raise SqlError(f"{s.name} is windowed: joins of windowed tables are not supported")
        lk, rk = left.key_column, right.key_column
        aliases = {
            sel.source.alias.upper(): left,
            j.right.alias.upper(): right,
            left.name.upper(): left,
            right.name.upper(): right,
        }
        for qual, col, tok in j.on:
            side = aliases.get(qual.upper()) if qual else None
            if qual and side is None:
                raise tok.err(f"{qual} is neither {sel.source.alias} nor {j.right.alias}")
            cands = [side] if side else [left, right]
            if not any(c["name"].upper() == col.upper() and c["key"] for x in cands for c in x.columns):
                raise tok.err(
                    f"the join must be on each side's KEY column ({left.name}: {lk['name'] if lk else 'none'}, {right.name}: {rk['name'] if rk else 'none'}); re-key the stream first with CREATE STREAM ... AS SELECT ... PARTITION BY {col}"  # noqa: E501
                )
        lp, rp = self._partitions(left.topic), self._partitions(right.topic)
        if lp != rp:
            raise SqlError(
                f"joined topics must be co-partitioned: {left.topic} has {lp} partitions, {right.topic} {rp}"
            )
        opts = {"startingOffsets": self.offset_reset}
        s_src = dsl._source(
            self.spark,
            left.topic,
            self.bootstrap,
            "json" if left.key_format == "JSON" else "string",
            "json",
            opts,
        )
        t_src = dsl._source(
            self.spark,
            right.topic,
            self.bootstrap,
            "json" if right.key_format == "JSON" else "string",
            "json",
            opts,
        )
        left_join = j.kind == "LEFT"
        plan = dsl._Plan([t_src, s_src], lambda: _JoinWithTime(left_join), "string", "json")
        raw = plan.frame("json" if left.key_format == "JSON" else "string", "json")

        def struct_of(s: SourceInfo) -> str:
            return ", ".join(f"`{c['name']}`: {c['spark']}" for c in s.value_columns)

        schema = f"l struct<{struct_of(left)}>, r struct<{struct_of(right)}>, ts bigint"
        v = F.from_json(F.col("value").cast("string"), schema)
        key = F.col("key").cast("string")
        if left.key_format == "JSON" and lk is not None:
            key = F.from_json(F.concat(F.lit('{"k":'), key, F.lit("}")), f"k {lk['spark']}")["k"]
        la, ra = sel.source.alias, j.right.alias

        lstruct = F.struct(*[(key if c["key"] else v["l"][c["name"]]).alias(c["name"]) for c in left.columns])
        rstruct = F.when(
            v["r"].isNotNull(),
            F.struct(*[(key if c["key"] else v["r"][c["name"]]).alias(c["name"]) for c in right.columns]),
        )
        cols = [lstruct.alias(la), rstruct.alias(ra)]
        lnames = {c["name"].upper() for c in left.columns}
        rnames = {c["name"].upper() for c in right.columns}
        for c in left.columns:
            if c["name"].upper() not in rnames:
                cols.append(F.col(la)[c["name"]].alias(c["name"]))
        for c in right.columns:
            if c["name"].upper() not in lnames:
                cols.append(F.col(ra)[c["name"]].alias(c["name"]))
        cols += [v["ts"].alias("ROWTIME"), F.timestamp_millis(v["ts"]).alias("__ts"), key.alias("__key")]
        star = [(f"`{la}`.`{c['name']}`", f"{la}_{c['name']}".upper()) for c in left.columns]
        star += [(f"`{ra}`.`{c['name']}`", f"{ra}_{c['name']}".upper()) for c in right.columns]
        return raw.select(*cols), star

    def _plan(self, sel: Select, sink_key_format: str = "KAFKA") -> dict[str, Any]:
        """Translate a SELECT: the result DataFrame with ``__key`` (encoded) and ``__value``
        (JSON), whether it aggregates (update mode), the output columns, key column, window."""
        from pyspark.sql import functions as F

        left = self.source(sel.source.name, sel.source.tok)
        sources = [left.name]
        if sel.join is not None:
            right = self.source(sel.join.right.name, sel.join.right.tok)
            sources.append(right.name)
            df, star = self._join_frame(sel, left, right)
            alias = "__j"
        else:
            df = self._source_frame(left)
            extra = ["WINDOWSTART", "WINDOWEND"] if left.window else []
            star = [(f"`{c['name']}`", c["name"]) for c in left.columns] + [(x, x) for x in extra]
            alias = sel.source.alias
        self._views += 1
        view = f"__strom_sql_{self._views}"
        df.createOrReplaceTempView(view)
        w = sel.window
        agg = bool(sel.group_by)
        replace: dict[str, str] = {}
        win_sql = ""
        if w is not None:
            if w.kind == "TUMBLING":
                win_sql = f"window(__ts, '{w.size_ms} milliseconds')"
            elif w.kind == "HOPPING":
                win_sql = f"window(__ts, '{w.size_ms} milliseconds', '{w.advance_ms} milliseconds')"
            else:
                raise (
                    w.tok.err(
                        "SESSION windows are not supported yet (Spark's session windows have no update mode); use TUMBLING or HOPPING"  # noqa: E501
                    )
                    if w.tok
                    else SqlError("SESSION")
                )
            replace = {"WINDOWSTART": "unix_millis(__win.start)", "WINDOWEND": "unix_millis(__win.end)"}
        items: list[str] = []
        value_items: list[str] = []
        groups = [render(g, replace) for g in sel.group_by]
        key_names: list[str] = []
        src_key = left.key_column
        for it in sel.items:
            if it.star is not None:
                for expr, name in star:
                    if it.star and sel.join is None and it.star.upper() != sel.source.alias.upper():
                        raise it.expr[0].err(f"{it.star} is not {sel.source.alias}")
                    if (
                        it.star
                        and sel.join is not None
                        and not expr.upper().startswith(f"`{it.star.upper()}`")
                    ):
                        continue
                    items.append(f"{expr} AS `{name}`")
                    if not self._is_key_item(expr, name, groups, src_key, agg, sel):
                        value_items.append(name)
                    else:
                        key_names.append(name)
                continue
            expr = render(it.expr, replace)
            name = it.alias or self._default_name(it)
            items.append(f"{expr} AS `{name}`")
            if self._is_key_item(expr, name, groups, src_key, agg, sel):
                key_names.append(name)
            else:
                value_items.append(name)
        where = f" WHERE {render(sel.where)}" if sel.where else ""
        hidden = []
        if agg:
            hidden += [f"{g} AS `__k{i}`" for i, g in enumerate(groups)]
            group = " GROUP BY " + ", ".join((["__win"] if w else []) + groups)
            if w:
                hidden.append("__win AS `__w`")
            having = f" HAVING {render(sel.having, replace)}" if sel.having else ""
        else:
            if sel.having:
                raise SqlError("HAVING needs GROUP BY")
            group = having = ""
            if sel.partition_by:
                hidden.append(f"{render(sel.partition_by)} AS `__k0`")
            elif sel.join is not None:
                hidden.append("__key AS `__k0`")
            elif src_key is not None:
                hidden.append(f"`{src_key['name']}` AS `__k0`")
            if left.window and sel.join is None:
                hidden += [
                    "named_struct('start', timestamp_millis(WINDOWSTART), 'end', timestamp_millis(WINDOWEND)) AS `__w`"  # noqa: E501
                ]
        inner = f"SELECT *{', ' + win_sql + ' AS __win' if win_sql else ''} FROM {view}"
        sql = f"SELECT {', '.join(items + hidden)} FROM ({inner}) AS `{alias}`{where}{group}{having}"
        try:
            res = self.spark.sql(sql)
        except Exception as e:
            raise SqlError(
                _first_line(e), sel.tok.line if sel.tok else 0, sel.tok.col if sel.tok else 0
            ) from None
        fields = {f.name: f for f in res.schema.fields}
        nkeys = len(groups) if agg else (1 if "__k0" in fields else 0)
        if sel.partition_by and "__k0" in fields:
            key_names = []
            value_items = [f for f in fields if not f.startswith("__")]
        windowed = "__w" in fields
        if nkeys == 0:
            key_expr = F.lit(None).cast("string")
            key_type = None
        elif nkeys == 1:
            k = F.col("__k0")
            key_type = fields["__k0"].dataType
            if windowed:
                key_expr = F.to_json(
                    F.struct(
                        F.unix_millis(F.col("__w.end")).alias("end"),
                        k.alias("key"),
                        F.unix_millis(F.col("__w.start")).alias("start"),
                    ),
                    {"ignoreNullFields": "false"},
                )
            elif sink_key_format == "JSON":
                key_expr = F.expr("substring(to_json(array(`__k0`)), 2, length(to_json(array(`__k0`))) - 2)")
            else:
                key_expr = k.cast("string")
        else:
            raise SqlError(
                "GROUP BY of several expressions is not supported yet (one key column); combine them, e.g. GROUP BY CONCAT(a, '|', b)"  # noqa: E501
            )
        value_expr = F.to_json(
            F.struct(*[F.col(f"`{n}`") for n in value_items]), {"ignoreNullFields": "false"}
        )
        out = res.select(
            key_expr.alias("key"),
            value_expr.alias("value"),
            *[F.col(f"`{n}`") for n in key_names + value_items],
        )
        key_name = (
            (key_names[0] if key_names else (render(sel.partition_by) if sel.partition_by else "ROWKEY"))
            if nkeys
            else None
        )
        if key_name and not key_name.replace("_", "").isalnum():
            key_name = "KSQL_COL_0" if not key_names else key_name
        columns = []
        if key_name is not None and key_type is not None:
            columns.append(
                {"name": key_name, "type": ksql_type(key_type), "spark": key_type.simpleString(), "key": True}
            )
        for n in value_items:
            dt = fields[n].dataType
            columns.append({"name": n, "type": ksql_type(dt), "spark": dt.simpleString(), "key": False})
        return {
            "df": out,
            "agg": agg,
            "columns": columns,
            "sources": sources,
            "windowed": windowed,
            "window": {"kind": w.kind, "size_ms": w.size_ms} if w else left.window if windowed else None,
            "display": key_names + value_items,
            "left": left,
        }

    def _is_key_item(
        self, expr: str, name: str, groups: list[str], src_key: Any, agg: bool, sel: Select
    ) -> bool:
        if name.upper() in ("WINDOWSTART", "WINDOWEND") and (
            "__win." in expr or expr.upper() == name.upper()
        ):
            return True  # a bare WINDOWSTART is part of the key; WINDOWSTART AS x is a value column
        if agg:
            return expr.replace("`", "").upper() in {g.replace("`", "").upper() for g in groups}
        if sel.partition_by or src_key is None:
            return False
        bare = expr.replace("`", "").split(".")[-1].upper()
        return bool(bare == str(src_key["name"]).upper())

    @staticmethod
    def _default_name(it: SelectItem) -> str:
        toks = it.expr
        words = [t for t in toks if t.kind in ("WORD", "QID")]
        if words and all(
            t.kind in ("WORD", "QID") or (t.kind == "OP" and t.text in (".", "->")) for t in toks
        ):
            return words[-1].text
        return f"KSQL_COL_{abs(hash(render(toks))) % 1000}"

    def _create_as(self, c: CreateAs) -> None:
        if c.name in self.meta.sources:
            if c.if_not_exists:
                self.out(f"{c.name} already exists")
                return
            raise SqlError(
                f"Cannot add {c.kind.lower()} {c.name}: A source with the same name already exists"
            )
        vf = c.props.get("VALUE_FORMAT", c.props.get("FORMAT", "JSON"))
        if vf != "JSON":
            raise SqlError("the result of CREATE ... AS SELECT is written as JSON (VALUE_FORMAT='JSON')")
        kf = c.props.get("KEY_FORMAT", "KAFKA")
        plan = self._plan(c.select, kf)
        topic = str(c.props.get("KAFKA_TOPIC", c.name))
        left: SourceInfo = plan["left"]
        if self._partitions(topic) is None:
            parts = int(c.props.get("PARTITIONS", self._partitions(left.topic) or 1))
            self._create_topic(topic, parts, int(c.props.get("REPLICAS", -1)), c.kind == "TABLE")
        qid = f"{'CTAS' if c.kind == 'TABLE' else 'CSAS'}_{c.name}_{self.meta.next_query}"
        self.meta.next_query += 1
        info = SourceInfo(
            c.kind,
            c.name,
            topic,
            "JSON" if plan["windowed"] or kf == "JSON" else "KAFKA",
            "JSON",
            plan["columns"],
            window=plan["window"],
            query=qid,
        )
        if info.key_column is None and c.kind == "TABLE":
            raise SqlError("a table needs a key: GROUP BY")
        q = QueryInfo(qid, c.text.strip(), c.name, plan["sources"])
        self._start(q, plan)
        self.meta.sources[c.name] = info
        self.meta.queries[qid] = q
        self.meta.save()
        self.out(f"Created query with ID {qid}")
        if self.once:
            self._await(qid)

    def _start(self, q: QueryInfo, plan: dict[str, Any]) -> None:
        topic_name = self.meta.sources[q.sink].topic if q.sink in self.meta.sources else None
        checkpoint = str(self.state_dir / "queries" / q.id)
        df = plan["df"].select("key", "value")
        w = df.writeStream.queryName(q.id).option("checkpointLocation", checkpoint)
        w = w.trigger(availableNow=True) if self.once else w.trigger(processingTime="1 second")
        topic = topic_name or q.sink
        try:
            if plan["agg"]:
                sink = self.writers[q.id] = _TxnBatchWriter(self.bootstrap, topic, f"strom-sql-{q.id}")
                query = w.outputMode("update").foreachBatch(sink).start()
            else:
                query = (
                    w.format("strom")
                    .option("kafka.bootstrap.servers", self.bootstrap)
                    .option("topic", topic)
                    .option("exactlyOnce", "true")
                    .outputMode("append")
                    .start()
                )
        except Exception as e:
            raise SqlError(f"query {q.id} cannot start: {_first_line(e)}") from None
        self.running[q.id] = query

    def _await(self, qid: str) -> None:
        query = self.running[qid]
        try:
            query.awaitTermination()
        except Exception as e:
            raise SqlError(f"query {qid} failed: {_first_line(e)}") from None

    def resume(self) -> None:
        """Restart the persistent queries of the catalog from their checkpoints (as a ksqlDB
        server does on start)."""
        from strom.streams.sql.parser import parse, split_statements

        for q in list(self.meta.queries.values()):
            if q.id in self.running:
                continue
            stmt = parse(split_statements(q.sql + ";")[0])
            assert isinstance(stmt, CreateAs)
            info = self.meta.sources[q.sink]
            plan = self._plan(stmt.select, info.key_format if not info.window else "KAFKA")
            self._start(q, plan)
            self.out(f"Resumed query {q.id}")
            if self.once:
                self._await(q.id)

    def _push(self, sel: Select) -> None:
        plan = self._plan(sel)
        names: list[str] = plan["display"]
        limit = sel.limit
        printed = [0]
        done = threading.Event()
        lock = threading.Lock()
        header = "|" + "|".join(f"{n:<20}" for n in names) + "|"
        self.out("+" + "-" * (len(header) - 2) + "+")
        self.out(header)
        self.out("+" + "-" * (len(header) - 2) + "+")

        def show(df: Any, batch_id: int) -> None:
            for r in df.select(*[f"`{n}`" for n in names]).collect():
                with lock:
                    if limit is not None and printed[0] >= limit:
                        done.set()
                        return
                    self.out("|" + "|".join(f"{'null' if v is None else str(_cell(v)):<20}" for v in r) + "|")
                    printed[0] += 1
            if limit is not None and printed[0] >= limit:
                done.set()

        self._views += 1
        ck = self.state_dir / "transient" / f"push-{self._views}-{int(time.time() * 1000)}"
        w = (
            plan["df"]
            .writeStream.outputMode("update" if plan["agg"] else "append")
            .foreachBatch(show)
            .option("checkpointLocation", str(ck))
        )
        w = w.trigger(availableNow=True) if self.once else w.trigger(processingTime="500 milliseconds")
        try:
            q = w.start()
        except Exception as e:
            raise SqlError(f"push query cannot start: {_first_line(e)}") from None
        try:
            while q.isActive and not done.is_set():
                q.awaitTermination(0.2)
            exc = q.exception() if not q.isActive else None
            if exc is not None:
                raise SqlError(f"push query failed: {_first_line(exc)}")
        except KeyboardInterrupt:
            self.out("Query terminated")
        finally:
            q.stop()
            shutil.rmtree(ck, ignore_errors=True)
        if limit is not None and printed[0] >= limit:
            self.out("Limit Reached\nQuery terminated")

    def _pull(self, sel: Select) -> None:
        s = self.source(sel.source.name, sel.source.tok)
        tok = sel.tok
        if s.kind != "TABLE":
            raise SqlError(
                f"pull queries are for tables; {s.name} is a stream: add EMIT CHANGES for a push query",
                tok.line if tok else 0,
                tok.col if tok else 0,
            )
        if sel.join or sel.group_by or sel.window:
            raise SqlError(
                "a pull query is SELECT ... FROM table WHERE key = value (no joins, windows or GROUP BY)"
            )
        kc = s.key_column
        assert kc is not None
        w = sel.where or []
        if not (
            len(w) == 3
            and w[0].kind in ("WORD", "QID")
            and w[0].text.upper() == kc["name"].upper()
            and w[1].kind == "OP"
            and w[1].text == "="
            and w[2].kind in ("STR", "NUM")
        ):
            where = w[0] if w else tok
            msg = f"a pull query needs WHERE {kc['name']} = <value> (a key lookup on {s.name}'s PRIMARY KEY)"
            raise where.err(msg) if where else SqlError(msg)
        if s.window:
            raise SqlError(
                f"{s.name} is windowed: pull queries over windowed tables are not supported yet (use a push query: SELECT * FROM {s.name} WHERE ... EMIT CHANGES)"  # noqa: E501
            )
        key = w[2].text
        kf = "json" if s.key_format == "JSON" else "string"
        if kf == "json" and w[2].kind == "STR":
            key = json.dumps(key)
        if not self.state_server:
            raise SqlError(
                f"pull queries are answered by the state server; start one and pass --state-server: "
                f"strom streams serve --bootstrap-server {self.bootstrap} --application-id strom-sql "
                f"--application-server 127.0.0.1:7070 --table {s.name}={s.topic}:json:{kf}  "
                f"then: strom sql --bootstrap-server {self.bootstrap} --state-server http://127.0.0.1:7070"
            )
        url = f"{self.state_server.rstrip('/')}/tables/{urllib.parse.quote(s.name, safe='')}/keys/{urllib.parse.quote(key, safe='')}"  # noqa: E501
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            try:
                body = json.loads(e.read())
            except ValueError:
                body = {"error": str(e)}
            if e.code == 404 and "found" in body:
                body = {"found": False}
            elif e.code == 404:
                raise SqlError(
                    f"the state server does not serve {s.name}: {body.get('error')} (start it with --table {s.name}={s.topic}:json:{kf})"  # noqa: E501
                ) from None
            else:
                raise SqlError(f"state server: {e.code} {body.get('error', '')}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise SqlError(f"state server {self.state_server} unreachable: {e}") from None
        names = [c["name"] for c in s.columns]
        rows: list[list[Any]] = []
        if body.get("found"):
            value = body.get("value") or {}
            row = {**(value if isinstance(value, dict) else {}), kc["name"]: w[2].text}
            if sel.items and sel.items[0].star is None:
                names = [i.alias or self._default_name(i) for i in sel.items]
            rows.append([_cell(row.get(n, row.get(n.upper()))) for n in names])
        self.out(_table_rows(names, rows))
        pos = body.get("position")
        if pos:
            self.out(
                f"(consistent with {pos.get('topic')}-{pos.get('partition')} up to offset {pos.get('offset')})"  # noqa: E501
            )

    def describe_json(self) -> dict[str, Any]:
        return {k: asdict(v) for k, v in self.meta.sources.items()}


class _TxnBatchWriter:
    """``foreachBatch`` of an aggregation: the batch's updated rows and the marker ``batch + 1``
    for group ``txn_id`` in one Kafka transaction; a batch at or below the marker is skipped."""

    def __init__(self, bootstrap: str, topic: str, txn_id: str) -> None:
        self.bootstrap, self.topic, self.txn_id = bootstrap, topic, txn_id
        self.producer: Any = None
        self.consumer: Any = None

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
        self.producer = self.consumer = None

    def __call__(self, df: Any, batch_id: int) -> None:
        from confluent_kafka import Consumer, Producer, TopicPartition

        rows = [(r["key"], r["value"]) for r in df.select("key", "value").collect()]
        if self.producer is None:
            self.producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "transactional.id": self.txn_id,
                    "partitioner": "murmur2_random",
                    "linger.ms": 5,
                }
            )
            self.producer.init_transactions(60)
            self.consumer = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": self.txn_id,
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                }
            )
        marker = TopicPartition(self.topic, 0)
        committed = self.consumer.committed([marker], timeout=60)[0].offset
        if committed >= batch_id + 1:
            return
        p = self.producer
        p.begin_transaction()
        for k, v in rows:
            p.produce(
                self.topic, key=None if k is None else k.encode(), value=None if v is None else v.encode()
            )
        p.send_offsets_to_transaction(
            [TopicPartition(self.topic, 0, batch_id + 1)], self.consumer.consumer_group_metadata(), 60
        )
        p.commit_transaction(60)
