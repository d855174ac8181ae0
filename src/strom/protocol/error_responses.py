"""An error response shaped after its request, for any API (sans-IO).

Kafka answers a request that failed unexpectedly with ``request.getErrorResponse(e)``: the error
code on every topic, partition, group or resource the request named, so a client learns which of
its items failed and retries them. :func:`error_response` builds the same shape generically from
the kio schemas: response arrays are filled from the request array they answer (matched by name,
or by Kafka's usual pairs such as ``topic_data`` -> ``responses``), identifying fields (names,
ids, indexes) are copied, and every ``error_code`` / ``error_message`` gets the error. Arrays with
no counterpart in the request stay empty; the top-level error code is set where the API has one.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

# response array -> request arrays it answers, in order of preference (besides its own name)
_COUNTERPARTS = {
    "responses": ("topic_data", "topics"),
    "partition_responses": ("partition_data", "partitions"),
    "partitions": ("partition_indexes", "partitions"),
    "results": ("topics", "groups", "resources", "transactions", "creations"),
    "groups": ("groups", "group_ids", "groups_names"),
    "topics": ("topics", "topic_data"),
}
_ERROR_FIELDS = ("error_code",)
_MESSAGE_FIELDS = ("error_message",)


def _request_items(request: Any, name: str) -> list[Any] | None:
    for candidate in (name, *_COUNTERPARTS.get(name, ())):
        value = getattr(request, candidate, None)
        if isinstance(value, tuple):
            return list(value)
    return None


# identifying fields copied from the request item a response item answers (response name ->
# request names it may have there)
_IDENTITY = {
    "name": ("name", "topic"),
    "topic": ("topic", "name"),
    "topic_id": ("topic_id",),
    "partition_index": ("partition_index", "partition", "index"),
    "index": ("index", "partition_index", "partition"),
    "group_id": ("group_id",),
    "transactional_id": ("transactional_id",),
    "resource_type": ("resource_type",),
    "resource_name": ("resource_name",),
    "member_id": ("member_id",),
    "group_instance_id": ("group_instance_id",),
}


def _fill(cls: type, source: Any, code: int, message: str | None) -> dict[str, Any]:
    """The response entity ``cls`` answering request item ``source`` (an entity, a bare name or
    index, or None)."""
    out: dict[str, Any] = {}
    entity = source is not None and dataclasses.is_dataclass(source)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        name = f.name
        if name in _ERROR_FIELDS:
            out[name] = code
        elif name in _MESSAGE_FIELDS:
            out[name] = message
        elif name in _IDENTITY and source is not None:
            if not entity:
                out[name] = source  # an array of bare names or indexes in the request
                continue
            for candidate in _IDENTITY[name]:
                value = getattr(source, candidate, None)
                if value is not None and not isinstance(value, tuple):
                    out[name] = value
                    break
        elif entity:
            inner = _element_type(f)
            if inner is not None:
                items = _request_items(source, name)
                if items is not None:
                    out[name] = [_fill(inner, item, code, message) for item in items]
    return out


def _element_type(f: dataclasses.Field[Any]) -> type | None:
    tp = f.type
    if isinstance(tp, str):
        return None
    for arg in (tp, *typing.get_args(tp)):
        if typing.get_origin(arg) is tuple:
            inner = typing.get_args(arg)[0]
            return inner if dataclasses.is_dataclass(inner) else None  # type: ignore[return-value]
    return None


def error_response(response_cls: type, request: Any, code: int, message: str | None) -> dict[str, Any]:
    """The fields of ``response_cls`` (a kio response class) answering ``request`` with ``code``
    everywhere, as a dict for :func:`strom.protocol.codec.build`."""
    out = _fill(response_cls, None, code, message)
    for f in dataclasses.fields(response_cls):  # type: ignore[arg-type]
        inner = _element_type(f)
        if inner is None:
            continue
        items = _request_items(request, f.name)
        if items is not None:
            out[f.name] = [_fill(inner, item, code, message) for item in items]
    return out
