"""The controller's APIs on a real broker's listeners (strom.server.handlers.controller):
a QuorumControllerChannel with no local controller reaches the node's controller over its
CONTROLLER listener, as a broker of another node would: BrokerHeartbeat goes as itself,
CreateTopics inside an Envelope; malformed, non-forwardable and not-active cases of the
Envelope handler; ApiVersions lists the controller's APIs on the controller listener only."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.allocate_producer_ids.v0 import request as allocate
from kio.schema.api_versions.v3 import request as api_versions
from kio.schema.broker_heartbeat.v1 import request as heartbeat
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.describe_quorum.v2 import request as describe_quorum
from kio.schema.envelope.v0 import request as envelope_request
from kio.schema.incremental_alter_configs.v1 import request as incremental
from kio.schema.list_partition_reassignments.v0 import request as list_reassignments
from kio.schema.produce.v9 import request as produce
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from strom.config import BrokerConfig
from strom.protocol import envelope
from strom.protocol.errors import ErrorCode
from strom.server.broker import Broker
from strom.server.context import RequestContext
from strom.server.controller_channel import QuorumControllerChannel, _ControllerConnection
from strom.server.handlers.controller import handle_envelope
from strom.testing.broker_process import free_port


@dataclasses.dataclass
class Node:
    broker: Broker
    port: int
    controller_port: int


def _config(data: Path, port: int, controller_port: int) -> BrokerConfig:
    return BrokerConfig.from_sources(
        None,
        {
            "log.dirs": str(data),
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "controller.listener.names": "CONTROLLER",
            "strom.metadata.quorum.enable": "true",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.num.partitions": "1",
            "log.cleaner.enable": "false",
        },
    )


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture
def node(tmp_path: Path, loop: asyncio.AbstractEventLoop) -> Iterator[Node]:
    port, controller_port = free_port(), free_port()
    broker = Broker(_config(tmp_path / "data", port, controller_port))
    loop.run_until_complete(broker.start())
    try:
        yield Node(broker, port, controller_port)
    finally:
        loop.run_until_complete(broker.stop())


def _create(name: str, partitions: int = 2) -> Any:
    topic = create_topics.CreatableTopic(
        name=name,  # type: ignore[arg-type]
        num_partitions=i32(partitions),
        replication_factor=i16(-1),
        assignments=(),
        configs=(create_topics.CreatableTopicConfig(name="retention.ms", value="60000"),),
    )
    return create_topics.CreateTopicsRequest(
        topics=(topic,),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        validate_only=False,
    )


def test_a_remote_broker_forwards_create_topics_and_heartbeats(
    node: Node, loop: asyncio.AbstractEventLoop
) -> None:
    broker = node.broker
    assert broker.quorum is not None

    async def main() -> None:
        channel = QuorumControllerChannel(
            None, lambda: broker.node_id, {broker.node_id: ("127.0.0.1", node.controller_port)}
        )
        try:
            got = await channel.call(
                19, _create("forwarded", 2), principal="User:bob", client_host="10.0.0.9"
            )
            result = got["topics"][0]
            assert result["name"] == "forwarded" and result["error_code"] == 0
            assert result["num_partitions"] == 2
            # committed by the controller: in its state, and (once applied) in the broker's registry
            ctl = broker.quorum.controller.committed
            topic = ctl.replication.topic("forwarded")
            assert topic is not None and result["topic_id"] == topic.id
            for _ in range(200):
                if broker.topics.get("forwarded") is not None:
                    break
                await asyncio.sleep(0.01)
            info = broker.topics.get("forwarded")
            assert info is not None and info.partitions == 2 and info.configs["retention.ms"] == "60000"
            # the controller's own error, through the envelope
            again = (await channel.call(19, _create("forwarded")))["topics"][0]
            assert again["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
            # a direct heartbeat of the registered broker
            hb = heartbeat.BrokerHeartbeatRequest(
                broker_id=i32(broker.node_id),  # type: ignore[arg-type]
                broker_epoch=i64(broker.quorum.broker_epoch),
                current_metadata_offset=i64(broker.quorum.loader.last_offset + 1),
                want_fence=False,
                want_shut_down=False,
                offline_log_dirs=(),
            )
            answer = await channel.call(63, hb)
            assert answer["error_code"] == 0 and answer["is_fenced"] is False
            stale = dataclasses.replace(hb, broker_epoch=i64(broker.quorum.broker_epoch + 1000))
            assert (await channel.call(63, stale))["error_code"] == ErrorCode.STALE_BROKER_EPOCH
        finally:
            await channel.close()

    loop.run_until_complete(main())


def _api_keys(port: int, loop: asyncio.AbstractEventLoop) -> set[int]:
    async def ask() -> set[int]:
        conn = _ControllerConnection("127.0.0.1", port, "apiv")
        try:
            resp = await conn.send(
                api_versions.ApiVersionsRequest(client_software_name="t", client_software_version="1")
            )
        finally:
            await conn.close()
        assert resp.error_code == 0
        return {int(k.api_key) for k in resp.api_keys}

    return loop.run_until_complete(ask())


def test_api_versions_lists_the_controller_apis_on_the_controller_listener_only(
    node: Node, loop: asyncio.AbstractEventLoop
) -> None:
    controller_only = {52, 53, 54, 58, 59, 62, 63, 67}
    on_controller = _api_keys(node.controller_port, loop)
    on_broker = _api_keys(node.port, loop)
    assert controller_only <= on_controller
    assert not controller_only & on_broker
    assert {43, 45, 46, 55} <= on_broker  # forwarded for clients, as Kafka 4's brokers list them


def _ctx(broker: Any) -> RequestContext:
    return RequestContext(58, 0, 1, "t", "127.0.0.1", "conn-1", broker)


def _envelope(request: Any) -> Any:
    return envelope_request.EnvelopeRequest(
        request_data=envelope.encode_request(request, 5, "client"),
        request_principal=envelope.encode_principal("User:ANONYMOUS"),
        client_host_address=envelope.encode_address("127.0.0.1"),
    )


def test_envelope_refuses_what_it_cannot_run(node: Node, loop: asyncio.AbstractEventLoop) -> None:
    ctx = _ctx(node.broker)
    junk = envelope_request.EnvelopeRequest(
        request_data=b"\x00\x13", request_principal=None, client_host_address=b"\x7f\x00\x00\x01"
    )
    assert loop.run_until_complete(handle_envelope(ctx, junk))["error_code"] == ErrorCode.INVALID_REQUEST
    bad_principal = dataclasses.replace(_envelope(_create("x")), request_principal=b"\x00\x07")
    assert (
        loop.run_until_complete(handle_envelope(ctx, bad_principal))["error_code"]
        == ErrorCode.INVALID_REQUEST
    )
    # Produce is no controller API
    req = produce.ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=1)),
        topic_data=(),
    )
    answer = loop.run_until_complete(handle_envelope(ctx, _envelope(req)))
    assert answer["error_code"] == ErrorCode.INVALID_REQUEST
    # nothing was created by any of it
    assert (
        node.broker.quorum is not None
        and node.broker.quorum.controller.committed.replication.topic("x") is None
    )


def test_envelope_at_a_node_whose_controller_is_not_active_is_not_controller() -> None:
    standby = SimpleNamespace(quorum=SimpleNamespace(controller=SimpleNamespace(is_active=False)))
    answer = asyncio.run(handle_envelope(_ctx(standby), _envelope(_create("x"))))
    assert answer == {"error_code": ErrorCode.NOT_CONTROLLER, "response_data": None}
    no_quorum = SimpleNamespace(quorum=None)
    assert asyncio.run(handle_envelope(_ctx(no_quorum), _envelope(_create("x"))))["error_code"] == (
        ErrorCode.NOT_CONTROLLER
    )


def test_the_other_forwarded_apis_and_producer_ids(node: Node, loop: asyncio.AbstractEventLoop) -> None:
    """IncrementalAlterConfigs, ListPartitionReassignments, DescribeQuorum in Envelopes and a
    direct AllocateProducerIds, from a remote channel to the node's controller listener."""
    broker = node.broker
    assert broker.quorum is not None

    async def main() -> None:
        channel = QuorumControllerChannel(
            None, lambda: broker.node_id, {broker.node_id: ("127.0.0.1", node.controller_port)}
        )
        try:
            assert (await channel.call(19, _create("cfg", 1)))["topics"][0]["error_code"] == 0
            alter = incremental.IncrementalAlterConfigsRequest(
                resources=(
                    incremental.AlterConfigsResource(
                        resource_type=i8(2),  # TOPIC
                        resource_name="cfg",
                        configs=(
                            incremental.AlterableConfig(
                                name="retention.ms", config_operation=i8(0), value="777"
                            ),
                        ),
                    ),
                ),
                validate_only=False,
            )
            answer = await channel.call(44, alter)
            assert [r["error_code"] for r in answer["responses"]] == [0]
            ctl = broker.quorum.controller.committed
            assert ctl.configs.topic_config("cfg", "retention.ms") == "777"
            listed = await channel.call(
                46,
                list_reassignments.ListPartitionReassignmentsRequest(
                    timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)), topics=None
                ),
            )
            assert listed["error_code"] == 0 and listed["topics"] == []
            quorum = await channel.call(
                55,
                describe_quorum.DescribeQuorumRequest(
                    topics=(
                        describe_quorum.TopicData(
                            topic_name="__cluster_metadata",  # type: ignore[arg-type]
                            partitions=(describe_quorum.PartitionData(partition_index=i32(0)),),
                        ),
                    )
                ),
            )
            part = quorum["topics"][0]["partitions"][0]
            assert part["error_code"] == 0 and part["leader_id"] == broker.node_id
            assert [v["replica_id"] for v in part["current_voters"]] == [broker.node_id]
            block = await channel.call(
                67,
                allocate.AllocateProducerIdsRequest(
                    broker_id=i32(broker.node_id),  # type: ignore[arg-type]
                    broker_epoch=i64(broker.quorum.broker_epoch),
                ),
            )
            assert (
                block["error_code"] == 0 and block["producer_id_start"] >= 0 and block["producer_id_len"] > 0
            )
        finally:
            await channel.close()

    loop.run_until_complete(main())
