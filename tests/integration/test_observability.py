"""The broker's HTTP listener against a real broker process: /metrics counters move by what
confluent-kafka produced and consumed, consumer-group lag as the coordinator computes it,
/healthz and /readyz, bad requests and a disabled or misconfigured listener."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strom.testing.broker_process import BrokerProcess, free_port

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")

def scrape(b: BrokerProcess) -> dict[str, float]:
    """``name{labels}`` -> value for every sample of /metrics, read by Prometheus' own parser
    (labels sorted by name, as in the assertions)."""
    with urllib.request.urlopen(b.http_url + "/metrics", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = r.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out[sample.name + (f"{{{labels}}}" if labels else "")] = float(sample.value)
    return out


def get(url: str, method: str = "GET") -> tuple[int, str]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture(scope="module")
def obs_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("obs") / "data",
        overrides=["group.initial.rebalance.delay.ms=0", "strom.metrics.partition.enable=true"],
    )
    b.start()
    try:
        yield b
    finally:
        b.stop()


def test_health_and_readiness(obs_broker: BrokerProcess) -> None:
    assert get(obs_broker.http_url + "/healthz") == (200, "ok\n")
    assert get(obs_broker.http_url + "/readyz") == (200, "ready\n")
    status, body = get(obs_broker.http_url + "/nope")
    assert status == 404 and "/metrics" in body
    assert get(obs_broker.http_url + "/metrics", method="POST")[0] == 405
    assert get(obs_broker.http_url + "/readyz", method="HEAD") == (200, "")


def test_garbage_request_line_is_answered_400(obs_broker: BrokerProcess) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", obs_broker.http_port, timeout=5)
    conn.connect()
    assert conn.sock is not None
    conn.sock.sendall(b"garbage\r\n\r\n")
    assert conn.sock.recv(100).startswith(b"HTTP/1.1 400")
    conn.close()
    assert get(obs_broker.http_url + "/healthz")[0] == 200  # the listener serves on


def test_produce_and_consume_move_the_counters(obs_broker: BrokerProcess) -> None:
    topic = f"obs-{uuid.uuid4().hex[:8]}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    before = scrape(obs_broker)
    n, size = 50, 200
    p = confluent_kafka.Producer({"bootstrap.servers": obs_broker.bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, b"v" * size, key=str(i).encode(), partition=0)
    assert p.flush(30) == 0
    c = confluent_kafka.Consumer({
        "bootstrap.servers": obs_broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    c.subscribe([topic])
    got = []
    while len(got) < n:
        msg = c.poll(10)
        assert msg is not None, f"consumed {len(got)} of {n}"
        assert msg.error() is None, msg.error()
        got.append(msg)
    consumed = 30  # commit less than everything: the lag is what is left
    c.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, consumed)], asynchronous=False)
    c.close()
    after = scrape(obs_broker)

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    t = f'{{topic="{topic}"}}'
    assert delta(f"strom_topic_records_in_total{t}") == n
    bytes_in = delta(f"strom_topic_bytes_in_total{t}")
    assert n * size < bytes_in < n * (size + 100)  # values plus batch and record overhead
    bytes_out = delta(f"strom_topic_bytes_out_total{t}")
    assert bytes_out >= bytes_in  # every batch was fetched at least once
    assert delta('strom_requests_total{api="Produce",version="' + _version(after, "Produce") + '"}') >= 1
    assert delta('strom_request_duration_seconds_count{request="FetchConsumer"}') >= 1
    assert delta('strom_request_duration_seconds_count{request="Produce"}') >= 1
    commit_version = _version(after, "OffsetCommit")
    assert delta(f'strom_requests_total{{api="OffsetCommit",version="{commit_version}"}}') == 1
    # the group coordinator's lag: high watermark n, committed offset `consumed`
    part = f'{{group="{group}",partition="0",topic="{topic}"}}'
    assert after[f"strom_consumer_group_lag{part}"] == n - consumed
    assert after[f'strom_consumer_group_lag_sum{{group="{group}"}}'] == n - consumed
    assert after[f'strom_log_end_offset{{partition="0",topic="{topic}"}}'] == n
    assert after[f'strom_log_high_watermark{{partition="0",topic="{topic}"}}'] == n
    assert after[f'strom_log_start_offset{{partition="0",topic="{topic}"}}'] == 0
    assert after[f'strom_log_size_bytes{{partition="0",topic="{topic}"}}'] == bytes_in
    assert after[f"strom_topic_log_size_bytes{t}"] == bytes_in
    assert after[f'strom_log_segments{{partition="0",topic="{topic}"}}'] == 1
    assert after['strom_groups{state="Empty",type="classic"}'] >= 1
    assert delta("strom_cluster_topics") == 1
    assert delta("strom_partitions") == delta("strom_cluster_partitions") >= 1
    assert after["strom_under_replicated_partitions"] == 0
    assert after["strom_offline_partitions"] == 0
    assert after["strom_active_controller"] == 1
    assert after['strom_purgatory_size{operation="Produce"}'] == 0
    assert delta('strom_connections_created_total{listener="PLAINTEXT"}') >= 2
    # the first scrape's fsync count may be 0 (the flusher runs each second); never negative
    assert delta("strom_log_flush_duration_seconds_count") >= 0
    # the loop-lag monitor's timer runs every 10 ms: many samples between the two scrapes
    assert delta("strom_event_loop_lag_seconds_count") > 10
    lag_count = after["strom_event_loop_lag_seconds_count"]
    assert after['strom_event_loop_lag_seconds_bucket{le="+Inf"}'] == lag_count
    assert 0 <= after["strom_event_loop_lag_max_seconds"] < 30
    # the busy part of each lag: as many samples, never more than the lag itself
    assert after["strom_event_loop_busy_lag_seconds_count"] == lag_count
    assert 0 <= after["strom_event_loop_busy_lag_max_seconds"] <= after["strom_event_loop_lag_max_seconds"]
    assert after["strom_event_loop_own_lag_seconds_count"] == lag_count
    assert 0 <= after["strom_event_loop_own_lag_max_seconds"] <= after["strom_event_loop_lag_max_seconds"]
    # the garbage collector ran while the broker started and served (generation 0 at least)
    assert after['strom_gc_pause_seconds_count{generation="0"}'] > 0
    assert 0 < after["strom_gc_pause_max_seconds"] < 30


def _version(samples: dict[str, float], api: str) -> str:
    """The one version of ``api`` the client used (the highest seen)."""
    pattern = re.compile(rf'strom_requests_total\{{api="{api}",version="(\d+)"\}}')
    vs = [int(m.group(1)) for k in samples if (m := pattern.match(k))]
    assert vs, f"no {api} requests counted"
    return str(max(vs))


def test_errors_are_counted_by_api_and_error(obs_broker: BrokerProcess) -> None:
    import asyncio

    from strom.client.client import Client

    before = scrape(obs_broker)

    async def heartbeat() -> int:
        async with Client(obs_broker.bootstrap) as client:
            conn = await client.any_connection()
            r = await conn.request(12, {"group_id": "no-such-group", "generation_id": 1, "member_id": "m"})
            return int(r.error_code)

    code = asyncio.run(heartbeat())
    assert code != 0
    from strom.protocol.errors import ErrorCode

    key = f'strom_request_errors_total{{api="Heartbeat",error="{ErrorCode(code).name}"}}'
    after = scrape(obs_broker)
    assert after[key] - before.get(key, 0.0) == 1


def test_disabled_listener_and_bad_value(tmp_path: Path) -> None:
    port = free_port()
    b = BrokerProcess(tmp_path / "off", overrides=["strom.http.listener="])
    b.start()
    try:
        with pytest.raises(OSError):
            urllib.request.urlopen(b.http_url + "/healthz", timeout=2)
    finally:
        b.stop()
    r = subprocess.run(
        [sys.executable, "-m", "strom", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", f"log.dirs={tmp_path / 'bad'}", "--override", "strom.http.listener=ftp://x:1"],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 1
    assert "strom.http.listener" in r.stderr + r.stdout and "Traceback" not in r.stderr


def test_connections_and_auth_failures_by_listener(tmp_path: Path) -> None:
    import asyncio

    from strom.client.client import Client
    from strom.client.errors import KafkaError
    from strom.client.security import SecurityConfig

    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="admin" password="admin-secret" user_alice="alice-secret";')
    listeners = {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}
    b = BrokerProcess(tmp_path / "data", listeners=listeners,
                      overrides=[f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}"])
    b.start()

    async def login(password: str) -> bool:
        security = SecurityConfig.from_config({
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                f'username="alice" password="{password}";',
        })
        async with Client(b.bootstrap_for("SASL_PLAINTEXT"), security=security, retries=0) as c:
            try:
                await c.any_connection()
                return True
            except KafkaError:
                return False

    try:
        before = scrape(b)
        logins = [asyncio.run(login(pw)) for pw in ("wrong", "also-wrong", "alice-secret")]
        assert logins == [False, False, True]
        after = scrape(b)
        key = 'strom_authentication_failures_total{listener="SASL_PLAINTEXT"}'
        assert after.get(key, 0) - before.get(key, 0) == 2
        assert 'strom_authentication_failures_total{listener="PLAINTEXT"}' not in after
        created = 'strom_connections_created_total{listener="SASL_PLAINTEXT"}'
        assert after[created] - before.get(created, 0) == 3
        assert 'strom_connections{listener="PLAINTEXT"}' in after  # every listener has the gauge
    finally:
        b.stop()


def test_https_listener_with_the_brokers_tls_settings(tmp_path: Path) -> None:
    import ssl

    trustme = pytest.importorskip("trustme")
    ca = trustme.CA(organization_name="strom test CA")
    server = tmp_path / "server.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(server))
    port = free_port()
    b = BrokerProcess(tmp_path / "data", overrides=[
        f"strom.http.listener=https://127.0.0.1:{port}",
        "listener.name.http.ssl.keystore.type=PEM", f"listener.name.http.ssl.keystore.location={server}",
    ])
    b.start()
    try:
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", timeout=10, context=ctx) as r:
            assert r.status == 200 and b"strom_requests_total" in r.read()
        with pytest.raises(OSError):  # plain HTTP is not answered (connection closed)
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
    finally:
        b.stop()
    r = subprocess.run(
        [sys.executable, "-m", "strom", "serve",
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
         "--override", f"log.dirs={tmp_path / 'nokey'}",
         "--override", f"strom.http.listener=https://127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 1 and "keystore" in r.stderr + r.stdout and "Traceback" not in r.stderr
