"""How a broker reaches the active controller (Kafka's ``NodeToControllerChannelManager`` and
``ForwardingManager``).

Theory of operation
-------------------
Everything a broker asks of the controller (BrokerRegistration, BrokerHeartbeat,
AllocateProducerIds, and the admin requests it forwards: CreateTopics, DeleteTopics,
CreatePartitions, AlterConfigs/IncrementalAlterConfigs, ElectLeaders, the partition
reassignments, DescribeQuorum) goes through one :class:`ControllerChannel`:
``await channel.call(api_key, request)`` returns the controller's response as a dict (the
controller state machine's response shape, kio's field names) once the controller committed the
result, and raises :class:`~strom.controller.server.NotControllerError` when no controller could
answer.

:class:`LocalControllerChannel` calls the :class:`~strom.controller.server.ControllerServer` of
this process directly: a combined node whose controller is active needs no socket.

:class:`QuorumControllerChannel` is the channel of a node of a multi-node quorum:

* the local controller, when it is the active one, is called directly;
* otherwise the request goes to the active controller (``leader()``: the Raft manager's current
  leader id) at its endpoint in ``controller.quorum.voters`` (its CONTROLLER listener), over one
  persistent connection per controller on which requests are pipelined and matched to their
  answers by correlation id. BrokerRegistration, BrokerHeartbeat, AllocateProducerIds and
  AlterPartition go as themselves; every other API is forwarded inside an EnvelopeRequest
  (KIP-590: the serialized request with its header, the client's principal and address) and
  its answer unwrapped from the EnvelopeResponse (:mod:`strom.protocol.envelope`);
* NOT_CONTROLLER (in the envelope or in the response), no known leader, and a connection that
  cannot be made or breaks are retried after ``retry_backoff_ms`` with the then current leader,
  until ``request_timeout_ms`` (Kafka's ``request.timeout.ms``, 30 s) after the call began; then
  the call raises NotControllerError. A request waiting for a controller that no longer leads
  the quorum (it stopped answering and a new one was elected) is given up at once and sent to
  the new leader (checked every ``retry_backoff_ms``). A request the controller may have executed before the
  connection broke is sent again, as Kafka's channel does: the controller's answer to the
  retry (say TOPIC_ALREADY_EXISTS) is what the caller gets.

The dicts a remote controller's answers become are kio's response entities as dicts (nested
entities as dicts, error codes as ints, durations as milliseconds), which carry the same keys
and values as the local controller's dicts for the fields the callers read.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import enum
import itertools
import logging
import struct
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.envelope.v0 import request as envelope_request

from ..controller.server import NotControllerError
from ..protocol import envelope
from ..protocol.codec import duration_ms
from ..protocol.errors import ErrorCode, ProtocolError
from ..security.session import ANONYMOUS

if TYPE_CHECKING:
    from ..controller.server import ControllerServer

__all__ = [
    "DIRECT_APIS",
    "ControllerChannel",
    "LocalControllerChannel",
    "QuorumControllerChannel",
    "response_dict",
]

log = logging.getLogger("strom.controller_channel")

MAX_FRAME = 64 * 1024 * 1024
ENVELOPE = 58
# what a broker sends as itself, not forwarded for a client (Kafka: the broker's own requests)
DIRECT_APIS = frozenset({56, 62, 63, 64, 67, 73})  # AlterPartition, BrokerRegistration/Heartbeat,
# UnregisterBroker, AllocateProducerIds, AssignReplicasToDirs


class ControllerChannel(Protocol):
    async def call(
        self,
        api_key: int,
        request: Any,
        api_version: int = -1,
        *,
        principal: str | None = None,
        client_host: str | None = None,
    ) -> dict[str, Any]: ...

    async def close(self) -> None: ...


class LocalControllerChannel:
    """The controller of this process (raises NotControllerError when it is not active)."""

    def __init__(self, controller: ControllerServer) -> None:
        self.controller = controller

    async def call(
        self,
        api_key: int,
        request: Any,
        api_version: int = -1,
        *,
        principal: str | None = None,
        client_host: str | None = None,
    ) -> dict[str, Any]:
        return await self.controller.call(api_key, request, api_version)

    async def close(self) -> None:
        return None


def response_dict(entity: Any) -> dict[str, Any]:
    """A kio response entity as the controller's dict shape (see the module doc)."""
    out = _plain(entity)
    assert isinstance(out, dict)
    return out


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, datetime.timedelta):
        return duration_ms(value)
    if isinstance(value, enum.IntEnum):
        return int(value)
    return value


class _Retry(Exception):
    """The controller did not answer this time; try again (maybe another one)."""


class _ControllerConnection:
    """One persistent connection to one controller: requests pipelined, answers matched by
    correlation id. A broken connection fails its requests in flight with ConnectionError; the
    next request connects again."""

    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[int, tuple[int, int, asyncio.Future[Any]]] = {}
        self._connecting = asyncio.Lock()
        self._ids = itertools.count(1)

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._writer is not None and not self._writer.is_closing():
                return self._writer
            reader, writer = await asyncio.open_connection(self.host, self.port)
            self._writer = writer
            self._reader_task = asyncio.get_running_loop().create_task(
                self._read(reader, writer), name=f"controller-channel-{self.host}:{self.port}"
            )
            return writer

    async def send(self, request: Any) -> Any:
        """Send ``request`` (a kio entity) and return the kio response entity."""
        writer = await self._connect()
        api_key, version = envelope.api_key_and_version(request)
        cid = next(self._ids) & 0x7FFFFFFF
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[cid] = (api_key, version, future)
        try:
            payload = envelope.encode_request(request, cid, self.client_id)
            writer.write(struct.pack(">i", len(payload)) + payload)
            await writer.drain()
            return await future
        finally:
            self._pending.pop(cid, None)

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        error: BaseException = ConnectionError(f"connection to {self.host}:{self.port} closed")
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                if not 4 <= size <= MAX_FRAME:
                    raise ProtocolError(f"bad frame size {size}")
                body = await reader.readexactly(size)
                (cid,) = struct.unpack_from(">i", body, 0)
                entry = self._pending.get(cid)
                if entry is None:
                    continue  # its caller gave up
                api_key, version, future = entry
                _cid, response = envelope.decode_response(api_key, version, body)
                if not future.done():
                    future.set_result(response)
        except (asyncio.IncompleteReadError, OSError) as e:
            error = ConnectionError(f"connection to {self.host}:{self.port} lost: {e or type(e).__name__}")
        except ProtocolError as e:
            log.warning("bad answer from the controller at %s:%d: %s", self.host, self.port, e)
            error = ConnectionError(str(e))
        except asyncio.CancelledError:
            error = ConnectionError("connection closed")
            raise
        finally:
            if self._writer is writer:
                self._writer = None
            writer.close()
            for _k, _v, future in list(self._pending.values()):
                if not future.done():
                    future.set_exception(error)

    async def close(self) -> None:
        writer, task = self._writer, self._reader_task
        self._writer = None
        if writer is not None:
            writer.close()
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


class QuorumControllerChannel:
    """The local controller when active, else the active controller over the wire (see the
    module doc). ``voters``: ``{node_id: (host, port)}`` of ``controller.quorum.voters``."""

    def __init__(
        self,
        local: ControllerServer | None,
        leader: Callable[[], int | None],
        voters: Mapping[int, tuple[str, int]],
        *,
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        client_id: str = "strom-controller-channel",
        principal: str = ANONYMOUS,
        client_host: str = "127.0.0.1",
    ) -> None:
        self.local = local
        self.leader = leader
        self.voters = dict(voters)
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.client_id = client_id
        self.principal = principal
        self.client_host = client_host
        self._connections: dict[int, _ControllerConnection] = {}
        self._closed = False
        self._ids = itertools.count(1)

    def _connection(self, node_id: int) -> _ControllerConnection:
        conn = self._connections.get(node_id)
        if conn is None:
            host, port = self.voters[node_id]
            conn = self._connections[node_id] = _ControllerConnection(host, port, self.client_id)
        return conn

    async def call(
        self,
        api_key: int,
        request: Any,
        api_version: int = -1,
        *,
        principal: str | None = None,
        client_host: str | None = None,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        attempt = 0
        reason = "no controller answered"
        while not self._closed:
            attempt += 1
            remaining = deadline - time.monotonic()
            try:
                local = self.local
                if local is not None and local.is_active:
                    return await asyncio.wait_for(local.call(api_key, request, api_version), remaining)
                leader = self.leader()
                if leader is None:
                    raise _Retry("no controller is known")
                if local is not None and leader == local.node_id:
                    raise _Retry(f"node {leader} (this one) is not active yet")
                if leader not in self.voters:
                    raise _Retry(f"controller {leader} is not in controller.quorum.voters")
                return await self._remote_while_leader(
                    leader, remaining, api_key, request, principal, client_host
                )
            except TimeoutError:
                reason = f"no answer within request.timeout.ms ({self.request_timeout_ms})"
                break
            except (_Retry, NotControllerError, ConnectionError, OSError) as e:
                reason = str(e) or type(e).__name__
                log.debug("controller request %d (attempt %d): %s; retrying", api_key, attempt, reason)
            backoff = self.retry_backoff_ms / 1000
            if time.monotonic() + backoff >= deadline:
                break
            await asyncio.sleep(backoff)
        raise NotControllerError(f"no active controller answered: {reason}")

    async def _remote_while_leader(
        self, leader: int, timeout: float, api_key: int, request: Any, principal: str | None,
        client_host: str | None,
    ) -> dict[str, Any]:
        """:meth:`_remote` to ``leader``, given up (``_Retry``) as soon as the quorum moves on to
        another leader (or the local controller becomes active): a controller that stopped
        answering (SIGSTOP, a hung host) must not hold the request — a broker's heartbeat — for
        the whole ``request_timeout_ms`` while a new controller fences this broker (Kafka's
        channel disconnects from the old controller when the active one changes)."""
        task = asyncio.ensure_future(self._remote(leader, api_key, request, principal, client_host))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        poll = max(self.retry_backoff_ms, 10) / 1000
        try:
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    raise TimeoutError
                done, _ = await asyncio.wait({task}, timeout=min(poll, left))
                if done:
                    return task.result()
                now_leader = self.leader()
                if now_leader != leader or (self.local is not None and self.local.is_active):
                    raise _Retry(f"the controller moved from {leader} to {now_leader}")
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    async def _remote(
        self, node_id: int, api_key: int, request: Any, principal: str | None, client_host: str | None
    ) -> dict[str, Any]:
        conn = self._connection(node_id)
        if api_key in DIRECT_APIS:
            response = response_dict(await conn.send(request))
        else:
            wrapped = envelope_request.EnvelopeRequest(
                request_data=envelope.encode_request(request, next(self._ids) & 0x7FFFFFFF, self.client_id),
                request_principal=envelope.encode_principal(principal or self.principal),
                client_host_address=envelope.encode_address(client_host or self.client_host),
            )
            answer = await conn.send(wrapped)
            code = int(answer.error_code)
            if code == ErrorCode.NOT_CONTROLLER:
                raise _Retry(f"node {node_id} is not the controller")
            if code or answer.response_data is None:
                raise NotControllerError(f"the controller refused the envelope (error {code})")
            inner_key, inner_version = envelope.api_key_and_version(request)
            _cid, inner = envelope.decode_response(inner_key, inner_version, answer.response_data)
            response = response_dict(inner)
        if response.get("error_code") == ErrorCode.NOT_CONTROLLER:
            raise _Retry(f"node {node_id} is not the controller")
        return response

    async def close(self) -> None:
        self._closed = True
        for conn in self._connections.values():
            await conn.close()
        self._connections.clear()
