"""The quorum under faults, seed by seed (see ``raftsim`` for the invariants checked after every
event). ``NORMAL_SEEDS`` per scenario in the normal run, ``SLOW_SEEDS`` under ``-m slow``;
seeds that once failed stay in ``REGRESSIONS`` with what they found."""

from __future__ import annotations

import pytest
from scenarios import SCENARIOS

NORMAL_SEEDS = 40
SLOW_SEEDS = 1000

# (scenario, seed): what it found.
REGRESSIONS = {
    ("leader-kill", 4): "a candidate with a stale log re-stood every second and reset every voter's "
    "election timer on each new epoch: nobody else ever stood (liveness)",
    ("all-killed", 1): "same election-timer reset, after a full restart",
    ("leader-partitioned", 1): "same election-timer reset, the old leader rejoining behind",
    ("back-to-back", 0): "same election-timer reset, two leaders killed in a row",
    ("observers", 0): "same election-timer reset; the observers never saw a leader again",
    ("snapshot-catch-up", 0): "harness: the invariant check ran after a snapshot dropped the log prefix",
    ("chaos", 3): "harness: same, with snapshots during chaos",
}


@pytest.mark.simulation
@pytest.mark.parametrize(
    ("name", "seed"), sorted(REGRESSIONS), ids=[f"{n}-{s}" for n, s in sorted(REGRESSIONS)]
)
def test_regression_seed(name: str, seed: int) -> None:
    SCENARIOS[name](seed)


@pytest.mark.simulation
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_seeds(name: str) -> None:
    for seed in range(NORMAL_SEEDS):
        SCENARIOS[name](seed)


@pytest.mark.simulation
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_many_seeds(name: str) -> None:
    for seed in range(NORMAL_SEEDS, NORMAL_SEEDS + SLOW_SEEDS):
        SCENARIOS[name](seed)
