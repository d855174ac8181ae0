"""DescribeConfigs / AlterConfigs / IncrementalAlterConfigs against a real broker with real
clients (confluent-kafka's AdminClient, kafka-python's admin): sources, defaults, synonyms,
sensitivity, validation errors, changes that take effect without restart and survive one."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cfg_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("configs") / "data",
        overrides=["log.retention.hours=100", "ssl.keystore.password=hunter2"],
    )
    b.start()
    try:
        yield b
    finally:
        b.stop()


def admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def new_topic(a: AdminClient, partitions: int = 1, config: dict[str, str] | None = None) -> str:
    name = f"cfg-{uuid.uuid4().hex[:8]}"
    a.create_topics([NewTopic(name, partitions, config=config or {})])[name].result(15)
    return name


def describe(a: AdminClient, rtype: ResourceType, name: str) -> dict[str, Any]:
    r = ConfigResource(rtype, name)
    result: dict[str, Any] = a.describe_configs([r], request_timeout=15)[r].result(15)
    return result


def incremental(
    a: AdminClient, rtype: ResourceType, name: str, *ops: tuple[str, AlterConfigOpType, str | None]
) -> None:
    r = ConfigResource(
        rtype, name, incremental_configs=[ConfigEntry(k, v, incremental_operation=op) for k, op, v in ops]
    )
    a.incremental_alter_configs([r], request_timeout=15)[r].result(15)


def set_cluster_default(b: BrokerProcess, name: str, value: str | None) -> None:
    """The cluster-default broker resource is named "" (kafka-configs.sh --entity-default); the
    Python clients refuse that name, so this goes through strom's own client."""
    from strom.client import Client
    from strom.client import admin as sadmin

    async def go() -> None:
        async with Client(b.bootstrap) as c:
            op = sadmin.SET if value is not None else sadmin.DELETE
            await sadmin.incremental_alter_configs(c, sadmin.BROKER, "", [(name, op, value)])

    asyncio.run(go())


def produce(b: BrokerProcess, topic: str, value: bytes, timestamp: int = 0) -> KafkaError | None:
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "message.send.max.retries": 0})
    errors: list[KafkaError | None] = []
    p.produce(topic, value, partition=0, timestamp=timestamp, on_delivery=lambda err, _m: errors.append(err))
    p.flush(15)
    assert errors, "no delivery report"
    return errors[0]


def consume_one(b: BrokerProcess, topic: str, offset: int) -> Any:
    c = Consumer(
        {"bootstrap.servers": b.bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False}
    )
    try:
        c.assign([TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                return m
        raise AssertionError("no record")
    finally:
        c.close()


# ---------------------------------------------------------------------------- describe


def test_describe_topic_sources_defaults_synonyms(cfg_broker: BrokerProcess) -> None:
    a = admin(cfg_broker)
    t = new_topic(a, config={"segment.bytes": "1000000"})
    configs = describe(a, ResourceType.TOPIC, t)
    assert {"cleanup.policy", "retention.ms", "max.message.bytes", "segment.bytes"} <= set(configs)
    seg = configs["segment.bytes"]
    assert seg.value == "1000000"
    assert seg.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not seg.is_default and not seg.is_read_only and not seg.is_sensitive
    assert list(seg.synonyms) == ["segment.bytes", "log.segment.bytes"]
    cp = configs["cleanup.policy"]
    assert (cp.value, cp.source, cp.is_default) == ("delete", ConfigSource.DEFAULT_CONFIG.value, True)
    ret = configs["retention.ms"]  # from the static log.retention.hours=100
    assert ret.value == str(100 * 3600 * 1000)
    assert ret.source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert "log.retention.hours" in ret.synonyms


def test_describe_unknown_topic(cfg_broker: BrokerProcess) -> None:
    with pytest.raises(KafkaException) as ei:
        describe(admin(cfg_broker), ResourceType.TOPIC, "no-such-topic-here")
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_broker_sensitive_read_only(cfg_broker: BrokerProcess) -> None:
    configs = describe(admin(cfg_broker), ResourceType.BROKER, "1")
    pw = configs["ssl.keystore.password"]
    assert pw.is_sensitive and pw.value is None
    assert pw.source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["listeners"].is_read_only
    assert not configs["message.max.bytes"].is_read_only
    assert configs["log.retention.hours"].value == "100"
    assert configs["log.retention.hours"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["num.partitions"].source == ConfigSource.DEFAULT_CONFIG.value


def test_kafka_python_describe_and_legacy_alter(cfg_broker: BrokerProcess) -> None:
    from kafka.admin import ConfigResource as KPResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    a = admin(cfg_broker)
    t = new_topic(a)
    kp = KafkaAdminClient(bootstrap_servers=cfg_broker.bootstrap)
    try:
        kp.alter_configs([KPResource(ConfigResourceType.TOPIC, t, configs={"retention.ms": "12345"})])
        res = kp.describe_configs([KPResource(ConfigResourceType.TOPIC, t)], include_synonyms=True)
    finally:
        kp.close()
    text = repr(res)
    assert "12345" in text and "retention.ms" in text
    assert describe(a, ResourceType.TOPIC, t)["retention.ms"].value == "12345"


# ---------------------------------------------------------------------------- alter: topics


def test_max_message_bytes_takes_effect_without_restart(cfg_broker: BrokerProcess) -> None:
    a = admin(cfg_broker)
    t = new_topic(a)
    assert produce(cfg_broker, t, b"x" * 5000) is None
    incremental(a, ResourceType.TOPIC, t, ("max.message.bytes", AlterConfigOpType.SET, "1000"))
    err = produce(cfg_broker, t, b"x" * 5000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert produce(cfg_broker, t, b"small") is None
    incremental(a, ResourceType.TOPIC, t, ("max.message.bytes", AlterConfigOpType.DELETE, None))
    assert produce(cfg_broker, t, b"x" * 5000) is None


def test_log_append_time_takes_effect(cfg_broker: BrokerProcess) -> None:
    from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

    a = admin(cfg_broker)
    t = new_topic(a)
    assert produce(cfg_broker, t, b"a", timestamp=1000) is None
    incremental(a, ResourceType.TOPIC, t, ("message.timestamp.type", AlterConfigOpType.SET, "LogAppendTime"))
    before = int(time.time() * 1000)
    assert produce(cfg_broker, t, b"b", timestamp=1000) is None
    assert consume_one(cfg_broker, t, 0).timestamp() == (TIMESTAMP_CREATE_TIME, 1000)
    ts_type, ts = consume_one(cfg_broker, t, 1).timestamp()
    assert ts_type == TIMESTAMP_LOG_APPEND_TIME
    assert before - 5000 <= ts <= int(time.time() * 1000) + 5000


def test_incremental_append_subtract_cleanup_policy(cfg_broker: BrokerProcess) -> None:
    a = admin(cfg_broker)
    t = new_topic(a)
    incremental(a, ResourceType.TOPIC, t, ("cleanup.policy", AlterConfigOpType.APPEND, "compact"))
    assert describe(a, ResourceType.TOPIC, t)["cleanup.policy"].value == "delete,compact"
    incremental(a, ResourceType.TOPIC, t, ("cleanup.policy", AlterConfigOpType.SUBTRACT, "delete"))
    cp = describe(a, ResourceType.TOPIC, t)["cleanup.policy"]
    assert cp.value == "compact" and cp.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    with pytest.raises(KafkaException) as ei:
        incremental(a, ResourceType.TOPIC, t, ("retention.ms", AlterConfigOpType.APPEND, "5"))
    assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("no.such.config", "1", "Unknown topic config name: no.such.config"),
        ("retention.ms", "soon", "Invalid value soon for configuration retention.ms"),
        ("cleanup.policy", "shred", "String must be one of: compact, delete"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
    ],
)
def test_invalid_topic_config(cfg_broker: BrokerProcess, name: str, value: str, fragment: str) -> None:
    a = admin(cfg_broker)
    t = new_topic(a)
    with pytest.raises(KafkaException) as ei:
        incremental(a, ResourceType.TOPIC, t, (name, AlterConfigOpType.SET, value))
    err = ei.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG
    assert fragment in err.str()
    assert (
        describe(a, ResourceType.TOPIC, t)[("retention.ms")].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    )


def test_validate_only_changes_nothing(cfg_broker: BrokerProcess) -> None:
    a = admin(cfg_broker)
    t = new_topic(a)
    r = ConfigResource(
        ResourceType.TOPIC,
        t,
        incremental_configs=[ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)],
    )
    a.incremental_alter_configs([r], validate_only=True)[r].result(15)
    assert describe(a, ResourceType.TOPIC, t)["retention.ms"].value != "1"


# ---------------------------------------------------------------------------- alter: brokers


def test_broker_dynamic_config_and_errors(cfg_broker: BrokerProcess) -> None:
    a = admin(cfg_broker)
    t = new_topic(a)
    incremental(a, ResourceType.BROKER, "1", ("log.retention.ms", AlterConfigOpType.SET, "7200000"))
    try:
        b = describe(a, ResourceType.BROKER, "1")["log.retention.ms"]
        assert (b.value, b.source) == ("7200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        ret = describe(a, ResourceType.TOPIC, t)["retention.ms"]
        assert (ret.value, ret.source) == ("7200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    finally:
        incremental(a, ResourceType.BROKER, "1", ("log.retention.ms", AlterConfigOpType.DELETE, None))
    assert describe(a, ResourceType.TOPIC, t)["retention.ms"].value == str(100 * 3600 * 1000)
    with pytest.raises(KafkaException) as ei:
        incremental(a, ResourceType.BROKER, "1", ("listeners", AlterConfigOpType.SET, "PLAINTEXT://x:1"))
    assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "Cannot update these configs dynamically" in ei.value.args[0].str()


def test_persist_across_restart(broker: BrokerProcess) -> None:
    """Topic overrides and a cluster-default (``--entity-default``) broker config survive a
    restart and are in force at once."""
    a = admin(broker)
    t = new_topic(a)
    incremental(a, ResourceType.TOPIC, t, ("retention.ms", AlterConfigOpType.SET, "3600000"))
    set_cluster_default(broker, "message.max.bytes", "2000")
    assert describe(a, ResourceType.TOPIC, t)["max.message.bytes"].value == "2000"
    err = produce(broker, t, b"x" * 5000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    broker.stop()
    broker.start()
    a = admin(broker)
    configs = describe(a, ResourceType.TOPIC, t)
    assert configs["retention.ms"].value == "3600000"
    mmb = configs["max.message.bytes"]
    assert (mmb.value, mmb.source) == ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    err = produce(broker, t, b"x" * 5000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_dynamic_default_in_force_right_after_restart(broker: BrokerProcess) -> None:
    """Without any config request after the restart, the persisted dynamic default applies."""
    a = admin(broker)
    t = new_topic(a)
    set_cluster_default(broker, "message.max.bytes", "2000")
    broker.stop()
    broker.start()
    err = produce(broker, t, b"x" * 5000)
    assert err is not None
    assert err.code() == KafkaError.MSG_SIZE_TOO_LARGE
