"""``strom groups`` as a subprocess against a real strom broker, with confluent-kafka consumers
and producers: lag while a producer runs, list with states, delete, reset-offsets in every mode."""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from strom.client.client import Client
from strom.client.groups import fetch_offsets
from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

OFFSET_HEADERS = [
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
]


def strom(broker: BrokerProcess, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strom", *args, "--bootstrap-server", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def table(stdout: str) -> list[dict[str, str]]:
    """Rows of the last table in ``stdout`` as dicts (columns split on whitespace)."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    start = max(i for i, ln in enumerate(lines) if ln.startswith("GROUP"))
    headers = lines[start].split()
    return [dict(zip(headers, ln.split(), strict=True)) for ln in lines[start + 1 :]]


def create(broker: BrokerProcess, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(15)


def committed(broker: BrokerProcess, group: str) -> dict[tuple[str, int], int]:
    async def go() -> dict[tuple[str, int], int]:
        async with Client(broker.bootstrap) as c:
            return {tp: o.offset for tp, o in (await fetch_offsets(c, group)).items()}

    return asyncio.run(go())


def consumer(broker: BrokerProcess, group: str, **extra: object) -> Consumer:
    conf: dict[str, object] = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    }
    conf.update(extra)
    return Consumer(conf)


def wait_assigned(c: Consumer, timeout: float = 20) -> None:
    deadline = time.time() + timeout
    while not c.assignment():
        assert time.time() < deadline, "no assignment"
        c.poll(0.2)


def commit_offsets(broker: BrokerProcess, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Give ``group`` committed offsets without leaving a member behind."""
    c = consumer(broker, group)
    c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    c.close()


# ---------------------------------------------------------------------------- describe / lag


def test_describe_shows_correct_lag_while_a_producer_runs(broker: BrokerProcess) -> None:
    topic, group, parts = "lag-topic", "lag-group", 3
    create(broker, topic, parts)
    stop = threading.Event()
    lock = threading.Lock()
    produced = [0] * parts  # records handed to produce() (upper bound of the log end)
    delivered = [0] * parts  # records acknowledged (lower bound of the log end)
    acked = {p: 0 for p in range(parts)}  # commits acknowledged (lower bound of CURRENT-OFFSET)
    sent = {p: 0 for p in range(parts)}  # commits sent (upper bound of CURRENT-OFFSET)
    errors: list[BaseException] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            with lock:
                delivered[msg.partition()] += 1  # type: ignore[attr-defined]

    def produce() -> None:
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all"})
        i = 0
        while not stop.is_set():
            part = i % parts
            with lock:
                produced[part] += 1
            p.produce(topic, value=b"x%d" % i, partition=part, on_delivery=on_delivery)
            p.poll(0)
            i += 1
            if i % 20 == 0:
                time.sleep(0.01)
        p.flush(15)

    def consume(c: Consumer) -> None:
        try:
            n = 0
            while not stop.is_set():
                m = c.poll(0.2)
                if m is None or m.error():
                    continue
                n += 1
                part, nxt = int(m.partition() or 0), int(m.offset() or 0) + 1
                if n % 7 == 0:
                    with lock:
                        sent[part] = max(sent[part], nxt)
                    try:
                        c.commit(message=m, asynchronous=False)
                    except KafkaException:
                        continue  # rebalance in between: the commit may be refused
                    with lock:
                        acked[part] = max(acked[part], nxt)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    consumers = [consumer(broker, group, **{"client.id": f"lagc-{i}"}) for i in range(2)]
    for c in consumers:
        c.subscribe([topic])
    threads = [threading.Thread(target=produce)] + [
        threading.Thread(target=consume, args=(c,)) for c in consumers
    ]
    for t in threads:
        t.start()
    try:
        # wait for a stable group with both members owning partitions
        deadline = time.time() + 90
        while True:
            r = strom(broker, "groups", "describe", "--group", group, "--members")
            rows = table(r.stdout) if r.returncode == 0 and "GROUP" in r.stdout else []
            if len(rows) == 2 and sum(int(x["#PARTITIONS"]) for x in rows) == parts:
                break
            assert time.time() < deadline, r.stdout + r.stderr
            time.sleep(0.5)
        member_ids = {x["CONSUMER-ID"] for x in rows}
        assert {x["CLIENT-ID"] for x in rows} == {"lagc-0", "lagc-1"}

        previous: dict[int, tuple[int, int]] = {}
        seen_lag = False
        for _ in range(6):
            with lock:
                lo_leo, lo_cur = list(delivered), dict(acked)
            r = strom(broker, "groups", "describe", "--group", group)
            with lock:
                hi_leo, hi_cur = list(produced), dict(sent)
            assert r.returncode == 0, r.stderr
            lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
            assert lines[0].split() == OFFSET_HEADERS
            rows = table(r.stdout)
            if any(x["CONSUMER-ID"] == "-" for x in rows):  # a rebalance in between: try again
                time.sleep(0.3)
                continue
            assert sorted(int(x["PARTITION"]) for x in rows) == list(range(parts))
            for x in rows:
                p = int(x["PARTITION"])
                assert x["GROUP"] == group and x["TOPIC"] == topic
                assert x["CONSUMER-ID"] in member_ids
                assert x["HOST"].lstrip("/") == "127.0.0.1"
                leo = int(x["LOG-END-OFFSET"])
                assert lo_leo[p] <= leo <= hi_leo[p], (p, lo_leo, leo, hi_leo)
                if x["CURRENT-OFFSET"] == "-":
                    assert x["LAG"] == "-" and hi_cur[p] == 0
                    continue
                cur = int(x["CURRENT-OFFSET"])
                assert lo_cur[p] <= cur <= hi_cur[p], (p, lo_cur, cur, hi_cur)
                assert int(x["LAG"]) == leo - cur >= 0
                seen_lag |= leo - cur > 0
                old_cur, old_leo = previous.get(p, (0, 0))
                assert cur >= old_cur and leo >= old_leo
                previous[p] = (cur, leo)
            time.sleep(0.3)
        assert len(previous) == parts
        assert seen_lag, "the producer runs ahead of the commits: some lag must show"
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors

    # producer stopped: consume to the end, commit everything, then LAG is 0 everywhere
    total = list(delivered)
    for c in consumers:
        c.close()
    final = committed(broker, group)
    drain = consumer(broker, group)
    drain.subscribe([topic])
    # one synchronous commit per polled batch (not per record: thousands of records may be left,
    # and a commit per record took longer than the deadline on a loaded CI machine)
    deadline = time.time() + 60
    while any(final.get((topic, p), 0) < total[p] for p in range(parts)):
        assert time.time() < deadline, (final, total)
        batch: dict[int, int] = {}
        for m in drain.consume(num_messages=500, timeout=0.5):
            if not m.error():
                batch[int(m.partition() or 0)] = int(m.offset() or 0) + 1
        if batch:
            drain.commit(
                offsets=[TopicPartition(topic, p, o) for p, o in sorted(batch.items())], asynchronous=False
            )
            final.update({(topic, p): o for p, o in batch.items()})
    drain.close()
    r = strom(broker, "groups", "describe", "--group", group)
    assert r.returncode == 0
    assert "has no active members" in r.stderr
    rows = table(r.stdout)
    assert [
        (int(x["PARTITION"]), int(x["CURRENT-OFFSET"]), int(x["LOG-END-OFFSET"]), x["LAG"]) for x in rows
    ] == [(p, total[p], total[p], "0") for p in range(parts)]
    assert all(x["CONSUMER-ID"] == "-" for x in rows)


# ---------------------------------------------------------------------------- list / delete


@pytest.fixture
def two_groups(broker: BrokerProcess) -> Iterator[Consumer]:
    create(broker, "lt", 2)
    commit_offsets(broker, "g-empty", {("lt", 0): 1})
    active = consumer(broker, "g-active")
    active.subscribe(["lt"])
    wait_assigned(active)
    try:
        yield active
    finally:
        active.close()


def test_list_with_states(broker: BrokerProcess, two_groups: Consumer) -> None:
    r = strom(broker, "groups", "list")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["g-active", "g-empty"]
    r = strom(broker, "groups", "--list", "--state")
    assert r.returncode == 0
    assert r.stdout.splitlines()[0].split() == ["GROUP", "STATE"]
    assert {x["GROUP"]: x["STATE"] for x in table(r.stdout)} == {"g-active": "Stable", "g-empty": "Empty"}
    r = strom(broker, "groups", "list", "--state", "Empty")
    assert [x["GROUP"] for x in table(r.stdout)] == ["g-empty"]
    r = strom(broker, "groups", "list", "--state", "stable,Dead")
    assert [x["GROUP"] for x in table(r.stdout)] == ["g-active"]


def test_describe_state_and_members(broker: BrokerProcess, two_groups: Consumer) -> None:
    r = strom(broker, "groups", "describe", "--group", "g-active", "--state")
    assert r.returncode == 0, r.stderr
    (row,) = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("g-active")]
    assert row[0] == "g-active" and row[1] == broker.bootstrap and row[2] == "(1)"
    assert row[3:] == ["range", "Stable", "1"]
    r = strom(broker, "groups", "describe", "--group", "g-active", "--members", "--verbose")
    (m,) = table(r.stdout)
    assert m["#PARTITIONS"] == "2" and m["ASSIGNMENT"] == "lt(0,1)" and m["GROUP-INSTANCE-ID"] == "-"
    r = strom(broker, "groups", "describe", "--group", "nope")
    assert r.returncode == 1
    assert "Consumer group 'nope' does not exist." in r.stderr


def test_delete_empty_group_and_refuse_non_empty(broker: BrokerProcess, two_groups: Consumer) -> None:
    r = strom(broker, "groups", "delete", "--group", "g-active")
    assert r.returncode == 1
    assert "Deletion of some consumer groups failed" in r.stderr
    assert (
        "* Group 'g-active' could not be deleted due to: NON_EMPTY_GROUP: The group is not empty." in r.stderr
    )
    r = strom(broker, "groups", "--delete", "--group", "g-empty")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Deletion of requested consumer groups ('g-empty') was successful."
    assert strom(broker, "groups", "list").stdout.split() == ["g-active"]
    assert committed(broker, "g-empty") == {}
    # one of two fails: the other is still deleted and reported
    commit_offsets(broker, "g-empty2", {("lt", 1): 1})
    r = strom(broker, "groups", "delete", "--group", "g-empty2", "--group", "g-active")
    assert r.returncode == 1
    assert "These consumer groups were deleted successfully: 'g-empty2'" in r.stdout
    assert strom(broker, "groups", "list").stdout.split() == ["g-active"]


# ---------------------------------------------------------------------------- reset-offsets


BASE_MS = (int(time.time()) - 600) * 1000  # records are stamped BASE_MS + offset seconds


@pytest.fixture
def reset_topic(broker: BrokerProcess) -> str:
    create(broker, "rt", 3)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for part in range(3):
        for i in range(10):
            p.produce("rt", value=b"v", partition=part, timestamp=BASE_MS + i * 1000)
    assert p.flush(15) == 0
    commit_offsets(broker, "rg", {("rt", 0): 4, ("rt", 1): 4, ("rt", 2): 4})
    return "rt"


def reset(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return strom(broker, "groups", "reset-offsets", "--group", "rg", *args)


def new_offsets(r: subprocess.CompletedProcess[str]) -> dict[int, int]:
    assert r.returncode == 0, r.stderr
    return {int(x["PARTITION"]): int(x["NEW-OFFSET"]) for x in table(r.stdout)}


def current(broker: BrokerProcess) -> dict[int, int]:
    return {p: o for (t, p), o in committed(broker, "rg").items() if t == "rt"}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--to-earliest"], {0: 0, 1: 0, 2: 0}),
        (["--to-latest"], {0: 10, 1: 10, 2: 10}),
        (["--to-current"], {0: 4, 1: 4, 2: 4}),
        (["--to-offset", "7"], {0: 7, 1: 7, 2: 7}),
        (["--shift-by", "3"], {0: 7, 1: 7, 2: 7}),
        (["--shift-by", "-3"], {0: 1, 1: 1, 2: 1}),
        (
            [
                "--to-datetime",
                datetime.datetime.fromtimestamp(BASE_MS / 1000 + 5.5, datetime.UTC).isoformat(),
            ],
            {0: 6, 1: 6, 2: 6},
        ),
        (["--by-duration", "PT1H"], {0: 0, 1: 0, 2: 0}),
        (["--by-duration", "PT1S"], {0: 10, 1: 10, 2: 10}),
    ],
)
def test_reset_modes_dry_run_then_execute(
    broker: BrokerProcess, reset_topic: str, args: list[str], expected: dict[int, int]
) -> None:
    r = reset(broker, "--topic", reset_topic, *args)
    assert new_offsets(r) == expected
    assert "Dry run" in r.stderr
    assert table(r.stdout)[0]["GROUP"] == "rg"
    assert current(broker) == {0: 4, 1: 4, 2: 4}, "dry run (the default) changes nothing"
    r = reset(broker, "--topic", reset_topic, *args, "--dry-run")
    assert new_offsets(r) == expected and current(broker) == {0: 4, 1: 4, 2: 4}
    r = reset(broker, "--topic", reset_topic, *args, "--execute")
    assert new_offsets(r) == expected
    assert "Dry run" not in r.stderr
    assert current(broker) == expected


def test_reset_clamps_to_the_log_and_selects_partitions(broker: BrokerProcess, reset_topic: str) -> None:
    r = reset(broker, "--topic", f"{reset_topic}:0,2", "--to-offset", "99", "--execute")
    assert new_offsets(r) == {0: 10, 2: 10}
    assert (
        "New offset (99) is higher than latest offset for topic partition rt-0. Value will be set to 10"
        in r.stderr
    )
    assert current(broker) == {0: 10, 1: 4, 2: 10}
    r = reset(broker, "--all-topics", "--shift-by", "-6", "--execute")
    assert new_offsets(r) == {0: 4, 1: 0, 2: 4}
    assert "lower than earliest offset for topic partition rt-1. Value will be set to 0" in r.stderr
    r = reset(broker, "--topic", "nosuch", "--to-earliest")
    assert r.returncode == 1 and "topic 'nosuch' does not exist" in r.stderr
    r = reset(broker, "--topic", "rt:5", "--to-earliest")
    assert r.returncode == 1 and "partition rt-5 does not exist" in r.stderr


def test_reset_from_file_and_export(broker: BrokerProcess, reset_topic: str, tmp_path: Path) -> None:
    r = reset(broker, "--all-topics", "--to-offset", "2", "--export")
    assert r.returncode == 0
    assert r.stdout.splitlines() == ["rt,0,2", "rt,1,2", "rt,2,2"]
    csv = tmp_path / "offsets.csv"
    csv.write_text("rt,0,1\nrt,1,8\n\nrt,2,3\n")
    r = reset(broker, "--from-file", str(csv))
    assert new_offsets(r) == {0: 1, 1: 8, 2: 3} and current(broker) == {0: 4, 1: 4, 2: 4}
    r = reset(broker, "--from-file", str(csv), "--execute")
    assert new_offsets(r) == {0: 1, 1: 8, 2: 3} and current(broker) == {0: 1, 1: 8, 2: 3}
    # the multi-group form: only this group's lines
    csv.write_text("other,rt,0,9\nrg,rt,0,5\n")
    r = reset(broker, "--from-file", str(csv), "--execute")
    assert new_offsets(r) == {0: 5} and current(broker) == {0: 5, 1: 8, 2: 3}
    csv.write_text("rt,zero,1\n")
    r = reset(broker, "--from-file", str(csv))
    assert r.returncode == 2 and "partition and offset must be integers" in r.stderr


def test_reset_refused_while_group_is_active(broker: BrokerProcess, reset_topic: str) -> None:
    c = consumer(broker, "rg")
    c.subscribe([reset_topic])
    try:
        wait_assigned(c)
        for mode in (["--to-earliest"], ["--to-offset", "1"], ["--shift-by", "-1"]):
            for extra in ([], ["--execute"]):
                r = reset(broker, "--topic", reset_topic, *mode, *extra)
                assert r.returncode == 1
                assert (
                    "Assignments can only be reset if the group 'rg' is inactive, "
                    "but the current state is Stable." in r.stderr
                )
                assert "NEW-OFFSET" not in r.stdout
        assert current(broker) == {0: 4, 1: 4, 2: 4}
    finally:
        c.close()
    # once the member has left, the same command goes through
    r = reset(broker, "--topic", reset_topic, "--to-earliest", "--execute")
    assert new_offsets(r) == {0: 0, 1: 0, 2: 0} and current(broker) == {0: 0, 1: 0, 2: 0}


def test_kip848_consumer_group(broker: BrokerProcess, reset_topic: str) -> None:
    """A ``group.protocol=consumer`` group is described with ConsumerGroupDescribe."""
    # (not consumer(): librdkafka rejects session/heartbeat settings with this protocol)
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "g848",
            "group.protocol": "consumer",
            "client.id": "kip848",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([reset_topic])
    try:
        wait_assigned(c)
        r = strom(broker, "groups", "list", "--state", "--type")
        assert {x["GROUP"]: (x["TYPE"], x["STATE"]) for x in table(r.stdout)}["g848"] == (
            "Consumer",
            "Stable",
        )
        r = strom(broker, "groups", "describe", "--group", "g848", "--members", "--verbose")
        (m,) = table(r.stdout)
        assert m["CLIENT-ID"] == "kip848" and m["ASSIGNMENT"] == "rt(0,1,2)"
        r = strom(broker, "groups", "describe", "--group", "g848")
        rows = table(r.stdout)
        assert [(x["PARTITION"], x["CURRENT-OFFSET"], x["LOG-END-OFFSET"]) for x in rows] == [
            (str(p), "-", "10") for p in range(3)
        ]
        assert {x["CONSUMER-ID"] for x in rows} == {m["CONSUMER-ID"]}
        r = strom(broker, "groups", "reset-offsets", "--group", "g848", "--topic", "rt", "--to-offset", "3")
        assert r.returncode == 1 and "must be inactive" not in r.stderr and "is inactive" in r.stderr
    finally:
        c.close()
    r = strom(
        broker, "groups", "reset-offsets", "--group", "g848", "--topic", "rt", "--to-offset", "3", "--execute"
    )
    assert r.returncode == 0, r.stderr
    assert {p: o for (t, p), o in committed(broker, "g848").items()} == {0: 3, 1: 3, 2: 3}
