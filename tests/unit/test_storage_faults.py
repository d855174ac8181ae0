"""Disk faults on the broker's background paths: one rate-limited line, no traceback, and the
path keeps working (recovers by itself) once the disk does."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from pathlib import Path

import pytest

from strom.config import BrokerConfig
from strom.log.errors import KafkaStorageError
from strom.metadata.topics import TopicError
from strom.protocol.errors import ErrorCode
from strom.server.broker import Broker


def _broker(data: Path, *extra: str) -> Broker:
    # registry-only (also under STROM_TEST_QUORUM=1): these brokers are never started and make
    # topics with the synchronous Broker.create_topic; on the metadata quorum the registry is in
    # memory (the metadata log is the store) and topics go through the started broker's controller
    registry = "strom.metadata.quorum.enable=false"
    return Broker(BrokerConfig.from_sources(None, [f"log.dir={data}", registry, *extra]))


def _enospc() -> KafkaStorageError:
    e = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    err = KafkaStorageError(f"flush failed: {e}")
    err.__cause__ = e
    return err


def test_flush_task_survives_storage_errors(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Regression: a KafkaStorageError from flush_if_due ended the flush task for good."""
    broker = _broker(tmp_path / "data", "log.flush.interval.ms=10")
    broker.create_topic("t", 1)
    plog = broker.logs[("t", 0)]
    calls = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) <= 3:
            raise _enospc()

    plog.flush_if_due = flaky  # type: ignore[method-assign]
    caplog.set_level(logging.INFO, "strom.storage")

    async def go() -> None:
        task = broker.scheduler.schedule_periodic(10, broker._flush_due)  # as Broker.start does
        for _ in range(500):
            if len(calls) >= 6 or task.cancelled:
                break
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(go())
    assert len(calls) >= 6  # still flushing after the failures
    lines = [r.getMessage() for r in caplog.records if r.name == "strom.storage"]
    assert len(lines) == 2, lines
    assert lines[0].startswith("flush of t-0 failed: ENOSPC (No space left on device); ")
    assert lines[1].startswith("flush of t-0 works again after 3 failure(s)")
    assert all(r.exc_info is None for r in caplog.records)
    for p in broker.logs.values():
        p.close()


def test_create_topic_on_a_full_disk_answers_storage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    # the disk fills while the JSON topic registry is saved (registry-only: see _broker)
    broker = _broker(tmp_path / "data")

    def full(*_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(broker.topics, "_save", full)
    with pytest.raises(TopicError) as err:
        asyncio.run(broker.create_topic_async("t", 1))  # CreateTopics' path
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert "t" not in broker.topics.topics and not (tmp_path / "data" / "t-0").exists()  # no half topic
    assert [r.getMessage() for r in caplog.records if r.name == "strom.storage"] == [
        "creating topic t failed: ENOSPC (No space left on device); answering KAFKA_STORAGE_ERROR"
    ]
