"""The simulation can fail: each test breaks one Raft rule in RaftNode and expects some seed of a
scenario to report it (an invariant violation, or the node's own RaftStateError/ValueError).

Not here: committing an older epoch's entries by counting (Raft's "figure 8") needs an interleaving
that 100s of chaos seeds did not produce; ``tests/unit/test_raft_quorum.py`` checks that rule
directly (``test_leader_commits_older_epochs_only_with_its_own_first_batch``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from scenarios import SCENARIOS

from strom.raft import quorum
from strom.raft.quorum import RaftNode, Unattached, Voted


def _first_failure(name: str, seeds: range) -> BaseException | None:
    for seed in seeds:
        try:
            SCENARIOS[name](seed)
        except (AssertionError, quorum.RaftStateError, ValueError) as e:
            return e
    return None


@pytest.fixture
def patch(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    yield monkeypatch


@pytest.mark.simulation
def test_voting_twice_in_an_epoch_is_caught(patch: pytest.MonkeyPatch) -> None:
    def handle_vote(self: RaftNode, now_ms: int, req: Any) -> Any:
        if req.candidate_epoch > self.epoch:
            self._to_unattached(now_ms, req.candidate_epoch)
        st = self.state
        granted = (
            isinstance(st, Unattached | Voted) and req.candidate_epoch == st.epoch
        )  # no log check, votes again
        if granted:
            self._to_voted(now_ms, st.epoch, req.candidate_id)
        return self._vote_response(quorum.Errors.NONE, granted)

    patch.setattr(RaftNode, "_handle_vote", handle_vote)
    assert _first_failure("chaos", range(30)) is not None


@pytest.mark.simulation
def test_acknowledging_unflushed_data_is_caught(patch: pytest.MonkeyPatch) -> None:
    # followers fetch on without flushing, and the leader counts its log end instead of its flushed offset
    patch.setattr(quorum.RaftNode, "_update_leader_hw", _hw_counting_end_offset)
    patch.setattr("strom.testing.raft.MemoryRaftLog.flush", lambda self: None)
    assert _first_failure("unflushed-tail", range(30)) is not None


def _hw_counting_end_offset(self: RaftNode, st: Any) -> bool:
    me = self.config.node_id
    offsets = sorted(
        (self.log.end_offset if v == me else st.replicas[v].end_offset for v in self.config.voters),
        reverse=True,
    )
    candidate = offsets[self.config.majority - 1]
    if candidate > st.epoch_start_offset and candidate > self.log.high_watermark:
        self.log.update_high_watermark(candidate)
        self._wake = True
        self._deliver()
        return True
    return False
