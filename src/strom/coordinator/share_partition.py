"""One share-partition: the delivery state of a topic-partition for one share group (KIP-932).

Theory of operation (Kafka's ``SharePartition``). The records a share group may still deliver
form a window of offsets ``[start_offset, end_offset)``: the share-partition start offset (SPSO)
and one past the end offset (SPEO). Records below the SPSO are done (acknowledged or archived);
offsets at or past ``end_offset`` have never been acquired. Inside the window every offset that
was acquired at least once has an *in-flight* state:

====================  =======================================================================
``AVAILABLE`` (0)     may be acquired (again): released, or its acquisition lock timed out
``ACQUIRED`` (1)      delivered to one member, locked until ``deadline``
``ACKNOWLEDGED`` (2)  the member accepted it: never delivered again
``ARCHIVED`` (4)      rejected, or delivered ``delivery_count_limit`` times: never again
====================  =======================================================================

Transitions (every other event on a state is refused with INVALID_RECORD_STATE and changes
nothing)::

    AVAILABLE  --acquire-->  ACQUIRED (delivery_count + 1, lock until now + lock duration)
    ACQUIRED   --ACCEPT-->   ACKNOWLEDGED
    ACQUIRED   --REJECT-->   ARCHIVED
    ACQUIRED   --GAP-->      ARCHIVED        (an offset without a record: compacted, control)
    ACQUIRED   --RELEASE/lock timeout/member left-->
                             AVAILABLE, or ARCHIVED if delivery_count >= delivery_count_limit
    ACQUIRED   --RENEW-->    ACQUIRED (lock until now + lock duration)

Acknowledgements are accepted only from the member holding the lock. Whenever the state at the
SPSO is terminal (ACKNOWLEDGED/ARCHIVED) the SPSO moves past it and forgets it, so the window only
holds what is still undecided. The number of offsets in flight is bounded by
``share.partition.max.record.locks``.

Persistence (Kafka's share coordinator, ``__share_group_state``): :meth:`state_batches` gives the
window as ``(first, last, delivery_state, delivery_count)`` ranges with ACQUIRED written as
AVAILABLE (a lock does not survive a restart; the delivery count does). :meth:`restore` rebuilds
a partition from such a snapshot. Everything here is a pure function of the calls and the ``now``
they carry: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from ..protocol.errors import ErrorCode


class RecordState(IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    """ShareFetch/ShareAcknowledge ``AcknowledgeTypes`` values."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int = 0
    member_id: str = ""
    deadline: int = 0  # monotonic ms when the acquisition lock expires (ACQUIRED only)


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    first_offset: int
    last_offset: int
    delivery_count: int


StateBatch = tuple[int, int, int, int]  # first, last, delivery state, delivery count


class SharePartition:
    """See the module doc."""

    def __init__(
        self,
        start_offset: int,
        *,
        delivery_count_limit: int = 5,
        max_in_flight: int = 2000,
        state_epoch: int = 0,
    ) -> None:
        self.start_offset = start_offset
        self.end_offset = start_offset  # one past the highest offset ever acquired
        self.in_flight: dict[int, InFlight] = {}
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight = max_in_flight
        self.state_epoch = state_epoch

    # ------------------------------------------------------------------ queries

    def state_of(self, offset: int) -> RecordState | None:
        """The state of ``offset``: None if never acquired (at or past ``end_offset``), ACKNOWLEDGED
        standing for 'done' below the SPSO (acknowledged or archived: no longer known)."""
        if offset < self.start_offset:
            return RecordState.ACKNOWLEDGED
        rec = self.in_flight.get(offset)
        if rec is not None:
            return rec.state
        return None if offset >= self.end_offset else RecordState.AVAILABLE

    def next_fetch_offset(self) -> int | None:
        """The lowest offset that could be acquired now (None: the in-flight limit is reached and
        nothing in flight is available)."""
        for off in range(self.start_offset, self.end_offset):
            rec = self.in_flight.get(off)
            if rec is None or rec.state == RecordState.AVAILABLE:
                return off
        if self.end_offset - self.start_offset >= self.max_in_flight:
            return None
        return self.end_offset

    def next_deadline(self) -> int | None:
        ds = [r.deadline for r in self.in_flight.values() if r.state == RecordState.ACQUIRED]
        return min(ds) if ds else None

    def counts(self) -> dict[RecordState, int]:
        out = dict.fromkeys(RecordState, 0)
        for off in range(self.start_offset, self.end_offset):
            out[self.in_flight[off].state if off in self.in_flight else RecordState.AVAILABLE] += 1
        return out

    # ------------------------------------------------------------------ events

    def acquire(
        self,
        member_id: str,
        first_offset: int,
        last_offset: int,
        *,
        max_records: int,
        now: int,
        lock_ms: int,
    ) -> list[AcquiredRange]:
        """Acquire for ``member_id`` what is acquirable in ``[first_offset, last_offset]`` (the
        offsets of the records the fetch read), at most ``max_records`` offsets and never more
        than ``max_in_flight`` in the window. Returns the acquired offsets as ranges with their
        (new) delivery counts."""
        out: list[AcquiredRange] = []
        lo = max(first_offset, self.start_offset)
        taken = 0
        off = lo
        while off <= last_offset and taken < max_records:
            if off >= self.end_offset:
                if off - self.start_offset >= self.max_in_flight:
                    break
                if off > self.end_offset:  # never leave a hole of unknown offsets
                    break
                self.end_offset = off + 1
                rec = self.in_flight[off] = InFlight(RecordState.AVAILABLE)
            else:
                rec_or_none = self.in_flight.get(off)
                if rec_or_none is None:  # below end_offset and not in flight: available
                    rec_or_none = self.in_flight[off] = InFlight(RecordState.AVAILABLE)
                rec = rec_or_none
            if rec.state != RecordState.AVAILABLE:
                off += 1
                continue
            if rec.delivery_count >= self.delivery_count_limit:  # the limit was lowered
                self._set_terminal(rec, RecordState.ARCHIVED)
                off += 1
                continue
            rec.state = RecordState.ACQUIRED
            rec.delivery_count += 1
            rec.member_id = member_id
            rec.deadline = now + lock_ms
            if out and out[-1].last_offset == off - 1 and out[-1].delivery_count == rec.delivery_count:
                out[-1] = AcquiredRange(out[-1].first_offset, off, rec.delivery_count)
            else:
                out.append(AcquiredRange(off, off, rec.delivery_count))
            taken += 1
            off += 1
        self._advance()
        return out

    def acknowledge(
        self, member_id: str, first_offset: int, last_offset: int, types: list[int], *, now: int, lock_ms: int
    ) -> int:
        """Apply one acknowledgement batch: ``types`` has one type for the whole range or one per
        offset. All or nothing: an offset not ACQUIRED by ``member_id`` (or a bad type) refuses
        the batch with INVALID_RECORD_STATE / INVALID_REQUEST and changes nothing."""
        n = last_offset - first_offset + 1
        if n <= 0 or not types or (len(types) != 1 and len(types) != n):
            return ErrorCode.INVALID_REQUEST
        if any(t not in AckType._value2member_map_ for t in types):
            return ErrorCode.INVALID_REQUEST
        for off in range(first_offset, last_offset + 1):
            rec = self.in_flight.get(off)
            if rec is None or rec.state != RecordState.ACQUIRED or rec.member_id != member_id:
                return ErrorCode.INVALID_RECORD_STATE
        for i, off in enumerate(range(first_offset, last_offset + 1)):
            t = types[0] if len(types) == 1 else types[i]
            rec = self.in_flight[off]
            if t == AckType.ACCEPT:
                self._set_terminal(rec, RecordState.ACKNOWLEDGED)
            elif t in (AckType.REJECT, AckType.GAP):
                self._set_terminal(rec, RecordState.ARCHIVED)
            elif t == AckType.RELEASE:
                self._release(rec)
            else:  # RENEW
                rec.deadline = now + lock_ms
        self._advance()
        return ErrorCode.NONE

    def release_member(self, member_id: str) -> int:
        """Release every record ``member_id`` holds (its share session closed). Returns how many."""
        n = 0
        for rec in self.in_flight.values():
            if rec.state == RecordState.ACQUIRED and rec.member_id == member_id:
                self._release(rec)
                n += 1
        self._advance()
        return n

    def expire_locks(self, now: int) -> int:
        """Release every record whose acquisition lock expired by ``now``. Returns how many."""
        n = 0
        for rec in self.in_flight.values():
            if rec.state == RecordState.ACQUIRED and rec.deadline <= now:
                self._release(rec)
                n += 1
        self._advance()
        return n

    def move_start(self, offset: int) -> None:
        """The log start moved (retention, DeleteRecords) or an admin reset the start offset:
        offsets below ``offset`` are done."""
        if offset <= self.start_offset:
            return
        for off in [o for o in self.in_flight if o < offset]:
            del self.in_flight[off]
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self._advance()

    def reset(self, offset: int) -> None:
        """AlterShareGroupOffsets: forget everything, start delivering at ``offset``."""
        self.in_flight.clear()
        self.start_offset = self.end_offset = offset

    # ------------------------------------------------------------------ internals

    def _release(self, rec: InFlight) -> None:
        rec.member_id = ""
        rec.deadline = 0
        rec.state = (
            RecordState.ARCHIVED if rec.delivery_count >= self.delivery_count_limit else RecordState.AVAILABLE
        )

    @staticmethod
    def _set_terminal(rec: InFlight, state: RecordState) -> None:
        rec.state = state
        rec.member_id = ""
        rec.deadline = 0

    def _advance(self) -> None:
        while self.start_offset < self.end_offset:
            rec = self.in_flight.get(self.start_offset)
            if rec is None or rec.state not in TERMINAL:
                break
            del self.in_flight[self.start_offset]
            self.start_offset += 1

    # ------------------------------------------------------------------ persistence

    def state_batches(self) -> list[StateBatch]:
        """The window as ranges of equal (persisted state, delivery count); ACQUIRED is persisted
        as AVAILABLE with its delivery count (Kafka's ``ShareSnapshotValue.StateBatches``)."""
        out: list[StateBatch] = []
        for off in range(self.start_offset, self.end_offset):
            rec = self.in_flight.get(off)
            if rec is None:
                state, count = RecordState.AVAILABLE, 0
            else:
                state = RecordState.AVAILABLE if rec.state == RecordState.ACQUIRED else rec.state
                count = rec.delivery_count
            if out and out[-1][1] == off - 1 and out[-1][2] == state and out[-1][3] == count:
                out[-1] = (out[-1][0], off, state, count)
            else:
                out.append((off, off, int(state), count))
        return out

    @classmethod
    def restore(
        cls,
        start_offset: int,
        batches: Iterable[StateBatch],
        *,
        delivery_count_limit: int = 5,
        max_in_flight: int = 2000,
        state_epoch: int = 0,
    ) -> SharePartition:
        sp = cls(
            start_offset,
            delivery_count_limit=delivery_count_limit,
            max_in_flight=max_in_flight,
            state_epoch=state_epoch,
        )
        sp.apply_batches(batches)
        return sp

    def apply_batches(self, batches: Iterable[StateBatch]) -> None:
        """Overlay persisted ranges (a snapshot's, or a ShareUpdate's) on the window."""
        for first, last, state, count in batches:
            st = RecordState(state) if state in RecordState._value2member_map_ else RecordState.AVAILABLE
            if st == RecordState.ACQUIRED:  # a lock does not survive a restart: released
                st = RecordState.AVAILABLE
            if st == RecordState.AVAILABLE and count >= self.delivery_count_limit:
                st = RecordState.ARCHIVED  # released at the limit
            for off in range(max(first, self.start_offset), last + 1):
                self.in_flight[off] = InFlight(st, count)
            if last + 1 > self.end_offset:
                self.end_offset = last + 1
        self._advance()

    def check_invariants(self) -> None:
        """For tests: the window is consistent."""
        assert self.start_offset <= self.end_offset
        assert all(self.start_offset <= o < self.end_offset for o in self.in_flight)
        assert self.end_offset - self.start_offset <= max(self.max_in_flight, len(self.in_flight))
        first = self.in_flight.get(self.start_offset)
        assert first is None or first.state not in TERMINAL
        for rec in self.in_flight.values():
            assert 0 <= rec.delivery_count <= self.delivery_count_limit
            assert (rec.state == RecordState.ACQUIRED) == bool(rec.member_id)
