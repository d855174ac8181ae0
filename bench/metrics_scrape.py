"""How long a ``/metrics`` scrape takes on a broker with many partitions (issue 18: under 50 ms
with 1,000 partitions). The scrape is rendered on the broker's event loop, so its duration is also
the longest stall it causes there.

Theory of operation: a real ``strom serve`` (BrokerProcess) with ``strom.metrics.partition.enable``
on or off; one topic of ``--partitions`` partitions, a record in each (confluent-kafka) and a
consumer group's committed offset on each, so every per-partition series and the lag have a value;
then ``--scrapes`` sequential GETs of /metrics, timed on the client (connect + render + transfer).

    python bench/metrics_scrape.py                 # 1000 partitions, per-partition on and off
    python bench/metrics_scrape.py --partitions 5000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.broker_process import BrokerProcess


def run(partitions: int, per_partition: bool, scrapes: int) -> tuple[float, float, int, int]:
    with tempfile.TemporaryDirectory() as d:
        b = BrokerProcess(Path(d) / "data", overrides=[
            f"strom.metrics.partition.enable={str(per_partition).lower()}",
            "offsets.topic.num.partitions=1", "group.initial.rebalance.delay.ms=0",
        ])
        with b:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            admin.create_topics([NewTopic("m", partitions, 1)])["m"].result(60)
            p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20})
            for i in range(partitions):
                p.produce("m", b"x" * 100, partition=i)
            p.flush(60)
            c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g"})
            c.commit(offsets=[TopicPartition("m", i, 0) for i in range(partitions)], asynchronous=False)
            c.close()
            times = []
            size = lines = 0
            for _ in range(scrapes):
                t = time.perf_counter()
                with urllib.request.urlopen(b.http_url + "/metrics", timeout=30) as r:
                    body = r.read()
                times.append((time.perf_counter() - t) * 1000)
                size = len(body)
                lines = sum(1 for ln in body.splitlines() if ln and not ln.startswith(b"#"))
            return statistics.median(times), max(times), size, lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--scrapes", type=int, default=20)
    args = ap.parse_args()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average before: {load} ({os.cpu_count()} cores)")
    head = ("partitions", "per-partition", "median ms", "max ms", "bytes", "samples")
    print("{:>10} {:>13} {:>9} {:>7} {:>8} {:>7}".format(*head))
    for per_partition in (True, False):
        med, worst, size, lines = run(args.partitions, per_partition, args.scrapes)
        print(f"{args.partitions:>10} {per_partition!s:>13} {med:9.1f} {worst:7.1f} {size:8d} {lines:7d}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
