"""A small asyncio Kafka client: metadata, topic admin, list offsets, produce, fetch.

Works against any Kafka-compatible broker: every request is built for the version negotiated
with that broker (see :mod:`strom.client.connection`). Produce and fetch go to the partition
leader named by the latest metadata; on a leadership/metadata error they refresh metadata and
retry a few times.

Error contract: every failure is a :class:`~strom.client.errors.KafkaError` (with ``.code`` and
``.name``); unreachable brokers give :class:`~strom.client.errors.KafkaConnectionError`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from strom.client.connection import KafkaConnection, StreamOpener
from strom.client.errors import KafkaConnectionError, KafkaError, KafkaProtocolError
from strom.client.messages import ApiKey
from strom.client.security import SecurityConfig
from strom.protocol import records as rec

__all__ = [
    "EARLIEST",
    "LATEST",
    "BrokerMetadata",
    "Client",
    "ClusterMetadata",
    "FetchResult",
    "PartitionMetadata",
    "ProduceInput",
    "TopicMetadata",
    "parse_bootstrap",
]

EARLIEST = -2
LATEST = -1

ProduceInput = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]
"""(key, value, headers, timestamp_ms), as :func:`strom.protocol.records.build_batch` takes."""

_ZERO_UUID = uuid.UUID(int=0)
_RETRY_CODES = frozenset(
    {
        int(ErrorCode.not_leader_or_follower),
        int(ErrorCode.leader_not_available),
        int(ErrorCode.unknown_topic_or_partition),
        int(ErrorCode.not_controller),
        int(ErrorCode.unknown_topic_id),
        int(ErrorCode.fenced_leader_epoch),
        int(ErrorCode.unknown_leader_epoch),
        int(ErrorCode.request_timed_out),
        int(ErrorCode.network_exception),
    }
)


def parse_bootstrap(servers: str | Sequence[str], default_port: int = 9092) -> list[tuple[str, int]]:
    """``"a:9092,b:9093"`` or ``["a:9092"]`` -> ``[("a", 9092), ...]``; IPv6 as ``[::1]:9092``."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out: list[tuple[str, int]] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port_s = rest.lstrip(":")
        elif item.count(":") == 1:
            host, port_s = item.split(":")
        else:
            host, port_s = item, ""
        try:
            port = int(port_s) if port_s else default_port
        except ValueError:
            raise ValueError(f"invalid port in bootstrap server {raw!r}") from None
        if not 0 < port < 65536:
            raise ValueError(f"invalid port in bootstrap server {raw!r}")
        out.append((host or "127.0.0.1", port))
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


def topic_id_str(topic_id: uuid.UUID | None) -> str:
    """Kafka's text form of a topic id (URL-safe base64 without padding, as ``Uuid.toString``)."""
    if topic_id is None:
        topic_id = _ZERO_UUID
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


@dataclass(frozen=True)
class BrokerMetadata:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class PartitionMetadata:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    leader_epoch: int = -1
    error_code: int = 0


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    partitions: dict[int, PartitionMetadata]
    topic_id: uuid.UUID | None = None
    is_internal: bool = False
    error_code: int = 0

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions.values()), default=0)


@dataclass(frozen=True)
class ClusterMetadata:
    brokers: dict[int, BrokerMetadata]
    topics: dict[str, TopicMetadata]
    controller_id: int = -1
    cluster_id: str | None = None


@dataclass
class FetchResult:
    partition: int
    records: list[rec.Record]
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    error_code: int = 0
    batches_end: int | None = None
    """Offset after the last complete batch returned (also counts control batches, which
    yield no records): where the next fetch should start."""

    @property
    def next_offset(self) -> int | None:
        """Where to fetch next, or ``None`` when nothing was returned."""
        if self.batches_end is not None:
            return self.batches_end
        return self.records[-1].offset + 1 if self.records else None


@dataclass
class _Cache:
    metadata: ClusterMetadata | None = None
    connections: dict[tuple[str, int], KafkaConnection] = field(default_factory=dict)


class Client:
    """An asyncio Kafka client. Use as ``async with Client("host:9092") as c: ...``.
    ``security`` (TLS, SASL; default PLAINTEXT) applies to every broker connection."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "strom",
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 10_000,
        retries: int = 5,
        retry_backoff_ms: int = 100,
        security: SecurityConfig | None = None,
        open_streams: StreamOpener | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.open_streams = open_streams  # None: sockets (see KafkaConnection)
        self.security = security or SecurityConfig()
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000
        self.connect_timeout = connect_timeout_ms / 1000
        self.retries = retries
        self.retry_backoff = retry_backoff_ms / 1000
        self._cache = _Cache()
        self._connecting: dict[tuple[str, int], asyncio.Lock] = {}

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        conns = list(self._cache.connections.values())
        self._cache.connections.clear()
        for c in conns:
            await c.close()

    # ---------------------------------------------------------------- connections

    async def connection(self, host: str, port: int) -> KafkaConnection:
        """A (cached) negotiated connection to ``host:port``."""
        key = (host, port)
        lock = self._connecting.setdefault(key, asyncio.Lock())
        async with lock:
            conn = self._cache.connections.get(key)
            if conn is not None and not conn.closed:
                return conn
            conn = await KafkaConnection.open(
                host,
                port,
                client_id=self.client_id,
                request_timeout=self.request_timeout,
                connect_timeout=self.connect_timeout,
                security=self.security,
                open_streams=self.open_streams,
            )
            self._cache.connections[key] = conn
            return conn

    async def any_connection(self) -> KafkaConnection:
        """A connection to any reachable broker: open ones first, then bootstrap, then known."""
        for conn in self._cache.connections.values():
            if not conn.closed:
                return conn
        candidates = list(self.bootstrap)
        if self._cache.metadata is not None:
            candidates += [(b.host, b.port) for b in self._cache.metadata.brokers.values()]
        errors: list[str] = []
        for host, port in dict.fromkeys(candidates):
            try:
                return await self.connection(host, port)
            except KafkaConnectionError as e:
                errors.append(e.message or str(e))
        raise KafkaConnectionError("no broker reachable: " + "; ".join(errors))

    async def broker_connection(self, node_id: int) -> KafkaConnection:
        md = self._cache.metadata or await self.metadata()
        broker = md.brokers.get(node_id)
        if broker is None:
            md = await self.metadata()
            broker = md.brokers.get(node_id)
        if broker is None:
            raise KafkaError(int(ErrorCode.broker_not_available), f"broker {node_id} is not in the metadata")
        return await self.connection(broker.host, broker.port)

    # ---------------------------------------------------------------- metadata

    async def metadata(
        self, topics: Iterable[str] | None = None, *, allow_auto_topic_creation: bool = False
    ) -> ClusterMetadata:
        """Cluster metadata for ``topics`` (all topics when ``None``). Per-topic errors are kept
        in :attr:`TopicMetadata.error_code`; the cached view is updated."""
        conn = await self.any_connection()
        names = None if topics is None else list(topics)
        version = conn.version(ApiKey.METADATA)
        if names is None:
            topic_list: list[dict[str, Any]] | None = [] if version == 0 else None
        else:
            topic_list = [{"name": n} for n in names]
        resp = await conn.request(
            ApiKey.METADATA,
            {
                "topics": topic_list,
                "allow_auto_topic_creation": allow_auto_topic_creation,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
            version=version,
        )
        brokers = {
            int(b.node_id): BrokerMetadata(int(b.node_id), b.host, int(b.port), getattr(b, "rack", None))
            for b in resp.brokers
        }
        topics_md: dict[str, TopicMetadata] = {}
        for t in resp.topics:
            parts = {
                int(p.partition_index): PartitionMetadata(
                    partition=int(p.partition_index),
                    leader=int(p.leader_id),
                    replicas=tuple(int(r) for r in p.replica_nodes),
                    isr=tuple(int(r) for r in p.isr_nodes),
                    offline_replicas=tuple(int(r) for r in getattr(p, "offline_replicas", ())),
                    leader_epoch=int(getattr(p, "leader_epoch", -1)),
                    error_code=int(p.error_code),
                )
                for p in t.partitions
            }
            tid = getattr(t, "topic_id", None)
            name = t.name if t.name is not None else topic_id_str(tid)
            topics_md[name] = TopicMetadata(
                name=name,
                partitions=dict(sorted(parts.items())),
                topic_id=None if tid == _ZERO_UUID else tid,
                is_internal=bool(getattr(t, "is_internal", False)),
                error_code=int(t.error_code),
            )
        md = ClusterMetadata(
            brokers=brokers,
            topics=topics_md,
            controller_id=int(getattr(resp, "controller_id", -1)),
            cluster_id=getattr(resp, "cluster_id", None),
        )
        old = self._cache.metadata
        if old is not None and names is not None:
            merged = dict(old.topics)
            merged.update(topics_md)
            self._cache.metadata = ClusterMetadata(brokers, merged, md.controller_id, md.cluster_id)
        else:
            self._cache.metadata = md
        return md

    async def describe_topics(self, topics: Iterable[str] | None = None) -> dict[str, TopicMetadata]:
        """Metadata of existing topics; raises for a named topic that does not exist."""
        md = await self.metadata(topics)
        for t in md.topics.values():
            if t.error_code:
                raise KafkaError(t.error_code, f"topic {t.name!r}")
        return dict(sorted(md.topics.items()))

    async def list_topics(self, *, include_internal: bool = True) -> list[str]:
        md = await self.metadata(None)
        return sorted(n for n, t in md.topics.items() if include_internal or not t.is_internal)

    async def topic(self, name: str, *, refresh: bool = False) -> TopicMetadata:
        """Metadata of one topic (cached unless ``refresh``); raises if it does not exist."""
        md = self._cache.metadata
        if refresh or md is None or name not in md.topics or md.topics[name].error_code:
            md = await self.metadata([name])
        t = md.topics.get(name)
        if t is None:
            raise KafkaError(int(ErrorCode.unknown_topic_or_partition), f"topic {name!r}")
        if t.error_code:
            raise KafkaError(t.error_code, f"topic {name!r}")
        return t

    async def _leader(
        self, topic: str, partition: int, refresh: bool
    ) -> tuple[TopicMetadata, KafkaConnection]:
        t = await self.topic(topic, refresh=refresh)
        p = t.partitions.get(partition)
        if p is None:
            raise KafkaError(int(ErrorCode.unknown_topic_or_partition), f"partition {topic}-{partition}")
        if p.leader < 0:
            raise KafkaError(int(ErrorCode.leader_not_available), f"partition {topic}-{partition}")
        return t, await self.broker_connection(p.leader)

    async def _controller(self) -> KafkaConnection:
        md = self._cache.metadata or await self.metadata()
        if md.controller_id >= 0 and md.controller_id in md.brokers:
            with contextlib.suppress(KafkaConnectionError):
                return await self.broker_connection(md.controller_id)
        return await self.any_connection()

    # ---------------------------------------------------------------- admin

    async def create_topics(
        self,
        topics: Mapping[str, tuple[int, int] | tuple[int, int, Mapping[str, str]]],
        *,
        timeout_ms: int = 30_000,
        validate_only: bool = False,
    ) -> dict[str, KafkaError | None]:
        """Create topics: ``{name: (partitions, replication_factor[, configs])}`` (-1 = broker
        default). Returns per-topic ``None`` or the :class:`KafkaError`."""
        conn = await self._controller()
        specs = []
        for name, spec in topics.items():
            configs: Mapping[str, str] = spec[2] if len(spec) > 2 else {}  # type: ignore[misc]
            specs.append(
                {
                    "name": name,
                    "num_partitions": spec[0],
                    "replication_factor": spec[1],
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            )
        resp = await conn.request(
            ApiKey.CREATE_TOPICS,
            {"topics": specs, "timeout": timeout_ms, "validate_only": validate_only},
            timeout=self.request_timeout + timeout_ms / 1000,
        )
        out: dict[str, KafkaError | None] = {}
        for r in resp.topics:
            code = int(r.error_code)
            out[r.name] = KafkaError(code, getattr(r, "error_message", None)) if code else None
        self._cache.metadata = None
        return out

    async def delete_topics(
        self, names: Iterable[str], *, timeout_ms: int = 30_000
    ) -> dict[str, KafkaError | None]:
        """Delete topics by name. Returns per-topic ``None`` or the :class:`KafkaError`."""
        names = list(names)
        conn = await self._controller()
        resp = await conn.request(
            ApiKey.DELETE_TOPICS,
            {
                "topic_names": names,
                "topics": [{"name": n, "topic_id": None} for n in names],
                "timeout": timeout_ms,
            },
            timeout=self.request_timeout + timeout_ms / 1000,
        )
        out: dict[str, KafkaError | None] = {}
        for r in resp.responses:
            code = int(r.error_code)
            name = r.name if r.name is not None else topic_id_str(getattr(r, "topic_id", None))
            out[name] = KafkaError(code, getattr(r, "error_message", None)) if code else None
        self._cache.metadata = None
        return out

    async def describe_configs(self, topic: str, *, only_overrides: bool = True) -> dict[str, str | None]:
        """Topic configs; with ``only_overrides`` just those set on the topic (what
        kafka-topics.sh --describe shows). Empty if the broker lacks DescribeConfigs."""
        conn = await self.any_connection()
        if not conn.supports(ApiKey.DESCRIBE_CONFIGS):
            return {}
        resp = await conn.request(
            ApiKey.DESCRIBE_CONFIGS,
            {
                "resources": [{"resource_type": 2, "resource_name": topic, "configuration_keys": None}],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )
        out: dict[str, str | None] = {}
        for res in resp.results:
            if int(res.error_code):
                raise KafkaError(int(res.error_code), res.error_message or f"topic {topic!r}")
            for c in res.configs:
                source = getattr(c, "config_source", None)
                if only_overrides:
                    if source is not None and int(source) != 1:  # 1 = DYNAMIC_TOPIC_CONFIG
                        continue
                    if source is None and getattr(c, "is_default", False):
                        continue
                out[c.name] = None if c.is_sensitive else c.value
        return dict(sorted(out.items()))

    # ---------------------------------------------------------------- offsets

    async def list_offsets(
        self,
        topic: str,
        partitions: Mapping[int, int] | int,
        timestamp: int = LATEST,
        *,
        isolation_level: int = 0,
    ) -> dict[int, int] | int:
        """Offsets by timestamp (``EARLIEST`` -2, ``LATEST`` -1, or a time in ms).

        ``list_offsets(t, 0, EARLIEST) -> int``; ``list_offsets(t, {0: ts, 1: ts}) -> {0: off, 1: off}``.
        A timestamp after the last record gives -1 (Kafka's answer). With ``isolation_level=1``
        (read_committed) ``LATEST`` is the last stable offset."""
        if isinstance(partitions, int):
            result = await self._list_offsets(topic, {partitions: timestamp}, isolation_level)
            return result[partitions]
        return await self._list_offsets(topic, dict(partitions), isolation_level)

    async def _list_offsets(
        self, topic: str, wanted: dict[int, int], isolation_level: int = 0
    ) -> dict[int, int]:
        out: dict[int, int] = {}
        refresh = False
        for attempt in range(self.retries + 1):
            pending = {p: ts for p, ts in wanted.items() if p not in out}
            by_leader = await self._group_by_leader(topic, pending, refresh)
            errors: list[KafkaError] = []

            await _gather_conn_errors(
                errors,
                [
                    self._list_offsets_one(c, topic, parts, out, errors, isolation_level)
                    for c, parts in by_leader
                ],
            )
            if not errors:
                return out
            if attempt == self.retries or not all(e.code in _RETRY_CODES for e in errors):
                raise errors[0]
            refresh = True
            await asyncio.sleep(self.retry_backoff * (attempt + 1))
        return out

    async def _list_offsets_one(
        self,
        conn: KafkaConnection,
        topic: str,
        parts: dict[int, int],
        out: dict[int, int],
        errors: list[KafkaError],
        isolation_level: int = 0,
    ) -> None:
        resp = await conn.request(
            ApiKey.LIST_OFFSETS,
            {
                "replica_id": -1,
                "isolation_level": isolation_level,
                "timeout": int(self.request_timeout * 1000),
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": p, "timestamp": ts, "current_leader_epoch": -1}
                            for p, ts in parts.items()
                        ],
                    }
                ],
            },
        )
        for t in resp.topics:
            for pr in t.partitions:
                code = int(pr.error_code)
                if code:
                    errors.append(KafkaError(code, f"list offsets {topic}-{pr.partition_index}"))
                else:
                    out[int(pr.partition_index)] = int(pr.offset)

    async def _group_by_leader(
        self, topic: str, partitions: Mapping[int, Any], refresh: bool
    ) -> list[tuple[KafkaConnection, dict[int, Any]]]:
        t = await self.topic(topic, refresh=refresh)
        groups: dict[int, dict[int, Any]] = {}
        for p, v in partitions.items():
            pm = t.partitions.get(p)
            if pm is None:
                raise KafkaError(int(ErrorCode.unknown_topic_or_partition), f"partition {topic}-{p}")
            if pm.leader < 0:
                raise KafkaError(int(ErrorCode.leader_not_available), f"partition {topic}-{p}")
            groups.setdefault(pm.leader, {})[p] = v
        return [(await self.broker_connection(leader), parts) for leader, parts in groups.items()]

    # ---------------------------------------------------------------- produce

    async def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[ProduceInput] | bytes,
        *,
        acks: int = -1,
        compression: int = 0,
        timeout_ms: int = 30_000,
    ) -> int:
        """Append records (or one pre-built batch given as bytes) to a partition. Returns the
        base offset the broker assigned (-1 with acks=0)."""
        if isinstance(records, bytes | bytearray):
            batch = bytes(records)
        else:
            if not records:
                raise ValueError("nothing to produce")
            batch = rec.build_batch(list(records), compression=compression)
        refresh = False
        for attempt in range(self.retries + 1):
            try:
                return await self._produce_once(topic, partition, batch, acks, timeout_ms, refresh)
            except KafkaError as e:
                if attempt == self.retries or e.code not in _RETRY_CODES:
                    raise
                refresh = True
                await asyncio.sleep(self.retry_backoff * (attempt + 1))
        raise AssertionError("unreachable")

    async def _produce_once(
        self, topic: str, partition: int, batch: bytes, acks: int, timeout_ms: int, refresh: bool
    ) -> int:
        t, conn = await self._leader(topic, partition, refresh)
        max_version = None if t.topic_id is not None else 12
        resp = await conn.request(
            ApiKey.PRODUCE,
            {
                "transactional_id": None,
                "acks": acks,
                "timeout": timeout_ms,
                "topic_data": [
                    {
                        "name": topic,
                        "topic_id": t.topic_id,
                        "partition_data": [{"index": partition, "records": batch}],
                    }
                ],
            },
            max_version=max_version,
            expect_response=acks != 0,
            timeout=self.request_timeout + timeout_ms / 1000,
        )
        if resp is None:
            return -1
        for tr in resp.responses:
            for pr in tr.partition_responses:
                if int(pr.index) != partition:
                    continue
                code = int(pr.error_code)
                if code:
                    raise KafkaError(
                        code, getattr(pr, "error_message", None) or f"produce to {topic}-{partition}"
                    )
                return int(pr.base_offset)
        raise KafkaProtocolError(f"produce response lacks {topic}-{partition}")

    # ---------------------------------------------------------------- fetch

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_wait_ms: int = 500,
        max_bytes: int = 1 << 20,
        min_bytes: int = 1,
        isolation_level: int = 0,
    ) -> FetchResult:
        """Fetch decoded records of one partition from ``offset`` (records before ``offset``
        in the first batch are dropped; control records are skipped; ``isolation_level=1``:
        read_committed, records of aborted transactions are dropped too)."""
        results = await self.fetch_many(
            topic,
            {partition: offset},
            max_wait_ms=max_wait_ms,
            max_bytes=max_bytes,
            min_bytes=min_bytes,
            isolation_level=isolation_level,
        )
        r = results[partition]
        if r.error_code:
            raise KafkaError(r.error_code, f"fetch {topic}-{partition} at offset {offset}")
        return r

    async def fetch_many(
        self,
        topic: str,
        offsets: Mapping[int, int],
        *,
        max_wait_ms: int = 500,
        max_bytes: int = 1 << 20,
        min_bytes: int = 1,
        partition_max_bytes: int | None = None,
        isolation_level: int = 0,
    ) -> dict[int, FetchResult]:
        """Fetch several partitions of a topic: one request per leader, sent concurrently.
        Per-partition errors are returned in :attr:`FetchResult.error_code` (leadership errors
        are retried after a metadata refresh first)."""
        pmax = partition_max_bytes or max_bytes
        out: dict[int, FetchResult] = {}
        refresh = False
        for attempt in range(self.retries + 1):
            pending = {p: o for p, o in offsets.items() if p not in out or out[p].error_code in _RETRY_CODES}
            by_leader = await self._group_by_leader(topic, pending, refresh)
            t = await self.topic(topic)
            conn_errors: list[KafkaError] = []

            await _gather_conn_errors(
                conn_errors,
                [
                    self._fetch_one(
                        c, t, parts, out, max_wait_ms, min_bytes, max_bytes, pmax, isolation_level
                    )
                    for c, parts in by_leader
                ],
            )
            if conn_errors and (
                attempt == self.retries or not all(e.code in _RETRY_CODES for e in conn_errors)
            ):
                raise conn_errors[0]
            retry = [p for p in offsets if p not in out or out[p].error_code in _RETRY_CODES]
            if not retry or attempt == self.retries:
                break
            if (
                all(p in out and out[p].error_code == ErrorCode.unknown_topic_or_partition for p in retry)
                and attempt >= 1
            ):
                break
            refresh = True
            await asyncio.sleep(self.retry_backoff * (attempt + 1))
        for p in offsets:
            out.setdefault(p, FetchResult(p, [], error_code=int(ErrorCode.unknown_server_error)))
        return out

    async def _fetch_one(
        self,
        conn: KafkaConnection,
        t: TopicMetadata,
        parts: dict[int, int],
        out: dict[int, FetchResult],
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        pmax: int,
        isolation_level: int = 0,
    ) -> None:
        topic = t.name
        max_version = None if t.topic_id is not None else 12
        resp = await conn.request(
            ApiKey.FETCH,
            {
                "replica_id": -1,
                "max_wait": max_wait_ms,
                "min_bytes": min_bytes,
                "max_bytes": max_bytes,
                "isolation_level": isolation_level,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": topic,
                        "topic_id": t.topic_id,
                        "partitions": [
                            {
                                "partition": p,
                                "current_leader_epoch": -1,
                                "fetch_offset": o,
                                "last_fetched_epoch": -1,
                                "log_start_offset": -1,
                                "partition_max_bytes": pmax,
                            }
                            for p, o in parts.items()
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
            max_version=max_version,
            timeout=self.request_timeout + max_wait_ms / 1000,
        )
        if int(getattr(resp, "error_code", 0)):
            raise KafkaError(int(resp.error_code), f"fetch {topic}")
        for tr in resp.responses:
            for pd in tr.partitions:
                p = int(pd.partition_index)
                if p not in parts:
                    continue
                code = int(pd.error_code)
                records: list[rec.Record] = []
                batches_end: int | None = None
                if not code and pd.records:
                    data = bytes(pd.records)
                    try:
                        if isolation_level:
                            aborted = [
                                (int(a.producer_id), int(a.first_offset))
                                for a in (getattr(pd, "aborted_transactions", None) or ())
                            ]
                            decoded: Iterable[rec.Record] = decode_committed(data, aborted)
                        else:
                            decoded = rec.decode_records(data)
                        records = [r for r in decoded if r.offset >= parts[p]]
                        batches_end = _batches_end(data)
                    except rec.CorruptRecordError as e:
                        raise KafkaError(int(ErrorCode.corrupt_message), f"{topic}-{p}: {e}") from e
                out[p] = FetchResult(
                    partition=p,
                    records=records,
                    high_watermark=int(pd.high_watermark),
                    last_stable_offset=int(getattr(pd, "last_stable_offset", -1)),
                    log_start_offset=int(getattr(pd, "log_start_offset", -1)),
                    error_code=code,
                    batches_end=batches_end,
                )


async def _gather_conn_errors(errors: list[KafkaError], coros: Sequence[Any]) -> None:
    """Run coroutines concurrently; collect KafkaErrors into ``errors`` (others propagate)."""
    results = await asyncio.gather(*coros, return_exceptions=True)
    for r in results:
        if isinstance(r, KafkaError):
            errors.append(r)
        elif isinstance(r, BaseException):
            raise r


def decode_committed(data: bytes, aborted: Sequence[tuple[int, int]]) -> list[rec.Record]:
    """The records of a ``read_committed`` fetch answer: batches of aborted transactions dropped
    as Kafka's consumer does it (a producer id is aborted from the first offset of its aborted
    transaction until its ABORT marker), control batches skipped."""
    pending = sorted(aborted, key=lambda a: a[1])
    ai = 0
    aborted_pids: set[int] = set()
    out: list[rec.Record] = []
    pos, end = 0, len(data)
    while end - pos >= rec.BATCH_OVERHEAD:
        h = rec.parse_header(data, pos)
        if h.size < rec.BATCH_OVERHEAD or h.size > end - pos:
            break
        while ai < len(pending) and pending[ai][1] <= h.last_offset:
            aborted_pids.add(pending[ai][0])
            ai += 1
        if h.is_control:
            if h.producer_id in aborted_pids:
                for r in rec.decode_batch_records(data, pos, h):
                    k = r.key or b""
                    if len(k) >= 4 and int.from_bytes(k[2:4], "big") == rec.CONTROL_ABORT:
                        aborted_pids.discard(h.producer_id)
        elif not (h.is_transactional and h.producer_id in aborted_pids):
            out.extend(rec.decode_batch_records(data, pos, h))
        pos += h.size
    return out


def _batches_end(data: bytes) -> int | None:
    """Next offset after the last complete v2 batch in ``data`` (``None`` if none is complete)."""
    pos, end, nxt = 0, len(data), None
    while end - pos >= rec.BATCH_OVERHEAD:
        header = rec.parse_header(data, pos)
        if header.size < rec.BATCH_OVERHEAD or header.size > end - pos:
            break
        nxt = header.next_offset
        pos += header.size
    return nxt


def now_ms() -> int:
    """Wall-clock milliseconds (record timestamps are the producer's wall clock)."""
    return time.time_ns() // 1_000_000
