"""The Delta Lake sink (``strom.connect.DeltaSinkConnector``), written with the ``deltalake``
package (delta-rs; no JVM jars).

Each micro-batch becomes one Delta commit per table. The table is ``table.path``, where
``${topic}`` stands for the record's topic (after the transforms), so one connector can fill one
table per topic. Rows are the records' values: a struct (or a schemaless map) gives one column
per field, anything else a single ``value`` column. The Arrow schema comes from the value
converter's Connect schema (int8..int64, float32/64, boolean, string, bytes, array, map, struct;
Decimal, Timestamp (UTC, microseconds), Date; Time as int32 milliseconds since midnight); without
a schema (JsonConverter with ``schemas.enable=false``) Arrow infers it from the batch.

Exactly once: the commit carries one Delta *application transaction* (``txn`` action) per source
topic partition, ``appId = strom-connect:<connector>:<topic>:<partition>`` and ``version`` = the
next Kafka offset to write. Before writing, the records whose offset is below the table's
committed version for their partition are dropped, so a micro-batch Spark replays after a crash
(or a run started without its checkpoint, which resumes from these versions) writes nothing
twice, and the records not yet committed are written: nothing missed.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any, Literal

from strom.connect.data import DATE, DECIMAL, TIME, TIMESTAMP, ConfigError, ConnectRecord, Schema

log = logging.getLogger("strom.connect")

DELTA_SINK = "strom.connect.DeltaSinkConnector"

DELTA_KEYS: dict[str, str | None] = {
    "table.path": None,
    "partition.by": "",
    "schema.evolution": "merge",
    "target.file.size": "0",
}


def validate_props(props: Mapping[str, str]) -> None:
    evo = props.get("schema.evolution", "merge").strip().lower()
    if evo not in ("merge", "none"):
        raise ConfigError(
            f"Invalid value {evo} for configuration schema.evolution: String must be one of: merge, none"
        )
    for p in _partition_by(props):
        if not p.replace("_", "").isalnum():
            raise ConfigError(f"Invalid value {p} for configuration partition.by: not a column name")
    try:
        if int(props.get("target.file.size", "0").strip() or "0") < 0:
            raise ValueError
    except ValueError:
        raise ConfigError(
            f"Invalid value {props.get('target.file.size')} for configuration target.file.size: "
            "a number of bytes >= 0 (0: delta-rs's default)"
        ) from None


def _partition_by(props: Mapping[str, str]) -> list[str]:
    return [p.strip() for p in props.get("partition.by", "").split(",") if p.strip()]


def app_id(connector: str, topic: str, partition: int) -> str:
    return f"strom-connect:{connector}:{topic}:{partition}"


def table_path(template: str, topic: str) -> str:
    return template.replace("${topic}", topic)


# -- Connect schema -> Arrow ---------------------------------------------------------------------


def arrow_type(s: Schema) -> Any:
    import pyarrow as pa

    name, t = s.get("name"), s.get("type")
    if name == DECIMAL:
        params = s.get("parameters") or {}
        scale = int(params.get("scale", 0))
        precision = int(params.get("connect.decimal.precision", 38))
        return pa.decimal128(max(precision, scale, 1), scale)
    if name == TIMESTAMP:
        return pa.timestamp("us", tz="UTC")
    if name == DATE:
        return pa.date32()
    if name == TIME:
        return pa.int32()
    simple = {
        "int8": pa.int8(),
        "int16": pa.int16(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "float32": pa.float32(),
        "float64": pa.float64(),
        "boolean": pa.bool_(),
        "string": pa.string(),
        "bytes": pa.binary(),
    }
    if t in simple:
        return simple[t]
    if t == "array":
        return pa.list_(arrow_field("element", s.get("items") or {"type": "string", "optional": True}))
    if t == "map":
        keys = s.get("keys") or {"type": "string"}
        values = s.get("values") or {"type": "string", "optional": True}
        return pa.map_(arrow_type(keys), arrow_field("value", values))
    if t == "struct":
        return pa.struct([arrow_field(f["field"], f) for f in s.get("fields") or []])
    raise ConfigError(f"DeltaSink: no Delta type for Connect schema type {t!r}")


def arrow_field(name: str, s: Schema) -> Any:
    import pyarrow as pa

    return pa.field(name, arrow_type(s), nullable=bool(s.get("optional", False)))


def _arrow_value(s: Schema | None, v: Any) -> Any:
    """A Connect value as pyarrow takes it for ``arrow_type(s)``."""
    if v is None or s is None:
        return v
    name, t = s.get("name"), s.get("type")
    if name == TIME and isinstance(v, dt.datetime):
        return (v.hour * 3600 + v.minute * 60 + v.second) * 1000 + v.microsecond // 1000
    if name == DATE and isinstance(v, dt.datetime):
        return v.date()
    if t == "struct" and isinstance(v, dict):
        return {f["field"]: _arrow_value(f, v.get(f["field"])) for f in s.get("fields") or []}
    if t == "array" and isinstance(v, list):
        return [_arrow_value(s.get("items"), x) for x in v]
    if t == "map" and isinstance(v, dict):
        return [(_arrow_value(s.get("keys"), k), _arrow_value(s.get("values"), x)) for k, x in v.items()]
    return v


def _row_shape(rec: ConnectRecord) -> tuple[Schema | None, dict[str, Any]]:
    """(struct schema or None, the row) for one record's value."""
    s, v = rec.value_schema, rec.value
    if s is not None and s.get("type") == "struct":
        return s, _arrow_value(s, v) if v is not None else {}
    if s is None and isinstance(v, dict):
        return None, v
    if s is None:
        return None, {"value": v}
    wrapped: Schema = {"type": "struct", "fields": [{**s, "field": "value", "optional": True}]}
    return wrapped, {"value": _arrow_value(s, v)}


def to_table(recs: list[ConnectRecord]) -> Any:
    """The values of records sharing one Connect value schema as one Arrow table."""
    import pyarrow as pa

    schema0, _ = _row_shape(recs[0])
    rows = [_row_shape(rec)[1] for rec in recs]
    if schema0 is None:
        try:
            return pa.Table.from_pylist(rows)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise RuntimeError(f"DeltaSink: the schemaless records do not share one shape: {e}") from None
    st = arrow_type(schema0)
    return pa.Table.from_pylist(rows, schema=pa.schema(list(st)))


def runs_by_schema(recs: list[ConnectRecord]) -> list[list[ConnectRecord]]:
    """Consecutive records with the same Connect value schema (each run is one Arrow table)."""
    out: list[list[ConnectRecord]] = []
    key: Any = object()
    for rec in recs:
        s, _ = _row_shape(rec)
        k = repr(s) if s is not None else None
        if not out or k != key:
            out.append([])
            key = k
        out[-1].append(rec)
    return out


# -- the writer ----------------------------------------------------------------------------------


class DeltaWriter:
    def __init__(self, connector: str, props: Mapping[str, str]) -> None:
        self.connector = connector
        self.template = props["table.path"].strip()
        self.partition_by = _partition_by(props)
        self.schema_mode: Literal["merge"] | None = (
            "merge" if props.get("schema.evolution", "merge").strip().lower() == "merge" else None
        )
        size = int(props.get("target.file.size", "0").strip() or "0")
        self.target_file_size = size or None
        self.skipped = 0  # records already in the table (a replay)

    def _open(self, path: str) -> Any:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(path)
        except TableNotFoundError:
            return None

    def committed(self, path: str, topic: str, partitions: list[int]) -> dict[int, int]:
        """partition -> next offset to write, for the partitions the table has a version for."""
        t = self._open(path)
        if t is None:
            return {}
        out = {}
        for p in partitions:
            v = t.transaction_version(app_id(self.connector, topic, p))
            if v is not None:
                out[p] = int(v)
        return out

    def _batch_table(self, recs: list[ConnectRecord], path: str) -> Any:
        """One Arrow table for the records of a batch; runs with different value schemas are
        unified (columns missing from a run are null)."""
        import pyarrow as pa

        tables = [to_table(run) for run in runs_by_schema(recs)]
        if len(tables) == 1:
            return tables[0]
        try:
            return pa.concat_tables(tables, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise RuntimeError(
                f"DeltaSink: the records written to {path} in one batch have incompatible schemas: {e}"
            ) from None

    def write(self, items: list[tuple[str, int, int, ConnectRecord]]) -> int:
        """Writes (source topic, partition, offset, record) items; returns how many were new."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        by_table: dict[str, list[tuple[str, int, int, ConnectRecord]]] = {}
        for it in items:
            by_table.setdefault(table_path(self.template, it[3].topic), []).append(it)
        written = 0
        for path, its in by_table.items():
            t = self._open(path)
            versions: dict[tuple[str, int], int | None] = {}  # the table's, per source partition
            fresh = []
            for it in its:
                if (it[0], it[1]) not in versions:
                    v = None if t is None else t.transaction_version(app_id(self.connector, it[0], it[1]))
                    versions[(it[0], it[1])] = None if v is None else int(v)
                v = versions[(it[0], it[1])]
                if v is not None and it[2] < v:
                    self.skipped += 1
                    continue
                fresh.append(it)
            if not fresh:
                continue
            ends: dict[tuple[str, int], int] = {}
            for src_topic, part, off, _rec in fresh:
                ends[(src_topic, part)] = max(ends.get((src_topic, part), -1), off + 1)
            txns = [Transaction(app_id(self.connector, tp, p), o) for (tp, p), o in sorted(ends.items())]
            table = self._batch_table([rec for *_x, rec in fresh], path)
            missing = [c for c in self.partition_by if c not in table.column_names]
            if missing:
                raise RuntimeError(
                    f"DeltaSink: partition.by column {missing[0]!r} is not a field of the records "
                    f"written to {path} (their fields: {', '.join(table.column_names)})"
                )
            # one commit: the rows and the partitions' next offsets together
            write_deltalake(
                t if t is not None else path,
                table,
                mode="append",
                partition_by=self.partition_by or None,
                schema_mode=self.schema_mode,
                target_file_size=self.target_file_size,
                commit_properties=CommitProperties(
                    app_transactions=txns, custom_metadata={"strom.connector": self.connector}
                ),
            )
            written += len(fresh)
        return written
