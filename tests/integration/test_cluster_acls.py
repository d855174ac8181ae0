"""ACLs on a three-node cluster of real ``strom serve`` processes: created through one node
(CreateAcls forwarded to the active controller), the same on every node (DescribeAcls answered
from each node's metadata image), enforced by every node for a SASL/PLAIN user, and removed
through another node. The nodes reach each other over PLAINTEXT as User:ANONYMOUS, which is a
super user, as Kafka requires of the brokers' principal.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.cli.dev_cluster import HOST
from strom.security import authorizer as authz
from strom.testing.cluster_process import ClusterProcess

pytestmark = pytest.mark.integration

ck = pytest.importorskip("confluent_kafka")
admin_mod = pytest.importorskip("confluent_kafka.admin")
from confluent_kafka import KafkaError  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="alice" password="alice-secret" user_alice="alice-secret";'
)


def _configure(c: ClusterProcess) -> dict[int, int]:
    """A SASL_PLAINTEXT listener with PLAIN user alice and the authorizer on every node; the SASL
    port by node id."""
    return c.add_sasl_listener(
        "sasl.enabled.mechanisms=PLAIN\n"
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}\n"
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
        "super.users=User:ANONYMOUS\n"
    )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ClusterProcess, dict[int, int]]]:
    c = ClusterProcess(tmp_path / "cluster", 3)
    ports = _configure(c)
    try:
        c.start()
        c.wait_ready()
        yield c, ports
    finally:
        c.close()


ALL = AclBindingFilter(
    ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
)


def _eventually(what: str, check: Any, timeout: float = 60) -> None:
    """(A node applies the committed change when its log gets it; a request that fails on a
    loaded machine is asked again.)"""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            if check():
                return
        except Exception as e:  # e.g. a request timed out
            last = e
        assert time.monotonic() < deadline, f"timed out waiting for {what} (last error {last})"
        time.sleep(0.3)


DESCRIBE_ACLS = 29


def _acl_count(c: ClusterProcess, node: int) -> int:
    """How many ACL bindings ``node`` itself answers DescribeAcls with (any resource, principal,
    operation). Sent to that node alone: an AdminClient routes DescribeAcls to whichever broker it
    likes, so it cannot tell whether one particular node has applied a change."""
    resp = c.request(
        node,
        DESCRIBE_ACLS,
        {
            "resource_type_filter": authz.ResourceType.ANY,
            "resource_name_filter": None,
            "pattern_type_filter": authz.PatternType.ANY,
            "principal_filter": None,
            "host_filter": None,
            "operation": authz.AclOperation.ANY,
            "permission_type": authz.AclPermissionType.ANY,
        },
        timeout=10,
    )
    assert resp.error_code == 0, resp
    return sum(len(r.acls) for r in resp.resources)


def test_acls_replicated_and_enforced_on_every_node(cluster: tuple[ClusterProcess, dict[int, int]]) -> None:
    c, ports = cluster
    admins = {i: admin_mod.AdminClient({"bootstrap.servers": c.node_bootstrap(i)}) for i in c.node_ids}
    topic = f"cacl-{uuid.uuid4().hex[:8]}"
    admins[1].create_topics([admin_mod.NewTopic(topic, 3, 3)], request_timeout=30)[topic].result()
    binding = AclBinding(
        ResourceType.TOPIC,
        "cacl-",
        ResourcePatternType.PREFIXED,
        "User:alice",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    admins[1].create_acls([binding], request_timeout=30)[binding].result()
    for i in c.node_ids:
        _eventually(
            f"the ACL on node {i}",
            lambda i=i: binding in admins[i].describe_acls(ALL, request_timeout=10).result(),
        )
        _eventually(f"node {i} itself answering the ACL", lambda i=i: _acl_count(c, i) == 1)

    def produce(node: int) -> Any:
        results: list[Any] = []
        p = ck.Producer(
            {
                "bootstrap.servers": f"{HOST}:{ports[node]}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "PLAIN",
                "sasl.username": "alice",
                "sasl.password": "alice-secret",
                "message.timeout.ms": 30000,
            }
        )
        for part in range(3):
            p.produce(topic, b"v", partition=part, on_delivery=lambda err, msg: results.append(err))
        p.flush(40)
        return results

    for node in c.node_ids:  # every partition leader (one per node, usually) authorizes alice
        errors = produce(node)
        assert errors == [None, None, None], (node, [str(e) for e in errors])
    # removed through node 2: every node refuses alice
    admins[2].delete_acls([ALL], request_timeout=30)[ALL].result()
    for i in c.node_ids:
        _eventually(
            f"no ACL on node {i}", lambda i=i: admins[i].describe_acls(ALL, request_timeout=10).result() == []
        )
        _eventually(f"node {i} itself answering no ACL", lambda i=i: _acl_count(c, i) == 0)
    errors = produce(3)
    assert errors and all(e is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors)
