"""Size-prefixed frames and request/response headers (sans-IO).

Every Kafka message is ``int32 size | payload``. A request payload starts with a header:
v1 ``api_key i16 | api_version i16 | correlation_id i32 | client_id nullable-string`` and v2
adds tagged fields after it (used by flexible request versions). Response header v0 is the
correlation id alone, v1 adds tagged fields.

Error contract: :class:`ProtocolError` for a frame larger than the configured maximum, a
negative size, or a header that does not fit in its frame.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import ProtocolError

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhih")
MIN_REQUEST_SIZE = 10  # api_key + api_version + correlation_id + client_id length


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class FrameDecoder:
    """Accumulates bytes and yields complete frames; the buffer is bounded by ``max_frame_size``.
    ``limit_name`` is the config key that limit comes from, named in the error."""

    def __init__(self, max_frame_size: int, limit_name: str = "socket.request.max.bytes") -> None:
        self.max_frame_size = max_frame_size
        self.limit_name = limit_name
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        self._buf += data
        frames: list[memoryview] = []
        buf = self._buf
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0:
                raise ProtocolError(f"negative frame size {size}")
            if size > self.max_frame_size:
                raise ProtocolError(
                    f"frame of {size} bytes exceeds {self.limit_name} ({self.max_frame_size})"
                )
            if end - pos - 4 < size:
                break
            frames.append(memoryview(bytes(buf[pos + 4 : pos + 4 + size])))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise ProtocolError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 35:
            raise ProtocolError("varint too long")


def write_uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def skip_tagged_fields(buf: bytes | memoryview, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    if count * 2 > len(buf) - pos:  # a tag and a size, at least a byte each
        raise ProtocolError(f"{count} tagged fields declared in a shorter request")
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise ProtocolError("truncated tagged field")
    return pos


def parse_request_header(frame: memoryview) -> tuple[RequestHeader, int]:
    """Parse the v1 part of a request header; returns (header, position after client_id).

    The caller decides (by api version flexibility) whether tagged fields follow.
    """
    if len(frame) < MIN_REQUEST_SIZE:
        raise ProtocolError(f"request of {len(frame)} bytes is too short for a header")
    api_key, api_version, correlation_id, n = _HEADER_FIXED.unpack_from(frame, 0)
    pos = 10
    client_id: str | None = None
    if n >= 0:
        if pos + n > len(frame):
            raise ProtocolError("client_id exceeds the frame")
        try:
            client_id = bytes(frame[pos : pos + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("client_id is not valid UTF-8") from None
        pos += n
    elif n != -1:
        raise ProtocolError(f"invalid client_id length {n}")
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """Response header v0 (correlation id) or v1 (plus empty tagged fields)."""
    return struct.pack(">i", correlation_id) + (b"\x00" if flexible else b"")


def frame(payload: bytes | bytearray) -> bytes:
    return _SIZE.pack(len(payload)) + bytes(payload)
