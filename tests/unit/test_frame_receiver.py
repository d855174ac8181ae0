"""strom.client.frame_receiver: frames cut out of any chunking of the stream, large ones
received in place, sizes checked before allocation, end of stream and errors reported."""

from __future__ import annotations

import asyncio
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.client.errors import KafkaProtocolError
from strom.client.frame_receiver import FrameReceiver


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _feed(p: FrameReceiver, data: bytes, chunks: list[int]) -> None:
    pos = 0
    i = 0
    while pos < len(data):
        buf = p.get_buffer(-1)
        assert len(buf) > 0
        n = min(len(buf), len(data) - pos, chunks[i % len(chunks)] if chunks else len(data))
        buf[:n] = data[pos : pos + n]
        p.buffer_updated(n)
        pos += n
        i += 1


async def _drain(p: FrameReceiver, n: int) -> list[bytes]:
    return [bytes(await p.read_frame()) for _ in range(n)]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.one_of(st.integers(4, 300), st.integers(60_000, 200_000)), min_size=1, max_size=6),
    chunks=st.lists(st.integers(1, 100_000), min_size=1, max_size=8),
)
def test_any_chunking_gives_the_frames_back(sizes: list[int], chunks: list[int]) -> None:
    bodies = [bytes([i % 251]) * s for i, s in enumerate(sizes)]
    data = b"".join(_frame(b) for b in bodies)

    async def go() -> None:
        p = FrameReceiver(1 << 20, max_queued=1000)
        _feed(p, data, chunks)
        assert await _drain(p, len(bodies)) == bodies

    asyncio.run(go())


def test_a_large_frame_is_read_into_its_own_buffer() -> None:
    async def go() -> None:
        p = FrameReceiver(1 << 20)
        body = bytes(range(256)) * 1000
        data = _frame(body)
        buf = p.get_buffer(-1)
        buf[:1000] = data[:1000]
        p.buffer_updated(1000)
        rest = p.get_buffer(-1)
        assert len(rest) == len(body) - 996  # the frame's remainder, nothing more
        rest[:] = data[1000:]
        p.buffer_updated(len(rest))
        frame = await p.read_frame()
        assert isinstance(frame, memoryview) and frame.readonly and bytes(frame) == body

    asyncio.run(go())


@pytest.mark.parametrize("size", [-1, 0, 3, (1 << 20) + 1])
def test_an_invalid_size_is_refused_before_any_allocation(size: int) -> None:
    async def go() -> None:
        p = FrameReceiver(1 << 20)
        buf = p.get_buffer(-1)
        buf[:4] = struct.pack(">i", size)
        p.buffer_updated(4)
        with pytest.raises(KafkaProtocolError, match="invalid response frame size"):
            await p.read_frame()

    asyncio.run(go())


def test_end_of_stream_mid_frame_and_connection_errors() -> None:
    async def go() -> None:
        p = FrameReceiver(1 << 20)
        _feed(p, _frame(b"whole") + _frame(b"cut short")[:6], [])
        p.eof_received()
        assert bytes(await p.read_frame()) == b"whole"
        with pytest.raises(asyncio.IncompleteReadError):
            await p.read_frame()
        q = FrameReceiver(1 << 20)
        waiting = asyncio.ensure_future(q.read_frame())
        await asyncio.sleep(0)
        q.connection_lost(ConnectionResetError("reset by peer"))
        with pytest.raises(ConnectionResetError):
            await waiting

    asyncio.run(go())
