"""After kill -9 a broker re-reads only the unflushed tail of each log, as Kafka does: segments
below the recovery point (checkpointed once a roll's deferred flush is done) are trusted, only
the segment holding it and later ones are re-validated batch by batch. A real ``strom serve``
with small segments, killed with SIGKILL, restarted; its log says what recovery re-read, and
every record is back."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.broker_process import BrokerProcess
from strom.testing.polling import wait_for

pytestmark = pytest.mark.integration

SEGMENT = 256 * 1024
RECORDS = 3000  # of 512 bytes: ~1.6 MB, six or seven segments
VALUE = b"r" * 512


def _produce(b: BrokerProcess, topic: str, start: int, n: int) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "acks": "all", "batch.size": 65536})
    errors: list[object] = []
    for i in range(start, start + n):
        p.produce(topic, key=str(i).encode(), value=VALUE, partition=0,
                  on_delivery=lambda e, _m: errors.append(e) if e else None)
        p.poll(0)
    assert p.flush(30) == 0 and not errors, errors


def _count(b: BrokerProcess, topic: str) -> list[int]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g-" + uuid.uuid4().hex[:6],
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    keys: list[int] = []
    try:
        idle = 0
        while idle < 10:
            msgs = c.consume(500, 0.5)
            idle = 0 if msgs else idle + 1
            keys += [int(m.key()) for m in msgs if m.error() is None]
            if len(keys) >= RECORDS + 20:
                break
    finally:
        c.close()
    return keys


def _recovery_lines(b: BrokerProcess, topic: str) -> list[tuple[int, int, int, int]]:
    """(segments, bytes, from offset, recovery point) of every recovery of ``topic``-0 logged."""
    text = b.log_path.read_text(errors="replace")
    pat = re.compile(rf"{re.escape(topic)}-0: recovered (\d+) segment\(s\), (\d+) bytes from offset (\d+) "
                     r"after an unclean shutdown \(recovery point (\d+);")
    return [tuple(map(int, m.groups())) for m in pat.finditer(text)]  # type: ignore[misc]


def _checkpoint(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def test_kill_9_recovers_only_the_tail(tmp_path: Path) -> None:
    data = tmp_path / "data"
    b = BrokerProcess(data, overrides=["offsets.topic.num.partitions=1"])
    b.start()
    topic = "tail-" + uuid.uuid4().hex[:6]
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": str(SEGMENT)})])[topic].result(30)
    del admin
    _produce(b, topic, 0, RECORDS - 100)
    _produce(b, topic, RECORDS - 100, 100)  # a tail in the active segment, never fsynced
    pdir = data / f"{topic}-0"
    segments = sorted(pdir.glob("*.log"))
    assert len(segments) >= 5
    sizes = {int(p.name.split(".")[0]): p.stat().st_size for p in segments}
    active_base = max(sizes)
    # a roll leaves the fsync of the segment it closed to a worker thread (as Kafka's roll leaves
    # it to its flush-log task); the recovery point checkpoint moves to the new segment's base
    # once that is done, which takes milliseconds: wait for it, then kill
    wait_for("the recovery point checkpointed at the active segment's base",
             lambda: _checkpoint(pdir / "recovery-point-offset-checkpoint") == active_base, timeout=10)
    b.kill()

    b.start()
    (segs, nbytes, start, rp), = _recovery_lines(b, topic)
    # only the active segment (the recovery point moved to its base when it was rolled in)
    assert (segs, start, rp) == (1, active_base, active_base)
    assert nbytes == sizes[active_base] < sum(sizes.values()) / 4
    assert re.search(r"loaded \d+ logs in \d+ ms; [1-9]\d* recovered after an unclean shutdown",
                     b.log_path.read_text(errors="replace"))
    assert sorted(_count(b, topic)) == list(range(RECORDS))

    # a clean stop: nothing to recover at the next start
    b.stop()
    b.start()
    assert len(_recovery_lines(b, topic)) == 1
    assert sorted(_count(b, topic)) == list(range(RECORDS))

    # without the recovery point (as if it had never been checkpointed) every segment is re-read
    _produce(b, topic, RECORDS, 10)
    b.kill()
    total = sum(p.stat().st_size for p in pdir.glob("*.log"))
    (pdir / "recovery-point-offset-checkpoint").unlink()
    b.start()
    lines = _recovery_lines(b, topic)
    assert len(lines) == 2
    segs, nbytes, start, rp = lines[-1]
    assert (segs, start, rp, nbytes) == (len(sizes), 0, 0, total)
    assert sorted(_count(b, topic)) == list(range(RECORDS + 10))
    b.stop()

