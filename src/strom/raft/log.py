"""What the Raft state machine needs from storage (Kafka's ``ReplicatedLog`` and ``QuorumStateStore``).

Entries are Kafka RecordBatch v2 bytes, as in Kafka's ``__cluster_metadata`` log: a batch's
``partitionLeaderEpoch`` is the epoch of the leader that appended it, offsets are contiguous from
``start_offset``. The state machine never decodes a batch's records; it only needs the headers
(:func:`strom.protocol.records.iter_batches`).

Durability contract (what the simulation's storage breaks on a kill): only what :meth:`flush`
made durable (``flushed_offset``) survives a crash; ``end_offset`` may be ahead of it. A follower
acknowledges (by fetching from a higher offset) only what it flushed; the leader counts its own
``flushed_offset`` towards the majority.

Errors: a corrupt or unreadable store raises :class:`RaftStorageError` from the constructor or
the operation; nothing else is raised for valid arguments. Invalid arguments (appending at an epoch
lower than the last one, truncating below the high watermark) raise ``ValueError``.

Edge cases every implementation honours (``tests/unit/test_raft_log_contract.py`` checks them;
added by branch ``raftlog``):

* ``append_as_follower`` ignores a trailing partial batch (a fetch response cut at its size
  limit) and is all or nothing: a batch that does not follow the previous one, goes down in
  epoch or fails its CRC raises ``ValueError`` and nothing of the call is appended.
* ``truncate_to`` removes the batch holding ``offset`` whole, so it raises ``ValueError`` when
  that batch starts below the high watermark.
* ``create_snapshot`` raises ``ValueError`` when ``data`` is not whole CRC-valid batches.
* after a restart the high watermark is the latest snapshot's offset (if the log reaches it) or
  ``start_offset``; ``flushed_offset`` is never below ``start_offset``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class RaftStorageError(Exception):
    """The quorum's storage cannot be read or written."""


@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class ElectionState:
    """The persisted election state (Kafka's ``quorum-state`` file): the epoch, the leader of that
    epoch if known, and whom this node voted for in it (``None``: nobody). It is written and
    flushed before the node answers a Vote or acts on a new epoch."""

    epoch: int
    leader_id: int | None = None
    voted_id: int | None = None


class QuorumStateStore(Protocol):
    def read(self) -> ElectionState | None:
        """The last written state; ``None`` for a fresh node."""
        ...

    def write(self, state: ElectionState) -> None:
        """Write and flush (atomically: a crash leaves the old or the new state)."""
        ...


class RaftLog(Protocol):
    # -- positions
    @property
    def start_offset(self) -> int:
        """The first offset in the log (after a snapshot, the snapshot's end offset)."""
        ...

    @property
    def end_offset(self) -> int:
        """The offset the next appended record gets."""
        ...

    @property
    def flushed_offset(self) -> int:
        """Everything below survives a crash."""
        ...

    @property
    def high_watermark(self) -> int: ...

    def update_high_watermark(self, offset: int) -> None:
        """Move the high watermark (never backwards, never past ``flushed_offset`` on the leader).
        The log clamps ``offset`` to ``end_offset`` (a follower may hear a leader's high watermark
        before it has the records) and ignores a move backwards. Not persisted: after a restart
        it is the latest snapshot's offset (committed by definition) or ``start_offset``."""
        ...

    def last_fetched_epoch(self) -> int:
        """The epoch of the last batch (or of the latest snapshot for an empty log; 0 if none)."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """Kafka's ``endOffsetForEpoch``: the largest epoch <= ``epoch`` in the log, and the end
        offset of that epoch (the first offset of the next larger epoch, or the log end).
        Kafka's edge cases: an ``epoch`` below every epoch in the log gives ``(first epoch's start
        offset, epoch)`` -- or the oldest snapshot's id when the log starts at it; a log without
        epochs gives ``(end_offset, last_fetched_epoch())``."""
        ...

    # -- data
    def append_as_leader(self, records: list[bytes], epoch: int, timestamp_ms: int) -> AppendInfo:
        """Append one batch holding ``records`` (record values, null keys) at ``end_offset``."""
        ...

    def append_control_as_leader(self, batch: bytes, epoch: int) -> AppendInfo:
        """Append one control batch the state machine built (Kafka's LeaderChangeMessage, built
        with ``build_batch(control=True, partition_leader_epoch=epoch)``); its base offset is
        patched to ``end_offset`` (no CRC change: the CRC does not cover it). Added to the
        contract by branch ``raft``: ``append_as_leader`` can only write data records."""
        ...

    def append_as_follower(self, batches: bytes) -> AppendInfo | None:
        """Append batches as they came from the leader (their offsets must start at
        ``end_offset``). ``None`` when ``batches`` holds no complete batch."""
        ...

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding ``offset`` on, at least one batch even if it is
        larger than ``max_bytes``; ``b""`` at the end. ``start_offset <= offset <= end_offset``."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Remove every record at or after ``offset`` (divergence found by a follower's fetch);
        a batch holding ``offset`` goes whole. ``offset`` at or past ``end_offset``: nothing."""
        ...

    def flush(self) -> None: ...

    # -- snapshots (Kafka's RawSnapshotWriter/Reader, one file per snapshot id)
    def latest_snapshot_id(self) -> OffsetAndEpoch | None: ...

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """Store a complete snapshot (record batches of the image at ``snapshot_id.offset``).
        An id that exists already is left as it is (Kafka); an id below ``start_offset`` raises
        ``ValueError``. The on-disk log frames ``data`` with Kafka's SnapshotHeader/Footer
        control batches; :meth:`read_snapshot` returns ``data`` itself."""
        ...

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> bytes | None:
        """The ``data`` given to :meth:`create_snapshot`; ``None`` if there is no such snapshot."""
        ...

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Drop log segments and older snapshots wholly before ``snapshot_id.offset``; the log
        start offset moves to it (Kafka's ``deleteBeforeSnapshot``). A no-op unless the snapshot
        exists and lies after ``start_offset``."""
        ...

    def truncate_to_latest_snapshot(self) -> bool:
        """A follower that fetched a snapshot ahead of its log (past its end offset, or of a
        later epoch than its last batch): the log restarts at it. False if nothing changed."""
        ...
