"""SCRAM credentials in the metadata log (KIP-554 on KRaft), with real processes and real clients.

* Three real ``strom serve`` nodes (:class:`~strom.testing.cluster_process.ClusterProcess`), each
  with a SASL_PLAINTEXT listener besides PLAINTEXT and CONTROLLER: a user created through node 1
  (AlterUserScramCredentials forwarded to the active controller) logs in with SCRAM-SHA-256 at
  every node, with confluent-kafka and kafka-python; deleted through node 2, its login fails at
  every node.
* One node: a data dir written on the registry path (credentials in the local store) starts on the
  metadata quorum with its users migrated; logins still work, and after a restart too.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.cli.dev_cluster import HOST
from strom.testing.broker_process import BrokerProcess
from strom.testing.cluster_process import ClusterProcess

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_mod = pytest.importorskip("confluent_kafka.admin")


def _add_sasl_listener(c: ClusterProcess) -> dict[int, int]:
    return c.add_sasl_listener("sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512\n")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ClusterProcess, dict[int, int]]]:
    c = ClusterProcess(tmp_path / "cluster", 3)
    ports = _add_sasl_listener(c)
    try:
        c.start()  # (the planned, formatted dirs are reused)
        c.wait_ready()
        yield c, ports
    finally:
        c.close()


def _set_scram(bootstrap: str, user: str, password: str, mechanism: Any = None) -> None:
    a = admin_mod.AdminClient({"bootstrap.servers": bootstrap})
    mech = mechanism or admin_mod.ScramMechanism.SCRAM_SHA_256
    up = admin_mod.UserScramCredentialUpsertion(
        user, admin_mod.ScramCredentialInfo(mech, 4096), password.encode()
    )
    for fut in a.alter_user_scram_credentials([up]).values():
        fut.result(timeout=30)


def _delete_scram(bootstrap: str, user: str) -> None:
    a = admin_mod.AdminClient({"bootstrap.servers": bootstrap})
    d = admin_mod.UserScramCredentialDeletion(user, admin_mod.ScramMechanism.SCRAM_SHA_256)
    for fut in a.alter_user_scram_credentials([d]).values():
        fut.result(timeout=30)


def _confluent_login(port: int, user: str, password: str) -> bool:
    """Whether a SCRAM-SHA-256 client authenticates at this node (its bootstrap alone): metadata
    answered is a yes, an authentication error reported a no (at once: no timeout to wait)."""
    errors: list[Any] = []
    conf = {
        "bootstrap.servers": f"{HOST}:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": password,
        "error_cb": errors.append,
    }
    p = confluent_kafka.Producer(conf)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        p.poll(0.05)
        if any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors):
            return False
        try:
            if p.list_topics(timeout=0.5).brokers:
                return True
        except confluent_kafka.KafkaException:
            pass
    raise AssertionError(f"neither an answer nor an authentication error at port {port}: {errors}")


def _describes(bootstrap: str, user: str) -> bool:
    """Whether the node at ``bootstrap`` describes ``user``'s SCRAM credential. The AdminClient
    lives in this frame only: a confluent-kafka client has no close(), it stops when it is
    collected, and one left in the test's frame kept retrying the stopped cluster for the rest of
    the test run (that frame outlived the test: see :func:`_kafka_python_login`)."""
    a = admin_mod.AdminClient({"bootstrap.servers": bootstrap})
    return user in a.describe_user_scram_credentials([user])[user].result(timeout=10).user


def _kafka_python_login(port: int, user: str, password: str) -> bool:
    kafka = pytest.importorskip("kafka")
    from kafka.errors import KafkaError as KPError

    try:
        a = kafka.KafkaAdminClient(
            bootstrap_servers=f"{HOST}:{port}",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username=user,
            sasl_plain_password=password,
            request_timeout_ms=5000,
        )
    except KPError as e:
        # kafka-python keeps the exception it raised; its traceback would keep this frame and the
        # caller's (the test's, with its locals) alive after the test
        e.__traceback__ = None
        return False
    try:
        a.list_topics()
        return True
    finally:
        a.close()


def _eventually(what: str, check: Any, timeout: float = 30) -> None:
    """(Another node applies the committed change when its log gets it.)"""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_a_user_created_through_one_node_logs_in_at_every_node(
    cluster: tuple[ClusterProcess, dict[int, int]],
) -> None:
    c, sasl = cluster
    user, password = f"u-{uuid.uuid4().hex[:6]}", "cluster-secret"
    for i in c.node_ids:
        assert not _confluent_login(sasl[i], user, password), f"node {i} knows {user} before it exists"
    _set_scram(c.node_bootstrap(1), user, password)
    assert _confluent_login(sasl[1], user, password)  # answered once applied at node 1
    for i in c.node_ids:
        _eventually(f"{user} logs in at node {i}", lambda i=i: _confluent_login(sasl[i], user, password))
        assert _kafka_python_login(sasl[i], user, password), f"kafka-python at node {i}"
        assert not _confluent_login(sasl[i], user, "wrong"), f"a wrong password passes at node {i}"
    # every node describes the same credential (from its own image)
    for i in c.node_ids:
        _eventually(f"node {i} describes {user}", lambda i=i: _describes(c.node_bootstrap(i), user))

    _delete_scram(c.node_bootstrap(2), user)
    assert not _confluent_login(sasl[2], user, password)
    for i in c.node_ids:
        _eventually(f"{user} refused at node {i}", lambda i=i: not _confluent_login(sasl[i], user, password))
        assert not _kafka_python_login(sasl[i], user, password)


def test_credentials_survive_a_restart_of_every_node(
    cluster: tuple[ClusterProcess, dict[int, int]],
) -> None:
    c, sasl = cluster
    _set_scram(c.node_bootstrap(3), "kept", "kept-secret")
    for i in c.node_ids:
        c.stop(i)
    for i in c.node_ids:
        c.dev.start_node(i)
    c.wait_listening(c.node_ids)
    c.wait_ready()
    for i in c.node_ids:
        _eventually(f"kept logs in at node {i}", lambda i=i: _confluent_login(sasl[i], "kept", "kept-secret"))


# ------------------------------------------------------------------------------ one node
SASL_LISTENERS = {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}


def test_a_registry_path_credential_store_migrates_to_the_quorum(tmp_path: Path) -> None:
    data = tmp_path / "data"
    old = BrokerProcess(data, overrides=["strom.metadata.quorum.enable=false"], listeners=SASL_LISTENERS)
    old.start()
    try:
        _set_scram(old.bootstrap, "olga", "olga-secret")
        _set_scram(old.bootstrap, "olga2", "olga2-secret", admin_mod.ScramMechanism.SCRAM_SHA_512)
        assert _confluent_login(old.ports["SASL_PLAINTEXT"], "olga", "olga-secret")
    finally:
        assert old.stop() == 0, old.log()
    assert (data / "strom-scram-credentials.json").exists()
    assert not (data / "__cluster_metadata-0").exists()

    for _round in range(2):  # the migrated start, then a restart from the metadata log alone
        new = BrokerProcess(
            data, port=old.port, overrides=["strom.metadata.quorum.enable=true"], listeners=SASL_LISTENERS
        )
        new.start()
        try:
            port = new.ports["SASL_PLAINTEXT"]
            assert _confluent_login(port, "olga", "olga-secret"), new.log()
            assert not _confluent_login(port, "olga", "wrong")
            assert _kafka_python_login(port, "olga", "olga-secret")
            a = admin_mod.AdminClient({"bootstrap.servers": new.bootstrap})
            described = a.describe_user_scram_credentials().result(timeout=10)
            assert sorted(described) == ["olga", "olga2", *(["pia"] if _round else [])]
            assert described["olga2"].scram_credential_infos[0].iterations == 4096
            if _round == 0:  # a change on the quorum: in the log, not in the old store
                _set_scram(new.bootstrap, "pia", "pia-secret")
            assert _confluent_login(port, "pia", "pia-secret")
        finally:
            assert new.stop() == 0, new.log()
        # (the users' names: a plain substring test also matched "pia" inside a random salt)
        store = json.loads((data / "strom-scram-credentials.json").read_text())
        assert "pia" not in store["users"] and sorted(store["users"]) == ["olga", "olga2"]
    assert (data / "__cluster_metadata-0").is_dir()
