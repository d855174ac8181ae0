"""Dynamic configs of topics and brokers: Kafka's ``ConfigurationControlManager``.

Replicated state: for each resource ``(resource_type, resource_name)`` (TOPIC 2, BROKER 4,
GROUP 32 as in KIP-848) the explicitly set keys
(``ConfigRecord``; a null value removes the key). Broker resource name ``""`` is the cluster-wide
default, a numeric name one broker. A ``RemoveTopicRecord`` drops the topic's configs in the same
replay, as Kafka does.

Validation is injected: ``validator(resource_type, resource_name, key, value) -> str`` returns
the normalized value to store or raises ``KafkaError`` (INVALID_CONFIG ...). Branch ``cfgschema``
is reworking strom's config schema; until then :func:`default_validator` calls
``strom.metadata.configs``' normalizers.

Operations: IncrementalAlterConfigs (SET / DELETE / APPEND / SUBTRACT; APPEND and SUBTRACT
treat the value as a comma-separated list), AlterConfigs (the resource's whole set is replaced:
keys not named are removed) and DescribeConfigs of what is set dynamically (the broker that
answers a client adds static values and defaults).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..metadata.records import ConfigRecord
from ..protocol.errors import ErrorCode, KafkaError

TOPIC = 2
BROKER = 4
GROUP = 32

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

Validator = Callable[[int, str, str, str], str]


def default_validator(resource_type: int, resource_name: str, key: str, value: str) -> str:
    """strom's current config checks (``metadata/configs.py``), imported when first needed."""
    from ..metadata import configs, group_configs

    if resource_type == TOPIC:
        return configs.normalize_topic_value(key, value)
    if resource_type == GROUP:
        return group_configs.normalize(key, value)
    return configs.normalize_broker_value(key, value)


def accept_all(resource_type: int, resource_name: str, key: str, value: str) -> str:
    return value


Resource = tuple[int, str]


class ConfigurationControlManager:
    def __init__(
        self, validator: Validator = default_validator, topic_exists: Callable[[str], bool] | None = None
    ) -> None:
        self.validator = validator
        self.topic_exists = topic_exists or (lambda name: True)
        self.configs: dict[Resource, dict[str, str]] = {}

    # ---- queries -------------------------------------------------------------------------
    def get(self, resource_type: int, resource_name: str) -> dict[str, str]:
        return dict(self.configs.get((resource_type, resource_name), {}))

    def topic_config(self, topic: str, key: str) -> str | None:
        return self.configs.get((TOPIC, topic), {}).get(key)

    def cluster_config(self, key: str) -> str | None:
        return self.configs.get((BROKER, ""), {}).get(key)

    def _check_resource(self, resource_type: int, name: str) -> None:
        if resource_type == TOPIC:
            if not name:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
            if not self.topic_exists(name):
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        elif resource_type == GROUP:
            if not name:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Group resources need a group id.")
        elif resource_type == BROKER:
            if name and not name.isdigit():
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST, f"Illegal non-integral BROKER resource type name: {name}"
                )
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource_type}.")

    def _records(
        self, resource_type: int, name: str, new: Mapping[str, str], old: Mapping[str, str]
    ) -> list[ConfigRecord]:
        out = []
        for key in sorted(set(new) | set(old)):
            if new.get(key) != old.get(key):
                out.append(
                    ConfigRecord(
                        resource_type=resource_type, resource_name=name, name=key, value=new.get(key)
                    )
                )
        return out

    # ---- operations ----------------------------------------------------------------------
    def incremental_alter(self, resource_type: int, name: str, ops: Iterable[Any]) -> list[ConfigRecord]:
        """Records for one resource of an IncrementalAlterConfigs; raises KafkaError."""
        self._check_resource(resource_type, name)
        old = self.configs.get((resource_type, name), {})
        new = dict(old)
        seen: set[str] = set()
        for op in ops:
            key = str(op.name)
            if key in seen:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {key}")
            seen.add(key)
            kind = int(op.config_operation)
            if kind == SET:
                if op.value is None:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {key}")
                new[key] = self.validator(resource_type, name, key, str(op.value))
            elif kind == DELETE:
                new.pop(key, None)
            elif kind in (APPEND, SUBTRACT):
                current = [v for v in new.get(key, "").split(",") if v]
                values = [v.strip() for v in (op.value or "").split(",") if v.strip()]
                if kind == APPEND:
                    current += [v for v in values if v not in current]
                else:
                    current = [v for v in current if v not in values]
                if current:
                    new[key] = self.validator(resource_type, name, key, ",".join(current))
                else:
                    new.pop(key, None)
            else:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {kind} for {key}")
        return self._records(resource_type, name, new, old)

    def legacy_alter(self, resource_type: int, name: str, entries: Iterable[Any]) -> list[ConfigRecord]:
        """Records for one resource of an AlterConfigs: the set named replaces the old one."""
        self._check_resource(resource_type, name)
        old = self.configs.get((resource_type, name), {})
        new: dict[str, str] = {}
        for e in entries:
            key = str(e.name)
            if key in new:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {key}")
            if e.value is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {key}")
            new[key] = self.validator(resource_type, name, key, str(e.value))
        return self._records(resource_type, name, new, old)

    def creation_records(self, topic: str, configs: Mapping[str, str | None]) -> list[ConfigRecord]:
        """ConfigRecords for a topic being created (keys with a null value are left out)."""
        out = []
        for key in sorted(configs):
            value = configs[key]
            if value is None:
                continue
            out.append(
                ConfigRecord(
                    resource_type=TOPIC,
                    resource_name=topic,
                    name=key,
                    value=self.validator(TOPIC, topic, key, value),
                )
            )
        return out

    def describe(self, resource_type: int, name: str, keys: Iterable[str] | None) -> list[dict[str, Any]]:
        self._check_resource(resource_type, name)
        stored = self.configs.get((resource_type, name), {})
        wanted = sorted(stored) if keys is None else [k for k in keys if k in stored]
        return [{"name": k, "value": stored[k]} for k in wanted]

    # ---- replay --------------------------------------------------------------------------
    def replay(self, record: ConfigRecord) -> None:
        resource = (record.resource_type, record.resource_name)
        if record.value is None:
            entries = self.configs.get(resource)
            if entries is not None:
                entries.pop(record.name, None)
                if not entries:
                    del self.configs[resource]
        else:
            self.configs.setdefault(resource, {})[record.name] = record.value

    def remove_topic(self, name: str) -> None:
        self.configs.pop((TOPIC, name), None)

    def to_records(self) -> list[ConfigRecord]:
        return [
            ConfigRecord(resource_type=rt, resource_name=rn, name=k, value=v)
            for (rt, rn) in sorted(self.configs)
            for k, v in sorted(self.configs[(rt, rn)].items())
        ]
