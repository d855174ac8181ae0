"""Sample requests of every API and version strom serves: seeds for the property tests and the
fuzzer. Each sample is a valid request body as a client could send it: arrays hold ``fill``
elements, strings and bytes a short value, numbers small ones, nullable fields their value (not
null) so the mutations have structure to work on."""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid
from typing import Any

from kio.schema.errors import ErrorCode as KioErrorCode

from ..protocol import codec
from ..protocol.api_versions import KAFKA_API_RANGES
from ..protocol.framing import write_uvarint


def _value(tp: Any, kafka_type: str | None, fill: int, depth: int) -> Any:
    origin = typing.get_origin(tp)
    if origin is typing.Union or isinstance(tp, type(int | None)):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _value(args[0], kafka_type, fill, depth)
    if origin is tuple:
        inner = typing.get_args(tp)[0]
        return tuple(_value(inner, kafka_type, fill, depth + 1) for _ in range(fill if depth < 4 else 0))
    if dataclasses.is_dataclass(tp):
        return sample_entity(tp, fill, depth + 1)  # type: ignore[arg-type]
    if kafka_type == "uuid" or tp is uuid.UUID:
        return uuid.UUID(int=0x1234)
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)  # a Fetch that waits for nothing
    if kafka_type == "datetime_i64":
        return datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    if kafka_type == "error_code":
        return KioErrorCode.none
    if kafka_type == "bool":
        return True
    if kafka_type == "string":
        return "s1"
    if kafka_type in ("bytes", "records"):
        return b"\x00\x01\x02"
    if kafka_type == "float64":
        return 1.5
    return 1


def sample_entity(cls: type, fill: int = 2, depth: int = 0) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        kwargs[f.name] = _value(hints[f.name], f.metadata.get("kafka_type"), fill, depth)
    return cls(**kwargs)


def encode_body(obj: Any) -> bytes:
    """A request body as it follows the header (flexible versions: header tagged fields first)."""
    body = codec.encode_response(obj)  # kio's writer serves requests as well
    if getattr(type(obj), "__flexible__", False):
        head = bytearray()
        write_uvarint(head, 0)
        return bytes(head) + body
    return body


def all_versions() -> list[tuple[int, int]]:
    return [(k, v) for k, (_n, lo, hi) in sorted(KAFKA_API_RANGES.items()) for v in range(lo, hi + 1)]


def sample_bodies(fill: int = 2) -> dict[tuple[int, int], bytes]:
    """(api_key, version) -> a valid request body."""
    return {(k, v): encode_body(sample_entity(codec.request_type(k, v), fill)) for k, v in all_versions()}
