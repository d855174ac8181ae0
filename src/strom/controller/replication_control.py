"""Topics, partitions, leaders and ISRs: Kafka's ``ReplicationControlManager``.

Theory of operation.

Replicated state: topics by id and by name, each with its partitions as
:class:`~strom.controller.partitions.PartitionRegistration`. It changes only in :meth:`replay`
(``TopicRecord``, ``PartitionRecord``, ``PartitionChangeRecord``, ``RemoveTopicRecord``). Every
operation reads that state and returns records plus a response; the state it describes exists
only once the records are replayed. An operation that changes one partition twice (never done
here) would have to fold the first change in before building the second, so each operation
emits at most one ``PartitionChangeRecord`` per partition.

Who changes partitions:

* CreateTopics / CreatePartitions: the placer picks replicas; the ISR is the replicas that are
  active (unfenced and not shutting down); the first of them leads. Epochs start at 0.
* AlterPartition from a partition's leader: validated like Kafka (leader and partition epochs,
  the sender is the leader, ISR within the replicas and holding the leader, KIP-841: every
  new ISR member registered, active, with the broker epoch the leader saw), then built with the
  requested ISR; completing a reassignment may move the leader (NEW_LEADER_ELECTED).
* A broker fenced, shutting down or unregistered: removed from every ISR (never emptying it),
  and partitions it led elect a new leader among the remaining ISR (-1 when nobody is left and
  ``unclean.leader.election.enable`` is false for the topic).
* A broker unfenced: leaderless partitions whose ISR holds it elect it.
* ElectLeaders (PREFERRED / UNCLEAN) and the periodic preferred-leader rebalance.
* Reassignment: the target replicas are added (``adding_replicas``), catch up (join the ISR
  through AlterPartition), then the old ones leave (``removing_replicas``), the leader moving if
  it was one of them; a cancel reverts to the original replicas.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..metadata.records import PartitionChangeRecord, PartitionRecord, RemoveTopicRecord, TopicRecord
from ..metadata.topics import validate_topic_name
from ..protocol.errors import ErrorCode, KafkaError
from .cluster_control import ClusterControlManager, is_active
from .partitions import (
    NO_LEADER,
    RECOVERED,
    RECOVERING,
    Election,
    PartitionRegistration,
    build_change,
    has_preferred_leader,
    is_reassigning,
    preferred_leader,
)
from .placement import InvalidReplicationFactorError, PlacementSpec, StripedReplicaPlacer


@dataclass
class TopicControlInfo:
    name: str
    id: uuid.UUID
    parts: dict[int, PartitionRegistration] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ApiError:
    code: int
    message: str | None = None


NONE = ApiError(0)


# Kafka's DirectoryId.UNASSIGNED: a replica whose log dir the controller does not know yet
UNASSIGNED_DIR = uuid.UUID(int=0)

def _invalid_assignment(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)


class ReplicationControlManager:
    def __init__(
        self,
        cluster: ClusterControlManager,
        rnd: random.Random,
        *,
        default_num_partitions: int = 1,
        default_replication_factor: int = 1,
        unclean_leader_election: Callable[[str], bool] = lambda topic: False,
        new_topic_id: Callable[[], uuid.UUID] | None = None,
    ) -> None:
        self.cluster = cluster
        self.random = rnd
        self.placer = StripedReplicaPlacer(rnd)
        self.default_num_partitions = default_num_partitions
        self.default_replication_factor = default_replication_factor
        self.unclean_leader_election = unclean_leader_election
        self._new_topic_id = new_topic_id or (lambda: uuid.UUID(int=self.random.getrandbits(128), version=4))
        self.topics: dict[uuid.UUID, TopicControlInfo] = {}
        self.topics_by_name: dict[str, uuid.UUID] = {}

    # ---- queries -------------------------------------------------------------------------
    def topic(self, name: str) -> TopicControlInfo | None:
        tid = self.topics_by_name.get(name)
        return None if tid is None else self.topics[tid]

    def partitions(self) -> Iterator[tuple[TopicControlInfo, int, PartitionRegistration]]:
        for t in self.topics.values():
            for pid, part in t.parts.items():
                yield t, pid, part

    def leads_partitions(self, broker_id: int) -> bool:
        return any(p.leader == broker_id for _, _, p in self.partitions())

    # ---- CreateTopics --------------------------------------------------------------------
    def create_topic(
        self, topic: Any, validate_config: Callable[[str, dict[str, str | None]], list[Any]]
    ) -> tuple[list[Any], dict[str, Any]]:
        """Records and the ``CreatableTopicResult`` fields for one topic of a CreateTopics.

        ``validate_config(name, configs)`` returns the topic's ConfigRecords or raises KafkaError.
        Raises KafkaError for every refusal (the caller turns it into the result's error).
        """
        name = str(topic.name)
        validate_topic_name(name)
        if name in self.topics_by_name:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        collision = name.replace(".", "_")
        for other in self.topics_by_name:
            if other.replace(".", "_") == collision:
                raise KafkaError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {other}"
                )
        configs = {str(c.name): c.value for c in topic.configs}
        config_records = validate_config(name, configs)
        assignments = list(topic.assignments or ())
        if assignments:
            if topic.replication_factor != -1:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    "A manual partition assignment was specified, but replication factor was not set to -1.",
                )
            if topic.num_partitions != -1:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    "A manual partition assignment was specified, but numPartitions was not set to -1.",
                )
            by_index: dict[int, list[int]] = {}
            rf: int | None = None
            for a in assignments:
                index = int(a.partition_index)
                if index in by_index:
                    raise _invalid_assignment(
                        f"Found multiple manual partition assignments for partition {index}"
                    )
                replicas = [int(b) for b in a.broker_ids]
                self._validate_manual_assignment(replicas, rf)
                rf = len(replicas)
                if not any(self.cluster.is_active(b) for b in replicas):
                    raise _invalid_assignment(
                        f"All brokers specified in the manual partition assignment for partition {index} "
                        "are fenced or in controlled shutdown."
                    )
                by_index[index] = replicas
            if sorted(by_index) != list(range(len(by_index))):
                raise _invalid_assignment("partitions should be a consecutive 0-based integer sequence")
            placed = [by_index[i] for i in range(len(by_index))]
        else:
            if topic.replication_factor < -1 or topic.replication_factor == 0:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
            if topic.num_partitions < -1 or topic.num_partitions == 0:
                raise KafkaError(
                    ErrorCode.INVALID_PARTITIONS,
                    "Number of partitions was set to an invalid non-positive value.",
                )
            num = self.default_num_partitions if topic.num_partitions == -1 else int(topic.num_partitions)
            rf = (
                self.default_replication_factor
                if topic.replication_factor == -1
                else int(topic.replication_factor)
            )
            placed = self._place(0, num, rf)
        topic_id = self._new_topic_id()
        while topic_id in self.topics or topic_id.int == 0:  # Kafka's Uuid.randomUuid avoids these too
            topic_id = self._new_topic_id()
        records: list[Any] = [TopicRecord(name=name, topic_id=topic_id)]
        records.extend(config_records)
        for pid, replicas in enumerate(placed):
            records.append(self._new_partition(replicas).to_record(topic_id, pid))
        result = {
            "topic_id": topic_id,
            "num_partitions": len(placed),
            "replication_factor": len(placed[0]),
        }
        return records, result

    def _place(self, start: int, num: int, rf: int) -> list[list[int]]:
        try:
            placed = self.placer.place(PlacementSpec(start, num, rf), self.cluster.usable_brokers())
        except InvalidReplicationFactorError as e:
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition {rf} time(s): {e}"
            ) from None
        for replicas in placed:
            if not any(self.cluster.is_active(b) for b in replicas):
                raise KafkaError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"Unable to replicate the partition {rf} time(s): "
                    "All brokers are currently fenced or in controlled shutdown.",
                )
        return placed

    def _new_partition(self, replicas: Sequence[int]) -> PartitionRegistration:
        isr = tuple(b for b in replicas if self.cluster.is_active(b))
        return PartitionRegistration(
            replicas=tuple(replicas), isr=isr, leader=isr[0], leader_epoch=0, partition_epoch=0
        )

    def _validate_manual_assignment(self, replicas: list[int], rf: int | None) -> None:
        if not replicas:
            raise _invalid_assignment("The manual partition assignment includes an empty replica list.")
        prev: int | None = None
        for b in sorted(replicas):
            if self.cluster.registration(b) is None:
                raise _invalid_assignment(
                    f"The manual partition assignment includes broker {b}, but no such broker is registered."
                )
            if b == prev:
                raise _invalid_assignment(
                    f"The manual partition assignment includes the broker {b} more than once."
                )
            prev = b
        if rf is not None and len(replicas) != rf:
            raise _invalid_assignment(
                f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but "
                f"this is not consistent with previous partitions, which have {rf} replica(s)."
            )

    # ---- DeleteTopics --------------------------------------------------------------------
    def delete_topic(
        self, name: str | None, topic_id: uuid.UUID | None
    ) -> tuple[RemoveTopicRecord, str, uuid.UUID]:
        """The record deleting the topic named by ``name`` or ``topic_id``; raises KafkaError."""
        if topic_id is not None:
            info = self.topics.get(topic_id)
            if info is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")
        else:
            tid = self.topics_by_name.get(name or "")
            if tid is None:
                raise KafkaError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
                )
            info = self.topics[tid]
        return RemoveTopicRecord(topic_id=info.id), info.name, info.id

    # ---- CreatePartitions ----------------------------------------------------------------
    def create_partitions(self, topic: Any) -> list[PartitionRecord]:
        """Records adding partitions to one topic of a CreatePartitions; raises KafkaError."""
        info = self.topic(str(topic.name))
        if info is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
            )
        current = len(info.parts)
        count = int(topic.count)
        if count == current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
        if count < current:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {info.name} currently has {current} partition(s); "
                f"{count} would not be an increase.",
            )
        additional = count - current
        rf = len(info.parts[0].replicas)
        if topic.assignments is not None:
            if len(topic.assignments) != additional:
                raise _invalid_assignment(
                    f"Attempted to add {additional} additional partition(s), but only "
                    f"{len(topic.assignments)} assignment(s) were specified."
                )
            placed: list[list[int]] = []
            for a in topic.assignments:
                replicas = [int(b) for b in a.broker_ids]
                self._validate_manual_assignment(replicas, rf)
                if not any(self.cluster.is_active(b) for b in replicas):
                    raise _invalid_assignment(
                        f"All brokers specified in the manual partition assignment for partition "
                        f"{current + len(placed)} are fenced or in controlled shutdown."
                    )
                placed.append(replicas)
        else:
            placed = self._place(current, additional, rf)
        return [self._new_partition(r).to_record(info.id, current + i) for i, r in enumerate(placed)]

    # ---- AlterPartition ------------------------------------------------------------------
    def alter_partition(self, request: Any, api_version: int = 3) -> tuple[list[Any], dict[str, Any]]:
        records: list[Any] = []
        try:
            self.cluster.check_broker_epoch(int(request.broker_id), int(request.broker_epoch))
        except KafkaError as e:
            return [], {"throttle_time": 0, "error_code": e.code, "topics": []}
        topics_out = []
        for t in request.topics:
            tid = t.topic_id
            info = self.topics.get(tid)
            parts_out: list[dict[str, Any]] = []
            topics_out.append({"topic_id": tid, "partitions": parts_out})
            for pd in t.partitions:
                pid = int(pd.partition_index)
                if info is None:
                    unknown = (
                        ErrorCode.UNKNOWN_TOPIC_ID
                        if api_version > 1
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    )
                    parts_out.append({"partition_index": pid, "error_code": unknown})
                    continue
                part = info.parts.get(pid)
                error = self._validate_alter_partition(int(request.broker_id), part, pd, api_version)
                if error:
                    parts_out.append({"partition_index": pid, "error_code": error})
                    continue
                assert part is not None
                new_isr = [int(s.broker_id) for s in pd.new_isr_with_epochs]
                election = Election.UNCLEAN if self.unclean_leader_election(info.name) else Election.ONLINE
                change = build_change(
                    part,
                    info.id,
                    pid,
                    self.cluster.is_active,
                    target_isr=new_isr,
                    target_leader_recovery_state=int(pd.leader_recovery_state),
                    election=election,
                )
                if change is not None:
                    records.append(change)
                    part = part.merge(change)
                    if part.leader != int(request.broker_id):
                        code = (
                            ErrorCode.NEW_LEADER_ELECTED
                            if api_version > 1
                            else ErrorCode.FENCED_LEADER_EPOCH
                        )
                        parts_out.append({"partition_index": pid, "error_code": code})
                        continue
                parts_out.append(
                    {
                        "partition_index": pid,
                        "error_code": 0,
                        "leader_id": part.leader,
                        "leader_epoch": part.leader_epoch,
                        "isr": list(part.isr),
                        "leader_recovery_state": part.leader_recovery_state,
                        "partition_epoch": part.partition_epoch,
                    }
                )
        return records, {"throttle_time": 0, "error_code": 0, "topics": topics_out}

    def _validate_alter_partition(
        self, broker_id: int, part: PartitionRegistration | None, pd: Any, api_version: int
    ) -> int:
        if part is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if pd.leader_epoch > part.leader_epoch or pd.partition_epoch > part.partition_epoch:
            return ErrorCode.NOT_CONTROLLER  # the sender knows a newer state than this controller
        if pd.leader_epoch < part.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if broker_id != part.leader:
            return ErrorCode.INVALID_REQUEST
        if pd.partition_epoch < part.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION
        new_isr = [int(s.broker_id) for s in pd.new_isr_with_epochs]
        if not new_isr or len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(part.replicas):
            return ErrorCode.INVALID_REQUEST
        if part.leader not in new_isr:
            return ErrorCode.INVALID_REQUEST
        lrs = int(pd.leader_recovery_state)
        if lrs == RECOVERING and len(new_isr) > 1:
            return ErrorCode.INVALID_REQUEST
        if part.leader_recovery_state == RECOVERED and lrs == RECOVERING:
            return ErrorCode.INVALID_REQUEST
        for s in pd.new_isr_with_epochs:
            reg = self.cluster.registration(int(s.broker_id))
            if (
                reg is None
                or not is_active(reg)
                or (int(s.broker_epoch) != -1 and int(s.broker_epoch) != reg.epoch)
            ):
                return (
                    ErrorCode.INELIGIBLE_REPLICA
                    if api_version > 1
                    else ErrorCode.OPERATION_NOT_ATTEMPTED
                )
        return 0

    # ---- brokers leaving and coming back -------------------------------------------------
    def remove_broker_from_isrs(self, broker_id: int) -> list[PartitionChangeRecord]:
        """Fenced, shutting down or unregistered: out of every ISR, its leaderships moved.

        The broker is never an acceptable leader here, even while its registration still says
        otherwise (the fencing record is replayed together with these).
        """
        records = []
        for info, pid, part in self._sorted_partitions():
            if broker_id not in part.isr and part.leader != broker_id:
                continue
            unclean = self.unclean_leader_election(info.name)

            def acceptable(r: int) -> bool:
                return r != broker_id and self.cluster.is_active(r)

            change = build_change(
                part,
                info.id,
                pid,
                acceptable,
                target_isr=[r for r in part.isr if r != broker_id],
                election=Election.UNCLEAN if unclean else Election.ONLINE,
            )
            if change is not None:
                records.append(change)
        return records

    def handle_directories_offline(
        self, broker_id: int, offline: Collection[uuid.UUID]
    ) -> list[PartitionChangeRecord]:
        """KIP-858: the broker reported log dirs ``offline``. Its replicas recorded in one of them
        (the partitions' ``directories``, set by AssignReplicasToDirs) leave the ISR, and the
        partitions it led elect another leader; its other partitions are untouched."""
        records = []
        for info, pid, part in self._sorted_partitions():
            if part.directory(broker_id) not in offline:
                continue
            if broker_id not in part.isr and part.leader != broker_id:
                continue
            unclean = self.unclean_leader_election(info.name)

            def acceptable(r: int) -> bool:
                return r != broker_id and self.cluster.is_active(r)

            change = build_change(
                part, info.id, pid, acceptable,
                target_isr=[r for r in part.isr if r != broker_id],
                election=Election.UNCLEAN if unclean else Election.ONLINE,
            )
            if change is not None:
                records.append(change)
        return records

    def assign_replicas_to_dirs(self, broker_id: int, request: Any) -> tuple[list[Any], list[dict[str, Any]]]:
        """AssignReplicasToDirs: record in which log dir ``broker_id`` keeps each replica (the
        partition's ``directories``, one per replica, UNASSIGNED (the zero id) where unknown).
        Per partition UNKNOWN_TOPIC_ID or NOT_LEADER_OR_FOLLOWER (not a replica there)."""
        records: list[Any] = []
        out = []
        for d in request.directories:
            dir_id = d.id_
            topics = []
            for t in d.topics:
                info = self.topics.get(t.topic_id) if t.topic_id is not None else None
                parts = []
                for p in t.partitions:
                    pid = int(p.partition_index)
                    part = info.parts.get(pid) if info is not None else None
                    code = ErrorCode.NONE
                    if info is None or part is None:
                        code = ErrorCode.UNKNOWN_TOPIC_ID
                    elif broker_id not in part.replicas:
                        code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    elif dir_id is not None and part.directory(broker_id) != dir_id:
                        dirs = list(part.directories) if len(part.directories) == len(part.replicas) \
                            else [UNASSIGNED_DIR] * len(part.replicas)
                        dirs[part.replicas.index(broker_id)] = dir_id
                        records.append(PartitionChangeRecord(
                            partition_id=pid, topic_id=info.id, directories=tuple(dirs)))
                    parts.append({"partition_index": pid, "error_code": int(code)})
                topics.append({"topic_id": t.topic_id, "partitions": parts})
            out.append({"id_": dir_id, "topics": topics})
        return records, out

    def elect_for_unfenced_broker(self, broker_id: int) -> list[PartitionChangeRecord]:
        """Unfenced: leaderless partitions it may lead elect (it is acceptable before the replay)."""
        records = []
        for info, pid, part in self._sorted_partitions():
            if part.leader != NO_LEADER or broker_id not in part.replicas:
                continue
            unclean = self.unclean_leader_election(info.name)
            if broker_id not in part.isr and not unclean:
                continue

            def acceptable(r: int) -> bool:
                return r == broker_id or self.cluster.is_active(r)

            change = build_change(
                part, info.id, pid, acceptable, election=Election.UNCLEAN if unclean else Election.ONLINE
            )
            if change is not None:
                records.append(change)
        return records

    def _sorted_partitions(self) -> Iterator[tuple[TopicControlInfo, int, PartitionRegistration]]:
        for name in sorted(self.topics_by_name):
            info = self.topics[self.topics_by_name[name]]
            for pid in sorted(info.parts):
                yield info, pid, info.parts[pid]

    # ---- ElectLeaders --------------------------------------------------------------------
    def elect_leader(
        self, topic: str, pid: int, election: Election
    ) -> tuple[PartitionChangeRecord | None, ApiError]:
        info = self.topic(topic)
        if info is None:
            return None, ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}")
        part = info.parts.get(pid)
        if part is None:
            return None, ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-{pid}")
        if (election is Election.PREFERRED and has_preferred_leader(part)) or (
            election is Election.UNCLEAN and part.has_leader()
        ):
            return None, ApiError(ErrorCode.ELECTION_NOT_NEEDED)
        change = build_change(part, info.id, pid, self.cluster.is_active, election=election)
        if change is None:
            if election is Election.PREFERRED:
                return None, ApiError(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)
            return None, ApiError(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
        if election is Election.PREFERRED and part.merge(change).leader != preferred_leader(part):
            return change, ApiError(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)
        return change, NONE

    def elect_leaders(self, election: Election, topic_partitions: Any) -> tuple[list[Any], dict[str, Any]]:
        records: list[Any] = []
        results: dict[str, list[dict[str, Any]]] = {}
        explicit = topic_partitions is not None
        if explicit:
            wanted = [(str(tp.topic), int(p)) for tp in topic_partitions for p in tp.partitions]
        else:
            wanted = [(info.name, pid) for info, pid, _ in self._sorted_partitions()]
        for topic, pid in wanted:
            change, error = self.elect_leader(topic, pid, election)
            if change is not None:
                records.append(change)
            if explicit or error.code != ErrorCode.ELECTION_NOT_NEEDED:
                results.setdefault(topic, []).append(
                    {"partition_id": pid, "error_code": error.code, "error_message": error.message}
                )
        response = {
            "throttle_time": 0,
            "error_code": 0,
            "replica_election_results": [{"topic": t, "partition_result": r} for t, r in results.items()],
        }
        return records, response

    # ---- auto.leader.rebalance.enable ----------------------------------------------------
    def imbalanced_partitions(self, imbalance_percentage: int) -> list[tuple[str, int]]:
        """Partitions to give back to their preferred leader: those of every broker whose share of
        preferred partitions it does not lead exceeds ``leader.imbalance.per.broker.percentage``."""
        preferred: dict[int, list[tuple[str, int, PartitionRegistration]]] = {}
        for info, pid, part in self._sorted_partitions():
            if part.replicas:
                preferred.setdefault(preferred_leader(part), []).append((info.name, pid, part))
        out: list[tuple[str, int]] = []
        for broker in sorted(preferred):
            parts = preferred[broker]
            not_led = [(t, p) for t, p, part in parts if not has_preferred_leader(part)]
            if len(not_led) * 100 > imbalance_percentage * len(parts):
                out.extend(
                    (t, p)
                    for t, p, part in parts
                    if not has_preferred_leader(part)
                    and broker in part.isr
                    and self.cluster.is_active(broker)
                )
        return out

    def unclean_elections(self) -> list[PartitionChangeRecord]:
        """Leaderless partitions of topics that allow unclean election get a leader outside the
        ISR (Kafka's periodic ``electUnclean``: the config may have been turned on since)."""
        records = []
        for info, pid, part in self._sorted_partitions():
            if part.leader == NO_LEADER and self.unclean_leader_election(info.name):
                change = build_change(part, info.id, pid, self.cluster.is_active, election=Election.UNCLEAN)
                if change is not None:
                    records.append(change)
        return records

    def balance_partition_leaders(
        self, imbalance_percentage: int, skip: Collection[tuple[uuid.UUID, int]] = ()
    ) -> list[PartitionChangeRecord]:
        records = []
        for topic, pid in self.imbalanced_partitions(imbalance_percentage):
            info = self.topic(topic)
            if info is None or (info.id, pid) in skip:
                continue
            change, error = self.elect_leader(topic, pid, Election.PREFERRED)
            if change is not None and error.code == 0:
                records.append(change)
        return records

    # ---- partition reassignment ----------------------------------------------------------
    def alter_partition_reassignment(
        self, topic: str, pid: int, replicas: Sequence[int] | None
    ) -> PartitionChangeRecord | None:
        """The record starting, changing or cancelling one partition's reassignment (or None:
        nothing to do); raises KafkaError."""
        info = self.topic(topic)
        part = None if info is None else info.parts.get(pid)
        if info is None or part is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
            )
        original = [r for r in part.replicas if r not in part.adding_replicas]
        unclean = Election.UNCLEAN if self.unclean_leader_election(topic) else Election.ONLINE
        if replicas is None:
            if not is_reassigning(part):
                raise KafkaError(
                    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No reassignment is in progress."
                )
            isr = [r for r in part.isr if r not in part.adding_replicas] or list(part.isr)
            return build_change(
                part,
                info.id,
                pid,
                self.cluster.is_active,
                target_isr=isr,
                target_replicas=original,
                target_adding=(),
                target_removing=(),
                election=unclean,
            )
        target = [int(r) for r in replicas]
        try:
            self._validate_manual_assignment(target, None)
        except KafkaError as e:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, str(e)) from None
        if target == list(part.replicas) and not is_reassigning(part):
            return None
        removing = [r for r in original if r not in target]
        adding = [r for r in target if r not in original]
        merged = target + removing
        isr = [r for r in part.isr if r in merged] or list(part.isr)
        return build_change(
            part,
            info.id,
            pid,
            self.cluster.is_active,
            target_isr=isr,
            target_replicas=merged,
            target_adding=adding,
            target_removing=removing,
            election=unclean,
        )

    def list_reassignments(self, topics: Iterable[Any] | None) -> list[dict[str, Any]]:
        out = []
        if topics is None:
            wanted: list[tuple[str, list[int] | None]] = [(n, None) for n in sorted(self.topics_by_name)]
        else:
            wanted = [(str(t.name), [int(p) for p in t.partition_indexes]) for t in topics]
        for name, pids in wanted:
            info = self.topic(name)
            if info is None:
                continue
            parts = []
            for pid in sorted(info.parts) if pids is None else pids:
                part = info.parts.get(pid)
                if part is not None and is_reassigning(part):
                    parts.append(
                        {
                            "partition_index": pid,
                            "replicas": list(part.replicas),
                            "adding_replicas": list(part.adding_replicas),
                            "removing_replicas": list(part.removing_replicas),
                        }
                    )
            if parts:
                out.append({"name": name, "partitions": parts})
        return out

    # ---- replay --------------------------------------------------------------------------
    def replay(self, record: Any) -> None:
        if isinstance(record, TopicRecord):
            self.topics[record.topic_id] = TopicControlInfo(record.name, record.topic_id)
            self.topics_by_name[record.name] = record.topic_id
        elif isinstance(record, PartitionRecord):
            self.topics[record.topic_id].parts[record.partition_id] = PartitionRegistration.from_record(
                record
            )
        elif isinstance(record, PartitionChangeRecord):
            info = self.topics[record.topic_id]
            info.parts[record.partition_id] = info.parts[record.partition_id].merge(record)
        elif isinstance(record, RemoveTopicRecord):
            info = self.topics.pop(record.topic_id)
            del self.topics_by_name[info.name]

    def to_records(self) -> list[Any]:
        out: list[Any] = []
        for name in sorted(self.topics_by_name):
            info = self.topics[self.topics_by_name[name]]
            out.append(TopicRecord(name=info.name, topic_id=info.id))
            out.extend(info.parts[p].to_record(info.id, p) for p in sorted(info.parts))
        return out
