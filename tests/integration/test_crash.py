"""kill -9 during compaction, during retention deletion, and at random points under a continuous
acks=all producer: after a restart the log is valid and holds exactly what it should.

Crashes at exact points use ``STROM_TEST_CRASH_AT`` (see :mod:`strom.log.faults`): the broker
sends itself SIGKILL there, which is what ``kill -9`` does.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.log.faults import ENV as CRASH_ENV
from strom.protocol.records import iter_batches, verify_crc
from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

BASE = [
    "group.initial.rebalance.delay.ms=0",
    "offsets.topic.num.partitions=1",
    "log.retention.check.interval.ms=200",
    "log.segment.delete.delay.ms=60000",
    "log.cleaner.backoff.ms=200",
]


def create(b: BrokerProcess, configs: dict[str, str]) -> str:
    name = "c-" + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(10)
    return name


def produce(b: BrokerProcess, topic: str, items: list[tuple[bytes, bytes | None, int | None]]) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "acks": "all", "batch.num.messages": 10})
    errors: list[object] = []
    for k, v, ts in items:
        kw: dict[str, object] = {} if ts is None else {"timestamp": ts}
        p.produce(
            topic,
            key=k,
            value=v,
            partition=0,
            on_delivery=lambda e, _m: errors.append(e) if e else None,
            **kw,
        )  # type: ignore[arg-type]
        p.poll(0)
    assert p.flush(20) == 0 and not errors, errors


def consume(b: BrokerProcess, topic: str) -> tuple[int, int, list[tuple[int, bytes | None, bytes | None]]]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "x", "enable.auto.commit": False})
    lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.assign([TopicPartition(topic, 0, lo)])
    out: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.time() + 20
    while hi > lo and (not out or out[-1][0] < hi - 1) and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append((m.offset(), m.key(), m.value()))
    c.close()
    return lo, hi, out


def wait_exit(b: BrokerProcess, timeout: float = 30) -> int | None:
    assert b.proc is not None
    deadline = time.time() + timeout
    while time.time() < deadline:
        rc = b.proc.poll()
        if rc is not None:
            return rc
        time.sleep(0.05)
    return None


def check_segments_valid(d: Path) -> None:
    """Every segment file is a run of valid batches with increasing offsets, and none of the
    compaction/deletion leftovers remain."""
    names = sorted(os.listdir(d))
    assert not [n for n in names if n.endswith((".cleaned", ".swap"))], names
    last = -1
    for n in names:
        if n.endswith(".log"):
            data = (d / n).read_bytes()
            for pos, h in iter_batches(data):
                verify_crc(data, pos, h)
                assert h.base_offset > last
                last = h.last_offset


@pytest.mark.parametrize(
    "point", ["cleaner.before_swap_lock", "cleaner.after_swap_rename", "cleaner.after_old_renamed"]
)
def test_kill_during_compaction(tmp_path: Path, point: str) -> None:
    data = tmp_path / "data"
    b = BrokerProcess(data, overrides=BASE, env={CRASH_ENV: point})
    b.start()
    topic = create(
        b, {"cleanup.policy": "compact", "segment.bytes": "3000", "min.cleanable.dirty.ratio": "0.01"}
    )
    expect: dict[bytes, bytes | None] = {}
    items: list[tuple[bytes, bytes | None, int | None]] = []
    for i in range(300):
        k, v = b"k%d" % (i % 17), b"value-%d" % i
        items.append((k, v, None))
        expect[k] = v
    # the crash may come while producing: then not everything was acknowledged
    with contextlib.suppress(AssertionError):
        produce(b, topic, items)
    rc = wait_exit(b)
    assert rc == -9, f"broker did not crash at {point}: rc={rc}\n{b.log()[-3000:]}"
    names = os.listdir(data / f"{topic}-0")
    marker = ".log.cleaned" if point == "cleaner.before_swap_lock" else ".log.swap"
    assert any(n.endswith(marker) for n in names), names
    b.env = None
    b.start()
    try:
        _lo, hi, got = consume(b, topic)
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(set(offsets))
        latest = {k: v for _, k, v in got if k is not None}
        # what was acknowledged before the crash is there with its latest value
        if hi == 300:
            assert latest == expect
        else:
            assert all(latest.get(k) is not None for k in latest)
        assert b.stop() in (0, -15)
        check_segments_valid(data / f"{topic}-0")
        # cleaning goes on after the restart
        b.start()
        produce(b, topic, [(b"k0", b"final", None)])
        assert b.stop() in (0, -15)
        b.start()
        _, _, got2 = consume(b, topic)
        assert {k: v for _, k, v in got2 if k is not None}.get(b"k0") == b"final"
    finally:
        b.stop()


def test_kill_during_retention_deletion(tmp_path: Path) -> None:
    data = tmp_path / "data"
    b = BrokerProcess(data, overrides=BASE, env={CRASH_ENV: "retention.after_rename"})
    b.start()
    topic = create(b, {"segment.bytes": "2000", "retention.ms": "60000"})
    old = int(time.time() * 1000) - 3_600_000
    new = int(time.time() * 1000) + 3_600_000
    pad = b"." * 100
    items: list[tuple[bytes, bytes | None, int | None]] = [
        (b"k", b"old-%d" % i + pad, old) for i in range(60)
    ]
    items += [(b"k", b"new-%d" % i + pad, new) for i in range(40)]
    with contextlib.suppress(AssertionError):
        produce(b, topic, items)
    rc = wait_exit(b)
    assert rc == -9, b.log()[-3000:]
    d = data / f"{topic}-0"
    assert any(n.endswith(".deleted") for n in os.listdir(d))
    b.env = None
    b.start()
    try:
        lo, hi, got = consume(b, topic)
        assert lo > 0
        assert not any(n.endswith(".deleted") for n in os.listdir(d))
        assert [o for o, _, _ in got] == list(range(lo, hi))
        # every 'new' record acknowledged is there; no 'old' record before the start survives
        values = [v for _, _, v in got]
        assert all(v is not None and v.startswith(b"new-") for v in values[-40:]) or hi < 100
        assert b.stop() in (0, -15)
        first_file = min(int(n.split(".")[0]) for n in os.listdir(d) if n.endswith(".log"))
        assert first_file == lo
        check_segments_valid(d)
    finally:
        b.stop()


class ContinuousProducer:
    """Idempotent acks=all producer sending 0, 1, 2 ... in order; remembers what was acked."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.acked: list[int] = []
        self.failed: list[object] = []
        self.stop = threading.Event()
        self.p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 120000,
                "batch.size": 16384,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 200,
            }
        )
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _cb(self, err: object, msg: object) -> None:
        if err is not None:
            self.failed.append(err)
        else:
            self.acked.append(int(msg.value()))  # type: ignore[attr-defined]

    def _run(self) -> None:
        seq = 0
        while not self.stop.is_set():
            try:
                self.p.produce(self.topic, value=str(seq).encode(), partition=0, on_delivery=self._cb)
                seq += 1
            except BufferError:
                pass
            self.p.poll(0.001)
        self.p.flush(120)


def test_kill9_at_random_points_under_continuous_producer(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("STROM_CRASH_SEED", "1234")))
    data = tmp_path / "data"
    b = BrokerProcess(data, overrides=[*BASE, "log.flush.interval.messages=1", "log.segment.bytes=200000"])
    b.start()
    topic = create(b, {})
    prod = ContinuousProducer(b.bootstrap, topic)
    prod.thread.start()
    kills = int(os.environ.get("STROM_CRASH_KILLS", "6"))
    try:
        for _ in range(kills):
            time.sleep(rng.uniform(0.2, 1.2))
            b.kill()
            b.start()
        time.sleep(0.5)
        prod.stop.set()
        prod.thread.join(150)
        assert not prod.failed, prod.failed[:5]
        assert len(prod.acked) > 100
        lo, hi, got = consume(b, topic)
        values = [int(v) for _, _, v in got if v is not None]
        assert [o for o, _, _ in got] == list(range(lo, hi))
        assert len(values) == len(set(values)), "a record is present twice"
        assert values == sorted(values), "records out of order"
        missing = set(prod.acked) - set(values)
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
        print(f"kills={kills} acked={len(prod.acked)} present={len(values)}")
        assert b.stop() in (0, -15)
        check_segments_valid(data / f"{topic}-0")
    finally:
        prod.stop.set()
        b.stop()


def _wait(pred: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False
