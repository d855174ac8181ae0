"""The quorum under faults, seed by seed (see ``raftsim`` for the invariants checked after every
event). ``NORMAL_SEEDS`` per scenario in the normal run, ``SLOW_SEEDS`` under ``-m slow``;
seeds that once failed stay in ``REGRESSIONS`` with what they found.

    PYTHONPATH=src python -m pytest tests/simulation -q            # ~330 seeded runs, < 1 min
    PYTHONPATH=src python -m pytest tests/simulation -q -m slow    # + 1,000 seeds per scenario
"""

from __future__ import annotations

import pytest
from scenarios import SCENARIOS

NORMAL_SEEDS = 25
HEAVY = {"unflushed-tail": 12, "snapshot-catch-up": 12}  # the costliest per seed
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
    ("chaos", 81): "an observer restarted on a snapshot its log had not been restarted at: it applied "
    "offset 60 with a high watermark of 0 (a snapshot loaded at start now raises the high watermark to it)",
    ("splits", 325): "a lost fetch answer kept the follower waiting the whole request timeout, which "
    "equalled the fetch timeout: under 5% loss elections never stopped (a fetch now expires after its "
    "long-poll wait plus a margin)",
    ("stale-leader-snapshot", 0): "a follower whose log reached past the leader's snapshot with an older "
    "epoch kept downloading the snapshot without loading it (MemoryRaftLog.truncate_to_latest_snapshot "
    "now restarts a log at a snapshot of a later epoch, as Kafka's; RaftNode raises if it is not ahead)",
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
    for seed in range(HEAVY.get(name, NORMAL_SEEDS)):
        SCENARIOS[name](seed)


@pytest.mark.simulation
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_many_seeds(name: str, request: pytest.FixtureRequest) -> None:
    # `make test` runs slow tests too; thousands of seeds (~20 min) only when asked: -m slow
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("thousands of seeds: run with -m slow")
    first = HEAVY.get(name, NORMAL_SEEDS)
    for seed in range(first, first + SLOW_SEEDS):
        SCENARIOS[name](seed)
