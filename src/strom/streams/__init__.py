"""``strom.streams``: Kafka Streams' DSL (streams, tables, windowed aggregations, joins) on
PySpark over strom topics, exactly-once. See :mod:`strom.streams.dsl` and
:mod:`strom.streams.processors`; Interactive Queries over the result tables (no Spark) in
:mod:`strom.streams.serve`.

The DSL's names are loaded on first use, so that ``strom streams serve`` (and the ``strom``
command, which registers it) does not import PySpark."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "KGroupedStream": "dsl", "KStream": "dsl", "KTable": "dsl", "stream": "dsl", "table": "dsl",
    "GlobalKTable": "dsl", "KGroupedTable": "dsl", "StreamingQueries": "dsl", "global_table": "dsl",
    "JoinWindows": "processors", "SessionWindows": "processors", "SlidingWindows": "processors",
    "TimeWindows": "processors", "Windowed": "processors",
    "avro": "serdes", "json_schema": "serdes", "protobuf": "serdes", "RegistrySerde": "serdes",
    "DecodeError": "serdes",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'strom.streams' has no attribute {name!r}")
    return getattr(importlib.import_module(f"strom.streams.{module}"), name)
