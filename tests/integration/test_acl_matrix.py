"""The API x principal authorization matrix (issue 16) on one real broker process with Kafka's
StandardAuthorizer, driven by confluent-kafka (and kafka-python for a subset) over SASL_PLAINTEXT,
and over PLAINTEXT for User:ANONYMOUS.

Principals, each with its own group ``mx-g-<p>`` and transactional id ``mx-x-<p>`` on the shared
topic ``mx-t``:

- super: User:admin, in ``super.users``, no ACL;
- granted: literal ALLOW ALL on mx-t, its new topic, its group, its transactional id, and ALL on
  the cluster;
- prefixed: PREFIXED ALLOW ALL on ``mx-`` for topics, groups and transactional ids (no cluster
  ACL: cluster operations are not granted);
- denied: the same literal ALLOWs as granted plus DENY ALL on each (DENY beats ALLOW);
- none: authenticated, no ACL; anonymous: PLAINTEXT, no ACL;
- tlsgranted / tlsnone: mutual TLS client certificates (``CN=<name>,OU=eng,...``) mapped to
  ``User:<name>`` by ``ssl.principal.mapping.rules``; tlsgranted has granted's ACLs, tlsnone none.

Each cell is what Kafka answers: OK or the error name (HIDDEN: not listed by Metadata).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strom.client.client import Client
from strom.client.errors import KafkaError as StromKafkaError
from strom.client.security import SecurityConfig
from strom.client.transactions import describe_transaction
from strom.testing.broker_process import BrokerProcess
from strom.testing.java_clients import compile_java

pytestmark = pytest.mark.integration

ck = pytest.importorskip("confluent_kafka")
ka = pytest.importorskip("confluent_kafka.admin")
from confluent_kafka import KafkaError, KafkaException  # noqa: E402

PRINCIPALS = ("super", "granted", "prefixed", "denied", "none", "anonymous", "tlsgranted", "tlsnone")
TLS = ("tlsgranted", "tlsnone")  # mutual TLS: CN=<name>,OU=eng mapped to User:<name>
USERS = {"super": "admin", "granted": "granted", "prefixed": "prefixed", "denied": "denied", "none": "none"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" '
    + " ".join(f'user_{u}="{u}-secret"' for u in USERS.values())
    + ";"
)
TOPIC = "mx-t"
LISTENERS = {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT", "MTLS": "SSL"}
T, G, X, C = (
    ka.ResourceType.TOPIC,
    ka.ResourceType.GROUP,
    ka.ResourceType.TRANSACTIONAL_ID,
    ka.ResourceType.BROKER,
)
LIT, PRE = ka.ResourcePatternType.LITERAL, ka.ResourcePatternType.PREFIXED
ALL, ALLOW, DENY = ka.AclOperation.ALL, ka.AclPermissionType.ALLOW, ka.AclPermissionType.DENY

OK, TAF, GAF, CAF, TIDAF = (
    "OK",
    "TOPIC_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
)
GRANTED = {"super", "granted", "prefixed", "tlsgranted"}


def row(granted: str = OK, other: str = TAF, cluster_only: bool = False) -> dict[str, str]:
    """Expected answers: ``granted`` for the granted principals (cluster_only: super and
    granted only, prefixed has no cluster ACL), ``other`` for the rest."""
    ok = {"super", "granted", "tlsgranted"} if cluster_only else GRANTED
    return {p: granted if p in ok else other for p in PRINCIPALS}


EXPECTED: dict[str, dict[str, str]] = {
    "produce": row(),
    # librdkafka learns from Metadata that it may not write the topic before asking for an id
    "produce idempotent": row(),
    "init producer id": row(other=CAF),  # KIP-679: IDEMPOTENT_WRITE on cluster or WRITE on a topic
    "produce transactional": row(other=TIDAF),
    "consume (group)": row(other=GAF),
    "list offsets": row(),
    "metadata": row(other="HIDDEN"),  # all topics: the undescribable ones are left out
    "metadata (named topic)": row(),
    "create topic": row(),
    "delete topic": row(),
    "describe configs": row(),
    "alter configs": row(),
    "describe group": row(other=GAF),
    "delete group": row(other=GAF),
    "describe acls": row(other=CAF, cluster_only=True),
    "create acls": row(other=CAF, cluster_only=True),
    "alter scram": row(other=CAF, cluster_only=True),
    "describe quotas": row(other=CAF, cluster_only=True),
    "describe transactions": row(other=TIDAF),
    "kafka-python produce": row(),
    "kafka-python create topic": row(),
    "kafka-python alter configs": row(),
}


CERTS: dict[str, Any] = {}  # "ca" and each TLS principal's (cert, key) paths


def conf(b: BrokerProcess, p: str) -> dict[str, Any]:
    if p == "anonymous":
        return {"bootstrap.servers": b.bootstrap_for("PLAINTEXT")}
    if p in TLS:
        cert, key = CERTS[p]
        return {
            "bootstrap.servers": b.bootstrap_for("MTLS"),
            "security.protocol": "SSL",
            "ssl.ca.location": CERTS["ca"],
            "ssl.certificate.location": cert,
            "ssl.key.location": key,
        }
    u = USERS[p]
    return {
        "bootstrap.servers": b.bootstrap_for("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": u,
        "sasl.password": f"{u}-secret",
    }


def bindings() -> list[Any]:
    out = []
    for who in ("granted", "tlsgranted"):
        for name, rtype in (
            (TOPIC, T),
            (f"mx-new-{who}", T),
            (f"mx-kp-{who}", T),
            (f"mx-g-{who}", G),
            (f"mx-x-{who}", X),
        ):
            out.append(ka.AclBinding(rtype, name, LIT, f"User:{who}", "*", ALL, ALLOW))
        out.append(ka.AclBinding(C, "kafka-cluster", LIT, f"User:{who}", "*", ALL, ALLOW))
    for rtype in (T, G, X):
        out.append(ka.AclBinding(rtype, "mx-", PRE, "User:prefixed", "*", ALL, ALLOW))
    for name, rtype in (
        (TOPIC, T),
        ("mx-new-denied", T),
        ("mx-kp-denied", T),
        ("mx-g-denied", G),
        ("mx-x-denied", X),
        ("kafka-cluster", C),
    ):
        for perm in (ALLOW, DENY):
            out.append(ka.AclBinding(rtype, name, LIT, "User:denied", "*", ALL, perm))
    return out


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    trustme = pytest.importorskip("trustme")
    tmp = tmp_path_factory.mktemp("matrix")
    ca = trustme.CA(organization_name="strom test CA")
    ca_pem, server_pem = tmp / "ca.pem", tmp / "server.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(server_pem))
    CERTS["ca"] = str(ca_pem)
    for who in TLS:
        c = ca.issue_cert(
            f"{who}@strom.test", common_name=who, organization_name="strom", organization_unit_name="eng"
        )
        cert, key = tmp / f"{who}-cert.pem", tmp / f"{who}-key.pem"
        c.cert_chain_pems[0].write_to_path(str(cert))
        c.private_key_pem.write_to_path(str(key))
        CERTS[who] = (str(cert), str(key))
    b = BrokerProcess(
        tmp / "data",
        overrides=[
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={server_pem}",
            "listener.name.mtls.ssl.client.auth=required",
            "listener.name.mtls.ssl.truststore.type=PEM",
            f"listener.name.mtls.ssl.truststore.location={ca_pem}",
            r"ssl.principal.mapping.rules=RULE:^CN=([^,]*),OU=eng,.*$/$1/L,DEFAULT",
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:admin",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
        ],
        listeners=LISTENERS,
    ).start()
    try:
        admin = ka.AdminClient(conf(b, "super"))
        admin.create_topics([ka.NewTopic(TOPIC, 1, 1)], request_timeout=15)[TOPIC].result()
        for f in admin.create_acls(bindings(), request_timeout=15).values():
            f.result()
        p = ck.Producer(conf(b, "super"))
        p.produce(TOPIC, b"v")
        assert p.flush(15) == 0
        yield b
    finally:
        _ADMINS.clear()  # (their librdkafka threads would retry the stopped broker for the whole run)
        assert b.stop() == 0, b.log()


def outcome(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except KafkaException as e:
        err = e.args[0]
        return err.name() if isinstance(err, KafkaError) else str(err)
    return OK


_ADMINS: dict[str, Any] = {}


def admin(b: BrokerProcess, p: str) -> Any:
    if p not in _ADMINS:
        _ADMINS[p] = ka.AdminClient(conf(b, p))
    return _ADMINS[p]


def one(futures: Any) -> Any:
    (f,) = futures.values() if isinstance(futures, dict) else (futures,)
    return f.result()


# -------------------------------------------------------------------------------- the APIs
def produce(b: BrokerProcess, p: str, **extra: Any) -> None:
    results: list[Any] = []
    prod = ck.Producer(conf(b, p) | {"message.timeout.ms": 5000, "allow.auto.create.topics": False} | extra)
    prod.produce(TOPIC, b"v", on_delivery=lambda err, msg: results.append(err))
    prod.flush(10)
    err = results[0] if results else KafkaError(KafkaError._MSG_TIMED_OUT)
    if err is not None:
        raise KafkaException(err)


def produce_idempotent(b: BrokerProcess, p: str) -> None:
    errors: list[Any] = []
    try:
        produce(b, p, **{"enable.idempotence": True, "error_cb": errors.append})
    except KafkaException:
        # librdkafka reports the failed InitProducerId through the error callback (fatal)
        causes = [e for e in errors if e.code() != KafkaError._FATAL]
        if causes:
            raise KafkaException(causes[0]) from None
        raise


def produce_transactional(b: BrokerProcess, p: str) -> None:
    prod = ck.Producer(conf(b, p) | {"transactional.id": f"mx-x-{p}", "transaction.timeout.ms": 10000})
    prod.init_transactions(10)
    prod.begin_transaction()
    prod.produce(TOPIC, b"t")
    prod.commit_transaction(10)


def consume_group(b: BrokerProcess, p: str) -> None:
    errors: list[Any] = []
    c = ck.Consumer(
        conf(b, p)
        | {
            "group.id": f"mx-g-{p}",
            "auto.offset.reset": "earliest",
            "error_cb": errors.append,
            "allow.auto.create.topics": False,
        }
    )
    try:
        c.subscribe([TOPIC])
        # (a granted cell waits out group.initial.rebalance.delay.ms, 3 s, then joins over TLS or
        # SASL: 10 s was tight on a loaded machine; a denied cell fails at once)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                if errors:
                    raise KafkaException(errors[0])
                continue
            if m.error() is not None:
                raise KafkaException(m.error())
            c.commit(m, asynchronous=False)
            return
        raise KafkaException(errors[0] if errors else KafkaError(KafkaError._TIMED_OUT))
    finally:
        c.close()


def metadata(b: BrokerProcess, p: str) -> str:
    topics = admin(b, p).list_topics(timeout=10).topics
    return OK if TOPIC in topics else "HIDDEN"


def strom_client(b: BrokerProcess, p: str) -> Client:
    if p == "anonymous":
        return Client(b.bootstrap_for("PLAINTEXT"))
    if p in TLS:
        cert, key = CERTS[p]
        tls = SecurityConfig(protocol="SSL", ssl_cafile=CERTS["ca"], ssl_certfile=cert, ssl_keyfile=key)
        return Client(b.bootstrap_for("MTLS"), security=tls)
    u = USERS[p]
    sec = SecurityConfig(
        protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username=u, sasl_password=f"{u}-secret"
    )
    return Client(b.bootstrap_for("SASL_PLAINTEXT"), security=sec)


async def raw(b: BrokerProcess, p: str, api_key: int, body: dict[str, Any]) -> Any:
    async with strom_client(b, p) as c:
        return await (await c.any_connection()).request(api_key, body)


def raw_code(b: BrokerProcess, p: str, api_key: int, body: dict[str, Any], pick: Callable[[Any], Any]) -> str:
    """The broker's answer to one request sent with strom's client, as an error name."""
    return code_name(int(pick(asyncio.run(raw(b, p, api_key, body)))))


def code_name(code: int) -> str:
    return OK if code == 0 else KafkaError(code).name()


def describe_quotas(b: BrokerProcess, p: str) -> str:
    r = asyncio.run(raw(b, p, 48, {"components": [], "strict": False}))
    return code_name(int(r.error_code))


def describe_transactions(b: BrokerProcess, p: str) -> str:
    """DescribeTransactions (strom's admin client: FindCoordinator, then the request)."""

    async def describe() -> str:
        async with strom_client(b, p) as c:
            try:
                await describe_transaction(c, f"mx-x-{p}")
            except StromKafkaError as e:
                return OK if e.code == 105 else code_name(e.code)  # (105: TRANSACTIONAL_ID_NOT_FOUND)
        return OK

    return asyncio.run(describe())


def kafka_python(b: BrokerProcess, p: str) -> dict[str, Any]:
    if p == "anonymous":
        return {"bootstrap_servers": b.bootstrap_for("PLAINTEXT")}
    if p in TLS:
        cert, key = CERTS[p]
        return {
            "bootstrap_servers": b.bootstrap_for("MTLS"),
            "security_protocol": "SSL",
            "ssl_cafile": CERTS["ca"],
            "ssl_certfile": cert,
            "ssl_keyfile": key,
        }
    u = USERS[p]
    return {
        "bootstrap_servers": b.bootstrap_for("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": u,
        "sasl_plain_password": f"{u}-secret",
    }


def kp_name(text: str) -> str:
    """kafka-python's "[Error 29] TopicAuthorizationFailedError: ..." as Kafka's error name."""
    m = re.match(r"\[Error (\d+)\]", text)
    return KafkaError(int(m[1])).name() if m else text


def kp_outcome(fn: Callable[[], Any]) -> str:
    from kafka.errors import KafkaError as KPError

    try:
        result = fn()
    except KPError as e:
        return kp_name(str(e))
    return OK if result in (None, OK) else kp_name(str(result))


def cells_for(b: BrokerProcess, p: str) -> dict[str, Callable[[], str]]:
    """The matrix's cells for principal ``p``: each returns OK or Kafka's error name."""
    cfg_res = ka.ConfigResource(ka.ResourceType.TOPIC, TOPIC)
    a = admin(b, p)
    cells: dict[str, Callable[[], str]] = {
        "produce": lambda: outcome(lambda: produce(b, p)),
        "produce idempotent": lambda: outcome(lambda: produce_idempotent(b, p)),
        "produce transactional": lambda: outcome(lambda: produce_transactional(b, p)),
        "consume (group)": lambda: outcome(lambda: consume_group(b, p)),
        # (librdkafka answers _NOENT itself for a topic Metadata refused: the broker's answer)
        "list offsets": lambda: raw_code(
            b,
            p,
            2,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
            },
            lambda r: r.topics[0].partitions[0].error_code,
        ),
        "metadata": lambda: metadata(b, p),
        "create topic": lambda: outcome(
            lambda: one(a.create_topics([ka.NewTopic(f"mx-new-{p}", 1, 1)], request_timeout=10))
        ),
        "delete topic": lambda: outcome(
            lambda: one(a.delete_topics([f"mx-new-{p}" if p in GRANTED else TOPIC], request_timeout=10))
        ),
        "describe configs": lambda: outcome(lambda: one(a.describe_configs([cfg_res], request_timeout=10))),
        "alter configs": lambda: outcome(
            lambda: one(
                a.incremental_alter_configs(
                    [
                        ka.ConfigResource(
                            ka.ResourceType.TOPIC,
                            TOPIC,
                            incremental_configs=[
                                ka.ConfigEntry(
                                    "retention.ms",
                                    "86400000",
                                    incremental_operation=ka.AlterConfigOpType.SET,
                                )
                            ],
                        )
                    ],
                    request_timeout=10,
                )
            )
        ),
        "describe group": lambda: outcome(
            lambda: one(a.describe_consumer_groups([f"mx-g-{p}"], request_timeout=10))
        ),
        "delete group": lambda: outcome(
            lambda: one(a.delete_consumer_groups([f"mx-g-{p}"], request_timeout=10))
        ),
        # (librdkafka drops DescribeAcls' top-level error: the broker's answer)
        "describe acls": lambda: raw_code(
            b,
            p,
            29,
            {
                "resource_type_filter": 1,
                "resource_name_filter": None,
                "pattern_type_filter": 1,
                "principal_filter": None,
                "host_filter": None,
                "operation": 1,
                "permission_type": 1,
            },
            lambda r: r.error_code,
        ),
        "create acls": lambda: outcome(
            lambda: one(
                a.create_acls(
                    [ka.AclBinding(T, f"mx-acl-{p}", LIT, "User:nobody", "*", ka.AclOperation.READ, ALLOW)],
                    request_timeout=10,
                )
            )
        ),
        "alter scram": lambda: outcome(
            lambda: one(
                a.alter_user_scram_credentials(
                    [
                        ka.UserScramCredentialUpsertion(
                            f"mx-scram-{p}",
                            ka.ScramCredentialInfo(ka.ScramMechanism.SCRAM_SHA_256, 4096),
                            b"secret",
                        )
                    ],
                    request_timeout=10,
                )
            )
        ),
        "describe quotas": lambda: describe_quotas(b, p),
        "init producer id": lambda: raw_code(
            b, p, 22, {"transactional_id": None, "transaction_timeout_ms": -1}, lambda r: r.error_code
        ),
        "metadata (named topic)": lambda: raw_code(
            b,
            p,
            3,
            {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False},
            lambda r: r.topics[0].error_code,
        ),
        "describe transactions": lambda: describe_transactions(b, p),
    }
    return cells


def kp_cells(b: BrokerProcess, p: str) -> dict[str, Callable[[], str]]:
    """kafka-python's cells for principal ``p``."""
    kafka = pytest.importorskip("kafka")
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    common = kafka_python(b, p)

    def kp_produce() -> None:
        prod = kafka.KafkaProducer(**common, max_block_ms=10_000, retries=0)
        try:
            prod.send(TOPIC, b"v").get(timeout=10)
        finally:
            prod.close(timeout=5)

    def kp_create() -> None:
        a = kafka.KafkaAdminClient(**common)
        try:
            a.create_topics([NewTopic(f"mx-kp-{p}", 1, 1)])
        finally:
            a.close()

    def kp_alter() -> str:
        a = kafka.KafkaAdminClient(**common)
        try:
            r = a.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, TOPIC, {"retention.ms": "86400000"})],
                raise_on_unknown=False,
            )
            return str(r["topic"][TOPIC])  # 'OK' or the error's text
        finally:
            a.close()

    return {
        "kafka-python produce": lambda: kp_outcome(kp_produce),
        "kafka-python create topic": lambda: kp_outcome(kp_create),
        "kafka-python alter configs": lambda: kp_outcome(kp_alter),
    }


def run_matrix(b: BrokerProcess) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for p in PRINCIPALS:
        for name, fn in (cells_for(b, p) | kp_cells(b, p)).items():
            out.setdefault(name, {})[p] = fn()
    return out


def test_api_principal_matrix(broker: BrokerProcess) -> None:
    got = run_matrix(broker)
    print(f"\n{'':30}" + "".join(f"{p:>13}" for p in PRINCIPALS))
    for api in EXPECTED:
        short = {OK: "ok", TAF: "TOPIC_AUTH", GAF: "GROUP_AUTH", CAF: "CLUSTER_AUTH", TIDAF: "TXN_ID_AUTH"}
        print(f"{api:30}" + "".join(f"{short.get(got[api][p], got[api][p]):>13}" for p in PRINCIPALS))
    wrong = [
        f"{api:28} {p:10} expected {EXPECTED[api][p]:40} got {got.get(api, {}).get(p)}"
        for api in EXPECTED
        for p in PRINCIPALS
        if got.get(api, {}).get(p) != EXPECTED[api][p]
    ]
    assert not wrong, "\n" + "\n".join(wrong)


# ------------------------------------------------------------------- Java kafka-clients
# Java's producer asks for the topic's metadata while its sender asks for a producer id, so a
# principal without rights sees whichever refusal comes first: either is an authorization error
TAF_OR_CAF = f"{TAF}|{CAF}"
JAVA_EXPECTED: dict[str, dict[str, str]] = {
    "produce": row(),
    "produce idempotent": row(other=TAF_OR_CAF),
    "produce transactional": row(other=TIDAF),
    # Java's consumer asks for the topic's metadata and the group's committed offset at once:
    # either refusal may come first
    "consume (group)": row(other=f"{TAF}|{GAF}"),
    "list offsets": row(),
    "metadata": row(other="HIDDEN"),
    "metadata (named topic)": row(),
    "create topic": row(),
    "describe configs": row(),
    "alter configs": row(),
    "describe group": row(other=GAF),
    "delete group": row(other=GAF),
    "describe acls": row(other=CAF, cluster_only=True),
    "create acls": row(other=CAF, cluster_only=True),
    "alter scram": row(other=CAF, cluster_only=True),
    "describe quotas": row(other=CAF, cluster_only=True),
    "describe transactions": row(other=TIDAF),
    "delete topic": row(),
}


def java_properties(b: BrokerProcess, p: str, tmp: Any) -> str:
    from pathlib import Path

    if p == "anonymous":
        plain = b.bootstrap_for("PLAINTEXT")
        return f"bootstrap.servers={plain}\n"
    if p in TLS:
        from cryptography.hazmat.primitives import serialization

        cert, key = CERTS[p]
        pkcs8 = serialization.load_pem_private_key(Path(key).read_bytes(), None).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        store = tmp / f"{p}-keystore.pem"
        store.write_bytes(pkcs8 + Path(cert).read_bytes())
        mtls = b.bootstrap_for("MTLS")
        ca = CERTS["ca"]
        return (f"bootstrap.servers={mtls}\nsecurity.protocol=SSL\n"
                f"ssl.truststore.type=PEM\nssl.truststore.location={ca}\n"
                f"ssl.keystore.type=PEM\nssl.keystore.location={store}\n")
    user = USERS[p]
    sasl = b.bootstrap_for("SASL_PLAINTEXT")
    return (f"bootstrap.servers={sasl}\nsecurity.protocol=SASL_PLAINTEXT\n"
            "sasl.mechanism=PLAIN\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{user}" password="{user}-secret";\n')


def test_java_principal_matrix(broker: BrokerProcess, tmp_path: Any) -> None:
    """The same matrix with Java kafka-clients 4.x (AdminClient, producer, consumer;
    clients/AclProbe.java), one JVM per principal."""
    import subprocess
    from pathlib import Path

    cp = compile_java(Path(__file__).parent / "clients" / "AclProbe.java", tmp_path)
    got: dict[str, dict[str, str]] = {api: {} for api in JAVA_EXPECTED}
    for p in PRINCIPALS:
        r = subprocess.run(["java", "-cp", cp, "AclProbe", p, TOPIC],
                           input=java_properties(broker, p, tmp_path), capture_output=True, text=True,
                           timeout=300)
        cells = [line.split("\t") for line in r.stdout.splitlines() if line.startswith("CELL\t")]
        assert r.returncode == 0 and len(cells) == len(JAVA_EXPECTED), (p, r.stdout[-2000:], r.stderr[-3000:])
        for _c, api, result in cells:
            got[api][p] = result
    print(f"\n{'java':30}" + "".join(f"{p:>13}" for p in PRINCIPALS))
    for api in JAVA_EXPECTED:
        print(f"{api:30}" + "".join(f"{got[api][p][:12]:>13}" for p in PRINCIPALS))
    wrong = [
        f"{api:28} {p:10} expected {JAVA_EXPECTED[api][p]:40} got {got[api].get(p)}"
        for api in JAVA_EXPECTED
        for p in PRINCIPALS
        if got[api].get(p) not in JAVA_EXPECTED[api][p].split("|")
    ]
    assert not wrong, "\n" + "\n".join(wrong)
