"""``python -m strom.examples.clickstream``: clickstream enrichment on ``strom.streams`` (the shape
of Confluent's Kafka Streams clickstream "enrich" demo): page views left-joined with the user
profile table and with the user's searches within 1 s.

Theory of operation
-------------------
Three input topics keyed by user id (co-partitioned: same partition count, default partitioner):
``clickstream-views`` (``{"page"}``), ``clickstream-searches`` (``{"terms"}``), both with the
event's timestamp, and ``clickstream-users`` (compacted, ``{"name", "region"}``, the profile
table). The DSL runs one operator per query, so the two joins are chained through a topic:

1. views LEFT JOIN searches within ``JoinWindows.of(1000)`` (a search at most 1 s before or
   after the view) -> ``clickstream-views-searches`` as ``{"page", "terms"}`` (``terms`` null
   when there was none; a view with two searches gives two records). A view without a search
   is emitted only once stream time shows no search can match it any more (Kafka Streams 3.1+).
2. that stream LEFT JOIN the users table -> ``clickstream-enriched`` as
   ``{"page", "terms", "user", "region"}`` (``user``/``region`` null for an unknown user).

The stream-stream join comes first because it needs the event timestamps: the strom sink writes
query 1's records with the time of writing, which a 1 s window could not use, while a
stream-table join only needs the table's records to come before the stream's in time (profiles
are produced before the views). Both joins are left joins on the same key, so the result is the
same as joining the table first.

Commands: ``produce [--count N --seed S]`` (seeded profiles, views, searches), ``run``
(both queries; ``--available-now`` processes what is there and stops), ``show`` (the enriched
views, read_committed).

Error contract: a missing broker or topic gives a one-line error and exit status 1.
"""

from __future__ import annotations

import argparse
import os
import random
from collections.abc import Sequence
from typing import Any

from strom.examples import _io

VIEWS, SEARCHES, USERS = "clickstream-views", "clickstream-searches", "clickstream-users"
VIEWS_SEARCHES, ENRICHED = "clickstream-views-searches", "clickstream-enriched"
BASE = 1_700_000_000_000
WINDOW = 1000
WHO = "clickstream"
PAGES = ("/home", "/shoes", "/cart", "/checkout", "/help")
TERMS = ("red shoes", "boots", "sale", "sandals")
REGIONS = ("north", "south", "east", "west")

Event = tuple[str, dict[str, Any], int]  # (user, value, ts)


def generate(count: int, seed: int, start: int = BASE) -> tuple[list[Event], list[Event], list[Event]]:
    """Seeded (users, views, searches): 6 users of which 5 have a profile, ``count`` views and
    about half as many searches near them; timestamps increase."""
    rng = random.Random(seed)
    ids = [f"u{i}" for i in range(6)]
    users = [(u, {"name": f"user {u}", "region": rng.choice(REGIONS)}, start - 60_000) for u in ids[:5]]
    views: list[Event] = []
    searches: list[Event] = []
    t = start
    for _ in range(count):
        t += rng.randint(100, 900)
        u = rng.choice(ids)
        views.append((u, {"page": rng.choice(PAGES)}, t))
        if rng.random() < 0.5:
            searches.append((rng.choice(ids), {"terms": rng.choice(TERMS)}, t + rng.randint(-1500, 1500)))
    searches.sort(key=lambda e: e[2])
    return users, views, searches


def join_search(view: dict[str, Any], search: dict[str, Any] | None) -> dict[str, Any]:
    return {"page": view["page"], "terms": None if search is None else search["terms"]}


def join_user(view: dict[str, Any], user: dict[str, Any] | None) -> dict[str, Any]:
    return {
        **view,
        "user": None if user is None else user["name"],
        "region": None if user is None else user["region"],
    }


def reference(
    users: Sequence[Event], views: Sequence[Event], searches: Sequence[Event]
) -> list[tuple[str, dict[str, Any]]]:
    """The enriched views computed directly (one partition), sorted. A view without a search is
    there only if stream time (the latest view or search) is more than 1 s past it."""
    profile = {u: v for u, v, _ in users}
    stream_time = max(t for _, _, t in [*views, *searches])
    out = []
    for u, v, t in views:
        hits: list[dict[str, Any] | None] = [s for su, s, st in searches if su == u and abs(st - t) <= WINDOW]
        if not hits and t + WINDOW >= stream_time:
            continue  # held back: a later search could still match
        for s in hits or [None]:
            out.append((u, join_user(join_search(v, s), profile.get(u))))
    return sorted(out, key=repr)


def produce(
    bootstrap: str, data: tuple[Sequence[Event], Sequence[Event], Sequence[Event]], partitions: int = 1
) -> int:
    _io.create_topics(
        bootstrap,
        [
            (USERS, partitions, True),
            (VIEWS, partitions, False),
            (SEARCHES, partitions, False),
            (VIEWS_SEARCHES, partitions, False),
            (ENRICHED, partitions, False),
        ],
        WHO,
    )
    users, views, searches = data
    return sum(
        _io.produce_json(bootstrap, t, recs, WHO)
        for t, recs in ((USERS, users), (VIEWS, views), (SEARCHES, searches))
    )


def start(spark: Any, bootstrap: str, checkpoint: str, trigger: dict[str, Any]) -> tuple[Any, Any]:
    """Both queries (with ``availableNow`` the first runs to its end before the second starts)."""
    from strom import streams
    from strom.streams.processors import JoinWindows

    def s(topic: str) -> Any:
        return streams.stream(spark, topic, bootstrap=bootstrap, value_serde="json")

    q1 = (
        s(VIEWS)
        .join(s(SEARCHES), join_search, JoinWindows.of(WINDOW), how="left")
        .to(VIEWS_SEARCHES, os.path.join(checkpoint, "views-searches"), trigger=trigger)
    )
    if trigger.get("availableNow"):
        _io.run_queries([q1], WHO)
    q2 = (
        s(VIEWS_SEARCHES)
        .join(streams.table(spark, USERS, bootstrap=bootstrap, value_serde="json"), join_user, how="left")
        .to(ENRICHED, os.path.join(checkpoint, "enriched"), trigger=trigger)
    )
    return q1, q2


def enriched(bootstrap: str) -> list[tuple[str, dict[str, Any]]]:
    return [(str(k), v) for k, v in _io.read_committed(bootstrap, ENRICHED, WHO)]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m strom.examples.clickstream", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce", help="write seeded profiles, views and searches")
    p.add_argument("--count", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    r = sub.add_parser("run", help="run both joins")
    r.add_argument("--checkpoint", required=True)
    r.add_argument("--available-now", action="store_true")
    sub.add_parser("show", help="print the enriched views")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "produce":
            print(f"produced {produce(a.bootstrap, generate(a.count, a.seed))} records")
        elif a.cmd == "run":
            spark = _io.spark_session("strom-clickstream")
            try:
                trigger = {"availableNow": True} if a.available_now else {"processingTime": "1 second"}
                _io.run_queries(list(start(spark, a.bootstrap, a.checkpoint, trigger)), WHO)
            except KeyboardInterrupt:
                pass
            finally:
                spark.stop()
        else:
            print("user\tpage\tterms\tname\tregion")
            for u, v in enriched(a.bootstrap):
                print(f"{u}\t{v['page']}\t{v['terms']}\t{v['user']}\t{v['region']}")
    except Exception as e:
        if isinstance(e, SystemExit):
            raise
        raise SystemExit(f"{WHO}: {e}") from None
    return 0
