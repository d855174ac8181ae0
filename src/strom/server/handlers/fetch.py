"""Fetch (1): long-polling reads, answered with file regions (zero-copy ``sendfile``).

The response is encoded by hand (:func:`encode_fetch_response`) because its record sets are not
bytes in memory but ranges of segment files; a unit test checks the encoding against kio's,
byte for byte, for every version. Incremental fetch sessions (KIP-227) are kept by
:mod:`strom.server.fetch_session`: a full fetch with epoch 0 opens one, later fetches carry only
what changed and are answered with only the partitions that have news.
"""

from __future__ import annotations

import os
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ...protocol.codec import duration_ms
from ...protocol.errors import ErrorCode, KafkaError
from ...protocol.framing import write_uvarint
from ...raft.wire import is_raft_fetch
from ..authz import AclOperation, ResourceType, authorized, authorized_cluster
from ..context import RawResponse, RequestContext
from ..fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    CachedPartition,
    FetchSession,
    FetchSessionCache,
    PartitionKey,
)
from ..metadata_cache import broker_nodes
from . import handler

Region = tuple[int, int, int]

# A response keeps file descriptors (duplicates, for sendfile) only for large reads and only so
# many: a fetch of ten thousand partitions must not need ten thousand descriptors. Smaller reads
# (and any beyond the cap) are copied into the response.
COPY_BELOW_BYTES = 32 * 1024
MAX_FDS_PER_RESPONSE = 64


@dataclass
class PartitionResult:
    partition: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: list[tuple[int, int]] | None = None
    regions: list[Region] = field(default_factory=list)
    size: int = 0
    raw: bytes | None = None  # records given as bytes (tests, internal callers)
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset): tagged field 0 (v12+)
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch): tagged field 1 (v12+)
    preferred_read_replica: int = -1  # KIP-392 (v11+)
    key: Any = None  # the fetch session's key for the partition


@dataclass
class TopicResult:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionResult]


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_EPOCH_END = struct.Struct(">iqb")  # EpochEndOffset: epoch, end offset, no tagged fields
_LEADER = struct.Struct(">iib")  # LeaderIdAndEpoch: leader id, leader epoch, no tagged fields
_PART_FIXED = struct.Struct(">ihqqq")


def encode_fetch_response(
    version: int, topics: list[TopicResult], *, error_code: int = 0, session_id: int = 0,
    throttle_ms: int = 0, node_endpoints: list[tuple[int, str, int, str | None]] | None = None,
) -> tuple[list[bytes | Region], int]:
    """Encode a Fetch response body for ``version`` (4..17). Returns (parts, total size).
    ``node_endpoints`` (v16+, KIP-951): (node id, host, port, rack) of the leaders named in
    ``current_leader`` fields."""
    flexible = version >= 12
    parts: list[bytes | Region] = []
    out = bytearray(_I32.pack(throttle_ms))
    if version >= 7:
        out += _I16.pack(error_code) + _I32.pack(session_id)
    if flexible:
        write_uvarint(out, len(topics) + 1)
    else:
        out += _I32.pack(len(topics))
    size = 0
    for t in topics:
        if version >= 13:
            out += t.topic_id.bytes
        elif flexible:
            nb = t.name.encode()
            write_uvarint(out, len(nb) + 1)
            out += nb
        else:
            nb = t.name.encode()
            out += _I16.pack(len(nb)) + nb
        if flexible:
            write_uvarint(out, len(t.partitions) + 1)
        else:
            out += _I32.pack(len(t.partitions))
        for p in t.partitions:
            out += (
                _PART_FIXED.pack(
                    p.partition, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset
                )
                if version >= 5
                else struct.pack(">ihqq", p.partition, p.error_code, p.high_watermark, p.last_stable_offset)
            )
            if p.aborted is None:
                out += b"\x00" if flexible else _I32.pack(-1)
            else:
                if flexible:
                    write_uvarint(out, len(p.aborted) + 1)
                else:
                    out += _I32.pack(len(p.aborted))
                for pid, first in p.aborted:
                    out += struct.pack(">qq", pid, first)
                    if flexible:
                        out += b"\x00"
            if version >= 11:
                out += _I32.pack(p.preferred_read_replica)
            rec_size = len(p.raw) if p.raw is not None else p.size
            if flexible:
                write_uvarint(out, rec_size + 1)
            else:
                out += _I32.pack(rec_size)
            if p.raw is not None:
                out += p.raw
            elif p.regions:
                parts.append(bytes(out))
                size += len(out)
                out = bytearray()
                parts.extend(p.regions)
                size += p.size
            if flexible:
                if p.diverging_epoch is None and p.current_leader is None:
                    out += b"\x00"  # partition tagged fields
                else:
                    tags = int(p.diverging_epoch is not None) + int(p.current_leader is not None)
                    out.append(tags)
                    if p.diverging_epoch is not None:
                        out += b"\x00" + bytes([_EPOCH_END.size]) + _EPOCH_END.pack(*p.diverging_epoch, 0)
                    if p.current_leader is not None:
                        out += b"\x01" + bytes([_LEADER.size]) + _LEADER.pack(*p.current_leader, 0)
        if flexible:
            out += b"\x00"  # topic tagged fields
    if flexible:
        if version >= 16 and node_endpoints:
            body = bytearray()
            write_uvarint(body, len(node_endpoints) + 1)
            for node_id, host, port, rack in node_endpoints:
                hb = host.encode()
                body += _I32.pack(node_id)
                write_uvarint(body, len(hb) + 1)
                body += hb + _I32.pack(port)
                if rack is None:
                    body += b"\x00"
                else:
                    rb = rack.encode()
                    write_uvarint(body, len(rb) + 1)
                    body += rb
                body += b"\x00"
            out += b"\x01\x00"  # one tagged field: node_endpoints (tag 0)
            write_uvarint(out, len(body))
            out += body
        else:
            out += b"\x00"  # top-level tagged fields
    parts.append(bytes(out))
    size += len(out)
    return parts, size


@dataclass(slots=True)
class Want:
    """One partition a Fetch reads (from the request, or from its session)."""

    key: PartitionKey  # (topic name or id, partition): the session's key
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


Groups = list[tuple[Any, list[Want]]]  # (topic name, before v13, or topic id; its partitions)


def request_groups(request: Any, version: int) -> Groups:
    """The partitions a request names, by topic, in its order."""
    groups: Groups = []
    for ft in request.topics:
        if version >= 13:
            # (kio reads the zero id as None)
            topic: Any = ft.topic_id if ft.topic_id is not None else uuid.UUID(int=0)
        else:
            topic = str(ft.topic)
        groups.append((topic, [
            Want((topic, int(fp.partition)), int(fp.partition), int(fp.fetch_offset),
                 int(fp.partition_max_bytes), int(getattr(fp, "current_leader_epoch", -1)),
                 int(getattr(fp, "last_fetched_epoch", -1)), int(getattr(fp, "log_start_offset", -1)))
            for fp in ft.partitions
        ]))
    return groups


def session_groups(session: FetchSession) -> Groups:
    """A session's partitions by topic, topics in the order of their first partition."""
    by_topic: dict[Any, list[Want]] = {}
    for key, p in session.partitions.items():
        by_topic.setdefault(key[0], []).append(
            Want(key, key[1], p.fetch_offset, p.max_bytes, p.current_leader_epoch, p.last_fetched_epoch,
                 p.log_start_offset)
        )
    return list(by_topic.items())


def forgotten_keys(request: Any, version: int) -> list[PartitionKey]:
    out: list[PartitionKey] = []
    for ft in getattr(request, "forgotten_topics_data", ()) or ():
        if version >= 13:
            topic: Any = ft.topic_id if ft.topic_id is not None else uuid.UUID(int=0)
        else:
            topic = str(ft.topic)
        out += [(topic, int(p)) for p in ft.partitions]
    return out


def _read_partitions(
    ctx: RequestContext, request: Any, groups: Groups, budget: int, version: int,
    told: dict[PartitionKey, CachedPartition] | None = None,
) -> tuple[list[TopicResult], int, bool, bool]:
    """One pass over the partitions of ``groups``. Returns (results, bytes, answer_now,
    hw_news): answer_now when a partition has an error, a diverging epoch or a preferred read
    replica (KIP-392); hw_news when a follower is owed a HW it has not been told yet.

    ``told`` (a consumer's incremental session): what each partition's client was last told; a
    partition whose log still ends where the client reads and whose offsets did not move is not
    read at all (its answer would be omitted anyway), so that an idle partition of a big
    session costs a few lookups."""
    broker = ctx.broker
    rm = broker.replica_manager
    cache = broker.metadata_cache
    results: list[TopicResult] = []
    total = 0
    any_error = False
    hw_news = False
    first_data = True
    isolation = getattr(request, "isolation_level", 0)
    fds_held = 0
    replica_id = follower_id(request, version)
    broker_epoch = int(request.replica_state.replica_epoch) if version >= 15 else -1
    # KIP-392: from v11 a consumer may read from a follower, and says which rack it is in
    from_any_replica = version >= 11
    client_rack = str(getattr(request, "rack_id", "") or "") if from_any_replica else ""
    listener = ctx.session.listener
    # Kafka: a follower needs CLUSTER_ACTION on the cluster, a consumer READ on each topic
    authorizer = getattr(broker, "authorizer", None)
    deny_all = authorizer is not None and replica_id >= 0 and not authorized_cluster(
        ctx, AclOperation.CLUSTER_ACTION
    )
    readable: dict[str, bool] = {}  # topic -> may be read (asked once per topic per request)
    for topic, wants in groups:
        if version >= 13:
            tid = topic
            info = cache.topic_by_id(tid)
            name = info.name if info else ""
        else:
            name = topic
            info = cache.topic(name)
            tid = info.topic_id if info else uuid.UUID(int=0)
        tres = TopicResult(name, tid, [])
        results.append(tres)
        for fp in wants:
            pr = PartitionResult(fp.partition, key=fp.key)
            tres.partitions.append(pr)
            if version >= 13 and info is None:
                pr.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                any_error = True
                continue
            if authorizer is not None:
                ok = readable.get(name)
                if ok is None:
                    ok = readable[name] = not deny_all and authorized(
                        ctx, AclOperation.READ, ResourceType.TOPIC, name
                    )
                if not ok:
                    pr.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    any_error = True
                    continue
            if told is not None:
                c = told.get(fp.key)
                plog = rm.logs.get((name, fp.partition)) if c is not None else None
                if (c is not None and plog is not None and plog.high_watermark == c.high_watermark
                        and plog.last_stable_offset == c.last_stable_offset
                        and plog.log_start_offset == c.leader_log_start_offset
                        and fp.fetch_offset == (c.last_stable_offset if isolation else c.high_watermark)
                        and (fp.current_leader_epoch < 0 or rm.leader_epoch_error(
                            (name, fp.partition), fp.current_leader_epoch) == ErrorCode.NONE)
                        and (from_any_replica or cache.leader_id(name, fp.partition) == rm.node_id)):
                    pr.high_watermark, pr.last_stable_offset = c.high_watermark, c.last_stable_offset
                    pr.log_start_offset = c.leader_log_start_offset
                    continue
            limit = min(fp.max_bytes, budget - total)
            epoch = fp.current_leader_epoch
            if replica_id >= 0:
                r = rm.read_for_follower(
                    replica_id, name, fp.partition, fp.fetch_offset, limit, current_leader_epoch=epoch,
                    last_fetched_epoch=fp.last_fetched_epoch,
                    broker_epoch=broker_epoch, min_one_message=first_data,
                    follower_log_start_offset=fp.log_start_offset,
                )
            else:
                r = rm.read(name, fp.partition, fp.fetch_offset, limit, isolation_level=isolation,
                            min_one_message=first_data, current_leader_epoch=epoch,
                            from_any_replica=from_any_replica, client_rack=client_rack or None,
                            listener=listener)
            pr.error_code = r.error_code
            pr.high_watermark = r.high_watermark
            pr.last_stable_offset = r.last_stable_offset
            pr.log_start_offset = r.log_start_offset
            pr.aborted = r.aborted
            if r.high_watermark_news:
                hw_news = True
            if r.preferred_read_replica >= 0:
                pr.preferred_read_replica = r.preferred_read_replica
                any_error = True  # Kafka answers at once, without records
                continue
            if r.diverging_epoch is not None and version >= 12:
                pr.diverging_epoch = r.diverging_epoch
                any_error = True
                continue
            if r.error_code != ErrorCode.NONE:
                any_error = True
                if version >= 12 and r.error_code in _LEADER_ERRORS:
                    pr.current_leader = rm.current_leader(name, fp.partition)
                continue
            data = r.records
            if not data.size:
                continue
            if data.size < COPY_BELOW_BYTES or fds_held + len(data.regions) > MAX_FDS_PER_RESPONSE:
                try:
                    pr.raw = data.read_bytes()
                except Exception as e:
                    pr.error_code = rm.read_failed(name, fp.partition, e)
                    any_error = True
                    continue
                finally:
                    data.close()
            else:
                # duplicates owned by the read: the response owns them until written (network._send)
                pr.regions = list(data.regions)
                fds_held += len(pr.regions)
            pr.size = data.size
            total += data.size
            first_data = False
    return results, total, any_error, hw_news


# how long a follower's fetch owed only a new HW waits for data to carry it (ms)
HW_NEWS_LINGER_MS = 5

_LEADER_ERRORS = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})


def follower_id(request: Any, version: int) -> int:
    """The replica id of a follower's Fetch (``replica_id`` before v15, ``replica_state`` from
    v15), -1 for a consumer."""
    if version >= 15:
        state = getattr(request, "replica_state", None)
        return int(state.replica_id) if state is not None else -1
    return int(getattr(request, "replica_id", -1))


def _release(results: list[TopicResult]) -> None:
    """Close the duplicated descriptors of a read that will not be sent."""
    for t in results:
        for p in t.partitions:
            for fd, _pos, _len in p.regions:
                os.close(fd)
            p.regions = []


@handler(1)
async def handle_fetch(ctx: RequestContext, request: Any) -> RawResponse | dict[str, Any]:
    if is_raft_fetch(request):  # a KRaft replica fetching __cluster_metadata: the quorum answers
        if not authorized_cluster(ctx, AclOperation.CLUSTER_ACTION):
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        from .raft import handle_raft_request

        return await handle_raft_request(ctx, request)
    version = ctx.api_version
    from_follower = follower_id(request, version) >= 0
    opened = _open_session(ctx, request, version, from_follower)
    if isinstance(opened, int):  # a session error: answered without partitions
        parts, size = encode_fetch_response(version, [], error_code=opened)
        return RawResponse(parts, size)  # type: ignore[arg-type]
    session, groups, incremental = opened
    max_bytes = getattr(request, "max_bytes", 0x7FFFFFFF)
    min_bytes = request.min_bytes
    max_wait_ms = duration_ms(request.max_wait)
    told = None
    rack = str(getattr(request, "rack_id", "") or "") if version >= 11 else ""
    if incremental and session is not None and not session.privileged and not rack:
        told = session.partitions
    results, total, any_error, hw_news = _read_partitions(ctx, request, groups, max_bytes, version, told)
    if total < min_bytes and not any_error and max_wait_ms > 0:
        purgatory = ctx.broker.replica_manager.purgatory
        clock = ctx.broker.clock
        deadline = clock.monotonic_ms() + max_wait_ms
        if hw_news:
            # a follower owed a new HW is answered soon, not after its whole long poll (it
            # serves consumers up to its HW, KIP-392), but not at once: under load the next
            # batch comes within a few ms and carries the HW with it; an empty answer at once
            # cost each batch an extra round trip to one follower (see HW_NEWS_LINGER_MS)
            deadline = min(deadline, clock.monotonic_ms() + HW_NEWS_LINGER_MS)
        tps = [(t.name, p.partition) for t in results for p in t.partitions]
        while True:
            remaining = deadline - clock.monotonic_ms()
            if remaining <= 0:
                break
            t_wait = time.perf_counter()
            await purgatory.wait(tps, remaining)
            ctx.waited_s += time.perf_counter() - t_wait
            _release(results)
            results, total, any_error, news = _read_partitions(ctx, request, groups, max_bytes, version, told)
            if news and not hw_news:
                hw_news = True
                deadline = min(deadline, clock.monotonic_ms() + HW_NEWS_LINGER_MS)
            if total >= min_bytes or any_error:
                break
    session_id = session.id if session is not None else 0
    quota_entities = getattr(ctx.broker, "client_quota_entities", None)
    if quota_entities and not from_follower:  # consumer_byte_rate (KIP-219)
        quotas, now = ctx.broker.fetch_quotas, ctx.broker.clock.monotonic_ms()
        principal, client_id = ctx.session.principal, ctx.client_id or ""
        throttle = quotas.record(quota_entities, principal, client_id, total, now)
        if throttle > 0:
            # Kafka answers a throttled fetch empty (what it would have sent is not counted)
            quotas.unrecord(principal, client_id, total, now, quota_entities)
            _release(results)
            ctx.session.throttle_ms = throttle
            if session is not None and not incremental:
                # Kafka opens no session on a throttled full fetch (its clients check that a
                # full answer names every partition; this one names none)
                ctx.broker.fetch_sessions.remove(session.id)
                session_id = 0
            parts, size = encode_fetch_response(version, [], throttle_ms=throttle, session_id=session_id)
            return RawResponse(parts, size)  # type: ignore[arg-type]
    if session is not None:
        results = _session_answer(session, results, incremental)
    metrics = getattr(ctx.broker, "metrics", None)
    if metrics is not None and total:  # Kafka's BytesOutPerSec / ReplicationBytesOutPerSec
        out = metrics.replication_bytes_out if from_follower else metrics.bytes_out
        for t in results:
            n = sum(p.size for p in t.partitions)
            if n:
                out[t.name] += n
    endpoints = _leader_endpoints(ctx, results) if version >= 16 else None
    parts, size = encode_fetch_response(version, results, node_endpoints=endpoints, session_id=session_id)
    return RawResponse(parts, size)  # type: ignore[arg-type]


def _cached(w: Want) -> CachedPartition:
    return CachedPartition(w.fetch_offset, w.max_bytes, w.current_leader_epoch, w.last_fetched_epoch,
                           w.log_start_offset)


def _open_session(
    ctx: RequestContext, request: Any, version: int, from_follower: bool
) -> int | tuple[FetchSession | None, Groups, bool]:
    """The request's session (KIP-227; see :mod:`strom.server.fetch_session`): (session or
    None, the partitions to read, incremental?), or the error to answer."""
    sid = int(getattr(request, "session_id", 0)) if version >= 7 else 0
    epoch = int(getattr(request, "session_epoch", FINAL_EPOCH)) if version >= 7 else FINAL_EPOCH
    sessions: FetchSessionCache | None = getattr(ctx.broker, "fetch_sessions", None)
    if sessions is None:
        if sid != 0:
            return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        return None, request_groups(request, version), False
    if epoch in (FINAL_EPOCH, INITIAL_EPOCH):
        if sid != 0:
            sessions.remove(sid)  # closed by the client (or replaced by the new one)
        groups = request_groups(request, version)
        if epoch == FINAL_EPOCH:
            return None, groups, False
        wanted = {w.key: _cached(w) for _t, ws in groups for w in ws}
        session = sessions.create(privileged=from_follower,
                                  uses_topic_ids=version >= 13, partitions=wanted)
        return session, groups, False
    session = sessions.get(sid)
    if session is None:
        return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    if session.uses_topic_ids != (version >= 13):
        sessions.remove(sid)
        return ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    if epoch != session.epoch:
        return ErrorCode.INVALID_FETCH_SESSION_EPOCH
    session.next_epoch()
    sessions.touch(session)
    session.update(((w.key, _cached(w)) for _t, ws in request_groups(request, version) for w in ws),
                   forgotten_keys(request, version))
    return session, session_groups(session), True


def _session_answer(
    session: FetchSession, results: list[TopicResult], incremental: bool
) -> list[TopicResult]:
    """A full answer notes what it tells the client; an incremental one keeps only the
    partitions with news. Partitions that returned records move to the end of the session."""
    served = []
    out: list[TopicResult] = []
    for t in results:
        keep: list[PartitionResult] = []
        for p in t.partitions:
            has_records = bool(p.size or p.raw)
            if has_records:
                served.append(p.key)
            if not incremental:
                session.note_sent(p.key, p.high_watermark, p.last_stable_offset, p.log_start_offset)
                keep.append(p)
            elif session.to_report(
                p.key, has_records=has_records, error_code=p.error_code, high_watermark=p.high_watermark,
                last_stable_offset=p.last_stable_offset, log_start_offset=p.log_start_offset,
                forced=p.diverging_epoch is not None or p.preferred_read_replica >= 0
                or p.current_leader is not None,
            ):
                keep.append(p)
        if keep:
            t.partitions = keep
            out.append(t)
    session.rotate(served)
    return out


def _leader_endpoints(
    ctx: RequestContext, results: list[TopicResult]
) -> list[tuple[int, str, int, str | None]]:
    """KIP-951: the endpoints (on the client's listener) of the leaders the answer names."""
    ids = [p.current_leader[0] for t in results for p in t.partitions if p.current_leader is not None]
    nodes = broker_nodes(ctx.broker.metadata_cache, ids, ctx.session.listener) if ids else []
    return [(n.node_id, n.host, n.port, n.rack) for n in nodes]
