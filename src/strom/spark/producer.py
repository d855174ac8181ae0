"""The sink's record producer: rows of Arrow batches to record batches, per topic partition.

A :class:`Producer` groups the rows a Spark task is given per topic partition (Spark's Kafka sink
columns: ``value``, ``key``, ``topic``, ``partition``, ``headers``; the partition of a row without
one is Kafka's default partitioner's: murmur2 of the key, a sticky random partition for null
keys) into record batches of at most ``_MAX_BATCH_RECORDS`` records or ``batch.size`` bytes, and
keeps up to ``_MAX_IN_FLIGHT`` of them in flight; one batch per partition at a time, so a
partition's order (and its sequence numbers) hold. The at-least-once sink
(:mod:`strom.spark.sink`) produces with plain Produce requests; the exactly-once sink
(:mod:`strom.spark.eos`) passes its transaction's ``add_partitions`` and ``produce``.

Error contract: broker errors raise :class:`strom.client.KafkaError`; a null topic too.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import WriterCommitMessage

from strom.client import KafkaError
from strom.client.client import now_ms
from strom.client.partitioner import partition_for_key
from strom.protocol import records as rec
from strom.spark.arrow_encode import byte_lengths, encodable, encode_records, partitions_for_keys
from strom.spark.formats import encode_column
from strom.spark.kafka_io import KafkaSession, session
from strom.spark.options import WriteOptions

__all__ = ["Producer", "WriteCommit", "default_partition", "write_rows"]

_MAX_BATCH_RECORDS = 10_000
_MAX_IN_FLIGHT = 8

TopicPartition = tuple[str, int]


def default_partition(key: bytes, num_partitions: int) -> int:
    """``Utils.toPositive(murmur2(key)) % numPartitions`` (Kafka's default partitioner)."""
    return partition_for_key(key, num_partitions)


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


class Producer:
    """Groups records per topic partition into batches and keeps a few produce requests in
    flight. In exactly-once mode the producer id and epoch are the transaction's,
    ``on_new_partition`` adds partitions to it before their first batch and ``send`` produces a
    batch in it."""

    def __init__(
        self,
        sess: KafkaSession,
        opts: WriteOptions,
        producer_id: int = -1,
        producer_epoch: int = -1,
        on_new_partition: Callable[[list[TopicPartition]], Awaitable[None]] | None = None,
        send: Callable[[TopicPartition, bytes], Awaitable[None]] | None = None,
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
        self.send = send
        self.written = 0
        self.ready: list[tuple[tuple[str, int], list[rec.RecordInput] | Encoded]] = []
        self.vectorised_rows = 0  # rows that took the Arrow path (strom.spark.arrow_encode)

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
        if n and self._add_vectorised(rows, names):
            if len(self.ready) >= _MAX_IN_FLIGHT:
                self.send_ready()
            return
        if self.opts.topic is not None:
            topics: list[Any] = [self.opts.topic] * n
        else:
            topics = rows.column(names["topic"]).to_pylist()

        def where(i: int) -> str:
            return f"row {i} of a batch for topic {topics[i]}"

        values: Sequence[Any]
        keys: Sequence[Any]
        if self.opts.value_format is not None:
            values = encode_column(self.opts.value_format, rows.column(names["value"]), where)
        else:
            values = rows.column(names["value"]).to_pylist()
        if "key" not in names:
            keys = [None] * n
        elif self.opts.key_format is not None:
            keys = encode_column(self.opts.key_format, rows.column(names["key"]), where)
        else:
            keys = rows.column(names["key"]).to_pylist()
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

    def _add_vectorised(self, rows: pa.RecordBatch, names: dict[str, int]) -> bool:
        """The common shapes of a batch (binary or string key and value, no headers, one topic,
        partitions given for every row or for none, keys all null or none null) encoded
        column-wise (:mod:`strom.spark.arrow_encode`): no Python object per row. False: the
        batch takes the per-row path."""
        opts = self.opts
        if not (_plain(opts.value_format) and _plain(opts.key_format)):
            return False
        n = rows.num_rows
        if "headers" in names and rows.column(names["headers"]).null_count != n:
            return False
        value = rows.column(names["value"])
        key = rows.column(names["key"]) if "key" in names else None
        if not (encodable(value) and encodable(key)):
            return False
        if opts.topic is not None:
            topic = opts.topic
        else:
            tcol = rows.column(names["topic"])
            first = tcol[0].as_py()
            if first is None or tcol.null_count or not pc.all(pc.equal(tcol, first)).as_py():
                return False
            topic = str(first)
        pcol = rows.column(names["partition"]) if "partition" in names else None
        parts: npt.NDArray[np.int64] | None = None
        if pcol is not None and pcol.null_count == 0:
            parts = np.asarray(pcol.to_numpy(zero_copy_only=False), dtype=np.int64)
        elif pcol is not None and pcol.null_count != n:
            return False
        elif key is not None and key.null_count == 0:
            parts = partitions_for_keys(key, self.partitions_of(topic))
        elif key is not None and key.null_count != n:
            return False  # some keys null: their sticky partition is per row
        ts = now_ms()
        groups: list[tuple[int, npt.NDArray[np.int64] | None]]
        if parts is None:  # no key, no partition: the sticky partition takes the whole batch
            part = self.sticky.get(topic)
            if part is None:
                part = random.randrange(self.partitions_of(topic))
            groups = [(part, None)]
            self.sticky.pop(topic, None)
        else:
            order = np.argsort(parts, kind="stable")
            sorted_parts = parts[order]
            cuts = np.flatnonzero(np.diff(sorted_parts)) + 1
            groups = [(int(parts[c[0]]), c) for c in np.split(order, cuts)]
        # a row's size as the per-row path counts it: value + key + 16
        sizes = np.maximum(byte_lengths(value), 0) + 16
        if key is not None and key.null_count != n:
            sizes += np.maximum(byte_lengths(key), 0)
        limit = self.opts.client.batch_size
        for part, idx in groups:
            tp = (topic, part)
            if tp in self.pending:  # rows of this partition from the per-row path go first
                self.ready.append((tp, self.pending.pop(tp)))
                self.pending_bytes.pop(tp, None)
            rows_idx = np.arange(n) if idx is None else idx
            for chunk in _chunks(rows_idx, sizes[rows_idx], _MAX_BATCH_RECORDS, limit):
                consecutive = idx is None
                body, _size = encode_records(_pick(key, chunk, consecutive), _pick(value, chunk, consecutive))
                self.ready.append((tp, Encoded(body, len(chunk), ts)))
        self.vectorised_rows += n
        return True

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

    async def _send_all(self, ready: list[tuple[tuple[str, int], list[rec.RecordInput] | Encoded]]) -> None:
        client = self.sess.client
        settings = self.opts.client
        # one batch per partition at a time keeps per-partition order (and sequence numbers)
        by_tp: dict[tuple[str, int], list[list[rec.RecordInput] | Encoded]] = {}
        for tp, records in ready:
            by_tp.setdefault(tp, []).append(records)
        if self.on_new_partition is not None:
            await self.on_new_partition([tp for tp in by_tp])

        async def one(tp: tuple[str, int], batches: list[list[rec.RecordInput] | Encoded]) -> None:
            for records in batches:
                count = records.count if isinstance(records, Encoded) else len(records)
                seq = -1
                if self.producer_id >= 0:
                    seq = self.sequences.get(tp, 0)
                    self.sequences[tp] = seq + count
                transactional = self.producer_id >= 0 and self.on_new_partition is not None
                if isinstance(records, Encoded):
                    batch = rec.build_batch_from_records(
                        records.body, count, records.timestamp, records.timestamp,
                        compression=settings.compression, producer_id=self.producer_id,
                        producer_epoch=self.producer_epoch, base_sequence=seq, transactional=transactional,
                    )
                else:
                    batch = rec.build_batch(
                        records,
                        compression=settings.compression,
                        producer_id=self.producer_id,
                        producer_epoch=self.producer_epoch,
                        base_sequence=seq,
                        transactional=transactional,
                    )
                await self._produce(client, tp, batch, settings.acks)
                self.written += count

        await asyncio.gather(*(one(tp, b) for tp, b in by_tp.items()))

    async def _produce(self, client: Any, tp: tuple[str, int], batch: bytes, acks: int) -> None:
        if self.send is None:
            await client.produce(tp[0], tp[1], batch, acks=acks)
        else:
            await self.send(tp, batch)


@dataclass(frozen=True)
class Encoded:
    """The records of one batch already encoded column-wise (one timestamp for all)."""

    body: bytes
    count: int
    timestamp: int


def _plain(fmt: Any) -> bool:
    """A key or value format whose bytes are the column's own (binary, or UTF-8 strings)."""
    return fmt is None or getattr(fmt, "format", None) in ("binary", "string")


def _pick(col: pa.Array | None, rows: npt.NDArray[np.int64], consecutive: bool) -> pa.Array | None:
    """The ``rows`` of ``col``: a slice (no copy) when they are consecutive, else a take."""
    if col is None:
        return None
    return col.slice(int(rows[0]), len(rows)) if consecutive else col.take(pa.array(rows))


def _chunks(idx: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64], max_records: int, max_bytes: int
            ) -> Iterator[npt.NDArray[np.int64]]:
    """``idx`` cut into runs of at most ``max_records`` rows and about ``max_bytes`` bytes (a run
    ends at the row that reaches the limit; a single larger row is a run of its own)."""
    start, n = 0, len(idx)
    csum = np.cumsum(sizes)
    while start < n:
        base = csum[start - 1] if start else 0
        end = int(np.searchsorted(csum, base + max_bytes, side="left")) + 1
        end = max(start + 1, min(end, start + max_records, n))
        yield idx[start:end]
        start = end


def write_rows(opts: WriteOptions, batches: Iterator[pa.RecordBatch]) -> int:
    sess = session(opts.client)
    producer = Producer(sess, opts)
    for b in batches:
        producer.add(b)
    producer.flush()
    return producer.written
