"""The schema registry served by the broker's own HTTP listener under ``/schema-registry/``
(``strom.http.schema.registry.enable``), driven by confluent-kafka's SchemaRegistryClient and
serializers with the broker's URL (a URL with a path), with HTTP basic auth
(``strom.http.schema.registry.basic.auth.file``, confluent-kafka's ``basic.auth.user.info``)."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastavro")
pytest.importorskip("confluent_kafka.schema_registry")

from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from strom.testing.broker_process import BrokerProcess
from strom.testing.registry_process import RegistryProcess

pytestmark = pytest.mark.integration

USER = json.dumps(
    {
        "type": "record",
        "name": "User",
        "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
    }
)


def wait_ready(url: str, auth: str | None = None, timeout: float = 60.0) -> None:
    """The registry opens its store after the Kafka listener is up: 503 until then."""
    deadline = time.monotonic() + timeout
    while True:
        req = urllib.request.Request(url + "/subjects")
        if auth:
            req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                if resp.status == 200:
                    return
        except urllib.error.HTTPError as e:
            body = json.loads(e.read())
            assert e.code == 503 and body["error_code"] == 50002, (e.code, body)
        except OSError:  # not listening yet (a standalone instance starting)
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"registry at {url} not ready")
        time.sleep(0.3)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    d = tmp_path_factory.mktemp("sr-broker")
    realm = d / "realm.properties"
    realm.write_text(
        "# user: password, roles\nalice: alice-secret, admin\nbob: bob-secret\n"
        # Jetty's forms of the password 'password' (org.eclipse.jetty.util.security.Password)
        "carol: MD5:5f4dcc3b5aa765d61d8327deb882cf99, readonly\n"
        "dave: OBF:1v2j1uum1xtv1zej1zer1xtn1uvk1v1v, user\n"
        "erin: CRYPT:usjRS48E8ZADM, developer\n"
    )
    b = BrokerProcess(
        d / "data",
        overrides=[
            "strom.http.schema.registry.enable=true",
            f"strom.http.schema.registry.basic.auth.file={realm}",
            "group.initial.rebalance.delay.ms=0",
        ],
    )
    b.start()
    try:
        wait_ready(b.http_url + "/schema-registry", "alice:alice-secret")
        yield b
    finally:
        b.stop()


def registry_url(b: BrokerProcess) -> str:
    return b.http_url + "/schema-registry"


def test_confluent_client_and_serdes_against_the_brokers_url(broker: BrokerProcess) -> None:
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

    conf = {"url": registry_url(broker), "basic.auth.user.info": "alice:alice-secret"}
    sr = SchemaRegistryClient(conf)
    topic = f"users-{uuid.uuid4().hex[:8]}"
    ctx = SerializationContext(topic, MessageField.VALUE)
    ser = AvroSerializer(sr, USER)
    users = [{"name": f"u{i}", "age": i} for i in range(5)]
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for u in users:
        p.produce(topic, value=ser(u, ctx))
    assert p.flush(30) == 0
    c = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )
    c.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < len(users) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    de = AvroDeserializer(SchemaRegistryClient(conf))
    assert [de(v, ctx) for v in got] == users
    assert f"{topic}-value" in sr.get_subjects()
    latest = sr.get_latest_version(f"{topic}-value")
    assert latest.version == 1 and json.loads(sr.get_schema(latest.schema_id).schema_str) == json.loads(USER)
    bad = json.dumps({"type": "record", "name": "User", "fields": [{"name": "x", "type": "string"}]})
    with pytest.raises(SchemaRegistryError) as e:
        sr.register_schema(f"{topic}-value", Schema(bad, "AVRO"))
    assert e.value.http_status_code == 409
    # state is the broker's own _schemas topic (compacted, Confluent's record format)
    c = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": f"g2-{topic}", "auto.offset.reset": "earliest"}
    )
    c.subscribe(["_schemas"])
    keys: list[dict[str, Any]] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not any(k.get("subject") == f"{topic}-value" for k in keys):
        m = c.poll(0.5)
        if m is not None and not m.error():
            keys.append(json.loads(m.key()))
    c.close()
    assert {"keytype": "SCHEMA", "subject": f"{topic}-value", "version": 1, "magic": 1} in keys


def test_basic_auth(broker: BrokerProcess) -> None:
    url = registry_url(broker)
    for user_info in (None, "alice:wrong", "carol:x"):
        conf = {"url": url}
        if user_info:
            conf["basic.auth.user.info"] = user_info
        with pytest.raises(SchemaRegistryError) as e:
            SchemaRegistryClient(conf).get_subjects()
        assert e.value.http_status_code == 401
    req = urllib.request.Request(url + "/subjects")
    with pytest.raises(urllib.error.HTTPError) as h:
        urllib.request.urlopen(req, timeout=10)
    assert h.value.code == 401 and h.value.headers["WWW-Authenticate"] == 'Basic realm="SchemaRegistry"'
    assert json.loads(h.value.read()) == {"error_code": 401, "message": "Unauthorized"}
    # bob (no role) is a user too; strom.serde's client speaks basic auth as well
    from strom.serde import RegistryClient

    assert isinstance(
        SchemaRegistryClient({"url": url, "basic.auth.user.info": "bob:bob-secret"}).get_subjects(), list
    )
    sid = RegistryClient(url, user_info="bob:bob-secret").register("auth-check-value", '"string"', "AVRO")
    assert (
        SchemaRegistryClient({"url": url, "basic.auth.user.info": "alice:alice-secret"})
        .get_schema(sid)
        .schema_str
        == '"string"'
    )
    # the rest of the listener is unchanged
    with urllib.request.urlopen(broker.http_url + "/healthz", timeout=10) as resp:
        assert resp.status == 200


def test_roles_and_hashed_passwords(broker: BrokerProcess) -> None:
    """Jetty's MD5:/OBF:/CRYPT: passwords authenticate; a read-only role reads (lookups and
    compatibility checks included) but every write is 403 (40301); admin/developer write."""
    url = registry_url(broker)
    subject = f"roles-{uuid.uuid4().hex[:8]}-value"
    v1 = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]})

    def client(user: str, password: str = "password") -> SchemaRegistryClient:
        conf = {"url": url, "basic.auth.user.info": f"{user}:{password}", "max.retries": 0}
        return SchemaRegistryClient(conf)

    for user in ("carol", "dave", "erin"):  # the hashed forms check; a wrong password does not
        assert isinstance(client(user).get_subjects(), list)
        with pytest.raises(SchemaRegistryError) as e:
            client(user, "passwore").get_subjects()
        assert e.value.http_status_code == 401
    sid = client("erin").register_schema(subject, Schema(v1, "AVRO"))  # developer writes
    ro = client("carol")
    assert json.loads(ro.get_schema(sid).schema_str) == json.loads(v1)
    assert ro.lookup_schema(subject, Schema(v1, "AVRO")).schema_id == sid  # POST, but a read
    assert ro.test_compatibility(subject, Schema(v1, "AVRO")) is True
    writes = [
        lambda c: c.register_schema(subject, Schema('"string"', "AVRO")),
        lambda c: c.delete_version(subject, 1),
        lambda c: c.delete_subject(subject),
        lambda c: c.set_compatibility(subject_name=subject, level="NONE"),
    ]
    for write in writes:
        for user in ("carol", "dave"):  # readonly; 'user' is no write role either
            with pytest.raises(SchemaRegistryError) as e:
                write(client(user))
            assert (e.value.http_status_code, e.value.error_code) == (403, 40301)
            assert f"User {user} is denied operation Write" in e.value.error_message
    assert client("alice", "alice-secret").get_latest_version(subject).schema_id == sid  # nothing changed
    assert client("bob", "bob-secret").delete_subject(subject) == [1]  # no role: reads and writes


def test_bad_realm_file_is_a_config_error(tmp_path: Path) -> None:
    realm = tmp_path / "realm"
    realm.write_text("alice: MD5:0123456789abcdef, admin\n")
    b = BrokerProcess(
        tmp_path / "data",
        overrides=[
            "strom.http.schema.registry.enable=true",
            f"strom.http.schema.registry.basic.auth.file={realm}",
        ],
    )
    with pytest.raises(Exception, match="MD5: needs 32 hex digits"):
        b.start()
    b.stop()


def test_standalone_registry_https_and_basic_auth(broker: BrokerProcess, tmp_path: Path) -> None:
    """``strom schema-registry --basic-auth-file --ssl-certfile --ssl-keyfile``, with confluent-kafka's
    client trusting the CA (``ssl.ca.location``) and sending ``basic.auth.user.info``."""
    trustme = pytest.importorskip("trustme")

    ca = trustme.CA()
    ca_pem, cert_pem, key_pem = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    issued = ca.issue_cert("127.0.0.1", "localhost")
    issued.cert_chain_pems[0].write_to_path(str(cert_pem))
    issued.private_key_pem.write_to_path(str(key_pem))
    realm = tmp_path / "realm"
    realm.write_text("carol: carol-secret\n")
    reg = RegistryProcess(
        broker.bootstrap, tmp_path / "registry.log", "--topic", "_schemas_tls", "--group-id",
        "schema-registry-tls", "--basic-auth-file", str(realm), "--ssl-certfile", str(cert_pem),
        "--ssl-keyfile", str(key_pem), scheme="https",
    ).start(60)
    try:
        url = reg.url
        conf = {
            "url": url,
            "ssl.ca.location": str(ca_pem),
            "basic.auth.user.info": "carol:carol-secret",
            "max.retries": 0,
        }
        deadline = time.monotonic() + 60
        while True:
            try:
                SchemaRegistryClient(conf).get_subjects()
                break
            except Exception:
                if reg.proc is None or reg.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((tmp_path / "registry.log").read_text()) from None
                time.sleep(0.3)
        sr = SchemaRegistryClient(conf)
        sid = sr.register_schema("tls-value", Schema(USER, "AVRO"))
        assert json.loads(sr.get_schema(sid).schema_str) == json.loads(USER)
        with pytest.raises(SchemaRegistryError) as e:
            SchemaRegistryClient({**conf, "basic.auth.user.info": "carol:nope"}).get_subjects()
        assert e.value.http_status_code == 401
        with pytest.raises(Exception):  # noqa: B017 (the CA is not trusted: TLS fails)
            SchemaRegistryClient(
                {"url": url, "basic.auth.user.info": "carol:carol-secret", "max.retries": 0}
            ).get_subjects()
    finally:
        reg.stop()


def test_broker_instance_and_standalone_instance_share_the_state(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """A standalone ``strom schema-registry`` on the broker's ``_schemas`` joins the broker-served
    instance's election: writes sent to either are written by the leader (the other forwards them,
    the client's credentials with them) and both answer the same ids."""
    realm = tmp_path / "realm"
    realm.write_text("alice: alice-secret\n")
    reg = RegistryProcess(broker.bootstrap, tmp_path / "registry.log", "--basic-auth-file", str(realm))
    reg.start(60)
    try:
        standalone = reg.url
        wait_ready(standalone, "alice:alice-secret")
        auth = {"basic.auth.user.info": "alice:alice-secret", "max.retries": 0}
        mounted = SchemaRegistryClient({"url": registry_url(broker), **auth})
        alone = SchemaRegistryClient({"url": standalone, **auth})
        schemas = [
            json.dumps({"type": "record", "name": f"R{i}", "fields": [{"name": "f", "type": "int"}]})
            for i in range(4)
        ]
        ids = []
        for i, text in enumerate(schemas):  # alternately to each instance
            client = mounted if i % 2 else alone
            ids.append(client.register_schema(f"shared-{i}-value", Schema(text, "AVRO")))
        assert len(set(ids)) == 4
        for client in (mounted, alone):
            for i, sid in enumerate(ids):
                assert json.loads(client.get_schema(sid).schema_str) == json.loads(schemas[i])
                assert client.get_latest_version(f"shared-{i}-value").schema_id == sid
        log_text = (tmp_path / "registry.log").read_text()
        assert "schema registry election" in log_text
        # one of the two is the follower and forwarded the writes sent to it
        assert "to the leader" in log_text + broker.log()
    finally:
        reg.stop()


def test_registry_over_the_brokers_https_listener(tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    from strom.testing.broker_process import free_port

    ca = trustme.CA()
    ca_pem, server = tmp_path / "ca.pem", tmp_path / "server.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(server))
    port = free_port()
    b = BrokerProcess(
        tmp_path / "data",
        overrides=[
            f"strom.http.listener=https://127.0.0.1:{port}",
            "strom.http.schema.registry.enable=true",
            "listener.name.http.ssl.keystore.type=PEM",
            f"listener.name.http.ssl.keystore.location={server}",
            "group.initial.rebalance.delay.ms=0",
        ],
    )
    b.start()
    try:
        sr = SchemaRegistryClient(
            {
                "url": f"https://127.0.0.1:{port}/schema-registry",
                "ssl.ca.location": str(ca_pem),
                "max.retries": 0,
            }
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                sid = sr.register_schema("over-tls-value", Schema(USER, "AVRO"))
                break
            except SchemaRegistryError as e:
                assert e.http_status_code == 503, e  # the store is opening
                assert time.monotonic() < deadline
                time.sleep(0.3)
        assert sr.get_latest_version("over-tls-value").schema_id == sid
    finally:
        b.stop()
