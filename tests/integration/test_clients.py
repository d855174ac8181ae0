"""Real Kafka clients against a real ``strom serve`` process: every field of every record round-trips.

Clients: confluent-kafka (librdkafka; all compressions, idempotent), kafka-python, aiokafka, kcat,
Java kafka-clients 4.x and kafkajs. The data-path tests use manual partition assignment, so they need
no group coordinator; the ``*_group`` tests and ``test_compat_run_sh`` (../shared/compat/run.sh, all
seven clients) are the acceptance for consumer groups.

Records are described once (:class:`Rec`) and checked exactly: partition, offset (contiguous from 0
in send order per partition), timestamp and its type, key, value and headers (order, duplicate names,
null values). Java and node programs (``clients/``) read and print records as tab-separated lines with
hex fields (``-`` for null) so Python can compare them with the same code.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from strom.testing.broker_process import BrokerProcess
from strom.testing.java_clients import COMPAT_HOME, compile_java

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CLIENTS = HERE / "clients"
COMPAT_DIR = Path(os.environ.get("STROM_COMPAT_DIR", REPO.parent / "shared" / "compat"))
NODE_MODULES = COMPAT_HOME / "node" / "node_modules"

TS0 = 1_700_000_000_000
CREATE_TIME = 0


@dataclass(frozen=True)
class Rec:
    partition: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True)
class Got:
    partition: int
    offset: int
    ts_type: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    def rec(self) -> Rec:
        return Rec(self.partition, self.timestamp, self.key, self.value, self.headers)


def make_records(n: int, partitions: int, *, null_header_values: bool = True,
                 adjacent_dups: bool = False, null_key_and_value: bool = True,
                 big: bool = True) -> list[Rec]:
    """Keyed and key-less records, null and empty values, binary bytes, duplicate header names
    (adjacent and not), null header values, explicit timestamps, an occasional large value.

    Client limits: kafka-python and aiokafka refuse null header values and a record whose key and
    value are both null; kafkajs takes headers as an object (duplicate names only adjacent)."""
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else b"k%d" % (i % 7)
        if i % 11 == 3:
            value: bytes | None = None
        elif i % 13 == 4:
            value = b""
        elif big and i % 97 == 7:
            value = bytes(range(256)) * 300  # 76.8 KB, compresses well
        else:
            value = b"v%d-" % i + bytes([i % 256, 0, 255]) + os.urandom(i % 17)
        nul = None if null_header_values else b"nv"
        hs: tuple[tuple[str, bytes | None], ...] = (
            (),
            (("a", b"1"),),
            (("dup", b"x"), ("dup", b"y"), ("n", nul)),
            (("h", b"\x00\xff"), ("dup", b"z"), ("e", b""), ("dup", nul)),
        )[i % 4]
        if adjacent_dups:
            hs = tuple(sorted(hs, key=lambda h: h[0]))
        if key is None and value is None and not null_key_and_value:
            key = b"k-for-%d" % i
        out.append(Rec(i % partitions, TS0 + i * 1000 + (i % 3), key, value, hs))
    return out


def check_round_trip(sent: list[Rec], got: list[Got], acks: dict[int, tuple[int, int]] | None = None,
                     *, check_ts_type: bool = True) -> None:
    """Per partition: offsets 0..n-1 in send order, every field equal; acks (index -> (p, o)) match."""
    want: dict[int, list[Rec]] = defaultdict(list)
    for r in sent:
        want[r.partition].append(r)
    have: dict[int, list[Got]] = defaultdict(list)
    for g in got:
        have[g.partition].append(g)
    assert sorted(have) == sorted(want), "partitions differ"
    for p, recs in want.items():
        gs = sorted(have[p], key=lambda g: g.offset)
        assert [g.offset for g in gs] == list(range(len(recs))), \
            f"partition {p}: offsets not 0..{len(recs) - 1}"
        for g, r in zip(gs, recs, strict=True):
            assert g.rec() == r, f"partition {p} offset {g.offset}: got {g.rec()!r}, sent {r!r}"
            if check_ts_type:
                assert g.ts_type == CREATE_TIME, f"partition {p} offset {g.offset}: ts type {g.ts_type}"
    if acks is not None:
        assert len(acks) == len(sent)
        per_p: dict[int, int] = defaultdict(int)
        for i, r in enumerate(sent):
            assert acks[i] == (r.partition, per_p[r.partition]), f"record {i} acked at {acks[i]}"
            per_p[r.partition] += 1


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------- confluent-kafka helpers

def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1, config=config or {})],
                                 operation_timeout=10).values():
        f.result(timeout=20)
    # wait until metadata shows every partition with a leader
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=5).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
                pm.leader >= 0 for pm in md.partitions.values()):
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {name} not ready")


def confluent_produce(bootstrap: str, topic: str, recs: list[Rec],
                      **conf: object) -> dict[int, tuple[int, int]]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, **conf})
    acks: dict[int, tuple[int, int]] = {}
    errors: list[str] = []

    def cb(i: int):  # type: ignore[no-untyped-def]
        def on_delivery(err, msg):  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(f"record {i}: {err}")
            else:
                acks[i] = (msg.partition(), msg.offset())
        return on_delivery

    for i, r in enumerate(recs):
        while True:
            try:
                p.produce(topic, value=r.value, key=r.key, partition=r.partition, timestamp=r.timestamp,
                          headers=list(r.headers) or None, on_delivery=cb(i))
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    left = p.flush(60)
    assert left == 0, f"{left} records not delivered within 60 s"
    assert not errors, errors[:5]
    return acks


def confluent_read(bootstrap: str, topic: str, partitions: int, count: int, timeout: float = 60,
                   **conf: object) -> list[Got]:
    """Read ``count`` records from offset 0 of every partition with assign() (no group)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                  "enable.auto.commit": False, "enable.partition.eof": False, **conf})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[Got] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    continue
                ts_type, ts = m.timestamp()
                got.append(Got(m.partition(), m.offset(), ts_type - 1, ts, m.key(), m.value(),
                               tuple(m.headers() or ())))
        assert len(got) == count, f"read {len(got)} of {count} records within {timeout} s"
        # nothing beyond: a short extra poll must return nothing
        extra = [m for m in c.consume(100, 1.0) if not m.error()]
        assert not extra, f"{len(extra)} records beyond the {count} expected, first at {extra[0].offset()}"
        return got
    finally:
        c.close()


def watermarks(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-wm"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)]
    finally:
        c.close()


# ---------------------------------------------------------------- spec lines for Java / node

def _hex(b: bytes | None) -> str:
    return "-" if b is None else b.hex()


def _unhex(s: str) -> bytes | None:
    return None if s == "-" else bytes.fromhex(s)


def spec_lines(recs: list[Rec]) -> str:
    return "".join(
        f"{r.partition}\t{r.timestamp}\t{_hex(r.key)}\t{_hex(r.value)}\t"
        + ",".join(f"{k}={_hex(v)}" for k, v in r.headers) + "\n" for r in recs)


def parse_acks(out: str) -> dict[int, tuple[int, int]]:
    acks = {}
    for line in out.splitlines():
        if line.startswith("ACK\t"):
            _, i, p, o = line.split("\t")
            acks[int(i)] = (int(p), int(o))
    return acks


def parse_recs(out: str) -> list[Got]:
    got = []
    for line in out.splitlines():
        if line.startswith("REC\t"):
            _, p, o, tt, ts, k, v, hs = line.split("\t")
            headers = tuple((h.split("=", 1)[0], _unhex(h.split("=", 1)[1])) for h in hs.split(",") if h)
            got.append(Got(int(p), int(o), int(tt), int(ts), _unhex(k), _unhex(v), headers))
    return got


def run_client(cmd: list[str], stdin: str = "", timeout: float = 120, env: dict[str, str] | None = None,
               ) -> str:
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **(env or {})})
    assert r.returncode == 0, (f"{cmd[:3]} exited {r.returncode}\nstdout: {r.stdout[-3000:]}\n"
                               f"stderr: {r.stderr[-3000:]}")
    return r.stdout


# ---------------------------------------------------------------- 1. confluent-kafka

@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_all_fields(shared_broker: BrokerProcess, compression: str) -> None:
    topic = unique_topic(f"ck-{compression}")
    create_topic(shared_broker.bootstrap, topic, 3)
    recs = make_records(600, 3)
    acks = confluent_produce(shared_broker.bootstrap, topic, recs, **{"compression.type": compression})
    got = confluent_read(shared_broker.bootstrap, topic, 3, len(recs))
    check_round_trip(recs, got, acks)
    assert watermarks(shared_broker.bootstrap, topic, 3) == [(0, 200)] * 3


def test_confluent_auto_create_and_default_partitioner(shared_broker: BrokerProcess) -> None:
    """Producing to an unknown topic auto-creates it; per-key order holds with the default partitioner."""
    from confluent_kafka import Producer

    topic = unique_topic("ck-auto")
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "enable.idempotence": True, "acks": "all",
                  "compression.type": "lz4", "linger.ms": 2})
    acked: list[tuple[bytes, bytes, int, int]] = []
    for i in range(300):
        k, v = b"key-%d" % (i % 10), b"%d" % i
        p.produce(topic, key=k, value=v,
                  on_delivery=lambda e, m: acked.append((m.key(), m.value(), m.partition(), m.offset()))
                  if e is None else pytest.fail(str(e)))
        p.poll(0)
    assert p.flush(60) == 0
    assert len(acked) == 300
    parts = max(a[2] for a in acked) + 1
    got = confluent_read(shared_broker.bootstrap, topic, parts, 300)
    by_pos = {(g.partition, g.offset): (g.key, g.value) for g in got}
    for k, v, part, off in acked:
        assert by_pos[(part, off)] == (k, v)
    per_key: dict[bytes, list[int]] = defaultdict(list)
    for g in sorted(got, key=lambda g: (g.partition, g.offset)):
        assert g.key is not None and g.value is not None
        per_key[g.key].append(int(g.value))
    for k, vs in per_key.items():
        assert vs == sorted(vs), f"key {k!r} out of order"
        assert len({g.partition for g in got if g.key == k}) == 1


def test_confluent_read_from_middle_and_small_fetches(shared_broker: BrokerProcess) -> None:
    """Start reading inside a compressed batch, with fetch sizes smaller than a batch."""
    from confluent_kafka import Consumer, TopicPartition

    topic = unique_topic("ck-mid")
    create_topic(shared_broker.bootstrap, topic, 1)
    recs = [Rec(0, TS0 + i, b"k", b"value-%05d" % i + b"x" * 200) for i in range(1000)]
    confluent_produce(shared_broker.bootstrap, topic, recs, **{"compression.type": "zstd", "linger.ms": 50})
    c = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "unused",
                  "enable.auto.commit": False, "fetch.max.bytes": 2048, "message.max.bytes": 2048,
                  "max.partition.fetch.bytes": 1024})
    try:
        c.assign([TopicPartition(topic, 0, 537)])
        vals = []
        deadline = time.monotonic() + 30
        while len(vals) < 463 and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                assert not m.error(), m.error()
                assert m.offset() == 537 + len(vals)
                vals.append(m.value())
        assert vals == [r.value for r in recs[537:]]
    finally:
        c.close()


def test_confluent_timestamps_default_and_log_append_time(shared_broker: BrokerProcess) -> None:
    """No explicit timestamp -> CreateTime near now; a LogAppendTime topic re-stamps with broker time."""
    topic = unique_topic("ck-ts")
    create_topic(shared_broker.bootstrap, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    t0 = int(time.time() * 1000)
    recs = [Rec(0, TS0 + i, b"k%d" % i, b"v%d" % i, (("h", b"1"),)) for i in range(50)]
    confluent_produce(shared_broker.bootstrap, topic, recs, **{"compression.type": "gzip"})
    got = confluent_read(shared_broker.bootstrap, topic, 1, 50)
    t1 = int(time.time() * 1000)
    for g, r in zip(sorted(got, key=lambda g: g.offset), recs, strict=True):
        assert (g.key, g.value, g.headers) == (r.key, r.value, r.headers)
        assert g.ts_type == 1, "expected LogAppendTime"
        assert t0 - 1000 <= g.timestamp <= t1 + 1000

    from confluent_kafka import Producer

    topic2 = unique_topic("ck-ts-now")
    create_topic(shared_broker.bootstrap, topic2, 1)
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": "all"})
    t0 = int(time.time() * 1000)
    p.produce(topic2, value=b"now", partition=0)
    assert p.flush(30) == 0
    (g,) = confluent_read(shared_broker.bootstrap, topic2, 1, 1)
    assert g.ts_type == CREATE_TIME and t0 - 1000 <= g.timestamp <= int(time.time() * 1000) + 1000


def test_confluent_large_records(shared_broker: BrokerProcess) -> None:
    """Records near the default 1 MiB max.message.bytes, uncompressed and compressed."""
    topic = unique_topic("ck-large")
    create_topic(shared_broker.bootstrap, topic, 1)
    big = [Rec(0, TS0 + i, b"big", os.urandom(900_000 - i)) for i in range(3)]
    acks = confluent_produce(shared_broker.bootstrap, topic, big)
    acks2 = confluent_produce(shared_broker.bootstrap, topic, [Rec(0, TS0, None, b"z" * 5_000_000)],
                              **{"compression.type": "zstd", "message.max.bytes": 6_000_000})
    assert acks2 == {0: (0, 3)}
    got = confluent_read(shared_broker.bootstrap, topic, 1, 4)
    check_round_trip([*big, Rec(0, TS0, None, b"z" * 5_000_000)], got, None)
    assert acks == {0: (0, 0), 1: (0, 1), 2: (0, 2)}


def test_confluent_long_poll_wakes_on_produce(shared_broker: BrokerProcess) -> None:
    """A fetch waiting for fetch.wait.max.ms returns as soon as a record arrives."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = unique_topic("ck-wait")
    create_topic(shared_broker.bootstrap, topic, 1)
    c = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "unused",
                  "fetch.wait.max.ms": 30000, "fetch.min.bytes": 1, "enable.auto.commit": False})
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": "all", "linger.ms": 0})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        assert c.poll(1.5) is None  # a fetch is now parked on the broker
        lat = []
        for i in range(5):
            t0 = time.monotonic()
            p.produce(topic, value=b"%d" % i, partition=0)
            p.flush(10)
            m = c.poll(40)
            assert m is not None and not m.error() and m.value() == b"%d" % i
            lat.append(time.monotonic() - t0)
            time.sleep(0.3)
        # a fetch not woken by the new record would answer after up to 30 s (the bound leaves a
        # loaded machine room: one hiccup of a second failed the old 5 s wait / 1 s bound)
        assert max(lat) < 5.0, f"produce-to-consume latencies {lat} (fetch not woken by new data?)"
    finally:
        c.close()


# ---------------------------------------------------------------- 2. kafka-python and aiokafka

def _kafka_python_codecs() -> list[str]:
    from kafka import codec

    have = {"gzip": codec.has_gzip(), "snappy": codec.has_snappy(), "lz4": codec.has_lz4(),
            "zstd": codec.has_zstd()}
    return [c for c, ok in have.items() if ok]


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_round_trip(shared_broker: BrokerProcess, compression: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    if compression != "none" and compression not in _kafka_python_codecs():
        pytest.skip(f"kafka-python has no {compression} codec library installed in this venv")
    topic = unique_topic(f"kp-{compression}")
    create_topic(shared_broker.bootstrap, topic, 2)
    recs = make_records(300, 2, null_header_values=False, null_key_and_value=False)
    prod = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, acks="all", enable_idempotence=True,
                         compression_type=None if compression == "none" else compression, linger_ms=5)
    futs = [prod.send(topic, key=r.key, value=r.value, partition=r.partition, timestamp_ms=r.timestamp,
                      headers=list(r.headers)) for r in recs]
    prod.flush(60)
    acks = {i: (md.partition, md.offset) for i, md in enumerate(f.get(timeout=30) for f in futs)}
    prod.close()

    cons = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap, group_id=None,
                         enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        cons.assign([TopicPartition(topic, p) for p in range(2)])
        cons.seek_to_beginning()
        got: list[Got] = []
        deadline = time.monotonic() + 60
        while len(got) < len(recs) and time.monotonic() < deadline:
            for tp_recs in cons.poll(timeout_ms=500).values():
                got += [Got(m.partition, m.offset, m.timestamp_type, m.timestamp, m.key, m.value,
                            tuple(m.headers)) for m in tp_recs]
    finally:
        cons.close()
    check_round_trip(recs, got, acks)


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_aiokafka_round_trip(shared_broker: BrokerProcess, compression: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = unique_topic(f"aio-{compression}")
    create_topic(shared_broker.bootstrap, topic, 2)
    recs = make_records(300, 2, null_header_values=False, null_key_and_value=False)

    async def main() -> tuple[dict[int, tuple[int, int]], list[Got]]:
        prod = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap, acks="all",
                                enable_idempotence=True, linger_ms=5,
                                compression_type=None if compression == "none" else compression)
        await prod.start()
        try:
            futs = [await prod.send(topic, key=r.key, value=r.value, partition=r.partition,
                                    timestamp_ms=r.timestamp, headers=list(r.headers)) for r in recs]
            mds = await asyncio.gather(*futs)
        finally:
            await prod.stop()
        acks = {i: (md.partition, md.offset) for i, md in enumerate(mds)}
        cons = AIOKafkaConsumer(bootstrap_servers=shared_broker.bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest")
        await cons.start()
        got: list[Got] = []
        try:
            cons.assign([TopicPartition(topic, p) for p in range(2)])
            await cons.seek_to_beginning()
            deadline = time.monotonic() + 60
            while len(got) < len(recs) and time.monotonic() < deadline:
                batch = await cons.getmany(timeout_ms=500)
                for ms in batch.values():
                    got += [Got(m.partition, m.offset, m.timestamp_type, m.timestamp, m.key, m.value,
                                tuple(m.headers)) for m in ms]
        finally:
            await cons.stop()
        return acks, got

    acks, got = asyncio.run(main())
    check_round_trip(recs, got, acks)


# ---------------------------------------------------------------- 3. kcat

@pytest.fixture(scope="module")
def kcat() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        pytest.skip("kcat not installed (../shared/compat/setup.sh installs it)")
    return path


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_round_trip(shared_broker: BrokerProcess, kcat: str, compression: str) -> None:
    topic = unique_topic(f"kcat-{compression}")
    create_topic(shared_broker.bootstrap, topic, 2)
    lines = [f"k{i % 9}:value {i} äö" for i in range(200)]
    for p in range(2):
        part = lines[p::2]
        r = subprocess.run([kcat, "-b", shared_broker.bootstrap, "-P", "-t", topic, "-p", str(p), "-K:",
                            "-H", "src=kcat", "-H", "dup=1", "-H", "dup=2", "-z", compression,
                            "-X", "acks=all"],
                           input="\n".join(part) + "\n", capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    r = subprocess.run([kcat, "-b", shared_broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                        "-f", "%p|%o|%k|%s|%h|%T\\n"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = sorted(r.stdout.splitlines(), key=lambda s: (int(s.split("|")[0]), int(s.split("|")[1])))
    want = []
    for p in range(2):
        for o, line in enumerate(lines[p::2]):
            k, v = line.split(":", 1)
            want.append(f"{p}|{o}|{k}|{v}|src=kcat,dup=1,dup=2")
    assert [s.rsplit("|", 1)[0] for s in out] == want
    now = time.time() * 1000
    assert all(now - 120_000 < int(s.rsplit("|", 1)[1]) <= now + 1000 for s in out)


def test_kcat_null_key_and_value(shared_broker: BrokerProcess, kcat: str) -> None:
    """-Z: empty key/value are sent as NULL and printed as NULL."""
    topic = unique_topic("kcat-null")
    create_topic(shared_broker.bootstrap, topic, 1)
    r = subprocess.run([kcat, "-b", shared_broker.bootstrap, "-P", "-t", topic, "-p", "0", "-K:", "-Z"],
                       input="a:1\n:2\nb:\n", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([kcat, "-b", shared_broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                        "-Z", "-f", "%o|%k|%s|%K|%S\\n"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["0|a|1|1|1", "1|NULL|2|-1|1", "2|b|NULL|1|-1"]


def test_kcat_metadata_and_offsets_query(shared_broker: BrokerProcess, kcat: str) -> None:
    topic = unique_topic("kcat-md")
    create_topic(shared_broker.bootstrap, topic, 3)
    r = subprocess.run([kcat, "-b", shared_broker.bootstrap, "-L", "-t", topic], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert f'topic "{topic}" with 3 partitions' in r.stdout
    recs = [Rec(1, TS0 + i * 10, None, b"%d" % i) for i in range(10)]
    confluent_produce(shared_broker.bootstrap, topic, recs)
    # -Q: offset for timestamp (ListOffsets by timestamp)
    r = subprocess.run([kcat, "-b", shared_broker.bootstrap, "-Q", "-t", f"{topic}:1:{TS0 + 45}"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "offset 5" in r.stdout, r.stdout


# ---------------------------------------------------------------- 4. Java kafka-clients and kafkajs

@pytest.fixture(scope="module")
def java_cp(tmp_path_factory: pytest.TempPathFactory) -> str:
    return compile_java(CLIENTS / "RoundTrip.java", tmp_path_factory.mktemp("java"))


def java(cp: str, *args: str, stdin: str = "") -> str:
    return run_client(["java", "-cp", cp, "RoundTrip", *args], stdin=stdin)


@pytest.fixture(scope="module")
def node() -> str:
    path = shutil.which("node")
    if path is None:
        pytest.skip("node not installed")
    if not (NODE_MODULES / "kafkajs").is_dir():
        pytest.skip(f"kafkajs not found in {NODE_MODULES} (run ../shared/compat/setup.sh)")
    return path


def kafkajs(node: str, *args: str, stdin: str = "") -> str:
    return run_client([node, str(CLIENTS / "roundtrip.mjs"), *args], stdin=stdin,
                      env={"NODE_PATH": str(NODE_MODULES)})


@pytest.mark.slow
@pytest.mark.parametrize("compression", ["lz4", "zstd", "snappy", "gzip", "none"])
def test_java_round_trip(shared_broker: BrokerProcess, java_cp: str, compression: str) -> None:
    topic = unique_topic(f"java-{compression}")
    create_topic(shared_broker.bootstrap, topic, 3)
    recs = make_records(500, 3)
    acks = parse_acks(java(java_cp, "produce", shared_broker.bootstrap, topic, compression,
                           stdin=spec_lines(recs)))
    got = parse_recs(java(java_cp, "consume", shared_broker.bootstrap, topic, "3", str(len(recs))))
    check_round_trip(recs, got, acks)
    # and the same bytes through librdkafka
    check_round_trip(recs, confluent_read(shared_broker.bootstrap, topic, 3, len(recs)))


@pytest.mark.slow
def test_confluent_to_java(shared_broker: BrokerProcess, java_cp: str) -> None:
    topic = unique_topic("ck2java")
    create_topic(shared_broker.bootstrap, topic, 2)
    recs = make_records(300, 2)
    acks = confluent_produce(shared_broker.bootstrap, topic, recs, **{"compression.type": "zstd"})
    got = parse_recs(java(java_cp, "consume", shared_broker.bootstrap, topic, "2", str(len(recs))))
    check_round_trip(recs, got, acks)


@pytest.mark.slow
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_kafkajs_produce(shared_broker: BrokerProcess, node: str, compression: str) -> None:
    """kafkajs produces (idempotent); librdkafka reads back with assign() (kafkajs has no assign)."""
    topic = unique_topic(f"kjs-{compression}")
    create_topic(shared_broker.bootstrap, topic, 2)
    recs = make_records(300, 2, null_header_values=False, adjacent_dups=True)
    acks = parse_acks(kafkajs(node, "produce", shared_broker.bootstrap, topic, compression,
                              stdin=spec_lines(recs)))
    got = confluent_read(shared_broker.bootstrap, topic, 2, len(recs))
    check_round_trip(recs, got, acks)


# ---------------------------------------------------------------- consumer groups (acceptance)

@pytest.mark.slow
def test_confluent_group_commit_and_resume(shared_broker: BrokerProcess) -> None:
    from confluent_kafka import Consumer

    topic = unique_topic("ck-grp")
    create_topic(shared_broker.bootstrap, topic, 3)
    recs = make_records(300, 3)
    confluent_produce(shared_broker.bootstrap, topic, recs, **{"compression.type": "snappy"})
    group = f"g-{topic}"
    conf = {"bootstrap.servers": shared_broker.bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 10000}

    def drain(c: Consumer, want: int, timeout: float) -> list[Got]:
        got: list[Got] = []
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                assert not m.error(), m.error()
                got.append(Got(m.partition(), m.offset(), m.timestamp()[0] - 1, m.timestamp()[1], m.key(),
                               m.value(), tuple(m.headers() or ())))
        return got

    c = Consumer(conf)
    c.subscribe([topic])
    got = drain(c, 200, 60)
    c.commit(asynchronous=False)
    c.close()
    assert len(got) >= 200
    c = Consumer(conf)
    c.subscribe([topic])
    rest = drain(c, len(recs) - len(got), 60)
    extra = drain(c, 1, 3)
    c.commit(asynchronous=False)
    c.close()
    assert not extra
    check_round_trip(recs, got + rest)


@pytest.mark.slow
def test_java_group_consumer(shared_broker: BrokerProcess, java_cp: str) -> None:
    topic = unique_topic("java-grp")
    create_topic(shared_broker.bootstrap, topic, 3)
    recs = make_records(300, 3)
    acks = confluent_produce(shared_broker.bootstrap, topic, recs)
    got = parse_recs(java(java_cp, "consume", shared_broker.bootstrap, topic, "3", str(len(recs)),
                          f"g-{topic}"))
    check_round_trip(recs, got, acks)


@pytest.mark.slow
def test_kafkajs_group_consumer(shared_broker: BrokerProcess, node: str) -> None:
    topic = unique_topic("kjs-grp")
    create_topic(shared_broker.bootstrap, topic, 2)
    recs = make_records(200, 2, null_header_values=False, adjacent_dups=True)
    acks = parse_acks(kafkajs(node, "produce", shared_broker.bootstrap, topic, "gzip",
                              stdin=spec_lines(recs)))
    got = parse_recs(kafkajs(node, "consume", shared_broker.bootstrap, topic, "2", str(len(recs)),
                             f"g-{topic}"))
    check_round_trip(recs, got, acks, check_ts_type=False)


@pytest.fixture
def compat_run_sh() -> Path:
    run = COMPAT_DIR / "run.sh"
    if not run.exists():
        pytest.skip(f"{run} not found (the shared compat suite lives beside the repo)")
    return run


@pytest.mark.slow
def test_compat_run_sh(broker: BrokerProcess, compat_run_sh: Path) -> None:
    """The shared acceptance: seven real clients, groups included, all PASS."""
    r = subprocess.run([str(compat_run_sh), broker.bootstrap], capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0 and "7 passed" in r.stdout, f"{r.stdout}\n{r.stderr[-2000:]}\n{broker.log()}"

