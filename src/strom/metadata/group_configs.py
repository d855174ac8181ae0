"""Group configs: the GROUP config resource (resource type 32, KIP-848/KIP-932).

Kafka's ``GroupConfig``: per-group overrides of the group coordinator's broker-level settings,
set with IncrementalAlterConfigs on ``ConfigResource(GROUP, "<group id>")`` (``kafka-configs.sh
--entity-type groups``) and read back with DescribeConfigs. A group need not exist to carry
configs. Each config defaults to a broker config (``share.record.lock.duration.ms`` to
``group.share.record.lock.duration.ms`` ...); a value is validated on alter against its type, its
own lower bound and the broker's ``group.*.min/max.*`` bounds, and session timeouts must exceed
heartbeat intervals (Kafka's messages). When read for use (:func:`effective`) a stored value
outside the broker's current bounds is clamped into them, as Kafka 4.x's ``GroupConfig.evaluate``.

Kafka keeps them as ConfigRecords in the metadata log; strom keeps them, like its dynamic broker
configs, in a JSON document in the log dir (``strom-group-configs.json``), replaced atomically.

Error contract: :class:`ConfigResourceError` with INVALID_CONFIG (unknown name, bad value) or
INVALID_REQUEST (empty group id, duplicate keys, APPEND/SUBTRACT on a non-list config).
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..durable_file import replace_file
from ..protocol.errors import ErrorCode
from .configs import ConfigEntry, ConfigResourceError, ConfigSource, ConfigType, Synonym, normalize_value

if TYPE_CHECKING:
    from ..server.broker import Broker

GROUP_CONFIG_FILE = "strom-group-configs.json"

# name -> (type, broker config it defaults to or None, built-in default, own lower bound,
#          broker min config, broker max config)
_SPEC: dict[str, tuple[ConfigType, str | None, str, int | None, str | None, str | None]] = {
    "consumer.session.timeout.ms": (
        ConfigType.INT,
        "group.consumer.session.timeout.ms",
        "45000",
        1,
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
    ),
    "consumer.heartbeat.interval.ms": (
        ConfigType.INT,
        "group.consumer.heartbeat.interval.ms",
        "5000",
        1,
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
    ),
    "share.session.timeout.ms": (
        ConfigType.INT,
        "group.share.session.timeout.ms",
        "45000",
        1,
        "group.share.min.session.timeout.ms",
        "group.share.max.session.timeout.ms",
    ),
    "share.heartbeat.interval.ms": (
        ConfigType.INT,
        "group.share.heartbeat.interval.ms",
        "5000",
        1,
        "group.share.min.heartbeat.interval.ms",
        "group.share.max.heartbeat.interval.ms",
    ),
    "share.record.lock.duration.ms": (
        ConfigType.INT,
        "group.share.record.lock.duration.ms",
        "30000",
        1000,
        "group.share.min.record.lock.duration.ms",
        "group.share.max.record.lock.duration.ms",
    ),
    "share.delivery.count.limit": (
        ConfigType.INT,
        "group.share.delivery.count.limit",
        "5",
        2,
        "group.share.min.delivery.count.limit",
        "group.share.max.delivery.count.limit",
    ),
    "share.partition.max.record.locks": (
        ConfigType.INT,
        "group.share.partition.max.record.locks",
        "2000",
        100,
        "group.share.min.partition.max.record.locks",
        "group.share.max.partition.max.record.locks",
    ),
    "share.auto.offset.reset": (ConfigType.STRING, None, "latest", None, None, None),
    "share.isolation.level": (ConfigType.STRING, None, "read_uncommitted", None, None, None),
    "share.renew.acknowledge.enable": (ConfigType.BOOLEAN, None, "true", None, None, None),
    "streams.session.timeout.ms": (ConfigType.INT, None, "45000", 1, None, None),
    "streams.heartbeat.interval.ms": (ConfigType.INT, None, "5000", 1, None, None),
    "streams.num.standby.replicas": (ConfigType.INT, None, "0", 0, None, None),
    "streams.initial.rebalance.delay.ms": (ConfigType.INT, None, "3000", 0, None, None),
}
# Kafka's streams bounds (group.streams.min/max.*), which strom has no broker configs for
_STREAMS_BOUNDS = {
    "streams.session.timeout.ms": (45000, 60000),
    "streams.heartbeat.interval.ms": (5000, 15000),
    "streams.num.standby.replicas": (0, 2),
}
_SESSION_PAIRS = (
    ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
    ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"),
)
_DURATION = re.compile(r"^-?P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?$", re.IGNORECASE)


def group_config_types() -> dict[str, ConfigType]:
    return {name: spec[0] for name, spec in _SPEC.items()}


def _invalid(message: str) -> ConfigResourceError:
    return ConfigResourceError(ErrorCode.INVALID_CONFIG, message)


class GroupConfigStore:
    """Every group's overrides (canonical strings), persisted in ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.groups: dict[str, dict[str, str]] = {}
        if path.exists():
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
        doc = {"version": 1, "groups": new}
        replace_file(self.path, json.dumps(doc, indent=1, sort_keys=True).encode())
        self.groups = new


_STORES: weakref.WeakKeyDictionary[Broker, GroupConfigStore] = weakref.WeakKeyDictionary()


def store(broker: Broker) -> GroupConfigStore:
    s = _STORES.get(broker)
    if s is None:
        s = _STORES[broker] = GroupConfigStore(Path(broker.log_dir) / GROUP_CONFIG_FILE)
    return s


def _broker_value(broker_cfg: Any, name: str | None, fallback: str) -> str:
    if name is None:
        return fallback
    try:
        v = broker_cfg[name]
    except (KeyError, TypeError):
        return fallback
    if v is None:
        return fallback
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _bounds(broker_cfg: Any, name: str) -> tuple[int | None, int | None]:
    if name in _STREAMS_BOUNDS:
        return _STREAMS_BOUNDS[name]
    _t, _b, _d, _lo, mn, mx = _SPEC[name]
    lo = int(_broker_value(broker_cfg, mn, "0")) if mn else None
    hi = int(_broker_value(broker_cfg, mx, "0")) if mx else None
    return lo, hi


def defaults(broker_cfg: Any) -> dict[str, str]:
    return {n: _broker_value(broker_cfg, s[1], s[2]) for n, s in _SPEC.items()}


def normalize(name: str, raw: str | None) -> str:
    spec = _SPEC.get(name)
    if spec is None:
        raise _invalid(f"Unknown group config name: {name}")
    text = normalize_value(name, spec[0], raw, spec[3])
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
        if _SPEC[name][0] is not ConfigType.INT:
            continue
        lo, hi = _bounds(broker_cfg, name)
        n = int(merged[name])
        _t, _b, _d, _own, mn, mx = _SPEC[name]
        if lo is not None and n < lo and (mn or name in _STREAMS_BOUNDS):
            bound = mn or "group." + name.replace("streams.", "streams.min.")
            raise _invalid(f"{name} must be greater than or equal to {bound}")
        if hi is not None and n > hi:
            bound = mx or "group." + name.replace("streams.", "streams.max.")
            raise _invalid(f"{name} must be less than or equal to {bound}")
    for session, heartbeat in _SESSION_PAIRS:
        if (session in out or heartbeat in out) and int(merged[session]) <= int(merged[heartbeat]):
            raise _invalid(f"{session} must be greater than {heartbeat}")
    return out


def effective(broker_cfg: Any, overrides: Mapping[str, str]) -> dict[str, str]:
    """The values a coordinator uses: overrides clamped into the broker's current bounds, else
    the broker-level defaults (Kafka's ``GroupConfig.evaluate``)."""
    out = defaults(broker_cfg)
    for name, value in overrides.items():
        if name not in _SPEC:
            continue
        if _SPEC[name][0] is ConfigType.INT:
            lo, hi = _bounds(broker_cfg, name)
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


def describe(broker: Broker, group: str, keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    check_group_name(group)
    overrides = store(broker).get(group)
    base = defaults(broker.config)
    names = list(_SPEC) if keys is None else [k for k in keys if k in _SPEC]
    out = []
    for name in names:
        ctype = _SPEC[name][0]
        syn: list[Synonym] = []
        if name in overrides:
            syn.append(Synonym(name, overrides[name], ConfigSource.DYNAMIC_GROUP_CONFIG))
        syn.append(Synonym(name, base[name], ConfigSource.DEFAULT_CONFIG))
        value = overrides.get(name, base[name])
        out.append(ConfigEntry(name, value, syn[0].source, False, False, ctype, tuple(syn)))
    return out


def alter(broker: Broker, group: str, overrides: Mapping[str, str | None], *, validate_only: bool) -> None:
    check_group_name(group)
    canon = validate(broker.config, overrides)
    if not validate_only:
        store(broker).set(group, canon)
        listener = getattr(broker, "on_group_config_change", None)
        if listener is not None:
            listener(group)


def group_effective(broker: Broker, group: str) -> dict[str, str]:
    return effective(broker.config, store(broker).get(group))
