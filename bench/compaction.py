"""Compaction benchmark: cleaner throughput (MB/s of log cleaned) and produce latency while the
cleaner runs versus while it is idle, printed side by side.

1. In process: a compacted partition log of ``--mb`` MB (``--keys`` distinct keys, 100-record
   batches, uncompressed and lz4) is cleaned once by :class:`strom.log.cleaner.LogCleaner`;
   MB/s = bytes of log read by the cleaner / wall time (offset map + recopy + swap).
2. Real broker (``strom serve``): a compacted topic with ``--mb`` MB of dirty data is written with
   the cleaner disabled. Then, for each phase (cleaner off / cleaner on), the broker is
   restarted and a paced producer (acks=1, linger.ms=0, ``--rate`` msg/s) writes to another topic
   and records per-message latency (send to delivery report). In the "on" phase the cleaner
   starts at once; only messages sent while it was cleaning count (until its "cleaned" log line).

Usage: ``python bench/compaction.py [--mb 64] [--keys 20000] [--rate 500]``
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from strom.clock import RealClock
from strom.config import LogConfig
from strom.log import PartitionLog
from strom.log.cleaner import LogCleaner
from strom.protocol.records import COMPRESSION_LZ4, COMPRESSION_NONE, build_batch

VALUES = [os.urandom(200).hex().encode() for _ in range(997)]  # 400 B, about 2:1 compressible


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


def cleaner_throughput(mb: int, keys: int, codec: int) -> tuple[float, float, int, int]:
    """(MB/s, seconds, records read, records written) of one cleaning."""
    d = Path(tempfile.mkdtemp(prefix="strom-bench-"))
    try:
        cfg = LogConfig(
            cleanup_policy="compact", min_cleanable_dirty_ratio=0.0, segment_bytes=16 * 1024 * 1024
        )
        log = PartitionLog.open(d / "c-0", "c", 0, cfg, RealClock())
        fill_log(log, mb, keys, codec)
        cleaner = LogCleaner(d, RealClock(), pause_every_bytes=0)
        stats = cleaner.clean_once([log])
        assert stats is not None
        log.close()
        return stats.mb_per_s, stats.elapsed_s, stats.records_read, stats.records_written
    finally:
        shutil.rmtree(d, ignore_errors=True)


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


def broker_phase(data: Path, cleaner_on: bool, rate: int, seconds: float) -> tuple[list[float], float]:
    """Latencies (ms) of messages sent in the measured window, and the window's length: a fixed
    window after warm-up with the cleaner off; from the cleaner's "cleaning" to its "cleaned"
    log line with it on (its first round is delayed past the warm-up)."""
    from strom.testing.broker_process import BrokerProcess

    b = BrokerProcess(
        data,
        overrides=[
            "offsets.topic.num.partitions=1",
            "transaction.state.log.num.partitions=1",
            f"log.cleaner.enable={'true' if cleaner_on else 'false'}",
            "log.cleaner.backoff.ms=200",
            "strom.log.cleaner.initial.delay.ms=3000",
        ],
    )
    log_path = b.log_path
    mark = log_path.stat().st_size if log_path.exists() else 0
    b.start()

    def new_log() -> str:
        with open(log_path, "rb") as f:
            f.seek(mark)
            return f.read().decode(errors="replace")

    try:
        stop = threading.Event()
        result: list[list[tuple[float, float]]] = []
        t = threading.Thread(target=lambda: result.append(paced_latencies(b.bootstrap, "lat", rate, stop)))
        t.start()
        time.sleep(2.0)  # warm-up: connections, start-up work
        begin = end = time.perf_counter()
        if cleaner_on:
            deadline = begin + 300
            started = False
            while time.perf_counter() < deadline:
                text = new_log()
                if not started and re.search(r"cleaning dirty-0", text):
                    begin, started = time.perf_counter(), True
                if re.search(r"cleaned dirty-0", text):
                    end = time.perf_counter()
                    break
                time.sleep(0.02)
        else:
            time.sleep(seconds)
            end = time.perf_counter()
        stop.set()
        t.join()
        lats = [lat for sent, lat in result[0] if begin <= sent <= end]
        return lats, end - begin
    finally:
        b.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=128)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--rate", type=int, default=500)
    ap.add_argument("--skip-broker", action="store_true")
    args = ap.parse_args()

    print(f"cleaner throughput ({args.mb} MB log, {args.keys} keys, 100-record batches, 400 B values)")
    for name, codec in (("none", COMPRESSION_NONE), ("lz4", COMPRESSION_LZ4)):
        mbps, secs, rin, rout = cleaner_throughput(args.mb, args.keys, codec)
        print(
            f"  {name:5s} {mbps:7.1f} MB/s  {rin / secs / 1000:7.0f} k records/s  "
            f"({secs:.2f} s, {rin} -> {rout} records)"
        )
    if args.skip_broker:
        return

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from strom.testing.broker_process import BrokerProcess

    root = Path(tempfile.mkdtemp(prefix="strom-bench-"))
    data = root / "data"
    try:
        b = BrokerProcess(
            data,
            overrides=[
                "offsets.topic.num.partitions=1",
                "transaction.state.log.num.partitions=1",
                "log.cleaner.enable=false",
            ],
        )
        b.start()
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
        b.stop()
        print(f"\nproduce latency on a {args.mb} MB dirty compacted partition ({args.rate} msg/s, acks=1)")
        off, off_s = broker_phase(data, False, args.rate, 8.0)
        on, on_s = broker_phase(data, True, args.rate, 8.0)
        print(f"  {'':14s}{'cleaner idle':>14s}{'cleaning':>14s}")
        print(f"  {'messages':14s}{len(off):>14d}{len(on):>14d}")
        print(f"  {'window s':14s}{off_s:>14.1f}{on_s:>14.1f}")
        for name, q in (("p50 ms", 0.5), ("p99 ms", 0.99), ("p99.9 ms", 0.999)):
            print(f"  {name:14s}{percentile(off, q):>14.2f}{percentile(on, q):>14.2f}")
        print(f"  {'max ms':14s}{max(off, default=0):>14.2f}{max(on, default=0):>14.2f}")
        mean_off = statistics.fmean(off) if off else 0.0
        mean_on = statistics.fmean(on) if on else 0.0
        print(f"  {'mean ms':14s}{mean_off:>14.2f}{mean_on:>14.2f}")
        ratio = percentile(on, 0.99) / percentile(off, 0.99) if off and on else float("nan")
        print(f"  p99 cleaning / idle = {ratio:.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
