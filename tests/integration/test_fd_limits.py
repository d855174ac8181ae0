"""A broker under a small ``ulimit -n``: out of descriptors it pauses accepting (one log line,
no traceback flood) and serves again once clients leave; partitions cost no descriptors."""

from __future__ import annotations

import socket
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
    # asyncio's own accept loop would log a traceback every second; uvloop's would stop listening
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
