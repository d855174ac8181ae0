"""Start-up time of ``strom serve``, on the metadata quorum and on the registry path.

Each run starts a real ``strom serve`` process and measures the time from spawning it to its
first answered Metadata request (the listener opens at the end of ``Broker.start``, so this is
the whole start-up: Python and imports, the data dir, the quorum or the topic registry, the
logs, the coordinators). Two data dirs per path:

* fresh: an empty dir each run (the quorum path also formats it and writes its first batch:
  the bootstrap records and the internal topics);
* 200 topics: one dir made once per path (200 topics of 1 partition created over the wire,
  then the broker stopped), then restarted ``--runs`` times.

Prints the median (and min/max) of ``--runs`` runs per case.

    PYTHONPATH=src python bench/startup.py [--runs 3] [--topics 200]
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
from strom.testing.broker_process import free_port

SMALL = [  # the internal topics' partition counts small, as in the tests (both paths alike)
    "offsets.topic.num.partitions=2",
    "transaction.state.log.num.partitions=1",
    "share.coordinator.state.topic.num.partitions=1",
]


def _spawn(data: Path, port: int, quorum: bool) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "strom", "serve",
        "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
        "--override", f"log.dirs={data}",
        "--override", f"strom.metadata.quorum.enable={str(quorum).lower()}",
    ]
    for o in SMALL:
        args += ["--override", o]
    log = open(data.parent / f"broker-{port}.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()


async def _first_metadata(port: int, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"strom serve exited with {proc.returncode}")
        try:
            async with Client(f"127.0.0.1:{port}", retries=0, connect_timeout_ms=200) as c:
                await c.metadata()
                return
        except (OSError, Exception):
            await asyncio.sleep(0.01)
    raise RuntimeError("strom serve did not answer Metadata in time")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _start_once(data: Path, quorum: bool) -> tuple[float, int, subprocess.Popen[bytes]]:
    port = free_port()
    t0 = time.monotonic()
    proc = _spawn(data, port, quorum)
    asyncio.run(_first_metadata(port, proc))
    return time.monotonic() - t0, port, proc


async def _create(port: int, n: int) -> None:
    async with Client(f"127.0.0.1:{port}") as c:
        for i in range(0, n, 50):  # CreateTopics requests of 50 topics
            batch = {f"bench-startup-{j}": (1, -1) for j in range(i, min(n, i + 50))}
            errors = await c.create_topics(batch)
            bad = {k: e for k, e in errors.items() if e is not None}
            if bad:
                raise RuntimeError(f"creating topics failed: {bad}")


def _case(quorum: bool, topics: int, runs: int, tmp: Path) -> list[float]:
    times = []
    if topics:
        data = tmp / f"{'quorum' if quorum else 'registry'}-{topics}" / "data"
        data.parent.mkdir(parents=True)
        _, port, proc = _start_once(data, quorum)
        try:
            asyncio.run(_create(port, topics))
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
    ap.add_argument("--topics", type=int, default=200)
    args = ap.parse_args()
    print(f"strom serve start-up (spawn to first Metadata answer), median of {args.runs} runs")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for topics in (0, args.topics):
            for quorum in (False, True):
                times = _case(quorum, topics, args.runs, tmp)
                what = "fresh dir" if not topics else f"{topics} topics"
                path = "quorum  " if quorum else "registry"
                print(
                    f"  {what:12s} {path}  median {statistics.median(times):6.3f}s"
                    f"  (min {min(times):.3f}, max {max(times):.3f})",
                    flush=True,
                )


if __name__ == "__main__":
    main()
