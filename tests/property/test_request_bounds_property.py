"""No request body, however mutated, makes the decoder allocate more than a small multiple of
its size, or raise anything but ProtocolError. Seeds: a valid request of every API x version
strom serves; mutations: counts and lengths set to huge or negative values, varints stretched,
bytes flipped, truncation."""

from __future__ import annotations

import contextlib
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.protocol import codec
from strom.protocol.errors import ProtocolError
from strom.protocol.request_bounds import MAX_ELEMENTS, check_request
from strom.testing.request_samples import all_versions, sample_bodies

SAMPLES = sample_bodies(fill=2)
KEYS = all_versions()
# decoded objects per wire byte: a one-byte element becomes a tuple slot and an object
AMPLIFICATION = 64
SLACK = 256 * 1024


def _decode(key: int, version: int, body: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        codec.decode_request(key, version, memoryview(body), 0)


def _peak(key: int, version: int, body: bytes) -> int:
    _decode(key, version, SAMPLES[(key, version)])  # schema and walker compiled and cached first
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        _decode(key, version, body)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@st.composite
def mutated(draw: st.DrawFn) -> tuple[int, int, bytes]:
    key, version = draw(st.sampled_from(KEYS))
    body = bytearray(SAMPLES[(key, version)])
    for _ in range(draw(st.integers(1, 4))):
        if not body:
            break
        pos = draw(st.integers(0, len(body) - 1))
        kind = draw(st.sampled_from(["huge-varint", "int32", "int16", "byte", "truncate", "insert"]))
        if kind == "huge-varint":  # a compact length/count of up to 2^35
            huge = [b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x0f", b"\x80\x80\x01"]
            body[pos:pos] = draw(st.sampled_from(huge))
        elif kind == "int32":
            value = draw(st.sampled_from([-2, -1, 0x7FFFFFFF, 0x10000000, 65536]))
            body[pos : pos + 4] = struct.pack(">i", value)
        elif kind == "int16":
            body[pos : pos + 2] = struct.pack(">h", draw(st.sampled_from([-2, -1, 0x7FFF])))
        elif kind == "byte":
            body[pos] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del body[pos:]
        else:
            body[pos:pos] = draw(st.binary(min_size=1, max_size=8))
    return key, version, bytes(body)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_requests_decode_in_bounded_memory(case: tuple[int, int, bytes]) -> None:
    key, version, body = case
    peak = _peak(key, version, body)
    assert peak <= AMPLIFICATION * len(body) + SLACK, (key, version, len(body), peak)


@pytest.mark.parametrize(("key", "version"), KEYS)
def test_every_sample_decodes(key: int, version: int) -> None:
    assert codec.decode_request(key, version, memoryview(SAMPLES[(key, version)]), 0) is not None


# The crafted frames of the robustness report: a flexible compact count of 2^32-2, classic int32
# counts, header tagged-field counts.
CRAFTED = [
    (3, 12, b"\x00\xff\xff\xff\xff\x0f"),  # Metadata v12 topics
    (0, 9, b"\x00\x00\x00\x01\x00\x00\x00\x01\xff\xff\xff\xff\x0f"),  # Produce v9 topic_data
    (0, 8, b"\xff\xff\x00\x01\x00\x00\x00\x01\x7f\xff\xff\xff"),  # Produce v8 topic_data (int32)
    (19, 5, b"\x00\xff\xff\xff\xff\x0f"),  # CreateTopics v5 topics
    (1, 4, b"\xff\xff\xff\xff" + b"\x00" * 12 + b"\x7f\xff\xff\xff"),  # Fetch v4 topics (int32)
    (11, 5, b"\x00\x01g" + b"\x00" * 8 + b"\x00\x01m\xff\xff\x00\x01c\x7f\xff\xff\xff"),  # JoinGroup v5
    (3, 12, b"\xff\xff\xff\xff\x0f"),  # header tagged-field count
]


@pytest.mark.parametrize(("key", "version", "body"), CRAFTED)
def test_crafted_counts_are_refused(key: int, version: int, body: bytes) -> None:
    with pytest.raises(ProtocolError):
        codec.decode_request(key, version, memoryview(body), 0)


def test_non_nullable_array_null_is_refused() -> None:
    # Produce v9: transactional_id null, acks, timeout, then topic_data as compact null (0)
    body = b"\x00\x00\x00\x01\x00\x00\x75\x30\x00\x00"
    with pytest.raises(ProtocolError, match=r"non-nullable field ProduceRequest\.topic_data"):
        codec.decode_request(0, 9, memoryview(body), 0)


def test_element_budget_bounds_large_frames() -> None:
    # DescribeGroups v5 with 5 M empty group names (1 byte each): within the frame, over the budget
    n = 5_000_000
    from strom.protocol.framing import write_uvarint

    out = bytearray(b"\x00")
    write_uvarint(out, n + 1)
    out += b"\x01" * n + b"\x00\x00"
    with pytest.raises(ProtocolError, match="too many array elements"):
        check_request(codec.request_type(15, 5), memoryview(bytes(out)), 1)
    assert n > MAX_ELEMENTS + len(out) // 4
