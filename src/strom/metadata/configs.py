"""Config resources as DescribeConfigs/AlterConfigs see them: topics and brokers.

Theory of operation
-------------------
A config's value comes from the first source that sets it, in Kafka's order:

* topic ``T``: the topic override (``DYNAMIC_TOPIC_CONFIG``), else the broker synonym ``log.*``
  of ``T`` resolved as below, else ``T``'s default;
* broker config ``B``: this broker's dynamic value (``DYNAMIC_BROKER_CONFIG``, set with
  ``--entity-name <id>``), else the cluster-wide dynamic default (``DYNAMIC_DEFAULT_BROKER_CONFIG``,
  ``--entity-default``), else ``server.properties``/``--override`` (``STATIC_BROKER_CONFIG``),
  else the built-in default (``DEFAULT_CONFIG``).

Synonyms list every source that sets the value, most specific first (what ``kafka-configs.sh``
prints as ``synonyms={...}``); the entry's own source is the first synonym's.

Topic overrides live in the topic registry. Dynamic broker configs are kept in
``strom-dynamic-configs.json`` in the log dir, replaced atomically (temp file, fsync, rename,
fsync of the directory). They are applied to ``broker.config.values`` (what the rest of the broker
reads) and pushed into every open partition log, so a change takes effect without restart.
:func:`ensure_loaded` (or :func:`apply_dynamic_broker_configs` at broker start) loads them.

Error contract: :class:`ConfigResourceError` (a :class:`KafkaError`) with INVALID_CONFIG for an
unknown name, a value of the wrong type or out of range, or a broker config that cannot change at
runtime; INVALID_REQUEST for a malformed request (duplicate keys, bad operation, wrong broker id);
UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist.
"""

from __future__ import annotations

import json
import math
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import BROKER_DEFAULTS, TOPIC_SYNONYMS, TOPIC_TYPES, ConfigError, LogConfig
from ..durable_file import replace_file
from ..protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from ..server.broker import Broker
    from .topics import TopicInfo

__all__ = [
    "ConfigEntry",
    "ConfigResourceError",
    "ConfigSource",
    "ConfigType",
    "DynamicBrokerConfigs",
    "OpType",
    "ResourceType",
    "Synonym",
    "alter_broker",
    "alter_topic",
    "apply_dynamic_broker_configs",
    "broker_scope",
    "describe_broker",
    "describe_topic",
    "ensure_loaded",
    "incremental_changes",
    "is_sensitive",
]

DYNAMIC_CONFIG_FILE = "strom-dynamic-configs.json"


class ResourceType(IntEnum):
    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    GROUP = 32


class ConfigSource(IntEnum):
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    DYNAMIC_CLIENT_METRICS_CONFIG = 7
    DYNAMIC_GROUP_CONFIG = 8


class ConfigType(IntEnum):
    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class OpType(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigResourceError(KafkaError):
    pass


def _invalid(message: str) -> ConfigResourceError:
    return ConfigResourceError(ErrorCode.INVALID_CONFIG, message)


def _bad_request(message: str) -> ConfigResourceError:
    return ConfigResourceError(ErrorCode.INVALID_REQUEST, message)


INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)

# ------------------------------------------------------------------------------ definitions

TOPIC_CONFIG_TYPES: dict[str, ConfigType] = {
    "cleanup.policy": ConfigType.LIST,
    "compression.type": ConfigType.STRING,
    "delete.retention.ms": ConfigType.LONG,
    "file.delete.delay.ms": ConfigType.LONG,
    "flush.messages": ConfigType.LONG,
    "flush.ms": ConfigType.LONG,
    "index.interval.bytes": ConfigType.INT,
    "max.compaction.lag.ms": ConfigType.LONG,
    "max.message.bytes": ConfigType.INT,
    "message.timestamp.type": ConfigType.STRING,
    "min.cleanable.dirty.ratio": ConfigType.DOUBLE,
    "min.compaction.lag.ms": ConfigType.LONG,
    "min.insync.replicas": ConfigType.INT,
    "retention.bytes": ConfigType.LONG,
    "retention.ms": ConfigType.LONG,
    "segment.bytes": ConfigType.INT,
    "segment.index.bytes": ConfigType.INT,
    "segment.ms": ConfigType.LONG,
}
assert set(TOPIC_CONFIG_TYPES) == set(TOPIC_TYPES)

# Inclusive lower bounds (Kafka's ConfigDef ``atLeast``); DOUBLE bounds are (lo, hi).
_TOPIC_MIN: dict[str, int] = {
    "segment.bytes": 14,
    "segment.ms": 1,
    "segment.index.bytes": 4,
    "index.interval.bytes": 0,
    "flush.messages": 1,
    "flush.ms": 0,
    "retention.ms": -1,
    "max.message.bytes": 0,
    "file.delete.delay.ms": 0,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": 1,
    "delete.retention.ms": 0,
    "min.insync.replicas": 1,
    "group.consumer.regex.refresh.interval.ms": 10000,  # Kafka: atLeast(10 * 1000)
}
_CHOICES: dict[str, tuple[str, ...]] = {
    "cleanup.policy": ("compact", "delete"),
    "log.cleanup.policy": ("compact", "delete"),
    "compression.type": ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    "message.timestamp.type": ("CreateTime", "LogAppendTime"),
    "log.message.timestamp.type": ("CreateTime", "LogAppendTime"),
}

# Broker configs that change at runtime (Kafka's DynamicLogConfig set, restricted to what strom
# has): the log.* synonyms of topic configs. Everything else is read-only.
BROKER_SYNONYM_GROUPS: dict[str, tuple[str, ...]] = {
    "log.retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "log.roll.ms": ("log.roll.ms", "log.roll.hours"),
}
DYNAMIC_BROKER_CONFIGS: frozenset[str] = frozenset(
    set(TOPIC_SYNONYMS.values())
    | {
        "log.retention.minutes",
        "log.retention.hours",
        "log.roll.hours",
        "log.cleaner.io.max.bytes.per.second",
    }
)
# Built-in defaults that stand for "not set" (Kafka shows them as null).
_NULL_DEFAULTS = frozenset(
    {"log.retention.ms", "log.retention.minutes", "log.roll.ms", "log.flush.interval.ms"}
)
_LIST_BROKER_CONFIGS = frozenset(
    {"listeners", "advertised.listeners", "log.dirs", "log.cleanup.policy", "group.consumer.assignors"}
)
_INT_MS_BROKER_CONFIGS = frozenset(
    {
        "group.initial.rebalance.delay.ms",
        "group.min.session.timeout.ms",
        "group.max.session.timeout.ms",
        "group.consumer.session.timeout.ms",
        "group.consumer.heartbeat.interval.ms",
        "group.consumer.regex.refresh.interval.ms",
        "transaction.max.timeout.ms",
        "transactional.id.expiration.ms",
        "producer.id.expiration.ms",
    }
)
_LONG_BROKER_CONFIGS = frozenset({"log.flush.interval.messages", "log.retention.bytes"})
_BROKER_MIN: dict[str, int] = {
    "message.max.bytes": 0,
    "log.segment.bytes": 14,
    "log.roll.ms": 1,
    "log.roll.hours": 1,
    "log.index.size.max.bytes": 4,
    "log.index.interval.bytes": 0,
    "log.flush.interval.messages": 1,
    "log.flush.interval.ms": 0,
    "log.retention.ms": -1,
    "log.retention.minutes": -1,
    "log.retention.hours": -1,
    "log.segment.delete.delay.ms": 0,
    "log.cleaner.min.compaction.lag.ms": 0,
    "log.cleaner.max.compaction.lag.ms": 1,
    "log.cleaner.delete.retention.ms": 0,
    "min.insync.replicas": 1,
    "group.consumer.regex.refresh.interval.ms": 10000,  # Kafka: atLeast(10 * 1000)
}


def is_sensitive(name: str) -> bool:
    """Kafka's PASSWORD-typed configs and anything that looks like a secret."""
    low = name.lower()
    return any(
        w in low for w in ("password", "secret", "jaas.config", "credentials", "token", "ssl.keystore.key")
    )


def broker_config_type(name: str) -> ConfigType:
    if is_sensitive(name):
        return ConfigType.PASSWORD
    spec = BROKER_DEFAULTS.get(name)
    if spec is None:
        return ConfigType.UNKNOWN
    typ = spec[0]
    if typ is bool:
        return ConfigType.BOOLEAN
    if typ is float:
        return ConfigType.DOUBLE
    if typ is int:
        if name in _LONG_BROKER_CONFIGS or (name.endswith(".ms") and name not in _INT_MS_BROKER_CONFIGS):
            return ConfigType.LONG
        return ConfigType.INT
    return ConfigType.LIST if name in _LIST_BROKER_CONFIGS else ConfigType.STRING


# ------------------------------------------------------------------------------ values


def to_config_string(value: Any) -> str | None:
    """A typed value as Kafka prints it (``ConfigDef.convertToString``)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def normalize_value(name: str, ctype: ConfigType, raw: str | None, minimum: int | None = None) -> str:
    """Check ``raw`` against the config's type, range and allowed values; return it in canonical
    form (what is stored and described). Raises INVALID_CONFIG."""
    if raw is None:
        raise _invalid(f"Null value not supported for config {name}")
    text = raw.strip()
    if ctype in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
        try:
            n = int(text)
        except ValueError:
            raise _invalid(
                f"Invalid value {raw} for configuration {name}: Not a number of type {ctype.name}"
            ) from None
        hi = {ConfigType.INT: INT_MAX, ConfigType.SHORT: 2**15 - 1}.get(ctype, LONG_MAX)
        lo = -hi - 1
        if not lo <= n <= hi:
            raise _invalid(f"Invalid value {raw} for configuration {name}: Not a number of type {ctype.name}")
        if minimum is not None and n < minimum:
            raise _invalid(f"Invalid value {raw} for configuration {name}: Value must be at least {minimum}")
        return str(n)
    if ctype is ConfigType.DOUBLE:
        try:
            f = float(text)
        except ValueError:
            raise _invalid(
                f"Invalid value {raw} for configuration {name}: Not a number of type DOUBLE"
            ) from None
        if not math.isfinite(f):
            raise _invalid(f"Invalid value {raw} for configuration {name}: Not a number of type DOUBLE")
        if name in ("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio") and not 0.0 <= f <= 1.0:
            raise _invalid(f"Invalid value {raw} for configuration {name}: Value must be between 0 and 1")
        return repr(f)
    if ctype is ConfigType.BOOLEAN:
        low = text.lower()
        if low not in ("true", "false"):
            raise _invalid(
                f"Invalid value {raw} for configuration {name}: Expected value to be either true or false"
            )
        return low
    choices = _CHOICES.get(name)
    if ctype is ConfigType.LIST:
        items = [s.strip() for s in text.split(",") if s.strip()]
        if choices is not None:
            # an empty list is valid (Kafka's ValidList checks only the items): for cleanup.policy
            # it means neither retention nor compaction (see LogConfig.cleanup_policies)
            for item in items:
                if item not in choices:
                    raise _invalid(
                        f"Invalid value {item} for configuration {name}: String must be one of: "
                        + ", ".join(choices)
                    )
        return ",".join(dict.fromkeys(items))
    if choices is not None and text not in choices:
        raise _invalid(
            f"Invalid value {raw} for configuration {name}: String must be one of: " + ", ".join(choices)
        )
    return text


def normalize_topic_value(name: str, raw: str | None) -> str:
    ctype = TOPIC_CONFIG_TYPES.get(name)
    if ctype is None:
        raise _invalid(f"Unknown topic config name: {name}")
    return normalize_value(name, ctype, raw, _TOPIC_MIN.get(name))


def normalize_broker_value(name: str, raw: str | None) -> str:
    if name not in BROKER_DEFAULTS:
        raise _invalid(f"Unknown broker config name: {name}")
    return normalize_value(name, broker_config_type(name), raw, _BROKER_MIN.get(name))


def _typed_broker_value(name: str, text: str) -> Any:
    typ = BROKER_DEFAULTS[name][0]
    if typ is bool:
        return text == "true"
    if typ is int:
        return int(text)
    if typ is float:
        return float(text)
    return text


# ------------------------------------------------------------------------------ describe


@dataclass(frozen=True)
class Synonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    config_type: ConfigType
    synonyms: tuple[Synonym, ...] = ()

    @property
    def is_default(self) -> bool:
        return self.source is ConfigSource.DEFAULT_CONFIG

    def to_kio(self, include_synonyms: bool) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": None if self.sensitive else self.value,
            "read_only": self.read_only,
            "is_default": self.is_default,
            "config_source": int(self.source),
            "is_sensitive": self.sensitive,
            "synonyms": [
                {"name": s.name, "value": None if self.sensitive else s.value, "source": int(s.source)}
                for s in self.synonyms
            ]
            if include_synonyms
            else [],
            "config_type": int(self.config_type),
            "documentation": None,
        }


@dataclass
class DynamicBrokerConfigs:
    """Dynamic broker configs: ``per_broker`` (this node) and cluster-wide ``default``, as
    canonical strings; persisted in ``path``."""

    path: Path
    node_id: int
    default: dict[str, str] = field(default_factory=dict)
    per_broker: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, log_dir: Path, node_id: int) -> DynamicBrokerConfigs:
        path = log_dir / DYNAMIC_CONFIG_FILE
        state = cls(path, node_id)
        if path.exists():
            doc = json.loads(path.read_text())
            state.default = {str(k): str(v) for k, v in doc.get("default", {}).items()}
            state.per_broker = {
                str(k): str(v) for k, v in doc.get("brokers", {}).get(str(node_id), {}).items()
            }
        return state

    def save(self) -> None:
        doc = {"version": 1, "default": self.default, "brokers": {str(self.node_id): self.per_broker}}
        replace_file(self.path, json.dumps(doc, indent=1, sort_keys=True).encode())

    def scope(self, default: bool) -> dict[str, str]:
        return self.default if default else self.per_broker


_STATES: weakref.WeakKeyDictionary[Broker, DynamicBrokerConfigs] = weakref.WeakKeyDictionary()


def ensure_loaded(broker: Broker) -> DynamicBrokerConfigs:
    """The broker's dynamic configs, loaded from the log dir and applied on first use."""
    state = _STATES.get(broker)
    if state is None:
        state = DynamicBrokerConfigs.load(broker.log_dir, broker.node_id)
        _STATES[broker] = state
        if state.default or state.per_broker:
            _apply(broker, state)
    return state


def apply_dynamic_broker_configs(broker: Broker) -> None:
    """Load persisted dynamic broker configs into ``broker.config.values``. Call at startup,
    before partition logs are opened (they take their defaults from those values)."""
    ensure_loaded(broker)


def _static_value(broker: Broker, name: str) -> Any:
    if name in broker.config.explicit:
        return broker.config.explicit[name]
    spec = BROKER_DEFAULTS.get(name)
    return spec[1] if spec else None


def _effective_values(broker: Broker, state: DynamicBrokerConfigs) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in DYNAMIC_BROKER_CONFIGS:
        if name in state.per_broker:
            out[name] = _typed_broker_value(name, state.per_broker[name])
        elif name in state.default:
            out[name] = _typed_broker_value(name, state.default[name])
        else:
            out[name] = _static_value(broker, name)
    return out


def _apply(broker: Broker, state: DynamicBrokerConfigs) -> None:
    broker.config.values.update(_effective_values(broker, state))
    refresh_logs(broker)


def refresh_logs(broker: Broker, topic: str | None = None) -> None:
    """Push the current effective log config into open partition logs (all, or one topic's)."""
    infos = [broker.topics.get(topic)] if topic is not None else list(broker.topics.topics.values())
    for info in infos:
        if info is None:
            continue
        lc = broker.log_config(info)
        for p in range(info.partitions):
            plog = broker.replica_manager.get_log(info.name, p)
            if plog is not None:
                plog.update_config(lc)


def _broker_display(name: str, value: Any) -> str | None:
    if name in _NULL_DEFAULTS and value == BROKER_DEFAULTS[name][1]:
        return None
    if value == "" and BROKER_DEFAULTS.get(name, (str, None))[1] == "":
        return None
    return to_config_string(value)


def _broker_synonyms(broker: Broker, state: DynamicBrokerConfigs, names: Iterable[str]) -> list[Synonym]:
    names = list(names)
    out: list[Synonym] = []
    for n in names:
        if n in state.per_broker:
            out.append(Synonym(n, state.per_broker[n], ConfigSource.DYNAMIC_BROKER_CONFIG))
    for n in names:
        if n in state.default:
            out.append(Synonym(n, state.default[n], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
    for n in names:
        if n in broker.config.explicit:
            out.append(
                Synonym(n, to_config_string(broker.config.explicit[n]), ConfigSource.STATIC_BROKER_CONFIG)
            )
    for n in names:
        spec = BROKER_DEFAULTS.get(n)
        if spec is not None:
            shown = _broker_display(n, spec[1])
            if shown is not None:
                out.append(Synonym(n, shown, ConfigSource.DEFAULT_CONFIG))
    return out


def _group_of(name: str) -> tuple[str, ...]:
    for head, group in BROKER_SYNONYM_GROUPS.items():
        if name == head:
            return group
    return (name,)


def describe_topic(broker: Broker, info: TopicInfo, keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """Every topic config (or just ``keys``) with value, source and synonyms."""
    state = ensure_loaded(broker)
    lc = broker.log_config(info)
    wanted = set(keys) if keys is not None else None
    out: list[ConfigEntry] = []
    for name in sorted(TOPIC_CONFIG_TYPES):
        if wanted is not None and name not in wanted:
            continue
        value = to_config_string(getattr(lc, name.replace(".", "_"), None))
        synonyms: list[Synonym] = []
        if name in info.configs:
            synonyms.append(Synonym(name, info.configs[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        bname = TOPIC_SYNONYMS.get(name)
        if bname is not None:
            synonyms += _broker_synonyms(broker, state, _group_of(bname))
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        sensitive = is_sensitive(name)
        out.append(
            ConfigEntry(name, value, source, False, sensitive, TOPIC_CONFIG_TYPES[name], tuple(synonyms))
        )
    return out


def broker_scope(broker: Broker, resource_name: str) -> bool:
    """True for the cluster default (``""``), False for this broker; INVALID_REQUEST otherwise."""
    if resource_name == "":
        return True
    if resource_name.strip() == str(broker.node_id):
        return False
    raise _bad_request(
        f"Unexpected broker id, expected {broker.node_id} or empty string, but received {resource_name}"
    )


def describe_broker(broker: Broker, default: bool, keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """This broker's configs (all known and statically set ones), or for the cluster default
    resource just the dynamic defaults (what Kafka answers)."""
    state = ensure_loaded(broker)
    wanted = set(keys) if keys is not None else None
    out: list[ConfigEntry] = []
    if default:
        for name in sorted(state.default):
            if wanted is not None and name not in wanted:
                continue
            syn = Synonym(name, state.default[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
            out.append(
                ConfigEntry(
                    name,
                    state.default[name],
                    syn.source,
                    False,
                    is_sensitive(name),
                    broker_config_type(name),
                    (syn,),
                )
            )
        return out
    names = sorted(set(BROKER_DEFAULTS) | set(broker.config.explicit))
    for name in names:
        if wanted is not None and name not in wanted:
            continue
        synonyms = _broker_synonyms(broker, state, [name])
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        value = (
            _broker_display(name, broker.config.values.get(name))
            if name in BROKER_DEFAULTS
            else (to_config_string(broker.config.values.get(name)))
        )
        out.append(
            ConfigEntry(
                name,
                value,
                source,
                name not in DYNAMIC_BROKER_CONFIGS,
                is_sensitive(name),
                broker_config_type(name),
                tuple(synonyms),
            )
        )
    return out


# ------------------------------------------------------------------------------ alter


def incremental_changes(
    current: Mapping[str, str],
    ops: Iterable[tuple[str, int, str | None]],
    *,
    type_of: Mapping[str, ConfigType],
    effective: Mapping[str, str | None],
    unknown: str,
) -> dict[str, str]:
    """Apply IncrementalAlterConfigs operations ``(name, op, value)`` to ``current`` (the stored
    overrides); returns the new overrides (values not yet validated). APPEND/SUBTRACT start from
    the stored value, else the effective one, and apply to LIST configs only."""
    new = dict(current)
    seen: set[str] = set()
    for name, op, value in ops:
        if name in seen:
            raise _bad_request(f"Error due to duplicate config keys: {name}")
        seen.add(name)
        if name not in type_of:
            raise _invalid(f"Unknown {unknown} config name: {name}")
        try:
            kind = OpType(op)
        except ValueError:
            raise _bad_request(f"Unknown config operation {op} for config {name}") from None
        if kind is OpType.SET:
            if value is None:
                raise _invalid(f"Null value not supported for config {name}")
            new[name] = value
        elif kind is OpType.DELETE:
            new.pop(name, None)
        else:
            if type_of[name] is not ConfigType.LIST:
                verb = "append" if kind is OpType.APPEND else "subtract"
                raise _invalid(f"Config value {verb} is not allowed for config key: {name}")
            base_text = current.get(name, effective.get(name)) or ""
            base = [s.strip() for s in base_text.split(",") if s.strip()]
            given = [s.strip() for s in (value or "").split(",") if s.strip()]
            if kind is OpType.APPEND:
                result = base + [g for g in given if g not in base]
            else:
                result = [b for b in base if b not in given]
            new[name] = ",".join(result)
    return new


def _check_keys_unique(names: Iterable[str]) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise _bad_request(f"Error due to duplicate config keys: {n}")
        seen.add(n)


def alter_topic(
    broker: Broker, topic: str, overrides: Mapping[str, str | None], *, validate_only: bool
) -> None:
    """Replace a topic's overrides with ``overrides`` (after validation) and apply them to its
    open logs; ``validate_only`` checks without changing anything."""
    ensure_loaded(broker)
    info = broker.topics.get(topic)
    if info is None:
        raise ConfigResourceError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{topic}' does not exist."
        )
    clean = {name: normalize_topic_value(name, value) for name, value in overrides.items()}
    try:
        LogConfig.from_topic_configs(broker.config.topic_defaults(), clean)
    except ConfigError as e:
        raise _invalid(str(e)) from e
    if validate_only or clean == info.configs:
        return
    broker.topics.set_configs(topic, clean)
    refresh_logs(broker, topic)


def topic_effective_strings(broker: Broker, info: TopicInfo) -> dict[str, str | None]:
    return {e.name: e.value for e in describe_topic(broker, info)}


def alter_broker(
    broker: Broker, default: bool, configs: Mapping[str, str | None], *, validate_only: bool
) -> None:
    """Replace the dynamic configs of this broker (or of the cluster default) with ``configs``,
    persist them and apply them at once."""
    state = ensure_loaded(broker)
    clean: dict[str, str] = {}
    not_dynamic = sorted(n for n in configs if n in BROKER_DEFAULTS and n not in DYNAMIC_BROKER_CONFIGS)
    if not_dynamic:
        raise _invalid("Cannot update these configs dynamically: " + ", ".join(not_dynamic))
    for name, value in configs.items():
        clean[name] = normalize_broker_value(name, value)
    trial = DynamicBrokerConfigs(state.path, state.node_id, dict(state.default), dict(state.per_broker))
    if default:
        trial.default = clean
    else:
        trial.per_broker = clean
    values = dict(broker.config.values)
    values.update(_effective_values(broker, trial))
    _validate_broker_values(broker, values)
    if validate_only:
        return
    if state.scope(default) == clean:
        return
    if default:
        state.default = clean
    else:
        state.per_broker = clean
    state.save()
    _apply(broker, state)


def _validate_broker_values(broker: Broker, values: dict[str, Any]) -> None:
    """Would the broker (and every topic's log config) be valid with these values?"""
    from ..config import BrokerConfig

    trial = BrokerConfig(values=values, explicit=dict(broker.config.explicit))
    try:
        trial.validate()
        defaults = trial.topic_defaults()
        LogConfig.from_topic_configs(defaults, {})
        for info in broker.topics.topics.values():
            LogConfig.from_topic_configs(defaults, info.configs)
    except ConfigError as e:
        raise _invalid(str(e)) from e


def broker_effective_strings(broker: Broker, default: bool) -> dict[str, str | None]:
    state = ensure_loaded(broker)
    if default:
        return dict(state.default)
    return {n: to_config_string(broker.config.values.get(n)) for n in DYNAMIC_BROKER_CONFIGS}


def broker_config_types() -> dict[str, ConfigType]:
    return {n: broker_config_type(n) for n in BROKER_DEFAULTS}


def check_unique(names: Iterable[str]) -> None:
    """INVALID_REQUEST if a config name appears twice in one resource."""
    _check_keys_unique(names)
