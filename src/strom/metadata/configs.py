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

Names, types, defaults, validators, synonyms, which broker configs are dynamic and which are
sensitive: :mod:`strom.config_schema`.

Topic overrides live in the topic registry. Dynamic broker configs
(:class:`DynamicBrokerConfigs`, which the broker loads when it is made and owns) are kept in
``strom-dynamic-configs.json`` in the log dir, replaced atomically (temp file, fsync, rename,
fsync of the directory); on the metadata quorum they are ConfigRecords on (BROKER, ``""``) and
(BROKER, ``"<id>"``) in the metadata log instead: an alter is checked here
(:func:`validate_broker_change`), written through the controller, and every broker takes the
cluster default and its own configs from the published image (:func:`apply_image_broker_configs`;
nothing is written to the log dir). They are applied to ``broker.config.values`` (what the rest of the broker
reads) and pushed into every open partition log, so a change takes effect without restart
(:func:`apply_dynamic_broker_configs`, also at broker start). The functions here take the broker
as a :class:`ConfigHost`: this module does not import the server.

Error contract: :class:`ConfigResourceError` (a :class:`KafkaError`) with INVALID_CONFIG for an
unknown name, a value of the wrong type or out of range, or a broker config that cannot change at
runtime; INVALID_REQUEST for a malformed request (duplicate keys, bad operation, wrong broker id);
UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any, Protocol

from ..config import BrokerConfig, LogConfig
from ..config_schema import (
    BROKER_CONFIGS,
    INT_MAX,
    LONG_MAX,
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigError,
    ConfigType,
    DynamicScope,
    looks_sensitive,
    parse_value,
    to_config_string,
)
from ..durable_file import replace_file
from ..protocol.errors import ErrorCode, KafkaError
from .topics import TopicInfo, TopicRegistry

__all__ = [
    "ConfigEntry",
    "ConfigHost",
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
    "apply_image_broker_configs",
    "broker_scope",
    "describe_broker",
    "describe_topic",
    "incremental_changes",
    "is_sensitive",
    "quorum_broker_scope",
    "validate_broker_change",
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


# ------------------------------------------------------------------------------ definitions
# (all in strom.config_schema; these are views of it)

TOPIC_CONFIG_TYPES: dict[str, ConfigType] = {name: d.config_type for name, d in TOPIC_CONFIGS.items()}
DYNAMIC_BROKER_CONFIGS: frozenset[str] = frozenset(
    name for name, d in BROKER_CONFIGS.items() if d.dynamic is not DynamicScope.READ_ONLY
)


def is_sensitive(name: str) -> bool:
    """Sensitive broker configs (Kafka's PASSWORD type), and any unknown name that looks like a
    secret (``listener.name.<l>.ssl.keystore.password``)."""
    d = BROKER_CONFIGS.get(name)
    return d.sensitive if d is not None else looks_sensitive(name)


def broker_config_type(name: str) -> ConfigType:
    d = BROKER_CONFIGS.get(name)
    if d is not None:
        return d.config_type
    return ConfigType.PASSWORD if looks_sensitive(name) else ConfigType.UNKNOWN


# ------------------------------------------------------------------------------ values


def normalize_value(d: ConfigDef, raw: str | None) -> str:
    """Check ``raw`` against the config's type, range and allowed values; return it in canonical
    form (what is stored and described). Raises INVALID_CONFIG."""
    name, ctype = d.name, d.config_type
    if raw is None:
        raise _invalid(f"Null value not supported for config {name}")
    text = raw.strip()
    value: Any
    if ctype in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
        try:
            value = int(text)
        except ValueError:
            raise _invalid(
                f"Invalid value {raw} for configuration {name}: Not a number of type {ctype.name}"
            ) from None
        hi = {ConfigType.INT: INT_MAX, ConfigType.SHORT: 2**15 - 1}.get(ctype, LONG_MAX)
        if not -hi - 1 <= value <= hi:
            raise _invalid(f"Invalid value {raw} for configuration {name}: Not a number of type {ctype.name}")
        canonical = str(value)
    elif ctype is ConfigType.DOUBLE:
        try:
            value = float(text)
        except ValueError:
            raise _invalid(
                f"Invalid value {raw} for configuration {name}: Not a number of type DOUBLE"
            ) from None
        if not math.isfinite(value):
            raise _invalid(f"Invalid value {raw} for configuration {name}: Not a number of type DOUBLE")
        canonical = repr(value)
    elif ctype is ConfigType.BOOLEAN:
        canonical = text.lower()
        if canonical not in ("true", "false"):
            raise _invalid(
                f"Invalid value {raw} for configuration {name}: Expected value to be either true or false"
            )
        value = canonical == "true"
    elif ctype is ConfigType.LIST:
        # an empty list is valid (Kafka's ValidList checks only the items): for cleanup.policy
        # it means neither retention nor compaction (see LogConfig.cleanup_policies)
        value = canonical = ",".join(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    else:
        value = canonical = text
    if d.validator is not None:  # strictly: a "not set" sentinel cannot be set explicitly
        try:
            d.validator.validate(name, value, raw)
        except ConfigError as e:
            raise _invalid(str(e)) from None
    return canonical


def normalize_topic_value(name: str, raw: str | None) -> str:
    d = TOPIC_CONFIGS.get(name)
    if d is None:
        raise _invalid(f"Unknown topic config name: {name}")
    return normalize_value(d, raw)


def normalize_broker_value(name: str, raw: str | None) -> str:
    d = BROKER_CONFIGS.get(name)
    if d is None:
        raise _invalid(f"Unknown broker config name: {name}")
    return normalize_value(d, raw)


def _typed_broker_value(name: str, text: str) -> Any:
    return parse_value(name, BROKER_CONFIGS[name].python_type, text)


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


class ConfigHost(Protocol):
    """What the config model needs of the broker: its config, its dynamic configs (which it owns
    and loads at construction), the topic registry, and the log configs of its topics."""

    config: BrokerConfig
    node_id: int
    dynamic_configs: DynamicBrokerConfigs
    topics: TopicRegistry

    def log_config(self, info: TopicInfo) -> LogConfig: ...

    def refresh_log_configs(self, topic: str | None = None) -> None:
        """Push the current effective log config into open partition logs (all, or one
        topic's)."""
        ...


def apply_dynamic_broker_configs(host: ConfigHost) -> None:
    """Apply the dynamic broker configs to ``host.config.values`` and its open logs. Call at
    startup, before partition logs are opened (they take their defaults from those values)."""
    host.config.values.update(_effective_values(host.config, host.dynamic_configs))
    host.refresh_log_configs()


def _static_value(config: BrokerConfig, name: str) -> Any:
    if name in config.explicit:
        return config.explicit[name]
    d = BROKER_CONFIGS.get(name)
    return d.default if d else None


def _effective_values(config: BrokerConfig, state: DynamicBrokerConfigs) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in DYNAMIC_BROKER_CONFIGS:
        if name in state.per_broker:
            out[name] = _typed_broker_value(name, state.per_broker[name])
        elif name in state.default:
            out[name] = _typed_broker_value(name, state.default[name])
        else:
            out[name] = _static_value(config, name)
    return out


def _broker_display(name: str, value: Any) -> str | None:
    d = BROKER_CONFIGS[name]
    if d.null_default and value == d.default:
        return None
    if value == "" and d.default == "":
        return None
    return to_config_string(value)


def _broker_synonyms(
    config: BrokerConfig, state: DynamicBrokerConfigs, names: Iterable[str]
) -> list[Synonym]:
    names = list(names)
    out: list[Synonym] = []
    for n in names:
        if n in state.per_broker:
            out.append(Synonym(n, state.per_broker[n], ConfigSource.DYNAMIC_BROKER_CONFIG))
    for n in names:
        if n in state.default:
            out.append(Synonym(n, state.default[n], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
    for n in names:
        if n in config.explicit:
            out.append(Synonym(n, to_config_string(config.explicit[n]), ConfigSource.STATIC_BROKER_CONFIG))
    for n in names:
        d = BROKER_CONFIGS.get(n)
        if d is not None:
            shown = _broker_display(n, d.default)
            if shown is not None:
                out.append(Synonym(n, shown, ConfigSource.DEFAULT_CONFIG))
    return out


def describe_topic(host: ConfigHost, info: TopicInfo, keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """Every topic config (or just ``keys``) with value, source and synonyms."""
    lc = host.log_config(info)
    wanted = set(keys) if keys is not None else None
    out: list[ConfigEntry] = []
    for name in sorted(TOPIC_CONFIGS):
        if wanted is not None and name not in wanted:
            continue
        d = TOPIC_CONFIGS[name]
        value = to_config_string(getattr(lc, name.replace(".", "_"), None))
        synonyms: list[Synonym] = []
        if name in info.configs:
            synonyms.append(Synonym(name, info.configs[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        synonyms += _broker_synonyms(host.config, host.dynamic_configs, d.synonyms)
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        out.append(ConfigEntry(name, value, source, False, d.sensitive, d.config_type, tuple(synonyms)))
    return out


def broker_scope(host: ConfigHost, resource_name: str) -> bool:
    """True for the cluster default (``""``), False for this broker; INVALID_REQUEST otherwise."""
    if resource_name == "":
        return True
    if resource_name.strip() == str(host.node_id):
        return False
    raise _bad_request(
        f"Unexpected broker id, expected {host.node_id} or empty string, but received {resource_name}"
    )


def describe_broker(host: ConfigHost, default: bool, keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """This broker's configs (all known and statically set ones), or for the cluster default
    resource just the dynamic defaults (what Kafka answers)."""
    state = host.dynamic_configs
    config = host.config
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
    for name in sorted(set(BROKER_CONFIGS) | set(config.explicit)):
        if wanted is not None and name not in wanted:
            continue
        d = BROKER_CONFIGS.get(name)
        synonyms = _broker_synonyms(config, state, [name])
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        value = config.values.get(name)
        out.append(
            ConfigEntry(
                name,
                _broker_display(name, value) if d is not None else to_config_string(value),
                source,
                d is None or d.dynamic is DynamicScope.READ_ONLY,
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
    host: ConfigHost, topic: str, overrides: Mapping[str, str | None], *, validate_only: bool
) -> None:
    """Replace a topic's overrides with ``overrides`` (after validation) and apply them to its
    open logs; ``validate_only`` checks without changing anything."""
    info = host.topics.get(topic)
    if info is None:
        raise ConfigResourceError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{topic}' does not exist."
        )
    clean = {name: normalize_topic_value(name, value) for name, value in overrides.items()}
    try:
        LogConfig.from_topic_configs(host.config.topic_defaults(), clean)
    except ConfigError as e:
        raise _invalid(str(e)) from e
    if validate_only or clean == info.configs:
        return
    host.topics.set_configs(topic, clean)
    host.refresh_log_configs(topic)


def topic_effective_strings(host: ConfigHost, info: TopicInfo) -> dict[str, str | None]:
    return {e.name: e.value for e in describe_topic(host, info)}


def alter_broker(
    host: ConfigHost, default: bool, configs: Mapping[str, str | None], *, validate_only: bool
) -> None:
    """Replace the dynamic configs of this broker (or of the cluster default) with ``configs``,
    persist them and apply them at once."""
    clean = validate_broker_change(host, default, configs)
    if validate_only:
        return
    state = host.dynamic_configs
    if state.scope(default) == clean:
        return
    if default:
        state.default = clean
    else:
        state.per_broker = clean
    state.save()
    apply_dynamic_broker_configs(host)


def validate_broker_change(
    host: ConfigHost, default: bool, configs: Mapping[str, str | None], *, local: bool = True
) -> dict[str, str]:
    """Check that ``configs`` may replace the dynamic configs of the cluster default
    (``default``), of this broker, or (``local`` false, on the metadata quorum) of another
    broker, whose static configs this node does not know: then only the names, scopes and
    values are checked, as Kafka's controller does. Returns the canonical values."""
    state = host.dynamic_configs
    scopes = {n: BROKER_CONFIGS[n].dynamic for n in configs if n in BROKER_CONFIGS}
    not_dynamic = sorted(n for n, scope in scopes.items() if scope is DynamicScope.READ_ONLY)
    if not_dynamic:
        raise _invalid("Cannot update these configs dynamically: " + ", ".join(not_dynamic))
    per_broker = sorted(n for n, scope in scopes.items() if scope is DynamicScope.PER_BROKER)
    if default and per_broker:
        raise _invalid(
            "Cannot update these configs at default cluster level, broker id must be specified: "
            + ", ".join(per_broker)
        )
    clean = {name: normalize_broker_value(name, value) for name, value in configs.items()}
    if not local:
        return clean
    trial = DynamicBrokerConfigs(state.path, state.node_id, dict(state.default), dict(state.per_broker))
    if default:
        trial.default = clean
    else:
        trial.per_broker = clean
    values = dict(host.config.values)
    values.update(_effective_values(host.config, trial))
    _validate_broker_values(host, values)
    return clean


def quorum_broker_scope(host: ConfigHost, resource_name: str) -> tuple[bool, bool]:
    """On the metadata quorum, the BROKER resource an alter names: ``(default, local)`` for the
    cluster default (``""``), this broker, or another broker by id (its configs go through the
    controller like this broker's); INVALID_REQUEST for a name that is no broker id."""
    if resource_name == "":
        return True, True
    if not resource_name.strip().isdigit():
        broker_scope(host, resource_name)  # (raises, with Kafka's message)
    return False, int(resource_name) == host.node_id


def apply_image_broker_configs(
    host: ConfigHost, default: Mapping[str, str], per_broker: Mapping[str, str]
) -> bool:
    """On the metadata quorum: the dynamic broker configs of the published image (the cluster
    default and this broker's) become the broker's, applied at once when they changed (nothing
    is written to the log dir: the metadata log keeps them). True if they changed."""
    state = host.dynamic_configs
    if state.default == default and state.per_broker == per_broker:
        return False
    state.default = dict(default)
    state.per_broker = dict(per_broker)
    apply_dynamic_broker_configs(host)
    return True


def _validate_broker_values(host: ConfigHost, values: dict[str, Any]) -> None:
    """Would the broker (and every topic's log config) be valid with these values?"""
    trial = BrokerConfig(values=values, explicit=dict(host.config.explicit))
    try:
        trial.validate()
        defaults = trial.topic_defaults()
        LogConfig.from_topic_configs(defaults, {})
        for info in host.topics.topics.values():
            LogConfig.from_topic_configs(defaults, info.configs)
    except ConfigError as e:
        raise _invalid(str(e)) from e


def broker_effective_strings(host: ConfigHost, default: bool) -> dict[str, str | None]:
    state = host.dynamic_configs
    if default:
        return dict(state.default)
    return {n: to_config_string(host.config.values.get(n)) for n in DYNAMIC_BROKER_CONFIGS}


def broker_config_types() -> dict[str, ConfigType]:
    return {n: d.config_type for n, d in BROKER_CONFIGS.items()}


def check_unique(names: Iterable[str]) -> None:
    """INVALID_REQUEST if a config name appears twice in one resource."""
    _check_keys_unique(names)
