"""What counting metrics costs the produce path (issue 18: at most 3 % of produce throughput).

Theory of operation: a whole broker in this process (real logs on disk, no sockets) with strom's
client on the in-memory network, so each Produce goes through the real request loop
(``KafkaProtocol``: decoding, dispatch, the per-request metrics), the produce handler (per-topic
bytes and records) and the log append. Two brokers, metrics on (``strom.http.listener`` set: the
counters are kept) and off (empty: no counters), are measured in alternation, ``--rounds`` times
each; CPU time (``time.process_time``, client and broker together, so other load on the machine
moves it little) per produce request of ``--records`` records of ``--size`` bytes; the median and
the best round of each. The overhead is (on - off) / off.

``--socket``: produce throughput over real sockets instead: two ``strom serve`` processes side by
side, metrics on (the HTTP listener, scraped once a second during the round as Prometheus would)
and off (``strom.http.listener=`` empty), and confluent-kafka's producer sending ``--messages``
records of ``--size`` bytes to each in alternation, ``--rounds`` times; records/s per round, the
median of each. Wall-clock figures: the machine's load moves them, so the load average is printed.

    python bench/metrics_overhead.py
    python bench/metrics_overhead.py --records 1 --requests 5000   # small requests: per-request cost
    python bench/metrics_overhead.py --socket --rounds 7             # throughput, real broker processes
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from strom.config import BrokerConfig
from strom.observability.metrics import BrokerMetrics
from strom.server.broker import Broker
from strom.testing.network import MemoryNetwork


async def _round(data: Path, metrics: bool, requests: int, records: int, size: int) -> float:
    config = BrokerConfig.from_sources(None, {
        "log.dirs": str(data), "listeners": "PLAINTEXT://127.0.0.1:19092",
        "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "strom.http.listener": "http://127.0.0.1:0" if metrics else "",
    })
    broker = Broker(config)
    await broker.start(listen=False)
    assert (broker.metrics is not None) == metrics
    net = MemoryNetwork(broker)
    client = net.client()
    try:
        await client.create_topics({"t": (1, 1)})
        batch = [(None, b"x" * size, [], -1)] * records
        for _ in range(50):  # warm-up
            await client.produce("t", 0, batch)
        start = time.process_time()
        for _ in range(requests):
            await client.produce("t", 0, batch)
        return (time.process_time() - start) / requests * 1e6
    finally:
        await client.close()
        net.close()
        await broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--records", type=int, default=100)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--socket", action="store_true", help="throughput of real broker processes")
    ap.add_argument("--messages", type=int, default=200_000, help="with --socket: records a round")
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    if args.socket:
        _socket(args)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    runs: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.rounds):
            for metrics in (r % 2 == 0, r % 2 != 0):  # alternate which goes first
                us = asyncio.run(_round(Path(d) / f"{r}-{metrics}", metrics, args.requests, args.records,
                                        args.size))
                runs[metrics].append(us)
    for what, pick in (("median", statistics.median), ("best", min)):
        on, off = pick(runs[True]), pick(runs[False])
        print(f"produce of {args.records} x {args.size} B, CPU per request ({what} of {args.rounds}): "
              f"metrics on {on:.1f} us, off {off:.1f} us, overhead {(on - off) / off * 100:+.1f} %")
    off = statistics.median(runs[False])
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    added = _accounting_us()
    print(f"the accounting itself (the work metrics add to a one-partition Produce): {added:.2f} us "
          f"= {added / off * 100:.2f} % of a request's CPU with metrics off")


def _socket(args: argparse.Namespace) -> None:
    from confluent_kafka import Producer

    from strom.testing.broker_process import BrokerProcess

    with tempfile.TemporaryDirectory() as d:
        on = BrokerProcess(Path(d) / "on" / "data").start()
        off = BrokerProcess(Path(d) / "off" / "data", overrides=["strom.http.listener="]).start()
        try:
            brokers = {True: on, False: off}
            rates: dict[bool, list[float]] = {True: [], False: []}
            value = b"x" * args.size
            for r in range(args.rounds):
                for metrics in (r % 2 == 0, r % 2 != 0):
                    b = brokers[metrics]
                    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.size": 1 << 20,
                                  "queue.buffering.max.messages": 1_000_000, "acks": 1})
                    for _ in range(2000):  # warm-up (and the topic's creation)
                        p.produce("bench", value)
                    p.flush(60)
                    stop = threading.Event()
                    scraper = threading.Thread(target=_scrape, args=(b.http_url if metrics else None, stop))
                    scraper.start()
                    start = time.perf_counter()
                    for _ in range(args.messages):
                        while True:
                            try:
                                p.produce("bench", value)
                                break
                            except BufferError:
                                p.poll(0.01)
                    assert p.flush(120) == 0
                    rates[metrics].append(args.messages / (time.perf_counter() - start))
                    del p
                    stop.set()
                    scraper.join()
            m_on, m_off = statistics.median(rates[True]), statistics.median(rates[False])
            print(f"produce {args.messages} x {args.size} B over sockets (confluent-kafka, acks=1), "
                  f"median of {args.rounds}: metrics on {m_on:,.0f} rec/s, off {m_off:,.0f} rec/s, "
                  f"cost {(m_off - m_on) / m_off * 100:+.1f} %")
            print("  rounds on: " + " ".join(f"{x:,.0f}" for x in rates[True]))
            print("  rounds off: " + " ".join(f"{x:,.0f}" for x in rates[False]))
        finally:
            on.stop()
            off.stop()


def _scrape(url: str | None, stop: threading.Event) -> None:
    while url is not None and not stop.wait(1.0):
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            r.read()


def _accounting_us(n: int = 200_000) -> float:
    """CPU of exactly what metrics add to a one-partition Produce: two clock reads and the
    request's counters and histogram (network.py), the topic's bytes and records (produce.py)."""
    m = BrokerMetrics()
    perf = time.perf_counter
    start = time.process_time()
    for _ in range(n):
        t = perf()
        m.bytes_in["t"] += 10_000
        m.records_in["t"] += 100
        m.request_done("Produce", 9, "Produce", perf() - t, None)
    return (time.process_time() - start) / n * 1e6


if __name__ == "__main__":
    main()
