"""The controller's ACLs (Kafka's AclControlManager): CreateAcls checks and records, duplicate
bindings, DeleteAcls filters (one removal per ACL), replay and snapshot records."""

from __future__ import annotations

import random
from types import SimpleNamespace as NS

from strom.controller.acl_control import AclControlManager
from strom.controller.quorum_controller import QuorumController
from strom.metadata.records import AccessControlEntryRecord, RemoveAccessControlEntryRecord
from strom.security.authorizer import AclBinding

TOPIC, GROUP, CLUSTER, ANY_RT = 2, 3, 4, 1
LIT, PRE, MATCH, ANY_PT = 3, 4, 2, 1
READ, WRITE, ALL, ANY_OP = 3, 4, 2, 1
ALLOW, DENY, ANY_PERM = 3, 2, 1


def creation(rt=TOPIC, name="t", pt=LIT, principal="User:alice", host="*", op=READ, perm=ALLOW):
    return NS(
        resource_type=rt,
        resource_name=name,
        resource_pattern_type=pt,
        principal=principal,
        host=host,
        operation=op,
        permission_type=perm,
    )


def flt(rt=ANY_RT, name=None, pt=ANY_PT, principal=None, host=None, op=ANY_OP, perm=ANY_PERM):
    return NS(
        resource_type_filter=rt,
        resource_name_filter=name,
        pattern_type_filter=pt,
        principal_filter=principal,
        host_filter=host,
        operation=op,
        permission_type=perm,
    )


def apply(m, records):
    for r in records:
        m.replay(r)


def test_create_checks_and_records():
    m = AclControlManager(random.Random(1))
    records, resp = m.create_acls(
        NS(
            creations=[
                creation(),
                creation(),  # the same binding twice: one record, both succeed
                creation(rt=CLUSTER, name="other", op=ALL),
                creation(name=""),
                creation(pt=MATCH),
                creation(op=ANY_OP),
                creation(perm=ANY_PERM),
                creation(principal="alice"),
                creation(rt=0),
                creation(rt=CLUSTER, name="kafka-cluster", op=ALL),
            ]
        )
    )
    errs = [(r["error_code"], r["error_message"]) for r in resp["results"]]
    assert errs[0] == errs[1] == (0, None)
    assert errs[2] == (42, "The only valid name for the CLUSTER resource is kafka-cluster")
    assert errs[3] == (42, "Invalid empty resource name")
    assert errs[4] == (42, "Invalid patternType MATCH")
    assert errs[5] == (42, "Invalid operation ANY")
    assert errs[6] == (42, "Invalid permissionType ANY")
    assert errs[7][0] == 42 and "no colon" in errs[7][1]
    assert errs[8] == (42, "Invalid ACL creation")
    assert errs[9] == (0, None)
    assert len(records) == 2 and all(isinstance(r, AccessControlEntryRecord) for r in records)
    assert len({r.id for r in records}) == 2
    apply(m, records)
    # an existing binding: success, no record
    again, resp = m.create_acls(NS(creations=[creation()]))
    assert again == [] and resp["results"][0]["error_code"] == 0


def test_delete_filters():
    m = AclControlManager(random.Random(2))
    records, _ = m.create_acls(
        NS(
            creations=[
                creation(name="orders"),
                creation(name="ord", pt=PRE, op=WRITE),
                creation(name="*", principal="User:bob"),
                creation(rt=GROUP, name="g"),
            ]
        )
    )
    apply(m, records)
    removals, resp = m.delete_acls(
        NS(filters=[flt(rt=TOPIC, name="orders", pt=MATCH), flt(principal="User:alice"), flt(op=0)])
    )
    r0, r1, r2 = resp["filter_results"]
    assert sorted(a["resource_name"] for a in r0["matching_acls"]) == ["*", "ord", "orders"]
    assert sorted(a["resource_name"] for a in r1["matching_acls"]) == ["g", "ord", "orders"]
    assert r2["error_code"] == 42 and r2["matching_acls"] == []
    # each ACL removed once although two filters matched it
    assert len(removals) == 4 and len({r.id for r in removals}) == 4
    assert all(isinstance(r, RemoveAccessControlEntryRecord) for r in removals)
    apply(m, removals)
    assert m.acls == {}


def test_quorum_controller_replays_and_snapshots_acls_and_quotas():
    qc = QuorumController(rnd=random.Random(3))
    result = qc.handle(30, NS(creations=[creation(), creation(rt=GROUP, name="g", op=ALL, perm=DENY)]))
    for r in result.records:
        qc.replay(r)
    assert {b for b in qc.acls.acls.values()} == {
        AclBinding(TOPIC, "t", LIT, "User:alice", "*", READ, ALLOW),
        AclBinding(GROUP, "g", LIT, "User:alice", "*", ALL, DENY),
    }
    snap = [r for r in qc.snapshot_records() if isinstance(r, AccessControlEntryRecord)]
    fresh = QuorumController(rnd=random.Random(4))
    for r in qc.snapshot_records():
        fresh.replay(r)
    assert fresh.acls.acls == qc.acls.acls and len(snap) == 2
    quota = NS(
        entries=[
            NS(
                entity=[NS(entity_type="user", entity_name="alice")],
                ops=[NS(key="producer_byte_rate", value=1024.0, remove=False)],
            )
        ],
        validate_only=False,
    )
    result = qc.handle(49, quota)
    for r in result.records:
        qc.replay(r)
    fresh = QuorumController(rnd=random.Random(5))
    for r in qc.snapshot_records():
        fresh.replay(r)
    assert fresh.quotas.entities == {(("user", "alice"),): {"producer_byte_rate": 1024.0}}
