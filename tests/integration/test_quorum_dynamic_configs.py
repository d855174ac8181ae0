"""Dynamic broker configs and group configs on the metadata quorum (one node,
``strom.metadata.quorum.enable=true``): written through the controller as ConfigRecords, applied
from the image, in force after a restart with no local file behind them; a data dir of the
registry path brings its local dynamic broker and group configs into the metadata log."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from strom.client import Client
from strom.client import admin as sadmin
from strom.client.errors import KafkaError
from strom.protocol.errors import ErrorCode
from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

QUORUM_ON = ["strom.metadata.quorum.enable=true", "group.initial.rebalance.delay.ms=0"]
QUORUM_OFF = ["strom.metadata.quorum.enable=false", "group.initial.rebalance.delay.ms=0"]
DYNAMIC_FILE = "strom-dynamic-configs.json"
GROUP_FILE = "strom-group-configs.json"
DYNAMIC_GROUP_CONFIG = 8  # (ConfigSource)


def run(b: BrokerProcess, call: Any) -> Any:
    async def go() -> Any:
        async with Client(b.bootstrap) as c:
            return await call(c)

    return asyncio.run(go())


def alter(b: BrokerProcess, rtype: int, name: str, *ops: tuple[str, int, str | None]) -> None:
    run(b, lambda c: sadmin.incremental_alter_configs(c, rtype, name, list(ops)))


def describe(b: BrokerProcess, rtype: int, name: str) -> dict[str, sadmin.ConfigInfo]:
    return {e.name: e for e in run(b, lambda c: sadmin.describe_configs(c, rtype, name))}


def produce_error(b: BrokerProcess, topic: str, size: int) -> int:
    """The error code of producing one record of ``size`` bytes (0: accepted)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "message.send.max.retries": 0})
    errors: list[Any] = []
    p.produce(topic, b"x" * size, partition=0, on_delivery=lambda err, _m: errors.append(err))
    p.flush(15)
    assert errors, "no delivery report"
    return 0 if errors[0] is None else int(errors[0].code())


def create_topic(b: BrokerProcess) -> str:
    name = f"dc-{uuid.uuid4().hex[:8]}"
    errors = run(b, lambda c: c.create_topics({name: (1, 1)}))
    assert errors == {name: None}
    return name


def test_broker_and_group_configs_through_the_controller_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    b = BrokerProcess(data, overrides=QUORUM_ON).start()
    try:
        topic = create_topic(b)
        alter(b, sadmin.BROKER, "", ("message.max.bytes", sadmin.SET, "2000"))
        alter(b, sadmin.BROKER, "1", ("log.retention.ms", sadmin.SET, "7200000"))
        alter(b, sadmin.GROUP, "g1", ("consumer.session.timeout.ms", sadmin.SET, "50000"))
        # validation stays the broker's, with its messages
        with pytest.raises(KafkaError) as ei:
            alter(b, sadmin.BROKER, "", ("ssl.keystore.password", sadmin.SET, "hunter2"))
        assert ei.value.code == ErrorCode.INVALID_CONFIG
        assert "Cannot update these configs dynamically: ssl.keystore.password" in str(ei.value)
        with pytest.raises(KafkaError) as ei:
            alter(b, sadmin.GROUP, "g1", ("consumer.session.timeout.ms", sadmin.SET, "1"))
        assert ei.value.code == ErrorCode.INVALID_CONFIG
        # in force at once, from the image; nothing kept in local files on this path
        assert produce_error(b, topic, 5000) == ErrorCode.MESSAGE_TOO_LARGE
        assert not (data / DYNAMIC_FILE).exists() and not (data / GROUP_FILE).exists()
        mine = describe(b, sadmin.BROKER, "1")
        assert (mine["message.max.bytes"].value, mine["message.max.bytes"].source_name) == (
            "2000",
            "DYNAMIC_DEFAULT_BROKER_CONFIG",
        )
        assert (mine["log.retention.ms"].value, mine["log.retention.ms"].source_name) == (
            "7200000",
            "DYNAMIC_BROKER_CONFIG",
        )
        assert describe(b, sadmin.GROUP, "g1")["consumer.session.timeout.ms"].value == "50000"
    finally:
        assert b.stop() == 0
    log_text = b.log_path.read_text(errors="replace")
    assert "hunter2" not in log_text
    b = BrokerProcess(data, port=b.port, overrides=QUORUM_ON).start()
    try:
        # no config request since the restart: the image alone puts them in force
        assert produce_error(b, topic, 5000) == ErrorCode.MESSAGE_TOO_LARGE
        default = describe(b, sadmin.BROKER, "")
        assert default["message.max.bytes"].value == "2000"
        assert describe(b, sadmin.BROKER, "1")["log.retention.ms"].value == "7200000"
        group = describe(b, sadmin.GROUP, "g1")["consumer.session.timeout.ms"]
        assert (group.value, group.source) == ("50000", DYNAMIC_GROUP_CONFIG)
        # removing them works the same way
        alter(b, sadmin.BROKER, "", ("message.max.bytes", sadmin.DELETE, None))
        assert "message.max.bytes" not in describe(b, sadmin.BROKER, "")
        assert produce_error(b, topic, 5000) == 0
        assert not (data / DYNAMIC_FILE).exists()
    finally:
        assert b.stop() == 0


def test_registry_dir_configs_migrate_into_the_metadata_log(tmp_path: Path) -> None:
    data = tmp_path / "data"
    old = BrokerProcess(data, overrides=QUORUM_OFF).start()
    try:
        topic = create_topic(old)
        alter(old, sadmin.BROKER, "", ("message.max.bytes", sadmin.SET, "3000"))
        alter(old, sadmin.BROKER, "1", ("log.retention.ms", sadmin.SET, "7300000"))
        alter(old, sadmin.GROUP, "g-old", ("consumer.heartbeat.interval.ms", sadmin.SET, "6000"))
    finally:
        assert old.stop() == 0
    assert (data / DYNAMIC_FILE).exists() and (data / GROUP_FILE).exists()

    new = BrokerProcess(data, port=old.port, overrides=QUORUM_ON).start()
    try:
        assert produce_error(new, topic, 5000) == ErrorCode.MESSAGE_TOO_LARGE
        mine = describe(new, sadmin.BROKER, "1")
        assert (mine["message.max.bytes"].value, mine["message.max.bytes"].source_name) == (
            "3000",
            "DYNAMIC_DEFAULT_BROKER_CONFIG",
        )
        assert mine["log.retention.ms"].value == "7300000"
        hb = describe(new, sadmin.GROUP, "g-old")["consumer.heartbeat.interval.ms"]
        assert (hb.value, hb.source) == ("6000", DYNAMIC_GROUP_CONFIG)
        # now the metadata log's: a change goes through the controller, the old file is left alone
        alter(new, sadmin.BROKER, "", ("message.max.bytes", sadmin.SET, "9000"))
        assert produce_error(new, topic, 5000) == 0
    finally:
        assert new.stop() == 0
    # the metadata log, not the old files, is what a restart reads
    (data / DYNAMIC_FILE).unlink()
    (data / GROUP_FILE).unlink()
    new = BrokerProcess(data, port=old.port, overrides=QUORUM_ON).start()
    try:
        assert describe(new, sadmin.BROKER, "")["message.max.bytes"].value == "9000"
        assert describe(new, sadmin.GROUP, "g-old")["consumer.heartbeat.interval.ms"].value == "6000"
    finally:
        assert new.stop() == 0
