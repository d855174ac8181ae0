"""Requests and responses with their headers as byte strings: what Kafka's Envelope (58, KIP-590)
carries, and what the broker-to-controller channel writes on its connections (sans-IO).

Theory of operation
-------------------
A broker forwards an admin request to the active controller inside an EnvelopeRequest:
``request_data`` is the request exactly as a client would send it (request header, v1 or v2 by
the version's flexibility, then the body), ``request_principal`` the client's principal
serialized as Kafka's ``DefaultPrincipalData`` (a version prefix, then the message:
``type``, ``name``, ``token_authenticated``; flexible v0), and ``client_host_address`` the
client's IP address as 4 or 16 bytes (Java's ``InetAddress.getAddress()``). The controller
answers with an EnvelopeResponse whose ``response_data`` is the inner response with its
response header (v1 for flexible versions, v0 otherwise).

:func:`encode_request` / :func:`decode_request` and :func:`encode_response` /
:func:`decode_response` convert between kio entities and these byte strings; the frame size
prefix is added by whoever writes to a socket. Error contract: the decoders raise
:class:`~strom.protocol.errors.ProtocolError` on malformed bytes.
"""

from __future__ import annotations

import io
import ipaddress
import struct
from typing import Any

from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from . import codec
from .errors import ProtocolError
from .framing import (
    RequestHeader,
    parse_request_header,
    read_uvarint,
    response_header,
    skip_tagged_fields,
    write_compact_string,
)

__all__ = [
    "api_key_and_version",
    "decode_address",
    "decode_principal",
    "decode_request",
    "decode_response",
    "encode_address",
    "encode_principal",
    "encode_request",
    "encode_response",
]

ENVELOPE = 58
PRINCIPAL_DATA_VERSION = 0  # DefaultPrincipalData's highest (only) version


def api_key_and_version(request: Any) -> tuple[int, int]:
    """The API key and version of a kio request entity (its class says both)."""
    cls = type(request)
    return int(cls.__api_key__), int(cls.__version__)


def encode_request(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    """Request header (v1/v2, as the request's version wants) then the body."""
    cls = type(request)
    header_cls = cls.__header_schema__
    header = header_cls(
        request_api_key=i16(int(cls.__api_key__)),
        request_api_version=i16(int(cls.__version__)),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header)
    entity_writer(cls)(buf, request)
    return buf.getvalue()


def decode_request(data: bytes | memoryview) -> tuple[RequestHeader, Any]:
    """The header and the kio request entity of a request with its header."""
    view = memoryview(data)
    header, pos = parse_request_header(view)
    return header, codec.decode_request(header.api_key, header.api_version, view, pos)


def encode_response(response: Any, correlation_id: int) -> bytes:
    """Response header (v1 for flexible versions, v0 otherwise) then the body."""
    cls = type(response)
    flexible = bool(getattr(cls, "__flexible__", False)) and int(cls.__api_key__) != 18
    return response_header(correlation_id, flexible) + codec.encode_response(response)


def decode_response(api_key: int, api_version: int, data: bytes | memoryview) -> tuple[int, Any]:
    """(correlation id, kio response entity) of a response with its header."""
    view = memoryview(data)
    if len(view) < 4:
        raise ProtocolError("response shorter than its header")
    (correlation_id,) = struct.unpack_from(">i", view, 0)
    pos = 4
    try:
        cls = codec.response_type(api_key, api_version)
        if api_key != 18 and getattr(cls, "__flexible__", False):
            pos = skip_tagged_fields(view, pos)
        response: Any
        response, _n = entity_reader(cls)(bytes(view[pos:]), 0)
    except ProtocolError:
        raise
    except Exception as e:  # kio raises assorted errors on malformed bytes
        raise ProtocolError(f"cannot decode the response of api {api_key} v{api_version}: {e}") from e
    return correlation_id, response


# ------------------------------------------------------------------------- principal and host


def _read_compact_string(data: memoryview, pos: int) -> tuple[str, int]:
    n, pos = read_uvarint(data, pos)
    if n == 0:
        raise ProtocolError("null string in principal data")
    end = pos + n - 1
    if end > len(data):
        raise ProtocolError("truncated principal data")
    try:
        return bytes(data[pos:end]).decode("utf-8"), end
    except UnicodeDecodeError:
        raise ProtocolError("principal data is not valid UTF-8") from None


def encode_principal(principal: str, token_authenticated: bool = False) -> bytes:
    """``User:alice`` as Kafka's ``DefaultKafkaPrincipalBuilder`` serializes it."""
    kind, _, name = principal.partition(":")
    out = bytearray(struct.pack(">h", PRINCIPAL_DATA_VERSION))
    write_compact_string(out, kind)
    write_compact_string(out, name)
    out.append(1 if token_authenticated else 0)
    out.append(0)  # no tagged fields
    return bytes(out)


def decode_principal(data: bytes) -> str:
    """The ``Type:name`` principal of serialized ``DefaultPrincipalData``."""
    view = memoryview(data)
    if len(view) < 2:
        raise ProtocolError("principal data shorter than its version")
    (version,) = struct.unpack_from(">h", view, 0)
    if version != PRINCIPAL_DATA_VERSION:
        raise ProtocolError(f"unsupported principal data version {version}")
    kind, pos = _read_compact_string(view, 2)
    name, pos = _read_compact_string(view, pos)
    if pos >= len(view):
        raise ProtocolError("truncated principal data")
    return f"{kind}:{name}"


def encode_address(host: str) -> bytes:
    """An IP address as its 4 or 16 bytes (a name that is no address: 127.0.0.1's)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).packed
    except ValueError:
        return ipaddress.ip_address("127.0.0.1").packed


def decode_address(data: bytes) -> str:
    try:
        return str(ipaddress.ip_address(data))
    except ValueError:
        raise ProtocolError(f"client address of {len(data)} bytes") from None
