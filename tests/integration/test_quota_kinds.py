"""The quotas beyond bandwidth on a real broker process (sample windows 2 x 1 s):
``controller_mutation_rate`` (KIP-599: CreateTopics v6+ / DeleteTopics v5+ / CreatePartitions v3+
refuse with THROTTLING_QUOTA_EXCEEDED past the quota, older versions are throttled),
``request_percentage`` (KIP-124: handling time, throttle_time_ms in the answer) and
``connection_creation_rate`` per IP (KIP-612: over it, connections are closed). Driven by strom's
client for exact API versions, kafka-python and confluent-kafka as real clients."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from strom.client.client import Client
from strom.client.security import SecurityConfig
from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_alice="alice-secret" user_bob="bob-secret" user_carol="carol-secret";'
)
LISTENERS = {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}
THROTTLING_QUOTA_EXCEEDED = 89


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("quotakinds") / "data",
        overrides=[
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
            "quota.window.num=2",
            "quota.window.size.seconds=1",
        ],
        listeners=LISTENERS,
    ).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.log()


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
            {"name": n, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
             "configs": []}
            for n in names
        ],
        "timeout_ms": 10000,
        "validate_only": False,
    }


def test_controller_mutation_rate_strict_and_permissive(broker: BrokerProcess) -> None:
    """alice: 2 partition mutations/s (a burst of 4 over 2 windows of 1 s)."""
    set_quota(broker, [("user", "alice")], "controller_mutation_rate", 2.0)
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
    """bob at 0.1 % of a thread (1 ms of handling per second): a burst of requests is answered
    with throttle times, capped at the window (1 s), and later requests wait; alice (no
    request quota) is not throttled."""
    set_quota(broker, [("user", "bob")], "request_percentage", 0.1)
    try:
        body = {"topics": None, "allow_auto_topic_creation": False}
        t0 = time.monotonic()
        answers = asyncio.run(raw(broker, "bob", [(3, body, 12)] * 30))
        elapsed = time.monotonic() - t0
        throttles = [ms(a.throttle_time) for a in answers]
        assert max(throttles) > 0 and max(throttles) <= 1000, throttles
        assert elapsed >= sum(t for t in throttles[:-1]) / 1000 * 0.9, (elapsed, throttles)
        others = asyncio.run(raw(broker, "alice", [(3, body, 12)] * 30))
        assert all(ms(a.throttle_time) == 0 for a in others)
    finally:
        set_quota(broker, [("user", "bob")], "request_percentage", None)


def test_connection_creation_rate_per_ip(broker: BrokerProcess) -> None:
    """127.0.0.1 limited to 2 new connections/s: of 12 opened at once the later ones are closed
    by the broker (after the throttle delay); once the quota is removed all are served."""
    set_quota(broker, [("ip", "127.0.0.1")], "connection_creation_rate", 2.0)
    host, port = broker.bootstrap_for("PLAINTEXT").rsplit(":", 1)
    try:
        socks = [socket.create_connection((host, int(port)), timeout=5) for _ in range(12)]
        closed = 0
        for s in socks:
            s.settimeout(6)
            try:
                closed += s.recv(1) == b""
            except TimeoutError:  # still open: served
                pass
            except ConnectionError:
                closed += 1
            s.close()
        assert closed >= 6, closed
        assert "connection_creation_rate quota of its IP exceeded" in broker.log_path.read_text()
    finally:
        time.sleep(2.5)  # (the rate decays before the admin connects to remove it)
        set_quota(broker, [("ip", "127.0.0.1")], "connection_creation_rate", None)
    ck = pytest.importorskip("confluent_kafka")
    p = ck.Producer({"bootstrap.servers": broker.bootstrap_for("PLAINTEXT")})
    p.produce("after-conn-quota", b"v")
    assert p.flush(15) == 0
