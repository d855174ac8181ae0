"""A follower's fetch of one partition and its handling of the leader's answer (see
:mod:`strom.replication`)."""

from __future__ import annotations

import contextlib
import enum
import logging
from dataclasses import dataclass
from typing import Any

from ..log.errors import LogError
from ..log.partition_log import PartitionLog
from ..protocol.errors import ErrorCode
from ..protocol.replica_fetch import ReplicaFetchPartitionAnswer

log = logging.getLogger("strom.replication")

TopicPartition = tuple[str, int]

# errors after which the partition waits replica.fetch.backoff.ms, silently (the image moves it)
RETRIABLE = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.REPLICA_NOT_AVAILABLE,
})


def fetch_partition(plog: PartitionLog, leader_epoch: int, max_bytes: int) -> dict[str, Any]:
    """One partition of a follower's Fetch: from its log end offset, with the latest epoch in its
    log (``last_fetched_epoch``, -1 if none), the epoch it follows and its log start offset."""
    latest = plog.latest_epoch
    return {
        "current_leader_epoch": leader_epoch,
        "fetch_offset": plog.log_end_offset,
        "last_fetched_epoch": latest if latest is not None else -1,
        "log_start_offset": plog.log_start_offset,
        "partition_max_bytes": max_bytes,
    }


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """One partition of the leader's answer, as the follower reads it."""

    error_code: int
    high_watermark: int
    log_start_offset: int
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset)
    records: Any = None  # bytes-like, possibly ending in a partial batch

    @classmethod
    def of(cls, pd: ReplicaFetchPartitionAnswer) -> FetchAnswer:
        """From a partition of a decoded Fetch answer (:mod:`strom.protocol.replica_fetch`, which
        reads a diverging epoch of (-1, -1) as none)."""
        return cls(pd.error_code, pd.high_watermark, pd.log_start_offset, pd.diverging_epoch, pd.records)


class FollowerOutcome(enum.Enum):
    FETCHED = "fetched"  # records appended (maybe none), the HW moved
    TRUNCATED = "truncated"  # diverged: cut back (or already there); the next fetch asks again
    OUT_OF_RANGE = "out-of-range"  # restarted at the leader's log start, or cut to its HW
    ERROR = "error"  # the leader answered an error: back off


@dataclass(frozen=True, slots=True)
class FollowerResult:
    outcome: FollowerOutcome
    high_watermark_advanced: bool = False  # wake what waits on the partition


def handle_fetch_answer(tp: TopicPartition, plog: PartitionLog, answer: FetchAnswer) -> FollowerResult:
    """Apply the leader's answer for one partition to the follower's log:

    * OFFSET_OUT_OF_RANGE: below the leader's log start the log restarts empty at it; above the
      leader's log end (only when the log has no epochs to compare) it is cut to the leader's HW;
    * another error: nothing (the caller backs off; a non-retriable one is logged);
    * ``diverging_epoch``: truncation to :func:`truncation_target`;
    * else the records are appended as they are (``append_as_follower``), the follower's HW
      becomes min(leader's HW, its log end offset) if higher, and the log start follows the
      leader's when the HW passed it.

    Raises what the log raises (LogError, KafkaStorageError)."""
    code = answer.error_code
    if code == ErrorCode.OFFSET_OUT_OF_RANGE:
        leader_start = answer.log_start_offset
        if plog.log_end_offset < leader_start:
            log.info("%s-%d: log end %d below the leader's log start %d: restarting the log there",
                     tp[0], tp[1], plog.log_end_offset, leader_start)
            plog.truncate_fully_and_start_at(leader_start)
        else:
            target = min(answer.high_watermark, plog.log_end_offset)
            log.info("%s-%d: fetch offset %d out of the leader's range: truncating to %d",
                     tp[0], tp[1], plog.log_end_offset, target)
            plog.truncate_to(max(target, plog.log_start_offset))
        return FollowerResult(FollowerOutcome.OUT_OF_RANGE)
    if code != ErrorCode.NONE:
        if code not in RETRIABLE:
            log.warning("%s-%d: the leader answered %s", tp[0], tp[1], ErrorCode(code).name)
        return FollowerResult(FollowerOutcome.ERROR)
    if answer.diverging_epoch is not None:
        truncate(tp, plog, *answer.diverging_epoch)
        return FollowerResult(FollowerOutcome.TRUNCATED)
    if answer.records:
        plog.append_as_follower(answer.records)
    hw = min(answer.high_watermark, plog.log_end_offset)
    advanced = hw > plog.high_watermark
    if advanced:
        plog.update_high_watermark(hw)
    leader_start = answer.log_start_offset
    if plog.log_start_offset < leader_start <= plog.high_watermark:
        with contextlib.suppress(LogError):
            plog.delete_records(leader_start)
    return FollowerResult(FollowerOutcome.FETCHED, advanced)


def truncation_target(plog: PartitionLog, leader_epoch: int, leader_end: int) -> int:
    """Kafka's ``getOffsetTruncationState`` for a diverging epoch ``(leader_epoch, leader_end)``:
    to the end of the epoch both know, or, when the follower's largest epoch at or below the
    leader's answer differs, to that epoch's end (the next fetch asks again); never below the
    log start."""
    leo = plog.log_end_offset
    if leader_end < 0:
        target = min(plog.high_watermark, leo)
    elif leader_epoch < 0:
        target = min(leader_end, leo)
    else:
        local_epoch, local_end = plog.end_offset_for_epoch(leader_epoch)
        if local_epoch < 0 or local_end < 0:
            target = min(leader_end, leo)
        elif local_epoch != leader_epoch:
            target = min(local_end, leo)
        else:
            target = min(leader_end, local_end, leo)
    return max(target, plog.log_start_offset)


def truncate(tp: TopicPartition, plog: PartitionLog, leader_epoch: int, leader_end: int) -> int:
    """Truncate to :func:`truncation_target` if below the log end; the new log end offset."""
    leo = plog.log_end_offset
    target = truncation_target(plog, leader_epoch, leader_end)
    if target < leo:
        log.info("%s-%d: diverged from the leader (its epoch %d ends at %d): truncating %d -> %d",
                 tp[0], tp[1], leader_epoch, leader_end, leo, target)
        plog.truncate_to(target)
    return plog.log_end_offset


__all__ = [
    "RETRIABLE", "FetchAnswer", "FollowerOutcome", "FollowerResult", "fetch_partition", "handle_fetch_answer",
    "truncate", "truncation_target",
]
