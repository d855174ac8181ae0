"""One typed configuration, with Apache Kafka's names and defaults.

Broker configs come from a ``server.properties``-style file plus ``--override key=value``
(the shape of ``kafka-server-start.sh``). Topic configs (``retention.ms``, ``segment.bytes`` ...)
default to the broker's ``log.*`` synonyms and can be overridden per topic.

Error contract: :class:`ConfigError` (a ``ValueError``) for unknown types, bad values or
unparseable files; the message names the key.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .metadata.quorum_config import KRaftConfig, QuorumConfigError, parse_listener_names
from .security.session import SECURITY_PROTOCOLS


class ConfigError(ValueError):
    pass


# name -> (type, default). Types: int, bool, str, list (comma separated), float.
BROKER_DEFAULTS: dict[str, tuple[type, Any]] = {
    "node.id": (int, 1),
    "broker.id": (int, -1),
    "cluster.id": (str, "strom-cluster-0000000001"),
    "listeners": (str, "PLAINTEXT://127.0.0.1:9092"),
    "advertised.listeners": (str, ""),
    "listener.security.protocol.map": (
        str,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    ),
    # TLS (listeners whose security protocol is SSL or SASL_SSL); each can be overridden per
    # listener as listener.name.<lowercase listener name>.ssl.* (see security/tls.py)
    "ssl.keystore.type": (str, "JKS"),
    "ssl.keystore.location": (str, ""),
    "ssl.keystore.password": (str, ""),
    "ssl.keystore.certificate.chain": (str, ""),
    "ssl.keystore.key": (str, ""),
    "ssl.key.password": (str, ""),
    "ssl.truststore.type": (str, "JKS"),
    "ssl.truststore.location": (str, ""),
    "ssl.truststore.password": (str, ""),
    "ssl.truststore.certificates": (str, ""),
    "ssl.client.auth": (str, "none"),
    "ssl.enabled.protocols": (str, "TLSv1.2,TLSv1.3"),
    "ssl.protocol": (str, "TLSv1.3"),
    "ssl.cipher.suites": (str, ""),
    "log.dirs": (str, ""),
    "log.dir": (str, "./strom-data"),
    "num.partitions": (int, 1),
    "default.replication.factor": (int, 1),
    "auto.create.topics.enable": (bool, True),
    "delete.topic.enable": (bool, True),
    "socket.request.max.bytes": (int, 104857600),
    # Bytes of requests read but not yet handled, over all connections (Kafka's memory pool).
    # Kafka's default is -1 (unbounded); strom bounds it by default: 256 MiB holds two requests of
    # the largest size socket.request.max.bytes allows while 20 clients trickling 50 MB frames
    # cannot take the broker to a GB. -1 restores Kafka's behaviour.
    "queued.max.request.bytes": (int, 268435456),
    "message.max.bytes": (int, 1048588),
    "log.segment.bytes": (int, 1073741824),
    "log.roll.ms": (int, -1),
    "log.roll.hours": (int, 168),
    "log.index.interval.bytes": (int, 4096),
    "log.index.size.max.bytes": (int, 10485760),
    "log.flush.interval.messages": (int, 9223372036854775807),
    "log.flush.interval.ms": (int, -1),
    "log.flush.scheduler.interval.ms": (int, 9223372036854775807),
    "log.retention.hours": (int, 168),
    "log.retention.minutes": (int, -1),
    "log.retention.ms": (int, -2),
    "log.retention.bytes": (int, -1),
    "log.retention.check.interval.ms": (int, 300000),
    "log.cleanup.policy": (str, "delete"),
    "log.message.timestamp.type": (str, "CreateTime"),
    "log.segment.delete.delay.ms": (int, 60000),
    "log.cleaner.min.cleanable.ratio": (float, 0.5),
    "log.cleaner.min.compaction.lag.ms": (int, 0),
    "log.cleaner.max.compaction.lag.ms": (int, 9223372036854775807),
    "log.cleaner.delete.retention.ms": (int, 86400000),
    "log.cleaner.enable": (bool, True),
    "log.cleaner.backoff.ms": (int, 15000),
    "log.cleaner.io.max.bytes.per.second": (float, 1.7976931348623157e308),
    "strom.log.cleaner.process": (bool, True),
    "strom.log.cleaner.process.nice": (int, 10),
    "strom.log.cleaner.writeback.pacing": (bool, True),
    # log file descriptors kept open at most (an LRU, strom.log.file_cache; Kafka keeps every
    # segment's files open). -1: half of the soft RLIMIT_NOFILE, the rest left for sockets
    "strom.log.max.open.files": (int, -1),
    # AlterReplicaLogDirs: bytes per second the future logs copy at most (Kafka's, unlimited)
    "replica.alter.log.dirs.io.max.bytes.per.second": (int, 9223372036854775807),
    # how often every log dir is checked for a failure (gone, unreadable, read-only); Kafka
    # notices only at an I/O error, strom also looks, so an idle dir's failure is reported too
    "strom.log.dir.check.interval.ms": (int, 1000),
    # partitions this broker may hold; CreateTopics/CreatePartitions beyond get POLICY_VIOLATION
    # (-1: no limit). Each partition costs memory (~tens of KB), not descriptors
    "strom.broker.max.partitions": (int, 50000),
    "min.insync.replicas": (int, 1),
    "compression.type": (str, "producer"),
    "offsets.topic.num.partitions": (int, 50),
    "offsets.topic.replication.factor": (int, 1),
    "offsets.topic.segment.bytes": (int, 104857600),
    "offsets.retention.minutes": (int, 10080),
    "offsets.retention.check.interval.ms": (int, 600000),
    "group.initial.rebalance.delay.ms": (int, 3000),
    "group.min.session.timeout.ms": (int, 6000),
    "group.max.session.timeout.ms": (int, 1800000),
    "group.max.size": (int, 2147483647),
    "group.consumer.session.timeout.ms": (int, 45000),
    "group.consumer.heartbeat.interval.ms": (int, 5000),
    "group.consumer.assignors": (str, "uniform,range"),
    "group.consumer.regex.refresh.interval.ms": (int, 600000),
    "group.consumer.min.session.timeout.ms": (int, 45000),
    "group.consumer.max.session.timeout.ms": (int, 60000),
    "group.consumer.min.heartbeat.interval.ms": (int, 5000),
    "group.consumer.max.heartbeat.interval.ms": (int, 15000),
    # share groups (KIP-932; Kafka's GroupCoordinatorConfig / ShareGroupConfig names and defaults)
    "group.share.enable": (bool, True),
    "group.share.session.timeout.ms": (int, 45000),
    "group.share.min.session.timeout.ms": (int, 45000),
    "group.share.max.session.timeout.ms": (int, 60000),
    "group.share.heartbeat.interval.ms": (int, 5000),
    "group.share.min.heartbeat.interval.ms": (int, 5000),
    "group.share.max.heartbeat.interval.ms": (int, 15000),
    "group.share.max.size": (int, 200),
    "group.share.record.lock.duration.ms": (int, 30000),
    "group.share.min.record.lock.duration.ms": (int, 15000),
    "group.share.max.record.lock.duration.ms": (int, 60000),
    "group.share.delivery.count.limit": (int, 5),
    "group.share.min.delivery.count.limit": (int, 2),
    "group.share.max.delivery.count.limit": (int, 10),
    "group.share.partition.max.record.locks": (int, 2000),
    "group.share.min.partition.max.record.locks": (int, 100),
    "group.share.max.partition.max.record.locks": (int, 10000),
    "share.coordinator.state.topic.num.partitions": (int, 50),
    "share.coordinator.state.topic.replication.factor": (int, 1),
    "share.coordinator.snapshot.update.records.per.snapshot": (int, 500),
    "transaction.state.log.num.partitions": (int, 50),
    # the finalized level of Kafka's ``transaction.version`` feature (what ``kafka-storage format
    # --feature transaction.version=N`` sets; 2, KIP-890's epoch bump per transaction, is Kafka
    # 4.0's default). Clients read it from ApiVersions: at 2 the Java client ends transactions
    # with EndTxn v5 and adds partitions implicitly; 0 or 1 keep the classic protocol
    "strom.transaction.version": (int, 2),
    "transaction.max.timeout.ms": (int, 900000),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (int, 10000),
    "transactional.id.expiration.ms": (int, 604800000),
    "producer.id.expiration.ms": (int, 86400000),
    "max.incremental.fetch.session.cache.slots": (int, 1000),
    "num.network.threads": (int, 3),
    "num.io.threads": (int, 8),
    "connections.max.idle.ms": (int, 600000),
    "strom.fetch.sendfile": (bool, True),
    # SASL (security/sasl.py). Kafka's default sasl.enabled.mechanisms is GSSAPI, which strom cannot
    # offer: strom enables PLAIN and SCRAM. Per listener: listener.name.<listener>.sasl.enabled.mechanisms;
    # PLAIN users (user_<name>="<password>") from listener.name.<listener>.plain.sasl.jaas.config, else
    # sasl.jaas.config (sensitive, like every password); SCRAM users via AlterUserScramCredentials.
    "sasl.enabled.mechanisms": (str, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"),
    "sasl.jaas.config": (str, ""),
    # frames an unauthenticated connection on a SASL listener may send (Kafka's default, 512 KiB)
    "sasl.server.max.receive.size": (int, 524288),
    # KRaft (strom.metadata.quorum_config; Kafka's KRaftConfigs/QuorumConfig names and defaults).
    # Kafka requires process.roles; strom's default is the zero set-up node: broker and controller
    # in one process, with no voters configured a quorum of itself (no controller listener needed)
    "process.roles": (str, "broker,controller"),
    "controller.listener.names": (str, ""),
    "controller.quorum.voters": (str, ""),
    "controller.quorum.bootstrap.servers": (str, ""),
    "controller.quorum.election.timeout.ms": (int, 1000),
    "controller.quorum.fetch.timeout.ms": (int, 2000),
    "controller.quorum.election.backoff.max.ms": (int, 1000),
    "controller.quorum.request.timeout.ms": (int, 2000),
    "controller.quorum.append.linger.ms": (int, 25),
    "controller.quorum.retry.backoff.ms": (int, 20),
    "broker.heartbeat.interval.ms": (int, 2000),
    "broker.session.timeout.ms": (int, 9000),
    "initial.broker.registration.timeout.ms": (int, 60000),
    # where __cluster_metadata lives; empty: the first of log.dirs (Kafka's default)
    "metadata.log.dir": (str, ""),
    "metadata.log.segment.bytes": (int, 1073741824),
    "metadata.log.segment.ms": (int, 604800000),
    "metadata.max.retention.bytes": (int, 104857600),
    "metadata.max.retention.ms": (int, 604800000),
    "metadata.log.max.record.bytes.between.snapshots": (int, 20971520),
    "metadata.log.max.snapshot.interval.ms": (int, 3600000),
    "metadata.max.idle.interval.ms": (int, 500),
    "broker.rack": (str, ""),
    "auto.leader.rebalance.enable": (bool, True),
    "leader.imbalance.check.interval.seconds": (int, 300),
    "leader.imbalance.per.broker.percentage": (int, 10),
    "unclean.leader.election.enable": (bool, False),
    "controlled.shutdown.enable": (bool, True),
}

# name -> least value (Kafka's ConfigDef ``atLeast`` validators of the keys above)
_AT_LEAST: dict[str, int] = {
    "metadata.log.segment.bytes": 12,  # Records.LOG_OVERHEAD
    "metadata.log.max.record.bytes.between.snapshots": 1,
    "metadata.log.max.snapshot.interval.ms": 0,
    "metadata.max.idle.interval.ms": 0,
    "min.insync.replicas": 1,
    "leader.imbalance.check.interval.seconds": 1,
    "leader.imbalance.per.broker.percentage": 0,
}

# Topic config name -> broker synonym it defaults to (Kafka's LogConfig mapping).
TOPIC_SYNONYMS: dict[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.insync.replicas": "min.insync.replicas",
    "compression.type": "compression.type",
}


def _parse_value(name: str, typ: type, raw: Any) -> Any:
    if not isinstance(raw, str):
        if typ is float and isinstance(raw, int):
            return float(raw)
        if isinstance(raw, typ):
            return raw
        raise ConfigError(f"invalid value {raw!r} for config {name!r}: expected {typ.__name__}")
    text = raw.strip()
    try:
        if typ is bool:
            low = text.lower()
            if low not in ("true", "false"):
                raise ValueError(text)
            return low == "true"
        if typ is int:
            return int(text)
        if typ is float:
            return float(text)
    except ValueError:
        raise ConfigError(f"invalid value {raw!r} for config {name!r}: expected {typ.__name__}") from None
    return text


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


@dataclass
class BrokerConfig:
    """Broker configuration. ``values`` holds every known key, typed; ``explicit`` what was set."""

    values: dict[str, Any] = field(default_factory=dict)
    explicit: dict[str, Any] = field(default_factory=dict)
    _advertised_cache: tuple[tuple[str, str], dict[str, tuple[str, int]]] | None = field(
        default=None, repr=False, compare=False
    )
    _kraft: KRaftConfig | None = field(default=None, repr=False, compare=False)

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
        cfg = cls()
        for name, (_typ, default) in BROKER_DEFAULTS.items():
            cfg.values[name] = default
        for name, raw in given.items():
            if name in BROKER_DEFAULTS:
                typ = BROKER_DEFAULTS[name][0]
                cfg.values[name] = cfg.explicit[name] = _parse_value(name, typ, raw)
            else:
                # unknown keys are kept (Kafka logs them as unused) so plugins can read them
                cfg.values[name] = cfg.explicit[name] = raw
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if self.values["socket.request.max.bytes"] <= 0:
            raise ConfigError("socket.request.max.bytes must be positive")
        if self.values["queued.max.request.bytes"] == 0 or self.values["queued.max.request.bytes"] < -1:
            raise ConfigError("queued.max.request.bytes must be positive, or -1 for no limit")
        if self.values["message.max.bytes"] <= 0:
            raise ConfigError("message.max.bytes must be positive")
        if self.values["log.segment.bytes"] < 14:
            raise ConfigError("log.segment.bytes must be at least 14")
        if self.values["num.partitions"] < 1:
            raise ConfigError("num.partitions must be at least 1")
        for name, least in _AT_LEAST.items():
            if self.values[name] < least:
                raise ConfigError(
                    f"Invalid value {self.values[name]} for configuration {name}: "
                    f"Value must be at least {least}"
                )
        if "node.id" in self.explicit and "broker.id" in self.explicit and (
            self.values["node.id"] != self.values["broker.id"]
        ):
            raise ConfigError("You must set `node.id` to the same value as `broker.id`.")
        canonical = [os.path.realpath(d) for d in self.log_dirs]
        if len(set(canonical)) < len(canonical):  # Kafka's LogManager check
            raise ConfigError(f"Duplicate log directory found: {','.join(str(d) for d in self.log_dirs)}")
        self.advertised_listeners()
        self._kraft = None
        self.kraft()
        from .security.tls import validate_tls_configs

        validate_tls_configs(self)
        from .security.sasl import validate_sasl_config

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
        out: dict[str, Any] = {}
        for tname, bname in TOPIC_SYNONYMS.items():
            out[tname] = self.values[bname]
        # retention: log.retention.ms > minutes > hours
        ms = self.values["log.retention.ms"]
        if ms == -2 or ms is None:
            minutes = self.values["log.retention.minutes"]
            ms = minutes * 60_000 if minutes != -1 else self.values["log.retention.hours"] * 3_600_000
        out["retention.ms"] = ms
        roll = self.values["log.roll.ms"]
        out["segment.ms"] = roll if roll != -1 else self.values["log.roll.hours"] * 3_600_000
        return out


TOPIC_TYPES: dict[str, type] = {
    "segment.bytes": int,
    "segment.ms": int,
    "segment.index.bytes": int,
    "index.interval.bytes": int,
    "flush.messages": int,
    "flush.ms": int,
    "retention.ms": int,
    "retention.bytes": int,
    "cleanup.policy": str,
    "max.message.bytes": int,
    "message.timestamp.type": str,
    "file.delete.delay.ms": int,
    "min.cleanable.dirty.ratio": float,
    "min.compaction.lag.ms": int,
    "max.compaction.lag.ms": int,
    "delete.retention.ms": int,
    "min.insync.replicas": int,
    "compression.type": str,
}


@dataclass(frozen=True)
class LogConfig:
    """Per-partition log settings (topic configs, Kafka names, with broker defaults applied)."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    flush_messages: int = 9223372036854775807
    flush_ms: int = 9223372036854775807
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    file_delete_delay_ms: int = 60000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 9223372036854775807
    delete_retention_ms: int = 86400000
    min_insync_replicas: int = 1
    compression_type: str = "producer"

    @classmethod
    def from_topic_configs(cls, defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> LogConfig:
        kwargs: dict[str, Any] = {}
        for name, typ in TOPIC_TYPES.items():
            raw = overrides.get(name, defaults.get(name))
            if raw is None:
                continue
            val = _parse_value(name, typ, raw)
            if name == "flush.ms" and val == -1:
                val = 9223372036854775807
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
        if self.segment_bytes < 14:
            raise ConfigError("segment.bytes must be at least 14")
        if self.index_interval_bytes < 0:
            raise ConfigError("index.interval.bytes must be non-negative")
        if self.max_message_bytes < 0:
            raise ConfigError("max.message.bytes must be non-negative")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ConfigError("message.timestamp.type must be CreateTime or LogAppendTime")
        if not self.cleanup_policies <= {"delete", "compact"}:
            raise ConfigError(f"invalid cleanup.policy {self.cleanup_policy!r}")
        if self.compression_type not in ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"):
            raise ConfigError(f"invalid compression.type {self.compression_type!r}")
