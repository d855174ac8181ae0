"""What a request handler sees: the request's header, the client, and the broker."""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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
    # seconds the handler spent parked in a purgatory (a Fetch's long poll): not handling time
    # for request_percentage quotas (Kafka counts request handler threads' time only)
    waited_s: float = 0.0


@dataclass(slots=True)
class RawResponse:
    """A response body a handler encoded itself (hot paths): byte strings and file regions,
    written in order after the response header. File regions are ``(fd, position, length)``.
    ``throttle_leads``: the body begins with its throttle_time_ms (Fetch's answer always does;
    a hand-assembled Metadata answer of v3+ says so), which a request quota may raise."""

    parts: list[bytes | bytearray | memoryview | tuple[int, int, int]]
    size: int
    throttle_leads: bool = False


class NoResponse:
    """Returned by Produce with acks=0: Kafka sends nothing back."""


@dataclass(slots=True)
class Deferred:
    """A response completed later: the request's effects are done, in request order (Produce
    with acks=-1: appended), and ``result`` waits for the rest (the HW) and gives the response
    body. The connection reads and handles its next requests meanwhile, and sends every response
    in request order (Kafka's socket server handles a connection's requests one at a time; this
    keeps its order and lets a producer's pipelined acks=-1 requests share one replication round
    trip)."""

    result: Coroutine[Any, Any, dict[str, Any] | RawResponse]
    throttle_ms: int = 0  # a request quota's throttle (KIP-124), carried into the answer
