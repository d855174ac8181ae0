"""The same scenarios on real storage: every node's RaftNode on the on-disk ``MetadataLog`` and
``FileQuorumStateStore`` (branch ``raftlog``). A kill closes the files without flushing and
reopens them (kill -9: the page cache keeps what was written; the log recovers from its files),
so this checks the state machine and the disk log together rather than power loss."""

from __future__ import annotations

from pathlib import Path

import pytest
import raftsim
from scenarios import SCENARIOS

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
