"""``strom sql`` on a real broker and local Spark: the page views example run as a ``--file``
(counts per region and window read back read_committed, against counts computed here from the
generated data), a CREATE TABLE AS SELECT with GROUP BY, a push query, a pull query through the
state server, and the catalog surviving a restart of the shell."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from strom.testing.broker_process import BrokerProcess

from .test_streams import read_committed

pytestmark = [pytest.mark.spark, pytest.mark.integration]

EXAMPLE = Path(__file__).resolve().parents[2] / "src" / "strom" / "examples" / "pageviews" / "pageviews.sql"


def sql(spark: Any, kbroker: BrokerProcess, state: Path, *args: str) -> int:
    from strom.streams.sql.shell import main

    return main(["--bootstrap-server", kbroker.bootstrap, "--state-dir", str(state), *args], spark=spark)


def test_pageviews_example_counts_per_region_and_window(
    spark: Any, kbroker: BrokerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from strom.examples.pageviews import generate as g

    g.produce(kbroker.bootstrap, 4, 60, 2, 1_700_000_000_000, 7)
    assert sql(spark, kbroker, tmp_path / "state", "--once", "--file", str(EXAMPLE)) == 0
    out = capsys.readouterr().out
    assert "Created query with ID CSAS_PAGEVIEWS_ENRICHED_1" in out
    assert "Created query with ID CTAS_PAGEVIEWS_PER_REGION_2" in out

    expected = g.expected_counts(4, g.views(4, 60, 1_700_000_000_000, 7))
    # hand-checked shape: 4 users in Region_1/2/3, a fifth (User_4) unknown -> region null
    assert {r for r, _ in expected} == {"Region_1", "Region_2", "Region_3", None}
    final: dict[tuple[str | None, int], int] = {}
    for _, k, v in read_committed(kbroker.bootstrap, "PAGEVIEWS_PER_REGION", 2):
        assert k is not None and v is not None
        key = json.loads(k)
        assert key["end"] - key["start"] == 30_000
        val = json.loads(v)
        assert val["window_start"] == key["start"] and val["window_end"] == key["end"]
        final[(key["key"], key["start"])] = val["numviews"]  # the last update of a window wins
    assert final == expected

    enriched = read_committed(kbroker.bootstrap, "PAGEVIEWS_ENRICHED", 2)
    assert len(enriched) == 60
    regions = {"User_0": "Region_1", "User_1": "Region_2", "User_2": "Region_3", "User_3": "Region_1"}
    for _, k, v in enriched:
        assert k is not None and v is not None
        row = json.loads(v)
        assert row["regionid"] == regions.get(k.decode())
        assert "userid" not in row  # the key column is the record key, as in ksqlDB


ORDERS = """
SET 'auto.offset.reset' = 'earliest';
CREATE STREAM orders (id VARCHAR KEY, item VARCHAR, qty INT, price DECIMAL(10, 2))
  WITH (kafka_topic = 'orders', value_format = 'JSON', partitions = 2);
INSERT INTO orders (id, item, qty, price) VALUES ('o1', 'apple', 3, 1.50);
INSERT INTO orders (id, item, qty, price) VALUES ('o2', 'pear', 1, 2.00);
INSERT INTO orders (id, item, qty, price) VALUES ('o3', 'apple', 4, 1.50);
INSERT INTO orders (id, item, qty, price) VALUES ('o4', 'plum', 0, 9.99);  -- filtered out
INSERT INTO orders (id, item, qty, price) VALUES ('o5', 'pear', 2, 2.00);
CREATE TABLE qty_per_item AS
  SELECT item, SUM(qty) AS total, COUNT(*) AS orders, MAX(price) AS top_price
  FROM orders WHERE qty > 0 GROUP BY item EMIT CHANGES;
"""


def latest(bootstrap: str, topic: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for _, k, v in read_committed(bootstrap, topic, 2):
        assert k is not None and v is not None
        out[k.decode()] = json.loads(v)
    return out


def test_table_aggregation_restart_push_and_pull(
    spark: Any, kbroker: BrokerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    f1 = tmp_path / "orders.sql"
    f1.write_text(ORDERS)
    assert sql(spark, kbroker, state, "--once", "--file", str(f1)) == 0
    assert "Created query with ID CTAS_QTY_PER_ITEM_1" in capsys.readouterr().out
    assert latest(kbroker.bootstrap, "QTY_PER_ITEM") == {
        "apple": {"total": 7, "orders": 2, "top_price": 1.5},
        "pear": {"total": 3, "orders": 2, "top_price": 2.0},
    }

    # more orders while no shell runs; a new shell knows the catalog (and the SET) and resumes
    # the query from its checkpoint: the new orders are added once, the old ones not again
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": kbroker.bootstrap, "partitioner": "murmur2_random"})
    p.produce("orders", key=b"o6", value=json.dumps({"item": "apple", "qty": 10, "price": 1.25}).encode())
    p.produce("orders", key=b"o7", value=json.dumps({"item": "fig", "qty": 5, "price": 3.0}).encode())
    assert p.flush(30) == 0
    f2 = tmp_path / "after.sql"
    f2.write_text(
        "SHOW STREAMS; SHOW TABLES; DESCRIBE qty_per_item; SHOW QUERIES; SHOW PROPERTIES;\n"
        "SELECT item, total FROM qty_per_item WHERE total > 4 EMIT CHANGES LIMIT 2;\n"
    )
    assert sql(spark, kbroker, state, "--once", "--file", str(f2)) == 0
    out = capsys.readouterr().out
    assert "Resumed query CTAS_QTY_PER_ITEM_1" in out
    assert "| ORDERS " in out and "| QTY_PER_ITEM " in out
    assert "item" in out and "VARCHAR (primary key)" in out and "total" in out and "BIGINT" in out
    assert "| auto.offset.reset | earliest |" in out
    # the push query: the table's changelog from the beginning, rows with total > 4, two of them
    rows = [line for line in out.splitlines() if line.startswith("|apple") or line.startswith("|fig")]
    assert [r.split("|")[1].strip() for r in rows] == ["apple", "fig"] or len(rows) == 2, out
    assert "Limit Reached" in out
    assert latest(kbroker.bootstrap, "QTY_PER_ITEM") == {
        "apple": {"total": 17, "orders": 3, "top_price": 1.5},
        "pear": {"total": 3, "orders": 2, "top_price": 2.0},
        "fig": {"total": 5, "orders": 1, "top_price": 3.0},
    }

    # pull queries: without a state server, how to get one; with one, the answer
    f3 = tmp_path / "pull.sql"
    f3.write_text("SELECT * FROM qty_per_item WHERE item = 'apple';\n")
    assert sql(spark, kbroker, state, "--once", "--file", str(f3)) == 1
    err = capsys.readouterr().err
    assert "strom streams serve" in err and "--table QTY_PER_ITEM=QTY_PER_ITEM:json:string" in err

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "strom.streams.serve",
            "--bootstrap-server",
            kbroker.bootstrap,
            "--application-id",
            "sql-pull-test",
            "--application-server",
            f"127.0.0.1:{port}",
            "--table",
            "QTY_PER_ITEM=QTY_PER_ITEM:json:string",
            "--session-timeout-ms",
            "6000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            rc = sql(
                spark,
                kbroker,
                state,
                "--once",
                "--file",
                str(f3),
                "--state-server",
                f"http://127.0.0.1:{port}",
            )
            cap = capsys.readouterr()
            if rc == 0 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert rc == 0, cap.err
        line = next(x for x in cap.out.splitlines() if x.startswith("| apple"))
        assert [c.strip() for c in line.strip("|").split("|")] == ["apple", "17", "3", "1.5"]
        assert "consistent with QTY_PER_ITEM-" in cap.out
    finally:
        server.terminate()
        server.wait(30)


def test_hopping_window_counts(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    """WINDOW HOPPING (SIZE 10 SECONDS, ADVANCE BY 5 SECONDS) on event time from a column: the
    last update of each (symbol, window) equals a count done here."""
    base = 1_700_000_000_000  # a multiple of 5 s
    rows = [("A", 1_000), ("A", 6_000), ("B", 7_000), ("A", 12_000), ("B", 14_999), ("A", 15_000)]
    inserts = "\n".join(
        f"INSERT INTO trades (sym, px, ts) VALUES ('{s}', 1.0, {base + t});" for s, t in rows
    )
    f = tmp_path / "hop.sql"
    f.write_text(
        "SET 'auto.offset.reset' = 'earliest';\n"
        "CREATE STREAM trades (sym VARCHAR KEY, px DOUBLE, ts BIGINT)\n"
        "  WITH (kafka_topic = 'trades', value_format = 'JSON', partitions = 2, timestamp = 'ts');\n"
        f"{inserts}\n"
        "CREATE TABLE trades_hop AS SELECT sym, COUNT(*) AS n FROM trades\n"
        "  WINDOW HOPPING (SIZE 10 SECONDS, ADVANCE BY 5 SECONDS) GROUP BY sym EMIT CHANGES;\n"
    )
    assert sql(spark, kbroker, tmp_path / "state", "--once", "--file", str(f)) == 0
    want: dict[tuple[str, int], int] = {}
    for s, t in rows:
        for start in range(base + t - t % 5_000 - 5_000, base + t + 1, 5_000):
            if start <= base + t < start + 10_000:
                want[(s, start)] = want.get((s, start), 0) + 1
    got: dict[tuple[str, int], int] = {}
    for _, k, v in read_committed(kbroker.bootstrap, "TRADES_HOP", 2):
        assert k is not None and v is not None
        key = json.loads(k)
        assert key["end"] - key["start"] == 10_000
        got[(key["key"], key["start"])] = json.loads(v)["n"]
    assert got == want and len(want) == 8  # A: 5 windows, B: 3
