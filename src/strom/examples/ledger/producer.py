"""Writing movements and master data: an idempotent producer (confluent-kafka, ``acks=all``,
``enable.idempotence``), so a retried send never books a movement twice.

Error contract: :class:`RuntimeError` if a record could not be delivered (after the client's
retries) or the ledger topic is missing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from strom.examples.ledger import model
from strom.examples.ledger.generator import ledger_partition
from strom.examples.ledger.topics import ensure_topics

__all__ = ["produce_ledger", "produce_master"]


def _producer(bootstrap: str) -> Any:
    try:
        from confluent_kafka import Producer
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise RuntimeError("the ledger producer needs confluent-kafka (pip install confluent-kafka)") from e
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "none",
        }
    )


def _flush(producer: Any, failures: list[str]) -> None:
    left = producer.flush(60)
    if left:
        raise RuntimeError(f"{left} records not delivered within 60 s")
    if failures:
        raise RuntimeError(f"{len(failures)} records failed, first: {failures[0]}")


def produce_ledger(bootstrap: str, movements: Iterable[model.Movement], create: bool = True) -> int:
    """Append movements to ``ledger`` (key = id; all movements of an item in one partition).
    Returns how many were written."""
    if create:
        asyncio.run(ensure_topics(bootstrap))
    producer = _producer(bootstrap)
    md = producer.list_topics(model.LEDGER, timeout=10)
    t = md.topics.get(model.LEDGER)
    if t is None or t.error is not None or not t.partitions:
        raise RuntimeError(f"topic {model.LEDGER!r} not available: {t.error if t else 'missing'}")
    n = len(t.partitions)
    failures: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    count = 0
    for m in movements:
        while True:
            try:
                producer.produce(
                    model.LEDGER,
                    key=m.id.encode(),
                    value=m.to_json(),
                    partition=ledger_partition(m.item, n),
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
        producer.poll(0)
    _flush(producer, failures)
    return count


def produce_master(
    bootstrap: str, items: Iterable[model.Item] = (), cells: Iterable[model.Cell] = (), create: bool = True
) -> None:
    """Write item and cell master data (compacted topics ``items`` and ``cells``)."""
    if create:
        asyncio.run(ensure_topics(bootstrap))
    producer = _producer(bootstrap)
    failures: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for it in items:
        producer.produce(model.ITEMS, key=it.item.encode(), value=it.to_json(), on_delivery=on_delivery)
    for c in cells:
        producer.produce(model.CELLS, key=c.cell.encode(), value=c.to_json(), on_delivery=on_delivery)
    _flush(producer, failures)
