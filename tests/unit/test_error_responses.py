"""Error responses shaped after their requests (Kafka's getErrorResponse): every API x version
builds and encodes, and the items a client needs (topics, partitions, groups) carry the error."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from strom.protocol import codec
from strom.protocol.error_responses import error_response
from strom.server import network
from strom.testing.request_samples import all_versions, sample_entity


@pytest.mark.parametrize(("key", "version"), all_versions())
def test_every_api_builds_and_encodes(key: int, version: int) -> None:
    response_cls = codec.response_type(key, version)
    data = error_response(response_cls, sample_entity(codec.request_type(key, version), 2), -1, None)
    assert codec.encode_response(codec.build(response_cls, data))


def test_produce_answers_every_partition() -> None:
    request = codec.build(
        codec.request_type(0, 12),
        {
            "acks": -1,
            "timeout": 30000,
            "topic_data": [
                {"name": "a", "partition_data": [{"index": 0, "records": b""}, {"index": 3, "records": b""}]},
                {"name": "b", "partition_data": [{"index": 1, "records": b""}]},
            ],
        },
    )
    data = error_response(codec.response_type(0, 12), request, -1, None)
    got = {
        (t["name"], p["index"], p["error_code"]) for t in data["responses"] for p in t["partition_responses"]
    }
    assert got == {("a", 0, -1), ("a", 3, -1), ("b", 1, -1)}


def test_offset_fetch_partition_indexes_become_partitions() -> None:
    request = codec.build(
        codec.request_type(9, 7),
        {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 2]}], "require_stable": False},
    )
    data = error_response(codec.response_type(9, 7), request, 15, None)
    assert data["error_code"] == 15
    assert [p["partition_index"] for p in data["topics"][0]["partitions"]] == [0, 2]


def test_handler_failures_log_one_traceback_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    network._failure_log.clear()
    with caplog.at_level(logging.ERROR, logger="strom.network"):
        for _ in range(3):
            network._log_handler_failure("Metadata", 12, "127.0.0.1:1", TypeError("boom"))
        network._log_handler_failure("Metadata", 12, "127.0.0.1:1", KeyError("other"))
    records = [r for r in caplog.records if r.name == "strom.network"]
    assert len(records) == 2 and all(r.exc_info for r in records)
    # the next report after the interval counts what was suppressed
    key = ("Metadata", "TypeError")
    last, suppressed = network._failure_log[key]
    assert suppressed == 2
    network._failure_log[key] = (last - network._FAILURE_LOG_INTERVAL - 1, suppressed)
    with caplog.at_level(logging.ERROR, logger="strom.network"):
        network._log_handler_failure("Metadata", 12, "127.0.0.1:1", TypeError("boom"))
    assert "2 more since the last report" in caplog.records[-1].getMessage()


def test_unexpected_failure_answers_unknown_server_error_per_item(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the real driver: a handler that raises gets its request answered, not dropped."""
    from strom.client.messages import decode_response, encode_request
    from strom.server import handlers
    from strom.server.network import KafkaProtocol

    handlers.load_all()

    async def broken(ctx: Any, request: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setitem(handlers.REGISTRY, 3, broken)

    class Transport:
        def __init__(self) -> None:
            self.data = bytearray()
            self.closed = False

        def get_extra_info(self, name: str) -> Any:
            return ("127.0.0.1", 1) if name == "peername" else None

        def writelines(self, parts: list[Any]) -> None:
            for p in parts:
                self.data += p

        def close(self) -> None:
            self.closed = True

    class Broker:
        from strom.config import BrokerConfig
        from strom.protocol.framing import RequestMemoryPool

        config = BrokerConfig.from_sources(overrides=[])
        connections: set[Any] = set()
        native_sendfile = False
        request_pool = RequestMemoryPool(config["queued.max.request.bytes"])

    async def go() -> bytes:
        proto = KafkaProtocol(Broker())  # type: ignore[arg-type]
        transport = Transport()
        proto.connection_made(transport)  # type: ignore[arg-type]
        frame, _ = encode_request(3, 12, 7, "t", {"topics": [{"name": "x"}, {"name": "y"}]})
        proto.data_received(frame)
        for _ in range(100):
            await asyncio.sleep(0)
            if transport.data:
                break
        proto.close()
        return bytes(transport.data)

    raw = asyncio.run(go())
    _, resp_cls = encode_request(3, 12, 7, "t", {"topics": []})
    resp = decode_response(resp_cls, raw[4:])
    assert [(t.name, int(t.error_code)) for t in resp.topics] == [("x", -1), ("y", -1)]
