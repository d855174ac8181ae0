"""Request handlers, one module per API family, registered by API key.

A handler is ``async def handle(ctx: RequestContext, request) -> dict | RawResponse | NoResponse``
where ``request`` is the kio request entity of the version the client sent and the dict uses
kio's field names (see :func:`strom.protocol.codec.build`); one handler serves every version.
Raising :class:`strom.protocol.errors.KafkaError` answers with that error code in the
response's top-level ``error_code`` (for APIs that have one).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Coroutine
from typing import Any

from ..context import Deferred, NoResponse, RawResponse, RequestContext

HandlerResult = dict[str, Any] | RawResponse | NoResponse | Deferred
Handler = Callable[[RequestContext, Any], Coroutine[Any, Any, HandlerResult]]

REGISTRY: dict[int, Handler] = {}

_MODULES = (
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "list_offsets",
    "admin",
    "producer_ids",
    "groups",
    "share",
    "configs",
    "log_admin",
    "log_dirs",
    "transactions",
    "sasl",
    "scram_credentials",
    "acls",
    "quotas",
    "raft",
    "controller",
    "forwarding",
)


def handler(api_key: int) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        REGISTRY[api_key] = fn
        return fn

    return register


def load_all() -> dict[int, Handler]:
    for name in _MODULES:
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    return REGISTRY
