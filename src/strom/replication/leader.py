"""The leader's handling of one follower's fetch of one partition (see :mod:`strom.replication`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..log.partition_log import PartitionLog
from ..protocol.errors import ErrorCode
from ..server.partition import Partition


def leader_epoch_error(leader_epoch: int, current_leader_epoch: int) -> int:
    """KIP-320: a request's ``current_leader_epoch`` (-1: none) against the partition's
    ``leader_epoch`` here: FENCED_LEADER_EPOCH when older, UNKNOWN_LEADER_EPOCH when newer."""
    if current_leader_epoch < 0:
        return ErrorCode.NONE
    if current_leader_epoch < leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if current_leader_epoch > leader_epoch:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    return ErrorCode.NONE


@dataclass(slots=True)
class FollowerFetch:
    """The leader's answer to one follower's fetch of one partition, and what it asks of the
    caller. ``read_to`` > the fetch offset: records ``[fetch_offset, read_to)`` go in the answer;
    ``expand_isr``: send this ISR to the controller (AlterPartition)."""

    error_code: int = ErrorCode.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset)
    read_to: int = -1
    expand_isr: tuple[int, ...] | None = None


def handle_follower_fetch(
    p: Partition,
    plog: PartitionLog,
    replica_id: int,
    fetch_offset: int,
    *,
    current_leader_epoch: int,
    last_fetched_epoch: int,
    broker_epoch: int,
    leader_cap: int,
    now_ms: int,
) -> FollowerFetch:
    """A follower's fetch at ``fetch_offset`` on the leader of ``p`` (whose log is ``plog``).

    * ``replica_id`` not a replica: NOT_LEADER_OR_FOLLOWER; ``current_leader_epoch`` other than
      the leader's: FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH (nothing else in the answer).
    * ``last_fetched_epoch`` (>= 0) whose end here is not the follower's (the leader does not
      know the epoch, or it ends before ``fetch_offset``): ``diverging_epoch`` = the leader's
      (epoch, end offset) for it (KIP-595's check, which Kafka 2.7+ replicas use instead of
      OffsetForLeaderEpoch); nothing changes.
    * ``fetch_offset`` outside [log start, log end]: OFFSET_OUT_OF_RANGE.
    * else the fetch offset is the follower's log end offset: its state is updated (Kafka's
      ``updateFollowerFetchState``), the HW moves up to :meth:`Partition.leader_high_watermark`
      of ``leader_cap`` (set on ``plog``), an ISR expansion may be proposed, and records up to
      the log end are to be read."""
    if replica_id not in p.replicas:
        return FollowerFetch(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    epoch_error = leader_epoch_error(p.leader_epoch, current_leader_epoch)
    if epoch_error != ErrorCode.NONE:
        return FollowerFetch(epoch_error)
    leo = plog.log_end_offset
    r = FollowerFetch(ErrorCode.NONE, plog.high_watermark, plog.last_stable_offset, plog.log_start_offset)
    if last_fetched_epoch >= 0:
        epoch, end = plog.end_offset_for_epoch(last_fetched_epoch)
        if epoch != last_fetched_epoch or end < fetch_offset:
            r.diverging_epoch = (epoch, end)
            return r
    if fetch_offset < plog.log_start_offset or fetch_offset > leo:
        r.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
        return r
    p.update_follower(replica_id, fetch_offset, leo, now_ms, broker_epoch)
    hw = p.leader_high_watermark(leader_cap)
    if hw > plog.high_watermark:
        plog.update_high_watermark(hw)
    r.expand_isr = p.isr_to_expand(plog.high_watermark)
    r.high_watermark = plog.high_watermark
    r.last_stable_offset = plog.last_stable_offset
    if fetch_offset < leo:
        r.read_to = leo
    return r


__all__ = ["FollowerFetch", "handle_follower_fetch", "leader_epoch_error"]
