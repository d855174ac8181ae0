"""KRaft settings (strom.metadata.quorum_config via BrokerConfig): Kafka's names and defaults,
the parsing of controller.quorum.voters, and every rule KafkaConfig applies to process.roles,
the voters and the controller listeners. Each refusal names the setting."""

from __future__ import annotations

import pytest

from strom.config import BrokerConfig, ConfigError
from strom.metadata.quorum_config import (
    QuorumConfigError,
    Voter,
    parse_bootstrap_servers,
    parse_listener_names,
    parse_process_roles,
    parse_voters,
)

COMBINED = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9193,3@127.0.0.1:9293",
}
BROKER_ONLY = {
    "process.roles": "broker",
    "node.id": "4",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9193,3@127.0.0.1:9293",
}
CONTROLLER_ONLY = {
    "process.roles": "controller",
    "node.id": "2",
    "listeners": "CONTROLLER://127.0.0.1:9193",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9193,3@127.0.0.1:9293",
}


def config(base: dict[str, str], **changes: str | None) -> BrokerConfig:
    values = dict(base)
    for k, v in changes.items():
        key = k.replace("_", ".")
        if v is None:
            values.pop(key, None)
        else:
            values[key] = v
    return BrokerConfig.from_sources(None, values)


def refused(base: dict[str, str], setting: str, match: str, **changes: str | None) -> str:
    with pytest.raises(ConfigError, match=match) as e:
        config(base, **changes)
    assert setting in str(e.value), str(e.value)
    return str(e.value)


# ------------------------------------------------------------------ defaults


def test_kafka_names_and_defaults() -> None:
    cfg = BrokerConfig.from_sources(None, {})
    expected = {
        "process.roles": "broker,controller",
        "controller.listener.names": "",
        "controller.quorum.voters": "",
        "controller.quorum.bootstrap.servers": "",
        "controller.quorum.election.timeout.ms": 1000,
        "controller.quorum.fetch.timeout.ms": 2000,
        "controller.quorum.election.backoff.max.ms": 1000,
        "controller.quorum.request.timeout.ms": 2000,
        "controller.quorum.append.linger.ms": 25,
        "controller.quorum.retry.backoff.ms": 20,
        "broker.heartbeat.interval.ms": 2000,
        "broker.session.timeout.ms": 9000,
        "initial.broker.registration.timeout.ms": 60000,
        "metadata.log.dir": "",
        "metadata.log.segment.bytes": 1073741824,
        "metadata.log.segment.ms": 604800000,
        "metadata.max.retention.bytes": 104857600,
        "metadata.max.retention.ms": 604800000,
        "metadata.log.max.record.bytes.between.snapshots": 20971520,
        "metadata.log.max.snapshot.interval.ms": 3600000,
        "metadata.max.idle.interval.ms": 500,
        "broker.rack": "",
        "auto.leader.rebalance.enable": True,
        "leader.imbalance.check.interval.seconds": 300,
        "leader.imbalance.per.broker.percentage": 10,
        "unclean.leader.election.enable": False,
        "min.insync.replicas": 1,
        "controlled.shutdown.enable": True,
    }
    assert {k: cfg[k] for k in expected} == expected


def test_zero_setup_is_a_quorum_of_one() -> None:
    k = BrokerConfig.from_sources(None, {}).kraft()
    assert k.single_node and k.is_combined and k.is_voter
    assert k.voter_ids == {1} and k.voters == () and k.controller_listeners == ()
    assert (k.broker_heartbeat_interval_ms, k.broker_session_timeout_ms) == (2000, 9000)
    assert (k.election_timeout_ms, k.fetch_timeout_ms) == (1000, 2000)
    k7 = BrokerConfig.from_sources(None, {"node.id": "7"}).kraft()
    assert k7.voter_ids == {7}


def test_metadata_log_dir_defaults_to_the_first_log_dir() -> None:
    cfg = BrokerConfig.from_sources(None, {"log.dirs": "/a,/b"})
    assert str(cfg.metadata_log_dir) == "/a"
    cfg = BrokerConfig.from_sources(None, {"log.dirs": "/a,/b", "metadata.log.dir": "/m"})
    assert str(cfg.metadata_log_dir) == "/m"


def test_timeouts_are_read() -> None:
    k = config(
        COMBINED,
        **{
            "controller.quorum.election.timeout.ms": "1500",
            "controller.quorum.fetch.timeout.ms": "3000",
            "broker.session.timeout.ms": "18000",
        },
    ).kraft()
    assert (k.election_timeout_ms, k.fetch_timeout_ms, k.broker_session_timeout_ms) == (1500, 3000, 18000)


# ------------------------------------------------------------------ parsing


def test_parse_voters() -> None:
    assert parse_voters("") == ()
    vs = parse_voters(" 1@a.example:9093 , 2@[::1]:9094,3@10.0.0.3:9095")
    assert vs == (Voter(1, "a.example", 9093), Voter(2, "::1", 9094), Voter(3, "10.0.0.3", 9095))
    assert [str(v) for v in vs] == ["1@a.example:9093", "2@[::1]:9094", "3@10.0.0.3:9095"]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("1:localhost:9093", "Each entry should be in the form `{id}@{host}:{port}`"),
        ("1@a@b:9093", "Each entry should be in the form"),
        ("x@localhost:9093", "Failed to parse voter ID as an integer"),
        ("-1@localhost:9093", "Invalid voter ID -1"),
        ("1@localhost", "Failed to parse host name"),
        ("1@:9093", "Failed to parse host name"),
        ("1@bad host:9093", "Failed to parse host name"),
        ("1@localhost:", "Failed to parse host port"),
        ("1@localhost:0", "Failed to parse host port"),
        ("1@localhost:70000", "Failed to parse host port"),
        ("1@localhost:x", "Failed to parse host port"),
        ("1@0.0.0.0:9093", r"Host string \(0.0.0.0\) is not routeable"),
        ("1@a:9093,1@b:9093", "lists node id 1 more than once"),
        ("1@a:9093,2@A:9093", "gives nodes 1 and 2 the same endpoint"),
    ],
)
def test_bad_voters(text: str, match: str) -> None:
    with pytest.raises(QuorumConfigError, match=match) as e:
        parse_voters(text)
    assert "controller.quorum.voters" in str(e.value)
    # the same through the config, as a ConfigError
    refused(COMBINED, "controller.quorum.voters", match, controller_quorum_voters=text)


def test_parse_roles_names_and_bootstrap() -> None:
    assert parse_process_roles("broker") == {"broker"}
    assert parse_process_roles(" controller , broker ") == {"broker", "controller"}
    assert parse_listener_names("controller, Other") == ("CONTROLLER", "OTHER")
    assert parse_bootstrap_servers("a:1,[::1]:2") == (("a", 1), ("::1", 2))
    with pytest.raises(QuorumConfigError, match=r"controller\.quorum\.bootstrap\.servers"):
        parse_bootstrap_servers("a")


@pytest.mark.parametrize(
    ("roles", "match"),
    [
        ("", "process.roles is empty"),
        ("broker,zookeeper", "Unknown process role 'zookeeper' in process.roles"),
        ("Broker", "Unknown process role 'Broker'"),
        ("broker,broker", "Duplicate role names found in `process.roles`"),
    ],
)
def test_bad_process_roles(roles: str, match: str) -> None:
    refused(COMBINED, "process.roles", match, process_roles=roles)


# ------------------------------------------------------------------ rules by role


def test_valid_configs_of_each_role() -> None:
    c = config(COMBINED).kraft()
    assert c.is_combined and not c.single_node and c.voter_ids == {1, 2, 3} and c.is_voter
    assert c.controller_listeners == (("CONTROLLER", "127.0.0.1", 9093),)
    b = config(BROKER_ONLY).kraft()
    assert b.is_broker and not b.is_controller and not b.is_voter and b.controller_listeners == ()
    k = config(CONTROLLER_ONLY).kraft()
    assert k.is_controller and not k.is_broker and k.is_voter
    # a broker may find the controllers through controller.quorum.bootstrap.servers instead
    config(BROKER_ONLY, controller_quorum_voters="", **{"controller.quorum.bootstrap.servers": "h:9093"})


def test_controller_must_be_a_voter() -> None:
    msg = refused(
        COMBINED,
        "controller.quorum.voters",
        "the node id 4 must be included in the set of voters",
        node_id="4",
    )
    assert "'controller' role" in msg and "[1, 2, 3]" in msg
    refused(CONTROLLER_ONLY, "controller.quorum.voters", "must be included", node_id="9")


def test_controller_needs_a_controller_listener() -> None:
    refused(
        COMBINED,
        "controller.listener.names",
        "must contain at least one value appearing in the 'listeners'",
        listeners="PLAINTEXT://127.0.0.1:9092",
    )
    # a listener nobody maps to a protocol is refused before (listeners' own rule)
    refused(
        COMBINED,
        "listener.security.protocol.map",
        "listener 'CONTROLLER' in listeners has no security",
        controller_listener_names=None,
    )
    msg = refused(
        COMBINED,
        "controller.listener.names",
        "must only contain values appearing in the 'listeners'",
        controller_listener_names="CONTROLLER,OTHER",
    )
    assert "OTHER" in msg
    # zero set-up with a controller listener named but absent: refused too (Kafka's rule)
    refused(
        {},
        "controller.listener.names",
        "must only contain values appearing",
        controller_listener_names="CONTROLLER",
    )


def test_controller_only_listens_only_on_controller_listeners() -> None:
    refused(
        CONTROLLER_ONLY,
        "controller.listener.names",
        "must only contain KRaft controller listeners from controller.listener.names when process.roles=",
        listeners="CONTROLLER://127.0.0.1:9193,PLAINTEXT://127.0.0.1:9092",
    )


def test_own_voter_endpoint_must_be_a_controller_listener_port() -> None:
    msg = refused(
        COMBINED,
        "controller.quorum.voters",
        "gives this node",
        listeners="PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9999",
    )
    assert "127.0.0.1:9093" in msg and "9999" in msg
    # an ephemeral controller listener (port 0) cannot be checked
    config(COMBINED, listeners="PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0")


def test_broker_only_rules() -> None:
    refused(
        BROKER_ONLY,
        "controller.quorum.voters",
        "either controller.quorum.bootstrap.servers must contain",
        controller_quorum_voters="",
    )
    refused(
        BROKER_ONLY,
        "controller.quorum.voters",
        "just the 'broker' role, the node id 2 must not be included",
        node_id="2",
    )
    refused(
        BROKER_ONLY,
        "controller.listener.names",
        "must contain at least one value when running KRaft with just",
        controller_listener_names=None,
    )
    refused(
        BROKER_ONLY,
        "controller.listener.names",
        "must not contain a value appearing in the 'listeners'",
        listeners="PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    )
    # the protocol map left at its default: the controller listener is PLAINTEXT (Kafka's rule);
    # set explicitly, it must name it
    assert config(BROKER_ONLY).security_protocol_map()["CONTROLLER"] == "PLAINTEXT"
    refused(
        BROKER_ONLY,
        "listener.security.protocol.map",
        "Controller listener with name CONTROLLER",
        **{"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT"},
    )


def test_controller_role_without_voters() -> None:
    refused(
        CONTROLLER_ONLY,
        "controller.quorum.voters",
        "either controller.quorum.bootstrap.servers",
        controller_quorum_voters="",
    )
    refused(
        COMBINED,
        "controller.quorum.voters",
        "dynamic quorum",
        controller_quorum_voters="",
        **{"controller.quorum.bootstrap.servers": "127.0.0.1:9093"},
    )


def test_a_broker_needs_a_broker_listener() -> None:
    refused(
        COMBINED,
        "controller.listener.names",
        "There must be at least one broker advertised listener",
        listeners="CONTROLLER://127.0.0.1:9093",
    )


def test_node_id_rules() -> None:
    refused(
        COMBINED,
        "node.id",
        "node.id must be 0 or more",
        node_id="-1",
        controller_quorum_voters="0@127.0.0.1:9093",
    )
    refused(
        COMBINED, "node.id", "You must set `node.id` to the same value as `broker.id`", **{"broker.id": "2"}
    )
    # broker.id alone names the node (Kafka's synonym)
    cfg = config(COMBINED, node_id=None, **{"broker.id": "1"})
    assert cfg.node_id == 1 and cfg.kraft().is_voter


@pytest.mark.parametrize(
    ("name", "value", "least"),
    [
        ("metadata.log.segment.bytes", "11", 12),
        ("metadata.log.max.record.bytes.between.snapshots", "0", 1),
        ("metadata.max.idle.interval.ms", "-1", 0),
        ("leader.imbalance.check.interval.seconds", "0", 1),
    ],
)
def test_at_least(name: str, value: str, least: int) -> None:
    refused(
        {},
        name,
        f"Invalid value {value} for configuration {name}: Value must be at least {least}",
        **{name: value},
    )


def test_default_advertised_endpoint_is_not_a_controller_listener() -> None:
    cfg = config(COMBINED, listeners="CONTROLLER://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092")
    assert cfg.advertised() == ("127.0.0.1", 9092)
    assert cfg.advertised("CONTROLLER") == ("127.0.0.1", 9093)
