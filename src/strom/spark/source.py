"""The ``strom`` Spark data source: batch and streaming readers with the schema, options and
checkpoint offsets of Spark's Kafka source.

Theory of operation
-------------------
Planning runs on the driver (Spark's Python planner process, which keeps the stream reader alive
between micro-batches); reading runs in executor Python workers on *pickled copies* of the reader.
So every :class:`KafkaRange` carries all a task needs: client settings, topic, partition, the
half-open offset range ``[from, until)`` and the decode flags.

Offsets are Spark's Kafka JSON, ``{"topic": {"0": 42}}``: per partition the next offset to read.
A micro-batch reads ``[start[tp], end[tp])`` for each partition; a partition that appears in
``end`` but not in ``start`` is new (added to a subscribed topic, or a new topic matching the
pattern) and is read from its earliest offset, as Spark does. Replaying a batch after a restart
reads the same ranges again, so a deterministic query reprocesses exactly the same records.

Data loss (offsets aged out by retention, partitions gone, offsets going backwards after a topic
is re-created) raises unless ``failOnDataLoss`` is false, in which case reading resumes at the
earliest available offset, with Spark's message text.

Error contract: option problems raise :class:`~strom.spark.options.StromOptionError` when the
query is defined (``load()``/``start()``), broker problems raise
:class:`strom.client.KafkaError`, data loss raises :class:`DataLossError`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from strom.client import KafkaError
from strom.spark.arrow_decode import decode_to_arrow
from strom.spark.formats import FieldFormat, decode_column, resolve_format, spark_type_of
from strom.spark.kafka_io import KafkaSession, TopicPartition, session
from strom.spark.options import (
    EARLIEST,
    LATEST,
    ClientSettings,
    OffsetSpec,
    ReadOptions,
    StromOptionError,
    parse_read_options,
)

__all__ = [
    "DataLossError",
    "KafkaRange",
    "StromBatchReader",
    "StromDataSource",
    "StromStreamReader",
    "kafka_schema",
    "read_range",
]

_OFFSET_OUT_OF_RANGE = 1

Offsets = dict[TopicPartition, int]


def kafka_schema(
    include_headers: bool = False,
    key_format: FieldFormat | None = None,
    value_format: FieldFormat | None = None,
) -> StructType:
    """Spark's Kafka source schema (plus ``headers`` with ``includeHeaders``); with a
    ``keyFormat``/``valueFormat`` the column has the format's type, and in PERMISSIVE mode an
    error column (``keyError``, ``valueError``) follows the others."""
    fields = [
        StructField("key", spark_type_of(key_format)),
        StructField("value", spark_type_of(value_format)),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    for fmt in (key_format, value_format):
        if fmt is not None and fmt.permissive:
            fields.append(StructField(fmt.error_column, StringType()))
    for fmt in (key_format, value_format):
        if fmt is not None and fmt.include_raw:
            fields.append(StructField(fmt.raw_column, BinaryType()))
    return StructType(fields)


class DataLossError(RuntimeError):
    """Offsets that should be readable are gone (Spark's failOnDataLoss condition)."""


def _data_loss_message(detail: str) -> str:
    return (
        f"{detail} Some data may have been lost because they are not available in Kafka any more; "
        "either the data was aged out by Kafka or the topic may have been deleted before all the data "
        "in the topic was processed. If you don't want your streaming query to fail on such cases, set "
        'the source option "failOnDataLoss" to "false".'
    )


def report_data_loss(fail: bool, detail: str) -> None:
    if fail:
        raise DataLossError(_data_loss_message(detail))


# ---------------------------------------------------------------------- offsets JSON


def to_json_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(t, 0): 42}`` -> ``{"t": {"0": 42}}`` (topics and partitions in order)."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def from_json_offsets(doc: Mapping[str, Any]) -> Offsets:
    out: Offsets = {}
    for t, parts in doc.items():
        for p, o in parts.items():
            out[(t, int(p))] = int(o)
    return out


# ---------------------------------------------------------------------- partitions


class KafkaRange(InputPartition):
    """One Spark task: read ``[from_offset, until_offset)`` of one topic partition."""

    def __init__(
        self,
        client: ClientSettings,
        topic: str,
        partition: int,
        from_offset: int,
        until_offset: int,
        include_headers: bool,
        fail_on_data_loss: bool,
        key_format: FieldFormat | None = None,
        value_format: FieldFormat | None = None,
    ) -> None:
        super().__init__(None)
        self.client = client
        self.topic = topic
        self.partition = partition
        self.from_offset = from_offset
        self.until_offset = until_offset
        self.include_headers = include_headers
        self.fail_on_data_loss = fail_on_data_loss
        self.key_format = key_format
        self.value_format = value_format

    def __repr__(self) -> str:
        return f"KafkaRange({self.topic}-{self.partition} [{self.from_offset}, {self.until_offset}))"


def plan_ranges(
    opts: ReadOptions,
    ranges: Sequence[tuple[TopicPartition, int, int]],
    formats: tuple[FieldFormat | None, FieldFormat | None] = (None, None),
) -> list[KafkaRange]:
    """Spark's KafkaOffsetRangeCalculator: one task per non-empty range, split further to reach
    ``minPartitions`` (proportionally to range sizes) and to respect ``maxRecordsPerPartition``."""
    pieces: list[tuple[TopicPartition, int, int]] = [r for r in ranges if r[2] > r[1]]
    if opts.max_records_per_partition:
        cap = opts.max_records_per_partition
        split: list[tuple[TopicPartition, int, int]] = []
        for tp, a, b in pieces:
            n = -(-(b - a) // cap)
            split.extend(_split(tp, a, b, n))
        pieces = split
    if opts.min_partitions and len(pieces) < opts.min_partitions:
        total = sum(b - a for _, a, b in pieces)
        split = []
        for tp, a, b in pieces:
            n = max(round((b - a) / total * opts.min_partitions), 1) if total else 1
            split.extend(_split(tp, a, b, n))
        pieces = split
    return [
        KafkaRange(opts.client, tp[0], tp[1], a, b, opts.include_headers, opts.fail_on_data_loss, *formats)
        for tp, a, b in pieces
    ]


def _split(tp: TopicPartition, a: int, b: int, n: int) -> list[tuple[TopicPartition, int, int]]:
    size = b - a
    n = max(1, min(n, size))
    bounds = [a + size * i // n for i in range(n + 1)]
    return [(tp, bounds[i], bounds[i + 1]) for i in range(n) if bounds[i + 1] > bounds[i]]


# ---------------------------------------------------------------------- reading


def read_range(part: KafkaRange) -> Iterator[pa.RecordBatch]:
    """Arrow record batches of the records in ``part``'s range (runs on executors)."""
    sess = session(part.client)
    topic, partition = part.topic, part.partition
    until = part.until_offset
    offset = part.from_offset
    read_committed = part.client.isolation_level == 1
    empty_polls = 0
    while offset < until:
        f = sess.fetch_ahead(topic, partition, offset, until)
        if f.error_code == _OFFSET_OUT_OF_RANGE:
            earliest = sess.list_offsets({(topic, partition): EARLIEST})[(topic, partition)]
            if offset < earliest:
                report_data_loss(
                    part.fail_on_data_loss,
                    f"Cannot fetch offset {offset} (TopicPartition: {topic}-{partition}): the earliest "
                    f"available offset is {earliest}.",
                )
                offset = earliest
                continue
            report_data_loss(
                part.fail_on_data_loss,
                f"Cannot fetch offset {offset} (TopicPartition: {topic}-{partition}): it is beyond "
                "the end of the partition (was the topic re-created?).",
            )
            return
        if f.error_code:
            raise KafkaError(f.error_code, f"fetch {topic}-{partition} at offset {offset}")
        if f.log_start_offset > offset:
            report_data_loss(
                part.fail_on_data_loss,
                f"Cannot fetch offset {offset} (TopicPartition: {topic}-{partition}): the earliest "
                f"available offset is {f.log_start_offset}.",
            )
        chunk = decode_to_arrow(
            f.records,
            topic,
            partition,
            offset,
            until,
            include_headers=part.include_headers,
            read_committed=read_committed,
            aborted=f.aborted,
        )
        if chunk.batch is not None:
            if part.key_format is not None or part.value_format is not None:
                yield apply_formats(chunk.batch, part.key_format, part.value_format)
            else:
                yield chunk.batch
        if chunk.next_offset is not None and chunk.next_offset > offset:
            offset = chunk.next_offset
            empty_polls = 0
            continue
        # Nothing (complete) came back from `offset`.
        end = f.last_stable_offset if read_committed and f.last_stable_offset >= 0 else f.high_watermark
        if offset >= end:
            empty_polls += 1
            if empty_polls > 3:
                report_data_loss(
                    part.fail_on_data_loss,
                    f"Cannot fetch records in [{offset}, {until}) (TopicPartition: {topic}-{partition}): "
                    f"the partition ends at {end}.",
                )
                return
        else:
            empty_polls += 1
            if empty_polls > 20:
                raise KafkaError(-1, f"no progress fetching {topic}-{partition} at offset {offset}")
        time.sleep(0.05 * empty_polls)


def apply_formats(
    batch: pa.RecordBatch, key_format: FieldFormat | None, value_format: FieldFormat | None
) -> pa.RecordBatch:
    """``batch`` (Spark's Kafka columns) with the key and/or value decoded (and the error
    columns of PERMISSIVE mode, then the raw columns of ``includeRaw``, appended)."""
    topic = batch.column(2)[0].as_py() if batch.num_rows else ""
    partition = batch.column(3)[0].as_py() if batch.num_rows else -1
    offsets = batch.column(4)

    def where(i: int) -> str:
        return f"{topic}-{partition} offset {offsets[i].as_py()}"

    columns = list(batch.columns)
    names = list(batch.schema.names)
    extra: list[tuple[str, pa.Array]] = []
    raws: list[tuple[str, pa.Array]] = []
    for index, fmt in ((0, key_format), (1, value_format)):
        if fmt is None:
            continue
        col, errors = decode_column(fmt, batch.column(index), where)
        if fmt.include_raw:
            raws.append((fmt.raw_column, batch.column(index)))
        columns[index] = col
        if errors is not None:
            extra.append((fmt.error_column, errors))
    for name, col in extra + raws:
        names.append(name)
        columns.append(col)
    return pa.RecordBatch.from_arrays(columns, names=names)


def resolve_read_formats(
    options: Mapping[str, str], opts: ReadOptions
) -> tuple[FieldFormat | None, FieldFormat | None]:
    """The ``keyFormat``/``valueFormat`` of a read, their schemas settled (planning time). The
    subject's topic is the one topic read, if there is one."""
    topics = set(opts.topics) | set(opts.assign)
    topic = next(iter(topics)) if len(topics) == 1 and opts.pattern is None else None
    return (
        resolve_format(options, "key", topic, for_write=False),
        resolve_format(options, "value", topic, for_write=False),
    )


# ---------------------------------------------------------------------- offset resolution


def _resolve(
    sess: KafkaSession,
    opts: ReadOptions,
    spec: OffsetSpec,
    tps: Sequence[TopicPartition],
    what: str,
) -> Offsets:
    """Concrete offsets of ``tps`` for a starting/ending spec (Spark's KafkaOffsetReader)."""
    retries = opts.fetch_offset_num_retries
    if not tps:
        return {}
    if spec.kind in ("earliest", "latest"):
        ts = EARLIEST if spec.kind == "earliest" else LATEST
        return sess.list_offsets(dict.fromkeys(tps, ts), retries=retries)
    if spec.kind == "offsets":
        given = {(t, p): o for t, parts in spec.offsets.items() for p, o in parts.items()}
        if set(given) != set(tps):
            raise StromOptionError(
                f"If {what}Offsets contains specific offsets, you must specify all TopicPartitions.\n"
                "Use -1 for latest, -2 for earliest.\n"
                f"Specified: {_tp_set(given)} Assigned: {_tp_set(tps)}"
            )
        special = {tp: o for tp, o in given.items() if o in (EARLIEST, LATEST)}
        out = dict(given)
        if special:
            out.update(sess.list_offsets(special, retries=retries))
        return out
    if spec.kind == "timestamps":
        wanted = {(t, p): ts for t, parts in spec.offsets.items() for p, ts in parts.items()}
        if set(wanted) != set(tps):
            raise StromOptionError(
                f"If {what}OffsetsByTimestamp contains specific offsets, you must specify all "
                f"TopicPartitions.\nSpecified: {_tp_set(wanted)} Assigned: {_tp_set(tps)}"
            )
    else:
        wanted = dict.fromkeys(tps, spec.timestamp)
    found = sess.list_offsets(wanted, retries=retries)
    missing = {tp: off for tp, off in found.items() if off < 0}
    if missing:
        if what == "starting" and opts.starting_by_timestamp_strategy == "error":
            tp = sorted(missing)[0]
            raise StromOptionError(
                f"No offset matched from request of topic-partition {tp[0]}-{tp[1]} and timestamp "
                f"{wanted[tp]}."
            )
        found.update(sess.list_offsets(dict.fromkeys(missing, LATEST), retries=retries))
    return found


def _tp_set(tps: Any) -> str:
    return "{" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "}"


def _partitions_checked(sess: KafkaSession, opts: ReadOptions) -> list[TopicPartition]:
    return sess.topic_partitions(opts)


# ---------------------------------------------------------------------- batch reader


class StromBatchReader(DataSourceReader):
    """``spark.read.format("strom")``: reads ``[startingOffsets, endingOffsets)`` once."""

    def __init__(
        self, opts: ReadOptions, formats: tuple[FieldFormat | None, FieldFormat | None] = (None, None)
    ) -> None:
        self.opts = opts
        self.formats = formats

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        sess = session(opts.client)
        tps = _partitions_checked(sess, opts)
        starts = _resolve(sess, opts, opts.starting, tps, "starting")
        ends = _resolve(sess, opts, opts.ending, tps, "ending")
        ranges: list[tuple[TopicPartition, int, int]] = []
        for tp in tps:
            a, b = starts[tp], ends[tp]
            if b < a:
                raise StromOptionError(
                    f"The ending offset {b} of {tp[0]}-{tp[1]} is before its starting offset {a}"
                )
            ranges.append((tp, a, b))
        return plan_ranges(opts, ranges, self.formats)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        assert isinstance(partition, KafkaRange)
        return read_range(partition)


# ---------------------------------------------------------------------- stream reader


class StromStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("strom")``: micro-batches over offset ranges.

    A ``latest`` start and restarts: Spark takes batch 0's start from :meth:`initialOffset`,
    also when it runs batch 0 again after a driver that died between writing the batch's offsets
    and committing it. Spark's Kafka source writes its initial offsets into the checkpoint for
    that case; a Python source cannot reach the checkpoint, and ``latest`` resolved again is
    past where batch 0 began (and past its end, once more data came). So batch 0 of a start that
    involves ``latest`` is empty by construction -- it ends where it starts -- and when batch 0
    is planned from a start past its recorded end, that is the replay of that empty batch, not
    data loss. Records that arrive after the start are read from batch 1 on, exactly once.
    """

    def __init__(
        self, opts: ReadOptions, formats: tuple[FieldFormat | None, FieldFormat | None] = (None, None)
    ) -> None:
        self.opts = opts
        self.formats = formats
        self._target: Offsets | None = None  # Trigger.AvailableNow: never read beyond this
        self._last_trigger = time.monotonic()
        self._initial: dict[str, Any] | None = None  # initialOffset(), resolved once
        starting = opts.starting
        self._latest_start = starting.kind == "latest" or (
            starting.kind == "offsets"
            and any(o == LATEST for parts in starting.offsets.values() for o in parts.values())
        )
        self._first_batch_open = self._latest_start  # batch 0 not planned yet by this reader

    def _session(self) -> KafkaSession:
        return session(self.opts.client)

    def initialOffset(self) -> dict[str, Any]:
        if self._initial is None:  # Spark asks when it plans batch 0 and again when it runs it
            sess = self._session()
            tps = _partitions_checked(sess, self.opts)
            self._initial = to_json_offsets(_resolve(sess, self.opts, self.opts.starting, tps, "starting"))
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def _latest(self) -> Offsets:
        sess = self._session()
        tps = sess.topic_partitions(self.opts)
        return sess.list_offsets(dict.fromkeys(tps, LATEST), retries=self.opts.fetch_offset_num_retries)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        try:
            return to_json_offsets(self._latest())
        except KafkaError:
            return None

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # type: ignore[override]
        opts = self.opts
        first, self._first_batch_open = self._first_batch_open, False
        if first and start == self._initial:
            return start  # batch 0 of a `latest` start is empty (see the class docstring)
        sess = self._session()
        begin = from_json_offsets(start)
        latest = dict(self._target) if self._target is not None else self._latest()
        # partitions that disappeared: keep them at their position (nothing more to read)
        gone = [tp for tp in begin if tp not in latest]
        if gone:
            report_data_loss(
                opts.fail_on_data_loss,
                f"{_tp_set(gone)} are gone.",
            )
        for tp in gone:
            latest[tp] = begin[tp]
        new = [tp for tp in latest if tp not in begin]
        new_from = sess.list_offsets(dict.fromkeys(new, EARLIEST)) if new else {}
        for tp, off in latest.items():
            if tp in begin and off < begin[tp]:
                report_data_loss(
                    opts.fail_on_data_loss,
                    f"{tp[0]}-{tp[1]}'s offset was changed from {begin[tp]} to {off}.",
                )
                latest[tp] = begin[tp]
        sizes = {tp: end - begin.get(tp, new_from.get(tp, end)) for tp, end in latest.items()}
        total = sum(max(s, 0) for s in sizes.values())

        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else None
        if not isinstance(limit, ReadAllAvailable) and min_rows is None:
            # Spark's composite limit (both options): the engine passes only ReadMaxRows
            min_rows = opts.min_offsets_per_trigger
        if self._target is not None:
            min_rows = None  # Trigger.AvailableNow must reach its target, never wait for more
        waited_ms = (time.monotonic() - self._last_trigger) * 1000
        if min_rows is not None and total < min_rows and waited_ms < opts.max_trigger_delay_ms:
            return to_json_offsets(begin)
        if max_rows is not None and total > max_rows:
            latest = _rate_limit(max_rows, begin, new_from, latest, sizes, total)
        self._last_trigger = time.monotonic()
        result = {**begin, **latest}
        return to_json_offsets(result)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        opts = self.opts
        begin = from_json_offsets(start)
        stop = from_json_offsets(end)
        new = [tp for tp in stop if tp not in begin]
        if new:
            earliest = self._session().list_offsets(dict.fromkeys(new, EARLIEST))
            for tp in new:
                begin[tp] = earliest[tp] if stop[tp] >= earliest[tp] else stop[tp]
        replay_first = self._latest_start and start == self._initial
        ranges = []
        for tp, b in sorted(stop.items()):
            a = begin[tp]
            if b < a and replay_first:
                continue  # the empty batch 0 of a `latest` start, run again after a restart
            if b < a:
                report_data_loss(
                    opts.fail_on_data_loss,
                    f"Partition {tp[0]}-{tp[1]}'s offset was changed from {a} to {b}.",
                )
                continue
            ranges.append((tp, a, b))
        return plan_ranges(opts, ranges, self.formats)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        assert isinstance(partition, KafkaRange)
        return read_range(partition)

    def commit(self, end: dict[str, Any]) -> None:
        pass

    def stop(self) -> None:
        pass


def _rate_limit(
    limit: int,
    begin: Offsets,
    new_from: Offsets,
    until: Offsets,
    sizes: Mapping[TopicPartition, int],
    total: int,
) -> Offsets:
    """Spark's KafkaMicroBatchStream.rateLimit: spread ``limit`` over partitions in proportion to
    what each has available."""
    out: Offsets = {}
    for tp, end in until.items():
        size = sizes.get(tp)
        if size is None or size <= 0:
            out[tp] = end
            continue
        start = begin.get(tp, new_from.get(tp, end))
        prorate = limit * (size / total)
        step = int(-(-prorate // 1)) if prorate < 1 else int(prorate)
        out[tp] = min(end, start + step)
    return out


# ---------------------------------------------------------------------- the data source


class StromDataSource(DataSource):
    """``format("strom")``: Spark's Kafka source and sink, in Python, for any Kafka broker."""

    @classmethod
    def name(cls) -> str:
        return "strom"

    def schema(self) -> StructType:
        opts = parse_read_options(self.options, streaming=None)
        return kafka_schema(opts.include_headers, *resolve_read_formats(self.options, opts))

    def _formats(
        self, opts: ReadOptions, schema: StructType
    ) -> tuple[FieldFormat | None, FieldFormat | None]:
        """The formats again (executors need the schema texts); refused when a schema resolved
        now gives other columns than those planned (a new latest version in between)."""
        formats = resolve_read_formats(self.options, opts)
        now = kafka_schema(opts.include_headers, *formats)
        if schema is not None and now.simpleString() != schema.simpleString():
            raise StromOptionError(
                "The key/value schema changed between planning and reading (a new version was "
                f"registered?): planned {schema.simpleString()}, now {now.simpleString()}. Define the "
                "query again, or pin the schema with valueSchemaVersion / valueSchemaId."
            )
        return formats

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_read_options(self.options, streaming=False)
        return StromBatchReader(opts, self._formats(opts, schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = parse_read_options(self.options, streaming=True)
        return StromStreamReader(opts, self._formats(opts, schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from strom.spark.sink import make_batch_writer

        return make_batch_writer(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from strom.spark.sink import make_stream_writer

        return make_stream_writer(self.options, schema)
