"""A deterministic simulation of a KRaft quorum (modelled on Kafka's ``RaftEventSimulationTest``).

One thread, one seeded ``random.Random`` for the world and one per node. Time is a number the
scheduler moves: the next event is the earliest of the message deliveries queued in the network
and the nodes' ``next_deadline()``. The network drops, delays (so reorders) and partitions
messages; a killed node loses everything its log had not flushed (``MemoryRaftLog.crash``; with
``DISK_ROOT`` set, nodes use the on-disk MetadataLog instead) and its
in-memory state, and restarts from its log, snapshot and ``quorum-state``.

After every event :meth:`Cluster.check` verifies the invariants:

* at most one leader per epoch (over the whole run);
* each node's epoch never decreases (restarts included: it is persisted);
* each live node's high watermark never decreases;
* committed batches never change: the global committed prefix is built from every node's log
  below its high watermark, every node's log below its high watermark must equal it, and a node
  that becomes leader must hold all of it (Leader Completeness);
* every node's applied state (a hash chain over committed batches, built by the listener, or
  loaded from a snapshot) is equal at equal offsets, and never ahead of the high watermark.

A broken invariant raises :class:`InvariantViolation` naming the seed and the event number.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strom.clock import ManualClock
from strom.durable_file import fsync_dir
from strom.protocol.records import build_batch, decode_records, iter_batches
from strom.raft.log import OffsetAndEpoch, QuorumStateStore
from strom.raft.messages import Outbound, RaftMessage
from strom.raft.metadata_log import MetadataLog
from strom.raft.quorum import CommittedBatch, LeaderAndEpoch, NotLeaderError, RaftConfig, RaftNode
from strom.raft.quorum_state_file import FileQuorumStateStore
from strom.testing.raft import MemoryQuorumStateStore, MemoryRaftLog


class InvariantViolation(AssertionError):
    pass


@dataclass
class Totals:
    """Over every cluster of this process that ran to a settled end (printed after pytest)."""

    runs: int = 0
    clusters: int = 0  # started, settled or not
    events: int = 0
    checks: int = 0
    messages: int = 0
    kills: int = 0
    unflushed_lost: int = 0
    elections: int = 0


TOTALS = Totals()


class HashChainListener:
    """The replicated state machine: a hash chain over committed batches."""

    def __init__(self, cluster: Cluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.offset = 0
        self.epoch = 0
        self.chain = b"\0" * 32
        self.snapshots_loaded = 0
        self.leader = LeaderAndEpoch(None, 0)

    def handle_commit(self, batches: list[CommittedBatch]) -> None:
        for b in batches:
            if b.base_offset != self.offset:
                raise InvariantViolation(
                    f"node {self.node_id}: commit at {b.base_offset}, applied up to {self.offset}"
                )
            h = hashlib.sha256(self.chain)
            h.update(b.base_offset.to_bytes(8, "big") + b.epoch.to_bytes(4, "big"))
            for r in b.records:
                h.update(len(r).to_bytes(4, "big") + r)
            self.chain = h.digest()
            self.offset = b.last_offset + 1
            self.epoch = b.epoch
            self.cluster.applied(self.node_id, self.offset, self.chain)

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        rec = next(decode_records(data))
        self.chain = rec.value or b""
        self.offset = snapshot_id.offset
        self.epoch = snapshot_id.epoch
        self.snapshots_loaded += 1
        self.cluster.applied(self.node_id, self.offset, self.chain)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader = leader
        raft = self.cluster.nodes[self.node_id].raft
        if leader.leader_id == self.node_id and raft is not None:
            start = getattr(raft.state, "epoch_start_offset", None)
            if start is None or self.offset < start:
                self.cluster.fail(f"node {self.node_id} told it leads before applying up to {start}")
            self.cluster.stats.leader_notices += 1

    def snapshot_data(self) -> bytes:
        return build_batch([(None, self.chain, [], 0)])


# Where nodes keep their logs: None for memory (MemoryRaftLog, a kill drops the unflushed tail),
# or a directory for the on-disk MetadataLog + FileQuorumStateStore (a kill closes the files
# without flushing and reopens them, as kill -9 and a restart would: the page cache keeps what
# was written, and the log recovers from its files).
DISK_ROOT: Path | None = None


class MemoryStorage:
    def __init__(self) -> None:
        self.log: Any = MemoryRaftLog()
        self.store: QuorumStateStore = MemoryQuorumStateStore()

    def kill(self) -> None:
        self.log.crash()

    def reopen(self) -> None:
        pass

    def batches_from(self, offset: int) -> list[tuple[int, int, int, bytes]]:
        result: list[tuple[int, int, int, bytes]] = self.log.batches_from(offset)
        return result


class DiskStorage:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        for d in (directory, directory.parent, directory.parent.parent):  # as `storage format` would
            fsync_dir(d)
        self.log: Any = MetadataLog.open(directory, clock=ManualClock(0))
        self.store: QuorumStateStore = FileQuorumStateStore(directory)
        self.closed = False

    def kill(self) -> None:
        self.log.close_without_flush()
        self.closed = True

    def reopen(self) -> None:
        """Before the node starts again (after a power cut, if the test makes one)."""
        if self.closed:
            self.log = MetadataLog.open(self.directory, clock=ManualClock(0))
            self.closed = False

    def batches_from(self, offset: int) -> list[tuple[int, int, int, bytes]]:
        out: list[tuple[int, int, int, bytes]] = []
        pos = max(offset, self.log.start_offset)
        while pos < self.log.end_offset:
            data = self.log.read(pos, 1 << 20)
            if not data:
                break
            for p, h in iter_batches(data):
                if h.next_offset > offset:
                    out.append(
                        (h.base_offset, h.next_offset, h.partition_leader_epoch, bytes(data[p : p + h.size]))
                    )
                pos = h.next_offset
        return out


@dataclass
class SimNode:
    node_id: int
    config: RaftConfig
    storage: MemoryStorage | DiskStorage
    raft: RaftNode | None = None
    listener: HashChainListener | None = None
    incarnation: int = 0

    @property
    def log(self) -> Any:
        return self.storage.log

    @property
    def store(self) -> QuorumStateStore:
        return self.storage.store


@dataclass
class Stats:
    events: int = 0
    messages: int = 0
    dropped: int = 0
    checks: int = 0
    kills: int = 0
    appends: int = 0
    unflushed_lost: int = 0  # records a kill took from a log's unflushed tail
    leader_notices: int = 0


class Cluster:
    def __init__(
        self,
        seed: int,
        voters: int = 3,
        observers: int = 0,
        drop_rate: float = 0.0,
        duplicate_rate: float = 0.0,
        max_delay_ms: int = 10,
        snapshot_every: int = 0,
        snapshot_chunk_bytes: int = 64,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0
        self.drop_rate = drop_rate
        self.duplicate_rate = duplicate_rate
        self.max_delay_ms = max_delay_ms
        self.snapshot_every = snapshot_every
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.stats = Stats()
        self.groups: dict[int, int] = {}  # node -> partition group; absent: group 0
        voter_ids = frozenset(range(1, voters + 1))
        self.nodes: dict[int, SimNode] = {}
        TOTALS.clusters += 1
        for nid in range(1, voters + observers + 1):
            cfg = RaftConfig(nid, voter_ids, snapshot_chunk_bytes=snapshot_chunk_bytes)
            storage = (
                MemoryStorage()
                if DISK_ROOT is None
                else DiskStorage(DISK_ROOT / f"run-{TOTALS.clusters}" / f"node-{nid}")
            )
            self.nodes[nid] = SimNode(nid, cfg, storage)
        # invariant state
        self.epoch_leader: dict[int, int] = {}
        self.max_epoch: dict[int, int] = {}
        self.last_hw: dict[int, int] = {}
        self.checked_to: dict[int, int] = {}
        self.committed: dict[int, tuple[int, bytes]] = {}  # base offset -> (next offset, batch bytes)
        self.committed_end = 0
        self.applied_hash: dict[int, bytes] = {}
        self.leaders_checked: set[tuple[int, int]] = set()
        self.append_counter = 0
        self._request_life: dict[tuple[int, int, int], int] = {}
        self._deadlines: dict[int, int] = {}  # cached next_deadline() per node
        for nid in self.nodes:
            self.start(nid)
        self._totals_added = False

    # ---------------------------------------------------------------- world
    def fail(self, what: str) -> None:
        raise InvariantViolation(f"seed {self.seed}, event {self.stats.events}, t={self.now}: {what}")

    def schedule(self, at: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, action))

    def alive(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.raft is not None]

    def start(self, nid: int) -> None:
        node = self.nodes[nid]
        node.storage.reopen()
        node.incarnation += 1
        node.listener = HashChainListener(self, nid)
        node.raft = RaftNode(
            node.config,
            node.log,
            node.store,
            node.listener,
            random.Random(self.seed * 7919 + nid * 131 + node.incarnation),
            self.now,
        )
        self._deadlines.pop(nid, None)
        self.last_hw[nid] = node.log.high_watermark
        self.checked_to[nid] = node.log.start_offset

    def kill(self, nid: int) -> None:
        node = self.nodes[nid]
        if node.raft is None:
            return
        self.stats.unflushed_lost += node.log.end_offset - node.log.flushed_offset
        node.raft = None
        node.listener = None
        self._deadlines.pop(nid, None)
        node.storage.kill()
        self.stats.kills += 1

    def restart(self, nid: int) -> None:
        if self.nodes[nid].raft is None:
            self.start(nid)

    def resign(self, nid: int) -> None:
        raft = self.nodes[nid].raft
        if raft is not None:
            self._deadlines.pop(nid, None)
            raft.resign(self.now)

    def partition(self, *groups: list[int]) -> None:
        self.groups = {nid: i + 1 for i, g in enumerate(groups) for nid in g}

    def heal(self) -> None:
        self.groups = {}

    def connected(self, a: int, b: int) -> bool:
        return self.groups.get(a, 0) == self.groups.get(b, 0)

    def leaders(self) -> list[SimNode]:
        return [n for n in self.alive() if n.raft is not None and n.raft.is_leader]

    def leader(self) -> SimNode | None:
        ls = self.leaders()
        return max(ls, key=lambda n: n.raft.epoch if n.raft else -1) if ls else None

    # ---------------------------------------------------------------- network
    def send(self, src: int, out: list[Outbound]) -> None:
        for o in out:
            self.stats.messages += 1
            if self.rng.random() < self.drop_rate or not self.connected(src, o.destination):
                self.stats.dropped += 1
                continue
            delay = self.rng.randint(1, self.max_delay_ms)
            if _is_request(o.message):
                inc = self.nodes[src].incarnation  # the requester's life
            else:
                inc = self._request_life.pop((src, o.destination, o.correlation_id), -1)
            deliver = self._deliverer(src, inc, o.destination, o.correlation_id, o.message)
            self.schedule(self.now + delay, deliver)
            if self.rng.random() < self.duplicate_rate:  # the same message again, later
                self.schedule(self.now + delay + self.rng.randint(0, self.max_delay_ms), deliver)

    def _deliverer(self, src: int, inc: int, dst: int, cid: int, msg: RaftMessage) -> Callable[[], None]:
        def deliver() -> None:
            node = self.nodes[dst]
            if node.raft is None or not self.connected(src, dst):
                self.stats.dropped += 1
                return
            if _is_request(msg):
                self._request_life[(dst, src, cid)] = inc
            elif node.incarnation != inc:
                return  # the answer to a request of the node's previous life: that connection is gone
            self._deadlines.pop(dst, None)
            self.send(dst, node.raft.handle(self.now, src, cid, msg))

        return deliver

    # ---------------------------------------------------------------- client
    def client(self, interval_ms: int = 50, until: int | None = None) -> None:
        """Append a record to a leader every ``interval_ms`` (one that believes it leads)."""

        def tick() -> None:
            ls = self.leaders()
            if ls:
                node = self.rng.choice(ls)
                self.append_counter += 1
                assert node.raft is not None
                self._deadlines.pop(node.node_id, None)
                try:
                    node.raft.append(self.now, [f"{self.seed}:{self.append_counter}".encode()])
                    self.stats.appends += 1
                except NotLeaderError:
                    pass
            if until is None or self.now + interval_ms < until:
                self.schedule(self.now + interval_ms, tick)

        self.schedule(self.now + interval_ms, tick)

    # ---------------------------------------------------------------- loop
    def run_for(self, ms: int) -> None:
        self.run_until(self.now + ms)

    def run_until(self, end: int) -> None:
        while True:
            t_q = self._queue[0][0] if self._queue else 2**62
            t_n, node = 2**62, None
            for n in self.alive():
                assert n.raft is not None
                d = self._deadlines.get(n.node_id)
                if d is None:
                    d = self._deadlines[n.node_id] = n.raft.next_deadline()
                if d < t_n:
                    t_n, node = d, n
            t = min(t_q, t_n)
            if t > end:
                self.now = end
                return
            self.now = max(self.now, t)
            if node is not None and t_n <= t_q:
                assert node.raft is not None
                self._deadlines.pop(node.node_id, None)
                self.send(node.node_id, node.raft.poll(self.now))
            else:
                _, _, action = heapq.heappop(self._queue)
                action()
            self.stats.events += 1
            self.check()
            self.maybe_snapshot()

    def maybe_snapshot(self) -> None:
        if not self.snapshot_every:
            return
        for n in self.alive():
            assert n.raft is not None and n.listener is not None
            lst = n.listener
            if lst.offset - n.log.start_offset >= self.snapshot_every and lst.offset <= n.log.high_watermark:
                n.raft.create_snapshot(OffsetAndEpoch(lst.offset, lst.epoch), lst.snapshot_data())

    # ---------------------------------------------------------------- invariants
    def applied(self, nid: int, offset: int, chain: bytes) -> None:
        known = self.applied_hash.setdefault(offset, chain)
        if known != chain:
            self.fail(f"node {nid} applied state at {offset} differs from another node's")
        node = self.nodes[nid]
        if offset > node.log.high_watermark:
            self.fail(f"node {nid} applied {offset} past its high watermark {node.log.high_watermark}")

    def check(self) -> None:
        self.stats.checks += 1
        for n in self.alive():
            raft = n.raft
            assert raft is not None
            nid = n.node_id
            if raft.epoch < self.max_epoch.get(nid, 0):
                self.fail(f"node {nid} epoch went back to {raft.epoch}")
            self.max_epoch[nid] = raft.epoch
            if raft.is_leader:
                prev = self.epoch_leader.setdefault(raft.epoch, nid)
                if prev != nid:
                    self.fail(f"two leaders in epoch {raft.epoch}: {prev} and {nid}")
                if (raft.epoch, nid) not in self.leaders_checked:
                    self.leaders_checked.add((raft.epoch, nid))
                    self.check_leader_completeness(n)
            hw = n.log.high_watermark
            if hw < self.last_hw[nid]:
                self.fail(f"node {nid} high watermark went back from {self.last_hw[nid]} to {hw}")
            self.last_hw[nid] = hw
            if hw > self.checked_to[nid]:
                self.check_log(n, self.checked_to[nid], hw)
                self.checked_to[nid] = hw
        if self.stats.events % 500 == 0:
            self.check_all()

    def check_all(self) -> None:
        for n in self.alive():
            self.check_log(n, n.log.start_offset, n.log.high_watermark)

    def check_leader_completeness(self, n: SimNode) -> None:
        if n.log.end_offset < self.committed_end:
            self.fail(
                f"leader {n.node_id} misses committed data: log ends at {n.log.end_offset}, "
                f"committed up to {self.committed_end}"
            )
        for base, _nxt, _epoch, data in n.storage.batches_from(n.log.start_offset):
            if base >= self.committed_end:
                break
            known = self.committed.get(base)
            if known is None or known[1] != data:
                self.fail(
                    f"leader {n.node_id} of epoch {n.raft.epoch if n.raft else -1} "
                    f"holds another batch at committed offset {base}"
                )

    def check_log(self, n: SimNode, start: int, end: int) -> None:
        """Batches of ``n`` in [start, end) (``end``: its high watermark) against the committed
        prefix; those not yet in it extend it."""
        for base, nxt, _epoch, data in n.storage.batches_from(start):
            if nxt > end:
                break
            known = self.committed.get(base)
            if known is not None:
                if known[1] != data:
                    self.fail(f"node {n.node_id}: committed batch at {base} changed")
            elif base == self.committed_end:
                self.committed[base] = (nxt, data)
                self.committed_end = nxt
            elif base > self.committed_end:
                self.fail(f"node {n.node_id} commits {base} past the committed end {self.committed_end}")
            else:
                self.fail(f"node {n.node_id}: batch at {base} does not align with committed batches")

    def add_totals(self) -> None:
        if not self._totals_added:
            self._totals_added = True
            TOTALS.runs += 1
            TOTALS.events += self.stats.events
            TOTALS.checks += self.stats.checks
            TOTALS.messages += self.stats.messages
            TOTALS.kills += self.stats.kills
            TOTALS.unflushed_lost += self.stats.unflushed_lost
            TOTALS.elections += len(self.epoch_leader)

    # ---------------------------------------------------------------- liveness
    def settle(self, within_ms: int = 20_000) -> None:
        """Heal, restart everyone, and require a leader that commits a new record everywhere."""
        self.heal()
        for nid in self.nodes:
            self.restart(nid)
        deadline = self.now + within_ms
        target = None
        while self.now < deadline:
            self.run_for(100)
            leader = self.leader()
            if leader is None or leader.raft is None:
                continue
            if target is None:
                try:
                    self._deadlines.pop(leader.node_id, None)
                    target = leader.raft.append(self.now, [b"settle"]) + 1
                except NotLeaderError:
                    continue
            if all(n.raft is not None and n.raft.applied_offset >= target for n in self.nodes.values()):
                self.check_all()
                self.add_totals()
                return
            if leader.log.end_offset < target:
                target = None  # the record was lost with a leader change; try again
        states = {
            n.node_id: (n.raft.state_name, n.raft.epoch, n.raft.applied_offset)
            for n in self.nodes.values()
            if n.raft
        }
        self.fail(f"no progress within {within_ms} ms after healing: {states}, target {target}")


def _is_request(msg: RaftMessage) -> bool:
    return type(msg).__name__.endswith("Request")
