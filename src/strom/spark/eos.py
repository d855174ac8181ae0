"""Exactly-once streaming sink (``exactlyOnce=true``): each micro-batch in Kafka transactions.

Theory of operation
-------------------
Spark replays a micro-batch after a crash if its commit was not recorded in the checkpoint; a
plain Kafka sink then writes it twice. Here every write task of micro-batch ``B`` of query ``Q``
uses the transactional id ``<prefix>-<Q>-<task partition>`` (stable across restarts: the query id
lives in the checkpoint, and a replayed batch is re-planned with the same task partitions):

1. ``InitProducerId`` for that id: fences any zombie of an earlier attempt and aborts its open
   transaction.
2. ``OffsetFetch`` (require_stable) of the consumer group named like the transactional id: the
   offset committed there is ``last written batch + 1``. If batch ``B`` is already in, the task
   writes nothing (a replay of a batch whose transaction committed).
3. Produce the rows transactionally (``AddPartitionsToTxn`` first per partition), then
   ``AddOffsetsToTxn`` + ``TxnOffsetCommit`` of ``B + 1`` to that group: the marker is committed
   atomically with the data.
4. The transaction is left open; the commit message carries (id, producer id, epoch). The driver's
   ``commit`` sends ``EndTxn(commit)`` for every task, ``abort`` sends ``EndTxn(abort)``: a batch
   is all-or-nothing for read_committed consumers, and a crash anywhere leaves either the marker
   (skip on replay) or an open/aborted transaction (rewritten on replay).

Requirements: a deterministic query (a replay must give each task the same rows) and a broker
with Kafka transactions.

Error contract: broker errors raise :class:`strom.client.KafkaError` from the task or the driver
commit; Spark retries tasks and fails the query on driver errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from strom.client import KafkaError
from strom.client.connection import KafkaConnection
from strom.spark.kafka_io import KafkaSession, session
from strom.spark.options import WriteOptions
from strom.spark.producer import Producer, WriteCommit

__all__ = ["ExactlyOnceStreamWriter"]

FIND_COORDINATOR = 10
OFFSET_FETCH = 9
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28
PRODUCE = 0

_COORDINATOR_RETRY = frozenset(
    {14, 15, 16, 51}
)  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TXNS


async def find_coordinator(sess: KafkaSession, key: str, key_type: int) -> KafkaConnection:
    """The group (0) or transaction (1) coordinator for ``key``."""
    for attempt in range(10):
        conn = await sess.client.any_connection()
        resp = await conn.request(
            FIND_COORDINATOR, {"key": key, "key_type": key_type, "coordinator_keys": [key]}
        )
        entries = getattr(resp, "coordinators", None)
        if entries:
            e = entries[0]
            code, node, host, port = int(e.error_code), int(e.node_id), e.host, int(e.port)
        else:
            code, node, host, port = int(resp.error_code), int(resp.node_id), resp.host, int(resp.port)
        if code == 0 and node >= 0:
            return await sess.client.connection(host, port)
        if code not in _COORDINATOR_RETRY or attempt == 9:
            raise KafkaError(code, f"find coordinator for {key!r}")
        await asyncio.sleep(0.1 * (attempt + 1))
    raise AssertionError("unreachable")


async def _retrying(
    sess: KafkaSession,
    key: str,
    key_type: int,
    api: int,
    body: dict[str, Any],
    max_version: int | None = None,
) -> Any:
    for attempt in range(10):
        conn = await find_coordinator(sess, key, key_type)
        resp = await conn.request(api, body, max_version=max_version)
        code = int(getattr(resp, "error_code", 0) or 0)
        if code in _COORDINATOR_RETRY and attempt < 9:
            await asyncio.sleep(0.1 * (attempt + 1))
            continue
        if code:
            raise KafkaError(code, f"API {api} for {key!r}")
        return resp
    raise AssertionError("unreachable")


class _Txn:
    """One task's transaction (runs on the executor's session loop)."""

    def __init__(self, sess: KafkaSession, opts: WriteOptions, txn_id: str) -> None:
        self.sess = sess
        self.opts = opts
        self.txn_id = txn_id
        self.producer_id = -1
        self.producer_epoch = -1
        self.partitions: set[tuple[str, int]] = set()
        self.sequences: dict[tuple[str, int], int] = {}

    async def init(self) -> None:
        resp = await _retrying(
            self.sess,
            self.txn_id,
            1,
            INIT_PRODUCER_ID,
            {
                "transactional_id": self.txn_id,
                "transaction_timeout": self.opts.client.transaction_timeout_ms,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        self.producer_id, self.producer_epoch = int(resp.producer_id), int(resp.producer_epoch)

    async def committed_batch(self, topic: str) -> int:
        conn = await find_coordinator(self.sess, self.txn_id, 0)
        resp = await conn.request(
            OFFSET_FETCH,
            {
                "group_id": self.txn_id,
                "topics": [{"name": topic, "partition_indexes": [0]}],
                "require_stable": True,
            },
            max_version=7,
        )
        for t in resp.topics or ():
            for p in t.partitions:
                if int(p.error_code) == 0 and int(p.committed_offset) > 0:
                    return int(p.committed_offset) - 1
        return -1

    async def add_partitions(self, tps: list[tuple[str, int]]) -> None:
        new = [tp for tp in tps if tp not in self.partitions]
        if not new:
            return
        by_topic: dict[str, list[int]] = {}
        for t, p in new:
            by_topic.setdefault(t, []).append(p)
        resp = await _retrying(
            self.sess,
            self.txn_id,
            1,
            ADD_PARTITIONS_TO_TXN,
            {
                "v3_and_below_transactional_id": self.txn_id,
                "v3_and_below_producer_id": self.producer_id,
                "v3_and_below_producer_epoch": self.producer_epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            },
            max_version=3,
        )
        for tr in resp.results_by_topic_v3_and_below:
            for pr in tr.results_by_partition:
                if int(pr.partition_error_code):
                    raise KafkaError(
                        int(pr.partition_error_code), f"add {tr.name}-{pr.partition_index} to txn"
                    )
        self.partitions.update(new)

    async def produce(self, tp: tuple[str, int], batch: bytes) -> None:
        t, conn = await self.sess.client._leader(tp[0], tp[1], False)
        resp = await conn.request(
            PRODUCE,
            {
                "transactional_id": self.txn_id,
                "acks": -1,
                "timeout": self.opts.client.request_timeout_ms,
                "topic_data": [
                    {
                        "name": tp[0],
                        "topic_id": t.topic_id,
                        "partition_data": [{"index": tp[1], "records": batch}],
                    }
                ],
            },
            max_version=None if t.topic_id is not None else 12,
        )
        for tr in resp.responses:
            for pr in tr.partition_responses:
                if int(pr.error_code):
                    raise KafkaError(int(pr.error_code), f"transactional produce to {tp[0]}-{tp[1]}")

    async def commit_marker(self, topic: str, batch_id: int) -> None:
        await _retrying(
            self.sess,
            self.txn_id,
            1,
            ADD_OFFSETS_TO_TXN,
            {
                "transactional_id": self.txn_id,
                "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch,
                "group_id": self.txn_id,
            },
        )
        conn = await find_coordinator(self.sess, self.txn_id, 0)
        resp = await conn.request(
            TXN_OFFSET_COMMIT,
            {
                "transactional_id": self.txn_id,
                "group_id": self.txn_id,
                "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch,
                "generation_id": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": batch_id + 1,
                                "committed_leader_epoch": -1,
                                "committed_metadata": f"spark batch {batch_id}",
                            }
                        ],
                    }
                ],
            },
        )
        for tr in resp.topics:
            for pr in tr.partitions:
                if int(pr.error_code):
                    raise KafkaError(int(pr.error_code), f"commit batch marker of {self.txn_id}")


async def end_txn(sess: KafkaSession, txn_id: str, pid: int, epoch: int, commit: bool) -> None:
    await _retrying(
        sess,
        txn_id,
        1,
        END_TXN,
        {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "committed": commit},
        # v4: the classic protocol (the epoch stays). v5 is transaction version 2, whose bumped
        # epoch a caller must adopt; each task here starts with InitProducerId anyway
        max_version=4,
    )


class ExactlyOnceStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        ctx = TaskContext.get()
        if ctx is None:
            raise RuntimeError("exactlyOnce writes must run in a Spark task")
        query_id = ctx.getLocalProperty("sql.streaming.queryId") or "batch"
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId") or "0")
        prefix = self.opts.eos_id or self.opts.client.transactional_id_prefix or "strom-spark"
        txn_id = f"{prefix}-{query_id}-{ctx.partitionId()}"
        sess = session(self.opts.client)
        txn = _Txn(sess, self.opts, txn_id)
        sess.run(txn.init())
        marker_topic = self.opts.eos_marker_topic or self.opts.topic
        assert marker_topic is not None
        if sess.run(txn.committed_batch(marker_topic)) >= batch_id:
            for _ in iterator:
                pass
            return WriteCommit(0, txn_id, txn.producer_id, txn.producer_epoch, skipped=True)
        try:
            producer = Producer(
                sess, self.opts, txn.producer_id, txn.producer_epoch, txn.add_partitions, txn.produce
            )
            producer.sequences = txn.sequences
            for b in iterator:
                producer.add(b)
            producer.flush()
            sess.run(txn.commit_marker(marker_topic, batch_id))
        except BaseException:
            sess.run(end_txn(sess, txn_id, txn.producer_id, txn.producer_epoch, False))
            raise
        return WriteCommit(producer.written, txn_id, txn.producer_id, txn.producer_epoch)

    def _end(self, messages: list[WriterCommitMessage | None], commit: bool) -> None:
        sess = session(self.opts.client)
        for m in messages:
            if isinstance(m, WriteCommit) and m.transactional_id and not m.skipped:
                sess.run(end_txn(sess, m.transactional_id, m.producer_id, m.producer_epoch, commit))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._end(messages, True)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._end(messages, False)
