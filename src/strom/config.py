"""One typed configuration, with Apache Kafka's names and defaults.

Broker configs come from a ``server.properties``-style file plus ``--override key=value``
(the shape of ``kafka-server-start.sh``). Topic configs (``retention.ms``, ``segment.bytes`` ...)
default to the broker's ``log.*`` synonyms and can be overridden per topic. Names, types,
defaults and validators are :mod:`strom.config_schema`'s; this module parses and checks values
against it.

Error contract: :class:`ConfigError` (a ``ValueError``) for unknown types, bad values or
unparseable files; the message names the key.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config_schema import (
    BROKER_CONFIGS,
    LONG_MAX,
    TOPIC_CONFIGS,
    ConfigError,
    parse_value,
    resolve_topic_defaults,
)
from .metadata.quorum_config import KRaftConfig, QuorumConfigError, parse_listener_names
from .security.sasl import validate_sasl_config
from .security.session import SECURITY_PROTOCOLS
from .security.tls import validate_tls_configs

__all__ = ["BrokerConfig", "ConfigError", "LogConfig", "parse_properties"]


def _parse_endpoints(key: str, text: str) -> list[tuple[str, str, int]]:
    """``NAME://host:port,...`` -> [(name, host, port)]; a name may appear once."""
    out: list[tuple[str, str, int]] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if "://" not in item:
            raise ConfigError(f"{key} entry {item!r} is not of the form NAME://host:port")
        name, rest = item.split("://", 1)
        name = name.strip().upper()  # listener names are case-insensitive (Kafka upper-cases them)
        host, sep, port = rest.rpartition(":")
        if not sep or not port.isdigit() or not name:
            raise ConfigError(f"{key} entry {item!r} has no valid port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if any(name == n for n, _h, _p in out):
            raise ConfigError(f"{key} names listener {name!r} more than once")
        out.append((name, host, int(port)))
    return out


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java-properties-style text (``key=value`` or ``key: value``, ``#``/``!`` comments)."""
    out: dict[str, str] = {}
    pending = ""
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line = pending + line
        pending = ""
        for i, ch in enumerate(line):
            if ch in "=:":
                out[line[:i].strip()] = line[i + 1 :].strip()
                break
        else:
            out[line] = ""
    return out


_log = logging.getLogger("strom.config")


def _known_prefixed(name: str) -> bool:
    """A per-listener config (``listener.name.<l>.<config>`` or ``listener.name.<l>.<mechanism>.
    <config>``) whose base config is known: read by the listener code, not in the table."""
    low = name.lower()
    if not low.startswith("listener.name."):
        return False
    rest = low[len("listener.name.") :].partition(".")[2]
    return any(base in BROKER_CONFIGS for base in (rest, rest.partition(".")[2]))


@dataclass
class BrokerConfig:
    """Broker configuration. ``values`` holds every known key, typed; ``explicit`` what was set."""

    values: dict[str, Any] = field(default_factory=dict)
    explicit: dict[str, Any] = field(default_factory=dict)
    _advertised_cache: tuple[tuple[str, str], dict[str, tuple[str, int]]] | None = field(
        default=None, repr=False, compare=False
    )
    _kraft: KRaftConfig | None = field(default=None, repr=False, compare=False)
    unknown: list[str] = field(default_factory=list, repr=False, compare=False)
    """Supplied names that are no config (kept for plugins; :meth:`warn_unknown` logs them)."""

    @classmethod
    def from_sources(
        cls, properties_file: str | Path | None = None, overrides: Iterable[str] | Mapping[str, Any] = ()
    ) -> BrokerConfig:
        given: dict[str, Any] = {}
        if properties_file is not None:
            try:
                given.update(parse_properties(Path(properties_file).read_text()))
            except OSError as e:
                raise ConfigError(f"cannot read config file {properties_file}: {e}") from e
        if isinstance(overrides, Mapping):
            given.update(overrides)
        else:
            for item in overrides:
                if "=" not in item:
                    raise ConfigError(f"override {item!r} is not of the form key=value")
                k, v = item.split("=", 1)
                given[k.strip()] = v.strip()
        cfg = cls(values={name: d.default for name, d in BROKER_CONFIGS.items()})
        for name, raw in given.items():
            known = BROKER_CONFIGS.get(name)
            if known is not None:
                cfg.values[name] = cfg.explicit[name] = parse_value(name, known.python_type, raw)
            else:
                # unknown keys are kept so plugins can read them; Kafka warns about them
                cfg.values[name] = cfg.explicit[name] = raw
                if not _known_prefixed(name):
                    cfg.unknown.append(name)
        cfg.validate()
        return cfg

    def warn_unknown(self) -> None:
        """Log each supplied name that is no known config, once, as Kafka's AbstractConfig does."""
        for name in self.unknown:
            _log.warning("The configuration '%s' was supplied but isn't a known config.", name)

    def validate(self) -> None:
        """Every value against its validator (Kafka's messages), then the rules that involve
        several configs: log dirs, listeners, TLS and SASL settings. Raises ConfigError."""
        for name, d in BROKER_CONFIGS.items():
            d.validate(self.values[name])
        if (
            "node.id" in self.explicit
            and "broker.id" in self.explicit
            and (self.values["node.id"] != self.values["broker.id"])
        ):
            raise ConfigError("You must set `node.id` to the same value as `broker.id`.")
        canonical = [os.path.realpath(d) for d in self.log_dirs]
        if len(set(canonical)) < len(canonical):  # Kafka's LogManager check
            raise ConfigError(f"Duplicate log directory found: {','.join(str(d) for d in self.log_dirs)}")
        self.advertised_listeners()
        self._kraft = None
        self.kraft()
        validate_tls_configs(self)
        validate_sasl_config(self.values)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    @property
    def node_id(self) -> int:
        nid: int = self.values["node.id"]
        if "broker.id" in self.explicit and "node.id" not in self.explicit:
            nid = self.values["broker.id"]
        return nid

    def kraft(self) -> KRaftConfig:
        """The KRaft settings (``process.roles``, ``controller.quorum.voters`` ...), checked
        together as Kafka's ``KafkaConfig`` checks them (:mod:`strom.metadata.quorum_config`)."""
        if self._kraft is None:
            try:
                self._kraft = KRaftConfig.parse(
                    self.values, self.node_id, self.listeners(), self.security_protocol_map()
                )
            except QuorumConfigError as e:
                raise ConfigError(str(e)) from None
        return self._kraft

    @property
    def metadata_log_dir(self) -> Path:
        """``metadata.log.dir``, by default the first of :attr:`log_dirs` (Kafka's rule)."""
        text = str(self.values.get("metadata.log.dir") or "").strip()
        return Path(text) if text else self.log_dirs[0]

    @property
    def log_dir(self) -> Path:
        """The first of :attr:`log_dirs`: where the broker-level files live (Kafka's default
        ``metadata.log.dir``)."""
        return self.log_dirs[0]

    @property
    def log_dirs(self) -> list[Path]:
        """``log.dirs`` (or, when unset, ``log.dir``): comma-separated, in order (a dir given twice
        fails :meth:`validate`, as in Kafka)."""
        dirs: str = self.values["log.dirs"] or self.values["log.dir"]
        out: list[Path] = []
        for part in dirs.split(","):
            part = part.strip()
            if part:
                out.append(Path(part))
        if not out:
            raise ConfigError("log.dirs is empty")
        return out

    def listeners(self) -> list[tuple[str, str, int]]:
        """Parse ``listeners`` into (name, host, port) triples.

        Raises ConfigError for a malformed entry, a listener name used twice, or a name that
        ``listener.security.protocol.map`` does not map (Kafka's rules).
        """
        out = _parse_endpoints("listeners", str(self.values["listeners"]))
        if not out:
            raise ConfigError("listeners is empty")
        protocols = self.security_protocol_map()
        for name, _host, _port in out:
            if name not in protocols:
                raise ConfigError(
                    f"listener {name!r} in listeners has no security protocol: add {name}:<protocol> "
                    f"to listener.security.protocol.map (one of {', '.join(SECURITY_PROTOCOLS)})"
                )
        return [(name, host or "0.0.0.0", port) for name, host, port in out]

    def security_protocol_map(self) -> dict[str, str]:
        """``listener.security.protocol.map`` as {listener name: security protocol}."""
        out: dict[str, str] = {}
        for item in str(self.values["listener.security.protocol.map"]).split(","):
            item = item.strip()
            if not item:
                continue
            name, sep, proto = item.partition(":")
            name, proto = name.strip().upper(), proto.strip().upper()
            if not sep or not name:
                raise ConfigError(
                    f"listener.security.protocol.map entry {item!r} is not of the form NAME:PROTOCOL"
                )
            if proto not in SECURITY_PROTOCOLS:
                raise ConfigError(
                    f"listener.security.protocol.map maps {name!r} to unknown security protocol "
                    f"{proto!r} (one of {', '.join(SECURITY_PROTOCOLS)})"
                )
            out[name] = proto
        if "listener.security.protocol.map" not in self.explicit:
            # Kafka's effectiveListenerSecurityProtocolMap: with the map left at its default,
            # each controller listener it does not name is PLAINTEXT
            for name in parse_listener_names(self.values.get("controller.listener.names")):
                out.setdefault(name, "PLAINTEXT")
        return out

    def listener_protocols(self) -> list[tuple[str, str, str, int]]:
        """(name, security protocol, host, port) for every listener, in ``listeners`` order."""
        protocols = self.security_protocol_map()
        return [(name, protocols[name], host, port) for name, host, port in self.listeners()]

    def advertised_listeners(self) -> dict[str, tuple[str, int]]:
        """{listener name: (host, port) clients are told to connect to}.

        ``advertised.listeners`` entries are matched to listeners by name; a listener it does not
        name advertises its own address (a wildcard host becomes 127.0.0.1).
        """
        key = (str(self.values["listeners"]), str(self.values.get("advertised.listeners") or ""))
        cached = self._advertised_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        out: dict[str, tuple[str, int]] = {}
        for name, host, port in self.listeners():
            if host in ("0.0.0.0", "", "::"):
                host = "127.0.0.1"
            out[name] = (host, port)
        known = set(out)
        for name, host, port in _parse_endpoints("advertised.listeners", key[1]):
            if name not in known:
                raise ConfigError(
                    f"advertised.listeners names listener {name!r}, which is not in listeners "
                    f"({', '.join(sorted(known))})"
                )
            out[name] = (host or "127.0.0.1", port)
        self._advertised_cache = (key, out)
        return out

    def advertised(self, listener: str | None = None) -> tuple[str, int]:
        """(host, port) clients of ``listener`` (default: the first listener that is not a
        controller listener, as Kafka's broker endpoints leave those out) connect to."""
        adv = self.advertised_listeners()
        if listener is not None and listener in adv:
            return adv[listener]
        controllers = parse_listener_names(self.values.get("controller.listener.names"))
        for name, endpoint in adv.items():
            if name not in controllers:
                return endpoint
        return next(iter(adv.values()))

    def topic_defaults(self) -> dict[str, Any]:
        """Effective topic-config defaults derived from the broker's synonyms."""
        return resolve_topic_defaults(self.values)


def _topic_default(name: str) -> Any:
    return TOPIC_CONFIGS[name].default


@dataclass(frozen=True)
class LogConfig:
    """Per-partition log settings (topic configs, Kafka names, with broker defaults applied)."""

    segment_bytes: int = _topic_default("segment.bytes")
    segment_ms: int = _topic_default("segment.ms")
    segment_index_bytes: int = _topic_default("segment.index.bytes")
    index_interval_bytes: int = _topic_default("index.interval.bytes")
    flush_messages: int = _topic_default("flush.messages")
    flush_ms: int = _topic_default("flush.ms")
    retention_ms: int = _topic_default("retention.ms")
    retention_bytes: int = _topic_default("retention.bytes")
    cleanup_policy: str = _topic_default("cleanup.policy")
    max_message_bytes: int = _topic_default("max.message.bytes")
    message_timestamp_type: str = _topic_default("message.timestamp.type")
    file_delete_delay_ms: int = _topic_default("file.delete.delay.ms")
    min_cleanable_dirty_ratio: float = _topic_default("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _topic_default("min.compaction.lag.ms")
    max_compaction_lag_ms: int = _topic_default("max.compaction.lag.ms")
    delete_retention_ms: int = _topic_default("delete.retention.ms")
    min_insync_replicas: int = _topic_default("min.insync.replicas")
    compression_type: str = _topic_default("compression.type")
    # read by the controller (strom.controller.quorum_controller), not by the log
    unclean_leader_election_enable: bool = _topic_default("unclean.leader.election.enable")

    @classmethod
    def from_topic_configs(cls, defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> LogConfig:
        kwargs: dict[str, Any] = {}
        for name, d in TOPIC_CONFIGS.items():
            raw = overrides.get(name, defaults.get(name))
            if raw is None:
                continue
            val = parse_value(name, d.python_type, raw)
            if name == "flush.ms" and val == -1:  # log.flush.interval.ms's "not set"
                val = LONG_MAX
            kwargs[name.replace(".", "_")] = val
        cfg = cls(**kwargs)
        cfg.validate()
        return cfg

    @property
    def cleanup_policies(self) -> frozenset[str]:
        """``cleanup.policy`` as a set (Kafka's LogConfig.delete / .compact): ``delete`` applies
        retention.ms/retention.bytes, ``compact`` the log cleaner. Empty (Kafka 4 accepts
        ``cleanup.policy=""``) means neither: segments stay until the log start offset passes
        them, the "infinite retention" of Kafka 4.2's documentation."""
        return frozenset(p.strip() for p in self.cleanup_policy.split(",") if p.strip())

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policies

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policies

    def validate(self) -> None:
        """Every topic config against its validator. Raises ConfigError (Kafka's message)."""
        for name, d in TOPIC_CONFIGS.items():
            d.validate(getattr(self, name.replace(".", "_")))
