"""A controller driven without a quorum: for tests and simulations.

:class:`ControllerHarness` plays the part of the runtime around a
:class:`~strom.controller.QuorumController`: it "commits" each operation's records at the next
offsets (every record round-trips through the metadata record codec on the way, as it would
through the log), replays them, keeps the committed log so that a fresh controller can be rebuilt
from it, and carries a manual time. Kio request types build the requests, so the controller sees
what a broker's handler would hand it.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from kio.schema.alter_partition.v3 import request as alter_partition
from kio.schema.broker_heartbeat.v1 import request as heartbeat
from kio.schema.broker_registration.v4 import request as registration
from kio.schema.create_topics.v7 import request as create_topics
from kio.static.primitive import i16, i32, i64, u16

from ..controller import ControllerConfig, ControllerResult, QuorumController
from ..controller.config_control import Validator, accept_all
from ..controller.features import BOOTSTRAP_LEVELS
from ..metadata.records import decode, encode


def registration_request(
    broker_id: int, incarnation: uuid.UUID, rack: str | None = None, port: int = 9092
) -> Any:
    features = tuple(
        registration.Feature(name=name, min_supported_version=i16(0), max_supported_version=i16(level))
        for name, level in BOOTSTRAP_LEVELS.items()
    )
    return registration.BrokerRegistrationRequest(
        broker_id=i32(broker_id),  # type: ignore[arg-type]
        cluster_id="test-cluster",
        incarnation_id=incarnation,
        listeners=(
            registration.Listener(
                name="PLAINTEXT", host="localhost", port=u16(port), security_protocol=i16(0)
            ),
        ),
        features=features,
        rack=rack,
        is_migrating_zk_broker=False,
        log_dirs=(),
        previous_broker_epoch=i64(-1),
    )


def heartbeat_request(
    broker_id: int, epoch: int, offset: int, want_fence: bool = False, want_shut_down: bool = False
) -> Any:
    return heartbeat.BrokerHeartbeatRequest(
        broker_id=i32(broker_id),  # type: ignore[arg-type]
        broker_epoch=i64(epoch),
        current_metadata_offset=i64(offset),
        want_fence=want_fence,
        want_shut_down=want_shut_down,
        offline_log_dirs=(),
    )


def create_topic_request(
    name: str,
    partitions: int = -1,
    rf: int = -1,
    assignments: dict[int, list[int]] | None = None,
    configs: dict[str, str] | None = None,
    validate_only: bool = False,
) -> Any:
    topic = create_topics.CreatableTopic(
        name=name,  # type: ignore[arg-type]
        num_partitions=i32(partitions),
        replication_factor=i16(rf),
        assignments=tuple(
            create_topics.CreatableReplicaAssignment(
                partition_index=i32(p),
                broker_ids=tuple(i32(b) for b in bs),  # type: ignore[misc]
            )
            for p, bs in (assignments or {}).items()
        ),
        configs=tuple(
            create_topics.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()
        ),
    )
    return create_topics.CreateTopicsRequest(
        topics=(topic,),
        timeout=i32(30000),  # type: ignore[arg-type]
        validate_only=validate_only,
    )


def alter_partition_request(
    broker_id: int,
    broker_epoch: int,
    topic_id: uuid.UUID,
    partition: int,
    leader_epoch: int,
    partition_epoch: int,
    isr: list[tuple[int, int]],
    leader_recovery_state: int = 0,
) -> Any:
    return alter_partition.AlterPartitionRequest(
        broker_id=i32(broker_id),  # type: ignore[arg-type]
        broker_epoch=i64(broker_epoch),
        topics=(
            alter_partition.TopicData(
                topic_id=topic_id,
                partitions=(
                    alter_partition.PartitionData(
                        partition_index=i32(partition),
                        leader_epoch=i32(leader_epoch),
                        new_isr_with_epochs=tuple(
                            alter_partition.BrokerState(broker_id=i32(b), broker_epoch=i64(e))  # type: ignore[arg-type]
                            for b, e in isr
                        ),
                        leader_recovery_state=leader_recovery_state,  # type: ignore[arg-type]
                        partition_epoch=i32(partition_epoch),
                    ),
                ),
            ),
        ),
    )


class ControllerHarness:
    """An active controller whose records commit at once (see the module docstring)."""

    def __init__(
        self,
        config: ControllerConfig | None = None,
        seed: int = 0,
        validator: Validator = accept_all,
    ) -> None:
        self.config = config
        self.validator = validator
        self.controller = QuorumController(
            config, rnd=random.Random(seed), cluster_id="test-cluster", validator=validator
        )
        self.now_ms = 0
        self.log: list[Any] = []
        self.commit(ControllerResult(QuorumController.bootstrap_records()))
        self.controller.activate(self.now_ms)
        self._incarnations: dict[int, uuid.UUID] = {}
        self._ids = random.Random(seed + 1)

    @property
    def next_offset(self) -> int:
        return len(self.log)

    def commit(self, result: ControllerResult[Any]) -> Any:
        for record in result.records:
            record = decode(encode(record))
            self.controller.replay(record, self.next_offset)
            self.log.append(record)
        return result.response

    def advance(self, ms: int) -> None:
        self.now_ms += ms

    # ---- brokers -------------------------------------------------------------------------
    def register(
        self, broker_id: int, rack: str | None = None, new_incarnation: bool = False
    ) -> dict[str, Any]:
        if new_incarnation or broker_id not in self._incarnations:
            self._incarnations[broker_id] = uuid.UUID(int=self._ids.getrandbits(128), version=4)
        request = registration_request(broker_id, self._incarnations[broker_id], rack)
        result: dict[str, Any] = self.commit(
            self.controller.register_broker(request, self.next_offset, self.now_ms)
        )
        return result

    def epoch(self, broker_id: int) -> int:
        reg = self.controller.cluster.registration(broker_id)
        assert reg is not None
        return reg.epoch

    def heartbeat(
        self, broker_id: int, want_fence: bool = False, want_shut_down: bool = False
    ) -> dict[str, Any]:
        request = heartbeat_request(
            broker_id,
            self.epoch(broker_id),
            self.next_offset,
            want_fence=want_fence,
            want_shut_down=want_shut_down,
        )
        result: dict[str, Any] = self.commit(self.controller.broker_heartbeat(request, self.now_ms))
        return result

    def keep_alive(self) -> None:
        """Every unfenced broker heartbeats now (as brokers do every broker.heartbeat.interval.ms)."""
        for b, reg in sorted(self.controller.cluster.registrations.items()):
            if not reg.fenced:
                self.heartbeat(b)

    def start_brokers(self, n: int, racks: list[str | None] | None = None) -> None:
        """Register and unfence brokers 0..n-1."""
        for b in range(n):
            self.register(b, racks[b] if racks else None)
        for b in range(n):
            self.heartbeat(b)

    def create_topic(self, name: str, partitions: int = -1, rf: int = -1, **kw: Any) -> dict[str, Any]:
        response = self.commit(
            self.controller.create_topics(create_topic_request(name, partitions, rf, **kw))
        )
        topic: dict[str, Any] = response["topics"][0]
        return topic

    def poll(self) -> int:
        """Run due periodic work until none is left; the number of records it committed."""
        n = 0
        while True:
            result = self.controller.poll(self.now_ms)
            if not result.records:
                return n
            n += len(result.records)
            self.commit(result)

    def rebuilt(self) -> QuorumController:
        """A fresh controller that replayed this one's committed log."""
        fresh = QuorumController(
            self.config, rnd=random.Random(0), cluster_id="test-cluster", validator=self.validator
        )
        for offset, record in enumerate(self.log):
            fresh.replay(record, offset)
        return fresh
