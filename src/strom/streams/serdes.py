"""Serdes of :mod:`strom.streams`: how record keys and values become Python objects and back.

A serde is either one of the names ``bytes`` (as read), ``string`` (UTF-8) and ``json``, or a
:class:`RegistrySerde` made by :func:`avro`, :func:`json_schema` or :func:`protobuf`: the Schema
Registry's wire format (magic byte, schema id, [Protobuf message indexes], payload), read with the
writer's schema found by its id and written with the serde's schema, registered (or looked up)
under the subject its subject name strategy gives for the output topic (TopicNameStrategy by
default, as Kafka Streams' serdes). The registry client and the parsed schemas are made lazily
in each Spark worker: a :class:`RegistrySerde` pickles as its settings only.

Error contract: a bad serde is a ``ValueError`` when the pipeline is defined; a record that does
not decode raises :class:`DecodeError` (topic, partition, offset, serde and reason in the
message), which the pipeline's ``on_error`` turns into a failed micro-batch, a skipped record or a
dead-letter record (:mod:`strom.streams.dsl`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from strom.streams import processors as P

__all__ = ["NAMES", "DecodeError", "RegistrySerde", "Serde", "avro", "check", "decode", "encode",
           "json_schema", "protobuf"]

NAMES = ("bytes", "string", "json")


class DecodeError(ValueError):
    """A record that its serde cannot read (``where``: topic-partition and offset)."""

    def __init__(self, where: str, serde: str, reason: str) -> None:
        super().__init__(f"record {where} is not {serde}: {reason}")
        self.where, self.serde, self.reason = where, serde, reason


@dataclass
class RegistrySerde:
    """A Schema Registry serde (see the module docstring). ``kind``: ``avro``, ``json_schema``
    or ``protobuf``; ``schema``: the writer's schema text (Avro, JSON Schema), needed to write;
    ``message_class``: the generated Protobuf class; ``user_info``: ``user:password``."""

    kind: str
    registry_url: str
    schema: str | None = None
    message_class: Any = None
    subject_name_strategy: str | None = None
    user_info: str | None = None
    _impl: Any = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_impl": None}

    def __str__(self) -> str:
        return f"{self.kind} (schema registry {self.registry_url})"

    def impl(self) -> Any:
        if self._impl is None:
            from strom.serde import AvroSerde, JsonSerde, ProtobufSerde, RegistryClient

            client = RegistryClient(self.registry_url, user_info=self.user_info)
            if self.kind == "avro":
                self._impl = AvroSerde(client, self.schema, self.subject_name_strategy)
            elif self.kind == "json_schema":
                self._impl = JsonSerde(client, self.schema, subject_name_strategy=self.subject_name_strategy)
            else:
                self._impl = ProtobufSerde(client, self.message_class, self.subject_name_strategy)
        return self._impl


Serde = str | RegistrySerde


def _registry(kind: str, url: str, **kw: Any) -> RegistrySerde:
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"{kind} serde: the schema registry URL must be http(s)://host:port, got {url!r}")
    s = RegistrySerde(kind, url.rstrip("/"), **kw)
    if s.schema is not None:
        try:
            json.loads(s.schema)
        except ValueError as e:
            raise ValueError(f"{kind} serde: the schema is not JSON: {e}") from None
    if s.subject_name_strategy is not None:
        from strom.serde import SerdeError, subject_strategy

        try:
            subject_strategy(s.subject_name_strategy)
        except SerdeError as e:
            raise ValueError(f"{kind} serde: {e}") from None
    return s


def avro(registry_url: str, schema: str | None = None, *, subject_name_strategy: str | None = None,
         user_info: str | None = None) -> RegistrySerde:
    """Avro with the Schema Registry; ``schema`` (JSON text) is needed to write."""
    return _registry("avro", registry_url, schema=schema, subject_name_strategy=subject_name_strategy,
                     user_info=user_info)


def json_schema(registry_url: str, schema: str | None = None, *, subject_name_strategy: str | None = None,
                user_info: str | None = None) -> RegistrySerde:
    """JSON Schema with the Schema Registry (documents validated both ways)."""
    return _registry("json_schema", registry_url, schema=schema, subject_name_strategy=subject_name_strategy,
                     user_info=user_info)


def protobuf(registry_url: str, message_class: Any, *, subject_name_strategy: str | None = None,
             user_info: str | None = None) -> RegistrySerde:
    """Protobuf messages of ``message_class`` with the Schema Registry."""
    if not hasattr(message_class, "DESCRIPTOR"):
        raise ValueError("protobuf serde: message_class must be a generated Protobuf message class")
    return _registry("protobuf", registry_url, message_class=message_class,
                     subject_name_strategy=subject_name_strategy, user_info=user_info)


def check(serde: Any) -> Serde:
    """``serde`` if it is one (see the module docstring); ``ValueError`` otherwise."""
    if isinstance(serde, RegistrySerde):
        return serde
    if isinstance(serde, str) and serde in NAMES:
        return serde
    raise ValueError(f"unknown serde {serde!r}: expected one of {', '.join(NAMES)} or a registry serde "
                     "(strom.streams.avro / json_schema / protobuf)")


def decode(serde: Serde, raw: bytes | None, where: str) -> Any:
    """A key or value as a Python object (None stays None); :class:`DecodeError` if it cannot."""
    if raw is None:
        return None
    if isinstance(serde, RegistrySerde):
        try:
            return serde.impl().deserialize(bytes(raw))
        except Exception as e:  # the serdes raise SerdeError, fastavro/protobuf their own
            raise DecodeError(where, str(serde), f"{type(e).__name__}: {e}") from None
    if serde == "bytes":
        return bytes(raw)
    try:
        text = bytes(raw).decode("utf-8")
        return text if serde == "string" else json.loads(text)
    except (UnicodeDecodeError, ValueError) as e:
        raise DecodeError(where, serde, str(e)) from None


def encode(serde: Serde, v: Any, topic: str = "", is_key: bool = False) -> bytes | None:
    """A key or value as bytes for ``topic`` (None stays None: a tombstone). Windowed keys are
    JSON ``{"key", "start", "end"}`` whatever the serde."""
    if v is None:
        return None
    if isinstance(v, P.Windowed):
        return P.dumps_json(v).encode()
    if isinstance(serde, RegistrySerde):
        return bytes(serde.impl().serialize(topic, v, is_key))
    if serde == "bytes":
        if not isinstance(v, (bytes, bytearray)):
            raise ValueError(f"serde bytes needs bytes, got {type(v).__name__}")
        return bytes(v)
    if serde == "string":
        return (
            v if isinstance(v, str) else json.dumps(v) if isinstance(v, (dict, list)) else str(v)
        ).encode()
    return P.dumps_json(v).encode()
