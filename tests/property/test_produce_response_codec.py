"""The hand-written Produce response encoder (strom.protocol.produce_response) against kio, the
reference generated from Kafka's JSON schemas, for every version strom answers (3..12): for
random partition results (errors, offsets, append times, record errors, messages, current
leaders, node endpoints, throttle times) the bytes are those kio writes from the dict the Produce
handler builds for it, and kio reads them back to the same answer.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.serial import entity_reader

from strom.protocol.codec import build, encode_response
from strom.protocol.produce_response import encode_produce_response
from strom.server.handlers.produce import _as_dict

VERSIONS = range(3, 13)
i32s = st.integers(-(2**31), 2**31 - 1)
i64s = st.integers(-(2**63), 2**63 - 1)
texts = st.text(max_size=12)


@dataclass(frozen=True)
class Result:
    error_code: int
    base_offset: int
    log_append_time: int
    log_start_offset: int
    error_message: str | None
    record_errors: tuple[tuple[int, str | None], ...]


results = st.builds(
    Result,
    error_code=st.sampled_from([0, 1, 6, 10, 19, 20, 45, 47, 87]),
    base_offset=i64s,
    # kio's datetime_i64: -1 is null, else milliseconds since the epoch
    log_append_time=st.one_of(st.just(-1), st.integers(0, 2**41)),
    log_start_offset=i64s,
    error_message=st.one_of(st.none(), texts),
    record_errors=st.lists(st.tuples(i32s, st.one_of(st.none(), texts)), max_size=3).map(tuple),
)
leaders = st.one_of(st.none(), st.tuples(i32s, i32s))
partitions = st.lists(st.tuples(i32s, results, leaders), max_size=4)
topics = st.lists(st.tuples(texts, partitions), max_size=4)
endpoints = st.lists(st.tuples(i32s, texts, i32s, st.one_of(st.none(), texts)), max_size=3)


def _as_handler_dict(version: int, topics: Any, throttle: int, nodes: Any) -> dict[str, Any]:
    """The dict the Produce handler gives kio for this answer (its kio path, kept for request
    quotas); it names leaders and endpoints from v10 only (KIP-951)."""
    if version < 10:
        topics = [(name, [(index, r, None) for index, r, _ in parts]) for name, parts in topics]
        nodes = []
    return _as_dict(topics, throttle, nodes)


@settings(max_examples=400, deadline=None)
@given(version=st.sampled_from(VERSIONS), topics=topics, throttle=st.integers(0, 2**31 - 1),
       nodes=endpoints)
def test_the_answer_is_what_kio_writes(version: int, topics: Any, throttle: int, nodes: Any) -> None:
    cls = load_response_schema(0, version)
    old = encode_response(build(cls, _as_handler_dict(version, topics, throttle, nodes)))
    new = encode_produce_response(version, topics, throttle, nodes)
    assert new == old
    back, end = entity_reader(cls)(memoryview(new), 0)
    assert end == len(new)
    assert [str(t.name) for t in back.responses] == [name for name, _ in topics]
    assert back.throttle_time == datetime.timedelta(milliseconds=throttle)  # (exact: no float ms)


def test_a_version_outside_3_to_12_is_refused() -> None:
    for version in (2, 13):
        try:
            encode_produce_response(version, [])
        except ValueError:
            continue
        raise AssertionError(f"v{version} encoded")
