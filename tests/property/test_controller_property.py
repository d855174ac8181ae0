"""Random controller operation sequences: the partition invariants hold after every committed step,
and replaying the committed records (or a snapshot) on a fresh controller rebuilds the same state.

Invariants checked after every operation:

* ISR ⊆ replicas, adding/removing ⊆ replicas, the ISR never empty;
* the leader is in the ISR, or -1;
* no fenced or shutting-down broker leads; one that is in an ISR is the last member of a
  leaderless partition (kept there so that it can lead again: unclean election disabled);
* a broker joining an ISR (or becoming leader) is active when its record commits;
* partition epochs increase by one per change, leader epochs never decrease.
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.alter_partition_reassignments.v0 import request as apr
from kio.schema.create_partitions.v3 import request as cp
from kio.schema.delete_topics.v6 import request as dt
from kio.schema.elect_leaders.v2 import request as el
from kio.schema.incremental_alter_configs.v1 import request as iac
from kio.schema.unregister_broker.v0.request import UnregisterBrokerRequest
from kio.static.primitive import i8, i32

from strom.controller import ControllerConfig, ControllerResult, PartitionRegistration, QuorumController
from strom.controller.partitions import NO_LEADER
from strom.metadata.delta import MetadataDelta
from strom.metadata.image import MetadataImage
from strom.metadata.records import PartitionChangeRecord
from strom.testing.controller import ControllerHarness, alter_partition_request

BROKERS = range(6)
TOPICS = ["t0", "t1", "t2"]

OPS = st.sampled_from(
    [
        "register",
        "register_new",
        "heartbeat",
        "fence",
        "shutdown",
        "silence",
        "create",
        "delete",
        "grow",
        "shrink_isr",
        "expand_isr",
        "stale_alter",
        "elect_preferred",
        "elect_unclean",
        "reassign",
        "cancel",
        "unregister",
        "unclean_config",
        "keep_alive",
    ]
)


def snapshot(c: QuorumController) -> Any:
    return (
        dict(c.cluster.registrations),
        {t.name: (t.id, dict(t.parts)) for t in c.replication.topics.values()},
        {k: dict(v) for k, v in c.configs.configs.items()},
        c.producer_ids.next_producer_id,
        dict(c.features.finalized),
    )


def check_invariants(c: QuorumController) -> None:
    for info, pid, p in c.replication.partitions():
        where = f"{info.name}-{pid} {p}"
        assert p.isr, where
        assert set(p.isr) <= set(p.replicas), where
        assert set(p.adding_replicas) <= set(p.replicas) and set(p.removing_replicas) <= set(p.replicas), (
            where
        )
        assert len(set(p.replicas)) == len(p.replicas), where
        if p.leader != NO_LEADER:
            assert p.leader in p.isr, where
            assert c.cluster.is_active(p.leader), where
        inactive = [b for b in p.isr if not c.cluster.is_active(b)]
        if inactive:
            assert p.leader == NO_LEADER and len(p.isr) == 1, where


class Checked(ControllerHarness):
    """A harness that checks each PartitionChangeRecord against the state just before its replay."""

    def commit(self, result: Any) -> Any:
        c = self.controller
        for record in result.records:
            if isinstance(record, PartitionChangeRecord):
                before: PartitionRegistration = c.replication.topics[record.topic_id].parts[
                    record.partition_id
                ]
                after = before.merge(record)
                assert after.partition_epoch == before.partition_epoch + 1
                assert after.leader_epoch >= before.leader_epoch
                for b in set(after.isr) - set(before.isr):
                    assert c.cluster.is_active(b), f"{b} joined the ISR of {before} while inactive"
                if after.leader not in (before.leader, NO_LEADER):
                    assert c.cluster.is_active(after.leader), (
                        f"{after.leader} elected in {before} while inactive"
                    )
            super().commit(ControllerResult([record]))
        return result.response


def step(h: Checked, data: st.DataObject, op: str) -> None:
    c = h.controller
    registered = sorted(c.cluster.registrations)
    topics = sorted(c.replication.topics_by_name)
    if op in ("register", "register_new"):
        h.register(
            data.draw(st.sampled_from(list(BROKERS))),
            rack=data.draw(st.sampled_from([None, "a", "b"])),
            new_incarnation=op == "register_new",
        )
    elif op in ("heartbeat", "fence", "shutdown") and registered:
        b = data.draw(st.sampled_from(registered))
        h.heartbeat(b, want_fence=op == "fence", want_shut_down=op == "shutdown")
    elif op == "silence":
        h.advance(data.draw(st.integers(0, 12_000)))
        h.poll()
    elif op == "keep_alive":
        h.advance(data.draw(st.integers(0, 3_000)))
        h.keep_alive()
        h.poll()
    elif op == "create":
        h.create_topic(
            data.draw(st.sampled_from(TOPICS)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
        )
    elif op == "delete" and topics:
        name = data.draw(st.sampled_from(topics))
        tid = c.replication.topics_by_name[name]
        by_id = data.draw(st.booleans())
        request = dt.DeleteTopicsRequest(
            topics=(
                dt.DeleteTopicState(
                    name=None if by_id else name, topic_id=tid if by_id else uuid.UUID(int=0)
                ),
            ),  # type: ignore[arg-type]
            timeout=i32(1),  # type: ignore[arg-type]
        )
        h.commit(c.delete_topics(request))
    elif op == "grow" and topics:
        name = data.draw(st.sampled_from(topics))
        count = len(c.replication.topics[c.replication.topics_by_name[name]].parts) + data.draw(
            st.integers(1, 2)
        )
        request = cp.CreatePartitionsRequest(
            topics=(cp.CreatePartitionsTopic(name=name, count=i32(count), assignments=None),),  # type: ignore[arg-type]
            timeout=i32(1),  # type: ignore[arg-type]
            validate_only=False,
        )
        h.commit(c.create_partitions(request))
    elif op in ("shrink_isr", "expand_isr", "stale_alter") and topics:
        info = c.replication.topics[c.replication.topics_by_name[data.draw(st.sampled_from(topics))]]
        pid = data.draw(st.sampled_from(sorted(info.parts)))
        p = info.parts[pid]
        if p.leader == NO_LEADER:
            return
        if op == "shrink_isr":
            isr = [p.leader] + [b for b in p.isr if b != p.leader and data.draw(st.booleans())]
        else:
            isr = [p.leader] + [b for b in p.replicas if b != p.leader and data.draw(st.booleans())]
        epochs = [(b, reg.epoch if (reg := c.cluster.registration(b)) else -1) for b in isr]
        pe = p.partition_epoch - 1 if op == "stale_alter" else p.partition_epoch
        leader_reg = c.cluster.registration(p.leader)
        assert leader_reg is not None
        request = alter_partition_request(
            p.leader, leader_reg.epoch, info.id, pid, p.leader_epoch, pe, epochs
        )
        h.commit(c.alter_partition(request))
    elif op in ("elect_preferred", "elect_unclean"):
        request = el.ElectLeadersRequest(
            election_type=i8(1 if op == "elect_unclean" else 0),
            topic_partitions=None,
            timeout=i32(1),  # type: ignore[arg-type]
        )
        h.commit(c.elect_leaders(request))
    elif op in ("reassign", "cancel") and topics and registered:
        name = data.draw(st.sampled_from(topics))
        info = c.replication.topics[c.replication.topics_by_name[name]]
        pid = data.draw(st.sampled_from(sorted(info.parts)))
        replicas = None
        if op == "reassign":
            replicas = tuple(
                i32(b)
                for b in data.draw(st.lists(st.sampled_from(registered), min_size=1, max_size=3, unique=True))
            )
        request = apr.AlterPartitionReassignmentsRequest(
            timeout=i32(1),  # type: ignore[arg-type]
            topics=(
                apr.ReassignableTopic(
                    name=name,
                    partitions=(apr.ReassignablePartition(partition_index=i32(pid), replicas=replicas),),
                ),
            ),  # type: ignore[arg-type]
        )
        h.commit(c.alter_partition_reassignments(request))
    elif op == "unregister" and registered:
        h.commit(
            c.unregister_broker(
                UnregisterBrokerRequest(broker_id=i32(data.draw(st.sampled_from(registered))))
            )
        )  # type: ignore[arg-type]
    elif op == "unclean_config" and topics:
        request = iac.IncrementalAlterConfigsRequest(
            resources=(
                iac.AlterConfigsResource(
                    resource_type=i8(2),
                    resource_name=data.draw(st.sampled_from(topics)),
                    configs=(
                        iac.AlterableConfig(
                            name="unclean.leader.election.enable",
                            config_operation=i8(0),
                            value=data.draw(st.sampled_from(["true", "false"])),
                        ),
                    ),
                ),
            ),
            validate_only=False,
        )
        h.commit(c.incremental_alter_configs(request))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.integers(0, 2**16))
def test_random_operations_keep_invariants_and_replay_to_the_same_state(
    data: st.DataObject, seed: int
) -> None:
    h = Checked(ControllerConfig(leader_imbalance_check_interval_seconds=5), seed=seed)
    for b in range(data.draw(st.integers(0, 5))):
        h.register(b)
        h.heartbeat(b)
    for _ in range(data.draw(st.integers(1, 30))):
        step(h, data, data.draw(OPS))
        check_invariants(h.controller)
    rebuilt = h.rebuilt()
    assert snapshot(rebuilt) == snapshot(h.controller)
    from_snapshot = QuorumController()
    for record in h.controller.snapshot_records():
        from_snapshot.replay(record)
    assert snapshot(from_snapshot) == snapshot(h.controller)
    # the brokers' metadata image agrees: built from the log, from the controller's snapshot, and
    # the image's own snapshot (Kafka's image.to_records) loads a controller to the same state
    image = image_of(h.log)
    assert image.same_content(image_of(h.controller.snapshot_records()))
    for info in h.controller.replication.topics.values():
        topic = image.topics.get_topic(info.id)
        assert topic is not None and topic.name == info.name and dict(topic.partitions) == info.parts
    assert dict(image.cluster.brokers) == h.controller.cluster.registrations
    from_image = QuorumController()
    for record in image.to_records():
        from_image.replay(record)
    assert snapshot(from_image) == snapshot(h.controller)


def image_of(records: list[Any]) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.EMPTY)
    for record in records:
        delta.replay(record)
    return delta.apply()
