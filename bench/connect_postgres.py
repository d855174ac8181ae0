"""strom connect throughput, PostgreSQL -> topic: the JDBC source (incrementing mode) and the
Debezium CDC source (snapshot, then streaming), each a `--once` run of the connector on a local
Spark (local[2]) against a strom broker and a PostgreSQL server started here (initdb + postgres on
a loopback port). Prints rows/s, wall time from the query's start to its end (the connector's
set-up and Spark's start-up of the query included, the SparkSession's not).

    python bench/connect_postgres.py [--rows 100000] [--batch-max-rows 10000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from strom.connect.config import parse_config
from strom.connect.runtime import ConnectorRun, spark_session
from strom.testing.broker_process import BrokerProcess
from strom.testing.postgres_process import PostgresProcess


def timed(spark: Any, cfg: dict[str, Any], bootstrap: str, state: Path) -> tuple[float, float, ConnectorRun]:
    """(wall time of the whole run, of the query after the connector's set-up, the run)."""
    run = ConnectorRun(parse_config(cfg), bootstrap, state)
    t0 = time.monotonic()
    q = run.start(spark, once=True)
    t1 = time.monotonic()
    q.awaitTermination()
    run.stop()
    t2 = time.monotonic()
    assert q.exception() is None, run.error or q.exception()
    return t2 - t0, t2 - t1, run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--batch-max-rows", type=int, default=10_000)
    args = ap.parse_args()
    n = args.rows
    d = Path(tempfile.mkdtemp(prefix="connect-pg-bench-"))
    b = BrokerProcess(d / "data")
    b.start()
    pg = PostgresProcess().start()
    spark = spark_session("connect-pg-bench")
    fill = (
        "INSERT INTO {t} (name, qty, price, modified) SELECT 'customer ' || i, i % 100, (i % 1000) * 1.25, "
        "now() - interval '1 hour' FROM generate_series(1, %s) i"
    )
    try:
        with psycopg.connect(pg.dsn, autocommit=True) as c:
            for t in ("orders", "cdc_orders"):
                c.execute(
                    f"CREATE TABLE {t} (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, qty INT, "
                    "price NUMERIC(10,2), modified TIMESTAMP NOT NULL)"
                )
                c.execute(fill.format(t=t).replace("%s", str(n)))
        jdbc = {
            "name": "bench-jdbc",
            "config": {
                "connector.class": "io.confluent.connect.jdbc.JdbcSourceConnector",
                "connection.url": f"{pg.jdbc_url}?user={pg.user}",
                "mode": "incrementing",
                "incrementing.column.name": "id",
                "table.whitelist": "orders",
                "topic.prefix": "bench-",
                "batch.max.rows": str(args.batch_max_rows),
            },
        }
        dt, dq, run = timed(spark, jdbc, b.bootstrap, d / "jdbc")
        assert run.records_out == n, (run.records_out, n)
        print(
            f"JDBC source (incrementing, JsonConverter with schemas): {n} rows in {dt:.1f} s = "
            f"{n / dt:,.0f} rows/s; the query alone {dq:.1f} s = {n / dq:,.0f} rows/s "
            f"({run.batches} micro-batches of <= {args.batch_max_rows})",
            flush=True,
        )
        cdc = {
            "name": "bench-cdc",
            "config": {
                "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                "database.hostname": pg.host,
                "database.port": str(pg.port),
                "database.user": pg.user,
                "database.dbname": pg.dbname,
                "topic.prefix": "benchdb",
                "table.include.list": "public\\.cdc_orders",
                "publication.autocreate.mode": "filtered",
            },
        }
        # the snapshot runs in the connector's set-up, before the query starts
        dt, _dq, run = timed(spark, cdc, b.bootstrap, d / "cdc")
        assert run.records_out == n, (run.records_out, n)
        print(
            f"CDC snapshot (op r, Debezium envelope): {n} rows in {dt:.1f} s = {n / dt:,.0f} rows/s",
            flush=True,
        )
        with psycopg.connect(pg.dsn, autocommit=True) as c:
            c.execute(fill.format(t="cdc_orders").replace("%s", str(n)))  # one transaction
        dt, dq, run = timed(spark, cdc, b.bootstrap, d / "cdc")
        assert run.records_out == n, (run.records_out, n)
        print(
            f"CDC streaming (op c, pgoutput, one {n}-row transaction): {n} rows in {dt:.1f} s = "
            f"{n / dt:,.0f} rows/s; the query alone {dq:.1f} s = {n / dq:,.0f} rows/s",
            flush=True,
        )
    finally:
        spark.stop()
        pg.stop()
        b.stop()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
