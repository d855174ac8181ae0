"""Every version of every share-group API (KIP-932): the handler's answer builds and encodes as
that version; group ids of one kind refused by the other kind's APIs."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from strom.clock import ManualClock, RealClock
from strom.coordinator.group_coordinator import GroupCoordinator
from strom.coordinator.share_coordinator import ShareConfig, ShareCoordinator
from strom.coordinator.storage import MemoryOffsetsStorage
from strom.metadata.topics import TopicInfo
from strom.protocol.api_versions import KAFKA_API_RANGES
from strom.protocol.codec import build, encode_response, request_type, response_type
from strom.protocol.errors import ErrorCode
from strom.server.context import RequestContext
from strom.server.handlers import (
    REGISTRY,
    groups,  # noqa: F401  (registers the handlers)
    share,  # noqa: F401
)
from strom.server.metadata_cache import RegistryMetadataCache
from strom.server.purgatory import FetchPurgatory

TID = uuid.UUID(int=5)


class Logs:
    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return "t" if topic_id == TID else None

    def partitions(self, topic_id: uuid.UUID) -> int | None:
        return 2

    def log_start_offset(self, topic_id: uuid.UUID, partition: int) -> int:
        return 0

    def initial_offset(self, topic_id: uuid.UUID, partition: int, strategy: str) -> int:
        return 0


def _broker(share_coord: ShareCoordinator, group_coord: GroupCoordinator) -> Any:
    info = TopicInfo("t", TID, 2)
    registry: Any = SimpleNamespace(topics={"t": info}, by_id={TID: info}, version=0)
    return SimpleNamespace(
        share_coordinator=share_coord,
        group_coordinator=group_coord,
        node_id=1,
        metadata_cache=RegistryMetadataCache(registry, 1, "c", lambda _l: ("127.0.0.1", 9092)),
        replica_manager=SimpleNamespace(
            logs={}, get_log=lambda _t, _p: None, is_online=lambda _t, _p: False, purgatory=FetchPurgatory()
        ),
        clock=RealClock(),
    )


def _call(broker: Any, key: int, version: int, fields: dict[str, Any]) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        req = build(request_type(key, version), fields)
        ctx = RequestContext(key, version, 1, "client", "127.0.0.1", "c1", broker)
        result = await REGISTRY[key](ctx, req)
        assert isinstance(result, dict)
        encode_response(build(response_type(key, version), result))
        return result

    return asyncio.get_event_loop().run_until_complete(go())


def test_every_version_answers_and_encodes() -> None:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        sc = ShareCoordinator(
            MemoryOffsetsStorage(),
            Logs(),
            config=ShareConfig(num_partitions=2),
            clock=ManualClock(),
            run_timer=False,
        )
        gc = GroupCoordinator(None, ManualClock(), run_timer=False)
        loop.run_until_complete(gc.start())
        b = _broker(sc, gc)
        for key in (76, 77, 78, 79, 90, 91, 92):
            _n, lo, hi = KAFKA_API_RANGES[key]
            for v in range(lo, hi + 1):
                member = f"m-{key}-{v}"
                if key == 76:
                    r = _call(
                        b,
                        key,
                        v,
                        {
                            "group_id": "sg",
                            "member_id": member,
                            "member_epoch": 0,
                            "subscribed_topic_names": ["t"],
                        },
                    )
                    assert r["error_code"] == 0 and r["assignment"]["topic_partitions"][0]["partitions"] == [
                        0,
                        1,
                    ]
                elif key == 77:
                    r = _call(b, key, v, {"group_ids": ["sg", "nope"]})
                    assert [g["error_code"] for g in r["groups"]] == [0, ErrorCode.GROUP_ID_NOT_FOUND]
                elif key == 78:
                    fetch = {
                        "group_id": "sg",
                        "member_id": member,
                        "share_session_epoch": 0,
                        "max_wait": 0,
                        "min_bytes": 1,
                        "max_records": 10,
                        "batch_size": 10,
                        "topics": [{"topic_id": TID, "partitions": [{"partition_index": 0}]}],
                    }
                    r = _call(b, key, v, fetch)
                    assert r["error_code"] == 0
                    assert (
                        r["responses"][0]["partitions"][0]["error_code"]
                        == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    )
                    r = _call(b, key, v, {**fetch, "share_session_epoch": 5})
                    assert r["error_code"] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
                    r = _call(b, key, v, {**fetch, "share_session_epoch": -1, "topics": []})
                    assert r["error_code"] == 0
                    r = _call(b, key, v, {**fetch, "share_session_epoch": 1})
                    assert r["error_code"] == ErrorCode.SHARE_SESSION_NOT_FOUND
                elif key == 79:
                    r = _call(
                        b,
                        key,
                        v,
                        {"group_id": "sg", "member_id": member, "share_session_epoch": 0, "topics": []},
                    )
                    assert r["error_code"] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
                elif key == 90:
                    r = _call(
                        b,
                        key,
                        v,
                        {
                            "groups": [
                                {"group_id": "sg", "topics": None},
                                {"group_id": "sg", "topics": [{"topic_name": "t", "partitions": [0, 7]}]},
                            ]
                        },
                    )
                    assert r["groups"][1]["topics"][0]["partitions"][1]["error_code"] == (
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    )
                elif key == 91:
                    r = _call(
                        b,
                        key,
                        v,
                        {
                            "group_id": "sg",
                            "topics": [
                                {"topic_name": "t", "partitions": [{"partition_index": 0, "start_offset": 0}]}
                            ],
                        },
                    )
                    assert r["error_code"] == ErrorCode.NON_EMPTY_GROUP
                else:
                    r = _call(b, key, v, {"group_id": "sg", "topics": [{"topic_name": "t"}]})
                    assert r["error_code"] == ErrorCode.NON_EMPTY_GROUP
        # a share group's id is not a consumer or classic group's
        r = _call(
            b,
            68,
            1,
            {
                "group_id": "sg",
                "member_id": "x",
                "member_epoch": 0,
                "rebalance_timeout": 1000,
                "subscribed_topic_names": ["t"],
                "topic_partitions": [],
            },
        )
        assert r["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        r = _call(
            b,
            11,
            9,
            {
                "group_id": "sg",
                "session_timeout": 10000,
                "rebalance_timeout": 10000,
                "member_id": "",
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
            },
        )
        assert r["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        # ... and a consumer group's id is not a share group's
        sc.other_group_exists = lambda g: g == "cg"
        r = _call(
            b, 76, 1, {"group_id": "cg", "member_id": "y", "member_epoch": 0, "subscribed_topic_names": ["t"]}
        )
        assert r["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        # the share group is listed with type "share"
        r = _call(b, 16, 5, {"states_filter": [], "types_filter": ["share"]})
        assert [(g["group_id"], g["group_type"]) for g in r["groups"]] == [("sg", "share")]
    finally:
        loop.close()
        asyncio.set_event_loop(None)
