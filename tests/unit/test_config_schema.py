"""The config schema (strom.config_schema) and what reads it: static validation of
``server.properties``, topic defaults from broker synonyms, DescribeConfigs' types, readOnly and
isSensitive, AlterConfigs' scope rules, group-config defaults; and the config state the broker
owns."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from strom import config_schema as schema
from strom.config import BrokerConfig, ConfigError, LogConfig
from strom.config_schema import BROKER_CONFIGS, GROUP_CONFIGS, TOPIC_CONFIGS, ConfigType, DynamicScope
from strom.metadata import configs as cfg
from strom.metadata import group_configs as gc
from strom.protocol.errors import ErrorCode
from strom.server.broker import Broker


def make_broker(tmp_path: Path, **overrides: str) -> Broker:
    # registry-only (also under STROM_TEST_QUORUM=1): never started, topics made with the
    # synchronous Broker.create_topic (on the metadata quorum: the started broker's controller)
    base = {
        "log.dirs": str(tmp_path / "data"),
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "strom.metadata.quorum.enable": "false",
    }
    base.update(overrides)
    return Broker(BrokerConfig.from_sources(None, base))


# ---------------------------------------------------------------------------- the tables


@pytest.mark.parametrize("table", [BROKER_CONFIGS, TOPIC_CONFIGS, GROUP_CONFIGS])
def test_defaults_are_typed_and_valid(table: dict[str, schema.ConfigDef]) -> None:
    for name, d in table.items():
        assert d.name == name
        assert isinstance(d.default, d.python_type), name
        d.validate(d.default)  # a default passes its own validator
        assert d.sensitive == (d.config_type is ConfigType.PASSWORD), name


def test_synonyms_name_broker_configs() -> None:
    for d in [*TOPIC_CONFIGS.values(), *GROUP_CONFIGS.values()]:
        for s in (*d.synonyms, *(d.bound_configs or ())):
            assert s in BROKER_CONFIGS, (d.name, s)
    # every broker synonym of a topic config can change at runtime (Kafka's DynamicLogConfig)
    for d in TOPIC_CONFIGS.values():
        assert all(BROKER_CONFIGS[s].dynamic is DynamicScope.CLUSTER_WIDE for s in d.synonyms), d.name


def test_log_config_defaults_are_the_topic_defaults() -> None:
    lc = LogConfig()
    for name, d in TOPIC_CONFIGS.items():
        assert getattr(lc, name.replace(".", "_")) == d.default, name
    assert TOPIC_CONFIGS["retention.ms"].default == 168 * 3_600_000  # log.retention.hours
    assert TOPIC_CONFIGS["segment.ms"].default == 168 * 3_600_000  # log.roll.hours
    assert TOPIC_CONFIGS["flush.ms"].default == schema.LONG_MAX  # log.flush.interval.ms unset
    assert LogConfig.from_topic_configs(BrokerConfig.from_sources().topic_defaults(), {}) == lc


@pytest.mark.parametrize(
    ("broker", "expected"),
    [
        ({}, 168 * 3_600_000),
        ({"log.retention.hours": 2}, 2 * 3_600_000),
        ({"log.retention.minutes": 3, "log.retention.hours": 2}, 180_000),
        ({"log.retention.ms": 1000, "log.retention.minutes": 3}, 1000),
        ({"log.retention.ms": -1, "log.retention.minutes": 3}, -1),  # -1 is "forever", not unset
        ({"log.retention.ms": -2, "log.retention.minutes": -1, "log.retention.hours": 5}, 5 * 3_600_000),
    ],
)
def test_retention_precedence(broker: dict[str, int], expected: int) -> None:
    assert schema.resolve_topic_defaults(broker)["retention.ms"] == expected


def test_group_defaults_follow_their_synonyms() -> None:
    assert (
        GROUP_CONFIGS["share.delivery.count.limit"].default
        == BROKER_CONFIGS["group.share.delivery.count.limit"].default
    )
    assert GROUP_CONFIGS["share.record.lock.duration.ms"].bound_configs == (
        "group.share.min.record.lock.duration.ms",
        "group.share.max.record.lock.duration.ms",
    )
    values = BrokerConfig.from_sources(overrides={"group.share.delivery.count.limit": "7"}).values
    d = gc.defaults(values)
    assert d["share.delivery.count.limit"] == "7"
    assert d["share.renew.acknowledge.enable"] == "true"
    assert d["streams.num.standby.replicas"] == "0"


# ---------------------------------------------------------------------------- validators


@pytest.mark.parametrize(
    ("validator", "value", "message"),
    [
        (schema.AtLeast(14), 13, "Invalid value 13 for configuration x: Value must be at least 14"),
        (schema.Between(0, 1), 1.5, "Invalid value 1.5 for configuration x: Value must be between 0 and 1"),
        (
            schema.ValidString(("a", "b")),
            "c",
            "Invalid value c for configuration x: String must be one of: a, b",
        ),
        (
            schema.ValidList(("a", "b")),
            "a, c",
            "Invalid value c for configuration x: String must be one of: a, b",
        ),
    ],
)
def test_validator_messages(validator: schema.Validator, value: object, message: str) -> None:
    with pytest.raises(ConfigError) as ei:
        validator.validate("x", value)
    assert str(ei.value) == message


@pytest.mark.parametrize(
    ("name", "sensitive"),
    [
        ("listener.name.ssl.ssl.keystore.key", True),  # the per-listener form of a PASSWORD config
        ("listener.name.ssl.ssl.keystore.location", False),
        ("listener.name.sasl_plaintext.plain.sasl.jaas.config", True),  # <listener>.<mechanism>.<config>
        ("listener.name.sasl_plaintext.sasl.enabled.mechanisms", False),
        ("my.plugin.secret", True),
        ("my.plugin.user", False),
    ],
)
def test_names_the_table_does_not_hold(name: str, sensitive: bool) -> None:
    assert name not in BROKER_CONFIGS
    assert schema.looks_sensitive(name) is sensitive
    assert cfg.is_sensitive(name) is sensitive
    assert (cfg.broker_config_type(name) is ConfigType.PASSWORD) is sensitive


def test_valid_values_pass() -> None:
    schema.AtLeast(14).validate("x", 14)
    schema.Between(0, 1).validate("x", 0.0)
    schema.ValidList(("a", "b")).validate("x", "")  # an empty list is valid
    schema.ValidList(("a", "b")).validate("x", "b,a")


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("num.partitions", "0", "Invalid value 0 for configuration num.partitions: Value must be at least 1"),
        ("log.segment.bytes", "13", "log.segment.bytes: Value must be at least 14"),
        ("log.roll.hours", "0", "log.roll.hours: Value must be at least 1"),
        ("log.cleanup.policy", "shred", "log.cleanup.policy: String must be one of: compact, delete"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "Value must be between 0 and 1"),
        ("queued.max.request.bytes", "0", "Value must be positive, or -1 for no limit"),
        ("socket.request.max.bytes", "0", "socket.request.max.bytes: Value must be at least 1"),
    ],
)
def test_static_config_is_validated(key: str, value: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as ei:
        BrokerConfig.from_sources(overrides={key: value})
    assert fragment in str(ei.value)


def test_static_not_set_sentinels_pass() -> None:
    # Kafka's null: log.roll.ms / log.retention.ms / log.flush.interval.ms unset
    c = BrokerConfig.from_sources(
        overrides={"log.roll.ms": "-1", "log.retention.ms": "-2", "queued.max.request.bytes": "-1"}
    )
    assert c.topic_defaults()["segment.ms"] == 168 * 3_600_000


def test_log_config_validation_uses_the_topic_validators() -> None:
    with pytest.raises(ConfigError, match=r"segment\.index\.bytes: Value must be at least 4"):
        LogConfig.from_topic_configs({}, {"segment.index.bytes": "3"})


# ---------------------------------------------------------------------------- Describe/AlterConfigs


def test_describe_broker_reports_the_schema(tmp_path: Path) -> None:
    broker = make_broker(tmp_path, **{"listener.name.ssl.ssl.keystore.password": "pw", "my.plugin.key": "v"})
    entries = {e.name: e for e in cfg.describe_broker(broker, default=False)}
    for name, d in BROKER_CONFIGS.items():
        e = entries[name]
        assert e.config_type is d.config_type, name
        assert e.sensitive == d.sensitive, name
        assert e.read_only == (d.dynamic is DynamicScope.READ_ONLY), name
    # names the schema does not know: read-only, sensitive when they look like a secret
    assert entries["listener.name.ssl.ssl.keystore.password"].sensitive
    assert entries["listener.name.ssl.ssl.keystore.password"].config_type is ConfigType.PASSWORD
    assert not entries["my.plugin.key"].sensitive and entries["my.plugin.key"].read_only
    for e in cfg.describe_topic(broker, broker.create_topic("t", 1)):
        assert e.config_type is TOPIC_CONFIGS[e.name].config_type
        assert [s.name for s in e.synonyms if s.source is not cfg.ConfigSource.DYNAMIC_TOPIC_CONFIG] == [
            s for s in TOPIC_CONFIGS[e.name].synonyms if s in {x.name for x in e.synonyms}
        ]
    for p in broker.logs.values():
        p.close()


def test_per_broker_config_cannot_be_a_cluster_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = make_broker(tmp_path)
    d = BROKER_CONFIGS["log.cleaner.io.max.bytes.per.second"]
    monkeypatch.setitem(BROKER_CONFIGS, d.name, dataclasses.replace(d, dynamic=DynamicScope.PER_BROKER))
    with pytest.raises(cfg.ConfigResourceError) as ei:
        cfg.alter_broker(broker, True, {d.name: "1000"}, validate_only=True)
    assert ei.value.code == ErrorCode.INVALID_CONFIG
    assert "broker id must be specified: log.cleaner.io.max.bytes.per.second" in str(ei.value)
    cfg.alter_broker(broker, False, {d.name: "1000"}, validate_only=True)  # for this broker: fine


def test_alter_checks_what_static_config_lets_pass_as_unset(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    with pytest.raises(cfg.ConfigResourceError, match=r"log\.roll\.ms: Value must be at least 1"):
        cfg.alter_broker(broker, False, {"log.roll.ms": "-1"}, validate_only=True)


# ---------------------------------------------------------------------------- state the broker owns


def test_each_broker_owns_its_config_state(tmp_path: Path) -> None:
    a = make_broker(tmp_path / "a")
    b = make_broker(tmp_path / "b")
    assert a.dynamic_configs is not b.dynamic_configs
    assert a.group_configs is not b.group_configs and a.sasl is not b.sasl
    cfg.alter_broker(a, True, {"message.max.bytes": "3000"}, validate_only=False)
    gc.alter(a.config, a.group_configs, "g", {"share.delivery.count.limit": "3"}, validate_only=False)
    assert b.config["message.max.bytes"] == BROKER_CONFIGS["message.max.bytes"].default
    assert b.group_config("g")["share.delivery.count.limit"] == "5"
    assert a.group_config("g")["share.delivery.count.limit"] == "3"
    # a broker made on the same dir loads and applies them when it is made
    again = make_broker(tmp_path / "a")
    assert again.config["message.max.bytes"] == 3000
    assert again.group_config("g")["share.delivery.count.limit"] == "3"
