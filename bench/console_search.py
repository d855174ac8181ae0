"""How fast the web console's message search scans, and whether the broker serving it stays
responsive meanwhile (issue 18: server-side search with a scan cap and progress).

Theory of operation: a real ``strom serve`` (BrokerProcess) with the console on its HTTP listener
(``strom.http.console.enable``); one partition of ``--records`` records of 100 B (confluent-kafka);
then a search that matches nothing (so it reads every record), oldest first, with the scan cap
above the record count, started on ``/console/topics/T/messages`` and polled as the page does
(``/console/topics/T/search/ID?fragment=1`` every 0.5 s) until its answer comes. Meanwhile a thread
times ``/healthz`` on the same listener every 50 ms: the search runs on the broker's event loop and
yields it every 500 records, so the worst ``/healthz`` time is the longest stall it causes there.

    python bench/console_search.py                    # 200,000 records
    python bench/console_search.py --records 1000000
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from confluent_kafka import Producer

from strom.testing.broker_process import BrokerProcess


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as r:
        return str(r.read().decode())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory() as d:
        b = BrokerProcess(Path(d) / "data", overrides=["strom.http.console.enable=true"])
        with b:
            p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
            for i in range(args.records):
                p.produce("scan", b"v" * 100, key=f"key-{i}".encode(), partition=0)
                if i % 10_000 == 0:
                    p.poll(0)
            assert p.flush(60) == 0
            stalls: list[float] = []
            running = threading.Event()
            running.set()

            def probe() -> None:
                while running.is_set():
                    t = time.perf_counter()
                    get(b.http_url + "/healthz")
                    stalls.append(time.perf_counter() - t)
                    time.sleep(0.05)

            idle = []
            for _ in range(40):  # the same probe with nothing else going on
                t = time.perf_counter()
                get(b.http_url + "/healthz")
                idle.append(time.perf_counter() - t)
                time.sleep(0.05)
            base = b.http_url + "/console/topics/scan"
            # the console's scan cap is 10,000 by default: a search goes on with "continue" links;
            # here the whole partition is searched in rounds of the cap, as a user clicking on would
            t0 = time.perf_counter()
            prober = threading.Thread(target=probe, daemon=True)
            prober.start()
            query, rounds, scanned = "q=no-such-thing&order=oldest", 0, 0
            while query:
                body = get(f"{base}/messages?{query}")
                job = re.search(r'hx-get="([^"]+)"', body)
                while job is not None and 'id="search-progress"' in body:
                    time.sleep(0.5)
                    body = get(b.http_url + job.group(1).replace("&amp;", "&"))
                rounds += 1
                scanned += int(body.split(" scanned")[0].rsplit(" ", 1)[1])
                more = re.search(r'id="continue" href="[^"?]*\?([^"]+)"', body)
                query = more.group(1).replace("&amp;", "&") if more else ""
            took = time.perf_counter() - t0
            running.clear()
            prober.join()
    assert scanned == args.records, scanned
    print(f"searched {scanned:,} records of 100 B in {rounds} rounds of the 10,000 cap: {took:.2f} s, "
          f"{scanned / took:,.0f} records/s")
    print(f"/healthz on the same listener meanwhile ({len(stalls)} probes): median "
          f"{statistics.median(stalls) * 1000:.1f} ms, max {max(stalls) * 1000:.1f} ms")
    print(f"/healthz idle, before ({len(idle)} probes): median {statistics.median(idle) * 1000:.1f} ms, "
          f"max {max(idle) * 1000:.1f} ms")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
