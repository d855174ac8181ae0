"""Connectors as Spark Structured Streaming queries.

``FileStreamSource`` reads the lines appended to ``file`` through the ``strom-connect-file``
Python data source, whose offsets (byte positions after a complete line, as Kafka's
``FileStreamSourceTask`` keeps them) live in the query's checkpoint. Each micro-batch goes
through the transforms and converters and is produced in one Kafka transaction
(``transactional.id=connect-<name>``) together with the source offset, written to the
``offsets.storage.topic`` (default ``connect-offsets``) as Connect writes it (key
``["<name>",{"filename":"<file>"}]``, value ``{"position":N}``). A batch Spark replays after a
crash is recognised by that committed position and not produced twice; a query started without
a checkpoint resumes from it.

Sinks (``FileStreamSink``, ``ParquetSink``) read their ``topics``/``topics.regex`` with the
``strom`` data source (offsets in the checkpoint; also committed to the consumer group
``connect-<name>``, where Kafka's sinks keep them). The file sink appends each value's string
form, one per line; it remembers the file's length before each batch, so a replayed batch
truncates what its first run appended and writes it again: nothing lost, nothing doubled. The
Parquet sink writes one file per topic partition and batch, named
``<topic>+<partition>+<first offset>.parquet`` (replays rewrite the same file).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from strom.connect import config as C
from strom.connect.converters import java_str
from strom.connect.data import ConfigError, ConnectRecord
from strom.connect.errors import RawRecord, ToleranceExceeded
from strom.connect.pipeline import Pipeline

log = logging.getLogger("strom.connect")

FILE_FORMAT = "strom-connect-file"


# -- the file source's Spark data source --------------------------------------------------------


def _complete_end(path: str, start: int, max_bytes: int) -> int:
    """The byte position after the last complete line at most ``max_bytes`` after ``start``."""
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return start
    if size < start:
        raise RuntimeError(
            f"file {path} is shorter ({size} bytes) than the position already read ({start}): "
            "it was truncated or replaced; FileStreamSource reads appended lines only"
        )
    end = min(size, start + max_bytes)
    if end == start:
        return start
    with open(path, "rb") as f:
        f.seek(start)
        chunk = f.read(end - start)
    cut = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
    if cut < 0:
        return start
    if chunk[cut : cut + 1] == b"\r" and cut == len(chunk) - 1 and end < size:
        # a \r at the edge may be half of \r\n: end at the line before it
        cut = max(chunk.rfind(b"\n", 0, cut), chunk.rfind(b"\r", 0, cut))
        if cut < 0:
            return start
    return start + cut + 1


def split_lines(data: bytes, base: int) -> list[tuple[int, str]]:
    """(position after the line, line) for each line ending in \\n, \\r\\n or \\r."""
    out = []
    i, n = 0, len(data)
    start = 0
    while i < n:
        c = data[i]
        if c in (10, 13):
            line = data[start:i]
            if c == 13 and i + 1 < n and data[i + 1] == 10:
                i += 1
            out.append((base + i + 1, line.decode("utf-8", errors="replace")))
            start = i + 1
        i += 1
    return out


def _register_file_source(spark: Any) -> None:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

    class FileRange(InputPartition):
        def __init__(self, path: str, start: int, end: int) -> None:
            self.path, self.start, self.end = path, start, end

    class FileLinesReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, options: dict[str, str]) -> None:
            opts = {k.lower(): v for k, v in options.items()}  # Spark's options are case-insensitive
            self.path = opts["file"]
            self.start_position = int(opts.get("startposition", "0"))
            self.max_bytes = int(opts.get("maxbytespertrigger", str(64 << 20)))
            self._target: int | None = None

        def initialOffset(self) -> dict[str, Any]:
            return {"position": self.start_position}

        def prepareForTriggerAvailableNow(self) -> None:
            self._target = _complete_end(self.path, 0, 1 << 62)

        def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # type: ignore[override]
            pos = int(start["position"])
            end = _complete_end(self.path, pos, self.max_bytes)
            if self._target is not None:
                end = min(end, max(self._target, pos))
            return {"position": end}

        def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
            return [FileRange(self.path, int(start["position"]), int(end["position"]))]

        def read(self, partition: InputPartition) -> Iterator[Any]:  # type: ignore[override]
            import pyarrow as pa

            assert isinstance(partition, FileRange)
            if partition.end <= partition.start:
                return iter(())
            with open(partition.path, "rb") as f:
                f.seek(partition.start)
                data = f.read(partition.end - partition.start)
            lines = split_lines(data, partition.start)
            batch = pa.RecordBatch.from_arrays(
                [pa.array([p for p, _ in lines], pa.int64()), pa.array([t for _, t in lines], pa.string())],
                names=["position", "line"],
            )
            return iter([batch])

        def commit(self, end: dict[str, Any]) -> None:
            pass

    class FileLinesSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return FILE_FORMAT

        def schema(self) -> str:
            return "position LONG, line STRING"

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return FileLinesReader(dict(self.options))

    spark.dataSource.register(FileLinesSource)


# -- the PostgreSQL sources' Spark data source --------------------------------------------------

PG_FORMAT = "strom-connect-postgres"


def pg_reader(kind: str, props: dict[str, str], db: str) -> Any:
    from strom.connect import postgres as pg

    if kind == "jdbc":
        return pg.JdbcSourceReader(props, db)
    return pg.CdcReader(props)


def _register_pg_source(spark: Any) -> None:
    """``strom-connect-postgres``: the JDBC source's offsets are ``{"tables": {partition: offset}}``,
    the CDC source's ``{"lsn": N}``; each row is a pickled list of :class:`SourceEvent`."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

    class Range(InputPartition):
        def __init__(self, start: dict[str, Any], end: dict[str, Any]) -> None:
            self.start, self.end = start, end

    class PgReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, options: dict[str, str]) -> None:
            opts = {k.lower(): v for k, v in options.items()}
            self.kind = opts["kind"]
            self.props = json.loads(opts["props"])
            self.db = opts["db"]
            self.start_offset = json.loads(opts["startoffset"])
            self._conn: Any = None
            self._target: dict[str, Any] | None = None

        def _c(self) -> Any:
            from strom.connect import postgres as pg

            if self._conn is None or self._conn.closed:
                r = pg_reader(self.kind, self.props, self.db)
                self._conn = pg.connect(r.dsn)
            return self._conn

        def _latest(self, start: dict[str, Any]) -> dict[str, Any]:
            r = pg_reader(self.kind, self.props, self.db)
            try:
                if self.kind == "jdbc":
                    return {"tables": r.latest(self._c(), dict(start.get("tables", {})))}
                return {"lsn": max(int(start["lsn"]), r.latest(self._c()))}
            except Exception:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                raise

        def initialOffset(self) -> dict[str, Any]:
            return dict(self.start_offset)

        def prepareForTriggerAvailableNow(self) -> None:
            if self.kind == "cdc":
                self._target = self._latest(self.start_offset)

        def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # type: ignore[override]
            if self._target is not None:
                return {"lsn": max(int(start["lsn"]), int(self._target["lsn"]))}
            return self._latest(start)

        def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
            return [Range(start, end)]

        def read(self, partition: InputPartition) -> Iterator[Any]:  # type: ignore[override]
            import pickle

            import pyarrow as pa

            from strom.connect import postgres as pg

            assert isinstance(partition, Range)
            if partition.start == partition.end:
                return iter(())
            r = pg_reader(self.kind, self.props, self.db)
            conn = pg.connect(r.dsn)
            try:
                if self.kind == "jdbc":
                    events = r.read(conn, partition.start.get("tables", {}), partition.end["tables"])
                else:
                    events = r.read(conn, int(partition.start["lsn"]), int(partition.end["lsn"]))
            finally:
                conn.close()
            # pickled in chunks: the events of a table share their schemas, pickled once per chunk
            chunks = [events[i : i + 20_000] for i in range(0, len(events), 20_000)]
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.array(range(len(chunks)), pa.int64()),
                    pa.array([pickle.dumps(c, protocol=5) for c in chunks], pa.binary()),
                ],
                names=["seq", "rec"],
            )
            return iter([batch])

        def commit(self, end: dict[str, Any]) -> None:
            pass

        def stop(self) -> None:
            if self._conn is not None:
                self._conn.close()

    class PgSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return PG_FORMAT

        def schema(self) -> str:
            return "seq LONG, rec BINARY"  # rec: a pickled list of SourceEvents

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return PgReader(dict(self.options))

    spark.dataSource.register(PgSource)


# -- Kafka helpers (confluent-kafka on the driver) ------------------------------------------------


def _client_conf(bootstrap: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap}
    conf.update(extra or {})
    return conf


def ensure_topic(
    bootstrap: str, topic: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient(_client_conf(bootstrap))
    md = admin.list_topics(timeout=15)
    if topic in md.topics and md.topics[topic].error is None:
        return
    fut = admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})])[topic]
    try:
        fut.result(15)
    except KafkaException as e:
        if "TOPIC_ALREADY_EXISTS" not in str(e):
            raise


def _partitions(bootstrap: str, topic: str) -> list[int]:
    from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

    # asking must not create it (a broker with auto.create.topics.enable would, with defaults)
    admin = AdminClient(_client_conf(bootstrap, {"allow.auto.create.topics": False}))
    md = admin.list_topics(topic, timeout=15)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return []
    return sorted(t.partitions)


def offset_key(name: str, path: str) -> bytes:
    return json.dumps([name, {"filename": path}], separators=(",", ":")).encode()


def read_source_offset(bootstrap: str, topic: str, key: bytes, timeout_s: float = 15.0) -> int | None:
    """The last committed ``position`` under ``key`` in the offsets topic (read_committed)."""
    v = read_source_offsets(bootstrap, topic, lambda k: k == key, timeout_s).get(key)
    return None if v is None else int(v.get("position", 0))


def read_source_offsets(
    bootstrap: str, topic: str, wanted: Any, timeout_s: float = 15.0
) -> dict[bytes, dict[str, Any] | None]:
    """The last committed value (JSON) of each key ``wanted(key)`` accepts in the offsets topic."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        _client_conf(
            bootstrap,
            {
                "group.id": "strom-connect-offsets-reader",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            },
        )
    )
    try:
        md = c.list_topics(topic, timeout=timeout_s)
        if topic not in md.topics or md.topics[topic].error is not None:
            return {}
        tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in md.topics[topic].partitions]
        ends = {}
        for tp in tps:
            _lo, hi = c.get_watermark_offsets(tp, timeout=timeout_s)
            ends[tp.partition] = hi
        c.assign(tps)
        found: dict[bytes, dict[str, Any] | None] = {}
        pending = {p for p, hi in ends.items() if hi > 0}
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                for p in list(pending):
                    if c.position([TopicPartition(topic, p)])[0].offset >= ends[p]:
                        pending.discard(p)
                continue
            if m.error():
                continue
            k = m.key()
            if k is not None and wanted(k):
                v = m.value()
                found[k] = None if v is None else json.loads(v)
            mp, mo = m.partition(), m.offset()
            if mp is not None and mo is not None and mo + 1 >= ends[mp]:
                pending.discard(mp)
        return {k: v for k, v in found.items() if v is not None}
    finally:
        c.close()


def _arrow_rows(df: Any) -> list[dict[str, Any]]:
    """A micro-batch's rows on the driver, through Arrow (much faster than ``collect()``)."""
    rows: list[dict[str, Any]] = df.toArrow().to_pylist()
    return rows


def _ms(row: Any) -> int | None:
    return int(row["ts"]) if row["ts"] is not None else None


# -- connectors ----------------------------------------------------------------------------------


def task_groups(items: Sequence[Any], n: int) -> list[list[Any]]:
    """``items`` in at most ``n`` contiguous groups of near-equal size, as Kafka's
    ``ConnectorUtils.groupPartitions`` divides a connector's work among its tasks."""
    n = max(1, min(n, len(items)))
    per, extra = divmod(len(items), n)
    out, i = [], 0
    for g in range(n):
        size = per + (1 if g < extra else 0)
        out.append(list(items[i : i + size]))
        i += size
    return out


# sinks whose tasks may write side by side (each task its own files / Delta commits / requests);
# the file sink appends to one file, so it keeps one task
SPLITTABLE_SINKS = (C.PARQUET_SINK, C.DELTA_SINK, C.HTTP_SINK)


class TaskGroup:
    """A connector's task queries seen as one query (``awaitTermination``, ``exception``,
    ``isActive``, ``stop``), for the callers that run a connector as a whole."""

    def __init__(self, queries: list[Any]) -> None:
        self.queries = queries

    def awaitTermination(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for q in self.queries:
            if deadline is None:
                q.awaitTermination()
            elif not q.awaitTermination(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def exception(self) -> Any:
        for q in self.queries:
            exc = q.exception()
            if exc is not None:
                return exc
        return None

    @property
    def isActive(self) -> bool:
        return any(q.isActive for q in self.queries)

    def stop(self) -> None:
        for q in self.queries:
            q.stop()


class ConnectorRun:
    """One connector's Spark query (one per task) and its counters (what ``/status`` shows).

    ``tasks.max`` > 1 on a sink reading a ``topics`` list splits the topic partitions among the
    tasks as Connect does (contiguous groups, at most one task per partition): each task is a
    child run with its own Spark query (``assign`` of its partitions), checkpoint
    (``<state>/task-<i>``), pipeline and ``task.id`` (as in the DLQ headers). A task started
    without a checkpoint starts at the offsets committed to the group ``connect-<name>`` (the
    Delta sink: at its table's). Sources run one task: a FileStreamSource reads one file, as
    Kafka's (which also returns a single task config whatever ``tasks.max``)."""

    def __init__(
        self,
        cfg: C.ConnectorConfig,
        bootstrap: str,
        state_dir: Path,
        task_id: int = 0,
        assignment: dict[str, list[int]] | None = None,
    ) -> None:
        self.cfg = cfg
        self.bootstrap = bootstrap
        self.state_dir = state_dir
        self.task_id = task_id
        self.assignment = assignment
        self.tasks: list[ConnectorRun] = []  # the task runs when split
        self.pipeline = Pipeline(cfg, task_id)
        self.query: Any = None
        self.records_in = 0
        self.records_out = 0
        self.batches = 0
        self.dead_lettered = 0
        self.error: str | None = None
        self._producer: Any = None
        self._committed: int | None = None
        self._offsets_topic = cfg.props.get("offsets.storage.topic", "").strip() or "connect-offsets"
        self._topics_seen: set[str] = set()
        self._jdbc: Any = None

    @property
    def checkpoint(self) -> str:
        return str(self.state_dir / "checkpoint")

    # sources

    def _start_file_source(self, spark: Any, once: bool, trigger_ms: int) -> Any:
        props = self.cfg.connector_props()
        path = props["file"]
        if not path:
            raise ConfigError(
                "FileStreamSource: 'file' must be set (reading stdin is not supported by strom)"
            )
        path = os.path.abspath(path)
        self._path = path
        self._topic = props["topic"]
        self._key = offset_key(self.cfg.name, path)
        self._init_tx_producer()  # creates the offsets topic before it is read
        self._committed = read_source_offset(self.bootstrap, self._offsets_topic, self._key)
        _register_file_source(spark)
        df = (
            spark.readStream.format(FILE_FORMAT)
            .option("file", path)
            .option("startPosition", str(self._committed or 0))
            .load()
        )
        return self._start(df, self._source_batch, once, trigger_ms)

    def _source_batch(self, df: Any, batch_id: int) -> None:
        rows = sorted(_arrow_rows(df), key=lambda r: r["position"])
        if not rows:
            return
        end = int(rows[-1]["position"])
        if self._committed is not None and end <= self._committed:
            log.info(
                "connector %s: batch %d (up to position %d) was already produced",
                self.cfg.name,
                batch_id,
                end,
            )
            return
        now = int(time.time() * 1000)
        recs = []
        prev = int(rows[0]["position"]) - len(rows[0]["line"].encode()) - 1
        for r in rows:
            raw = RawRecord(
                topic=None,
                partition=None,
                offset=None,
                timestamp=now,
                key=None,
                value=r["line"].encode(),
                source_ref=f"file={self._path}, position={prev}",
            )
            prev = int(r["position"])
            recs.append(
                (
                    ConnectRecord(
                        topic=self._topic,
                        value=r["line"],
                        value_schema={"type": "string", "optional": False},
                        timestamp=now,
                    ),
                    raw,
                )
            )
        produced = self.pipeline.source_records(recs)
        p = self._producer
        p.begin_transaction()
        try:
            for rec in produced:
                kwargs: dict[str, Any] = {"key": rec.key, "value": rec.value, "headers": rec.headers or None}
                if rec.partition is not None:
                    kwargs["partition"] = rec.partition
                if rec.timestamp is not None:
                    kwargs["timestamp"] = rec.timestamp
                p.produce(rec.topic, **kwargs)
                p.poll(0)
            p.produce(
                self._offsets_topic,
                key=self._key,
                value=json.dumps({"position": end}, separators=(",", ":")).encode(),
            )
            p.commit_transaction(60)
        except BaseException:
            try:
                p.abort_transaction(30)
            finally:
                raise
        self._committed = end
        self.batches += 1
        self.records_in += len(rows)
        self.records_out += len(produced)

    # PostgreSQL sources (JDBC source, Debezium CDC)

    def _init_tx_producer(self) -> None:
        """The offsets topic and the source's transactional producer (file and PostgreSQL
        sources: each micro-batch is one transaction with its source offset)."""
        from confluent_kafka import Producer

        ensure_topic(self.bootstrap, self._offsets_topic, 1, {"cleanup.policy": "compact"})
        self._producer = Producer(
            _client_conf(
                self.bootstrap,
                {
                    "transactional.id": f"connect-{self.cfg.name}",
                    "linger.ms": 5,
                    "partitioner": "murmur2_random",
                },
            )
        )
        self._producer.init_transactions(30)

    def _pg_offset_key(self, part_key: str) -> bytes:
        return json.dumps([self.cfg.name, json.loads(part_key)], separators=(",", ":")).encode()

    def _pg_order(self, off: dict[str, Any]) -> tuple[int, ...]:
        from strom.connect import postgres as pg

        if self._pg_kind == "jdbc":
            return pg.jdbc_order(self._pg_props["mode"], off)
        return (int(off["lsn"]),)

    def _start_pg_source(self, spark: Any, once: bool, trigger_ms: int) -> Any:
        from strom.connect import postgres as pg

        props = self.cfg.connector_props()
        self._pg_props = props
        self._pg_kind = "jdbc" if self.cfg.connector_class == C.JDBC_SOURCE else "cdc"
        self._init_tx_producer()
        prefix = json.dumps(self.cfg.name)
        stored = read_source_offsets(
            self.bootstrap, self._offsets_topic, lambda k: k.startswith(b"[" + prefix.encode() + b",")
        )
        # the committed offset of each source partition, by its partition key (Connect's map, as JSON)
        self._pg_committed: dict[str, dict[str, Any]] = {}
        for k, v in stored.items():
            if v is not None:
                self._pg_committed[json.dumps(json.loads(k)[1], separators=(",", ":"))] = v
        if self._pg_kind == "jdbc":
            dsn = pg.parse_jdbc_url(
                props["connection.url"], props["connection.user"], props["connection.password"]
            )
            conn = pg.connect(dsn)
            try:
                db = conn.execute("SELECT current_database()").fetchone()[0]
                reader = pg.JdbcSourceReader(props, db)
                if not reader.tables(conn):
                    log.warning("connector %s: no table matches the table include list (yet)", self.cfg.name)
            finally:
                conn.close()
            start: dict[str, Any] = {"tables": dict(self._pg_committed)}
        else:
            db = props["database.dbname"]
            cdc = pg.CdcReader(props)
            self._cdc = cdc
            mine = self._pg_committed.get(cdc.part_key)
            conn = pg.connect(cdc.dsn)
            try:
                slot_ok = cdc.slot_exists(conn)
                if slot_ok:
                    cdc.ensure_publication(conn)
            finally:
                conn.close()
            mode = props["snapshot.mode"].strip().lower()
            if mine is not None and not slot_ok and mode not in ("always", "when_needed"):
                raise RuntimeError(
                    f"replication slot {cdc.slot} is gone but connector {self.cfg.name} has a stored "
                    "position "
                    f"(LSN {pg.lsn_str(int(mine['lsn']))}): changes after it may be lost; set "
                    "snapshot.mode=when_needed (or always) to take a new snapshot"
                )
            if mine is None or not slot_ok or mode == "always":
                point, events = cdc.create_slot_and_snapshot(with_data=mode not in ("no_data", "never"))
                log.info(
                    "connector %s: slot %s at %s, %d snapshot events",
                    self.cfg.name,
                    cdc.slot,
                    pg.lsn_str(point),
                    len(events),
                )
                end_off: dict[str, Any] = {
                    "lsn": point,
                    "txId": None,
                    "ts_usec": int(time.time() * 1e6),
                    "last_snapshot_record": True,
                }
                self._pg_produce(events, {cdc.part_key: end_off}, force=True)
                mine = end_off
            start = {"lsn": int(mine["lsn"])}
        if self.cfg.props.get("poll.interval.ms", "").strip():
            trigger_ms = int(self.cfg.props["poll.interval.ms"])  # the connector's own poll interval
        _register_pg_source(spark)
        df = (
            spark.readStream.format(PG_FORMAT)
            .option("kind", self._pg_kind)
            .option("props", json.dumps(props))
            .option("db", db)
            .option("startOffset", json.dumps(start))
            .load()
        )
        return self._start(df, self._pg_source_batch, once, trigger_ms)

    def _pg_source_batch(self, df: Any, batch_id: int) -> None:
        import pickle

        rows = sorted(_arrow_rows(df), key=lambda r: r["seq"])
        events = [e for r in rows for e in pickle.loads(r["rec"])]
        if not events:
            return
        fresh = []
        for e in events:
            done = self._pg_committed.get(e.part_key)
            if done is not None and e.order <= self._pg_order(done):
                continue
            fresh.append(e)
        if not fresh:
            log.info("connector %s: batch %d was already produced", self.cfg.name, batch_id)
            return
        ends: dict[str, dict[str, Any]] = {}
        for e in fresh:
            ends[e.part_key] = e.offset
        self._pg_produce(fresh, ends)
        if self._pg_kind == "cdc":
            self._cdc.advance(max(int(o["lsn"]) for o in ends.values()))

    def _pg_produce(self, events: list[Any], ends: dict[str, dict[str, Any]], force: bool = False) -> None:
        """``events`` through the transforms and converters and into Kafka in one transaction,
        with the source offsets ``ends``."""
        recs = []
        for e in events:
            raw = RawRecord(
                topic=None,
                partition=None,
                offset=None,
                timestamp=e.timestamp,
                key=None,
                value=None,
                source_ref=f"{e.part_key} offset={json.dumps(e.offset, separators=(',', ':'))}",
            )
            recs.append(
                (
                    ConnectRecord(
                        topic=e.topic,
                        key=e.key,
                        key_schema=e.key_schema,
                        value=e.value,
                        value_schema=e.value_schema,
                        timestamp=e.timestamp,
                    ),
                    raw,
                )
            )
        produced = self.pipeline.source_records(recs)
        if not produced and not force and not ends:
            return
        p = self._producer
        created: set[str] = set()
        p.begin_transaction()
        try:
            for rec in produced:
                if rec.topic not in created and rec.topic not in self._topics_seen:
                    ensure_topic(self.bootstrap, rec.topic)
                    created.add(rec.topic)
                kwargs: dict[str, Any] = {"key": rec.key, "value": rec.value, "headers": rec.headers or None}
                if rec.partition is not None:
                    kwargs["partition"] = rec.partition
                if rec.timestamp is not None:
                    kwargs["timestamp"] = rec.timestamp
                p.produce(rec.topic, **kwargs)
                p.poll(0)
            for part_key, off in ends.items():
                p.produce(
                    self._offsets_topic,
                    key=self._pg_offset_key(part_key),
                    value=json.dumps(off, separators=(",", ":")).encode(),
                )
            p.commit_transaction(60)
        except BaseException:
            try:
                p.abort_transaction(30)
            finally:
                raise
        self._topics_seen |= created
        self._pg_committed.update(ends)
        self.batches += 1
        self.records_in += len(events)
        self.records_out += len(produced)

    # sinks

    def _start_sink(self, spark: Any, once: bool, trigger_ms: int) -> Any:
        from strom.spark import StromDataSource

        spark.dataSource.register(StromDataSource)
        reader = (
            spark.readStream.format("strom")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            .option("failOnDataLoss", "false")
        )
        if self.assignment is not None:
            reader = reader.option("assign", json.dumps(self.assignment))
        elif self.cfg.topics_regex:
            reader = reader.option("subscribePattern", self.cfg.topics_regex)
        else:
            reader = reader.option("subscribe", ",".join(self.cfg.topics))
        if self.cfg.connector_class == C.DELTA_SINK:
            reader = self._delta_start(reader)
        elif self.assignment is not None and not (Path(self.checkpoint) / "commits").exists():
            reader = reader.option("startingOffsets", json.dumps(self._group_offsets(self.assignment)))
        df = reader.load().selectExpr(
            "key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts", "headers"
        )
        if self.cfg.errors.dlq_topic:
            from confluent_kafka import Producer

            ensure_topic(self.bootstrap, self.cfg.errors.dlq_topic)
            self._producer = Producer(
                _client_conf(self.bootstrap, {"enable.idempotence": True, "linger.ms": 5})
            )
        props = self.cfg.connector_props()
        if self.cfg.connector_class == C.FILE_SINK:
            if not props["file"]:
                raise ConfigError(
                    "FileStreamSink: 'file' must be set (writing to stdout is not supported by strom)"
                )
            self._out = Path(os.path.abspath(props["file"]))
            return self._start(df, self._file_sink_batch, once, trigger_ms)
        if self.cfg.connector_class == C.HTTP_SINK:
            return self._start(df, self._http_sink_batch, once, trigger_ms)
        if self.cfg.connector_class == C.DELTA_SINK:
            return self._start(df, self._delta_sink_batch, once, trigger_ms)
        if self.cfg.connector_class == C.JDBC_SINK:
            from strom.connect import postgres as pg

            self._jdbc = pg.JdbcSinkWriter(props, self.cfg.name)
            self._jdbc._conn()  # fails now, in one line, if the database is unreachable
            return self._start(df, self._jdbc_sink_batch, once, trigger_ms)
        self._out = Path(os.path.abspath(props["path"]))
        self._out.mkdir(parents=True, exist_ok=True)
        return self._start(df, self._parquet_sink_batch, once, trigger_ms)

    def _sink_records(self, df: Any) -> tuple[list[Any], list[tuple[RawRecord, ConnectRecord]]]:
        rows = _arrow_rows(df)
        rows.sort(key=lambda r: (r["topic"], r["partition"], r["offset"]))
        raws = [
            RawRecord(
                topic=r["topic"],
                partition=r["partition"],
                offset=r["offset"],
                timestamp=_ms(r),
                key=r["key"],
                value=r["value"],
                headers=[(h["key"], h["value"]) for h in (r["headers"] or [])],
            )
            for r in rows
        ]
        return rows, self.pipeline.sink_records(raws)

    def _after_sink_batch(self, rows: list[Any], written: int) -> None:
        letters = self.pipeline.errors.drain()
        if letters:
            p = self._producer
            for d in letters:
                kwargs: dict[str, Any] = {"key": d.key, "value": d.value, "headers": d.headers or None}
                if d.timestamp is not None:
                    kwargs["timestamp"] = d.timestamp
                p.produce(self.cfg.errors.dlq_topic, **kwargs)
                p.poll(0)
            left = p.flush(60)
            if left:
                raise RuntimeError(
                    f"{left} records could not be written to the dead letter queue "
                    f"{self.cfg.errors.dlq_topic}"
                )
            self.dead_lettered += len(letters)
        self._commit_group(rows)
        self.batches += 1
        self.records_in += len(rows)
        self.records_out += written

    def _group_offsets(self, assignment: dict[str, list[int]]) -> dict[str, dict[str, int]]:
        """The offsets of the group ``connect-<name>`` for ``assignment`` (-2: none committed)."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer(_client_conf(self.bootstrap, {"group.id": f"connect-{self.cfg.name}"}))
        try:
            tps = [TopicPartition(t, p) for t, ps in assignment.items() for p in ps]
            got = c.committed(tps, timeout=15)
        finally:
            c.close()
        out: dict[str, dict[str, int]] = {t: {} for t in assignment}
        for tp in got:
            out[tp.topic][str(tp.partition)] = tp.offset if tp.offset >= 0 else -2
        return out

    def _commit_group(self, rows: list[Any]) -> None:
        if not rows:
            return
        from confluent_kafka import Consumer, TopicPartition

        ends: dict[tuple[str, int], int] = {}
        for r in rows:
            ends[(r["topic"], r["partition"])] = max(
                ends.get((r["topic"], r["partition"]), -1), r["offset"] + 1
            )
        c = Consumer(
            _client_conf(
                self.bootstrap, {"group.id": f"connect-{self.cfg.name}", "enable.auto.commit": False}
            )
        )
        try:
            c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()], asynchronous=False)
        except Exception as e:  # informative only: the checkpoint has the offsets that count
            log.warning(
                "connector %s: could not commit offsets to group connect-%s: %s",
                self.cfg.name,
                self.cfg.name,
                e,
            )
        finally:
            c.close()

    def _file_sink_batch(self, df: Any, batch_id: int) -> None:
        rows, recs = self._sink_records(df)
        state_path = self.state_dir / "file-sink-state.json"
        state = json.loads(state_path.read_text()) if state_path.exists() else {}
        size = self._out.stat().st_size if self._out.exists() else 0
        if state.get("batch") == batch_id:
            size = int(state["size"])  # a replay: drop what the first run of this batch appended
        elif state.get("batch") is not None and batch_id < int(state["batch"]):
            log.info(
                "connector %s: batch %d is older than the last written one; skipped", self.cfg.name, batch_id
            )
            return
        tmp = state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"batch": batch_id, "size": size}))
        os.replace(tmp, state_path)
        self._out.parent.mkdir(parents=True, exist_ok=True)
        with open(self._out, "ab") as f:
            f.truncate(size)
            for _raw, rec in recs:
                f.write(java_str(rec.value, rec.value_schema).encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        self._after_sink_batch(rows, len(recs))

    def _parquet_sink_batch(self, df: Any, batch_id: int) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows, recs = self._sink_records(df)
        groups: dict[tuple[str, int], list[tuple[RawRecord, ConnectRecord]]] = {}
        for raw, rec in recs:
            groups.setdefault((rec.topic, raw.partition or 0), []).append((raw, rec))
        for (topic, part), items in groups.items():
            first = items[0][0].offset
            docs = [_parquet_row(rec) for _raw, rec in items]
            try:
                table = pa.Table.from_pylist(docs)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
                raise RuntimeError(
                    f"ParquetSink: records of {topic}-{part} do not share one shape: {e}"
                ) from None
            target = self._out / f"{topic}+{part}+{first:020d}.parquet"
            tmp = target.with_suffix(".parquet.tmp")
            pq.write_table(table, tmp)
            os.replace(tmp, target)
        self._after_sink_batch(rows, len(recs))

    def _delta_start(self, reader: Any) -> Any:
        """Without a checkpoint, the Delta sink starts at the offsets its tables committed."""
        from strom.connect.delta import DeltaWriter, table_path

        self._delta = DeltaWriter(self.cfg.name, self.cfg.connector_props())
        if self.cfg.topics_regex or (Path(self.checkpoint) / "commits").exists():
            return reader
        starting: dict[str, dict[str, int]] = {}
        assignment = self.assignment or {t: _partitions(self.bootstrap, t) for t in self.cfg.topics}
        for topic, parts in assignment.items():
            if not parts:  # not created yet: nothing committed, read from its start when it is
                continue
            done = self._delta.committed(table_path(self._delta.template, topic), topic, parts)
            starting[topic] = {str(p): done.get(p, -2) for p in parts}
        if self.assignment is not None or any(o >= 0 for ps in starting.values() for o in ps.values()):
            log.info("connector %s: resuming from the Delta table's offsets %s", self.cfg.name, starting)
            reader = reader.option("startingOffsets", json.dumps(starting))
        return reader

    def _delta_sink_batch(self, df: Any, batch_id: int) -> None:
        rows, recs = self._sink_records(df)
        items = [(raw.topic or "", raw.partition or 0, raw.offset or 0, rec) for raw, rec in recs]
        written = self._delta.write(items) if items else 0
        self._after_sink_batch(rows, written)

    def _http_sink_batch(self, df: Any, batch_id: int) -> None:
        rows, recs = self._sink_records(df)
        props = self.cfg.connector_props()
        size = int(props["batch.max.size"])
        written = 0
        for i in range(0, len(recs), size):
            chunk = recs[i : i + size]
            try:
                _http_send(props, [rec for _raw, rec in chunk])
                written += len(chunk)
            except Exception as e:  # after the retries: each record of the request is a failure
                for raw, _rec in chunk:
                    self.pipeline.errors.report("TASK_PUT", C.HTTP_SINK, e, raw)
        self._after_sink_batch(rows, written)

    def _jdbc_sink_batch(self, df: Any, batch_id: int) -> None:
        rows, recs = self._sink_records(df)
        ends: dict[tuple[str, int], int] = {}
        for r in rows:
            k = (r["topic"], r["partition"])
            ends[k] = max(ends.get(k, 0), r["offset"] + 1)
        by_id = {id(rec): raw for raw, rec in recs}

        def failed(rec: Any, e: Exception) -> None:
            self.pipeline.errors.report("TASK_PUT", C.JDBC_SINK, e, by_id[id(rec)])

        written = self._jdbc.write([rec for _raw, rec in recs], ends, failed)
        self._after_sink_batch(rows, written)

    # the query

    def _start(self, df: Any, fn: Any, once: bool, trigger_ms: int) -> Any:
        def guarded(batch_df: Any, batch_id: int) -> None:
            try:
                fn(batch_df, batch_id)
            except ToleranceExceeded as e:
                self.error = str(e)
                log.error("connector %s failed: %s", self.cfg.name, e)
                raise

        w = df.writeStream.foreachBatch(guarded).option("checkpointLocation", self.checkpoint)
        qname = f"connect-{self.cfg.name}" + (f"-{self.task_id}" if self.assignment is not None else "")
        w = w.queryName(qname)
        w = w.trigger(availableNow=True) if once else w.trigger(processingTime=f"{trigger_ms} milliseconds")
        self.query = w.start()
        return self.query

    def task_assignments(self) -> list[dict[str, list[int]]]:
        """The topic partitions of each task (one task, no split: ``[]``)."""
        cfg = self.cfg
        if cfg.kind != "sink" or cfg.tasks_max < 2 or cfg.topics_regex:
            return []
        if cfg.connector_class not in SPLITTABLE_SINKS:
            log.info(
                "connector %s: %s runs one task (tasks.max=%d)",
                cfg.name,
                cfg.connector_class.rsplit(".", 1)[-1],
                cfg.tasks_max,
            )
            return []
        by_topic = {t: _partitions(self.bootstrap, t) for t in cfg.topics}
        missing = sorted(t for t, ps in by_topic.items() if not ps)
        if missing:
            # a split assigns the partitions that exist now: a topic created later would be in
            # no task; one task subscribes to the topics and reads them whenever they appear
            log.warning(
                "connector %s: topic(s) %s do not exist yet: running one task instead of tasks.max=%d",
                cfg.name, ", ".join(missing), cfg.tasks_max,
            )
            return []
        parts = [(t, p) for t, ps in by_topic.items() for p in ps]
        groups = task_groups(parts, cfg.tasks_max)
        if len(groups) < 2:
            return []
        out = []
        for g in groups:
            a: dict[str, list[int]] = {}
            for t, p in g:
                a.setdefault(t, []).append(p)
            out.append(a)
        return out

    def start(self, spark: Any, once: bool = False, trigger_ms: int = 1000) -> Any:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.cfg.connector_class in (C.JDBC_SOURCE, C.PG_CDC):
            return self._start_pg_source(spark, once, trigger_ms)
        if self.cfg.kind == "source":
            return self._start_file_source(spark, once, trigger_ms)
        if self.assignment is None:
            groups = self.task_assignments()
            if groups:
                self.tasks = [
                    ConnectorRun(self.cfg, self.bootstrap, self.state_dir / f"task-{i}", i, g)
                    for i, g in enumerate(groups)
                ]
                for t in self.tasks:
                    t.start(spark, once, trigger_ms)
                self.query = TaskGroup([t.query for t in self.tasks])
                return self.query
        return self._start_sink(spark, once, trigger_ms)

    def stop(self) -> None:
        for t in self.tasks:
            t.stop()
        if self.query is not None:
            try:
                self.query.stop()
            except Exception as e:  # already failed or stopped
                log.debug("stopping %s: %s", self.cfg.name, e)
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None  # librdkafka's threads go with it
        if self._jdbc is not None:
            self._jdbc.close()
            self._jdbc = None
        cdc = getattr(self, "_cdc", None)
        if cdc is not None and cdc.props["slot.drop.on.stop"].strip().lower() == "true":
            try:
                cdc.drop_slot()
            except Exception as e:  # the database gone: its slot with it
                log.warning("connector %s: could not drop slot %s: %s", self.cfg.name, cdc.slot, e)

    def _task_status(self) -> dict[str, Any]:
        q = self.query
        state = "UNASSIGNED"
        trace = None
        if q is not None:
            exc = q.exception()
            if exc is not None:
                state, trace = "FAILED", self.error or str(exc)
            elif q.isActive:
                state = "RUNNING"
            else:
                state = "STOPPED"
        task: dict[str, Any] = {"id": self.task_id, "state": state, "worker_id": "strom-connect"}
        if trace:
            task["trace"] = trace
        if self.assignment is not None:
            task["strom"] = {
                "assignment": [{"topic": t, "partition": p} for t, ps in self.assignment.items() for p in ps],
                **self.counters(),
            }
        return task

    def counters(self) -> dict[str, int]:
        runs = self.tasks or [self]
        return {
            "batches": sum(r.batches for r in runs),
            "records_in": sum(r.records_in for r in runs),
            "records_out": sum(r.records_out for r in runs),
            "failed_records": sum(r.pipeline.errors.failed for r in runs),
            "dead_lettered": sum(r.dead_lettered for r in runs),
            "filtered": sum(r.pipeline.filtered for r in runs),
        }

    def status(self) -> dict[str, Any]:
        tasks = [t._task_status() for t in self.tasks] if self.tasks else [self._task_status()]
        states = {t["state"] for t in tasks}
        # the connector (its Connector instance, not its tasks) runs while any task exists
        state = tasks[0]["state"]
        if "RUNNING" in states:
            state = "RUNNING"
        if self.query is None:
            state = "UNASSIGNED"
        return {
            "name": self.cfg.name,
            "connector": {"state": state, "worker_id": "strom-connect"},
            "tasks": tasks,
            "type": self.cfg.kind,
            "strom": self.counters(),
        }


class HttpError(RuntimeError):
    java_class = "io.confluent.connect.http.sink.exception.HttpResponseException"


def _http_send(props: dict[str, str], recs: list[ConnectRecord]) -> None:
    """One request of Confluent's HTTP sink: the records' bodies joined by ``batch.separator``
    between ``batch.prefix`` and ``batch.suffix``; 5xx and connection errors are retried
    ``max.retries`` times, ``retry.backoff.ms`` apart; 4xx is not retried."""
    import urllib.error
    import urllib.request

    from strom.connect.converters import _to_json_value

    as_json = props["request.body.format"].strip().lower() == "json"
    parts = []
    for rec in recs:
        if as_json:
            parts.append(
                json.dumps(_to_json_value(rec.value_schema, rec.value, "NUMERIC"), separators=(",", ":"))
            )
        else:
            parts.append(java_str(rec.value, rec.value_schema))
    body = (props["batch.prefix"] + props["batch.separator"].join(parts) + props["batch.suffix"]).encode()
    headers = {"Content-Type": "application/json" if as_json else "text/plain"}
    for h in props["headers"].split(props["header.separator"] or "|"):
        if ":" in h:
            k, v = h.split(":", 1)
            headers[k.strip()] = v.strip()
    retries, backoff = int(props["max.retries"]), int(props["retry.backoff.ms"]) / 1000
    timeout = int(props["http.request.timeout.ms"]) / 1000
    method = props["request.method"].strip().upper()
    for attempt in range(retries + 1):
        req = urllib.request.Request(props["http.api.url"], data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                resp.read()
                return
        except urllib.error.HTTPError as e:
            detail = e.read()[:500].decode(errors="replace")
            err: Exception = HttpError(f"HTTP {method} {props['http.api.url']} answered {e.code}: {detail}")
            if e.code < 500:
                raise err from None
        except OSError as e:
            err = HttpError(f"HTTP {method} {props['http.api.url']} failed: {e}")
        if attempt < retries:
            time.sleep(backoff)
    raise err


def _parquet_row(rec: ConnectRecord) -> dict[str, Any]:
    v = rec.value
    if isinstance(v, dict):
        return v
    return {"value": v}


def spark_session(app: str = "strom-connect") -> Any:
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(os.environ.get("STROM_CONNECT_SPARK_MASTER", "local[2]"))
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    # a failed connector is reported by strom in one line; Spark's own error log would add the
    # JVM's and Python's stack traces
    spark.sparkContext.setLogLevel(os.environ.get("STROM_CONNECT_SPARK_LOG_LEVEL", "FATAL"))
    return spark
