"""Receiving size-prefixed frames: asyncio's StreamReader against strom's FrameReceiver.

One process, a socket pair: a sender task writes ``--frames`` frames of ``--size`` bytes, a
receiver takes them back with ``StreamReader.readexactly`` (what ``KafkaConnection`` did) or with
:class:`strom.client.frame_receiver.FrameReceiver` (what it does). The two alternate for
``--runs`` rounds; printed: wall seconds and CPU seconds (both sides) per GB, medians.

    PYTHONPATH=src python bench/frame_receiver.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import struct
import time

from _common import median

from strom.client.frame_receiver import FrameReceiver


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def _send(sock: socket.socket, payload: bytes, n: int) -> None:
    loop = asyncio.get_running_loop()
    for _ in range(n):
        await loop.sock_sendall(sock, payload)


async def _stream(sock: socket.socket, n: int) -> int:
    reader, writer = await asyncio.open_connection(sock=sock)
    got = 0
    for _ in range(n):
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        got += len(await reader.readexactly(size))
    writer.close()
    return got


async def _frames(sock: socket.socket, n: int, size: int) -> int:
    loop = asyncio.get_running_loop()
    proto = FrameReceiver(size + 4)
    transport, _ = await loop.create_connection(lambda: proto, sock=sock)
    got = 0
    for _ in range(n):
        got += len(await proto.read_frame())
    transport.close()
    return got


async def _round(kind: str, n: int, size: int) -> tuple[float, float]:
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    payload = struct.pack(">i", size) + os.urandom(size)
    c0, t0 = _cpu(), time.perf_counter()
    sender = asyncio.create_task(_send(a, payload, n))
    got = await (_stream(b, n) if kind == "StreamReader" else _frames(b, n, size))
    await sender
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    a.close()
    assert got == n * size
    gb = n * size / 1e9
    return wall / gb, cpu / gb


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    res: dict[str, list[tuple[float, float]]] = {"StreamReader": [], "FrameReceiver": []}
    for run in range(a.runs):
        kinds = list(res) if run % 2 == 0 else list(reversed(res))
        for kind in kinds:
            wall, cpu = asyncio.run(_round(kind, a.frames, a.size))
            res[kind].append((wall, cpu))
            print(f"run {run + 1}/{a.runs} {kind:13} {wall:.2f} s/GB wall, {cpu:.2f} CPU-s/GB", flush=True)
    print(f"\n== medians of {a.runs} runs, {a.frames} frames of {a.size} B")
    for kind, xs in res.items():
        wall, cpu = median([w for w, _ in xs]), median([c for _, c in xs])
        print(f"{kind:13} {wall:.2f} s/GB wall, {cpu:.2f} CPU-s/GB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
