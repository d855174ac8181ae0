"""The quotas beyond bandwidth on a real broker process (sample windows 2 x 1 s):
``controller_mutation_rate`` (KIP-599: CreateTopics v6+ / DeleteTopics v5+ / CreatePartitions v3+
refuse with THROTTLING_QUOTA_EXCEEDED past the quota, older versions are throttled),
``request_percentage`` (KIP-124: handling time, throttle_time_ms in the answer) and
``connection_creation_rate`` per IP (KIP-612: over it, connections are closed). Driven by strom's
client for exact API versions, kafka-python and confluent-kafka as real clients."""

from __future__ import annotations

import asyncio
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.client.client import Client
from strom.client.security import SecurityConfig
from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_alice="alice-secret" user_bob="bob-secret" user_carol="carol-secret" '
    'user_dave="dave-secret" user_eve="eve-secret";'
)
LISTENERS = {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}
THROTTLING_QUOTA_EXCEEDED = 89


def quota_broker(data: Path, window_seconds: int) -> Iterator[BrokerProcess]:
    """A SASL broker whose quotas sample 2 windows of ``window_seconds``."""
    b = BrokerProcess(
        data,
        overrides=[
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
            "quota.window.num=2",
            f"quota.window.size.seconds={window_seconds}",
        ],
        listeners=LISTENERS,
    ).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.log()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from quota_broker(tmp_path_factory.mktemp("quotakinds") / "data", 1)


@pytest.fixture
def wide_windows_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """Windows of 5 s (2 x 5 s): a quota's arithmetic over seconds, not over a loaded machine's
    hundreds of milliseconds per connection."""
    yield from quota_broker(tmp_path / "data", 5)


def sec(user: str) -> SecurityConfig:
    return SecurityConfig(
        protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username=user, sasl_password=f"{user}-secret"
    )


async def raw(b: BrokerProcess, user: str, calls: list[tuple[int, dict[str, Any], int | None]]) -> list[Any]:
    async with Client(b.bootstrap_for("SASL_PLAINTEXT"), security=sec(user)) as c:
        conn = await c.any_connection()
        return [await conn.request(k, body, version=v) for k, body, v in calls]


def set_quota(b: BrokerProcess, entity: list[tuple[str, str | None]], key: str, value: float | None) -> None:
    entry = {
        "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
        "ops": [{"key": key, "value": value or 0.0, "remove": value is None}],
    }
    (r,) = asyncio.run(raw(b, "admin", [(49, {"entries": [entry], "validate_only": False}, None)]))
    assert int(r.entries[0].error_code) == 0, r
    time.sleep(0.3)  # (published to the broker's image)


def ms(t: Any) -> int:
    """A response's throttle time (kio gives a timedelta) in ms."""
    return round(t.total_seconds() * 1000) if hasattr(t, "total_seconds") else int(t)


def create_topics(names: list[str], partitions: int) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": n,
                "num_partitions": partitions,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
            for n in names
        ],
        "timeout_ms": 10000,
        "validate_only": False,
    }


def test_controller_mutation_rate_strict_and_permissive(wide_windows_broker: BrokerProcess) -> None:
    """alice: 0.4 partition mutations/s (a burst of 4 over 2 windows of 5 s). (With 2/s over
    windows of 1 s, the same burst, each step had to reach the broker within a second of the
    last over a new SASL connection, which a loaded machine did not always do.)"""
    broker = wide_windows_broker
    set_quota(broker, [("user", "alice")], "controller_mutation_rate", 0.4)
    # v6 (strict): 3 + 3 partitions are taken (the bucket may go negative once), the third
    # topic is refused with THROTTLING_QUOTA_EXCEEDED and the answer carries the throttle time
    (r,) = asyncio.run(raw(broker, "alice", [(19, create_topics(["cm-a", "cm-b", "cm-c"], 3), 6)]))
    codes = {str(t.name): int(t.error_code) for t in r.topics}
    assert codes == {"cm-a": 0, "cm-b": 0, "cm-c": THROTTLING_QUOTA_EXCEEDED}, codes
    refused = next(t for t in r.topics if str(t.name) == "cm-c")
    assert refused.error_message == "The throttling quota has been exceeded."
    assert ms(r.throttle_time) > 0
    # deleting counts too (v5+ strict): over the quota still, refused
    (d,) = asyncio.run(raw(broker, "alice", [(20, {"topic_names": ["cm-a"], "timeout_ms": 10000}, 5)]))
    assert int(d.responses[0].error_code) == THROTTLING_QUOTA_EXCEEDED, d
    # v5 (permissive): created although over the quota, and throttled
    (r5,) = asyncio.run(raw(broker, "alice", [(19, create_topics(["cm-d"], 2), 5)]))
    assert int(r5.topics[0].error_code) == 0 and ms(r5.throttle_time) > 0, r5
    # bob has no quota: never throttled
    (rb,) = asyncio.run(raw(broker, "bob", [(19, create_topics(["cm-e", "cm-f", "cm-g"], 4), 6)]))
    assert all(int(t.error_code) == 0 for t in rb.topics) and ms(rb.throttle_time) == 0, rb


def test_controller_mutation_rate_kafka_python(broker: BrokerProcess) -> None:
    """A real client: kafka-python's admin sees Kafka's ThrottlingQuotaExceededError for the
    topic past carol's quota, and creates it once the bucket refilled."""
    kafka = pytest.importorskip("kafka")
    from kafka.admin import NewTopic
    from kafka.errors import ThrottlingQuotaExceededError

    set_quota(broker, [("user", "carol")], "controller_mutation_rate", 1.0)  # burst 2
    a = kafka.KafkaAdminClient(
        bootstrap_servers=broker.bootstrap_for("SASL_PLAINTEXT"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="carol",
        sasl_plain_password="carol-secret",
    )
    try:
        # kp-q1 takes the bucket to -1, kp-q2 in the same request is refused
        with pytest.raises(ThrottlingQuotaExceededError):
            a.create_topics([NewTopic("kp-q1", 3, 1), NewTopic("kp-q2", 1, 1)])
        # kafka-python honours the throttle time (KIP-219) before its next request, by then the
        # bucket has refilled enough
        time.sleep(1.1)
        a.create_topics([NewTopic("kp-q2", 1, 1)])
    finally:
        a.close()
    body = {"topics": [{"name": "kp-q1"}, {"name": "kp-q2"}], "allow_auto_topic_creation": False}
    (m,) = asyncio.run(raw(broker, "admin", [(3, body, 12)]))
    assert [int(t.error_code) for t in m.topics] == [0, 0], m


def test_request_percentage(broker: BrokerProcess) -> None:
    """bob at 0.01 % of a thread (0.1 ms of handling per second): a burst of requests is answered
    with throttle times, capped at the window (1 s), and later requests wait; alice (no
    request quota) is not throttled."""
    set_quota(broker, [("user", "bob")], "request_percentage", 0.01)
    try:
        body = {"topics": None, "allow_auto_topic_creation": False}
        t0 = time.monotonic()
        answers = asyncio.run(raw(broker, "bob", [(3, body, 12)] * 8))
        elapsed = time.monotonic() - t0
        throttles = [ms(a.throttle_time) for a in answers]
        assert max(throttles) > 0 and max(throttles) <= 1000, throttles
        assert elapsed >= sum(t for t in throttles[:-1]) / 1000 * 0.9, (elapsed, throttles)
        others = asyncio.run(raw(broker, "alice", [(3, body, 12)] * 8))
        assert all(ms(a.throttle_time) == 0 for a in others)
    finally:
        set_quota(broker, [("user", "bob")], "request_percentage", None)


def test_request_percentage_in_produce_and_fetch_answers(broker: BrokerProcess) -> None:
    """The request quota's throttle is in the answers strom encodes by hand or late too: an
    acks=-1 Produce (answered once replicated) and a Fetch. A Fetch's long poll is waiting, not
    handling: a consumer at 5 % whose fetches each wait 300 ms for data is never throttled."""
    from strom.protocol.records import build_batch

    topic = f"rp-{time.monotonic_ns()}"
    (made,) = asyncio.run(raw(broker, "admin", [(19, create_topics([topic], 1), None)]))
    assert int(made.topics[0].error_code) == 0, made
    (md,) = asyncio.run(raw(broker, "admin", [(3, {"topics": [{"name": topic, "topic_id": None}],
                                                    "allow_auto_topic_creation": False}, 12)]))
    tid = md.topics[0].topic_id
    batch = build_batch([(None, b"v", [], int(time.time() * 1000))])
    produce = {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}

    def fetch(wait_ms: int, offset: int) -> dict[str, Any]:
        return {"replica_id": -1, "max_wait": wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic_id": tid, "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                     "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                "forgotten_topics_data": [], "rack_id": ""}

    set_quota(broker, [("user", "bob")], "request_percentage", 0.01)
    set_quota(broker, [("user", "carol")], "request_percentage", 5)
    try:
        answers = asyncio.run(raw(broker, "bob", [(0, produce, 9), (1, fetch(0, 0), 13)] * 3))
        produced = [ms(a.throttle_time) for a in answers[0::2]]
        fetched = [ms(a.throttle_time) for a in answers[1::2]]
        assert all(int(a.responses[0].partition_responses[0].error_code) == 0 for a in answers[0::2])
        assert max(produced) > 0 and max(fetched) > 0, (produced, fetched)
        t0 = time.monotonic()
        polls = asyncio.run(raw(broker, "carol", [(1, fetch(300, 3), 13)] * 4))  # at the end: each waits
        assert time.monotonic() - t0 >= 1.0
        assert all(ms(a.throttle_time) == 0 for a in polls), [ms(a.throttle_time) for a in polls]
    finally:
        set_quota(broker, [("user", "bob")], "request_percentage", None)
        set_quota(broker, [("user", "carol")], "request_percentage", None)


def test_connection_creation_rate_per_ip(broker: BrokerProcess) -> None:
    """127.0.0.1 limited to 2 new connections/s: of 12 opened at once the later ones are closed
    by the broker (after the throttle delay); once the quota is removed all are served."""
    set_quota(broker, [("ip", "127.0.0.1")], "connection_creation_rate", 2.0)
    host, port = broker.bootstrap_for("PLAINTEXT").rsplit(":", 1)
    try:
        socks = [socket.create_connection((host, int(port)), timeout=5) for _ in range(12)]
        closed: set[socket.socket] = set()
        deadline = time.monotonic() + 7  # (the later connections wait longest: about 5 s)
        while time.monotonic() < deadline and len(closed) < len(socks):
            readable, _, _ = select.select([s for s in socks if s not in closed], [], [], 0.2)
            for s in readable:
                try:
                    if s.recv(1) == b"":
                        closed.add(s)
                except ConnectionError:
                    closed.add(s)
        for s in socks:
            s.close()
        closed_count = len(closed)
        assert 6 <= closed_count < 12, closed_count  # the first ones are served
        assert "connection_creation_rate quota of its IP exceeded" in broker.log_path.read_text()
    finally:
        time.sleep(2.5)  # (the rate decays before the admin connects to remove it)
        set_quota(broker, [("ip", "127.0.0.1")], "connection_creation_rate", None)
    ck = pytest.importorskip("confluent_kafka")
    p = ck.Producer({"bootstrap.servers": broker.bootstrap_for("PLAINTEXT")})
    p.produce("after-conn-quota", b"v")
    assert p.flush(15) == 0


# ------------------------------------------------- user+client-id entities and Kafka's precedence
SRC = Path(__file__).resolve().parents[2] / "src"


def strom_configs(b: BrokerProcess, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cfg = tmp / "admin.properties"
    cfg.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret";\n'
    )
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "strom",
            "configs",
            "--bootstrap-server",
            b.bootstrap_for("SASL_PLAINTEXT"),
            "--command-config",
            str(cfg),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"PYTHONPATH": str(SRC)},
    )


def throttled(b: BrokerProcess, user: str, client_id: str) -> bool:
    """Whether producing 400 KB at once as (user, client id) is throttled (KIP-219 throttle
    times seen by confluent-kafka); a quota of 50 KB/s throttles it, 1 GB/s does not."""
    ck = pytest.importorskip("confluent_kafka")
    seen: list[Any] = []
    p = ck.Producer(
        {
            "bootstrap.servers": b.bootstrap_for("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": user,
            "sasl.password": f"{user}-secret",
            "client.id": client_id,
            "throttle_cb": seen.append,
            "linger.ms": 5,
        }
    )
    for _ in range(40):
        p.produce("prec-t", b"x" * 10_000)
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and not seen and len(p) > 0:
        p.poll(0.1)
    p.poll(0.5)
    p.purge()
    p.flush(10)
    return any(t.throttle_time > 0 for t in seen)


def test_user_client_entities_and_precedence(broker: BrokerProcess, tmp_path: Path) -> None:
    slow, fast = "producer_byte_rate=50000", "producer_byte_rate=1000000000"
    steps = [
        (["--entity-type", "users", "--entity-name", "dave"], slow),
        (
            [
                "--entity-type",
                "users",
                "--entity-name",
                "dave",
                "--entity-type",
                "clients",
                "--entity-name",
                "fast",
            ],
            fast,
        ),
        (["--entity-type", "clients", "--entity-default"], slow),
    ]
    for entity, config in steps:
        r = strom_configs(broker, tmp_path, "--alter", *entity, "--add-config", config)
        assert r.returncode == 0, r.stderr
    r = strom_configs(
        broker,
        tmp_path,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        "dave",
        "--entity-type",
        "clients",
        "--entity-name",
        "fast",
        "--add-config",
        "request_percentage=500",
    )
    assert r.stdout.strip() == "Completed updating config for user dave.", r
    r = strom_configs(
        broker,
        tmp_path,
        "--describe",
        "--entity-type",
        "users",
        "--entity-name",
        "dave",
        "--entity-type",
        "clients",
        "--entity-name",
        "fast",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        "Quota configs for user-principal 'dave', client-id 'fast' are "
        "producer_byte_rate=1000000000.0,request_percentage=500.0"
    ), r.stdout
    time.sleep(0.5)
    assert not throttled(broker, "dave", "fast")  # user=dave,client-id=fast beats user=dave
    assert throttled(broker, "dave", "other")  # user=dave
    assert throttled(broker, "eve", "any")  # client-id=<default>
    # user=<default>,client-id=<default> beats client-id=<default>, not user=dave
    r = strom_configs(
        broker,
        tmp_path,
        "--alter",
        "--entity-type",
        "users",
        "--entity-default",
        "--entity-type",
        "clients",
        "--entity-default",
        "--add-config",
        fast,
    )
    assert r.stdout.strip() == "Completed updating default config for users in the cluster.", r
    r = strom_configs(
        broker,
        tmp_path,
        "--describe",
        "--entity-type",
        "users",
        "--entity-default",
        "--entity-type",
        "clients",
        "--entity-default",
    )
    assert "Quota configs for the default user-principal, the default client-id are" in r.stdout, r
    time.sleep(0.5)
    assert not throttled(broker, "eve", "any2")
    assert throttled(broker, "dave", "other2")
    # bad pairings: Kafka's tool combines only users and clients
    r = strom_configs(
        broker,
        tmp_path,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        "x",
        "--entity-type",
        "topics",
        "--entity-name",
        "t",
        "--add-config",
        slow,
    )
    assert r.returncode == 2 and "only --entity-type users and --entity-type clients" in r.stderr, r
    r = strom_configs(
        broker,
        tmp_path,
        "--alter",
        "--entity-type",
        "users",
        "--entity-type",
        "clients",
        "--entity-name",
        "c",
        "--add-config",
        slow,
    )
    assert r.returncode == 2 and "needs --entity-name or --entity-default" in r.stderr, r
