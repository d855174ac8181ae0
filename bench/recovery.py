"""Restart after kill -9 with a lot of data: how long until the broker answers, and how much of
the log it re-read.

One ``strom serve`` (default config: 1 GiB segments, no fsync but at segment rolls) and a topic
of ``--partitions`` partitions into which ``--gb`` GB are produced (1 MiB Produce requests of
64 KiB batches, strom's own client, acks=1). Then, ``--runs`` times each, alternating:

* ``kill -9``: a few more batches to every partition (so the logs are dirty), SIGKILL, start
  again: the time from spawning ``strom serve`` to its first answered ApiVersions, and the
  segments and bytes re-read (the broker's ``loaded N logs`` line);
* ``clean``: SIGTERM (a clean shutdown), start again, the same figures;
* ``no checkpoint`` (``--full``): as kill -9, with every partition's
  ``recovery-point-offset-checkpoint`` deleted before the start, so every segment is re-read:
  what recovery would cost without the recovery point.

The data dir is deleted at the end. Prints each restart and the medians.

    PYTHONPATH=src python bench/recovery.py [--gb 5] [--partitions 4] [--runs 3] [--full]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from strom.client.connection import KafkaConnection
from strom.protocol.records import build_batch
from strom.testing.broker_process import BrokerProcess

TOPIC = "recovery-bench"
BATCH = build_batch([(None, b"v" * 1000, [], 1_700_000_000_000 + i) for i in range(64)])  # ~64 KiB


async def _produce(port: int, partitions: int, nbytes: int) -> None:
    conn = await KafkaConnection.open("127.0.0.1", port, request_timeout=120)
    per_request = max(1, (1 << 20) // len(BATCH))  # ~1 MiB per Produce request
    sent = 0
    p = 0
    pending: list[asyncio.Future[object]] = []
    try:
        while sent < nbytes:
            data = [{"name": TOPIC, "partition_data": [
                {"index": (p + k) % partitions, "records": BATCH} for k in range(per_request)]}]
            p += per_request
            pending.append(asyncio.ensure_future(conn.request(0, {
                "transactional_id": None, "acks": 1, "timeout": 60_000, "topic_data": data}, version=9)))
            sent += per_request * len(BATCH)
            if len(pending) >= 8:  # a few requests in flight
                await pending.pop(0)
        for f in pending:
            await f
    finally:
        await conn.close()


async def _create(port: int, partitions: int) -> None:
    conn = await KafkaConnection.open("127.0.0.1", port, request_timeout=120)
    try:
        topic = {"name": TOPIC, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                 "configs": []}
        resp = await conn.request(19, {"topics": [topic], "timeout": 60_000, "validate_only": False})
        assert int(resp.topics[0].error_code) == 0, resp
    finally:
        await conn.close()


async def _first_api_versions(b: BrokerProcess, t0: float, timeout: float = 600.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if b.proc is not None and b.proc.poll() is not None:
            raise RuntimeError(f"strom serve exited:\n{b.log()}")
        try:
            conn = await KafkaConnection.open("127.0.0.1", b.port, connect_timeout=0.2)
        except (OSError, Exception):
            await asyncio.sleep(0.01)
            continue
        elapsed = time.monotonic() - t0  # open() negotiated with ApiVersions
        await conn.close()
        return elapsed
    raise RuntimeError("no answer in time")


LOADED = re.compile(r"loaded (\d+) logs in (\d+) ms; (\d+) recovered after an unclean shutdown: "
                    r"(\d+) segment\(s\), (\d+) bytes re-read")


def _restart(b: BrokerProcess) -> tuple[float, int, int, int]:
    """Start ``b`` (its previous log kept apart): (seconds to the first ApiVersions answer, ms the
    logs took to load, segments re-read, bytes re-read)."""
    before = b.log_path.stat().st_size if b.log_path.exists() else 0
    t0 = time.monotonic()
    b.start(timeout=600)  # returns once the listener accepts; ApiVersions answered right after
    elapsed = asyncio.run(_first_api_versions(b, t0))
    with open(b.log_path, "rb") as f:
        f.seek(before)
        text = f.read().decode(errors="replace")
    m = [x for x in LOADED.finditer(text)][-1]
    return elapsed, int(m[2]), int(m[4]), int(m[5])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=5.0)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="also restart without the recovery point")
    ap.add_argument("--dir", default=None, help="where the data dir goes (default: a temp dir)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="strom-recovery-", dir=a.dir))
    b = BrokerProcess(tmp / "data", overrides=["offsets.topic.num.partitions=1"])
    results: dict[str, list[tuple[float, int, int, int]]] = {"kill -9": [], "clean": [], "no checkpoint": []}
    try:
        b.start(timeout=120)
        asyncio.run(_create(b.port, a.partitions))
        t0 = time.monotonic()
        asyncio.run(_produce(b.port, a.partitions, int(a.gb * 1e9)))
        wrote = sum(p.stat().st_size for p in (tmp / "data").glob(f"{TOPIC}-*/*.log"))
        print(f"wrote {wrote / 1e9:.2f} GB into {a.partitions} partitions in {time.monotonic() - t0:.1f} s",
              flush=True)
        modes = ["kill -9", "clean"] + (["no checkpoint"] if a.full else [])
        for r in range(a.runs):
            for mode in modes if r % 2 == 0 else modes[::-1]:
                asyncio.run(_produce(b.port, a.partitions, 4 * len(BATCH) * a.partitions))  # dirty logs
                if mode == "clean":
                    b.stop(timeout=600)
                else:
                    assert b.proc is not None
                    b.proc.send_signal(signal.SIGKILL)
                    b.proc.wait()
                    if mode == "no checkpoint":
                        for cp in (tmp / "data").glob(f"{TOPIC}-*/recovery-point-offset-checkpoint"):
                            cp.unlink()
                out = _restart(b)
                results[mode].append(out)
                print(f"run {r + 1} {mode:14s} first ApiVersions {out[0]:6.2f} s, logs loaded in "
                      f"{out[1] / 1000:6.2f} s, {out[2]} segment(s) / {out[3] / 1e6:,.1f} MB re-read",
                      flush=True)
    finally:
        b.stop(timeout=600)
        subprocess.run(["sync"], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n== {wrote / 1e9:.2f} GB in {a.partitions} partitions; medians of {a.runs}")
    for mode, rows in results.items():
        if rows:
            print(f"{mode:14s} first ApiVersions {statistics.median(x[0] for x in rows):6.2f} s, "
                  f"logs loaded in {statistics.median(x[1] for x in rows) / 1000:6.2f} s, "
                  f"{statistics.median(x[3] for x in rows) / 1e6:,.1f} MB re-read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
