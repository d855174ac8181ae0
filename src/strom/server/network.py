"""The asyncio network driver: accept connections, feed bytes to the sans-IO ServerConnection,
run handlers, write responses.

Rules:
- A connection's requests are handled one at a time, in arrival order (Kafka mutes a channel
  while a request is in progress), so responses go out in order by construction and
  ``ServerConnection.send`` checks it.
- Reading pauses while more than a few requests are queued (back-pressure); the frame buffer
  is bounded by ``socket.request.max.bytes``.
- Every byte read counts against the broker's ``queued.max.request.bytes`` pool
  (:class:`RequestMemoryPool`) until its request has been handled or the connection is gone;
  a connection the pool refuses stops reading until memory is released (Kafka mutes channels
  the same way when its memory pool is exhausted).
- Malformed input (``ProtocolError``) closes that connection only, after logging it.
- Response parts may be file regions ``(fd, position, length)``: written with ``sendfile``
  where the event loop supports it natively and the connection is not TLS (the bytes must go
  through the TLS layer), else read with ``os.pread`` and written.
- One server per listener; on SSL and SASL_SSL listeners each connection is upgraded to TLS
  with the listener's context before any request is read (a failed handshake is logged and
  closes it). Every connection carries a :class:`ConnectionSession` for its listener; on SSL
  listeners the principal is taken from the client certificate once the handshake is done.
- On SASL listeners an unauthenticated connection may send only ApiVersions, SaslHandshake and
  SaslAuthenticate; anything else closes it (Kafka's rule).
- A connection that neither sends nor is answered anything for ``connections.max.idle.ms``
  (Kafka's default 10 minutes; negative: never) is closed, as Kafka's selector does; a request
  in progress (a long-poll Fetch) is not idleness. One timer per connection, re-armed only when
  it fires: received bytes and answered requests just note the time.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import ssl
import struct
import time
from collections import deque
from collections.abc import Collection, Coroutine
from typing import TYPE_CHECKING, Any, cast

from ..observability.metrics import BrokerMetrics
from ..protocol import codec
from ..protocol.api_versions import API_VERSIONS_KEY, KAFKA_API_RANGES, api_name, supports
from ..protocol.connection import IncomingRequest, ServerConnection
from ..protocol.error_responses import error_response
from ..protocol.errors import ErrorCode, KafkaError, ProtocolError
from ..protocol.framing import response_header
from ..security.principal_mapping import NoRuleAppliesError
from ..security.session import ConnectionSession
from ..security.tls import principal_from_peercert
from .authz import check_cluster_gate
from .client_quotas import request_throttle_ms
from .context import Deferred, NoResponse, RawResponse, RequestContext
from .handlers import REGISTRY
from .handlers.fetch import follower_id
from .listener import Listener, start_listener

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("strom.network")
_conn_ids = itertools.count(1)
_MAX_QUEUED = 16
_MAX_DEFERRED = 16  # a connection's requests handled whose responses wait (acks=-1 produce)
_STEP_BUDGET_S = 0.002  # a connection handles queued requests for this long before it yields
# what an unauthenticated connection on a SASL listener may send
_SASL_PRE_AUTH_KEYS = frozenset({API_VERSIONS_KEY, 17, 36})  # ApiVersions, SaslHandshake, SaslAuthenticate
# not counted against request_percentage (KIP-124; Kafka exempts inter-broker requests): SASL,
# KRaft and controller traffic between nodes
_QUOTA_EXEMPT = frozenset({17, 36, 52, 53, 54, 55, 56, 58, 59, 62, 63, 64, 67, 80})


_FETCH_KEY = 1
_I32 = struct.Struct(">i")


def _with_throttle(key: int, out: Any, throttle: int) -> None:
    """The answer says to wait at least ``throttle`` ms (Kafka: the larger of the byte-rate and
    request quotas' throttles): a body still to be encoded, a Fetch answer encoded by hand (its
    throttle_time_ms leads the body, as in a Metadata answer assembled by hand), or a Deferred
    answer (applied when it completes)."""
    if isinstance(out, dict):
        if "throttle_time" in out:
            out["throttle_time"] = max(out["throttle_time"] or 0, throttle)
    elif isinstance(out, Deferred):
        out.throttle_ms = max(out.throttle_ms, throttle)
    elif isinstance(out, RawResponse) and (key == _FETCH_KEY or out.throttle_leads) and out.parts:
        head = out.parts[0]
        if isinstance(head, bytes | bytearray) and len(head) >= 4 and _I32.unpack_from(head)[0] < throttle:
            out.parts[0] = _I32.pack(throttle) + bytes(head[4:])


class KafkaProtocol(asyncio.Protocol):
    """One client connection.

    TLS (SSL and SASL_SSL listeners) comes in one of two ways. With ``tls`` the accepted TCP
    connection is upgraded here with ``loop.start_tls``, so a failed handshake can be logged
    (Kafka logs failed authentications); used on asyncio's loop, which honours pause_reading
    in connection_made so no byte slips past the TLS layer. On uvloop, which starts reading
    regardless, the server itself is a TLS server (``create_server(ssl=...)``): connection_made
    then comes after a successful handshake and failed handshakes go unlogged."""

    def __init__(
        self,
        broker: Broker,
        session: ConnectionSession | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.broker = broker
        self.session = session if session is not None else ConnectionSession()
        self.tls = tls
        self.conn = ServerConnection(broker.config["socket.request.max.bytes"])
        pre_auth = broker.config["sasl.server.max.receive.size"]
        # Kafka bounds frames before SASL authentication; lifted once authenticated
        self.pre_auth_limit = (
            not self.session.authenticated and pre_auth < broker.config["socket.request.max.bytes"]
        )
        if self.pre_auth_limit:
            self.conn.max_frame_size = pre_auth
            self.conn.limit_name = "sasl.server.max.receive.size"
        # file regions go out with native sendfile unless the bytes must pass through TLS
        self.sendfile = broker.native_sendfile and not self.session.uses_tls
        self.loop: asyncio.AbstractEventLoop | None = None
        self.queue: deque[IncomingRequest] = deque()
        self.transport: asyncio.Transport | None = None
        self.raw_transport: asyncio.Transport | None = None  # the TCP transport under TLS
        self.worker: asyncio.Task[None] | None = None
        self.wakeup = asyncio.Event()
        self.closed = False
        self.paused = False  # reading paused: too many queued requests, or no memory in the pool
        self.queue_full = False
        self.memory_wait = False
        self.pool = broker.request_pool
        self.charged = 0  # bytes read and not yet released to the pool
        self.peer = "?"
        self.connection_id = f"conn-{next(_conn_ids)}"
        idle_ms = broker.config["connections.max.idle.ms"]
        self.idle_timeout = idle_ms / 1000 if idle_ms >= 0 else None
        self.last_active = 0.0  # loop time of the last bytes received or response written
        self.busy = False  # a request is being handled
        # responses completing later (Deferred), in request order: each task sends after the last
        self.deferred: deque[asyncio.Task[None]] = deque()
        self.idle_timer: asyncio.TimerHandle | None = None
        self.metrics: BrokerMetrics | None = getattr(broker, "metrics", None)
        self.start_delay = 0.0  # seconds before the first request is served (KIP-612)

    # ------------------------------------------------------------------ asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses but have the same interface
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        throttle = getattr(self.broker, "connection_throttle", None)  # KIP-612 connection rates
        if throttle is not None:
            delay_ms, close = throttle(self.session.listener, peer[0] if peer else "")
            if close:  # over its IP's connection_creation_rate: closed after the delay (Kafka)
                log.info("closing connection from %s on listener %s in %d ms: connection_creation_rate "
                         "quota of its IP exceeded", self.peer, self.session.listener, delay_ms)
                self.closed = True
                transport.pause_reading()  # type: ignore[attr-defined]
                asyncio.get_running_loop().call_later(delay_ms / 1000.0, transport.close)
                return
            self.start_delay = delay_ms / 1000.0
        self.broker.connections.add(self)
        if self.metrics is not None:
            self.metrics.connections_created[self.session.listener] += 1
        loop = self.loop = asyncio.get_running_loop()
        self.last_active = loop.time()
        if self.idle_timeout is not None:
            self.idle_timer = loop.call_at(self.last_active + self.idle_timeout, self._check_idle)
        if self.tls is None:
            self.transport = cast(asyncio.Transport, transport)
            # a TLS server's transport: the handshake is done
            if self.session.uses_tls and not self._tls_established(self.transport):
                return
            self.worker = loop.create_task(self._run())
        else:
            self.raw_transport = cast(asyncio.Transport, transport)
            # no byte may reach this protocol before start_tls puts the TLS layer in between
            # (it resumes reading itself)
            self.raw_transport.pause_reading()
            self.worker = loop.create_task(self._handshake_then_run(self.raw_transport, self.tls))

    async def _handshake_then_run(self, raw: asyncio.Transport, context: ssl.SSLContext) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport = await loop.start_tls(raw, self, context, server_side=True)
        except (TimeoutError, OSError) as e:  # ssl.SSLError is an OSError
            # a refused handshake is worth an INFO line (Kafka logs it), and so is a handshake
            # that timed out (Python 3.11's asyncio reports that as ConnectionAbortedError, later
            # ones as TimeoutError); a peer that connected and left without one (port probes,
            # health checks) only a DEBUG line
            refused = (ssl.SSLError, TimeoutError, ConnectionAbortedError)
            level = logging.INFO if isinstance(e, refused) else logging.DEBUG
            log.log(
                level,
                "failed authentication with %s on listener %s (TLS handshake failed: %s)",
                self.peer,
                self.session.listener,
                getattr(e, "reason", None) or str(e) or type(e).__name__,
            )
            self.closed = True
            self._stop_idle_timer()
            raw.close()
            self.broker.connections.discard(self)
            return
        if transport is None or self.closed:
            raw.close()
            return
        self.transport = transport
        if self._tls_established(transport):
            await self._run()

    def _tls_established(self, transport: asyncio.BaseTransport) -> bool:
        if not self.session.uses_sasl:  # on SASL_SSL the principal comes from SASL
            mapper = getattr(self.broker, "principal_mapper", None)  # ssl.principal.mapping.rules
            try:
                self.session.principal = principal_from_peercert(transport.get_extra_info("peercert"), mapper)
            except NoRuleAppliesError as e:
                # Kafka fails the authentication: the connection is closed
                log.info("closing TLS connection from %s on listener %s: %s",
                         self.peer, self.session.listener, e)
                self.close()
                return False
        log.debug(
            "TLS connection from %s on listener %s, principal %s",
            self.peer,
            self.session.listener,
            self.session.principal,
        )
        return True

    def _check_idle(self) -> None:
        """The idle timer fired: close the connection if nothing happened for the idle timeout,
        else re-arm for the moment it would have been idle that long."""
        self.idle_timer = None
        timeout = self.idle_timeout
        if self.closed or timeout is None:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self.busy or self.queue or self.deferred:  # a request in progress is no idleness
            due = now + max(timeout, 0.05)
        elif now - self.last_active >= timeout:
            log.debug(
                "closing connection from %s on listener %s: idle for more than connections.max.idle.ms (%d)",
                self.peer,
                self.session.listener,
                int(timeout * 1000),
            )
            self.close()
            return
        else:
            due = self.last_active + timeout
        self.idle_timer = loop.call_at(due, self._check_idle)

    def data_received(self, data: bytes) -> None:
        assert self.loop is not None  # set by connection_made
        if self.closed:  # closed by us; the pool has had its bytes back
            return
        self.last_active = self.loop.time()
        pool = self.pool
        if pool.bounded:
            pool.charge(len(data))
            self.charged += len(data)
        try:
            reqs = self.conn.receive_data(data)
        except ProtocolError as e:
            log.warning("closing connection from %s: %s", self.peer, e)
            self.close()
            return
        if reqs:
            self.queue.extend(reqs)
            self.wakeup.set()
            if len(self.queue) >= _MAX_QUEUED:
                self.queue_full = True
        if pool.bounded:
            if reqs and pool.overdraft is self:
                pool.frame_done(self)  # the frame it was let past the mark for is complete
            size = self.conn.pending_frame_size
            if not pool.may_read(self, size):
                self.memory_wait = True
                pool.wait(self, size, self._memory_available)
        self._update_reading()

    def _memory_available(self) -> None:
        self.memory_wait = False
        self._update_reading()

    def _update_reading(self) -> None:
        pause = self.queue_full or self.memory_wait
        if pause != self.paused and self.transport is not None and not self.closed:
            self.paused = pause
            if pause:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def _release(self, n: int) -> None:
        """Give ``n`` bytes of this connection's back to the pool (at most what it holds)."""
        n = min(n, self.charged)
        if n > 0:
            self.charged -= n
            self.pool.release(n)

    def _release_all(self) -> None:
        self.pool.forget(self)
        self._release(self.charged)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.metrics is not None and self in self.broker.connections:
            self.metrics.connections_closed[self.session.listener] += 1
        self.closed = True
        self.wakeup.set()
        self._stop_idle_timer()
        self._cancel_deferred()
        self._release_all()
        self.broker.connections.discard(self)
        on_closed = getattr(self.broker, "on_connection_closed", None)
        if on_closed is not None:  # share sessions end with their connection (KIP-932)
            on_closed(self.connection_id)

    def _stop_idle_timer(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None

    def _cancel_deferred(self) -> None:
        """The connection is gone: responses still waiting (acks=-1) will never be sent."""
        for task in list(self.deferred):
            if task is not asyncio.current_task():
                task.cancel()

    def close(self) -> None:
        self.closed = True
        self.wakeup.set()
        self._stop_idle_timer()
        self._cancel_deferred()
        self._release_all()
        if self.transport is not None:
            self.transport.close()
        elif self.raw_transport is not None:  # still in the TLS handshake
            self.raw_transport.close()

    # ------------------------------------------------------------------ request loop
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        if self.start_delay > 0:  # over max.connection.creation.rate: served after a delay (KIP-612)
            await asyncio.sleep(self.start_delay)
        step_started = loop.time()
        try:
            while not self.closed:
                if not self.queue:
                    self.wakeup.clear()
                    await self.wakeup.wait()
                    step_started = loop.time()
                    continue
                if loop.time() - step_started > _STEP_BUDGET_S:
                    # pipelined requests are handled back to back without suspending: after a
                    # while, let the other connections and the timers run (one loop iteration)
                    await asyncio.sleep(0)
                    step_started = loop.time()
                if len(self.deferred) >= _MAX_DEFERRED:  # bounded: wait for the oldest
                    await asyncio.wait({self.deferred[0]})
                    continue
                req = self.queue.popleft()
                if self.queue_full and len(self.queue) < _MAX_QUEUED // 2:
                    self.queue_full = False
                    self._update_reading()
                self.busy = True
                later = False
                try:
                    later = await self._handle(req)
                    await self._throttle(self.session)  # a client over its quota (KIP-219)
                finally:
                    self.busy = False
                    self.last_active = loop.time()
                    if not self.closed and not later:
                        self._release(req.size + 4)
        except ProtocolError as e:
            log.warning("closing connection from %s: %s", self.peer, e)
            self.close()
        except (ConnectionError, asyncio.CancelledError):
            self.close()
        except Exception:
            log.exception("unexpected error on connection from %s", self.peer)
            self.close()

    @staticmethod
    async def _throttle(session: ConnectionSession) -> None:
        """A client over its quota: no further request of this connection is read for the
        throttle time (KIP-219: the response, sent at once, tells the client how long)."""
        if session.throttle_ms > 0:
            delay, session.throttle_ms = session.throttle_ms, 0
            await asyncio.sleep(delay / 1000.0)

    async def _handle(self, req: IncomingRequest) -> bool:
        """Handle one request; True if its response completes later (:class:`Deferred`: sent,
        and the request's memory released, by its task)."""
        h = req.header
        key, version = h.api_key, h.api_version
        session = self.session
        if not session.authenticated and key not in _SASL_PRE_AUTH_KEYS:  # only SASL sessions start so
            log.info(
                "closing unauthenticated connection from %s on listener %s: %s before SASL authentication",
                self.peer,
                session.listener,
                api_name(key),
            )
            self.close()
            return False
        if (
            session.session_expiry_ms is not None
            and key not in _SASL_PRE_AUTH_KEYS
            and self.broker.clock.monotonic_ms() >= session.session_expiry_ms
        ):
            # KIP-368: the SASL session ended without re-authentication
            log.info("closing connection from %s on listener %s: SASL session expired (%s)",
                     self.peer, session.listener, api_name(key))
            self.close()
            return False
        handler = REGISTRY.get(key)
        if handler is None or not supports(key, version, REGISTRY.keys()):
            await self._drain_deferred()
            await self._unsupported(req)
            return False
        start = time.perf_counter()
        request = codec.decode_request(key, version, req.frame, req.body_pos)
        ctx = RequestContext(
            key,
            version,
            h.correlation_id,
            h.client_id,
            self.peer.rsplit(":", 1)[0],
            self.connection_id,
            self.broker,
            self.session,
        )
        resp_type = codec.response_type(key, version)
        work = _call(self.broker, ctx, handler, request)
        quota = None
        if getattr(self.broker, "request_quotas_active", False) and key not in _QUOTA_EXEMPT:
            quota = (start, h.client_id or "", ctx)
        result, error = await self._answer(key, version, resp_type, request, work, quota)
        if isinstance(result, Deferred):
            prev = self.deferred[-1] if self.deferred else None
            assert self.loop is not None
            task = self.loop.create_task(self._complete_later(prev, req, resp_type, request, result, start))
            self.deferred.append(task)
            task.add_done_callback(self.deferred.remove)
            return True
        await self._drain_deferred()  # the responses before this one go first
        await self._respond(h, result, request, start, error)
        return False

    async def _answer(
        self, key: int, version: int, resp_type: type, request: Any,
        work: Coroutine[Any, Any, Any], quota: tuple[float, str, RequestContext] | None = None,
        extra_throttle: int = 0,
    ) -> tuple[RawResponse | NoResponse | Deferred, int]:
        """The handler's (or its deferred part's) result, encoded, and the answer's top-level
        error code (a metric); failures as Kafka answers them. ``quota`` (set when
        request_percentage quotas exist): when the request's handling began and its client id
        (KIP-124)."""
        result: RawResponse | NoResponse | Deferred
        error: int = ErrorCode.NONE
        try:
            out = await work
            if quota is not None:
                self._request_quota(key, out, *quota)
            elif extra_throttle > 0:  # a deferred answer of a throttled request
                _with_throttle(key, out, extra_throttle)
            if isinstance(out, (NoResponse, RawResponse, Deferred)):
                result = out
            else:
                error = out.get("error_code", ErrorCode.NONE) or ErrorCode.NONE
                result = _encoded(resp_type, out)
        except KafkaError as e:
            error = e.code
            result = _encoded(resp_type, error_response(resp_type, request, e.code, str(e)))
        except Exception as e:
            # Kafka answers an unexpected failure with UNKNOWN_SERVER_ERROR on every item the
            # request named (getErrorResponse), no internals in the message, connection kept
            _log_handler_failure(api_name(key), version, self.peer, e)
            code = error = ErrorCode.UNKNOWN_SERVER_ERROR
            result = _encoded(resp_type, error_response(resp_type, request, code, None))
        return result, error

    def _request_quota(self, key: int, out: Any, start: float, client_id: str, ctx: RequestContext) -> None:
        """KIP-124: the request's handling time counts against the principal's
        request_percentage; over the quota the response says how long to wait and the channel
        waits as long."""
        broker, session = self.broker, self.session
        throttle = request_throttle_ms(
            broker.request_quotas, broker.client_quota_entities, session.principal,
            client_id, max(0.0, time.perf_counter() - start - ctx.waited_s), broker.clock.monotonic_ms(),
        )
        if throttle > 0:
            session.throttle_ms = max(session.throttle_ms, throttle)
            _with_throttle(key, out, throttle)

    async def _drain_deferred(self) -> None:
        if self.deferred:
            await asyncio.wait(list(self.deferred))

    async def _complete_later(
        self, prev: asyncio.Task[None] | None, req: IncomingRequest, resp_type: type, request: Any,
        deferred: Deferred, start: float,
    ) -> None:
        """A deferred response: awaited, then sent after the one before it."""
        h = req.header
        try:
            result, error = await self._answer(h.api_key, h.api_version, resp_type, request, deferred.result,
                                               extra_throttle=deferred.throttle_ms)
            if isinstance(result, Deferred):  # not a handler's to nest
                result.result.close()
                raise TypeError("a deferred response completed with another Deferred")
            if prev is not None:
                await asyncio.wait({prev})
            if not self.closed:
                await self._respond(h, result, request, start, error)
        except (ConnectionError, asyncio.CancelledError):
            self.close()
        except Exception:
            log.exception("unexpected error on connection from %s", self.peer)
            self.close()
        finally:
            if self.loop is not None:
                self.last_active = self.loop.time()
            if not self.closed:
                self._release(req.size + 4)

    async def _respond(
        self, h: Any, result: RawResponse | NoResponse, request: Any, start: float, error: int
    ) -> None:
        """Send one response (or none, acks=0), in request order; the request's metrics."""
        key, version = h.api_key, h.api_version
        session = self.session
        if isinstance(result, NoResponse):
            self.conn.complete_without_response(h.correlation_id)
            return
        flexible = codec.is_flexible(key, version) and key != API_VERSIONS_KEY
        head = response_header(h.correlation_id, flexible)
        await self._send(h.correlation_id, head, result.parts, result.size)
        metrics = self.metrics
        if metrics is not None:  # Kafka's RequestMetrics: the total time includes the send
            api = api_name(key)
            metrics.request_done(
                api, version, _request_name(api, key, version, request), time.perf_counter() - start,
                _error_name(error) if error else None,
            )
            if key == _SASL_AUTHENTICATE_KEY and session.close_after_response:
                metrics.auth_failures[session.listener] += 1
        if self.pre_auth_limit and session.authenticated:  # the listener's normal limit now
            self.pre_auth_limit = False
            self.conn.max_frame_size = self.broker.config["socket.request.max.bytes"]
            self.conn.limit_name = "socket.request.max.bytes"
        if session.close_after_response:  # e.g. failed SASL authentication
            log.info(
                "closing connection from %s on listener %s after %s",
                self.peer,
                session.listener,
                api_name(key),
            )
            self.close()

    async def _unsupported(self, req: IncomingRequest) -> None:
        """Unknown API or version: a well-formed error response, connection kept.

        ApiVersions answers with a v0 body carrying UNSUPPORTED_VERSION and the supported
        ranges (KIP-511: clients retry with the highest version listed). Other APIs get their
        highest known version's response shape with UNSUPPORTED_VERSION in the top-level
        error code, as close as the protocol allows to "answer, never drop".
        """
        h = req.header
        entry = KAFKA_API_RANGES.get(h.api_key)
        log.info(
            "unsupported request %s v%d from %s (%s)",
            api_name(h.api_key),
            h.api_version,
            self.peer,
            h.client_id,
        )
        if h.api_key == API_VERSIONS_KEY:
            from .handlers.api_versions import api_versions_body

            resp = _encoded(codec.response_type(18, 0), api_versions_body(ErrorCode.UNSUPPORTED_VERSION))
            flexible = False
        elif entry is None:
            # An API Kafka does not have: no schema to answer with; empty body after header.
            resp, flexible = RawResponse([], 0), False
        else:
            cls = codec.response_type(h.api_key, min(max(h.api_version, entry[1]), entry[2]))
            resp = _encoded(cls, {"error_code": ErrorCode.UNSUPPORTED_VERSION})
            flexible = bool(getattr(cls, "__flexible__", False))
        await self._send(h.correlation_id, response_header(h.correlation_id, flexible), resp.parts, resp.size)

    async def _send(self, correlation_id: int, head: bytes, parts: list[Any], size: int) -> None:
        """Write one response. File regions ``(fd, position, length)`` carry file descriptors
        the handler duplicated for this response (so a segment deleted meanwhile stays readable);
        they are closed here once written, or if the connection is gone.

        A client may leave at any point of a long response (a consumer closed mid-fetch): a
        write then fails inside the transport, which only marks itself closing, and the next
        ``loop.sendfile`` would raise ``RuntimeError("Transport is closing")``; a sendfile in
        progress raises ConnectionError. Both are a client leaving, not a broker fault: the
        rest of the response is dropped, the connection closed, a DEBUG line logged (Kafka's
        selector treats a peer's disconnect the same way)."""
        transport = self.transport
        regions = [p for p in parts if isinstance(p, tuple)]
        try:
            if transport is None or self.closed:
                return
            prefix = struct.pack(">i", len(head) + size) + head
            if not regions:
                self.conn.send(correlation_id, [prefix, *parts])
                transport.writelines(self.conn.data_to_send())
                return
            self.conn.send(correlation_id, [])
            loop = asyncio.get_running_loop()
            pending: list[bytes | bytearray | memoryview] = [prefix]
            for p in parts:
                if not isinstance(p, tuple):
                    pending.append(p)
                    continue
                fd, pos, length = p
                if self.sendfile:
                    if pending:
                        transport.writelines(pending)
                        pending = []
                    if transport.is_closing():  # that write failed: the client is gone
                        self._left_mid_response(correlation_id, None)
                        return
                    try:
                        sent = _sendfile_now(transport, fd, pos, length)
                    except OSError as e:
                        self._left_mid_response(correlation_id, e)
                        return
                    if sent == length:
                        continue
                    pos, length = pos + sent, length - sent
                    with os.fdopen(fd, "rb", buffering=0) as f:
                        regions.remove(p)  # the file object owns the descriptor now
                        try:
                            await loop.sendfile(transport, f, pos, length)
                        except ConnectionError as e:
                            self._left_mid_response(correlation_id, e)
                            return
                else:
                    if transport.is_closing():
                        self._left_mid_response(correlation_id, None)
                        return
                    pending.append(os.pread(fd, length, pos))
            if pending and not transport.is_closing():
                transport.writelines(pending)
        finally:
            for fd, _pos, _len in regions:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _left_mid_response(self, correlation_id: int, exc: BaseException | None) -> None:
        log.debug(
            "connection from %s closed while response %d was being written (%s); dropping the rest",
            self.peer,
            correlation_id,
            exc or "write failed",
        )
        self.close()


def _sendfile_now(transport: asyncio.Transport, fd: int, pos: int, length: int) -> int:
    """As much of a file region as the socket takes now, sent from this callback: the bytes
    sent (0 if the transport still holds earlier bytes, which must go first). The rest goes
    through ``loop.sendfile``, which waits for the socket; sending at once spares a fetch
    answer the loop iterations (and the pause/resume of reading, a writer registered and
    removed) that ``loop.sendfile`` takes even when the socket took everything at once, and
    so its tail and the next answer go out without waiting behind other connections' work."""
    if transport.get_write_buffer_size():
        return 0
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    out = sock.fileno()
    sent = 0
    while sent < length:
        try:
            n = os.sendfile(out, fd, pos + sent, length - sent)
        except (BlockingIOError, InterruptedError):
            break
        if n == 0:  # the file ends before the region (truncated meanwhile): loop.sendfile decides
            break
        sent += n
    return sent


# one traceback per (API, exception type) a minute: a client repeating a request that trips a bug
# must not flood the log; repeats in between are counted into the next line
_FAILURE_LOG_INTERVAL = 60.0
_failure_log: dict[tuple[str, str], tuple[float, int]] = {}


def _log_handler_failure(api: str, version: int, peer: str, exc: Exception) -> None:
    key = (api, type(exc).__name__)
    now = time.monotonic()
    last, suppressed = _failure_log.get(key, (float("-inf"), 0))
    if now - last < _FAILURE_LOG_INTERVAL:
        _failure_log[key] = (last, suppressed + 1)
        return
    _failure_log[key] = (now, 0)
    more = f" ({suppressed} more since the last report)" if suppressed else ""
    log.error(
        "%s v%d from %s failed, answered UNKNOWN_SERVER_ERROR%s", api, version, peer, more, exc_info=exc
    )


async def _call(broker: Any, ctx: RequestContext, handler: Any, request: Any) -> Any:
    """The handler, behind the authorizer's cluster-wide gate (when there is an authorizer)."""
    if getattr(broker, "authorizer", None) is not None:
        check_cluster_gate(ctx)
    return await handler(ctx, request)


_SASL_AUTHENTICATE_KEY = 36


def _request_name(api: str, key: int, version: int, request: Any) -> str:
    """Kafka's RequestMetrics name: Fetch is FetchFollower from a replica, else FetchConsumer."""
    if key == 1:
        return "FetchFollower" if follower_id(request, version) >= 0 else "FetchConsumer"
    return api


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error-{code}"


def _encoded(resp_type: type, data: dict[str, Any]) -> RawResponse:
    body = codec.encode_response(codec.build(resp_type, data))
    return RawResponse([body], len(body))


async def start_listeners(
    broker: Broker, *, only: Collection[str] | None = None, skip: Collection[str] = ()
) -> list[Listener]:
    """One server per listener, with strom's accept loop (:mod:`strom.server.listener`: it pauses
    instead of failing when descriptors run out). TLS contexts are built before any port is
    opened, so bad key material fails the start (ConfigError) with nothing listening.
    ``only``/``skip``: the listener names to start, or not (a KRaft node starts its controller
    listeners first, the others once it is ready)."""
    from ..security.tls import build_server_contexts

    loop = asyncio.get_running_loop()
    contexts = build_server_contexts(broker.config)
    upgrade_here = "uvloop" not in type(loop).__module__  # see KafkaProtocol
    servers: list[Listener] = []
    try:
        for name, protocol, host, port in broker.config.listener_protocols():
            if (only is not None and name not in only) or name in skip:
                continue
            context = contexts.get(name)
            tls = context if upgrade_here else None

            def factory(
                name: str = name, protocol: str = protocol, tls: ssl.SSLContext | None = tls
            ) -> KafkaProtocol:
                return KafkaProtocol(broker, ConnectionSession.for_listener(name, protocol), tls)

            tls_server = None if upgrade_here else context
            srv = await start_listener(name, host, port, factory, ssl_context=tls_server)
            servers.append(srv)
            for s in srv.sockets:
                log.info("listening on %s (listener %s, %s)", s.getsockname(), name, protocol)
    except BaseException:
        for srv in servers:
            srv.close()
        raise
    return servers
