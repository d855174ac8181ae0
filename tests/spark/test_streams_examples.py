"""The strom.streams examples (stocks, clickstream, shoes) end to end on a real broker and local
Spark: small inputs whose results are worked out by hand below, then a larger seeded input run
from the same checkpoint and compared with the example's plain-Python reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from strom.testing.broker_process import BrokerProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration]

NOW = {"availableNow": True}


def test_stocks_hopping_window_stats(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    from strom.examples import _io
    from strom.examples.stocks import cli as stocks

    boot, t0 = kbroker.bootstrap, stocks.BASE
    small = [
        {"symbol": "ACME", "ask": 10.0, "size": 5, "ts": t0 + 200},
        {"symbol": "ACME", "ask": 12.0, "size": 1, "ts": t0 + 1500},
        {"symbol": "BOLT", "ask": 20.0, "size": 7, "ts": t0 + 2100},
        {"symbol": "ACME", "ask": 8.0, "size": 2, "ts": t0 + 5300},
    ]
    assert stocks.produce(boot, small) == 4
    _io.run_queries([stocks.start(spark, boot, str(tmp_path), NOW)], "stocks")

    def st(n: int, mn: float, avg: float) -> tuple[int, float, float]:
        return (n, mn, avg)

    # 5 s windows every 1 s: a quote at t is in the windows starting at the five whole seconds
    # in (t - 5 s, t]
    expected = {
        ("ACME", t0 - 4000): st(1, 10.0, 10.0),
        **{("ACME", t0 + d): st(2, 10.0, 11.0) for d in (-3000, -2000, -1000, 0)},
        ("ACME", t0 + 1000): st(2, 8.0, 10.0),  # 12.00 at +1.5 s and 8.00 at +5.3 s
        **{("ACME", t0 + d): st(1, 8.0, 8.0) for d in (2000, 3000, 4000, 5000)},
        **{("BOLT", t0 + d): st(1, 20.0, 20.0) for d in (-2000, -1000, 0, 1000, 2000)},
    }
    got = {k: (v["count"], v["min_ask"], v["avg_ask"]) for k, v in stocks.stats(boot).items()}
    assert got == expected

    # a larger seeded input later in time, from the same checkpoint
    big = stocks.quotes(300, seed=7, start=t0 + 100_000)
    stocks.produce(boot, big)
    _io.run_queries([stocks.start(spark, boot, str(tmp_path), NOW)], "stocks")
    want = stocks.reference(small + big)
    assert len(want) > 300
    assert stocks.stats(boot) == want


@pytest.mark.slow
def test_clickstream_enrichment(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    from strom.examples import _io
    from strom.examples.clickstream import cli as cs

    boot, t0 = kbroker.bootstrap, cs.BASE
    users = [
        ("a1", {"name": "Ann", "region": "north"}, t0 - 60_000),
        ("a2", {"name": "Bob", "region": "south"}, t0 - 60_000),
    ]  # a3 has no profile
    views = [
        ("a1", {"page": "/home"}, t0),
        ("a2", {"page": "/shoes"}, t0 + 2000),
        ("a3", {"page": "/cart"}, t0 + 4000),
        ("a1", {"page": "/checkout"}, t0 + 6000),
    ]
    searches = [
        ("a1", {"terms": "boots"}, t0 + 500),  # 0.5 s after /home
        ("a2", {"terms": "sale"}, t0 + 3500),  # 1.5 s after /shoes: too late
        ("a1", {"terms": "sandals"}, t0 + 5200),  # 0.8 s before /checkout
        ("a1", {"terms": "red"}, t0 + 6900),  # 0.9 s after /checkout
        ("a2", {"terms": "late"}, t0 + 9000),  # matches nothing; moves stream time on
    ]
    cs.produce(boot, (users, views, searches))
    q1, q2 = cs.start(spark, boot, str(tmp_path), NOW)
    _io.run_queries([q1, q2], "clickstream")

    def e(page: str, terms: str | None, user: str | None, region: str | None) -> dict[str, Any]:
        return {"page": page, "terms": terms, "user": user, "region": region}

    # matches come out when the second of the pair arrives, views without a search once stream
    # time is more than 1 s past them (/shoes at the 3.5 s search, /cart at the 5.2 s search)
    assert cs.enriched(boot) == [
        ("a1", e("/home", "boots", "Ann", "north")),
        ("a2", e("/shoes", None, "Bob", "south")),
        ("a3", e("/cart", None, None, None)),
        ("a1", e("/checkout", "sandals", "Ann", "north")),
        ("a1", e("/checkout", "red", "Ann", "north")),
    ]

    big = cs.generate(120, seed=3, start=t0 + 100_000)
    cs.produce(boot, big)
    _io.run_queries(list(cs.start(spark, boot, str(tmp_path), NOW)), "clickstream")
    want = cs.reference([*users, *big[0]], [*views, *big[1]], [*searches, *big[2]])
    got = sorted(cs.enriched(boot), key=repr)
    assert len(want) > 100
    assert got == want


@pytest.mark.slow
def test_shoes_inventory_table_and_orders(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    from strom.examples import _io
    from strom.examples.shoes import cli as shoes

    boot, t0 = kbroker.bootstrap, shoes.BASE
    changes = [
        ("boot-41@oslo", 5, t0),
        ("boot-41@oslo", -2, t0 + 100),
        ("sneaker-40@lyon", 3, t0 + 200),
        ("boot-41@oslo", -1, t0 + 300),
        ("sandal-38@oslo", 1, t0 + 400),
        ("sandal-38@oslo", -1, t0 + 500),
    ]
    shoes.produce_changes(boot, changes)
    q1, q2 = shoes.start(spark, boot, str(tmp_path), NOW)
    _io.run_queries([q1, q2], "shoes")
    # the table's changelog: every new count, in order
    assert _io.read_committed(boot, shoes.INVENTORY, "shoes") == [
        ("boot-41@oslo", 5),
        ("boot-41@oslo", 3),
        ("sneaker-40@lyon", 3),
        ("boot-41@oslo", 2),
        ("sandal-38@oslo", 1),
        ("sandal-38@oslo", 0),
    ]
    assert shoes.inventory(boot) == {"boot-41@oslo": 2, "sneaker-40@lyon": 3, "sandal-38@oslo": 0}

    orders = [
        shoes.parse_order(t, i)
        for i, t in enumerate(
            ["boot-41@oslo:2", "sneaker-40@lyon:4", "sandal-38@oslo:1", "boot-43@lyon:1"], 1
        )
    ]
    shoes.produce_orders(boot, orders)
    _io.run_queries(list(shoes.start(spark, boot, str(tmp_path), NOW)), "shoes")
    assert shoes.checked(boot) == [
        ("boot-41@oslo", {"order": 1, "qty": 2, "stock": 2, "in_stock": True}),
        ("sneaker-40@lyon", {"order": 2, "qty": 4, "stock": 3, "in_stock": False}),
        ("sandal-38@oslo", {"order": 3, "qty": 1, "stock": 0, "in_stock": False}),
        ("boot-43@lyon", {"order": 4, "qty": 1, "stock": 0, "in_stock": False}),  # unknown item
    ]

    # more seeded changes: the table follows the plain-Python sum
    more = [(k, d, ts + 100_000) for k, d, ts in shoes.changes(200, seed=5)]
    shoes.produce_changes(boot, more)
    _io.run_queries(list(shoes.start(spark, boot, str(tmp_path), NOW)), "shoes")
    assert shoes.inventory(boot) == shoes.reference_inventory(changes + more)


def test_cli_errors() -> None:
    from strom.examples.shoes import cli as shoes

    with pytest.raises(SystemExit, match="bad order 'boot-41:x'"):
        shoes.main(["--bootstrap", "127.0.0.1:1", "produce", "orders", "boot-41:x"])
