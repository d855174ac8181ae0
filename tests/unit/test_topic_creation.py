"""Topic creation off the event loop and all-or-nothing (Broker.create_topic_async /
add_partitions_async), on an in-process Broker. No network."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from typing import Any

import pytest

from strom.config import BrokerConfig
from strom.metadata.topics import TopicError
from strom.protocol.errors import ErrorCode
from strom.server import broker as broker_mod
from strom.server.broker import Broker


def make_broker(tmp_path: Path, **overrides: str) -> Broker:
    # registry-only (also under STROM_TEST_QUORUM=1): these brokers are never started, and the
    # tests are about the registry path's own creation (Broker._creating, the synchronous
    # create_topic); on the metadata quorum a topic is made by the started broker's controller
    base = {
        "log.dirs": str(tmp_path / "data"),
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "strom.metadata.quorum.enable": "false",
    }
    base.update(overrides)
    return Broker(BrokerConfig.from_sources(None, base))


def partition_dirs(b: Broker, topic: str) -> list[str]:
    return sorted(n for n in os.listdir(b.log_dir) if n.rsplit("-", 1)[0] == topic)


def test_topic_is_invisible_until_every_partition_exists(tmp_path: Path) -> None:
    b = make_broker(tmp_path)

    async def run() -> None:
        task = asyncio.create_task(b.create_topic_async("big", 120))
        while "big" not in b._creating:
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        assert b.topics.get("big") is None and not any(t == "big" for t, _ in b.logs)
        with pytest.raises(TopicError) as e:
            await b.create_topic_async("big", 1)
        assert e.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
        with pytest.raises(TopicError) as e2:
            b.create_topic("big", 1)
        assert e2.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
        assert await b.auto_create_async("big") is None  # Metadata: not visible yet ...
        assert b.is_being_created("big")  # ... answered LEADER_NOT_AVAILABLE
        info = await task
        assert info.partitions == 120 and b.topics.get("big") is info
        assert all(("big", p) in b.logs for p in range(120))

    asyncio.run(run())
    for plog in b.logs.values():
        plog.close()


def test_failure_midway_leaves_no_half_topic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = make_broker(tmp_path)
    real_open = broker_mod.PartitionLog.open
    calls = [0]

    def flaky_open(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == 30:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(*args, **kwargs)

    monkeypatch.setattr(broker_mod.PartitionLog, "open", flaky_open)
    with pytest.raises(TopicError) as e:
        asyncio.run(b.create_topic_async("half", 60))
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert "No space left" in str(e.value)
    assert b.topics.get("half") is None and not b.logs and not b._creating
    assert partition_dirs(b, "half") == []
    monkeypatch.setattr(broker_mod.PartitionLog, "open", real_open)
    info = asyncio.run(b.create_topic_async("half", 60))  # the name is free again
    assert info.partitions == 60 and len(partition_dirs(b, "half")) == 60
    for plog in b.logs.values():
        plog.close()


def test_partition_cap_is_a_policy_violation(tmp_path: Path) -> None:
    b = make_broker(tmp_path, **{"strom.broker.max.partitions": "10"})
    with pytest.raises(TopicError) as e:
        asyncio.run(b.create_topic_async("t", 11))
    assert e.value.code == ErrorCode.POLICY_VIOLATION
    asyncio.run(b.create_topic_async("t", 6))
    with pytest.raises(TopicError) as e:
        asyncio.run(b.add_partitions_async("t", 12))
    assert e.value.code == ErrorCode.POLICY_VIOLATION
    asyncio.run(b.add_partitions_async("t", 10))
    assert b.topics.topics["t"].partitions == 10 and len(partition_dirs(b, "t")) == 10
    for plog in b.logs.values():
        plog.close()


def test_leftover_directory_of_an_interrupted_creation_is_replaced(tmp_path: Path) -> None:
    b = make_broker(tmp_path)
    stale = b.log_dir / "t-0"
    stale.mkdir(parents=True)
    (stale / "00000000000000000000.log").write_bytes(b"garbage from a creation cut by a crash")
    asyncio.run(b.create_topic_async("t", 1))
    assert b.logs[("t", 0)].log_end_offset == 0
    assert (stale / "00000000000000000000.log").stat().st_size == 0
    for plog in b.logs.values():
        plog.close()


def test_cancelled_creation_removes_what_it_made(tmp_path: Path) -> None:
    b = make_broker(tmp_path)

    async def run() -> None:
        task = asyncio.create_task(b.create_topic_async("gone", 200))
        while not partition_dirs(b, "gone"):
            await asyncio.sleep(0.001)
        task.cancel()  # the client went away mid-creation
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not b._creating  # released only once the worker stopped

    asyncio.run(run())
    assert b.topics.get("gone") is None and not b.logs
    assert partition_dirs(b, "gone") == []
