"""The ``strom`` sink: Spark's Kafka sink columns and options, for batch and streaming writes.

Columns (as Spark's ``KafkaWriter``): ``value`` (required, string or binary), ``key`` (string or
binary), ``topic`` (string; the ``topic`` option overrides it), ``partition`` (int; else Kafka's
default partitioner: murmur2 of the key, a sticky random partition for null keys), ``headers``
(``array<struct<key:string,value:binary>>``). Records get the producer's CreateTime (now).

Each task produces the rows it is given, grouped per topic partition into record batches, several
requests in flight at once (:mod:`strom.spark.producer`). At-least-once by default (as Spark's
Kafka sink); with ``exactlyOnce=true`` a streaming write goes through Kafka transactions, see
:mod:`strom.spark.eos`.

Error contract: schema problems raise :class:`StromOptionError` when the query starts;
broker failures raise :class:`strom.client.KafkaError` from the task (Spark retries the task).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from strom.client.partitioner import murmur2
from strom.spark.eos import ExactlyOnceStreamWriter
from strom.spark.formats import check_write_type, resolve_format
from strom.spark.options import StromOptionError, WriteOptions, parse_write_options
from strom.spark.producer import WriteCommit, write_rows

__all__ = [
    "StromBatchWriter",
    "StromStreamWriter",
    "WriteCommit",
    "make_batch_writer",
    "make_stream_writer",
    "murmur2",
    "validate_write_schema",
]

_HEADERS = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))


def _is(dt: DataType, *types: type[DataType]) -> bool:
    return isinstance(dt, types)


def validate_write_schema(schema: StructType, opts: WriteOptions) -> None:
    """Spark's ``KafkaWriter.validateQuery`` checks, with its messages (the key and value
    columns checked against their ``keyFormat``/``valueFormat`` when they have one)."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if opts.key_format is not None and "key" in fields:
        check_write_type(opts.key_format, fields.pop("key"))
    if opts.value_format is not None and "value" in fields:
        check_write_type(opts.value_format, fields["value"])
        fields["value"] = BinaryType()
    if opts.topic is None and "topic" not in fields:
        raise StromOptionError(
            "topic option required when no 'topic' attribute is present. Use the topic option for "
            "setting a topic."
        )
    if "topic" in fields and not _is(fields["topic"], StringType):
        raise StromOptionError(f"Topic type must be a StringType, found {fields['topic'].simpleString()}")
    if "key" in fields and not _is(fields["key"], StringType, BinaryType):
        raise StromOptionError(
            f"key attribute type must be a StringType or BinaryType, found {fields['key'].simpleString()}"
        )
    if "value" not in fields:
        raise StromOptionError("Required attribute 'value' not found")
    if not _is(fields["value"], StringType, BinaryType):
        raise StromOptionError(
            f"value attribute type must be a StringType or BinaryType, found {fields['value'].simpleString()}"
        )
    if "headers" in fields:
        h = fields["headers"]
        ok = (
            isinstance(h, ArrayType)
            and isinstance(h.elementType, StructType)
            and [f.name for f in h.elementType.fields] == ["key", "value"]
            and isinstance(h.elementType.fields[0].dataType, StringType)
            and isinstance(h.elementType.fields[1].dataType, BinaryType)
        )
        if not ok:
            raise StromOptionError(
                "headers attribute type must be an ArrayType(StructType(key string, value binary)), "
                f"found {h.simpleString()}"
            )
    if "partition" in fields and not _is(fields["partition"], IntegerType):
        raise StromOptionError(
            f"partition attribute type must be an IntegerType, found {fields['partition'].simpleString()}"
        )


class StromBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return WriteCommit(write_rows(self.opts, iterator))


class StromStreamWriter(DataSourceStreamArrowWriter):
    """At-least-once streaming sink (Spark's Kafka sink semantics)."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return WriteCommit(write_rows(self.opts, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


def _with_formats(options: Mapping[str, str], opts: WriteOptions) -> WriteOptions:
    """``keyFormat``/``valueFormat`` settled: schemas fetched (or registered) once, when the
    query starts; the subjects follow the ``topic`` option."""
    key = resolve_format(options, "key", opts.topic, for_write=True)
    value = resolve_format(options, "value", opts.topic, for_write=True)
    if key is None and value is None:
        return opts
    return dataclasses.replace(opts, key_format=key, value_format=value)


def make_batch_writer(options: Mapping[str, str], schema: StructType) -> DataSourceWriter:
    opts = _with_formats(options, parse_write_options(options))
    validate_write_schema(schema, opts)
    if opts.exactly_once:
        raise StromOptionError("exactlyOnce is only available for streaming writes (writeStream)")
    return StromBatchWriter(opts)


def make_stream_writer(options: Mapping[str, str], schema: StructType) -> DataSourceStreamWriter:
    opts = _with_formats(options, parse_write_options(options))
    validate_write_schema(schema, opts)
    if opts.exactly_once:
        if opts.topic is None and opts.eos_marker_topic is None:
            raise StromOptionError(
                "exactlyOnce=true needs the 'topic' option (it names the batch marker) or "
                "'exactlyOnce.markerTopic' when the rows carry their topic"
            )

        return ExactlyOnceStreamWriter(opts)
    return StromStreamWriter(opts)
