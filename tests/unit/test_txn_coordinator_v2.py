"""Transaction version 2 (KIP-890 part 2): EndTxn v5 bumps the epoch, Kafka's retry rules,
epoch overflow, empty aborts, implicit adds; driven directly on a ManualClock."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from test_txn_coordinator import make, run

from strom.clock import ManualClock
from strom.coordinator.transaction import MAX_EPOCH, TransactionStateMachine, TxnState
from strom.coordinator.transaction_records import decode_value, encode_value
from strom.protocol.errors import ErrorCode


def test_commit_bumps_epoch_and_markers_carry_it() -> None:
    async def go() -> None:
        coord, _storage, markers = make()
        await coord.start()
        err, pid, e0 = await coord.init_producer_id("app", 10_000)
        assert err == 0
        await coord.add_partitions("app", pid, e0, [("out", 0)], client_transaction_version=2)
        err, pid1, e1 = await coord.end_transaction("app", pid, e0, True, tv2=True)
        assert (err, pid1, e1) == (0, pid, e0 + 1)
        assert markers.written == [(pid, e0 + 1, True, ("out", 0))]
        meta = coord.sm.txns["app"]
        assert (meta.state, meta.producer_epoch, meta.last_producer_epoch) == (
            TxnState.COMPLETE_COMMIT,
            e0 + 1,
            e0,
        )
        # a retry with the epoch before the bump succeeds with the current id/epoch
        assert await coord.end_transaction("app", pid, e0, True, tv2=True) == (0, pid, e0 + 1)
        # ... but not as an abort
        assert (await coord.end_transaction("app", pid, e0, False, tv2=True))[
            0
        ] == ErrorCode.INVALID_TXN_STATE
        # committing again with the new epoch and nothing open is an invalid transition
        assert (await coord.end_transaction("app", pid, e1, True, tv2=True))[0] == ErrorCode.INVALID_TXN_STATE
        # an older epoch is a zombie
        assert (await coord.end_transaction("app", pid, e0 - 1, True, tv2=True))[
            0
        ] == ErrorCode.PRODUCER_FENCED
        # the next transaction joins with the new epoch; the old one is fenced
        assert await coord.add_partitions("app", pid, e0, [("out", 1)]) == {
            ("out", 1): ErrorCode.PRODUCER_FENCED
        }
        assert await coord.add_partitions("app", pid, e1, [("out", 1)]) == {("out", 1): 0}
        err, _, e2 = await coord.end_transaction("app", pid, e1, False, tv2=True)
        assert (err, e2) == (0, e1 + 1)
        assert markers.written[-1] == (pid, e1 + 1, False, ("out", 1))
        await coord.stop()

    run(go())


def test_empty_abort_bumps_without_markers() -> None:
    async def go() -> None:
        coord, _storage, markers = make()
        await coord.start()
        _, pid, e0 = await coord.init_producer_id("app", 10_000)
        assert await coord.end_transaction("app", pid, e0, False, tv2=True) == (0, pid, e0 + 1)
        assert markers.written == []
        assert coord.sm.txns["app"].state == TxnState.COMPLETE_ABORT
        # commit with nothing open: INVALID_TXN_STATE (Kafka's Empty/Complete* rule)
        assert (await coord.end_transaction("app", pid, e0 + 1, True, tv2=True))[
            0
        ] == ErrorCode.INVALID_TXN_STATE
        # an abort after a completed abort (not a retry) bumps again
        assert await coord.end_transaction("app", pid, e0 + 1, False, tv2=True) == (0, pid, e0 + 2)
        await coord.stop()

    run(go())


def test_epoch_overflow_rotates_the_producer_id() -> None:
    async def go() -> None:
        coord, storage, markers = make()
        await coord.start()
        _, pid, _ = await coord.init_producer_id("app", 10_000)
        meta = coord.sm.txns["app"]
        coord.sm.replay(meta.with_(producer_epoch=MAX_EPOCH - 1))  # an exhausted epoch
        await coord.add_partitions("app", pid, MAX_EPOCH - 1, [("out", 0)])
        err, new_pid, epoch = await coord.end_transaction("app", pid, MAX_EPOCH - 1, True, tv2=True)
        assert err == 0 and new_pid != pid and epoch == 0
        # the markers use the old id at the last epoch, as Kafka's prepare state holds it
        assert markers.written == [(pid, MAX_EPOCH, True, ("out", 0))]
        meta = coord.sm.txns["app"]
        assert (meta.producer_id, meta.producer_epoch, meta.previous_producer_id, meta.next_producer_id) == (
            new_pid,
            0,
            pid,
            -1,
        )
        # a retry names the old id at the exhausted epoch (retryOnOverflow)
        assert await coord.end_transaction("app", pid, MAX_EPOCH - 1, True, tv2=True) == (0, new_pid, 0)
        # the new id works
        assert await coord.add_partitions("app", new_pid, 0, [("out", 1)]) == {("out", 1): 0}
        # and survives a restart
        coord2, _, _ = make(storage=storage)
        await coord2.start()
        assert coord2.sm.txns == coord.sm.txns
        await coord.stop()
        await coord2.stop()

    run(go())


def test_prepared_rotation_completes_after_restart() -> None:
    sm = TransactionStateMachine(ManualClock(), itertools.count(50).__next__, 60_000)
    res = sm.init_producer_id("t", 1000)
    assert res.record is not None
    sm.replay(res.record.with_(producer_epoch=MAX_EPOCH - 1))
    add = sm.add_partitions("t", res.producer_id, MAX_EPOCH - 1, [("x", 0)])
    assert add.record is not None
    sm.replay(add.record)
    end = sm.end_txn("t", res.producer_id, MAX_EPOCH - 1, False, tv2=True)
    assert end.record is not None and end.record.next_producer_id >= 0
    sm.replay(end.record)  # crash: the markers were never written
    (again,) = sm.incomplete()
    assert again.markers is not None
    assert again.markers.complete.producer_id == end.record.next_producer_id
    assert again.markers.complete.producer_epoch == 0
    assert again.markers.producer_epoch == MAX_EPOCH


def test_verify_partitions_answers_like_kafka() -> None:
    async def go() -> None:
        coord, _storage, _markers = make()
        await coord.start()
        _, pid, e0 = await coord.init_producer_id("app", 10_000)
        await coord.add_partitions("app", pid, e0, [("a", 0)])
        assert coord.verify_partitions("app", pid, e0, [("a", 0), ("a", 1)]) == {
            ("a", 0): 0,
            ("a", 1): ErrorCode.TRANSACTION_ABORTABLE,
        }
        assert coord.verify_partitions("app", pid, e0 + 1, [("a", 0)]) == {
            ("a", 0): ErrorCode.PRODUCER_FENCED
        }
        assert coord.verify_partitions("app", pid + 1, e0, [("a", 0)]) == {
            ("a", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING
        }
        await coord.stop()

    run(go())


def test_records_roundtrip_with_v2_fields() -> None:
    sm = TransactionStateMachine(ManualClock(), lambda: 9, 60_000)
    res = sm.init_producer_id("t", 1000)
    assert res.record is not None
    m = res.record.with_(client_transaction_version=2, previous_producer_id=4, next_producer_id=9)
    assert decode_value("t", encode_value(m)) == m
    # a record written before these fields decodes with the defaults
    old = encode_value(m)[:-17]
    assert decode_value("t", old) == m.with_(
        client_transaction_version=0, previous_producer_id=-1, next_producer_id=-1
    )


ops = st.lists(
    st.tuples(st.sampled_from(["init", "add", "commit", "abort", "retry", "tick"]), st.integers(0, 2)),
    max_size=40,
)


@given(ops)
@settings(max_examples=60, deadline=None)
def test_v2_epochs_only_grow_and_replay_matches(seq: list[tuple[str, int]]) -> None:
    async def go() -> None:
        clock = ManualClock()
        coord, storage, markers = make(clock)
        await coord.start()
        pid, epoch, last = -1, -1, (-1, -1)
        for op, n in seq:
            before = coord.sm.txns.get("a")
            if op == "init":
                err, p, e = await coord.init_producer_id("a", 3000)
                if err == 0:
                    pid, epoch = p, e
            elif op == "add":
                await coord.add_partitions("a", pid, epoch, [("t", n)], client_transaction_version=2)
            elif op in ("commit", "abort"):
                err, p, e = await coord.end_transaction("a", pid, epoch, op == "commit", tv2=True)
                if err == 0:
                    last = (pid, epoch)
                    assert e == epoch + 1 and p == pid
                    pid, epoch = p, e
            elif op == "retry" and last[0] >= 0:
                await coord.end_transaction("a", last[0], last[1], True, tv2=True)
            else:
                clock.advance(2000)
                await coord.abort_expired()
            after = coord.sm.txns.get("a")
            if before is not None and after is not None and after.producer_id == before.producer_id:
                assert after.producer_epoch >= before.producer_epoch
            for meta in coord.sm.txns.values():
                assert meta.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
        # every marker of a producer carries an epoch at least as high as the one before it
        seen: dict[int, int] = {}
        for p, e, _c, _tp in markers.written:
            assert e >= seen.get(p, -1)
            seen[p] = e
        coord2, _, _ = make(storage=storage)
        await coord2.start()
        assert coord2.sm.txns == coord.sm.txns
        await coord.stop()
        await coord2.stop()

    run(go())


def test_api_versions_advertise_transaction_version_2() -> None:
    from strom.server.handlers.api_versions import api_versions_body

    body = api_versions_body(version=4)
    assert body["finalized_features_epoch"] >= 0
    finalized = {f["name"]: f["max_version_level"] for f in body["finalized_features"]}
    assert finalized["transaction.version"] == 2 and finalized["metadata.version"] == 25
    supported = {f["name"]: (f["min_version"], f["max_version"]) for f in body["supported_features"]}
    assert supported["transaction.version"] == (0, 2)
    # below v4, supported features with a minimum of 0 are left out (the schema's rule)
    v3 = {f["name"] for f in api_versions_body(version=3)["supported_features"]}
    assert v3 == {"metadata.version"}
    # transaction.version=0 is not listed as finalized, as Kafka leaves out level-0 features
    v0 = api_versions_body(version=4, transaction_version=0)["finalized_features"]
    assert "transaction.version" not in {f["name"] for f in v0}


def test_timed_out_v2_transaction_fences_with_two_bumps() -> None:
    async def go() -> None:
        clock = ManualClock()
        coord, _storage, markers = make(clock)
        await coord.start()
        _, pid, e0 = await coord.init_producer_id("app", 1000)
        await coord.add_partitions("app", pid, e0, [("out", 0)], client_transaction_version=2)
        clock.advance(2000)
        assert await coord.abort_expired() == 1
        # fence bump + abort bump, as Kafka does for a transaction version 2 transaction
        assert markers.written == [(pid, e0 + 2, False, ("out", 0))]
        # the zombie's EndTxn is not a retry of anything: fenced
        assert (await coord.end_transaction("app", pid, e0, False, tv2=True))[0] == ErrorCode.PRODUCER_FENCED
        assert (await coord.end_transaction("app", pid, e0, True, tv2=True))[0] == ErrorCode.PRODUCER_FENCED
        await coord.stop()

    run(go())
