"""The sans-IO authorizer: Kafka's StandardAuthorizer decisions and AclBindingFilter matching."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.security.authorizer import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAuthorizer,
    normalize_host,
    parse_principal,
    parse_super_users,
)

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE, BOB = "User:alice", "User:bob"
HOST = "127.0.0.1"


def acl(rt=T, name="orders", pt=LIT, principal=ALICE, host="*", op=Op.READ, perm=ALLOW) -> AclBinding:
    return AclBinding(int(rt), name, int(pt), principal, host, int(op), int(perm))


def authz(*acls: AclBinding, supers=(), allow_if_none=False) -> StandardAuthorizer:
    a = StandardAuthorizer(supers, allow_if_none)
    a.load({i: b for i, b in enumerate(acls)})
    return a


def ok(a: StandardAuthorizer, op, name="orders", rt=T, principal=ALICE, host=HOST) -> bool:
    return a.authorize(principal, host, int(op), int(rt), name)


def test_no_acls_denies_unless_allow_everyone():
    assert not ok(authz(), Op.READ)
    assert ok(authz(allow_if_none=True), Op.READ)


def test_allow_everyone_only_when_no_acl_applies_to_the_resource():
    # an ACL for bob on the topic: alice has no ACL but the resource has one -> denied
    a = authz(acl(principal=BOB), allow_if_none=True)
    assert not ok(a, Op.READ)
    assert ok(a, Op.READ, name="other")  # no ACL applies to "other"


def test_super_users_bypass_everything_including_deny():
    a = authz(acl(op=Op.ALL, perm=DENY, principal="User:*"), supers={ALICE})
    assert ok(a, Op.WRITE)
    assert ok(a, Op.ALTER, name="kafka-cluster", rt=C)
    assert not ok(a, Op.WRITE, principal=BOB)


def test_literal_exact_name_only():
    a = authz(acl(name="orders"))
    assert ok(a, Op.READ, name="orders")
    assert not ok(a, Op.READ, name="orders2")
    assert not ok(a, Op.READ, name="order")


def test_literal_wildcard_name_matches_every_resource_of_its_type():
    a = authz(acl(name="*"))
    assert ok(a, Op.READ, name="anything")
    assert ok(a, Op.READ, name="*")
    assert not ok(a, Op.READ, name="anything", rt=G)


def test_prefixed():
    a = authz(acl(name="ord", pt=PRE))
    assert ok(a, Op.READ, name="orders")
    assert ok(a, Op.READ, name="ord")
    assert not ok(a, Op.READ, name="or")
    assert not ok(a, Op.READ, name="xorders")


def test_prefixed_star_is_a_literal_prefix_not_a_wildcard():
    a = authz(acl(name="*", pt=PRE))
    assert not ok(a, Op.READ, name="orders")
    assert ok(a, Op.READ, name="*x")


def test_operation_implications_for_allow():
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE):
        assert ok(authz(acl(op=op)), Op.DESCRIBE), op
    for op in (Op.CREATE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, Op.IDEMPOTENT_WRITE, Op.CLUSTER_ACTION):
        assert not ok(authz(acl(op=op)), Op.DESCRIBE), op
    assert ok(authz(acl(op=Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS)
    assert ok(authz(acl(op=Op.DESCRIBE_CONFIGS)), Op.DESCRIBE_CONFIGS)
    assert not ok(authz(acl(op=Op.ALTER)), Op.DESCRIBE_CONFIGS)
    # implication goes one way only
    assert not ok(authz(acl(op=Op.DESCRIBE)), Op.READ)
    assert not ok(authz(acl(op=Op.READ)), Op.WRITE)


def test_all_allows_and_denies_every_operation():
    for op in Op:
        if op in (Op.UNKNOWN, Op.ANY):
            continue
        assert ok(authz(acl(op=Op.ALL)), op)
        assert not ok(authz(acl(op=Op.ALL), acl(op=Op.ALL, perm=DENY)), op)


def test_deny_beats_allow_and_has_no_implications():
    a = authz(acl(op=Op.ALL), acl(op=Op.READ, perm=DENY))
    assert not ok(a, Op.READ)
    assert ok(a, Op.DESCRIBE)  # a DENY of READ does not deny DESCRIBE
    assert ok(a, Op.WRITE)
    # deny from a prefixed ACL beats an allow on the literal name, and a wildcard deny too
    assert not ok(authz(acl(op=Op.READ), acl(name="o", pt=PRE, perm=DENY)), Op.READ)
    assert not ok(authz(acl(op=Op.READ), acl(name="*", perm=DENY, principal="User:*")), Op.READ)


def test_principal_matching():
    assert not ok(authz(acl(principal=BOB)), Op.READ)
    assert ok(authz(acl(principal="User:*")), Op.READ)
    assert ok(authz(acl(principal="User:*")), Op.READ, principal="User:ANONYMOUS")
    assert not ok(authz(acl(principal="User:Alice")), Op.READ)  # case-sensitive
    assert not ok(authz(acl(principal="Group:alice")), Op.READ)


def test_host_matching():
    assert ok(authz(acl(host=HOST)), Op.READ)
    assert not ok(authz(acl(host="10.0.0.1")), Op.READ)
    assert not ok(authz(acl(host="10.0.0.1"), allow_if_none=True), Op.READ)
    a = authz(acl(op=Op.ALL), acl(host=HOST, perm=DENY, op=Op.WRITE))
    assert not ok(a, Op.WRITE)
    assert ok(a, Op.WRITE, host="::1")


def test_resource_types_are_separate():
    a = authz(acl(rt=G, name="orders"))
    assert not ok(a, Op.READ, rt=T)
    assert ok(a, Op.READ, rt=G)
    a = authz(acl(rt=C, name="kafka-cluster", op=Op.CREATE))
    assert ok(a, Op.CREATE, rt=C, name="kafka-cluster")
    assert not ok(a, Op.CREATE, rt=T, name="kafka-cluster")


def test_reload_replaces_acls_and_same_source_is_skipped():
    a = StandardAuthorizer()
    src = {1: acl()}
    a.load(src, source=src)
    assert ok(a, Op.READ)
    a.load({}, source=src)  # same source object: skipped
    assert ok(a, Op.READ)
    a.load({}, source={})
    assert not ok(a, Op.READ)


def test_authorize_by_resource_type():
    a = authz(acl(name="orders", op=Op.WRITE))
    assert a.authorize_by_resource_type(ALICE, HOST, Op.WRITE, T)
    assert not a.authorize_by_resource_type(BOB, HOST, Op.WRITE, T)
    assert not a.authorize_by_resource_type(ALICE, HOST, Op.READ, T)
    assert not a.authorize_by_resource_type(ALICE, HOST, Op.WRITE, G)
    # a wildcard deny, or a deny prefix covering the allow, takes it away
    assert not authz(acl(op=Op.WRITE), acl(name="*", op=Op.WRITE, perm=DENY)).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, T
    )
    a = authz(acl(op=Op.WRITE), acl(name="ord", pt=PRE, op=Op.ALL, perm=DENY))
    assert not a.authorize_by_resource_type(ALICE, HOST, Op.WRITE, T)
    # a literal deny of another name leaves it
    assert authz(acl(op=Op.WRITE), acl(name="x", op=Op.WRITE, perm=DENY)).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, T
    )
    assert authz(supers={ALICE}).authorize_by_resource_type(ALICE, HOST, Op.WRITE, T)


def test_from_config():
    assert StandardAuthorizer.from_config({}) is None
    assert StandardAuthorizer.from_config({"authorizer.class.name": ""}) is None
    a = StandardAuthorizer.from_config(
        {
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin; User:CN=broker,Op=x",
            "allow.everyone.if.no.acl.found": "true",
        }
    )
    assert a is not None and a.super_users == {"User:admin", "User:CN=broker,Op=x"}
    assert a.allow_everyone_if_no_acl_found
    import pytest

    with pytest.raises(ValueError, match="not supported"):
        StandardAuthorizer.from_config({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})


def test_helpers():
    assert parse_principal("User:CN=a:b") == ("User", "CN=a:b")
    import pytest

    with pytest.raises(ValueError, match="no colon"):
        parse_principal("alice")
    assert parse_super_users("User:a;;User:b ") == {"User:a", "User:b"}
    assert normalize_host("::ffff:127.0.0.1") == "127.0.0.1"
    assert normalize_host("::1") == "::1"


# ---- filters ----------------------------------------------------------------------------
def f(**kw) -> AclBindingFilter:
    return AclBindingFilter(**kw)


def test_filter_any_matches_everything():
    for b in (acl(), acl(pt=PRE, name="x"), acl(rt=C, name="kafka-cluster", perm=DENY, op=Op.ALL)):
        assert f().matches(b)


def test_filter_fields():
    b = acl()
    assert f(resource_type=T).matches(b) and not f(resource_type=G).matches(b)
    assert f(principal=ALICE).matches(b) and not f(principal=BOB).matches(b)
    assert f(host="*").matches(b) and not f(host=HOST).matches(b)
    assert f(operation=Op.READ).matches(b) and not f(operation=Op.ALL).matches(b)
    assert f(permission_type=ALLOW).matches(b) and not f(permission_type=DENY).matches(b)


def test_filter_pattern_types():
    lit, star, pre, other = acl(name="orders"), acl(name="*"), acl(name="ord", pt=PRE), acl(name="x", pt=PRE)
    # LITERAL / PREFIXED: exact pattern type and exact name
    assert f(pattern_type=LIT, resource_name="orders").matches(lit)
    assert not f(pattern_type=LIT, resource_name="orders").matches(star)
    assert not f(pattern_type=PRE, resource_name="orders").matches(pre)
    assert f(pattern_type=PRE, resource_name="ord").matches(pre)
    # ANY: any pattern type, exact name
    assert f(resource_name="ord").matches(pre) and not f(resource_name="orders").matches(pre)
    # MATCH: the ACLs applying to the named resource
    m = f(pattern_type=PatternType.MATCH, resource_name="orders")
    assert [m.matches(b) for b in (lit, star, pre, other)] == [True, True, True, False]
    assert f(pattern_type=PatternType.MATCH).matches(other)


def test_filter_unknown_part():
    assert f().unknown_part() is None
    assert f(resource_type=0).unknown_part() == "resource type 0"
    assert f(pattern_type=9).unknown_part() == "pattern type 9"
    assert f(operation=0).unknown_part() == "operation 0"
    assert f(permission_type=0).unknown_part() == "permission type 0"


# ---- property: the indexed decision equals a brute-force reading of Kafka's rules --------
NAMES = ["a", "ab", "abc", "b", "*"]
PRINCIPALS = [ALICE, BOB, "User:*"]
HOSTS = ["*", HOST, "10.0.0.1"]
OPS = [o for o in Op if o not in (Op.UNKNOWN, Op.ANY)]

acls_st = st.lists(
    st.builds(
        acl,
        rt=st.sampled_from([T, G]),
        name=st.sampled_from(NAMES),
        pt=st.sampled_from([LIT, PRE]),
        principal=st.sampled_from(PRINCIPALS),
        host=st.sampled_from(HOSTS),
        op=st.sampled_from(OPS),
        perm=st.sampled_from([ALLOW, DENY]),
    ),
    max_size=8,
)


def reference(acls, supers, allow_if_none, principal, host, op, rt, name) -> bool:
    if principal in supers:
        return True
    applying = [
        b
        for b in acls
        if b.resource_type == rt
        and (
            (b.pattern_type == LIT and (b.resource_name == name or b.resource_name == "*"))
            or (b.pattern_type == PRE and name.startswith(b.resource_name))
        )
    ]
    mine = [b for b in applying if b.principal in (principal, "User:*") and b.host in ("*", host)]
    if any(b.permission_type == DENY and b.operation in (Op.ALL, op) for b in mine):
        return False
    implied = {op, Op.ALL}
    if op == Op.DESCRIBE:
        implied |= {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}
    if op == Op.DESCRIBE_CONFIGS:
        implied |= {Op.ALTER_CONFIGS}
    if any(b.permission_type == ALLOW and b.operation in implied for b in mine):
        return True
    return not applying and allow_if_none


@settings(max_examples=400, deadline=None)
@given(
    acls_st,
    st.sets(st.sampled_from(PRINCIPALS[:2]), max_size=1),
    st.booleans(),
    st.sampled_from(PRINCIPALS[:2]),
    st.sampled_from(HOSTS[1:]),
    st.sampled_from(OPS),
    st.sampled_from([T, G]),
    st.sampled_from(["a", "ab", "abc", "abd", "b", "c", "*"]),
)
def test_decisions_match_reference(acls, supers, allow_if_none, principal, host, op, rt, name):
    a = authz(*acls, supers=supers, allow_if_none=allow_if_none)
    assert ok(a, op, name=name, rt=rt, principal=principal, host=host) == reference(
        acls, supers, allow_if_none, principal, host, op, rt, name
    )


@settings(max_examples=200, deadline=None)
@given(acls_st, st.sampled_from(["a", "ab", "abc", "zz"]))
def test_match_filter_selects_exactly_the_applying_acls(acls, name):
    """A MATCH filter for a resource name selects the ACLs that apply when authorizing it."""
    a = authz(*acls)
    flt = f(resource_type=T, pattern_type=PatternType.MATCH, resource_name=name)
    assert sorted(map(str, (b for _, b in a.matching(flt)))) == sorted(map(str, a._applying(T, name)))
