"""Compaction benchmark: cleaner throughput (MB/s of log cleaned) and produce latency while the
cleaner runs versus while it is idle, measured in the same broker run and printed side by side.

1. In process: a compacted partition log of ``--mb`` MB (``--keys`` distinct keys, 100-record
   batches, uncompressed and lz4) is written once per codec and cleaned, from a fresh copy each
   time, by :class:`strom.log.cleaner.LogCleaner` in each mode: in the calling thread (unpaced,
   and with the broker's GIL pauses), in a worker process, and in a worker process throttled by
   ``log.cleaner.io.max.bytes.per.second`` (``--throttle-mb``). MB/s = bytes of log read by the
   cleaner / wall time (offset map + recopy + swap); median of ``--rounds``.
2. Real broker (``strom serve``): a compacted topic with ``--mb`` MB of dirty data is written once
   with the cleaner disabled and kept as a pristine copy. Each run starts a broker on a fresh copy
   of it while a paced producer (acks=1, linger.ms=0, ``--rate`` msg/s) writes to another topic
   and records per-message latency (send to delivery report). The cleaner's first round is
   delayed: messages sent after a warm-up and before its "cleaning" log line are the *idle*
   sample, those sent between "cleaning" and "cleaned" the *cleaning* sample — the same broker
   process, page cache and machine load for both. Variants (broker configs, or the code of
   another git revision with ``--baseline-rev``) are interleaved round by round, in rotating
   order, so a concurrent load on the machine hits them alike; the table shows medians over
   ``--rounds`` of each run's percentiles.

Usage: ``python bench/compaction.py [--mb 128] [--keys 20000] [--rate 500] [--rounds 3]
[--variants before,thread,process,process-throttled] [--baseline-rev HEAD]``
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from strom.clock import RealClock
from strom.config import LogConfig
from strom.log import PartitionLog
from strom.log.cleaner import NO_THROTTLE, LogCleaner
from strom.protocol.records import COMPRESSION_LZ4, COMPRESSION_NONE, build_batch

VALUES = [os.urandom(200).hex().encode() for _ in range(997)]  # 400 B, about 2:1 compressible
REPO = Path(__file__).resolve().parent.parent


def fill_log(log: PartitionLog, mb: int, keys: int, codec: int) -> int:
    now = int(time.time() * 1000)
    i = 0
    while log.size_bytes < mb * 1_000_000:
        recs = [(b"key-%d" % ((i + j) % keys), VALUES[(i + j) % 997], [], now) for j in range(100)]
        log.append_as_leader(build_batch(recs, compression=codec), leader_epoch=0)  # type: ignore[arg-type]
        i += 100
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    return i


LOG_CFG = LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.0, segment_bytes=16 * 1024 * 1024)

# in-process modes: name -> LogCleaner keyword arguments
MODES: dict[str, dict[str, object]] = {
    "thread, unpaced": {"pause_every_bytes": 0},
    "thread, GIL pauses": {},
    "process": {"use_process": True},
    "process, throttled": {"use_process": True},
}


def cleaner_throughput(src: Path, mode: dict[str, object], throttle: float) -> tuple[float, float, int, int]:
    """(MB/s, seconds, records read, records written) of one cleaning of a copy of ``src``."""
    d = Path(tempfile.mkdtemp(prefix="strom-bench-"))
    try:
        shutil.copytree(src, d / "c-0")
        os.sync()
        log = PartitionLog.open(d / "c-0", "c", 0, LOG_CFG, RealClock())
        cleaner = LogCleaner(d, RealClock(), io_max_bytes_per_second=throttle, **mode)  # type: ignore[arg-type]
        try:
            stats = cleaner.clean_once([log])
        finally:
            cleaner.close()
        assert stats is not None
        log.close()
        return stats.mb_per_s, stats.elapsed_s, stats.records_read, stats.records_written
    finally:
        shutil.rmtree(d, ignore_errors=True)


def throughput_section(args: argparse.Namespace) -> None:
    print(
        f"cleaner throughput ({args.mb} MB log, {args.keys} keys, 100-record batches, 400 B values; "
        f"median of {args.rounds}; throttled = {args.throttle_mb} MB/s read+written)"
    )
    for name, codec in (("none", COMPRESSION_NONE), ("lz4", COMPRESSION_LZ4)):
        root = Path(tempfile.mkdtemp(prefix="strom-bench-src-"))
        try:
            log = PartitionLog.open(root / "c-0", "c", 0, LOG_CFG, RealClock())
            fill_log(log, args.mb, args.keys, codec)
            log.close()
            results: dict[str, list[tuple[float, float, int, int]]] = {m: [] for m in MODES}
            for r in range(args.rounds):
                order = list(MODES)
                order = order[r % len(order) :] + order[: r % len(order)]
                for mode in order:
                    throttle = args.throttle_mb * 1e6 if "throttled" in mode else NO_THROTTLE
                    if "throttled" in mode and r > 0:
                        continue  # one throttled run is enough: its rate is the throttle's
                    results[mode].append(cleaner_throughput(root / "c-0", MODES[mode], throttle))
            for mode, res in results.items():
                mbps = statistics.median(x[0] for x in res)
                secs = statistics.median(x[1] for x in res)
                rin, rout = res[0][2], res[0][3]
                print(
                    f"  {name:5s} {mode:20s} {mbps:7.1f} MB/s  {rin / secs / 1000:7.0f} k records/s  "
                    f"({secs:.2f} s, {rin} -> {rout} records)"
                )
        finally:
            shutil.rmtree(root, ignore_errors=True)


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def paced_latencies(
    bootstrap: str, topic: str, rate: int, stop: threading.Event
) -> list[tuple[float, float]]:
    """(send time, latency ms) of every message, sending ``rate`` msg/s until ``stop``."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
    out: list[tuple[float, float]] = []

    def cb(sent: float) -> object:
        return lambda err, _m: (
            out.append((sent, (time.perf_counter() - sent) * 1000)) if err is None else None
        )

    interval = 1.0 / rate
    nxt = time.perf_counter()
    while not stop.is_set():
        now = time.perf_counter()
        if now >= nxt:
            p.produce(topic, value=b"x" * 200, partition=0, on_delivery=cb(now))  # type: ignore[arg-type]
            nxt += interval
        p.poll(min(0.0005, max(0.0, nxt - time.perf_counter())))
    p.flush(10)
    return out


class RunResult:
    def __init__(
        self,
        idle: list[float],
        cleaning: list[float],
        clean_s: float,
        mbps: float,
        outliers: list[tuple[float, float]],
    ) -> None:
        self.idle = idle
        self.cleaning = cleaning
        self.clean_s = clean_s
        self.mbps = mbps
        self.outliers = outliers  # (s after the cleaning began, ms) of the slowest cleaning sends


def broker_run(
    pristine: Path, work: Path, overrides: list[str], env: dict[str, str], rate: int, idle_s: float
) -> RunResult:
    """One broker on a fresh copy of ``pristine``: idle sample, then the cleaning sample."""
    from strom.testing.broker_process import BrokerProcess

    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(pristine, work / "data")
    os.sync()  # no writeback of the copy during the measurement
    warmup = 2.0
    b = BrokerProcess(
        work / "data",
        overrides=[
            "offsets.topic.num.partitions=1",
            "transaction.state.log.num.partitions=1",
            "log.cleaner.enable=true",
            "log.cleaner.backoff.ms=200",
            f"strom.log.cleaner.initial.delay.ms={int((warmup + idle_s) * 1000) + 1000}",
            *overrides,
        ],
        env=env,
    )
    b.start()
    log_path = b.log_path

    def text() -> str:
        return log_path.read_text(errors="replace") if log_path.exists() else ""

    try:
        stop = threading.Event()
        result: list[list[tuple[float, float]]] = []
        t = threading.Thread(target=lambda: result.append(paced_latencies(b.bootstrap, "lat", rate, stop)))
        t.start()
        time.sleep(warmup)  # connections, metadata, start-up work
        idle_begin = time.perf_counter()
        begin = end = 0.0
        deadline = idle_begin + idle_s + 600
        while time.perf_counter() < deadline:
            s = text()
            if not begin and "cleaning dirty-0" in s:
                begin = time.perf_counter()
            if begin and "cleaned dirty-0" in s:
                end = time.perf_counter()
                break
            time.sleep(0.01)
        stop.set()
        t.join()
        m = re.search(r"cleaned dirty-0 .*?\(([\d.]+) MB/s\)", text())
        sent = result[0]
        idle = [lat for ts, lat in sent if idle_begin <= ts < begin]
        cleaning = [lat for ts, lat in sent if begin <= ts <= end]
        slow = sorted(((lat, ts - begin) for ts, lat in sent if begin <= ts <= end), reverse=True)[:8]
        outliers = sorted((round(t, 3), round(lat, 1)) for lat, t in slow)
        return RunResult(idle, cleaning, end - begin, float(m.group(1)) if m else float("nan"), outliers)
    finally:
        b.stop()


def make_pristine(root: Path, args: argparse.Namespace) -> Path:
    """A data dir with a ``--mb`` MB dirty compacted partition ``dirty-0`` and a topic ``lat``."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from strom.testing.broker_process import BrokerProcess

    data = root / "pristine"
    b = BrokerProcess(
        data,
        overrides=[
            "offsets.topic.num.partitions=1",
            "transaction.state.log.num.partitions=1",
            "log.cleaner.enable=false",
        ],
    )
    b.start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        fs = admin.create_topics(
            [
                NewTopic(
                    "dirty",
                    1,
                    1,
                    config={
                        "cleanup.policy": "compact",
                        "segment.bytes": str(16 << 20),
                        "min.cleanable.dirty.ratio": "0.01",
                    },
                ),
                NewTopic("lat", 1, 1),
            ]
        )
        for f in fs.values():
            f.result(10)
        p = Producer(
            {
                "bootstrap.servers": b.bootstrap,
                "linger.ms": 20,
                "batch.size": 1 << 20,
                "compression.type": "lz4",
            }
        )
        total = 0
        i = 0
        while total < args.mb * 1_000_000:
            try:
                p.produce("dirty", key=b"key-%d" % (i % args.keys), value=VALUES[i % 997], partition=0)
            except BufferError:
                p.poll(0.01)
                continue
            i += 1
            total += 210  # lz4 halves the hex values
            if i % 10000 == 0:
                p.poll(0)
        p.flush(60)
    finally:
        b.stop()
    return data


def baseline_env(root: Path, rev: str) -> dict[str, str]:
    """PYTHONPATH pointing at ``src`` of git revision ``rev`` (the package is installed editable
    through a .pth path entry, which PYTHONPATH precedes)."""
    dest = root / "baseline"
    dest.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return {"PYTHONPATH": str(dest / "src")}


def latency_section(args: argparse.Namespace) -> None:
    throttle = f"log.cleaner.io.max.bytes.per.second={args.throttle_mb * 1e6:.0f}"
    defs: dict[str, list[str]] = {
        "before": [],  # --baseline-rev's code with its defaults
        "thread": ["strom.log.cleaner.process=false"],
        "thread-throttled": ["strom.log.cleaner.process=false", throttle],
        "process": ["strom.log.cleaner.process=true"],
        "process-nice0": ["strom.log.cleaner.process=true", "strom.log.cleaner.process.nice=0"],
        "process-throttled": ["strom.log.cleaner.process=true", throttle],
        "process-nopacing": ["strom.log.cleaner.process=true", "strom.log.cleaner.writeback.pacing=false"],
    }
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in defs:
            raise SystemExit(f"unknown variant {v!r}; known: {', '.join(defs)}")
    root = Path(tempfile.mkdtemp(prefix="strom-bench-"))
    try:
        envs: dict[str, dict[str, str]] = {v: {} for v in variants}
        if "before" in variants:
            envs["before"] = baseline_env(root, args.baseline_rev)
        pristine = make_pristine(root, args)
        dirty_mb = sum(f.stat().st_size for f in (pristine / "dirty-0").glob("*.log")) / 1e6
        print(
            f"\nproduce latency (ms) on a broker cleaning a {dirty_mb:.0f} MB dirty compacted partition "
            f"({args.rate} msg/s, acks=1, linger.ms=0); idle and cleaning samples from the same run"
        )
        runs: dict[str, list[RunResult]] = {v: [] for v in variants}
        for r in range(args.rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            for v in order:
                res = broker_run(pristine, root / "run", defs[v], envs[v], args.rate, args.idle_s)
                runs[v].append(res)
                print(
                    f"  round {r + 1} {v:18s} idle p50/p99/max {percentile(res.idle, 0.5):5.2f} "
                    f"{percentile(res.idle, 0.99):6.2f} {max(res.idle, default=0):6.1f} | cleaning "
                    f"{percentile(res.cleaning, 0.5):5.2f} {percentile(res.cleaning, 0.99):6.2f} "
                    f"{max(res.cleaning, default=0):6.1f} | {res.clean_s:5.1f} s {res.mbps:6.1f} MB/s "
                    f"(n={len(res.idle)}/{len(res.cleaning)})",
                    flush=True,
                )
                if args.verbose:
                    print(f"    slowest while cleaning (s after start, ms): {res.outliers}")

        def med(v: str, f: Callable[[RunResult], float]) -> float:
            return float(statistics.median(f(x) for x in runs[v]))

        print(f"\n  medians over {args.rounds} rounds")
        cols = "".join(f"{v:>19s}" for v in variants)
        print(f"  {'':22s}{cols}")
        rows: list[tuple[str, Callable[[RunResult], float]]] = [
            ("idle p50", lambda x: percentile(x.idle, 0.5)),
            ("idle p99", lambda x: percentile(x.idle, 0.99)),
            ("idle max", lambda x: max(x.idle, default=0.0)),
            ("cleaning p50", lambda x: percentile(x.cleaning, 0.5)),
            ("cleaning p99", lambda x: percentile(x.cleaning, 0.99)),
            ("cleaning p99.9", lambda x: percentile(x.cleaning, 0.999)),
            ("cleaning max", lambda x: max(x.cleaning, default=0.0)),
            ("p99 cleaning/idle", lambda x: percentile(x.cleaning, 0.99) / percentile(x.idle, 0.99)),
            ("cleaning s", lambda x: x.clean_s),
            ("cleaner MB/s", lambda x: x.mbps),
        ]
        for name, f in rows:
            print(f"  {name:22s}" + "".join(f"{med(v, f):>19.2f}" for v in variants))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=128)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--rate", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--idle-s", type=float, default=5.0, help="length of the idle sample of each run")
    ap.add_argument("--throttle-mb", type=float, default=32.0, help="MB/s for the throttled variants")
    ap.add_argument("--variants", default="thread,process,process-throttled")
    ap.add_argument("--baseline-rev", default="HEAD", help="git revision the 'before' variant runs")
    ap.add_argument("--verbose", action="store_true", help="print the slowest sends of each run")
    ap.add_argument("--skip-broker", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args()
    if not args.skip_throughput:
        throughput_section(args)
    if not args.skip_broker:
        latency_section(args)


if __name__ == "__main__":
    main()
