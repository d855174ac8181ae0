"""Interactive-query key-lookup latency: p50/p99 at a fixed request rate against 2 state-server
instances (strom.streams.serve), keys the asked instance owns (answered directly) and keys the
other owns (forwarded) mixed in the same run.

    PYTHONPATH=src python bench/streams_iq.py [--rate 1000] [--seconds 20] [--keys 10000]

Starts a broker (temp dir), a 6-partition compacted table topic with ``--keys`` JSON records
(murmur2-partitioned), two server instances, waits until the group is stable and both have
restored, then sends GETs /tables/t/keys/{k} to instance A on an absolute schedule
t0 + i/rate from ``--workers`` threads with keep-alive connections. Latency is measured from the
*scheduled* send time (a late send counts its wait: no coordinated omission). Every answer is
checked against the produced value. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.client.partitioner import partition_for_key
from strom.testing.broker_process import BrokerProcess, free_port

SRC = str(Path(__file__).resolve().parent.parent / "src")
PARTS = 6


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def get_json(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except OSError:
        return 0, None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--workers", type=int, default=16)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="strom-bench-iq-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", overrides=["group.initial.rebalance.delay.ms=0"]).start()
        procs: list[subprocess.Popen[bytes]] = []
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            topic = NewTopic("iqb", PARTS, 1, config={"cleanup.policy": "compact"})
            for f in admin.create_topics([topic]).values():
                f.result(30)
            p = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random",
                          "linger.ms": 10})
            ref = {}
            for i in range(args.keys):
                k = f"key-{i:06d}"
                ref[k] = {"id": i, "payload": "x" * 64}
                p.produce("iqb", key=k.encode(), value=json.dumps(ref[k]).encode())
                p.poll(0)
            p.flush(60)
            servers = []
            for _ in range(2):
                port = free_port()
                servers.append(f"127.0.0.1:{port}")
                log = open(Path(tmp) / f"iq-{port}.log", "wb")  # noqa: SIM115 - handed to the child
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "strom.streams.serve", "--bootstrap-server", broker.bootstrap,
                     "--application-id", "iq-bench", "--application-server", servers[-1],
                     "--table", "t=iqb:json", "--session-timeout-ms", "6000"],
                    stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": SRC}))
            a = servers[0]
            # owner of each partition, once the group is stable and both instances restored
            deadline = time.monotonic() + 120
            owner: dict[int, str] = {}
            probe = {partition_for_key(k.encode(), PARTS): k for k in ref}
            while time.monotonic() < deadline:
                owner = {}
                for part, k in probe.items():
                    st, body = get_json(f"http://{a}/metadata/t/{k}")
                    if st == 200:
                        owner[part] = body["active_host"]
                ok = len(owner) == PARTS and set(owner.values()) == set(servers)
                ok = ok and all(get_json(f"http://{a}/tables/t/keys/{k}")[0] == 200 for k in probe.values())
                if ok:
                    break
                time.sleep(0.5)
            else:
                raise SystemExit("group never became stable with both instances restored")
            direct = [k for k in ref if owner[partition_for_key(k.encode(), PARTS)] == a]
            forwarded = [k for k in ref if owner[partition_for_key(k.encode(), PARTS)] != a]
            total = int(args.rate * args.seconds)
            rng = random.Random(1)
            plan = [(kind, rng.choice(direct if kind == "direct" else forwarded))
                    for kind in (rng.choice(("direct", "forwarded")) for _ in range(total))]
            lat: dict[str, list[float]] = {"direct": [], "forwarded": []}
            errors: list[str] = []
            counter = iter(range(total))
            lock = threading.Lock()
            host, _, port_s = a.rpartition(":")
            t0 = time.perf_counter() + 0.5

            def worker() -> None:
                conn = http.client.HTTPConnection(host, int(port_s), timeout=10)
                while True:
                    with lock:
                        i = next(counter, None)
                    if i is None:
                        break
                    due = t0 + i / args.rate
                    delay = due - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    kind, k = plan[i]
                    conn.request("GET", f"/tables/t/keys/{k}")
                    resp = conn.getresponse()
                    body = json.loads(resp.read())
                    done = time.perf_counter()
                    routed = ("forwarded_by" in body) == (kind == "forwarded")
                    if resp.status != 200 or body.get("value") != ref[k] or not routed:
                        errors.append(f"{k}: {resp.status} {body}")
                    lat[kind].append((done - due) * 1000)
                conn.close()

            threads = [threading.Thread(target=worker) for _ in range(args.workers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - t0
            out = {
                "rate_target": args.rate,
                "requests": total,
                "achieved_rate": round(total / elapsed, 1),
                "errors": len(errors),
                "keys": args.keys,
                **{f"{kind}_{name}_ms": round(pct(v, q), 3)
                   for kind, v in lat.items() for name, q in (("p50", 0.5), ("p99", 0.99))},
                "direct_mean_ms": round(statistics.fmean(lat["direct"]), 3),
                "forwarded_mean_ms": round(statistics.fmean(lat["forwarded"]), 3),
            }
            if errors:
                out["first_errors"] = errors[:3]
            print(json.dumps(out))
            return 1 if errors else 0
        finally:
            for pr in procs:
                pr.terminate()
            for pr in procs:
                try:
                    pr.wait(15)
                except subprocess.TimeoutExpired:
                    pr.kill()
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
