"""The ``strom`` sink: Spark's Kafka sink columns and options, for batch and streaming writes.

Columns (as Spark's ``KafkaWriter``): ``value`` (required, string or binary), ``key`` (string or
binary), ``topic`` (string; the ``topic`` option overrides it), ``partition`` (int; else Kafka's
default partitioner: murmur2 of the key, a sticky random partition for null keys), ``headers``
(``array<struct<key:string,value:binary>>``). Records get the producer's CreateTime (now).

Each task produces the rows it is given, grouped per topic partition into record batches, several
requests in flight at once. At-least-once by default (as Spark's Kafka sink); with
``exactlyOnce=true`` a streaming write goes through Kafka transactions, see :mod:`strom.spark.eos`.

Error contract: schema problems raise :class:`StromOptionError` when the query starts;
broker failures raise :class:`strom.client.KafkaError` from the task (Spark retries the task).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

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

from strom.client import KafkaError
from strom.client.client import now_ms
from strom.client.partitioner import murmur2, partition_for_key
from strom.protocol import records as rec
from strom.spark.kafka_io import KafkaSession, session
from strom.spark.options import StromOptionError, WriteOptions, parse_write_options

__all__ = [
    "StromBatchWriter",
    "StromStreamWriter",
    "WriteCommit",
    "make_batch_writer",
    "make_stream_writer",
    "murmur2",
    "validate_write_schema",
]

_MAX_BATCH_RECORDS = 10_000
_MAX_IN_FLIGHT = 8


def default_partition(key: bytes, num_partitions: int) -> int:
    """``Utils.toPositive(murmur2(key)) % numPartitions`` (Kafka's default partitioner)."""
    return partition_for_key(key, num_partitions)


_HEADERS = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))


def _is(dt: DataType, *types: type[DataType]) -> bool:
    return isinstance(dt, types)


def validate_write_schema(schema: StructType, opts: WriteOptions) -> None:
    """Spark's ``KafkaWriter.validateQuery`` checks, with its messages."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
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


@dataclass
class WriteCommit(WriterCommitMessage):
    """What one task wrote: records per topic, and (exactly-once mode) its open transaction."""

    records: int
    transactional_id: str | None = None
    producer_id: int = -1
    producer_epoch: int = -1
    skipped: bool = False


def _as_bytes(v: Any) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v.encode()
    return bytes(v)


class _Producer:
    """Groups records per topic partition into batches and keeps a few produce requests in
    flight. ``transactional`` is (producer_id, epoch, txn callback) in exactly-once mode."""

    def __init__(
        self,
        sess: KafkaSession,
        opts: WriteOptions,
        producer_id: int = -1,
        producer_epoch: int = -1,
        on_new_partition: Any = None,
    ) -> None:
        self.sess = sess
        self.opts = opts
        self.pending: dict[tuple[str, int], list[rec.RecordInput]] = {}
        self.pending_bytes: dict[tuple[str, int], int] = {}
        self.sequences: dict[tuple[str, int], int] = {}
        self.num_partitions: dict[str, int] = {}
        self.sticky: dict[str, int] = {}
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.on_new_partition = on_new_partition
        self.written = 0
        self.ready: list[tuple[tuple[str, int], list[rec.RecordInput]]] = []

    def partitions_of(self, topic: str) -> int:
        n = self.num_partitions.get(topic)
        if n is None:
            tm = self.sess.run(self.sess.client.topic(topic, refresh=True))
            n = len(tm.partitions)
            self.num_partitions[topic] = n
        return n

    def add(self, rows: pa.RecordBatch) -> None:
        names = {n.lower(): i for i, n in enumerate(rows.schema.names)}
        n = rows.num_rows
        values = rows.column(names["value"]).to_pylist()
        keys = rows.column(names["key"]).to_pylist() if "key" in names else [None] * n
        if self.opts.topic is not None:
            topics: list[Any] = [self.opts.topic] * n
        else:
            topics = rows.column(names["topic"]).to_pylist()
        parts = rows.column(names["partition"]).to_pylist() if "partition" in names else [None] * n
        headers = rows.column(names["headers"]).to_pylist() if "headers" in names else None
        ts = now_ms()
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise KafkaError(
                    -1,
                    "Null topic present in the data. Use the topic option for setting a topic.",
                )
            key = _as_bytes(keys[i])
            part = parts[i]
            if part is None:
                num = self.partitions_of(topic)
                if key is not None:
                    part = default_partition(key, num)
                else:
                    part = self.sticky.get(topic)
                    if part is None:
                        part = random.randrange(num)
                        self.sticky[topic] = part
            hdrs: list[tuple[str, bytes | None]] = []
            if headers is not None and headers[i]:
                hdrs = [(h["key"], _as_bytes(h["value"])) for h in headers[i]]
            value = _as_bytes(values[i])
            tp = (topic, int(part))
            lst = self.pending.get(tp)
            if lst is None:
                lst = self.pending[tp] = []
                self.pending_bytes[tp] = 0
            lst.append((key, value, hdrs, ts))
            size = self.pending_bytes[tp] + len(value or b"") + len(key or b"") + 16
            self.pending_bytes[tp] = size
            if len(lst) >= _MAX_BATCH_RECORDS or size >= self.opts.client.batch_size:
                self.ready.append((tp, lst))
                del self.pending[tp]
                del self.pending_bytes[tp]
                self.sticky.pop(topic, None)
        if len(self.ready) >= _MAX_IN_FLIGHT:
            self.send_ready()

    def flush(self) -> None:
        self.ready.extend(self.pending.items())
        self.pending.clear()
        self.pending_bytes.clear()
        self.send_ready()

    def send_ready(self) -> None:
        if not self.ready:
            return
        ready, self.ready = self.ready, []
        self.sess.run(self._send_all(ready))

    async def _send_all(self, ready: list[tuple[tuple[str, int], list[rec.RecordInput]]]) -> None:
        client = self.sess.client
        settings = self.opts.client
        # one batch per partition at a time keeps per-partition order (and sequence numbers)
        by_tp: dict[tuple[str, int], list[list[rec.RecordInput]]] = {}
        for tp, records in ready:
            by_tp.setdefault(tp, []).append(records)
        if self.on_new_partition is not None:
            await self.on_new_partition([tp for tp in by_tp])

        async def one(tp: tuple[str, int], batches: list[list[rec.RecordInput]]) -> None:
            for records in batches:
                seq = -1
                if self.producer_id >= 0:
                    seq = self.sequences.get(tp, 0)
                    self.sequences[tp] = seq + len(records)
                batch = rec.build_batch(
                    records,
                    compression=settings.compression,
                    producer_id=self.producer_id,
                    producer_epoch=self.producer_epoch,
                    base_sequence=seq,
                    transactional=self.producer_id >= 0 and self.on_new_partition is not None,
                )
                await self._produce(client, tp, batch, settings.acks)
                self.written += len(records)

        await asyncio.gather(*(one(tp, b) for tp, b in by_tp.items()))

    async def _produce(self, client: Any, tp: tuple[str, int], batch: bytes, acks: int) -> None:
        if self.on_new_partition is None:
            await client.produce(tp[0], tp[1], batch, acks=acks)
        else:
            from strom.spark.eos import produce_transactional

            await produce_transactional(self.sess, self.opts, tp, batch)


def write_rows(opts: WriteOptions, batches: Iterator[pa.RecordBatch]) -> int:
    sess = session(opts.client)
    producer = _Producer(sess, opts)
    for b in batches:
        producer.add(b)
    producer.flush()
    return producer.written


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


def make_batch_writer(options: Mapping[str, str], schema: StructType) -> DataSourceWriter:
    opts = parse_write_options(options)
    validate_write_schema(schema, opts)
    if opts.exactly_once:
        raise StromOptionError("exactlyOnce is only available for streaming writes (writeStream)")
    return StromBatchWriter(opts)


def make_stream_writer(options: Mapping[str, str], schema: StructType) -> DataSourceStreamWriter:
    opts = parse_write_options(options)
    validate_write_schema(schema, opts)
    if opts.exactly_once:
        from strom.spark.eos import ExactlyOnceStreamWriter

        if opts.topic is None:
            raise StromOptionError("exactlyOnce=true needs the 'topic' option (it names the batch marker)")

        return ExactlyOnceStreamWriter(opts)
    return StromStreamWriter(opts)
