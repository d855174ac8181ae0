"""Who is the bottleneck of perf.sh's produce and consume phases: the broker or the client?

Starts a fresh strom (real disk), then runs the same ``rdkafka_performance`` commands as
``../shared/compat/perf.sh`` (one partition; produce with linger.ms=5 and acks=1, then consume
from the beginning) with ``--count`` records of ``--size`` bytes, and prints for each phase the
rate, the wall time, and the user and system CPU seconds of the client (from the child's rusage)
and of the broker (from /proc). A side at ~100% of a core is the bound; neither near it means
the phase waits on round trips (librdkafka keeps one fetch in flight per broker).

    PYTHONPATH=src python bench/cpu_split.py --size 1024 --count 1000000 --runs 3
    PYTHONPATH=src python bench/cpu_split.py --size 100 --count 10000000
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import time
import uuid

from _common import Variant, compat_home, cpu_split, create_topic, fmt, median, strom_broker


def phase(cmd: list[str], broker_pid: int) -> dict[str, float]:
    b0, r0, t0 = cpu_split(broker_pid), resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
    wall, r1, b1 = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN), cpu_split(broker_pid)
    mbs = re.findall(r"([0-9.]+) MB/s", out)
    return {
        "mbs": float(mbs[-1]) if mbs else float("nan"), "wall": wall,
        "client_user": r1.ru_utime - r0.ru_utime, "client_sys": r1.ru_stime - r0.ru_stime,
        "broker_user": b1[0] - b0[0], "broker_sys": b1[1] - b0[1],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=1)
    a = ap.parse_args(argv)
    perf = str(compat_home() / "bin" / "rdkafka_performance")
    results: dict[str, list[dict[str, float]]] = {"produce": [], "consume": []}
    for run in range(a.runs):
        with strom_broker(Variant("strom")) as b:
            assert b.proc is not None
            topic = f"split-{uuid.uuid4().hex[:8]}"
            create_topic(b.bootstrap, topic)
            common = ["-b", b.bootstrap, "-t", topic, "-p", "0", "-c", str(a.count)]
            cmds = {
                "produce": [perf, "-P", *common, "-s", str(a.size), "-X", "linger.ms=5", "-X", "acks=1"],
                "consume": [perf, "-C", *common, "-o", "beginning"],
            }
            for name, cmd in cmds.items():
                r = phase(cmd, b.proc.pid)
                results[name].append(r)
                print(f"[run {run + 1}/{a.runs}] {name}: {r['mbs']:.1f} MB/s in {r['wall']:.2f} s; "
                      f"client {r['client_user']:.2f} user + {r['client_sys']:.2f} sys s, "
                      f"broker {r['broker_user']:.2f} user + {r['broker_sys']:.2f} sys s", flush=True)
    gb = a.size * a.count / 1e9
    print(f"\n{a.count:,} x {a.size} B ({gb:.2f} GB), medians of {a.runs} run(s)")
    print(f"{'phase':8} {'MB/s':>8} {'client %core':>13} {'broker %core':>13} "
          f"{'broker CPU-s/GB user':>21} {'sys':>6}")
    for name, rs in results.items():
        mbs = median([r["mbs"] for r in rs])
        client = median([100 * (r["client_user"] + r["client_sys"]) / r["wall"] for r in rs])
        broker = median([100 * (r["broker_user"] + r["broker_sys"]) / r["wall"] for r in rs])
        user, sys_ = median([r["broker_user"] / gb for r in rs]), median([r["broker_sys"] / gb for r in rs])
        print(f"{name:8} {fmt(mbs, 1):>8} {fmt(client, 0):>13} {fmt(broker, 0):>13} "
              f"{fmt(user, 2):>21} {fmt(sys_, 2):>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
