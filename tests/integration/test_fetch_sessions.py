"""Incremental fetch sessions (KIP-227) on a real broker: over the wire with strom's own client
(the request kinds, what an incremental answer carries, the errors), then unchanged clients
that use sessions (Java kafka-clients' consumer, kafka-python) reading many partitions, with the
broker's /metrics showing that their fetches were incremental."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.client.connection import KafkaConnection
from strom.protocol.errors import ErrorCode
from strom.testing.broker_process import BrokerProcess, free_port
from strom.testing.java_clients import compile_java

pytestmark = pytest.mark.integration

FETCH = 1
PARTS = 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    http = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("fs") / "data", overrides=[
        "max.incremental.fetch.session.cache.slots=3",
        f"strom.http.listener=http://127.0.0.1:{http}",
    ])
    b.start()
    b.http_port = http  # type: ignore[attr-defined]
    try:
        yield b
    finally:
        b.stop()


def metrics(b: BrokerProcess) -> dict[str, float]:
    url = f"http://127.0.0.1:{b.http_port}/metrics"  # type: ignore[attr-defined]
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(strom_fetch_\w+) ([0-9.e+-]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def make_topic(b: BrokerProcess, partitions: int, records_each: int = 0) -> str:
    topic = f"fs-{uuid.uuid4().hex[:8]}"
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    a.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    if records_each:
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20})
        for i in range(partitions):
            for j in range(records_each):
                p.produce(topic, f"{i}-{j}".encode(), partition=i)
        assert p.flush(60) == 0
    return topic


def produce(b: BrokerProcess, topic: str, partition: int, n: int) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for j in range(n):
        p.produce(topic, f"x-{j}".encode(), partition=partition)
    assert p.flush(30) == 0


def fetch_req(sid: int, epoch: int, topic_id: uuid.UUID, offsets: dict[int, int],
              forgotten: list[int] | None = None, max_wait: int = 0) -> dict[str, Any]:
    return {
        "replica_id": -1, "max_wait": max_wait, "min_bytes": 1, "max_bytes": 1 << 24, "isolation_level": 0,
        "session_id": sid, "session_epoch": epoch,
        "topics": [{"topic_id": topic_id, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": o, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20} for p, o in offsets.items()
        ]}] if offsets else [],
        "forgotten_topics_data": [{"topic_id": topic_id, "partitions": forgotten}] if forgotten else [],
        "rack_id": "",
    }


def answered(resp: Any) -> dict[int, tuple[int, int]]:
    """partition -> (error, high watermark) of every partition in the answer."""
    return {int(p.partition_index): (int(p.error_code), int(p.high_watermark))
            for t in resp.responses for p in t.partitions}


async def _wire(b: BrokerProcess, topic: str) -> None:
    conn = await KafkaConnection.open("127.0.0.1", b.port)
    try:
        md = await conn.request(3, {"topics": [{"topic_id": None, "name": topic}],
                                    "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False}, version=12)
        topic_id = md.topics[0].topic_id
        assert isinstance(topic_id, uuid.UUID)
        v = conn.version(FETCH)
        assert v >= 13
        # a full fetch with epoch 0 opens a session: every partition answered
        r = await conn.request(FETCH, fetch_req(0, 0, topic_id, dict.fromkeys(range(PARTS), 2)), version=v)
        sid = int(r.session_id)
        assert r.error_code == 0 and sid != 0
        assert answered(r) == {p: (0, 2) for p in range(PARTS)}
        # nothing new: an incremental fetch answers no partition
        r = await conn.request(FETCH, fetch_req(sid, 1, topic_id, {}), version=v)
        assert (r.error_code, int(r.session_id), answered(r)) == (0, sid, {})
        # records on partition 1 only: only it is answered, from the offset the session holds
        produce(b, topic, 1, 3)
        r = await conn.request(FETCH, fetch_req(sid, 2, topic_id, {}), version=v)
        assert answered(r) == {1: (0, 5)}
        recs = [t.partitions[0].records for t in r.responses]
        assert recs and recs[0]  # the records from offset 2 on
        # the same offset again (the client did not move): the records come again; then it moves
        r = await conn.request(FETCH, fetch_req(sid, 3, topic_id, {1: 5}), version=v)
        assert answered(r) == {}
        # partition 3 forgotten: new records there are no longer read
        produce(b, topic, 3, 1)
        r = await conn.request(FETCH, fetch_req(sid, 4, topic_id, {}, forgotten=[3]), version=v)
        assert answered(r) == {}
        # a long poll on the session wakes for a partition the request did not name
        t0 = time.monotonic()
        waiting = asyncio.ensure_future(conn.request(FETCH, fetch_req(sid, 5, topic_id, {}, max_wait=20000),
                                                     version=v))
        await asyncio.sleep(0.3)
        await asyncio.to_thread(produce, b, topic, 0, 1)
        r = await waiting
        # (not woken, it would answer after 20 s; a fresh producer's start-up is inside the bound)
        assert answered(r) == {0: (0, 3)} and time.monotonic() - t0 < 15
        # a wrong epoch and an unknown session are refused, and the session lives on
        r = await conn.request(FETCH, fetch_req(sid, 99, topic_id, {}), version=v)
        assert r.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH and not answered(r)
        r = await conn.request(FETCH, fetch_req(sid ^ 0x5A5A5A, 1, topic_id, {}), version=v)
        assert r.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        r = await conn.request(FETCH, fetch_req(sid, 6, topic_id, {0: 3}), version=v)
        assert r.error_code == 0 and answered(r) == {}
        # topic names (v12) in a session made with ids: refused, the session closed
        r = await conn.request(FETCH, {**fetch_req(sid, 7, topic_id, {}), "topics": []}, version=12)
        assert r.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        r = await conn.request(FETCH, fetch_req(sid, 7, topic_id, {}), version=v)
        assert r.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        # epoch -1 with no session: sessionless, every partition answered, session id 0
        r = await conn.request(FETCH, fetch_req(0, -1, topic_id, {0: 0, 1: 0}), version=v)
        assert int(r.session_id) == 0 and set(answered(r)) == {0, 1}
        # the cache holds 3 sessions: the 4th equal one is refused (answered sessionless)
        ids = []
        for _ in range(4):
            r = await conn.request(FETCH, fetch_req(0, 0, topic_id, {0: 0}), version=v)
            ids.append(int(r.session_id))
        assert all(ids[:3]) and ids[3] == 0 and set(answered(r)) == {0}
        # closing one (epoch -1) makes room
        await conn.request(FETCH, fetch_req(ids[0], -1, topic_id, {0: 0}), version=v)
        r = await conn.request(FETCH, fetch_req(0, 0, topic_id, {0: 0}), version=v)
        assert int(r.session_id) != 0
    finally:
        await conn.close()


def test_sessions_over_the_wire(broker: BrokerProcess) -> None:
    topic = make_topic(broker, PARTS, records_each=2)
    asyncio.run(_wire(broker, topic))
    m = metrics(broker)
    assert m["strom_fetch_incremental_total"] == 6 and m["strom_fetch_sessions"] == 3  # epochs 1-6


def test_kafka_python_consumer_reads_many_partitions_incrementally(broker: BrokerProcess) -> None:
    kafka = pytest.importorskip("kafka")
    n = 200
    topic = make_topic(broker, n, records_each=3)
    before = metrics(broker)["strom_fetch_incremental_total"]
    c = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, auto_offset_reset="earliest",
                            enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        c.assign([kafka.TopicPartition(topic, i) for i in range(n)])
        got: set[str] = set()
        deadline = time.monotonic() + 60
        while len(got) < 3 * n and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                got.update(r.value.decode() for r in recs)
        assert got == {f"{i}-{j}" for i in range(n) for j in range(3)}
        # idle polls: incremental fetches that answer nothing; new records still arrive
        for _ in range(5):
            c.poll(timeout_ms=200)
        produce(broker, topic, 123, 2)
        late: set[str] = set()
        deadline = time.monotonic() + 30
        while len(late) < 2 and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                late.update(r.value.decode() for r in recs)
        assert late == {"x-0", "x-1"}
    finally:
        c.close()
    assert metrics(broker)["strom_fetch_incremental_total"] > before + 5


def test_java_consumer_reads_many_partitions_incrementally(broker: BrokerProcess,
                                                          tmp_path: Path) -> None:
    """Java's consumer (clients/RoundTrip.java, assign() of every partition) opens a session and
    fetches incrementally, as against Kafka."""
    cp = compile_java(Path(__file__).parent / "clients" / "RoundTrip.java", tmp_path)
    n = 300
    topic = make_topic(broker, n, records_each=2)
    before = metrics(broker)
    r = subprocess.run(["java", "-cp", cp, "RoundTrip", "consume", broker.bootstrap,
                        topic, str(n), str(2 * n)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    values = [bytes.fromhex(line.split("\t")[6]).decode() for line in r.stdout.splitlines()
              if line.startswith("REC\t")]
    assert sorted(values) == sorted(f"{i}-{j}" for i in range(n) for j in range(2))
    after = metrics(broker)
    assert after["strom_fetch_incremental_total"] > before["strom_fetch_incremental_total"]
