"""Data for ``pageviews.sql``: users (a compacted topic, JSON values keyed by user id) and page
views (JSON values keyed by user id, record timestamp = ``viewtime``), both with the same
partition count and Kafka's default partitioner (murmur2) so the join's inputs are co-partitioned.

    python -m strom.examples.pageviews produce --bootstrap-server HOST:PORT
        [--users 9] [--views 200] [--partitions 2] [--start-ms 1700000000000] [--seed 1]

The users are written first, with timestamps before every view, so each view meets its user.
``expected_counts`` gives the counts per (region, 30 s window) the SQL must produce.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from typing import Any

REGIONS = ("Region_1", "Region_2", "Region_3")
WINDOW_MS = 30_000


def users(n: int, start_ms: int) -> list[tuple[str, dict[str, Any], int]]:
    """(user id, value, timestamp): user i lives in region i % 3 (``views`` also has views of
    ``User_<n>``, who is never written, to exercise the LEFT JOIN)."""
    return [
        (
            f"User_{i}",
            {
                "registertime": start_ms - 1000 + i,
                "gender": "FEMALE" if i % 2 else "MALE",
                "regionid": REGIONS[i % len(REGIONS)],
            },
            start_ms - 1000 + i,
        )
        for i in range(n)
    ]


def views(n_users: int, n: int, start_ms: int, seed: int) -> list[tuple[str, dict[str, Any], int]]:
    """Views by users 0..n_users (one more than exist: its views have no region), at increasing
    times over about ``n * 700`` ms."""
    rng = random.Random(seed)
    out = []
    t = start_ms
    for _ in range(n):
        t += rng.randint(0, 1400)
        uid = f"User_{rng.randint(0, n_users)}"
        out.append((uid, {"viewtime": t, "pageid": f"Page_{rng.randint(1, 50)}"}, t))
    return out


def expected_counts(
    n_users: int, vs: list[tuple[str, dict[str, Any], int]]
) -> dict[tuple[str | None, int], int]:
    """(region or None, window start) -> number of views."""
    region = {uid: v["regionid"] for uid, v, _ in users(n_users, 0)}
    c: Counter[tuple[str | None, int]] = Counter()
    for uid, _, ts in vs:
        c[(region.get(uid), ts - ts % WINDOW_MS)] += 1
    return dict(c)


def produce(bootstrap: str, n_users: int, n_views: int, partitions: int, start_ms: int, seed: int) -> None:
    import asyncio

    from confluent_kafka import Producer

    from strom.client import Client

    async def topics() -> None:
        async with Client(bootstrap) as c:
            res = await c.create_topics(
                {"users": (partitions, -1, {"cleanup.policy": "compact"}), "pageviews": (partitions, -1)}
            )
            for name, err in res.items():
                if err is not None and "exist" not in str(err).lower():
                    raise SystemExit(f"cannot create {name}: {err}")

    asyncio.run(topics())
    p = Producer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "enable.idempotence": True}
    )
    for topic, recs in (
        ("users", users(n_users, start_ms)),
        ("pageviews", views(n_users, n_views, start_ms, seed)),
    ):
        for k, v, ts in recs:
            p.produce(topic, key=k.encode(), value=json.dumps(v).encode(), timestamp=ts)
        if p.flush(30):
            raise SystemExit(f"records to {topic} not delivered in 30 s")
        print(f"{len(recs)} records to {topic}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m strom.examples.pageviews",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("produce", help="write users and page views")
    pr.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    pr.add_argument("--users", type=int, default=9)
    pr.add_argument("--views", type=int, default=200)
    pr.add_argument("--partitions", type=int, default=2)
    pr.add_argument("--start-ms", type=int, default=1_700_000_000_000)
    pr.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    if a.users < 1 or a.views < 0 or a.partitions < 1:
        print("pageviews: --users and --partitions must be at least 1, --views at least 0", file=sys.stderr)
        return 2
    produce(a.bootstrap_server, a.users, a.views, a.partitions, a.start_ms, a.seed)
    return 0
