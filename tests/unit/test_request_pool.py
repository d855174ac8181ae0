"""queued.max.request.bytes: the request memory pool (sans-IO), the frame decoder's memory, and
the network driver pausing and resuming connections on it."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from strom.config import BrokerConfig, ConfigError
from strom.protocol.framing import FrameDecoder, RequestMemoryPool
from strom.server.network import KafkaProtocol


def test_pool_small_frames_use_the_whole_limit_large_ones_half() -> None:
    pool = RequestMemoryPool(1600, small_frame=100)
    a, b, c = object(), object(), object()
    pool.charge(799)
    assert pool.may_read(a, 1000)  # below half
    pool.charge(1)
    assert pool.may_read(a, 1000)  # at half: a takes the overdraft
    assert pool.overdraft is a
    assert not pool.may_read(b, 1000)  # one overdraft at a time
    assert pool.may_read(c, 50)  # small frames go on up to the limit
    pool.charge(800)
    assert not pool.may_read(c, 50)
    assert pool.may_read(a, 1000)  # the overdraft holder completes its frame


def test_pool_wakes_waiters_when_memory_is_released() -> None:
    pool = RequestMemoryPool(1000, small_frame=100)
    woken: list[str] = []
    pool.charge(1000)
    for name, size in (("small", 10), ("large1", 500), ("large2", 500)):
        assert not pool.may_read(name, size)
        pool.wait(name, size, lambda name=name: woken.append(name))  # type: ignore[misc]
    pool.release(100)  # 900: small frames, and one large frame on the overdraft
    assert woken == ["small", "large1"] and pool.overdraft == "large1"
    pool.release(450)  # 450: below half, every large frame
    assert woken == ["small", "large1", "large2"]


def test_pool_overdraft_passes_on_when_the_frame_is_done() -> None:
    pool = RequestMemoryPool(1000, small_frame=100)
    woken: list[str] = []
    pool.charge(600)
    assert pool.may_read("a", 500) and pool.overdraft == "a"
    assert not pool.may_read("b", 500)
    pool.wait("b", 500, lambda: woken.append("b"))
    pool.frame_done("a")
    assert woken == ["b"] and pool.overdraft == "b"


def test_unbounded_pool() -> None:
    pool = RequestMemoryPool(-1)
    pool.charge(1 << 40)
    assert not pool.bounded and pool.may_read(object(), 1 << 30)


def test_config_rejects_zero_budget() -> None:
    with pytest.raises(ConfigError):
        BrokerConfig.from_sources(overrides=["queued.max.request.bytes=0"])
    assert BrokerConfig.from_sources(overrides=[])["queued.max.request.bytes"] == 256 << 20


def test_decoder_hands_large_frames_over_without_a_copy() -> None:
    dec = FrameDecoder(1 << 24)
    big = b"x" * (1 << 20)
    data = struct.pack(">i", 3) + b"abc" + struct.pack(">i", len(big)) + big + struct.pack(">i", 2) + b"z"
    frames = []
    for i in range(0, len(data), 4096):
        frames += dec.feed(data[i : i + 4096])
    frames += dec.feed(b"y")
    assert [bytes(f) for f in frames] == [b"abc", big, b"zy"]
    assert dec.buffered == 0 and dec.pending_frame_size == 0
    dec.feed(struct.pack(">i", 500) + b"q")
    assert dec.pending_frame_size == 500 and dec.buffered == 5


class _Transport:
    def __init__(self) -> None:
        self.paused = False
        self.closed = False

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 5555) if name == "peername" else None

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class _Broker:
    def __init__(self, budget: int) -> None:
        self.config = BrokerConfig.from_sources(overrides=[f"queued.max.request.bytes={budget}"])
        self.connections: set[Any] = set()
        self.native_sendfile = False
        self.request_pool = RequestMemoryPool(budget)


def test_connections_pause_on_the_pool_and_resume_when_it_frees() -> None:
    async def scenario() -> None:
        # 16 MiB: frames over 1 MiB are large and stop at 8 MiB in the pool
        broker: Any = _Broker(16 << 20)
        conns = []
        for _ in range(4):
            c = KafkaProtocol(broker)
            t = _Transport()
            c.connection_made(t)  # type: ignore[arg-type]
            conns.append((c, t))
        chunk = b"\x00" * (256 << 10)
        for c, _t in conns:  # each starts a 5 MiB frame and sends 4 MiB of it, as fast as it may
            c.data_received(struct.pack(">i", 5 << 20) + chunk[:-4])
        for _ in range(15):
            for c, t in conns:
                if not t.paused:
                    c.data_received(chunk)
        pool = broker.request_pool
        # three paused at the large-frame mark (plus one read each at most); the fourth holds the
        # overdraft and reads on to complete its frame
        holder = pool.overdraft
        assert holder is not None and holder.charged == 4 << 20
        assert [t.paused for c, t in conns] == [c is not holder for c, _t in conns]
        assert pool.used - holder.charged <= (8 << 20) + 3 * len(chunk)
        # a small request on a new connection is still read
        small = KafkaProtocol(broker)
        st = _Transport()
        small.connection_made(st)  # type: ignore[arg-type]
        assert pool.may_read(small, 100)
        # closing the overdraft holder frees its bytes and lets another connection read on
        held = holder.charged
        holder.close()
        assert pool.used == sum(c.charged for c, _t in conns) + small.charged
        assert held > 0 and holder.charged == 0
        assert sum(not t.paused for c, t in conns if c is not holder) >= 1
        for c, _t in conns:
            c.close()
        small.close()
        assert pool.used == 0

    asyncio.run(scenario())
