"""Who is the bottleneck of perf.sh's produce and consume phases: the broker or the client?

Starts a fresh strom (real disk), then runs the same ``rdkafka_performance`` commands as
``../shared/compat/perf.sh`` (one partition; produce with linger.ms=5 and acks=1, then consume
from the beginning) with ``--count`` records of ``--size`` bytes, and prints for each phase the
rate, the wall time, and the user and system CPU seconds of the client (from the child's rusage)
and of the broker (from /proc). A side at ~100% of a core is the bound; neither near it means
the phase waits on round trips (librdkafka keeps one fetch in flight per broker).

    PYTHONPATH=src python bench/cpu_split.py --size 1024 --count 1000000 --runs 3
    PYTHONPATH=src python bench/cpu_split.py --size 100 --count 10000000

``--tansu`` runs both phases against tansu too (started as perf.sh starts it), in the same run, and
prints for each phase the ratio to tansu and the rate at which the client's busiest thread would
run at 100% of a core, doing the work per byte it did in this run: a bound for this broker as it
is. That work is not the same for every broker: against strom's default page-cache window a
consumer reading old data receives bytes the broker has just read back from the disk into fresh
pages, and its receive copy costs several times more (README, "The page cache").

``--mock`` also runs the produce phase, in the same run, against librdkafka's mock cluster (C, in
memory: ``../shared/compat/mock_broker.py``), and prints its CPU and the client's: what the load
generator itself costs per GB when the broker costs next to nothing. With what the kernel charges
any broker to receive and store a byte (``bench/receive_floor.py``) that bounds what a durable
broker can reach on this machine's cores.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import COMPAT, Variant, compat_home, cpu_split, create_topic, fmt, median, strom_broker


@contextlib.contextmanager
def tansu_broker() -> Iterator[tuple[str, int]]:
    """tansu (Rust, in-memory storage), started as ``../shared/compat/perf.sh`` starts it:
    (bootstrap, pid)."""
    from strom.testing.broker_process import free_port

    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen([str(compat_home() / "bin" / "tansu"), "broker", "--listener-url", url,
                                 "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while True:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"tansu did not start: {log.read()[-2000:]}")
                time.sleep(0.1)
            yield f"127.0.0.1:{port}", proc.pid
        finally:
            proc.terminate()
            proc.wait(10)


@contextlib.contextmanager
def mock_cluster(topic: str) -> Iterator[tuple[str, int]]:
    """librdkafka's mock cluster with a one-partition ``topic``: (bootstrap, pid)."""
    py = str(compat_home() / "venv" / "bin" / "python")
    proc = subprocess.Popen([py, str(COMPAT / "mock_broker.py"), "--topic", f"{topic}:1", "--seconds", "900"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        bootstrap = proc.stdout.readline().strip()
        if not bootstrap:
            raise RuntimeError("the mock cluster did not start")
        yield bootstrap, proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def _thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """{tid: (thread name, utime+stime seconds)} of a running process's threads."""
    out: dict[int, tuple[str, float]] = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
                out[int(tid)] = (name, sum(cpu_split(pid, int(tid))))
    return out


def phase(cmd: list[str], broker_pid: int) -> dict[str, Any]:
    """One client run. The client's threads are sampled every 50 ms while it runs: ``busiest``
    is the CPU share of wall time of its busiest thread (a thread near 100% is the bound, whatever
    the broker does), named in ``busiest_name``."""
    b0, r0, t0 = cpu_split(broker_pid), resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    threads: dict[int, tuple[str, float]] = {}
    with tempfile.TemporaryFile("w+") as log:  # (a pipe not read meanwhile could fill and stall it)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.DEVNULL, text=True)
        while proc.poll() is None:
            threads.update(_thread_cpu(proc.pid))
            time.sleep(0.05)
            if time.monotonic() - t0 > 600:
                proc.kill()
        log.seek(0)
        out = log.read()
    wall, r1, b1 = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN), cpu_split(broker_pid)
    mbs = re.findall(r"([0-9.]+) MB/s", out)
    busiest = max(threads.items(), key=lambda kv: kv[1][1], default=(0, ("-", 0.0)))
    return {
        "mbs": float(mbs[-1]) if mbs else float("nan"), "wall": wall,
        "client_user": r1.ru_utime - r0.ru_utime, "client_sys": r1.ru_stime - r0.ru_stime,
        "broker_user": b1[0] - b0[0], "broker_sys": b1[1] - b0[1],
        "busiest": 100 * busiest[1][1] / wall, "busiest_name": busiest[1][0],
    }


def _commands(perf: str, bootstrap: str, topic: str, a: argparse.Namespace) -> dict[str, list[str]]:
    """perf.sh's produce and consume commands."""
    common = ["-b", bootstrap, "-t", topic, "-p", "0", "-c", str(a.count)]
    return {
        "produce": [perf, "-P", *common, "-s", str(a.size), "-X", "linger.ms=5", "-X", "acks=1"],
        "consume": [perf, "-C", *common, "-o", "beginning"],
    }


def _report(run: int, runs: int, name: str, server: str, r: dict[str, Any]) -> None:
    print(f"[run {run + 1}/{runs}] {name}: {r['mbs']:.1f} MB/s in {r['wall']:.2f} s; "
          f"client {r['client_user']:.2f} user + {r['client_sys']:.2f} sys s, "
          f"{server} {r['broker_user']:.2f} user + {r['broker_sys']:.2f} sys s; "
          f"busiest client thread {r['busiest_name']} {r['busiest']:.0f}% of a core", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--mock", action="store_true", help="also produce to librdkafka's mock cluster")
    ap.add_argument("--tansu", action="store_true", help="also produce to and consume from tansu")
    a = ap.parse_args(argv)
    perf = str(compat_home() / "bin" / "rdkafka_performance")
    results: dict[str, list[dict[str, Any]]] = {"produce": [], "consume": []}
    if a.mock:
        results["mock produce"] = []
    if a.tansu:
        results["tansu produce"], results["tansu consume"] = [], []
    for run in range(a.runs):
        if a.tansu:
            with tansu_broker() as (bootstrap, pid):
                topic = f"split-{uuid.uuid4().hex[:8]}"
                create_topic(bootstrap, topic)
                for name, cmd in _commands(perf, bootstrap, topic, a).items():
                    r = phase(cmd, pid)
                    results[f"tansu {name}"].append(r)
                    _report(run, a.runs, f"tansu {name}", "tansu", r)
        if a.mock:
            topic = f"split-{uuid.uuid4().hex[:8]}"
            with mock_cluster(topic) as (bootstrap, pid):
                r = phase(_commands(perf, bootstrap, topic, a)["produce"], pid)
            results["mock produce"].append(r)
            _report(run, a.runs, "mock produce", "mock", r)
        with strom_broker(Variant("strom")) as b:
            assert b.proc is not None
            topic = f"split-{uuid.uuid4().hex[:8]}"
            create_topic(b.bootstrap, topic)
            for name, cmd in _commands(perf, b.bootstrap, topic, a).items():
                r = phase(cmd, b.proc.pid)
                results[name].append(r)
                _report(run, a.runs, name, "broker", r)
    gb = a.size * a.count / 1e9
    print(f"\n{a.count:,} x {a.size} B ({gb:.2f} GB), medians of {a.runs} run(s)")
    print(f"{'phase':12} {'MB/s':>8} {'client %core':>13} {'broker %core':>13} "
          f"{'broker CPU-s/GB user':>21} {'sys':>6} {'client CPU-s/GB':>16} {'busiest thread %':>17}")
    for name, rs in results.items():
        mbs = median([r["mbs"] for r in rs])
        client = median([100 * (r["client_user"] + r["client_sys"]) / r["wall"] for r in rs])
        broker = median([100 * (r["broker_user"] + r["broker_sys"]) / r["wall"] for r in rs])
        user, sys_ = median([r["broker_user"] / gb for r in rs]), median([r["broker_sys"] / gb for r in rs])
        cgb = median([(r["client_user"] + r["client_sys"]) / gb for r in rs])
        busiest = median([r["busiest"] for r in rs])
        print(f"{name:12} {fmt(mbs, 1):>8} {fmt(client, 0):>13} {fmt(broker, 0):>13} "
              f"{fmt(user, 2):>21} {fmt(sys_, 2):>6} {fmt(cgb, 2):>16} {fmt(busiest, 0):>17}")
    if a.tansu:
        # at 100% of a core, doing the work per byte it did here, the client's busiest thread would
        # move rate * 100 / busiest: however quickly this broker answered, not more
        for name in ("produce", "consume"):
            pairs = list(zip(results[name], results[f"tansu {name}"], strict=True))
            bounds = [r["mbs"] * 100 / r["busiest"] for r, _ in pairs if r["busiest"] > 0]
            ratios = [r["mbs"] * 100 / r["busiest"] / t["mbs"] for r, t in pairs if r["busiest"] > 0]
            now = [r["mbs"] / t["mbs"] for r, t in pairs]
            print(f"{name}: strom {fmt(median(now), 2)}x tansu; with the busiest client thread at 100% "
                  f"{fmt(median(bounds), 1)} MB/s = {fmt(median(ratios), 2)}x tansu "
                  f"(medians of same-run ratios; runs {', '.join(fmt(x, 2) for x in ratios)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
