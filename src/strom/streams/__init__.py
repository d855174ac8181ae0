"""``strom.streams``: Kafka Streams' DSL (streams, tables, windowed aggregations, joins) on
PySpark over strom topics, exactly-once. See :mod:`strom.streams.dsl` and
:mod:`strom.streams.processors`."""

from strom.streams.dsl import KGroupedStream, KStream, KTable, stream, table
from strom.streams.processors import JoinWindows, SessionWindows, TimeWindows, Windowed

__all__ = [
    "JoinWindows",
    "KGroupedStream",
    "KStream",
    "KTable",
    "SessionWindows",
    "TimeWindows",
    "Windowed",
    "stream",
    "table",
]
