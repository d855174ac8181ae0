"""Event-loop stalls of a strom broker under load while its logs roll, expire and compact (issue 17).

One real ``strom serve`` (data on disk, a temporary dir) with small segments so that the
background work happens many times a minute, and three loads at once for ``--duration`` s:

* ``rolls``: ``rdkafka_performance -P -r RATE`` (1 KiB records, acks=1) into a topic with
  ``segment.bytes`` = ``--segment-mb`` MiB and ``retention.bytes`` = ``--retention-mb`` MiB: its
  active segment rolls every few seconds and the retention task deletes the oldest segments;
* ``compact``: the same producer with a key (``-k``) at ``--compact-rate`` msg/s into a compacted
  topic (``cleanup.policy=compact``, small segments, ``min.cleanable.dirty.ratio`` 0.01): the
  cleaner compacts and swaps segments all the time;
* ``consume``: ``rdkafka_performance -C`` reading the ``rolls`` topic from the start (fetches).

The broker's own loop-lag monitor (``strom.event.loop.lag.sample.ms``, 10 ms by default) is read
from ``/metrics`` before and after: the figures are the histogram of how late its timer ran during
the run (how long the event loop was blocked), the number of stalls over 5 ms and the largest.
Goal (issue 17): no stall over 5 ms.

    PYTHONPATH=src python bench/loop_lag.py [--duration 60] [--rate 50000] [--runs 1]
        [--override KEY=VALUE ...]      # broker configs, e.g. to compare a change

A machine shared with other work shows its own CPU contention here too (a runnable broker that
waits for a core is "late" as well): run it on an idle machine, and compare runs side by side.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Any

from _common import Variant, compat_home, create_topic, median, strom_broker


def scrape(url: str, name: str = "lag") -> tuple[dict[str, float], float, float]:
    """(cumulative bucket counts by le, sample count, max since start) of
    ``strom_event_loop_<name>_seconds``: ``lag`` (how late the timer ran) or ``busy_lag`` (the part
    of it the loop thread ran, i.e. not waiting for a core)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    sample_re = re.compile(rf'^strom_event_loop_{name}_seconds_bucket\{{le="([^"]+)"\}} ([0-9.e+]+)$', re.M)
    count_m = re.search(rf"^strom_event_loop_{name}_seconds_count ([0-9.e+]+)$", text, re.M)
    max_m = re.search(rf"^strom_event_loop_{name}_max_seconds ([0-9.e+-]+)$", text, re.M)
    buckets = {le: float(n) for le, n in sample_re.findall(text)}
    if not buckets:
        raise SystemExit(f"the broker exposes no strom_event_loop_{name}_seconds "
                         "(strom.event.loop.lag.sample.ms=0?)")
    count = float(count_m.group(1)) if count_m else 0.0
    return buckets, count, float(max_m.group(1)) if max_m else float("nan")


def gc_pauses(url: str) -> dict[str, float]:
    """Collections per generation that took over 5 ms (``strom_gc_pause_seconds``) and the longest."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for g in "012":
        total = re.search(rf'^strom_gc_pause_seconds_count\{{generation="{g}"\}} ([0-9.e+]+)$', text, re.M)
        upto5 = re.search(rf'^strom_gc_pause_seconds_bucket\{{generation="{g}",le="0.005"\}} ([0-9.e+]+)$',
                          text, re.M)
        if total and upto5:
            out[f"gen{g}"] = float(total.group(1))
            out[f"gen{g}_over_5ms"] = float(total.group(1)) - float(upto5.group(1))
    mx = re.search(r"^strom_gc_pause_max_seconds ([0-9.e+-]+)$", text, re.M)
    out["max_s"] = float(mx.group(1)) if mx else float("nan")
    return out


def summarise(before: tuple[dict[str, float], float, float],
              after: tuple[dict[str, float], float, float]) -> dict[str, Any]:
    hist = {le: after[0][le] - before[0].get(le, 0.0) for le in after[0]}
    total = after[1] - before[1]
    prev, top = 0.0, "0"
    for le, n in hist.items():
        if n > prev:
            top = le
        prev = n
    return {"hist": hist, "samples": total, "over_5ms": total - hist.get("0.005", 0.0), "max_s": after[2],
            "top_bucket": top}


def one_run(a: argparse.Namespace, perf: str) -> dict[str, Any]:
    seg = str(a.segment_mb << 20)
    overrides = [f"log.retention.check.interval.ms={a.retention_check_ms}",
                 "log.cleaner.backoff.ms=1000", *a.override]
    with strom_broker(Variant("loop-lag", overrides, dict(x.split("=", 1) for x in a.env))) as b:
        rolls, compact = f"lag-rolls-{uuid.uuid4().hex[:6]}", f"lag-compact-{uuid.uuid4().hex[:6]}"
        create_topic(b.bootstrap, rolls,
                     configs={"segment.bytes": seg, "retention.bytes": str(a.retention_mb << 20)})
        create_topic(b.bootstrap, compact,
                     configs={"cleanup.policy": "compact",
                              "segment.bytes": str(max(1, a.segment_mb // 4) << 20),
                              "min.cleanable.dirty.ratio": "0.01", "segment.ms": "5000"})
        url = b.http_url
        before, busy_before, own_before = scrape(url), scrape(url, "busy_lag"), scrape(url, "own_lag")
        gc_before = gc_pauses(url)
        t0 = time.monotonic()
        nice = ["nice", "-n", str(a.client_nice)] if a.client_nice else []
        procs = [
            subprocess.Popen([*nice, perf, "-P", "-b", b.bootstrap, "-t", rolls, "-p", "0", "-s", "1024",
                              "-r", str(a.rate), "-c", str(a.rate * a.duration), "-X", "linger.ms=5"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            subprocess.Popen([*nice, perf, "-P", "-b", b.bootstrap, "-t", compact, "-p", "0", "-s", "200",
                              "-k", "k", "-r", str(a.compact_rate), "-c", str(a.compact_rate * a.duration)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        ]
        consumer = subprocess.Popen(
            [*nice, perf, "-C", "-b", b.bootstrap, "-t", rolls, "-p", "0", "-o", "beginning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for p in procs:
            p.wait(timeout=a.duration * 3 + 60)
        consumer.terminate()
        consumer.wait(timeout=30)
        wall = time.monotonic() - t0
        after, busy_after, own_after = scrape(url), scrape(url, "busy_lag"), scrape(url, "own_lag")
        gc_after = gc_pauses(url)
        segs = len(list((b.data_dir / f"{rolls}-0").glob("*.log")))
    gcs = {k: gc_after[k] - gc_before.get(k, 0.0) for k in gc_after if k != "max_s"}
    gcs["max_s"] = gc_after["max_s"]
    return {**summarise(before, after), "busy": summarise(busy_before, busy_after),
            "own": summarise(own_before, own_after), "gc": gcs, "wall_s": wall,
            "segments_left": segs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=60, help="seconds of load (default 60)")
    ap.add_argument("--rate", type=int, default=50_000, help="1 KiB msgs/s into the rolling topic (50 MB/s)")
    ap.add_argument("--compact-rate", type=int, default=5_000,
                    help="keyed 200 B msgs/s into the compacted topic")
    ap.add_argument("--segment-mb", type=int, default=64, help="segment.bytes of the rolling topic, MiB")
    ap.add_argument("--retention-mb", type=int, default=256, help="retention.bytes of the rolling topic, MiB")
    ap.add_argument("--retention-check-ms", type=int, default=2000, help="log.retention.check.interval.ms")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--client-nice", type=int, default=0, metavar="N",
                    help="run the load generators under nice -n N (0: as the broker)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="broker environment")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="broker config")
    a = ap.parse_args()
    perf = str(compat_home() / "bin" / "rdkafka_performance")
    results = []
    for i in range(a.runs):
        r = one_run(a, perf)
        results.append(r)
        print(f"[run {i + 1}/{a.runs}] {r['samples']:.0f} samples in {r['wall_s']:.1f} s: "
              f"{r['over_5ms']:.0f} over 5 ms, the largest in the bucket <= {r['top_bucket']} s "
              f"(max since the broker started {1000 * r['max_s']:.1f} ms); of the lag the loop thread "
              f"itself ran: {r['own']['over_5ms']:.0f} to {r['busy']['over_5ms']:.0f} over 5 ms, max "
              f"{1000 * r['own']['max_s']:.1f} to {1000 * r['busy']['max_s']:.1f} ms", flush=True)
        g = r["gc"]
        print("  garbage collections (over 5 ms): " + ", ".join(
            f"gen{i} {g.get(f'gen{i}', 0):.0f} ({g.get(f'gen{i}_over_5ms', 0):.0f})" for i in range(3))
            + f"; the longest since start {1000 * g['max_s']:.1f} ms", flush=True)
    last = results[-1]["hist"]
    print(f"\n== event-loop lag, {a.duration} s at {a.rate} x 1 KiB/s (segment {a.segment_mb} MiB, "
          f"retention {a.retention_mb} MiB) + {a.compact_rate} keyed msgs/s compacted + a consumer; "
          "last run's histogram")
    busy, own = results[-1]["busy"]["hist"], results[-1]["own"]["hist"]
    print(f"  {'<= le':>12}  {'lag':>8}  {'own lag':>8}  {'busy lag':>8}   (own <= the loop running <= busy)")
    prev, prev_o, prev_b = 0.0, 0.0, 0.0
    for le, n in last.items():
        o, b = own.get(le, 0.0), busy.get(le, 0.0)
        print(f"  <= {le:>8} s: {n - prev:8.0f}  {o - prev_o:8.0f}  {b - prev_b:8.0f}")
        prev, prev_o, prev_b = n, o, b
    print(f"median over runs: stalls over 5 ms {median([r['over_5ms'] for r in results]):.0f}, "
          f"max lag {1000 * (median([r['max_s'] for r in results]) or 0):.1f} ms; "
          "the loop running (not waiting for a core): over 5 ms "
          f"{median([r['own']['over_5ms'] for r in results]):.0f} (own) to "
          f"{median([r['busy']['over_5ms'] for r in results]):.0f} (busy), max "
          f"{1000 * (median([r['own']['max_s'] for r in results]) or 0):.1f} to "
          f"{1000 * (median([r['busy']['max_s'] for r in results]) or 0):.1f} ms "
          f"(overrides: {', '.join(a.override) or 'none'})")


if __name__ == "__main__":
    sys.exit(main())
