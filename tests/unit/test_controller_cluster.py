"""Broker registration, heartbeats, fencing and controlled shutdown (ClusterControlManager)."""

from __future__ import annotations

import uuid
from dataclasses import replace

from kio.static.primitive import i16

from strom.controller import BrokerRegistration, BrokerState, ControllerConfig, broker_state
from strom.metadata.records import (
    BrokerRegistrationChangeRecord,
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
)
from strom.protocol.errors import ErrorCode
from strom.testing.controller import ControllerHarness, heartbeat_request, registration_request


def state(h: ControllerHarness, b: int) -> BrokerState:
    reg = h.controller.cluster.registration(b)
    assert reg is not None
    return broker_state(reg)


def test_broker_epoch_is_the_offset_of_its_register_record() -> None:
    h = ControllerHarness()
    offset = h.next_offset
    assert h.register(1, rack="r1") == {"throttle_time": 0, "error_code": 0, "broker_epoch": offset}
    record = h.log[offset]
    assert isinstance(record, RegisterBrokerRecord) and record.fenced and record.rack == "r1"
    reg = h.controller.cluster.registration(1)
    assert reg is not None and reg.epoch == offset and reg.fenced and reg.rack == "r1"
    assert reg.listeners[0].port == 9092


def test_new_incarnation_refused_while_old_session_alive() -> None:
    h = ControllerHarness()
    h.start_brokers(2)
    h.advance(9000)  # broker.session.timeout.ms since the last contact: still valid
    response = h.register(1, new_incarnation=True)
    assert response["error_code"] == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    h.advance(1)
    assert h.register(1, new_incarnation=True)["error_code"] == 0
    h.advance(1)
    # a fenced registration has no session: its next incarnation may register at once
    assert h.register(1, new_incarnation=True)["error_code"] == 0


def test_same_incarnation_amends_its_registration() -> None:
    h = ControllerHarness()
    h.start_brokers(3)
    old = h.epoch(1)
    response = h.register(1, rack="moved")
    assert response["error_code"] == 0 and response["broker_epoch"] == old
    assert state(h, 1) is BrokerState.UNFENCED
    reg = h.controller.cluster.registration(1)
    assert reg is not None and reg.rack == "moved"
    # caught up means having replayed the amending record too
    r = h.controller.broker_heartbeat(heartbeat_request(1, old, h.next_offset - 2), h.now_ms).response
    assert r is not None and r["is_caught_up"] is False


def test_new_incarnation_gets_a_new_epoch_and_starts_fenced() -> None:
    h = ControllerHarness()
    h.start_brokers(3)
    h.create_topic("t", 1, 3)
    old = h.epoch(1)
    h.advance(9001)
    h.heartbeat(0)
    h.heartbeat(2)
    response = h.register(1, new_incarnation=True)
    assert response["error_code"] == 0 and response["broker_epoch"] > old
    assert state(h, 1) is BrokerState.FENCED
    part = h.controller.replication.topic("t").parts[0]  # type: ignore[union-attr]
    assert 1 not in part.isr and part.leader != 1


def test_registration_needs_the_finalized_features_and_the_cluster_id() -> None:
    h = ControllerHarness()
    request = registration_request(5, uuid.uuid4())
    mv = request.features[0]
    assert mv.name == "metadata.version"
    too_old = replace(mv, max_supported_version=i16(mv.max_supported_version - 1))
    request = replace(request, features=(too_old, *request.features[1:]))
    result = h.controller.register_broker(request, h.next_offset, h.now_ms)
    assert result.records == [] and result.response is not None
    assert result.response["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    other = replace(registration_request(5, uuid.uuid4()), cluster_id="another")
    result = h.controller.register_broker(other, h.next_offset, h.now_ms)
    assert (
        result.response is not None
        and result.response["error_code"] == ErrorCode.INCONSISTENT_CLUSTER_ID
    )


def test_unfenced_only_once_caught_up_to_its_registration() -> None:
    h = ControllerHarness()
    h.register(1)
    epoch = h.epoch(1)
    result = h.controller.broker_heartbeat(heartbeat_request(1, epoch, epoch - 1), h.now_ms)
    assert result.records == []
    assert result.response == {
        "throttle_time": 0,
        "error_code": 0,
        "is_caught_up": False,
        "is_fenced": True,
        "should_shut_down": False,
    }
    result = h.controller.broker_heartbeat(heartbeat_request(1, epoch, epoch), h.now_ms)
    assert (
        result.response is not None and not result.response["is_fenced"] and result.response["is_caught_up"]
    )
    assert result.records == [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch, fenced=-1)]
    h.commit(result)
    assert state(h, 1) is BrokerState.UNFENCED


def test_heartbeat_errors() -> None:
    h = ControllerHarness()
    h.register(1)
    r = h.controller.broker_heartbeat(heartbeat_request(2, 0, 0), 0).response
    assert r is not None and r["error_code"] == ErrorCode.STALE_BROKER_EPOCH  # Kafka's answer too
    r = h.controller.broker_heartbeat(heartbeat_request(1, h.epoch(1) + 1, 100), 0).response
    assert r is not None and r["error_code"] == ErrorCode.STALE_BROKER_EPOCH


def test_silent_broker_fenced_after_session_timeout_and_leadership_moves() -> None:
    h = ControllerHarness()
    h.start_brokers(3)
    tid = h.create_topic("t", 3, 3)["topic_id"]
    assert tid
    parts = h.controller.replication.topic("t").parts  # type: ignore[union-attr]
    led_by_0 = [p for p, part in parts.items() if part.leader == 0]
    assert led_by_0
    for _ in range(5):  # 1 and 2 keep heartbeating every broker.heartbeat.interval.ms; 0 is silent
        h.advance(2000)
        h.heartbeat(1)
        h.heartbeat(2)
        fenced = h.poll()
        assert (fenced == 0) == (h.now_ms <= 9000)
    assert state(h, 0) is BrokerState.FENCED
    for p in led_by_0:
        assert parts[p].leader in (1, 2) and 0 not in parts[p].isr
    assert all(0 not in part.isr for part in parts.values())
    assert h.poll() == 0  # nothing further to fence


def test_fencing_the_last_isr_member_keeps_it_in_the_isr_with_no_leader() -> None:
    h = ControllerHarness()
    h.start_brokers(2)
    h.create_topic("t", assignments={0: [0]})
    h.heartbeat(0, want_fence=True)
    part = h.controller.replication.topic("t").parts[0]  # type: ignore[union-attr]
    assert part.leader == -1 and part.isr == (0,) and part.leader_epoch == 1
    h.heartbeat(0)  # caught up again: unfenced, and elected from the ISR it never left
    part = h.controller.replication.topic("t").parts[0]  # type: ignore[union-attr]
    assert part.leader == 0 and part.leader_epoch == 2


def test_controlled_shutdown_moves_leaders_then_shuts_down() -> None:
    h = ControllerHarness()
    h.start_brokers(3)
    h.create_topic("t", 6, 3)
    parts = h.controller.replication.topic("t").parts  # type: ignore[union-attr]
    assert any(p.leader == 1 for p in parts.values())
    r = h.heartbeat(1, want_shut_down=True)
    assert r["should_shut_down"] is False and r["is_fenced"] is False
    assert state(h, 1) is BrokerState.CONTROLLED_SHUTDOWN
    assert all(p.leader != 1 and 1 not in p.isr for p in parts.values())
    # a shutting-down broker is no candidate for new replicas
    assert 1 not in {b.id for b in h.controller.cluster.usable_brokers()}
    h.heartbeat(0)  # the others learn the new leaders
    h.heartbeat(2)
    r = h.heartbeat(1, want_shut_down=True)
    assert r["should_shut_down"] is True and r["is_fenced"] is True
    assert state(h, 1) is BrokerState.SHUTDOWN_NOW


def test_controlled_shutdown_waits_for_the_other_brokers_to_see_the_new_leaders() -> None:
    h = ControllerHarness()
    h.start_brokers(2)
    h.create_topic("t", assignments={0: [0, 1]})
    behind = h.next_offset
    h.heartbeat(0, want_shut_down=True)  # leaderships move to 1 at offsets >= behind
    assert part_leader(h) == 1
    lagging = heartbeat_request(1, h.epoch(1), behind - 1)  # broker 1 has not replayed them yet
    h.commit(h.controller.broker_heartbeat(lagging, h.now_ms))
    r = h.heartbeat(0, want_shut_down=True)
    assert r["should_shut_down"] is False and state(h, 0) is BrokerState.CONTROLLED_SHUTDOWN
    h.heartbeat(1)  # caught up
    r = h.heartbeat(0, want_shut_down=True)
    assert r["should_shut_down"] is True and state(h, 0) is BrokerState.SHUTDOWN_NOW


def part_leader(h: ControllerHarness) -> int:
    info = h.controller.replication.topic("t")
    assert info is not None
    return info.parts[0].leader


def test_shutdown_of_a_broker_leading_nothing_is_immediate() -> None:
    h = ControllerHarness()
    h.start_brokers(2)
    r = h.heartbeat(1, want_shut_down=True)
    assert r["should_shut_down"] is True and state(h, 1) is BrokerState.SHUTDOWN_NOW


def test_unregister_broker() -> None:
    h = ControllerHarness()
    h.start_brokers(2)
    h.create_topic("t", 2, 2)
    from kio.schema.unregister_broker.v0.request import UnregisterBrokerRequest
    from kio.static.primitive import i32

    result = h.controller.unregister_broker(UnregisterBrokerRequest(broker_id=i32(1)))  # type: ignore[arg-type]
    assert isinstance(result.records[-1], UnregisterBrokerRecord)
    h.commit(result)
    assert h.controller.cluster.registration(1) is None
    parts = h.controller.replication.topic("t").parts  # type: ignore[union-attr]
    assert all(p.isr == (0,) and p.leader == 0 for p in parts.values())
    again = h.controller.unregister_broker(UnregisterBrokerRequest(broker_id=i32(1)))  # type: ignore[arg-type]
    assert again.response is not None
    assert again.response["error_code"] == ErrorCode.BROKER_ID_NOT_REGISTERED


def test_failover_starts_sessions_afresh() -> None:
    h = ControllerHarness(ControllerConfig())
    h.start_brokers(2)
    h.advance(60_000)
    standby = h.rebuilt()
    standby.activate(h.now_ms)
    assert standby.poll(h.now_ms + 9000).records == []
    assert standby.poll(h.now_ms + 9001).records != []
    assert standby.next_poll_ms(h.now_ms) == h.now_ms + 9001


# Kafka's BrokerHeartbeatManager.calculateNextBrokerState, as a table over every state and input:
# (state, want_fence, want_shut_down, caught_up, leads_partitions) -> next state
_F, _U, _C, _S = (
    BrokerState.FENCED,
    BrokerState.UNFENCED,
    BrokerState.CONTROLLED_SHUTDOWN,
    BrokerState.SHUTDOWN_NOW,
)


def _expected(state: BrokerState, fence: bool, shut: bool, caught_up: bool, leads: bool) -> BrokerState:
    table = {
        _F: _S if shut else _F if fence else _U if caught_up else _F,
        _U: (_S if shut else _F) if fence else (_C if leads else _S) if shut else _U,
        _C: _C if leads else _S,
        _S: _S,
    }
    return table[state]


def test_heartbeat_transitions_are_total_over_states_and_inputs() -> None:
    import itertools

    from strom.controller.cluster_control import ClusterControlManager

    cluster = ClusterControlManager()
    for state, fence, shut, caught_up, leads in itertools.product(list(BrokerState), *[[False, True]] * 4):
        reg = BrokerRegistration(
            id=1,
            epoch=10,
            incarnation_id=uuid.UUID(int=1),
            fenced=state in (_F, _S),
            in_controlled_shutdown=state in (_C, _S),
        )
        cluster.registrations[1] = reg
        assert broker_state(reg) is state
        request = heartbeat_request(1, 10, 10 if caught_up else 9, want_fence=fence, want_shut_down=shut)
        got = cluster.next_state(reg, request, lambda leads=leads: leads)  # type: ignore[misc]
        assert got is _expected(state, fence, shut, caught_up, leads), (state, fence, shut, caught_up, leads)
