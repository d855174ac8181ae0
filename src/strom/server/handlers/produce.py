"""Produce (0): validate and append opaque record batches; answer per partition.

The appends are the replica manager's
(:meth:`~strom.server.replica_manager.ReplicaManager.append_records`: per-partition errors,
append chains, validation threads, acks). Hot path: uncompressed batches for topics that are not
compacted are never decoded record by record; the log validates headers, CRCs and the record
length chain, patches offsets and appends. Compressed batches and compacted topics are walked
record by record (bounded memory) in the validation threads first. ``acks=0`` gets no response
(Kafka's behaviour).

Transactions (KIP-890, Kafka's transaction verification, on by default in Kafka 4): a
transactional batch for a partition where its producer has no transaction open at that epoch
is checked with the transaction coordinator before it is appended. Produce v12+ (transaction
version 2) *adds* the partition to the transaction (clients send no AddPartitionsToTxn); older
versions only verify that it was added, answering TRANSACTION_ABORTABLE (v11) or
INVALID_TXN_STATE (before) when it was not. PRODUCER_FENCED from the coordinator becomes
INVALID_PRODUCER_EPOCH and the coordinator's retriable states NOT_ENOUGH_REPLICAS, as Kafka's
AddPartitionsToTxnManager/ReplicaManager answer producers.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from ...protocol.codec import duration_ms
from ...protocol.errors import ErrorCode, KafkaError
from ...protocol.produce_response import (
    FIRST_VERSION,
    LAST_VERSION,
    NodeEndpoint,
    PartitionEntry,
    PartitionResult,
    encode_produce_response,
)
from ..authz import AclOperation, ResourceType, authorized, filter_authorized
from ..context import Deferred, NoResponse, RawResponse, RequestContext
from ..metadata_cache import broker_nodes
from ..replica_manager import PartitionResponse, Producer, Verifier
from . import handler

# coordinator answers a producer retries as NOT_ENOUGH_REPLICAS (no metadata refresh), as Kafka
_RETRIABLE_VERIFY = frozenset({
    ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
})


def _verifier(ctx: RequestContext, txn_id: str) -> Verifier:
    """Verify (or with Produce v12+ add) a partition in the transaction; the error to answer."""
    coord = ctx.broker.txn_coordinator
    api_version = ctx.api_version

    async def verify(name: str, idx: int, producer: Producer) -> int:
        pid, epoch = producer
        tp = (name, idx)
        try:
            if coord.coordinated_elsewhere(txn_id):
                # the transactional id's coordinator is another broker (a cluster): v12+ adds the
                # partition there, older versions ask whether it was added (AddPartitionsToTxn,
                # verify_only below v12, as Kafka's AddPartitionsToTxnManager)
                errors = await ctx.broker.marker_sender.add_partitions(
                    txn_id, pid, epoch, [tp], verify_only=api_version < 12
                )
            elif api_version >= 12:
                errors = await coord.add_partitions(txn_id, pid, epoch, [tp], client_transaction_version=2)
            else:
                errors = coord.verify_partitions(txn_id, pid, epoch, [tp])
        except Exception as e:
            code = int(getattr(e, "code", ErrorCode.NOT_ENOUGH_REPLICAS))
            return ErrorCode.NOT_ENOUGH_REPLICAS if code in _RETRIABLE_VERIFY else code
        code = int(errors.get(tp, ErrorCode.NONE))
        if code == ErrorCode.PRODUCER_FENCED:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if code == ErrorCode.TRANSACTION_ABORTABLE and api_version < 11:
            return ErrorCode.INVALID_TXN_STATE  # for clients that do not know TRANSACTION_ABORTABLE
        if code in _RETRIABLE_VERIFY:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return code

    return verify


@handler(0)
async def handle_produce(
    ctx: RequestContext, request: Any
) -> dict[str, Any] | RawResponse | NoResponse | Deferred:
    broker = ctx.broker
    txn_id = request.transactional_id
    denied: set[str] = set()
    if getattr(broker, "authorizer", None) is not None:
        # Kafka: a transactional producer needs WRITE on its transactional id (else the whole
        # request fails), every producer WRITE on each topic (TOPIC_AUTHORIZATION_FAILED for it)
        if txn_id is not None and not authorized(
            ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, str(txn_id)
        ):
            raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        names = {str(t.name) for t in request.topic_data}
        denied = names - filter_authorized(ctx, AclOperation.WRITE, ResourceType.TOPIC, names)
    entries: list[tuple[str, int, Any]] = []
    for topic in request.topic_data:
        name = str(topic.name)
        if name in denied:
            continue
        for pd in topic.partition_data:
            entries.append((name, pd.index, pd.records))
    verify = (
        _verifier(ctx, str(txn_id)) if txn_id is not None and broker.txn_coordinator is not None else None
    )
    timeout_ms = duration_ms(request.timeout)
    results, wait = await broker.replica_manager.append_records_then_wait(
        entries, acks=request.acks, timeout_ms=timeout_ms, verify=verify
    )
    metrics = getattr(broker, "metrics", None)
    if metrics is not None:  # Kafka's BytesInPerSec / MessagesInPerSec: once per partition answer
        for (name, _index, records), res in zip(entries, results, strict=True):
            if res.error_code == ErrorCode.NONE:
                metrics.bytes_in[name] += len(records)
                if res.last_offset >= res.base_offset >= 0:
                    metrics.records_in[name] += res.last_offset - res.base_offset + 1
            else:
                metrics.produce_requests_failed[name] += 1
    throttle = 0
    quota_entities = getattr(broker, "client_quota_entities", None)
    if quota_entities:  # producer_byte_rate (KIP-219: answered at once, then the channel waits)
        size = sum(len(e[2]) for e in entries if e[2] is not None)
        throttle = broker.produce_quotas.record(
            quota_entities, ctx.session.principal, ctx.client_id or "", size, broker.clock.monotonic_ms()
        )
        ctx.session.throttle_ms = throttle
    # encoded here unless a request quota may raise the throttle time later (KIP-124), or the
    # version is one the hand encoder does not write
    raw = not broker.request_quotas_active and FIRST_VERSION <= ctx.api_version <= LAST_VERSION
    if wait is not None:  # acks=-1: answered once the HW passed the appends
        return Deferred(_answer_after(wait, ctx, request, results, denied, throttle, raw))
    if request.acks == 0:
        return NoResponse()
    return _answer(ctx, request, results, denied, throttle, raw)


async def _answer_after(
    wait: Coroutine[Any, Any, None], ctx: RequestContext, request: Any, results: list[PartitionResponse],
    denied: set[str], throttle: int, raw: bool,
) -> dict[str, Any] | RawResponse:
    await wait
    return _answer(ctx, request, results, denied, throttle, raw)


def _answer(
    ctx: RequestContext, request: Any, results: list[PartitionResponse], denied: set[str], throttle: int,
    raw: bool,
) -> dict[str, Any] | RawResponse:
    """The answer: encoded here (``raw``), or as a dict for kio when a request quota may still
    raise its throttle time (the network layer sets it in the dict)."""
    broker = ctx.broker
    topics: list[tuple[str, list[PartitionEntry]]] = []
    it = iter(results)
    refused = PartitionResponse(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    leaders: set[int] = set()
    kip951 = ctx.api_version >= 10
    rm = broker.replica_manager
    for topic in request.topic_data:
        name = str(topic.name)
        parts: list[PartitionEntry] = []
        for pd in topic.partition_data:
            if denied and name in denied:
                parts.append((pd.index, refused, None))
                continue
            r: PartitionResponse = next(it)
            current = None
            if kip951 and r.error_code in _LEADER_ERRORS:
                # KIP-951: where the leader is, so the client reroutes without a metadata round trip
                current = rm.current_leader(name, pd.index)
                if current is not None:
                    leaders.add(current[0])
            parts.append((pd.index, r, current))
        topics.append((name, parts))
    nodes = [
        (n.node_id, n.host, n.port, n.rack)
        for n in broker_nodes(broker.metadata_cache, leaders, ctx.session.listener)
    ] if leaders else []
    if raw:
        body = encode_produce_response(ctx.api_version, topics, throttle, nodes)
        return RawResponse([body], len(body))
    return _as_dict(topics, throttle, nodes)


def _as_dict(
    topics: list[tuple[str, list[PartitionEntry]]], throttle: int, nodes: list[NodeEndpoint]
) -> dict[str, Any]:
    responses = [
        {"name": name, "partition_responses": [_partition(*p) for p in parts]} for name, parts in topics
    ]
    out: dict[str, Any] = {"responses": responses, "throttle_time": throttle}
    if nodes:
        out["node_endpoints"] = [
            {"node_id": n, "host": host, "port": port, "rack": rack} for n, host, port, rack in nodes
        ]
    return out


_LEADER_ERRORS = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER})


def _partition(index: int, r: PartitionResult, leader: tuple[int, int] | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "index": index,
        "error_code": r.error_code,
        "base_offset": r.base_offset,
        "log_append_time": r.log_append_time,
        "log_start_offset": r.log_start_offset,
        "record_errors": [
            {"batch_index": i, "batch_index_error_message": m} for i, m in r.record_errors
        ] if r.record_errors else [],
        "error_message": r.error_message,
    }
    if leader is not None:
        out["current_leader"] = {"leader_id": leader[0], "leader_epoch": leader[1]}
    return out
