"""The controller as one replayable state machine: Kafka's ``QuorumController`` without the I/O.

Theory of operation (DESIGN.md lesson 6, like strom's coordinators).

Every operation (one per controller API, plus the periodic ones) reads the managers' state and
returns a :class:`~strom.controller.result.ControllerResult`: the metadata records to commit and
the response to send once they are committed. Operations never mutate replicated state; only
:meth:`QuorumController.replay` does, one record at a time, and it is the same path for the
active controller, for standby controllers (as the log commits) and for recovery (snapshot, then
log).

The runtime contract, as Kafka's active controller: append an operation's records as one batch
and replay them at once, before running the next operation, so that the next operation sees
them (two CreateTopics of one name cannot both succeed); answer when the batch commits. If the
append fails or leadership is lost, the uncommitted records must be forgotten: drop this
controller and rebuild one from the last committed snapshot and log (Kafka reverts its timeline
data structures to the last committed offset).

The managers, each owning a slice of the state:

* :class:`ClusterControlManager`: broker registrations, heartbeats, fencing;
* :class:`ReplicationControlManager`: topics, partitions, leaders, ISRs, reassignments;
* :class:`ConfigurationControlManager`: dynamic topic and broker configs;
* :class:`ProducerIdControlManager`: producer-id blocks;
* :class:`FeatureControlManager`: finalized feature levels;
* :class:`ScramControlManager`: SCRAM credentials (AlterUserScramCredentials).

Randomness: seed it in tests; in production leave it unseeded, since a controller that takes
over with the same seed as its predecessor would draw the same topic ids again (ids already in use
are skipped, but an id of a deleted topic is not known any more).

Soft state, never in the log and rebuilt when a controller becomes active (:meth:`activate`):
the brokers' last heartbeat times and reported metadata offsets, and the periodic tasks'
deadlines. Time comes from the
``now_ms`` arguments and randomness (replica placement, topic ids) from the injected
``random.Random``: no clock reads, no I/O, no asyncio.

Periodic work (:meth:`poll`): fence one broker whose session expired (the runtime polls again
after replaying, until nothing is left), and every ``leader.imbalance.check.interval.seconds``
elect unclean leaders where a topic allows it and nobody leads, and with
``auto.leader.rebalance.enable`` move leadership back to preferred leaders of brokers whose
imbalance exceeds ``leader.imbalance.per.broker.percentage``.

Requests are kio request objects (or anything with the same attribute names); responses are dicts
with kio's response field names, the shape strom's handlers return.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..metadata.records import (
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)
from ..protocol.errors import ErrorCode, KafkaError
from .acl_control import AclControlManager
from .cluster_control import DEFAULT_SESSION_TIMEOUT_MS, BrokerState, ClusterControlManager, broker_state
from .config_control import BROKER, TOPIC, ConfigurationControlManager, Validator, default_validator
from .features import BOOTSTRAP_LEVELS, FeatureControlManager
from .features import bootstrap_records as feature_bootstrap_records
from .partitions import Election
from .producer_ids import PRODUCER_ID_BLOCK_SIZE, ProducerIdControlManager
from .quota_control import ClientQuotaControlManager
from .replication_control import ReplicationControlManager
from .result import ControllerResult
from .scram_control import ScramControlManager


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The broker configs the controller reads (Kafka's names and defaults)."""

    num_partitions: int = 1
    default_replication_factor: int = 1
    broker_session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_seconds: int = 300
    delete_topic_enable: bool = True


# the API keys the controller serves
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
CREATE_PARTITIONS = 37
ELECT_LEADERS = 43
INCREMENTAL_ALTER_CONFIGS = 44
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
ALTER_PARTITION = 56
BROKER_REGISTRATION = 62
BROKER_HEARTBEAT = 63
UNREGISTER_BROKER = 64
UPDATE_FEATURES = 57
ALLOCATE_PRODUCER_IDS = 67
ALTER_USER_SCRAM_CREDENTIALS = 51
ASSIGN_REPLICAS_TO_DIRS = 73
CREATE_ACLS = 30
ALTER_CLIENT_QUOTAS = 49
DELETE_ACLS = 31
CONTROLLER_APIS = frozenset(
    {
        ASSIGN_REPLICAS_TO_DIRS,
        CREATE_TOPICS,
        DELETE_TOPICS,
        DESCRIBE_CONFIGS,
        ALTER_CONFIGS,
        CREATE_PARTITIONS,
        ELECT_LEADERS,
        INCREMENTAL_ALTER_CONFIGS,
        ALTER_PARTITION_REASSIGNMENTS,
        LIST_PARTITION_REASSIGNMENTS,
        ALTER_PARTITION,
        BROKER_REGISTRATION,
        BROKER_HEARTBEAT,
        UNREGISTER_BROKER,
        UPDATE_FEATURES,
        ALLOCATE_PRODUCER_IDS,
        ALTER_USER_SCRAM_CREDENTIALS,
        CREATE_ACLS,
        DELETE_ACLS,
        ALTER_CLIENT_QUOTAS,
    }
)


def _true(value: str | None, default: bool) -> bool:
    return default if value is None else value.strip().lower() == "true"


class QuorumController:
    def __init__(
        self,
        config: ControllerConfig | None = None,
        *,
        rnd: random.Random | None = None,
        cluster_id: str | None = None,
        validator: Validator = default_validator,
    ) -> None:
        self.config = config or ControllerConfig()
        # unseeded by default: a controller taking over must not replay its predecessor's draws
        self.random = rnd or random.Random()
        self.cluster = ClusterControlManager(cluster_id, self.config.broker_session_timeout_ms)
        self.features = FeatureControlManager()
        self.configs = ConfigurationControlManager(
            validator, lambda name: self.replication.topic(name) is not None
        )
        self.replication = ReplicationControlManager(
            self.cluster,
            self.random,
            default_num_partitions=self.config.num_partitions,
            default_replication_factor=self.config.default_replication_factor,
            unclean_leader_election=self._unclean_enabled,
        )
        self.producer_ids = ProducerIdControlManager(self.cluster)
        self.scram = ScramControlManager()
        self.acls = AclControlManager(self.random)
        self.quotas = ClientQuotaControlManager()
        self.last_applied_offset = -1
        self._next_rebalance_ms: int | None = None

    def _unclean_enabled(self, topic: str) -> bool:
        value = self.configs.topic_config(topic, "unclean.leader.election.enable")
        if value is None:
            value = self.configs.cluster_config("unclean.leader.election.enable")
        return _true(value, self.config.unclean_leader_election_enable)

    # ---- log side ------------------------------------------------------------------------
    @staticmethod
    def bootstrap_records(levels: Mapping[str, int] = BOOTSTRAP_LEVELS) -> list[Any]:
        """The records a new cluster's metadata log starts with."""
        return list(feature_bootstrap_records(levels))

    def replay(self, record: Any, offset: int | None = None) -> None:
        """Apply one committed record (the only way replicated state changes)."""
        if isinstance(
            record,
            RegisterBrokerRecord
            | UnregisterBrokerRecord
            | BrokerRegistrationChangeRecord
            | FenceBrokerRecord
            | UnfenceBrokerRecord,
        ):
            self.cluster.replay(record, offset)
        elif isinstance(record, TopicRecord | PartitionRecord | PartitionChangeRecord):
            self.replication.replay(record)
        elif isinstance(record, RemoveTopicRecord):
            info = self.replication.topics.get(record.topic_id)
            self.replication.replay(record)
            if info is not None:
                self.configs.remove_topic(info.name)
        elif isinstance(record, ConfigRecord):
            self.configs.replay(record)
        elif isinstance(record, ProducerIdsRecord):
            self.producer_ids.replay(record)
        elif isinstance(record, FeatureLevelRecord):
            self.features.replay(record)
        elif isinstance(record, UserScramCredentialRecord | RemoveUserScramCredentialRecord):
            self.scram.replay(record)
        elif isinstance(record, AccessControlEntryRecord | RemoveAccessControlEntryRecord):
            self.acls.replay(record)
        elif isinstance(record, ClientQuotaRecord):
            self.quotas.replay(record)
        if offset is not None:
            self.last_applied_offset = offset

    def snapshot_records(self) -> list[Any]:
        """Records that rebuild this state on a fresh controller (a snapshot's content)."""
        return [
            *self.features.to_records(),
            *self.cluster.to_records(),
            *self.replication.to_records(),
            *self.configs.to_records(),
            *self.producer_ids.to_records(),
            *self.scram.to_records(),
            *self.acls.to_records(),
            *self.quotas.to_records(),
        ]

    def activate(self, now_ms: int) -> None:
        """This controller became the active one: start soft state afresh."""
        self.cluster.activate(now_ms)
        self._next_rebalance_ms = now_ms + self.config.leader_imbalance_check_interval_seconds * 1000

    # ---- dispatch ------------------------------------------------------------------------
    def handle(
        self, api_key: int, request: Any, *, api_version: int = -1, now_ms: int = 0, next_offset: int = -1
    ) -> ControllerResult[dict[str, Any]]:
        """Run the operation for a request of ``api_key`` (what a forwarded or controller-bound
        request becomes). ``next_offset``: the offset the result's first record will get (a
        BrokerRegistration's epoch). Raises KeyError for an API the controller does not serve."""
        if api_key == BROKER_REGISTRATION:
            return self.register_broker(request, next_offset, now_ms)
        if api_key == BROKER_HEARTBEAT:
            return self.broker_heartbeat(request, now_ms)
        if api_key == ALTER_PARTITION:
            return self.alter_partition(request, 3 if api_version < 0 else api_version)
        if api_key == ASSIGN_REPLICAS_TO_DIRS:
            return self.assign_replicas_to_dirs(request)
        operation: Callable[[Any], ControllerResult[dict[str, Any]]] = {
            CREATE_TOPICS: self.create_topics,
            DELETE_TOPICS: self.delete_topics,
            CREATE_PARTITIONS: self.create_partitions,
            DESCRIBE_CONFIGS: self.describe_configs,
            ALTER_CONFIGS: self.legacy_alter_configs,
            INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            ELECT_LEADERS: self.elect_leaders,
            ALTER_PARTITION_REASSIGNMENTS: self.alter_partition_reassignments,
            LIST_PARTITION_REASSIGNMENTS: self.list_partition_reassignments,
            UNREGISTER_BROKER: self.unregister_broker,
            ALLOCATE_PRODUCER_IDS: self.allocate_producer_ids,
            UPDATE_FEATURES: self.update_features,
            ALTER_USER_SCRAM_CREDENTIALS: self.alter_user_scram_credentials,
            CREATE_ACLS: self.create_acls,
            DELETE_ACLS: self.delete_acls,
            ALTER_CLIENT_QUOTAS: self.alter_client_quotas,
        }[api_key]
        return operation(request)

    # ---- brokers -------------------------------------------------------------------------
    def register_broker(
        self, request: Any, broker_epoch: int, now_ms: int
    ) -> ControllerResult[dict[str, Any]]:
        """BrokerRegistration. ``broker_epoch`` is the offset the RegisterBrokerRecord will get."""
        try:
            record = self.cluster.register_broker(
                request, broker_epoch, now_ms, dict(self.features.finalized)
            )
        except KafkaError as e:
            return ControllerResult([], {"throttle_time": 0, "error_code": e.code, "broker_epoch": -1})
        self.cluster.touch(record.broker_id, now_ms)
        records: list[Any] = [record]
        old = self.cluster.registration(record.broker_id)
        if old is not None and old.epoch != record.broker_epoch and not old.fenced:
            # a new incarnation starts fenced: the old one's ISR places and leaderships go first
            records[:0] = self.replication.remove_broker_from_isrs(old.id)
        return ControllerResult(
            records, {"throttle_time": 0, "error_code": 0, "broker_epoch": record.broker_epoch}
        )

    def broker_heartbeat(self, request: Any, now_ms: int) -> ControllerResult[dict[str, Any]]:
        broker_id = int(request.broker_id)
        try:
            self.cluster.check_broker_epoch(broker_id, int(request.broker_epoch))
        except KafkaError as e:  # unknown broker or old epoch: STALE_BROKER_EPOCH, it registers again
            return self._heartbeat_error(e.code)
        reg = self.cluster.registration(broker_id)
        assert reg is not None
        self.cluster.touch(broker_id, now_ms, int(request.current_metadata_offset))
        state = broker_state(reg)
        nxt = self.cluster.next_state(reg, request, lambda: self.replication.leads_partitions(broker_id))
        records: list[Any] = []
        if nxt is not state:
            if nxt is BrokerState.UNFENCED:
                records.append(self.cluster.unfence_record(reg))
                records.extend(self.replication.elect_for_unfenced_broker(broker_id))
            elif nxt is BrokerState.CONTROLLED_SHUTDOWN:
                records.append(self.cluster.controlled_shutdown_record(reg))
                records.extend(self.replication.remove_broker_from_isrs(broker_id))
            elif nxt is BrokerState.FENCED or (nxt is BrokerState.SHUTDOWN_NOW and not reg.fenced):
                records.extend(self.replication.remove_broker_from_isrs(broker_id))
                if nxt is BrokerState.SHUTDOWN_NOW:
                    records.append(self.cluster.shutdown_now_record(reg))
                else:
                    records.append(self.cluster.fence_record(reg))
        offline = set(getattr(request, "offline_log_dirs", None) or ()) & set(reg.directories)
        if offline and not reg.fenced:
            # KIP-858: replicas on the failed dirs leave their ISRs (leaderships move); the
            # registration keeps the dirs still online, so this happens once per failed dir
            records.extend(self.replication.handle_directories_offline(broker_id, offline))
            online = tuple(d for d in reg.directories if d not in offline)
            if online:
                records.append(BrokerRegistrationChangeRecord(
                    broker_id=broker_id, broker_epoch=reg.epoch, log_dirs=online))
        response = {
            "throttle_time": 0,
            "error_code": 0,
            "is_caught_up": int(request.current_metadata_offset) >= self.cluster.register_offset(broker_id),
            "is_fenced": nxt in (BrokerState.FENCED, BrokerState.SHUTDOWN_NOW),
            "should_shut_down": nxt is BrokerState.SHUTDOWN_NOW,
        }
        return ControllerResult(records, response)

    @staticmethod
    def _heartbeat_error(code: int) -> ControllerResult[dict[str, Any]]:
        return ControllerResult(
            [],
            {
                "throttle_time": 0,
                "error_code": code,
                "is_caught_up": False,
                "is_fenced": True,
                "should_shut_down": False,
            },
        )

    def assign_replicas_to_dirs(self, request: Any) -> ControllerResult[dict[str, Any]]:
        """AssignReplicasToDirs (KIP-858): where a broker keeps its replicas."""
        broker_id = int(request.broker_id)
        try:
            self.cluster.check_broker_epoch(broker_id, int(request.broker_epoch))
        except KafkaError as e:
            return ControllerResult([], {"throttle_time": 0, "error_code": e.code, "directories": []})
        records, out = self.replication.assign_replicas_to_dirs(broker_id, request)
        return ControllerResult(records, {"throttle_time": 0, "error_code": 0, "directories": out})

    def unregister_broker(self, request: Any) -> ControllerResult[dict[str, Any]]:
        reg = self.cluster.registration(int(request.broker_id))
        if reg is None:
            return ControllerResult(
                [],
                {
                    "throttle_time": 0,
                    "error_code": ErrorCode.BROKER_ID_NOT_REGISTERED,
                    "error_message": f"Broker ID {int(request.broker_id)} is not currently registered",
                },
            )
        records: list[Any] = [
            *self.replication.remove_broker_from_isrs(reg.id),
            self.cluster.unregister_record(reg),
        ]
        return ControllerResult(records, {"throttle_time": 0, "error_code": 0, "error_message": None})

    # ---- topics --------------------------------------------------------------------------
    def create_topics(self, request: Any) -> ControllerResult[dict[str, Any]]:
        records: list[Any] = []
        out = []
        validate_only = bool(getattr(request, "validate_only", False))
        names = [str(t.name) for t in request.topics]
        taken: set[str] = set()
        for topic in request.topics:
            name = str(topic.name)
            entry: dict[str, Any] = {
                "name": name,
                "topic_id": uuid.UUID(int=0),
                "error_code": 0,
                "error_message": None,
                "topic_config_error_code": 0,
                "num_partitions": -1,
                "replication_factor": -1,
                "configs": [],
            }
            out.append(entry)
            if names.count(name) > 1:
                entry.update(error_code=ErrorCode.INVALID_REQUEST, error_message="Duplicate topic name.")
                continue
            collision = name.replace(".", "_")
            if collision in taken:
                entry.update(
                    error_code=ErrorCode.INVALID_TOPIC_EXCEPTION,
                    error_message=f"Topic '{name}' collides with another topic in this request.",
                )
                continue
            try:
                topic_records, result = self.replication.create_topic(topic, self.configs.creation_records)
            except KafkaError as e:
                entry.update(error_code=e.code, error_message=str(e))
                continue
            taken.add(collision)
            entry.update(result)
            if not validate_only:
                records.extend(topic_records)
        return ControllerResult(records, {"throttle_time": 0, "topics": out})

    def delete_topics(self, request: Any) -> ControllerResult[dict[str, Any]]:
        records: list[Any] = []
        out = []
        seen: set[uuid.UUID] = set()
        states = list(getattr(request, "topics", None) or ())
        if not states:
            states = [_NamedTopic(str(n)) for n in getattr(request, "topic_names", ())]
        for s in states:
            name = s.name
            tid = s.topic_id if s.topic_id is not None and s.topic_id.int != 0 else None
            entry: dict[str, Any] = {
                "name": name,
                "topic_id": tid or uuid.UUID(int=0),
                "error_code": 0,
                "error_message": None,
            }
            out.append(entry)
            if not self.config.delete_topic_enable:
                entry.update(
                    error_code=ErrorCode.TOPIC_DELETION_DISABLED, error_message="Topic deletion is disabled."
                )
                continue
            try:
                record, name, tid = self.replication.delete_topic(None if tid else name, tid)
            except KafkaError as e:
                entry.update(error_code=e.code, error_message=str(e))
                continue
            entry.update(name=name, topic_id=tid)
            if tid not in seen:
                seen.add(tid)
                records.append(record)
        return ControllerResult(records, {"throttle_time": 0, "responses": out})

    def create_partitions(self, request: Any) -> ControllerResult[dict[str, Any]]:
        records: list[Any] = []
        out = []
        names = [str(t.name) for t in request.topics]
        for topic in request.topics:
            name = str(topic.name)
            entry: dict[str, Any] = {"name": name, "error_code": 0, "error_message": None}
            out.append(entry)
            if names.count(name) > 1:
                entry.update(error_code=ErrorCode.INVALID_REQUEST, error_message="Duplicate topic name.")
                continue
            try:
                new = self.replication.create_partitions(topic)
            except KafkaError as e:
                entry.update(error_code=e.code, error_message=str(e))
                continue
            if not request.validate_only:
                records.extend(new)
        return ControllerResult(records, {"throttle_time": 0, "results": out})

    # ---- leaders and ISRs ----------------------------------------------------------------
    def alter_partition(self, request: Any, api_version: int = 3) -> ControllerResult[dict[str, Any]]:
        records, response = self.replication.alter_partition(request, api_version)
        return ControllerResult(records, response)

    def elect_leaders(self, request: Any) -> ControllerResult[dict[str, Any]]:
        # (v0 has no election type: preferred)
        election = Election.UNCLEAN if int(getattr(request, "election_type", 0)) == 1 else Election.PREFERRED
        records, response = self.replication.elect_leaders(election, request.topic_partitions)
        return ControllerResult(records, response)

    def alter_partition_reassignments(self, request: Any) -> ControllerResult[dict[str, Any]]:
        records: list[Any] = []
        out = []
        for topic in request.topics:
            parts = []
            for p in topic.partitions:
                entry: dict[str, Any] = {
                    "partition_index": int(p.partition_index),
                    "error_code": 0,
                    "error_message": None,
                }
                parts.append(entry)
                try:
                    change = self.replication.alter_partition_reassignment(
                        str(topic.name),
                        int(p.partition_index),
                        None if p.replicas is None else list(p.replicas),
                    )
                except KafkaError as e:
                    entry.update(error_code=e.code, error_message=str(e))
                    continue
                if change is not None:
                    records.append(change)
            out.append({"name": str(topic.name), "partitions": parts})
        response = {"throttle_time": 0, "error_code": 0, "error_message": None, "responses": out}
        return ControllerResult(records, response)

    def list_partition_reassignments(self, request: Any) -> ControllerResult[dict[str, Any]]:
        topics = self.replication.list_reassignments(request.topics)
        return ControllerResult(
            [], {"throttle_time": 0, "error_code": 0, "error_message": None, "topics": topics}
        )

    # ---- configs -------------------------------------------------------------------------
    def incremental_alter_configs(self, request: Any) -> ControllerResult[dict[str, Any]]:
        return self._alter_configs(request, incremental=True)

    def legacy_alter_configs(self, request: Any) -> ControllerResult[dict[str, Any]]:
        return self._alter_configs(request, incremental=False)

    def _alter_configs(self, request: Any, incremental: bool) -> ControllerResult[dict[str, Any]]:
        records: list[Any] = []
        out = []
        for res in request.resources:
            rtype, rname = int(res.resource_type), str(res.resource_name)
            entry: dict[str, Any] = {
                "error_code": 0,
                "error_message": None,
                "resource_type": rtype,
                "resource_name": rname,
            }
            out.append(entry)
            try:
                if incremental:
                    new = self.configs.incremental_alter(rtype, rname, res.configs)
                else:
                    new = self.configs.legacy_alter(rtype, rname, res.configs)
            except KafkaError as e:
                entry.update(error_code=e.code, error_message=str(e))
                continue
            if not request.validate_only:
                records.extend(new)
        return ControllerResult(records, {"throttle_time": 0, "responses": out})

    def describe_configs(self, request: Any) -> ControllerResult[dict[str, Any]]:
        """The dynamically set values of each resource (config_source DYNAMIC_*)."""
        out = []
        for res in request.resources:
            rtype, rname = int(res.resource_type), str(res.resource_name)
            keys = None if res.configuration_keys is None else [str(k) for k in res.configuration_keys]
            entry: dict[str, Any] = {
                "error_code": 0,
                "error_message": None,
                "resource_type": rtype,
                "resource_name": rname,
                "configs": [],
            }
            out.append(entry)
            try:
                values = self.configs.describe(rtype, rname, keys)
            except KafkaError as e:
                entry.update(error_code=e.code, error_message=str(e))
                continue
            # ConfigSource: DYNAMIC_TOPIC_CONFIG 1, DYNAMIC_BROKER_CONFIG 2, DYNAMIC_DEFAULT_BROKER_CONFIG 3
            source = 1 if rtype == TOPIC else (2 if rname else 3)
            entry["configs"] = [
                {
                    "name": v["name"],
                    "value": v["value"],
                    "read_only": False,
                    "config_source": source,
                    "is_sensitive": False,
                    "synonyms": [],
                    "config_type": 0,
                    "documentation": None,
                }
                for v in values
            ]
        return ControllerResult([], {"throttle_time": 0, "results": out})

    # ---- features ------------------------------------------------------------------------
    def update_features(self, request: Any) -> ControllerResult[dict[str, Any]]:
        """UpdateFeatures (v1 shape: a result per feature; v2 clients read the top-level error)."""
        records: list[Any] = []
        results = []
        for update in request.feature_updates:
            name = str(update.feature)
            entry: dict[str, Any] = {"feature": name, "error_code": 0, "error_message": None}
            results.append(entry)
            try:
                record = self.features.update_feature(
                    name,
                    int(update.max_version_level),
                    int(update.upgrade_type),
                    self.cluster.registrations.values(),
                )
            except KafkaError as e:
                entry.update(error_code=e.code, error_message=str(e))
                continue
            records.append(record)
        failed = next((r for r in results if r["error_code"]), None)
        if failed is not None or request.validate_only:
            records = []  # Kafka applies an UpdateFeatures whole or not at all
        response = {
            "throttle_time": 0,
            "error_code": failed["error_code"] if failed else 0,
            "error_message": failed["error_message"] if failed else None,
            "results": results,
        }
        return ControllerResult(records, response)

    # ---- producer ids --------------------------------------------------------------------
    def allocate_producer_ids(self, request: Any) -> ControllerResult[dict[str, Any]]:
        try:
            record, start = self.producer_ids.generate_next_producer_id(
                int(request.broker_id), int(request.broker_epoch)
            )
        except KafkaError as e:
            return ControllerResult(
                [], {"throttle_time": 0, "error_code": e.code, "producer_id_start": -1, "producer_id_len": 0}
            )
        response = {
            "throttle_time": 0,
            "error_code": 0,
            "producer_id_start": start,
            "producer_id_len": PRODUCER_ID_BLOCK_SIZE,
        }
        return ControllerResult([record], response)

    # ---- SCRAM credentials --------------------------------------------------------------
    def alter_user_scram_credentials(self, request: Any) -> ControllerResult[dict[str, Any]]:
        records, response = self.scram.alter_credentials(request)
        return ControllerResult(records, response)

    # ---- ACLs ----------------------------------------------------------------------------
    def create_acls(self, request: Any) -> ControllerResult[dict[str, Any]]:
        records, response = self.acls.create_acls(request)
        return ControllerResult(records, response)

    def delete_acls(self, request: Any) -> ControllerResult[dict[str, Any]]:
        records, response = self.acls.delete_acls(request)
        return ControllerResult(records, response)

    def alter_client_quotas(self, request: Any) -> ControllerResult[dict[str, Any]]:
        records, response = self.quotas.alter_client_quotas(request)
        return ControllerResult(records, response)

    # ---- periodic work -------------------------------------------------------------------
    def maybe_fence_one_stale_broker(self, now_ms: int) -> ControllerResult[None]:
        stale = self.cluster.stale_brokers(now_ms)
        if not stale:
            return ControllerResult([], None)
        reg = self.cluster.registration(stale[0])
        assert reg is not None
        return ControllerResult(
            [*self.replication.remove_broker_from_isrs(reg.id), self.cluster.fence_record(reg)]
        )

    def maybe_balance_partition_leaders(self, now_ms: int) -> ControllerResult[None]:
        """Once per ``leader.imbalance.check.interval.seconds``: unclean elections for leaderless
        partitions of topics that allow them, then (``auto.leader.rebalance.enable``) preferred
        elections for imbalanced brokers."""
        interval_ms = self.config.leader_imbalance_check_interval_seconds * 1000
        if self._next_rebalance_ms is None:
            self._next_rebalance_ms = now_ms + interval_ms
        if now_ms < self._next_rebalance_ms:
            return ControllerResult([], None)
        self._next_rebalance_ms = now_ms + interval_ms
        records = self.replication.unclean_elections()
        if self.config.auto_leader_rebalance_enable:
            elected = {(r.topic_id, r.partition_id) for r in records}
            records += self.replication.balance_partition_leaders(
                self.config.leader_imbalance_per_broker_percentage, skip=elected
            )
        return ControllerResult(records)

    def poll(self, now_ms: int) -> ControllerResult[None]:
        """The periodic work due at ``now_ms``: a stale broker fenced first, then a rebalance."""
        fenced = self.maybe_fence_one_stale_broker(now_ms)
        if fenced.records:
            return fenced
        return self.maybe_balance_partition_leaders(now_ms)

    def next_poll_ms(self, now_ms: int) -> int:
        """When :meth:`poll` may next have work (the runtime's timer)."""
        deadlines = [
            self.cluster.session_deadline_ms(b)
            for b, reg in self.cluster.registrations.items()
            if not reg.fenced
        ]
        if self._next_rebalance_ms is not None:
            deadlines.append(self._next_rebalance_ms)
        known = [d for d in deadlines if d is not None]
        return max(now_ms, min(known) + 1) if known else now_ms + self.config.broker_session_timeout_ms


@dataclass(frozen=True, slots=True)
class _NamedTopic:
    name: str
    topic_id: uuid.UUID | None = None


__all__ = ["BROKER", "CONTROLLER_APIS", "TOPIC", "ControllerConfig", "QuorumController"]
