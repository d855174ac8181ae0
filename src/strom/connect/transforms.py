"""Kafka Connect's single-message transforms and predicates, under Kafka's class names and
config keys, on :class:`~strom.connect.data.ConnectRecord` (schemaless maps or structs with a
schema in the JSON converter's form).

Every transform that has ``$Key``/``$Value`` variants in Kafka has them here; a tombstone (null
value) passes through the transforms that let it pass in Kafka (InsertField, ReplaceField,
MaskField, ExtractField, Cast, Flatten, TimestampConverter) and fails those that fail on it
(ValueToKey). A bad config raises :class:`~strom.connect.data.ConfigError`, bad data
:class:`~strom.connect.data.DataException`.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from strom.connect import timefmt
from strom.connect.data import (
    DATE,
    EPOCH,
    INTS,
    TIME,
    TIMESTAMP,
    ConfigError,
    ConnectRecord,
    DataException,
    Schema,
    field_schema,
    find_field,
    from_millis,
    millis,
    require_map,
    require_struct,
    strip_field,
)

log = logging.getLogger("strom.connect")

PKG = "org.apache.kafka.connect.transforms."
PRED_PKG = PKG + "predicates."


def split_list(v: str) -> list[str]:
    """A Connect LIST config: comma-separated, items trimmed, empty string = empty list."""
    return [x.strip() for x in v.split(",") if x.strip()] if v.strip() else []


UNKNOWN_KEYS: ContextVar[list[str] | None] = ContextVar("strom_connect_unknown_keys", default=None)


@contextmanager
def plugin_keys(prefix: str) -> Iterator[None]:
    """The unknown keys reported while building one plugin, named with its config prefix
    (``transforms.<alias>.``, ``value.converter.`` ...)."""
    outer = UNKNOWN_KEYS.get()
    mine: list[str] = []
    token = UNKNOWN_KEYS.set(mine)
    try:
        yield
    finally:
        UNKNOWN_KEYS.reset(token)
        for key in mine:
            if outer is not None:
                outer.append(prefix + key)
            else:
                log.warning("The configuration '%s%s' was supplied but isn't a known config", prefix, key)


class Props:
    """A transform's (or converter's) config: typed getters; :meth:`done` reports the keys no
    getter read. As in Kafka Connect (``AbstractConfig.logUnused``) they are not an error: each is
    logged as a warning and collected in :data:`UNKNOWN_KEYS` when a caller set it."""

    def __init__(self, owner: str, props: Mapping[str, str]) -> None:
        self.owner, self.props = owner, dict(props)
        self.used: set[str] = set()

    def get(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        self.used.add(key)
        v = self.props.get(key)
        if v is None:
            if required:
                raise ConfigError(
                    f'Missing required configuration "{key}" which has no default value ({self.owner})'
                )
            return default
        return v

    def string(self, key: str, default: str = "", *, required: bool = False) -> str:
        v = self.get(key, default, required=required)
        return v if v is not None else default

    def lst(self, key: str, default: str = "") -> list[str]:
        return split_list(self.string(key, default))

    def boolean(self, key: str, default: bool) -> bool:
        v = self.get(key)
        if v is None:
            return default
        if v.strip().lower() not in ("true", "false"):
            raise ConfigError(
                f"Invalid value {v} for configuration {key}: Expected value to be either "
                f"true or false ({self.owner})"
            )
        return v.strip().lower() == "true"

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        v = self.string(key, default)
        for c in choices:
            if c.lower() == v.lower():
                return c
        raise ConfigError(
            f"Invalid value {v} for configuration {key}: String must be one of: "
            f"{', '.join(choices)} ({self.owner})"
        )

    def done(self) -> None:
        sink = UNKNOWN_KEYS.get()
        for key in sorted(set(self.props) - self.used):
            if sink is not None:
                sink.append(key)
            else:
                log.warning(
                    "The configuration '%s' was supplied but isn't a known config (%s)", key, self.owner
                )


class Transformation:
    """A single-message transform: ``apply`` returns the new record, or None to drop it."""

    java_class = ""

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        raise NotImplementedError


class _KeyOrValue(Transformation):
    is_key = False

    def operating(self, r: ConnectRecord) -> tuple[Any, Schema | None]:
        return (r.key, r.key_schema) if self.is_key else (r.value, r.value_schema)

    def with_(self, r: ConnectRecord, value: Any, schema: Schema | None) -> ConnectRecord:
        if self.is_key:
            return r.new(key=value, key_schema=schema)
        return r.new(value=value, value_schema=schema)


def _copy_basics(schema: Schema, fields: list[Schema]) -> Schema:
    out = {k: v for k, v in schema.items() if k in ("name", "version", "doc", "optional", "parameters")}
    out["type"] = "struct"
    out["fields"] = fields
    return out


# -- InsertField ---------------------------------------------------------------------------------


class InsertField(_KeyOrValue):
    """Adds the record's topic, partition, offset (sink records), timestamp, or a static value."""

    def __init__(self, props: Mapping[str, str]) -> None:
        p = Props(self.java_class, props)
        self.fields: dict[str, tuple[str, bool]] = {}
        for kind in ("topic", "partition", "offset", "timestamp", "static"):
            spec = p.string(f"{kind}.field")
            if spec:
                optional = not spec.endswith("!")
                name = spec[:-1] if spec.endswith(("!", "?")) else spec
                self.fields[kind] = (name, optional)
        self.static_value = p.get("static.value")
        self.replace_null = p.boolean("replace.null.with.default", True)
        p.done()
        if not self.fields:
            raise ConfigError(
                f"{self.java_class}: no field to insert (set topic.field, partition.field, "
                "offset.field, timestamp.field or static.field)"
            )

    def _values(self, r: ConnectRecord, with_schema: bool) -> list[tuple[str, Any, Schema]]:
        out: list[tuple[str, Any, Schema]] = []
        for kind, (name, optional) in self.fields.items():
            if kind == "topic":
                out.append((name, r.topic, {"type": "string", "optional": optional}))
            elif kind == "partition":
                out.append((name, r.partition, {"type": "int32", "optional": optional}))
            elif kind == "offset":
                if r.offset is None:
                    raise DataException(
                        f"Only SinkRecord supported for [field insertion], found: SourceRecord "
                        f"(offset.field={name})"
                    )
                out.append((name, r.offset, {"type": "int64", "optional": optional}))
            elif kind == "timestamp":
                ts = r.timestamp
                if with_schema:
                    out.append(
                        (
                            name,
                            from_millis(ts) if ts is not None else None,
                            {"type": "int64", "name": TIMESTAMP, "version": 1, "optional": optional},
                        )
                    )
                else:
                    out.append((name, ts, {"type": "int64", "optional": optional}))
            else:
                out.append((name, self.static_value, {"type": "string", "optional": optional}))
        return out

    def apply(self, r: ConnectRecord) -> ConnectRecord | None:
        value, schema = self.operating(r)
        if value is None:
            return r
        if schema is None:
            m = dict(require_map(value, "field insertion"))
            for name, v, _s in self._values(r, False):
                if v is not None:  # Kafka inserts only the values it has
                    m[name] = v
            return self.with_(r, m, None)
        struct = require_struct(value, schema, "field insertion")
        inserted = self._values(r, True)
        names = {n for n, _, _ in inserted}
        fields = [f for f in schema.get("fields") or [] if f["field"] not in names]
        fields += [field_schema(n, s) for n, _, s in inserted]
        out = {
            f["field"]: struct.get(f["field"]) for f in schema.get("fields") or [] if f["field"] not in names
        }
        for n, v, _s in inserted:
            out[n] = v
        return self.with_(r, out, _copy_basics(schema, fields))


# -- ReplaceField --------------------------------------------------------------------------------


class ReplaceField(_KeyOrValue):
    """Keeps (``include``), drops (``exclude``) and renames (``renames``, ``old:new``) fields."""

    def __init__(self, props: Mapping[str, str]) -> None:
        p = Props(self.java_class, props)
        self.exclude = set(p.lst("exclude") or p.lst("blacklist"))
        self.include = set(p.lst("include") or p.lst("whitelist"))
        self.renames: dict[str, str] = {}
        for item in p.lst("renames"):
            parts = item.split(":")
            if len(parts) != 2 or not parts[0] or not parts[1]:
                raise ConfigError(
                    f"Invalid value {item} for configuration renames: Invalid rename mapping: "
                    f"{item} ({self.java_class})"
                )
            self.renames[parts[0]] = parts[1]
        self.replace_null = p.boolean("replace.null.with.default", True)
        p.done()

    def keep(self, name: str) -> bool:
        return name not in self.exclude and (not self.include or name in self.include)

    def apply(self, r: ConnectRecord) -> ConnectRecord | None:
        value, schema = self.operating(r)
        if value is None:
            return r
        if schema is None:
            m = require_map(value, "field replacement")
            return self.with_(r, {self.renames.get(k, k): v for k, v in m.items() if self.keep(k)}, None)
        struct = require_struct(value, schema, "field replacement")
        fields = [
            field_schema(self.renames.get(f["field"], f["field"]), strip_field(f))
            for f in schema.get("fields") or []
            if self.keep(f["field"])
        ]
        out = {
            self.renames.get(f["field"], f["field"]): struct.get(f["field"])
            for f in schema.get("fields") or []
            if self.keep(f["field"])
        }
        return self.with_(r, out, _copy_basics(schema, fields))


# -- MaskField -----------------------------------------------------------------------------------


def _zero_for(v: Any, schema: Schema | None) -> Any:
    name = schema.get("name") if schema else None
    t = schema.get("type") if schema else None
    if name in (TIMESTAMP, DATE, TIME) or isinstance(v, dt.datetime):
        return EPOCH
    if name == "org.apache.kafka.connect.data.Decimal" or isinstance(v, decimal.Decimal):
        return decimal.Decimal(0)
    if t == "boolean" or isinstance(v, bool):
        return False
    if t in INTS or isinstance(v, int):
        return 0
    if t in ("float32", "float64") or isinstance(v, float):
        return 0.0
    if t == "string" or isinstance(v, str):
        return ""
    if t == "array" or isinstance(v, list):
        return []
    if t == "map" or (isinstance(v, dict) and t is None):
        return {}
    raise DataException(f"Cannot mask value of type: {t or type(v).__name__}")


class MaskField(_KeyOrValue):
    """Replaces ``fields`` with their type's null-equivalent, or with ``replacement``."""

    def __init__(self, props: Mapping[str, str]) -> None:
        p = Props(self.java_class, props)
        self.fields = p.lst("fields")
        if not self.fields:
            raise ConfigError(f"Invalid value for configuration fields: Empty list ({self.java_class})")
        self.replacement = p.get("replacement")
        if self.replacement is not None and self.replacement == "":
            raise ConfigError(
                f"Invalid value for configuration replacement: String may not be empty ({self.java_class})"
            )
        self.replace_null = p.boolean("replace.null.with.default", True)
        p.done()

    def _mask(self, v: Any, schema: Schema | None) -> Any:
        if v is None:
            return None
        if self.replacement is None:
            return _zero_for(v, schema)
        t = schema.get("type") if schema else None
        if isinstance(v, str) or t == "string":
            return self.replacement
        try:
            if isinstance(v, bool) or t == "boolean":
                raise ValueError
            if isinstance(v, int) or t in INTS:
                return int(self.replacement)
            if isinstance(v, float) or t in ("float32", "float64"):
                return float(self.replacement)
            if isinstance(v, decimal.Decimal):
                return decimal.Decimal(self.replacement)
        except (ValueError, decimal.InvalidOperation):
            raise DataException(f"Cannot mask value with replacement {self.replacement!r}") from None
        raise DataException(f"Cannot mask value of type {t or type(v).__name__} with custom replacement.")

    def apply(self, r: ConnectRecord) -> ConnectRecord | None:
        value, schema = self.operating(r)
        if value is None:
            return r
        if schema is None:
            m = dict(require_map(value, "mask fields"))
            for f in self.fields:
                if f in m:
                    m[f] = self._mask(m[f], None)
            return self.with_(r, m, None)
        struct = dict(require_struct(value, schema, "mask fields"))
        for f in self.fields:
            fs = find_field(schema, f)
            if fs is None:
                raise DataException(f"{f} is not a valid field name")
            struct[f] = self._mask(struct.get(f), fs)
        return self.with_(r, struct, schema)


# -- ValueToKey ----------------------------------------------------------------------------------


class ValueToKey(Transformation):
    """The key becomes a struct (map) of the value's ``fields``."""

    java_class = PKG + "ValueToKey"

    def __init__(self, props: Mapping[str, str]) -> None:
        p = Props(self.java_class, props)
        self.fields = p.lst("fields")
        if not self.fields:
            raise ConfigError(f"Invalid value for configuration fields: Empty list ({self.java_class})")
        self.replace_null = p.boolean("replace.null.with.default", True)
        p.done()

    def apply(self, r: ConnectRecord) -> ConnectRecord | None:
        if r.value_schema is None:
            m = require_map(r.value, "copying fields from value to key")
            return r.new(key={f: m.get(f) for f in self.fields}, key_schema=None)
        struct = require_struct(r.value, r.value_schema, "copying fields from value to key")
        fields = []
        for f in self.fields:
            fs = find_field(r.value_schema, f)
            if fs is None:
                raise DataException(f"Field does not exist: {f}")
            fields.append(fs)
        return r.new(
            key={f: struct.get(f) for f in self.fields},
            key_schema={"type": "struct", "fields": fields, "optional": False},
        )


# -- ExtractField --------------------------------------------------------------------------------


class ExtractField(_KeyOrValue):
    """The key (value) becomes one of its fields (``field``)."""

    def __init__(self, props: Mapping[str, str]) -> None:
        p = Props(self.java_class, props)
        self.field = p.string("field", required=True)
        self.syntax = p.choice("field.syntax.version", "V1", ("V1", "V2"))
        self.replace_null = p.boolean("replace.null.with.default", True)
        p.done()
        self.path = _field_path(self.field, self.syntax)

    def apply(self, r: ConnectRecord) -> ConnectRecord | None:
        value, schema = self.operating(r)
        if schema is None:
            if value is None:
                return self.with_(r, None, None)
            cur: Any = require_map(value, "field extraction")
            for step in self.path:
                cur = cur.get(step) if isinstance(cur, dict) else None
            return self.with_(r, cur, None)
        fs: Schema | None = schema
        for step in self.path:
            fs = find_field(fs, step) if fs and fs.get("type") == "struct" else None
        if fs is None:
            raise DataException(f"Unknown field: {self.field}")
        if value is None:
            return self.with_(r, None, strip_field(fs))
        cur = require_struct(value, schema, "field extraction")
        for step in self.path:
            cur = cur.get(step) if isinstance(cur, dict) else None
        return self.with_(r, cur, strip_field(fs))


def _field_path(field: str, syntax: str) -> list[str]:
    """KIP-821: V1 takes the name as it is; V2 splits on dots, backquotes quote a step."""
    if syntax == "V1":
        return [field]
    steps, cur, i, quoted = [], "", 0, False
    while i < len(field):
        c = field[i]
        if c == "`" and (quoted or not cur):
            quoted = not quoted
        elif c == "." and not quoted:
            steps.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    steps.append(cur)
    return steps


# -- HoistField, InsertHeader, DropHeaders -------------------------------------------------------


class HoistField(_KeyOrValue):
    """Wraps the key (value) in a struct (map) with one field, ``field``."""

    def __init__(self, props: Mapping[str, str]) -> None:
        p = Props(self.java_class, props)
        self.field = p.string("field", required=True)
        p.done()

    def apply(self, r: ConnectRecord) -> ConnectRecord | None:
        value, schema = self.operating(r)
        if schema is None:
            return self.with_(r, {self.field: value}, None)
        return self.with_(
            r,
            {self.field: value},
            {"type": "struct", "fields": [field_schema(self.field, schema)], "optional": False},
        )


class InsertHeader(Transformation):
    java_class = PKG + "InsertHeader"

    def __init__(self, props: Mapping[str, str]) -> None:
        p = Props(self.java_class, props)
        self.header = p.string("header", required=True)
        self.value = p.string("value.literal", required=True)
        p.done()

    def apply(self, r: ConnectRecord) -> ConnectRecord | None:
        return r.new(headers=[*r.headers, (self.header, self.value.encode())])


class DropHeaders(Transformation):
    java_class = PKG + "DropHeaders"

    def __init__(self, props: Mapping[str, str]) -> None:
        p = Props(self.java_class, props)
        self.names = set(p.lst("headers"))
        if not self.names:
            raise ConfigError(f"Invalid value for configuration headers: Empty list ({self.java_class})")
        p.done()

    def apply(self, r: ConnectRecord) -> ConnectRecord | None:
        return r.new(headers=[(k, v) for k, v in r.headers if k not in self.names])


# -- Cast ----------------------------------------------------------------------------------------

CAST_TYPES = ("int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string")


def _wrap(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def java_double_str(v: float) -> str:
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    if v == int(v) and abs(v) < 1e7:
        return f"{int(v)}.0" if v or str(v)[0] != "-" else "-0.0"
    r = repr(v)
    if "e" in r:
        mant, exp = r.split("e")
        if "." not in mant:
            mant += ".0"
        return f"{mant}E{int(exp)}"
    return r


def cast_value(v: Any, target: str, source_schema: Schema | None = None) -> Any:
    if v is None:
        return None
    name = source_schema.get("name") if source_schema else None
    if isinstance(v, dt.datetime) or name in (TIMESTAMP, DATE, TIME):
        if not isinstance(v, dt.datetime):
            raise DataException(f"Unexpected value for a logical type: {v!r}")
        if target == "string":
            return v.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{v.microsecond // 1000:03d}Z"
        v = millis(v)
    if isinstance(v, (dict, list, bytes)) and target != "string":
        raise DataException(f"Cast transformation does not support casting to/from {type(v).__name__}")
    try:
        if target in INTS:
            bits = INTS[target]
            if isinstance(v, bool):
                return 1 if v else 0
            if isinstance(v, str):
                n = int(v.strip())
                if not -(1 << (bits - 1)) <= n < (1 << (bits - 1)):
                    raise ValueError(f'Value out of range. Value:"{v}"')
                return n
            if isinstance(v, float):
                if v != v:
                    return 0
                return (
                    _wrap(int(v), bits)
                    if bits < 32
                    else max(min(int(v), (1 << (bits - 1)) - 1), -(1 << (bits - 1)))
                )
            if isinstance(v, decimal.Decimal):
                return _wrap(int(v), bits)
            return _wrap(int(v), bits)
        if target in ("float32", "float64"):
            if isinstance(v, bool):
                return 1.0 if v else 0.0
            return float(v.strip()) if isinstance(v, str) else float(v)
        if target == "boolean":
            if isinstance(v, str):
                return v.strip().lower() == "true"
            return bool(v)
        if target == "string":
            if isinstance(v, bool):
                return "true" if v else "false"
            if isinstance(v, float):
                return java_double_str(v)
            if isinstance(v, bytes):
                return base64.b64encode(v).decode()
            if isinstance(v, (dict, list)):
                return str(v)
            return str(v)
    except (ValueError, TypeError, decimal.InvalidOperation) as e:
        raise DataException(f"Value ({v!r}) cannot be cast to {target}: {e}") from None
    raise DataException(f"Unexpected type in Cast transformation: {target}")


class Cast(_KeyOrValue):
    """Casts fields (``spec=f:type,...``) or the whole key (value) (``spec=type``)."""

    def __init__(self, props: Mapping[str, str]) -> None:
        p = Props(self.java_class, props)
        spec = p.lst("spec")
        self.replace_null = p.boolean("replace.null.with.default", True)
        p.done()
        if not spec:
            raise ConfigError(f"Must specify at least one field to cast. ({self.java_class})")
        self.whole: str | None = None
        self.casts: dict[str, str] = {}
        for item in spec:
            parts = item.split(":")
            if len(parts) == 1:
                if len(spec) > 1:
                    raise ConfigError(
                        f"Cast transformations that specify a type to cast the entire value to "
                        f"may only specify a single cast in their spec ({self.java_class})"
                    )
                self.whole = self._type(parts[0].strip())
            elif len(parts) == 2:
                self.casts[parts[0].strip()] = self._type(parts[1].strip())
            else:
                raise ConfigError(f"Invalid cast mapping: {item} ({self.java_class})")

    def _type(self, t: str) -> str:
        if t.lower() not in CAST_TYPES:
            raise ConfigError(f"Invalid type found in casting spec: {t} ({self.java_class})")
        return t.lower()

    def apply(self, r: ConnectRecord) -> ConnectRecord | None:
        value, schema = self.operating(r)
        if self.whole is not None:
            if schema is not None and schema.get("type") in ("struct", "map", "array"):
                raise DataException(f"Cast transformation does not support casting to/from {schema['type']}")
            new_schema = None
            if schema is not None:
                new_schema = {"type": self.whole, "optional": bool(schema.get("optional"))}
                if "default" in schema:
                    new_schema["default"] = cast_value(schema["default"], self.whole, schema)
            return self.with_(r, cast_value(value, self.whole, schema), new_schema)
        if value is None:
            return r
        if schema is None:
            m = dict(require_map(value, "cast types"))
            for f, t in self.casts.items():
                if f in m:
                    m[f] = cast_value(m[f], t)
            return self.with_(r, m, None)
        struct = require_struct(value, schema, "cast types")
        fields, out = [], {}
        for f in schema.get("fields") or []:
            name = f["field"]
            if name in self.casts:
                t = self.casts[name]
                if f.get("type") in ("struct", "map", "array"):
                    raise DataException(f"Cast transformation does not support casting to/from {f['type']}")
                nf: Schema = {"field": name, "type": t, "optional": bool(f.get("optional"))}
                if "default" in f:
                    nf["default"] = cast_value(f["default"], t, f)
                fields.append(nf)
                out[name] = cast_value(struct.get(name), t, f)
            else:
                fields.append(f)
                out[name] = struct.get(name)
        return self.with_(r, out, _copy_basics(schema, fields))


# -- Flatten -------------------------------------------------------------------------------------


class Flatten(_KeyOrValue):
    """Nested structs (maps) become top-level fields named ``outer<delimiter>inner``."""

    def __init__(self, props: Mapping[str, str]) -> None:
        p = Props(self.java_class, props)
        self.delimiter = p.string("delimiter", ".")
        p.done()

    def _flat_map(self, prefix: str, m: Mapping[str, Any], out: dict[str, Any]) -> None:
        for k, v in m.items():
            name = f"{prefix}{self.delimiter}{k}" if prefix else str(k)
            if isinstance(v, dict):
                self._flat_map(name, v, out)
            else:
                out[name] = v

    def _flat_schema(self, prefix: str, schema: Schema, optional: bool, out: list[Schema]) -> None:
        for f in schema.get("fields") or []:
            name = f"{prefix}{self.delimiter}{f['field']}" if prefix else f["field"]
            if f.get("type") == "struct":
                self._flat_schema(name, f, optional or bool(f.get("optional")), out)
            else:
                nf = field_schema(name, strip_field(f))
                if optional:
                    nf["optional"] = True
                out.append(nf)

    def _flat_struct(
        self, prefix: str, schema: Schema, s: Mapping[str, Any] | None, out: dict[str, Any]
    ) -> None:
        for f in schema.get("fields") or []:
            name = f"{prefix}{self.delimiter}{f['field']}" if prefix else f["field"]
            v = s.get(f["field"]) if s is not None else None
            if f.get("type") == "struct":
                self._flat_struct(name, f, v, out)
            else:
                out[name] = v

    def apply(self, r: ConnectRecord) -> ConnectRecord | None:
        value, schema = self.operating(r)
        if value is None:
            return r
        if schema is None:
            out: dict[str, Any] = {}
            self._flat_map("", require_map(value, "flattening"), out)
            return self.with_(r, out, None)
        struct = require_struct(value, schema, "flattening")
        fields: list[Schema] = []
        self._flat_schema("", schema, False, fields)
        vals: dict[str, Any] = {}
        self._flat_struct("", schema, struct, vals)
        return self.with_(r, vals, _copy_basics(schema, fields))


# -- routers -------------------------------------------------------------------------------------


def java_regex(pattern: str, owner: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"Invalid regex {pattern!r} for {owner}: {e}") from None


class RegexRouter(Transformation):
    """A topic matching ``regex`` (whole name) is renamed with ``replacement``."""

    java_class = PKG + "RegexRouter"

    def __init__(self, props: Mapping[str, str]) -> None:
        p = Props(self.java_class, props)
        self.regex = java_regex(p.string("regex", required=True), self.java_class)
        self.replacement = p.string("replacement", required=True)
        p.done()
        self._groups = _parse_replacement(self.replacement)

    def apply(self, r: ConnectRecord) -> ConnectRecord | None:
        m = self.regex.fullmatch(r.topic)
        if not m:
            return r
        return r.new(topic=_expand(self._groups, m))


def _parse_replacement(replacement: str) -> list[tuple[str, str | int]]:
    """("lit", text) | ("num", n) | ("name", group)."""
    parts: list[tuple[str, str | int]] = []
    lit, i = "", 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\":
            if i + 1 >= len(replacement):
                raise ConfigError(f"character to be escaped is missing in replacement {replacement!r}")
            lit += replacement[i + 1]
            i += 2
        elif c == "$":
            if lit:
                parts.append(("lit", lit))
                lit = ""
            if replacement[i + 1 : i + 2] == "{":
                j = replacement.find("}", i)
                if j < 0:
                    raise ConfigError(f"named capturing group is missing trailing '}}' in {replacement!r}")
                parts.append(("name", replacement[i + 2 : j]))
                i = j + 1
            else:
                j = i + 1
                while j < len(replacement) and replacement[j].isdigit():
                    j += 1
                if j == i + 1:
                    raise ConfigError(f"Illegal group reference in replacement {replacement!r}")
                parts.append(("num", replacement[i + 1 : j]))
                i = j
        else:
            lit += c
            i += 1
    if lit:
        parts.append(("lit", lit))
    return parts


def _expand(parts: list[tuple[str, str | int]], m: re.Match[str]) -> str:
    out = []
    groups = m.re.groups
    for kind, v in parts:
        if kind == "lit":
            out.append(str(v))
        elif kind == "name":
            if v not in m.re.groupindex:
                raise DataException(f"No group with name {{{v}}}")
            out.append(m.group(str(v)) or "")
        else:
            digits = str(v)
            n = len(digits)  # Java: the longest prefix of the digits that names a group
            while n > 1 and int(digits[:n]) > groups:
                n -= 1
            g = int(digits[:n])
            if g > groups:
                raise DataException(f"No group {g}")
            out.append((m.group(g) or "") + digits[n:])
    return "".join(out)


class TimestampRouter(Transformation):
    """The topic becomes ``topic.format`` with ``${topic}`` and ``${timestamp}`` (the record's
    timestamp in ``timestamp.format``, UTC)."""

    java_class = PKG + "TimestampRouter"

    def __init__(self, props: Mapping[str, str]) -> None:
        p = Props(self.java_class, props)
        self.topic_format = p.string("topic.format", "${topic}-${timestamp}")
        self.ts_format = p.string("timestamp.format", "yyyyMMdd")
        p.done()
        timefmt.check(self.ts_format)

    def apply(self, r: ConnectRecord) -> ConnectRecord | None:
        if r.timestamp is None:
            raise DataException(f"Timestamp missing on record: {r}")
        ts = timefmt.format_ms(self.ts_format, r.timestamp)
        return r.new(topic=self.topic_format.replace("${topic}", r.topic).replace("${timestamp}", ts))


# -- TimestampConverter --------------------------------------------------------------------------

TS_TYPES = ("string", "unix", "Date", "Time", "Timestamp")
_PRECISIONS = {"seconds": 1000.0, "milliseconds": 1.0, "microseconds": 0.001, "nanoseconds": 0.000001}


class TimestampConverter(_KeyOrValue):
    """Converts a timestamp field (or the whole key/value) between string, unix, Date, Time and
    Timestamp."""

    def __init__(self, props: Mapping[str, str]) -> None:
        p = Props(self.java_class, props)
        self.field = p.string("field", "")
        self.target = p.choice("target.type", "", TS_TYPES) if p.props.get("target.type") else ""
        if not self.target:
            p.get("target.type", required=True)
        self.format = p.string("format", "")
        self.precision = p.choice("unix.precision", "milliseconds", tuple(_PRECISIONS))
        self.replace_null = p.boolean("replace.null.with.default", True)
        p.done()
        if self.format:
            timefmt.check(self.format)
        if self.target == "string" and not self.format:
            raise ConfigError(
                f"TimestampConverter requires format option to be specified when using string "
                f"timestamps ({self.java_class})"
            )

    def _kind(self, v: Any, schema: Schema | None) -> str:
        if schema is not None:
            name = schema.get("name")
            if name == TIMESTAMP:
                return "Timestamp"
            if name == DATE:
                return "Date"
            if name == TIME:
                return "Time"
            if schema.get("type") == "int64":
                return "unix"
            if schema.get("type") == "string":
                return "string"
            raise DataException(f"Schema {schema} does not correspond to a known timestamp type format")
        if isinstance(v, dt.datetime):
            return "Timestamp"
        if isinstance(v, int) and not isinstance(v, bool):
            return "unix"
        if isinstance(v, str):
            return "string"
        raise DataException(f"TimestampConverter does not support {type(v).__name__} objects as timestamps")

    def _to_ms(self, v: Any, kind: str) -> int:
        if kind == "string":
            if not self.format:
                raise DataException(
                    "TimestampConverter requires format option to be specified when using string timestamps"
                )
            return timefmt.parse_ms(self.format, v)
        if kind == "unix":
            f = _PRECISIONS[self.precision]
            return int(v * f) if f >= 1 else int(v // round(1 / f))
        return millis(v)

    def _from_ms(self, ms: int) -> Any:
        t = self.target
        if t == "string":
            return timefmt.format_ms(self.format, ms)
        if t == "unix":
            f = _PRECISIONS[self.precision]
            return ms // int(f) if f >= 1 else ms * round(1 / f)
        if t == "Date":
            return from_millis(ms - ms % 86_400_000)
        if t == "Time":
            return from_millis(ms % 86_400_000)
        return from_millis(ms)

    def _schema(self, optional: bool) -> Schema:
        t = self.target
        if t == "string":
            return {"type": "string", "optional": optional}
        if t == "unix":
            return {"type": "int64", "optional": optional}
        name = {"Date": DATE, "Time": TIME, "Timestamp": TIMESTAMP}[t]
        return {
            "type": "int32" if t in ("Date", "Time") else "int64",
            "name": name,
            "version": 1,
            "optional": optional,
        }

    def _convert(self, v: Any, schema: Schema | None) -> Any:
        if v is None:
            return None
        return self._from_ms(self._to_ms(v, self._kind(v, schema)))

    def apply(self, r: ConnectRecord) -> ConnectRecord | None:
        value, schema = self.operating(r)
        if not self.field:
            if schema is None:
                return self.with_(r, self._convert(value, None), None)
            return self.with_(r, self._convert(value, schema), self._schema(bool(schema.get("optional"))))
        if value is None:
            return r
        if schema is None:
            m = dict(require_map(value, "converting timestamp formats"))
            m[self.field] = self._convert(m.get(self.field), None)
            return self.with_(r, m, None)
        struct = require_struct(value, schema, "converting timestamp formats")
        fields, out = [], {}
        for f in schema.get("fields") or []:
            if f["field"] == self.field:
                fields.append(field_schema(f["field"], self._schema(bool(f.get("optional")))))
                out[f["field"]] = self._convert(struct.get(f["field"]), f)
            else:
                fields.append(f)
                out[f["field"]] = struct.get(f["field"])
        return self.with_(r, out, _copy_basics(schema, fields))


# -- Filter and predicates -----------------------------------------------------------------------


class Filter(Transformation):
    """Drops every record (used with a predicate: the records it matches)."""

    java_class = PKG + "Filter"

    def __init__(self, props: Mapping[str, str]) -> None:
        Props(self.java_class, props).done()

    def apply(self, r: ConnectRecord) -> ConnectRecord | None:
        return None


class Predicate:
    java_class = ""

    def test(self, r: ConnectRecord) -> bool:
        raise NotImplementedError


class TopicNameMatches(Predicate):
    java_class = PRED_PKG + "TopicNameMatches"

    def __init__(self, props: Mapping[str, str]) -> None:
        p = Props(self.java_class, props)
        self.pattern = java_regex(p.string("pattern", required=True), self.java_class)
        p.done()

    def test(self, r: ConnectRecord) -> bool:
        return r.topic is not None and self.pattern.fullmatch(r.topic) is not None


class HasHeaderKey(Predicate):
    java_class = PRED_PKG + "HasHeaderKey"

    def __init__(self, props: Mapping[str, str]) -> None:
        p = Props(self.java_class, props)
        self.name = p.string("name", required=True)
        p.done()

    def test(self, r: ConnectRecord) -> bool:
        return any(k == self.name for k, _ in r.headers)


class RecordIsTombstone(Predicate):
    java_class = PRED_PKG + "RecordIsTombstone"

    def __init__(self, props: Mapping[str, str]) -> None:
        Props(self.java_class, props).done()

    def test(self, r: ConnectRecord) -> bool:
        return r.value is None


# -- registry ------------------------------------------------------------------------------------


def _variants(base: type[_KeyOrValue], simple: str) -> dict[str, type[Transformation]]:
    out: dict[str, type[Transformation]] = {}
    for suffix, is_key in (("Key", True), ("Value", False)):
        cls = type(f"{simple}${suffix}", (base,), {"is_key": is_key, "java_class": f"{PKG}{simple}${suffix}"})
        out[cls.java_class] = cls  # type: ignore[attr-defined]
    return out


TRANSFORMS: dict[str, type[Transformation]] = {}
for _base, _simple in (
    (InsertField, "InsertField"),
    (ReplaceField, "ReplaceField"),
    (MaskField, "MaskField"),
    (ExtractField, "ExtractField"),
    (Cast, "Cast"),
    (Flatten, "Flatten"),
    (HoistField, "HoistField"),
    (TimestampConverter, "TimestampConverter"),
):
    TRANSFORMS.update(_variants(_base, _simple))
for _cls in (ValueToKey, RegexRouter, TimestampRouter, Filter, InsertHeader, DropHeaders):
    TRANSFORMS[_cls.java_class] = _cls

PREDICATES: dict[str, type[Predicate]] = {
    c.java_class: c for c in (TopicNameMatches, HasHeaderKey, RecordIsTombstone)
}


def _lookup(registry: Mapping[str, Any], cls: str, what: str) -> Any:
    cls = cls.strip()
    if cls in registry:
        return registry[cls]
    for full, impl in registry.items():  # Connect's plugin aliases: the simple class name
        if full.rsplit(".", 1)[-1] == cls:
            return impl
    known = ", ".join(sorted(k.rsplit(".", 1)[-1] for k in registry))
    raise ConfigError(f"Class {cls} could not be found: not a {what} strom has (known: {known})")


def make_transform(cls: str, props: Mapping[str, str]) -> Transformation:
    t: Transformation = _lookup(TRANSFORMS, cls, "transformation")(props)
    return t


def make_predicate(cls: str, props: Mapping[str, str]) -> Predicate:
    p: Predicate = _lookup(PREDICATES, cls, "predicate")(props)
    return p


class TransformChain:
    """``transforms`` in order, each under its optional predicate (and ``negate``)."""

    def __init__(self, steps: list[tuple[str, Transformation, Predicate | None, bool]]) -> None:
        self.steps = steps

    def apply(self, r: ConnectRecord) -> ConnectRecord | None:
        """The transformed record (None: filtered out). An exception raised by a step carries
        ``transform_class`` and ``transform_alias``."""
        cur: ConnectRecord | None = r
        for alias, t, pred, negate in self.steps:
            if cur is None:
                break
            try:
                if pred is not None and pred.test(cur) == negate:
                    continue
                cur = t.apply(cur)
            except Exception as e:
                e.transform_class = t.java_class  # type: ignore[attr-defined]
                e.transform_alias = alias  # type: ignore[attr-defined]
                raise
        return cur
