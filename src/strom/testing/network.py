"""An in-memory network: Kafka frames between a client and the broker's protocol object,
without sockets.

:class:`ConnectionPair` joins two asyncio protocols with two :class:`MemoryTransport` objects:
what one side writes arrives as ``data_received`` on the other side on the loop's next turn
(never re-entrantly), in order; closing one side delivers ``connection_lost`` to both.
:class:`MemoryNetwork` serves a :class:`~strom.server.broker.Broker` (started with
``listen=False``) this way: each connection is a real
:class:`~strom.server.network.KafkaProtocol` (framing, pipelining, dispatch, handlers: all of
it) whose transport is in memory; :meth:`MemoryNetwork.client` is a
:class:`strom.client.Client` whose connections go through it. File regions of fetch responses
are read with ``pread`` (no ``sendfile`` to a memory transport).

Together with :class:`strom.clock.ManualClock` and
:class:`strom.testing.scheduler.ManualScheduler` a whole broker runs in one process, in one
thread (``Broker(..., threaded_flush=False)``), on simulated time.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..client.client import Client
    from ..server.broker import Broker

_ports = itertools.count(40000)


class MemoryTransport(asyncio.Transport):
    """One direction of a :class:`ConnectionPair` (the transport a protocol writes to)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, extra: dict[str, Any]) -> None:
        super().__init__(extra)
        self._loop = loop
        self.peer: asyncio.Protocol | None = None  # who receives what is written here
        self.other: MemoryTransport | None = None  # the transport of the other side
        self.protocol: asyncio.BaseProtocol | None = None  # the protocol writing here
        self._closing = False
        self._paused = False
        self._held: list[bytes] = []  # arrived while the receiving side paused reading
        self.bytes_written = 0

    # --- writing
    def write(self, data: bytes | bytearray | memoryview) -> None:  # type: ignore[override]
        if self._closing or not data:
            return
        self.bytes_written += len(data)
        assert self.other is not None
        self._loop.call_soon(self.other._deliver, bytes(data))

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:  # type: ignore[override]
        data = b"".join(bytes(d) for d in list_of_data)
        if data:
            self.write(data)

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    # --- reading (this side's protocol receives)
    def _deliver(self, data: bytes) -> None:
        if self._closing or self.protocol is None:
            return
        if self._paused:
            self._held.append(data)
            return
        self.protocol.data_received(data)  # type: ignore[attr-defined]

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        if not self._paused:
            return
        self._paused = False
        held, self._held = self._held, []
        for data in held:
            self._loop.call_soon(self._deliver, data)

    def is_reading(self) -> bool:
        return not self._paused

    # --- closing
    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        other = self.other
        if self.protocol is not None:
            self._loop.call_soon(self.protocol.connection_lost, None)
        if other is not None and not other._closing:
            other._closing = True
            if other.protocol is not None:
                self._loop.call_soon(other.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self.protocol is not None
        return self.protocol


class ConnectionPair:
    """Two protocols joined in memory: ``client`` and ``server`` see each other's writes."""

    def __init__(self, client: asyncio.Protocol, server: asyncio.Protocol,
                 client_addr: tuple[str, int] | None = None, server_addr: tuple[str, int] = ("memory", 9092)
                 ) -> None:
        loop = asyncio.get_running_loop()
        client_addr = client_addr or ("memory-client", next(_ports))
        self.client_transport = MemoryTransport(loop, {"peername": server_addr, "sockname": client_addr})
        self.server_transport = MemoryTransport(loop, {"peername": client_addr, "sockname": server_addr})
        self.client_transport.other = self.server_transport
        self.server_transport.other = self.client_transport
        self.client_transport.protocol = client
        self.server_transport.protocol = server
        server.connection_made(self.server_transport)
        client.connection_made(self.client_transport)

    def close(self) -> None:
        self.client_transport.close()


class MemoryNetwork:
    """Client connections to ``broker`` without sockets (see the module doc)."""

    def __init__(self, broker: Broker, listener: str | None = None) -> None:
        self.broker = broker
        listeners = broker.config.listener_protocols()
        name, protocol, _host, _port = next(
            (entry for entry in listeners if listener is None or entry[0] == listener), listeners[0]
        )
        self.listener, self.security_protocol = name, protocol
        self.pairs: list[ConnectionPair] = []

    def server_protocol(self) -> asyncio.Protocol:
        from ..security.session import ConnectionSession
        from ..server.network import KafkaProtocol

        session = ConnectionSession.for_listener(self.listener, self.security_protocol)
        proto = KafkaProtocol(self.broker, session)
        proto.sendfile = False  # a memory transport has no descriptor: file regions are pread
        return proto

    async def open_streams(self, host: str = "memory", port: int = 9092
                           ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """An ``asyncio.open_connection`` look-alike: streams over a fresh in-memory connection."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 16, loop=loop)
        client = asyncio.StreamReaderProtocol(reader, loop=loop)
        pair = ConnectionPair(client, self.server_protocol(), server_addr=(host, port))
        self.pairs.append(pair)
        writer = asyncio.StreamWriter(pair.client_transport, client, reader, loop)
        return reader, writer

    def client(self, **kwargs: Any) -> Client:
        """A :class:`strom.client.Client` bootstrapped at the broker's advertised address, every
        connection of which is in memory."""
        from ..client.client import Client

        host, port = self.broker.advertised
        return Client(f"{host}:{port}", open_streams=self.open_streams, **kwargs)

    def close(self) -> None:
        for pair in self.pairs:
            pair.close()
