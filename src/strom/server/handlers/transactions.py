"""Transaction APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
TxnOffsetCommit (28), DescribeProducers (61), DescribeTransactions (65), ListTransactions (66).

InitProducerId with a ``transactional.id`` is routed here from ``producer_ids``."""

from __future__ import annotations

from typing import Any

from ...coordinator.transaction import KAFKA_STATE_NAMES
from ...protocol.errors import ErrorCode, KafkaError
from ..authz import AclOperation, ResourceType, authorized, authorized_cluster
from ..context import RequestContext
from ..txn_marker_sender import MarkersNotWritten, marker_response
from . import handler


def _coordinator(ctx: RequestContext) -> Any:
    return ctx.broker.txn_coordinator


def _topic_results(errors: dict[tuple[str, int], int]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), err in errors.items():
        by_topic.setdefault(topic, []).append({"partition_index": p, "partition_error_code": err})
    return [{"name": t, "results_by_partition": ps} for t, ps in by_topic.items()]


def _txn_writable(ctx: RequestContext, tid: str) -> bool:
    return authorized(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid)


def _denied_topics(ctx: RequestContext, names: Any, operation: int) -> set[str]:
    if getattr(ctx.broker, "authorizer", None) is None:
        return set()
    return {str(n) for n in names if not authorized(ctx, operation, ResourceType.TOPIC, str(n))}


def _known_partitions(
    ctx: RequestContext, topics: Any
) -> tuple[list[tuple[str, int]], dict[tuple[str, int], int]]:
    """Kafka's check: a partition the metadata cache knows, wherever it is led (its markers go
    to its leader); one on a failed log dir here is refused, as before."""
    ok: list[tuple[str, int]] = []
    bad: dict[tuple[str, int], int] = {}
    rm = ctx.broker.replica_manager
    cache = ctx.broker.metadata_cache
    for t in topics:
        name = str(t.name)
        for p in t.partitions:
            if cache.contains(name, p) and (name, p) not in rm.offline_partitions:
                ok.append((name, int(p)))
            else:
                bad[(name, int(p))] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ok, bad


@handler(24)
async def handle_add_partitions_to_txn(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    errors: dict[tuple[str, int], int]
    if ctx.api_version <= 3:
        tid = str(request.v3_and_below_transactional_id)
        ok, bad = _known_partitions(ctx, request.v3_and_below_topics)
        # Kafka: WRITE on the transactional id (else every partition fails), WRITE on each topic
        every = [(str(t.name), int(p)) for t in request.v3_and_below_topics for p in t.partitions]
        denied = _denied_topics(ctx, {n for n, _ in every}, AclOperation.WRITE)
        if not _txn_writable(ctx, tid):
            errors = dict.fromkeys(every, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        elif denied:
            errors = {
                tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED
                if tp[0] in denied
                else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp in every
            }
        elif bad:
            # Kafka fails the whole request when a partition is unknown; others get OPERATION_NOT_ATTEMPTED
            errors = {**dict.fromkeys(ok, ErrorCode.OPERATION_NOT_ATTEMPTED), **bad}
        else:
            errors = await coord.add_partitions(
                tid, request.v3_and_below_producer_id, request.v3_and_below_producer_epoch, ok
            )
        return {"throttle_time": 0, "results_by_topic_v3_and_below": _topic_results(errors)}
    if not authorized_cluster(ctx, AclOperation.CLUSTER_ACTION):  # v4+: between brokers
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    results = []
    for txn in request.transactions:
        tid = str(txn.transactional_id)
        ok, bad = _known_partitions(ctx, txn.topics)
        if txn.verify_only:
            errors = {**coord.verify_partitions(tid, txn.producer_id, txn.producer_epoch, ok), **bad}
        elif bad:
            errors = {**dict.fromkeys(ok, ErrorCode.OPERATION_NOT_ATTEMPTED), **bad}
        else:  # (v5: a broker adding for a Produce v12+, transaction version 2)
            tv = 2 if ctx.api_version >= 5 else None
            errors = await coord.add_partitions(tid, txn.producer_id, txn.producer_epoch, ok,
                                                client_transaction_version=tv)
        results.append({"transactional_id": tid, "topic_results": _topic_results(errors)})
    return {"throttle_time": 0, "error_code": 0, "results_by_transaction": results}


@handler(25)
async def handle_add_offsets_to_txn(ctx: RequestContext, request: Any) -> dict[str, Any]:
    group_id = str(request.group_id)
    if not _txn_writable(ctx, str(request.transactional_id)):
        return {"throttle_time": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not authorized(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    gc = ctx.broker.group_coordinator
    partition = gc.partition_for(group_id)
    err = await _coordinator(ctx).add_offsets(
        str(request.transactional_id), request.producer_id, request.producer_epoch, group_id, partition
    )
    return {"throttle_time": 0, "error_code": err}


@handler(26)
async def handle_end_txn(ctx: RequestContext, request: Any) -> dict[str, Any]:
    # v5+ is transaction version 2 (KIP-890): the epoch is bumped and the response carries it
    if not _txn_writable(ctx, str(request.transactional_id)):
        return {"throttle_time": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "producer_id": -1, "producer_epoch": -1}
    err, pid, epoch = await _coordinator(ctx).end_transaction(
        str(request.transactional_id),
        request.producer_id,
        request.producer_epoch,
        bool(request.committed),
        tv2=ctx.api_version >= 5,
    )
    return {"throttle_time": 0, "error_code": err, "producer_id": pid, "producer_epoch": epoch}


@handler(28)
async def handle_txn_offset_commit(ctx: RequestContext, request: Any) -> dict[str, Any]:
    group_id = str(request.group_id)
    offsets = {
        (str(t.name), int(p.partition_index)): (
            int(p.committed_offset),
            int(getattr(p, "committed_leader_epoch", -1)),
            p.committed_metadata,
        )
        for t in request.topics
        for p in t.partitions
    }
    tid = str(request.transactional_id)
    errors: dict[tuple[str, int], int]
    # Kafka: WRITE on the transactional id, READ on the group, READ on each topic
    denied = _denied_topics(ctx, {tp[0] for tp in offsets}, AclOperation.READ)
    if not _txn_writable(ctx, tid):
        errors = dict.fromkeys(offsets, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif not authorized(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        errors = dict.fromkeys(offsets, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    elif denied:
        errors = {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED for tp in offsets if tp[0] in denied}
        offsets = {tp: v for tp, v in offsets.items() if tp[0] not in denied}
        if offsets:
            errors |= await _txn_offset_commit(ctx, request, group_id, tid, offsets)
    else:
        errors = await _txn_offset_commit(ctx, request, group_id, tid, offsets)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), err in errors.items():
        by_topic.setdefault(topic, []).append({"partition_index": p, "error_code": err})
    return {"throttle_time": 0, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


async def _txn_offset_commit(
    ctx: RequestContext, request: Any, group_id: str, tid: str, offsets: dict[tuple[str, int], Any]
) -> dict[tuple[str, int], int]:
    gc = ctx.broker.group_coordinator
    coord = _coordinator(ctx)
    offsets_tp = ("__consumer_offsets", gc.partition_for(group_id))

    async def commit() -> dict[tuple[str, int], int]:
        return await gc.txn_commit_offsets(  # type: ignore[no-any-return]
            group_id,
            producer_id=request.producer_id,
            producer_epoch=request.producer_epoch,
            generation_id=getattr(request, "generation_id", -1),
            member_id=getattr(request, "member_id", ""),
            group_instance_id=getattr(request, "group_instance_id", None),
            offsets=offsets,
        )

    if coord.coordinated_elsewhere(tid):
        # the transactional id's coordinator is another broker (a cluster): ask it whether the
        # offsets partition is in the transaction (v5, transaction version 2: add it), as Kafka's
        # group coordinator does through the AddPartitionsToTxnManager; only this broker's
        # own transaction state could answer that before, and it has none for a remote id
        remote = await ctx.broker.marker_sender.add_partitions(
            tid, request.producer_id, request.producer_epoch, [offsets_tp], verify_only=ctx.api_version < 5
        )
        code = _remote_verify_error(remote.get(offsets_tp, ErrorCode.NONE), ctx.api_version)
        return dict.fromkeys(offsets, code) if code != ErrorCode.NONE else await commit()
    verify_error = ErrorCode.NONE
    if ctx.api_version >= 5:
        # transaction version 2 (KIP-890): the offsets partition joins the transaction implicitly
        # (clients send no AddOffsetsToTxn), as Kafka's verification with ``addPartition`` does
        added = await coord.add_partitions(
            tid, request.producer_id, request.producer_epoch, [offsets_tp], client_transaction_version=2
        )
        verify_error = added.get(offsets_tp, ErrorCode.NONE)
    txn = coord.sm.txns.get(tid)
    if verify_error not in (ErrorCode.NONE, ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_ID_MAPPING):
        # retriable coordinator states (loading, markers being written) or a storage failure
        errors = dict.fromkeys(offsets, _txn_offset_error(verify_error))
    elif txn is None or txn.producer_id != request.producer_id:
        errors = dict.fromkeys(offsets, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    elif request.producer_epoch < txn.producer_epoch or verify_error == ErrorCode.PRODUCER_FENCED:
        errors = dict.fromkeys(offsets, ErrorCode.PRODUCER_FENCED)
    elif offsets_tp not in txn.partitions:
        # Kafka's verification: TRANSACTION_ABORTABLE for v4 (KIP-890 part 1), INVALID_TXN_STATE before
        code = ErrorCode.TRANSACTION_ABORTABLE if ctx.api_version >= 4 else ErrorCode.INVALID_TXN_STATE
        errors = dict.fromkeys(offsets, code)
    else:
        errors = await commit()
    return errors


def _remote_verify_error(code: int, api_version: int) -> int:
    """What a TxnOffsetCommit answers for another broker's transaction coordinator's verdict on
    its offsets partition: fenced and unknown producers as they are, a partition not in the
    transaction TRANSACTION_ABORTABLE (v4+; INVALID_TXN_STATE before, as Kafka), a coordinator
    busy or unreachable as retriable (Kafka's group coordinator normalises those to
    COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS)."""
    if code == ErrorCode.TRANSACTION_ABORTABLE and api_version < 4:
        return ErrorCode.INVALID_TXN_STATE
    if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    return code


def _txn_offset_error(code: int) -> int:
    """A failed implicit add answered as TxnOffsetCommit errors: the coordinator is busy writing
    markers or loading (retriable for the client) or not writable (look the coordinator up)."""
    if code in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    if code == ErrorCode.NOT_COORDINATOR:
        return ErrorCode.NOT_COORDINATOR
    return code


@handler(65)
async def handle_describe_transactions(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    return {
        "throttle_time": 0,
        "transaction_states": [
            coord.describe(str(t))
            if authorized(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, str(t))
            else {
                "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "transactional_id": str(t),
                "transaction_state": "",
                "transaction_timeout_ms": 0,
                "transaction_start_time_ms": -1,
                "producer_id": -1,
                "producer_epoch": -1,
                "topics": [],
            }
            for t in request.transactional_ids
        ],
    }


@handler(66)
async def handle_list_transactions(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coord = _coordinator(ctx)
    states = [str(s) for s in request.state_filters]
    unknown = [s for s in states if s not in KAFKA_STATE_NAMES]
    found = coord.list(
        states, [int(p) for p in request.producer_id_filters], getattr(request, "duration_filter", -1)
    )
    return {
        "throttle_time": 0,
        "error_code": 0,
        "unknown_state_filters": unknown,
        "transaction_states": [
            {
                "transactional_id": m.transactional_id,
                "producer_id": m.producer_id,
                "transaction_state": m.state.kafka_name,
            }
            for m in found
            # Kafka: only the transactional ids the principal may DESCRIBE
            if authorized(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, m.transactional_id)
        ],
    }


@handler(61)
async def handle_describe_producers(ctx: RequestContext, request: Any) -> dict[str, Any]:
    rm = ctx.broker.replica_manager
    topics = []
    for t in request.topics:
        name = str(t.name)
        parts = []
        readable = authorized(ctx, AclOperation.READ, ResourceType.TOPIC, name)  # Kafka: READ on the topic
        for p in t.partition_indexes:
            if readable:
                plog, error = rm.leader_log_or_error(name, p)
            else:
                plog, error = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
            if plog is None:
                parts.append(
                    {
                        "partition_index": p,
                        "error_code": error,
                        "error_message": None,
                        "active_producers": [],
                    }
                )
                continue
            parts.append(
                {
                    "partition_index": p,
                    "error_code": 0,
                    "error_message": None,
                    "active_producers": plog.describe_producers(),
                }
            )
        topics.append({"name": name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


@handler(27)
async def handle_write_txn_markers(ctx: RequestContext, request: Any) -> dict[str, Any]:
    """WriteTxnMarkers, from the transaction coordinator on another broker (Kafka's inter-broker
    API): each marker is written to the partitions led here (answered once durable and
    replicated, offsets partitions completing their pending transactional offsets); a partition
    not led here answers NOT_LEADER_OR_FOLLOWER (the sender looks its leader up again), one
    whose ISR is below min.insync.replicas NOT_ENOUGH_REPLICAS, one whose ISR did not catch up
    in time REQUEST_TIMED_OUT (the sender tries those again), one that does not exist
    UNKNOWN_TOPIC_OR_PARTITION, one on a failed log dir KAFKA_STORAGE_ERROR, one holding a
    newer coordinator's marker for the producer TRANSACTION_COORDINATOR_FENCED (the marker's
    coordinator epoch is older: that coordinator lost the transaction's partition)."""
    broker = ctx.broker
    rm = broker.replica_manager
    out = []
    for marker in request.markers:
        pid, epoch = int(marker.producer_id), int(marker.producer_epoch)
        commit = bool(marker.transaction_result)
        coordinator_epoch = int(marker.coordinator_epoch)
        codes: dict[tuple[str, int], int] = {}
        for t in marker.topics:
            for p in t.partition_indexes:
                codes[(str(t.name), int(p))] = rm.partition_error(str(t.name), int(p))
        led = [tp for tp, code in codes.items() if code == ErrorCode.NONE]
        if led:
            try:
                await broker.write_local_markers(pid, epoch, commit, led, coordinator_epoch)
            except MarkersNotWritten as e:  # the others are written; the sender tries these again
                codes.update(e.failed)
            except Exception as e:  # a storage error: the sender tries again
                code = int(getattr(e, "error_code", getattr(e, "code", ErrorCode.KAFKA_STORAGE_ERROR)))
                for tp in led:
                    codes[tp] = code or ErrorCode.KAFKA_STORAGE_ERROR
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (name, p), code in codes.items():
            by_topic.setdefault(name, []).append((p, code))
        out.append(marker_response(pid, by_topic))
    return {"markers": out}
