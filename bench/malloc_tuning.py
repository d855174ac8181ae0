"""The broker's C allocator thresholds (``strom.server.malloc_tuning``) on and off, side by side.

Two fresh single-node brokers, one with ``STROM_MALLOC_TUNING=0`` (glibc's defaults), measured
alternately with ``rdkafka_performance -P`` (``--count`` records of ``--size`` bytes, one
partition, acks=1, linger.ms=5) on a fresh topic each time; before each measurement
``--prewarm-mb`` MB are written and deleted beside the data dirs (see ``bench/replication.py``).
Prints MB/s and broker CPU-seconds per GB per run and their medians.

    PYTHONPATH=src python bench/malloc_tuning.py --runs 6
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import Variant, compat_home, cpu_seconds, median, strom_broker
from replication import Target, new_topic, perf_produce, prewarm


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--count", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--prewarm-mb", type=int, default=1000)
    a = ap.parse_args()
    perf = compat_home() / "bin" / "rdkafka_performance"
    variants = [Variant("glibc-defaults", env={"STROM_MALLOC_TUNING": "0"}), Variant("tuned")]
    res: dict[str, list[tuple[float, float]]] = {v.label: [] for v in variants}
    gb = a.count * a.size / 1e9
    scratch = Path(tempfile.gettempdir())
    with strom_broker(variants[0]) as b0, strom_broker(variants[1]) as b1:
        brokers = {variants[0].label: b0, variants[1].label: b1}
        for run in range(a.runs):
            order = list(brokers.items()) if run % 2 == 0 else list(reversed(brokers.items()))
            for label, b in order:
                t = Target(label, b.bootstrap, lambda b=b: {"broker": b.proc.pid}, 1, "1")
                topic = new_topic("malloc")
                t.create(topic, 1)
                prewarm(scratch, a.prewarm_mb)
                c0 = cpu_seconds(b.proc.pid)
                r = perf_produce(perf, b.bootstrap, topic, a.size, a.count, "1")
                cpu = (cpu_seconds(b.proc.pid) - c0) / gb
                t.delete(topic)
                res[label].append((r["mbs"], cpu))
                print(f"run {run + 1}/{a.runs} {label:15} {r['mbs']:8.1f} MB/s {cpu:5.2f} CPU-s/GB",
                      flush=True)
    print(f"\n== medians of {a.runs} runs ({a.count} x {a.size} B, acks=1, one partition)")
    base = median([m for m, _ in res["glibc-defaults"]]) or 1.0
    for label, xs in res.items():
        mbs = median([m for m, _ in xs]) or 0.0
        print(f"{label:15} {mbs:8.1f} MB/s ({mbs / base:.2f}x) {median([c for _, c in xs]):5.2f} CPU-s/GB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
