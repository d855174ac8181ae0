"""One TCP connection to one Kafka broker, on asyncio streams.

Theory of operation: requests are written as size-prefixed frames in the order they are issued
(one writer lock), each registered in a FIFO of in-flight requests *before* its bytes are
written. Kafka answers the requests of one connection in order, so a single reader task pops the
FIFO head for each response frame and checks that the correlation ids match (a mismatch means
the stream is corrupt: the connection is failed). Any number of requests may be in flight
(pipelining). A request sent with ``expect_response=False`` (Produce with acks=0) is not put in
the FIFO: Kafka sends nothing back for it.

Versions are negotiated once after connecting: ApiVersions v3 first; a broker that does not
know v3 answers UNSUPPORTED_VERSION in the v0 response format (header v0), so the client retries
with v0. Every later request uses, per API, the highest version both the broker and kio know.

Security (:class:`~strom.client.security.SecurityConfig`): with TLS the stream is opened with the
settings' :class:`ssl.SSLContext` (the broker's host name checked unless disabled); with SASL the
exchange of :func:`~strom.client.security.sasl_exchange` runs right after ApiVersions, before the
connection is handed out.

Error contract: all failures surface as :class:`KafkaError` subclasses. A failed TLS handshake is
a :class:`KafkaConnectionError` naming the reason (e.g. certificate verify failed); refused SASL
credentials are SASL_AUTHENTICATION_FAILED (58) with the broker's message. When the connection
breaks, every in-flight request fails with :class:`KafkaConnectionError` and the connection is
unusable (``closed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import struct
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from strom.client.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaProtocolError,
    KafkaTimeoutError,
)
from strom.client.frame_receiver import FrameReceiver, FrameWriter
from strom.client.messages import (
    ApiKey,
    decode_response,
    encode_request,
    pick_version,
    response_correlation_id,
)
from strom.client.security import SASL_AUTHENTICATE, SecurityConfig, sasl_exchange

__all__ = ["KafkaConnection"]

CLIENT_SOFTWARE_NAME = "strom-client"
CLIENT_SOFTWARE_VERSION = "0.1.0"


_PLAINTEXT = SecurityConfig()


def tls_failure(host: str, port: int, e: ssl.SSLError) -> str:
    """A TLS handshake failure, said plainly (``ssl`` errors carry errno 1, which is no reason)."""
    reason = getattr(e, "verify_message", None) or e.reason or str(e)
    return f"TLS handshake with {host}:{port} failed: {reason}"


StreamOpener = Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


class _KioFrame:
    """A request frame encoded by kio once its correlation id is known (and the class its
    answer is decoded with)."""

    __slots__ = ("api_key", "client_id", "data", "resp_cls", "version")

    def __init__(self, api_key: int, version: int, client_id: str | None, data: Mapping[str, Any]) -> None:
        self.api_key, self.version, self.client_id, self.data = api_key, version, client_id, data
        self.resp_cls: type[Any] = object

    def __call__(self, correlation_id: int) -> bytes:
        frame, self.resp_cls = encode_request(
            self.api_key, self.version, correlation_id, self.client_id, self.data
        )
        return frame


class KafkaConnection:
    """A pipelined connection to one broker. Use :meth:`open` (connects and negotiates)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str | None = "strom",
        request_timeout: float = 30.0,
        max_frame_bytes: int = 256 * 1024 * 1024,
        security: SecurityConfig | None = None,
        open_streams: StreamOpener | None = None,
    ) -> None:
        self.host = host
        self.port = port
        # how to reach host:port; default asyncio.open_connection (strom.testing.network: in memory)
        self.open_streams = open_streams
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.max_frame_bytes = max_frame_bytes
        self.security = security or _PLAINTEXT
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._reader: asyncio.StreamReader | None = None  # open_streams connections
        self._frames: FrameReceiver | None = None  # socket connections
        self._writer: asyncio.StreamWriter | FrameWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._in_flight: deque[tuple[int, asyncio.Future[bytes | memoryview]]] = deque()
        self._next_cid = 0
        self._write_lock = asyncio.Lock()
        self._error: KafkaError | None = None

    def __repr__(self) -> str:
        return f"KafkaConnection({self.host}:{self.port})"

    @property
    def closed(self) -> bool:
        return self._error is not None or self._writer is None

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        client_id: str | None = "strom",
        request_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        security: SecurityConfig | None = None,
        open_streams: StreamOpener | None = None,
    ) -> KafkaConnection:
        conn = cls(host, port, client_id=client_id, request_timeout=request_timeout, security=security,
                   open_streams=open_streams)
        await conn.connect(connect_timeout)
        return conn

    async def connect(self, timeout: float = 10.0) -> None:
        ctx = self.security.ssl_context()
        try:
            if self.open_streams is not None:
                self._reader, self._writer = await asyncio.wait_for(
                    self.open_streams(self.host, self.port), timeout
                )
            else:  # frames received in place (FrameReceiver), not through a StreamReader
                loop = asyncio.get_running_loop()
                proto = FrameReceiver(self.max_frame_bytes)
                tls: dict[str, Any] = (
                    {} if ctx is None
                    else {"ssl": ctx, "server_hostname": self.host, "ssl_handshake_timeout": timeout}
                )
                transport, _ = await asyncio.wait_for(
                    loop.create_connection(lambda: proto, self.host, self.port, **tls), timeout
                )
                self._frames = proto
                self._writer = FrameWriter(transport, proto)
        except TimeoutError:
            raise KafkaConnectionError(f"timed out connecting to {self.host}:{self.port}") from None
        except ssl.SSLError as e:
            raise KafkaConnectionError(tls_failure(self.host, self.port, e)) from None
        except OSError as e:
            reason = os.strerror(e.errno) if e.errno else (e.strerror or str(e) or type(e).__name__)
            raise KafkaConnectionError(f"cannot connect to {self.host}:{self.port}: {reason}") from None
        self._read_task = asyncio.create_task(self._read_loop(), name=f"kafka-read-{self.host}:{self.port}")
        try:
            try:
                await self._negotiate()
            except KafkaConnectionError as e:
                if not self.security.uses_tls:
                    raise
                # TLS 1.3 reports a refused client certificate only as the first read failing
                raise KafkaConnectionError(
                    f"{e.message}: right after the TLS handshake, so the broker probably refused the "
                    "client certificate (none given, or not trusted: ssl.keystore.*)"
                ) from None
            if self.security.uses_sasl:
                await self._authenticate()
        except BaseException:
            await self.close()
            raise

    async def _negotiate(self) -> None:
        body, resp_cls = await self._send(
            ApiKey.API_VERSIONS,
            3,
            {
                "client_software_name": CLIENT_SOFTWARE_NAME,
                "client_software_version": CLIENT_SOFTWARE_VERSION,
            },
        )
        # A broker without v3 answers in the v0 format: header v0 (correlation id), then the
        # error code. Look at the code before decoding as v3.
        if len(body) >= 6 and struct.unpack_from(">h", body, 4)[0] == ErrorCode.unsupported_version:
            body, resp_cls = await self._send(ApiKey.API_VERSIONS, 0, {})
        resp = decode_response(resp_cls, body)
        if resp.error_code != ErrorCode.none:
            raise KafkaError(int(resp.error_code), "ApiVersions failed")
        self.api_versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}

    async def _authenticate(self) -> None:
        steps = sasl_exchange(self.security, self.version(SASL_AUTHENTICATE, max_version=2))
        resp: Any = None
        while True:
            try:
                api_key, version, data = steps.send(resp)
            except StopIteration:
                return
            resp = await self.request(api_key, data, version=version)

    def version(self, api_key: int, *, max_version: int | None = None, min_version: int | None = None) -> int:
        """The version to use for ``api_key`` with this broker (see :func:`pick_version`)."""
        return pick_version(
            api_key, self.api_versions.get(api_key), max_version=max_version, min_version=min_version
        )

    def supports(self, api_key: int) -> bool:
        try:
            self.version(api_key)
        except KafkaError:
            return False
        return True

    async def request(
        self,
        api_key: int,
        data: Mapping[str, Any],
        *,
        version: int | None = None,
        max_version: int | None = None,
        expect_response: bool = True,
        timeout: float | None = None,
    ) -> Any:
        """Send one request (built from ``data`` for the negotiated version) and return the
        decoded kio response, or ``None`` when ``expect_response`` is false."""
        if version is None:
            version = self.version(api_key, max_version=max_version)
        body, resp_cls = await self._send(api_key, version, data, expect_response, timeout)
        if body is None:
            return None
        return decode_response(resp_cls, body)

    async def request_raw(self, api_key: int, data: Mapping[str, Any], *, version: int) -> bytes:
        """Like :meth:`request`, returning the response frame body (header included) undecoded,
        for the rare response kio cannot decode (see ``transactions.describe_transaction``)."""
        body, _cls = await self._send(api_key, version, data, True, None)
        if body is None:
            raise KafkaProtocolError("no response body")
        return bytes(body)

    async def _send(
        self,
        api_key: int,
        version: int,
        data: Mapping[str, Any],
        expect_response: bool = True,
        timeout: float | None = None,
    ) -> tuple[Any, type[Any]]:
        frame_of = _KioFrame(api_key, version, self.client_id, data)
        body = await self._send_frame(frame_of, expect_response, timeout, f"API {api_key} v{version}")
        return body, frame_of.resp_cls

    async def request_encoded(
        self, encode: Callable[[int], bytes], *, timeout: float | None = None, what: str = "a request"
    ) -> bytes | memoryview:
        """Send the request frame (size prefix included) that ``encode(correlation_id)`` builds
        and return its response frame body (header included) undecoded: for the hot requests
        encoded and decoded by hand (a follower's Fetch, :mod:`strom.protocol.replica_fetch`)."""
        body = await self._send_frame(encode, True, timeout, what)
        assert body is not None
        return body

    async def _send_frame(
        self, encode: Callable[[int], bytes], expect_response: bool, timeout: float | None, what: str
    ) -> bytes | memoryview | None:
        if self._error is not None:
            raise self._error
        if self._writer is None:
            raise KafkaConnectionError(f"not connected to {self.host}:{self.port}")
        cid = self._next_cid
        self._next_cid = (self._next_cid + 1) & 0x7FFFFFFF
        frame = encode(cid)
        fut: asyncio.Future[bytes | memoryview] | None = None
        async with self._write_lock:
            if self._error is not None:
                raise self._error
            if expect_response:
                fut = asyncio.get_running_loop().create_future()
                self._in_flight.append((cid, fut))
            self._writer.write(frame)
            try:
                await self._writer.drain()
            except (OSError, RuntimeError) as e:
                self._fail(KafkaConnectionError(f"write to {self.host}:{self.port} failed: {e}"))
                raise self._error from None  # type: ignore[misc]
        if fut is None:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout or self.request_timeout)
        except TimeoutError:
            # the stream position is now unknown for later responses only if we drop this one;
            # we keep it in the FIFO (the reader discards it when it arrives) and just give up.
            raise KafkaTimeoutError(
                f"no response from {self.host}:{self.port} to {what} "
                f"within {timeout or self.request_timeout}s"
            ) from None

    async def _read_loop(self) -> None:
        reader = self._reader
        frames = self._frames
        try:
            while True:
                body: bytes | memoryview
                if frames is not None:
                    body = await frames.read_frame()
                else:
                    assert reader is not None
                    head = await reader.readexactly(4)
                    (size,) = struct.unpack(">i", head)
                    if size < 4 or size > self.max_frame_bytes:
                        raise KafkaProtocolError(f"invalid response frame size {size}")
                    body = await reader.readexactly(size)
                cid = response_correlation_id(body)
                if not self._in_flight:
                    raise KafkaProtocolError(f"unexpected response with correlation id {cid}")
                want, fut = self._in_flight[0]
                if cid != want:
                    # left in the FIFO: _fail() fails it along with the others
                    raise KafkaProtocolError(f"correlation id mismatch: expected {want}, got {cid}")
                self._in_flight.popleft()
                if not fut.done():
                    fut.set_result(body)
        except asyncio.IncompleteReadError:
            self._fail(KafkaConnectionError(f"connection to {self.host}:{self.port} closed by the broker"))
        except OSError as e:
            self._fail(KafkaConnectionError(f"connection to {self.host}:{self.port} failed: {e}"))
        except KafkaError as e:
            self._fail(e)
        except asyncio.CancelledError:
            self._fail(KafkaConnectionError(f"connection to {self.host}:{self.port} closed"))
            raise

    def _fail(self, error: KafkaError) -> None:
        if self._error is None:
            self._error = error
        while self._in_flight:
            _, fut = self._in_flight.popleft()
            if not fut.done():
                fut.set_exception(error)
                fut.exception()  # mark retrieved: a timed-out caller may never await it
        if self._writer is not None:
            self._writer.close()

    async def close(self) -> None:
        """Close the socket; in-flight requests fail with :class:`KafkaConnectionError`."""
        self._fail(KafkaConnectionError(f"connection to {self.host}:{self.port} closed"))
        if self._read_task is not None:
            self._read_task.cancel()
            with contextlib.suppress(BaseException):
                await self._read_task
            self._read_task = None
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
            self._writer = None
