# ruff: noqa: E501  (the embedded Java source keeps its natural line lengths)
"""Authorization on a real broker process (``authorizer.class.name`` = Kafka's StandardAuthorizer,
``super.users`` = User:admin) driven by confluent-kafka: ACLs created, listed and deleted with the
AdminClient (Kafka's answers and error codes), and enforced on produce, consume, groups, topic
administration and metadata for SASL/PLAIN users alice and bob and for User:ANONYMOUS on the
PLAINTEXT listener; the ACLs survive a restart.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.client.client import Client
from strom.client.security import SecurityConfig
from strom.testing.broker_process import BrokerProcess
from strom.testing.java_clients import JAVA_LIBS

pytestmark = pytest.mark.integration

ck = pytest.importorskip("confluent_kafka")
admin_mod = pytest.importorskip("confluent_kafka.admin")
from confluent_kafka import KafkaError, KafkaException  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

SRC = Path(__file__).resolve().parents[2] / "src"
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_alice="alice-secret" user_bob="bob-secret";'
)
LISTENERS = {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}
OVERRIDES = [
    f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users=User:admin",
]


def _start(data_dir: Path) -> BrokerProcess:
    return BrokerProcess(data_dir, overrides=list(OVERRIDES), listeners=LISTENERS).start()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = _start(tmp_path_factory.mktemp("acls") / "data")
    try:
        yield b
    finally:
        assert b.stop() == 0, b.log()


def conf(b: BrokerProcess, user: str | None) -> dict[str, Any]:
    if user is None:
        return {"bootstrap.servers": b.bootstrap_for("PLAINTEXT")}
    return {
        "bootstrap.servers": b.bootstrap_for("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


_ADMINS: dict[tuple[str, str | None], Any] = {}


@pytest.fixture(scope="module", autouse=True)
def _free_admins() -> Iterator[None]:
    """The cached AdminClients go with the module (their librdkafka threads would otherwise
    retry the stopped brokers for the rest of the run)."""
    yield
    _ADMINS.clear()


def admin(b: BrokerProcess, user: str | None = "admin") -> Any:
    """One AdminClient per broker and user, kept for the session (a librdkafka client dropped
    with a request in flight fails that request, or aborts the process)."""
    key = (conf(b, user)["bootstrap.servers"], user)
    if key not in _ADMINS:
        _ADMINS[key] = admin_mod.AdminClient(conf(b, user))
    return _ADMINS[key]


def acl(
    rtype: Any,
    name: str,
    principal: str,
    op: Any,
    perm: Any = AclPermissionType.ALLOW,
    pattern: Any = ResourcePatternType.LITERAL,
    host: str = "*",
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def create(b: BrokerProcess, *bindings: AclBinding, user: str | None = "admin") -> None:
    for f in admin(b, user).create_acls(list(bindings), request_timeout=15).values():
        f.result()


def new_topic(b: BrokerProcess, name: str) -> None:
    fs = admin(b).create_topics([admin_mod.NewTopic(name, 1, 1)], request_timeout=15)
    fs[name].result()


def produce_error(b: BrokerProcess, user: str | None, topic: str, **extra: Any) -> Any:
    """The delivery error of one message (None when delivered)."""
    results: list[Any] = []
    p = ck.Producer(conf(b, user) | {"message.timeout.ms": 8000, "allow.auto.create.topics": False} | extra)
    p.produce(topic, b"v", on_delivery=lambda err, msg: results.append(err))
    p.flush(15)
    assert results, "no delivery report"
    return results[0]


def consume(
    b: BrokerProcess, user: str | None, topic: str | list[str], group: str, **extra: Any
) -> tuple[list[bytes], list[Any]]:
    errors: list[Any] = []
    c = ck.Consumer(
        conf(b, user)
        | {
            "group.id": group,
            "auto.offset.reset": "earliest",
            "error_cb": errors.append,
            "allow.auto.create.topics": False,
        }
        | extra
    )
    got: list[bytes] = []
    try:
        c.subscribe(topic if isinstance(topic, list) else [topic])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not got:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                errors.append(m.error())
                if m.error().code() in _AUTHZ_ERRORS:
                    break
                continue
            got.append(m.value())
    finally:
        c.close()
    return got, errors


_AUTHZ_ERRORS = (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED)


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------------------- ACL admin
def test_create_describe_delete_acls(broker: BrokerProcess) -> None:
    t = uniq("adm")
    bindings = [
        acl(ResourceType.TOPIC, t, "User:alice", AclOperation.READ),
        acl(ResourceType.TOPIC, t[:5], "User:bob", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
        acl(ResourceType.GROUP, "*", "User:alice", AclOperation.ALL, AclPermissionType.DENY, host="10.0.0.1"),
    ]
    create(broker, *bindings)
    a = admin(broker)
    got = a.describe_acls(
        AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        ),
        request_timeout=10,
    ).result()
    for b in bindings:
        assert b in got
    # MATCH: the ACLs that apply to the topic (its literal one and the prefixed one)
    match = a.describe_acls(
        AclBindingFilter(
            ResourceType.TOPIC,
            t,
            ResourcePatternType.MATCH,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        ),
        request_timeout=10,
    ).result()
    assert set(map(str, match)) >= {str(bindings[0]), str(bindings[1])}
    # delete by principal: only alice's go
    flt = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        "User:alice",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    deleted = a.delete_acls([flt], request_timeout=10)[flt].result()
    assert set(map(str, deleted)) >= {str(bindings[0]), str(bindings[2])}
    assert str(bindings[1]) not in set(map(str, deleted))
    left = a.describe_acls(
        AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        ),
        request_timeout=10,
    ).result()
    assert bindings[1] in left and bindings[0] not in left


def test_create_acls_bad_input_invalid_request(broker: BrokerProcess) -> None:
    a = admin(broker)
    bad = [
        acl(ResourceType.BROKER, "other-cluster", "User:alice", AclOperation.ALTER),  # BROKER = CLUSTER
        acl(ResourceType.TOPIC, "t", "alice", AclOperation.READ),  # no principal type
    ]
    for b, f in a.create_acls(bad, request_timeout=10).items():
        with pytest.raises(KafkaException) as e:
            f.result()
        assert e.value.args[0].code() == KafkaError.INVALID_REQUEST, (b, e.value)


def test_acl_apis_need_cluster_permissions(broker: BrokerProcess) -> None:
    b = acl(ResourceType.TOPIC, "x", "User:bob", AclOperation.READ)
    f = admin(broker, "alice").create_acls([b], request_timeout=10)[b]
    with pytest.raises(KafkaException) as e:
        f.result()
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    flt = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    # librdkafka drops DescribeAcls' top-level error (alice sees no ACL); the broker's answer,
    # read with strom's client, is Kafka's
    assert admin(broker, "alice").describe_acls(flt, request_timeout=10).result() == []
    r = asyncio.run(_raw_describe_acls(broker, "alice"))
    assert (r.error_code, r.error_message, r.resources) == (31, "Cluster authorization failed.", ())
    r = asyncio.run(_raw_describe_acls(broker, "alice", resource_type_filter=0))
    assert r.error_code == 31  # authorization before validation, as Kafka
    r = asyncio.run(_raw_describe_acls(broker, "admin", resource_type_filter=0))
    assert r.error_code == KafkaError.INVALID_REQUEST


async def _raw_describe_acls(b: BrokerProcess, user: str, **overrides: Any) -> Any:
    sec = SecurityConfig(
        protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username=user, sasl_password=f"{user}-secret"
    )
    async with Client(b.bootstrap_for("SASL_PLAINTEXT"), security=sec) as c:
        conn = await c.any_connection()
        return await conn.request(
            29,
            {
                "resource_type_filter": 1,
                "resource_name_filter": None,
                "pattern_type_filter": 1,
                "principal_filter": None,
                "host_filter": None,
                "operation": 1,
                "permission_type": 1,
            }
            | overrides,
        )


# ------------------------------------------------------------------------------ enforcement
def test_produce_needs_write(broker: BrokerProcess) -> None:
    t = uniq("prod")
    new_topic(broker, t)
    assert produce_error(broker, "admin", t) is None  # super user
    err = produce_error(broker, "alice", t)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    create(broker, acl(ResourceType.TOPIC, t, "User:alice", AclOperation.WRITE))
    assert produce_error(broker, "alice", t, **{"enable.idempotence": False}) is None
    # idempotent producer: WRITE on some topic is enough for InitProducerId (KIP-679)
    assert produce_error(broker, "alice", t, **{"enable.idempotence": True}) is None
    err = produce_error(broker, "bob", t)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    err = produce_error(broker, None, t)  # User:ANONYMOUS on PLAINTEXT
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err


def test_prefixed_grant_and_deny_beats_allow(broker: BrokerProcess) -> None:
    base = uniq("pfx")
    t1, t2 = f"{base}-a", f"{base}-b"
    new_topic(broker, t1)
    new_topic(broker, t2)
    create(
        broker,
        acl(ResourceType.TOPIC, base, "User:bob", AclOperation.ALL, pattern=ResourcePatternType.PREFIXED),
        acl(ResourceType.TOPIC, t2, "User:bob", AclOperation.WRITE, AclPermissionType.DENY),
    )
    assert produce_error(broker, "bob", t1) is None
    err = produce_error(broker, "bob", t2)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err


def test_consume_needs_topic_read_and_group_read(broker: BrokerProcess) -> None:
    t, g = uniq("cons"), uniq("grp")
    new_topic(broker, t)
    assert produce_error(broker, "admin", t) is None
    create(broker, acl(ResourceType.TOPIC, t, "User:alice", AclOperation.READ))
    got, errors = consume(broker, "alice", t, g)
    assert not got
    assert any(e.code() == KafkaError.GROUP_AUTHORIZATION_FAILED for e in errors), errors
    create(broker, acl(ResourceType.GROUP, g, "User:alice", AclOperation.READ))
    got, errors = consume(broker, "alice", t, g)
    assert got == [b"v"], errors
    # bob may use the group but not read the topic
    create(broker, acl(ResourceType.GROUP, g, "User:bob", AclOperation.READ))
    got, errors = consume(broker, "bob", t, g)
    assert not got
    assert any(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors), errors


def test_consumer_group_heartbeat_needs_describe_on_subscribed_topics(broker: BrokerProcess) -> None:
    """KIP-848 (group.protocol=consumer): a member subscribing to a topic it may not DESCRIBE
    gets TOPIC_AUTHORIZATION_FAILED and nothing assigned; without it, it consumes."""
    t, hidden, g = uniq("kip848"), uniq("kip848h"), uniq("g848")
    new_topic(broker, t)
    new_topic(broker, hidden)
    assert produce_error(broker, "admin", t) is None
    create(
        broker,
        acl(ResourceType.TOPIC, t, "User:alice", AclOperation.READ),
        acl(ResourceType.GROUP, g, "User:alice", AclOperation.READ),
    )
    got, errors = consume(broker, "alice", [t, hidden], g, **{"group.protocol": "consumer"})
    assert not got
    assert any(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors), errors
    got, errors = consume(broker, "alice", [t], g, **{"group.protocol": "consumer"})
    assert got == [b"v"], errors


def test_metadata_hides_undescribable_topics(broker: BrokerProcess) -> None:
    t, hidden = uniq("seen"), uniq("hidden")
    new_topic(broker, t)
    new_topic(broker, hidden)
    create(broker, acl(ResourceType.TOPIC, t, "User:alice", AclOperation.DESCRIBE))
    topics = admin(broker, "alice").list_topics(timeout=10).topics
    assert t in topics and hidden not in topics
    assert hidden in admin(broker).list_topics(timeout=10).topics
    md = admin(broker, "alice").list_topics(topic=hidden, timeout=10)
    assert md.topics[hidden].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_create_and_delete_topics(broker: BrokerProcess) -> None:
    t = uniq("ct")
    fs = admin(broker, "alice").create_topics([admin_mod.NewTopic(t, 1, 1)], request_timeout=10)
    with pytest.raises(KafkaException) as e:
        fs[t].result()
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    create(
        broker,
        acl(
            ResourceType.TOPIC, "ct-", "User:alice", AclOperation.CREATE, pattern=ResourcePatternType.PREFIXED
        ),
    )
    admin(broker, "alice").create_topics([admin_mod.NewTopic(t, 1, 1)], request_timeout=10)[t].result()
    fs = admin(broker, "alice").delete_topics([t], request_timeout=10)
    with pytest.raises(KafkaException) as e:
        fs[t].result()
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    create(broker, acl(ResourceType.TOPIC, t, "User:alice", AclOperation.DELETE))
    admin(broker, "alice").delete_topics([t], request_timeout=10)[t].result()


def test_acls_survive_restart(tmp_path: Path) -> None:
    b = _start(tmp_path / "data")
    try:
        binding = acl(ResourceType.TOPIC, "kept", "User:alice", AclOperation.READ)
        create(b, binding)
        b.stop()
        b.start()
        flt = AclBindingFilter(
            ResourceType.TOPIC,
            "kept",
            ResourcePatternType.LITERAL,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        assert admin(b).describe_acls(flt, request_timeout=10).result() == [binding]
    finally:
        assert b.stop() == 0, b.log()


def test_no_authorizer_answers_security_disabled(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data").start()
    try:
        binding = acl(ResourceType.TOPIC, "t", "User:alice", AclOperation.READ)
        with pytest.raises(KafkaException) as e:
            admin(b, None).create_acls([binding], request_timeout=10)[binding].result()
        assert e.value.args[0].code() == KafkaError.SECURITY_DISABLED
    finally:
        assert b.stop() == 0, b.log()


def test_scram_credentials_need_alter_on_cluster(broker: BrokerProcess) -> None:
    up = admin_mod.UserScramCredentialUpsertion(
        "carol", admin_mod.ScramCredentialInfo(admin_mod.ScramMechanism.SCRAM_SHA_256, 4096), b"pw"
    )
    f = admin(broker, "alice").alter_user_scram_credentials([up], request_timeout=10)["carol"]
    with pytest.raises(KafkaException) as e:
        f.result()
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    admin(broker).alter_user_scram_credentials([up], request_timeout=10)["carol"].result()


def test_configs_need_describe_configs_and_alter_configs(broker: BrokerProcess) -> None:
    t = uniq("cfg")
    new_topic(broker, t)
    res = admin_mod.ConfigResource(admin_mod.ResourceType.TOPIC, t)
    f = admin(broker, "bob").describe_configs([res], request_timeout=10)[res]
    with pytest.raises(KafkaException) as e:
        f.result()
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    broker_res = admin_mod.ConfigResource(admin_mod.ResourceType.BROKER, "1")
    f = admin(broker, "bob").describe_configs([broker_res], request_timeout=10)[broker_res]
    with pytest.raises(KafkaException) as e:
        f.result()
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    create(broker, acl(ResourceType.TOPIC, t, "User:bob", AclOperation.ALTER_CONFIGS))
    assert "retention.ms" in admin(broker, "bob").describe_configs([res], request_timeout=10)[res].result()
    alter = admin_mod.ConfigResource(
        admin_mod.ResourceType.TOPIC,
        t,
        incremental_configs=[
            admin_mod.ConfigEntry(
                "retention.ms", "1000", incremental_operation=admin_mod.AlterConfigOpType.SET
            )
        ],
    )
    admin(broker, "bob").incremental_alter_configs([alter], request_timeout=10)[alter].result()


def test_transactional_producer_needs_transactional_id_write(broker: BrokerProcess) -> None:
    t, txn = uniq("txn"), uniq("tid")
    new_topic(broker, t)
    create(broker, acl(ResourceType.TOPIC, t, "User:alice", AclOperation.WRITE))
    p = ck.Producer(conf(broker, "alice") | {"transactional.id": txn})
    with pytest.raises(KafkaException) as e:
        p.init_transactions(15)
    assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    create(broker, acl(ResourceType.TRANSACTIONAL_ID, txn, "User:alice", AclOperation.WRITE))
    p = ck.Producer(conf(broker, "alice") | {"transactional.id": txn})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(t, b"in-txn")
    p.commit_transaction(15)


def test_auto_create_needs_create(broker: BrokerProcess) -> None:
    t = uniq("auto")
    create(broker, acl(ResourceType.TOPIC, t, "User:alice", AclOperation.WRITE))
    err = produce_error(broker, "alice", t, **{"allow.auto.create.topics": True})
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    assert t not in admin(broker).list_topics(timeout=10).topics
    create(broker, acl(ResourceType.TOPIC, t, "User:alice", AclOperation.CREATE))
    assert produce_error(broker, "alice", t, **{"allow.auto.create.topics": True}) is None
    assert t in admin(broker).list_topics(timeout=10).topics


def test_list_groups_shows_only_describable_groups(broker: BrokerProcess) -> None:
    t, g1, g2 = uniq("lg"), uniq("lg-mine"), uniq("lg-other")
    new_topic(broker, t)
    assert produce_error(broker, "admin", t) is None
    for g in (g1, g2):
        assert consume(broker, "admin", t, g)[0] == [b"v"]
    create(broker, acl(ResourceType.GROUP, g1, "User:bob", AclOperation.DESCRIBE))
    groups = admin(broker, "bob").list_consumer_groups(request_timeout=10).result().valid
    listed = {g.group_id for g in groups}
    assert g1 in listed and g2 not in listed
    described = (
        admin(broker, "bob").describe_consumer_groups([g1], include_authorized_operations=True)[g1].result()
    )
    assert set(described.authorized_operations) == {AclOperation.DESCRIBE}
    f = admin(broker, "bob").describe_consumer_groups([g2], request_timeout=10)[g2]
    with pytest.raises(KafkaException) as e:
        f.result()
    assert e.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    everything = {g.group_id for g in admin(broker).list_consumer_groups(request_timeout=10).result().valid}
    assert {g1, g2} <= everything


# ------------------------------------------------------------------------------------- CLI
def strom_acls(
    b: BrokerProcess, tmp_path: Path, *args: str, user: str = "admin"
) -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / f"{user}.properties"
    cfg.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{user}-secret";\n'
    )
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "strom",
            "acls",
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


def test_cli_add_list_remove(broker: BrokerProcess, tmp_path: Path) -> None:
    t = uniq("cli")
    r = strom_acls(
        broker,
        tmp_path,
        "--add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--operation",
        "Describe",
        "--topic",
        t,
    )
    assert r.returncode == 0, r.stderr
    pattern = f"ResourcePattern(resourceType=TOPIC, name={t}, patternType=LITERAL)"
    read = "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"
    describe = "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)"
    assert r.stdout.startswith(f"Adding ACLs for resource `{pattern}`: \n \t{read}\n\t{describe} \n\n"), (
        r.stdout
    )
    assert f"Current ACLs for resource `{pattern}`: \n" in r.stdout
    r = strom_acls(broker, tmp_path, "--list", "--topic", t)
    assert r.returncode == 0 and read in r.stdout and describe in r.stdout, r.stdout
    r = strom_acls(
        broker, tmp_path, "--add", "--producer", "--idempotent", "--deny-principal", "User:bob", "--topic", t
    )
    assert r.returncode == 0, r.stderr
    assert "operation=IDEMPOTENT_WRITE, permissionType=DENY" in r.stdout
    r = strom_acls(broker, tmp_path, "--list", "--principal", "User:bob")
    assert r.stdout.startswith("ACLs for principal `User:bob`"), r.stdout
    assert "User:alice" not in r.stdout
    r = strom_acls(
        broker,
        tmp_path,
        "--remove",
        "--force",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--topic",
        t,
    )
    assert r.returncode == 0, r.stderr
    assert read not in r.stdout and describe in r.stdout, r.stdout
    r = strom_acls(broker, tmp_path, "--remove", "--topic", t, user="admin")  # asks; stdin empty: no
    assert r.returncode == 0 and "Are you sure you want to delete all ACLs" in r.stdout
    r = strom_acls(broker, tmp_path, "--list", "--topic", t)
    assert describe in r.stdout


def test_cli_errors(broker: BrokerProcess, tmp_path: Path) -> None:
    r = strom_acls(broker, tmp_path, "--add", "--topic", "x")
    assert r.returncode == 2 and "You must specify one of: --allow-principal, --deny-principal" in r.stderr
    r = strom_acls(broker, tmp_path, "--add", "--allow-principal", "alice", "--topic", "x")
    assert r.returncode == 2 and "Could not parse principal" in r.stderr
    r = strom_acls(
        broker, tmp_path, "--add", "--allow-principal", "User:a", "--operation", "Read", "--cluster"
    )
    assert r.returncode == 2 and "ResourceType CLUSTER only supports operations" in r.stderr
    r = strom_acls(broker, tmp_path, "--list", "--add")
    assert r.returncode == 2 and "exactly one action" in r.stderr
    r = strom_acls(broker, tmp_path, "--add", "--allow-principal", "User:a", "--topic", "x", user="alice")
    assert r.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr, r.stderr


# ---------------------------------------------------------------------- mutual TLS principals
def test_mutual_tls_principal_mapped_by_rules(tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA(organization_name="strom test CA")
    ca_pem, server_pem = tmp_path / "ca.pem", tmp_path / "server.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(server_pem))
    client = ca.issue_cert(
        "alice@strom.test", common_name="Alice", organization_name="strom", organization_unit_name="eng"
    )
    cert, key = tmp_path / "client-cert.pem", tmp_path / "client-key.pem"
    client.cert_chain_pems[0].write_to_path(str(cert))
    client.private_key_pem.write_to_path(str(key))
    b = BrokerProcess(
        tmp_path / "data",
        listeners={"PLAINTEXT": "PLAINTEXT", "MTLS": "SSL"},
        overrides=[
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:ANONYMOUS",  # the PLAINTEXT listener administers
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={server_pem}",
            "listener.name.mtls.ssl.client.auth=required",
            "listener.name.mtls.ssl.truststore.type=PEM",
            f"listener.name.mtls.ssl.truststore.location={ca_pem}",
            r"ssl.principal.mapping.rules=RULE:^CN=([^,]*),OU=eng,.*$/$1/L,DEFAULT",
        ],
    ).start()
    try:
        a = admin_mod.AdminClient({"bootstrap.servers": b.bootstrap_for("PLAINTEXT")})
        ok_topic, other = uniq("mtls"), uniq("mtls-no")
        for t in (ok_topic, other):
            a.create_topics([admin_mod.NewTopic(t, 1, 1)], request_timeout=15)[t].result()
        b_ = AclBinding(
            ResourceType.TOPIC,
            ok_topic,
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            AclOperation.WRITE,
            AclPermissionType.ALLOW,
        )
        a.create_acls([b_], request_timeout=15)[b_].result()
        tls = {
            "bootstrap.servers": b.bootstrap_for("MTLS"),
            "security.protocol": "SSL",
            "ssl.ca.location": str(ca_pem),
            "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key),
            "message.timeout.ms": 8000,
            "allow.auto.create.topics": False,
        }
        results: dict[str, Any] = {}
        p = ck.Producer(tls)
        for t in (ok_topic, other):
            p.produce(t, b"v", on_delivery=lambda err, msg: results.__setitem__(msg.topic(), err))
        p.flush(15)
        assert results[ok_topic] is None, results
        assert results[other] is not None and results[other].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        assert b.stop() == 0, b.log()


def test_authorized_operations(broker: BrokerProcess) -> None:
    t = uniq("ops")
    new_topic(broker, t)
    create(broker, acl(ResourceType.TOPIC, t, "User:alice", AclOperation.READ))
    coll = ck.TopicCollection([t])
    desc = admin(broker, "alice").describe_topics(
        coll, include_authorized_operations=True, request_timeout=10
    )
    ops = set(desc[t].result().authorized_operations)
    assert ops == {AclOperation.READ, AclOperation.DESCRIBE}, ops  # READ implies DESCRIBE
    desc = admin(broker).describe_topics(coll, include_authorized_operations=True, request_timeout=10)
    assert AclOperation.ALTER_CONFIGS in set(desc[t].result().authorized_operations)  # super user
    cluster = admin(broker, "alice").describe_cluster(include_authorized_operations=True, request_timeout=10)
    assert not cluster.result().authorized_operations


# ---------------------------------------------------------------------------------- quotas
async def _raw(b: BrokerProcess, user: str, api_key: int, body: dict[str, Any]) -> Any:
    sec = SecurityConfig(
        protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username=user, sasl_password=f"{user}-secret"
    )
    async with Client(b.bootstrap_for("SASL_PLAINTEXT"), security=sec) as c:
        conn = await c.any_connection()
        return await conn.request(api_key, body)


def _alter_quotas(b: BrokerProcess, user: str, entries: list[Any], validate_only: bool = False) -> Any:
    return asyncio.run(_raw(b, user, 49, {"entries": entries, "validate_only": validate_only}))


def _describe_quotas(b: BrokerProcess, user: str, components: list[Any], strict: bool = False) -> Any:
    return asyncio.run(_raw(b, user, 48, {"components": components, "strict": strict}))


def _entry(entity: list[tuple[str, str | None]], ops: list[tuple[str, float, bool]]) -> dict[str, Any]:
    return {
        "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
        "ops": [{"key": k, "value": v, "remove": r} for k, v, r in ops],
    }


def test_client_quotas_alter_describe(broker: BrokerProcess) -> None:
    u = uniq("qu")
    r = _alter_quotas(
        broker,
        "admin",
        [
            _entry(
                [("user", u)], [("producer_byte_rate", 1048576.0, False), ("request_percentage", 50.5, False)]
            ),
            _entry([("user", u), ("client-id", None)], [("consumer_byte_rate", 2048.0, False)]),
            _entry([("client-id", "app")], [("producer_byte_rate", 1.5, False)]),  # not a whole number
            _entry([("ip", "127.0.0.1"), ("user", u)], [("connection_creation_rate", 5.0, False)]),
            _entry([("user", u)], [("no_such_quota", 1.0, False)]),
            _entry([], [("producer_byte_rate", 1.0, False)]),
        ],
    )
    codes = [(int(e.error_code), e.error_message) for e in r.entries]
    assert codes[0] == (0, None) and codes[1] == (0, None), codes
    assert codes[2] == (42, "Configuration producer_byte_rate must be a Long value")
    assert codes[3][0] == 42 and "IP entity should not be combined" in codes[3][1]
    assert codes[4] == (42, "Invalid configuration key no_such_quota")
    assert codes[5] == (42, "Invalid empty client quota entity")
    d = _describe_quotas(broker, "admin", [{"entity_type": "user", "match_type": 0, "match": u}])
    got = {
        tuple((e.entity_type, e.entity_name) for e in x.entity): {v.key: v.value for v in x.values}
        for x in d.entries
    }
    assert got == {
        (("user", u),): {"producer_byte_rate": 1048576.0, "request_percentage": 50.5},
        (("client-id", None), ("user", u)): {"consumer_byte_rate": 2048.0},
    }
    strict = _describe_quotas(
        broker, "admin", [{"entity_type": "user", "match_type": 0, "match": u}], strict=True
    )
    assert len(strict.entries) == 1
    default_client = _describe_quotas(
        broker,
        "admin",
        [
            {"entity_type": "user", "match_type": 2, "match": None},
            {"entity_type": "client-id", "match_type": 1, "match": None},
        ],
    )
    assert any(
        ("user", u) in [(e.entity_type, e.entity_name) for e in x.entity] for x in default_client.entries
    )
    # removal
    r = _alter_quotas(broker, "admin", [_entry([("user", u)], [("request_percentage", 0.0, True)])])
    assert int(r.entries[0].error_code) == 0
    d = _describe_quotas(broker, "admin", [{"entity_type": "user", "match_type": 0, "match": u}], strict=True)
    assert {v.key for v in d.entries[0].values} == {"producer_byte_rate"}
    # authorization: ALTER_CONFIGS / DESCRIBE_CONFIGS on the cluster
    r = _alter_quotas(broker, "alice", [_entry([("user", "x")], [("producer_byte_rate", 1.0, False)])])
    assert int(r.entries[0].error_code) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    d = _describe_quotas(broker, "alice", [])
    assert int(d.error_code) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    d = _describe_quotas(broker, "admin", [{"entity_type": "user", "match_type": 0, "match": None}])
    assert int(d.error_code) == KafkaError.INVALID_REQUEST


@pytest.mark.slow  # (~20 s: it measures; the rules are unit-tested in test_client_quotas.py)
def test_produce_and_fetch_quotas_throttle(tmp_path: Path) -> None:
    """alice is limited to 200 KB/s both ways (sample windows 2 x 1 s), bob is not: writing 1 MB
    takes alice about 4 s and reports throttle times; bob keeps full speed on the same broker."""
    b = BrokerProcess(
        tmp_path / "data",
        overrides=[OVERRIDES[0], "quota.window.num=2", "quota.window.size.seconds=1"],
        listeners=LISTENERS,
    ).start()
    try:
        rate = 200_000.0
        r = _alter_quotas(
            b,
            "admin",
            [
                _entry(
                    [("user", "alice")],
                    [("producer_byte_rate", rate, False), ("consumer_byte_rate", rate, False)],
                )
            ],
        )
        assert int(r.entries[0].error_code) == 0
        topic = "quota-t"
        admin(b).create_topics([admin_mod.NewTopic(topic, 1, 1)], request_timeout=15)[topic].result()

        def produce(user: str) -> tuple[float, list[Any]]:
            throttles: list[Any] = []
            p = ck.Producer(
                conf(b, user) | {"throttle_cb": throttles.append, "linger.ms": 5, "batch.size": 20_000}
            )
            value = b"x" * 10_000
            t0 = time.monotonic()
            for _ in range(100):  # 1 MB
                p.produce(topic, value)
                p.poll(0)
            assert p.flush(60) == 0
            elapsed = time.monotonic() - t0
            p.poll(0.5)
            return elapsed, throttles

        fast, _ = produce("bob")
        slow, throttles = produce("alice")
        assert slow >= 3.0, slow  # ~(1 MB - 200 KB allowed at once) / 200 KB/s
        assert fast < slow / 2, (fast, slow)
        assert throttles and max(t.throttle_time for t in throttles) > 0

        def consume(user: str) -> float:
            c = ck.Consumer(conf(b, user) | {"group.id": f"q-{user}", "max.partition.fetch.bytes": 100_000})
            c.assign([ck.TopicPartition(topic, 0, 0)])
            got, t0 = 0, time.monotonic()
            while got < 1_000_000 and time.monotonic() - t0 < 60:
                for m in c.consume(100, 0.5):
                    if m.error() is None:
                        got += len(m.value())
            c.close()
            assert got >= 1_000_000
            return time.monotonic() - t0

        fast_c, slow_c = consume("bob"), consume("alice")
        print(
            f"1 MB at a 200 KB/s quota: produce {slow:.1f} s (unlimited user {fast:.2f} s), "
            f"consume {slow_c:.1f} s (unlimited {fast_c:.2f} s)"
        )
        assert slow_c >= 3.0 and fast_c < slow_c / 2, (fast_c, slow_c)
    finally:
        assert b.stop() == 0, b.log()


def test_kafka_python_sees_kafkas_errors(broker: BrokerProcess) -> None:
    kafka = pytest.importorskip("kafka")
    from kafka.errors import TopicAuthorizationFailedError

    t = uniq("kp")
    new_topic(broker, t)
    common = {
        "bootstrap_servers": broker.bootstrap_for("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
    }
    p = kafka.KafkaProducer(
        **common, sasl_plain_username="bob", sasl_plain_password="bob-secret", max_block_ms=10_000, retries=0
    )
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            p.send(t, b"v").get(timeout=15)
    finally:
        p.close(timeout=5)
    create(broker, acl(ResourceType.TOPIC, t, "User:bob", AclOperation.WRITE))
    p = kafka.KafkaProducer(
        **common, sasl_plain_username="bob", sasl_plain_password="bob-secret", max_block_ms=10_000
    )
    try:
        assert p.send(t, b"v").get(timeout=15).offset == 0
    finally:
        p.close(timeout=5)


def test_cli_configs_quotas(broker: BrokerProcess, tmp_path: Path) -> None:
    cfg = tmp_path / "admin.properties"
    cfg.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret";\n'
    )
    user = uniq("cq")

    def configs(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "strom",
                "configs",
                "--bootstrap-server",
                broker.bootstrap_for("SASL_PLAINTEXT"),
                "--command-config",
                str(cfg),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=os.environ | {"PYTHONPATH": str(SRC)},
        )

    r = configs(
        "alter",
        "--entity-type",
        "users",
        "--entity-name",
        user,
        "--add-config",
        "producer_byte_rate=1048576,consumer_byte_rate=2097152",
    )
    assert r.returncode == 0 and r.stdout.strip() == f"Completed updating config for user {user}.", r
    r = configs(
        "alter", "--entity-type", "clients", "--entity-default", "--add-config", "producer_byte_rate=4096"
    )
    assert r.returncode == 0, r.stderr
    r = configs("describe", "--entity-type", "users", "--entity-name", user)
    assert r.returncode == 0, r.stderr
    quotas = "consumer_byte_rate=2097152.0,producer_byte_rate=1048576.0"
    assert f"Quota configs for user-principal '{user}' are {quotas}" in r.stdout, r.stdout
    r = configs("describe", "--entity-type", "clients", "--entity-default")
    assert "Quota configs for the default client-id are producer_byte_rate=4096.0" in r.stdout, r
    r = configs(
        "alter", "--entity-type", "users", "--entity-name", user, "--delete-config", "consumer_byte_rate"
    )
    assert r.returncode == 0, r.stderr
    r = configs("describe", "--entity-type", "users", "--entity-name", user)
    assert "are producer_byte_rate=1048576.0\n" in r.stdout, r.stdout
    r = configs(
        "alter", "--entity-type", "clients", "--entity-name", "x", "--add-config", "producer_byte_rate=abc"
    )
    assert r.returncode == 2 and "must be a number" in r.stderr
    r = configs(
        "alter", "--entity-type", "clients", "--entity-name", "x", "--add-config", "producer_byte_rate=1.5"
    )
    assert r.returncode == 1 and "must be a Long value" in r.stderr, r.stderr


# ------------------------------------------------------------------------------------ Java
JAVA_SOURCE = r"""
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.acl.*;
import org.apache.kafka.common.resource.*;

public class AclsJava {
    static Properties props(String bootstrap, String user) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", "PLAIN");
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"" + user + "\" password=\"" + user + "-secret\";");
        return p;
    }
    static String send(String bootstrap, String topic) {
        Properties p = props(bootstrap, "alice");
        p.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        p.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        p.put("max.block.ms", "10000");
        p.put("delivery.timeout.ms", "15000");
        p.put("request.timeout.ms", "10000");
        try (KafkaProducer<String, String> prod = new KafkaProducer<>(p)) {
            prod.send(new ProducerRecord<>(topic, "v")).get();
            return "ok";
        } catch (Exception e) {
            return e.getCause() == null ? e.getClass().getSimpleName() : e.getCause().getClass().getSimpleName();
        }
    }
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1];
        try (Admin admin = Admin.create(props(bootstrap, "admin"))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            System.out.println("BEFORE " + send(bootstrap, topic));
            AclBinding b = new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic.substring(0, 6), PatternType.PREFIXED),
                new AccessControlEntry("User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW));
            admin.createAcls(List.of(b)).all().get();
            AclBindingFilter match = new AclBindingFilter(new ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.MATCH), AccessControlEntryFilter.ANY);
            for (AclBinding x : admin.describeAcls(match).values().get()) System.out.println("ACL " + x);
            System.out.println("AFTER " + send(bootstrap, topic));
            try {
                admin.createAcls(List.of(new AclBinding(new ResourcePattern(ResourceType.CLUSTER, "not-kafka-cluster", PatternType.LITERAL),
                    new AccessControlEntry("User:alice", "*", AclOperation.ALTER, AclPermissionType.ALLOW)))).all().get();
                System.out.println("BAD ok?!");
            } catch (Exception e) { System.out.println("BAD " + e.getCause().getClass().getSimpleName()); }
            Collection<AclBinding> gone = admin.deleteAcls(List.of(match)).all().get();
            System.out.println("DELETED " + gone.size());
            System.out.println("REMOVED " + send(bootstrap, topic));
        }
        try (Admin alice = Admin.create(props(bootstrap, "alice"))) {
            alice.describeAcls(AclBindingFilter.ANY).values().get();
            System.out.println("DESCRIBE ok?!");
        } catch (Exception e) { System.out.println("DESCRIBE " + e.getCause().getClass().getSimpleName()); }
    }
}
"""


def test_java_admin_and_producer(broker: BrokerProcess, tmp_path: Path) -> None:
    if shutil.which("java") is None or not JAVA_LIBS.is_dir():
        pytest.skip("no JDK or Kafka client jars")
    src = tmp_path / "AclsJava.java"
    src.write_text(JAVA_SOURCE)
    topic = uniq("javacl")
    r = subprocess.run(
        ["java", "-cp", f"{JAVA_LIBS}/*", str(src), broker.bootstrap_for("SASL_PLAINTEXT"), topic],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "BEFORE TopicAuthorizationException" in out, out
    assert (
        f"ACL (pattern=ResourcePattern(resourceType=TOPIC, name={topic[:6]}, patternType=PREFIXED), "
        "entry=(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW))"
    ) in out, out
    assert "AFTER ok" in out, out
    assert "BAD InvalidRequestException" in out, out
    assert "DELETED 1" in out and "REMOVED TopicAuthorizationException" in out, out
    assert "DESCRIBE ClusterAuthorizationException" in out, out


# ------------------------------------------------------------------- re-authentication (KIP-368)
def test_reauthentication(tmp_path: Path) -> None:
    b = BrokerProcess(
        tmp_path / "data", overrides=[OVERRIDES[0], "connections.max.reauth.ms=6000"], listeners=LISTENERS
    ).start()
    try:
        # librdkafka re-authenticates before the session ends (at 90% of it, after the answer
        # arrived): a producer keeps working through two sessions. (With a 1.5 s session the
        # client had 150 ms to re-authenticate behind an in-flight produce, which a loaded
        # machine did not always give it; 6 s leaves 600 ms.)
        p = ck.Producer(conf(b, "alice"))
        results: list[Any] = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 14:
            p.produce("reauth-t", b"v", on_delivery=lambda err, msg: results.append(err))
            p.poll(0.2)
        p.flush(15)
        assert results and all(e is None for e in results), results[:3]
        assert "SASL session expired" not in b.log()

        # a client that does not re-authenticate loses its connection after the session
        async def stale() -> str:
            sec = SecurityConfig(
                protocol="SASL_PLAINTEXT",
                sasl_mechanism="PLAIN",
                sasl_username="bob",
                sasl_password="bob-secret",
            )
            async with Client(b.bootstrap_for("SASL_PLAINTEXT"), security=sec) as c:
                conn = await c.any_connection()
                await conn.request(3, {"topics": [], "allow_auto_topic_creation": False})
                await asyncio.sleep(7.0)
                try:
                    await conn.request(3, {"topics": [], "allow_auto_topic_creation": False})
                except Exception as e:
                    return type(e).__name__
                return "answered"

        assert asyncio.run(stale()) != "answered"
        assert "SASL session expired" in b.log()
    finally:
        assert b.stop() == 0, b.log()
