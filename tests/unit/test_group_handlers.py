"""Every version of every group API: the handler's answer builds and encodes as that version."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from strom.clock import ManualClock
from strom.coordinator.classic import ClassicConfig
from strom.coordinator.group_coordinator import CoordinatorConfig, GroupCoordinator
from strom.metadata.topics import TopicInfo
from strom.protocol.api_versions import KAFKA_API_RANGES
from strom.protocol.codec import build, encode_response, request_type, response_type
from strom.server.context import RequestContext
from strom.server.handlers import (
    REGISTRY,
    groups,  # noqa: F401  (registers the handlers)
)
from strom.server.metadata_cache import RegistryMetadataCache

TID = uuid.UUID(int=5)

REQUESTS: dict[int, dict[str, Any]] = {
    10: {"key": "g", "key_type": 0, "coordinator_keys": ["g", "h"]},
    11: {
        "group_id": "g",
        "session_timeout": 10000,
        "rebalance_timeout": 10000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"m"}],
    },
    12: {"group_id": "g", "generation_id": 1, "member_id": "m"},
    13: {"group_id": "g", "member_id": "m", "members": [{"member_id": "m"}]},
    14: {"group_id": "g", "generation_id": 1, "member_id": "m", "assignments": []},
    15: {"groups": ["g", "simple"]},
    16: {"states_filter": [], "types_filter": []},
    8: {
        "group_id": "simple",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "retention_time": -1,
        "topics": [
            {
                "name": "t",
                "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_metadata": "x"}],
            },
            {
                "name": "nope",
                "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": None}],
            },
        ],
    },
    9: {
        "group_id": "simple",
        "topics": [{"name": "t", "partition_indexes": [0, 1]}],
        "groups": [{"group_id": "simple", "topics": None}],
    },
    42: {"groups_names": ["nobody"]},
    47: {"group_id": "simple", "topics": [{"name": "t", "partitions": [{"partition_index": 1}]}]},
    68: {
        "group_id": "cg",
        "member_id": str(uuid.UUID(int=9)),
        "member_epoch": 0,
        "rebalance_timeout": 30000,
        "subscribed_topic_names": ["t"],
        "topic_partitions": [],
    },
    69: {"group_ids": ["cg", "g"]},
}


def _ctx(coord: GroupCoordinator, key: int, version: int) -> RequestContext:
    info = TopicInfo("t", TID, 2)
    registry: Any = SimpleNamespace(topics={"t": info}, by_id={TID: info}, version=0)
    broker = SimpleNamespace(
        group_coordinator=coord,
        node_id=1,
        metadata_cache=RegistryMetadataCache(registry, 1, "c", lambda _l: ("127.0.0.1", 9092)),
    )
    return RequestContext(key, version, 1, "client", "127.0.0.1", "c1", broker)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", sorted(REQUESTS))
def test_every_version_answers_and_encodes(key: int) -> None:
    _name, lo, hi = KAFKA_API_RANGES[key]

    async def go() -> None:
        coord = GroupCoordinator(
            CoordinatorConfig(classic=ClassicConfig(initial_rebalance_delay_ms=0)),
            ManualClock(),
            run_timer=False,
        )
        await coord.start()
        for v in range(lo, hi + 1):
            fields = dict(REQUESTS[key])
            if key == 11:  # a fresh group per version: a second joiner would wait for a rebalance
                fields["group_id"] = f"g{v}"
            req = build(request_type(key, v), fields)
            result = await REGISTRY[key](_ctx(coord, key, v), req)
            assert isinstance(result, dict)
            encode_response(build(response_type(key, v), result))
            if key == 11:
                assert result["error_code"] in (0, 79)
            if key == 8:
                errs = [p["error_code"] for t in result["topics"] for p in t["partitions"]]
                assert errs == [0, 3]

    asyncio.run(go())
