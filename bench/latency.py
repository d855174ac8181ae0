"""End-to-end latency at a fixed produce rate, strom and tansu side by side in the same run.

Theory of operation: librdkafka's C load generator ``rdkafka_performance`` has a latency mode
(``-l``): the consumer reads ``LATENCY:<wall-clock µs>`` at the head of each payload, computes
``now - payload timestamp`` on receipt and, with ``-A FILE``, writes one value per message (µs).
The default producer is ``_paced_producer.py``: confluent-kafka (librdkafka, C) in its own
process, absolute schedule, same payload format, plus its per-message ack latency (produce() ->
delivery report). At 1000-10000 msg/s Python spends a few µs per message and sleeps the rest; what
is measured is the broker, the two librdkafka clients and loopback. ``--producer c`` uses
``rdkafka_performance -P -l -r RATE`` instead (its ``-r`` works since the compat build declares
``strtod``): C end to end, but it paces by polling until the next send is due, relative to the
previous one, so above ~1,000 msg/s it spins a whole core of the two, and it reports no ack times.

Per run this starts a fresh strom broker (disk, temporary data dir) and a fresh tansu (memory), then
for every rate x acks point and every target: create a one-partition topic, start the consumer
(``-o beginning``, librdkafka defaults: fetch.wait.max.ms=500, fetch.min.bytes=1, i.e. the broker's
long-poll wake-up is measured too), wait ``--settle`` seconds, run the producer at RATE for
``--duration`` seconds (linger.ms=0 unless ``--linger-ms``), then collect. The first ``--warmup``
seconds of messages are discarded. Targets are rotated per run. The summary shows, per point, the
median over runs of each run's percentiles.

    python bench/latency.py                        # 1000 and 10000 msg/s, 1 KiB, acks=1 and all, 3 runs
    python bench/latency.py --rates 1000 --size 100 --runs 5 --json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from _common import Variant, compat_home, create_topic, fmt, median, parse_env, percentile, strom_broker

PCTS = (50.0, 99.0, 99.9)
PRODUCER = Path(__file__).resolve().parent / "_paced_producer.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port} after {timeout}s")


class Tansu:
    """tansu (Rust, in-memory storage) from the compat cache, on a free loopback port."""

    def __init__(self, binary: Path, log_path: Path) -> None:
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        url = f"tcp://{self.bootstrap}"
        self.log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        cmd = [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
               "--storage-engine", "memory://tansu/"]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        wait_port(self.port, self.proc)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def read_latencies(path: Path) -> list[int]:
    try:
        return [int(x) for x in path.read_text().split() if x.isdigit()]
    except OSError:
        return []


def stats(values_us: list[int], skip: int) -> dict[str, Any]:
    xs = sorted(values_us[skip:])
    d: dict[str, Any] = {"n": len(xs)}
    for q in PCTS:
        d[f"p{q:g}"] = percentile(xs, q) / 1000.0 if xs else None
    d["max"] = xs[-1] / 1000.0 if xs else None
    d["mean"] = sum(xs) / len(xs) / 1000.0 if xs else None
    return d


def run_producer(cmd: list[str], timeout: float, out_path: Path) -> dict[str, Any]:
    """Run the paced producer; return its JSON summary (empty dict if it gave none)."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out_path.write_text(p.stdout + p.stderr)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            summary: dict[str, Any] = json.loads(line)
            summary["rc"] = p.returncode
            return summary
    return {"rc": p.returncode, "error": p.stderr[-2000:]}


def run_c_producer(cmd: list[str], timeout: float, out_path: Path) -> dict[str, Any]:
    """Run ``rdkafka_performance -P -l -r RATE``; its rate from its own summary line, its CPU from
    rusage. It paces by polling until the next send is due, so above ~1,000 msg/s it spins a core
    (relative pacing: a late send delays the ones after it, and the rate got may fall short)."""
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall, r1 = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    out_path.write_text(p.stdout + p.stderr)
    rates = re.findall(r"(\d+) msgs/s", p.stdout)
    return {"rc": p.returncode, "achieved_rate": float(rates[-1]) if rates else None, "send_wall_s": wall,
            "cpu_s": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)}


def stop_consumer(c: subprocess.Popen[bytes], grace: float) -> None:
    try:
        c.wait(grace)
        return
    except subprocess.TimeoutExpired:
        pass
    c.send_signal(signal.SIGINT)  # rdkafka_performance stops cleanly and closes its -A file
    try:
        c.wait(5)
    except subprocess.TimeoutExpired:
        c.kill()
        c.wait()


def _flags(flag: str, values: list[str]) -> list[str]:
    return [x for v in values for x in (flag, v)]


def measure_point(perf: Path, work: Path, target: str, bootstrap: str, rate: int, acks: str, size: int,
                  a: argparse.Namespace) -> dict[str, Any]:
    count = int(rate * a.duration)
    topic = f"lat-{target}-{rate}-{acks}-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    topic = re.sub(r"[^A-Za-z0-9._-]", "_", topic)
    create_topic(bootstrap, topic)
    base = work / topic
    cfile, pfile = base.with_suffix(".consumer.lat"), base.with_suffix(".producer.lat")
    ccmd = [str(perf), "-C", "-l", "-A", str(cfile), "-b", bootstrap, "-t", topic, "-p", "0",
            "-o", "beginning", "-c", str(count), *_flags("-X", a.consumer_conf)]
    pconf = ["-X", f"acks={'-1' if acks == 'all' else acks}", "-X", f"linger.ms={a.linger_ms:g}",
             *_flags("-X", a.producer_conf)]
    if a.producer == "c":  # rdkafka_performance's own latency mode (-l) paced with -r (no ack times)
        pcmd = [str(perf), "-P", "-l", "-r", str(rate), "-c", str(count), "-s", str(size),
                "-b", bootstrap, "-t", topic, "-p", "0", *pconf]
    else:
        pcmd = [sys.executable, str(PRODUCER), bootstrap, topic, str(rate), str(count), str(size),
                "--ack-file", str(pfile), *pconf]
    with open(base.with_suffix(".consumer.out"), "wb") as cout:
        cons = subprocess.Popen(ccmd, stdout=cout, stderr=subprocess.STDOUT)
        try:
            time.sleep(a.settle)
            run = run_c_producer if a.producer == "c" else run_producer
            prod = run(pcmd, a.duration * 4 + 90, base.with_suffix(".producer.out"))
            stop_consumer(cons, a.drain)
        finally:
            if cons.poll() is None:
                cons.kill()
                cons.wait()
    skip = int(rate * a.warmup)
    e2e, ack = read_latencies(cfile), read_latencies(pfile)
    return {
        "target": target, "rate": rate, "acks": acks, "size": size, "count": count, "topic": topic,
        "received": len(e2e), "acked": len(ack), "producer": prod,
        "achieved_rate": prod.get("achieved_rate"),
        "producer_cpu_pct": 100 * prod["cpu_s"] / prod["send_wall_s"] if prod.get("send_wall_s") else None,
        "e2e_ms": stats(e2e, skip), "ack_ms": stats(ack, skip),
        "commands": {"consumer": " ".join(ccmd), "producer": " ".join(pcmd)},
    }


def summarize(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    keys = sorted({(s["size"], s["rate"], s["acks"], s["target"]) for s in samples},
                  key=lambda k: (k[0], k[1], k[2], k[3] != "tansu", k[3]))
    for size, rate, acks, target in keys:
        key = (size, rate, acks, target)
        ss = [s for s in samples if (s["size"], s["rate"], s["acks"], s["target"]) == key]
        row: dict[str, Any] = {"size": size, "rate": rate, "acks": acks, "target": target, "runs": len(ss)}
        for kind in ("e2e_ms", "ack_ms"):
            for stat in (*(f"p{q:g}" for q in PCTS), "max"):
                row[f"{kind}_{stat}"] = median([s[kind][stat] for s in ss])
        row["achieved_rate"] = median([s["achieved_rate"] for s in ss])
        row["producer_cpu_pct"] = median([s["producer_cpu_pct"] for s in ss])
        row["lost"] = sum(s["count"] - s["received"] for s in ss)
        rows.append(row)
    return rows


def print_table(rows: list[dict[str, Any]], runs: int) -> None:
    print(f"\nEnd-to-end latency (ms; produce send -> consumer receipt), medians of {runs} run(s)")
    hdr = (f"{'size':>5} {'rate':>6} {'acks':>4} {'target':24} "
           f"{'e2e p50':>8} {'p99':>8} {'p99.9':>8} {'max':>8}"
           f" | {'ack p50':>8} {'p99':>8} {'p99.9':>8} | {'rate got':>9} {'prodCPU%':>8} {'lost':>5}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r['size']:>5} {r['rate']:>6} {r['acks']:>4} {r['target']:24} "
              f"{fmt(r['e2e_ms_p50'], 2):>8} {fmt(r['e2e_ms_p99'], 2):>8} {fmt(r['e2e_ms_p99.9'], 2):>8} "
              f"{fmt(r['e2e_ms_max'], 1):>8} | {fmt(r['ack_ms_p50'], 2):>8} {fmt(r['ack_ms_p99'], 2):>8} "
              f"{fmt(r['ack_ms_p99.9'], 2):>8} | {fmt(r['achieved_rate'], 0):>9} "
              f"{fmt(r['producer_cpu_pct'], 0):>8} "
              f"{r['lost']:>5}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="1000,10000", help="comma-separated produce rates, msgs/s")
    ap.add_argument("--size", type=int, default=1024, help="record size in bytes (default 1024)")
    ap.add_argument("--acks", default="1,all", help="comma-separated acks settings: 0, 1, all")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of producing per point")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of messages discarded at the start")
    ap.add_argument("--settle", type=float, default=1.5, help="seconds between consumer and producer start")
    ap.add_argument("--drain", type=float, default=10.0, help="max seconds to wait for the consumer")
    ap.add_argument("--runs", type=int, default=3, help="repetitions; medians are reported (default 3)")
    ap.add_argument("--linger-ms", type=float, default=0, help="producer linger.ms (default 0)")
    ap.add_argument("--targets", default="tansu,strom", help="comma-separated: tansu, strom")
    ap.add_argument("--broker-override", action="append", default=[], metavar="K=V",
                    help="strom --override (repeatable)")
    ap.add_argument("--broker-env", action="append", default=[], metavar="NAME=V",
                    help="environment for strom (repeatable)")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL[:k=v,env:NAME=v,...]",
                    help="several strom configurations in the same run (repeatable)")
    ap.add_argument("--producer", choices=("python", "c"), default="python",
                    help="python: _paced_producer.py (confluent-kafka, absolute schedule, ack latency); "
                         "c: rdkafka_performance -P -l -r (spins a core above ~1,000 msg/s)")
    ap.add_argument("--producer-conf", action="append", default=[], metavar="prop=val",
                    help="extra librdkafka producer property")
    ap.add_argument("--consumer-conf", action="append", default=[], metavar="prop=val",
                    help="extra librdkafka consumer property, e.g. fetch.wait.max.ms=100")
    ap.add_argument("--keep", action="store_true", help="keep the per-message latency files (path printed)")
    ap.add_argument("--json", metavar="FILE", help="also write JSON to FILE ('-': stdout, no table)")
    a = ap.parse_args(argv)

    rates = [int(x) for x in a.rates.split(",") if x]
    acks_list = [x.strip() for x in a.acks.split(",") if x.strip()]
    targets = [x.strip() for x in a.targets.split(",") if x.strip()]
    variants = [Variant.parse(v) for v in a.variant] or [Variant("default")]
    genv = parse_env(a.broker_env)
    for v in variants:
        v.overrides = [*a.broker_override, *v.overrides]
        v.env = {**genv, **v.env}

    home = compat_home()
    perf, tansu_bin = home / "bin" / "rdkafka_performance", home / "bin" / "tansu"
    work = Path(tempfile.mkdtemp(prefix="strom-latency-"))
    samples: list[dict[str, Any]] = []
    for run in range(a.runs):
        with ExitStack() as stack:
            servers: list[tuple[str, str]] = []
            if "tansu" in targets:
                t = Tansu(tansu_bin, work / f"tansu-{run}.log")
                stack.callback(t.stop)
                servers.append(("tansu", t.bootstrap))
            if "strom" in targets:
                for v in variants:
                    b = stack.enter_context(strom_broker(v))
                    servers.append(("strom" if len(variants) == 1 else f"strom[{v.label}]", b.bootstrap))
            for rate in rates:
                for acks in acks_list:
                    k = run % len(servers)
                    for name, bs in servers[k:] + servers[:k]:
                        s = measure_point(perf, work, name, bs, rate, acks, a.size, a)
                        s["run"] = run
                        samples.append(s)
                        e = s["e2e_ms"]
                        sys.stderr.write(
                            f"[run {run + 1}/{a.runs}] {name:16} rate={rate} acks={acks}: e2e p50 "
                            f"{fmt(e['p50'], 2)} p99 {fmt(e['p99'], 2)} p99.9 {fmt(e['p99.9'], 2)} ms; "
                            f"received {s['received']}/{s['count']}, rate {fmt(s['achieved_rate'], 0)}/s, "
                            f"producer CPU {fmt(s['producer_cpu_pct'], 0)}%\n")
    rows = summarize(samples)
    if a.json:
        dest = sys.stdout if a.json == "-" else open(a.json, "w")  # noqa: SIM115
        json.dump({"command": sys.argv, "size": a.size, "rates": rates, "acks": acks_list, "runs": a.runs,
                   "duration_s": a.duration, "warmup_s": a.warmup, "linger_ms": a.linger_ms,
                   "variants": [v.__dict__ for v in variants], "summary": rows, "samples": samples},
                  dest, indent=1)
        dest.write("\n")
        if dest is not sys.stdout:
            dest.close()
    if a.json != "-":
        print_table(rows, a.runs)
        if samples:
            c = samples[-1]["commands"]
            print(f"\nper point, e.g.:\n  consumer: {c['consumer']}\n  producer: {c['producer']}")
    if a.keep:
        print(f"latency files kept in {work}", file=sys.stderr)
    else:
        for f in work.iterdir():
            f.unlink()
        work.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
