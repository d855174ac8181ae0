"""``keyFormat`` / ``valueFormat`` of the ``strom`` Spark source and sink: the key and value
columns (de)serialized as strings, JSON, or records in Confluent's wire format described by a
schema registry (Avro, JSON Schema, Protobuf).

Theory of operation
-------------------
At planning time (the driver) :func:`resolve_format` settles *one* schema per column: the one
given by ``valueSchemaId``, else ``valueSchema`` (registered under the subject on write, the
reader schema on read), else version ``valueSchemaVersion`` (default ``latest``) of the subject
(Confluent's TopicNameStrategy ``<topic>-value`` / ``<topic>-key``; RecordNameStrategy or
TopicRecordNameStrategy with ``valueSubjectNameStrategy``; or ``valueSubject``). The
column's Spark type is derived from that schema, so a DataFrame's schema is known before any
record is read and does not change while a streaming query runs:

* Avro (as Spark's ``from_avro``): record -> struct, ``["null", T]`` -> nullable T, other
  unions -> struct ``member0..memberN``, enum -> string, fixed/bytes -> binary, map -> map,
  date / timestamp-millis|micros / decimal / uuid logical types -> date / timestamp / decimal /
  string. Each record is read with its *writer's* schema (by the id in its frame, fetched once per
  executor) resolved against this reader schema, Avro's schema evolution.
* JSON Schema: object with properties -> struct, object with only ``additionalProperties`` ->
  map, array -> array, integer -> long, number -> double, boolean, string; ``["T", "null"]`` and
  ``anyOf``/``oneOf`` of T and null -> nullable T; local ``$ref``; anything else (other
  combinators, untyped) -> a string holding the JSON text.
* Protobuf (as Spark's ``from_protobuf``): message -> struct, repeated -> array, map -> map,
  enum -> string (its name), 32-bit ints -> int, 64-bit and uint32 -> long, unset message fields
  and proto3 ``optional`` fields -> null.
* ``json`` (no registry, no framing): ``valueSchema`` is a JSON Schema, or a Spark schema as JSON
  (``df.schema.json()``).
* ``string``: UTF-8 text.

A record that cannot be decoded (bad framing, unknown schema id, wrong types) fails the task with
its topic, partition and offset (``mode`` FAILFAST, the default); with ``mode`` PERMISSIVE its
column is null and the ``keyError`` / ``valueError`` string column says why.

A :class:`FieldFormat` is picklable and small (schema texts only): executors build their codecs
from it lazily, once per process.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from strom.serde import RegistryClient, SerdeError, frame, unframe
from strom.spark.options import StromOptionError

__all__ = [
    "FORMATS",
    "FieldFormat",
    "decode_column",
    "encode_column",
    "resolve_format",
    "spark_type_of",
]

FORMATS = ("binary", "string", "json", "avro", "json-schema", "protobuf")
REGISTRY_FORMATS = {"avro": "AVRO", "json-schema": "JSON", "protobuf": "PROTOBUF"}

Conv = Callable[[Any], Any]


@dataclass(frozen=True)
class FieldFormat:
    """How the ``key`` or ``value`` column is (de)serialized (see the module docstring)."""

    column: str  # key | value
    format: str  # one of FORMATS (never binary: that is no FieldFormat at all)
    spark_type_json: str  # the column's Spark type, as DataType.json()
    schema: str | None = None  # reader schema (read) / writer schema (write): Avro / JSON Schema
    # text, Protobuf as a base64 FileDescriptorProto
    schema_id: int | None = None  # the id written into frames (write)
    subject: str | None = None
    registry_url: str | None = None
    registry_user_info: str | None = field(default=None, repr=False)
    message: str | None = None  # Protobuf: full name of the message type
    message_indexes: tuple[int, ...] = ()
    permissive: bool = False
    include_raw: bool = False  # the original bytes kept in keyRaw / valueRaw (read)

    @property
    def spark_type(self) -> DataType:
        return _type_from_json(self.spark_type_json)

    @property
    def error_column(self) -> str:
        return f"{self.column}Error"

    @property
    def raw_column(self) -> str:
        return f"{self.column}Raw"


def _type_from_json(raw: str) -> DataType:
    from pyspark.sql.types import _parse_datatype_json_string

    return _parse_datatype_json_string(raw)


# ---------------------------------------------------------------------- options


def _opt(opts: Mapping[str, str], name: str) -> str | None:
    v = opts.get(name.lower())
    return v.strip() if v is not None and v.strip() else None


def format_option(opts: Mapping[str, str], column: str) -> str:
    raw = (_opt(opts, f"{column}Format") or "binary").lower()
    if raw not in FORMATS:
        raise StromOptionError(
            f"Invalid value '{raw}' for option '{column}Format': must be one of {', '.join(FORMATS)}"
        )
    return raw


def permissive_option(opts: Mapping[str, str]) -> bool:
    raw = (_opt(opts, "mode") or "FAILFAST").upper()
    if raw not in ("FAILFAST", "PERMISSIVE"):
        raise StromOptionError(f"Invalid value '{raw}' for option 'mode': must be FAILFAST or PERMISSIVE")
    return raw == "PERMISSIVE"


def _strategy_subject(
    opts: Mapping[str, str], column: str, topic: str | None, given: str | None, stype: str
) -> str | None:
    """The subject under ``keySubjectNameStrategy`` / ``valueSubjectNameStrategy`` (Confluent's
    TopicNameStrategy (default), RecordNameStrategy, TopicRecordNameStrategy; class or simple
    name); the record strategies take the record name from ``keySchema`` / ``valueSchema``."""
    from strom.serde import record_name, subject_name, subject_strategy

    raw = _opt(opts, f"{column}SubjectNameStrategy")
    try:
        strategy = subject_strategy(raw)
    except SerdeError as e:
        raise StromOptionError(f"Invalid value for option '{column}SubjectNameStrategy': {e}") from None
    if strategy == "TopicNameStrategy":
        return f"{topic}-{column}" if topic is not None else None
    if given is None:
        raise StromOptionError(
            f"{column}SubjectNameStrategy={raw}: the record name comes from the schema: set "
            f"'{column}Schema' (or name the subject with '{column}Subject')"
        )
    try:
        rec = record_name(given, stype)
    except SerdeError as e:
        raise StromOptionError(f"{column}SubjectNameStrategy={raw}: {e}") from None
    if strategy == "TopicRecordNameStrategy" and topic is None:
        return None
    return subject_name(strategy, topic or "", column == "key", rec)


def resolve_format(
    options: Mapping[str, str], column: str, topic: str | None, *, for_write: bool
) -> FieldFormat | None:
    """The :class:`FieldFormat` of ``column`` (key | value) from the options, contacting the
    registry where the format needs one; None for ``binary``. Raises :class:`StromOptionError`."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    fmt = format_option(opts, column)
    if fmt == "binary":
        return None
    permissive = permissive_option(opts)
    raw_opt = (_opt(opts, "includeRaw") or "false").lower()
    if raw_opt not in ("true", "false"):
        raise StromOptionError(
            f"Invalid value '{raw_opt}' for option 'includeRaw': must be 'true' or 'false'"
        )
    include_raw = raw_opt == "true" and not for_write
    if fmt == "string":
        return FieldFormat(column, fmt, StringType().json(), permissive=permissive, include_raw=include_raw)
    given = _opt(opts, f"{column}Schema")
    if fmt == "json":
        if given is None:
            raise StromOptionError(
                f"{column}Format=json needs the option '{column}Schema': a JSON Schema, or a Spark "
                "schema as JSON (df.schema.json())"
            )
        doc = _json_doc(given, f"{column}Schema")
        if isinstance(doc, dict) and doc.get("type") == "struct" and "fields" in doc:
            try:
                st: DataType = StructType.fromJson(doc)
            except (KeyError, TypeError, ValueError) as e:
                raise StromOptionError(f"Option '{column}Schema': not a Spark schema: {e}") from None
            schema = json.dumps(_spark_to_json_schema(st))
        else:
            st = _json_schema_spark(doc)
            schema = given
        return FieldFormat(
            column, fmt, st.json(), schema=schema, permissive=permissive, include_raw=include_raw
        )

    url = _opt(opts, "schema.registry.url")
    if url is None:
        raise StromOptionError(f"{column}Format={fmt} needs the option 'schema.registry.url'")
    user_info = _opt(opts, "schema.registry.basic.auth.user.info")
    client = RegistryClient(url, user_info=user_info)
    stype = REGISTRY_FORMATS[fmt]
    sid_raw, version = _opt(opts, f"{column}SchemaId"), _opt(opts, f"{column}SchemaVersion")
    if sum(x is not None for x in (sid_raw, version, given)) > 1:
        raise StromOptionError(
            f"Set at most one of '{column}Schema', '{column}SchemaId' and '{column}SchemaVersion'"
        )
    subject = _opt(opts, f"{column}Subject") or _strategy_subject(opts, column, topic, given, stype)
    # a subject is needed to look a version up, or to register valueSchema on write
    if subject is None and sid_raw is None and (given is None or for_write):
        raise StromOptionError(
            f"{column}Format={fmt}: the subject cannot be derived from a single topic (read from "
            f"several topics or a pattern, or written with a 'topic' column): set '{column}Subject'"
            f" (or give the schema with '{column}Schema' / '{column}SchemaId' on read)"
        )
    wire = "serialized" if fmt == "protobuf" else None
    schema_id: int | None = None
    try:
        if sid_raw is not None:
            try:
                schema_id = int(sid_raw)
            except ValueError:
                raise StromOptionError(f"Invalid value '{sid_raw}' for option '{column}SchemaId'") from None
            info = client.schema(schema_id, wire)
            text, got_type = info["schema"], info.get("schemaType", "AVRO")
        elif given is not None:
            text, got_type = given, stype
            if fmt == "protobuf":
                text = _proto_serialized(given, column)
            if for_write:  # registered as given (as confluent-kafka's serializers do)
                assert subject is not None
                schema_id = client.register(subject, given, stype)
        else:
            v = version or "latest"
            if v != "latest" and not v.lstrip("-").isdigit():
                raise StromOptionError(
                    f"Invalid value '{v}' for option '{column}SchemaVersion': a version number or latest"
                )
            assert subject is not None
            info = client.version(subject, v, wire)
            text, got_type, schema_id = info["schema"], info.get("schemaType", "AVRO"), int(info["id"])
    except SerdeError as e:
        raise StromOptionError(f"{column}Format={fmt}, subject {subject}: {e}") from None
    if got_type != stype:
        raise StromOptionError(f"{column}Format={fmt} but the schema of subject {subject} is {got_type}")
    message: str | None = None
    indexes: tuple[int, ...] = ()
    if fmt == "avro":
        try:
            spark_t = _avro_spark(json.loads(text), {}, set())[0]
        except (ValueError, KeyError, TypeError) as e:
            raise StromOptionError(f"{column}Format=avro: unusable schema: {e}") from None
    elif fmt == "json-schema":
        spark_t = _json_schema_spark(_json_doc(text, f"{column}Schema"))
    else:
        message, indexes, desc = _proto_message(text, _opt(opts, f"{column}ProtobufMessage"), column)
        spark_t = _proto_spark(desc, ())
    return FieldFormat(
        column,
        fmt,
        spark_t.json(),
        schema=text,
        schema_id=schema_id,
        subject=subject,
        registry_url=url,
        registry_user_info=user_info,
        message=message,
        message_indexes=indexes,
        permissive=permissive,
        include_raw=include_raw,
    )


def _json_doc(raw: str, name: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as e:
        raise StromOptionError(f"Option '{name}': invalid JSON: {e}") from None


def spark_type_of(fmt: FieldFormat | None) -> DataType:
    return BinaryType() if fmt is None else fmt.spark_type


# ---------------------------------------------------------------------- Avro -> Spark

_AVRO_PRIMITIVE: dict[str, DataType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
}


def _avro_spark(
    node: Any, names: dict[str, Any], stack: set[str], ns: str = ""
) -> tuple[DataType, Conv | None]:
    """Spark type of an Avro schema node and a converter of fastavro's values to Spark's (None:
    as is). ``names``: named types seen so far; ``stack``: records being defined (recursion)."""
    if isinstance(node, str):
        if node in _AVRO_PRIMITIVE:
            return _AVRO_PRIMITIVE[node], None
        if node == "null":
            raise ValueError("a bare null type has no Spark column type")
        full = node if "." in node or not ns else f"{ns}.{node}"
        target = names.get(full, names.get(node))
        if target is None:
            raise ValueError(f"unknown Avro type {node!r} (references to other subjects are not supported)")
        if (full in stack) or (node in stack):
            raise ValueError(f"recursive Avro type {node} has no Spark column type")
        return _avro_spark(target, names, stack, ns)
    if isinstance(node, list):
        branches = [b for b in node if b != "null"]
        if len(branches) == 1:
            return _avro_spark(branches[0], names, stack, ns)
        members = [_avro_spark(b, names, stack, ns) for b in branches]
        st = StructType([StructField(f"member{i}", t, True) for i, (t, _) in enumerate(members)])
        tests = [_avro_matcher(b, names, ns) for b in branches]
        convs = [c for _, c in members]

        def union(v: Any) -> Any:
            if v is None:
                return None
            for i, test in enumerate(tests):
                if test(v):
                    c = convs[i]
                    return {f"member{i}": c(v) if c else v}
            raise SerdeError(f"value {v!r} matches no branch of the union")

        return st, union
    if not isinstance(node, dict):
        raise ValueError(f"bad Avro schema node {node!r}")
    t = node.get("type")
    logical = node.get("logicalType")
    if logical == "decimal" and t in ("bytes", "fixed"):
        if t == "fixed":
            _register(node, names, ns)
        return DecimalType(int(node["precision"]), int(node.get("scale", 0))), None
    if logical == "date" and t == "int":
        return DateType(), None
    if logical in ("timestamp-millis", "timestamp-micros") and t == "long":
        return TimestampType(), None
    if logical == "uuid" and t == "string":
        return StringType(), lambda v: str(v) if isinstance(v, uuid.UUID) else v
    if logical in ("time-millis", "time-micros") and t in ("int", "long"):
        unit = 1000 if logical == "time-millis" else 1_000_000
        return _AVRO_PRIMITIVE[t], lambda v: _time_units(v, unit)
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and t == "long":
        return LongType(), None
    if t == "record" or t == "error":
        full = _register(node, names, ns)
        inner_ns = full.rpartition(".")[0]
        stack = stack | {full}
        fields = []
        fconvs: list[tuple[str, Conv]] = []
        for f in node["fields"]:
            ft, fc = _avro_spark(f["type"], names, stack, inner_ns)
            fields.append(StructField(f["name"], ft, True))
            if fc is not None:
                fconvs.append((f["name"], fc))
        if not fconvs:
            return StructType(fields), None

        def record(v: Any) -> Any:
            if v is None:
                return None
            out = dict(v)
            for name, c in fconvs:
                if out.get(name) is not None:
                    out[name] = c(out[name])
            return out

        return StructType(fields), record
    if t == "enum":
        _register(node, names, ns)
        return StringType(), None
    if t == "fixed":
        _register(node, names, ns)
        return BinaryType(), None
    if t == "array":
        et, ec = _avro_spark(node["items"], names, stack, ns)
        return ArrayType(et, True), (
            None if ec is None else lambda v: None if v is None else [None if x is None else ec(x) for x in v]
        )
    if t == "map":
        vt, vc = _avro_spark(node["values"], names, stack, ns)
        return MapType(StringType(), vt, True), (
            None
            if vc is None
            else lambda v: None if v is None else {k: None if x is None else vc(x) for k, x in v.items()}
        )
    if isinstance(t, (str, list, dict)):
        return _avro_spark(t, names, stack, ns)
    raise ValueError(f"bad Avro schema node {node!r}")


def _time_units(v: Any, unit: int) -> Any:
    if isinstance(v, dt.time):
        return ((v.hour * 60 + v.minute) * 60 + v.second) * unit + v.microsecond * unit // 1_000_000
    return v


def _register(node: dict[str, Any], names: dict[str, Any], ns: str) -> str:
    name = node["name"]
    space = node.get("namespace", ns)
    full = name if "." in name or not space else f"{space}.{name}"
    names[full] = node
    names.setdefault(name, node)
    return full


def _avro_matcher(node: Any, names: dict[str, Any], ns: str) -> Callable[[Any], bool]:
    """Whether a Python value read by fastavro came from this union branch."""
    if isinstance(node, dict) and node.get("type") in ("record", "error"):
        fields = {f["name"] for f in node["fields"]}
        return lambda v: isinstance(v, dict) and set(v) == fields
    t = node.get("type") if isinstance(node, dict) else node
    if isinstance(t, str) and t not in _AVRO_PRIMITIVE and t not in ("array", "map", "enum", "fixed"):
        target = names.get(t) or names.get(f"{ns}.{t}")
        if target is not None:
            return _avro_matcher(target, names, ns)
    logical = node.get("logicalType") if isinstance(node, dict) else None
    if logical in ("timestamp-millis", "timestamp-micros"):
        return lambda v: isinstance(v, dt.datetime)
    if logical == "date":
        return lambda v: isinstance(v, dt.date) and not isinstance(v, dt.datetime)
    if logical == "decimal":
        return lambda v: isinstance(v, decimal.Decimal)
    if logical == "uuid":
        return lambda v: isinstance(v, (uuid.UUID, str))
    simple: dict[str, Callable[[Any], bool]] = {
        "boolean": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, float),
        "double": lambda v: isinstance(v, float),
        "string": lambda v: isinstance(v, str),
        "enum": lambda v: isinstance(v, str),
        "bytes": lambda v: isinstance(v, bytes),
        "fixed": lambda v: isinstance(v, bytes),
        "array": lambda v: isinstance(v, list),
        "map": lambda v: isinstance(v, dict),
    }
    return simple.get(t if isinstance(t, str) else "", lambda v: False)


def _avro_writer_conv(node: Any, names: dict[str, Any], ns: str = "") -> Conv | None:
    """Spark row values -> what fastavro writes: union structs (member0..N) back to the member
    set. None when nothing needs converting."""
    if isinstance(node, str):
        full = node if "." in node or not ns else f"{ns}.{node}"
        target = names.get(full, names.get(node))
        if target is None or isinstance(target, str):
            return None
        return None  # a named type already defined: its conversions are applied where defined
    if isinstance(node, list):
        branches = [b for b in node if b != "null"]
        if len(branches) == 1:
            return _avro_writer_conv(branches[0], names, ns)
        convs = [_avro_writer_conv(b, names, ns) for b in branches]

        def union(v: Any) -> Any:
            if v is None:
                return None
            for i, c in enumerate(convs):
                m = v.get(f"member{i}")
                if m is not None:
                    return c(m) if c else m
            return None

        return union
    if not isinstance(node, dict):
        return None
    t = node.get("type")
    if t in ("record", "error"):
        full = _register(node, names, ns)
        inner_ns = full.rpartition(".")[0]
        named = [(f["name"], _avro_writer_conv(f["type"], names, inner_ns)) for f in node["fields"]]
        live = [(n, c) for n, c in named if c is not None]
        if not live:
            return None

        def record(v: Any) -> Any:
            if v is None:
                return None
            out = dict(v)
            for name, c in live:
                if out.get(name) is not None:
                    out[name] = c(out[name])
            return out

        return record
    if t in ("enum", "fixed"):
        _register(node, names, ns)
        return None
    if t == "array":
        ec = _avro_writer_conv(node["items"], names, ns)
        return (
            None if ec is None else lambda v: None if v is None else [None if x is None else ec(x) for x in v]
        )
    if t == "map":
        vc = _avro_writer_conv(node["values"], names, ns)
        if vc is None:
            return None
        return lambda v: None if v is None else {k: None if x is None else vc(x) for k, x in dict(v).items()}
    if isinstance(t, (list, dict)):
        return _avro_writer_conv(t, names, ns)
    return None


# ---------------------------------------------------------------------- JSON Schema -> Spark


def _json_schema_spark(doc: Any) -> DataType:
    return _js_spark(doc, doc, set())[0]


def _js_resolve(node: Any, root: Any) -> tuple[Any, str | None]:
    ref = node.get("$ref") if isinstance(node, dict) else None
    if not isinstance(ref, str):
        return node, None
    if not ref.startswith("#"):
        raise StromOptionError(f"JSON Schema $ref {ref!r}: only local references (#/...) are supported")
    target = root
    for part in [p for p in ref[1:].split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            raise StromOptionError(f"JSON Schema $ref {ref!r} does not resolve")
        target = target[part]
    return target, ref


def _as_text(v: Any) -> Any:
    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))


def _js_spark(node: Any, root: Any, stack: set[str]) -> tuple[DataType, Conv]:
    """Spark type of a JSON Schema node and a converter (checker) of parsed JSON values to it."""
    node, ref = _js_resolve(node, root)
    if ref is not None:
        if ref in stack:
            return StringType(), _as_text  # recursive: kept as JSON text
        stack = stack | {ref}
    if node is True or node == {} or not isinstance(node, dict):
        return StringType(), _as_text
    for comb in ("anyOf", "oneOf"):
        if comb in node and "type" not in node:
            alts = [a for a in node[comb] if not (isinstance(a, dict) and a.get("type") == "null")]
            if len(alts) == 1:
                return _js_spark(alts[0], root, stack)
            return StringType(), _as_text
    t = node.get("type")
    if isinstance(t, list):
        rest = [x for x in t if x != "null"]
        if len(rest) != 1:
            return StringType(), _as_text
        t = rest[0]
    if t is None:
        if "properties" in node:
            t = "object"
        elif "items" in node:
            t = "array"
        else:
            return StringType(), _as_text
    if t == "object":
        props = node.get("properties")
        if not props:
            extra = node.get("additionalProperties")
            if isinstance(extra, dict) and extra:
                vt, vc = _js_spark(extra, root, stack)

                def mapping(v: Any) -> Any:
                    if not isinstance(v, dict):
                        raise SerdeError(f"expected an object, got {_short(v)}")
                    return {k: None if x is None else vc(x) for k, x in v.items()}

                return MapType(StringType(), vt, True), mapping
            return StringType(), _as_text
        fields = []
        convs = []
        for name, sub in props.items():
            ft, fc = _js_spark(sub, root, stack)
            fields.append(StructField(name, ft, True))
            convs.append((name, fc))

        def obj(v: Any) -> Any:
            if not isinstance(v, dict):
                raise SerdeError(f"expected an object, got {_short(v)}")
            out = {}
            for name, c in convs:
                x = v.get(name)
                if x is not None:
                    try:
                        x = c(x)
                    except SerdeError as e:
                        raise SerdeError(f"{name}: {e}") from None
                out[name] = x
            return out

        return StructType(fields), obj
    if t == "array":
        items = node.get("items", {})
        if isinstance(items, list):  # tuple validation: kept as text
            return StringType(), _as_text
        et, ec = _js_spark(items, root, stack)

        def arr(v: Any) -> Any:
            if not isinstance(v, list):
                raise SerdeError(f"expected an array, got {_short(v)}")
            return [None if x is None else ec(x) for x in v]

        return ArrayType(et, True), arr
    if t == "integer":
        return LongType(), _json_int
    if t == "number":
        return DoubleType(), _json_number
    if t == "boolean":
        return BooleanType(), _json_bool
    if t == "string":
        return StringType(), _json_str
    return StringType(), _as_text


def _short(v: Any) -> str:
    s = json.dumps(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _json_int(v: Any) -> int:
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or (isinstance(v, float) and not v.is_integer())
    ):
        raise SerdeError(f"expected an integer, got {_short(v)}")
    if not -(2**63) <= v < 2**63:
        raise SerdeError(f"integer {v} out of the range of a long")
    return int(v)


def _json_number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SerdeError(f"expected a number, got {_short(v)}")
    return float(v)


def _json_bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise SerdeError(f"expected a boolean, got {_short(v)}")
    return v


def _json_str(v: Any) -> str:
    if not isinstance(v, str):
        raise SerdeError(f"expected a string, got {_short(v)}")
    return v


def _spark_to_json_schema(t: DataType) -> dict[str, Any]:
    """A JSON Schema accepting what a Spark type holds (``json`` format given a Spark schema)."""
    if isinstance(t, StructType):
        return {"type": "object", "properties": {f.name: _spark_to_json_schema(f.dataType) for f in t.fields}}
    if isinstance(t, ArrayType):
        return {"type": "array", "items": _spark_to_json_schema(t.elementType)}
    if isinstance(t, MapType):
        return {"type": "object", "additionalProperties": _spark_to_json_schema(t.valueType)}
    if isinstance(t, (IntegerType, LongType)):
        return {"type": "integer"}
    if isinstance(t, (FloatType, DoubleType, DecimalType)):
        return {"type": "number"}
    if isinstance(t, BooleanType):
        return {"type": "boolean"}
    if isinstance(t, StringType):
        return {"type": "string"}
    raise StromOptionError(f"json format: Spark type {t.simpleString()} has no JSON form")


def _json_conv(fmt: FieldFormat) -> Conv:
    assert fmt.schema is not None
    doc = json.loads(fmt.schema)
    return _js_spark(doc, doc, set())[1]


def _json_out(v: Any) -> Any:
    """Spark row values -> JSON values: null fields left out (absent, not null), dates and
    timestamps in ISO 8601, decimals as numbers, bytes in base64."""
    if isinstance(v, dict):
        return {k: _json_out(x) for k, x in v.items() if x is not None}
    if isinstance(v, (list, tuple)):
        return [_json_out(x) for x in v]
    if isinstance(v, (dt.date, dt.datetime)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode()
    return v


# ---------------------------------------------------------------------- Protobuf -> Spark


def _proto_serialized(text: str, column: str) -> str:
    from strom.schema_registry import protobuf_schema

    try:
        return protobuf_schema.to_serialized(text)
    except protobuf_schema.ProtobufError as e:
        raise StromOptionError(f"Option '{column}Schema': invalid Protobuf schema: {e}") from None


_POOLS: dict[str, Any] = {}
_POOLS_LOCK = threading.Lock()


def _proto_file(serialized: str) -> Any:
    """The file descriptor of a base64 ``FileDescriptorProto`` (well-known imports resolved),
    one pool per schema text and process."""
    with _POOLS_LOCK:
        fd = _POOLS.get(serialized)
        if fd is not None:
            return fd
        from google.protobuf import descriptor_pb2, descriptor_pool

        fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized))
        pool = descriptor_pool.DescriptorPool()
        default = descriptor_pool.Default()
        for dep in fdp.dependency:
            if not dep.startswith("google/protobuf/"):
                raise SerdeError(f"Protobuf import {dep!r}: schema references are not supported")
            from google.protobuf import (  # noqa: F401 (registers the well-known types)
                any_pb2,
                duration_pb2,
                struct_pb2,
                timestamp_pb2,
                wrappers_pb2,
            )

            dp = descriptor_pb2.FileDescriptorProto()
            default.FindFileByName(dep).CopyToProto(dp)
            pool.Add(dp)
        pool.Add(fdp)
        fd = pool.FindFileByName(fdp.name)
        _POOLS[serialized] = fd
        return fd


def _proto_message(serialized: str, name: str | None, column: str) -> tuple[str, tuple[int, ...], Any]:
    try:
        fd = _proto_file(serialized)
    except SerdeError as e:
        raise StromOptionError(f"{column}Format=protobuf: {e}") from None
    except Exception as e:
        raise StromOptionError(f"{column}Format=protobuf: unusable schema: {e}") from None
    tops = list(fd.message_types_by_name.values())
    if not tops:
        raise StromOptionError(f"{column}Format=protobuf: the schema has no message type")
    if name is None:
        desc = tops[0]
    else:
        try:
            desc = fd.pool.FindMessageTypeByName(name)
        except KeyError:
            raise StromOptionError(
                f"Option '{column}ProtobufMessage': no message {name!r} in the schema "
                f"(it has {', '.join(d.full_name for d in tops)})"
            ) from None
    path: list[int] = []
    d = desc
    while d.containing_type is not None:
        path.insert(0, list(d.containing_type.nested_types).index(d))
        d = d.containing_type
    path.insert(0, tops.index(d))
    return desc.full_name, tuple(path), desc


def _proto_scalar(fd: Any) -> DataType:
    from google.protobuf.descriptor import FieldDescriptor as F

    t = fd.type
    if t in (F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32):
        return IntegerType()
    if t in (
        F.TYPE_INT64,
        F.TYPE_SINT64,
        F.TYPE_SFIXED64,
        F.TYPE_UINT32,
        F.TYPE_FIXED32,
        F.TYPE_UINT64,
        F.TYPE_FIXED64,
    ):
        return LongType()
    if t == F.TYPE_FLOAT:
        return FloatType()
    if t == F.TYPE_DOUBLE:
        return DoubleType()
    if t == F.TYPE_BOOL:
        return BooleanType()
    if t == F.TYPE_STRING or t == F.TYPE_ENUM:
        return StringType()
    if t == F.TYPE_BYTES:
        return BinaryType()
    raise StromOptionError(f"Protobuf field {fd.full_name}: unsupported type {t}")


def _proto_field_type(fd: Any, stack: tuple[str, ...]) -> DataType:
    from google.protobuf.descriptor import FieldDescriptor as F

    if fd.type == F.TYPE_MESSAGE:
        return _proto_spark(fd.message_type, stack)
    return _proto_scalar(fd)


def _is_map(fd: Any) -> bool:
    from google.protobuf.descriptor import FieldDescriptor as F

    return bool(fd.type == F.TYPE_MESSAGE and fd.message_type.GetOptions().map_entry)


def _is_repeated(fd: Any) -> bool:
    from google.protobuf.descriptor import FieldDescriptor as F

    rep = getattr(fd, "is_repeated", None)
    return bool(rep) if rep is not None else fd.label == F.LABEL_REPEATED


def _proto_spark(desc: Any, stack: tuple[str, ...]) -> StructType:
    if desc.full_name in stack:
        raise StromOptionError(f"recursive Protobuf message {desc.full_name} has no Spark column type")
    stack = (*stack, desc.full_name)
    fields = []
    for fd in desc.fields:
        if _is_map(fd):
            k, v = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
            t: DataType = MapType(_proto_field_type(k, stack), _proto_field_type(v, stack), True)
        elif _is_repeated(fd):
            t = ArrayType(_proto_field_type(fd, stack), True)
        else:
            t = _proto_field_type(fd, stack)
        fields.append(StructField(fd.name, t, True))
    return StructType(fields)


def _proto_to_py(msg: Any) -> dict[str, Any]:
    from google.protobuf.descriptor import FieldDescriptor as F

    out: dict[str, Any] = {}
    for fd in msg.DESCRIPTOR.fields:
        v = getattr(msg, fd.name)
        if _is_map(fd):
            vf = fd.message_type.fields_by_name["value"]
            if vf.type == F.TYPE_MESSAGE:
                out[fd.name] = {k: _proto_to_py(x) for k, x in v.items()}
            elif vf.type == F.TYPE_ENUM:
                out[fd.name] = {k: _enum_name(vf, x) for k, x in v.items()}
            else:
                out[fd.name] = dict(v)
        elif _is_repeated(fd):
            if fd.type == F.TYPE_MESSAGE:
                out[fd.name] = [_proto_to_py(x) for x in v]
            elif fd.type == F.TYPE_ENUM:
                out[fd.name] = [_enum_name(fd, x) for x in v]
            else:
                out[fd.name] = list(v)
        elif fd.type == F.TYPE_MESSAGE:
            out[fd.name] = _proto_to_py(v) if msg.HasField(fd.name) else None
        elif fd.has_presence and not msg.HasField(fd.name):
            out[fd.name] = None
        elif fd.type == F.TYPE_ENUM:
            out[fd.name] = _enum_name(fd, v)
        else:
            out[fd.name] = v
    return out


def _enum_name(fd: Any, n: int) -> str:
    ev = fd.enum_type.values_by_number.get(n)
    return ev.name if ev is not None else str(n)


def _py_to_proto(msg: Any, row: Mapping[str, Any]) -> None:
    from google.protobuf.descriptor import FieldDescriptor as F

    fields = msg.DESCRIPTOR.fields_by_name
    for name, v in row.items():
        if v is None:
            continue
        fd = fields.get(name)
        if fd is None:
            raise SerdeError(f"message {msg.DESCRIPTOR.full_name} has no field {name!r}")
        target = getattr(msg, name)
        if _is_map(fd):
            vf = fd.message_type.fields_by_name["value"]
            items = v.items() if isinstance(v, Mapping) else v
            for k, x in items:
                if vf.type == F.TYPE_MESSAGE:
                    _py_to_proto(target[k], x)
                elif vf.type == F.TYPE_ENUM:
                    target[k] = _enum_number(vf, x)
                else:
                    target[k] = x
        elif _is_repeated(fd):
            for x in v:
                if fd.type == F.TYPE_MESSAGE:
                    _py_to_proto(target.add(), x)
                elif fd.type == F.TYPE_ENUM:
                    target.append(_enum_number(fd, x))
                else:
                    target.append(x)
        elif fd.type == F.TYPE_MESSAGE:
            _py_to_proto(target, v)
            target.SetInParent()
        elif fd.type == F.TYPE_ENUM:
            setattr(msg, name, _enum_number(fd, v))
        else:
            setattr(msg, name, bytes(v) if isinstance(v, bytearray) else v)


def _enum_number(fd: Any, v: Any) -> int:
    if isinstance(v, int):
        return v
    ev = fd.enum_type.values_by_name.get(str(v))
    if ev is None:
        raise SerdeError(f"{v!r} is not a value of enum {fd.enum_type.full_name}")
    return int(ev.number)


# ---------------------------------------------------------------------- codecs (executors)


class _Codec:
    """Decoder and encoder of one :class:`FieldFormat`, built once per executor process."""

    def __init__(self, fmt: FieldFormat) -> None:
        self.fmt = fmt
        self.arrow_type = _arrow_type(fmt.spark_type)
        self._client: RegistryClient | None = None
        self._writers: dict[int, Any] = {}
        self.decode_one: Callable[[bytes], Any]
        self.encode_one: Callable[[Any], bytes]
        f = fmt.format
        if f == "json":
            conv = _json_conv(fmt)
            self.decode_one = lambda b: conv(json.loads(b))
            self.encode_one = self._json_encoder(framed=False)
        elif f == "json-schema":
            conv = _json_conv(fmt)

            def dec_json(b: bytes) -> Any:
                _sid, _, payload = unframe(b)
                return conv(json.loads(payload))

            self.decode_one = dec_json
            self.encode_one = self._json_encoder(framed=True)
        elif f == "avro":
            self._init_avro()
        elif f == "protobuf":
            self._init_protobuf()
        else:
            raise SerdeError(f"no codec for format {f}")

    @property
    def client(self) -> RegistryClient:
        if self._client is None:
            assert self.fmt.registry_url is not None
            self._client = RegistryClient(self.fmt.registry_url, user_info=self.fmt.registry_user_info)
        return self._client

    def _json_encoder(self, framed: bool) -> Callable[[Any], bytes]:
        import jsonschema

        assert self.fmt.schema is not None
        schema = json.loads(self.fmt.schema)
        validator = jsonschema.validators.validator_for(schema)(schema)
        sid = self.fmt.schema_id

        def enc(v: Any) -> bytes:
            doc = _json_out(v)
            err = jsonschema.exceptions.best_match(validator.iter_errors(doc))
            if err is not None:
                raise SerdeError(f"record does not match its JSON Schema: {err.message}")
            data = json.dumps(doc, separators=(",", ":")).encode()
            if framed:
                assert sid is not None
                return frame(sid, data)
            return data

        return enc

    def _init_avro(self) -> None:
        import fastavro

        assert self.fmt.schema is not None
        doc = json.loads(self.fmt.schema)
        reader = fastavro.parse_schema(doc)
        read_conv = _avro_spark(doc, {}, set())[1]
        write_conv = _avro_writer_conv(doc, {})
        sid = self.fmt.schema_id

        def writer_schema(schema_id: int) -> Any:
            w = self._writers.get(schema_id)
            if w is None:
                info = self.client.schema(schema_id)
                if info.get("schemaType", "AVRO") != "AVRO":
                    raise SerdeError(f"schema id {schema_id} is {info.get('schemaType')}, not AVRO")
                w = self._writers[schema_id] = fastavro.parse_schema(json.loads(info["schema"]))
            return w

        def dec(b: bytes) -> Any:
            schema_id, _, payload = unframe(b)
            bio = io.BytesIO(payload)
            try:
                v = fastavro.schemaless_reader(bio, writer_schema(schema_id), reader)
            except SerdeError:
                raise
            except Exception as e:
                raise SerdeError(
                    f"Avro data of schema id {schema_id} unreadable: {type(e).__name__}: {e}"
                ) from None
            if bio.tell() != len(payload):
                raise SerdeError(f"{len(payload) - bio.tell()} bytes left after the Avro record")
            return read_conv(v) if read_conv else v

        def enc(v: Any) -> bytes:
            assert sid is not None
            buf = io.BytesIO()
            try:
                fastavro.schemaless_writer(buf, reader, write_conv(v) if write_conv else v)
            except Exception as e:
                raise SerdeError(
                    f"cannot write the row with the Avro schema: {type(e).__name__}: {e}"
                ) from None
            return frame(sid, buf.getvalue())

        self.decode_one, self.encode_one = dec, enc

    def _init_protobuf(self) -> None:
        from google.protobuf import message_factory

        assert self.fmt.schema is not None and self.fmt.message is not None
        fd = _proto_file(self.fmt.schema)
        cls = message_factory.GetMessageClass(fd.pool.FindMessageTypeByName(self.fmt.message))
        want = list(self.fmt.message_indexes)
        sid = self.fmt.schema_id

        def dec(b: bytes) -> Any:
            _sid, indexes, payload = unframe(b, protobuf=True)
            if indexes != want:
                raise SerdeError(
                    f"record is of message indexes {indexes}, the schema's {self.fmt.message} is {want}"
                )
            msg = cls()
            try:
                msg.ParseFromString(payload)
            except Exception as e:
                raise SerdeError(f"Protobuf data unreadable: {type(e).__name__}: {e}") from None
            return _proto_to_py(msg)

        def enc(v: Any) -> bytes:
            assert sid is not None
            msg = cls()
            try:
                _py_to_proto(msg, v)
            except SerdeError:
                raise
            except Exception as e:
                raise SerdeError(
                    f"cannot build {self.fmt.message} from the row: {type(e).__name__}: {e}"
                ) from None
            return frame(sid, msg.SerializeToString(), want)

        self.decode_one, self.encode_one = dec, enc


def _arrow_type(t: DataType) -> pa.DataType:
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(t, timezone="UTC")


_CODECS: dict[FieldFormat, _Codec] = {}
_CODECS_LOCK = threading.Lock()


def codec(fmt: FieldFormat) -> _Codec:
    with _CODECS_LOCK:
        c = _CODECS.get(fmt)
        if c is None:
            c = _CODECS[fmt] = _Codec(fmt)
        return c


class DecodeError(ValueError):
    """A record whose key or value cannot be decoded (``mode`` FAILFAST)."""


def _fail(fmt: FieldFormat, where: Callable[[int], str], i: int, why: str) -> DecodeError:
    return DecodeError(
        f"Malformed records are detected in record parsing: the {fmt.column} of {where(i)} is not "
        f"{fmt.format}{' (subject ' + fmt.subject + ')' if fmt.subject else ''}: {why}. To null such "
        "records instead and keep going, set the option mode to PERMISSIVE (the reason goes to the "
        f"column {fmt.error_column})."
    )


def decode_column(
    fmt: FieldFormat, raw: pa.Array, where: Callable[[int], str]
) -> tuple[pa.Array, pa.Array | None]:
    """The decoded column of a binary column and, in PERMISSIVE mode, the error column.
    ``where(i)`` names row i in error messages (topic, partition, offset)."""
    n = len(raw)
    if fmt.format == "string":
        try:
            col = pc.cast(raw, pa.string())
            return col, (pa.nulls(n, pa.string()) if fmt.permissive else None)
        except pa.ArrowInvalid:
            pass  # some value is not UTF-8: find it below
    values = raw.to_pylist()
    out: list[Any] = [None] * n
    errors: list[str | None] = [None] * n
    c = None if fmt.format == "string" else codec(fmt)
    for i, b in enumerate(values):
        if b is None:
            continue
        try:
            out[i] = b.decode("utf-8") if c is None else c.decode_one(b)
        except (SerdeError, UnicodeDecodeError, ValueError) as e:
            if not fmt.permissive:
                raise _fail(fmt, where, i, str(e)) from None
            errors[i] = str(e)
    arrow_type = pa.string() if c is None else c.arrow_type
    try:
        col = pa.array(out, type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        # rows whose values do not fit the column's type: find them one by one
        for i, v in enumerate(out):
            if v is None:
                continue
            try:
                pa.array([v], type=arrow_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
                if not fmt.permissive:
                    raise _fail(fmt, where, i, f"does not fit {fmt.spark_type.simpleString()}: {e}") from None
                out[i], errors[i] = None, f"does not fit {fmt.spark_type.simpleString()}: {e}"
        col = pa.array(out, type=arrow_type)
    return col, (pa.array(errors, pa.string()) if fmt.permissive else None)


def encode_column(fmt: FieldFormat, col: pa.Array, where: Callable[[int], str]) -> Sequence[bytes | None]:
    """Bytes of each row's key or value (null stays null); a row that cannot be encoded raises
    :class:`SerdeError` naming it."""
    values = col.to_pylist()
    if fmt.format == "string":
        return [None if v is None else (v.encode() if isinstance(v, str) else bytes(v)) for v in values]
    c = codec(fmt)
    out: list[bytes | None] = []
    for i, v in enumerate(values):
        if v is None:
            out.append(None)
            continue
        try:
            out.append(c.encode_one(v))
        except (SerdeError, ValueError, TypeError) as e:
            raise SerdeError(f"cannot write the {fmt.column} of {where(i)} as {fmt.format}: {e}") from None
    return out


def check_write_type(fmt: FieldFormat, given: DataType) -> None:
    """The ``key``/``value`` column's Spark type against the format's (when the query starts)."""
    want = fmt.spark_type
    if fmt.format == "string":
        if not isinstance(given, StringType):
            raise StromOptionError(
                f"{fmt.column}Format=string: the {fmt.column} column must be a string, "
                f"found {given.simpleString()}"
            )
        return
    if isinstance(want, StructType):
        if not isinstance(given, StructType):
            raise StromOptionError(
                f"{fmt.column}Format={fmt.format}: the {fmt.column} column must be a struct for the "
                f"schema{' of ' + fmt.subject if fmt.subject else ''} ({want.simpleString()}), found "
                f"{given.simpleString()}"
            )
        known = {f.name for f in want.fields}
        extra = [f.name for f in given.fields if f.name not in known]
        if extra:
            raise StromOptionError(
                f"{fmt.column}Format={fmt.format}: field(s) {', '.join(extra)} of the {fmt.column} "
                f"column are not in the schema{' of ' + fmt.subject if fmt.subject else ''} "
                f"({want.simpleString()})"
            )
        if fmt.format == "avro":
            assert fmt.schema is not None
            doc = json.loads(fmt.schema)
            if isinstance(doc, dict) and doc.get("type") in ("record", "error"):
                have = {f.name for f in given.fields}
                missing = [f["name"] for f in doc["fields"] if f["name"] not in have and "default" not in f]
                if missing:
                    raise StromOptionError(
                        f"{fmt.column}Format=avro: the {fmt.column} column lacks field(s) "
                        f"{', '.join(missing)} that the schema requires (they have no default)"
                    )
