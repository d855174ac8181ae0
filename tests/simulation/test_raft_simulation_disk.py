"""The same scenarios on real storage: every node's RaftNode on the on-disk ``MetadataLog`` and
``FileQuorumStateStore`` (branch ``raftlog``). A kill closes the files without flushing and
reopens them (kill -9: the page cache keeps what was written; the log recovers from its files),
so this checks the state machine and the disk log together rather than power loss."""

from __future__ import annotations

from pathlib import Path

import pytest
import raftsim
from scenarios import SCENARIOS

from strom.testing.powerloss import PowerLossFS

DISK_SCENARIOS = [
    "election-3",
    "leader-kill",
    "all-killed",
    "snapshot-catch-up",
    "stale-leader-snapshot",
    "observers",
    "chaos",
]


@pytest.mark.simulation
@pytest.mark.parametrize("name", DISK_SCENARIOS)
def test_scenario_on_disk(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(raftsim, "DISK_ROOT", tmp_path)
    c = SCENARIOS[name](1)
    assert c.committed_end > 0


@pytest.mark.simulation
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_on_disk_many_seeds(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("run with -m slow")
    monkeypatch.setattr(raftsim, "DISK_ROOT", tmp_path)
    for seed in range(2, 22):
        SCENARIOS[name](seed)


def power_cuts(seed: int, root: Path) -> raftsim.Cluster:
    """Every node loses power at once, three times: what no log had fsynced is gone (torn
    writes included); what was committed had been fsynced by a majority and must survive."""
    import random

    fs = PowerLossFS(root, torn=True, rng=random.Random(seed)).install()
    try:
        c = raftsim.Cluster(seed, voters=3, max_delay_ms=10)
        c.client(interval_ms=10)
        for _ in range(3):
            c.run_for(c.rng.randint(500, 3_000))
            committed = c.committed_end
            for nid in c.nodes:
                c.kill(nid)
            fs.cut()
            for nid in c.nodes:
                c.restart(nid)
            c.run_for(5_000)
            if c.committed_end < committed:
                c.fail("the committed prefix shrank")
        c.settle()
        return c
    finally:
        fs.uninstall()


@pytest.mark.simulation
@pytest.mark.parametrize("seed", range(3))
def test_whole_cluster_power_cuts(seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(raftsim, "DISK_ROOT", tmp_path)
    c = power_cuts(seed, tmp_path)
    assert c.stats.kills == 9 and c.committed_end > 0
