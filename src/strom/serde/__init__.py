"""Confluent's wire format for registry-described records, and serdes over it.

A value is ``0x00`` (magic byte), the schema id (4 bytes, big endian), for Protobuf the message
indexes (zigzag varints: their count, then each index; the common ``[0]`` is the single byte
``0x00``), then the Avro binary / JSON text / Protobuf encoding of the record.

:class:`RegistryClient` talks to a schema registry (``strom schema-registry`` or Confluent's);
:class:`AvroSerde`, :class:`JsonSerde` and :class:`ProtobufSerde` turn records into framed bytes
and back, interchangeable with confluent-kafka's serializers.
"""

from __future__ import annotations

import io
import json
import struct
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ..protocol.records import CorruptRecordError, _write_varint
from ..protocol.records import _read_varint as _record_varint

MAGIC = 0
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class SerdeError(ValueError):
    pass


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The record format's zigzag varint (:func:`strom.protocol.records._read_varint`)."""
    try:
        return _record_varint(data, pos)
    except CorruptRecordError as e:
        raise SerdeError(f"bad message indexes: {e}") from None


def frame(schema_id: int, payload: bytes, message_indexes: list[int] | None = None) -> bytes:
    """Wraps ``payload`` in the wire format (``message_indexes`` for Protobuf only)."""
    if not 0 <= schema_id <= 0x7FFFFFFF:
        raise SerdeError(f"schema id {schema_id} out of range")
    out = bytearray(struct.pack(">bI", MAGIC, schema_id))
    if message_indexes is not None:
        if message_indexes == [0]:
            out.append(0)
        else:
            _write_varint(out, len(message_indexes))
            for i in message_indexes:
                _write_varint(out, i)
    out += payload
    return bytes(out)


def unframe(data: bytes, protobuf: bool = False) -> tuple[int, list[int] | None, bytes]:
    """Returns (schema id, message indexes (Protobuf) or None, payload)."""
    if len(data) < 5:
        raise SerdeError(f"{len(data)} bytes: too short for the wire format")
    if data[0] != MAGIC:
        raise SerdeError(f"unknown magic byte {data[0]}")
    (schema_id,) = struct.unpack_from(">I", data, 1)
    if not protobuf:
        return schema_id, None, data[5:]
    count, pos = _read_varint(data, 5)
    if count == 0:
        return schema_id, [0], data[pos:]
    if count < 0 or count > 1000:
        raise SerdeError(f"bad message index count {count}")
    indexes = []
    for _ in range(count):
        i, pos = _read_varint(data, pos)
        indexes.append(i)
    return schema_id, indexes, data[pos:]


class RegistryClient:
    """A minimal, caching client of the Schema Registry REST API (standard library only)."""

    def __init__(self, url: str, timeout: float = 30.0, user_info: str | None = None) -> None:
        """``user_info``: ``user:password`` for HTTP basic auth (confluent-kafka's
        ``basic.auth.user.info``)."""
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._auth: str | None = None
        if user_info:
            import base64

            self._auth = "Basic " + base64.b64encode(user_info.encode()).decode()
        self._by_id: dict[tuple[int, str | None], dict[str, Any]] = {}
        self._ids: dict[tuple[str, str, str], int] = {}

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE}
        if self._auth:
            headers["Authorization"] = self._auth
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            try:
                err = json.loads(e.read())
            except ValueError:
                err = {"error_code": e.code, "message": str(e)}
            raise SerdeError(f"schema registry: {err.get('message')} (error {err.get('error_code')})") from e
        except OSError as e:
            raise SerdeError(f"schema registry at {self.url}: {e}") from e

    def register(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        k = (subject, schema_type, schema)
        if k not in self._ids:
            body: dict[str, Any] = {"schema": schema}
            if schema_type != "AVRO":
                body["schemaType"] = schema_type
            quoted = urllib.parse.quote(subject, safe="")
            self._ids[k] = int(self._call("POST", f"/subjects/{quoted}/versions", body)["id"])
        return self._ids[k]

    def schema(self, schema_id: int, fmt: str | None = None) -> dict[str, Any]:
        """``GET /schemas/ids/{id}`` (``fmt="serialized"``: Protobuf as a base64 descriptor)."""
        k = (schema_id, fmt)
        if k not in self._by_id:
            q = f"?format={fmt}" if fmt else ""
            self._by_id[k] = self._call("GET", f"/schemas/ids/{schema_id}{q}")
        return self._by_id[k]

    def version(self, subject: str, version: str | int = "latest", fmt: str | None = None) -> dict[str, Any]:
        """``GET /subjects/{s}/versions/{v}``: subject, version, id, schema, schemaType (not cached:
        ``latest`` moves)."""
        quoted = urllib.parse.quote(subject, safe="")
        q = f"?format={fmt}" if fmt else ""
        return dict(self._call("GET", f"/subjects/{quoted}/versions/{version}{q}"))


def topic_subject(topic: str, is_key: bool = False) -> str:
    """Confluent's default TopicNameStrategy."""
    return f"{topic}-{'key' if is_key else 'value'}"


# Confluent's subject name strategies (io.confluent.kafka.serializers.subject.*), by simple name
SUBJECT_STRATEGIES = ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")
STRATEGY_PACKAGE = "io.confluent.kafka.serializers.subject."


def subject_strategy(name: str | None) -> str:
    """The simple name of a ``key.subject.name.strategy`` / ``value.subject.name.strategy``
    value (Confluent's class name, or the simple name); empty: TopicNameStrategy."""
    if name is None or not name.strip():
        return "TopicNameStrategy"
    simple = name.strip().rsplit(".", 1)[-1]
    if simple not in SUBJECT_STRATEGIES:
        raise SerdeError(
            f"unknown subject name strategy {name.strip()!r}: one of "
            + ", ".join(STRATEGY_PACKAGE + s for s in SUBJECT_STRATEGIES)
        )
    return simple


def record_name(schema: str, schema_type: str = "AVRO") -> str:
    """The record name RecordNameStrategy uses for a schema, as Confluent's serializers take it:
    an Avro named type's full name (``namespace.name``; a primitive's type name), a JSON Schema's
    ``title``, a Protobuf schema's first message (``package.Message``)."""
    if schema_type == "AVRO":
        try:
            doc = json.loads(schema)
        except ValueError as e:
            raise SerdeError(f"Avro schema is not JSON: {e}") from None
        if isinstance(doc, str):
            return doc
        if isinstance(doc, dict):
            name = doc.get("name")
            if isinstance(name, str) and doc.get("type") in ("record", "enum", "fixed"):
                ns = doc.get("namespace")
                return name if "." in name or not ns else f"{ns}.{name}"
            if isinstance(doc.get("type"), str):
                return str(doc["type"])
        raise SerdeError("RecordNameStrategy: an Avro union has no record name")
    if schema_type == "JSON":
        try:
            doc = json.loads(schema)
        except ValueError as e:
            raise SerdeError(f"JSON Schema is not JSON: {e}") from None
        title = doc.get("title") if isinstance(doc, dict) else None
        if not isinstance(title, str) or not title:
            raise SerdeError("RecordNameStrategy: the JSON Schema has no 'title' (its record name)")
        return title
    import re

    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", schema, flags=re.S)
    m = re.search(r"\bmessage\s+([A-Za-z_][A-Za-z0-9_]*)", text)
    if m is None and "{" not in text:  # a serialized FileDescriptorProto (base64)
        import base64
        import binascii

        from google.protobuf import descriptor_pb2
        from google.protobuf.message import DecodeError

        fd = descriptor_pb2.FileDescriptorProto()
        try:
            fd.ParseFromString(base64.b64decode(text, validate=True))
        except (binascii.Error, DecodeError, ValueError):
            fd.Clear()
        if fd.message_type:
            return f"{fd.package}.{fd.message_type[0].name}" if fd.package else fd.message_type[0].name
    if m is None:
        raise SerdeError("RecordNameStrategy: the Protobuf schema has no message")
    pkg = re.search(r"\bpackage\s+([A-Za-z_][A-Za-z0-9_.]*)\s*;", text)
    return f"{pkg.group(1)}.{m.group(1)}" if pkg else m.group(1)


def subject_name(strategy: str, topic: str, is_key: bool, record: str | None) -> str:
    """The subject for ``topic``'s key or value under ``strategy`` (a simple name from
    :func:`subject_strategy`); ``record``: the record name (record strategies only)."""
    if strategy == "TopicNameStrategy":
        return topic_subject(topic, is_key)
    if record is None:
        raise SerdeError(f"{strategy} needs the record's name")
    return record if strategy == "RecordNameStrategy" else f"{topic}-{record}"



def schema_subject(strategy: str, topic: str, is_key: bool, schema: str, schema_type: str = "AVRO") -> str:
    """The subject ``schema`` is registered under for ``topic``'s key or value: the record
    strategies take the record name from the schema (:func:`record_name`)."""
    rec = record_name(schema, schema_type) if strategy != "TopicNameStrategy" else None
    return subject_name(strategy, topic, is_key, rec)

class AvroSerde:
    """Avro records (dicts) <-> wire format; reads with the writer's schema (by id)."""

    def __init__(
        self, client: RegistryClient, schema: str | None = None, subject_name_strategy: str | None = None
    ) -> None:
        import fastavro

        self.client = client
        self.schema = schema
        self.strategy = subject_strategy(subject_name_strategy)
        self._parsed = fastavro.parse_schema(json.loads(schema)) if schema else None
        self._readers: dict[int, Any] = {}

    def serialize(self, topic: str, record: Any, is_key: bool = False) -> bytes:
        import fastavro

        if self.schema is None:
            raise SerdeError("AvroSerde needs a schema to serialize")
        sid = self.client.register(schema_subject(self.strategy, topic, is_key, self.schema), self.schema)
        buf = io.BytesIO()
        assert self._parsed is not None
        fastavro.schemaless_writer(buf, self._parsed, record)
        return frame(sid, buf.getvalue())

    def deserialize(self, data: bytes) -> Any:
        import fastavro

        sid, _, payload = unframe(data)
        if sid not in self._readers:
            self._readers[sid] = fastavro.parse_schema(json.loads(self.client.schema(sid)["schema"]))
        return fastavro.schemaless_reader(io.BytesIO(payload), self._readers[sid], self._parsed)


class JsonSerde:
    """JSON documents <-> wire format, validated against the JSON Schema."""

    def __init__(
        self,
        client: RegistryClient,
        schema: str | None = None,
        validate: bool = True,
        subject_name_strategy: str | None = None,
    ) -> None:
        self.client, self.schema, self.validate = client, schema, validate
        self.strategy = subject_strategy(subject_name_strategy)

    def serialize(self, topic: str, doc: Any, is_key: bool = False) -> bytes:
        if self.schema is None:
            raise SerdeError("JsonSerde needs a schema to serialize")
        if self.validate:
            self._check(json.loads(self.schema), doc)
        subject = schema_subject(self.strategy, topic, is_key, self.schema, "JSON")
        sid = self.client.register(subject, self.schema, "JSON")
        return frame(sid, json.dumps(doc, separators=(",", ":")).encode())

    def deserialize(self, data: bytes) -> Any:
        sid, _, payload = unframe(data)
        doc = json.loads(payload)
        if self.validate:
            self._check(json.loads(self.client.schema(sid)["schema"]), doc)
        return doc

    @staticmethod
    def _check(schema: Any, doc: Any) -> None:
        import jsonschema

        try:
            jsonschema.validate(doc, schema)
        except jsonschema.ValidationError as e:
            raise SerdeError(f"record does not match its JSON Schema: {e.message}") from e


class ProtobufSerde:
    """Protobuf messages of one generated class <-> wire format (message indexes of that class)."""

    def __init__(
        self, client: RegistryClient, message_class: Any, subject_name_strategy: str | None = None
    ) -> None:
        import base64

        self.client, self.cls = client, message_class
        self.strategy = subject_strategy(subject_name_strategy)
        desc = message_class.DESCRIPTOR
        self.schema = base64.b64encode(desc.file.serialized_pb).decode()
        # the message's path among the file's (nested) message types
        path: list[int] = []
        d = desc
        while d.containing_type is not None:
            path.insert(0, list(d.containing_type.nested_types).index(d))
            d = d.containing_type
        path.insert(0, list(desc.file.message_types_by_name.values()).index(d))
        self.indexes = path

    def serialize(self, topic: str, message: Any, is_key: bool = False) -> bytes:
        # the record name of a message class: its full name (confluent-kafka's too)
        subject = subject_name(self.strategy, topic, is_key, self.cls.DESCRIPTOR.full_name)
        sid = self.client.register(subject, self.schema, "PROTOBUF")
        return frame(sid, message.SerializeToString(), self.indexes)

    def deserialize(self, data: bytes) -> Any:
        _sid, _indexes, payload = unframe(data, protobuf=True)
        msg = self.cls()
        msg.ParseFromString(payload)
        return msg
