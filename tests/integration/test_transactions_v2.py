"""Transaction version 2 (KIP-890 part 2) with the Java client 4.3, and the classic protocol kept.

strom advertises ``transaction.version`` finalized at 2 (Kafka 4.0's default), so the Java producer
ends every transaction with EndTxn v5 (the coordinator bumps the epoch and returns it), adds
partitions implicitly through Produce v12 and the offsets partition through TxnOffsetCommit v5.
The coordinator's epoch, read back with DescribeTransactions, shows which protocol ran: +1 per
transaction end with version 2, unchanged with ``strom.transaction.version=1``. librdkafka 2.16
does not implement version 2 (EndTxn v1, AddPartitionsToTxn v0): it keeps the classic semantics.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.broker_process import BrokerProcess
from strom.testing.java_clients import compile_java

pytestmark = pytest.mark.integration



@pytest.fixture(scope="module")
def txn_v2_java(tmp_path_factory: pytest.TempPathFactory) -> str:
    return compile_java(Path(__file__).parent / "clients" / "TxnV2.java", tmp_path_factory.mktemp("txnv2"))


def _broker(tmp: Path, *overrides: str) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp / "data", overrides=["group.initial.rebalance.delay.ms=0", *overrides])
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def broker_v2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from _broker(tmp_path_factory.mktemp("tv2"))


def _create(bs: str, *topics: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        f.result(15)


def _java(cp: str, *args: str) -> dict[str, str]:
    r = subprocess.run(["java", "-cp", cp, "TxnV2", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    out: dict[str, str] = {}
    for line in r.stdout.split():
        k, _, v = line.partition("=")
        out[k] = v
    return out


def _read(bs: str, topic: str, partitions: int, expect: int, timeout: float = 10.0) -> list[str]:
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"check-{time.time()}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[str] = []
    eof: set[int] = set()
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = c.poll(0.3)
        if m is None:
            continue
        if m.error():
            eof.add(m.partition())
            if len(eof) == partitions and len(out) >= expect:
                break
            continue
        out.append(m.value().decode())
    c.close()
    return out


def test_java_commit_and_abort_bump_the_epoch(broker_v2: BrokerProcess, txn_v2_java: str) -> None:
    bs = broker_v2.bootstrap
    _create(bs, "v2-rounds")
    res = _java(txn_v2_java, "rounds", bs, "v2-rounds", "v2-writer")
    # InitProducerId gives epoch 0; commit, abort, commit each bump it (EndTxn v5)
    assert res["epoch"] == "3" and res["state"] == "CompleteCommit"
    got = sorted(_read(bs, "v2-rounds", 2, 15))
    assert got == sorted([f"c{i}" for i in range(10)] + [f"d{i}" for i in range(5)])


def test_java_send_offsets_to_transaction(broker_v2: BrokerProcess, txn_v2_java: str) -> None:
    bs = broker_v2.bootstrap
    _create(bs, "v2-in", "v2-out")
    p = Producer({"bootstrap.servers": bs})
    for i in range(30):
        p.produce("v2-in", key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
    p.flush(10)
    res = _java(txn_v2_java, "offsets", bs, "v2-in", "v2-out", "v2-group", "v2-copier", "30")
    assert res["copied"] == "30"
    assert int(res["epoch"]) >= 1  # one bump per committed transaction
    assert sorted(_read(bs, "v2-out", 2, 30)) == sorted(f"V{i}" for i in range(30))
    # the offsets were committed with the transaction (TxnOffsetCommit v5 added __consumer_offsets)
    c = Consumer({"bootstrap.servers": bs, "group.id": "v2-group"})
    committed = c.committed([TopicPartition("v2-in", 0), TopicPartition("v2-in", 1)], timeout=10)
    c.close()
    assert [tp.offset for tp in committed] == [15, 15]


def test_java_zombie_is_fenced(broker_v2: BrokerProcess, txn_v2_java: str) -> None:
    bs = broker_v2.bootstrap
    _create(bs, "v2-zombie")
    res = _java(txn_v2_java, "zombie", bs, "v2-zombie", "v2-zz")
    assert "fenced" in res and "not-fenced" not in res
    assert res["state"] == "CompleteCommit"
    assert _read(bs, "v2-zombie", 2, 1) == ["live"]


@pytest.fixture
def timeout_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    yield from _broker(tmp_path, "transaction.abort.timed.out.transaction.cleanup.interval.ms=300")


def test_java_timed_out_transaction_is_fenced(timeout_broker: BrokerProcess, txn_v2_java: str) -> None:
    """The coordinator aborts a transaction past its timeout two epochs up (fence + abort, as
    Kafka does for transaction version 2): the producer's EndTxn is then no retry of a bump and
    it is fenced; nothing of the transaction is visible."""
    bs = timeout_broker.bootstrap
    _create(bs, "v2-timeout")
    res = _java(txn_v2_java, "timeout", bs, "v2-timeout", "v2-slow")
    assert res["commit"] == "ProducerFencedException"
    assert res["state"] == "CompleteAbort" and res["epoch"] == "2"
    assert _read(bs, "v2-timeout", 2, 0, timeout=4) == []


def test_librdkafka_keeps_the_classic_protocol(broker_v2: BrokerProcess) -> None:
    bs = broker_v2.bootstrap
    _create(bs, "v2-rd")
    p = Producer({"bootstrap.servers": bs, "transactional.id": "v2-rd", "linger.ms": 5})
    p.init_transactions(15)
    for r in range(3):
        p.begin_transaction()
        for i in range(6):
            p.produce("v2-rd", value=b"r%d-%d" % (r, i), partition=i % 2)
        p.flush(10)
        if r == 1:
            p.abort_transaction(15)
        else:
            p.commit_transaction(15)
    got = sorted(_read(bs, "v2-rd", 2, 12))
    assert got == sorted(f"r{r}-{i}" for r in (0, 2) for i in range(6))


@pytest.fixture
def broker_v1(tmp_path: Path) -> Iterator[BrokerProcess]:
    yield from _broker(tmp_path, "strom.transaction.version=1")


def test_java_with_transaction_version_1(broker_v1: BrokerProcess, txn_v2_java: str) -> None:
    bs = broker_v1.bootstrap
    _create(bs, "v1-rounds", "v1-in", "v1-out")
    res = _java(txn_v2_java, "rounds", bs, "v1-rounds", "v1-writer")
    assert res["epoch"] == "0"  # EndTxn v4: the epoch stays
    assert len(_read(bs, "v1-rounds", 2, 15)) == 15
    p = Producer({"bootstrap.servers": bs})
    for i in range(10):
        p.produce("v1-in", value=b"v%d" % i, partition=i % 2)
    p.flush(10)
    res = _java(txn_v2_java, "offsets", bs, "v1-in", "v1-out", "v1-group", "v1-copier", "10")
    assert res["copied"] == "10" and res["epoch"] == "0"
    res = _java(txn_v2_java, "zombie", bs, "v1-rounds", "v1-zz")
    assert "fenced" in res and "not-fenced" not in res


@pytest.fixture
def cleaning_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    yield from _broker(tmp_path, "log.cleaner.backoff.ms=200")


def _read_uncommitted(bs: str, topic: str) -> list[str]:
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"ru-{time.time()}",
            "isolation.level": "read_uncommitted",
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[str] = []
    deadline = time.time() + 10
    while time.time() < deadline:
        m = c.poll(0.3)
        if m is None:
            continue
        if m.error():
            break
        out.append(m.value().decode())
    c.close()
    return out


def test_compaction_removes_aborted_transactions(cleaning_broker: BrokerProcess) -> None:
    """A compacted topic written in transactions (librdkafka): the cleaner drops the aborted
    transactions' records and read_committed still sees the latest committed value per key."""
    bs = cleaning_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    cfg = {"cleanup.policy": "compact", "segment.bytes": "4000", "min.cleanable.dirty.ratio": "0.01"}
    for f in admin.create_topics([NewTopic("v2-compact", 1, 1, config=cfg)]).values():
        f.result(15)
    p = Producer({"bootstrap.servers": bs, "transactional.id": "compactor", "linger.ms": 5})
    p.init_transactions(15)
    latest: dict[str, str] = {}
    aborted: set[str] = set()
    for t in range(30):
        p.begin_transaction()
        vals = {f"k{(t * 3 + i) % 10}": f"t{t}-{i}-" + "x" * 40 for i in range(5)}
        for k, v in vals.items():
            p.produce("v2-compact", key=k.encode(), value=v.encode(), partition=0)
        p.flush(10)
        if t % 3 == 1:
            p.abort_transaction(15)
            aborted.update(vals.values())
        else:
            p.commit_transaction(15)
            latest.update(vals)

    # plain records after them, so the transactions lie in closed (cleanable) segments
    plain = Producer({"bootstrap.servers": bs, "linger.ms": 5, "batch.num.messages": 5})
    for i in range(150):
        k, v = f"f{i % 10}", f"filler-{i}-" + "y" * 40
        plain.produce("v2-compact", key=k.encode(), value=v.encode(), partition=0)
        latest[k] = v
    assert plain.flush(10) == 0

    def cleaned() -> bool:
        return not aborted & set(_read_uncommitted(bs, "v2-compact"))

    deadline = time.time() + 40
    while not cleaned() and time.time() < deadline:
        time.sleep(1)
    assert cleaned(), "the aborted records were not cleaned"
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"rc-{time.time()}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition("v2-compact", 0, 0)])
    seen: dict[str, str] = {}
    deadline = time.time() + 10
    while time.time() < deadline:
        m = c.poll(0.3)
        if m is None:
            continue
        if m.error():
            break
        seen[m.key().decode()] = m.value().decode()
    c.close()
    assert seen == latest
