"""Group configs: the GROUP config resource (resource type 32, KIP-848/KIP-932).

Kafka's ``GroupConfig``: per-group overrides of the group coordinator's broker-level settings,
set with IncrementalAlterConfigs on ``ConfigResource(GROUP, "<group id>")`` (``kafka-configs.sh
--entity-type groups``) and read back with DescribeConfigs. A group need not exist to carry
configs. Each config defaults to a broker config (``share.record.lock.duration.ms`` to
``group.share.record.lock.duration.ms`` ...); a value is validated on alter against its type, its
own lower bound and the broker's ``group.*.min/max.*`` bounds, and session timeouts must exceed
heartbeat intervals (Kafka's messages). When read for use (:func:`effective`) a stored value
outside the broker's current bounds is clamped into them, as Kafka 4.x's ``GroupConfig.evaluate``.

Names, types, defaults, lower bounds and the bounding broker configs are in
:data:`strom.config_schema.GROUP_CONFIGS`. Kafka keeps the overrides as ConfigRecords in the
metadata log; so does strom on the metadata quorum (ConfigRecords on (GROUP, group id), written
through the controller; the broker's store is then in memory, filled from each published image by
:meth:`GroupConfigStore.replace_all`). On the registry path strom keeps them, like its dynamic
broker configs, in a JSON document in the log dir (``strom-group-configs.json``), replaced
atomically: a :class:`GroupConfigStore` the broker makes and owns (``Broker.group_configs``).

Error contract: :class:`ConfigResourceError` with INVALID_CONFIG (unknown name, bad value) or
INVALID_REQUEST (empty group id, duplicate keys, APPEND/SUBTRACT on a non-list config).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..config_schema import GROUP_CONFIGS, ConfigDef, ConfigType, to_config_string
from ..durable_file import replace_file
from ..protocol.errors import ErrorCode
from .configs import (
    ConfigEntry,
    ConfigResourceError,
    ConfigSource,
    Synonym,
    normalize_value,
)

GROUP_CONFIG_FILE = "strom-group-configs.json"

_SESSION_PAIRS = (
    ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
    ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"),
)
_DURATION = re.compile(r"^-?P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?$", re.IGNORECASE)


def group_config_types() -> dict[str, ConfigType]:
    return {name: d.config_type for name, d in GROUP_CONFIGS.items()}


def _invalid(message: str) -> ConfigResourceError:
    return ConfigResourceError(ErrorCode.INVALID_CONFIG, message)


class GroupConfigStore:
    """Every group's overrides (canonical strings), persisted in ``path``. The broker makes one
    (:meth:`open`) and owns it."""

    @classmethod
    def open(cls, log_dir: Path) -> GroupConfigStore:
        return cls(log_dir / GROUP_CONFIG_FILE)

    @classmethod
    def in_memory(cls) -> GroupConfigStore:
        """The store of a broker on the metadata quorum (the metadata log keeps the configs)."""
        return cls(None)

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.groups: dict[str, dict[str, str]] = {}
        if path is not None and path.exists():
            doc = json.loads(path.read_text())
            self.groups = {
                str(g): {str(k): str(v) for k, v in c.items()} for g, c in doc.get("groups", {}).items()
            }

    def get(self, group: str) -> dict[str, str]:
        return dict(self.groups.get(group, {}))

    def set(self, group: str, overrides: Mapping[str, str]) -> None:
        new = dict(self.groups)
        if overrides:
            new[group] = dict(overrides)
        else:
            new.pop(group, None)
        if self.path is not None:
            doc = {"version": 1, "groups": new}
            replace_file(self.path, json.dumps(doc, indent=1, sort_keys=True).encode())
        self.groups = new

    def replace_all(self, groups: Mapping[str, Mapping[str, str]]) -> bool:
        """Every group's overrides at once (from a metadata image); True if they changed."""
        new = {g: dict(c) for g, c in groups.items() if c}
        if new == self.groups:
            return False
        self.groups = new
        return True


def _broker_value(broker_cfg: Any, name: str | None, fallback: str) -> str:
    if name is None:
        return fallback
    try:
        v = broker_cfg[name]
    except (KeyError, TypeError):
        return fallback
    if v is None:
        return fallback
    return to_config_string(v) or ""


def _bounds(broker_cfg: Any, d: ConfigDef) -> tuple[int | None, int | None]:
    if d.fixed_bounds is not None:
        return d.fixed_bounds
    if d.bound_configs is None:
        return None, None
    mn, mx = d.bound_configs
    return int(_broker_value(broker_cfg, mn, "0")), int(_broker_value(broker_cfg, mx, "0"))


def _bound_name(d: ConfigDef, which: int) -> str:
    if d.bound_configs is not None:
        return d.bound_configs[which]
    # Kafka's group.streams.min/max.* (strom has no such broker configs)
    return "group." + d.name.replace("streams.", "streams.min." if which == 0 else "streams.max.")


def defaults(broker_cfg: Any) -> dict[str, str]:
    """Every group config's default: its broker synonym's value, else its own default."""
    out: dict[str, str] = {}
    for name, d in GROUP_CONFIGS.items():
        own = to_config_string(d.default) or ""
        out[name] = _broker_value(broker_cfg, d.synonyms[0], own) if d.synonyms else own
    return out


def normalize(name: str, raw: str | None) -> str:
    d = GROUP_CONFIGS.get(name)
    if d is None:
        raise _invalid(f"Unknown group config name: {name}")
    text = normalize_value(d, raw)
    if name == "share.auto.offset.reset":
        low = text.lower()
        if low in ("earliest", "latest"):
            return low
        if low.startswith("by_duration:"):
            dur = text.split(":", 1)[1]
            if dur.startswith("-"):
                raise _invalid(
                    f"Invalid value {raw} for configuration {name}: Negative duration is not allowed."
                )
            if not _DURATION.match(dur) or dur.upper() in ("P", "PT"):
                raise _invalid(
                    f"Invalid value {raw} for configuration {name}: Unable to parse duration string '{dur}'"
                )
            return text
        raise _invalid(
            f"Invalid value {raw} for configuration {name}: Invalid value `{text}` for "
            "configuration share.auto.offset.reset. The value must be either 'earliest', "
            "'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'."
        )
    if name == "share.isolation.level" and text not in ("read_committed", "read_uncommitted"):
        raise _invalid(
            f"Invalid value {raw} for configuration {name}: String must be one of: read_committed, "
            "read_uncommitted"
        )
    return text


def validate(broker_cfg: Any, overrides: Mapping[str, str | None]) -> dict[str, str]:
    """Normalize ``overrides`` and check them with the broker defaults (Kafka's
    ``GroupConfig.validate``). Returns the canonical overrides."""
    out = {name: normalize(name, value) for name, value in overrides.items()}
    merged = {**defaults(broker_cfg), **out}
    for name in out:
        d = GROUP_CONFIGS[name]
        if d.config_type is not ConfigType.INT:
            continue
        lo, hi = _bounds(broker_cfg, d)
        n = int(merged[name])
        if lo is not None and n < lo:
            raise _invalid(f"{name} must be greater than or equal to {_bound_name(d, 0)}")
        if hi is not None and n > hi:
            raise _invalid(f"{name} must be less than or equal to {_bound_name(d, 1)}")
    for session, heartbeat in _SESSION_PAIRS:
        if (session in out or heartbeat in out) and int(merged[session]) <= int(merged[heartbeat]):
            raise _invalid(f"{session} must be greater than {heartbeat}")
    return out


def effective(broker_cfg: Any, overrides: Mapping[str, str]) -> dict[str, str]:
    """The values a coordinator uses: overrides clamped into the broker's current bounds, else
    the broker-level defaults (Kafka's ``GroupConfig.evaluate``)."""
    out = defaults(broker_cfg)
    for name, value in overrides.items():
        d = GROUP_CONFIGS.get(name)
        if d is None:
            continue
        if d.config_type is ConfigType.INT:
            lo, hi = _bounds(broker_cfg, d)
            n = int(value)
            if lo is not None and n < lo:
                n = lo
            if hi is not None and n > hi:
                n = hi
            value = str(n)
        out[name] = value
    return out


def check_group_name(name: str) -> None:
    if not name:
        raise ConfigResourceError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")


def describe(
    broker_cfg: Any, store: GroupConfigStore, group: str, keys: Iterable[str] | None = None
) -> list[ConfigEntry]:
    check_group_name(group)
    overrides = store.get(group)
    base = defaults(broker_cfg)
    names = list(GROUP_CONFIGS) if keys is None else [k for k in keys if k in GROUP_CONFIGS]
    out = []
    for name in names:
        d = GROUP_CONFIGS[name]
        syn: list[Synonym] = []
        if name in overrides:
            syn.append(Synonym(name, overrides[name], ConfigSource.DYNAMIC_GROUP_CONFIG))
        syn.append(Synonym(name, base[name], ConfigSource.DEFAULT_CONFIG))
        value = overrides.get(name, base[name])
        out.append(ConfigEntry(name, value, syn[0].source, False, d.sensitive, d.config_type, tuple(syn)))
    return out


def alter(
    broker_cfg: Any,
    store: GroupConfigStore,
    group: str,
    overrides: Mapping[str, str | None],
    *,
    validate_only: bool,
) -> None:
    check_group_name(group)
    canon = validate(broker_cfg, overrides)
    if not validate_only:
        store.set(group, canon)


def group_effective(broker_cfg: Any, store: GroupConfigStore, group: str) -> dict[str, str]:
    return effective(broker_cfg, store.get(group))
