"""Parsing, canonical form and compatibility of AVRO, JSON and PROTOBUF schemas."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

from strom.schema_registry import avro_compat, json_compat, protobuf_schema

TYPES = ("AVRO", "JSON", "PROTOBUF")
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
          "FULL", "FULL_TRANSITIVE")


class InvalidSchema(ValueError):
    pass


@dataclass
class Parsed:
    schema_type: str
    canonical: str
    obj: Any  # Avro/JSON: the parsed JSON; Protobuf: a ProtoModel
    names: dict[str, Any]  # Avro: named types from references


def parse(schema_type: str, text: str, ref_texts: list[str] | None = None,
          named_refs: dict[str, str] | None = None) -> Parsed:
    """Parses ``text``; ``ref_texts`` are the referenced schemas' texts (same type, transitively),
    ``named_refs`` the direct references' texts by reference name (JSON Schema ``$ref``)."""
    if schema_type not in TYPES:
        raise InvalidSchema(f"Invalid schema type {schema_type}")
    if schema_type == "PROTOBUF":
        try:
            model = protobuf_schema.parse(text)
        except protobuf_schema.ProtobufError as e:
            raise InvalidSchema(str(e)) from e
        return Parsed(schema_type, text.strip(), model, {})
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, TypeError) as e:
        raise InvalidSchema(f"Invalid schema {text!r}: {e}") from e
    canonical = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    if schema_type == "JSON":
        if not isinstance(obj, dict | bool):
            raise InvalidSchema("Invalid schema: a JSON Schema is an object or a boolean")
        try:
            import jsonschema

            jsonschema.validators.validator_for(obj).check_schema(obj)
        except ImportError:  # pragma: no cover
            pass
        except Exception as e:  # jsonschema.SchemaError
            raise InvalidSchema(f"Invalid schema: {getattr(e, 'message', e)}") from e
        names: dict[str, Any] = {}
        for name, ref_text in (named_refs or {}).items():
            with contextlib.suppress(ValueError):
                names[name] = json.loads(ref_text)
        return Parsed(schema_type, canonical, obj, names)
    import fastavro

    named: dict[str, Any] = {}
    try:
        for ref in ref_texts or []:
            fastavro.parse_schema(json.loads(ref), named_schemas=named)
        fastavro.parse_schema(obj, named_schemas=dict(named))
    except Exception as e:  # fastavro raises SchemaParseException, UnknownType, ...
        raise InvalidSchema(f"Invalid schema {text}: {e}") from e
    avro_names: dict[str, Any] = {}
    for ref in ref_texts or []:
        avro_compat.collect_names(json.loads(ref), avro_names)
    return Parsed(schema_type, canonical, obj, avro_names)


def can_read(reader: Parsed, writer: Parsed) -> list[str]:
    if reader.schema_type != writer.schema_type:
        return [f"schema type changed from {writer.schema_type} to {reader.schema_type}"]
    if reader.schema_type == "AVRO":
        return avro_compat.can_read(reader.obj, writer.obj, reader.names, writer.names)
    if reader.schema_type == "JSON":
        return json_compat.accepts(reader.obj, writer.obj, "#", reader.names, writer.names)
    return protobuf_schema.can_read(reader.obj, writer.obj)


def check(level: str, new: Parsed, olds: list[Parsed]) -> list[str]:
    """``olds`` are the subject's live versions, oldest first. Returns the problems."""
    if level == "NONE" or not olds:
        return []
    targets = olds if level.endswith("_TRANSITIVE") else olds[-1:]
    problems: list[str] = []
    for old in targets:
        if level.startswith(("BACKWARD", "FULL")):
            problems += can_read(new, old)
        if level.startswith(("FORWARD", "FULL")):
            problems += can_read(old, new)
    return problems
