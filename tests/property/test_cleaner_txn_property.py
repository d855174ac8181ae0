"""Property: compaction of a log with transactions (Kafka's LogCleaner rules).

After any interleaving of transactional writes by two producers (committed and aborted, ending
the classic way or with transaction version 2's epoch bump), plain writes, rolls, cleanings and
clock moves:

- the read_committed view (a consumer's: aborted transactions from the ``.txnindex``, skipped
  up to their ABORT marker) gives, per key, the latest committed value, before and after
  cleaning and after reopening;
- every ``.txnindex`` entry still has its ABORT marker (an entry without one would make a
  read_committed consumer drop the producer's later batches);
- at the end, once everything is decided, cleaned, and ``delete.retention.ms`` has passed:
  no record of an aborted transaction is left, no marker is left except a producer's last
  batch (kept, for its epoch), and producer state rebuilt from the log alone has every
  producer's epoch and last sequence, with no transaction left open.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.clock import ManualClock
from strom.config import LogConfig
from strom.log import PartitionLog
from strom.log.cleaner import LogCleaner
from strom.protocol.records import (
    CONTROL_ABORT,
    build_batch,
    build_control_batch,
    control_type,
    decode_batch_records,
    iter_batches,
)

T0 = 1_700_000_000_000
RETAIN = 1000
PIDS = (100, 101)

keys = st.sampled_from([b"a", b"b", b"c", b"d"])
op = st.one_of(
    st.tuples(st.just("data"), st.sampled_from(PIDS), st.lists(keys, min_size=1, max_size=3)),
    st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans(), st.booleans()),
    st.tuples(st.just("write"), st.lists(keys, min_size=1, max_size=3)),
    st.tuples(st.just("roll")),
    st.tuples(st.just("clean")),
    st.tuples(st.just("tick"), st.integers(0, 2 * RETAIN)),
)


class Model:
    def __init__(self, log: PartitionLog, clock: ManualClock) -> None:
        self.log = log
        self.clock = clock
        self.epoch = dict.fromkeys(PIDS, 0)
        self.seq = dict.fromkeys(PIDS, 0)
        self.open: dict[int, list[tuple[int, bytes, bytes]]] = {}  # pid -> records of its open txn
        self.committed: list[tuple[int, bytes, bytes]] = []  # (offset, key, value), plain included
        self.aborted_values: set[bytes] = set()
        self.n = 0

    def _value(self) -> bytes:
        self.n += 1
        return b"v%d" % self.n

    def data(self, pid: int, ks: list[bytes]) -> None:
        recs = [(k, self._value(), [], self.clock.time_ms()) for k in ks]
        batch = build_batch(
            recs,
            producer_id=pid,
            producer_epoch=self.epoch[pid],
            base_sequence=self.seq[pid],
            transactional=True,
        )
        info = self.log.append_as_leader(batch, leader_epoch=0)
        self.seq[pid] += len(ks)
        self.open.setdefault(pid, []).extend(
            (info.first_offset + i, k, v) for i, (k, v, _h, _t) in enumerate(recs)
        )

    def end(self, pid: int, commit: bool, tv2: bool) -> None:
        marker_epoch = self.epoch[pid] + 1 if tv2 else self.epoch[pid]
        marker = build_control_batch(pid, marker_epoch, commit, 0, self.clock.time_ms())
        self.log.append_as_leader(marker, leader_epoch=0, from_coordinator=True)
        recs = self.open.pop(pid, [])
        if commit:
            self.committed.extend(recs)
        else:
            self.aborted_values.update(v for _o, _k, v in recs)
        if tv2:
            self.epoch[pid], self.seq[pid] = marker_epoch, 0

    def write(self, ks: list[bytes]) -> None:
        recs = [(k, self._value(), [], self.clock.time_ms()) for k in ks]
        info = self.log.append_as_leader(build_batch(recs), leader_epoch=0)
        self.committed.extend((info.first_offset + i, k, v) for i, (k, v, _h, _t) in enumerate(recs))

    def expected(self, lso: int) -> dict[bytes, bytes]:
        out: dict[bytes, tuple[int, bytes]] = {}
        for off, k, v in self.committed:
            if off < lso and (k not in out or out[k][0] < off):
                out[k] = (off, v)
        return {k: v for k, (_o, v) in out.items()}


def read_committed(log: PartitionLog) -> list[tuple[int, bytes, bytes]]:
    """What a read_committed consumer gets from the log start up to the last stable offset."""
    lso = log.last_stable_offset
    data = log.read_bytes(log.log_start_offset, 1 << 30, max_offset=lso)
    pending = sorted(log.collect_aborted(log.log_start_offset, lso), key=lambda t: t.first_offset)
    active: set[int] = set()
    out: list[tuple[int, bytes, bytes]] = []
    last = -1
    for pos, h in iter_batches(data):
        assert h.base_offset > last
        last = h.last_offset
        while pending and pending[0].first_offset <= h.last_offset:
            active.add(pending.pop(0).producer_id)
        if h.is_control:
            if h.records_count and control_type(data, pos, h) == CONTROL_ABORT:
                active.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in active:
            continue
        for r in decode_batch_records(data, pos, h):
            if r.offset < lso:
                assert r.key is not None and r.value is not None
                out.append((r.offset, r.key, r.value))
    return out


def all_batches(log: PartitionLog) -> list[tuple[int, object, bytes]]:
    data = log.read_bytes(log.log_start_offset, 1 << 30)
    return [(pos, h, data) for pos, h in iter_batches(data)]


def check(log: PartitionLog, model: Model) -> None:
    got = read_committed(log)
    latest: dict[bytes, bytes] = {}
    for _o, k, v in got:
        latest[k] = v
        assert v not in model.aborted_values
    assert latest == model.expected(log.last_stable_offset)
    # every aborted-transaction entry still has its ABORT marker
    aborts = set()
    for pos, h, data in all_batches(log):
        if h.is_control and h.records_count and control_type(data, pos, h) == CONTROL_ABORT:  # type: ignore[attr-defined]
            aborts.add((h.producer_id, h.base_offset))  # type: ignore[attr-defined]
    for t in log.collect_aborted(-1, 1 << 62):
        assert (t.producer_id, t.last_offset) in aborts


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=40))
def test_cleaning_a_log_with_transactions(ops: list[tuple[object, ...]]) -> None:
    d = Path(tempfile.mkdtemp())
    try:
        clock = ManualClock(T0)
        cfg = LogConfig(
            cleanup_policy="compact",
            min_cleanable_dirty_ratio=0.0,
            delete_retention_ms=RETAIN,
            segment_bytes=700,
        )
        log = PartitionLog.open(d / "p-0", "p", 0, cfg, clock)
        cleaner = LogCleaner(d, clock, pause_every_bytes=0)
        model = Model(log, clock)
        for o in ops:
            if o[0] == "data":
                model.data(o[1], o[2])  # type: ignore[arg-type]
            elif o[0] == "end":
                model.end(o[1], bool(o[2]), bool(o[3]))  # type: ignore[arg-type]
            elif o[0] == "write":
                model.write(o[1])  # type: ignore[arg-type]
            elif o[0] == "roll":
                log.roll()
            elif o[0] == "clean":
                cleaner.clean_all([log])
            else:
                clock.advance(int(o[1]))  # type: ignore[call-overload]
            log.update_high_watermark(log.log_end_offset)
            check(log, model)
        # decide everything, then clean until markers may go: one pass removes aborted data, the
        # next stamps the markers' delete horizon, one after delete.retention.ms removes them
        for pid in list(model.open):
            model.end(pid, False, False)
        for _ in range(4):
            model.write([b"z"])  # something dirty, so there is a cleaning to do
            log.roll()
            log.update_high_watermark(log.log_end_offset)
            cleaner.clean_all([log])
            check(log, model)
            clock.advance(RETAIN + 1)
        state = {pid: (e.producer_epoch, e.last_seq) for pid, e in log.producer_state.producers.items()}
        data_since_marker: dict[int, bool] = {}
        for pos, h, data in all_batches(log):
            pid = h.producer_id  # type: ignore[attr-defined]
            if not h.is_control:  # type: ignore[attr-defined]
                for r in decode_batch_records(data, pos, h):  # type: ignore[arg-type]
                    assert r.value not in model.aborted_values
                if h.is_transactional and h.records_count:  # type: ignore[attr-defined]
                    data_since_marker[pid] = True
                continue
            if h.records_count:  # type: ignore[attr-defined]
                # a marker stays while its transaction has data, or as its producer's last batch
                entry = log.producer_state.producers[pid]
                needed = entry.last_data_offset < 0 and entry.producer_epoch == h.producer_epoch  # type: ignore[attr-defined]
                if control_type(data, pos, h) == CONTROL_ABORT:  # type: ignore[arg-type]
                    assert needed
                else:
                    assert needed or data_since_marker.get(pid, False)
            data_since_marker[pid] = False
        # producer state from the log alone (no snapshots) keeps epochs and sequences
        log.close()
        for snap in (d / "p-0").glob("*.snapshot"):
            snap.unlink()
        log = PartitionLog.open(d / "p-0", "p", 0, cfg, clock)
        log.update_high_watermark(log.log_end_offset)
        rebuilt = {pid: (e.producer_epoch, e.last_seq) for pid, e in log.producer_state.producers.items()}
        for pid, (epoch, last_seq) in state.items():
            assert rebuilt[pid][0] == epoch
            if last_seq >= 0:
                assert rebuilt[pid][1] == last_seq
        assert log.last_stable_offset == log.high_watermark
        model.log = log
        check(log, model)
        log.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
