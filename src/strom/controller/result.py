"""What a controller operation returns: the records to commit and the response to send after.

Kafka's ``ControllerResult(records, response, isAtomic)``. An operation never mutates the
controller: the runtime appends ``records`` to the metadata log, replays each through
``QuorumController.replay`` once committed (standbys replay the same records as they arrive),
and only then sends ``response``. ``atomic`` results must land in one batch (CreateTopics: a
topic exists with all its partitions or not at all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T]):
    records: list[Any] = field(default_factory=list)
    response: T | None = None
    atomic: bool = True
