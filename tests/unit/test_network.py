"""The network driver's connection object without a broker process: the frame limit before SASL
authentication and how a failed TLS handshake is logged."""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any

import pytest

from strom.config import BrokerConfig
from strom.protocol.framing import RequestMemoryPool
from strom.security.session import ConnectionSession
from strom.server.network import KafkaProtocol


class _FakeBroker:
    def __init__(self, *overrides: str) -> None:
        self.config = BrokerConfig.from_sources(overrides=list(overrides))
        self.connections: set[Any] = set()
        self.native_sendfile = False
        self.request_pool = RequestMemoryPool(self.config["queued.max.request.bytes"])


class _FakeTransport:
    def __init__(self) -> None:
        self.closed = False

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 5555) if name == "peername" else None

    def pause_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def test_frame_limit_before_sasl_authentication_is_named() -> None:
    broker: Any = _FakeBroker()
    sasl = KafkaProtocol(broker, ConnectionSession.for_listener("SASL_PLAINTEXT", "SASL_PLAINTEXT"))
    assert (sasl.conn.max_frame_size, sasl.conn.limit_name) == (524288, "sasl.server.max.receive.size")
    plain = KafkaProtocol(broker, ConnectionSession.for_listener("PLAINTEXT", "PLAINTEXT"))
    assert plain.conn.limit_name == "socket.request.max.bytes"


@pytest.mark.parametrize(
    "error,level",
    [
        # Python 3.11 asyncio: the handshake timeout surfaces as ConnectionAbortedError
        (ConnectionAbortedError("SSL handshake is taking longer than 60.0 seconds"), logging.INFO),
        (TimeoutError(), logging.INFO),
        (ssl.SSLError(1, "bad"), logging.INFO),
        (ConnectionResetError(), logging.DEBUG),  # a port probe
    ],
)
def test_failed_tls_handshake_logging(
    error: Exception, level: int, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def go() -> tuple[KafkaProtocol, _FakeTransport]:
        loop = asyncio.get_running_loop()

        async def start_tls(*args: Any, **kwargs: Any) -> Any:
            raise error

        monkeypatch.setattr(loop, "start_tls", start_tls)
        broker: Any = _FakeBroker()
        tls = ssl.create_default_context()
        proto = KafkaProtocol(broker, ConnectionSession.for_listener("SSL", "SSL"), tls)
        raw = _FakeTransport()
        proto.connection_made(raw)  # type: ignore[arg-type]
        assert proto.worker is not None
        await proto.worker
        assert proto not in broker.connections and proto.idle_timer is None
        return proto, raw

    with caplog.at_level(logging.DEBUG, logger="strom.network"):
        proto, raw = asyncio.run(go())
    assert raw.closed and proto.closed
    records = [r for r in caplog.records if "TLS handshake failed" in r.getMessage()]
    assert [r.levelno for r in records] == [level]


def test_idle_connection_is_closed_but_not_while_a_request_is_handled() -> None:
    """connections.max.idle.ms: a long-poll request in progress is no idleness; once answered
    and followed by silence, the connection is closed."""

    async def go() -> None:
        broker: Any = _FakeBroker("connections.max.idle.ms=100")
        proto = KafkaProtocol(broker, ConnectionSession.for_listener("PLAINTEXT", "PLAINTEXT"))
        transport = _FakeTransport()
        proto.connection_made(transport)  # type: ignore[arg-type]
        proto.busy = True  # as while a Fetch waits for data
        await asyncio.sleep(0.35)
        assert not transport.closed and proto in broker.connections
        proto.busy = False
        proto.last_active = asyncio.get_running_loop().time()  # the answer went out
        await asyncio.sleep(0.05)
        assert not transport.closed
        await asyncio.sleep(0.3)
        assert transport.closed and proto.closed and proto.idle_timer is None
        assert proto.worker is not None
        await asyncio.wait_for(proto.worker, 1)

    asyncio.run(go())


def test_negative_idle_timeout_disables_it() -> None:
    broker: Any = _FakeBroker("connections.max.idle.ms=-1")
    assert KafkaProtocol(broker, ConnectionSession()).idle_timeout is None
