"""One hosted partition's replication state (Kafka's ``Partition``): who leads at which epoch,
the ISR, and, on the leader, what each follower has.

Theory of operation
-------------------
* **From the metadata image.** :meth:`Partition.update` takes the partition's registration
  (replicas, ISR, leader, leader epoch, partition epoch). A new leader epoch makes this broker
  the leader or a follower again (:class:`RoleChange`); the same epoch with a newer partition
  epoch only changes the ISR. An older registration is ignored.
* **Follower state on the leader** (Kafka's ``Replica``): each follower's log end offset is the
  fetch offset of its last Fetch; it is *caught up* at a fetch when it reached the leader's log
  end offset, or the log end offset the leader had at its previous fetch (Kafka's
  ``lastCaughtUpTimeMs`` rule), so a follower keeping pace under steady load is never "lagging".
* **High watermark** (leader): the smallest log end offset over the *maximal ISR* — the ISR
  plus a replica whose addition is on its way to the controller (Kafka's
  ``PendingExpandIsr``: counting it early is safe because it already holds everything up to
  the HW), capped by the leader's own cap (its log end offset, or for the coordinators' topics
  what is durable). It only ever moves up.
* **ISR changes** are proposed, never applied locally: :meth:`Partition.isr_to_expand` names a
  follower that caught up (log end offset >= HW and >= the start of the leader's epoch) and
  :meth:`Partition.isr_to_shrink` the followers not caught up for ``replica.lag.time.max.ms``;
  the caller sends AlterPartition and the new ISR comes back in the answer or the image. One
  change is in flight at a time (``pending``).

Pure state over an injected time (``now_ms`` arguments): no I/O, no asyncio.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class RoleChange(enum.Enum):
    NONE = "none"  # same leader epoch: at most the ISR changed
    LEADER = "leader"  # this broker leads from this epoch on
    FOLLOWER = "follower"  # another broker (or none) leads from this epoch on


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower."""

    log_end_offset: int = -1  # -1: not fetched at this leader epoch yet
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = -1  # the leader's log end offset at the follower's previous fetch
    broker_epoch: int = -1
    last_sent_high_watermark: int = -1  # the HW the last answer to this follower carried
    log_start_offset: int = -1  # the follower's, as its last fetch said (-1: not told yet)


@dataclass(slots=True)
class PendingIsr:
    """An AlterPartition on its way: the ISR it asks for and the partition epoch it is based on."""

    isr: tuple[int, ...]
    partition_epoch: int
    sent_ms: int


@dataclass(slots=True)
class Partition:
    topic: str
    partition: int
    node_id: int
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    remote: dict[int, ReplicaState] = field(default_factory=dict)
    pending: PendingIsr | None = None
    leader_epoch_start_offset: int = 0  # the log end offset when this broker became leader

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    def update(self, replicas: tuple[int, ...], isr: tuple[int, ...], leader: int, leader_epoch: int,
               partition_epoch: int, now_ms: int, log_end_offset: int,
               leader_recovery_state: int = 0) -> RoleChange:
        """Apply a registration from the image (or an AlterPartition answer: same leader epoch)."""
        if leader_epoch < self.leader_epoch or (
            leader_epoch == self.leader_epoch and partition_epoch <= self.partition_epoch
        ):
            return RoleChange.NONE
        new_epoch = leader_epoch > self.leader_epoch or self.leader_id != leader
        self.replicas, self.isr = tuple(replicas), tuple(isr)
        self.leader_id, self.leader_epoch, self.partition_epoch = leader, leader_epoch, partition_epoch
        self.leader_recovery_state = leader_recovery_state
        if self.pending is not None and partition_epoch >= self.pending.partition_epoch:
            self.pending = None  # answered (accepted or superseded)
        if not new_epoch:
            self._prune_remote(now_ms)
            return RoleChange.NONE
        self.pending = None
        if leader == self.node_id:
            self.leader_epoch_start_offset = log_end_offset
            # Kafka resets the followers' state on a new leader epoch: ISR members count as
            # caught up now, so none is shrunk before it had a chance to fetch
            self.remote = {
                r: ReplicaState(last_caught_up_ms=now_ms if r in self.isr else 0)
                for r in self.replicas if r != self.node_id
            }
            return RoleChange.LEADER
        self.remote = {}
        return RoleChange.FOLLOWER

    def _prune_remote(self, now_ms: int) -> None:
        if not self.is_leader:
            return
        for r in self.replicas:
            if r != self.node_id and r not in self.remote:
                self.remote[r] = ReplicaState(last_caught_up_ms=now_ms if r in self.isr else 0)
        for r in [r for r in self.remote if r not in self.replicas]:
            del self.remote[r]

    # ------------------------------------------------------------------ leader side
    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the HW is computed over: the ISR, plus a replica being added."""
        if self.pending is not None and len(self.pending.isr) > len(self.isr):
            return tuple(sorted(set(self.isr) | set(self.pending.isr)))
        return self.isr

    def update_follower(self, replica_id: int, fetch_offset: int, leader_leo: int, now_ms: int,
                        broker_epoch: int = -1) -> None:
        """A follower's Fetch at ``fetch_offset`` (Kafka's ``updateFollowerFetchState``)."""
        st = self.remote.get(replica_id)
        if st is None:
            return
        if fetch_offset >= leader_leo:
            st.last_caught_up_ms = now_ms
        elif st.last_fetch_leader_leo >= 0 and fetch_offset >= st.last_fetch_leader_leo:
            st.last_caught_up_ms = max(st.last_caught_up_ms, st.last_fetch_ms)
        st.log_end_offset = fetch_offset
        st.last_fetch_leader_leo = leader_leo
        st.last_fetch_ms = now_ms
        if broker_epoch >= 0:
            st.broker_epoch = broker_epoch

    def high_watermark_bound(self, leader_cap: int) -> int:
        """The highest HW the ISR allows: min over the maximal ISR's log end offsets (a follower
        that has not fetched at this epoch yet holds it where it is: -1)."""
        hw = leader_cap
        for r in self.maximal_isr:
            if r == self.node_id:
                continue
            st = self.remote.get(r)
            if st is None or st.log_end_offset < 0:
                return -1
            hw = min(hw, st.log_end_offset)
        return hw

    def leader_high_watermark(self, leader_cap: int) -> int:
        """The HW this replica may move to given its own cap (its log end offset, or what is
        durable): the cap itself for a single replica, the bound over the maximal ISR for the
        leader of several (:meth:`high_watermark_bound`), -1 (never) for a follower."""
        if len(self.replicas) <= 1:
            return leader_cap
        return self.high_watermark_bound(leader_cap) if self.is_leader else -1

    def isr_to_expand(self, high_watermark: int) -> tuple[int, ...] | None:
        """The ISR with the followers that caught up added, or None (Kafka's ``maybeExpandIsr``)."""
        if not self.is_leader or self.pending is not None:
            return None
        add = [
            r for r, st in self.remote.items()
            if r not in self.isr and r in self.replicas
            and st.log_end_offset >= high_watermark
            and st.log_end_offset >= self.leader_epoch_start_offset
        ]
        if not add:
            return None
        return tuple(sorted((*self.isr, *add)))

    def isr_to_shrink(self, now_ms: int, lag_max_ms: int, leader_leo: int) -> tuple[int, ...] | None:
        """The ISR without the followers that lag, or None (Kafka's ``maybeShrinkIsr``): not
        caught up for ``lag_max_ms``. The leader stays."""
        if not self.is_leader or self.pending is not None:
            return None
        out = []
        for r in self.isr:
            if r == self.node_id:
                continue
            st = self.remote.get(r)
            if st is None:
                continue
            if st.log_end_offset != leader_leo and now_ms - st.last_caught_up_ms > lag_max_ms:
                out.append(r)
        if not out:
            return None
        return tuple(r for r in self.isr if r not in out)


__all__ = ["Partition", "PendingIsr", "ReplicaState", "RoleChange"]
