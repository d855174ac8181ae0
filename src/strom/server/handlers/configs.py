"""Configs and partition admin: DescribeConfigs (32), AlterConfigs (33),
IncrementalAlterConfigs (44), CreatePartitions (37),
DescribeTopicPartitions (75), OffsetForLeaderEpoch (23).

The config model (sources, synonyms, validation, persistence of dynamic broker configs) lives in
:mod:`strom.metadata.configs`; these handlers only map requests and errors. On the metadata quorum
a BROKER resource (``""``, this broker's id or another's) or a GROUP resource is validated here,
then written through the controller (``broker.quorum.alter_resource_configs``) and answered once
applied here. Logs name the configs changed, never their values (passwords). Every error is per
resource / topic / partition, as in Kafka; nothing here fails a whole request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ...metadata import configs as cfg
from ...metadata import group_configs
from ...metadata.topics import TopicError, TopicInfo
from ...protocol.errors import ErrorCode, KafkaError
from ..authz import AclOperation, authorized, authorized_cluster
from ..authz import ResourceType as AuthResource
from ..context import RequestContext
from ..metadata_cache import PartitionMetadata
from . import handler
from .admin import mutation_throttle, record_mutations

log = logging.getLogger("strom.configs")

_LOGGER_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL", "CRITICAL", "OFF")
_PY_LEVEL = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "CRITICAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}
_KAFKA_LEVEL = {
    logging.DEBUG: "DEBUG",
    logging.INFO: "INFO",
    logging.WARNING: "WARN",
    logging.ERROR: "ERROR",
    logging.CRITICAL: "FATAL",
    logging.CRITICAL + 10: "OFF",
}


def _keys(res: Any) -> list[str] | None:
    keys = getattr(res, "configuration_keys", None)
    if not keys:  # null or empty: every config
        return None
    return [str(k) for k in keys]


def _topic(ctx: RequestContext, name: str) -> TopicInfo:
    info = ctx.broker.metadata_cache.topic(name)
    if info is None:
        raise cfg.ConfigResourceError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
        )
    return info


# ------------------------------------------------------------------------------ broker loggers


def _strom_loggers() -> list[str]:
    names = [n for n in logging.root.manager.loggerDict if n == "strom" or n.startswith("strom.")]
    return ["root", *sorted(names)]


def _logger(name: str) -> logging.Logger:
    return logging.getLogger() if name == "root" else logging.getLogger(name)


def _describe_loggers(keys: list[str] | None) -> list[dict[str, Any]]:
    out = []
    for name in _strom_loggers():
        if keys is not None and name not in keys:
            continue
        level = _KAFKA_LEVEL.get(
            _logger(name).getEffectiveLevel(), logging.getLevelName(_logger(name).getEffectiveLevel())
        )
        entry = cfg.ConfigEntry(
            name, level, cfg.ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG, False, False, cfg.ConfigType.STRING
        )
        out.append(entry.to_kio(False))
    return out


def _alter_loggers(ops: list[tuple[str, int, str | None]], validate_only: bool) -> None:
    changes: list[tuple[logging.Logger, int]] = []
    cfg.check_unique(n for n, _, _ in ops)
    for name, op, value in ops:
        if op == cfg.OpType.SET:
            level = (value or "").strip().upper()
            if level not in _LOGGER_LEVELS:
                raise cfg.ConfigResourceError(
                    ErrorCode.INVALID_CONFIG,
                    f"Cannot set the log level of {name} to {value} as it is not a supported log level. "
                    f"Valid log levels are {', '.join(_LOGGER_LEVELS)}",
                )
            changes.append((_logger(name), _PY_LEVEL[level]))
        elif op == cfg.OpType.DELETE:
            if name == "root":
                raise cfg.ConfigResourceError(
                    ErrorCode.INVALID_CONFIG, "Removing the log level of the root logger is not allowed"
                )
            changes.append((_logger(name), logging.NOTSET))
        else:
            raise cfg.ConfigResourceError(
                ErrorCode.INVALID_REQUEST, f"Operation {op} is not allowed for the broker logger {name}"
            )
    if not validate_only:
        for lg, py_level in changes:
            lg.setLevel(py_level)


# ------------------------------------------------------------------------------ DescribeConfigs


def _check_access(ctx: RequestContext, rtype: int, rname: str, operation: int) -> None:
    """Kafka's config authorization: DESCRIBE_CONFIGS / ALTER_CONFIGS on the CLUSTER for broker
    and logger resources, on the topic or group for theirs."""
    if getattr(ctx.broker, "authorizer", None) is None:
        return
    if rtype == cfg.ResourceType.TOPIC:
        if not authorized(ctx, operation, AuthResource.TOPIC, rname):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
    elif rtype == cfg.ResourceType.GROUP:
        if not authorized(ctx, operation, AuthResource.GROUP, rname):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    elif rtype in (cfg.ResourceType.BROKER, cfg.ResourceType.BROKER_LOGGER) and not authorized_cluster(
        ctx, operation
    ):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")


@handler(32)
async def handle_describe_configs(ctx: RequestContext, request: Any) -> dict[str, Any]:
    broker = ctx.broker
    include_synonyms = bool(getattr(request, "include_synonyms", False))
    results = []
    for res in request.resources:
        rtype = int(res.resource_type)
        rname = str(res.resource_name)
        keys = _keys(res)
        entry: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": rtype,
            "resource_name": rname,
            "configs": [],
        }
        try:
            _check_access(ctx, rtype, rname, AclOperation.DESCRIBE_CONFIGS)
            if rtype == cfg.ResourceType.TOPIC:
                entries = cfg.describe_topic(broker, _topic(ctx, rname), keys)
                entry["configs"] = [e.to_kio(include_synonyms) for e in entries]
            elif rtype == cfg.ResourceType.BROKER:
                default = cfg.broker_scope(broker, rname)
                entries = cfg.describe_broker(broker, default, keys)
                entry["configs"] = [e.to_kio(include_synonyms) for e in entries]
            elif rtype == cfg.ResourceType.BROKER_LOGGER:
                cfg.broker_scope(broker, rname or str(broker.node_id))
                entry["configs"] = _describe_loggers(keys)
            elif rtype == cfg.ResourceType.GROUP:
                entries = group_configs.describe(broker.config, broker.group_configs, rname, keys)
                entry["configs"] = [e.to_kio(include_synonyms) for e in entries]
            else:
                raise cfg.ConfigResourceError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}")
        except KafkaError as e:
            entry.update(error_code=e.code, error_message=str(e), configs=[])
        results.append(entry)
    return {"throttle_time": mutation_throttle(ctx), "results": results}


# ------------------------------------------------------------------------------ AlterConfigs


def _storage_error(broker: Any, rtype: int, rname: str, e: OSError) -> KafkaError:
    broker.storage_log.failed("saving configs of", f"resource {rtype} {rname!r}", e,
                              "answering KAFKA_STORAGE_ERROR; the change may not survive a restart")
    return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "storage error while saving the configs")


def _alter_result(rtype: int, rname: str, error: KafkaError | None) -> dict[str, Any]:
    return {
        "error_code": error.code if error else 0,
        "error_message": str(error) if error else None,
        "resource_type": rtype,
        "resource_name": rname,
    }


@handler(33)
async def handle_alter_configs(ctx: RequestContext, request: Any) -> dict[str, Any]:
    """Legacy AlterConfigs: the given configs replace all dynamic configs of the resource."""
    broker = ctx.broker
    validate_only = bool(getattr(request, "validate_only", False))
    out = []
    for res in request.resources:
        rtype = int(res.resource_type)
        rname = str(res.resource_name)
        error: KafkaError | None = None
        try:
            _check_access(ctx, rtype, rname, AclOperation.ALTER_CONFIGS)
            names = [str(c.name) for c in res.configs]
            cfg.check_unique(names)
            configs = {str(c.name): c.value for c in res.configs}
            if rtype == cfg.ResourceType.TOPIC:
                cfg.alter_topic(broker, rname, configs, validate_only=validate_only)
            elif rtype == cfg.ResourceType.BROKER and broker.quorum is not None:
                await _alter_broker_on_quorum(broker, rname, configs, validate_only)
            elif rtype == cfg.ResourceType.BROKER:
                cfg.alter_broker(
                    broker, cfg.broker_scope(broker, rname), configs, validate_only=validate_only
                )
            else:
                raise cfg.ConfigResourceError(
                    ErrorCode.INVALID_REQUEST, f"AlterConfigs is not supported for resource type {rtype}"
                )
        except KafkaError as e:
            error = e
        except OSError as e:
            error = _storage_error(broker, rtype, rname, e)
        if error is None and not validate_only:
            broker.storage_log.ok("saving configs of", f"resource {rtype} {rname!r}")
            log.info("altered configs of resource %d %r: %s", rtype, rname, sorted(configs))
        out.append(_alter_result(rtype, rname, error))
    return {"throttle_time": 0, "responses": await _settled(broker, out)}


async def _alter_broker_on_quorum(
    broker: Any, rname: str, configs: Mapping[str, str | None], validate_only: bool
) -> None:
    """On the metadata quorum: check a BROKER resource's new dynamic configs here (this broker's,
    the cluster default, or another broker's by id), then replace them in the metadata log
    through the controller; returns once applied here (every broker applies its own and the
    default from its image)."""
    default, local = cfg.quorum_broker_scope(broker, rname)
    clean = cfg.validate_broker_change(broker, default, configs, local=local)
    if validate_only or broker.quorum.stored_configs(cfg.ResourceType.BROKER, rname) == clean:
        return
    await broker.quorum.alter_resource_configs(cfg.ResourceType.BROKER, rname, clean)


async def _settled(broker: Any, out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """On the metadata quorum: answer once the topics' config changes are in the metadata log."""
    topics = [r["resource_name"] for r in out if r["resource_type"] == cfg.ResourceType.TOPIC]
    failed = await broker.settle_topic_configs(topics) if topics else {}
    for i, r in enumerate(out):
        name = r["resource_name"]
        if r["resource_type"] == cfg.ResourceType.TOPIC and not r["error_code"] and name in failed:
            out[i] = _alter_result(r["resource_type"], name, failed[name])
    return out


@handler(44)
async def handle_incremental_alter_configs(ctx: RequestContext, request: Any) -> dict[str, Any]:
    broker = ctx.broker
    validate_only = bool(getattr(request, "validate_only", False))
    out = []
    for res in request.resources:
        rtype = int(res.resource_type)
        rname = str(res.resource_name)
        ops = [(str(c.name), int(c.config_operation), c.value) for c in res.configs]
        error: KafkaError | None = None
        try:
            _check_access(ctx, rtype, rname, AclOperation.ALTER_CONFIGS)
            if rtype == cfg.ResourceType.TOPIC:
                info = _topic(ctx, rname)
                new = cfg.incremental_changes(
                    info.configs,
                    ops,
                    type_of=cfg.TOPIC_CONFIG_TYPES,
                    effective=cfg.topic_effective_strings(broker, info),
                    unknown="topic",
                )
                cfg.alter_topic(broker, rname, new, validate_only=validate_only)
            elif rtype == cfg.ResourceType.BROKER and broker.quorum is not None:
                default, local = cfg.quorum_broker_scope(broker, rname)
                current = broker.quorum.stored_configs(rtype, rname)
                new = cfg.incremental_changes(
                    current,
                    ops,
                    type_of=cfg.broker_config_types(),
                    effective=cfg.broker_effective_strings(broker, default) if local else current,
                    unknown="broker",
                )
                await _alter_broker_on_quorum(broker, rname, new, validate_only)
            elif rtype == cfg.ResourceType.BROKER:
                default = cfg.broker_scope(broker, rname)
                new = cfg.incremental_changes(
                    broker.dynamic_configs.scope(default),
                    ops,
                    type_of=cfg.broker_config_types(),
                    effective=cfg.broker_effective_strings(broker, default),
                    unknown="broker",
                )
                cfg.alter_broker(broker, default, new, validate_only=validate_only)
            elif rtype == cfg.ResourceType.BROKER_LOGGER:
                cfg.broker_scope(broker, rname or str(broker.node_id))
                _alter_loggers(ops, validate_only)
            elif rtype == cfg.ResourceType.GROUP:
                group_configs.check_group_name(rname)
                store = broker.group_configs
                new = cfg.incremental_changes(
                    store.get(rname),
                    ops,
                    type_of=group_configs.group_config_types(),
                    effective=broker.group_config(rname),
                    unknown="group",
                )
                quorum = broker.quorum
                group_configs.alter(
                    broker.config, store, rname, new, validate_only=validate_only or quorum is not None
                )
                if quorum is not None and not validate_only:  # into the metadata log (image: here)
                    canon = group_configs.validate(broker.config, new)
                    if canon != store.get(rname):
                        await quorum.alter_resource_configs(rtype, rname, canon)
            else:
                raise cfg.ConfigResourceError(
                    ErrorCode.INVALID_REQUEST,
                    f"IncrementalAlterConfigs is not supported for resource type {rtype}",
                )
        except KafkaError as e:
            error = e
        except OSError as e:
            error = _storage_error(broker, rtype, rname, e)
        if error is None and not validate_only:
            broker.storage_log.ok("saving configs of", f"resource {rtype} {rname!r}")
            log.info("altered configs of resource %d %r: %s", rtype, rname, sorted({n for n, _, _ in ops}))
        out.append(_alter_result(rtype, rname, error))
    return {"throttle_time": 0, "responses": await _settled(broker, out)}


# ------------------------------------------------------------------------------ CreatePartitions


@handler(37)
async def handle_create_partitions(ctx: RequestContext, request: Any) -> dict[str, Any]:
    broker = ctx.broker
    validate_only = bool(getattr(request, "validate_only", False))
    results = []
    counts: dict[str, int] = {}
    for t in request.topics:
        name = str(t.name)
        counts[name] = counts.get(name, 0) + 1
    for t in request.topics:
        name = str(t.name)
        count = int(t.count)

        def fail(code: int, message: str, name: str = name) -> None:
            results.append({"name": name, "error_code": code, "error_message": message})

        if counts[name] > 1:
            fail(ErrorCode.INVALID_REQUEST, "Duplicate topic in request.")
            continue
        if not authorized(ctx, AclOperation.ALTER, AuthResource.TOPIC, name):  # Kafka: ALTER on the topic
            fail(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
            continue
        info = broker.metadata_cache.topic(name)
        if info is None:
            fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
            continue
        if info.internal:
            fail(ErrorCode.INVALID_REQUEST, f"Cannot change the partition count of internal topic {name}.")
            continue
        current = info.partitions
        if count < current:
            fail(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, which is higher than the requested {count}.",
            )
            continue
        if count == current:
            fail(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
            continue
        assignments = getattr(t, "assignments", None)
        if assignments is not None and len(assignments) > 0:
            if len(assignments) != count - current:
                fail(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Increasing the number of partitions by {count - current} but {len(assignments)} "
                    "assignments provided.",
                )
                continue
            if broker.quorum is None and any(list(a.broker_ids) != [broker.node_id] for a in assignments):
                fail(  # (with a quorum the controller checks them against the registered brokers)
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    "Replica assignment names brokers that do not exist.",
                )
                continue
        if not validate_only:
            over = record_mutations(ctx, count - current, strict=ctx.api_version >= 3)  # KIP-599
            if over is not None:
                fail(ErrorCode.THROTTLING_QUOTA_EXCEEDED, over)
                continue
            try:  # in a worker thread, published when all exist (see Broker.add_partitions_async)
                placed = [[int(b) for b in a.broker_ids] for a in assignments] if assignments else None
                await broker.add_partitions_async(name, count, placed)
            except TopicError as e:
                if e.code == ErrorCode.KAFKA_STORAGE_ERROR:
                    broker.storage_log.failed("growing topic", name, e, "answering KAFKA_STORAGE_ERROR")
                else:
                    log.warning("growing %s to %d partitions failed: %s", name, count, e)
                fail(e.code, str(e))
                continue
            broker.storage_log.ok("growing topic", name)
            log.info("topic %s now has %d partitions (was %d)", name, count, current)
        results.append({"name": name, "error_code": 0, "error_message": None})
    return {"throttle_time": mutation_throttle(ctx), "results": results}


# ------------------------------------------------------------------------------ DescribeTopicPartitions


def _dtp_partition(pm: PartitionMetadata) -> dict[str, Any]:
    """A partition on a failed log dir has no leader (as in Metadata)."""
    return {
        "error_code": 0 if pm.has_leader else ErrorCode.LEADER_NOT_AVAILABLE,
        "partition_index": pm.partition,
        "leader_id": pm.leader_id,
        "leader_epoch": pm.leader_epoch,
        "replica_nodes": list(pm.replicas),
        "isr_nodes": list(pm.isr),
        "eligible_leader_replicas": [],
        "last_known_elr": [],
        "offline_replicas": list(pm.offline_replicas),
    }


@handler(75)
async def handle_describe_topic_partitions(ctx: RequestContext, request: Any) -> dict[str, Any]:
    """Topics sorted by name, starting at the cursor; at most ``response_partition_limit``
    partitions in all, with ``next_cursor`` naming the first one left out."""
    cache = ctx.broker.metadata_cache
    # Kafka caps the client's limit at max.request.partition.size.limit (2000)
    limit = min(max(1, int(getattr(request, "response_partition_limit", 2000) or 2000)), 2000)
    names = (
        sorted({str(t.name) for t in request.topics}) if request.topics
        else sorted(info.name for info in cache.topics())
    )
    cursor = getattr(request, "cursor", None)
    start_topic, start_part = (str(cursor.topic_name), int(cursor.partition_index)) if cursor else (None, 0)
    if start_part < 0:  # Kafka refuses it (InvalidRequestException): every topic gets the error
        bad = names or [start_topic or ""]
        return {
            "throttle_time": 0,
            "topics": [
                {"error_code": ErrorCode.INVALID_REQUEST, "name": n, "topic_id": None, "partitions": []}
                for n in bad
            ],
            "next_cursor": None,
        }
    topics_out: list[dict[str, Any]] = []
    next_cursor: dict[str, Any] | None = None
    remaining = limit
    for name in names:
        if start_topic is not None and name < start_topic:
            continue
        first = start_part if name == start_topic else 0
        info = cache.topic(name)
        denied = not authorized(ctx, AclOperation.DESCRIBE, AuthResource.TOPIC, name)
        if denied and not request.topics:
            continue  # (all topics: the undescribable ones are left out, as Kafka does)
        if info is None or denied:
            topics_out.append(
                {
                    "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    if denied
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    "name": name,
                    "topic_id": None,
                    "is_internal": False,
                    "partitions": [],
                    "topic_authorized_operations": -2147483648,
                }
            )
            continue
        if remaining <= 0:
            next_cursor = {"topic_name": name, "partition_index": first}
            break
        last = min(info.partitions, first + remaining)
        found = (cache.partition(name, p) for p in range(first, last))
        parts = [_dtp_partition(pm) for pm in found if pm is not None]
        remaining -= len(parts)
        topics_out.append(
            {
                "error_code": 0,
                "name": name,
                "topic_id": info.topic_id,
                "is_internal": info.internal,
                "partitions": parts,
                "topic_authorized_operations": -2147483648,
            }
        )
        if last < info.partitions:
            next_cursor = {"topic_name": name, "partition_index": last}
            break
    return {"throttle_time": 0, "topics": topics_out, "next_cursor": next_cursor}


# ------------------------------------------------------------------------------ OffsetForLeaderEpoch

@handler(23)
async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> dict[str, Any]:
    """End offset of the requested leader epoch (Kafka's ``lastOffsetForLeaderEpoch``), from the
    leader's epoch cache: the largest epoch at or below the requested one and the start of the
    epoch after it (the log end offset for the latest epoch); -1/-1 when the cache cannot say.
    Answered by the leader only; ``current_leader_epoch`` newer than the partition's is
    UNKNOWN_LEADER_EPOCH, older FENCED_LEADER_EPOCH (KIP-320)."""
    rm = ctx.broker.replica_manager
    topics_out = []
    # Kafka: a follower needs CLUSTER_ACTION on the cluster, a consumer DESCRIBE on the topic
    follower = int(getattr(request, "replica_id", -1)) >= 0
    cluster_action = follower and authorized_cluster(ctx, AclOperation.CLUSTER_ACTION)
    for t in request.topics:
        name = str(t.topic)
        parts = []
        allowed = (
            cluster_action if follower else authorized(ctx, AclOperation.DESCRIBE, AuthResource.TOPIC, name)
        )
        for p in t.partitions:
            idx = int(p.partition)
            entry: dict[str, Any] = {"error_code": 0, "partition": idx, "leader_epoch": -1, "end_offset": -1}
            if not allowed:
                entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                parts.append(entry)
                continue
            plog, error = rm.leader_log_or_error(name, idx, int(getattr(p, "current_leader_epoch", -1)))
            if plog is None:
                entry["error_code"] = error
            else:
                epoch, end_offset = plog.end_offset_for_epoch(int(p.leader_epoch))
                entry.update(leader_epoch=epoch, end_offset=end_offset)
            parts.append(entry)
        topics_out.append({"topic": name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics_out}
