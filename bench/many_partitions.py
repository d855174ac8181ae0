"""A broker with many partitions: Metadata and ListOffsets for all of them, memory, descriptors,
and the memory of idle connections.

One real ``strom serve`` per run and path (``registry``: the single-node topic registry,
``strom.metadata.quorum.enable=false``; ``quorum``: the default KRaft metadata quorum of one),
with ``--topics`` topics of ``--partitions`` partitions (default 100 x 100 = 10,000) created over
the wire. Then, over one connection of strom's own client in this process:

* Metadata for all topics: the first answer after the topics were created (``cold``: every
  topic's entry is encoded) and the median of ``--requests`` more (``warm``); wall time from
  sending the (pre-encoded) request to having the whole answer, and the broker's CPU per
  request (/proc, 10 ms ticks: averaged over the requests);
* ListOffsets (latest) for every partition in one request, the same way;
* the broker's RSS and open descriptors: idle after the creation, then after one Produce of one
  100-byte record to every partition (``written``), then with ``--connections`` more idle
  client connections open (each sent ApiVersions, so the broker holds a full session for it):
  RSS per connection.

Prints each run and the medians of ``--runs`` runs.

    PYTHONPATH=src python bench/many_partitions.py [--runs 3] [--topics 100] [--partitions 100]
        [--connections 1000] [--paths registry,quorum]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import cpu_seconds

from strom.client.connection import KafkaConnection
from strom.client.messages import encode_request
from strom.protocol.records import build_batch
from strom.testing.broker_process import BrokerProcess

PRODUCE, LIST_OFFSETS, METADATA, API_VERSIONS, CREATE_TOPICS = 0, 2, 3, 18, 19


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def create_topics(conn: KafkaConnection, names: list[str], partitions: int) -> None:
    for i in range(0, len(names), 10):  # CreateTopics of 10 topics (1,000 partitions) each
        resp = await conn.request(CREATE_TOPICS, {
            "topics": [{"name": n, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                        "configs": []} for n in names[i:i + 10]],
            "timeout": 300_000, "validate_only": False,
        }, timeout=600)
        bad = {t.name: int(t.error_code) for t in resp.topics if int(t.error_code)}
        if bad:
            raise RuntimeError(f"CreateTopics failed: {bad}")


async def timed(port: int, pid: int, key: int, data: dict[str, Any], version: int, n: int
                ) -> tuple[float, list[float], float, int]:
    """(first wall s, the next n walls, broker CPU s per request over those n, answer bytes).

    The request is encoded once, before the clock starts, and sent as bytes on a connection of
    its own (ApiVersions is not needed to send a request of a known version): a wall time is
    the broker's decoding, handling and encoding plus loopback transfer, not this client's."""
    frame, _ = encode_request(key, version, 1, "bench", data)
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 26)

    async def once() -> int:
        writer.write(frame)
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        await reader.readexactly(size)
        return size

    try:
        t0 = time.perf_counter()
        size = await once()
        first = time.perf_counter() - t0
        walls = []
        cpu0 = cpu_seconds(pid)
        for _ in range(n):
            t0 = time.perf_counter()
            await once()
            walls.append(time.perf_counter() - t0)
        return first, walls, (cpu_seconds(pid) - cpu0) / n, size
    finally:
        writer.close()


async def idle_connections(port: int, n: int) -> list[socket.socket]:
    """``n`` connections that each had one ApiVersions v0 answered, then stay idle."""
    socks = []
    req = struct.pack(">hhih", API_VERSIONS, 0, 1, 5) + b"bench"
    frame = struct.pack(">i", len(req)) + req
    loop = asyncio.get_running_loop()
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.setblocking(False)
        await loop.sock_sendall(s, frame)
        size = struct.unpack(">i", await _recv_exactly(loop, s, 4))[0]
        await _recv_exactly(loop, s, size)
        socks.append(s)
    return socks


async def _recv_exactly(loop: asyncio.AbstractEventLoop, s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        got = await loop.sock_recv(s, n - len(buf))
        if not got:
            raise ConnectionError("broker closed the connection")
        buf += got
    return buf


async def scenario(b: BrokerProcess, topics: int, partitions: int, requests: int, connections: int
                   ) -> dict[str, float]:
    pid = b.proc.pid  # type: ignore[union-attr]
    out: dict[str, float] = {"rss start MB": rss_mb(pid)}
    conn = await KafkaConnection.open("127.0.0.1", b.port, request_timeout=600)
    names = [f"mp-{i:04d}" for i in range(topics)]
    t0 = time.perf_counter()
    await create_topics(conn, names, partitions)
    out["create s"] = time.perf_counter() - t0
    await asyncio.sleep(3)
    out["rss idle MB"] = rss_mb(pid)
    out["fds idle"] = open_fds(pid)

    md_v = conn.version(METADATA)
    md = {"topics": None, "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
          "include_topic_authorized_operations": False}
    first, walls, cpu, size = await timed(b.port, pid, METADATA, md, md_v, requests)
    out["metadata cold ms"] = first * 1000
    out["metadata warm ms"] = statistics.median(walls) * 1000
    out["metadata CPU ms"] = cpu * 1000
    out["metadata KB"] = size / 1024

    lo = {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": n, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                                   for p in range(partitions)]} for n in names]}
    lo_v = conn.version(LIST_OFFSETS)
    first, walls, cpu, size = await timed(b.port, pid, LIST_OFFSETS, lo, lo_v, requests)
    out["listoffsets first ms"] = first * 1000
    out["listoffsets ms"] = statistics.median(walls) * 1000
    out["listoffsets CPU ms"] = cpu * 1000

    now = int(time.time() * 1000)
    for n in names:  # one record in every partition, one Produce per topic
        batch = build_batch([(None, b"x" * 100, [], now)])
        data = [{"name": n, "partition_data": [{"index": p, "records": batch} for p in range(partitions)]}]
        resp = await conn.request(PRODUCE, {"transactional_id": None, "acks": 1, "timeout": 30_000,
                                            "topic_data": data}, version=9, timeout=120)
        errors = {int(p.error_code) for t in resp.responses for p in t.partition_responses} - {0}
        if errors:
            raise RuntimeError(f"Produce to {n} failed: {errors}")
    await asyncio.sleep(3)
    out["rss written MB"] = rss_mb(pid)
    out["fds written"] = open_fds(pid)
    await conn.close()

    if connections:
        before = rss_mb(pid)
        socks = await idle_connections(b.port, connections)
        await asyncio.sleep(3)
        out["rss +conns MB"] = rss_mb(pid)
        out["KB per idle conn"] = (out["rss +conns MB"] - before) * 1024 / connections
        for s in socks:
            s.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=100, help="per topic")
    ap.add_argument("--requests", type=int, default=20, help="Metadata and ListOffsets requests per run")
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--paths", default="registry,quorum")
    a = ap.parse_args()
    paths = a.paths.split(",")
    results: dict[str, list[dict[str, float]]] = {p: [] for p in paths}
    for r in range(a.runs):
        for path in paths if r % 2 == 0 else paths[::-1]:
            tmp = Path(tempfile.mkdtemp(prefix="strom-mp-"))
            b = BrokerProcess(tmp / "data", overrides=[
                f"strom.metadata.quorum.enable={'true' if path == 'quorum' else 'false'}"])
            try:
                b.start(timeout=120)
                out = asyncio.run(scenario(b, a.topics, a.partitions, a.requests, a.connections))
            except BaseException:
                print(f"--- broker log tail:\n{b.log()[-3000:]}")
                raise
            finally:
                b.stop(timeout=120)
                shutil.rmtree(tmp, ignore_errors=True)
            results[path].append(out)
            print(f"run {r + 1} {path:8s} " + ", ".join(f"{k} {v:,.1f}" for k, v in out.items()), flush=True)
    print(f"\n== {a.topics} topics x {a.partitions} partitions = {a.topics * a.partitions:,}; "
          f"medians of {a.runs} runs")
    keys = list(results[paths[0]][0])
    print(f"{'':22s}" + "".join(f"{p:>12s}" for p in paths))
    for k in keys:
        print(f"{k:22s}" + "".join(f"{statistics.median(x[k] for x in results[p]):12,.1f}" for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
