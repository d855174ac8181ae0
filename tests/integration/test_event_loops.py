"""Both I/O paths serve real clients: asyncio + sendfile (default) and uvloop + pread."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("sendfile", ["true", "false"])
def test_round_trip_on_each_io_path(tmp_path: Path, sendfile: str) -> None:
    b = BrokerProcess(tmp_path / "d", overrides=[f"strom.fetch.sendfile={sendfile}"]).start()
    try:
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
        values = [b"v%05d" % i + b"x" * (i % 3000) for i in range(3000)]
        for v in values:
            p.produce("io-path", v, partition=0)
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "io", "enable.auto.commit": False,
                      "fetch.max.bytes": 1_100_000, "max.partition.fetch.bytes": 100_000})
        c.assign([TopicPartition("io-path", 0, 0)])
        got: list[bytes] = []
        while len(got) < len(values):
            m = c.poll(10)
            assert m is not None, f"stalled after {len(got)} records"
            assert not m.error(), m.error()
            got.append(m.value())
        c.close()
        assert got == values
    finally:
        assert b.stop() == 0, b.log()
