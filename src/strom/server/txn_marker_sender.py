"""Transaction markers for partitions led by other brokers (Kafka's ``TransactionMarkerChannelManager``).

Theory of operation: in a cluster the partitions of a transaction are led by several brokers,
while one broker (the leader of the transactional id's ``__transaction_state`` partition)
coordinates it. :meth:`Broker.write_markers <strom.server.broker.Broker.write_markers>` writes
the markers of the partitions led here itself and hands the others to :class:`TxnMarkerSender`,
which sends one WriteTxnMarkers request per leader (the metadata cache names it, at its endpoint
of the broker's default listener) and waits for the answers; the leader writes the control
batches (and, for a ``__consumer_offsets`` partition, completes the group coordinator's pending
transactional offsets) before it answers.

A partition whose leader is unknown, moving (NOT_LEADER_OR_FOLLOWER, no leader) or unreachable
is tried again, its leader looked up again each time (it may have moved here), every
``RETRY_BACKOFF_S`` until ``TIMEOUT_S``, as is one whose ISR did not catch up in time
(REQUEST_TIMED_OUT); then the write fails and the coordinator answers NOT_COORDINATOR with the
transaction still prepared. One whose leader refuses the marker because the ISR is below
``min.insync.replicas`` (NOT_ENOUGH_REPLICAS), or took it while the ISR shrank below it
(NOT_ENOUGH_REPLICAS_AFTER_APPEND: written again later, a duplicate marker being harmless as
in Kafka), fails the write at once, once the others are done, so the coordinator does not wait
while the ISR is down. Either way the coordinator writes
the markers again every ``MARKER_RETRY_BACKOFF_MS`` until they are written, as Kafka's channel
retries without end (:mod:`strom.coordinator.transaction_coordinator`).
A partition the metadata no longer has (its topic was deleted) needs no marker, as in Kafka.

Produce v12+ (transaction version 2) to a partition led here for a transactional id another
broker coordinates adds the partition to the transaction there (:meth:`TxnMarkerSender.add_partitions`,
AddPartitionsToTxn v5, Kafka's ``AddPartitionsToTxnManager``).

Each marker carries the coordinator epoch (the leader epoch of the transactional id's
``__transaction_state`` partition at the coordinator); a leader holding a newer coordinator's
marker for the producer refuses it with TRANSACTION_COORDINATOR_FENCED, and the write stops at
once (not retried: the partition's new coordinator owns the transaction now), as Kafka's.

Not yet: TLS/SASL on the inter-broker connection (the default listener must be PLAINTEXT).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ..client.client import Client
from ..client.errors import KafkaConnectionError
from ..log.errors import LogError
from ..protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("strom.txn_markers")

WRITE_TXN_MARKERS = 27
ADD_PARTITIONS_TO_TXN = 24
TXN_TOPIC = "__transaction_state"
TopicPartition = tuple[str, int]


# the ISR is below min.insync.replicas: failed at once, written again by the coordinator later
TOO_FEW_REPLICAS = (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
RETRIED = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT, *TOO_FEW_REPLICAS)


class MarkersNotWritten(LogError):
    """``Broker.write_local_markers`` left the markers of some partitions unwritten or
    unreplicated: ``failed`` maps each to why (NOT_LEADER_OR_FOLLOWER: its leadership moved;
    REQUEST_TIMED_OUT: the ISR did not catch up in time; NOT_ENOUGH_REPLICAS: its ISR is below
    ``min.insync.replicas``, Kafka's refusal of an acks=-1 append; NOT_ENOUGH_REPLICAS_AFTER_APPEND:
    the ISR shrank below it while the marker waited, so the HW passed it with too few replicas
    holding it). The other partitions' markers are written and replicated."""

    def __init__(self, failed: dict[TopicPartition, int]) -> None:
        names = ", ".join(f"{t}-{p} ({ErrorCode(c).name})" for (t, p), c in sorted(failed.items()))
        super().__init__(f"transaction markers not written to {names}")
        self.failed = failed
        self.error_code = next(iter(failed.values()))

    @property
    def retriable(self) -> bool:
        """Every failed partition is mended by writing its marker again, wherever it is led
        now (or once its ISR recovers)."""
        return all(code in RETRIED for code in self.failed.values())


class TxnMarkerSender:
    """Sends WriteTxnMarkers to the leaders of a transaction's partitions (see the module doc)."""

    TIMEOUT_S = 30.0
    RETRY_BACKOFF_S = 0.1

    def __init__(self, broker: Broker, listener: str) -> None:
        self.broker = broker
        self.listener = listener
        self._clients: dict[tuple[str, int], Client] = {}

    async def write(self, producer_id: int, producer_epoch: int, commit: bool,
                    partitions: list[TopicPartition], coordinator_epoch: int = 0) -> None:
        """The markers of ``partitions`` (led elsewhere, or moving), written by their leaders.
        Raises KafkaError when some could not be written in ``TIMEOUT_S``, or at once (after
        the others) NOT_ENOUGH_REPLICAS when some partitions' ISR is below
        ``min.insync.replicas`` (the coordinator tries again later, its lock free meanwhile)."""
        broker = self.broker
        cache = broker.metadata_cache
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.TIMEOUT_S
        pending = list(partitions)
        too_few: list[TopicPartition] = []  # refused: ISR below min.insync.replicas
        while True:
            by_leader: dict[int, list[TopicPartition]] = {}
            retry: list[TopicPartition] = []
            for tp in pending:
                leader = cache.leader_id(*tp)
                if leader is None:
                    continue  # deleted since it joined the transaction: no marker needed
                if leader < 0:
                    retry.append(tp)
                else:
                    by_leader.setdefault(leader, []).append(tp)
            failed: list[tuple[TopicPartition, int]] = []
            here = by_leader.pop(broker.node_id, [])
            if here:  # led here now
                try:
                    await broker.write_local_markers(producer_id, producer_epoch, commit, here,
                                                     coordinator_epoch)
                except MarkersNotWritten as e:  # moved before the ISR had them, ISR too small: again
                    if not e.retriable:
                        raise
                    failed.extend(e.failed.items())
            results = await asyncio.gather(
                *(self._send(leader, producer_id, producer_epoch, commit, tps, coordinator_epoch)
                  for leader, tps in by_leader.items())
            )
            for answered in results:
                failed.extend(answered)
            fenced = [tp for tp, code in failed if code == ErrorCode.TRANSACTION_COORDINATOR_FENCED]
            if fenced:  # a newer coordinator ended this transaction there: this one must stop
                names = ", ".join(f"{t}-{p}" for t, p in fenced)
                raise KafkaError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                                 f"transaction markers refused by {names}: a newer coordinator wrote its own")
            for tp, code in failed:
                (too_few if code in TOO_FEW_REPLICAS else retry).append(tp)
            if not retry:
                if too_few:
                    names = ", ".join(f"{t}-{p}" for t, p in too_few)
                    raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                                     f"transaction markers refused by {names}: ISR below min.insync.replicas")
                return
            if loop.time() >= deadline:
                names = ", ".join(f"{t}-{p}" for t, p in retry)
                raise KafkaError(ErrorCode.NOT_COORDINATOR, f"transaction markers not written to {names}")
            pending = retry
            await asyncio.sleep(self.RETRY_BACKOFF_S)

    async def _send(self, leader: int, producer_id: int, producer_epoch: int, commit: bool,
                    tps: list[TopicPartition], coordinator_epoch: int = 0,
                    ) -> list[tuple[TopicPartition, int]]:
        """One WriteTxnMarkers to ``leader``; returns the partitions to try again, with why."""
        node = self.broker.metadata_cache.alive_broker(leader, self.listener)
        if node is None:
            return [(tp, ErrorCode.LEADER_NOT_AVAILABLE) for tp in tps]
        topics: dict[str, list[int]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)
        request = {"markers": [{
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "transaction_result": commit,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
            "coordinator_epoch": coordinator_epoch,
        }]}
        try:
            conn = await self._connection(node.host, node.port)
            resp = await conn.request(WRITE_TXN_MARKERS, request)
        except (KafkaConnectionError, KafkaError, OSError, TimeoutError) as e:
            log.warning("WriteTxnMarkers to broker %d failed: %s (retrying)", leader, e)
            await self._drop(node.host, node.port)
            return [(tp, ErrorCode.NETWORK_EXCEPTION) for tp in tps]
        retry: list[tuple[TopicPartition, int]] = []
        for marker in resp.markers:
            for t in marker.topics:
                for p in t.partitions:
                    code = int(p.error_code)
                    if code not in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                        retry.append(((str(t.name), int(p.partition_index)), code))
        return retry

    async def add_partitions(self, txn_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition], *,
                             verify_only: bool = False) -> dict[TopicPartition, int]:
        """Produce v12+ (KIP-890 transaction version 2) to a partition led here for a
        transactional id coordinated by another broker, or a TxnOffsetCommit to a group
        coordinated here: add the partitions to its transaction there (AddPartitionsToTxn v5,
        Kafka's AddPartitionsToTxnManager), or with ``verify_only`` only ask whether they are in
        it; per partition, the coordinator's error (NOT_COORDINATOR when it cannot be reached)."""
        from ..coordinator.records import partition_for

        cache = self.broker.metadata_cache
        count = cache.num_partitions(TXN_TOPIC)
        leader = cache.leader_id(TXN_TOPIC, partition_for(txn_id, count)) if count else None
        node = cache.alive_broker(leader, self.listener) if leader is not None and leader >= 0 else None
        if node is None:
            return dict.fromkeys(partitions, ErrorCode.NOT_COORDINATOR)
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        request = {"transactions": [{
            "transactional_id": txn_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
            "verify_only": verify_only,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }]}
        try:
            conn = await self._connection(node.host, node.port)
            resp = await conn.request(ADD_PARTITIONS_TO_TXN, request, version=5)
        except (KafkaConnectionError, KafkaError, OSError, TimeoutError) as e:
            log.warning("AddPartitionsToTxn to broker %d failed: %s", leader, e)
            await self._drop(node.host, node.port)
            return dict.fromkeys(partitions, ErrorCode.NOT_COORDINATOR)
        if int(getattr(resp, "error_code", 0)):
            return dict.fromkeys(partitions, int(resp.error_code))
        out: dict[TopicPartition, int] = {}
        for txn in resp.results_by_transaction:
            for t in txn.topic_results:
                for p in t.results_by_partition:
                    out[(str(t.name), int(p.partition_index))] = int(p.partition_error_code)
        return out

    async def _connection(self, host: str, port: int) -> Any:
        client = self._clients.get((host, port))
        if client is None:
            client = Client(f"{host}:{port}", client_id="strom-txn-markers")
            self._clients[(host, port)] = client
        return await client.connection(host, port)

    async def _drop(self, host: str, port: int) -> None:
        client = self._clients.pop((host, port), None)
        if client is not None:
            await client.close()

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()


def marker_response(producer_id: int, topics: dict[str, list[tuple[int, int]]]) -> dict[str, Any]:
    """One marker's entry of a WriteTxnMarkers response: per topic, (partition, error code)."""
    return {
        "producer_id": producer_id,
        "topics": [
            {"name": t, "partitions": [{"partition_index": p, "error_code": c} for p, c in parts]}
            for t, parts in topics.items()
        ],
    }


__all__ = ["TxnMarkerSender", "marker_response"]
