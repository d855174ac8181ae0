"""Produce and consume throughput of strom against peers, measured in the same run.

Theory of operation: for every run, record size and strom variant this starts a fresh strom broker
(temporary data dir, real disk) and calls ``../shared/compat/perf.sh BOOTSTRAP SIZE COUNT``. perf.sh
drives librdkafka's C load generator (``rdkafka_performance``) against librdkafka's mock cluster
(produce only), tansu (Rust, in-memory storage) and then strom, one partition, acks=1, linger.ms=5,
and prints MB/s and msgs/s for each. Peers are re-measured in every perf.sh call, so each strom
figure has peer figures taken seconds apart on the same machine; ratios are computed per call and
the table shows medians over ``--runs``. Variants are interleaved (rotated per run) so drift in a
noisy machine hits them alike.

    python bench/throughput.py                       # 100 B and 1 KiB, 3 runs
    python bench/throughput.py --runs 5 --variant default --variant pread:strom.fetch.sendfile=false
    python bench/throughput.py --json > out.json

Acceptance (issue 2): 1 KiB produce and consume >= 0.7x tansu in the same run.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import PERF_SH, Variant, cpu_seconds, fmt, median, parse_env, strom_broker

ACCEPT_RATIO = 0.7
PRODUCE_RE = re.compile(r"^(\w+) produce size=(\d+) count=(\d+): (\d+) msgs/s ([\d.]+|\?) MB/s")
CONSUME_RE = re.compile(r"^(\w+) consume: (\d+)? ?messages, (\d+)? ?msgs/s ([\d.]+|\?) MB/s")


def default_count(size: int) -> int:
    # Enough data that a run lasts about a second or more at ~1 GB/s (mock) and is not all startup.
    return 2_000_000 if size <= 256 else 300_000


def _num(s: str | None) -> float | None:
    try:
        return float(s) if s not in (None, "?") else None
    except ValueError:
        return None


def parse_perf(out: str) -> dict[str, dict[str, float | None]]:
    """perf.sh stdout -> {"mock": {"produce_mbs":..,"produce_msgs":..}, "tansu": {...}, "broker": {...}}."""
    res: dict[str, dict[str, float | None]] = {}
    for line in out.splitlines():
        if m := PRODUCE_RE.match(line):
            d = res.setdefault(m[1], {})
            d["produce_msgs"], d["produce_mbs"] = _num(m[4]), _num(m[5])
        elif m := CONSUME_RE.match(line):
            d = res.setdefault(m[1], {})
            d["consumed"], d["consume_msgs"], d["consume_mbs"] = _num(m[2]), _num(m[3]), _num(m[4])
    return res


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def one_call(variant: Variant, size: int, count: int, verbose: bool) -> dict[str, Any]:
    with strom_broker(variant) as broker:
        pid = broker.proc.pid
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        proc = subprocess.run(["bash", str(PERF_SH), broker.bootstrap, str(size), str(count)],
                              capture_output=True, text=True, timeout=1200)
        cpu1, t1 = cpu_seconds(pid), time.monotonic()
    if verbose:
        sys.stderr.write(proc.stdout)
    figs = parse_perf(proc.stdout)
    if "broker" not in figs:
        raise RuntimeError(f"perf.sh gave no broker figures (rc={proc.returncode}):\n"
                           f"{proc.stdout}\n{proc.stderr[-3000:]}")
    b, t, m = figs["broker"], figs.get("tansu", {}), figs.get("mock", {})
    bconsumed = b.get("consumed")
    return {
        "variant": variant.label, "size": size, "count": count, "figures": figs,
        "broker_cpu_s": round(cpu1 - cpu0, 3), "wall_s": round(t1 - t0, 2),
        "complete": bconsumed is not None and int(bconsumed) >= count,
        "ratios": {
            "produce_vs_tansu": ratio(b.get("produce_mbs"), t.get("produce_mbs")),
            "consume_vs_tansu": ratio(b.get("consume_mbs"), t.get("consume_mbs")),
            "produce_vs_mock": ratio(b.get("produce_mbs"), m.get("produce_mbs")),
        },
        "raw": proc.stdout,
    }


def summarize(samples: list[dict[str, Any]], variants: list[Variant], sizes: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for size in sizes:
        ss = [s for s in samples if s["size"] == size]
        rows: dict[str, Any] = {}
        for peer, phases in (("mock", ("produce",)), ("tansu", ("produce", "consume"))):
            for ph in phases:
                rows[f"{peer} {ph}"] = _row([s["figures"].get(peer, {}) for s in ss], ph)
        per_variant: dict[str, Any] = {}
        for v in variants:
            vs = [s for s in ss if s["variant"] == v.label]
            for ph in ("produce", "consume"):
                rows[f"strom[{v.label}] {ph}"] = _row([s["figures"]["broker"] for s in vs], ph)
            keys = list(vs[0]["ratios"]) if vs else []
            per_variant[v.label] = {
                "ratios_median": {k: median([s["ratios"][k] for s in vs]) for k in keys},
                "ratios_all": {k: [s["ratios"][k] for s in vs] for k in keys},
                "broker_cpu_s_median": median([s["broker_cpu_s"] for s in vs]),
                "broker_cpu_util_median": median([_util(s) for s in vs]),
                "incomplete_runs": sum(not s["complete"] for s in vs),
            }
        out[str(size)] = {"rows": rows, "variants": per_variant}
    return out


def _util(s: dict[str, Any]) -> float | None:
    """Broker CPU seconds over the wall time of its own produce + consume phases (1.0 = one core busy)."""
    b = s["figures"]["broker"]
    if not b.get("produce_msgs") or not b.get("consume_msgs"):
        return None
    return float(s["broker_cpu_s"]) / (s["count"] / b["produce_msgs"] + s["count"] / b["consume_msgs"])


def _row(figs: list[dict[str, float | None]], phase: str) -> dict[str, Any]:
    # 0 or missing means that measurement failed (perf.sh timed out or the peer died): leave it out.
    mbs = [f.get(f"{phase}_mbs") or None for f in figs]
    msgs = [f.get(f"{phase}_msgs") or None for f in figs]
    got = [x for x in mbs if x is not None]
    return {"mbs": median(mbs), "msgs": median(msgs), "mbs_min": min(got) if got else None,
            "mbs_max": max(got) if got else None, "n": len(got)}


def verdict(summary: dict[str, Any], variant: str) -> str:
    s = summary.get("1024")
    if s is None:
        return "verdict: n/a (1 KiB not measured)"
    r = s["variants"][variant]["ratios_median"]
    p, c = r.get("produce_vs_tansu"), r.get("consume_vs_tansu")
    ok = p is not None and c is not None and p >= ACCEPT_RATIO and c >= ACCEPT_RATIO
    return (f"verdict [{variant}]: {'PASS' if ok else 'FAIL'} - 1 KiB produce {fmt(p, 2)}x, "
            f"consume {fmt(c, 2)}x tansu (median of same-run ratios; acceptance >= {ACCEPT_RATIO}x)")


def print_table(summary: dict[str, Any], variants: list[Variant], runs: int) -> None:
    for size, s in summary.items():
        print(f"\n== {size} B records (medians of {runs} run(s); MB/s range min..max)")
        print(f"{'':30} {'MB/s':>10} {'msgs/s':>12}   {'range MB/s':>19}")
        for name, r in s["rows"].items():
            rng = f"{fmt(r['mbs_min'])}..{fmt(r['mbs_max'])}"
            print(f"{name:30} {fmt(r['mbs']):>10} {fmt(r['msgs'], 0):>12}   {rng:>19}")
        for v in variants:
            pv = s["variants"][v.label]
            rm, ra = pv["ratios_median"], pv["ratios_all"]
            print(f"ratios strom[{v.label}] ({v.describe()}):")
            for k, val in rm.items():
                every = ", ".join(fmt(x, 2) for x in ra[k])
                print(f"    {k:18} median {fmt(val, 2):>6}   runs: {every}")
            note = (f"    broker CPU per perf.sh call (median): {fmt(pv['broker_cpu_s_median'], 2)} s, "
                    f"{fmt(100 * (pv['broker_cpu_util_median'] or 0), 0)}% of one core during its phases")
            if pv["incomplete_runs"]:
                note += f"; WARNING {pv['incomplete_runs']} run(s) consumed fewer records than produced"
            print(note)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1024", help="comma-separated record sizes in bytes")
    ap.add_argument("--count", type=int, default=None,
                    help="records per measurement (default 2,000,000 for <=256 B, 300,000 otherwise)")
    ap.add_argument("--runs", type=int, default=3, help="repetitions; the table shows medians (default 3)")
    ap.add_argument("--broker-override", action="append", default=[], metavar="K=V",
                    help="strom --override for every variant (repeatable), e.g. strom.fetch.sendfile=false")
    ap.add_argument("--broker-env", action="append", default=[], metavar="NAME=V",
                    help="environment for every strom broker (repeatable), e.g. STROM_EVENT_LOOP=asyncio")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL[:k=v,env:NAME=v,...]",
                    help="compare several strom configurations in the same run (repeatable)")
    ap.add_argument("--json", metavar="FILE", help="also write JSON to FILE ('-': stdout, no table)")
    ap.add_argument("--summarize", metavar="FILE", help="only re-print the table of a --json FILE")
    ap.add_argument("-v", "--verbose", action="store_true", help="echo perf.sh output to stderr")
    a = ap.parse_args(argv)

    sizes = [int(x) for x in a.sizes.split(",") if x]
    variants = [Variant.parse(v) for v in a.variant] or [Variant("default")]
    genv = parse_env(a.broker_env)
    for v in variants:
        v.overrides = [*a.broker_override, *v.overrides]
        v.env = {**genv, **v.env}

    samples: list[dict[str, Any]] = []
    if a.summarize:
        saved = json.loads(Path(a.summarize).read_text())
        samples, sizes, a.runs = saved["samples"], saved["sizes"], saved["runs"]
        variants = [Variant(**v) for v in saved["variants"]]
    for run in range(0 if a.summarize else a.runs):
        for size in sizes:
            count = a.count or default_count(size)
            k = run % len(variants)
            for v in variants[k:] + variants[:k]:  # rotate the order per run
                s = one_call(v, size, count, a.verbose)
                s["run"] = run
                samples.append(s)
                b, t, r = s["figures"]["broker"], s["figures"].get("tansu", {}), s["ratios"]
                sys.stderr.write(
                    f"[run {run + 1}/{a.runs}] size={size} strom[{v.label}] "
                    f"produce {fmt(b.get('produce_mbs'))} MB/s consume {fmt(b.get('consume_mbs'))} MB/s | "
                    f"tansu {fmt(t.get('produce_mbs'))}/{fmt(t.get('consume_mbs'))} MB/s | "
                    f"ratios p={fmt(r['produce_vs_tansu'], 2)} c={fmt(r['consume_vs_tansu'], 2)}\n")

    summary = summarize(samples, variants, sizes)
    verdicts = [verdict(summary, v.label) for v in variants]
    if a.json:
        dest = sys.stdout if a.json == "-" else open(a.json, "w")  # noqa: SIM115
        json.dump({"command": sys.argv, "sizes": sizes, "runs": a.runs,
                   "variants": [v.__dict__ for v in variants], "summary": summary, "verdicts": verdicts,
                   "samples": samples}, dest, indent=1)
        dest.write("\n")
        if dest is not sys.stdout:
            dest.close()
    if a.json != "-":
        print_table(summary, variants, a.runs)
        print()
        for line in verdicts:
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
