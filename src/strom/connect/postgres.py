"""PostgreSQL connectors: Confluent's JDBC source and sink, and Debezium's PostgreSQL change
data capture, through psycopg (libpq).

* **JDBC source** (``mode`` = ``incrementing`` | ``timestamp`` | ``timestamp+incrementing``): each
  poll reads the rows after the stored position of each table (``WHERE id > ?`` / ``WHERE ts > ?
  AND ts <= ?`` / ``WHERE (ts, id) > (?, ?) AND ...``, ordered, at most ``batch.max.rows`` per
  table); the position is Confluent's offset (``{"incrementing": N}``, ``{"timestamp": ms,
  "timestamp_nanos": ns}``) under the key ``{"protocol": "1", "table": "<db>.<schema>.<table>"}``.
* **JDBC sink**: ``INSERT`` or ``INSERT ... ON CONFLICT (pk) DO UPDATE`` (upsert), ``CREATE TABLE``
  from the record schema (``auto.create``), ``ALTER TABLE ... ADD COLUMN`` for new optional fields
  (``auto.evolve``), ``DELETE`` on a tombstone (``delete.enabled``). The Kafka position of each
  topic partition is kept in the table ``strom_connect_offsets`` and written in the same database
  transaction as the rows, so a replayed micro-batch is recognised and not written twice.
* **CDC** (``io.debezium.connector.postgresql.PostgresConnector``, ``plugin.name=pgoutput``): the
  slot is created through a replication connection with ``EXPORT_SNAPSHOT``, the snapshot (``op``
  ``r``) is read in that exported snapshot, then the changes are decoded from the slot with
  ``pg_logical_slot_peek_binary_changes`` (pgoutput protocol 1) and the slot advanced only after
  the events are committed to Kafka. Events carry Debezium's envelope.

Values are read in PostgreSQL's text form and mapped by type OID (:func:`column_schema`), so the
snapshot (``SELECT col::text``), the replication stream and the JDBC source share one mapping.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import re
import struct
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from strom.connect.data import DATE, DECIMAL, TIME, TIMESTAMP, ConfigError, Schema

JDBC_SOURCE = "io.confluent.connect.jdbc.JdbcSourceConnector"
JDBC_SINK = "io.confluent.connect.jdbc.JdbcSinkConnector"
PG_CDC = "io.debezium.connector.postgresql.PostgresConnector"
DEBEZIUM_VERSION = "2.7.3.Final"
OFFSETS_TABLE = "strom_connect_offsets"

# -- connecting ----------------------------------------------------------------------------------


def parse_jdbc_url(url: str, user: str = "", password: str = "") -> str:
    """A libpq conninfo string for ``jdbc:postgresql://host[:port]/db[?user=..&password=..]``."""
    u = url.strip()
    if not u.startswith("jdbc:postgresql:"):
        raise ConfigError(
            f"Invalid value {url} for configuration connection.url: strom's JDBC connectors speak to "
            "PostgreSQL only (jdbc:postgresql://host:port/database)"
        )
    p = urlparse(u[len("jdbc:") :])
    if not p.netloc or not p.path.strip("/"):
        raise ConfigError(
            f"Invalid value {url} for configuration connection.url: expected "
            "jdbc:postgresql://host:port/database"
        )
    q = {k: v[-1] for k, v in parse_qs(p.query).items()}
    try:
        port = p.port or 5432
    except ValueError:
        raise ConfigError(f"Invalid value {url} for configuration connection.url: bad port") from None
    return conninfo(
        p.hostname or "localhost",
        port,
        unquote(p.path.strip("/")),
        user or q.get("user", ""),
        password or q.get("password", ""),
    )


def conninfo(host: str, port: int, db: str, user: str, password: str) -> str:
    def q(v: str) -> str:
        return "'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'"

    parts = [f"host={q(host)}", f"port={port}", f"dbname={q(db)}", "connect_timeout=10"]
    if user:
        parts.append(f"user={q(user)}")
    if password:
        parts.append(f"password={q(password)}")
    return " ".join(parts)


def connect(dsn: str, autocommit: bool = True, **kw: Any) -> Any:
    import psycopg

    try:
        conn = psycopg.connect(dsn, autocommit=autocommit, **kw)
    except psycopg.OperationalError as e:
        msg = " ".join(str(e).split())
        raise ConnectionError(f"cannot connect to PostgreSQL ({_safe(dsn)}): {msg}") from None
    conn.execute("SET TIME ZONE 'UTC'")
    return conn


def _safe(dsn: str) -> str:
    return re.sub(r"password=('[^']*'|\S+)", "password=***", dsn)


def qident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def qualified(schema: str, table: str) -> str:
    return f"{qident(schema)}.{qident(table)}"


# -- types ---------------------------------------------------------------------------------------

BOOL, BYTEA, INT8, INT2, INT4, TEXT, JSON_, FLOAT4, FLOAT8 = 16, 17, 20, 21, 23, 25, 114, 700, 701
BPCHAR, VARCHAR, DATE_, TIME_, TS, TSTZ, NUMERIC, UUID, JSONB = (
    1042,
    1043,
    1082,
    1083,
    1114,
    1184,
    1700,
    2950,
    3802,
)


@dataclass
class Column:
    name: str
    oid: int
    typmod: int
    nullable: bool = True
    key: bool = False


def _numeric_ps(typmod: int) -> tuple[int, int] | None:
    if typmod < 4:
        return None
    t = typmod - 4
    return (t >> 16) & 0xFFFF, t & 0xFFFF


def column_schema(col: Column, flavor: str, decimal_mode: str = "precise") -> Schema:
    """The Connect schema of a column: ``flavor`` ``debezium`` (Debezium's PostgreSQL mapping,
    ``time.precision.mode=adaptive``) or ``jdbc`` (Confluent's JDBC source mapping)."""
    o = col.oid
    s: Schema
    if o == BOOL:
        s = {"type": "boolean"}
    elif o == INT2:
        s = {"type": "int16"}
    elif o == INT4:
        s = {"type": "int32"}
    elif o == INT8:
        s = {"type": "int64"}
    elif o == FLOAT4:
        s = {"type": "float32"}
    elif o == FLOAT8:
        s = {"type": "float64"}
    elif o == BYTEA:
        s = {"type": "bytes"}
    elif o == NUMERIC:
        ps = _numeric_ps(col.typmod)
        if decimal_mode == "double":
            s = {"type": "float64"}
        elif decimal_mode == "string":
            s = {"type": "string"}
        elif ps is None and flavor == "debezium":
            s = {
                "type": "struct",
                "name": "io.debezium.data.VariableScaleDecimal",
                "version": 1,
                "doc": "Variable scaled decimal",
                "fields": [
                    {"field": "scale", "type": "int32", "optional": False},
                    {"field": "value", "type": "bytes", "optional": False},
                ],
            }
        else:
            p, sc = ps if ps is not None else (0, 0)
            params = {"scale": str(sc)}
            if flavor == "debezium" or ps is not None:
                params["connect.decimal.precision"] = str(p)
            s = {"type": "bytes", "name": DECIMAL, "version": 1, "parameters": params}
    elif o == DATE_:
        s = (
            {"type": "int32", "name": "io.debezium.time.Date", "version": 1}
            if flavor == "debezium"
            else {
                "type": "int32",
                "name": DATE,
                "version": 1,
            }
        )
    elif o == TIME_:
        s = (
            {"type": "int64", "name": "io.debezium.time.MicroTime", "version": 1}
            if flavor == "debezium"
            else {"type": "int32", "name": TIME, "version": 1}
        )
    elif o == TS:
        if flavor == "debezium":
            if 0 <= col.typmod <= 3:
                s = {"type": "int64", "name": "io.debezium.time.Timestamp", "version": 1}
            else:
                s = {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "version": 1}
        else:
            s = {"type": "int64", "name": TIMESTAMP, "version": 1}
    elif o == TSTZ:
        s = (
            {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "version": 1}
            if flavor == "debezium"
            else {"type": "int64", "name": TIMESTAMP, "version": 1}
        )
    elif o == UUID and flavor == "debezium":
        s = {"type": "string", "name": "io.debezium.data.Uuid", "version": 1}
    elif o in (JSON_, JSONB) and flavor == "debezium":
        s = {"type": "string", "name": "io.debezium.data.Json", "version": 1}
    else:
        s = {"type": "string"}
    s["optional"] = col.nullable
    return s


_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _parse_ts(text: str) -> dt.datetime:
    """PostgreSQL's text form of timestamp / timestamptz (ISO DateStyle, session zone UTC)."""
    t = text.strip()
    if t in ("infinity", "-infinity"):
        raise ValueError(f"timestamp {t} has no Connect representation")
    m = re.fullmatch(
        r"(\d{4,})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d+))?([+-]\d\d(?::?\d\d)?(?::\d\d)?)?( BC)?", t
    )
    if not m:
        raise ValueError(f"unparseable timestamp {t!r}")
    y, mo, d, h, mi, s, frac, tz, bc = m.groups()
    if bc:
        raise ValueError(f"timestamp {t} (BC) has no Connect representation")
    us = int((frac or "0").ljust(6, "0")[:6])
    v = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), us, tzinfo=dt.UTC)
    if tz:
        sign = -1 if tz[0] == "-" else 1
        parts = tz[1:].replace(":", "")
        off = dt.timedelta(hours=int(parts[:2]), minutes=int(parts[2:4] or 0), seconds=int(parts[4:6] or 0))
        v = v - sign * off
    return v


def _micros(v: dt.datetime) -> int:
    d = v - _EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def text_value(col: Column, schema: Schema, text: str | None) -> Any:
    """A column's text form as the Connect value of ``schema``."""
    if text is None:
        return None
    o, t, name = col.oid, schema["type"], schema.get("name")
    if t == "boolean":
        return text in ("t", "true")
    if t in ("int16", "int32", "int64") and name is None:
        return int(text)
    if t in ("float32", "float64"):
        return float(text)
    if t == "bytes" and name is None:
        return bytes.fromhex(text[2:]) if text.startswith("\\x") else text.encode()
    if name == DECIMAL:
        return decimal.Decimal(text)
    if name == "io.debezium.data.VariableScaleDecimal":
        d = decimal.Decimal(text)
        if not d.is_finite():
            raise ValueError(f"numeric {text} has no Connect representation")
        exp = int(d.as_tuple().exponent)
        scale = max(0, -exp)
        unscaled = int(d.scaleb(scale))
        n = max(1, (unscaled.bit_length() + 8) // 8)
        return {"scale": scale, "value": unscaled.to_bytes(n, "big", signed=True)}
    if name == "io.debezium.time.Date":
        return (dt.date.fromisoformat(text) - _EPOCH_DATE).days
    if name == DATE:
        return dt.datetime.combine(dt.date.fromisoformat(text), dt.time(), tzinfo=dt.UTC)
    if name in ("io.debezium.time.MicroTime", TIME):
        hh, mm, ss = text.split(":")
        us = (int(hh) * 3600 + int(mm) * 60) * 1_000_000 + round(float(ss) * 1_000_000)
        return us if name != TIME else _EPOCH + dt.timedelta(microseconds=us)
    if name == "io.debezium.time.MicroTimestamp":
        return _micros(_parse_ts(text))
    if name == "io.debezium.time.Timestamp":
        return _micros(_parse_ts(text)) // 1000
    if name == "io.debezium.time.ZonedTimestamp":
        v = _parse_ts(text)
        s = v.strftime("%Y-%m-%dT%H:%M:%S")
        if v.microsecond:
            s += ("." + f"{v.microsecond:06d}").rstrip("0")
        return s + "Z"
    if name == TIMESTAMP:
        return _parse_ts(text)
    if t == "float64" and o == NUMERIC:
        return float(text)
    return text


def table_columns(conn: Any, schema: str, table: str) -> list[Column]:
    rows = conn.execute(
        """
        SELECT a.attname, a.atttypid::int, a.atttypmod, NOT a.attnotnull,
               COALESCE(a.attnum = ANY(i.indkey), false)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
        WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum
        """,
        (schema, table),
    ).fetchall()
    return [Column(r[0], r[1], r[2], r[3], r[4]) for r in rows]


def list_tables(conn: Any) -> list[tuple[str, str]]:
    rows = conn.execute(
        """
        SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname NOT LIKE 'pg_toast%%' AND c.relname <> %s
        ORDER BY 1, 2
        """,
        (OFFSETS_TABLE,),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def match_tables(
    tables: list[tuple[str, str]], include: list[str], exclude: list[str], schemas: list[str] | None = None
) -> list[tuple[str, str]]:
    """Tables whose ``schema.table`` fully matches one of ``include`` (regexes; a bare name also
    matches the table name alone, as the JDBC connector's whitelist does) and none of ``exclude``."""

    def hit(pats: list[str], s: str, t: str) -> bool:
        return any(re.fullmatch(p, f"{s}.{t}") or re.fullmatch(p, t) for p in pats)

    out = []
    for s, t in tables:
        if schemas and not any(re.fullmatch(p, s) for p in schemas):
            continue
        if include and not hit(include, s, t):
            continue
        if exclude and hit(exclude, s, t):
            continue
        out.append((s, t))
    return out


def split_list(v: str) -> list[str]:
    return [x.strip() for x in v.split(",") if x.strip()]


def check_regexes(key: str, pats: list[str]) -> None:
    for p in pats:
        try:
            re.compile(p)
        except re.error as e:
            raise ConfigError(f"Invalid value {p} for configuration {key}: {e}") from None


# -- JDBC source ---------------------------------------------------------------------------------


@dataclass
class SourceEvent:
    """One record a PostgreSQL source produces, with the source offset after it."""

    topic: str
    key_schema: Schema | None
    key: Any
    value_schema: Schema | None
    value: Any
    timestamp: int | None
    part_key: str  # the source partition (JSON of Connect's partition map)
    offset: dict[str, Any]  # the source offset after this record
    order: tuple[int, ...]  # comparable position within part_key


def _ts_offset(micros: int) -> dict[str, int]:
    ms = micros // 1000
    return {"timestamp": ms, "timestamp_nanos": (micros % 1_000_000) * 1000}


def ts_offset_micros(off: dict[str, Any]) -> int | None:
    if "timestamp" not in off:
        return None
    ms = int(off["timestamp"])
    nanos = int(off.get("timestamp_nanos", (ms % 1000) * 1_000_000))
    return (ms // 1000) * 1_000_000 + nanos // 1000


def jdbc_order(mode: str, off: dict[str, Any]) -> tuple[int, ...]:
    inc = int(off.get("incrementing", -(1 << 62)))
    ts = ts_offset_micros(off)
    ts = -(1 << 62) if ts is None else ts
    if mode == "incrementing":
        return (inc,)
    if mode == "timestamp":
        return (ts,)
    return (ts, inc)


def _from_micros(us: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=us)


class JdbcSourceReader:
    """The queries of Confluent's JDBC source on one database (``props``: the connector's keys)."""

    def __init__(self, props: dict[str, str], db: str) -> None:
        self.props = props
        self.dsn = parse_jdbc_url(
            props["connection.url"], props["connection.user"], props["connection.password"]
        )
        self.db = db
        self.mode = props["mode"]
        self.inc_col = props["incrementing.column.name"]
        self.ts_cols = split_list(props["timestamp.column.name"])
        self.prefix = props["topic.prefix"]
        self.max_rows = int(props["batch.max.rows"])
        self.delay_ms = int(props["timestamp.delay.interval.ms"])
        self.include = split_list(props.get("table.include.list") or props.get("table.whitelist", ""))
        self.exclude = split_list(props.get("table.exclude.list") or props.get("table.blacklist", ""))
        self.schemas = split_list(props.get("schema.pattern", ""))

    def part_key(self, s: str, t: str) -> str:
        import json

        return json.dumps({"protocol": "1", "table": f"{self.db}.{s}.{t}"}, separators=(",", ":"))

    def tables(self, conn: Any) -> list[tuple[str, str]]:
        return match_tables(list_tables(conn), self.include, self.exclude, self.schemas)

    def _ts_expr(self) -> str:
        if len(self.ts_cols) == 1:
            return qident(self.ts_cols[0])
        return "COALESCE(" + ", ".join(qident(c) for c in self.ts_cols) + ")"

    def _where(self, start: dict[str, Any], end: dict[str, Any] | None) -> tuple[str, list[Any]]:
        conds: list[str] = []
        args: list[Any] = []
        inc, ts = qident(self.inc_col) if self.inc_col else "", self._ts_expr() if self.ts_cols else ""
        if self.mode == "incrementing":
            if "incrementing" in start:
                conds.append(f"{inc} > %s")
                args.append(int(start["incrementing"]))
            if end is not None:
                conds.append(f"{inc} <= %s")
                args.append(int(end["incrementing"]))
        elif self.mode == "timestamp":
            s_us = ts_offset_micros(start)
            if s_us is not None:
                conds.append(f"{ts} > %s")
                args.append(_from_micros(s_us))
            if end is not None:
                conds.append(f"{ts} <= %s")
                args.append(_from_micros(ts_offset_micros(end) or 0))
        else:
            s_us = ts_offset_micros(start)
            if s_us is not None:
                conds.append(f"({ts}, {inc}) > (%s, %s)")
                args += [_from_micros(s_us), int(start.get("incrementing", -(1 << 62)))]
            if end is not None:
                conds.append(f"({ts}, {inc}) <= (%s, %s)")
                args += [_from_micros(ts_offset_micros(end) or 0), int(end["incrementing"])]
        if self.ts_cols:
            conds.append(f"{ts} < now() - make_interval(secs => %s)")
            args.append(self.delay_ms / 1000)
        return (" WHERE " + " AND ".join(conds)) if conds else "", args

    def _order(self) -> str:
        inc, ts = qident(self.inc_col) if self.inc_col else "", self._ts_expr() if self.ts_cols else ""
        return {"incrementing": inc, "timestamp": ts}.get(self.mode, f"{ts}, {inc}")

    def _offset_of(self, ts_text: str | None, inc: int | None) -> dict[str, Any]:
        off: dict[str, Any] = {}
        if ts_text is not None:
            off.update(_ts_offset(_micros(_parse_ts(ts_text))))
        if inc is not None:
            off["incrementing"] = inc
        return off

    def latest(self, conn: Any, start: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The end of the next batch of each table: the position of its ``batch.max.rows``-th new row."""
        out = dict(start)
        for s, t in self.tables(conn):
            pk = self.part_key(s, t)
            where, args = self._where(start.get(pk, {}), None)
            ts_sel = f"({self._ts_expr()})::timestamptz::text" if self.ts_cols else "NULL"
            inc_sel = f"{qident(self.inc_col)}::bigint" if self.inc_col else "NULL"
            row = conn.execute(
                f"SELECT {ts_sel} AS ts_, {inc_sel} AS inc_ FROM {qualified(s, t)}{where} "
                f"ORDER BY {self._order()} OFFSET %s LIMIT 1",
                [*args, self.max_rows - 1],
            ).fetchone()
            if row is None:
                row = conn.execute(
                    f"SELECT {ts_sel} AS ts_, {inc_sel} AS inc_ FROM {qualified(s, t)}{where} "
                    f"ORDER BY {self._order()} DESC LIMIT 1",
                    args,
                ).fetchone()
            if row is not None:
                if self.mode == "timestamp":
                    # every row of that timestamp goes in the batch: the next one starts after it
                    out[pk] = self._offset_of(row[0], None)
                else:
                    out[pk] = self._offset_of(row[0], row[1])
        return out

    def read(
        self, conn: Any, start: dict[str, dict[str, Any]], end: dict[str, dict[str, Any]]
    ) -> list[SourceEvent]:
        events: list[SourceEvent] = []
        for s, t in self.tables(conn):
            pk = self.part_key(s, t)
            if pk not in end or end[pk] == start.get(pk):
                continue
            cols = table_columns(conn, s, t)
            names = {c.name for c in cols}
            for need in ([self.inc_col] if self.inc_col else []) + self.ts_cols:
                if need not in names:
                    raise RuntimeError(f"table {s}.{t} has no column {need!r} (mode {self.mode})")
            schemas = [
                column_schema(
                    c,
                    "jdbc",
                    (self.props.get("numeric.mapping", "none") == "best_fit" and "double") or "precise",
                )
                for c in cols
            ]
            vschema: Schema = {
                "type": "struct",
                "name": t,
                "optional": False,
                "fields": [dict(sc, field=c.name) for c, sc in zip(cols, schemas, strict=True)],
            }
            where, args = self._where(start.get(pk, {}), end[pk])
            ts_sel = f"({self._ts_expr()})::timestamptz::text" if self.ts_cols else "NULL"
            inc_sel = f"{qident(self.inc_col)}::bigint" if self.inc_col else "NULL"
            sel = ", ".join(f"{qident(c.name)}::text AS c{i}" for i, c in enumerate(cols))
            topic = self.prefix + t
            now = int(time.time() * 1000)
            for row in conn.execute(
                f"SELECT {sel}, {ts_sel} AS ts_, {inc_sel} AS inc_ FROM {qualified(s, t)}{where} "
                f"ORDER BY {self._order()}",
                args,
            ):
                n = len(cols)
                value = {
                    c.name: text_value(c, sc, row[i])
                    for i, (c, sc) in enumerate(zip(cols, schemas, strict=True))
                }
                off = self._offset_of(row[n], row[n + 1])
                if self.mode == "timestamp":
                    off = self._offset_of(row[n], None)
                events.append(
                    SourceEvent(topic, None, None, vschema, value, now, pk, off, jdbc_order(self.mode, off))
                )
        return events


# -- JDBC sink -----------------------------------------------------------------------------------

_SQL_TYPES = {
    "int8": "SMALLINT",
    "int16": "SMALLINT",
    "int32": "INT",
    "int64": "BIGINT",
    "float32": "REAL",
    "float64": "DOUBLE PRECISION",
    "boolean": "BOOLEAN",
    "string": "TEXT",
    "bytes": "BYTEA",
}


def sql_type(schema: Schema) -> str:
    name = schema.get("name")
    if name == DECIMAL:
        return "DECIMAL"
    if name == TIMESTAMP:
        return "TIMESTAMP"
    if name == DATE:
        return "DATE"
    if name == TIME:
        return "TIME"
    t = schema.get("type", "")
    if t not in _SQL_TYPES:
        raise ValueError(f"{t} (field type) has no SQL column type; the JDBC sink writes flat structs")
    return _SQL_TYPES[t]


def sql_value(schema: Schema, v: Any) -> Any:
    if v is None:
        return None
    name = schema.get("name")
    if name == TIMESTAMP and isinstance(v, dt.datetime):
        return v.replace(tzinfo=None) if v.tzinfo else v
    if name == DATE and isinstance(v, dt.datetime):
        return v.date()
    if name == TIME and isinstance(v, dt.datetime):
        return v.time()
    if schema.get("type") == "bytes" and isinstance(v, str):
        return base64.b64decode(v)
    return v


class JdbcSinkWriter:
    """Writes a batch of sink records to PostgreSQL in one transaction (with the Kafka offsets)."""

    def __init__(self, props: dict[str, str], connector: str) -> None:
        self.props = props
        self.name = connector
        self.dsn = parse_jdbc_url(
            props["connection.url"], props["connection.user"], props["connection.password"]
        )
        self.insert_mode = props["insert.mode"].strip().lower()
        self.pk_mode = props["pk.mode"].strip().lower()
        self.pk_fields = split_list(props["pk.fields"])
        self.auto_create = props["auto.create"].strip().lower() == "true"
        self.auto_evolve = props["auto.evolve"].strip().lower() == "true"
        self.delete_enabled = props["delete.enabled"].strip().lower() == "true"
        self.fmt = props["table.name.format"]
        self.fields_whitelist = split_list(props.get("fields.whitelist", ""))
        self.conn: Any = None
        self._known: dict[str, set[str]] = {}

    def _conn(self) -> Any:
        if self.conn is None or self.conn.closed:
            self.conn = connect(self.dsn, autocommit=False)
            with self.conn.transaction():
                self.conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {OFFSETS_TABLE} (connector TEXT, topic TEXT, "
                    "kafka_partition INT, next_offset BIGINT, PRIMARY KEY (connector, topic, "
                    "kafka_partition))"
                )
            self.conn.commit()
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def table_of(self, topic: str) -> tuple[str | None, str]:
        name = self.fmt.replace("${topic}", topic)
        if "." in name:
            s, t = name.split(".", 1)
            return s, t
        return None, name

    def _columns(self, rec: Any) -> tuple[list[tuple[str, Schema]], dict[str, Any], list[str]]:
        """(column, schema) pairs, the row, and the primary key columns of a record."""
        cols: list[tuple[str, Schema]] = []
        row: dict[str, Any] = {}
        pks: list[str] = []
        if self.pk_mode == "kafka":
            names = self.pk_fields or ["__connect_topic", "__connect_partition", "__connect_offset"]
            if len(names) != 3:
                raise ValueError("pk.mode=kafka takes three pk.fields (topic, partition, offset columns)")
            vals = [rec.topic, rec.partition, rec.offset]
            for n, sch, v in zip(
                names, ({"type": "string"}, {"type": "int32"}, {"type": "int64"}), vals, strict=True
            ):
                cols.append((n, dict(sch, optional=False)))
                row[n] = v
            pks = names
        elif self.pk_mode == "record_key":
            ks = rec.key_schema
            if ks is None or rec.key is None:
                raise ValueError("pk.mode=record_key needs a record key with a schema")
            if ks.get("type") == "struct":
                names = self.pk_fields or [f["field"] for f in ks.get("fields") or []]
                for n in names:
                    f = next((f for f in ks.get("fields") or [] if f["field"] == n), None)
                    if f is None:
                        raise ValueError(f"pk.fields {n!r} is not a field of the record key")
                    cols.append((n, f))
                    row[n] = rec.key.get(n)
                pks = names
            else:
                n = (self.pk_fields or ["__connect_key"])[0]
                cols.append((n, ks))
                row[n] = rec.key
                pks = [n]
        vs = rec.value_schema
        if rec.value is not None:
            if vs is None or vs.get("type") != "struct":
                raise ValueError(
                    "the JDBC sink needs record values with a struct schema (the JsonConverter with "
                    "schemas.enable=true, or Avro/JSON Schema/Protobuf through the registry)"
                )
            for f in vs.get("fields") or []:
                n = f["field"]
                if self.fields_whitelist and n not in self.fields_whitelist and n not in pks:
                    continue
                if n in row:
                    continue
                cols.append((n, f))
                row[n] = rec.value.get(n)
            if self.pk_mode == "record_value":
                pks = self.pk_fields or [f["field"] for f in vs.get("fields") or []]
                for n in pks:
                    if n not in row:
                        raise ValueError(f"pk.fields {n!r} is not a field of the record value")
        return cols, row, pks

    def _ensure_table(
        self, conn: Any, schema: str | None, table: str, cols: list[tuple[str, Schema]], pks: list[str]
    ) -> None:
        key = f"{schema}.{table}"
        q = qualified(schema, table) if schema else qident(table)
        if key not in self._known:
            rows = conn.execute(
                "SELECT a.attname FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 "
                "AND NOT a.attisdropped",
                (q,),
            ).fetchall()
            if not rows:
                if not self.auto_create:
                    raise RuntimeError(f"Table {q} is missing and auto.create is disabled")
                defs = []
                for n, s in cols:
                    null = "" if (s.get("optional") and n not in pks) else " NOT NULL"
                    default = ""
                    if (
                        "default" in s
                        and s["default"] is not None
                        and not isinstance(s["default"], (dict, list))
                    ):
                        default = " DEFAULT " + _literal(sql_value(s, s["default"]))
                    defs.append(f"{qident(n)} {sql_type(s)}{null}{default}")
                if pks:
                    defs.append("PRIMARY KEY(" + ", ".join(qident(p) for p in pks) + ")")
                conn.execute(f"CREATE TABLE {q} (\n" + ",\n".join(defs) + ")")
                self._known[key] = {n for n, _ in cols}
            else:
                self._known[key] = {r[0] for r in rows}
        missing = [(n, s) for n, s in cols if n not in self._known[key]]
        if missing:
            if not self.auto_evolve:
                raise RuntimeError(
                    f"Table {q} is missing fields ({', '.join(n for n, _ in missing)}) and "
                    "auto.evolve is disabled"
                )
            for n, s in missing:
                if not s.get("optional") and "default" not in s:
                    raise RuntimeError(
                        f"Cannot ALTER TABLE {q} to add missing field {n}, as the field is not optional and "
                        "does not have a default value"
                    )
                conn.execute(f"ALTER TABLE {q} ADD COLUMN {qident(n)} {sql_type(s)}")
                self._known[key].add(n)

    def write(self, recs: list[Any], ends: dict[tuple[str, int], int], on_fail: Any) -> int:
        """Writes ``recs`` (ConnectRecords) and the next offsets ``ends`` in one transaction,
        skipping records at or below the offsets already stored (a replay). A record the
        database refuses is rolled back alone (a savepoint) and handed to ``on_fail(rec, exc)``
        inside the transaction: if that raises (``errors.tolerance=none``), nothing of the batch
        is committed. Returns the number of records written."""
        conn = self._conn()
        written = 0
        try:
            with conn.transaction():
                stored = {
                    (r[0], r[1]): r[2]
                    for r in conn.execute(
                        f"SELECT topic, kafka_partition, next_offset FROM {OFFSETS_TABLE} WHERE "
                        "connector = %s "
                        "FOR UPDATE",
                        (self.name,),
                    )
                }
                for rec in recs:
                    if rec.offset is not None and rec.offset < stored.get((rec.topic, rec.partition or 0), 0):
                        continue  # written by an earlier run of this batch
                    try:
                        with conn.transaction():  # a savepoint: one bad record does not undo the batch
                            self._write_one(conn, rec)
                        written += 1
                    except (ValueError, RuntimeError) as e:
                        on_fail(rec, e)
                    except Exception as e:
                        if type(e).__module__.startswith("psycopg") and not isinstance(
                            e, _connection_errors()
                        ):
                            on_fail(rec, RuntimeError(" ".join(str(e).split())))
                        else:
                            raise
                for (topic, part), nxt in ends.items():
                    conn.execute(
                        f"INSERT INTO {OFFSETS_TABLE} VALUES (%s, %s, %s, %s) ON CONFLICT (connector, topic, "
                        f"kafka_partition) DO UPDATE SET next_offset = GREATEST({OFFSETS_TABLE}.next_offset, "
                        "EXCLUDED.next_offset)",
                        (self.name, topic, part, nxt),
                    )
        except Exception:
            self.close()
            raise
        return written

    def _write_one(self, conn: Any, rec: Any) -> None:
        schema, table = self.table_of(rec.topic)
        q = qualified(schema, table) if schema else qident(table)
        if rec.value is None:
            if not self.delete_enabled:
                return  # Confluent's sink ignores tombstones unless delete.enabled
            if self.pk_mode != "record_key":
                raise ValueError("delete.enabled=true needs pk.mode=record_key")
            cols, row, pks = self._columns(rec)
            if self._known.get(f"{schema}.{table}") is None:
                self._ensure_table(conn, schema, table, cols, pks)
            conn.execute(
                f"DELETE FROM {q} WHERE " + " AND ".join(f"{qident(p)} = %s" for p in pks),
                [sql_value(dict(cols)[p], row[p]) for p in pks],
            )
            return
        cols, row, pks = self._columns(rec)
        self._ensure_table(conn, schema, table, cols, pks)
        names = [n for n, _ in cols]
        args = [sql_value(s, row[n]) for n, s in cols]
        col_sql = ", ".join(qident(n) for n in names)
        ph = ", ".join(["%s"] * len(names))
        if self.insert_mode == "insert":
            conn.execute(f"INSERT INTO {q} ({col_sql}) VALUES ({ph})", args)
        elif self.insert_mode == "upsert":
            if not pks:
                raise ValueError("insert.mode=upsert needs a primary key (pk.mode other than none)")
            others = [n for n in names if n not in pks]
            action = (
                "DO UPDATE SET " + ", ".join(f"{qident(n)} = EXCLUDED.{qident(n)}" for n in others)
                if others
                else "DO NOTHING"
            )
            conn.execute(
                f"INSERT INTO {q} ({col_sql}) VALUES ({ph}) ON CONFLICT ("
                + ", ".join(qident(p) for p in pks)
                + f") {action}",
                args,
            )
        else:  # update
            others = [n for n in names if n not in pks]
            conn.execute(
                f"UPDATE {q} SET "
                + ", ".join(f"{qident(n)} = %s" for n in others)
                + " WHERE "
                + " AND ".join(f"{qident(p)} = %s" for p in pks),
                [sql_value(dict(cols)[n], row[n]) for n in others]
                + [sql_value(dict(cols)[p], row[p]) for p in pks],
            )


def _connection_errors() -> tuple[type[BaseException], ...]:
    import psycopg

    return (psycopg.OperationalError, psycopg.InterfaceError)


def _literal(v: Any) -> str:
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, (int, float, decimal.Decimal)):
        return str(v)
    return "'" + str(v).replace("'", "''") + "'"


# -- change data capture (Debezium) --------------------------------------------------------------


def lsn_int(s: str) -> int:
    hi, lo = s.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def lsn_str(n: int) -> str:
    return f"{n >> 32:X}/{n & 0xFFFFFFFF:X}"


_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in µs since 1970


@dataclass
class Relation:
    schema: str
    table: str
    columns: list[Column]


class PgOutputDecoder:
    """pgoutput's logical replication protocol (version 1) messages."""

    def __init__(self) -> None:
        self.relations: dict[int, Relation] = {}
        self.xid = 0
        self.commit_ts_us = 0
        self.final_lsn = 0

    @staticmethod
    def _cstr(b: bytes, i: int) -> tuple[str, int]:
        j = b.index(b"\x00", i)
        return b[i:j].decode(), j + 1

    @staticmethod
    def _tuple(b: bytes, i: int) -> tuple[list[str | object | None], int]:
        (n,) = struct.unpack_from(">H", b, i)
        i += 2
        vals: list[str | object | None] = []
        for _ in range(n):
            kind = b[i : i + 1]
            i += 1
            if kind == b"n":
                vals.append(None)
            elif kind == b"u":
                vals.append(UNCHANGED_TOAST)
            else:
                (ln,) = struct.unpack_from(">I", b, i)
                i += 4
                vals.append(b[i : i + ln].decode())
                i += ln
        return vals, i

    def decode(self, b: bytes) -> tuple[str, Any] | None:
        """('begin'|'commit'|'insert'|'update'|'delete'|'truncate', payload) or None."""
        kind = b[:1]
        if kind == b"B":
            self.final_lsn, ts, self.xid = struct.unpack_from(">QqI", b, 1)
            self.commit_ts_us = ts + _PG_EPOCH_US
            return "begin", None
        if kind == b"C":
            _flags, commit_lsn, end_lsn, ts = struct.unpack_from(">BQQq", b, 1)
            return "commit", (commit_lsn, end_lsn, ts + _PG_EPOCH_US)
        if kind == b"R":
            (relid,) = struct.unpack_from(">I", b, 1)
            ns, i = self._cstr(b, 5)
            name, i = self._cstr(b, i)
            i += 1  # replica identity
            (n,) = struct.unpack_from(">H", b, i)
            i += 2
            cols = []
            for _ in range(n):
                flags = b[i]
                col, i = self._cstr(b, i + 1)
                oid, typmod = struct.unpack_from(">Ii", b, i)
                i += 8
                cols.append(Column(col, oid, typmod, True, bool(flags & 1)))
            self.relations[relid] = Relation(ns or "pg_catalog", name, cols)
            return None
        if kind == b"I":
            (relid,) = struct.unpack_from(">I", b, 1)
            new, _ = self._tuple(b, 6)
            return "insert", (self.relations[relid], None, new)
        if kind == b"U":
            (relid,) = struct.unpack_from(">I", b, 1)
            i = 5
            old = None
            if b[i : i + 1] in (b"K", b"O"):
                old, i = self._tuple(b, i + 1)
            new, _ = self._tuple(b, i + 1)
            return "update", (self.relations[relid], old, new)
        if kind == b"D":
            (relid,) = struct.unpack_from(">I", b, 1)
            old, _ = self._tuple(b, 6)
            if b[5:6] == b"K":
                old = [KEY_ONLY if v is None else v for v in old]
            return "delete", (self.relations[relid], old, None)
        if kind == b"T":
            return "truncate", None
        return None  # Origin, Type, Message


UNCHANGED_TOAST = object()
KEY_ONLY = object()  # a column the old key of a delete does not carry (REPLICA IDENTITY DEFAULT)
_ZERO = {"int16": 0, "int32": 0, "int64": 0, "float32": 0.0, "float64": 0.0, "boolean": False, "string": ""}


class DebeziumEvents:
    """Debezium's PostgreSQL change events (key, envelope, tombstone) for the tables of a
    connector; column nullability comes from the catalog."""

    def __init__(self, props: dict[str, str]) -> None:
        self.props = props
        self.prefix = props["topic.prefix"]
        self.db = props["database.dbname"]
        self.decimal_mode = props["decimal.handling.mode"].strip().lower()
        self.tombstones = props["tombstones.on.delete"].strip().lower() == "true"
        self._nullable: dict[tuple[str, str], dict[str, bool]] = {}
        self._pk: dict[tuple[str, str], set[str]] = {}
        self._schemas: dict[tuple[str, str, tuple[tuple[str, int, int], ...]], tuple[Any, ...]] = {}

    def set_catalog(self, conn: Any, tables: list[tuple[str, str]]) -> None:
        for s, t in tables:
            cols = table_columns(conn, s, t)
            self._nullable[(s, t)] = {c.name: c.nullable for c in cols}
            self._pk[(s, t)] = {c.name for c in cols if c.key}

    def _schemas_of(self, rel: Relation) -> tuple[Any, ...]:
        sig = tuple((c.name, c.oid, c.typmod) for c in rel.columns)
        k = (rel.schema, rel.table, sig)
        if k in self._schemas:
            return self._schemas[k]
        nullable = self._nullable.get((rel.schema, rel.table), {})
        # the key is the primary key (the relation message flags the replica identity's columns,
        # which is every column under REPLICA IDENTITY FULL)
        pk = self._pk.get((rel.schema, rel.table))
        base = f"{self.prefix}.{rel.schema}.{rel.table}"
        cols = []
        for c in rel.columns:
            is_key = c.name in pk if pk is not None else c.key
            cols.append(
                Column(c.name, c.oid, c.typmod, nullable.get(c.name, not is_key) and not is_key, is_key)
            )
        col_schemas = [column_schema(c, "debezium", self.decimal_mode) for c in cols]
        value: Schema = {
            "type": "struct",
            "name": f"{base}.Value",
            "optional": True,
            "fields": [dict(sc, field=c.name) for c, sc in zip(cols, col_schemas, strict=True)],
        }
        key_fields = [dict(sc, field=c.name) for c, sc in zip(cols, col_schemas, strict=True) if c.key]
        key: Schema | None = (
            {"type": "struct", "name": f"{base}.Key", "optional": False, "fields": key_fields}
            if key_fields
            else None
        )
        envelope: Schema = {
            "type": "struct",
            "name": f"{base}.Envelope",
            "version": 2,
            "optional": False,
            "fields": [
                dict(value, field="before"),
                dict(value, field="after"),
                dict(SOURCE_SCHEMA, field="source"),
                dict(TRANSACTION_SCHEMA, field="transaction"),
                {"field": "op", "type": "string", "optional": False},
                {"field": "ts_ms", "type": "int64", "optional": True},
                {"field": "ts_us", "type": "int64", "optional": True},
                {"field": "ts_ns", "type": "int64", "optional": True},
            ],
        }
        out = (cols, col_schemas, key, envelope, f"{self.prefix}.{rel.schema}.{rel.table}")
        self._schemas[k] = out
        return out

    def events(
        self,
        op: str,
        rel: Relation,
        old: list[Any] | None,
        new: list[Any] | None,
        source: dict[str, Any],
        offset: dict[str, Any],
        order: tuple[int, ...],
        part_key: str,
    ) -> list[SourceEvent]:
        cols, col_schemas, key_schema, envelope, topic = self._schemas_of(rel)

        def row(vals: list[Any] | None, fallback: dict[str, Any] | None = None) -> dict[str, Any] | None:
            if vals is None:
                return None
            out: dict[str, Any] = {}
            for c, sc, v in zip(cols, col_schemas, vals, strict=True):
                if v is UNCHANGED_TOAST:
                    # Debezium's placeholder for an unchanged TOASTed value not in the WAL
                    out[c.name] = (fallback or {}).get(c.name, "__debezium_unavailable_value")
                    continue
                if v is KEY_ONLY:
                    # as Debezium: null, or the type's zero value where the column is NOT NULL
                    out[c.name] = None if sc.get("optional") else _ZERO.get(sc["type"], b"")
                    continue
                out[c.name] = text_value(c, sc, v)
            return out

        before = row(old)
        after = row(new, before)
        keysrc = after if after is not None else before
        key = {c.name: keysrc[c.name] for c in cols if c.key} if (key_schema and keysrc) else None
        now_us = int(time.time() * 1_000_000)
        env = {
            "before": before,
            "after": after,
            "source": source,
            "transaction": None,
            "op": op,
            "ts_ms": now_us // 1000,
            "ts_us": now_us,
            "ts_ns": now_us * 1000,
        }
        ts = int(source["ts_ms"])
        evs = [SourceEvent(topic, key_schema, key, envelope, env, ts, part_key, offset, order)]
        if op == "d" and self.tombstones:
            evs.append(SourceEvent(topic, key_schema, key, None, None, ts, part_key, offset, order))
        return evs

    def source(
        self, rel: Relation, ts_us: int, snapshot: str, txid: int | None, lsn: int | None
    ) -> dict[str, Any]:
        return {
            "version": DEBEZIUM_VERSION,
            "connector": "postgresql",
            "name": self.prefix,
            "ts_ms": ts_us // 1000,
            "snapshot": snapshot,
            "db": self.db,
            "sequence": None if lsn is None else f'[null,"{lsn}"]',
            "ts_us": ts_us,
            "ts_ns": ts_us * 1000,
            "schema": rel.schema,
            "table": rel.table,
            "txId": txid,
            "lsn": lsn,
            "xmin": None,
        }


SOURCE_SCHEMA: Schema = {
    "type": "struct",
    "name": "io.debezium.connector.postgresql.Source",
    "optional": False,
    "fields": [
        {"field": "version", "type": "string", "optional": False},
        {"field": "connector", "type": "string", "optional": False},
        {"field": "name", "type": "string", "optional": False},
        {"field": "ts_ms", "type": "int64", "optional": False},
        {
            "field": "snapshot",
            "type": "string",
            "optional": True,
            "name": "io.debezium.data.Enum",
            "version": 1,
            "parameters": {
                "allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,"
                "incremental"
            },
            "default": "false",
        },
        {"field": "db", "type": "string", "optional": False},
        {"field": "sequence", "type": "string", "optional": True},
        {"field": "ts_us", "type": "int64", "optional": True},
        {"field": "ts_ns", "type": "int64", "optional": True},
        {"field": "schema", "type": "string", "optional": False},
        {"field": "table", "type": "string", "optional": False},
        {"field": "txId", "type": "int64", "optional": True},
        {"field": "lsn", "type": "int64", "optional": True},
        {"field": "xmin", "type": "int64", "optional": True},
    ],
}

TRANSACTION_SCHEMA: Schema = {
    "type": "struct",
    "name": "event.block",
    "version": 1,
    "optional": True,
    "fields": [
        {"field": "id", "type": "string", "optional": False},
        {"field": "total_order", "type": "int64", "optional": False},
        {"field": "data_collection_order", "type": "int64", "optional": False},
    ],
}


class CdcReader:
    """Debezium's PostgreSQL connector on one database: slot, publication, snapshot, stream."""

    def __init__(self, props: dict[str, str]) -> None:
        self.props = props
        try:
            port = int(props["database.port"])
        except ValueError:
            raise ConfigError(
                f"Invalid value {props['database.port']} for configuration database.port: Not a "
                "number of type INT"
            ) from None
        self.dsn = conninfo(
            props["database.hostname"],
            port,
            props["database.dbname"],
            props["database.user"],
            props["database.password"],
        )
        self.slot = props["slot.name"]
        self.publication = props["publication.name"]
        self.include = split_list(props["table.include.list"])
        self.exclude = split_list(props["table.exclude.list"])
        self.schemas = split_list(props["schema.include.list"])
        self.events = DebeziumEvents(props)
        self.part_key = '{"server":' + _json_str(props["topic.prefix"]) + "}"

    def tables(self, conn: Any) -> list[tuple[str, str]]:
        return match_tables(list_tables(conn), self.include, self.exclude, self.schemas)

    def ensure_publication(self, conn: Any) -> None:
        mode = self.props["publication.autocreate.mode"].strip().lower()
        exists = conn.execute(
            "SELECT 1 FROM pg_publication WHERE pubname = %s", (self.publication,)
        ).fetchone()
        if mode == "disabled":
            if not exists:
                raise RuntimeError(
                    f"publication {self.publication} does not exist and publication.autocreate.mode "
                    "is disabled"
                )
            return
        if mode == "all_tables":
            if not exists:
                conn.execute(f"CREATE PUBLICATION {qident(self.publication)} FOR ALL TABLES")
            return
        tables = ", ".join(qualified(s, t) for s, t in self.tables(conn))
        if not tables:
            raise RuntimeError("no table matches table.include.list / schema.include.list")
        if exists:
            conn.execute(f"ALTER PUBLICATION {qident(self.publication)} SET TABLE {tables}")
        else:
            conn.execute(f"CREATE PUBLICATION {qident(self.publication)} FOR TABLE {tables}")

    def slot_exists(self, conn: Any) -> bool:
        return (
            conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)).fetchone()
            is not None
        )

    def create_slot_and_snapshot(self, with_data: bool) -> tuple[int, list[SourceEvent]]:
        """Creates the slot (dropping a stale one) and, if ``with_data``, reads every captured
        table in the slot's exported snapshot: (the slot's consistent point, the ``r`` events)."""
        import psycopg

        conn = connect(self.dsn)
        try:
            self.ensure_publication(conn)
            if self.slot_exists(conn):
                conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
            tables = self.tables(conn)
            self.events.set_catalog(conn, tables)
            try:
                repl = psycopg.connect(self.dsn + " replication=database", autocommit=True)
            except psycopg.OperationalError as e:
                raise ConnectionError(
                    f"cannot open a replication connection: {' '.join(str(e).split())}"
                ) from None
            try:
                res = repl.pgconn.exec_(
                    f"CREATE_REPLICATION_SLOT {qident(self.slot)} LOGICAL pgoutput EXPORT_SNAPSHOT".encode()
                )
                if res.status != 2:  # TUPLES_OK
                    raise RuntimeError(
                        f"cannot create replication slot {self.slot}: {res.error_message.decode().strip()}"
                    )
                point = lsn_int(bytes(res.get_value(0, 1) or b"0/0").decode())
                snap = bytes(res.get_value(0, 2) or b"").decode()
                events: list[SourceEvent] = []
                if with_data:
                    events = self._snapshot(snap, tables, point)
            finally:
                repl.close()
            return point, events
        finally:
            conn.close()

    def _snapshot(self, snap: str, tables: list[tuple[str, str]], point: int) -> list[SourceEvent]:
        conn = connect(self.dsn, autocommit=False)
        try:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            conn.execute(f"SET TRANSACTION SNAPSHOT '{snap}'")
            out: list[SourceEvent] = []
            now_us = int(time.time() * 1_000_000)
            offset = {"lsn": point, "txId": None, "ts_usec": now_us, "snapshot": True}
            for ti, (s, t) in enumerate(tables):
                cols = table_columns(conn, s, t)
                rel = Relation(s, t, cols)
                sel = ", ".join(f"{qident(c.name)}::text" for c in cols)
                rows = conn.execute(f"SELECT {sel} FROM {qualified(s, t)}").fetchall()
                for ri, r in enumerate(rows):
                    last_table = ti == len(tables) - 1
                    if ti == 0 and ri == 0:
                        flag = "first"
                    elif last_table and ri == len(rows) - 1:
                        flag = "last"
                    elif ri == len(rows) - 1:
                        flag = "last_in_data_collection"
                    else:
                        flag = "true"
                    src = self.events.source(rel, now_us, flag, None, point)
                    out += self.events.events("r", rel, None, list(r), src, offset, (point,), self.part_key)
            conn.commit()
            return out
        finally:
            conn.close()

    def latest(self, conn: Any) -> int:
        return lsn_int(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])

    def read(self, conn: Any, start: int, end: int) -> list[SourceEvent]:
        """The changes of the transactions that end after ``start`` and at or before ``end``."""
        self.events.set_catalog(conn, self.tables(conn))
        dec = PgOutputDecoder()
        out: list[SourceEvent] = []
        pending: list[tuple[str, Any]] = []
        rows = conn.execute(
            "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, "
            "'proto_version', '1', "
            "'publication_names', %s)",
            (self.slot, lsn_str(end), self.publication),
        )
        allowed = (
            None
            if self.props["publication.autocreate.mode"].strip().lower() == "filtered"
            else set(self.tables(conn))
        )
        for lsn_text, data in rows:
            m = dec.decode(bytes(data))
            if m is None:
                continue
            kind, payload = m
            if kind == "begin":
                pending = []
            elif kind in ("insert", "update", "delete"):
                pending.append((kind, (*payload, lsn_int(lsn_text))))
            elif kind == "commit":
                _commit_lsn, end_lsn, ts_us = payload
                if end_lsn <= start or end_lsn > end:
                    continue
                offset = {"lsn": end_lsn, "lsn_commit": end_lsn, "txId": dec.xid, "ts_usec": ts_us}
                for k, (rel, old, new, change_lsn) in pending:
                    if allowed is not None and (rel.schema, rel.table) not in allowed:
                        continue
                    src = self.events.source(rel, ts_us, "false", dec.xid, change_lsn)
                    op = {"insert": "c", "update": "u", "delete": "d"}[k]
                    out += self.events.events(op, rel, old, new, src, offset, (end_lsn,), self.part_key)
                pending = []
        return out

    def drop_slot(self) -> None:
        conn = connect(self.dsn)
        try:
            if self.slot_exists(conn):
                conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
        finally:
            conn.close()

    def advance(self, lsn: int) -> None:
        conn = connect(self.dsn)
        try:
            conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.slot, lsn_str(lsn)))
        finally:
            conn.close()


def _json_str(s: str) -> str:
    import json

    return json.dumps(s)
