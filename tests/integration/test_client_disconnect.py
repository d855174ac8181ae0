"""A client that leaves in the middle of a Fetch response the broker is writing (with sendfile,
or read with pread and written) is ordinary: no ERROR in the broker's log, the duplicated
segment descriptors are closed, and the broker keeps serving. (Kafka's selector logs such a
peer at DEBUG/INFO and frees its channel.)"""

from __future__ import annotations

import os
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.client.messages import encode_request
from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

MB = 1 << 20


@pytest.fixture(params=["true", "false"], ids=["sendfile", "pread"])
def sf_broker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", overrides=[f"strom.fetch.sendfile={request.param}"])
    b.start()
    try:
        yield b
    finally:
        b.stop()


PARTITIONS = 40


def _fill(b: BrokerProcess, topic: str) -> None:
    """~300 KB in each of 40 partitions: a fetch of them all is a response of 40 file regions
    with bytes (partition headers) in between, as a consumer of a busy topic gets."""
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    a.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(15)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "compression.type": "none"})
    value = os.urandom(50_000)  # incompressible
    for partition in range(PARTITIONS):
        for _ in range(6):
            p.produce(topic, value, partition=partition)
    assert p.flush(60) == 0


def _fetch_frame(topic: str, cid: int) -> bytes:
    partitions = [
        {
            "partition": i,
            "current_leader_epoch": -1,
            "fetch_offset": 0,
            "log_start_offset": -1,
            "partition_max_bytes": 64 * MB,
        }
        for i in range(PARTITIONS)
    ]
    request = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 64 * MB,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": partitions}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    frame, _cls = encode_request(1, 11, cid, "leaver", request)
    return frame


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
def test_client_leaving_mid_sendfile_response(sf_broker: BrokerProcess) -> None:
    topic = f"big-{uuid.uuid4().hex[:8]}"
    _fill(sf_broker, topic)
    pid = sf_broker.proc.pid
    baseline = _open_fds(pid)
    for i in range(20):
        s = socket.create_connection(("127.0.0.1", sf_broker.port), timeout=10)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
        s.sendall(_fetch_frame(topic, i + 1))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        assert size > 10 * MB  # one response carrying the whole topic
        got, leave_after = 0, (i * 397 % 100) * 100_000  # somewhere in the first 10 MB
        while got < leave_after:
            got += len(s.recv(64 * 1024))
        if i % 4:  # abortive close (RST) mostly, orderly close (FIN) too: both happen in the wild
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    deadline = time.monotonic() + 10
    while _open_fds(pid) > baseline and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _open_fds(pid) <= baseline  # every duplicated segment descriptor closed
    log = sf_broker.log()
    assert "ERROR" not in log and "Traceback" not in log and "WARNING" not in log, log[-4000:]
    # the broker still serves fetches
    c = Consumer({"bootstrap.servers": sf_broker.bootstrap, "group.id": "g", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        m = None
        deadline = time.monotonic() + 15
        while m is None and time.monotonic() < deadline:
            m = c.poll(0.5)
        assert m is not None and m.error() is None and m.offset() == 0
    finally:
        c.close()


def test_a_slow_reader_gets_large_responses_intact(sf_broker: BrokerProcess) -> None:
    """Responses bigger than what the socket takes at once: the broker sends what it can at
    once and the rest as the client reads (sendfile's fallback path), in order, byte for byte;
    a client with a small receive window reads 12 MB of 4 partitions exactly."""
    b = sf_broker
    topic = f"slow-{uuid.uuid4().hex[:6]}"
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    a.create_topics([NewTopic(topic, 4, 1)])[topic].result(15)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "compression.type": "none"})
    sent: dict[int, list[bytes]] = {i: [] for i in range(4)}
    for n in range(240):
        value = os.urandom(50_000)  # incompressible
        sent[n % 4].append(value)
        p.produce(topic, value, partition=n % 4)
    assert p.flush(60) == 0
    c = Consumer({
        "bootstrap.servers": b.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "socket.receive.buffer.bytes": 4096, "fetch.max.bytes": 50 * MB,
        "max.partition.fetch.bytes": 8 * MB,
    })
    try:
        c.assign([TopicPartition(topic, i, 0) for i in range(4)])
        got: dict[int, list[bytes]] = {i: [] for i in range(4)}
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < 240 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got[m.partition()].append(m.value())
    finally:
        c.close()
    assert got == sent
