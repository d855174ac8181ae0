"""A single broker started in this process, without sockets (``Broker.start(listen=False)``):
for unit tests that drive handlers or coordinators directly. Its internal topics have one
partition and the log cleaner is off, so it starts in well under a second."""

from __future__ import annotations

import contextlib
import types
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

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


def replicas_of(me: int, follower: int, leader: int, epoch: int) -> Any:
    """A partition registration (as the metadata image holds it) with replicas and ISR
    ``(me, follower)``, led by ``leader`` at ``epoch``."""
    return types.SimpleNamespace(replicas=(me, follower), isr=(me, follower), leader=leader,
                                 leader_epoch=epoch, partition_epoch=epoch)


def lead_with_a_made_up_follower(broker: Broker, tp: tuple[str, int]) -> int:
    """Make ``broker`` lead ``tp`` (at the next epoch) with one more replica in the ISR, a
    broker id that does not exist: a test plays that follower by calling the replica manager
    (or the Fetch handler) itself. Returns the follower's id. No fetcher is started."""
    rm = broker.replica_manager
    me, follower = broker.node_id, broker.node_id + 100
    rm.fetcher_manager = None  # no fetcher to start towards the made-up broker
    rm.apply_partition(*tp, replicas_of(me, follower, me, rm.partitions[tp].leader_epoch + 1))
    return follower
