"""Snapshots of a Broker on its metadata quorum (RaftManager): after
``metadata.log.max.record.bytes.between.snapshots`` of committed records the controller writes a
snapshot (``controller.maybe_snapshot`` from its poll) and the log before it is dropped; a restart
loads the snapshot and the topics are all there, with their ids."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from strom.config import BrokerConfig
from strom.server.broker import Broker
from strom.testing.inprocess import broker_config


def _config(data: Path) -> BrokerConfig:
    return broker_config(data, {
        "strom.metadata.quorum.enable": "true",
        "metadata.log.max.record.bytes.between.snapshots": "2000",
    })


def test_snapshot_taken_and_loaded_after_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def first() -> dict[str, str]:
        broker = Broker(_config(data))
        await broker.start(listen=False)
        try:
            for i in range(20):
                await broker.create_topic_async(f"t{i}", 2, {})
            assert broker.raft_manager is not None
            mlog = broker.raft_manager.metadata_log
            assert mlog is not None
            deadline = time.monotonic() + 10
            while mlog.latest_snapshot_id() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.02)  # the controller's poll (at most every second)
            snap = mlog.latest_snapshot_id()
            assert snap is not None and snap.offset > 0
            assert mlog.start_offset == snap.offset  # the log before it is gone
            return {n: str(i.topic_id) for n, i in broker.topics.topics.items()}
        finally:
            await broker.stop()

    ids = asyncio.run(first())
    assert len([n for n in ids if n.startswith("t")]) == 20

    async def second() -> None:
        broker = Broker(_config(data))
        await broker.start(listen=False)
        try:
            assert {n: str(i.topic_id) for n, i in broker.topics.topics.items()} == ids
            assert broker.quorum is not None and broker.quorum.controller is not None
            assert broker.quorum.controller.committed.replication.topic("t19") is not None
            await broker.create_topic_async("after", 1, {})  # the controller works on
            assert broker.topics.get("after") is not None
        finally:
            await broker.stop()

    asyncio.run(second())
