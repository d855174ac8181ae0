"""Kafka Connect's converters: bytes in a Kafka record <-> Connect data (schema and value).

- ``org.apache.kafka.connect.storage.StringConverter`` (``converter.encoding``, default UTF-8);
- ``org.apache.kafka.connect.converters.ByteArrayConverter``;
- ``org.apache.kafka.connect.json.JsonConverter`` with ``schemas.enable`` (default true: the
  ``{"schema": ..., "payload": ...}`` envelope) and ``decimal.format`` (BASE64 or NUMERIC);
- ``io.confluent.connect.avro.AvroConverter``, ``io.confluent.connect.json.JsonSchemaConverter``
  and ``io.confluent.connect.protobuf.ProtobufConverter`` through a schema registry
  (``schema.registry.url``), Confluent's wire format via :mod:`strom.serde`.

A converter that cannot read or write a record raises
:class:`~strom.connect.data.DataException`; a bad converter config raises
:class:`~strom.connect.data.ConfigError`.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Mapping
from typing import Any

from strom.connect.data import (
    DATE,
    DECIMAL,
    EPOCH,
    TIME,
    TIMESTAMP,
    ConfigError,
    DataException,
    Schema,
    from_millis,
    infer_schema,
    millis,
    validate_value,
)
from strom.connect.transforms import Props, java_double_str

STRING = "org.apache.kafka.connect.storage.StringConverter"
BYTE_ARRAY = "org.apache.kafka.connect.converters.ByteArrayConverter"
JSON = "org.apache.kafka.connect.json.JsonConverter"
AVRO = "io.confluent.connect.avro.AvroConverter"
JSON_SCHEMA = "io.confluent.connect.json.JsonSchemaConverter"
PROTOBUF = "io.confluent.connect.protobuf.ProtobufConverter"


class Converter:
    java_class = ""

    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        raise NotImplementedError

    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        raise NotImplementedError


def java_str(value: Any, schema: Schema | None = None) -> str:
    """Java's ``toString`` of a Connect value (what StringConverter and FileStreamSink write)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double_str(value)
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).strftime("%a %b %d %H:%M:%S UTC %Y")
    if isinstance(value, dict):
        if schema is not None and schema.get("type") == "struct":
            fields = {f["field"]: f for f in schema.get("fields") or []}
            parts = [f"{k}={java_str(v, fields.get(k))}" for k, v in value.items() if v is not None]
            return "Struct{" + ",".join(parts) + "}"
        return "{" + ", ".join(f"{java_str(k)}={java_str(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        items = schema.get("items") if schema else None
        return "[" + ", ".join(java_str(v, items) for v in value) + "]"
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    return str(value)


class StringConverter(Converter):
    java_class = STRING

    def __init__(self, props: Mapping[str, str], is_key: bool) -> None:
        p = Props(STRING, props)
        enc = p.string("converter.encoding", "UTF-8")
        p.string("converter.type", "")
        p.done()
        try:
            "".encode(enc)
        except LookupError:
            raise ConfigError(
                f"Invalid value {enc} for configuration converter.encoding: unknown encoding"
            ) from None
        self.encoding = enc

    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return {"type": "string", "optional": True}, None
        try:
            return {"type": "string", "optional": True}, data.decode(self.encoding)
        except UnicodeDecodeError as e:
            raise DataException(f"Failed to deserialize string: {e}") from None

    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if value is None:
            return None
        return java_str(value, schema).encode(self.encoding)


class ByteArrayConverter(Converter):
    java_class = BYTE_ARRAY

    def __init__(self, props: Mapping[str, str], is_key: bool) -> None:
        p = Props(BYTE_ARRAY, props)
        p.string("converter.type", "")
        p.done()

    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        return {"type": "bytes", "optional": True}, data

    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if schema is not None and schema.get("type") != "bytes":
            raise DataException(
                f"Invalid schema type for ByteArrayConverter: {str(schema.get('type')).upper()}"
            )
        if value is not None and not isinstance(value, (bytes, bytearray)):
            raise DataException(
                f"ByteArrayConverter is not compatible with objects of type {type(value).__name__}"
            )
        return bytes(value) if value is not None else None


# -- JSON ----------------------------------------------------------------------------------------

_SCHEMA_ORDER = (
    "type",
    "items",
    "keys",
    "values",
    "fields",
    "optional",
    "name",
    "version",
    "doc",
    "parameters",
    "default",
    "field",
)
_TYPES = {
    "int8",
    "int16",
    "int32",
    "int64",
    "float32",
    "float64",
    "boolean",
    "string",
    "bytes",
    "array",
    "map",
    "struct",
}


def schema_json(schema: Schema) -> dict[str, Any]:
    """A schema in the JSON converter's form, keys in Kafka's order, ``optional`` always set."""
    out: dict[str, Any] = {}
    s = dict(schema)
    s.setdefault("optional", False)
    for k in _SCHEMA_ORDER:
        if k not in s:
            continue
        v = s[k]
        if k in ("items", "keys", "values"):
            v = schema_json(v)
        elif k == "fields":
            v = [schema_json(f) for f in v]
        elif k == "default":
            v = _to_json_value({x: y for x, y in s.items() if x != "default"}, v, "BASE64")
        out[k] = v
    return out


def check_schema(schema: Any, where: str = "schema") -> Schema:
    if not isinstance(schema, dict):
        raise DataException(f"{where}: a schema must be a JSON object")
    t = schema.get("type")
    if t not in _TYPES:
        raise DataException(f"Unknown schema type: {t}")
    if t == "struct":
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise DataException('Struct schema\'s "fields" argument is not an array.')
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("field"), str):
                raise DataException("Struct schema's field name not specified properly")
            check_schema(f, f["field"])
    elif t == "array":
        if "items" not in schema:
            raise DataException("Array schema did not specify the element type")
        check_schema(schema["items"], "items")
    elif t == "map":
        if "keys" not in schema or "values" not in schema:
            raise DataException("Map schema did not specify the key/value type")
        check_schema(schema["keys"], "keys")
        check_schema(schema["values"], "values")
    return schema


def _decimal_bytes(v: decimal.Decimal, scale: int) -> bytes:
    unscaled = int(v.scaleb(scale).to_integral_value())
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return unscaled.to_bytes(length, "big", signed=True)


def _to_json_value(schema: Schema | None, v: Any, decimal_format: str) -> Any:
    if v is None:
        if schema is not None and "default" in schema:
            return _to_json_value(
                {k: x for k, x in schema.items() if k != "default"}, schema["default"], decimal_format
            )
        return None
    name = schema.get("name") if schema else None
    if name == TIMESTAMP:
        return millis(v) if isinstance(v, dt.datetime) else v
    if name == DATE:
        return (millis(v) // 86_400_000) if isinstance(v, dt.datetime) else v
    if name == TIME:
        return (millis(v) % 86_400_000) if isinstance(v, dt.datetime) else v
    if name == DECIMAL and isinstance(v, decimal.Decimal):
        scale = int((schema or {}).get("parameters", {}).get("scale", 0))
        if decimal_format == "NUMERIC":
            return float(v) if scale else int(v)
        return base64.b64encode(_decimal_bytes(v, scale)).decode()
    t = schema.get("type") if schema else None
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, dt.datetime):
        raise DataException("Java class java.util.Date does not have corresponding schema type.")
    if isinstance(v, dict):
        if t == "struct" and schema is not None:
            return {
                f["field"]: _to_json_value(f, v.get(f["field"]), decimal_format)
                for f in schema.get("fields") or []
            }
        if t == "map" and schema is not None:
            ks, vs = schema.get("keys") or {}, schema.get("values") or {}
            if ks.get("type") == "string":
                return {k: _to_json_value(vs, x, decimal_format) for k, x in v.items()}
            return [
                [_to_json_value(ks, k, decimal_format), _to_json_value(vs, x, decimal_format)]
                for k, x in v.items()
            ]
        return {str(k): _to_json_value(None, x, decimal_format) for k, x in v.items()}
    if isinstance(v, list):
        items = schema.get("items") if schema else None
        return [_to_json_value(items, x, decimal_format) for x in v]
    if isinstance(v, decimal.Decimal):
        return float(v)
    return v


def _int_repr(v: Any, what: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise DataException(
            f"Invalid type for {what}, underlying representation should be integral but was "
            f"{type(v).__name__}"
        )
    return v


def from_json_value(schema: Schema, v: Any) -> Any:
    """A JSON value read with a Connect schema (the JSON converter's ``toConnectData``)."""
    if v is None:
        if schema.get("optional"):
            return schema.get("default")
        if "default" in schema:
            return from_json_value({k: x for k, x in schema.items() if k != "default"}, schema["default"])
        raise DataException(f"Invalid null value for required {str(schema.get('type', '?')).upper()} field")
    t, name = schema.get("type"), schema.get("name")
    if name == TIMESTAMP:
        return from_millis(_int_repr(v, "Timestamp"))
    if name == DATE:
        return EPOCH + dt.timedelta(days=_int_repr(v, "Date"))
    if name == TIME:
        return from_millis(_int_repr(v, "Time"))
    if name == DECIMAL:
        scale = int(schema.get("parameters", {}).get("scale", 0))
        if isinstance(v, str):
            raw = base64.b64decode(v)
            return decimal.Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return decimal.Decimal(str(v))
        raise DataException("Invalid type for Decimal")
    if t in ("int8", "int16", "int32", "int64"):
        if not isinstance(v, int) or isinstance(v, bool):
            raise DataException(f"Invalid value for {t.upper()}: {json.dumps(v)}")
        return v
    if t in ("float32", "float64"):
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise DataException(f"Invalid value for {t.upper()}: {json.dumps(v)}")
        return float(v)
    if t == "boolean":
        if not isinstance(v, bool):
            raise DataException(f"Invalid value for BOOLEAN: {json.dumps(v)}")
        return v
    if t == "string":
        if not isinstance(v, str):
            raise DataException(f"Invalid value for STRING: {json.dumps(v)}")
        return v
    if t == "bytes":
        if not isinstance(v, str):
            raise DataException(f"Invalid value for BYTES: {json.dumps(v)}")
        try:
            return base64.b64decode(v, validate=True)
        except ValueError:
            raise DataException("Invalid bytes field: not base64") from None
    if t == "array":
        if not isinstance(v, list):
            raise DataException("Array value is not a JSON array")
        return [from_json_value(schema["items"], x) for x in v]
    if t == "map":
        ks, vs = schema["keys"], schema["values"]
        if ks.get("type") == "string":
            if not isinstance(v, dict):
                raise DataException(
                    f"Maps with string fields should be encoded as JSON objects, but found {type(v).__name__}"
                )
            return {k: from_json_value(vs, x) for k, x in v.items()}
        if not isinstance(v, list) or any(not isinstance(e, list) or len(e) != 2 for e in v):
            raise DataException("Maps with non-string fields should be encoded as JSON array of tuples")
        return {from_json_value(ks, e[0]): from_json_value(vs, e[1]) for e in v}
    if t == "struct":
        if not isinstance(v, dict):
            raise DataException(f"Structs should be encoded as JSON objects, but found {type(v).__name__}")
        return {f["field"]: from_json_value(f, v.get(f["field"])) for f in schema.get("fields") or []}
    raise DataException(f"Unknown schema type: {t}")


class JsonConverter(Converter):
    java_class = JSON

    def __init__(self, props: Mapping[str, str], is_key: bool) -> None:
        p = Props(JSON, props)
        self.schemas_enable = p.boolean("schemas.enable", True)
        p.string("schemas.cache.size", "1000")
        self.decimal_format = p.choice("decimal.format", "BASE64", ("BASE64", "NUMERIC"))
        self.replace_null = p.boolean("replace.null.with.default", True)
        p.string("converter.type", "")
        p.done()

    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None or len(data) == 0:
            return None, None
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise DataException(
                f"Converting byte[] to Kafka Connect data failed due to serialization error: {e}"
            ) from None
        if not self.schemas_enable:
            return None, doc
        if not isinstance(doc, dict) or set(doc) != {"schema", "payload"}:
            raise DataException(
                'JsonConverter with schemas.enable requires "schema" and "payload" fields and '
                "may not contain additional fields. If you are trying to deserialize plain JSON "
                "data, set schemas.enable=false in your converter configuration."
            )
        if doc["schema"] is None:
            return None, doc["payload"]
        schema = check_schema(doc["schema"])
        return schema, from_json_value(schema, doc["payload"])

    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if schema is None and value is None:
            return None
        if schema is not None:
            validate_value(schema, value)
        payload = _to_json_value(schema, value, self.decimal_format)
        doc = (
            {"schema": schema_json(schema) if schema else None, "payload": payload}
            if self.schemas_enable
            else payload
        )
        try:
            return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
        except (TypeError, ValueError) as e:
            raise DataException(
                f"Converting Kafka Connect data to byte[] failed due to serialization error: {e}"
            ) from None


# -- registry converters --------------------------------------------------------------------------

_REGISTRY_PASSIVE = (
    "key.subject.name.strategy",
    "value.subject.name.strategy",
    "connect.meta.data",
    "enhanced.avro.schema.support",
    "schemas.cache.config",
    "converter.type",
    "basic.auth.credentials.source",
    "basic.auth.user.info",
    "latest.compatibility.strict",
)


class _RegistryConverter(Converter):
    schema_type = ""

    def __init__(self, props: Mapping[str, str], is_key: bool) -> None:
        from strom.serde import RegistryClient

        p = Props(self.java_class, props)
        url = p.string("schema.registry.url", required=True)
        self.auto_register = p.boolean("auto.register.schemas", True)
        self.use_latest = p.boolean("use.latest.version", False)
        for k in _REGISTRY_PASSIVE:
            p.get(k)
        p.done()
        from strom.serde import SerdeError, subject_strategy

        which = "key" if is_key else "value"
        try:
            self.strategy = subject_strategy(p.props.get(f"{which}.subject.name.strategy"))
        except SerdeError as e:
            raise ConfigError(f"Invalid value for configuration {which}.subject.name.strategy: {e}") from None
        self.url = url.split(",")[0].strip()
        if not self.url.startswith(("http://", "https://")):
            raise ConfigError(
                f"Invalid value {url} for configuration schema.registry.url: not an http(s) URL"
            )
        user_info = self._user_info(p.props)  # (takes user:password@ out of self.url)
        self.client = RegistryClient(self.url, user_info=user_info)
        self.is_key = is_key

    def _user_info(self, props: Mapping[str, str]) -> str | None:
        """HTTP basic auth to the registry, as Confluent's ``basic.auth.credentials.source``:
        ``USER_INFO`` takes ``basic.auth.user.info``; ``URL`` (the default) the URL's
        ``user:password@``."""
        import urllib.parse

        source = props.get("basic.auth.credentials.source", "URL").strip().upper()
        if source == "USER_INFO":
            info = props.get("basic.auth.user.info", "")
            if ":" not in info:
                raise ConfigError(
                    "basic.auth.credentials.source=USER_INFO needs basic.auth.user.info=user:password"
                )
            return info
        if source != "URL":
            raise ConfigError(
                f"Invalid value {source} for configuration basic.auth.credentials.source: "
                "String must be one of: URL, USER_INFO (SASL_INHERIT is not supported by strom)"
            )
        parts = urllib.parse.urlsplit(self.url)
        if parts.username is None:
            return None
        host = parts.hostname or ""
        netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
        self.url = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
        user = urllib.parse.unquote(parts.username)
        return f"{user}:{urllib.parse.unquote(parts.password or '')}"

    def _subject(self, topic: str, schema_text: str) -> str:
        """The subject under ``key.subject.name.strategy`` / ``value.subject.name.strategy``
        (TopicNameStrategy, RecordNameStrategy, TopicRecordNameStrategy as Confluent's)."""
        from strom.serde import schema_subject

        return schema_subject(self.strategy, topic, self.is_key, schema_text, self.schema_type)

    def _register(self, topic: str, schema_text: str) -> int:
        import urllib.parse

        from strom.serde import SerdeError

        try:
            if self.use_latest or not self.auto_register:
                subject = urllib.parse.quote(self._subject(topic, schema_text), safe="")
                if self.use_latest:
                    return int(self.client._call("GET", f"/subjects/{subject}/versions/latest")["id"])
                body: dict[str, Any] = {"schema": schema_text}
                if self.schema_type != "AVRO":
                    body["schemaType"] = self.schema_type
                return int(self.client._call("POST", f"/subjects/{subject}", body)["id"])
            return self.client.register(self._subject(topic, schema_text), schema_text, self.schema_type)
        except SerdeError as e:
            raise DataException(
                f"Failed to access {self.schema_type} schema for topic {topic}: {e}"
            ) from None

    def _schema(self, schema_id: int) -> dict[str, Any]:
        from strom.serde import SerdeError

        try:
            return self.client.schema(schema_id)
        except SerdeError as e:
            raise DataException(f"Failed to retrieve schema of id {schema_id}: {e}") from None

    def _unframe(self, data: bytes, protobuf: bool = False) -> tuple[int, list[int] | None, bytes]:
        from strom.serde import SerdeError, unframe

        try:
            return unframe(data, protobuf)
        except SerdeError as e:
            raise DataException(f"Failed to deserialize data to {self.schema_type}: {e}") from None


def _infer(value: Any) -> Schema:
    s = infer_schema(value)
    if s is None:
        raise DataException(
            f"{type(value).__name__} data without a schema cannot be written by a registry "
            "converter (give the data a schema, e.g. JsonConverter with schemas.enable=true)"
        )
    return s


# Avro <-> Connect schemas


def avro_to_connect(a: Any, optional: bool = False) -> Schema:
    if isinstance(a, list):
        non_null = [x for x in a if x != "null"]
        if len(non_null) == 1 and len(a) == 2:
            return avro_to_connect(non_null[0], True)
        raise DataException("Avro unions other than [null, T] are not supported by strom's AvroConverter")
    if isinstance(a, str):
        a = {"type": a}
    t = a.get("type")
    lt = a.get("logicalType")
    if isinstance(t, (dict, list)):
        return avro_to_connect(t, optional)
    base: Schema
    if lt in ("timestamp-millis", "timestamp-micros") and t == "long":
        base = {"type": "int64", "name": TIMESTAMP, "version": 1}
    elif lt == "date" and t == "int":
        base = {"type": "int32", "name": DATE, "version": 1}
    elif lt == "time-millis" and t == "int":
        base = {"type": "int32", "name": TIME, "version": 1}
    elif lt == "decimal":
        base = {
            "type": "bytes",
            "name": DECIMAL,
            "version": 1,
            "parameters": {"scale": str(a.get("scale", 0))},
        }
    elif t == "int":
        ct = a.get("connect.type")
        base = {"type": ct if ct in ("int8", "int16") else "int32"}
    elif t in ("long", "float", "double", "boolean", "string", "bytes"):
        base = {"type": {"long": "int64", "float": "float32", "double": "float64"}.get(t, t)}
    elif t == "enum":
        base = {"type": "string"}
    elif t == "fixed":
        base = {"type": "bytes"}
    elif t == "array":
        base = {"type": "array", "items": avro_to_connect(a["items"])}
    elif t == "map":
        base = {
            "type": "map",
            "keys": {"type": "string", "optional": False},
            "values": avro_to_connect(a["values"]),
        }
    elif t == "record":
        name = a.get("name", "")
        ns = a.get("namespace")
        full = f"{ns}.{name}" if ns and "." not in name else name
        fields = []
        for f in a.get("fields", []):
            fs = avro_to_connect(f["type"])
            fs["field"] = f["name"]
            fields.append(fs)
        base = {"type": "struct", "fields": fields, "name": full}
    else:
        raise DataException(f"Avro type {t!r} is not supported by strom's AvroConverter")
    base["optional"] = optional
    return base


def connect_to_avro(s: Schema, names: dict[str, int] | None = None) -> Any:
    names = {} if names is None else names
    t, name = s.get("type"), s.get("name")
    out: Any
    if name == TIMESTAMP:
        out = {"type": "long", "logicalType": "timestamp-millis"}
    elif name == DATE:
        out = {"type": "int", "logicalType": "date"}
    elif name == TIME:
        out = {"type": "int", "logicalType": "time-millis"}
    elif name == DECIMAL:
        scale = int(s.get("parameters", {}).get("scale", 0))
        out = {"type": "bytes", "logicalType": "decimal", "precision": 64, "scale": scale}
    elif t in ("int8", "int16"):
        out = {"type": "int", "connect.type": t}
    elif t in ("int32", "int64", "float32", "float64", "boolean", "string", "bytes"):
        out = {"int32": "int", "int64": "long", "float32": "float", "float64": "double"}.get(str(t), t)
    elif t == "array":
        out = {"type": "array", "items": connect_to_avro(s["items"], names)}
    elif t == "map":
        if (s.get("keys") or {}).get("type") != "string":
            raise DataException("strom's AvroConverter writes maps with string keys only")
        out = {"type": "map", "values": connect_to_avro(s["values"], names)}
    elif t == "struct":
        rname = name or "ConnectDefault"
        if not name:
            names[rname] = names.get(rname, 0) + 1
            if names[rname] > 1:
                rname = f"ConnectDefault{names[rname]}"
        ns, _, simple = rname.rpartition(".")
        fields = []
        for f in s.get("fields") or []:
            fd: dict[str, Any] = {"name": f["field"], "type": connect_to_avro(f, names)}
            if f.get("optional"):
                fd["default"] = None
            fields.append(fd)
        out = {"type": "record", "name": simple, "fields": fields}
        if ns:
            out["namespace"] = ns
        elif not name:
            out["namespace"] = "io.confluent.connect.avro"
    else:
        raise DataException(f"Connect type {t!r} cannot be written as Avro")
    if s.get("optional"):
        return ["null", out]
    return out


def _to_avro_value(s: Schema | None, v: Any) -> Any:
    if v is None or s is None:
        return v
    name = s.get("name")
    if name == DATE and isinstance(v, dt.datetime):
        return v.date()
    if name == TIME and isinstance(v, dt.datetime):
        return v.time()
    if s.get("type") == "struct" and isinstance(v, dict):
        return {f["field"]: _to_avro_value(f, v.get(f["field"])) for f in s.get("fields") or []}
    if s.get("type") == "array" and isinstance(v, list):
        return [_to_avro_value(s.get("items"), x) for x in v]
    if s.get("type") == "map" and isinstance(v, dict):
        return {k: _to_avro_value(s.get("values"), x) for k, x in v.items()}
    return v


def _from_avro_value(s: Schema, v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, dt.datetime):
        return v if v.tzinfo else v.replace(tzinfo=dt.UTC)
    if isinstance(v, dt.date):
        return dt.datetime(v.year, v.month, v.day, tzinfo=dt.UTC)
    if isinstance(v, dt.time):
        return dt.datetime(1970, 1, 1, v.hour, v.minute, v.second, v.microsecond, tzinfo=dt.UTC)
    t = s.get("type")
    if t == "struct" and isinstance(v, dict):
        return {f["field"]: _from_avro_value(f, v.get(f["field"])) for f in s.get("fields") or []}
    if t == "array" and isinstance(v, list):
        return [_from_avro_value(s["items"], x) for x in v]
    if t == "map" and isinstance(v, dict):
        return {k: _from_avro_value(s["values"], x) for k, x in v.items()}
    return v


class AvroConverter(_RegistryConverter):
    java_class = AVRO
    schema_type = "AVRO"

    def __init__(self, props: Mapping[str, str], is_key: bool) -> None:
        super().__init__(props, is_key)
        import fastavro  # noqa: F401 - fail at config time when it is missing

        self._parsed: dict[str, Any] = {}
        self._readers: dict[int, tuple[Any, Schema]] = {}

    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        import io

        import fastavro

        if data is None:
            return None, None
        sid, _, payload = self._unframe(data)
        if sid not in self._readers:
            raw = json.loads(self._schema(sid)["schema"])
            self._readers[sid] = (fastavro.parse_schema(raw), avro_to_connect(raw))
        parsed, schema = self._readers[sid]
        try:
            value = fastavro.schemaless_reader(io.BytesIO(payload), parsed, None)
        except Exception as e:
            raise DataException(f"Failed to deserialize Avro data for topic {topic}: {e}") from None
        return schema, _from_avro_value(schema, value)

    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        import io

        import fastavro

        from strom.serde import frame

        if value is None and schema is None:
            return None
        if schema is None:
            schema = _infer(value)
        validate_value(schema, value)
        avro = connect_to_avro(schema)
        text = json.dumps(avro, separators=(",", ":"))
        if text not in self._parsed:
            self._parsed[text] = fastavro.parse_schema(avro)
        sid = self._register(topic, text)
        buf = io.BytesIO()
        try:
            fastavro.schemaless_writer(buf, self._parsed[text], _to_avro_value(schema, value))
        except Exception as e:
            raise DataException(f"Failed to serialize Avro data for topic {topic}: {e}") from None
        return frame(sid, buf.getvalue())


# JSON Schema <-> Connect schemas


def jsonschema_to_connect(j: Any, optional: bool = False) -> Schema:
    if not isinstance(j, dict) or not j:
        raise DataException(f"Unsupported JSON Schema: {j!r}")
    for combo in ("oneOf", "anyOf"):
        if combo in j:
            alts = [a for a in j[combo] if not (isinstance(a, dict) and a.get("type") == "null")]
            if len(alts) == 1:
                return jsonschema_to_connect(alts[0], True)
            raise DataException(f"JSON Schema {combo} other than [null, T] is not supported")
    t = j.get("type")
    if isinstance(t, list):
        non_null = [x for x in t if x != "null"]
        if len(non_null) != 1:
            raise DataException(f"JSON Schema type {t} is not supported")
        return jsonschema_to_connect({**j, "type": non_null[0]}, True)
    ct = j.get("connect.type")
    base: Schema
    if t == "integer":
        base = {"type": ct if ct in ("int8", "int16", "int32", "int64") else "int64"}
    elif t == "number":
        base = {"type": ct if ct in ("float32", "float64") else "float64"}
    elif t == "boolean":
        base = {"type": "boolean"}
    elif t == "string":
        base = {"type": "bytes"} if ct == "bytes" else {"type": "string"}
    elif t == "array":
        base = {"type": "array", "items": jsonschema_to_connect(j.get("items", {}))}
    elif t == "object":
        required = set(j.get("required", []))
        fields = []
        for name, sub in j.get("properties", {}).items():
            fs = jsonschema_to_connect(sub)
            if name not in required:
                fs["optional"] = True
            fs["field"] = name
            fields.append(fs)
        base = {"type": "struct", "fields": fields}
        if j.get("title"):
            base["name"] = j["title"]
    else:
        raise DataException(f"JSON Schema type {t!r} is not supported")
    base["optional"] = optional
    return base


def connect_to_jsonschema(s: Schema) -> dict[str, Any]:
    t = s.get("type")
    out: dict[str, Any]
    if t in ("int8", "int16", "int32", "int64"):
        out = {"type": "integer", "connect.type": t}
    elif t in ("float32", "float64"):
        out = {"type": "number", "connect.type": t}
    elif t == "boolean":
        out = {"type": "boolean"}
    elif t == "string":
        out = {"type": "string"}
    elif t == "bytes":
        out = {"type": "string", "connect.type": "bytes"}
    elif t == "array":
        out = {"type": "array", "items": connect_to_jsonschema(s["items"])}
    elif t == "struct":
        out = {"type": "object", "properties": {}}
        if s.get("name"):
            out["title"] = s["name"]
        required = []
        for f in s.get("fields") or []:
            out["properties"][f["field"]] = connect_to_jsonschema(f)
            if not f.get("optional"):
                required.append(f["field"])
        if required:
            out["required"] = required
        out["additionalProperties"] = False
    else:
        raise DataException(f"Connect type {t!r} cannot be written with JSON Schema by strom")
    if s.get("optional"):
        return {"oneOf": [{"type": "null"}, out]}
    return out


class JsonSchemaConverter(_RegistryConverter):
    java_class = JSON_SCHEMA
    schema_type = "JSON"

    def __init__(self, props: Mapping[str, str], is_key: bool) -> None:
        super().__init__(props, is_key)
        self._schemas: dict[int, Schema] = {}

    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return None, None
        sid, _, payload = self._unframe(data)
        if sid not in self._schemas:
            self._schemas[sid] = jsonschema_to_connect(json.loads(self._schema(sid)["schema"]))
        schema = self._schemas[sid]
        try:
            doc = json.loads(payload)
        except (ValueError, UnicodeDecodeError) as e:
            raise DataException(f"Failed to deserialize JSON for topic {topic}: {e}") from None
        return schema, from_json_value(schema, doc)

    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        from strom.serde import frame

        if value is None and schema is None:
            return None
        if schema is None:
            schema = _infer(value)
        validate_value(schema, value)
        js = {"$schema": "http://json-schema.org/draft-07/schema#", **connect_to_jsonschema(schema)}
        sid = self._register(topic, json.dumps(js, separators=(",", ":")))
        payload = json.dumps(_to_json_value(schema, value, "NUMERIC"), separators=(",", ":"))
        return frame(sid, payload.encode())


# Protobuf (dynamic messages built from the registered descriptor)

_PB_SCALARS = {
    1: "float64",
    2: "float32",
    3: "int64",
    4: "int64",
    5: "int32",
    6: "int64",
    7: "int32",
    8: "boolean",
    9: "string",
    12: "bytes",
    13: "int64",
    15: "int32",
    16: "int64",
    17: "int32",
    18: "int64",
}
_PROTO_TYPES = {
    "int8": "int32",
    "int16": "int32",
    "int32": "int32",
    "int64": "int64",
    "float32": "float",
    "float64": "double",
    "boolean": "bool",
    "string": "string",
    "bytes": "bytes",
}


class ProtobufConverter(_RegistryConverter):
    java_class = PROTOBUF
    schema_type = "PROTOBUF"

    def __init__(self, props: Mapping[str, str], is_key: bool) -> None:
        super().__init__(props, is_key)
        from google.protobuf import descriptor_pb2  # noqa: F401 - fail at config time when it is missing

        self._classes: dict[tuple[int, tuple[int, ...]], tuple[Any, Schema]] = {}
        self._written: dict[tuple[str, str], tuple[int, Any]] = {}  # (topic, proto text)

    def _message(self, sid: int, indexes: list[int]) -> tuple[Any, Schema]:
        key = (sid, tuple(indexes))
        if key in self._classes:
            return self._classes[key]
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        from strom.serde import SerdeError

        try:
            doc = self.client._call("GET", f"/schemas/ids/{sid}?format=serialized")
            fdp = descriptor_pb2.FileDescriptorProto()
            fdp.ParseFromString(base64.b64decode(doc["schema"]))
            pool = descriptor_pool.DescriptorPool()
            pool.Add(fdp)
            fd = pool.FindFileByName(fdp.name)
            desc = list(fd.message_types_by_name.values())[indexes[0]]
            for i in indexes[1:]:
                desc = desc.nested_types[i]
        except SerdeError as e:
            raise DataException(f"Failed to retrieve schema of id {sid}: {e}") from None
        except Exception as e:
            raise DataException(f"schema {sid} is not a usable Protobuf descriptor: {e}") from None
        entry = (message_factory.GetMessageClass(desc), self._desc_schema(desc))
        self._classes[key] = entry
        return entry

    def _desc_schema(self, desc: Any) -> Schema:
        fields = []
        for f in desc.fields:
            if f.message_type is not None and f.message_type.GetOptions().map_entry:
                k, v = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
                fs: Schema = {
                    "type": "map",
                    "keys": self._field_schema(k),
                    "values": self._field_schema(v),
                    "optional": True,
                }
            elif _repeated(f):
                fs = {"type": "array", "items": self._field_schema(f), "optional": True}
            else:
                fs = self._field_schema(f)
            fs["field"] = f.name
            fields.append(fs)
        return {"type": "struct", "name": desc.full_name, "fields": fields, "optional": False}

    def _field_schema(self, f: Any) -> Schema:
        if f.message_type is not None:
            s = self._desc_schema(f.message_type)
            s["optional"] = True
            return s
        if f.type == 14:  # enum
            return {"type": "string", "optional": True}
        t = _PB_SCALARS.get(f.type)
        if t is None:
            raise DataException(f"Protobuf field type {f.type} of {f.name} is not supported")
        return {"type": t, "optional": True}

    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return None, None
        sid, indexes, payload = self._unframe(data, protobuf=True)
        cls, schema = self._message(sid, indexes or [0])
        msg = cls()
        try:
            msg.ParseFromString(payload)
        except Exception as e:
            raise DataException(f"Failed to deserialize Protobuf data for topic {topic}: {e}") from None
        return schema, _msg_value(msg)

    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        from strom.serde import frame

        if value is None and schema is None:
            return None
        if schema is None or schema.get("type") != "struct":
            raise DataException("strom's ProtobufConverter writes structs (data with a schema) only")
        validate_value(schema, value)
        text = proto_text(schema)
        if (topic, text) not in self._written:
            sid = self._register(topic, text)
            cls, _ = self._message(sid, [0])
            self._written[(topic, text)] = (sid, cls)
        sid, cls = self._written[(topic, text)]
        msg = cls()
        try:
            _fill(msg, schema, value)
        except (TypeError, ValueError) as e:
            raise DataException(f"Failed to serialize Protobuf data for topic {topic}: {e}") from None
        return frame(sid, msg.SerializeToString(), [0])


def _repeated(f: Any) -> bool:
    rep = getattr(f, "is_repeated", None)  # newer protobuf; older ones have label (3 = repeated)
    return bool(rep) if rep is not None else bool(f.label == 3)


def _msg_value(msg: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in msg.DESCRIPTOR.fields:
        v = getattr(msg, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            vf = f.message_type.fields_by_name["value"]
            out[f.name] = {k: (_msg_value(x) if vf.message_type is not None else x) for k, x in v.items()}
        elif _repeated(f):
            out[f.name] = [
                _msg_value(x)
                if f.message_type is not None
                else (f.enum_type.values_by_number[x].name if f.type == 14 else x)
                for x in v
            ]
        elif f.message_type is not None:
            out[f.name] = _msg_value(v) if msg.HasField(f.name) else None
        elif f.type == 14:
            out[f.name] = f.enum_type.values_by_number[v].name if v in f.enum_type.values_by_number else v
        else:
            out[f.name] = v
    return out


def proto_text(schema: Schema) -> str:
    """A proto3 file for a Connect struct (nested structs as nested messages; the namespace of
    the struct's name is the package)."""
    pkg, _, name = (schema.get("name") or "ConnectDefault1").rpartition(".")
    head = ['syntax = "proto3";', ""] + ([f"package {pkg};", ""] if pkg else [])  # as ProtobufData
    return "\n".join([*head, *_proto_message(name, schema, "")]) + "\n"


def _proto_message(name: str, schema: Schema, indent: str) -> list[str]:
    head, body, nested = f"{indent}message {name} {{", [], []
    for i, f in enumerate(schema.get("fields") or [], start=1):
        t = f.get("type")
        label, s = "", f
        if t == "array":
            label, s = "repeated ", f["items"]
            t = s.get("type")
        if t == "struct":
            tname = (s.get("name") or f"{f['field'][:1].upper()}{f['field'][1:]}Msg").rsplit(".", 1)[-1]
            nested += _proto_message(tname, s, indent + "  ")
        elif t == "map":
            kt = _PROTO_TYPES.get(str(s["keys"].get("type")), "string")
            vt = _PROTO_TYPES.get(str(s["values"].get("type")))
            if vt is None:
                raise DataException("strom's ProtobufConverter writes maps of scalars only")
            tname = f"map<{kt}, {vt}>"
        elif s.get("name") in (TIMESTAMP, DATE, TIME):
            tname = "int64"
        else:
            tname = _PROTO_TYPES.get(str(t), "")
            if not tname:
                raise DataException(f"Connect type {t} cannot be written as Protobuf")
        body.append(f"{indent}  {label}{tname} {f['field']} = {i};")
    return [head, *nested, *body, f"{indent}}}"]


def _fill(msg: Any, schema: Schema, value: dict[str, Any]) -> None:
    for f in schema.get("fields") or []:
        v = value.get(f["field"])
        if v is None:
            continue
        t = f.get("type")
        if t == "struct":
            _fill(getattr(msg, f["field"]), f, v)
        elif t == "array":
            target = getattr(msg, f["field"])
            for x in v:
                if f["items"].get("type") == "struct":
                    _fill(target.add(), f["items"], x)
                else:
                    target.append(x)
        elif t == "map":
            getattr(msg, f["field"]).update(v)
        elif isinstance(v, dt.datetime):
            setattr(msg, f["field"], millis(v))
        else:
            setattr(msg, f["field"], v)


CONVERTERS: dict[str, type[Any]] = {
    STRING: StringConverter,
    BYTE_ARRAY: ByteArrayConverter,
    JSON: JsonConverter,
    AVRO: AvroConverter,
    JSON_SCHEMA: JsonSchemaConverter,
    PROTOBUF: ProtobufConverter,
}


def make_converter(cls: str, props: Mapping[str, str], is_key: bool) -> Converter:
    cls = cls.strip()
    impl = CONVERTERS.get(cls)
    if impl is None:
        for full, c in CONVERTERS.items():
            if full.rsplit(".", 1)[-1] == cls:
                impl = c
                break
    if impl is None:
        raise ConfigError(
            f"Class {cls} could not be found: not a converter strom has (known: "
            f"{', '.join(sorted(CONVERTERS))})"
        )
    conv: Converter = impl(props, is_key)
    return conv
