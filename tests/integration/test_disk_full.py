"""Disk full: the data dir is a small tmpfs. Produce fails with KAFKA_STORAGE_ERROR (56), the
broker stays up and readable, accepts writes again once space returns, and no segment is corrupt
(a failed partial write is cut back to the last complete batch). The broker's log says so once
(not once per request, no traceback) and says when writes work again."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.records import iter_batches, verify_crc
from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root / CAP_SYS_ADMIN): {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path: Path, leave: int) -> None:
    """Write a ballast file until the filesystem is full, then give back ``leave`` bytes."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        chunk = b"\0" * 65536
        while True:
            try:
                os.write(fd, chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
        size = os.fstat(fd).st_size
        os.ftruncate(fd, max(0, size - leave))
    finally:
        os.close(fd)


def consume(b: BrokerProcess, topic: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "dfull", "enable.auto.commit": False})
    lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.assign([TopicPartition(topic, 0, lo)])
    out: list[tuple[int, bytes]] = []
    deadline = time.time() + 20
    while hi > lo and (not out or out[-1][0] < hi - 1) and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append((m.offset(), m.value()))
    c.close()
    assert [o for o, _ in out] == list(range(lo, hi))
    return [v for _, v in out]


def test_disk_full_then_space_returns(small_fs: Path) -> None:
    data = small_fs / "data"  # the broker's own log file goes to small_fs.parent
    b = BrokerProcess(
        data,
        overrides=[
            "offsets.topic.num.partitions=1",
            "transaction.state.log.num.partitions=1",
            "log.segment.bytes=262144",
        ],
    )
    b.log_path = small_fs.parent / "broker.log"
    b.start()
    ballast = small_fs / "ballast"
    try:
        topic = "full-" + uuid.uuid4().hex[:6]
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
        fill(ballast, leave=300_000)
        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0, "retries": 0})
        acked: list[bytes] = []
        codes: list[int] = []

        def cb(err: object, msg: object) -> None:
            if err is None:
                acked.append(msg.value())  # type: ignore[attr-defined]
            else:
                codes.append(err.code())  # type: ignore[attr-defined]

        i = 0
        while len(codes) < 5 and i < 2000:
            p.produce(topic, value=b"%06d:" % i + b"x" * 3000, partition=0, on_delivery=cb)
            p.flush(10)
            i += 1
        assert codes and set(codes) == {56}, codes  # KAFKA_STORAGE_ERROR
        assert acked
        text = b.log_path.read_text(errors="replace")
        failed = [line for line in text.splitlines() if f"append to {topic}-0 failed" in line]
        assert len(failed) == 1, failed  # rate-limited: one line for all the failed requests
        assert "ENOSPC" in failed[0] and "KAFKA_STORAGE_ERROR" in failed[0], failed[0]
        assert "Traceback" not in text
        # still up and readable: everything acknowledged is there, exactly once, in order
        assert consume(b, topic) == acked
        # space comes back: writes succeed again
        ballast.unlink()
        codes.clear()
        before = len(acked)
        for j in range(20):
            p.produce(topic, value=b"after-%d" % j, partition=0, on_delivery=cb)
        p.flush(10)
        assert not codes and len(acked) == before + 20
        text = b.log_path.read_text(errors="replace")
        assert f"append to {topic}-0 works again after" in text
        assert "Traceback" not in text
        assert consume(b, topic) == acked
        assert b.stop() in (0, -15)
        # no corrupt segment: every byte of every segment is a valid batch
        d = data / f"{topic}-0"
        for name in sorted(os.listdir(d)):
            if name.endswith(".log"):
                buf = (d / name).read_bytes()
                end = 0
                for pos, h in iter_batches(buf):
                    verify_crc(buf, pos, h)
                    end = pos + h.size
                assert end == len(buf), f"{name}: garbage after the last batch"
        b.start()
        assert consume(b, topic) == acked
    finally:
        with contextlib.suppress(OSError):
            ballast.unlink()
        b.stop()
