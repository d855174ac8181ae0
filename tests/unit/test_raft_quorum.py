"""RaftNode state transitions as a table (state x input -> state, answer), plus the rules that a
table cannot show: persistence before answering, the new leader's first batch, counting only
the current epoch, divergence and truncation, snapshot download."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from strom.protocol.records import build_batch
from strom.raft.log import ElectionState, OffsetAndEpoch
from strom.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    Outbound,
    RaftMessage,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from strom.raft.quorum import (
    CommittedBatch,
    LeaderAndEpoch,
    NotLeaderError,
    RaftConfig,
    RaftNode,
    RaftStateError,
    ReplicaInfo,
)
from strom.testing.raft import MemoryQuorumStateStore, MemoryRaftLog

VOTERS = frozenset({1, 2, 3})


@dataclass
class Recorder:
    commits: list[CommittedBatch] = field(default_factory=list)
    snapshots: list[OffsetAndEpoch] = field(default_factory=list)
    leaders: list[LeaderAndEpoch] = field(default_factory=list)

    def handle_commit(self, batches: list[CommittedBatch]) -> None:
        self.commits.extend(batches)

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self.snapshots.append(snapshot_id)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leaders.append(leader)


def make_node(
    stored: ElectionState | None, node_id: int = 1, voters: frozenset[int] = VOTERS, history: bool = True
) -> tuple[RaftNode, MemoryRaftLog, MemoryQuorumStateStore, Recorder]:
    log = MemoryRaftLog()
    if history:  # one batch of epoch 3 at offset 0
        log.append_as_leader([b"old"], 3, 0)
        log.flush()
    store = MemoryQuorumStateStore()
    if stored is not None:
        store.write(stored)
    rec = Recorder()
    node = RaftNode(RaftConfig(node_id, voters), log, store, rec, random.Random(7), 0)
    return node, log, store, rec


def answer(out: list[Outbound], dest: int) -> RaftMessage:
    found = [o.message for o in out if o.destination == dest]
    assert found, out
    return found[0]


def make_leader() -> tuple[RaftNode, MemoryRaftLog, MemoryQuorumStateStore, Recorder]:
    node, log, store, rec = make_node(ElectionState(5, None, 1))  # a candidate of epoch 5
    out = node.poll(0)
    vote = next(o for o in out if o.destination == 2)
    node.handle(1, 2, vote.correlation_id, VoteResponse(Errors.NONE, -1, 5, True))
    assert node.state_name == "Leader"
    return node, log, store, rec


STATES = {
    "Unattached": lambda: make_node(ElectionState(5)),
    "Voted": lambda: make_node(ElectionState(5, None, 2)),
    "Candidate": lambda: make_node(ElectionState(5, None, 1)),
    "Follower": lambda: make_node(ElectionState(5, 2, None)),
    "Resigned": lambda: make_node(ElectionState(5, 1, 1)),
    "Leader": make_leader,
}

UP_TO_DATE = dict(last_offset_epoch=5, last_offset=10)
STALE = dict(last_offset_epoch=2, last_offset=5)

INPUTS: dict[str, RaftMessage | str] = {
    "vote-old-epoch": VoteRequest(4, 3, **UP_TO_DATE),
    "vote-same-epoch": VoteRequest(5, 3, **UP_TO_DATE),
    "vote-new-epoch": VoteRequest(6, 3, **UP_TO_DATE),
    "vote-new-epoch-stale-log": VoteRequest(6, 3, **STALE),
    "begin-old-epoch": BeginQuorumEpochRequest(3, 4),
    "begin-same-epoch": BeginQuorumEpochRequest(3, 5),
    "begin-new-epoch": BeginQuorumEpochRequest(3, 6),
    "end-new-epoch": EndQuorumEpochRequest(3, 6, (1, 2)),
    "fetch-old-epoch": FetchRequest(3, 4, 0, 0),
    "fetch-same-epoch": FetchRequest(3, 5, 0, 0),
    "fetch-new-epoch": FetchRequest(3, 6, 0, 0),
    "timeout": "timeout",
}

ALL = list(STATES)
# input -> {state: (state after, epoch after, answer check)}; "raise" for RaftStateError.
Expect = dict[str, tuple[str, int, object]]


def _same(state_epoch: tuple[str, int], check: object) -> Expect:
    return {s: (s, 5, check) for s in ALL}


TABLE: dict[str, Expect] = {
    "vote-old-epoch": _same(("", 5), ("vote", Errors.FENCED_LEADER_EPOCH, False)),
    "vote-same-epoch": {
        "Unattached": ("Voted", 5, ("vote", Errors.NONE, True)),
        "Voted": ("Voted", 5, ("vote", Errors.NONE, False)),
        "Candidate": ("Candidate", 5, ("vote", Errors.NONE, False)),
        "Follower": ("Follower", 5, ("vote", Errors.NONE, False)),
        "Resigned": ("Resigned", 5, ("vote", Errors.NONE, False)),
        "Leader": ("Leader", 5, ("vote", Errors.NONE, False)),
    },
    "vote-new-epoch": {s: ("Voted", 6, ("vote", Errors.NONE, True)) for s in ALL},
    "vote-new-epoch-stale-log": {s: ("Unattached", 6, ("vote", Errors.NONE, False)) for s in ALL},
    "begin-old-epoch": _same(("", 5), ("begin", Errors.FENCED_LEADER_EPOCH)),
    "begin-same-epoch": {
        "Unattached": ("Follower", 5, ("begin", Errors.NONE)),
        "Voted": ("Follower", 5, ("begin", Errors.NONE)),
        "Candidate": ("Follower", 5, ("begin", Errors.NONE)),
        "Follower": ("raise", 5, None),  # node 2 leads epoch 5: a second leader is a bug
        "Resigned": ("raise", 5, None),
        "Leader": ("raise", 5, None),
    },
    "begin-new-epoch": {s: ("Follower", 6, ("begin", Errors.NONE)) for s in ALL},
    # node 1 is the first preferred successor: it follows epoch 6's leader and stands at once
    "end-new-epoch": {s: ("Candidate", 7, ("end", Errors.NONE)) for s in ALL},
    "fetch-old-epoch": _same(("", 5), ("fetch", Errors.FENCED_LEADER_EPOCH)),
    "fetch-same-epoch": {
        **{s: (s, 5, ("fetch", Errors.NOT_LEADER_OR_FOLLOWER)) for s in ALL},
        "Leader": ("Leader", 5, ("fetch", Errors.NONE)),
    },
    "fetch-new-epoch": _same(("", 5), ("fetch", Errors.UNKNOWN_LEADER_EPOCH)),
    "timeout": {
        "Unattached": ("Candidate", 6, None),
        "Voted": ("Candidate", 6, None),
        "Candidate": ("Candidate", 5, None),  # times out and backs off before standing again
        "Follower": ("Candidate", 6, None),
        "Resigned": ("Candidate", 6, None),
        "Leader": ("Resigned", 5, None),  # check-quorum: nobody fetched
    },
}


def test_table_is_total() -> None:
    assert set(TABLE) == set(INPUTS)
    for row in TABLE.values():
        assert set(row) == set(STATES)


@pytest.mark.parametrize("state", ALL)
@pytest.mark.parametrize("inp", list(INPUTS))
def test_transition(state: str, inp: str) -> None:
    node, _log, store, _rec = STATES[state]()
    assert node.state_name == state and node.epoch == 5
    want_state, want_epoch, check = TABLE[inp][state]
    message = INPUTS[inp]
    if want_state == "raise":
        with pytest.raises(RaftStateError):
            node.handle(10, 3, 99, message)  # type: ignore[arg-type]
        return
    if message == "timeout":
        node.poll(10_000)
    else:
        assert not isinstance(message, str)
        out = node.handle(10, 3, 99, message)
        resp = next((o.message for o in out if o.destination == 3 and o.correlation_id == 99), None)
        assert check is not None
        _kind, error, *granted = check  # type: ignore[misc]
        assert resp is not None, out
        assert resp.error_code == error  # type: ignore[union-attr]
        if granted:
            assert isinstance(resp, VoteResponse) and resp.vote_granted is granted[0]
    assert (node.state_name, node.epoch) == (want_state, want_epoch)
    stored = store.read()
    assert stored is not None and stored.epoch == node.epoch  # persisted before the answer went out
    if node.state_name == "Voted" and (state, 5) != (want_state, want_epoch):
        assert stored.voted_id == 3


def test_vote_is_persisted_before_the_answer_and_survives_a_restart() -> None:
    node, log, store, _ = make_node(ElectionState(5))
    out = node.handle(0, 2, 1, VoteRequest(6, 2, 5, 10))
    assert isinstance(out[0].message, VoteResponse) and out[0].message.vote_granted
    assert store.read() == ElectionState(6, None, 2)
    again = RaftNode(RaftConfig(1, VOTERS), log, store, Recorder(), random.Random(1), 5)
    out = again.handle(5, 3, 2, VoteRequest(6, 3, 9, 99))
    assert isinstance(out[0].message, VoteResponse) and not out[0].message.vote_granted


def test_single_voter_elects_itself_and_commits_after_the_linger() -> None:
    node, log, _store, rec = make_node(None, voters=frozenset({1}), history=False)
    node.poll(0)
    assert node.is_leader and node.epoch == 1
    assert log.end_offset == 1 and log.flushed_offset == 0  # the LeaderChangeMessage, not flushed yet
    last = node.append(1, [b"a", b"b"])
    assert last == 2 and node.high_watermark == 0
    assert node.next_deadline() <= 25
    node.poll(node.next_deadline())
    node.poll(25)
    assert log.flushed_offset == 3 and node.high_watermark == 3
    assert [b.control for b in rec.commits] == [True, False]
    assert rec.commits[1].records == (b"a", b"b") and rec.commits[1].epoch == 1
    assert rec.leaders[-1] == LeaderAndEpoch(1, 1)


def test_append_on_a_follower_raises() -> None:
    node, *_ = make_node(ElectionState(5, 2, None))
    with pytest.raises(NotLeaderError):
        node.append(0, [b"x"])


def _fetch(node: RaftNode, replica: int, offset: int, epoch: int, now: int = 10) -> FetchResponse:
    out = node.handle(
        now, replica, 1000 + offset, FetchRequest(replica, node.epoch, offset, epoch, max_wait_ms=0)
    )
    resp = answer(out, replica)
    assert isinstance(resp, FetchResponse)
    return resp


def test_leader_commits_older_epochs_only_with_its_own_first_batch() -> None:
    node, log, _, _ = make_leader()  # log: [old@epoch 3, offset 0] [LeaderChange@epoch 5, offset 1]
    node.poll(100)  # flush
    assert log.end_offset == 2 and log.flushed_offset == 2
    _fetch(node, 2, 1, 3)  # node 2 holds the old batch only
    assert node.high_watermark == 0  # a majority has offset 1, but that is an older epoch's entry
    resp = _fetch(node, 2, 2, 5)
    assert node.high_watermark == 2 and resp.high_watermark == 2


def test_leader_answers_a_diverging_follower_and_the_follower_truncates() -> None:
    leader, llog, _, _ = make_leader()
    resp = _fetch(leader, 2, 3, 4)  # offset 3 of epoch 4: the leader never had epoch 4
    assert resp.diverging_epoch is not None
    assert (resp.diverging_epoch.epoch, resp.diverging_epoch.end_offset) == (3, 1)
    follower, flog, _, _ = make_node(ElectionState(5, 1, None), node_id=2)
    flog.append_as_leader([b"x", b"y"], 4, 0)  # offsets 1..2 at epoch 4: never committed
    flog.flush()
    out = follower.poll(0)
    fetch = answer(out, 1)
    assert isinstance(fetch, FetchRequest) and (fetch.fetch_offset, fetch.last_fetched_epoch) == (3, 4)
    cid = out[0].correlation_id
    out = follower.handle(5, 1, cid, resp)  # truncates and fetches again at once
    assert flog.end_offset == 1
    fetch = answer(out, 1)
    assert isinstance(fetch, FetchRequest) and (fetch.fetch_offset, fetch.last_fetched_epoch) == (1, 3)
    resp = _fetch(leader, 2, 1, 3)
    assert resp.diverging_epoch is None and resp.records
    follower.handle(7, 1, out[0].correlation_id, resp)
    assert flog.end_offset == llog.end_offset and flog.last_fetched_epoch() == 5


def test_a_follower_below_the_log_start_downloads_the_snapshot_in_chunks() -> None:
    leader, llog, _, _ = make_leader()
    leader.poll(100)
    _fetch(leader, 2, 2, 5)
    assert leader.high_watermark == 2
    image = build_batch([(None, b"image", [], 0)])  # a snapshot is record batches
    leader.create_snapshot(OffsetAndEpoch(2, 5), image)
    assert llog.start_offset == 2
    resp = _fetch(leader, 3, 0, 0)
    assert resp.snapshot_id == SnapshotId(2, 5)
    follower, flog, _, rec = make_node(ElectionState(5, 1, None), node_id=3, history=False)
    out = follower.poll(0)
    out = follower.handle(1, 1, out[0].correlation_id, resp)
    chunks = 0
    now = 2
    while not rec.snapshots:
        req = answer(out, 1)
        assert isinstance(req, FetchSnapshotRequest)
        reply = leader.handle(now, 3, 7, FetchSnapshotRequest(3, 5, req.snapshot_id, req.position, 4))
        chunk = answer(reply, 3)
        assert isinstance(chunk, FetchSnapshotResponse) and chunk.error_code == Errors.NONE
        out = follower.handle(now, 1, out[0].correlation_id, chunk)
        chunks += 1
        now += 1
    assert chunks == -(-len(image) // 4)  # in chunks of 4 bytes
    assert rec.snapshots == [OffsetAndEpoch(2, 5)]
    assert flog.start_offset == 2 and flog.read_snapshot(OffsetAndEpoch(2, 5)) == image
    req = answer(out, 1)
    assert isinstance(req, FetchRequest) and (req.fetch_offset, req.last_fetched_epoch) == (2, 5)


def test_a_stale_response_is_ignored() -> None:
    follower, flog, _, _ = make_node(ElectionState(5, 1, None), node_id=2, history=False)
    follower.poll(0)
    follower.handle(
        1,
        1,
        12345,
        FetchResponse(Errors.NONE, 0, 0, current_leader=LeaderIdAndEpoch(1, 5), records=b"garbage"),
    )
    assert flog.end_offset == 0


def test_graceful_resignation_names_successors_and_the_first_stands_at_once() -> None:
    leader, *_ = make_leader()
    leader.poll(100)
    _fetch(leader, 3, 2, 5, now=101)
    leader.resign(102)
    out = leader.poll(102)
    ends = [o.message for o in out if isinstance(o.message, EndQuorumEpochRequest)]
    assert ends and ends[0].preferred_successors == (3, 2)
    follower, *_ = make_node(ElectionState(5, 1, None), node_id=3)
    follower.handle(103, 1, 1, ends[0])
    follower.poll(103)
    assert follower.state_name == "Candidate" and follower.epoch == 6


def test_memory_log_crash_loses_the_unflushed_tail() -> None:
    log = MemoryRaftLog()
    log.append_as_leader([b"a"], 1, 0)
    log.flush()
    log.append_as_leader([b"b"], 1, 0)
    log.update_high_watermark(1)
    log.crash()
    assert log.end_offset == 1 and log.high_watermark == 0
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(1, 1)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)


def test_a_request_from_another_cluster_is_refused_and_changes_nothing() -> None:
    log = MemoryRaftLog()
    store = MemoryQuorumStateStore()
    node = RaftNode(RaftConfig(1, VOTERS, cluster_id="abc"), log, store, Recorder(), random.Random(1), 0)
    for msg in (
        VoteRequest(9, 2, 9, 9, cluster_id="xyz"),
        BeginQuorumEpochRequest(2, 9, cluster_id="xyz"),
        FetchRequest(2, 0, 0, 0, cluster_id="xyz"),
    ):
        resp = answer(node.handle(0, 2, 5, msg), 2)
        assert resp.error_code == Errors.INCONSISTENT_CLUSTER_ID  # type: ignore[union-attr]
    assert node.epoch == 0 and store.read() is None
    resp = answer(node.handle(0, 2, 6, VoteRequest(9, 2, 9, 9, cluster_id="abc")), 2)
    assert isinstance(resp, VoteResponse) and resp.vote_granted


def test_an_answer_from_another_cluster_moves_no_epoch() -> None:
    """A node formatted for another cluster answers INCONSISTENT_CLUSTER_ID with its own (higher)
    epoch: neither a leader nor a candidate of this cluster adopts it (a real three-node cluster
    lost its leader to such a node: tests/integration/test_kraft_cluster.py)."""
    leader, *_ = make_node(ElectionState(5, None, 1))  # a candidate of epoch 5
    vote = next(o for o in leader.poll(0) if o.destination == 2)
    out = leader.handle(1, 2, vote.correlation_id, VoteResponse(Errors.NONE, -1, 5, True))
    out += leader.poll(2)
    begin = next(o for o in out if o.destination == 3 and isinstance(o.message, BeginQuorumEpochRequest))
    leader.handle(3, 3, begin.correlation_id, BeginQuorumEpochResponse(Errors.INCONSISTENT_CLUSTER_ID, -1, 9))
    assert (leader.state_name, leader.epoch) == ("Leader", 5)
    candidate, *_ = make_node(ElectionState(5, None, 1))
    vote = next(o for o in candidate.poll(0) if o.destination == 3)
    candidate.handle(1, 3, vote.correlation_id, VoteResponse(Errors.INCONSISTENT_CLUSTER_ID, 3, 9, False))
    assert (candidate.state_name, candidate.epoch) == ("Candidate", 5)


def test_an_observer_never_votes_never_stands_and_finds_the_leader() -> None:
    node, _log, store, rec = make_node(None, node_id=4, history=False)
    resp = answer(node.handle(0, 2, 1, VoteRequest(3, 2, 9, 9)), 2)
    assert isinstance(resp, VoteResponse) and not resp.vote_granted
    assert resp.error_code == Errors.INCONSISTENT_VOTER_SET
    out = node.poll(100_000)
    assert node.state_name == "Unattached" and node.epoch == 0  # never a candidate
    ask = [o for o in out if isinstance(o.message, FetchRequest)]
    assert len(ask) == 1 and ask[0].destination in VOTERS  # asks a voter who leads
    told = FetchResponse(Errors.FENCED_LEADER_EPOCH, current_leader=LeaderIdAndEpoch(2, 7))
    out = node.handle(100_001, ask[0].destination, ask[0].correlation_id, told)
    assert (node.state_name, node.epoch, node.leader_id) == ("Follower", 7, 2)
    assert store.read() == ElectionState(7, 2, None)
    assert rec.leaders[-1] == LeaderAndEpoch(2, 7)
    fetch = answer(out, 2)
    assert isinstance(fetch, FetchRequest) and fetch.replica_id == 4
    node.poll(200_000)  # the leader went silent: back to looking, still never a candidate
    assert node.state_name == "Unattached" and node.epoch == 7


def test_check_quorum_keeps_a_leader_a_majority_fetches_from() -> None:
    node, *_ = make_leader()
    node.poll(100)
    for now in range(500, 20_000, 500):
        _fetch(node, 2, 2, 5, now=now)  # node 3 never fetches; 1 + 2 are a majority of 3
        node.poll(now)
        assert node.is_leader
    node.poll(20_000 + 3_000)  # nobody for 1.5 x fetch timeout
    assert node.state_name == "Resigned"


def test_observers_fetches_do_not_count_towards_the_high_watermark() -> None:
    node, *_ = make_leader()
    node.poll(100)  # leader flushed [0, 2)
    _fetch(node, 4, 2, 5)
    _fetch(node, 5, 2, 5)
    assert node.high_watermark == 0  # two observers at 2, but no voter other than the leader
    _fetch(node, 3, 2, 5)
    assert node.high_watermark == 2


def test_describe_quorum_on_the_leader() -> None:
    node, *_ = make_leader()
    node.poll(100)
    _fetch(node, 2, 2, 5, now=200)
    _fetch(node, 7, 1, 3, now=300)  # an observer
    info = node.describe_quorum(400)
    assert (info.leader_id, info.leader_epoch, info.high_watermark) == (1, 5, 2)
    assert info.current_voters == (ReplicaInfo(1, 2, 400), ReplicaInfo(2, 2, 200), ReplicaInfo(3, -1, -1))
    assert info.observers == (ReplicaInfo(7, 1, 300),)
    follower, *_ = make_node(ElectionState(5, 1, None), node_id=2)
    with pytest.raises(NotLeaderError):
        follower.describe_quorum(0)
