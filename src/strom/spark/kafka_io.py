"""Blocking Kafka access for the Spark data source, on :mod:`strom.client`.

Spark calls the data source synchronously (driver planner process, executor Python workers), so
:class:`KafkaSession` owns a private asyncio event loop and runs the async client on it. Executors
reuse Python workers, so :func:`session` keeps one session per client settings per process:
a micro-batch task does not pay a TCP connect and version negotiation.

On top of the client it adds what the reader needs and the client does not expose: fetches that
return the *raw* record-batch bytes (the Arrow decoder works on them), the read_committed
isolation level (fetch and ListOffsets), and aborted-transaction lists.

Error contract: broker and connection failures surface as :class:`strom.client.KafkaError`.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from strom.client import Client, KafkaError
from strom.client.messages import ApiKey
from strom.spark.options import ClientSettings, ReadOptions, StromOptionError

__all__ = ["KafkaSession", "RawFetch", "TopicPartition", "session"]

T = TypeVar("T")
TopicPartition = tuple[str, int]

_RETRIABLE = frozenset(
    {
        int(ErrorCode.not_leader_or_follower),
        int(ErrorCode.leader_not_available),
        int(ErrorCode.unknown_topic_or_partition),
        int(ErrorCode.request_timed_out),
        int(ErrorCode.network_exception),
        int(ErrorCode.fenced_leader_epoch),
        int(ErrorCode.unknown_leader_epoch),
        int(ErrorCode.offset_not_available),
    }
)


@dataclass
class RawFetch:
    """One partition's answer to a Fetch: raw v2 batches and the partition's watermarks."""

    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    error_code: int = 0
    aborted: list[tuple[int, int]] = field(default_factory=list)  # (producer_id, first_offset)


class KafkaSession:
    """A :class:`strom.client.Client` driven from blocking code. Not thread-safe: one caller."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._loop = asyncio.new_event_loop()
        self.client = Client(
            settings.bootstrap_servers,
            client_id=settings.client_id,
            request_timeout_ms=settings.request_timeout_ms,
        )
        self._lock = threading.Lock()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            return self._loop.run_until_complete(coro)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self.run(self.client.close())
        finally:
            self._loop.close()

    # ------------------------------------------------------------------ metadata

    def topic_partitions(self, opts: ReadOptions) -> list[TopicPartition]:
        """The partitions the subscription names right now (sorted). ``assign`` partitions are
        taken as given (Spark does not check them either until they are read)."""
        if opts.strategy == "assign":
            return sorted((t, p) for t, parts in opts.assign.items() for p in parts)
        if opts.strategy == "subscribe":
            md = self.run(self.client.metadata(list(opts.topics)))
            names = [t for t in opts.topics if t in md.topics and not md.topics[t].error_code]
        else:
            assert opts.pattern is not None
            md = self.run(self.client.metadata(None))
            rx = re.compile(opts.pattern)
            names = [t for t, tm in md.topics.items() if not tm.is_internal and rx.fullmatch(t)]
        out = [(t, p) for t in names for p in md.topics[t].partitions]
        return sorted(out)

    # ------------------------------------------------------------------ offsets

    def list_offsets(
        self, wanted: Mapping[TopicPartition, int], *, retries: int = 3
    ) -> dict[TopicPartition, int]:
        """Offsets for ``{(topic, partition): timestamp}`` (-2 earliest, -1 latest = high
        watermark, or the last stable offset with read_committed; a time in ms gives the first
        offset at or after it, or -1 when there is none)."""
        return self.run(self._list_offsets(dict(wanted), retries))

    async def _list_offsets(
        self, wanted: dict[TopicPartition, int], retries: int
    ) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        refresh = False
        for attempt in range(retries + 1):
            pending = {tp: ts for tp, ts in wanted.items() if tp not in out}
            if not pending:
                break
            by_leader = await self._by_leader(pending, refresh)
            errors: list[KafkaError] = []
            results = await asyncio.gather(
                *(self._list_offsets_one(node, parts, out, errors) for node, parts in by_leader.items()),
                return_exceptions=True,
            )
            for r in results:
                if isinstance(r, KafkaError):
                    errors.append(r)
                elif isinstance(r, BaseException):
                    raise r
            if not errors:
                break
            if attempt == retries or not all(e.code in _RETRIABLE for e in errors):
                raise errors[0]
            refresh = True
            await asyncio.sleep(0.1 * (attempt + 1))
        return out

    async def _by_leader(
        self, wanted: Mapping[TopicPartition, Any], refresh: bool
    ) -> dict[int, dict[TopicPartition, Any]]:
        groups: dict[int, dict[TopicPartition, Any]] = {}
        for (topic, p), v in wanted.items():
            tm = await self.client.topic(topic, refresh=refresh)
            pm = tm.partitions.get(p)
            if pm is None:
                raise KafkaError(int(ErrorCode.unknown_topic_or_partition), f"partition {topic}-{p}")
            if pm.leader < 0:
                raise KafkaError(int(ErrorCode.leader_not_available), f"partition {topic}-{p}")
            groups.setdefault(pm.leader, {})[(topic, p)] = v
        return groups

    async def _list_offsets_one(
        self,
        node: int,
        parts: dict[TopicPartition, int],
        out: dict[TopicPartition, int],
        errors: list[KafkaError],
    ) -> None:
        conn = await self.client.broker_connection(node)
        by_topic: dict[str, list[dict[str, int]]] = {}
        for (t, p), ts in parts.items():
            by_topic.setdefault(t, []).append(
                {"partition_index": p, "timestamp": ts, "current_leader_epoch": -1}
            )
        resp = await conn.request(
            ApiKey.LIST_OFFSETS,
            {
                "replica_id": -1,
                "isolation_level": self.settings.isolation_level,
                "timeout": self.settings.request_timeout_ms,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            },
        )
        for tr in resp.topics:
            for pr in tr.partitions:
                code = int(pr.error_code)
                if code:
                    errors.append(KafkaError(code, f"list offsets {tr.name}-{pr.partition_index}"))
                else:
                    out[(tr.name, int(pr.partition_index))] = int(pr.offset)

    # ------------------------------------------------------------------ fetch

    def fetch(self, topic: str, partition: int, offset: int, *, max_wait_ms: int | None = None) -> RawFetch:
        """Fetch raw batches of one partition from ``offset``; leadership errors are retried
        after a metadata refresh, others are returned in :attr:`RawFetch.error_code`."""
        return self.run(self._fetch(topic, partition, offset, max_wait_ms))

    async def _fetch(self, topic: str, partition: int, offset: int, max_wait_ms: int | None) -> RawFetch:
        refresh = False
        s = self.settings
        wait = s.fetch_max_wait_ms if max_wait_ms is None else max_wait_ms
        result = RawFetch(b"", -1, -1, -1, int(ErrorCode.unknown_server_error))
        for attempt in range(4):
            try:
                tm = await self.client.topic(topic, refresh=refresh)
                pm = tm.partitions.get(partition)
                if pm is None:
                    raise KafkaError(
                        int(ErrorCode.unknown_topic_or_partition), f"partition {topic}-{partition}"
                    )
                conn = await self.client.broker_connection(pm.leader)
                resp = await conn.request(
                    ApiKey.FETCH,
                    {
                        "replica_id": -1,
                        "max_wait": wait,
                        "min_bytes": 1,
                        "max_bytes": s.fetch_max_bytes,
                        "isolation_level": s.isolation_level,
                        "session_id": 0,
                        "session_epoch": -1,
                        "topics": [
                            {
                                "topic": topic,
                                "topic_id": tm.topic_id,
                                "partitions": [
                                    {
                                        "partition": partition,
                                        "current_leader_epoch": -1,
                                        "fetch_offset": offset,
                                        "last_fetched_epoch": -1,
                                        "log_start_offset": -1,
                                        "partition_max_bytes": s.max_partition_fetch_bytes,
                                    }
                                ],
                            }
                        ],
                        "forgotten_topics_data": [],
                        "rack_id": "",
                    },
                    max_version=None if tm.topic_id is not None else 12,
                    timeout=s.request_timeout_ms / 1000 + wait / 1000,
                )
            except KafkaError as e:
                if e.code not in _RETRIABLE or attempt == 3:
                    raise
                refresh = True
                await asyncio.sleep(0.1 * (attempt + 1))
                continue
            top = int(getattr(resp, "error_code", 0))
            if top:
                raise KafkaError(top, f"fetch {topic}-{partition}")
            for tr in resp.responses:
                for pd in tr.partitions:
                    if int(pd.partition_index) != partition:
                        continue
                    aborted = [
                        (int(a.producer_id), int(a.first_offset))
                        for a in (getattr(pd, "aborted_transactions", None) or ())
                    ]
                    result = RawFetch(
                        records=bytes(pd.records or b""),
                        high_watermark=int(pd.high_watermark),
                        last_stable_offset=int(getattr(pd, "last_stable_offset", -1)),
                        log_start_offset=int(getattr(pd, "log_start_offset", -1)),
                        error_code=int(pd.error_code),
                        aborted=aborted,
                    )
            if result.error_code in _RETRIABLE and attempt < 3:
                refresh = True
                await asyncio.sleep(0.1 * (attempt + 1))
                continue
            return result
        return result


_SESSIONS: dict[ClientSettings, KafkaSession] = {}
_SESSIONS_LOCK = threading.Lock()


def session(settings: ClientSettings) -> KafkaSession:
    """The process-wide session for ``settings`` (created on first use, reconnects lazily)."""
    with _SESSIONS_LOCK:
        s = _SESSIONS.get(settings)
        if s is None or s._loop.is_closed():
            s = KafkaSession(settings)
            _SESSIONS[settings] = s
        return s


def check_topics_exist(names: Iterable[str], found: Iterable[TopicPartition]) -> None:
    have = {t for t, _ in found}
    missing = [t for t in names if t not in have]
    if missing:
        raise StromOptionError(f"topics not found: {', '.join(missing)}")
