"""PostgreSQL connectors end to end: a real PostgreSQL server (initdb + postgres on a loopback
port, ``wal_level=logical``), a real strom broker, real Spark; records read back with
confluent-kafka (read_committed). JDBC source (incrementing, timestamp+incrementing, timestamp)
restart-exact; JDBC sink insert and upsert with auto.create and a replayed batch; Debezium CDC:
snapshot, then inserts/updates/deletes in Debezium's envelope, restart-exact from the LSN stored
in connect-offsets."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.connect.config import parse_config
from strom.connect.data import ConfigError
from strom.testing.broker_process import BrokerProcess
from strom.testing.postgres_process import PostgresProcess, pg_bin_dir

from .test_connect import consume_all, drop_last_commit, run_once

pytestmark = [pytest.mark.spark, pytest.mark.integration]


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresProcess]:
    if pg_bin_dir() is None:
        pytest.skip("PostgreSQL server binaries (initdb, postgres) not found: apt-get install postgresql")
    pytest.importorskip("psycopg", reason="psycopg (PyPI) is needed by the PostgreSQL connectors")
    p = PostgresProcess().start()
    try:
        yield p
    finally:
        p.stop()


def sql(pg: PostgresProcess, *stmts: str) -> list[Any]:
    import psycopg

    out: list[Any] = []
    with psycopg.connect(pg.dsn, autocommit=True) as c:
        c.execute("SET TIME ZONE 'UTC'")
        for s in stmts:
            cur = c.execute(s)
            if cur.description is not None:
                out = cur.fetchall()
    return out


def payloads(bs: str, topic: str, n: int) -> list[Any]:
    return [json.loads(m.value())["payload"] for m in consume_all(bs, topic, n)]


def test_jdbc_source_incrementing_restart_exact(
    spark: Any, kbroker: BrokerProcess, pg: PostgresProcess, tmp_path: Path
) -> None:
    bs = kbroker.bootstrap
    sql(pg, "CREATE TABLE orders (id SERIAL PRIMARY KEY, item TEXT NOT NULL, qty INT, price NUMERIC(8,2))")
    sql(
        pg,
        "INSERT INTO orders (item, qty, price) SELECT 'item' || i, i, i * 1.25 FROM generate_series(1, 7) i",
    )
    cfg = {
        "name": "jdbc-inc",
        "config": {
            "connector.class": "io.confluent.connect.jdbc.JdbcSourceConnector",
            "connection.url": pg.jdbc_url,
            "connection.user": pg.user,
            "mode": "incrementing",
            "incrementing.column.name": "id",
            "table.whitelist": "orders",
            "topic.prefix": "pg-",
            "batch.max.rows": "3",  # several micro-batches
        },
    }
    state = tmp_path / "state"
    r = run_once(spark, cfg, bs, state)
    assert r.records_out == 7
    msgs = consume_all(bs, "pg-orders", 7)
    first = json.loads(msgs[0].value())
    assert msgs[0].key() is None
    assert first["schema"]["name"] == "orders"
    assert [(f["field"], f["type"], f["optional"]) for f in first["schema"]["fields"]] == [
        ("id", "int32", False),
        ("item", "string", False),
        ("qty", "int32", True),
        ("price", "bytes", True),
    ]
    assert first["schema"]["fields"][3]["name"] == "org.apache.kafka.connect.data.Decimal"
    assert first["payload"]["id"] == 1 and first["payload"]["item"] == "item1"
    assert first["payload"]["price"] == "fQ=="  # 1.25 at scale 2: unscaled 125 (0x7d), base64

    # stop, insert more, restart: only the new rows
    sql(pg, "INSERT INTO orders (item, qty) SELECT 'more' || i, i FROM generate_series(1, 4) i")
    run_once(spark, cfg, bs, state)
    got = payloads(bs, "pg-orders", 11)
    assert [p["id"] for p in got] == list(range(1, 12))

    # a replayed micro-batch (its commit dropped) and a run without a checkpoint: nothing doubled
    drop_last_commit(state)
    run_once(spark, cfg, bs, state)
    shutil.rmtree(state)
    sql(pg, "INSERT INTO orders (item) VALUES ('last')")
    run_once(spark, cfg, bs, state)
    got = payloads(bs, "pg-orders", 12)
    assert [p["id"] for p in got] == list(range(1, 13))
    offs = [m for m in consume_all(bs, "connect-offsets", 1) if json.loads(m.key())[0] == "jdbc-inc"]
    assert json.loads(offs[-1].key()) == ["jdbc-inc", {"protocol": "1", "table": "strom.public.orders"}]
    assert json.loads(offs[-1].value()) == {"incrementing": 12}


@pytest.mark.parametrize("mode", ["timestamp+incrementing", "timestamp"])
def test_jdbc_source_timestamp_modes_restart_exact(
    spark: Any, kbroker: BrokerProcess, pg: PostgresProcess, tmp_path: Path, mode: str
) -> None:
    bs = kbroker.bootstrap
    table = "items_" + mode.replace("+", "_")
    sql(
        pg,
        f"CREATE TABLE {table} (id SERIAL PRIMARY KEY, name TEXT, modified TIMESTAMP NOT NULL)",
        f"INSERT INTO {table} (name, modified) VALUES ('a', '2026-01-01 00:00:01'), "
        "('b', '2026-01-01 00:00:02'), ('c', '2026-01-01 00:00:02.5')",
    )
    cfg = {
        "name": f"jdbc-{table}",
        "config": {
            "connector.class": "JdbcSourceConnector",
            "connection.url": f"{pg.jdbc_url}?user={pg.user}",
            "mode": mode,
            "incrementing.column.name": "id" if "incrementing" in mode else "",
            "timestamp.column.name": "modified",
            "table.include.list": f"public\\.{table}",
            "topic.prefix": "ts-",
            "batch.max.rows": "2",
        },
    }
    state = tmp_path / "state"
    run_once(spark, cfg, bs, state)
    got = payloads(bs, f"ts-{table}", 3)
    assert [(p["id"], p["name"]) for p in got] == [(1, "a"), (2, "b"), (3, "c")]
    assert got[0]["modified"] == 1767225601000  # Connect Timestamp: ms since the epoch

    # stop; an update (newer timestamp) and an insert; restart: exactly those two, in order
    sql(
        pg,
        f"UPDATE {table} SET name = 'a2', modified = '2026-01-01 00:00:05' WHERE id = 1",
        f"INSERT INTO {table} (name, modified) VALUES ('d', '2026-01-01 00:00:04')",
    )
    run_once(spark, cfg, bs, state)
    drop_last_commit(state)
    run_once(spark, cfg, bs, state)  # a replay: not produced again
    got = payloads(bs, f"ts-{table}", 5)
    assert [(p["id"], p["name"]) for p in got] == [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (1, "a2")]
    offs = [m for m in consume_all(bs, "connect-offsets", 1) if json.loads(m.key())[0] == f"jdbc-{table}"]
    last = json.loads(offs[-1].value())
    assert last["timestamp"] == 1767225605000 and last["timestamp_nanos"] == 0
    assert ("incrementing" in last) == ("incrementing" in mode)


def _produce_json(bs: str, topic: str, items: list[tuple[Any, Any]]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs})
    for k, v in items:
        p.produce(topic, key=None if k is None else json.dumps(k), value=None if v is None else json.dumps(v))
    assert p.flush(15) == 0


ROW_SCHEMA = {
    "type": "struct",
    "name": "person",
    "optional": False,
    "fields": [
        {"field": "id", "type": "int64", "optional": False},
        {"field": "name", "type": "string", "optional": False},
        {"field": "score", "type": "float64", "optional": True},
        {
            "field": "born",
            "type": "int64",
            "optional": True,
            "name": "org.apache.kafka.connect.data.Timestamp",
        },
    ],
}
KEY_SCHEMA = {
    "type": "struct",
    "optional": False,
    "fields": [{"field": "id", "type": "int64", "optional": False}],
}


def _row(i: int, name: str, score: float | None = None) -> dict[str, Any]:
    return {"schema": ROW_SCHEMA, "payload": {"id": i, "name": name, "score": score, "born": 86_400_000 * i}}


def _key(i: int) -> dict[str, Any]:
    return {"schema": KEY_SCHEMA, "payload": {"id": i}}


def test_jdbc_sink_insert_and_upsert_auto_create(
    spark: Any, kbroker: BrokerProcess, pg: PostgresProcess, tmp_path: Path
) -> None:
    bs = kbroker.bootstrap
    _produce_json(bs, "people", [(_key(i), _row(i, f"p{i}", i / 2)) for i in range(1, 5)])
    base = {
        "connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector",
        "connection.url": pg.jdbc_url,
        "connection.user": pg.user,
        "topics": "people",
        "auto.create": "true",
    }
    # insert mode: auto-created table named after the topic, no primary key
    ins = {"name": "sink-ins", "config": dict(base, **{"table.name.format": "people_log"})}
    run_once(spark, ins, bs, tmp_path / "ins")
    rows = sql(pg, "SELECT id, name, score, born FROM people_log ORDER BY id")
    assert [(r[0], r[1], r[2]) for r in rows] == [(i, f"p{i}", i / 2) for i in range(1, 5)]
    assert str(rows[0][3]) == "1970-01-02 00:00:00"
    cols = sql(
        pg,
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_name = 'people_log' ORDER BY ordinal_position",
    )
    assert cols == [
        ("id", "bigint", "NO"),
        ("name", "text", "NO"),
        ("score", "double precision", "YES"),
        ("born", "timestamp without time zone", "YES"),
    ]
    # a replayed batch is recognised by the offsets stored with the rows: not inserted twice
    drop_last_commit(tmp_path / "ins")
    run_once(spark, ins, bs, tmp_path / "ins")
    assert sql(pg, "SELECT count(*) FROM people_log") == [(4,)]

    # upsert keyed by the record key, with deletes on tombstones
    up = {
        "name": "sink-up",
        "config": dict(
            base,
            **{"insert.mode": "upsert", "pk.mode": "record_key", "pk.fields": "id", "delete.enabled": "true"},
        ),
    }
    run_once(spark, up, bs, tmp_path / "up")
    assert sql(pg, "SELECT count(*) FROM people") == [(4,)]
    pk = sql(
        pg,
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'people'::regclass AND i.indisprimary",
    )
    assert pk == [("id",)]
    _produce_json(bs, "people", [(_key(2), _row(2, "two", 9.5)), (_key(5), _row(5, "p5")), (_key(3), None)])
    run_once(spark, up, bs, tmp_path / "up")
    assert sql(pg, "SELECT id, name, score FROM people ORDER BY id") == [
        (1, "p1", 0.5),
        (2, "two", 9.5),
        (4, "p4", 2.0),
        (5, "p5", None),
    ]
    # the insert-mode table got the new rows too (the tombstone is ignored without delete.enabled)
    run_once(spark, ins, bs, tmp_path / "ins")
    assert sql(pg, "SELECT count(*) FROM people_log") == [(6,)]

    # a record the table cannot take (a new required field, auto.evolve off) fails alone at
    # TASK_PUT and goes to the dead letter queue; the others of its batch are written
    extra = dict(
        ROW_SCHEMA, fields=[*ROW_SCHEMA["fields"], {"field": "x", "type": "int32", "optional": False}]
    )
    _produce_json(
        bs,
        "people-more",
        [
            (None, _row(7, "p7")),
            (None, {"schema": extra, "payload": dict(_row(8, "p8")["payload"], x=1)}),
            (None, _row(9, "p9")),
        ],
    )
    dlq = {
        "name": "sink-dlq",
        "config": dict(
            base,
            **{
                "topics": "people-more",
                "table.name.format": "people_log",
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": "people-dlq",
                "errors.deadletterqueue.context.headers.enable": "true",
            },
        ),
    }
    run_once(spark, dlq, bs, tmp_path / "dlq")
    assert sql(pg, "SELECT id FROM people_log WHERE id > 6 ORDER BY id") == [(7,), (9,)]
    dead = consume_all(bs, "people-dlq", 1)
    assert len(dead) == 1 and json.loads(dead[0].value())["payload"]["id"] == 8
    headers = dict(dead[0].headers() or [])
    assert headers["__connect.errors.stage"] == b"TASK_PUT"
    assert b"auto.evolve is disabled" in headers["__connect.errors.exception.message"]


CDC_BASE = {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "plugin.name": "pgoutput",
    "database.user": "strom",
    "database.dbname": "strom",
    "topic.prefix": "dbserver1",
    "table.include.list": "inventory\\.customers",
    "slot.name": "strom_cdc",
    "publication.name": "strom_pub",
    "publication.autocreate.mode": "filtered",
}


def _env(m: Any) -> tuple[Any, Any]:
    k = json.loads(m.key()) if m.key() is not None else None
    v = json.loads(m.value()) if m.value() is not None else None
    return k, v


def test_cdc_snapshot_then_stream_debezium_envelope(
    spark: Any, kbroker: BrokerProcess, pg: PostgresProcess, tmp_path: Path
) -> None:
    bs = kbroker.bootstrap
    sql(
        pg,
        "CREATE SCHEMA inventory",
        "CREATE TABLE inventory.customers (id INT PRIMARY KEY, email TEXT NOT NULL, "
        "balance NUMERIC(10,2), joined DATE, seen TIMESTAMPTZ)",
        "INSERT INTO inventory.customers VALUES (1001, 'sally@example.com', 12.50, '2020-01-02', "
        "'2026-03-04 05:06:07.25+00'), (1002, 'george@example.com', NULL, NULL, NULL)",
        "CREATE TABLE inventory.other (id INT PRIMARY KEY)",
        "INSERT INTO inventory.other VALUES (1)",
    )
    cfg = {
        "name": "cdc",
        "config": dict(
            CDC_BASE,
            **{"database.hostname": pg.host, "database.port": str(pg.port), "poll.interval.ms": "200"},
        ),
    }
    state = tmp_path / "state"
    topic = "dbserver1.inventory.customers"
    run_once(spark, cfg, bs, state)
    snap = [_env(m) for m in consume_all(bs, topic, 2)]
    assert len(snap) == 2
    (k1, v1), (_k2, v2) = snap
    assert k1 == {
        "schema": {
            "type": "struct",
            "fields": [{"type": "int32", "optional": False, "field": "id"}],
            "optional": False,
            "name": "dbserver1.inventory.customers.Key",
        },
        "payload": {"id": 1001},
    }
    p1 = v1["payload"]
    assert v1["schema"]["name"] == "dbserver1.inventory.customers.Envelope"
    assert [f["field"] for f in v1["schema"]["fields"]] == [
        "before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns",
    ]  # fmt: skip
    after_fields = {f["field"]: f for f in v1["schema"]["fields"][1]["fields"]}
    assert after_fields["balance"]["name"] == "org.apache.kafka.connect.data.Decimal"
    assert after_fields["balance"]["parameters"] == {"scale": "2", "connect.decimal.precision": "10"}
    assert after_fields["joined"]["name"] == "io.debezium.time.Date"
    assert after_fields["seen"]["name"] == "io.debezium.time.ZonedTimestamp"
    assert after_fields["email"]["optional"] is False
    assert p1["op"] == "r" and p1["before"] is None
    assert p1["after"] == {
        "id": 1001,
        "email": "sally@example.com",
        "balance": "BOI=",  # 12.50: unscaled 1250
        "joined": 18263,
        "seen": "2026-03-04T05:06:07.25Z",
    }
    src = p1["source"]
    assert (src["connector"], src["name"], src["db"], src["schema"], src["table"]) == (
        "postgresql", "dbserver1", "strom", "inventory", "customers",
    )  # fmt: skip
    assert src["snapshot"] == "first" and v2["payload"]["source"]["snapshot"] == "last"
    assert isinstance(src["lsn"], int) and src["txId"] is None and isinstance(p1["ts_ms"], int)
    assert v2["payload"]["after"]["balance"] is None

    # streaming: insert, update, delete (and a change in a table that is not captured)
    sql(
        pg,
        "INSERT INTO inventory.customers VALUES (1003, 'edward@example.com', 7, '2021-05-06', NULL)",
        "UPDATE inventory.customers SET email = 'sally@new.example.com' WHERE id = 1001",
        "DELETE FROM inventory.customers WHERE id = 1002",
        "INSERT INTO inventory.other VALUES (2)",
    )
    run_once(spark, cfg, bs, state)
    evs = [_env(m) for m in consume_all(bs, topic, 6)]
    assert len(evs) == 6
    (ck, cv), (uk, uv), (dk, dv), (tk, tv) = evs[2:]
    assert cv["payload"]["op"] == "c" and cv["payload"]["before"] is None
    assert cv["payload"]["after"] == {
        "id": 1003,
        "email": "edward@example.com",
        "balance": "Arw=",  # 7.00: unscaled 700
        "joined": 18753,
        "seen": None,
    }
    assert ck["payload"] == {"id": 1003}
    assert uv["payload"]["op"] == "u" and uk["payload"] == {"id": 1001}
    assert uv["payload"]["before"] is None  # REPLICA IDENTITY DEFAULT: no old row, as in Debezium
    assert uv["payload"]["after"]["email"] == "sally@new.example.com"
    assert uv["payload"]["after"]["seen"] == "2026-03-04T05:06:07.25Z"
    usrc = uv["payload"]["source"]
    assert usrc["snapshot"] == "false" and isinstance(usrc["txId"], int) and usrc["lsn"] > src["lsn"]
    assert dv["payload"]["op"] == "d" and dk["payload"] == {"id": 1002}
    assert dv["payload"]["after"] is None
    # REPLICA IDENTITY DEFAULT: the old key only; NOT NULL columns get their type's zero (Debezium)
    assert dv["payload"]["before"] == {"id": 1002, "email": "", "balance": None, "joined": None, "seen": None}
    assert tk == dk and tv is None  # the tombstone after the delete
    assert cv["payload"]["source"]["txId"] < uv["payload"]["source"]["txId"] < dv["payload"]["source"]["txId"]

    # restart-exact: a replayed batch, then a run without the checkpoint resumes from the stored LSN
    drop_last_commit(state)
    run_once(spark, cfg, bs, state)
    shutil.rmtree(state)
    sql(pg, "UPDATE inventory.customers SET balance = 1.05 WHERE id = 1003")
    run_once(spark, cfg, bs, state)
    evs = [_env(m) for m in consume_all(bs, topic, 7)]
    assert len(evs) == 7
    assert evs[6][1]["payload"]["op"] == "u" and evs[6][1]["payload"]["after"]["balance"] == "aQ=="
    offs = [m for m in consume_all(bs, "connect-offsets", 1) if json.loads(m.key())[0] == "cdc"]
    assert json.loads(offs[-1].key()) == ["cdc", {"server": "dbserver1"}]
    stored = json.loads(offs[-1].value())
    assert stored["lsn"] > evs[6][1]["payload"]["source"]["lsn"]  # the transaction's end
    assert stored["txId"] == evs[6][1]["payload"]["source"]["txId"]
    slot = sql(pg, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'strom_cdc'")
    assert slot and slot[0][0] != "0/0"


@pytest.mark.slow
def test_cdc_schemaless_json_converter(
    spark: Any, kbroker: BrokerProcess, pg: PostgresProcess, tmp_path: Path
) -> None:
    bs = kbroker.bootstrap
    sql(pg, "CREATE TABLE plain (id BIGINT PRIMARY KEY, v TEXT)", "INSERT INTO plain VALUES (1, 'x')")
    cfg = {
        "name": "cdc-plain",
        "config": dict(
            CDC_BASE,
            **{
                "database.hostname": pg.host,
                "database.port": str(pg.port),
                "table.include.list": "public\\.plain",
                "slot.name": "plain_slot",
                "publication.name": "plain_pub",
                "topic.prefix": "srv",
                "key.converter": "org.apache.kafka.connect.json.JsonConverter",
                "key.converter.schemas.enable": "false",
                "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                "value.converter.schemas.enable": "false",
            },
        ),
    }
    run_once(spark, cfg, bs, tmp_path / "s")
    sql(pg, "ALTER TABLE plain REPLICA IDENTITY FULL", "UPDATE plain SET v = 'y' WHERE id = 1")
    assert sql(pg, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'plain_slot'") == [(1,)]
    cfg["config"]["slot.drop.on.stop"] = "true"  # type: ignore[index]
    run_once(spark, cfg, bs, tmp_path / "s")
    assert sql(pg, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'plain_slot'") == [(0,)]
    evs = [_env(m) for m in consume_all(bs, "srv.public.plain", 2)]
    assert [k for k, _ in evs] == [{"id": 1}, {"id": 1}]
    assert [(v["op"], v["after"]) for _, v in evs] == [("r", {"id": 1, "v": "x"}), ("u", {"id": 1, "v": "y"})]
    assert evs[1][1]["before"] == {"id": 1, "v": "x"}  # REPLICA IDENTITY FULL: the old row
    assert set(evs[1][1]) == {"before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {
                "connector.class": "JdbcSourceConnector",
                "connection.url": "jdbc:mysql://h/db",
                "mode": "incrementing",
            },
            "speak to PostgreSQL only",
        ),
        (
            {
                "connector.class": "JdbcSourceConnector",
                "connection.url": "jdbc:postgresql://h/db",
                "mode": "bulkish",
            },
            "Invalid value bulkish for configuration mode",
        ),
        (
            {
                "connector.class": "JdbcSourceConnector",
                "connection.url": "jdbc:postgresql://h/db",
                "mode": "timestamp",
            },
            "needs timestamp.column.name",
        ),
        (
            {
                "connector.class": "JdbcSinkConnector",
                "connection.url": "jdbc:postgresql://h/db",
                "topics": "t",
                "insert.mode": "upsert",
            },
            "needs a primary key",
        ),
        (dict(CDC_BASE, **{"database.hostname": "h", "plugin.name": "decoderbufs"}), "pgoutput plugin only"),
        (dict(CDC_BASE, **{"database.hostname": "h", "snapshot.mode": "sometimes"}), "snapshot.mode"),
        (dict(CDC_BASE, **{"database.hostname": "h", "database.port": "x"}), "database.port"),
        (
            {k: v for k, v in CDC_BASE.items() if k != "topic.prefix"} | {"database.hostname": "h"},
            "topic.prefix",
        ),
    ],
)
def test_bad_config_one_line(config: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config({"name": "bad", "config": config})
    assert message in str(e.value) and "\n" not in str(e.value)


def test_unreachable_database_is_one_line(spark: Any, kbroker: BrokerProcess, tmp_path: Path) -> None:
    from strom.connect.runtime import ConnectorRun
    from strom.testing.postgres_process import _free_port

    cfg = parse_config(
        {
            "name": "nodb",
            "config": {
                "connector.class": "JdbcSinkConnector",
                "connection.url": f"jdbc:postgresql://127.0.0.1:{_free_port()}/x",
                "topics": "t",
            },
        }
    )
    with pytest.raises(ConnectionError) as e:
        ConnectorRun(cfg, kbroker.bootstrap, tmp_path).start(spark, once=True)
    assert "cannot connect to PostgreSQL" in str(e.value) and "\n" not in str(e.value)
