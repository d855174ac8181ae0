"""One KRaft node (KIP-595) as a sans-IO state machine: Kafka's ``KafkaRaftClient`` + ``QuorumState``.

Theory of operation
-------------------
The node owns a :class:`~strom.raft.log.RaftLog`, a :class:`~strom.raft.log.QuorumStateStore`, a
listener and an injected ``random.Random``. It never reads a clock, sleeps or does I/O: the driver
(the asyncio server, or the simulation) calls

* :meth:`RaftNode.handle` with every message that arrives, and sends what it returns;
* :meth:`RaftNode.poll` at :meth:`RaftNode.next_deadline` (or earlier), and sends what it returns;
* :meth:`RaftNode.append` on the leader, :meth:`RaftNode.create_snapshot` on any node.

States (``QuorumState``): **Unattached** (epoch known, no leader, no vote), **Voted** (granted
its one vote of the epoch), **Candidate**, **Leader**, **Follower** (knows the epoch's leader and
fetches from it), **Resigned** (a leader that gave up its epoch and waits for a successor). Rules:

1. Epochs only grow. Every change of epoch, leader or vote is written to the store *before* the
   node answers or acts on it (a crash then never forgets a vote or an epoch).
2. A voter grants at most one vote per epoch, only to a voter whose log is at least as up to date
   as its own (last epoch, then end offset). A Candidate votes only for itself; a node that knows
   the epoch's leader votes for nobody in that epoch.
3. Election timeout: ``election_timeout_ms`` plus a random part below it. A candidate that neither
   wins nor learns of a leader in time, or that a majority rejected, backs off (random, growing,
   at most ``election_backoff_max_ms``) and stands again one epoch up.
4. A new leader appends a LeaderChangeMessage control batch at the start of its epoch and moves
   the high watermark only past that batch (nothing of an older epoch is committed by counting).
   The high watermark is the offset a majority of voters has flushed: followers report it by
   fetching from it (they flush before fetching again), the leader counts its own
   ``flushed_offset``. The leader flushes ``append_linger_ms`` after an append.
5. Followers pull. The leader checks the fetch's (offset, last fetched epoch) against its log:
   a diverging epoch makes the follower truncate (``end_offset_for_epoch``) and fetch again; an
   offset below the leader's log start gets the snapshot id and the follower downloads it with
   FetchSnapshot. A fetch with nothing to return is parked for ``fetch_max_wait_ms`` (long poll)
   and completed early by new data or a higher high watermark.
6. A follower that hears nothing from its leader for ``fetch_timeout_ms`` stands for election; a
   leader that has not been fetched from by a majority within 1.5 x ``fetch_timeout_ms``
   resigns (check-quorum). A leader that resigns sends EndQuorumEpoch with the voters ordered by
   log end offset; the first of them stands at once, the others after a growing backoff.
7. Observers (nodes outside the voter set) fetch and apply like followers, never vote, never
   stand and never count. One without a leader asks a random voter.
8. Committed batches (below the high watermark) are handed to the listener in order, once; a
   node starting from a snapshot, or downloading one, first gets ``handle_load_snapshot``.

One request is in flight per destination; a response is accepted only with that request's
correlation id, and any request times out after ``request_timeout_ms`` (a Fetch after its
``max_wait_ms`` plus a quarter of that, so that one lost answer does not outlast the fetch
timeout: Kafka's TCP connections report a lost answer as a disconnect, the simulation's network
just drops it).

Not (yet) here: KIP-996 pre-vote (a node that rejoins with a higher epoch still disrupts a healthy
leader once, as in KIP-595), KIP-853 dynamic voters (the voter set is static, from
``controller.quorum.voters``), the leader's append accumulator (each ``append`` is one batch).

Errors: invalid use raises :class:`NotLeaderError` (append on a non-leader) or ``ValueError``
(a snapshot id that is not committed). :class:`RaftStateError` means the protocol's safety was
broken (two leaders in one epoch seen by this node): a bug, never an expected outcome.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass, field
from typing import Protocol

from kio.schema.leader_change_message.v0.data import LeaderChangeMessage, Voter
from kio.schema.types import BrokerId
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from strom.protocol.records import build_batch, decode_batch_records, iter_batches
from strom.raft.log import ElectionState, OffsetAndEpoch, QuorumStateStore, RaftLog
from strom.raft.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    EpochEndOffset,
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

CONTROL_LEADER_CHANGE = 2  # Kafka's ControlRecordType.LEADER_CHANGE


class NotLeaderError(Exception):
    """Appending on a node that is not the leader (Kafka's NotLeaderException)."""


class RaftStateError(Exception):
    """The node saw something Raft's safety rules exclude (a bug somewhere)."""


@dataclass(frozen=True, slots=True)
class RaftConfig:
    node_id: int
    voters: frozenset[int]
    election_timeout_ms: int = 1000  # controller.quorum.election.timeout.ms
    fetch_timeout_ms: int = 2000  # controller.quorum.fetch.timeout.ms
    election_backoff_max_ms: int = 1000  # controller.quorum.election.backoff.max.ms
    request_timeout_ms: int = 2000  # controller.quorum.request.timeout.ms
    retry_backoff_ms: int = 20  # controller.quorum.retry.backoff.ms
    append_linger_ms: int = 25  # controller.quorum.append.linger.ms
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 8 * 1024 * 1024
    snapshot_chunk_bytes: int = 1024 * 1024
    observer_discovery_ms: int = 100
    cluster_id: str | None = None

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1


@dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    leader_id: int | None
    epoch: int


@dataclass(frozen=True, slots=True)
class CommittedBatch:
    """One committed batch as the listener sees it (Kafka's ``Batch``). Control batches come too,
    with ``control=True`` and no records, so offsets stay contiguous."""

    base_offset: int
    last_offset: int
    epoch: int
    append_timestamp: int
    records: tuple[bytes, ...]
    control: bool


class RaftListener(Protocol):
    """Kafka's ``RaftClient.Listener``."""

    def handle_commit(self, batches: list[CommittedBatch]) -> None: ...

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None: ...

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        """Any change of leader or epoch. When this node becomes leader it is told only after
        its listener has applied every batch before the leader's epoch."""
        ...


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """One replica in DescribeQuorum (Kafka's ``ReplicaState``): -1 where unknown."""

    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int


@dataclass(frozen=True, slots=True)
class QuorumInfo:
    """What the leader answers DescribeQuorum with (``kafka-metadata-quorum.sh describe``)."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    current_voters: tuple[ReplicaInfo, ...]
    observers: tuple[ReplicaInfo, ...]


# --------------------------------------------------------------------------- states


@dataclass(slots=True)
class Unattached:
    epoch: int
    election_deadline: int | None  # None for observers: they never stand


@dataclass(slots=True)
class Voted:
    epoch: int
    voted_id: int
    election_deadline: int


@dataclass(slots=True)
class Candidate:
    epoch: int
    election_deadline: int
    retries: int
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    backoff_until: int | None = None


@dataclass(slots=True)
class ReplicaState:
    end_offset: int = -1
    last_fetch_ms: int = -1


@dataclass(slots=True)
class Leader:
    epoch: int
    epoch_start_offset: int
    started_ms: int
    replicas: dict[int, ReplicaState]  # voters other than this node, and observers that fetched
    begin_acked: set[int] = field(default_factory=set)


@dataclass(slots=True)
class _SnapshotDownload:
    snapshot_id: SnapshotId
    data: bytearray = field(default_factory=bytearray)


@dataclass(slots=True)
class Follower:
    epoch: int
    leader_id: int
    fetch_deadline: int
    snapshot: _SnapshotDownload | None = None


@dataclass(slots=True)
class Resigned:
    epoch: int
    election_deadline: int
    preferred_successors: tuple[int, ...]
    end_acked: set[int] = field(default_factory=set)


State = Unattached | Voted | Candidate | Leader | Follower | Resigned


@dataclass(slots=True)
class _Parked:
    correlation_id: int
    request: FetchRequest
    deadline: int


class RaftNode:
    def __init__(
        self,
        config: RaftConfig,
        log: RaftLog,
        store: QuorumStateStore,
        listener: RaftListener,
        rng: random.Random,
        now_ms: int,
    ) -> None:
        self.config = config
        self.log = log
        self.store = store
        self.listener = listener
        self.rng = rng
        self._next_correlation = 1
        self._inflight: dict[int, tuple[int, int]] = {}  # destination -> (correlation id, expiry)
        self._retry_at: dict[int, int] = {}
        self._parked: dict[int, _Parked] = {}
        self._wake = False  # something to do at the next poll (parked fetches to complete)
        self._flush_deadline: int | None = None
        self._discovery_at = now_ms
        self._notified: LeaderAndEpoch | None = None
        me = config.node_id
        snap = log.latest_snapshot_id()
        self._applied = log.start_offset
        if snap is not None:
            data = log.read_snapshot(snap)
            if data is not None and snap.offset >= log.start_offset:
                if log.high_watermark < snap.offset <= log.end_offset:
                    log.update_high_watermark(snap.offset)  # a snapshot holds only committed data
                listener.handle_load_snapshot(snap, data)
                self._applied = snap.offset
        stored = store.read() or ElectionState(0)
        self.state: State
        if stored.leader_id == me:
            self.state = Resigned(stored.epoch, self._election_deadline(now_ms), ())
        elif stored.leader_id is not None:
            self.state = Follower(stored.epoch, stored.leader_id, now_ms + config.fetch_timeout_ms)
        elif stored.voted_id == me and config.is_voter:
            self.state = Candidate(stored.epoch, self._election_deadline(now_ms), 0, {me})
        elif stored.voted_id is not None and config.is_voter:
            self.state = Voted(stored.epoch, stored.voted_id, self._election_deadline(now_ms))
        else:
            self.state = Unattached(
                stored.epoch, self._election_deadline(now_ms) if config.is_voter else None
            )
        self._stored = stored
        self._notify_leader()

    # ------------------------------------------------------------------ public views
    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int | None:
        if isinstance(self.state, Leader):
            return self.config.node_id
        if isinstance(self.state, Follower):
            return self.state.leader_id
        return None

    @property
    def state_name(self) -> str:
        return type(self.state).__name__

    @property
    def is_leader(self) -> bool:
        return isinstance(self.state, Leader)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def applied_offset(self) -> int:
        return self._applied

    def describe_quorum(self, now_ms: int) -> QuorumInfo:
        """DescribeQuorum, answered by the leader: voters (the leader itself with its flushed
        offset, fetched "now") and the observers that fetched in this epoch. Raises
        :class:`NotLeaderError` elsewhere (Kafka answers NOT_LEADER_OR_FOLLOWER)."""
        st = self.state
        if not isinstance(st, Leader):
            raise NotLeaderError(f"node {self.config.node_id} is {self.state_name} in epoch {self.epoch}")
        me = self.config.node_id

        def info(rid: int) -> ReplicaInfo:
            if rid == me:
                return ReplicaInfo(me, self.log.flushed_offset, now_ms)
            r = st.replicas.get(rid, ReplicaState())
            return ReplicaInfo(rid, r.end_offset, r.last_fetch_ms if r.end_offset >= 0 else -1)

        voters = tuple(info(v) for v in sorted(self.config.voters))
        observers = tuple(info(o) for o in sorted(st.replicas) if o not in self.config.voters)
        return QuorumInfo(me, st.epoch, self.log.high_watermark, voters, observers)

    # ------------------------------------------------------------------ driver API
    def handle(self, now_ms: int, sender: int, correlation_id: int, message: RaftMessage) -> list[Outbound]:
        """Handle one arriving request or response; return what to send."""
        out: list[Outbound] = []
        if isinstance(
            message,
            VoteRequest
            | BeginQuorumEpochRequest
            | EndQuorumEpochRequest
            | FetchRequest
            | FetchSnapshotRequest,
        ):
            response = self._handle_request(now_ms, sender, correlation_id, message)
            if response is not None:
                out.append(Outbound(sender, correlation_id, response))
        else:
            expected = self._inflight.get(sender)
            if expected is None or expected[0] != correlation_id:
                return self._drive(now_ms, out)  # late or duplicate response
            del self._inflight[sender]
            self._handle_response(now_ms, sender, message)
        return self._drive(now_ms, out)

    def poll(self, now_ms: int) -> list[Outbound]:
        """Run due timers and send what is due."""
        return self._drive(now_ms, [])

    def next_deadline(self) -> int:
        """The time at which :meth:`poll` has something to do (it may be called earlier)."""
        cands: list[int] = []
        if self._wake:
            return -1
        st = self.state
        if isinstance(st, Unattached | Voted):
            if st.election_deadline is not None:
                cands.append(st.election_deadline)
        elif isinstance(st, Candidate):
            cands.append(st.backoff_until if st.backoff_until is not None else st.election_deadline)
        elif isinstance(st, Follower):
            cands.append(st.fetch_deadline)
        elif isinstance(st, Resigned):
            cands.append(st.election_deadline)
        elif isinstance(st, Leader):
            cands.append(self._check_quorum_deadline(st))
        if isinstance(st, Unattached) and not self.config.is_voter:
            cands.append(self._discovery_at)
        if self._flush_deadline is not None:
            cands.append(self._flush_deadline)
        cands.extend(p.deadline for p in self._parked.values())
        cands.extend(expires for _, expires in self._inflight.values())
        for dest in self._wanted_destinations():
            if dest not in self._inflight:
                cands.append(self._retry_at.get(dest, -1))
        return min(cands) if cands else 2**62

    def append(self, now_ms: int, records: list[bytes]) -> int:
        """Append one batch as the leader; returns the offset of its last record. It is
        committed once the high watermark passes it. Raises :class:`NotLeaderError`."""
        st = self.state
        if not isinstance(st, Leader):
            raise NotLeaderError(f"node {self.config.node_id} is {self.state_name} in epoch {self.epoch}")
        info = self.log.append_as_leader(records, st.epoch, now_ms)
        if self._flush_deadline is None:
            self._flush_deadline = now_ms + self.config.append_linger_ms
        self._wake = True
        return info.last_offset

    def resign(self, now_ms: int) -> None:
        """Graceful resignation of the leader (EndQuorumEpoch to the voters)."""
        st = self.state
        if isinstance(st, Leader):
            self._become_resigned(now_ms, st)

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """Store a snapshot of the state at ``snapshot_id`` (a committed batch boundary the
        listener applied; its epoch is that batch's) and drop the log before it."""
        if not self.log.start_offset < snapshot_id.offset <= min(self._applied, self.log.high_watermark):
            raise ValueError(f"snapshot {snapshot_id} is not in the committed, applied log")
        end = self.log.end_offset_for_epoch(snapshot_id.epoch)
        before = self.log.end_offset_for_epoch(snapshot_id.epoch - 1)
        if (
            end.epoch != snapshot_id.epoch
            or end.offset < snapshot_id.offset
            or before.offset >= snapshot_id.offset
        ):
            raise ValueError(f"snapshot {snapshot_id}: the log has another epoch at that offset")
        self.log.create_snapshot(snapshot_id, data)
        self.log.delete_before_snapshot(snapshot_id)

    # ------------------------------------------------------------------ transitions
    def _election_deadline(self, now_ms: int) -> int:
        t = self.config.election_timeout_ms
        return now_ms + t + self.rng.randrange(t)

    def _persist(self, state: ElectionState) -> None:
        if state != self._stored:
            self.store.write(state)
            self._stored = state

    def _set_state(self, state: State) -> None:
        if state.epoch < self.state.epoch:
            raise RaftStateError(f"epoch going back from {self.state.epoch} to {state.epoch}")
        self.state = state
        self._wake = True  # parked fetches are answered by the new state
        # Requests of the old state are moot (Kafka's RequestManager.resetAll): their answers
        # will be ignored, and the new state's requests go out at once.
        self._inflight.clear()
        self._retry_at.clear()
        self._notify_leader()

    def _notify_leader(self) -> None:
        st = self.state
        if isinstance(st, Leader) and self._applied < st.epoch_start_offset:
            # Kafka tells a new leader's listener only once it has applied everything before its
            # epoch: an active controller then acts on the whole committed history.
            return
        current = LeaderAndEpoch(self.leader_id, self.epoch)
        if current != self._notified:
            self._notified = current
            self.listener.handle_leader_change(current)

    def _to_unattached(self, now_ms: int, epoch: int) -> None:
        self._persist(ElectionState(epoch))
        st = self.state
        deadline: int | None
        if not self.config.is_voter:
            deadline = None
        elif isinstance(st, Unattached | Voted | Candidate) and st.election_deadline is not None:
            # Kafka keeps the running election timer: a stream of Vote requests that bump the
            # epoch (a candidate whose log is behind) must not keep everyone from standing.
            deadline = st.election_deadline
        else:
            deadline = self._election_deadline(now_ms)
        self._set_state(Unattached(epoch, deadline))

    def _to_voted(self, now_ms: int, epoch: int, candidate: int) -> None:
        self._persist(ElectionState(epoch, None, candidate))
        self._set_state(Voted(epoch, candidate, self._election_deadline(now_ms)))

    def _to_follower(self, now_ms: int, epoch: int, leader: int) -> None:
        if leader == self.config.node_id:
            raise RaftStateError(f"told that this node leads epoch {epoch}")
        st = self.state
        if st.epoch == epoch and isinstance(st, Leader | Resigned):
            raise RaftStateError(f"node {leader} claims epoch {epoch} this node leads")
        if st.epoch == epoch and isinstance(st, Follower) and st.leader_id != leader:
            raise RaftStateError(f"two leaders in epoch {epoch}: {st.leader_id} and {leader}")
        voted = self._stored.voted_id if self._stored.epoch == epoch else None
        self._persist(ElectionState(epoch, leader, voted))
        self._set_state(Follower(epoch, leader, now_ms + self.config.fetch_timeout_ms))

    def _to_candidate(self, now_ms: int, retries: int = 0) -> None:
        me = self.config.node_id
        epoch = self.epoch + 1
        self._persist(ElectionState(epoch, None, me))
        self._set_state(Candidate(epoch, self._election_deadline(now_ms), retries, {me}))
        self._maybe_win(now_ms)

    def _maybe_win(self, now_ms: int) -> None:
        st = self.state
        if isinstance(st, Candidate) and len(st.granted & self.config.voters) >= self.config.majority:
            self._become_leader(now_ms, st)

    def _become_leader(self, now_ms: int, cand: Candidate) -> None:
        me = self.config.node_id
        self._persist(ElectionState(cand.epoch, me, me))
        start = self.log.end_offset
        replicas = {v: ReplicaState(last_fetch_ms=now_ms) for v in self.config.voters if v != me}
        self._set_state(Leader(cand.epoch, start, now_ms, replicas))
        message = LeaderChangeMessage(
            version=i16(0),
            leader_id=BrokerId(me),
            voters=tuple(Voter(voter_id=i32(v)) for v in sorted(self.config.voters)),
            granting_voters=tuple(Voter(voter_id=i32(v)) for v in sorted(cand.granted)),
        )
        buf = io.BytesIO()
        entity_writer(LeaderChangeMessage)(buf, message)
        key = i16(0).to_bytes(2, "big") + CONTROL_LEADER_CHANGE.to_bytes(2, "big")
        batch = build_batch(
            [(key, buf.getvalue(), [], now_ms)], control=True, partition_leader_epoch=cand.epoch
        )
        self.log.append_control_as_leader(batch, cand.epoch)
        if self._flush_deadline is None:
            self._flush_deadline = now_ms + self.config.append_linger_ms

    def _become_resigned(self, now_ms: int, st: Leader) -> None:
        order = sorted(
            (v for v in self.config.voters if v != self.config.node_id),
            key=lambda v: (-st.replicas[v].end_offset, v),
        )
        self._set_state(Resigned(st.epoch, self._election_deadline(now_ms), tuple(order)))

    def _maybe_transition(self, now_ms: int, leader_id: int, epoch: int) -> bool:
        """React to a (leader, epoch) some peer reported. True if the state changed."""
        st = self.state
        if epoch > st.epoch:
            if leader_id != NO_LEADER and leader_id != self.config.node_id:
                self._to_follower(now_ms, epoch, leader_id)
            else:
                self._to_unattached(now_ms, epoch)
            return True
        if (
            epoch == st.epoch
            and leader_id not in (NO_LEADER, self.config.node_id)
            and isinstance(st, Unattached | Voted | Candidate)
        ):
            self._to_follower(now_ms, epoch, leader_id)
            return True
        return False

    def _current_leader(self) -> LeaderIdAndEpoch:
        leader = self.leader_id
        return LeaderIdAndEpoch(NO_LEADER if leader is None else leader, self.epoch)

    # ------------------------------------------------------------------ requests
    def _handle_request(
        self, now_ms: int, sender: int, correlation_id: int, req: RaftMessage
    ) -> RaftMessage | None:
        cluster_id = getattr(req, "cluster_id", None)
        if (
            cluster_id is not None
            and self.config.cluster_id is not None
            and cluster_id != self.config.cluster_id
        ):
            return self._error_response(req, Errors.INCONSISTENT_CLUSTER_ID)
        if isinstance(req, VoteRequest):
            return self._handle_vote(now_ms, req)
        if isinstance(req, BeginQuorumEpochRequest):
            return self._handle_begin_epoch(now_ms, req)
        if isinstance(req, EndQuorumEpochRequest):
            return self._handle_end_epoch(now_ms, req)
        if isinstance(req, FetchRequest):
            return self._handle_fetch(now_ms, sender, correlation_id, req, may_park=True)
        if isinstance(req, FetchSnapshotRequest):
            return self._handle_fetch_snapshot(now_ms, sender, req)
        raise TypeError(f"not a request: {req!r}")

    def _error_response(self, req: RaftMessage, error: Errors) -> RaftMessage:
        cur = self._current_leader()
        if isinstance(req, VoteRequest):
            return VoteResponse(error, cur.leader_id, cur.leader_epoch, False)
        if isinstance(req, BeginQuorumEpochRequest):
            return BeginQuorumEpochResponse(error, cur.leader_id, cur.leader_epoch)
        if isinstance(req, EndQuorumEpochRequest):
            return EndQuorumEpochResponse(error, cur.leader_id, cur.leader_epoch)
        if isinstance(req, FetchSnapshotRequest):
            return FetchSnapshotResponse(error, req.snapshot_id, cur)
        return FetchResponse(error, current_leader=cur)

    def _vote_response(self, error: Errors, granted: bool) -> VoteResponse:
        cur = self._current_leader()
        return VoteResponse(error, cur.leader_id, cur.leader_epoch, granted)

    def _handle_vote(self, now_ms: int, req: VoteRequest) -> VoteResponse:
        if not self.config.is_voter or req.candidate_id not in self.config.voters:
            return self._vote_response(Errors.INCONSISTENT_VOTER_SET, False)
        if req.candidate_epoch < self.epoch:
            return self._vote_response(Errors.FENCED_LEADER_EPOCH, False)
        if req.candidate_epoch > self.epoch:
            self._to_unattached(now_ms, req.candidate_epoch)
        st = self.state
        log_ok = (req.last_offset_epoch, req.last_offset) >= (
            self.log.last_fetched_epoch(),
            self.log.end_offset,
        )
        if isinstance(st, Unattached):
            granted = log_ok
            if granted:
                self._to_voted(now_ms, st.epoch, req.candidate_id)
        elif isinstance(st, Voted):
            granted = st.voted_id == req.candidate_id and log_ok
        else:
            granted = isinstance(st, Candidate) and req.candidate_id == self.config.node_id
        return self._vote_response(Errors.NONE, granted)

    def _handle_begin_epoch(self, now_ms: int, req: BeginQuorumEpochRequest) -> BeginQuorumEpochResponse:
        if req.leader_epoch < self.epoch:
            cur = self._current_leader()
            return BeginQuorumEpochResponse(Errors.FENCED_LEADER_EPOCH, cur.leader_id, cur.leader_epoch)
        st = self.state
        if not (isinstance(st, Follower) and st.epoch == req.leader_epoch and st.leader_id == req.leader_id):
            self._to_follower(now_ms, req.leader_epoch, req.leader_id)
        return BeginQuorumEpochResponse(Errors.NONE, req.leader_id, req.leader_epoch)

    def _handle_end_epoch(self, now_ms: int, req: EndQuorumEpochRequest) -> EndQuorumEpochResponse:
        if req.leader_epoch < self.epoch:
            cur = self._current_leader()
            return EndQuorumEpochResponse(Errors.FENCED_LEADER_EPOCH, cur.leader_id, cur.leader_epoch)
        if req.leader_epoch > self.epoch:
            self._to_follower(now_ms, req.leader_epoch, req.leader_id)
        st = self.state
        if isinstance(st, Follower) and st.leader_id == req.leader_id and self.config.is_voter:
            succ = req.preferred_successors
            pos = succ.index(self.config.node_id) if self.config.node_id in succ else len(succ)
            backoff = (
                0
                if pos == 0
                else min(self.config.election_backoff_max_ms, self.config.retry_backoff_ms * (2**pos))
                + self.rng.randrange(self.config.retry_backoff_ms)
            )
            st.fetch_deadline = min(st.fetch_deadline, now_ms + backoff)
        cur = self._current_leader()
        return EndQuorumEpochResponse(Errors.NONE, cur.leader_id, cur.leader_epoch)

    def _fetch_error(self, error: Errors) -> FetchResponse:
        return FetchResponse(error, current_leader=self._current_leader())

    def _handle_fetch(
        self, now_ms: int, sender: int, correlation_id: int, req: FetchRequest, may_park: bool
    ) -> FetchResponse | None:
        if req.current_leader_epoch < self.epoch:
            return self._fetch_error(Errors.FENCED_LEADER_EPOCH)
        if req.current_leader_epoch > self.epoch:
            return self._fetch_error(Errors.UNKNOWN_LEADER_EPOCH)
        st = self.state
        if not isinstance(st, Leader):
            return self._fetch_error(Errors.NOT_LEADER_OR_FOLLOWER)
        log = self.log
        current = self._current_leader()
        replica = st.replicas.setdefault(sender, ReplicaState())
        replica.last_fetch_ms = now_ms  # any fetch counts for check-quorum
        st.begin_acked.add(sender)
        snap = log.latest_snapshot_id()
        if snap is not None and (
            req.fetch_offset < log.start_offset
            or (req.fetch_offset == log.start_offset and req.last_fetched_epoch != snap.epoch)
            or req.last_fetched_epoch < snap.epoch
        ):
            return FetchResponse(
                Errors.NONE,
                log.high_watermark,
                log.start_offset,
                current_leader=current,
                snapshot_id=SnapshotId(snap.offset, snap.epoch),
            )
        if req.fetch_offset < log.start_offset:
            return self._fetch_error(Errors.OFFSET_OUT_OF_RANGE)
        end = log.end_offset_for_epoch(req.last_fetched_epoch)
        if end.epoch != req.last_fetched_epoch or end.offset < req.fetch_offset:
            return FetchResponse(
                Errors.NONE,
                log.high_watermark,
                log.start_offset,
                current_leader=current,
                diverging_epoch=EpochEndOffset(end.epoch, end.offset),
            )
        replica.end_offset = req.fetch_offset
        moved = self._update_leader_hw(st)
        if req.fetch_offset >= log.end_offset and not moved and may_park and req.max_wait_ms > 0:
            self._parked[sender] = _Parked(correlation_id, req, now_ms + req.max_wait_ms)
            return None
        records = (
            log.read(req.fetch_offset, self.config.fetch_max_bytes)
            if req.fetch_offset < log.end_offset
            else b""
        )
        return FetchResponse(
            Errors.NONE, log.high_watermark, log.start_offset, current_leader=current, records=records
        )

    def _handle_fetch_snapshot(
        self, now_ms: int, sender: int, req: FetchSnapshotRequest
    ) -> FetchSnapshotResponse:
        def error(code: Errors) -> FetchSnapshotResponse:
            return FetchSnapshotResponse(code, req.snapshot_id, self._current_leader())

        if req.current_leader_epoch < self.epoch:
            return error(Errors.FENCED_LEADER_EPOCH)
        if req.current_leader_epoch > self.epoch:
            return error(Errors.UNKNOWN_LEADER_EPOCH)
        st = self.state
        if not isinstance(st, Leader):
            return error(Errors.NOT_LEADER_OR_FOLLOWER)
        st.replicas.setdefault(sender, ReplicaState()).last_fetch_ms = now_ms
        data = self.log.read_snapshot(OffsetAndEpoch(req.snapshot_id.end_offset, req.snapshot_id.epoch))
        if data is None:
            return error(Errors.SNAPSHOT_NOT_FOUND)
        if not 0 <= req.position <= len(data):
            return error(Errors.POSITION_OUT_OF_RANGE)
        size = min(req.max_bytes, self.config.snapshot_chunk_bytes)
        chunk = data[req.position : req.position + size]
        return FetchSnapshotResponse(
            Errors.NONE, req.snapshot_id, self._current_leader(), len(data), req.position, chunk
        )

    # ------------------------------------------------------------------ responses
    def _handle_response(self, now_ms: int, sender: int, resp: RaftMessage) -> None:
        if getattr(resp, "error_code", Errors.NONE) == Errors.INCONSISTENT_CLUSTER_ID:
            # a node of another cluster: its epoch and leader mean nothing here (Kafka answers
            # this as a top-level error, which never moves the receiver's epoch); retry later
            self._retry_at[sender] = now_ms + self.config.retry_backoff_ms
            return
        if isinstance(resp, VoteResponse):
            self._handle_vote_response(now_ms, sender, resp)
        elif isinstance(resp, BeginQuorumEpochResponse):
            if not self._maybe_transition(now_ms, resp.leader_id, resp.leader_epoch):
                st = self.state
                if (
                    isinstance(st, Leader)
                    and resp.error_code == Errors.NONE
                    and resp.leader_epoch == st.epoch
                ):
                    st.begin_acked.add(sender)
                else:
                    self._retry_at[sender] = now_ms + self.config.retry_backoff_ms
        elif isinstance(resp, EndQuorumEpochResponse):
            if not self._maybe_transition(now_ms, resp.leader_id, resp.leader_epoch):
                st = self.state
                if isinstance(st, Resigned) and resp.error_code == Errors.NONE:
                    st.end_acked.add(sender)
                else:
                    self._retry_at[sender] = now_ms + self.config.retry_backoff_ms
        elif isinstance(resp, FetchResponse):
            self._handle_fetch_response(now_ms, sender, resp)
        elif isinstance(resp, FetchSnapshotResponse):
            self._handle_fetch_snapshot_response(now_ms, sender, resp)

    def _handle_vote_response(self, now_ms: int, sender: int, resp: VoteResponse) -> None:
        if self._maybe_transition(now_ms, resp.leader_id, resp.leader_epoch):
            return
        st = self.state
        if not isinstance(st, Candidate) or resp.leader_epoch != st.epoch:
            return
        if resp.error_code != Errors.NONE:
            self._retry_at[sender] = now_ms + self.config.retry_backoff_ms
            return
        if resp.vote_granted:
            st.granted.add(sender)
            self._maybe_win(now_ms)
        else:
            st.rejected.add(sender)
            if len(st.rejected & self.config.voters) >= self.config.majority and st.backoff_until is None:
                st.backoff_until = now_ms + self._backoff(st.retries)

    def _backoff(self, retries: int) -> int:
        cap = min(
            self.config.election_backoff_max_ms, self.config.retry_backoff_ms * 2 ** min(retries + 1, 20)
        )
        return self.rng.randrange(cap + 1)

    def _handle_fetch_response(self, now_ms: int, sender: int, resp: FetchResponse) -> None:
        cur = resp.current_leader
        if resp.error_code != Errors.NONE:
            changed = self._maybe_transition(now_ms, cur.leader_id, cur.leader_epoch)
            if not changed:
                self._retry_at[sender] = now_ms + self.config.retry_backoff_ms
            return
        self._maybe_transition(now_ms, cur.leader_id, cur.leader_epoch)  # e.g. an observer finds its leader
        st = self.state
        if not (isinstance(st, Follower) and st.leader_id == sender and st.epoch == cur.leader_epoch):
            return
        st.fetch_deadline = now_ms + self.config.fetch_timeout_ms
        log = self.log
        if resp.diverging_epoch is not None:
            div = resp.diverging_epoch
            mine = log.end_offset_for_epoch(div.epoch)
            target = min(mine.offset, div.end_offset) if mine.offset >= 0 else div.end_offset
            log.truncate_to(max(target, log.start_offset, 0))
            return
        if resp.snapshot_id is not None:
            st.snapshot = _SnapshotDownload(resp.snapshot_id)
            return
        if resp.records:
            log.append_as_follower(resp.records)
            log.flush()  # a follower acknowledges (fetches from its end) only what it flushed
        self._follower_hw(resp.high_watermark)

    def _follower_hw(self, leader_hw: int) -> None:
        hw = min(leader_hw, self.log.end_offset)
        if hw > self.log.high_watermark:
            self.log.update_high_watermark(hw)
            self._deliver()

    def _handle_fetch_snapshot_response(self, now_ms: int, sender: int, resp: FetchSnapshotResponse) -> None:
        st = self.state
        if resp.error_code != Errors.NONE:
            if not self._maybe_transition(
                now_ms, resp.current_leader.leader_id, resp.current_leader.leader_epoch
            ):
                self._retry_at[sender] = now_ms + self.config.retry_backoff_ms
                if isinstance(st, Follower) and resp.error_code in (
                    Errors.SNAPSHOT_NOT_FOUND,
                    Errors.POSITION_OUT_OF_RANGE,
                ):
                    st.snapshot = None  # fetch again: the leader names its current snapshot
            return
        if not (isinstance(st, Follower) and st.leader_id == sender and st.snapshot is not None):
            return
        dl = st.snapshot
        if resp.snapshot_id != dl.snapshot_id or resp.position != len(dl.data):
            return
        st.fetch_deadline = now_ms + self.config.fetch_timeout_ms
        dl.data += resp.unaligned_records
        if len(dl.data) < resp.size:
            return
        st.snapshot = None
        snap = OffsetAndEpoch(dl.snapshot_id.end_offset, dl.snapshot_id.epoch)
        data = bytes(dl.data)
        self.log.create_snapshot(snap, data)
        if not self.log.truncate_to_latest_snapshot():
            # the leader sends a snapshot id only to a log behind it (by offset or by epoch)
            raise RaftStateError(f"snapshot {snap} is not ahead of the log (end {self.log.end_offset})")
        self.listener.handle_load_snapshot(snap, data)
        self._applied = snap.offset

    # ------------------------------------------------------------------ leader bookkeeping
    def _update_leader_hw(self, st: Leader) -> bool:
        me = self.config.node_id
        offsets = sorted(
            (self.log.flushed_offset if v == me else st.replicas[v].end_offset for v in self.config.voters),
            reverse=True,
        )
        candidate = min(offsets[self.config.majority - 1], self.log.flushed_offset)
        if candidate > st.epoch_start_offset and candidate > self.log.high_watermark:
            self.log.update_high_watermark(candidate)
            self._wake = True
            self._deliver()
            return True
        return False

    def _check_quorum_deadline(self, st: Leader) -> int:
        """When check-quorum fails unless more fetches come: 1.5 x fetch timeout after the
        last fetch of the majority's least recent member."""
        others = sorted(
            (st.replicas[v].last_fetch_ms for v in self.config.voters if v != self.config.node_id),
            reverse=True,
        )
        needed = self.config.majority - 1
        if needed == 0:
            return 2**62
        return others[needed - 1] + self.config.fetch_timeout_ms * 3 // 2

    def _deliver(self) -> None:
        hw = self.log.high_watermark
        while self._applied < hw:
            data = self.log.read(self._applied, self.config.fetch_max_bytes)
            batches: list[CommittedBatch] = []
            for pos, h in iter_batches(data):
                if h.next_offset > hw:
                    break
                records = (
                    () if h.is_control else tuple(r.value or b"" for r in decode_batch_records(data, pos, h))
                )
                batches.append(
                    CommittedBatch(
                        h.base_offset,
                        h.last_offset,
                        h.partition_leader_epoch,
                        h.max_timestamp,
                        records,
                        h.is_control,
                    )
                )
            if not batches:
                return
            self.listener.handle_commit(batches)
            self._applied = batches[-1].last_offset + 1

    # ------------------------------------------------------------------ the timer/send loop
    def _wanted_destinations(self) -> list[int]:
        st = self.state
        me = self.config.node_id
        if isinstance(st, Candidate) and st.backoff_until is None:
            return [v for v in sorted(self.config.voters) if v != me and v not in st.granted | st.rejected]
        if isinstance(st, Leader):
            return [v for v in sorted(self.config.voters) if v != me and v not in st.begin_acked]
        if isinstance(st, Follower):
            return [st.leader_id]
        if isinstance(st, Resigned):
            return [v for v in sorted(self.config.voters) if v != me and v not in st.end_acked]
        return []

    def _send(self, now_ms: int, out: list[Outbound], dest: int, message: RaftMessage) -> None:
        cid = self._next_correlation
        self._next_correlation += 1
        timeout = self.config.request_timeout_ms
        if isinstance(message, FetchRequest):
            # A long-polled fetch that has not come back by its wait plus a margin is lost: retry
            # well before the fetch timeout, or one lost answer would start an election.
            timeout = min(timeout, message.max_wait_ms + self.config.request_timeout_ms // 4)
        self._inflight[dest] = (cid, now_ms + timeout)
        out.append(Outbound(dest, cid, message))

    def _drive(self, now_ms: int, out: list[Outbound]) -> list[Outbound]:
        cfg = self.config
        for dest, (_cid, expires) in list(self._inflight.items()):
            if expires <= now_ms:
                del self._inflight[dest]
                self._retry_at[dest] = now_ms + cfg.retry_backoff_ms
        if self._flush_deadline is not None and self._flush_deadline <= now_ms:
            self._flush_deadline = None
            self.log.flush()
            if isinstance(self.state, Leader):
                self._update_leader_hw(self.state)
        self._run_timers(now_ms)
        self._complete_parked(now_ms, out)
        self._send_due(now_ms, out)
        self._notify_leader()
        return out

    def _run_timers(self, now_ms: int) -> None:
        st = self.state
        voter = self.config.is_voter
        if isinstance(st, Unattached | Voted) and voter:
            if self.config.voters == {self.config.node_id} or (
                st.election_deadline is not None and st.election_deadline <= now_ms
            ):
                self._to_candidate(now_ms)
        elif isinstance(st, Candidate):
            if st.backoff_until is not None:
                if st.backoff_until <= now_ms:
                    self._to_candidate(now_ms, st.retries + 1)
            elif st.election_deadline <= now_ms:
                st.backoff_until = now_ms + self._backoff(st.retries)
            else:
                self._maybe_win(now_ms)
        elif isinstance(st, Follower) and st.fetch_deadline <= now_ms:
            if voter:
                self._to_candidate(now_ms)
            else:
                self._to_unattached(now_ms, st.epoch)
        elif isinstance(st, Resigned) and (
            st.election_deadline <= now_ms or self.config.voters == {self.config.node_id}
        ):
            self._to_candidate(now_ms)  # a quorum of one has nobody to wait for
        elif isinstance(st, Leader) and self._check_quorum_deadline(st) <= now_ms:
            self._become_resigned(now_ms, st)

    def _complete_parked(self, now_ms: int, out: list[Outbound]) -> None:
        wake, self._wake = self._wake, False
        for sender, parked in list(self._parked.items()):
            if wake or parked.deadline <= now_ms:
                del self._parked[sender]
                resp = self._handle_fetch(
                    now_ms, sender, parked.correlation_id, parked.request, may_park=False
                )
                if resp is not None:
                    out.append(Outbound(sender, parked.correlation_id, resp))
        self._wake = False

    def _can_send(self, now_ms: int, dest: int) -> bool:
        return dest not in self._inflight and self._retry_at.get(dest, -1) <= now_ms

    def _send_due(self, now_ms: int, out: list[Outbound]) -> None:
        st = self.state
        me = self.config.node_id
        for dest in self._wanted_destinations():
            if not self._can_send(now_ms, dest):
                continue
            msg: RaftMessage
            if isinstance(st, Candidate):
                msg = VoteRequest(
                    st.epoch, me, self.log.last_fetched_epoch(), self.log.end_offset, self.config.cluster_id
                )
            elif isinstance(st, Leader):
                msg = BeginQuorumEpochRequest(me, st.epoch, self.config.cluster_id)
            elif isinstance(st, Resigned):
                msg = EndQuorumEpochRequest(me, st.epoch, st.preferred_successors, self.config.cluster_id)
            elif isinstance(st, Follower):
                if st.snapshot is not None:
                    dl = st.snapshot
                    msg = FetchSnapshotRequest(
                        me,
                        st.epoch,
                        dl.snapshot_id,
                        len(dl.data),
                        self.config.snapshot_chunk_bytes,
                        self.config.cluster_id,
                    )
                else:
                    msg = FetchRequest(
                        me,
                        st.epoch,
                        self.log.end_offset,
                        self.log.last_fetched_epoch(),
                        self.log.start_offset,
                        self.config.fetch_max_bytes,
                        self.config.fetch_max_wait_ms,
                        self.config.cluster_id,
                    )
            else:
                continue
            self._send(now_ms, out, dest, msg)
        if isinstance(st, Unattached) and not self.config.is_voter and self._discovery_at <= now_ms:
            if not self._inflight:
                dest = self.rng.choice(sorted(self.config.voters))
                self._send(
                    now_ms,
                    out,
                    dest,
                    FetchRequest(
                        me,
                        st.epoch,
                        self.log.end_offset,
                        self.log.last_fetched_epoch(),
                        self.log.start_offset,
                        self.config.fetch_max_bytes,
                        0,
                        self.config.cluster_id,
                    ),
                )
            self._discovery_at = now_ms + self.config.observer_discovery_ms
