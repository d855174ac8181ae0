"""A broker under a small ``ulimit -n``: out of descriptors it pauses accepting (one log line,
no traceback flood) and serves again once clients leave; partitions cost no descriptors."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration


def produce_one(bootstrap: str, topic: str, timeout: float = 20.0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.timeout.ms": int(timeout * 1000)})
    errors: list[object] = []
    p.produce(topic, b"v", on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(timeout) == 0
    assert errors == [None]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_accept_pauses_when_out_of_descriptors_and_recovers(tmp_path: Path, loop: str) -> None:
    # asyncio's own accept loop logged a traceback per failed accept; strom's runs on both loops
    overrides = ["strom.log.max.open.files=16"]
    if loop == "uvloop":
        overrides.append("strom.fetch.sendfile=false")  # the broker picks uvloop only then
    b = BrokerProcess(tmp_path / "d", nofile=128, overrides=overrides, env={"STROM_EVENT_LOOP": loop}).start()
    socks: list[socket.socket] = []
    try:
        produce_one(b.bootstrap, "before")
        for _ in range(200):  # far more than the broker has descriptors for
            s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
            socks.append(s)
        deadline = time.monotonic() + 10
        while "cannot accept connections" not in b.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # several back-off rounds
        log = b.log()
        lines = [ln for ln in log.splitlines() if "cannot accept connections" in ln]
        assert 1 <= len(lines) <= 2, log
        assert "Too many open files" in lines[0]
        for s in socks:
            s.close()
        socks.clear()
        produce_one(b.bootstrap, "after")  # accepting again once descriptors are back
        assert "Traceback" not in b.log()
    finally:
        for s in socks:
            s.close()
        assert b.stop() == 0, b.log()


def _p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))]


def _vm_hwm_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.slow
def test_ten_thousand_partitions_under_ulimit_4096(tmp_path: Path) -> None:
    """10 topics x 1,000 partitions in one CreateTopics while another client produces and
    fetches (p99 < 250 ms); one record in each partition survives a restart; RSS < 768 MB."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    b = BrokerProcess(tmp_path / "d", nofile=4096).start()
    try:
        produce_one(b.bootstrap, "latency")
        stop = threading.Event()
        samples: list[tuple[float, float]] = []  # (start, seconds) of each produce round trip
        consumed = [0]

        def producer_loop() -> None:
            p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "acks": 1})
            while not stop.is_set():
                t0 = time.monotonic()
                p.produce("latency", b"x" * 100, partition=0)
                assert p.flush(30) == 0
                samples.append((t0, time.monotonic() - t0))
                time.sleep(0.005)

        def consumer_loop() -> None:
            c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "lat", "enable.auto.commit": False,
                          "fetch.wait.max.ms": 50})
            c.assign([TopicPartition("latency", 0, 0)])
            while not stop.is_set():
                m = c.poll(0.2)
                if m is not None and not m.error():
                    consumed[0] += 1
            c.close()

        threads = [threading.Thread(target=producer_loop), threading.Thread(target=consumer_loop)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        topics = [f"many-{i}" for i in range(10)]
        t_start = time.monotonic()
        futures = admin.create_topics([NewTopic(t, 1000, 1) for t in topics], request_timeout=300)
        for f in futures.values():
            f.result(300)
        t_end = time.monotonic()
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(60)
        during = [s for t0, s in samples if t_start <= t0 <= t_end]
        created_s = t_end - t_start
        print(f"created 10,000 partitions in {created_s:.1f} s ({created_s / 10:.2f} s per 1,000); "
              f"other client: {len(during)} produce round trips, p99 {_p99(during) * 1000:.0f} ms, "
              f"max {max(during) * 1000:.0f} ms; consumed {consumed[0]}")
        assert len(during) >= 10
        assert _p99(during) < 0.25

        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 50, "acks": 1})
        for t in topics:
            for part in range(1000):
                p.produce(t, f"{t}/{part}".encode(), partition=part)
                p.poll(0)
        assert p.flush(120) == 0
        assert b.proc is not None
        rss_mb = _vm_hwm_kb(b.proc.pid) / 1024
        print(f"broker peak RSS (VmHWM) with 10,100 partitions: {rss_mb:.0f} MB")
        assert rss_mb < 768

        t0 = time.monotonic()
        assert b.stop(timeout=120) == 0, b.log()
        t1 = time.monotonic()
        b.start(timeout=120)
        print(f"clean stop {t1 - t0:.1f} s, start {time.monotonic() - t1:.1f} s")
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "readback", "enable.auto.commit": False})
        c.assign([TopicPartition(t, part, 0) for t in topics for part in range(1000)])
        got: set[str] = set()
        deadline = time.monotonic() + 120
        while len(got) < 10_000 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and not m.error():
                assert m.value() == f"{m.topic()}/{m.partition()}".encode()
                got.add(m.value().decode())
        c.close()
        assert len(got) == 10_000
        assert "Traceback" not in b.log_path.read_text(errors="replace")
    finally:
        assert b.stop(timeout=120) == 0, b.log()
