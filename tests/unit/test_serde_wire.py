"""Confluent's wire format framing in strom.serde (magic byte, schema id, Protobuf message indexes)."""

from __future__ import annotations

import pytest

from strom.serde import SerdeError, frame, unframe


def test_frame_layout() -> None:
    assert frame(7, b"xy") == b"\x00\x00\x00\x00\x07xy"
    assert frame(0x01020304, b"") == b"\x00\x01\x02\x03\x04"
    assert unframe(b"\x00\x00\x00\x01\x00abc") == (256, None, b"abc")


@pytest.mark.parametrize(("indexes", "encoded"), [
    ([0], b"\x00"),                 # the common case: the first message, one byte
    ([1], b"\x02\x02"),             # count 1, index 1 (zigzag varints)
    ([0, 2], b"\x04\x00\x04"),      # a nested message: second level index 2
    ([70], b"\x02\x8c\x01"),        # a multi-byte varint
])
def test_protobuf_message_indexes(indexes: list[int], encoded: bytes) -> None:
    data = frame(5, b"P", indexes)
    assert data == b"\x00\x00\x00\x00\x05" + encoded + b"P"
    assert unframe(data, protobuf=True) == (5, indexes, b"P")


@pytest.mark.parametrize("bad", [b"", b"\x00\x00\x00\x01", b"\x01\x00\x00\x00\x01x"])
def test_bad_frames(bad: bytes) -> None:
    with pytest.raises(SerdeError):
        unframe(bad)


def test_truncated_indexes() -> None:
    with pytest.raises(SerdeError):
        unframe(b"\x00\x00\x00\x00\x01\x04\x00", protobuf=True)
    with pytest.raises(SerdeError):
        frame(-1, b"")
