"""How the controller changes a partition: one PartitionChangeRecord built from targets.

Theory of operation (Kafka's ``PartitionRegistration`` and ``PartitionChangeBuilder``).

A partition is the metadata image's ``PartitionRegistration``: ``replicas`` (the first is the
preferred leader), ``isr``, an ongoing reassignment (``adding_replicas`` / ``removing_replicas``),
``leader`` (-1: none), ``leader_epoch`` and ``partition_epoch``. Every change, whoever asks for
it (AlterPartition from the leader, a broker fenced or shutting down, an election, a reassignment
step), goes through :func:`build_change`:
the caller states the *target* ISR / replicas / reassignment and which brokers may lead; the
builder completes a reassignment whose new replicas are all in the ISR, elects a leader, and
emits one ``PartitionChangeRecord`` holding only what differs, or ``None`` when nothing does.
``PartitionRegistration.merge`` applies such a record; it is the only transition.

Rules kept here (Kafka's):

* the partition epoch goes up by one on every change; the leader epoch goes up when the leader
  changes, and when a reassignment drops a replica (the record then names the same leader, which
  is how Kafka asks for a leader-epoch bump); an ISR shrink alone keeps the leader epoch;
* election: the current leader stays if it is still in the target ISR and acceptable; otherwise
  the first acceptable replica in replica order that is in the target ISR; a ``PREFERRED``
  election tries the first replica before that; an ``UNCLEAN`` election may then pick any
  acceptable replica outside the ISR, which becomes the whole ISR with leader recovery state
  RECOVERING; with none the leader becomes -1 (``NO_LEADER``);
* the ISR is never emptied: a target ISR with nobody left keeps the old ISR (with
  ``unclean.leader.election.enable=false`` its last member is the only broker that may lead
  again, so it must stay recorded).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from enum import Enum

from ..metadata.image import PartitionRegistration
from ..metadata.records import LEADER_NO_CHANGE, NO_LEADER, PartitionChangeRecord

__all__ = [
    "NO_LEADER",
    "RECOVERED",
    "RECOVERING",
    "Election",
    "PartitionRegistration",
    "build_change",
    "has_preferred_leader",
    "is_reassigning",
    "preferred_leader",
]

# LeaderRecoveryState
RECOVERED = 0
RECOVERING = 1


class Election(Enum):
    PREFERRED = 0
    ONLINE = 1
    UNCLEAN = 2


def preferred_leader(p: PartitionRegistration) -> int:
    return p.replicas[0] if p.replicas else NO_LEADER


def has_preferred_leader(p: PartitionRegistration) -> bool:
    return p.leader == preferred_leader(p)


def is_reassigning(p: PartitionRegistration) -> bool:
    return bool(p.adding_replicas or p.removing_replicas)


def build_change(
    partition: PartitionRegistration,
    topic_id: uuid.UUID,
    partition_id: int,
    is_acceptable_leader: Callable[[int], bool],
    *,
    target_isr: Sequence[int] | None = None,
    target_replicas: Sequence[int] | None = None,
    target_removing: Sequence[int] | None = None,
    target_adding: Sequence[int] | None = None,
    target_leader_recovery_state: int | None = None,
    election: Election = Election.ONLINE,
) -> PartitionChangeRecord | None:
    """The record that takes ``partition`` to the targets (unset targets: unchanged), or None."""
    isr = list(partition.isr if target_isr is None else target_isr)
    replicas = list(partition.replicas if target_replicas is None else target_replicas)
    removing = list(partition.removing_replicas if target_removing is None else target_removing)
    adding = list(partition.adding_replicas if target_adding is None else target_adding)
    lrs = (
        partition.leader_recovery_state
        if target_leader_recovery_state is None
        else target_leader_recovery_state
    )

    # complete a reassignment once every replica it adds is in the ISR
    kept_isr = [r for r in isr if r not in removing]
    if (removing or adding) and all(r in isr for r in adding) and kept_isr:
        replicas = [r for r in replicas if r not in removing]
        isr = kept_isr
        removing, adding = [], []

    def valid(r: int) -> bool:
        return r in isr and r in replicas and is_acceptable_leader(r)

    unclean = False
    if election is Election.PREFERRED and replicas and valid(replicas[0]):
        leader = replicas[0]
    elif valid(partition.leader):
        leader = partition.leader
    else:
        leader = next((r for r in replicas if valid(r)), NO_LEADER)
        if leader == NO_LEADER and election is Election.UNCLEAN:
            leader = next((r for r in replicas if is_acceptable_leader(r)), NO_LEADER)
            unclean = leader != NO_LEADER

    record_leader = LEADER_NO_CHANGE
    record_isr: tuple[int, ...] | None = None
    if leader != partition.leader:
        record_leader = leader
        if unclean:
            record_isr = (leader,)
            lrs = RECOVERING
    elif not set(partition.replicas) <= set(replicas):
        record_leader = partition.leader  # a replica left: bump the leader epoch
    if record_isr is None and isr and tuple(isr) != partition.isr:
        record_isr = tuple(isr)

    def changed(new: list[int], old: tuple[int, ...]) -> tuple[int, ...] | None:
        return None if tuple(new) == old else tuple(new)

    record = PartitionChangeRecord(
        partition_id=partition_id,
        topic_id=topic_id,
        isr=record_isr,
        leader=record_leader,
        replicas=changed(replicas, partition.replicas),
        removing_replicas=changed(removing, partition.removing_replicas),
        adding_replicas=changed(adding, partition.adding_replicas),
        leader_recovery_state=lrs if lrs != partition.leader_recovery_state else -1,
    )
    if (
        record.isr is None
        and record.leader == LEADER_NO_CHANGE
        and record.replicas is None
        and record.removing_replicas is None
        and record.adding_replicas is None
        and record.leader_recovery_state == -1
    ):
        return None
    return record
