"""Blocking Kafka access for the Spark data source, on :mod:`strom.client`.

Spark calls the data source synchronously (driver planner process, executor Python workers), so
:class:`KafkaSession` owns a private asyncio event loop and runs the async client on it. Executors
reuse Python workers, so :func:`session` keeps one session per client settings per process:
a micro-batch task does not pay a TCP connect and version negotiation.

On top of the client it adds what the reader needs and the client does not expose: fetches that
return the *raw* record-batch bytes (the Arrow decoder works on them), the read_committed
isolation level (fetch and ListOffsets), and aborted-transaction lists.

Fetches, the reader's bulk traffic, do not go through the asyncio client: an asyncio stream
gathers a multi-megabyte answer 64 KiB at a time through the event loop into a growing
``bytearray`` and copies it out again, which cost more CPU than decoding the records. A
:class:`FetchChannel` is a plain blocking socket per broker that speaks Fetch v11 only (every
broker from Kafka 2.3 on, strom included, knows it; v11 has the isolation level, the last stable
offset, the log start offset and the aborted transactions) and reads each answer with
``recv_into`` straight into one of two reusable buffers, used in turn: the records are handed
out as a ``memoryview`` of it, valid until the channel's next-but-one fetch. Metadata,
leadership and the version check still come from the asyncio client; a broker without v11 is
fetched from through the client.

Security: a channel speaks what the session's client speaks (``ClientSettings.security``): with
TLS its socket is wrapped in the settings' :class:`ssl.SSLContext` (``SSLSocket.recv_into``
decrypts straight into the same buffers; ``SO_RCVLOWAT`` is left alone there, since TLS
records the ``ssl`` layer has already pulled in do not count towards it), and with SASL it runs
the client's SASL exchange once after connecting. A plaintext channel does no extra work.

Read-ahead (:meth:`KafkaSession.fetch_ahead`): a reader walks a partition fetch after fetch, and
the next fetch's offset is known from the batch headers alone, so while the caller decodes one
answer and Spark ships its rows to the JVM, the next answer is fetched on a helper thread (the
socket wait releases the GIL) into the channel's other buffer. At most one fetch is ever ahead,
so the two buffers suffice; every other use of the session waits for it first.

Error contract: broker and connection failures surface as :class:`strom.client.KafkaError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import ssl
import struct
import threading
import time
from collections.abc import Coroutine, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from strom.client import Client, KafkaError
from strom.client.connection import tls_failure
from strom.client.errors import KafkaConnectionError, KafkaProtocolError
from strom.client.messages import ApiKey, decode_response, encode_request
from strom.client.security import SASL_AUTHENTICATE, SecurityConfig, sasl_exchange
from strom.protocol import records as rec
from strom.spark.options import ClientSettings, ReadOptions, StromOptionError

__all__ = ["FetchChannel", "KafkaSession", "RawFetch", "TopicPartition", "next_fetch_offset", "session"]

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
    """One partition's answer to a Fetch: raw v2 batches and the partition's watermarks.
    ``records`` is a view of a :class:`FetchChannel`'s buffer when it comes from
    :meth:`KafkaSession.fetch_view` (valid until the next fetch), bytes otherwise."""

    records: bytes | memoryview
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    error_code: int = 0
    aborted: list[tuple[int, int]] = field(default_factory=list)  # (producer_id, first_offset)


FETCH_VERSION = 11
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqqq")  # index, error, high watermark, LSO, log start
_ABORTED = struct.Struct(">qq")
_RCVLOWAT = 1 << 20  # bytes a blocked fetch read waits for before it wakes up


class FetchChannel:
    """A blocking connection to one broker for Fetch v11, answers read into one reusable buffer.

    Not thread-safe (one caller). Socket failures raise :class:`KafkaConnectionError` and leave
    the channel closed; an answer that does not parse raises :class:`KafkaProtocolError`."""

    def __init__(
        self,
        host: str,
        port: int,
        client_id: str | None,
        timeout: float,
        security: SecurityConfig | None = None,
        sasl_authenticate_version: int = 1,
    ) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self._cid = 0
        self._bufs = [bytearray(1 << 20), bytearray(1 << 20)]  # used in turn
        self._turn = 0
        self._lowat = 1
        self._max_lowat = _RCVLOWAT
        try:
            self._sock: socket.socket | None = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {e}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if security is None or security.protocol == "PLAINTEXT":
            return
        try:
            ctx = security.ssl_context()
            if ctx is not None:
                self._max_lowat = 1  # see the module docstring
                self._sock = ctx.wrap_socket(self._sock, server_hostname=host)
            if security.uses_sasl:
                self._authenticate(security, sasl_authenticate_version)
        except ssl.SSLError as e:
            self.close()
            raise KafkaConnectionError(tls_failure(host, port, e)) from None
        except OSError as e:
            self.close()
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {e}") from None
        except BaseException:
            self.close()
            raise

    def _authenticate(self, security: SecurityConfig, version: int) -> None:
        steps = sasl_exchange(security, version)
        resp: Any = None
        while True:
            try:
                api_key, v, data = steps.send(resp)
            except StopIteration:
                return
            resp = self._roundtrip(api_key, v, data)

    def _roundtrip(self, api_key: int, version: int, data: dict[str, Any]) -> Any:
        """One request and its decoded answer (the connection setup's small exchanges)."""
        assert self._sock is not None
        cid = self._cid
        self._cid = (cid + 1) & 0x7FFFFFFF
        frame, resp_cls = encode_request(api_key, version, cid, self.client_id, data)
        self._sock.sendall(frame)
        size = _I32.unpack(self._recv_exact(memoryview(bytearray(4))))[0]
        if size < 4 or size > 1 << 24:
            raise KafkaProtocolError(f"invalid response frame size {size}")
        body = bytes(self._recv_exact(memoryview(bytearray(size))))
        if _I32.unpack_from(body, 0)[0] != cid:
            raise KafkaProtocolError(f"correlation id mismatch from {self.host}:{self.port}")
        return decode_response(resp_cls, body)

    @property
    def closed(self) -> bool:
        return self._sock is None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def fetch(self, request: dict[str, Any], timeout: float) -> list[tuple[str, int, RawFetch]]:
        """Send one Fetch v11 (``request`` as for kio) and return ``(topic, partition, answer)``
        for every partition of the answer; records are views of one of the channel's two
        buffers (valid until the next-but-one fetch)."""
        if self._sock is None:
            raise KafkaConnectionError(f"connection to {self.host}:{self.port} closed")
        cid = self._cid
        self._cid = (cid + 1) & 0x7FFFFFFF
        frame, _ = encode_request(ApiKey.FETCH, FETCH_VERSION, cid, self.client_id, request)
        try:
            self._sock.settimeout(timeout)
            self._sock.sendall(frame)
            size = _I32.unpack(self._recv_exact(memoryview(bytearray(4))))[0]
            if size < 8 or size > 1 << 31:
                raise KafkaProtocolError(f"invalid fetch response frame size {size}")
            self._turn ^= 1
            buf = self._bufs[self._turn]
            if len(buf) < size:
                # a new buffer, never resized in place: views of the old one may still be alive
                buf = self._bufs[self._turn] = bytearray(max(size, 2 * len(buf)))
            body = self._recv_exact(memoryview(buf)[:size])
        except (OSError, KafkaProtocolError) as e:
            self.close()
            if isinstance(e, KafkaProtocolError):
                raise
            raise KafkaConnectionError(f"fetch from {self.host}:{self.port} failed: {e}") from None
        if _I32.unpack_from(body, 0)[0] != cid:
            self.close()
            raise KafkaProtocolError(f"correlation id mismatch from {self.host}:{self.port}")
        try:
            return _parse_fetch_v11(body)
        except (struct.error, IndexError, ValueError) as e:
            self.close()
            raise KafkaProtocolError(f"cannot decode FetchResponse v11: {e}") from None

    def _recv_exact(self, view: memoryview) -> memoryview:
        assert self._sock is not None
        n = len(view)
        got = 0
        while got < n:
            # wake up for big pieces only (at most what is still missing, or the wait would
            # never end): fewer recv calls and GIL hand-overs on the read-ahead thread
            low = min(n - got, self._max_lowat)
            if low != self._lowat:
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, low)
                self._lowat = low
            r = self._sock.recv_into(view[got:], n - got)
            if r == 0:
                raise OSError("connection closed by the broker")
            got += r
        return view


def _parse_fetch_v11(body: memoryview) -> list[tuple[str, int, RawFetch]]:
    """FetchResponse v11 (response header v0): correlation id, throttle, error, session id,
    then per topic per partition: index, error, high watermark, last stable offset, log start
    offset, aborted transactions, preferred read replica, records."""
    top_error = _I16.unpack_from(body, 8)[0]
    if top_error:
        raise KafkaError(top_error, "fetch")
    pos = 14
    out: list[tuple[str, int, RawFetch]] = []
    (n_topics,) = _I32.unpack_from(body, pos)
    pos += 4
    for _ in range(n_topics):
        (tlen,) = _I16.unpack_from(body, pos)
        topic = bytes(body[pos + 2 : pos + 2 + tlen]).decode()
        pos += 2 + tlen
        (n_parts,) = _I32.unpack_from(body, pos)
        pos += 4
        for _ in range(n_parts):
            index, error, hw, lso, lstart = _PARTITION_HEAD.unpack_from(body, pos)
            pos += _PARTITION_HEAD.size
            (n_aborted,) = _I32.unpack_from(body, pos)
            pos += 4
            aborted = []
            for _ in range(max(n_aborted, 0)):
                aborted.append(_ABORTED.unpack_from(body, pos))
                pos += 16
            pos += 4  # preferred read replica
            (rlen,) = _I32.unpack_from(body, pos)
            pos += 4
            if rlen < 0:
                records = body[pos:pos]
            else:
                if pos + rlen > len(body):
                    raise ValueError("records run past the end of the answer")
                records = body[pos : pos + rlen]
                pos += rlen
            out.append((topic, index, RawFetch(records, hw, lso, lstart, error, aborted)))
    return out


class KafkaSession:
    """A :class:`strom.client.Client` driven from blocking code. Not thread-safe: one caller."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._loop = asyncio.new_event_loop()
        self.client = Client(
            settings.bootstrap_servers,
            client_id=settings.client_id,
            request_timeout_ms=settings.request_timeout_ms,
            security=settings.security,
        )
        self._lock = threading.Lock()
        self._channels: dict[int, FetchChannel] = {}  # by broker node id
        self._ahead: tuple[tuple[str, int, int], Future[RawFetch]] | None = None
        self._pool: ThreadPoolExecutor | None = None
        # (topic, partition) -> (leader node id, host, port, topic id, broker knows Fetch v11)
        self._leaders: dict[TopicPartition, tuple[int, str, int, Any, bool]] = {}
        self._sasl_versions: dict[int, int] = {}  # node id -> SaslAuthenticate version

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            return self._loop.run_until_complete(coro)

    def close(self) -> None:
        self._settle()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for ch in self._channels.values():
            ch.close()
        self._channels.clear()
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
        f = self.fetch_view(topic, partition, offset, max_wait_ms=max_wait_ms)
        if isinstance(f.records, memoryview):
            f.records = bytes(f.records)
        return f

    def fetch_view(
        self, topic: str, partition: int, offset: int, *, max_wait_ms: int | None = None
    ) -> RawFetch:
        """:meth:`fetch`, with the records a view of the fetch channel's buffer: valid only
        until this session's next fetch from the same broker."""
        self._settle()
        return self._fetch_view(topic, partition, offset, max_wait_ms)

    def fetch_ahead(self, topic: str, partition: int, offset: int, until: int) -> RawFetch:
        """:meth:`fetch_view` of ``offset`` (taken from the read-ahead when it fetched just
        that), then, if the answer is good and ends before ``until``, start fetching from where
        it ends on the helper thread. The records stay valid until the next call."""
        f: RawFetch | None = None
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            key, fut = ahead
            try:
                got = fut.result()
            except Exception:  # a failed guess is retried (and reported) below
                got = None
            if key == (topic, partition, offset):
                f = got
        if f is None:
            f = self._fetch_view(topic, partition, offset, None)
        if not f.error_code:
            nxt = next_fetch_offset(f.records)
            if nxt is not None and offset < nxt < until:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(1, thread_name_prefix="strom-fetch-ahead")
                fut = self._pool.submit(self._fetch_view, topic, partition, nxt, None)
                self._ahead = ((topic, partition, nxt), fut)
        return f

    def _settle(self) -> None:
        """Wait for (and drop) the read-ahead fetch, if any: the channels have one user."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            with contextlib.suppress(Exception):  # nobody asked for it
                ahead[1].result()

    def _fetch_view(self, topic: str, partition: int, offset: int, max_wait_ms: int | None) -> RawFetch:
        s = self.settings
        wait = s.fetch_max_wait_ms if max_wait_ms is None else max_wait_ms
        tp = (topic, partition)
        refresh = False
        result = RawFetch(b"", -1, -1, -1, int(ErrorCode.unknown_server_error))
        for attempt in range(4):
            try:
                leader = self._leaders.get(tp) if not refresh else None
                if leader is None:
                    leader = self.run(self._leader(topic, partition, refresh))
                    self._leaders[tp] = leader
                node, host, port, _topic_id, v11 = leader
                if not v11:
                    return self.run(self._fetch(topic, partition, offset, max_wait_ms))
                ch = self._channels.get(node)
                if ch is None or ch.closed or (ch.host, ch.port) != (host, port):
                    if ch is not None:
                        ch.close()
                    ch = FetchChannel(
                        host,
                        port,
                        s.client_id,
                        s.request_timeout_ms / 1000,
                        s.security,
                        self._sasl_versions.get(node, 1),
                    )
                    self._channels[node] = ch
                answers = ch.fetch(
                    _fetch_request(s, wait, topic, None, partition, offset),
                    s.request_timeout_ms / 1000 + wait / 1000,
                )
            except KafkaError as e:
                self._leaders.pop(tp, None)
                if e.code not in _RETRIABLE or attempt == 3:
                    raise
                refresh = True
                time.sleep(0.1 * (attempt + 1))
                continue
            for t, p, f in answers:
                if t == topic and p == partition:
                    result = f
            if result.error_code in _RETRIABLE and attempt < 3:
                self._leaders.pop(tp, None)
                refresh = True
                time.sleep(0.1 * (attempt + 1))
                continue
            return result
        return result

    async def _leader(self, topic: str, partition: int, refresh: bool) -> tuple[int, str, int, Any, bool]:
        tm = await self.client.topic(topic, refresh=refresh)
        pm = tm.partitions.get(partition)
        if pm is None:
            raise KafkaError(int(ErrorCode.unknown_topic_or_partition), f"partition {topic}-{partition}")
        conn = await self.client.broker_connection(pm.leader)
        if self.settings.security.uses_sasl:
            self._sasl_versions[pm.leader] = conn.version(SASL_AUTHENTICATE, max_version=2)
        lo, hi = conn.api_versions.get(ApiKey.FETCH, (0, -1))
        return pm.leader, conn.host, conn.port, tm.topic_id, lo <= FETCH_VERSION <= hi

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
                    _fetch_request(s, wait, topic, tm.topic_id, partition, offset),
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


def next_fetch_offset(records: bytes | bytearray | memoryview) -> int | None:
    """The offset after the last complete batch of a fetch answer (None: no complete batch)."""
    nxt = None
    pos = 0
    total = len(records)
    unpack = rec.HEADER_STRUCT.unpack_from
    while total - pos >= rec.BATCH_OVERHEAD:
        h = rec.BatchHeader._make(unpack(records, pos))
        if h.size > total - pos or h.size < rec.BATCH_OVERHEAD:
            break
        nxt = h.next_offset
        pos += h.size
    return nxt


def _fetch_request(
    s: ClientSettings, wait: int, topic: str, topic_id: Any, partition: int, offset: int
) -> dict[str, Any]:
    return {
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
                "topic_id": topic_id,
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
    }


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
