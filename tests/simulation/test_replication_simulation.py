"""ISR data replication under faults, seed by seed (see ``replsim`` for what runs and the
invariants checked after every event, ``repl_scenarios`` for the faults). ``NORMAL_SEEDS`` per
scenario in the normal run, ``SLOW_SEEDS`` more under ``-m slow``; seeds that once failed stay
in ``REGRESSIONS`` with what they found.

    PYTHONPATH=src python -m pytest tests/simulation/test_replication_simulation.py -q
    PYTHONPATH=src python -m pytest tests/simulation/test_replication_simulation.py -q -m slow
"""

from __future__ import annotations

import pytest
from repl_scenarios import SCENARIOS

NORMAL_SEEDS = 50
SLOW_SEEDS = 1000

# (scenario, seed): what it found.
REGRESSIONS = {
    ("leader-kill", 0): "ReplicaManager.read_for_follower notified the fetch purgatory at every follower "
    "fetch, HW moved or not: two idle followers' long polls woke each other without end (a livelock at "
    "one instant here, a busy loop for replica.fetch.wait.max.ms on a real broker); now only a HW that "
    "moved notifies",
    ("leader-kill", 6): "ReplicaManager._open_partition set a replica's HW to its log end offset on the "
    "metadata quorum too: a restarted ex-leader claimed its uncommitted batch at 13 as committed while "
    "the new leader had committed another one there (the HW now comes from the checkpoint, as Kafka's)",
    ("leader-kill", 15): "same HW at open: a restarted replica's inflated HW made its uncommitted tail "
    "count as committed, which the next leader did not hold",
    ("leader-kill", 5): "harness: a restarted broker applied the image before registering (the real "
    "broker goes live only once unfenced), leading at its old epoch with a log that lost its tail",
    ("unflushed-tail", 0): "harness: the leader-HW check counted an ISR member that had just lost its "
    "unflushed tail (it leaves the ISR when it registers again)",
    ("unflushed-tail", 1): "harness: same",
    ("chaos", 293): "harness: a power cut was allowed while the only other ISR member with the data was "
    "cut off from the controller: it was fenced, the power-cut broker stayed the last ISR member and "
    "was elected with an empty log (KIP-966's last replica standing; Kafka loses the data too)",
    ("chaos", 347): "harness: same",
}


@pytest.mark.simulation
@pytest.mark.parametrize(
    ("name", "seed"), sorted(REGRESSIONS), ids=[f"{n}-{s}" for n, s in sorted(REGRESSIONS)]
)
def test_replication_regression_seed(name: str, seed: int) -> None:
    SCENARIOS[name](seed)


@pytest.mark.simulation
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_replication_scenario_seeds(name: str) -> None:
    for seed in range(NORMAL_SEEDS):
        SCENARIOS[name](seed)


@pytest.mark.simulation
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_replication_scenario_many_seeds(name: str, request: pytest.FixtureRequest) -> None:
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("thousands of seeds: run with -m slow")
    for seed in range(NORMAL_SEEDS, NORMAL_SEEDS + SLOW_SEEDS):
        SCENARIOS[name](seed)
