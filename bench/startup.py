"""Start-up time of ``strom serve``, on the metadata quorum and on the registry path.

Each run starts a real ``strom serve`` process and measures the time from spawning it to its
first answered ApiVersions and Metadata requests (the listener opens at the end of
``Broker.start``, so this is the whole start-up: Python and imports, the data dir, the quorum or
the topic registry, the logs, the coordinators). Data dirs per path:

* fresh: an empty dir each run (the quorum path also formats it and writes its first batch:
  the bootstrap records and the internal topics);
* 200 topics: one dir made once per path (``--topics`` topics of 1 partition created over the
  wire, then the broker stopped cleanly), then restarted ``--runs`` times;
* 1,000 partitions: the same with ``--big-topics`` topics of 100 partitions.

Prints the median (and min/max) of ``--runs`` runs per case.

    PYTHONPATH=src python bench/startup.py [--runs 3] [--topics 200] [--big-topics 10]

Seen on the 2-core dev machine, idle (medians of 3): fresh dir 0.51 s registry, 0.66 s quorum;
200 topics 0.55 s registry, 0.66 s quorum (the quorum's extra: its modules' imports, the metadata
log's replay, and waiting for the commits of the first batch, the registration and the unfencing).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from strom.client.client import Client
from strom.client.connection import KafkaConnection
from strom.testing.broker_process import free_port

SMALL = [  # the internal topics' partition counts small, as in the tests (both paths alike)
    "offsets.topic.num.partitions=2",
    "transaction.state.log.num.partitions=1",
    "share.coordinator.state.topic.num.partitions=1",
]


EXTRA: list[str] = []  # --override


def _spawn(data: Path, port: int, quorum: bool) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "strom", "serve",
        "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
        "--override", f"log.dirs={data}",
        "--override", f"strom.metadata.quorum.enable={str(quorum).lower()}",
    ]
    for o in [*SMALL, *EXTRA]:
        args += ["--override", o]
    log = open(data.parent / f"broker-{port}.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()


async def _first_answers(port: int, proc: subprocess.Popen[bytes], t0: float, timeout: float = 120.0
                         ) -> tuple[float, float]:
    """Seconds from ``t0`` to the first answered ApiVersions (the connection's negotiation) and
    to the first answered Metadata."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"strom serve exited with {proc.returncode}")
        try:
            conn = await KafkaConnection.open("127.0.0.1", port, connect_timeout=0.2)
        except (OSError, Exception):
            await asyncio.sleep(0.01)
            continue
        try:
            api_versions = time.monotonic() - t0  # open() negotiates with ApiVersions
            await conn.request(3, {"topics": [], "allow_auto_topic_creation": False,
                                   "include_cluster_authorized_operations": False,
                                   "include_topic_authorized_operations": False})
            return api_versions, time.monotonic() - t0
        finally:
            await conn.close()
    raise RuntimeError("strom serve did not answer in time")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _start_once(data: Path, quorum: bool) -> tuple[tuple[float, float], int, subprocess.Popen[bytes]]:
    port = free_port()
    t0 = time.monotonic()
    proc = _spawn(data, port, quorum)
    return asyncio.run(_first_answers(port, proc, t0)), port, proc


async def _create(port: int, n: int, partitions: int) -> None:
    async with Client(f"127.0.0.1:{port}", request_timeout_ms=300_000) as c:
        step = max(1, 50 // partitions)
        for i in range(0, n, step):  # CreateTopics requests of up to 50 topics
            batch = {f"bench-startup-{j}": (partitions, -1) for j in range(i, min(n, i + step))}
            errors = await c.create_topics(batch)
            bad = {k: e for k, e in errors.items() if e is not None}
            if bad:
                raise RuntimeError(f"creating topics failed: {bad}")


def _case(quorum: bool, topics: int, partitions: int, runs: int, tmp: Path) -> list[tuple[float, float]]:
    times = []
    if topics:
        data = tmp / f"{'quorum' if quorum else 'registry'}-{topics}x{partitions}" / "data"
        data.parent.mkdir(parents=True)
        _, port, proc = _start_once(data, quorum)
        try:
            asyncio.run(_create(port, topics, partitions))
        finally:
            _stop(proc)
    for i in range(runs):
        if not topics:
            data = tmp / f"{'quorum' if quorum else 'registry'}-fresh-{i}" / "data"
            data.parent.mkdir(parents=True)
        elapsed, _, proc = _start_once(data, quorum)
        _stop(proc)
        times.append(elapsed)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--topics", type=int, default=200, help="topics of 1 partition")
    ap.add_argument("--big-topics", type=int, default=10, help="topics of 100 partitions")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="broker config, e.g. strom.protocol.preload.schemas=false")
    args = ap.parse_args()
    EXTRA.extend(args.override)
    print(f"strom serve start-up (spawn to first answered ApiVersions / Metadata), "
          f"median of {args.runs} runs")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for topics, partitions in ((0, 1), (args.topics, 1), (args.big_topics, 100)):
            for quorum in (False, True):
                times = _case(quorum, topics, partitions, args.runs, tmp)
                what = "fresh dir" if not topics else f"{topics * partitions:,} partitions"
                path = "quorum  " if quorum else "registry"
                av = [a for a, _m in times]
                md = [m for _a, m in times]
                print(
                    f"  {what:16s} {path}  ApiVersions median {statistics.median(av):6.3f}s"
                    f" (min {min(av):.3f}, max {max(av):.3f}), Metadata {statistics.median(md):6.3f}s",
                    flush=True,
                )


if __name__ == "__main__":
    main()
