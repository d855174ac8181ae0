"""In-memory storage for the Raft state machine, for unit tests and the deterministic simulation.

:class:`MemoryRaftLog` implements :class:`strom.raft.log.RaftLog` on a list of real RecordBatch v2
byte strings (``partitionLeaderEpoch`` = the appending leader's epoch) and honours the durability
contract literally: :meth:`MemoryRaftLog.crash` (a kill of the node) drops every batch at or after
``flushed_offset`` and forgets the high watermark, as a process restart would. Edge cases follow
the contract as Kafka has them (``end_offset_for_epoch`` below every epoch, an existing snapshot
id, a high watermark moved backwards: ignored). Snapshots are
kept as whole byte strings, so they survive a crash once created (``create_snapshot`` is
durable, like Kafka's snapshot file that is renamed into place after being written).

:class:`MemoryQuorumStateStore` keeps the last written :class:`ElectionState`; a write is durable
at once (the on-disk store flushes before returning).
"""

from __future__ import annotations

from dataclasses import dataclass

from strom.protocol.records import (
    BATCH_OVERHEAD,
    build_batch,
    iter_batches,
    parse_header,
    patch_base_offset,
    verify_crc,
)
from strom.raft.log import AppendInfo, ElectionState, OffsetAndEpoch


@dataclass(frozen=True, slots=True)
class _Batch:
    base_offset: int
    next_offset: int
    epoch: int
    data: bytes


class MemoryRaftLog:
    def __init__(self) -> None:
        self._batches: list[_Batch] = []
        self._start_offset = 0
        self._flushed_offset = 0
        self._high_watermark = 0
        self._snapshots: dict[OffsetAndEpoch, bytes] = {}

    # -- positions
    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def end_offset(self) -> int:
        return self._batches[-1].next_offset if self._batches else self._start_offset

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def update_high_watermark(self, offset: int) -> None:
        # the contract: clamped to the log end, a move backwards is ignored
        self._high_watermark = max(self._high_watermark, min(offset, self.end_offset))

    def last_fetched_epoch(self) -> int:
        if self._batches:
            return self._batches[-1].epoch
        snap = self.latest_snapshot_id()
        return snap.epoch if snap is not None else 0

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        # Kafka's KafkaMetadataLog.endOffsetForEpoch over its leader-epoch cache
        found = self._end_offset_for(epoch)
        if found is None:
            return OffsetAndEpoch(self.end_offset, self.last_fetched_epoch())
        earliest = min(self._snapshots) if self._snapshots else None
        if earliest is not None and found.offset == earliest.offset and found.epoch < epoch:
            return earliest  # the epoch's start went with the log before the oldest snapshot
        return found

    def _end_offset_for(self, epoch: int) -> OffsetAndEpoch | None:
        """Kafka's LeaderEpochFileCache.endOffsetFor over (epoch, start offset) entries."""
        entries: list[tuple[int, int]] = []
        for b in self._batches:
            if not entries or entries[-1][0] != b.epoch:
                entries.append((b.epoch, b.base_offset))
        if epoch < 0 or not entries or epoch > entries[-1][0]:
            return None
        if epoch == entries[-1][0]:
            return OffsetAndEpoch(self.end_offset, epoch)
        floor: int | None = None
        for e, start in entries:
            if e > epoch:
                return OffsetAndEpoch(start, epoch if floor is None else floor)
            floor = e
        return None  # unreachable: epoch < the latest entry

    # -- data
    def append_as_leader(self, records: list[bytes], epoch: int, timestamp_ms: int) -> AppendInfo:
        data = build_batch(
            [(None, value, [], timestamp_ms) for value in records],
            base_offset=self.end_offset,
            partition_leader_epoch=epoch,
        )
        return self._append(data, epoch, control=False)

    def append_control_as_leader(self, batch: bytes, epoch: int) -> AppendInfo:
        """Append a prebuilt (control) batch; its base offset is patched to ``end_offset``."""
        buf = bytearray(batch)
        patch_base_offset(buf, 0, self.end_offset)
        return self._append(bytes(buf), epoch, control=True)

    def _append(self, data: bytes, epoch: int, control: bool) -> AppendInfo:
        if epoch < self.last_fetched_epoch():
            raise ValueError(f"append at epoch {epoch} below the log's last epoch")
        header = next(iter_batches(data))[1]
        self._batches.append(_Batch(header.base_offset, header.next_offset, epoch, data))
        return AppendInfo(header.base_offset, header.last_offset)

    def append_as_follower(self, batches: bytes) -> AppendInfo | None:
        # all or nothing: every complete batch is checked (offsets contiguous from the log end,
        # CRC, epochs not going down) before any is appended; a trailing partial batch is ignored
        pending: list[_Batch] = []
        end, epoch = self.end_offset, self.last_fetched_epoch()
        pos = 0
        while len(batches) - pos >= BATCH_OVERHEAD:
            header = parse_header(batches, pos)
            if header.magic != 2 or header.size < BATCH_OVERHEAD:
                raise ValueError(f"not a v2 record batch at position {pos}")
            if pos + header.size > len(batches):
                break  # a fetch response may end with part of a batch
            verify_crc(batches, pos, header)
            if header.base_offset != end:
                raise ValueError(f"batch at {header.base_offset}, log ends at {end}")
            if header.partition_leader_epoch < epoch:
                raise ValueError("batch epoch goes backwards")
            pending.append(
                _Batch(
                    header.base_offset,
                    header.next_offset,
                    header.partition_leader_epoch,
                    bytes(batches[pos : pos + header.size]),
                )
            )
            end, epoch = header.next_offset, header.partition_leader_epoch
            pos += header.size
        if not pending:
            return None
        self._batches.extend(pending)
        return AppendInfo(pending[0].base_offset, pending[-1].next_offset - 1)

    def read(self, offset: int, max_bytes: int) -> bytes:
        if not self._start_offset <= offset <= self.end_offset:
            raise ValueError(f"read at {offset} outside [{self._start_offset}, {self.end_offset}]")
        out: list[bytes] = []
        size = 0
        for batch in self._batches:
            if batch.next_offset <= offset:
                continue
            if out and size + len(batch.data) > max_bytes:
                break
            out.append(batch.data)
            size += len(batch.data)
        return b"".join(out)

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end_offset:
            return
        keep = [b for b in self._batches if b.next_offset <= offset]  # a batch holding it goes whole
        cut = keep[-1].next_offset if keep else self._start_offset
        if cut < self._high_watermark:
            raise ValueError(
                f"truncation to {offset} removes offsets below the high watermark {self._high_watermark}"
            )
        self._batches = keep
        self._flushed_offset = min(self._flushed_offset, self.end_offset)

    def flush(self) -> None:
        self._flushed_offset = self.end_offset

    # -- snapshots
    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return max(self._snapshots) if self._snapshots else None

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        if snapshot_id.offset < self._start_offset:
            raise ValueError(f"snapshot {snapshot_id} below the log start {self._start_offset}")
        for pos, header in iter_batches(data):  # record batches (CorruptRecordError is a ValueError)
            verify_crc(data, pos, header)
        self._snapshots.setdefault(snapshot_id, data)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> bytes | None:
        return self._snapshots.get(snapshot_id)

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        if snapshot_id not in self._snapshots or snapshot_id.offset <= self._start_offset:
            return
        self._batches = [b for b in self._batches if b.base_offset >= snapshot_id.offset]
        self._start_offset = snapshot_id.offset
        self._flushed_offset = max(self._flushed_offset, self._start_offset)
        for old in [s for s in self._snapshots if s < snapshot_id]:
            del self._snapshots[old]

    def truncate_to_latest_snapshot(self) -> bool:
        snap = self.latest_snapshot_id()
        if snap is None or snap.offset <= self._start_offset:
            return False
        # Kafka's rule: the log restarts at a snapshot of a later epoch than its last batch (it
        # diverges from the snapshot, and below it holds only history the snapshot replaces), or
        # of the same epoch past its end.
        last = self.last_fetched_epoch()
        if not (snap.epoch > last or (snap.epoch == last and snap.offset > self.end_offset)):
            return False
        self._batches = []
        self._start_offset = snap.offset
        self._flushed_offset = snap.offset
        self._high_watermark = max(self._high_watermark, snap.offset)
        for old in [s for s in self._snapshots if s < snap]:
            del self._snapshots[old]
        return True

    # -- faults
    def restart(self) -> None:
        """A clean close and reopen: everything is flushed; the high watermark, not persisted,
        restarts at the latest snapshot or the log start."""
        self.flush()
        self._reset_high_watermark()

    def crash(self) -> None:
        """The node was killed: everything not flushed is gone, the high watermark is forgotten
        (it restarts at the latest snapshot, committed by definition, or the log start)."""
        self._batches = [b for b in self._batches if b.next_offset <= self._flushed_offset]
        self._reset_high_watermark()

    def _reset_high_watermark(self) -> None:
        snap = self.latest_snapshot_id()
        hw = self._start_offset
        if snap is not None and self._start_offset <= snap.offset <= self.end_offset:
            hw = snap.offset
        self._high_watermark = hw

    def batches_from(self, offset: int) -> list[tuple[int, int, int, bytes]]:
        """(base offset, next offset, epoch, bytes) of the batches ending after ``offset``."""
        lo, hi = 0, len(self._batches)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._batches[mid].next_offset <= offset:
                lo = mid + 1
            else:
                hi = mid
        return [(b.base_offset, b.next_offset, b.epoch, b.data) for b in self._batches[lo:]]

    def batches(self) -> list[tuple[int, int, int, bytes]]:
        """(base offset, next offset, epoch, bytes) of every batch, for invariant checks."""
        return [(b.base_offset, b.next_offset, b.epoch, b.data) for b in self._batches]


class MemoryQuorumStateStore:
    def __init__(self) -> None:
        self._state: ElectionState | None = None
        self.writes = 0

    def read(self) -> ElectionState | None:
        return self._state

    def write(self, state: ElectionState) -> None:
        self._state = state
        self.writes += 1
