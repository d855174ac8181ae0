"""The ASGI bridge of the broker's HTTP listener (``strom.observability.console_mount.serve_asgi``)
on a real loopback socket with a small ASGI app; the console's ACL form parsing; the metrics
sampler's discovery of brokers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from strom.console.app import BadInput, _acl_binding
from strom.console.sampler import MetricsSampler
from strom.observability.console_mount import MAX_BODY, serve_asgi


async def echo_app(scope: Any, receive: Any, send: Any) -> None:
    """Answers with what it saw; /stream sends two chunks, then waits for the disconnect."""
    msg = await receive()
    if scope["path"] == "/console/boom":
        raise RuntimeError("a bug")
    if scope["path"] == "/console/stream":
        start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        await send(start)
        await send({"type": "http.response.body", "body": b"one\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"two\n", "more_body": True})
        gone = await receive()
        ENDED["stream"].set_result(gone["type"])
        return
    body = f"{scope['method']} {scope['path']} {scope['root_path']} {scope['query_string'].decode()} " \
           f"{msg['body'].decode()}".encode()
    await send({"type": "http.response.start", "status": 201,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


ENDED: dict[str, asyncio.Future[str]] = {}


@contextlib.asynccontextmanager
async def server() -> AsyncIterator[int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        method, target, _ = head.split(b"\r\n", 1)[0].decode().split()
        await serve_asgi(echo_app, reader, writer, method=method, target=target, head=head, tls=False,
                         server=("127.0.0.1", 0))
        writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield srv.sockets[0].getsockname()[1]
    finally:
        srv.close()


async def exchange(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return data


def test_bridge_get_post_head_and_bad_bodies() -> None:
    async def run() -> None:
        async with server() as port:
            got = await exchange(port, b"GET /console/topics?internal=1 HTTP/1.1\r\nHost: x\r\n\r\n")
            assert got.startswith(b"HTTP/1.1 201 ")
            assert b"connection: close" in got.lower()
            assert got.endswith(b"GET /console/topics /console internal=1 ")
            form = b"name=orders&partitions=3"
            got = await exchange(port, b"POST /console/topics HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s"
                                 % (len(form), form))
            assert got.endswith(b"POST /console/topics /console  name=orders&partitions=3")
            got = await exchange(port, b"HEAD /console/ HTTP/1.1\r\n\r\n")
            assert got.startswith(b"HTTP/1.1 201 ") and got.endswith(b"\r\n\r\n")  # no body
            got = await exchange(port, b"POST /console/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
            assert got.startswith(b"HTTP/1.1 400 ") and b"Content-Length" in got
            huge = b"POST /console/x HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1)
            got = await exchange(port, huge)
            assert got.startswith(b"HTTP/1.1 413 ")
            got = await exchange(port, b"POST /console/x HTTP/1.1\r\nContent-Length: many\r\n\r\n")
            assert got.startswith(b"HTTP/1.1 400 ")
            got = await exchange(port, b"GET /console/boom HTTP/1.1\r\n\r\n")  # logged, answered 500
            assert got.startswith(b"HTTP/1.1 500 ") and got.endswith(b"internal error\n")

    asyncio.run(run())


def test_bridge_streams_and_sees_the_client_leave() -> None:
    async def run() -> None:
        ENDED["stream"] = asyncio.get_running_loop().create_future()
        async with server() as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /console/stream HTTP/1.1\r\n\r\n")
            got = b""
            while b"two\n" not in got:
                got += await asyncio.wait_for(reader.read(100), 10)
            assert b"content-length" not in got.lower()  # streamed: ends with the connection
            writer.close()
            assert await asyncio.wait_for(ENDED["stream"], 10) == "http.disconnect"

    asyncio.run(run())


def test_acl_form_parsing() -> None:
    form = {"resource_type": "topic", "resource_name": "orders", "pattern_type": "prefixed",
            "principal": "User:alice", "host": "", "operation": "describe-configs", "permission": "deny"}
    assert _acl_binding(form) == (2, "orders", 4, "User:alice", "*", 10, 2)
    assert _acl_binding(form | {"resource_type": "CLUSTER", "resource_name": ""})[1] == "kafka-cluster"
    for bad, why in [({"principal": "alice"}, "principal"), ({"operation": "fly"}, "operation"),
                     ({"resource_name": " "}, "name the resource"), ({"pattern_type": "ANY"}, "pattern_type"),
                     ({"resource_type": "USER"}, "resource_type")]:
        with pytest.raises(BadInput, match=why):
            _acl_binding(form | bad)


def test_sampler_discovers_brokers_and_reports_a_failed_discovery() -> None:
    async def run() -> None:
        calls = 0

        async def discover() -> list[str]:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise ConnectionRefusedError("cluster down")
            return ["http://127.0.0.1:1/metrics", "http://127.0.0.1:2/metrics"]

        s = MetricsSampler([], 0.05, discover=discover)
        assert s.enabled
        await s._discover()
        assert s.discover_error == "cluster down" and s.series == []
        await s._discover()
        await s._discover()  # known URLs keep their series, none twice
        assert s.discover_error is None
        assert [x.url for x in s.series] == ["http://127.0.0.1:1/metrics", "http://127.0.0.1:2/metrics"]
        assert not MetricsSampler([], 1.0).enabled

    asyncio.run(run())
