# ruff: noqa: E501  (the embedded Java source keeps its natural line lengths)
"""TLS listeners against real clients: confluent-kafka (librdkafka), kcat, kafka-python, aiokafka
and the Java client over SSL; mutual TLS; PLAINTEXT and SSL listeners side by side, each client
told its own listener's address; a plaintext client on the TLS port; a SASL listener's gate;
bad key material refusing the start.

One broker for the module with four listeners: PLAINTEXT, SSL (server certificate only), MTLS
(security protocol SSL, ``ssl.client.auth=required``) and SASL_PLAINTEXT (for the pre-auth gate).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import ssl
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.client.messages import encode_request
from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

trustme = pytest.importorskip("trustme")
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

COMPAT_HOME = Path(os.environ.get("STROM_COMPAT_HOME", Path.home() / ".cache" / "strom-compat"))
JAVA_LIBS = COMPAT_HOME / "java" / "libs"


class Certs:
    def __init__(self, root: Path) -> None:
        ca = trustme.CA(organization_name="strom test CA")
        self.ca = root / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca))
        self.server = root / "server.pem"  # private key + chain: ssl.keystore.location
        ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(self.server))
        client = ca.issue_cert(
            "alice@strom.test", common_name="alice", organization_name="strom", organization_unit_name="eng"
        )
        self.client_cert = root / "client-cert.pem"
        self.client_key = root / "client-key.pem"
        client.cert_chain_pems[0].write_to_path(str(self.client_cert))
        client.private_key_pem.write_to_path(str(self.client_key))
        # a client certificate from a CA the broker does not trust
        stranger = trustme.CA().issue_cert("mallory@strom.test", common_name="mallory")
        self.stranger_cert = root / "stranger-cert.pem"
        self.stranger_key = root / "stranger-key.pem"
        stranger.cert_chain_pems[0].write_to_path(str(self.stranger_cert))
        stranger.private_key_pem.write_to_path(str(self.stranger_key))


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("tls") / "data",
        listeners={
            "PLAINTEXT": "PLAINTEXT",
            "SSL": "SSL",
            "MTLS": "SSL",
            "SASL_PLAINTEXT": "SASL_PLAINTEXT",
            "SASL_SSL": "SASL_SSL",
        },
        overrides=[
            "group.initial.rebalance.delay.ms=0",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={certs.server}",
            "listener.name.mtls.ssl.client.auth=required",
            "listener.name.mtls.ssl.truststore.type=PEM",
            f"listener.name.mtls.ssl.truststore.location={certs.ca}",
        ],
        env={"STROM_LOG_LEVEL": "DEBUG"},
    )
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _ssl_conf(b: BrokerProcess, certs: Certs, listener: str = "SSL", **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": b.bootstrap_for(listener),
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca),
        **extra,
    }


def _round_trip(conf: dict[str, Any], topic: str, n: int = 20) -> list[bytes]:
    p = confluent_kafka.Producer(conf)
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
    assert p.flush(15) == 0
    c = confluent_kafka.Consumer(
        {**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            got.append(m.value())
    finally:
        c.close()
    return got


def _metadata_ports(conf: dict[str, Any]) -> set[int]:
    md = AdminClient(conf).list_topics(timeout=10)
    return {b.port for b in md.brokers.values()}


def test_confluent_round_trip_over_ssl(tls_broker: BrokerProcess, certs: Certs) -> None:
    topic = _topic("tls-ck")
    got = _round_trip(_ssl_conf(tls_broker, certs), topic)
    assert got == [f"v{i}".encode() for i in range(20)]


def test_each_listener_advertises_itself(tls_broker: BrokerProcess, certs: Certs) -> None:
    assert _metadata_ports({"bootstrap.servers": tls_broker.bootstrap}) == {tls_broker.ports["PLAINTEXT"]}
    assert _metadata_ports(_ssl_conf(tls_broker, certs)) == {tls_broker.ports["SSL"]}
    # a plaintext consumer reads what went in over TLS (group coordinator found on its listener)
    topic = _topic("tls-mixed")
    got = _round_trip({"bootstrap.servers": tls_broker.bootstrap}, topic, n=5)
    assert got == [f"v{i}".encode() for i in range(5)]


def test_mutual_tls(tls_broker: BrokerProcess, certs: Certs) -> None:
    conf = _ssl_conf(tls_broker, certs, "MTLS", log_level=0)
    admin = AdminClient(conf)
    with pytest.raises(confluent_kafka.KafkaException):
        admin.list_topics(timeout=2)  # no client certificate: refused
    stranger = {
        **conf,
        "ssl.certificate.location": str(certs.stranger_cert),
        "ssl.key.location": str(certs.stranger_key),
    }
    with pytest.raises(confluent_kafka.KafkaException):
        AdminClient(stranger).list_topics(timeout=2)  # untrusted CA
    conf.pop("log_level")
    with_cert = {
        **conf,
        "ssl.certificate.location": str(certs.client_cert),
        "ssl.key.location": str(certs.client_key),
    }
    assert _metadata_ports(with_cert) == {tls_broker.ports["MTLS"]}
    topic = _topic("tls-mtls")
    assert _round_trip(with_cert, topic, n=3) == [b"v0", b"v1", b"v2"]
    assert "principal User:CN=alice,OU=eng,O=strom" in tls_broker.log_path.read_text()
    assert "failed authentication with 127.0.0.1:" in tls_broker.log_path.read_text()  # Kafka logs it too
    # no TLS record ever reached the Kafka framing (it would read as a huge frame size)
    assert "exceeds socket.request.max.bytes" not in tls_broker.log_path.read_text()
    # the SSL listener without client auth sees an anonymous principal
    assert "on listener SSL, principal User:ANONYMOUS" in tls_broker.log_path.read_text()


def test_kcat_over_ssl(tls_broker: BrokerProcess, certs: Certs) -> None:
    if shutil.which("kcat") is None:
        pytest.skip("kcat not installed")
    topic = _topic("tls-kcat")
    common = [
        "kcat",
        "-b",
        tls_broker.bootstrap_for("SSL"),
        "-X",
        "security.protocol=SSL",
        "-X",
        f"ssl.ca.location={certs.ca}",
    ]
    subprocess.run([*common, "-P", "-t", topic], input=b"one\ntwo\nthree\n", check=True, timeout=20)
    out = subprocess.run(
        [*common, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
        capture_output=True,
        check=True,
        timeout=20,
    )
    assert out.stdout.split() == [b"one", b"two", b"three"]
    meta = subprocess.run([*common, "-L"], capture_output=True, check=True, timeout=20, text=True)
    assert f"127.0.0.1:{tls_broker.ports['SSL']}" in meta.stdout


def test_kafka_python_over_ssl(tls_broker: BrokerProcess, certs: Certs) -> None:
    kafka = pytest.importorskip("kafka")
    topic = _topic("tls-kp")
    conf: dict[str, Any] = {
        "bootstrap_servers": tls_broker.bootstrap_for("SSL"),
        "security_protocol": "SSL",
        "ssl_cafile": str(certs.ca),
    }
    producer = kafka.KafkaProducer(**conf)
    for i in range(5):
        producer.send(topic, f"kp{i}".encode())
    producer.flush(15)
    producer.close()
    consumer = kafka.KafkaConsumer(topic, auto_offset_reset="earliest", **conf)
    got: list[bytes] = []
    deadline = time.monotonic() + 15
    while len(got) < 5 and time.monotonic() < deadline:
        for msgs in consumer.poll(timeout_ms=500).values():
            got.extend(m.value for m in msgs)
    consumer.close()
    assert got == [f"kp{i}".encode() for i in range(5)]


def test_aiokafka_over_mutual_tls(tls_broker: BrokerProcess, certs: Certs) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.helpers import create_ssl_context

    topic = _topic("tls-aio")

    async def go() -> list[bytes]:
        ctx = create_ssl_context(
            cafile=str(certs.ca), certfile=str(certs.client_cert), keyfile=str(certs.client_key)
        )
        conf: dict[str, Any] = {
            "bootstrap_servers": tls_broker.bootstrap_for("MTLS"),
            "security_protocol": "SSL",
            "ssl_context": ctx,
        }
        producer = aiokafka.AIOKafkaProducer(**conf)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
        await consumer.start()
        try:
            batch = await consumer.getmany(timeout_ms=8000, max_records=3)
            return [m.value for msgs in batch.values() for m in msgs]
        finally:
            await consumer.stop()

    assert asyncio.run(go()) == [b"a0", b"a1", b"a2"]


def _api_versions_frame() -> bytes:
    frame, _cls = encode_request(
        18, 3, 1, "tls-test", {"client_software_name": "t", "client_software_version": "1"}
    )
    return frame


def _read_until_closed(sock: socket.socket, timeout: float = 10) -> bytes:
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def test_plaintext_client_on_ssl_port_fails_cleanly(tls_broker: BrokerProcess, certs: Certs) -> None:
    with socket.create_connection(("127.0.0.1", tls_broker.ports["SSL"]), timeout=10) as s:
        s.sendall(_api_versions_frame())
        reply = _read_until_closed(s)  # closed by the broker (perhaps after a TLS alert)
    assert not reply.startswith(b"\x00\x00")  # no Kafka response frame
    # librdkafka in PLAINTEXT mode against the TLS port gets no metadata
    with pytest.raises(confluent_kafka.KafkaException):
        AdminClient({"bootstrap.servers": tls_broker.bootstrap_for("SSL"), "log_level": 0}).list_topics(
            timeout=2
        )
    assert "on listener SSL (TLS handshake failed" in tls_broker.log_path.read_text()
    # ... and the broker keeps serving everyone else
    assert _metadata_ports(_ssl_conf(tls_broker, certs)) == {tls_broker.ports["SSL"]}
    assert _metadata_ports({"bootstrap.servers": tls_broker.bootstrap}) == {tls_broker.ports["PLAINTEXT"]}


def test_tls_client_on_plaintext_port_fails_cleanly(tls_broker: BrokerProcess, certs: Certs) -> None:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    with (
        socket.create_connection(("127.0.0.1", tls_broker.port), timeout=10) as raw,
        pytest.raises((ssl.SSLError, ConnectionError, TimeoutError)),
        ctx.wrap_socket(raw, server_hostname="127.0.0.1"),
    ):
        pass
    assert _metadata_ports({"bootstrap.servers": tls_broker.bootstrap}) == {tls_broker.ports["PLAINTEXT"]}


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed by broker")
        out += chunk
    return out


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_sasl_listener_answers_only_api_versions_before_authentication(
    tls_broker: BrokerProcess, certs: Certs, listener: str
) -> None:
    raw = socket.create_connection(("127.0.0.1", tls_broker.ports[listener]), timeout=10)
    if listener == "SASL_SSL":
        raw = ssl.create_default_context(cafile=str(certs.ca)).wrap_socket(raw, server_hostname="127.0.0.1")
    with raw as s:
        s.sendall(_api_versions_frame())
        size = struct.unpack(">i", _recv_exact(s, 4))[0]
        body = _recv_exact(s, size)
        assert struct.unpack_from(">i", body)[0] == 1  # ApiVersions answered
        frame, _cls = encode_request(
            3, 4, 2, "tls-test", {"topics": None, "allow_auto_topic_creation": False}
        )
        s.sendall(frame)
        assert _read_until_closed(s) == b""  # Metadata before SASL: connection closed, no answer
    assert f"on listener {listener}: Metadata before SASL authentication" in tls_broker.log_path.read_text()


JAVA_SOURCE = r"""
import java.util.*;
import java.time.Duration;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.clients.consumer.*;

public class TlsClient {
    public static void main(String[] a) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", a[0]);
        p.put("security.protocol", "SSL");
        p.put("ssl.truststore.type", "PEM");
        p.put("ssl.truststore.location", a[2]);
        p.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        p.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        try (Producer<String, String> prod = new KafkaProducer<>(p)) {
            for (int i = 0; i < 3; i++) prod.send(new ProducerRecord<>(a[1], "k" + i, "j" + i)).get();
        }
        Properties c = new Properties();
        c.putAll(p);
        c.put("group.id", "java-" + a[1]);
        c.put("auto.offset.reset", "earliest");
        c.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        c.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        int n = 0;
        try (Consumer<String, String> cons = new KafkaConsumer<>(c)) {
            cons.subscribe(List.of(a[1]));
            long end = System.currentTimeMillis() + 15000;
            while (n < 3 && System.currentTimeMillis() < end)
                for (ConsumerRecord<String, String> r : cons.poll(Duration.ofMillis(500))) { System.out.println("GOT " + r.value()); n++; }
        }
    }
}
"""


def test_java_client_over_ssl(tls_broker: BrokerProcess, certs: Certs, tmp_path: Path) -> None:
    if shutil.which("java") is None or not JAVA_LIBS.is_dir():
        pytest.skip("no JDK or Java client jars (see ../shared/compat)")
    src = tmp_path / "TlsClient.java"
    src.write_text(JAVA_SOURCE)
    topic = _topic("tls-java")
    out = subprocess.run(
        ["java", "-cp", f"{JAVA_LIBS}/*", str(src), tls_broker.bootstrap_for("SSL"), topic, str(certs.ca)],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert [line for line in out.stdout.splitlines() if line.startswith("GOT")] == [
        "GOT j0",
        "GOT j1",
        "GOT j2",
    ]


@pytest.mark.parametrize(
    ("overrides", "message", "code"),
    [
        (["ssl.keystore.type=PEM"], "has no keystore", 2),
        (
            ["ssl.keystore.type=PEM", "ssl.keystore.location=/nonexistent/server.pem"],
            "cannot read ssl.keystore.location",
            1,
        ),
        (["ssl.keystore.location=/x/server.jks"], "ssl.keystore.type is JKS", 2),
    ],
)
def test_bad_keystore_refuses_to_start(tmp_path: Path, overrides: list[str], message: str, code: int) -> None:
    b = BrokerProcess(tmp_path / "data", listeners={"SSL": "SSL"}, overrides=overrides)
    with pytest.raises(RuntimeError, match="broker exited"):
        b.start(timeout=20)
    assert b.proc is not None and b.proc.returncode == code
    log = b.log()
    assert message in log
    assert "Traceback" not in log


def test_mutual_tls_on_uvloop(tmp_path: Path, certs: Certs) -> None:
    """The other I/O path (uvloop, chosen when strom.fetch.sendfile=false): TLS, client
    certificate principal and fetches through TLS."""
    b = BrokerProcess(
        tmp_path / "data",
        listeners={"SSL": "SSL"},
        overrides=[
            "strom.fetch.sendfile=false",
            "group.initial.rebalance.delay.ms=0",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={certs.server}",
            "ssl.client.auth=required",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={certs.ca}",
        ],
        env={"STROM_LOG_LEVEL": "DEBUG"},
    )
    with b:
        conf = {
            **_ssl_conf(b, certs),
            "ssl.certificate.location": str(certs.client_cert),
            "ssl.key.location": str(certs.client_key),
        }
        assert _round_trip(conf, _topic("tls-uv"), n=5) == [f"v{i}".encode() for i in range(5)]
        log = b.log_path.read_text()
    assert "principal User:CN=alice,OU=eng,O=strom" in log
    assert "Using selector" not in log  # uvloop, not asyncio's selector event loop
    assert "exceeds socket.request.max.bytes" not in log  # no TLS record reached the Kafka framing
