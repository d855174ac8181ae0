"""``python -m strom.examples.shoes``: the shoe store's stream-table duality on ``strom.streams``:
a stream of inventory changes becomes an inventory table, and orders are checked against it.

Theory of operation
-------------------
Topic ``shoes-inventory-changes`` holds changes keyed ``"sku@store"`` with a JSON integer value
(``+n`` a delivery, ``-n`` a sale or a return to the vendor). Query 1 sums them per key (``
group_by_key().sum()``) and writes each new count exactly-once to the compacted topic
``shoes-inventory``: the changelog of the table, whose latest record per key is the count (the
stream is the table's history, the table the stream's current state). Query 2 reads
``shoes-orders`` (keyed ``"sku@store"``, ``{"order", "qty"}``) and left-joins each order with
the ``shoes-inventory`` table: ``{"order", "qty", "stock", "in_stock"}`` (``stock`` 0 for an
unknown item) to ``shoes-orders-checked``. Orders do not change the inventory here.

A stream-table join takes table records before stream records by timestamp; the sink writes the
table's records with the time of writing, so orders produced after query 1 ran (``produce
orders`` stamps them with the current time) see the whole table.

Commands: ``produce changes [--count N --seed S]`` (seeded changes), ``produce orders ORDER...``
(``ORDER`` = ``sku@store:qty``), ``run`` (both queries; ``--available-now`` processes what is
there and stops), ``show`` (the inventory table and the checked orders, read_committed).

Error contract: a missing broker or topic, or a malformed order, gives a one-line error and exit
status 1.
"""

from __future__ import annotations

import argparse
import os
import random
from collections.abc import Sequence
from typing import Any

from strom.examples import _io

CHANGES, INVENTORY = "shoes-inventory-changes", "shoes-inventory"
ORDERS, CHECKED = "shoes-orders", "shoes-orders-checked"
BASE = 1_700_000_000_000
WHO = "shoes"
SKUS = ("boot-41", "boot-43", "sneaker-40", "sandal-38")
STORES = ("oslo", "lyon")


def changes(count: int, seed: int) -> list[tuple[str, int, int]]:
    """``count`` seeded (item, delta, ts): deliveries of 1-10 pairs, sales of 1-3 (never more
    than the store has)."""
    rng = random.Random(seed)
    out, stock = [], dict[str, int]()
    for i in range(count):
        item = f"{rng.choice(SKUS)}@{rng.choice(STORES)}"
        sale = rng.randint(1, 3)
        delta = -sale if rng.random() >= 0.4 and stock.get(item, 0) >= sale else rng.randint(1, 10)
        stock[item] = stock.get(item, 0) + delta
        out.append((item, delta, BASE + 100 * i))
    return out


def parse_order(text: str, n: int) -> tuple[str, dict[str, Any]]:
    item, sep, qty = text.rpartition(":")
    if not sep or "@" not in item or not qty.isdigit() or int(qty) <= 0:
        raise SystemExit(f"{WHO}: bad order {text!r}: expected sku@store:qty (qty > 0)")
    return item, {"order": n, "qty": int(qty)}


def check(order: dict[str, Any], stock: int | None) -> dict[str, Any]:
    s = stock or 0
    return {**order, "stock": s, "in_stock": s >= order["qty"]}


def reference_inventory(chs: Sequence[tuple[str, int, int]]) -> dict[str, int]:
    inv: dict[str, int] = {}
    for item, d, _ in chs:
        inv[item] = inv.get(item, 0) + d
    return inv


def produce_changes(bootstrap: str, chs: Sequence[tuple[str, int, int]], partitions: int = 1) -> int:
    _topics(bootstrap, partitions)
    return _io.produce_json(bootstrap, CHANGES, [(k, d, ts) for k, d, ts in chs], WHO)


def produce_orders(bootstrap: str, orders: Sequence[tuple[str, dict[str, Any]]], partitions: int = 1) -> int:
    _topics(bootstrap, partitions)
    return _io.produce_json(bootstrap, ORDERS, [(k, v, None) for k, v in orders], WHO)


def _topics(bootstrap: str, partitions: int) -> None:
    _io.create_topics(
        bootstrap,
        [
            (CHANGES, partitions, False),
            (INVENTORY, partitions, True),
            (ORDERS, partitions, False),
            (CHECKED, partitions, False),
        ],
        WHO,
    )


def start(spark: Any, bootstrap: str, checkpoint: str, trigger: dict[str, Any]) -> tuple[Any, Any]:
    """Both queries (with ``availableNow`` the table is built before the orders are checked)."""
    from strom import streams

    q1 = (
        streams.stream(spark, CHANGES, bootstrap=bootstrap, value_serde="json")
        .group_by_key()
        .sum()
        .to(INVENTORY, os.path.join(checkpoint, "inventory"), trigger=trigger)
    )
    if trigger.get("availableNow"):
        _io.run_queries([q1], WHO)
    q2 = (
        streams.stream(spark, ORDERS, bootstrap=bootstrap, value_serde="json")
        .join(streams.table(spark, INVENTORY, bootstrap=bootstrap, value_serde="json"), check, how="left")
        .to(CHECKED, os.path.join(checkpoint, "orders"), trigger=trigger)
    )
    return q1, q2


def inventory(bootstrap: str) -> dict[str, int]:
    """The table: the latest committed count per item."""
    out: dict[str, int] = {}
    for k, v in _io.read_committed(bootstrap, INVENTORY, WHO):
        if v is None:
            out.pop(str(k), None)
        else:
            out[str(k)] = int(v)
    return out


def checked(bootstrap: str) -> list[tuple[str, dict[str, Any]]]:
    return [(str(k), v) for k, v in _io.read_committed(bootstrap, CHECKED, WHO)]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m strom.examples.shoes", description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce", help="write inventory changes or orders")
    what = p.add_subparsers(dest="what", required=True)
    c = what.add_parser("changes", help="seeded random inventory changes")
    c.add_argument("--count", type=int, default=40)
    c.add_argument("--seed", type=int, default=1)
    o = what.add_parser("orders", help="orders sku@store:qty")
    o.add_argument("orders", nargs="+")
    r = sub.add_parser("run", help="run both queries")
    r.add_argument("--checkpoint", required=True)
    r.add_argument("--available-now", action="store_true")
    sub.add_parser("show", help="print the inventory table and the checked orders")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "produce" and a.what == "changes":
            print(f"produced {produce_changes(a.bootstrap, changes(a.count, a.seed))} changes")
        elif a.cmd == "produce":
            orders = [parse_order(t, i) for i, t in enumerate(a.orders, 1)]
            print(f"produced {produce_orders(a.bootstrap, orders)} orders")
        elif a.cmd == "run":
            spark = _io.spark_session("strom-shoes")
            try:
                trigger = {"availableNow": True} if a.available_now else {"processingTime": "1 second"}
                _io.run_queries(list(start(spark, a.bootstrap, a.checkpoint, trigger)), WHO)
            except KeyboardInterrupt:
                pass
            finally:
                spark.stop()
        else:
            print("item\tcount")
            for item, n in sorted(inventory(a.bootstrap).items()):
                print(f"{item}\t{n}")
            print("\norder\titem\tqty\tstock\tin_stock")
            for item, v in checked(a.bootstrap):
                print(f"{v['order']}\t{item}\t{v['qty']}\t{v['stock']}\t{v['in_stock']}")
    except Exception as e:
        if isinstance(e, SystemExit):
            raise
        raise SystemExit(f"{WHO}: {e}") from None
    return 0
