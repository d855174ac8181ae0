"""KIP-848 groups under transactions: a consume-transform-produce application (Java kafka-clients
4.x, ``group.protocol=consumer``, transactional producers committing offsets with
``sendOffsetsToTransaction(offsets, consumer.groupMetadata())``) over four groups with range and
uniform assignors, static and dynamic members (about twenty consumers) joining, leaving and
bouncing while they work. The application must finish: every input record consumed and its
output committed exactly once per group, no partition left with lag, and no producer made
unusable by an answer Kafka would not give."""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from strom.testing.broker_process import BrokerProcess
from strom.testing.java_clients import compile_java

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SRC = Path(__file__).parent / "clients" / "TxnGroupChurn.java"

INPUTS = {"in-a": 12, "in-b": 16}
PER_PARTITION = 250
FIRST_FILL = 150  # before the application starts; the rest arrives once the churn is over
LAST_CHANGE_MS = 12000

# name, group, assignor, topics, static, start ms, stop ms, restart ms (-1: never)
SPECS = [
    # range, dynamic members; one leaves for good, one leaves and comes back as a new member
    ("a1", "ga", "range", "in-a", 0, 0, -1, -1),
    ("a2", "ga", "range", "in-a", 0, 0, -1, -1),
    ("a3", "ga", "range", "in-a", 0, 1000, 6000, -1),
    ("a4", "ga", "range", "in-a", 0, 3000, 9000, 12000),
    ("a5", "ga", "range", "in-a", 0, 5000, -1, -1),
    # uniform, static members: rolling bounces, and one static member that leaves for good
    ("b1", "gb", "uniform", "in-b", 1, 0, -1, -1),
    ("b2", "gb", "uniform", "in-b", 1, 0, -1, -1),
    ("b3", "gb", "uniform", "in-b", 1, 500, 4000, 5000),
    ("b4", "gb", "uniform", "in-b", 1, 2000, 7000, 8000),
    ("b5", "gb", "uniform", "in-b", 1, 4000, 10000, -1),
    ("b6", "gb", "uniform", "in-b", 1, 6000, -1, -1),
    # uniform over two topics, static and dynamic members mixed
    ("c1", "gc", "uniform", "in-a+in-b", 1, 0, -1, -1),
    ("c2", "gc", "uniform", "in-a+in-b", 0, 0, -1, -1),
    ("c3", "gc", "uniform", "in-a+in-b", 1, 1000, 5000, 6000),
    ("c4", "gc", "uniform", "in-a+in-b", 0, 2000, 8000, -1),
    ("c5", "gc", "uniform", "in-a+in-b", 0, 3000, -1, -1),
    ("c6", "gc", "uniform", "in-a+in-b", 1, 7000, 11000, 12000),
    # range over two topics, static and dynamic members mixed
    ("d1", "gd", "range", "in-a+in-b", 1, 0, -1, -1),
    ("d2", "gd", "range", "in-a+in-b", 0, 1500, 7000, 9000),
    ("d3", "gd", "range", "in-a+in-b", 1, 2500, 6000, 6500),
]
GROUP_TOPICS = {g: t.split("+") for _n, g, _a, t, *_ in SPECS}


@pytest.fixture(scope="module")
def churn_cp(tmp_path_factory: pytest.TempPathFactory) -> str:
    return compile_java(SRC, tmp_path_factory.mktemp("java-txn-churn"))


def lag(bs: str, ends: dict[tuple[str, int], int]) -> dict[str, list[tuple[str, int, int]]]:
    """Per group: (topic, partition, committed) of every input partition not fully committed."""
    out: dict[str, list[tuple[str, int, int]]] = {}
    for group, topics in sorted(GROUP_TOPICS.items()):
        c = Consumer({"bootstrap.servers": bs, "group.id": group})
        try:
            tps = [TopicPartition(t, p) for t in topics for p in range(INPUTS[t])]
            got = c.committed(tps, timeout=10)
        finally:
            c.close()
        behind = [
            (tp.topic, tp.partition, tp.offset) for tp in got if tp.offset != ends[(tp.topic, tp.partition)]
        ]
        if behind:
            out[group] = behind
    return out


def owners(text: str) -> dict[tuple[str, str, int], str]:
    """(group, topic, partition) -> the instance that last said it was ASSIGNED it and has not
    revoked or lost it since (from the application's log)."""
    group_of = {s[0]: s[1] for s in SPECS}
    own: dict[tuple[str, str, int], str] = {}
    for line in text.splitlines():
        f = line.split(" ", 2)
        if len(f) < 3 or f[1] not in ("ASSIGNED", "REVOKED", "LOST"):
            continue
        for t, p in re.findall(r"([\w-]+)-(\d+)", f[2]):
            key = (group_of[f[0]], t, int(p))
            if f[1] == "ASSIGNED":
                own[key] = f[0]
            elif own.get(key) == f[0]:
                del own[key]
    return own


@pytest.mark.timeout(480)  # (the drain below may take up to 200 s on a loaded machine)
def test_kip848_groups_with_transactions_and_churn_finish(tmp_path: Path, churn_cp: str) -> None:
    b = BrokerProcess(
        tmp_path / "data",
        overrides=[
            "group.initial.rebalance.delay.ms=0",
            "group.consumer.heartbeat.interval.ms=500",
            "group.consumer.session.timeout.ms=6000",
        ],
    )
    b.start()
    proc: subprocess.Popen[bytes] | None = None
    stop_file = tmp_path / "stop"
    log_path = tmp_path / "app.out"
    try:
        bs = b.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        new = [NewTopic(t, n, 1) for t, n in INPUTS.items()]
        new += [NewTopic(f"out-{g}", 4, 1) for g in GROUP_TOPICS]
        for fut in admin.create_topics(new).values():
            fut.result(10)
        p = Producer({"bootstrap.servers": bs, "linger.ms": 20})

        def fill(first: int, last: int) -> None:
            for t, n in INPUTS.items():
                for part in range(n):
                    for i in range(first, last):
                        p.produce(t, value=f"{t}-{part}-{i}".encode(), partition=part)
            assert p.flush(30) == 0

        fill(0, FIRST_FILL)
        ends = {(t, part): PER_PARTITION for t, n in INPUTS.items() for part in range(n)}

        args = [",".join(str(x) for x in s) for s in SPECS]
        with open(log_path, "wb") as f:
            proc = subprocess.Popen(
                ["java", "-Xss512k", "-cp", churn_cp, "TxnGroupChurn", bs, str(stop_file), *args],
                stdout=f,
                stderr=subprocess.STDOUT,
            )
        started = time.time()
        time.sleep(LAST_CHANGE_MS / 1000 + 2)  # the last membership change has settled
        assert proc.poll() is None, "the application exited early"
        fill(FIRST_FILL, PER_PARTITION)  # new input: every partition needs an owner again
        deadline = started + 200  # ~30 s on an idle machine; returns as soon as nothing lags
        behind = lag(bs, ends)
        while behind and time.time() < deadline:
            assert proc.poll() is None, "the application exited early"
            time.sleep(2)
            behind = lag(bs, ends)
        if behind:
            text = log_path.read_text()
            own = owners(text)
            stuck = {
                g: [(t, pt, off, own.get((g, t, pt), "NO OWNER")) for t, pt, off in rows]
                for g, rows in behind.items()
            }
            pytest.fail(
                "the application never finished; partitions with lag (topic, partition, "
                f"committed, owner per the app): {stuck}"
            )
        stop_file.touch()
        assert proc.wait(90) == 0
        text = log_path.read_text()
        assert " CRASH " not in text, [ln for ln in text.splitlines() if " CRASH " in ln]
        # Kafka answers a TxnOffsetCommit from a member at a stale epoch with ILLEGAL_GENERATION
        # (abortable: the application aborts and retries); nothing here may kill a producer
        fatal = [ln for ln in text.splitlines() if " FATAL " in ln]
        assert not fatal, fatal[:10]

        # exactly once per group: every input record's output committed once
        for group, topics in sorted(GROUP_TOPICS.items()):
            want = sum(INPUTS[t] for t in topics) * PER_PARTITION
            c = Consumer(
                {
                    "bootstrap.servers": bs,
                    "group.id": f"check-{uuid.uuid4().hex[:6]}",
                    "isolation.level": "read_committed",
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                }
            )
            keys: list[str] = []
            try:
                c.assign([TopicPartition(f"out-{group}", q, 0) for q in range(4)])
                idle = time.time()
                while time.time() - idle < 5 and len(keys) < want:
                    for m in c.consume(500, 0.5):
                        if m.error() is None:
                            keys.append(m.key().decode())
                            idle = time.time()
                time.sleep(0.5)
                for m in c.consume(500, 1.0):  # nothing beyond what is expected
                    if m.error() is None:
                        keys.append(m.key().decode())
            finally:
                c.close()
            expected = {
                f"{t}:{q}:{o}" for t in topics for q in range(INPUTS[t]) for o in range(PER_PARTITION)
            }
            dupes = len(keys) - len(set(keys))
            assert dupes == 0, f"{group}: {dupes} outputs committed twice"
            assert set(keys) == expected, f"{group}: missing {len(expected - set(keys))}"
        assert "Traceback" not in b.log(), b.log()[-4000:]
    finally:
        if proc is not None and proc.poll() is None:
            stop_file.touch()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        b.stop()
        if log_path.exists():
            text = log_path.read_text()
            print("\n".join(ln for ln in text.splitlines() if " COMMIT " not in ln)[-8000:])


def test_txn_offset_commit_with_a_stale_member_epoch_is_abortable(tmp_path: Path, churn_cp: str) -> None:
    """Kafka answers ILLEGAL_GENERATION (the producer's abortable CommitFailedException), not
    STALE_MEMBER_EPOCH (an unexpected error that makes the producer fatal)."""
    b = BrokerProcess(tmp_path / "data", overrides=["group.consumer.heartbeat.interval.ms=500"])
    b.start()
    try:
        bs = b.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        for fut in admin.create_topics([NewTopic("probe", 2, 1), NewTopic("probe-out", 1, 1)]).values():
            fut.result(10)
        p = Producer({"bootstrap.servers": bs})
        for i in range(10):
            p.produce("probe", value=str(i).encode(), partition=i % 2)
        assert p.flush(30) == 0
        r = subprocess.run(
            ["java", "-cp", churn_cp, "TxnGroupChurn", "stale-probe", bs, "probe", "gp"],
            capture_output=True,
            text=True,
            timeout=90,
        )
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("stale ", "real "))]
        assert lines == ["stale ABORTABLE CommitFailedException", "real COMMITTED"], r.stdout + r.stderr
    finally:
        b.stop()
