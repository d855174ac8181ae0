"""A whole Broker on its one-voter metadata quorum (strom.metadata.quorum.enable), in one process
on the in-memory network: topic lifecycle through the controller, restart, migration."""

from __future__ import annotations

import asyncio
import errno
import json
import os
from pathlib import Path

import pytest

from strom.config import BrokerConfig
from strom.metadata.topics import TopicError, TopicRegistry
from strom.protocol.errors import ErrorCode
from strom.server.broker import Broker
from strom.testing.network import MemoryNetwork


def _config(data: Path, quorum: bool = True) -> BrokerConfig:
    return BrokerConfig.from_sources(None, {
        "log.dirs": str(data),
        "listeners": "PLAINTEXT://127.0.0.1:19092",  # never opened: start(listen=False)
        "offsets.topic.num.partitions": "2",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "log.cleaner.enable": "false",
        "strom.metadata.quorum.enable": "true" if quorum else "false",
    })


def test_topics_through_the_controller_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def first() -> dict[str, str]:
        broker = Broker(_config(data))
        await broker.start(listen=False)
        try:
            assert broker.quorum is not None and broker.quorum.controller.is_active
            client = MemoryNetwork(broker).client()
            assert await client.create_topics({"t": (3, 1)}) == {"t": None}
            # visible at once after the answer, logs made
            assert broker.topics.get("t") is not None
            assert all(("t", p) in broker.logs for p in range(3))
            assert (await client.create_topics({"t": (3, 1)}))["t"] is not None  # exists
            assert await client.create_topics({"gone": (1, 1)}) == {"gone": None}
            assert await client.produce("t", 1, [(None, b"v", [], -1)]) == 0
            await broker.delete_topic_async("gone")
            assert broker.topics.get("gone") is None and ("gone", 0) not in broker.logs
            await broker.add_partitions_async("t", 5)
            assert broker.topics.topics["t"].partitions == 5 and ("t", 4) in broker.logs
            ids = {n: str(i.topic_id) for n, i in broker.topics.topics.items()}
            # the controller holds the same topics
            ctl = broker.quorum.controller.committed
            assert ctl.replication.topic("t") is not None and ctl.replication.topic("gone") is None
            return ids
        finally:
            await broker.stop()

    ids = asyncio.run(first())
    assert not (data / "strom-topics.json").exists()  # the metadata log is the store

    async def second() -> None:
        broker = Broker(_config(data))
        await broker.start(listen=False)
        try:
            assert {n: str(i.topic_id) for n, i in broker.topics.topics.items()} == ids
            assert broker.topics.topics["t"].partitions == 5
            client = MemoryNetwork(broker).client()
            got = await client.fetch("t", 1, 0, max_wait_ms=0)
            assert [r.value for r in got.records] == [b"v"]
        finally:
            await broker.stop()

    asyncio.run(second())


def test_data_dir_of_the_registry_is_migrated(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def old() -> dict[str, str]:
        broker = Broker(_config(data, quorum=False))
        await broker.start(listen=False)
        try:
            client = MemoryNetwork(broker).client()
            assert await client.create_topics({"kept": (2, 1)}) == {"kept": None}
            assert await client.produce("kept", 0, [(None, b"a", [], -1), (None, b"b", [], -1)]) == 0
            broker.topics.set_configs("kept", {"retention.ms": "12345"})
            return {n: str(i.topic_id) for n, i in broker.topics.topics.items()}
        finally:
            await broker.stop()

    ids = asyncio.run(old())
    assert json.loads((data / "strom-topics.json").read_text())["topics"]

    async def new() -> None:
        broker = Broker(_config(data))
        await broker.start(listen=False)
        try:
            assert {n: str(i.topic_id) for n, i in broker.topics.topics.items()} == ids
            assert broker.topics.topics["kept"].configs == {"retention.ms": "12345"}
            client = MemoryNetwork(broker).client()
            got = await client.fetch("kept", 0, 0, max_wait_ms=0)
            assert [r.value for r in got.records] == [b"a", b"b"]
        finally:
            await broker.stop()

    asyncio.run(new())
    assert not (data / "strom-topics.json").exists()
    assert (data / "strom-topics.json.migrated").exists()
    # the old registry is still readable as it was (renamed, not rewritten)
    assert TopicRegistry(data).topics == {}


def test_creation_failing_on_disk_answers_storage_error_and_leaves_no_topic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def go() -> None:
        broker = Broker(_config(tmp_path / "data"))
        await broker.start(listen=False)
        try:
            def full(*_a: object, **_k: object) -> None:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

            monkeypatch.setattr(broker.replica_manager, "make_partition_logs", full)
            with pytest.raises(TopicError) as err:
                await broker.create_topic_async("t", 2)
            assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
            assert broker.topics.get("t") is None
            assert broker.quorum is not None
            assert broker.quorum.controller.committed.replication.topic("t") is None  # rolled back
            monkeypatch.undo()
            info = await broker.create_topic_async("t", 2)  # the disk has room again: it works
            assert info.partitions == 2 and ("t", 1) in broker.logs
        finally:
            await broker.stop()

    asyncio.run(go())


def test_topic_configs_are_answered_once_in_the_metadata_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AlterConfigs and IncrementalAlterConfigs on a topic answer once the change is committed in
    the metadata log and applied (as Kafka's controller answers after the commit): it survives
    a restart at once; a change the controller did not take answers its error and is undone."""
    from strom.client import admin
    from strom.controller.server import NotControllerError
    from strom.metadata.image import CONFIG_RESOURCE_TOPIC

    data = tmp_path / "data"

    def in_image(broker: Broker) -> dict[str, str]:
        assert broker.quorum is not None and broker.quorum.publisher.image is not None
        return dict(broker.quorum.publisher.image.configs.configs(CONFIG_RESOURCE_TOPIC, "t"))

    async def first() -> None:
        broker = Broker(_config(data))
        await broker.start(listen=False)
        try:
            client = MemoryNetwork(broker).client()
            assert await client.create_topics({"t": (1, 1)}) == {"t": None}
            await admin.alter_configs(client, CONFIG_RESOURCE_TOPIC, "t", {"retention.ms": "1000"})
            assert in_image(broker) == {"retention.ms": "1000"}
            await admin.incremental_alter_configs(
                client, CONFIG_RESOURCE_TOPIC, "t", [("segment.ms", 0, "60000")]
            )
            assert in_image(broker) == {"retention.ms": "1000", "segment.ms": "60000"}
            assert broker.logs[("t", 0)].config.segment_ms == 60000
            await admin.incremental_alter_configs(  # validate_only: nothing written
                client, CONFIG_RESOURCE_TOPIC, "t", [("segment.ms", 1, None)], validate_only=True
            )
            assert "segment.ms" in in_image(broker)

            assert broker.quorum is not None
            async def refused(*_a: object, **_k: object) -> None:
                raise NotControllerError("not the controller")

            monkeypatch.setattr(broker.quorum.channel, "call", refused)
            with pytest.raises(Exception) as err:
                await admin.alter_configs(client, CONFIG_RESOURCE_TOPIC, "t", {"retention.ms": "5"})
            assert getattr(err.value, "code", None) == ErrorCode.NOT_CONTROLLER, err.value
            assert broker.topics.topics["t"].configs == {"retention.ms": "1000", "segment.ms": "60000"}
            assert broker.logs[("t", 0)].config.retention_ms == 1000
        finally:
            monkeypatch.undo()
            await broker.stop()

    async def second() -> None:
        broker = Broker(_config(data))
        await broker.start(listen=False)
        try:
            assert broker.topics.topics["t"].configs == {"retention.ms": "1000", "segment.ms": "60000"}
        finally:
            await broker.stop()

    asyncio.run(first())
    asyncio.run(second())
