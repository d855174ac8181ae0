"""``strom reassign-partitions --generate``'s client-side placement (Kafka's
``AdminUtils.assignReplicasToBrokers``) over random broker sets, racks and seeds: every partition
gets ``rf`` distinct known brokers, on as many racks as possible, leaders spread evenly, and the
same seed gives the same answer."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.cli.reassign import assign_replicas_to_brokers


@settings(max_examples=200, deadline=None)
@given(
    n_brokers=st.integers(1, 7),
    n_racks=st.integers(0, 4),
    n_partitions=st.integers(1, 30),
    rf=st.integers(1, 7),
    seed=st.integers(0, 2**32 - 1),
)
def test_placement_invariants(n_brokers: int, n_racks: int, n_partitions: int, rf: int, seed: int) -> None:
    rf = min(rf, n_brokers)
    brokers = [(10 + b, None if n_racks == 0 else f"r{b % n_racks}") for b in range(n_brokers)]
    got = assign_replicas_to_brokers(brokers, n_partitions, rf, random.Random(seed))
    assert sorted(got) == list(range(n_partitions))
    ids = {b for b, _ in brokers}
    rack_of = dict(brokers)
    for replicas in got.values():
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= ids
        if n_racks:
            distinct = len({rack_of[b] for b in replicas})
            assert distinct == min(rf, len(set(rack_of.values())))
    # leaders are spread evenly: counts differ by at most one
    leaders = Counter(r[0] for r in got.values())
    counts = [leaders.get(b, 0) for b in ids]
    assert max(counts) - min(counts) <= 1
    # same seed, same answer
    assert assign_replicas_to_brokers(brokers, n_partitions, rf, random.Random(seed)) == got
