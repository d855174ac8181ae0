"""A single broker started in this process, without sockets (``Broker.start(listen=False)``):
for unit tests that drive handlers or coordinators directly. Its internal topics have one
partition and the log cleaner is off, so it starts in well under a second."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from strom.config import BrokerConfig
from strom.server.broker import Broker


def broker_config(data: Path, overrides: Mapping[str, str] | None = None) -> BrokerConfig:
    """The config of a broker logging to ``data``; ``overrides``: more (or other) keys."""
    return BrokerConfig.from_sources(None, {
        "log.dirs": str(data),
        "listeners": "PLAINTEXT://127.0.0.1:19092",  # never opened: start(listen=False)
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "log.cleaner.enable": "false",
        **(overrides or {}),
    })


@contextlib.asynccontextmanager
async def started_broker(data: Path) -> AsyncIterator[Broker]:
    """A started broker whose logs live in ``data``; stopped on leaving."""
    broker = Broker(broker_config(data))
    await broker.start(listen=False)
    try:
        yield broker
    finally:
        await broker.stop()
