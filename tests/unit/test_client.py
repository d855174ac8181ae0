"""Client sans-IO helpers and KafkaConnection against an in-process fake broker (kio-encoded)."""

from __future__ import annotations

import asyncio
import io
import struct
from collections.abc import Callable
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from strom.client import KafkaConnection, KafkaConnectionError, KafkaError, KafkaProtocolError
from strom.client.client import FetchResult, _batches_end
from strom.client.messages import ApiKey, build, decode_response, encode_request, kio_versions, pick_version
from strom.protocol.records import build_batch

# ---------------------------------------------------------------- messages


def test_pick_version_highest_common() -> None:
    assert pick_version(ApiKey.METADATA, (0, 99)) == max(kio_versions(ApiKey.METADATA))
    assert pick_version(ApiKey.METADATA, (0, 5)) == 5
    assert pick_version(ApiKey.FETCH, (0, 20), max_version=12) == 12
    with pytest.raises(KafkaError) as e:
        pick_version(ApiKey.PRODUCE, (0, 2))  # kio has Produce >= 3 only
    assert e.value.name == "UNSUPPORTED_VERSION" and e.value.code == 35
    with pytest.raises(KafkaError):
        pick_version(ApiKey.PRODUCE, None)


def test_build_fills_neutral_values_and_ignores_unknown_keys() -> None:
    from kio.index import load_request_schema

    req = build(load_request_schema(ApiKey.FETCH, 12), {"max_wait": 250, "topics": [], "nonsense": 1})
    assert req.max_wait.total_seconds() == 0.25
    assert req.topics == () and req.forgotten_topics_data == ()


def test_encode_request_frame() -> None:
    frame, resp_cls = encode_request(ApiKey.METADATA, 1, 7, "me", {"topics": None})
    size, api_key, version, cid = struct.unpack_from(">ihhi", frame)
    assert (size, api_key, version, cid) == (len(frame) - 4, 3, 1, 7)
    assert resp_cls.__name__ == "MetadataResponse"


def test_decode_garbage_raises_protocol_error() -> None:
    with pytest.raises(KafkaProtocolError):
        decode_response(load_response_schema(ApiKey.METADATA, 12), b"\x00\x00\x00\x01\xff")


def test_error_names() -> None:
    e = KafkaError(3, "topic 'x'")
    assert e.name == "UNKNOWN_TOPIC_OR_PARTITION" and e.retriable
    assert str(e) == "UNKNOWN_TOPIC_OR_PARTITION: topic 'x'"
    assert KafkaError(9999).name == "UNKNOWN_ERROR_CODE_9999"


def test_batches_end_counts_complete_batches_only() -> None:
    b1 = build_batch([(None, b"a", [], 1), (None, b"b", [], 1)], base_offset=10)
    b2 = build_batch([(None, b"c", [], 1)], base_offset=12)
    assert _batches_end(b1 + b2) == 13
    assert _batches_end(b1 + b2[:-3]) == 12
    assert _batches_end(b"") is None
    assert FetchResult(0, [], batches_end=None).next_offset is None


# ---------------------------------------------------------------- fake broker


def _encode(api_key: int, version: int, cid: int, obj: Any) -> bytes:
    cls = type(obj)
    buf = io.BytesIO()
    entity_writer(cls.__header_schema__)(buf, cls.__header_schema__(correlation_id=cid))
    entity_writer(cls)(buf, obj)
    body = buf.getvalue()
    return struct.pack(">i", len(body)) + body


class FakeBroker:
    """Answers ApiVersions (optionally refusing v3 like an old broker) and Metadata; may
    answer in reverse order or with a wrong correlation id to test the client's checks."""

    def __init__(self, *, old: bool = False, on_metadata: Callable[[int], Any] | None = None) -> None:
        self.old = old
        self.seen: list[tuple[int, int]] = []
        self.on_metadata = on_metadata
        self.server: asyncio.AbstractServer | None = None
        self.port = 0
        self.hold: list[bytes] = []
        self.mode = "normal"

    async def start(self) -> FakeBroker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, version, cid = struct.unpack_from(">hhi", frame)
                self.seen.append((api_key, version))
                out = self._answer(api_key, version, cid)
                if out is None:
                    writer.close()
                    return
                if self.mode == "reverse":
                    self.hold.append(out)
                    if len(self.hold) == 2:
                        writer.write(self.hold[1] + self.hold[0])
                        self.hold.clear()
                else:
                    writer.write(out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def _answer(self, api_key: int, version: int, cid: int) -> bytes | None:
        if api_key == ApiKey.API_VERSIONS:
            v0 = load_response_schema(18, 0)
            av = v0.__dataclass_fields__["api_keys"].type
            del av
            mod = __import__("kio.schema.api_versions.v0.response", fromlist=["ApiVersion"])
            keys = (
                mod.ApiVersion(api_key=18, min_version=0, max_version=2 if self.old else 3),
                mod.ApiVersion(api_key=3, min_version=0, max_version=4 if self.old else 12),
            )
            if version > 2 and self.old:
                return _encode(18, 0, cid, v0(error_code=ErrorCode.unsupported_version, api_keys=keys))
            cls = load_response_schema(18, version)
            vmod = __import__(cls.__module__, fromlist=["ApiVersion"])
            keys2 = tuple(
                vmod.ApiVersion(api_key=k.api_key, min_version=k.min_version, max_version=k.max_version)
                for k in keys
            )
            return _encode(18, version, cid, build(cls, {"error_code": ErrorCode.none, "api_keys": keys2}))
        if api_key == ApiKey.METADATA:
            if self.mode == "close":
                return None
            cls = load_response_schema(3, version)
            resp = build(
                cls,
                {
                    "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": self.port}],
                    "controller_id": 1,
                    "topics": [],
                },
            )
            return _encode(3, version, cid + (1 if self.mode == "badcid" else 0), resp)
        raise AssertionError(api_key)


async def _with_broker(fake: FakeBroker, body: Callable[[KafkaConnection], Any]) -> Any:
    await fake.start()
    try:
        conn = await KafkaConnection.open("127.0.0.1", fake.port, request_timeout=5)
        try:
            return await body(conn)
        finally:
            await conn.close()
    finally:
        await fake.stop()


def test_negotiation_uses_v3_then_highest_common() -> None:
    fake = FakeBroker()

    async def body(conn: KafkaConnection) -> None:
        assert conn.version(ApiKey.METADATA) == 12
        resp = await conn.request(ApiKey.METADATA, {"topics": None})
        assert resp.brokers[0].port == fake.port

    asyncio.run(_with_broker(fake, body))
    assert fake.seen == [(18, 3), (3, 12)]


def test_negotiation_falls_back_to_v0_for_old_brokers() -> None:
    fake = FakeBroker(old=True)

    async def body(conn: KafkaConnection) -> None:
        assert conn.version(ApiKey.METADATA) == 4
        await conn.request(ApiKey.METADATA, {"topics": None})

    asyncio.run(_with_broker(fake, body))
    assert fake.seen == [(18, 3), (18, 0), (3, 4)]


def test_pipelined_requests_are_matched_in_order() -> None:
    fake = FakeBroker()

    async def body(conn: KafkaConnection) -> None:
        results = await asyncio.gather(*(conn.request(ApiKey.METADATA, {"topics": None}) for _ in range(20)))
        assert len(results) == 20

    asyncio.run(_with_broker(fake, body))


def test_out_of_order_response_fails_the_connection() -> None:
    fake = FakeBroker()

    async def body(conn: KafkaConnection) -> None:
        fake.mode = "reverse"
        res = await asyncio.gather(
            conn.request(ApiKey.METADATA, {"topics": None}),
            conn.request(ApiKey.METADATA, {"topics": None}),
            return_exceptions=True,
        )
        assert all(isinstance(r, KafkaProtocolError) for r in res), res
        assert "correlation id" in str(res[0])
        assert conn.closed

    asyncio.run(_with_broker(fake, body))


def test_broker_closing_fails_in_flight_requests() -> None:
    fake = FakeBroker()

    async def body(conn: KafkaConnection) -> None:
        fake.mode = "close"
        with pytest.raises(KafkaConnectionError, match="closed by the broker"):
            await conn.request(ApiKey.METADATA, {"topics": None})
        with pytest.raises(KafkaConnectionError):
            await conn.request(ApiKey.METADATA, {"topics": None})

    asyncio.run(_with_broker(fake, body))


def test_connect_refused_is_connection_error() -> None:
    async def body() -> None:
        with pytest.raises(KafkaConnectionError, match=r"cannot connect to 127\.0\.0\.1:1"):
            await KafkaConnection.open("127.0.0.1", 1)

    asyncio.run(body())
