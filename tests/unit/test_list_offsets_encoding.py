"""The ListOffsets answer with its partitions packed by hand must be kio's encoding of the
whole answer, byte for byte, in every version strom serves (1-10)."""

from __future__ import annotations

import pytest

from strom.protocol import codec
from strom.protocol.errors import ErrorCode
from strom.server.handlers.list_offsets import encode_list_offsets
from strom.server.network import _with_throttle

TOPICS = [
    ("orders", [(0, 0, -1, 42, 3), (1, 0, 1_700_000_000_123, 7, 0),
                (2, int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1, -1, -1)]),
    ("t" * 200, [(p, 0, -1, p * 1000, 1) for p in range(130)]),  # (two varint bytes in v6+)
    ("empty", []),
    ("denied", [(0, int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), -1, -1, -1)]),
]


def _kio(version: int, topics: list[tuple[str, list[tuple[int, int, int, int, int]]]]) -> bytes:
    data = {"throttle_time": 0, "topics": [
        {"name": name, "partitions": [
            {"partition_index": p, "error_code": e, "timestamp": ts, "offset": o, "leader_epoch": ep}
            for p, e, ts, o, ep in rows]}
        for name, rows in topics]}
    return codec.encode_response(codec.build(codec.response_type(2, version), data))


def _joined(version: int, topics: list[tuple[str, list[tuple[int, int, int, int, int]]]]) -> bytes:
    resp = encode_list_offsets(version, topics)
    body = b"".join(bytes(p) for p in resp.parts if not isinstance(p, tuple))
    assert len(body) == resp.size
    return body


@pytest.mark.parametrize("version", range(1, 11))
@pytest.mark.parametrize("count", [0, 1, len(TOPICS)])
def test_encoding_matches_kio(version: int, count: int) -> None:
    assert _joined(version, TOPICS[:count]) == _kio(version, TOPICS[:count])


@pytest.mark.parametrize("version", [2, 6, 10])
def test_a_request_quota_throttle_lands_in_the_answer(version: int) -> None:
    resp = encode_list_offsets(version, TOPICS[:1])
    _with_throttle(2, resp, 1500)
    body = b"".join(bytes(p) for p in resp.parts if not isinstance(p, tuple))
    decoded = codec._reader(codec.response_type(2, version))(memoryview(body), 0)[0]
    assert decoded.throttle_time.total_seconds() == 1.5
    assert [int(p.offset) for p in decoded.topics[0].partitions] == [42, 7, -1]
