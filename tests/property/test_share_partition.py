"""The share-partition state machine (KIP-932) as a total function: every state x event, and
hypothesis over random acquire / acknowledge / release / lock-timeout / member-leave / restart
sequences checked against the safety rules: nothing acknowledged is ever delivered again, no
delivery count exceeds the limit, a record released or timed out at the limit is archived, and a
snapshot restores the same decisions."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.coordinator.share_partition import AckType, RecordState, SharePartition
from strom.coordinator.share_records import (
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    ShareStateKey,
    ShareStateValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from strom.protocol.errors import ErrorCode

LOCK = 1000


def _in(sp: SharePartition, state: RecordState, member: str = "m1") -> SharePartition:
    """A partition whose offset 0 is in ``state`` (delivered once), offset 1 acquired by m1."""
    sp.acquire(member, 0, 1, max_records=10, now=0, lock_ms=LOCK)
    if state == RecordState.AVAILABLE:
        sp.acknowledge(member, 0, 0, [AckType.RELEASE], now=0, lock_ms=LOCK)
    elif state == RecordState.ACKNOWLEDGED:
        sp.acknowledge(member, 0, 0, [AckType.ACCEPT], now=0, lock_ms=LOCK)
    elif state == RecordState.ARCHIVED:
        sp.acknowledge(member, 0, 0, [AckType.REJECT], now=0, lock_ms=LOCK)
    return sp


def test_every_state_times_every_ack_type() -> None:
    expected = {
        (RecordState.ACQUIRED, AckType.ACCEPT): (ErrorCode.NONE, RecordState.ACKNOWLEDGED),
        (RecordState.ACQUIRED, AckType.REJECT): (ErrorCode.NONE, RecordState.ARCHIVED),
        (RecordState.ACQUIRED, AckType.GAP): (ErrorCode.NONE, RecordState.ARCHIVED),
        (RecordState.ACQUIRED, AckType.RELEASE): (ErrorCode.NONE, RecordState.AVAILABLE),
        (RecordState.ACQUIRED, AckType.RENEW): (ErrorCode.NONE, RecordState.ACQUIRED),
    }
    for state in RecordState:
        for ack in AckType:
            sp = _in(SharePartition(0), state)
            before = sp.state_of(0)
            assert before == (
                state
                if state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
                else RecordState.ACKNOWLEDGED
            )  # terminal at the SPSO: done
            err = sp.acknowledge("m1", 0, 0, [ack], now=10, lock_ms=LOCK)
            want_err, want_state = expected.get((state, ack), (ErrorCode.INVALID_RECORD_STATE, before))
            assert err == want_err, (state, ack)
            got = sp.state_of(0)
            if want_state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                assert got == RecordState.ACKNOWLEDGED  # left the window: done
            else:
                assert got == want_state, (state, ack)
            sp.check_invariants()


def test_other_member_cannot_acknowledge() -> None:
    sp = _in(SharePartition(0), RecordState.ACQUIRED)
    assert sp.acknowledge("m2", 0, 0, [AckType.ACCEPT], now=0, lock_ms=LOCK) == ErrorCode.INVALID_RECORD_STATE
    assert sp.state_of(0) == RecordState.ACQUIRED


def test_lock_timeout_redelivers_then_archives_at_limit() -> None:
    sp = SharePartition(0, delivery_count_limit=3)
    now = 0
    for attempt in range(1, 4):
        got = sp.acquire("m1", 0, 0, max_records=10, now=now, lock_ms=LOCK)
        assert [(r.first_offset, r.delivery_count) for r in got] == [(0, attempt)]
        assert sp.expire_locks(now + LOCK - 1) == 0
        now += LOCK
        assert sp.expire_locks(now) == 1
    assert sp.state_of(0) == RecordState.ACKNOWLEDGED  # archived, below the SPSO
    assert sp.start_offset == 1
    assert sp.acquire("m1", 0, 0, max_records=10, now=now, lock_ms=LOCK) == []


def test_max_in_flight_bounds_acquisition() -> None:
    sp = SharePartition(0, max_in_flight=5)
    got = sp.acquire("m", 0, 99, max_records=100, now=0, lock_ms=LOCK)
    assert [(r.first_offset, r.last_offset) for r in got] == [(0, 4)]
    assert sp.next_fetch_offset() is None
    sp.acknowledge("m", 0, 1, [AckType.ACCEPT], now=0, lock_ms=LOCK)
    assert sp.start_offset == 2
    assert sp.next_fetch_offset() == 5


def test_records_roundtrip() -> None:
    import uuid

    k = ShareStateKey(SHARE_UPDATE, "g", uuid.uuid4(), 7)
    assert decode_key(encode_key(k)) == k
    v = ShareStateValue(3, 5, 0, 42, [(42, 44, 0, 1), (45, 45, 2, 3)])
    assert decode_value(SHARE_SNAPSHOT, encode_value(SHARE_SNAPSHOT, v)) == v
    u = ShareStateValue(3, -1, 0, -1, [(42, 44, 4, 5)])
    assert decode_value(SHARE_UPDATE, encode_value(SHARE_UPDATE, u)) == u


MEMBERS = ("a", "b")
events = st.one_of(
    st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(0, 30), st.integers(1, 8)),
    st.tuples(
        st.just("ack"),
        st.sampled_from(MEMBERS),
        st.integers(0, 30),
        st.integers(0, 4),
        st.sampled_from(list(AckType)),
    ),
    st.tuples(st.just("tick"), st.integers(0, 3 * LOCK)),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS)),
    st.tuples(st.just("restart")),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(events, max_size=60), st.integers(2, 5), st.integers(3, 40))
def test_random_sequences_keep_the_rules(ops: list[tuple], limit: int, max_in_flight: int) -> None:
    sp = SharePartition(0, delivery_count_limit=limit, max_in_flight=max_in_flight)
    now = 0
    log_end = 31
    accepted: set[int] = set()
    archived_or_accepted: set[int] = set()
    deliveries: dict[int, int] = {}
    for op in ops:
        if op[0] == "acquire":
            _, m, first, n = op
            start = sp.next_fetch_offset()
            if start is None:
                continue
            last = min(start + n, log_end - 1)
            for r in sp.acquire(m, start, last, max_records=n, now=now, lock_ms=LOCK):
                for off in range(r.first_offset, r.last_offset + 1):
                    assert off not in archived_or_accepted, f"{off} redelivered after a final decision"
                    deliveries[off] = deliveries.get(off, 0) + 1
                    assert r.delivery_count <= limit
        elif op[0] == "ack":
            _, m, first, span, t = op
            holders = {o: sp.in_flight.get(o) for o in range(first, first + span + 1)}
            ok = all(
                h is not None and h.state == RecordState.ACQUIRED and h.member_id == m
                for h in holders.values()
            )
            err = sp.acknowledge(m, first, first + span, [t], now=now, lock_ms=LOCK)
            assert (err == ErrorCode.NONE) == ok
            if ok and t == AckType.ACCEPT:
                accepted.update(holders)
            if ok and t in (AckType.ACCEPT, AckType.REJECT, AckType.GAP):
                archived_or_accepted.update(holders)
        elif op[0] == "tick":
            now += op[1]
            sp.expire_locks(now)
        elif op[0] == "leave":
            sp.release_member(op[1])
        else:  # restart: persist a snapshot, restore it
            sp = SharePartition.restore(
                sp.start_offset, sp.state_batches(), delivery_count_limit=limit, max_in_flight=max_in_flight
            )
        sp.check_invariants()
        for off in accepted:
            assert sp.state_of(off) == RecordState.ACKNOWLEDGED
        for off, rec in sp.in_flight.items():
            assert rec.delivery_count == deliveries.get(off, 0)
            if rec.state == RecordState.AVAILABLE:
                assert rec.delivery_count < limit
