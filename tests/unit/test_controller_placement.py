"""StripedReplicaPlacer: racks, striping, fenced brokers and Kafka's refusals."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from strom.controller.placement import (
    InvalidReplicationFactorError,
    PlacementSpec,
    StripedReplicaPlacer,
    UsableBroker,
)


def place(brokers: list[UsableBroker], partitions: int, rf: int, seed: int = 0) -> list[list[int]]:
    return StripedReplicaPlacer(random.Random(seed)).place(PlacementSpec(0, partitions, rf), brokers)


def test_replicas_are_distinct_and_leaders_striped_evenly() -> None:
    brokers = [UsableBroker(i, None, False) for i in range(4)]
    placed = place(brokers, 8, 3)
    assert all(len(set(p)) == 3 for p in placed)
    assert Counter(p[0] for p in placed) == {0: 2, 1: 2, 2: 2, 3: 2}
    assert Counter(b for p in placed for b in p) == {0: 6, 1: 6, 2: 6, 3: 6}


def test_rack_aware_one_replica_per_rack_when_racks_suffice() -> None:
    brokers = [UsableBroker(i, f"rack{i % 3}", False) for i in range(9)]
    rack = {b.id: b.rack for b in brokers}
    for seed in range(5):
        for p in place(brokers, 20, 3, seed):
            assert len({rack[b] for b in p}) == 3


def test_more_replicas_than_racks_spreads_over_all_racks() -> None:
    brokers = [UsableBroker(i, "ab"[i % 2], False) for i in range(4)]
    rack = {b.id: b.rack for b in brokers}
    for p in place(brokers, 10, 3):
        assert {rack[b] for b in p} == {"a", "b"}


def test_fenced_brokers_never_lead_and_are_followers_last() -> None:
    brokers = [UsableBroker(0, None, True), UsableBroker(1, None, False), UsableBroker(2, None, False)]
    for p in place(brokers, 10, 2):
        assert p[0] != 0 and 0 not in p
    for p in place(brokers, 10, 3):
        assert p[0] != 0 and p[2] == 0


def test_same_seed_same_placement_other_seed_other_start() -> None:
    brokers = [UsableBroker(i, None, False) for i in range(5)]
    assert place(brokers, 5, 2, seed=7) == place(brokers, 5, 2, seed=7)
    assert len({place(brokers, 1, 1, seed=s)[0][0] for s in range(30)}) > 1


def test_refusals_carry_kafkas_messages() -> None:
    brokers = [UsableBroker(i, None, False) for i in range(2)]
    with pytest.raises(
        InvalidReplicationFactorError,
        match="target replication factor of 3 cannot be reached because only 2 broker",
    ):
        place(brokers, 1, 3)
    with pytest.raises(InvalidReplicationFactorError, match="All brokers are currently fenced"):
        place([UsableBroker(0, None, True)], 1, 1)
    with pytest.raises(InvalidReplicationFactorError):
        place(brokers, 1, 0)


def test_every_broker_of_every_rack_takes_its_turn_at_leading() -> None:
    brokers = [UsableBroker(i, "ab"[i % 2], False) for i in range(4)]
    for seed in range(10):
        placed = place(brokers, 8, 2, seed)
        assert Counter(p[0] for p in placed) == {0: 2, 1: 2, 2: 2, 3: 2}, placed
        assert all({b % 2 for b in p} == {0, 1} for p in placed)
