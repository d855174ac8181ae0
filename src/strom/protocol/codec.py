"""Request decoding and response encoding through kio's typed messages (sans-IO).

Handlers answer with plain dicts keyed by kio's (snake_case) field names; :func:`build` turns
such a dict into the kio entity of the exact response version the client asked for: fields the
version lacks are dropped, fields the dict omits get their schema default (or a zero value),
ints become ``timedelta`` for ``*_ms`` duration fields and ``ErrorCode`` for error codes.
One handler therefore serves every version of its API.

Error contract: :func:`decode_request` raises only ``ProtocolError``.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import types
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_reader, entity_writer

from . import produce_request
from .api_versions import api_name
from .errors import ProtocolError
from .framing import skip_tagged_fields, write_uvarint
from .request_bounds import check_request, prepare

ZERO_UUID = uuid.UUID(int=0)
PRODUCE = 0


_ONE_MS = datetime.timedelta(milliseconds=1)


def duration_ms(value: datetime.timedelta) -> int:
    """A kio duration field (``*_ms``, a ``timedelta``) as the int of milliseconds it was read
    from, exactly. ``int(value.total_seconds() * 1000)`` is not: 1001 ms come back as 1000 (1.001
    * 1000 is 1000.9999... in floating point), so e.g. a transaction timeout 1 ms over the
    broker's maximum passed its check."""
    return value // _ONE_MS


def optional_duration_ms(value: datetime.timedelta | int | None, default: int) -> int:
    """:func:`duration_ms` of a field that may be absent (``None``: ``default``, e.g. a field
    of later versions only) or already an int."""
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return value // _ONE_MS
    return int(value)


@cache
def request_type(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)  # type: ignore[no-any-return]


@cache
def response_type(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)  # type: ignore[no-any-return]


def is_flexible(api_key: int, version: int) -> bool:
    return bool(getattr(request_type(api_key, version), "__flexible__", False))


@cache
def _reader(cls: Any) -> Callable[[Any, int], Any]:
    return entity_reader(cls)  # type: ignore[no-any-return]


@cache
def _writer(cls: Any) -> Callable[[Any, Any], Any]:
    return entity_writer(cls)  # type: ignore[no-any-return]


def preload(versions: Iterable[tuple[int, int, int]]) -> int:
    """Load and compile, for every ``(api_key, min, max)``, each version's request decoder, its
    bounds check and its response encoder: what the first request of a version would otherwise
    do on the event loop (2-20 ms of kio schema import and code generation each). The number of
    versions loaded."""
    n = 0
    for api_key, lo, hi in versions:
        for version in range(lo, hi + 1):
            request = request_type(api_key, version)
            _reader(request)
            prepare(request)
            _writer(response_type(api_key, version))
            n += 1
    return n


def decode_request(api_key: int, version: int, frame: memoryview, body_pos: int) -> Any:
    """Decode a request body (``frame[body_pos:]`` after the v1 header part). Produce v3..12 is
    read by hand (:mod:`strom.protocol.produce_request`: its records stay views of the frame);
    every other request through the bounds check and kio."""
    if api_key == PRODUCE and produce_request.FIRST_VERSION <= version <= produce_request.LAST_VERSION:
        try:
            return produce_request.decode_produce_request(frame, body_pos, version)
        except ProtocolError as e:
            raise ProtocolError(f"cannot decode Produce v{version} request: {e}") from None
    try:
        cls = request_type(api_key, version)
        pos = body_pos
        if getattr(cls, "__flexible__", False):
            pos = skip_tagged_fields(frame, pos)
        check_request(cls, frame, pos)  # before kio sizes anything from the wire
        # a read-only view, not a copy: kio copies out what it keeps (bytes fields, strings)
        obj, _size = _reader(cls)(memoryview(frame)[pos:].toreadonly(), 0)
        return obj
    except ProtocolError as e:
        raise ProtocolError(f"cannot decode {api_name(api_key)} v{version} request: {e}") from None
    except Exception as e:  # kio raises assorted errors on malformed bytes
        raise ProtocolError(f"cannot decode {api_name(api_key)} v{version} request: {e}") from e


def encode_response(obj: Any) -> bytes:
    buf = io.BytesIO()
    writer: Any = _writer
    writer(type(obj))(buf, obj)
    return buf.getvalue()


# --------------------------------------------------------------------------- arrays encoded by hand
# Hot answers with thousands of entries (Metadata, ListOffsets) encode their big arrays by hand
# and let kio encode everything else: the entity is encoded with the array empty and the
# array's bytes put in its place. Only fixed-size fields may follow the array.

_FIXED_SIZE = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
               "timedelta_i32": 4, "int64": 8, "timedelta_i64": 8, "float64": 8, "uuid": 16}


def array_length(flexible: bool, n: int) -> bytes:
    """An array's length prefix: int32, or in flexible versions the compact form (n + 1 as an
    unsigned varint)."""
    if not flexible:
        return n.to_bytes(4, "big", signed=True)
    out = bytearray()
    write_uvarint(out, n + 1)
    return bytes(out)


@cache
def array_entry_type(cls: type, array: str) -> type:
    """kio's entity for one entry of the array field ``array`` of entity ``cls`` (e.g. one topic
    of a response)."""
    for spec in _fields(cls):
        if spec.name == array:
            return spec.target  # type: ignore[no-any-return]
    raise ValueError(f"{cls.__name__} has no array field {array}")


@cache
def _array_slot(cls: Any, array: str) -> tuple[int, int]:
    flexible = bool(getattr(cls, "__flexible__", False))
    after = 0
    seen = False
    for f in dataclasses.fields(cls):
        if f.name == array:
            seen = True
        elif seen and "tag" not in f.metadata:
            size = _FIXED_SIZE.get(f.metadata.get("kafka_type", ""))
            if size is None or typing.get_origin(f.type) is tuple:
                raise ValueError(f"{cls.__name__}.{f.name} after {array} is not of a fixed size")
            after += size
    if not seen:
        raise ValueError(f"{cls.__name__} has no field {array}")
    return (1 if flexible else 4), after + (1 if flexible else 0)


def encode_around(cls: type, data: Mapping[str, Any], array: str) -> tuple[bytes, bytes]:
    """Entity ``cls`` built from ``data`` and encoded with the array field ``array`` empty, cut
    where that array goes: the caller writes ``before``, :func:`array_length` and its entries'
    bytes, ``after``. The entity's tagged fields must have their default values."""
    encoded = encode_response(build(cls, {**data, array: ()}))
    empty, after = _array_slot(cls, array)
    cut = len(encoded) - after - empty
    return encoded[:cut], encoded[len(encoded) - after:]


# --------------------------------------------------------------------------- dict -> entity


@dataclasses.dataclass(frozen=True)
class _FieldSpec:
    name: str
    kind: str  # "entity", "entity_tuple", "timedelta", "error", "uuid", "datetime", "plain", "tuple"
    target: Any
    has_default: bool
    default: Any
    optional: bool


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


@cache
def _fields(cls: Any) -> tuple[_FieldSpec, ...]:
    hints = typing.get_type_hints(cls)
    specs = []
    target: Any
    for f in dataclasses.fields(cls):
        tp, optional = _unwrap_optional(hints[f.name])
        origin = typing.get_origin(tp)
        if origin is tuple:
            inner = typing.get_args(tp)[0]
            if dataclasses.is_dataclass(inner):
                kind, target = "entity_tuple", inner
            else:
                kind, target = "tuple", inner
        elif dataclasses.is_dataclass(tp):
            kind, target = "entity", tp
        elif isinstance(tp, type) and issubclass(tp, datetime.timedelta):
            kind, target = "timedelta", tp
        elif isinstance(tp, type) and issubclass(tp, datetime.datetime):
            kind, target = "datetime", tp
        elif tp is KioErrorCode:
            kind, target = "error", tp
        elif tp is uuid.UUID:
            kind, target = "uuid", tp
        else:
            kind, target = "plain", tp
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        default = f.default if f.default is not dataclasses.MISSING else None
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        specs.append(_FieldSpec(f.name, kind, target, has_default, default, optional))
    return tuple(specs)


def _zero(spec: _FieldSpec) -> Any:
    if spec.optional:
        return None
    if spec.kind in ("entity_tuple", "tuple"):
        return ()
    if spec.kind == "entity":
        return build(spec.target, {})
    if spec.kind == "timedelta":
        return datetime.timedelta(0)
    if spec.kind == "error":
        return KioErrorCode.none
    if spec.kind == "uuid":
        return ZERO_UUID
    tp = spec.target
    if tp is bool:
        return False
    if isinstance(tp, type) and issubclass(tp, str):
        return ""
    if isinstance(tp, type) and issubclass(tp, bytes):
        return b""
    if isinstance(tp, type) and issubclass(tp, float):
        return 0.0
    return 0


def _convert(spec: _FieldSpec, value: Any) -> Any:
    if value is None:
        return None if spec.optional else _zero(spec)
    kind = spec.kind
    if kind == "entity_tuple":
        return tuple(v if dataclasses.is_dataclass(v) else build(spec.target, v) for v in value)
    if kind == "entity":
        return value if dataclasses.is_dataclass(value) else build(spec.target, value)
    if kind == "timedelta":
        return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=int(value))
    if kind == "error":
        return value if isinstance(value, KioErrorCode) else KioErrorCode(int(value))
    if kind == "tuple":
        return tuple(value)
    if kind == "datetime" and isinstance(value, int):
        if value < 0 and spec.optional:
            return None
        # Kafka sends -1 for "no time" (e.g. no open transaction); kio encodes any datetime
        return datetime.datetime.fromtimestamp(value / 1000, datetime.UTC)
    return value


def build(cls: type, data: Mapping[str, Any]) -> Any:
    """Build kio entity ``cls`` from a dict of field values (see module doc)."""
    kwargs: dict[str, Any] = {}
    for spec in _fields(cls):
        if spec.name in data:
            kwargs[spec.name] = _convert(spec, data[spec.name])
        elif spec.has_default:
            continue
        else:
            kwargs[spec.name] = _zero(spec)
    return cls(**kwargs)
