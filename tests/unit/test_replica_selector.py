"""KIP-392's replica selection (strom.replication.selector), Kafka's RackAwareReplicaSelector rules."""

from __future__ import annotations

import pytest

from strom.config_schema import BROKER_CONFIGS, ConfigError
from strom.replication.selector import (
    KAFKA_RACK_AWARE,
    RACK_AWARE,
    ReplicaView,
    preferred_read_replica,
    selector_name,
)

LEADER = ReplicaView(1, "r1", 100, 0)


def test_selector_names() -> None:
    assert selector_name("") is None
    assert selector_name("  ") is None
    assert selector_name(KAFKA_RACK_AWARE) == RACK_AWARE
    assert selector_name("rack-aware") == RACK_AWARE
    with pytest.raises(ValueError, match=r"Class com\.example\.Mine cannot be found"):
        selector_name("com.example.Mine")
    d = BROKER_CONFIGS["replica.selector.class"]
    assert d.default == "" and d.validator is not None
    with pytest.raises(ConfigError, match=r"replica\.selector\.class"):
        d.validator.validate(d.name, "com.example.Mine")


def test_no_selector_or_no_rack_reads_from_the_leader() -> None:
    followers = [ReplicaView(2, "r2", 100, 0)]
    assert preferred_read_replica(None, "r2", LEADER, followers) == -1
    assert preferred_read_replica(RACK_AWARE, None, LEADER, followers) == -1
    assert preferred_read_replica(RACK_AWARE, "", LEADER, followers) == -1


def test_follower_in_the_clients_rack() -> None:
    followers = [ReplicaView(2, "r2", 100, 0), ReplicaView(3, "r3", 100, 0)]
    assert preferred_read_replica(RACK_AWARE, "r2", LEADER, followers) == 2
    assert preferred_read_replica(RACK_AWARE, "r3", LEADER, followers) == 3
    assert preferred_read_replica(RACK_AWARE, "r9", LEADER, followers) == -1  # nobody there: the leader


def test_leader_in_the_clients_rack_wins() -> None:
    followers = [ReplicaView(2, "r1", 100, 0)]
    assert preferred_read_replica(RACK_AWARE, "r1", LEADER, followers) == -1


def test_most_caught_up_follower_of_the_rack() -> None:
    followers = [ReplicaView(2, "r2", 90, 0), ReplicaView(3, "r2", 95, 50), ReplicaView(4, "r2", 95, 10)]
    assert preferred_read_replica(RACK_AWARE, "r2", LEADER, followers) == 4
    tie = [ReplicaView(5, "r2", 95, 10), ReplicaView(4, "r2", 95, 10)]
    assert preferred_read_replica(RACK_AWARE, "r2", LEADER, tie) == 4
