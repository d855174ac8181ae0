"""RaftNode as a total function: any sequence of messages from peers that keep Raft's rules
(one leader per epoch: here epoch e is led by voter e % 3 + 1, unless the node under test
won it) and any timer firing leave the
node in a legal state. Never an exception, epochs never go back, the stored election state
always matches the node's, and at most one vote is granted per epoch."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.raft.log import ElectionState
from strom.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    Errors,
    FetchRequest,
    FetchResponse,
    LeaderIdAndEpoch,
    RaftMessage,
    VoteRequest,
    VoteResponse,
)
from strom.raft.quorum import RaftConfig, RaftNode
from strom.testing.raft import MemoryQuorumStateStore, MemoryRaftLog

VOTERS = frozenset({1, 2, 3})


def leader_of(epoch: int) -> int:
    return epoch % 3 + 1


epochs = st.integers(0, 6)
peers = st.sampled_from([2, 3])
events = st.one_of(
    st.tuples(st.just("vote"), peers, epochs, st.integers(0, 6), st.integers(0, 5)),
    st.tuples(st.just("begin"), epochs),
    st.tuples(st.just("end"), epochs, st.permutations([1, 2, 3])),
    st.tuples(st.just("fetch"), peers, epochs, st.integers(0, 4), st.integers(0, 6)),
    st.tuples(st.just("vote-response"), peers, epochs, st.booleans()),
    st.tuples(st.just("fetch-response"), epochs),
    st.tuples(st.just("grant"), peers),
    st.tuples(st.just("tick"), st.integers(0, 3000)),
    st.tuples(st.just("append"), st.integers(1, 3)),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(events, max_size=40), st.integers(0, 2**32))
def test_node_stays_legal(script: list[tuple[object, ...]], seed: int) -> None:
    log = MemoryRaftLog()
    store = MemoryQuorumStateStore()

    class Nop:
        def handle_commit(self, batches: object) -> None: ...
        def handle_load_snapshot(self, snapshot_id: object, data: bytes) -> None: ...
        def handle_leader_change(self, leader: object) -> None: ...

    node = RaftNode(RaftConfig(1, VOTERS), log, store, Nop(), random.Random(seed), 0)
    now = 0
    granted: dict[int, int] = {}
    last_epoch = 0
    led: set[int] = set()
    for ev in script:
        kind = ev[0]
        msg: RaftMessage | None = None
        sender = 2
        if kind == "vote":
            _, sender, epoch, last_epoch_of_log, last_offset = ev
            msg = VoteRequest(int(epoch), int(sender), int(last_epoch_of_log), int(last_offset))  # type: ignore[call-overload]
        elif kind == "begin":
            epoch = int(ev[1])  # type: ignore[call-overload]
            sender = leader_of(epoch)
            if sender == 1 or epoch in led:
                continue
            msg = BeginQuorumEpochRequest(sender, epoch)
        elif kind == "end":
            epoch = int(ev[1])  # type: ignore[call-overload]
            sender = leader_of(epoch)
            if sender == 1 or epoch in led:
                continue
            msg = EndQuorumEpochRequest(sender, epoch, tuple(ev[2]))  # type: ignore[arg-type]
        elif kind == "fetch":
            _, sender, epoch, offset, fetched_epoch = ev
            msg = FetchRequest(int(sender), int(epoch), int(offset), int(fetched_epoch), max_wait_ms=0)  # type: ignore[call-overload]
        elif kind == "vote-response":
            _, sender, epoch, ok = ev
            msg = VoteResponse(Errors.NONE, -1, int(epoch), bool(ok))  # type: ignore[call-overload]
        elif kind == "grant":  # a peer grants the node's current candidacy (if it is one)
            sender = int(ev[1])  # type: ignore[call-overload]
            msg = VoteResponse(Errors.NONE, -1, node.epoch, True)
        elif kind == "fetch-response":
            epoch = int(ev[1])  # type: ignore[call-overload]
            sender = leader_of(epoch)
            if sender == 1 or epoch in led:
                continue
            msg = FetchResponse(Errors.NONE, 0, 0, current_leader=LeaderIdAndEpoch(sender, epoch))
        elif kind == "tick":
            now += int(ev[1])  # type: ignore[call-overload]
            node.poll(now)
        elif kind == "append" and node.is_leader:
            node.append(now, [b"x"] * int(ev[1]))  # type: ignore[call-overload]
        if msg is not None:
            # answer the request in flight to the sender if there is one, else a made-up id
            cid = node._inflight.get(sender, (7, 0))[0]
            out = node.handle(now, sender, cid, msg)
            for o in out:
                if isinstance(o.message, VoteResponse) and o.message.vote_granted:
                    epoch_granted = o.message.leader_epoch
                    cand = o.destination
                    assert granted.setdefault(epoch_granted, cand) == cand, "two votes in one epoch"
        assert node.epoch >= last_epoch
        last_epoch = node.epoch
        stored = store.read() or ElectionState(0)
        assert stored.epoch == node.epoch
        if node.is_leader:
            led.add(node.epoch)
            assert stored.leader_id == 1 and stored.voted_id == 1
