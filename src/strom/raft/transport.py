"""KRaft requests between nodes over TCP: the outbound transport and a minimal inbound server.

Theory of operation
-------------------
:class:`SocketRaftTransport` keeps one connection per peer voter (Kafka's
``KafkaNetworkChannel``/``NetworkClient`` for the quorum). :meth:`~SocketRaftTransport.send`
never blocks: it queues the request on the peer's connection and returns. The peer's task
connects (on failure it retries with exponential backoff, ``retry_backoff_ms`` doubling up to
1 s), writes the queued requests as Kafka frames (request header v2, the node's correlation id
as the wire correlation id, kio's encoder at :data:`strom.raft.wire.API_VERSIONS`), and reads the
answers, handing each to ``on_response(peer, correlation_id, message)``. A request that waited
longer than the request timeout for a connection is dropped unsent, and a connection that breaks
fails nothing loudly: the node times the request out itself and sends a new one (its
``request_timeout_ms``), which is how Kafka's raft client treats a disconnect.

:func:`serve_raft` is the inbound side for a node that has no broker listener (tests, a
controller-only process before the broker's network is wired): a framed server that decodes the
KRaft APIs, hands them to :meth:`RaftManager.handle_request` and writes the answers, each
connection answering its requests concurrently but in order (Kafka's in-order responses per
connection). The broker's listeners do the same through the handlers in
:mod:`strom.server.handlers.raft`.

Errors: a malformed frame closes that connection (logged); nothing raises into the manager.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from strom.protocol import codec
from strom.protocol.framing import parse_request_header, response_header, skip_tagged_fields
from strom.raft import wire
from strom.raft.messages import RaftRequest, RaftResponse

if TYPE_CHECKING:
    from strom.metadata.quorum_config import KRaftConfig
    from strom.raft.manager import RaftManager

__all__ = ["SocketRaftTransport", "serve_raft"]

log = logging.getLogger("strom.raft.transport")

MAX_FRAME = 64 * 1024 * 1024


def encode_request_frame(
    request: RaftRequest, destination: int, correlation_id: int, client_id: str
) -> bytes:
    api_key, version, kreq = wire.encode_request(request, destination)
    req_cls = type(kreq)
    header_cls = req_cls.__header_schema__
    header = header_cls(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header_cls)(buf, header)
    entity_writer(req_cls)(buf, kreq)
    frame = buf.getbuffer()
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    return bytes(frame)


class _Peer:
    def __init__(self, owner: SocketRaftTransport, node_id: int, host: str, port: int) -> None:
        self.owner = owner
        self.node_id = node_id
        self.host = host
        self.port = port
        self.queue: deque[tuple[float, int, RaftRequest]] = deque()
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.inflight: dict[int, int] = {}  # correlation id -> api key
        self.writer: asyncio.StreamWriter | None = None

    def send(self, correlation_id: int, request: RaftRequest) -> None:
        self.queue.append((time.monotonic(), correlation_id, request))
        self.wake.set()
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run(), name=f"raft-peer-{self.node_id}")

    async def _run(self) -> None:
        backoff = self.owner.retry_backoff_ms / 1000
        while not self.owner.closed:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port), self.owner.request_timeout_ms / 1000
                )
            except (OSError, TimeoutError) as e:
                log.debug(
                    "raft: connecting to node %d at %s:%d failed: %s", self.node_id, self.host, self.port, e
                )
                self._drop_stale()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            backoff = self.owner.retry_backoff_ms / 1000
            self.writer = writer
            read_task = asyncio.get_running_loop().create_task(self._read(reader))
            try:
                await self._write(writer, read_task)
            finally:
                read_task.cancel()
                with contextlib.suppress(BaseException):
                    await read_task
                writer.close()
                self.writer = None
                self.inflight.clear()

    def _drop_stale(self) -> None:
        limit = time.monotonic() - self.owner.request_timeout_ms / 1000
        while self.queue and self.queue[0][0] < limit:
            self.queue.popleft()

    async def _write(self, writer: asyncio.StreamWriter, read_task: asyncio.Task[None]) -> None:
        while not self.owner.closed and not read_task.done():
            self._drop_stale()
            while self.queue:
                _t, cid, req = self.queue.popleft()
                api_key, _v, _r = wire.encode_request(req, self.node_id)
                self.inflight[cid] = api_key
                writer.write(encode_request_frame(req, self.node_id, cid, self.owner.client_id))
            await writer.drain()
            self.wake.clear()
            waiter = asyncio.ensure_future(self.wake.wait())
            await asyncio.wait({waiter, read_task}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                if not 4 <= size <= MAX_FRAME:
                    raise ValueError(f"bad frame size {size}")
                body = await reader.readexactly(size)
                (cid,) = struct.unpack_from(">i", body, 0)
                api_key = self.inflight.pop(cid, None)
                if api_key is None:
                    continue
                resp_cls = codec.response_type(api_key, wire.API_VERSIONS[api_key])
                pos = 4
                if api_key != 18 and codec.is_flexible(api_key, wire.API_VERSIONS[api_key]):
                    pos = skip_tagged_fields(body, pos)
                kresp: Any
                kresp, _n = entity_reader(resp_cls)(body[pos:], 0)
                self.owner.deliver(self.node_id, cid, wire.decode_response(kresp))
        except (asyncio.IncompleteReadError, OSError):
            pass
        except Exception:
            log.exception("raft: bad response from node %d", self.node_id)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task


class SocketRaftTransport:
    """Outbound KRaft requests to the voters ``{node_id: (host, port)}`` (see the module doc)."""

    def __init__(
        self,
        endpoints: dict[int, tuple[str, int]],
        *,
        request_timeout_ms: int = 2000,
        retry_backoff_ms: int = 20,
        client_id: str = "raft-client",
    ) -> None:
        self.endpoints = dict(endpoints)
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.client_id = client_id
        self.closed = False
        self._peers: dict[int, _Peer] = {}
        self._on_response: Callable[[int, int, RaftResponse], None] | None = None

    @classmethod
    def for_voters(cls, kraft: KRaftConfig) -> SocketRaftTransport:
        """To the other voters of ``controller.quorum.voters``."""
        return cls(
            {v.node_id: (v.host, v.port) for v in kraft.voters if v.node_id != kraft.node_id},
            request_timeout_ms=kraft.request_timeout_ms,
            retry_backoff_ms=kraft.retry_backoff_ms,
            client_id=f"raft-client-{kraft.node_id}",
        )

    def start(self, on_response: Callable[[int, int, RaftResponse], None]) -> None:
        self._on_response = on_response

    def send(self, destination: int, correlation_id: int, request: RaftRequest) -> None:
        if self.closed:
            return
        peer = self._peers.get(destination)
        if peer is None:
            host, port = self.endpoints[destination]
            peer = self._peers[destination] = _Peer(self, destination, host, port)
        peer.send(correlation_id, request)

    def deliver(self, sender: int, correlation_id: int, response: RaftResponse) -> None:
        if self._on_response is not None and not self.closed:
            self._on_response(sender, correlation_id, response)

    async def close(self) -> None:
        self.closed = True
        for peer in self._peers.values():
            await peer.close()


# --------------------------------------------------------------------------- inbound


async def serve_raft(manager: RaftManager, host: str, port: int) -> asyncio.Server:
    """A minimal listener answering the KRaft APIs for ``manager`` (see the module doc)."""
    conns: set[asyncio.StreamWriter] = set()

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.add(writer)
        pending: asyncio.Queue[asyncio.Future[bytes] | None] = asyncio.Queue()

        async def answer(frame: bytes) -> bytes:
            h, pos = parse_request_header(memoryview(frame))
            if codec.is_flexible(h.api_key, h.api_version):
                pos = skip_tagged_fields(frame, pos)
            kreq: Any
            kreq, _n = entity_reader(codec.request_type(h.api_key, h.api_version))(frame[pos:], 0)
            sender, msg = wire.decode_request(kreq)
            resp = await manager.handle_request(sender, msg)
            out = io.BytesIO()
            entity_writer(type(k := wire.encode_response(resp)))(out, k)
            payload = response_header(h.correlation_id, True) + out.getvalue()
            return struct.pack(">i", len(payload)) + payload

        async def write_in_order() -> None:
            while (fut := await pending.get()) is not None:
                try:
                    data = await fut
                except Exception as e:  # no answer (timeout, shut down): the client times out
                    log.debug("raft: request not answered: %s", e)
                    continue
                try:
                    writer.write(data)
                    await writer.drain()
                except (OSError, RuntimeError):
                    return  # the peer went away: its requests time out on its side

        writer_task = asyncio.get_running_loop().create_task(write_in_order())
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                if not 0 < size <= MAX_FRAME:
                    break
                frame = await reader.readexactly(size)
                pending.put_nowait(asyncio.ensure_future(answer(frame)))
        except (asyncio.IncompleteReadError, OSError):
            pass
        except Exception:
            log.exception("raft: bad request")
        finally:
            pending.put_nowait(None)
            writer_task.cancel()
            conns.discard(writer)
            writer.close()

    server = await asyncio.start_server(on_conn, host, port)
    _close = server.close

    def close_all() -> None:  # also drop open connections, as a killed process would
        _close()
        for w in list(conns):
            w.close()

    server.close = close_all  # type: ignore[method-assign]
    return server
