"""A connection's size-prefixed response frames, received without extra copies.

asyncio's ``StreamReader`` copies every byte twice after the kernel (into its buffer, then out
of it by ``readexactly``). A follower fetching a leader's log, or a consumer, receives most of
its bytes in frames of hundreds of KB, so :class:`FrameReceiver` is an
:class:`asyncio.BufferedProtocol`: small frames are read through one reusable buffer and copied
out once; a large frame gets its own buffer of the frame's size, the bytes already read are
moved into it, and the socket then reads straight into it (Kafka's ``NetworkReceive`` does the
same). ``PYTHONPATH=src python bench/frame_receiver.py`` compares the two on a socket pair.

The size prefix is checked before any buffer is allocated (at most ``max_frame_bytes``; at
least 4, a correlation id). Writing goes through :class:`FrameWriter` (the transport with
flow control: :meth:`FrameWriter.drain` waits while the transport's buffer is over its high
mark).
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque

from .errors import KafkaProtocolError

_SIZE = struct.Struct(">i")
_SCRATCH = 64 * 1024  # frames up to this size are copied out of the shared buffer


class FrameReceiver(asyncio.BufferedProtocol):
    """Complete frames (without their size prefix), in order: :meth:`read_frame`."""

    def __init__(self, max_frame_bytes: int, *, max_queued: int = 64) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.max_queued = max_queued
        self.transport: asyncio.Transport | None = None
        self._scratch = bytearray(_SCRATCH)
        self._start = 0  # unparsed bytes are _scratch[_start:_end]
        self._end = 0
        self._big: bytearray | None = None  # the large frame being filled in place
        self._big_pos = 0
        self._frames: deque[bytes | memoryview] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._eof = False
        self._paused_reading = False
        # writing side (see FrameWriter)
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._closed: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._closed = asyncio.get_running_loop().create_future()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return memoryview(self._big)[self._big_pos:]
        if self._end == len(self._scratch):  # full of a partial frame's start: make room
            self._compact()
        return memoryview(self._scratch)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._big is not None:
            self._big_pos += nbytes
            if self._big_pos == len(self._big):
                self._push(memoryview(self._big).toreadonly())  # read-only, as decoders want
                self._big = None
            return
        self._end += nbytes
        try:
            self._parse()
        except KafkaProtocolError as e:
            self._set_error(e)
            if self.transport is not None:
                self.transport.close()

    def eof_received(self) -> bool | None:
        self._eof = True
        self._wake()
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self._set_error(exc)
        self._eof = True
        self._wake()
        self._write_paused = False
        for w in self._drain_waiters:
            if not w.done():
                if exc is None:
                    w.set_result(None)
                else:
                    w.set_exception(ConnectionResetError(str(exc)))
        self._drain_waiters.clear()
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        for w in self._drain_waiters:
            if not w.done():
                w.set_result(None)
        self._drain_waiters.clear()

    # ------------------------------------------------------------------ frames
    def _parse(self) -> None:
        buf = self._scratch
        pos, end = self._start, self._end
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 4 or size > self.max_frame_bytes:
                raise KafkaProtocolError(f"invalid response frame size {size}")
            have = end - pos - 4
            if have >= size:
                self._push(bytes(buf[pos + 4 : pos + 4 + size]))
                pos += 4 + size
                continue
            if size > _SCRATCH - 4:  # a large frame: its own buffer, filled in place from now on
                big = bytearray(size)
                big[:have] = buf[pos + 4 : end]
                self._big, self._big_pos = big, have
                pos = end
            break
        if pos == end:
            self._start = self._end = 0
        else:
            self._start = pos

    def _compact(self) -> None:
        n = self._end - self._start
        self._scratch[:n] = self._scratch[self._start : self._end]
        self._start, self._end = 0, n

    def _push(self, frame: bytes | memoryview) -> None:
        self._frames.append(frame)
        if len(self._frames) >= self.max_queued and self.transport is not None and not self._paused_reading:
            self._paused_reading = True
            self.transport.pause_reading()
        self._wake()

    def _set_error(self, e: BaseException) -> None:
        if self._error is None:
            self._error = e
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def read_frame(self) -> bytes | memoryview:
        """The next frame's bytes (header included, size prefix excluded; a large frame as a
        read-only view of its own buffer). Raises
        :class:`asyncio.IncompleteReadError` at the end of the stream, the connection's error
        if it failed, :class:`KafkaProtocolError` for an invalid size prefix."""
        while not self._frames:
            if self._error is not None:
                raise self._error
            if self._eof:
                raise asyncio.IncompleteReadError(b"", None)
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        frame = self._frames.popleft()
        if self._paused_reading and len(self._frames) < self.max_queued // 2 and self.transport is not None:
            self._paused_reading = False
            self.transport.resume_reading()
        return frame


class FrameWriter:
    """The writing half: the transport, with the protocol's flow control."""

    def __init__(self, transport: asyncio.Transport, protocol: FrameReceiver) -> None:
        self.transport = transport
        self.protocol = protocol

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.transport.write(data)

    async def drain(self) -> None:
        p = self.protocol
        if p._error is not None and isinstance(p._error, OSError):
            raise p._error
        if self.transport.is_closing():
            await asyncio.sleep(0)  # let connection_lost run
            if p._error is not None and isinstance(p._error, OSError):
                raise p._error
            raise ConnectionResetError("connection closed")
        if not p._write_paused:
            return
        w: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        p._drain_waiters.append(w)
        await w

    def close(self) -> None:
        self.transport.close()

    async def wait_closed(self) -> None:
        if self.protocol._closed is not None:
            await self.protocol._closed


__all__ = ["FrameReceiver", "FrameWriter"]
