"""What counting metrics costs the produce path (issue 18: at most 3 % of produce throughput).

Theory of operation: a whole broker in this process (real logs on disk, no sockets) with strom's
client on the in-memory network, so each Produce goes through the real request loop
(``KafkaProtocol``: decoding, dispatch, the per-request metrics), the produce handler (per-topic
bytes and records) and the log append. Two brokers, metrics on (``strom.http.listener`` set: the
counters are kept) and off (empty: no counters), are measured in alternation, ``--rounds`` times
each; CPU time (``time.process_time``, client and broker together, so other load on the machine
moves it little) per produce request of ``--records`` records of ``--size`` bytes, best round of
each. The overhead is (on - off) / off.

    python bench/metrics_overhead.py
    python bench/metrics_overhead.py --records 1 --requests 5000   # small requests: per-request cost
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
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
    args = ap.parse_args()
    best = {True: float("inf"), False: float("inf")}
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.rounds):
            for metrics in (r % 2 == 0, r % 2 != 0):  # alternate which goes first
                us = asyncio.run(_round(Path(d) / f"{r}-{metrics}", metrics, args.requests, args.records,
                                        args.size))
                best[metrics] = min(best[metrics], us)
    on, off = best[True], best[False]
    print(f"produce of {args.records} x {args.size} B, CPU per request (best of {args.rounds}): "
          f"metrics on {on:.1f} us, off {off:.1f} us, overhead {(on - off) / off * 100:+.1f} %")
    added = _accounting_us()
    print(f"the accounting itself (the work metrics add to a one-partition Produce): {added:.2f} us "
          f"= {added / off * 100:.2f} % of a request's CPU with metrics off")


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
