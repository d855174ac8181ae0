"""``strom transactions`` as a subprocess against a real strom broker, with confluent-kafka
transactional producers: list and describe an open transaction, abort a hung one (read_committed
consumers never see it, the last stable offset moves on, the producer is fenced)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from strom.client.client import LATEST, Client
from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

DESCRIBE_HEADERS = [
    "CoordinatorId",
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
]


def strom(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strom", *args, "--bootstrap-server", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
    )


def rows(stdout: str) -> list[dict[str, str]]:
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    headers = lines[0].split()
    return [dict(zip(headers, ln.split(), strict=True)) for ln in lines[1:]]


def create(broker: BrokerProcess, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(15)


def offsets(broker: BrokerProcess, topic: str, partitions: int, isolation_level: int) -> dict[int, int]:
    async def go() -> dict[int, int]:
        async with Client(broker.bootstrap) as c:
            r = await c.list_offsets(
                topic, dict.fromkeys(range(partitions), LATEST), isolation_level=isolation_level
            )
            assert isinstance(r, dict)
            return r

    return asyncio.run(go())


def read_committed(broker: BrokerProcess, topic: str, partitions: int) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"rc-{time.time()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    eof: set[int] = set()
    deadline = time.time() + 10
    while time.time() < deadline and len(eof) < partitions:
        m = c.poll(0.3)
        if m is None:
            continue
        err = m.error()
        if err is not None:
            if err.code() == -191:  # _PARTITION_EOF
                eof.add(int(m.partition() or 0))
                continue
            raise KafkaException(err)
        eof.discard(int(m.partition() or 0))
        out.append(m.value() or b"")
    c.close()
    assert len(eof) == partitions, "read_committed consumer did not reach the end"
    return out


@pytest.fixture
def open_txn(broker: BrokerProcess) -> Iterator[Producer]:
    """A transactional producer with an open transaction over tt-0 and tt-1 (5 records),
    after 3 committed non-transactional records on tt-0."""
    create(broker, "tt", 2)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        plain.produce("tt", value=b"plain-%d" % i, partition=0)
    assert plain.flush(15) == 0
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": "hung-tx",
            "transaction.timeout.ms": 600_000,
            "log_level": 0,
        }
    )
    p.init_transactions(15)
    p.begin_transaction()
    for i in range(5):
        p.produce("tt", value=b"txn-%d" % i, partition=i % 2)
    assert p.flush(15) == 0
    yield p


def test_list_and_describe_an_open_transaction(broker: BrokerProcess, open_txn: Producer) -> None:
    started = time.time() * 1000
    r = strom(broker, "transactions", "list")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].split() == [
        "TransactionalId",
        "Coordinator",
        "ProducerId",
        "TransactionState",
    ]
    (listed,) = rows(r.stdout)
    assert listed["TransactionalId"] == "hung-tx"
    assert listed["Coordinator"] == "1" and listed["TransactionState"] == "Ongoing"
    assert int(listed["ProducerId"]) >= 0
    assert rows(strom(broker, "transactions", "list", "--state", "Ongoing").stdout) == [listed]
    assert rows(strom(broker, "transactions", "list", "--state", "PrepareCommit,Empty").stdout) == []
    by_pid = strom(broker, "transactions", "list", "--producer-id", listed["ProducerId"])
    assert rows(by_pid.stdout) == [listed]

    r = strom(broker, "transactions", "describe", "--transactional-id", "hung-tx")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].split() == DESCRIBE_HEADERS
    (d,) = rows(r.stdout)
    assert d["CoordinatorId"] == "1" and d["TransactionalId"] == "hung-tx"
    assert d["ProducerId"] == listed["ProducerId"] and d["ProducerEpoch"] == "0"
    assert d["TransactionState"] == "Ongoing"
    assert d["TransactionTimeoutMs"] == "600000"
    start = int(d["CurrentTransactionStartTimeMs"])
    assert started - 60_000 < start <= time.time() * 1000
    assert 0 <= int(d["TransactionDurationMs"]) < 60_000
    assert d["TopicPartitions"] == "tt-0,tt-1"
    # while it is open, read_committed readers stop at the last stable offset
    time.sleep(0.2)
    assert (
        int(rows(strom(broker, "transactions", "list", "--duration-filter", "100").stdout)[0]["ProducerId"])
        >= 0
    )
    assert rows(strom(broker, "transactions", "list", "--duration-filter", "3600000").stdout) == []
    open_txn.commit_transaction(15)
    assert sorted(read_committed(broker, "tt", 2)) == sorted(
        [b"plain-0", b"plain-1", b"plain-2"] + [b"txn-%d" % i for i in range(5)]
    )


def test_abort_a_hung_transaction(broker: BrokerProcess, open_txn: Producer) -> None:
    hw = offsets(broker, "tt", 2, 0)
    assert hw == {0: 3 + 3, 1: 2}
    assert offsets(broker, "tt", 2, 1) == {0: 3, 1: 0}, "the open transaction holds the LSO"
    assert sorted(read_committed(broker, "tt", 2)) == [b"plain-0", b"plain-1", b"plain-2"]

    r = strom(broker, "transactions", "abort", "--transactional-id", "hung-tx")
    assert r.returncode == 0, r.stderr
    assert "Aborted the transaction of 'hung-tx'" in r.stdout
    assert "partitions tt-0,tt-1" in r.stdout
    assert "fenced" in r.stdout

    # abort markers written: the LSO moved past the transaction, up to the high watermark
    after = offsets(broker, "tt", 2, 0)
    assert after == {0: hw[0] + 1, 1: hw[1] + 1}
    assert offsets(broker, "tt", 2, 1) == after
    assert rows(strom(broker, "transactions", "list", "--state", "Ongoing").stdout) == []
    listed = rows(strom(broker, "transactions", "list").stdout)
    assert [x["TransactionState"] for x in listed if x["TransactionalId"] == "hung-tx"] in (
        ["Empty"],
        ["CompleteAbort"],
    )

    # the hung producer is fenced: it can no longer commit what it wrote
    with pytest.raises(KafkaException) as e:
        open_txn.commit_transaction(15)
    assert e.value.args[0].fatal() or "fenced" in str(e.value).lower()

    # nothing of the aborted transaction is ever visible to read_committed; later records are
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce("tt", value=b"after", partition=1)
    assert plain.flush(15) == 0
    assert sorted(read_committed(broker, "tt", 2)) == [b"after", b"plain-0", b"plain-1", b"plain-2"]

    # a new instance with the same transactional id works normally
    p2 = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "hung-tx", "log_level": 0})
    p2.init_transactions(15)
    p2.begin_transaction()
    p2.produce("tt", value=b"next", partition=0)
    p2.commit_transaction(15)
    assert b"next" in read_committed(broker, "tt", 2)


def test_abort_without_open_transaction_and_unknown_id(broker: BrokerProcess, open_txn: Producer) -> None:
    open_txn.commit_transaction(15)
    r = strom(broker, "transactions", "abort", "--transactional-id", "hung-tx")
    assert r.returncode == 0, r.stderr
    assert "has no open transaction (state CompleteCommit); nothing to abort." in r.stdout
    # the committed producer was not fenced: it can go on
    open_txn.begin_transaction()
    open_txn.produce("tt", value=b"more", partition=1)
    open_txn.commit_transaction(15)
    assert b"more" in read_committed(broker, "tt", 2)


def test_describe_after_commit(broker: BrokerProcess, open_txn: Producer) -> None:
    open_txn.commit_transaction(15)
    r = strom(broker, "transactions", "describe", "--transactional-id", "hung-tx")
    assert r.returncode == 0, r.stderr
    (line,) = r.stdout.splitlines()[1:]
    fields = line.split()
    assert fields[1:5] == ["hung-tx", fields[2], "0", "CompleteCommit"]
    assert len(fields) == len(DESCRIBE_HEADERS) - 1, "no partitions: TopicPartitions is empty"


def test_describe_idle_and_unknown(broker: BrokerProcess) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "idle-tx", "log_level": 0})
    p.init_transactions(15)
    r = strom(broker, "transactions", "describe", "--transactional-id", "idle-tx")
    assert r.returncode == 0, r.stderr
    fields = r.stdout.splitlines()[1].split()
    assert fields[4:8] == ["Empty", "60000", "None", "None"]
    r = strom(broker, "transactions", "describe", "--transactional-id", "nope")
    assert r.returncode == 1 and "transactional id 'nope' does not exist" in r.stderr
