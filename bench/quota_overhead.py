"""What client quotas cost the hot path: produce throughput with no quota configured vs quotas
that apply to the measured client but never throttle it (default-user producer_byte_rate 1 TB/s,
request_percentage 1e6 %, controller_mutation_rate, default-IP connection_creation_rate), so
every produce request goes through the byte-rate and request-time accounting. Variants
interleaved in the same run, a fresh broker each time.

Each run: confluent-kafka produces COUNT records of SIZE bytes to one partition (acks=1,
linger.ms=5) on the PLAINTEXT listener (User:ANONYMOUS, matched by the default user entity).

    python bench/quota_overhead.py                   # 3 runs, 300000 x 100 B
    python bench/quota_overhead.py --runs 5 --count 500000 --size 1024
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import confluent_kafka as ck
from confluent_kafka import admin as ka

from strom.client.client import Client
from strom.testing.broker_process import BrokerProcess

TOPIC = "bench-quota"


def _set_quotas(bootstrap: str) -> None:
    """AlterClientQuotas with strom's client (confluent-kafka has no quota API)."""

    async def alter(bootstrap: str) -> None:
        def entry(etype: str, ops: dict[str, float]) -> dict[str, object]:
            return {
                "entity": [{"entity_type": etype, "entity_name": None}],
                "ops": [{"key": k, "value": v, "remove": False} for k, v in ops.items()],
            }

        entries = [
            entry("user", {"producer_byte_rate": 1e12, "consumer_byte_rate": 1e12,
                           "request_percentage": 1e6, "controller_mutation_rate": 1e6}),
            entry("ip", {"connection_creation_rate": 1e6}),
        ]
        async with Client(bootstrap) as c:
            conn = await c.any_connection()
            r = await conn.request(49, {"entries": entries, "validate_only": False})
            assert all(int(e.error_code) == 0 for e in r.entries), r

    asyncio.run(alter(bootstrap))


def run_once(quotas: bool, count: int, size: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        b = BrokerProcess(Path(d) / "data").start()
        try:
            conf = {"bootstrap.servers": b.bootstrap_for("PLAINTEXT")}
            admin = ka.AdminClient(conf)
            admin.create_topics([ka.NewTopic(TOPIC, 1, 1)], request_timeout=30)[TOPIC].result()
            if quotas:
                _set_quotas(b.bootstrap_for("PLAINTEXT"))
                time.sleep(0.5)
            p = ck.Producer(conf | {"acks": 1, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
            value = b"x" * size
            t0 = time.perf_counter()
            for _ in range(count):
                while True:
                    try:
                        p.produce(TOPIC, value)
                        break
                    except BufferError:
                        p.poll(0.001)
            assert p.flush(120) == 0
            return count * size / 1e6 / (time.perf_counter() - t0)
        finally:
            b.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--count", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args()
    results: dict[bool, list[float]] = {False: [], True: []}
    for i in range(args.runs):
        for on in (False, True) if i % 2 == 0 else (True, False):
            r = run_once(on, args.count, args.size)
            results[on].append(r)
            print(f"run {i} quotas={'on' if on else 'off'}: produce {r:.1f} MB/s", flush=True)
    off, on = statistics.median(results[False]), statistics.median(results[True])
    print(f"median produce: no quotas {off:.1f} MB/s, quotas {on:.1f} MB/s, ratio {on / off:.3f}")


if __name__ == "__main__":
    main()
