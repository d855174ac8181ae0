"""DescribeCluster as a Kafka 4 broker answers it: brokers only (KIP-919 endpoint types) and
v2's fenced flag (KIP-1073); every version encodes."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from strom.protocol.api_versions import KAFKA_API_RANGES
from strom.protocol.codec import build, encode_response, request_type, response_type
from strom.protocol.errors import ErrorCode as E
from strom.server.context import RequestContext
from strom.server.handlers import load_all
from strom.server.metadata_cache import RegistryMetadataCache

REGISTRY = load_all()


def _call(version: int, **fields: Any) -> dict[str, Any]:
    registry: Any = SimpleNamespace(topics={}, by_id={}, version=0)
    cache = RegistryMetadataCache(registry, 1, "c", lambda _l: ("127.0.0.1", 9092))
    broker = SimpleNamespace(node_id=1, metadata_cache=cache)
    ctx = RequestContext(60, version, 1, "client", "127.0.0.1", "c1", broker)  # type: ignore[arg-type]
    req = build(request_type(60, version), {"include_cluster_authorized_operations": False, **fields})
    result = asyncio.run(REGISTRY[60](ctx, req))
    assert isinstance(result, dict)
    encode_response(build(response_type(60, version), result))
    return result


@pytest.mark.parametrize("version", range(KAFKA_API_RANGES[60][1], KAFKA_API_RANGES[60][2] + 1))
def test_brokers_described(version: int) -> None:
    r = _call(version, include_fenced_brokers=True)
    assert r["error_code"] == E.NONE and r["controller_id"] == 1
    assert r["brokers"] == [
        {"broker_id": 1, "host": "127.0.0.1", "port": 9092, "rack": None, "is_fenced": False}
    ]


def test_endpoint_types_other_than_brokers_are_refused() -> None:
    assert _call(1, endpoint_type=2)["error_code"] == E.MISMATCHED_ENDPOINT_TYPE
    assert _call(2, endpoint_type=7)["error_code"] == E.UNSUPPORTED_ENDPOINT_TYPE
    assert _call(1, endpoint_type=0)["error_message"] == "Unsupported endpoint type 0"
