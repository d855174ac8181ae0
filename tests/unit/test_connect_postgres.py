"""The PostgreSQL connectors' pure parts: JDBC URLs, the text-form type mapping (Debezium's and
Confluent's), the pgoutput protocol decoder (messages built byte by byte from the protocol's
documented layout), offsets."""

from __future__ import annotations

import datetime as dt
import decimal
import struct

import pytest

from strom.connect import postgres as P
from strom.connect.data import ConfigError


def test_jdbc_url() -> None:
    dsn = P.parse_jdbc_url("jdbc:postgresql://db.example:6543/shop?user=u&password=p'w", "", "")
    assert "host='db.example'" in dsn and "port=6543" in dsn and "dbname='shop'" in dsn
    assert "user='u'" in dsn and "password='p\\'w'" in dsn
    # connection.user/password win over the URL's
    assert "user='admin'" in P.parse_jdbc_url("jdbc:postgresql://h/db?user=u", "admin", "")
    assert "port=5432" in P.parse_jdbc_url("jdbc:postgresql://h/db")
    for bad in ("jdbc:mysql://h/db", "postgresql://h/db", "jdbc:postgresql://h", "jdbc:postgresql://h:x/db"):
        with pytest.raises(ConfigError):
            P.parse_jdbc_url(bad)
    assert "password=***" in P._safe("host=h password='secret'")


def col(oid: int, typmod: int = -1, nullable: bool = True) -> P.Column:
    return P.Column("c", oid, typmod, nullable)


def test_debezium_type_mapping() -> None:
    def dbz(c: P.Column, text: str | None) -> object:
        return P.text_value(c, P.column_schema(c, "debezium"), text)

    assert dbz(col(P.INT4), "-7") == -7 and dbz(col(P.BOOL), "t") is True and dbz(col(P.BOOL), "f") is False
    assert dbz(col(P.FLOAT8), "1.5") == 1.5 and dbz(col(P.TEXT), None) is None
    num = col(P.NUMERIC, ((10 << 16) | 2) + 4)
    s = P.column_schema(num, "debezium")
    assert s["name"] == "org.apache.kafka.connect.data.Decimal"
    assert s["parameters"] == {"scale": "2", "connect.decimal.precision": "10"}
    assert dbz(num, "12.50") == decimal.Decimal("12.50")
    # unconstrained numeric: Debezium's VariableScaleDecimal {scale, value}
    var = col(P.NUMERIC)
    assert P.column_schema(var, "debezium")["name"] == "io.debezium.data.VariableScaleDecimal"
    assert dbz(var, "-1.005") == {"scale": 3, "value": (-1005).to_bytes(2, "big", signed=True)}
    assert P.text_value(var, P.column_schema(var, "debezium", "string"), "1.5") == "1.5"
    assert P.text_value(var, P.column_schema(var, "debezium", "double"), "1.5") == 1.5
    assert dbz(col(P.DATE_), "1970-01-11") == 10
    assert dbz(col(P.TIME_), "01:00:00.5") == 3_600_500_000
    assert P.column_schema(col(P.TS), "debezium")["name"] == "io.debezium.time.MicroTimestamp"
    assert dbz(col(P.TS), "1970-01-01 00:00:01.000002") == 1_000_002
    assert P.column_schema(col(P.TS, 3), "debezium")["name"] == "io.debezium.time.Timestamp"
    assert dbz(col(P.TS, 3), "1970-01-01 00:00:01.5") == 1500
    assert dbz(col(P.TSTZ), "2026-03-04 05:06:07.25+02") == "2026-03-04T03:06:07.25Z"
    assert dbz(col(P.TSTZ), "2026-03-04 05:06:07+05:30") == "2026-03-03T23:36:07Z"
    assert dbz(col(P.BYTEA), "\\x00ff") == b"\x00\xff"
    assert P.column_schema(col(P.UUID), "debezium")["name"] == "io.debezium.data.Uuid"
    assert P.column_schema(col(P.JSONB), "debezium")["name"] == "io.debezium.data.Json"
    assert P.column_schema(col(P.INT2, nullable=False), "debezium") == {"type": "int16", "optional": False}


def test_jdbc_type_mapping() -> None:
    ts = col(P.TS)
    s = P.column_schema(ts, "jdbc")
    assert s["name"] == "org.apache.kafka.connect.data.Timestamp"
    assert P.text_value(ts, s, "2026-01-01 00:00:01") == dt.datetime(2026, 1, 1, 0, 0, 1, tzinfo=dt.UTC)
    d = col(P.DATE_)
    assert P.text_value(d, P.column_schema(d, "jdbc"), "2020-01-02") == dt.datetime(2020, 1, 2, tzinfo=dt.UTC)
    assert P.column_schema(col(P.UUID), "jdbc") == {"type": "string", "optional": True}


def test_offsets_and_lsn() -> None:
    assert P.lsn_int("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert P.lsn_str(P.lsn_int("0/1927278")) == "0/1927278"
    off = P._ts_offset(1_767_225_601_000_123)
    assert off == {"timestamp": 1_767_225_601_000, "timestamp_nanos": 123_000}
    assert P.ts_offset_micros(off) == 1_767_225_601_000_123
    assert P.jdbc_order("timestamp+incrementing", {**off, "incrementing": 4}) == (1_767_225_601_000_123, 4)
    assert P.jdbc_order("incrementing", {"incrementing": 9}) == (9,)


def test_match_tables() -> None:
    tables = [("public", "orders"), ("public", "order_lines"), ("inventory", "orders")]
    assert P.match_tables(tables, ["orders"], []) == [("public", "orders"), ("inventory", "orders")]
    assert P.match_tables(tables, ["inventory\\.orders"], []) == [("inventory", "orders")]
    assert P.match_tables(tables, [], ["order.*"]) == []
    assert P.match_tables(tables, [], [], ["public"]) == [("public", "orders"), ("public", "order_lines")]


def _tuple(*vals: str | None) -> bytes:
    out = struct.pack(">H", len(vals))
    for v in vals:
        out += b"n" if v is None else b"t" + struct.pack(">I", len(v.encode())) + v.encode()
    return out


def test_pgoutput_decoder() -> None:
    dec = P.PgOutputDecoder()
    pg_epoch_us = 1_000_000
    assert dec.decode(b"B" + struct.pack(">QqI", 0x100, pg_epoch_us, 731)) == ("begin", None)
    assert dec.xid == 731 and dec.commit_ts_us == P._PG_EPOCH_US + pg_epoch_us
    rel = (
        b"R"
        + struct.pack(">I", 16386)
        + b"inventory\x00customers\x00d"
        + struct.pack(">H", 2)
        + b"\x01id\x00"
        + struct.pack(">Ii", P.INT4, -1)
        + b"\x00email\x00"
        + struct.pack(">Ii", P.TEXT, -1)
    )
    assert dec.decode(rel) is None
    r = dec.relations[16386]
    assert (r.schema, r.table) == ("inventory", "customers")
    assert [(c.name, c.oid, c.key) for c in r.columns] == [("id", P.INT4, True), ("email", P.TEXT, False)]
    kind, (rel_, old, new) = dec.decode(b"I" + struct.pack(">I", 16386) + b"N" + _tuple("1", "a@b"))  # type: ignore[misc]
    assert kind == "insert" and rel_ is r and old is None and new == ["1", "a@b"]
    kind, (_, old, new) = dec.decode(  # type: ignore[misc]
        b"U" + struct.pack(">I", 16386) + b"O" + _tuple("1", "a@b") + b"N" + _tuple("1", None)
    )
    assert kind == "update" and old == ["1", "a@b"] and new == ["1", None]
    kind, (_, old, new) = dec.decode(b"D" + struct.pack(">I", 16386) + b"K" + _tuple("1", None))  # type: ignore[misc]
    assert kind == "delete" and old == ["1", P.KEY_ONLY] and new is None
    unchanged = struct.pack(">H", 2) + b"t" + struct.pack(">I", 1) + b"1" + b"u"
    _, (_, _, new) = dec.decode(b"U" + struct.pack(">I", 16386) + b"N" + unchanged)  # type: ignore[misc]
    assert new == ["1", P.UNCHANGED_TOAST]
    kind, payload = dec.decode(b"C" + struct.pack(">BQQq", 0, 0x100, 0x180, pg_epoch_us))  # type: ignore[misc]
    assert kind == "commit" and payload == (0x100, 0x180, P._PG_EPOCH_US + pg_epoch_us)


def test_debezium_events_delete_key_only_and_tombstone() -> None:
    ev = P.DebeziumEvents(
        {
            "topic.prefix": "srv",
            "database.dbname": "db",
            "decimal.handling.mode": "precise",
            "tombstones.on.delete": "true",
        }
    )
    cols = [P.Column("id", P.INT4, -1, False, True), P.Column("email", P.TEXT, -1, True, False)]
    ev._nullable[("s", "t")] = {"id": False, "email": False}
    rel = P.Relation("s", "t", cols)
    src = ev.source(rel, 5_000_000, "false", 7, 99)
    out = ev.events("d", rel, ["3", P.KEY_ONLY], None, src, {"lsn": 100}, (100,), '{"server":"srv"}')
    assert len(out) == 2
    assert out[0].topic == "srv.s.t" and out[0].key == {"id": 3}
    assert out[0].value["before"] == {"id": 3, "email": ""} and out[0].value["op"] == "d"
    assert out[0].key_schema["name"] == "srv.s.t.Key"  # type: ignore[index]
    assert out[1].value is None and out[1].value_schema is None and out[1].key == {"id": 3}
    assert src["ts_ms"] == 5000 and src["txId"] == 7 and src["lsn"] == 99 and src["connector"] == "postgresql"
