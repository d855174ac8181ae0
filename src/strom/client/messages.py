"""Sans-IO helpers over kio: build a request for whichever version was negotiated, frame it,
decode a response, and pick versions.

Requests are described once, as plain nested dicts with Kafka's field names (snake_case, as kio
spells them); :func:`build` turns such a dict into the kio dataclass of any version, ignoring
keys that version lacks and filling required fields it does not get with a neutral value (empty
list, ``None``, zero). That keeps one code path per API for every version kio knows.

Error contract: :func:`decode_response` raises :class:`KafkaProtocolError` for bytes it cannot
parse; :func:`pick_version` raises :class:`KafkaError` (UNSUPPORTED_VERSION) when broker and kio
share no version.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from strom.client.errors import KafkaError, KafkaProtocolError
from strom.protocol.codec import build

__all__ = [
    "ApiKey",
    "build",
    "decode_response",
    "encode_request",
    "kio_versions",
    "pick_version",
]


class ApiKey:
    """The API keys this client speaks."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    DESCRIBE_CONFIGS = 32
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    SASL_AUTHENTICATE = 36


@cache
def kio_versions(api_key: int) -> tuple[int, ...]:
    """Versions of ``api_key`` that kio has schemas for, ascending."""
    name = api_key_map.get(api_key)
    if name is None:
        return ()
    return tuple(sorted(schema_name_map[name]))


def pick_version(
    api_key: int,
    broker_range: tuple[int, int] | None,
    *,
    max_version: int | None = None,
    min_version: int | None = None,
) -> int:
    """The highest version in kio ∩ broker range ∩ [min_version, max_version]."""
    if broker_range is None:
        raise KafkaError(int(ErrorCode.unsupported_version), f"broker does not support API key {api_key}")
    lo, hi = broker_range
    if max_version is not None:
        hi = min(hi, max_version)
    if min_version is not None:
        lo = max(lo, min_version)
    for v in reversed(kio_versions(api_key)):
        if lo <= v <= hi:
            return v
    raise KafkaError(
        int(ErrorCode.unsupported_version),
        f"no common version for API key {api_key} (broker {broker_range[0]}..{broker_range[1]}, "
        f"client {kio_versions(api_key)})",
    )


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str | None, data: Mapping[str, Any]
) -> tuple[bytes, type[Any]]:
    """A complete size-prefixed request frame and the response class to decode its answer with."""
    req_cls = load_request_schema(api_key, version)
    request = build(req_cls, data)
    header_cls = req_cls.__header_schema__
    header = header_cls(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header_cls)(buf, header)
    entity_writer(req_cls)(buf, request)
    frame = buf.getbuffer()
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    return bytes(frame), load_response_schema(api_key, version)


def response_correlation_id(body: bytes | memoryview) -> int:
    """The correlation id at the start of a response frame body (without the size prefix)."""
    if len(body) < 4:
        raise KafkaProtocolError(f"response frame of {len(body)} bytes is too short")
    cid: int = struct.unpack_from(">i", body, 0)[0]
    return cid


def decode_response(resp_cls: type[Any], body: bytes | memoryview) -> Any:
    """Decode a response frame body (header included, size prefix excluded)."""
    try:
        _, hsize = entity_reader(resp_cls.__header_schema__)(body, 0)
        obj, _ = entity_reader(resp_cls)(body, hsize)
    except Exception as e:  # kio raises several types on malformed input
        raise KafkaProtocolError(
            f"cannot decode {resp_cls.__name__} v{resp_cls.__version__}: {type(e).__name__}: {e}"
        ) from e
    return obj
