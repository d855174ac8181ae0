"""Connect's data model in Python.

A schema is Connect's JSON converter schema form (a dict: ``type`` one of int8, int16, int32,
int64, float32, float64, boolean, string, bytes, array, map, struct; ``optional``, ``name``,
``version``, ``default``, ``fields`` (struct: ``[{"field", "type", ...}]``), ``items`` (array),
``keys``/``values`` (map), ``parameters``), or None for schemaless data. Values: a struct or a
map is a dict, an array a list, bytes are ``bytes``; the logical types Timestamp, Date and Time
(``org.apache.kafka.connect.data.*``) are :class:`datetime.datetime` (UTC), Decimal is
:class:`decimal.Decimal`.
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass, field, replace
from typing import Any

Schema = dict[str, Any]

TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"
DECIMAL = "org.apache.kafka.connect.data.Decimal"

PRIMITIVES = ("int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string", "bytes")
INTS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class DataException(ValueError):
    """Connect's ``DataException``: data that does not fit (bad value, missing field ...)."""

    java_class = "org.apache.kafka.connect.errors.DataException"


@dataclass
class ConnectRecord:
    """A source or sink record on its way through the converters and transforms."""

    topic: str
    key: Any = None
    value: Any = None
    key_schema: Schema | None = None
    value_schema: Schema | None = None
    partition: int | None = None
    timestamp: int | None = None  # ms since the epoch
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    offset: int | None = None  # sink records: the Kafka offset

    def new(self, **changes: Any) -> ConnectRecord:
        return replace(self, **changes)


def struct_schema(fields: list[Schema], name: str | None = None, optional: bool = False) -> Schema:
    s: Schema = {"type": "struct", "fields": fields, "optional": optional}
    if name:
        s["name"] = name
    return s


def field_schema(name: str, schema: Schema) -> Schema:
    f = copy.deepcopy(schema)
    f["field"] = name
    return f


def strip_field(schema: Schema) -> Schema:
    """A struct field's schema without its ``field`` name."""
    return {k: v for k, v in schema.items() if k != "field"}


def find_field(schema: Schema, name: str) -> Schema | None:
    for f in schema.get("fields") or []:
        if f.get("field") == name:
            found: Schema = f
            return found
    return None


def require_struct(value: Any, schema: Schema | None, purpose: str) -> dict[str, Any]:
    if schema is not None and schema.get("type") != "struct":
        raise DataException(f"Only Struct objects supported for [{purpose}], found: {schema.get('type')}")
    if not isinstance(value, dict):
        kind = "Struct" if schema is not None else "Map"
        raise DataException(
            f"Only {kind} objects supported in absence of schema for [{purpose}], found: {type_name(value)}"
        )
    return value


def require_map(value: Any, purpose: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DataException(
            f"Only Map objects supported in absence of schema for [{purpose}], found: {type_name(value)}"
        )
    return value


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {
        dict: "java.util.HashMap",
        list: "java.util.ArrayList",
        str: "java.lang.String",
        int: "java.lang.Long",
        float: "java.lang.Double",
        bool: "java.lang.Boolean",
        bytes: "[B",
    }.get(type(value), type(value).__name__)


def infer_schema(value: Any) -> Schema | None:
    """The schema Connect's ``Values.inferSchema`` gives a schemaless primitive (else None)."""
    if isinstance(value, bool):
        return {"type": "boolean", "optional": False}
    if isinstance(value, int):
        return {"type": "int64", "optional": False}
    if isinstance(value, float):
        return {"type": "float64", "optional": False}
    if isinstance(value, str):
        return {"type": "string", "optional": False}
    if isinstance(value, bytes):
        return {"type": "bytes", "optional": False}
    return None


def validate_value(schema: Schema, value: Any, where: str = "value") -> None:
    """Raises :class:`DataException` when ``value`` does not fit ``schema`` (Connect's
    ``ConnectSchema.validateValue``)."""
    if value is None:
        if schema.get("optional") or "default" in schema:
            return
        raise DataException(
            f'Invalid value: null used for required field: "{where}", '
            f"schema type: {schema.get('type', '?').upper()}"
        )
    t = schema.get("type")
    name = schema.get("name")
    ok: bool
    if name in (TIMESTAMP, DATE, TIME):
        ok = isinstance(value, dt.datetime)
    elif t in INTS:
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok:
            bits = INTS[t]
            ok = -(1 << (bits - 1)) <= value < (1 << (bits - 1))
    elif t in ("float32", "float64"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif t == "boolean":
        ok = isinstance(value, bool)
    elif t == "string":
        ok = isinstance(value, str)
    elif t == "bytes":
        ok = isinstance(value, (bytes, bytearray)) or name == DECIMAL
    elif t == "array":
        ok = isinstance(value, list)
        if ok:
            for v in value:
                validate_value(schema.get("items") or {}, v, where)
    elif t == "map":
        ok = isinstance(value, dict)
        if ok:
            for k, v in value.items():
                validate_value(schema.get("keys") or {}, k, where)
                validate_value(schema.get("values") or {}, v, where)
    elif t == "struct":
        ok = isinstance(value, dict)
        if ok:
            names = set()
            for f in schema.get("fields") or []:
                names.add(f["field"])
                validate_value(f, value.get(f["field"]), f["field"])
            extra = set(value) - names
            if extra:
                raise DataException(f"{sorted(extra)[0]} is not a valid field name")
    else:
        raise DataException(f"unknown schema type {t!r}")
    if not ok:
        raise DataException(
            f"Invalid Java object for schema with type {str(t).upper()}: "
            f'{type_name(value)} for field: "{where}"'
        )


def millis(value: dt.datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return (value - EPOCH) // dt.timedelta(milliseconds=1)


def from_millis(ms: int) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=ms)


class ConfigError(ValueError):
    """A connector config Connect would refuse (``ConfigException``): one line, no traceback."""
