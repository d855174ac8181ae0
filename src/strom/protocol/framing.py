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
from collections.abc import Callable
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
    ``limit_name`` is the config key that limit comes from, named in the error.

    Memory: a partial frame costs what has arrived, never its declared size. Small frames are
    assembled in one buffer and copied out. A frame of at least ``_HANDOVER`` bytes is kept as
    the chunks it arrived in (``bytes`` objects are kept as they are, no copy) and joined once,
    into a buffer of exactly its size, when its last byte arrives: one copy per byte, where
    growing a buffer chunk by chunk cost up to two and a half (each growth of a bytearray past its
    allocation is a ``realloc`` that copies it whole)."""

    _HANDOVER = 64 * 1024

    def __init__(self, max_frame_size: int, limit_name: str = "socket.request.max.bytes") -> None:
        self.max_frame_size = max_frame_size
        self.limit_name = limit_name
        self._buf = bytearray()
        # a large frame in progress: its chunks so far (size prefix excluded), bytes still due,
        # and its declared size
        self._parts: list[bytes | memoryview] | None = None
        self._need = 0
        self._big_size = 0

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        frames: list[memoryview] = []
        if self._parts is not None:
            if not isinstance(data, bytes):
                data = bytes(data)  # the caller may reuse its buffer: keep a copy
            n = len(data)
            if n < self._need:
                self._parts.append(data)
                self._need -= n
                return frames
            need = self._need
            parts = self._parts
            parts.append(memoryview(data)[:need] if n > need else data)
            frames.append(memoryview(bytearray().join(parts)))
            self._parts = None
            self._need = self._big_size = 0
            if n == need:
                return frames
            data = memoryview(data)[need:]
        self._buf += data
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
                if size >= self._HANDOVER:  # the rest of it goes to chunks, not to the buffer
                    arrived = bytes(buf[pos + 4 : end])
                    self._parts = [arrived]
                    self._need = size - len(arrived)
                    self._big_size = size
                    pos = end
                break
            if size >= self._HANDOVER:
                if pos:
                    del buf[:pos]
                    end -= pos
                    pos = 0
                frame = buf
                buf = self._buf = bytearray(frame[4 + size :])
                del frame[4 + size :]
                del frame[:4]  # CPython moves the start of a bytearray forward: no copy
                frames.append(memoryview(frame))
                end = len(buf)
                continue
            frames.append(memoryview(bytes(buf[pos + 4 : pos + 4 + size])))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        held = 4 + self._big_size - self._need if self._parts is not None else 0  # (its size prefix too)
        return len(self._buf) + held

    @property
    def pending_frame_size(self) -> int:
        """Declared size of the frame being received (0 if none has started)."""
        if self._parts is not None:
            return self._big_size
        buf = self._buf
        if len(buf) < 4:
            return 0
        size: int = _SIZE.unpack_from(buf, 0)[0]
        return size


class RequestMemoryPool:
    """``queued.max.request.bytes``: one budget for the bytes of requests read but not yet
    handled, over all connections — partially received frames, queued requests, the request in
    progress. Kafka's ``MemoryPool``, with two changes for a pure-Python broker that reads bytes
    before it can refuse them:

    * bytes are charged as they arrive (:meth:`charge`) and released once the request is handled
      or the connection is gone (:meth:`release`), instead of a frame's declared size up front
      (a client that declares 100 MB and sends nothing holds nothing);
    * a connection may read on (:meth:`may_read`) while the pool is below its limit — frames
      larger than ``small_frame`` only below half of it, so large requests trickling in cannot
      starve small ones (metadata, heartbeats, commits). When large frames are all stuck at that
      mark, one connection at a time holds the *overdraft* and may complete its frame past it
      (Kafka's non-strict pool also lets one allocation dip below zero): partial frames can
      never deadlock each other. The pool thus holds at most about
      ``max(limit, limit / 2 + socket.request.max.bytes)`` plus one read per connection.

    Sans-IO: the driver pauses reading on a connection :meth:`may_read` refuses, registers a
    wake-up with :meth:`wait`, and the pool calls it when memory is released. ``limit`` < 0:
    unbounded (Kafka's -1)."""

    def __init__(self, limit: int, small_frame: int = 1 << 20) -> None:
        self.limit = limit
        self.small_frame = min(small_frame, max(1, limit // 16)) if limit > 0 else small_frame
        self.used = 0
        self.overdraft: object | None = None  # the connection allowed past the large-frame mark
        self._waiters: dict[object, tuple[int, Callable[[], None]]] = {}

    @property
    def bounded(self) -> bool:
        return self.limit >= 0

    def charge(self, n: int) -> None:
        self.used += n

    def release(self, n: int) -> None:
        self.used -= n
        if self._waiters and self.used < self.limit:
            self._wake()

    def _wake(self) -> None:
        for owner, (frame_size, wake) in list(self._waiters.items()):
            if self.may_read(owner, frame_size):
                self._waiters.pop(owner, None)
                wake()

    def may_read(self, owner: object, frame_size: int) -> bool:
        """Whether ``owner`` (a connection), receiving a frame of ``frame_size`` bytes (0: between
        frames), may read more now."""
        if self.limit < 0 or owner is self.overdraft:
            return True
        if frame_size <= self.small_frame:
            return self.used < self.limit
        if self.used < self.limit // 2:
            return True
        if self.overdraft is None and self.used < self.limit:
            self.overdraft = owner
            return True
        return False

    def frame_done(self, owner: object) -> None:
        """``owner`` has no large frame in progress any more (completed, or gone): the
        overdraft passes on."""
        if self.overdraft is owner:
            self.overdraft = None
            if self._waiters:
                self._wake()

    def wait(self, owner: object, frame_size: int, wake: Callable[[], None]) -> None:
        """Call ``wake`` once ``owner`` may read its frame of ``frame_size`` bytes."""
        self._waiters[owner] = (frame_size, wake)

    def forget(self, owner: object) -> None:
        self._waiters.pop(owner, None)
        self.frame_done(owner)


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


def write_compact_string(out: bytearray, s: str | None) -> None:
    """A flexible version's (nullable) string: its UTF-8 length + 1 as an unsigned varint (0:
    null), then the bytes."""
    if s is None:
        out.append(0)
        return
    raw = s.encode()
    write_uvarint(out, len(raw) + 1)
    out += raw


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
