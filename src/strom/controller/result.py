"""What a controller operation returns: the records to commit and the response to send after.

Kafka's ``ControllerResult(records, response, isAtomic)``. An operation never mutates the
controller: the runtime appends ``records`` to the metadata log, replays them through
``QuorumController.replay`` before it runs the next operation (standbys replay the same records
as they commit), and sends ``response`` once they are committed. A result's records go into the
log as one batch (Kafka's ``atomicOf``): a topic exists with all its partitions or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T]):
    records: list[Any] = field(default_factory=list)
    response: T | None = None
