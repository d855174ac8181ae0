"""What a request handler sees: the request's header, the client, and the broker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..security.session import ConnectionSession

if TYPE_CHECKING:
    from .broker import Broker


@dataclass(slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    connection_id: str
    broker: Broker
    session: ConnectionSession = field(default_factory=ConnectionSession)  # the connection's


@dataclass(slots=True)
class RawResponse:
    """A response body a handler encoded itself (hot paths): byte strings and file regions,
    written in order after the response header. File regions are ``(fd, position, length)``."""

    parts: list[bytes | bytearray | memoryview | tuple[int, int, int]]
    size: int


class NoResponse:
    """Returned by Produce with acks=0: Kafka sends nothing back."""
