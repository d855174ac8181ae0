"""Client quotas: Kafka's precedence of quota entities, the windowed rate and throttle times, and
the controller's AlterClientQuotas checks / DescribeClientQuotas filters."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from strom.controller.quota_control import ClientQuotaControlManager, describe
from strom.server.client_quotas import (
    ClientQuotaManager,
    ConnectionRateQuotas,
    ControllerMutationQuotaManager,
    Rate,
    ThrottlingQuotaExceeded,
    quota_for,
    request_throttle_ms,
    user_name,
)

U, C = "user", "client-id"
P = "producer_byte_rate"


def test_precedence_most_specific_first():
    ents = {
        ((C, None),): {P: 8.0},
        ((C, "app"),): {P: 7.0},
        ((U, None),): {P: 6.0},
        ((C, None), (U, None)): {P: 5.0},
        ((C, "app"), (U, None)): {P: 4.0},
        ((U, "alice"),): {P: 3.0},
        ((C, None), (U, "alice")): {P: 2.0},
        ((C, "app"), (U, "alice")): {P: 1.0},
    }
    order = [
        ((C, "app"), (U, "alice")),
        ((C, None), (U, "alice")),
        ((U, "alice"),),
        ((C, "app"), (U, None)),
        ((C, None), (U, None)),
        ((U, None),),
        ((C, "app"),),
        ((C, None),),
    ]
    expected = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    for entity, value in zip(order, expected, strict=True):
        assert quota_for(ents, P, "alice", "app")[1] == value  # type: ignore[index]
        del ents[entity]
    assert quota_for(ents, P, "alice", "app") is None


def test_shared_by_what_the_level_names():
    assert quota_for({((U, "alice"),): {P: 1.0}}, P, "alice", "x")[0] == ("alice", "")  # type: ignore[index]
    assert quota_for({((C, None),): {P: 1.0}}, P, "alice", "x")[0] == ("", "x")  # type: ignore[index]
    assert quota_for({((C, None), (U, None)): {P: 1.0}}, P, "a", "x")[0] == ("a", "x")  # type: ignore[index]
    assert quota_for({((U, "bob"),): {P: 1.0}}, P, "alice", "x") is None
    assert quota_for({((U, "alice"),): {"consumer_byte_rate": 1.0}}, P, "alice", "x") is None
    assert user_name("User:CN=a,O=b") == "CN=a,O=b"


def test_rate_span_is_at_least_num_minus_one_windows():
    r = Rate(num=3, window_ms=1000)
    r.record(1000, 0)
    assert r.span_ms(0) == 2000 and r.per_second(0) == 500
    r.record(1000, 2500)
    assert r.span_ms(2500) == 2500 and r.per_second(2500) == 800
    # old windows expire
    assert r.per_second(10_000) == 0


def test_throttle_time_formula():
    m = ClientQuotaManager(P, num_windows=2, window_ms=1000)
    ents = {((U, "alice"),): {P: 100.0}}
    assert m.record(ents, "User:alice", "c", 100, 0) == 0  # 100 B over a 1 s span: at the quota
    # 300 B 10 ms later: the span is 10 ms + one full window (Kafka's minimum of num - 1), so
    # (300 / 1.01 s - 100) / 100 * 1010 ms
    assert m.record(ents, "User:alice", "c", 200, 10) == 1990
    assert m.record(ents, "User:bob", "c", 10_000, 10) == 0  # no quota
    assert m.record({}, "User:alice", "c", 10_000, 10) == 0


def _alter(entries, validate_only=False):
    return NS(
        entries=[
            NS(
                entity=[NS(entity_type=t, entity_name=n) for t, n in ent],
                ops=[NS(key=k, value=v, remove=r) for k, v, r in ops],
            )
            for ent, ops in entries
        ],
        validate_only=validate_only,
    )


def test_controller_alter_and_describe():
    c = ClientQuotaControlManager()
    records, resp = c.alter_client_quotas(
        _alter(
            [
                ([(U, "alice")], [(P, 1024.0, False)]),
                ([(U, "alice"), (U, "bob")], [(P, 1.0, False)]),
                ([("group", "g")], [(P, 1.0, False)]),
                ([(U, "")], [(P, 1.0, False)]),
                ([("ip", "not-an-ip")], [("connection_creation_rate", 1.0, False)]),
                ([("ip", "10.0.0.1")], [(P, 1.0, False)]),
                ([(U, "alice")], [(P, -5.0, False)]),
            ]
        )
    )
    msgs = [(e["error_code"], e["error_message"]) for e in resp["entries"]]
    assert msgs[0] == (0, None)
    assert msgs[1] == (42, "Invalid empty entity")
    assert msgs[2] == (42, "Unhandled client quota entity type: group")
    assert msgs[3] == (42, "Empty user not supported")
    assert msgs[4] == (42, "not-an-ip is not a valid IP or resolvable host.")
    assert msgs[5] == (42, "Invalid configuration key producer_byte_rate")
    assert msgs[6][0] == 42
    assert len(records) == 1
    for r in records:
        c.replay(r)
    assert c.entities == {((U, "alice"),): {P: 1024.0}}
    assert c.to_records() == records
    # validate_only writes nothing; an unchanged value needs no record
    assert c.alter_client_quotas(_alter([([(U, "x")], [(P, 1.0, False)])], validate_only=True))[0] == []
    assert c.alter_client_quotas(_alter([([(U, "alice")], [(P, 1024.0, False)])]))[0] == []
    removed, _ = c.alter_client_quotas(_alter([([(U, "alice")], [(P, 0.0, True)])]))
    c.replay(removed[0])
    assert c.entities == {}


def test_describe_filters():
    ents = {
        ((U, "alice"),): {P: 1.0},
        ((C, "app"), (U, "alice")): {P: 2.0},
        ((U, None),): {P: 3.0},
        ((C, None),): {P: 4.0},
    }

    def names(components, strict=False):
        req = NS(
            components=[NS(entity_type=t, match_type=m, match=v) for t, m, v in components], strict=strict
        )
        resp = describe(ents, req)
        if resp["error_code"]:
            return resp["error_code"]
        return sorted(
            (tuple((e["entity_type"], e["entity_name"]) for e in x["entity"]) for x in resp["entries"]),
            key=str,
        )

    assert len(names([])) == 4
    assert names([], strict=True) == []
    assert names([(U, 0, "alice")]) == [((C, "app"), (U, "alice")), ((U, "alice"),)]
    assert names([(U, 0, "alice")], strict=True) == [((U, "alice"),)]
    assert names([(U, 1, None)]) == [((U, None),)]
    assert names([(U, 2, None)]) == [((C, "app"), (U, "alice")), ((U, "alice"),)]
    assert names([(U, 0, None)]) == 42
    assert names([(U, 2, None), (U, 1, None)]) == 42
    assert names([("ip", 2, None), (U, 2, None)]) == 42


# ----------------------------------------------- controller_mutation_rate, request time, connections


def test_mutation_quota_token_bucket_strict_and_permissive() -> None:
    """rate 2/s, 2 windows of 1 s: a burst of 4 partitions; the bucket may go negative once;
    a strict request is then refused until it refills; a permissive one is only throttled."""
    ents = {(("user", "alice"),): {"controller_mutation_rate": 2.0}}
    m = ControllerMutationQuotaManager(2, 1000)
    m.record(ents, "User:alice", "c", 3, 0, strict=True)
    assert m.throttle_ms(ents, "User:alice", "c", 0) == 0
    m.record(ents, "User:alice", "c", 3, 0, strict=True)  # 1 token left: allowed, goes to -2
    assert m.throttle_ms(ents, "User:alice", "c", 0) == 1000  # 2 tokens at 2/s
    with pytest.raises(ThrottlingQuotaExceeded) as e:
        m.record(ents, "User:alice", "c", 1, 500, strict=True)
    assert e.value.throttle_ms == 500
    m.record(ents, "User:alice", "c", 10, 500, strict=False)  # permissive: recorded
    assert m.throttle_ms(ents, "User:alice", "c", 500) == 5500
    m.record(ents, "User:bob", "c", 100, 500, strict=True)  # no quota for bob
    assert m.throttle_ms(ents, "User:bob", "c", 500) == 0
    assert m.throttle_ms(ents, "User:alice", "c", 6000) == 0  # refilled
    m.record(ents, "User:alice", "c", 1, 6000, strict=True)


def test_request_percentage_throttle_capped_at_a_window() -> None:
    ents = {(("client-id", None),): {"request_percentage": 10.0}}
    q = ClientQuotaManager("request_percentage", 2, 1000)
    # 10 ms of handling in the first 2 s at a 10 % quota: within; 500 ms more: over
    assert request_throttle_ms(q, ents, "User:x", "app", 0.01, 0) == 0
    t = request_throttle_ms(q, ents, "User:x", "app", 0.5, 10)
    assert 0 < t <= 1000
    assert request_throttle_ms(q, ents, "User:x", "app", 5.0, 20) == 1000  # Kafka's cap
    assert request_throttle_ms(q, {}, "User:x", "app", 5.0, 20) == 0


def test_connection_rates() -> None:
    c = ConnectionRateQuotas(2, 1000)
    ents = {
        (("ip", None),): {"connection_creation_rate": 2.0},
        (("ip", "10.0.0.9"),): {"connection_creation_rate": 100.0},
    }
    delays = [c.record_ip(ents, "10.0.0.1", 0) for _ in range(6)]
    assert delays[:2] == [0, 0] and delays[-1] > 0  # the default IP quota
    assert all(c.record_ip(ents, "10.0.0.9", 0) == 0 for _ in range(20))  # its own, higher quota
    assert c.record_ip({}, "10.0.0.1", 0) == 0
    listener = [c.record_listener("", 5.0, 0) for _ in range(15)]
    assert listener[0] == 0 and listener[-1] > 0
