"""OffsetCommit latency and commits/s against a real broker: N clients committing in a loop.

Each client has its own connection and its own group and sends one OffsetCommit (one partition)
after the other, as a consumer with ``enable.auto.commit`` and a short interval, or a stream
processor committing per batch, does. Per point it prints the median and p99 latency (µs) and
commits/s over all clients. ``--spread same`` (default) gives every client a group that lands on
one ``__consumer_offsets`` partition (the busiest case: one lock, one log); ``--spread any``
hashes them over all partitions.

``--baseline DIR`` also runs a broker from another checkout's ``src`` (e.g. ``../main/src``) in
the same run, points interleaved, and prints the ratio. The clients (strom's own asyncio client)
run in this process: on a small machine they share the CPU with the broker, which the ratio
cancels out.

    python bench/offset_commit.py                                  # 1, 8, 32 clients, 5 s each
    python bench/offset_commit.py --baseline ../main/src --clients 1 16 --duration 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_SRC = Path(__file__).resolve().parent.parent / "src"
sys.path.insert(0, str(REPO_SRC))

from strom.client.client import Client  # noqa: E402
from strom.client.groups import OFFSET_COMMIT, find_coordinator  # noqa: E402
from strom.coordinator.records import partition_for  # noqa: E402
from strom.testing.broker_process import BrokerProcess  # noqa: E402

PARTITIONS = 50


def group_names(n: int, spread: str) -> list[str]:
    if spread == "any":
        return [f"bench-{i}" for i in range(n)]
    out: list[str] = []
    i = 0
    while len(out) < n:
        g = f"bench-{i}"
        if partition_for(g, PARTITIONS) == 0:
            out.append(g)
        i += 1
    return out


async def _client_loop(client: Client, group: str, stop_at: float, lat: list[float]) -> None:
    coord = await find_coordinator(client, group)
    conn = await client.connection(coord.host, coord.port)
    offset = 0
    while time.perf_counter() < stop_at:
        offset += 1
        t0 = time.perf_counter()
        resp = await conn.request(OFFSET_COMMIT, {
            "group_id": group, "generation_id_or_member_epoch": -1, "generation_id": -1, "member_id": "",
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": "bench", "partitions": [{
                "partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                "committed_metadata": "", "commit_timestamp": -1,
            }]}],
        })
        lat.append(time.perf_counter() - t0)
        code = int(resp.topics[0].partitions[0].error_code)
        if code:
            raise RuntimeError(f"OffsetCommit failed with error {code}")


async def run_point(bootstrap: str, clients: int, duration: float, spread: str) -> dict[str, float]:
    groups = group_names(clients, spread)
    conns = [Client(bootstrap) for _ in range(clients)]
    try:
        await conns[0].create_topics({"bench": (1, 1)})  # (already there after the first point)
        # warm up: find coordinators, open connections, create the groups
        warm: list[float] = []
        await asyncio.gather(*(_client_loop(c, g, time.perf_counter() + 0.3, warm)
                               for c, g in zip(conns, groups, strict=True)))
        lats: list[list[float]] = [[] for _ in range(clients)]
        t0 = time.perf_counter()
        stop_at = t0 + duration
        await asyncio.gather(*(_client_loop(c, g, stop_at, lat)
                               for c, g, lat in zip(conns, groups, lats, strict=True)))
        elapsed = time.perf_counter() - t0
    finally:
        for c in conns:
            await c.close()
    all_lat = sorted(x for lat in lats for x in lat)
    n = len(all_lat)
    return {
        "commits": n,
        "per_s": n / elapsed,
        "p50_us": statistics.median(all_lat) * 1e6,
        "p99_us": all_lat[min(n - 1, int(n * 0.99))] * 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--spread", choices=["same", "any"], default="same")
    ap.add_argument("--baseline", type=Path, help="the src dir of another checkout to compare with")
    ap.add_argument("--runs", type=int, default=1, help="points per variant (interleaved); median shown")
    args = ap.parse_args()

    variants: list[tuple[str, Path]] = [("this", REPO_SRC)]
    if args.baseline is not None:
        variants.insert(0, ("baseline", args.baseline.resolve()))
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="strom-bench-commit-") as tmp:
        brokers: dict[str, BrokerProcess] = {}
        try:
            for name, src in variants:
                env = dict(os.environ)
                env["PYTHONPATH"] = str(src)
                b = BrokerProcess(Path(tmp) / name / "data", env=env,
                                  overrides=[f"offsets.topic.num.partitions={PARTITIONS}"])
                brokers[name] = b.start()
            for _ in range(args.runs):
                for clients in args.clients:
                    for name, _src in variants:
                        point = run_point(brokers[name].bootstrap, clients, args.duration, args.spread)
                        r = asyncio.run(point)
                        results.setdefault((name, clients), []).append(r)
        finally:
            for b in brokers.values():
                b.stop()

    def med(rs: list[dict[str, float]], k: str) -> float:
        return statistics.median(r[k] for r in rs)

    print(f"OffsetCommit, {args.duration:g} s per point, groups spread: {args.spread}, "
          f"fsync per commit durable before the answer (both variants)")
    print(f"{'variant':>9} {'clients':>7} {'commits/s':>10} {'p50 µs':>9} {'p99 µs':>9}")
    for clients in args.clients:
        for name, _src in variants:
            rs = results[(name, clients)]
            print(f"{name:>9} {clients:>7} {med(rs, 'per_s'):>10.0f} {med(rs, 'p50_us'):>9.0f} "
                  f"{med(rs, 'p99_us'):>9.0f}")
        if args.baseline is not None:
            base, this = results[("baseline", clients)], results[("this", clients)]
            ratios = [med(this, k) / med(base, k) for k in ("per_s", "p50_us", "p99_us")]
            print(f"{'ratio':>9} {clients:>7} {ratios[0]:>9.2f}x {ratios[1]:>8.2f}x {ratios[2]:>8.2f}x")


if __name__ == "__main__":
    main()
