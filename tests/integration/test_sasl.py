# ruff: noqa: E501  (the embedded Java source keeps its natural line lengths)
"""SASL on a real broker process with real clients: PLAIN (confluent-kafka, kafka-python,
aiokafka, kcat) and SCRAM-SHA-256/512 (credentials created and listed with confluent-kafka's
AdminClient), wrong passwords, requests before authentication, and credentials across a restart.

The broker has two listeners: PLAINTEXT (no authentication, used for admin set-up) and
SASL_PLAINTEXT with PLAIN users from ``listener.name.sasl_plaintext.plain.sasl.jaas.config``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.client.messages import decode_response, encode_request
from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_mod = pytest.importorskip("confluent_kafka.admin")

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)
LISTENERS = {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}
OVERRIDES = [f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}"]


def _start(data_dir: Path) -> BrokerProcess:
    return BrokerProcess(data_dir, overrides=list(OVERRIDES), listeners=LISTENERS).start()


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = _start(tmp_path_factory.mktemp("sasl") / "data")
    try:
        yield b
    finally:
        assert b.stop() == 0, b.log()


def _conf(
    b: BrokerProcess, mechanism: str = "PLAIN", user: str = "alice", password: str = "alice-secret"
) -> dict[str, Any]:
    return {
        "bootstrap.servers": b.bootstrap_for("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def _roundtrip(conf: dict[str, Any], topic: str, n: int = 5) -> list[bytes]:
    p = confluent_kafka.Producer(conf)
    for i in range(n):
        p.produce(topic, key=b"k", value=f"v{i}".encode())
    assert p.flush(15) == 0
    c = confluent_kafka.Consumer(conf | {"group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        for _ in range(100):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
            if len(got) == n:
                break
    finally:
        c.close()
    return got


def _auth_error(conf: dict[str, Any]) -> Any:
    """The first error a confluent-kafka client reports when it cannot authenticate."""
    errors: list[Any] = []
    p = confluent_kafka.Producer(conf | {"error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        p.poll(0.05)
    p.flush(0)
    assert errors, "no error reported"
    assert errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION, errors
    return errors[0]


# ------------------------------------------------------------------------------------ PLAIN
def test_confluent_plain_produce_consume(sasl_broker: BrokerProcess) -> None:
    topic = f"plain-{uuid.uuid4().hex[:8]}"
    assert _roundtrip(_conf(sasl_broker), topic) == [f"v{i}".encode() for i in range(5)]


def test_confluent_plain_wrong_password_then_broker_still_serves(sasl_broker: BrokerProcess) -> None:
    for user, password in [("alice", "wrong"), ("nobody", "x")]:
        err = _auth_error(_conf(sasl_broker, user=user, password=password) | {"error_cb": lambda e: None})
        assert err.code() in (
            confluent_kafka.KafkaError._AUTHENTICATION,
            confluent_kafka.KafkaError._TRANSPORT,
        )
    md = admin_mod.AdminClient(_conf(sasl_broker, user="admin", password="admin-secret")).list_topics(
        timeout=10
    )
    assert md.brokers


def test_kafka_python_plain(sasl_broker: BrokerProcess) -> None:
    kafka = pytest.importorskip("kafka")
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    common: dict[str, Any] = {
        "bootstrap_servers": sasl_broker.bootstrap_for("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "alice-secret",
    }
    p = kafka.KafkaProducer(**common)
    p.send(topic, b"hello").get(timeout=15)
    p.close()
    c = kafka.KafkaConsumer(auto_offset_reset="earliest", **common)
    c.assign([kafka.TopicPartition(topic, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 15
    while not got and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=200).values():
            got += [r.value for r in records]
    c.close()
    assert got == [b"hello"]


def test_aiokafka_plain_and_scram(sasl_broker: BrokerProcess) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    topic = f"aio-{uuid.uuid4().hex[:8]}"

    async def run() -> None:
        common: dict[str, Any] = {
            "bootstrap_servers": sasl_broker.bootstrap_for("SASL_PLAINTEXT"),
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "alice",
            "sasl_plain_password": "alice-secret",
        }
        p = aiokafka.AIOKafkaProducer(**common)
        await p.start()
        try:
            await p.send_and_wait(topic, b"hi")
        finally:
            await p.stop()
        # SCRAM-SHA-256 with the same client
        scram = common | {
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": "gina",
            "sasl_plain_password": "gina-secret",
        }
        p = aiokafka.AIOKafkaProducer(**scram)
        await p.start()
        try:
            await p.send_and_wait(topic, b"scram")
        finally:
            await p.stop()

    _scram_admin_setup(sasl_broker.bootstrap, "gina", "gina-secret")

    asyncio.run(run())


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_kcat(sasl_broker: BrokerProcess, mechanism: str) -> None:
    user, password = ("alice", "alice-secret") if mechanism == "PLAIN" else ("ivan", "ivan-secret")
    if mechanism != "PLAIN":
        _scram_admin_setup(sasl_broker.bootstrap, user, password)
    topic = f"kcat-{uuid.uuid4().hex[:8]}"
    base = [
        "kcat",
        "-b",
        sasl_broker.bootstrap_for("SASL_PLAINTEXT"),
        "-X",
        "security.protocol=SASL_PLAINTEXT",
    ]
    base += [
        "-X",
        f"sasl.mechanisms={mechanism}",
        "-X",
        f"sasl.username={user}",
        "-X",
        f"sasl.password={password}",
    ]
    subprocess.run([*base, "-P", "-t", topic], input=b"one\ntwo\n", check=True, timeout=30)
    out = subprocess.run(
        [*base, "-C", "-t", topic, "-o", "beginning", "-c", "2", "-e"],
        capture_output=True,
        check=True,
        timeout=30,
    )
    assert out.stdout.split() == [b"one", b"two"]


# ------------------------------------------------------------------------------------ SCRAM
def _scram_admin_setup(plaintext_bootstrap: str, user: str, password: str) -> None:
    a = admin_mod.AdminClient({"bootstrap.servers": plaintext_bootstrap})
    ups = [
        admin_mod.UserScramCredentialUpsertion(
            user,
            admin_mod.ScramCredentialInfo(admin_mod.ScramMechanism.SCRAM_SHA_256, 8192),
            password.encode(),
        ),
        admin_mod.UserScramCredentialUpsertion(
            user,
            admin_mod.ScramCredentialInfo(admin_mod.ScramMechanism.SCRAM_SHA_512, 4096),
            password.encode(),
        ),
    ]
    # one request per mechanism: a Kafka 4 controller refuses two changes of a user in one
    for up in ups:
        for fut in a.alter_user_scram_credentials([up]).values():
            fut.result(timeout=10)


def test_scram_salts_and_duplicates_as_kafka(sasl_broker: BrokerProcess) -> None:
    """Kafka 4 stores any salt (here 4 bytes and empty) and logins with it work; two changes of
    one user in one request are DUPLICATE_RESOURCE, whatever the mechanisms."""
    a = admin_mod.AdminClient({"bootstrap.servers": sasl_broker.bootstrap})
    sha256 = admin_mod.ScramCredentialInfo(admin_mod.ScramMechanism.SCRAM_SHA_256, 4096)
    sha512 = admin_mod.ScramCredentialInfo(admin_mod.ScramMechanism.SCRAM_SHA_512, 4096)
    up = admin_mod.UserScramCredentialUpsertion("salty4", sha256, b"salty4-secret", b"salt")
    a.alter_user_scram_credentials([up])["salty4"].result(timeout=10)
    # librdkafka refuses to send an empty salt; the request itself, as Kafka's own Admin can send it
    salted = hashlib.pbkdf2_hmac("sha256", b"salty0-secret", b"", 4096)
    upsertion = {"name": "salty0", "mechanism": 1, "iterations": 4096, "salt": b"", "salted_password": salted}
    r = Raw(sasl_broker.bootstrap).call(51, 0, {"deletions": [], "upsertions": [upsertion]})
    assert [(x.user, int(x.error_code)) for x in r.results] == [("salty0", 0)]
    for user in ("salty4", "salty0"):
        topic = f"salt-{user}-{uuid.uuid4().hex[:6]}"
        assert _roundtrip(_conf(sasl_broker, "SCRAM-SHA-256", user, f"{user}-secret"), topic, 2) == [
            b"v0",
            b"v1",
        ]
    both = [
        admin_mod.UserScramCredentialUpsertion("twice", sha256, b"twice-secret"),
        admin_mod.UserScramCredentialUpsertion("twice", sha512, b"twice-secret"),
    ]
    with pytest.raises(confluent_kafka.KafkaException) as ei:
        a.alter_user_scram_credentials(both)["twice"].result(timeout=10)
    assert ei.value.args[0].code() == confluent_kafka.KafkaError.DUPLICATE_RESOURCE
    with pytest.raises(confluent_kafka.KafkaException) as ei:
        a.describe_user_scram_credentials(["twice"])["twice"].result(timeout=10)
    assert ei.value.args[0].code() == confluent_kafka.KafkaError.RESOURCE_NOT_FOUND


def test_scram_credentials_admin_and_login(sasl_broker: BrokerProcess) -> None:
    _scram_admin_setup(sasl_broker.bootstrap, "bob", "bob-secret")
    a = admin_mod.AdminClient({"bootstrap.servers": sasl_broker.bootstrap})
    desc = a.describe_user_scram_credentials(["bob"])["bob"].result(timeout=10)
    infos = {(i.mechanism, i.iterations) for i in desc.scram_credential_infos}
    assert infos == {
        (admin_mod.ScramMechanism.SCRAM_SHA_256, 8192),
        (admin_mod.ScramMechanism.SCRAM_SHA_512, 4096),
    }
    # too few iterations -> UNACCEPTABLE_CREDENTIAL; unknown user -> RESOURCE_NOT_FOUND
    weak = admin_mod.UserScramCredentialUpsertion(
        "weak", admin_mod.ScramCredentialInfo(admin_mod.ScramMechanism.SCRAM_SHA_256, 1000), b"x"
    )
    with pytest.raises(confluent_kafka.KafkaException) as ei:
        a.alter_user_scram_credentials([weak])["weak"].result(timeout=10)
    assert ei.value.args[0].code() == confluent_kafka.KafkaError.UNACCEPTABLE_CREDENTIAL
    with pytest.raises(confluent_kafka.KafkaException) as ei:
        a.describe_user_scram_credentials(["ghost"])["ghost"].result(timeout=10)
    assert ei.value.args[0].code() == confluent_kafka.KafkaError.RESOURCE_NOT_FOUND

    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        topic = f"scram-{mech[-3:]}-{uuid.uuid4().hex[:6]}"
        assert _roundtrip(_conf(sasl_broker, mech, "bob", "bob-secret"), topic, 3) == [b"v0", b"v1", b"v2"]
        err = _auth_error(_conf(sasl_broker, mech, "bob", "wrong") | {"error_cb": lambda e: None})
        assert err.code() in (
            confluent_kafka.KafkaError._AUTHENTICATION,
            confluent_kafka.KafkaError._TRANSPORT,
        )

    # deletion: SCRAM-SHA-512 login stops working, SHA-256 still works
    dele = admin_mod.UserScramCredentialDeletion("bob", admin_mod.ScramMechanism.SCRAM_SHA_512)
    a.alter_user_scram_credentials([dele])["bob"].result(timeout=10)
    _auth_error(_conf(sasl_broker, "SCRAM-SHA-512", "bob", "bob-secret"))
    assert admin_mod.AdminClient(_conf(sasl_broker, "SCRAM-SHA-256", "bob", "bob-secret")).list_topics(
        timeout=10
    )


def test_kafka_python_scram(sasl_broker: BrokerProcess) -> None:
    kafka = pytest.importorskip("kafka")
    _scram_admin_setup(sasl_broker.bootstrap, "carol", "carol-secret")
    p = kafka.KafkaProducer(
        bootstrap_servers=sasl_broker.bootstrap_for("SASL_PLAINTEXT"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="carol",
        sasl_plain_password="carol-secret",
    )
    p.send(f"kps-{uuid.uuid4().hex[:6]}", b"x").get(timeout=15)
    p.close()


def test_scram_credentials_survive_restart(tmp_path: Path) -> None:
    b = _start(tmp_path / "data")
    try:
        _scram_admin_setup(b.bootstrap, "dave", "dave-secret")
    finally:
        assert b.stop() == 0, b.log()
    b = BrokerProcess(tmp_path / "data", port=b.port, overrides=list(OVERRIDES), listeners=LISTENERS)
    b.start()
    try:
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            md = admin_mod.AdminClient(_conf(b, mech, "dave", "dave-secret")).list_topics(timeout=10)
            assert md.brokers
    finally:
        assert b.stop() == 0, b.log()


def test_sasl_ssl_plain_and_scram(tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA(organization_name="strom sasl test CA")
    ca_pem, server_pem = tmp_path / "ca.pem", tmp_path / "server.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(server_pem))
    b = BrokerProcess(
        tmp_path / "data",
        listeners={"PLAINTEXT": "PLAINTEXT", "SASL_SSL": "SASL_SSL"},
        overrides=[
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={server_pem}",
            f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
        ],
    ).start()
    try:
        _scram_admin_setup(b.bootstrap, "frank", "frank-secret")
        for mech, user, password in [
            ("PLAIN", "alice", "alice-secret"),
            ("SCRAM-SHA-512", "frank", "frank-secret"),
        ]:
            conf = {
                "bootstrap.servers": b.bootstrap_for("SASL_SSL"),
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(ca_pem),
                "sasl.mechanisms": mech,
                "sasl.username": user,
                "sasl.password": password,
            }
            topic = f"ssl-{uuid.uuid4().hex[:6]}"
            assert _roundtrip(conf, topic, 2) == [b"v0", b"v1"]
            err = _auth_error(conf | {"sasl.password": "wrong"})
            assert mech in err.str() or "Invalid username or password" in err.str()
    finally:
        assert b.stop() == 0, b.log()


def test_jaas_config_is_sensitive_in_describe_configs(sasl_broker: BrokerProcess) -> None:
    a = admin_mod.AdminClient({"bootstrap.servers": sasl_broker.bootstrap})
    res = admin_mod.ConfigResource(admin_mod.ResourceType.BROKER, "1")
    entries = a.describe_configs([res])[res].result(timeout=10)
    jaas = entries["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert jaas.is_sensitive and jaas.value is None
    assert entries["sasl.enabled.mechanisms"].value == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"


JAVA_LIBS = (
    Path(os.environ.get("STROM_COMPAT_HOME", Path.home() / ".cache" / "strom-compat")) / "java" / "libs"
)
JAVA_SOURCE = r"""
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.producer.*;

public class SaslClient {
    static Properties sasl(String bootstrap, String mech, String module, String user, String pw) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", mech);
        p.put("sasl.jaas.config", "org.apache.kafka.common.security." + module + " required username=\"" + user + "\" password=\"" + pw + "\";");
        p.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        p.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        p.put("max.block.ms", "10000");
        return p;
    }
    static void send(Properties p, String topic, String value) throws Exception {
        try (Producer<String, String> prod = new KafkaProducer<>(p)) {
            prod.send(new ProducerRecord<>(topic, value)).get();
            System.out.println("SENT " + value);
        }
    }
    public static void main(String[] a) throws Exception {
        Properties ap = new Properties();
        ap.put("bootstrap.servers", a[0]);
        try (Admin admin = Admin.create(ap)) {
            UserScramCredentialAlteration h256 = new UserScramCredentialUpsertion("henry", new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), "henry-secret");
            UserScramCredentialAlteration h512 = new UserScramCredentialUpsertion("henry", new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), "henry-secret");
            try {  // Kafka 4: one change per user and request
                admin.alterUserScramCredentials(List.of(h256, h512)).all().get();
            } catch (Exception e) {
                System.out.println("BOTH " + e.getCause().getClass().getSimpleName());
            }
            admin.alterUserScramCredentials(List.of(h256)).all().get();
            admin.alterUserScramCredentials(List.of(h512)).all().get();
            // a 4-byte salt, which Kafka accepts
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion("ivy",
                new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), "ivy-secret".getBytes(), "salt".getBytes()))).all().get();
            for (ScramCredentialInfo i : admin.describeUserScramCredentials(List.of("henry")).all().get().get("henry").credentialInfos())
                System.out.println("DESC " + i.mechanism() + " " + i.iterations());
        }
        send(sasl(a[1], "PLAIN", "plain.PlainLoginModule", "alice", "alice-secret"), a[2], "plain");
        send(sasl(a[1], "SCRAM-SHA-256", "scram.ScramLoginModule", "henry", "henry-secret"), a[2], "scram256");
        send(sasl(a[1], "SCRAM-SHA-512", "scram.ScramLoginModule", "henry", "henry-secret"), a[2], "scram512");
        send(sasl(a[1], "SCRAM-SHA-512", "scram.ScramLoginModule", "ivy", "ivy-secret"), a[2], "salt4");
        try {
            send(sasl(a[1], "PLAIN", "plain.PlainLoginModule", "alice", "wrong"), a[2], "never");
        } catch (Exception e) {
            Throwable c = e.getCause() != null ? e.getCause() : e;
            System.out.println("FAILED " + c.getClass().getSimpleName() + ": " + c.getMessage());
        }
    }
}
"""


def test_java_client_plain_and_scram(sasl_broker: BrokerProcess, tmp_path: Path) -> None:
    if shutil.which("java") is None or not JAVA_LIBS.is_dir():
        pytest.skip("no JDK or Java client jars (see ../shared/compat)")
    src = tmp_path / "SaslClient.java"
    src.write_text(JAVA_SOURCE)
    topic = f"java-{uuid.uuid4().hex[:6]}"
    bootstraps = [sasl_broker.bootstrap, sasl_broker.bootstrap_for("SASL_PLAINTEXT"), topic]
    out = subprocess.run(
        ["java", "-cp", f"{JAVA_LIBS}/*", str(src), *bootstraps], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[:7] == [
        "BOTH DuplicateResourceException",
        "DESC SCRAM_SHA_256 8192",
        "DESC SCRAM_SHA_512 4096",
        "SENT plain",
        "SENT scram256",
        "SENT scram512",
        "SENT salt4",
    ]
    assert (
        lines[7].startswith("FAILED SaslAuthenticationException")
        and "Invalid username or password" in lines[7]
    )


# ------------------------------------------------------------------------------------ raw frames
class Raw:
    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.cid = 0

    def send(self, api_key: int, version: int, data: dict[str, Any]) -> Any:
        self.cid += 1
        frame, resp_cls = encode_request(api_key, version, self.cid, "sasl-test", data)
        self.sock.sendall(frame)
        return resp_cls

    def call(self, api_key: int, version: int, data: dict[str, Any]) -> Any:
        resp_cls = self.send(api_key, version, data)
        size = struct.unpack(">i", self._exact(4))[0]
        return decode_response(resp_cls, self._exact(size))

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by broker")
            out += chunk
        return out

    def closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


def test_request_before_authentication_closes_connection(sasl_broker: BrokerProcess) -> None:
    r = Raw(sasl_broker.bootstrap_for("SASL_PLAINTEXT"))
    resp = r.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert int(resp.error_code) == 0
    r.send(3, 12, {"topics": None, "allow_auto_topic_creation": False})
    assert r.closed_by_peer()


def test_failed_authentication_answers_then_closes(sasl_broker: BrokerProcess) -> None:
    r = Raw(sasl_broker.bootstrap_for("SASL_PLAINTEXT"))
    hs = r.call(17, 1, {"mechanism": "PLAIN"})
    assert int(hs.error_code) == 0 and "PLAIN" in hs.mechanisms
    resp = r.call(36, 2, {"auth_bytes": b"\0alice\0nope"})
    assert int(resp.error_code) == 58 and "Invalid username or password" in resp.error_message
    assert r.closed_by_peer()
    # unsupported mechanism: Kafka's list of enabled ones, then the connection is closed
    r = Raw(sasl_broker.bootstrap_for("SASL_PLAINTEXT"))
    hs = r.call(17, 1, {"mechanism": "GSSAPI"})
    assert int(hs.error_code) == 33 and list(hs.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert r.closed_by_peer()
    # success (handshake v0 is answered like v1): then any request is served on the same connection
    r = Raw(sasl_broker.bootstrap_for("SASL_PLAINTEXT"))
    hs = r.call(17, 0, {"mechanism": "PLAIN"})
    assert int(hs.error_code) == 0
    ok = r.call(36, 2, {"auth_bytes": b"\0alice\0alice-secret"})
    assert int(ok.error_code) == 0
    md = r.call(3, 12, {"topics": None, "allow_auto_topic_creation": False})
    assert md.brokers


def test_sasl_authenticate_out_of_state(sasl_broker: BrokerProcess) -> None:
    """ILLEGAL_SASL_STATE; Kafka keeps the connection on a listener without SASL and after a
    successful authentication, and closes it when SaslAuthenticate comes before any handshake."""
    md = {"topics": None, "allow_auto_topic_creation": False}
    r = Raw(sasl_broker.bootstrap_for("PLAINTEXT"))
    assert int(r.call(36, 2, {"auth_bytes": b"\0alice\0alice-secret"}).error_code) == 34
    assert r.call(3, 12, md).brokers
    r = Raw(sasl_broker.bootstrap_for("SASL_PLAINTEXT"))
    assert int(r.call(17, 1, {"mechanism": "PLAIN"}).error_code) == 0
    assert int(r.call(36, 2, {"auth_bytes": b"\0alice\0alice-secret"}).error_code) == 0
    assert int(r.call(36, 2, {"auth_bytes": b"\0alice\0alice-secret"}).error_code) == 34
    assert r.call(3, 12, md).brokers
    r = Raw(sasl_broker.bootstrap_for("SASL_PLAINTEXT"))
    assert int(r.call(36, 2, {"auth_bytes": b"\0alice\0alice-secret"}).error_code) == 34
    assert r.closed_by_peer()


def test_scram_failure_does_not_tell_unknown_user_from_wrong_password(sasl_broker: BrokerProcess) -> None:
    admin = admin_mod.AdminClient({"bootstrap.servers": sasl_broker.bootstrap})
    cred = admin_mod.UserScramCredentialUpsertion(
        "frank", admin_mod.ScramCredentialInfo(admin_mod.ScramMechanism.SCRAM_SHA_256, 4096), b"frank-pw"
    )
    for f in admin.alter_user_scram_credentials([cred]).values():
        f.result(10)
    messages = []
    for user in ("frank", "nobody"):
        r = Raw(sasl_broker.bootstrap_for("SASL_PLAINTEXT"))
        assert int(r.call(17, 1, {"mechanism": "SCRAM-SHA-256"}).error_code) == 0
        first = r.call(36, 2, {"auth_bytes": f"n,,n={user},r=abcdefgh".encode()})
        if int(first.error_code) == 0:  # a known user: a wrong proof in the final message
            nonce = bytes(first.auth_bytes).decode().split(",")[0]
            final = r.call(36, 2, {"auth_bytes": f"c=biws,{nonce},p=AAAA".encode()})
        else:
            final = first
        assert int(final.error_code) == 58
        messages.append(final.error_message)
        assert r.closed_by_peer()
    kafka_text = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
    assert messages == [kafka_text, kafka_text]
    assert "(unknown user)" in sasl_broker.log() and "(invalid client proof)" in sasl_broker.log()


def test_cli_configs_users_scram(sasl_broker: BrokerProcess) -> None:
    strom = [sys.executable, "-m", "strom", "configs", "--bootstrap-server", sasl_broker.bootstrap]
    user = ["--entity-type", "users", "--entity-name", "erin"]
    add = "SCRAM-SHA-256=[iterations=8192,password=erin-secret],SCRAM-SHA-512=[password=erin-secret]"
    out = subprocess.run([*strom, *user, "--alter", "--add-config", add], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "Completed updating config for user erin." in out.stdout
    out = subprocess.run([*strom, *user, "--describe"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (
        "SCRAM credential configs for user-principal 'erin' are "
        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096"
    )
    assert admin_mod.AdminClient(_conf(sasl_broker, "SCRAM-SHA-512", "erin", "erin-secret")).list_topics(
        timeout=10
    )
    out = subprocess.run(
        [*strom, *user, "--alter", "--delete-config", "SCRAM-SHA-512"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    out = subprocess.run([*strom, *user, "--describe"], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("are SCRAM-SHA-256=iterations=8192")
    bad = subprocess.run(
        [*strom, *user, "--alter", "--add-config", "SCRAM-SHA-256=[iterations=10,password=x]"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "iterations" in bad.stderr


def test_frames_before_authentication_are_bounded(sasl_broker: BrokerProcess) -> None:
    """sasl.server.max.receive.size (512 KiB) bounds what an unauthenticated client may send; once
    authenticated the listener takes requests up to socket.request.max.bytes again."""
    r = Raw(sasl_broker.bootstrap_for("SASL_PLAINTEXT"))
    r.sock.sendall(struct.pack(">i", 600_000) + b"\0" * 4096)  # announces a 600 kB frame
    assert r.closed_by_peer()
    topic = f"big-{uuid.uuid4().hex[:8]}"
    p = confluent_kafka.Producer(_conf(sasl_broker) | {"compression.type": "none"})
    p.produce(topic, value=os.urandom(700_000))
    assert p.flush(15) == 0
    md = admin_mod.AdminClient(_conf(sasl_broker)).list_topics(topic, timeout=10)
    assert md.topics[topic].partitions


def test_idle_connections_are_closed(tmp_path: Path) -> None:
    """connections.max.idle.ms: a silent connection is closed (a bare socket, an unauthenticated
    SASL one); one that keeps sending requests, each sooner than the limit, is not."""
    b = BrokerProcess(
        tmp_path / "data",
        # (2 s: the busy connection's margin is the limit less a round trip and a 0.1 s sleep;
        # with 500 ms one descheduling of this process on a loaded machine closed it)
        overrides=[*OVERRIDES, "connections.max.idle.ms=2000"],
        listeners=LISTENERS,
    ).start()
    try:
        api_versions = {"client_software_name": "t", "client_software_version": "1"}
        bare = Raw(b.bootstrap_for("PLAINTEXT"))
        sasl = Raw(b.bootstrap_for("SASL_PLAINTEXT"))
        assert int(sasl.call(18, 3, api_versions).error_code) == 0
        busy = Raw(b.bootstrap_for("PLAINTEXT"))
        start = time.monotonic()
        while time.monotonic() - start < 5.0:
            assert int(busy.call(18, 3, api_versions).error_code) == 0
            time.sleep(0.1)
        for r in (bare, sasl):
            r.sock.settimeout(5)
            assert r.closed_by_peer()
        assert int(busy.call(18, 3, api_versions).error_code) == 0
    finally:
        assert b.stop() == 0, b.log()


def test_corrupt_credential_store_fails_the_start(tmp_path: Path) -> None:
    b = _start(tmp_path / "data")
    assert b.stop() == 0, b.log()
    (tmp_path / "data" / "strom-scram-credentials.json").write_text("{not json")
    b = BrokerProcess(tmp_path / "data", port=b.port, overrides=list(OVERRIDES), listeners=LISTENERS)
    with pytest.raises(RuntimeError, match="corrupt SCRAM credential store"):
        b.start()


def test_cli_tools_with_command_config(sasl_broker: BrokerProcess, tmp_path: Path) -> None:
    """The tools reach a SASL listener with Kafka's --command-config properties file."""
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="alice-secret";\n'
    )
    base = [sys.executable, "-m", "strom", "topics", "--bootstrap-server", sasl_broker.bootstrap_for("SASL_PLAINTEXT")]
    sec = ["--command-config", str(props)]
    out = subprocess.run([*base, *sec, "--create", "--topic", "cli-sec", "--partitions", "2"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    out = subprocess.run([*base, *sec, "--list"], capture_output=True, text=True)
    assert out.returncode == 0 and "cli-sec" in out.stdout.split(), out.stderr
    # without the settings the SASL listener closes the connection: a clear failure, not a hang
    out = subprocess.run([*base, "--request-timeout-ms", "3000", "--list"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "cli-sec" not in out.stdout
    props.write_text(props.read_text().replace("alice-secret", "wrong"))
    out = subprocess.run([*base, *sec, "--list"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "Invalid username or password" in out.stderr, out.stderr
