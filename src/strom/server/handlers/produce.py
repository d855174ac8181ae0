"""Produce (0): validate and append opaque record batches; answer per partition.

Hot path: uncompressed batches for topics that are not compacted are never decoded record by
record; the log validates headers, CRCs and the record length chain, patches offsets and appends.
Compressed batches and compacted topics are walked record by record (bounded memory) in the
broker's validation threads first (:func:`handle_produce`). ``acks=0`` gets no response (Kafka's
behaviour).

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

import asyncio
import logging
from typing import Any

from ...log.errors import KafkaStorageError
from ...protocol.errors import ErrorCode
from ...protocol.records import BATCH_OVERHEAD, parse_header
from ..context import NoResponse, RequestContext
from . import handler

log = logging.getLogger("strom.produce")

# a partition to append: (its topic's response list, slot in it, partition, topic, records,
# whether validation walks the records)
_Pending = tuple[list[dict[str, Any]], int, int, str, Any, bool]

# coordinator answers a producer retries as NOT_ENOUGH_REPLICAS (no metadata refresh), as Kafka
_RETRIABLE_VERIFY = frozenset({
    ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
})


def _txn_producer(records: Any) -> tuple[int, int] | None:
    """(producer id, epoch) of a transactional first batch, else None (header only)."""
    if len(records) < BATCH_OVERHEAD:
        return None
    try:
        h = parse_header(records, 0)
    except Exception:
        return None  # validation reports it
    if h.magic != 2 or not h.is_transactional or h.is_control or h.producer_id < 0:
        return None
    return h.producer_id, h.producer_epoch


def _needs_verification(broker: Any, name: str, idx: int, producer: tuple[int, int] | None) -> bool:
    """Kafka's ``hasOngoingTransaction`` negated: the producer has no transaction open here at
    this epoch, so the coordinator must say the partition is in one first."""
    if producer is None or broker.txn_coordinator is None:
        return False
    plog = broker.logs.get((name, idx))
    if plog is None:
        return False  # deleted meanwhile: the append answers UNKNOWN_TOPIC_OR_PARTITION
    entry = plog.producer_state.last_entry(producer[0])
    return not (
        entry is not None
        and entry.producer_epoch == producer[1]
        and entry.current_txn_first_offset is not None
    )


async def _verify_transaction(
    broker: Any, txn_id: str, api_version: int, name: str, idx: int, producer: tuple[int, int]
) -> int:
    """Verify (or with Produce v12+ add) ``name-idx`` in the transaction; the error to answer."""
    coord = broker.txn_coordinator
    pid, epoch = producer
    tp = (name, idx)
    if api_version >= 12:
        errors = await coord.add_partitions(txn_id, pid, epoch, [tp], client_transaction_version=2)
    else:
        errors = coord.verify_partitions(txn_id, pid, epoch, [tp])
    code = int(errors.get(tp, ErrorCode.NONE))
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code == ErrorCode.TRANSACTION_ABORTABLE and api_version < 11:
        return ErrorCode.INVALID_TXN_STATE  # for clients that do not know TRANSACTION_ABORTABLE
    if code in _RETRIABLE_VERIFY:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return code


def _partition_error(
    index: int, code: int, message: str | None = None, record_errors: list[tuple[int, str]] | None = None
) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": code,
        "base_offset": -1,
        "log_append_time": -1,
        "log_start_offset": -1,
        "record_errors": [
            {"batch_index": i, "batch_index_error_message": m} for i, m in (record_errors or ())
        ],
        "error_message": message,
    }


def _append_error(broker: Any, name: str, idx: int, e: BaseException) -> dict[str, Any]:
    """The partition's answer to a failed validation or append."""
    if isinstance(e, KafkaStorageError | OSError):  # one rate-limited line, no traceback
        broker.storage_log.failed(
            "append to", f"{name}-{idx}", e,
            "answering KAFKA_STORAGE_ERROR, nothing appended; every produce retries",
        )
        return _partition_error(idx, ErrorCode.KAFKA_STORAGE_ERROR, "storage error")
    if isinstance(e, KeyError):  # deleted while its records were being validated, or its dir failed
        return _partition_error(idx, broker.partition_error(name, idx))
    code: int | None = getattr(e, "error_code", None)  # log errors carry Kafka codes
    if code is None:
        log.error("unexpected append failure on %s-%d", name, idx, exc_info=e)
        code = ErrorCode.UNKNOWN_SERVER_ERROR
    return _partition_error(idx, code, str(e), getattr(e, "record_errors", None))


def _append(broker: Any, name: str, idx: int, records: Any, prevalidated: bool = False) -> dict[str, Any]:
    try:
        res = broker.append(name, idx, records, prevalidated=prevalidated)
    except Exception as e:
        return _append_error(broker, name, idx, e)
    if broker.storage_log.failing:
        broker.storage_log.ok("append to", f"{name}-{idx}")
    return {
        "index": idx,
        "error_code": 0,
        "base_offset": res.first_offset,
        "log_append_time": res.log_append_time,
        "log_start_offset": res.log_start_offset,
        "record_errors": [],
        "error_message": None,
    }


@handler(0)
async def handle_produce(ctx: RequestContext, request: Any) -> dict[str, Any] | NoResponse:
    """Two paths. Fast: no partition needs a record-by-record walk (uncompressed batches, topics
    not compacted) and none has an append waiting: append each partition at once, in order,
    without yielding. Otherwise every partition of the request takes its place in the
    partition's append chain before anything yields, the walks run in the broker's validation
    threads concurrently, and each partition appends once its walk is done and the append
    before it in the chain has happened: per-partition order is arrival order, so producer
    sequence and idempotence state see the batches as sent."""
    broker = ctx.broker
    acks = request.acks
    responses: list[dict[str, Any]] = []
    pending: list[_Pending] = []
    chains = broker.append_chains
    slow = False
    txn_id = request.transactional_id
    verify: dict[tuple[str, int], tuple[int, int]] = {}  # partitions to check with the coordinator
    for topic in request.topic_data:
        name = str(topic.name)
        info = broker.topics.get(name)
        parts: list[dict[str, Any]] = []
        for pd in topic.partition_data:
            idx = pd.index
            if acks not in (0, 1, -1):
                parts.append(_partition_error(idx, ErrorCode.INVALID_REQUIRED_ACKS))
                continue
            if info is None or not (0 <= idx < info.partitions):
                parts.append(_partition_error(idx, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if info.internal:  # written by the coordinators only (Kafka's rule)
                parts.append(
                    _partition_error(
                        idx, ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {name}"
                    )
                )
                continue
            records = pd.records
            if not records:
                parts.append(_partition_error(idx, ErrorCode.CORRUPT_MESSAGE, "empty record set"))
                continue
            try:
                walk = broker.logs[(name, idx)].needs_record_walk(records)
            except Exception as e:
                parts.append(_append_error(broker, name, idx, e))
                continue
            if txn_id is not None:
                producer = _txn_producer(records)
                if producer is not None and _needs_verification(broker, name, idx, producer):
                    verify[(name, idx)] = producer
            slow = slow or walk or (name, idx) in chains or bool(verify)
            pending.append((parts, len(parts), idx, name, records, walk))
            parts.append({})  # filled in below
        responses.append({"name": name, "partition_responses": parts})
    if not slow:
        for parts, slot, idx, name, records, _walk in pending:
            parts[slot] = _append(broker, name, idx, records)
    elif pending:
        await _append_in_chains(broker, pending, verify, str(txn_id), ctx.api_version)
    if acks == 0:
        return NoResponse()
    return {"responses": responses, "throttle_time": 0}


async def _append_in_chains(
    broker: Any,
    pending: list[_Pending],
    verify: dict[tuple[str, int], tuple[int, int]] | None = None,
    txn_id: str = "",
    api_version: int = 0,
) -> None:
    loop = asyncio.get_running_loop()
    chains = broker.append_chains
    tickets: list[tuple[asyncio.Future[None] | None, asyncio.Future[None]]] = []
    for _parts, _slot, idx, name, _records, _walk in pending:  # no await in this loop: one atomic step
        mine: asyncio.Future[None] = loop.create_future()
        tickets.append((chains.get((name, idx)), mine))
        chains[(name, idx)] = mine
    checks: list[asyncio.Future[Any] | None] = [
        loop.run_in_executor(broker.validation_executor, broker.logs[(name, idx)].check_batches, records)
        if walk
        else None
        for _parts, _slot, idx, name, records, walk in pending
    ]
    try:
        for item, (before, mine), check in zip(pending, tickets, checks, strict=True):
            parts, slot, idx, name, records, walk = item
            error: BaseException | None = None
            if check is not None:
                try:
                    await check
                except Exception as e:
                    error = e
            if before is not None and not before.done():
                await asyncio.wait([before])
            producer = verify.get((name, idx)) if verify else None
            verify_error: int = ErrorCode.NONE
            # checked again now the appends before it are done: they may have opened the transaction
            if producer is not None and _needs_verification(broker, name, idx, producer):
                try:
                    verify_error = await _verify_transaction(broker, txn_id, api_version, name, idx, producer)
                except Exception as e:
                    verify_error = int(getattr(e, "code", ErrorCode.NOT_ENOUGH_REPLICAS))
                    if verify_error in _RETRIABLE_VERIFY:
                        verify_error = ErrorCode.NOT_ENOUGH_REPLICAS
            if error is not None:
                parts[slot] = _append_error(broker, name, idx, error)
            elif verify_error != ErrorCode.NONE:
                parts[slot] = _partition_error(idx, verify_error)
            else:
                parts[slot] = _append(broker, name, idx, records, prevalidated=walk)
            _release(chains, (name, idx), mine)
    finally:
        for item, (_before, mine) in zip(pending, tickets, strict=True):
            _release(chains, (item[3], item[2]), mine)
        for check in checks:
            if check is not None and not check.done():
                check.cancel()


def _release(
    chains: dict[tuple[str, int], asyncio.Future[None]], tp: tuple[str, int], mine: asyncio.Future[None]
) -> None:
    if not mine.done():
        mine.set_result(None)
    if chains.get(tp) is mine:
        del chains[tp]
