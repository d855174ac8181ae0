"""Every config strom knows, once: Kafka's ``ConfigDef`` for brokers, topics and groups.

Theory of operation
-------------------
A :class:`ConfigDef` holds what Kafka's ``ConfigDef.ConfigKey`` and ``DynamicBrokerConfig`` know of
one config: its name, its Kafka type (:class:`ConfigType`, also what DescribeConfigs reports), its
default, its validator (:class:`AtLeast`, :class:`Between`, :class:`ValidString`,
:class:`ValidList`, as Kafka's ``ConfigDef`` validators, with their messages), whether and where
it can change at runtime (:class:`DynamicScope`), whether it is sensitive (DescribeConfigs hides
its value), and its synonyms.

Three tables, one per config resource (a name can be in two: ``min.insync.replicas`` is a broker
and a topic config):

* :data:`BROKER_CONFIGS`: ``server.properties`` keys. A default that stands for "not set" (Kafka's
  ``null``: ``log.retention.ms`` is -2, ``log.roll.ms`` -1 ...) has ``null_default``.
* :data:`TOPIC_CONFIGS`: a topic config's ``synonyms`` are the broker configs it defaults to,
  most specific first (``retention.ms`` <- ``log.retention.ms``, ``log.retention.minutes``,
  ``log.retention.hours``). Its default is resolved from the broker's values
  (:func:`resolve_topic_defaults`): the first synonym that is set, converted from minutes or
  hours to ms; its own ``default`` only when none is set (``flush.ms``).
* :data:`GROUP_CONFIGS`: a group config (Kafka's ``GroupConfig``) defaults to its synonym broker
  config when it has one, and is bounded by the broker's ``group.*.min/max.*`` configs
  (``bound_configs``) or, for streams groups which strom has no broker configs for, by Kafka's
  defaults of those (``fixed_bounds``).

This module imports nothing else from strom: ``config`` (parsing ``server.properties``),
``metadata.configs`` (Describe/AlterConfigs) and ``security`` all read it.

Error contract: :class:`ConfigError` (a ``ValueError``) from :func:`parse_value` and the
validators, with Kafka's text (``Invalid value 0 for configuration num.partitions: Value must be
at least 1``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Any, Protocol

__all__ = [
    "BROKER_CONFIGS",
    "GROUP_CONFIGS",
    "LONG_MAX",
    "TOPIC_CONFIGS",
    "AtLeast",
    "Between",
    "ConfigDef",
    "ConfigError",
    "ConfigType",
    "DynamicScope",
    "ValidList",
    "ValidString",
    "Validator",
    "broker_default",
    "invalid_value",
    "looks_sensitive",
    "parse_value",
    "resolve_topic_defaults",
    "to_config_string",
]

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    pass


class ConfigType(IntEnum):
    """Kafka's ``ConfigDef.Type``, with the numbers DescribeConfigs v3+ sends."""

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

    @property
    def python_type(self) -> type:
        """How strom holds a value of this type (lists stay comma-separated strings)."""
        if self is ConfigType.BOOLEAN:
            return bool
        if self in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
            return int
        if self is ConfigType.DOUBLE:
            return float
        return str


class DynamicScope(Enum):
    """Kafka's "dynamic update mode" of a broker config: ``READ_ONLY`` needs a restart,
    ``PER_BROKER`` can be set for one broker (``--entity-name <id>``), ``CLUSTER_WIDE`` also as the
    cluster default (``--entity-default``)."""

    READ_ONLY = "read-only"
    PER_BROKER = "per-broker"
    CLUSTER_WIDE = "cluster-wide"


def invalid_value(name: str, shown: Any, reason: str) -> ConfigError:
    """Kafka's ``ConfigException`` text."""
    return ConfigError(f"Invalid value {shown} for configuration {name}: {reason}")


class Validator(Protocol):
    def validate(self, name: str, value: Any, shown: Any = None) -> None:
        """Raise :class:`ConfigError` for a bad (typed) ``value``; ``shown`` is the text the
        message quotes (default: the value)."""
        ...


@dataclass(frozen=True)
class AtLeast:
    """Kafka's ``Range.atLeast``."""

    minimum: int

    def validate(self, name: str, value: Any, shown: Any = None) -> None:
        if value < self.minimum:
            shown = value if shown is None else shown
            raise invalid_value(name, shown, f"Value must be at least {self.minimum}")


@dataclass(frozen=True)
class Between:
    """Kafka's ``Range.between`` (inclusive)."""

    low: float
    high: float

    def validate(self, name: str, value: Any, shown: Any = None) -> None:
        if not self.low <= value <= self.high:
            shown = value if shown is None else shown
            raise invalid_value(name, shown, f"Value must be between {self.low:g} and {self.high:g}")


@dataclass(frozen=True)
class ValidString:
    """Kafka's ``ValidString.in``."""

    choices: tuple[str, ...]

    def validate(self, name: str, value: Any, shown: Any = None) -> None:
        if value not in self.choices:
            raise invalid_value(
                name, value if shown is None else shown, "String must be one of: " + ", ".join(self.choices)
            )


class _PrincipalRules:
    """``ssl.principal.mapping.rules``: Kafka's rule syntax (security/principal_mapping.py)."""

    def validate(self, name: str, value: Any, shown: Any = None) -> None:
        from .security.principal_mapping import PrincipalMappingError, SslPrincipalMapper

        try:
            SslPrincipalMapper(value)
        except PrincipalMappingError as e:
            raise invalid_value(name, value if shown is None else shown, str(e)) from None


@dataclass(frozen=True)
class ValidList:
    """Kafka's ``ValidList.in``: every item of the comma-separated list is one of ``choices``
    (an empty list is valid: Kafka checks only the items). The message quotes the bad item."""

    choices: tuple[str, ...]

    def validate(self, name: str, value: Any, shown: Any = None) -> None:
        for item in (s.strip() for s in str(value).split(",")):
            if item and item not in self.choices:
                raise invalid_value(name, item, "String must be one of: " + ", ".join(self.choices))


@dataclass(frozen=True)
class _ReplicaSelector:
    """``replica.selector.class``: empty, Kafka's RackAwareReplicaSelector or strom's ``rack-aware``."""

    def validate(self, name: str, value: Any, shown: Any = None) -> None:
        from .replication.selector import selector_name

        try:
            selector_name(str(value))
        except ValueError as e:
            raise invalid_value(name, value if shown is None else shown, str(e)) from None


@dataclass(frozen=True)
class PositiveOrMinusOne:
    """A positive number, or -1 for "no limit" (strom's ``queued.max.request.bytes``)."""

    def validate(self, name: str, value: Any, shown: Any = None) -> None:
        if value == 0 or value < -1:
            raise invalid_value(
                name, value if shown is None else shown, "Value must be positive, or -1 for no limit"
            )


@dataclass(frozen=True)
class ConfigDef:
    """One config of one resource type. ``default`` is typed (``config_type.python_type``); for a topic
    or group config with synonyms it is only the fallback (see the module doc)."""

    name: str
    config_type: ConfigType
    default: Any
    validator: Validator | None = None
    dynamic: DynamicScope = DynamicScope.READ_ONLY
    sensitive: bool = False
    null_default: bool = False  # the default stands for "not set" (Kafka: null)
    synonyms: tuple[str, ...] = ()  # broker configs a topic/group config defaults to
    bound_configs: tuple[str, str] | None = None  # group: broker configs bounding it (min, max)
    fixed_bounds: tuple[int, int] | None = None  # group: bounds without a broker config

    @property
    def python_type(self) -> type:
        return self.config_type.python_type

    def is_unset(self, value: Any) -> bool:
        """``value`` is this config's "not set" sentinel (or None)."""
        return value is None or (self.null_default and value == self.default)

    def validate(self, value: Any, shown: Any = None) -> None:
        """Check a typed value (a "not set" sentinel always passes)."""
        if self.validator is not None and not self.is_unset(value):
            self.validator.validate(self.name, value, shown)


def parse_value(name: str, typ: type, raw: Any) -> Any:
    """``raw`` (text from ``server.properties``, or already typed) as ``typ``. Raises
    :class:`ConfigError` naming the config."""
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


_SENSITIVE_WORDS = ("password", "secret", "jaas.config", "credentials", "token")


def looks_sensitive(name: str) -> bool:
    """For a broker config name the table does not hold: a per-listener one
    (``listener.name.<l>.<config>``, ``listener.name.<l>.<mechanism>.<config>``) is sensitive
    when its config is; any other name (a plugin's key) when it looks like a secret."""
    low = name.lower()
    if low.startswith("listener.name."):
        rest = low[len("listener.name.") :].partition(".")[2]
        for base in (rest, rest.partition(".")[2]):
            d = BROKER_CONFIGS.get(base)
            if d is not None:
                return d.sensitive
    return any(w in low for w in _SENSITIVE_WORDS)


# ------------------------------------------------------------------------------ the tables

_BOOL, _STR, _INT, _LONG, _DBL, _LIST, _PW = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
    ConfigType.PASSWORD,
)
_RO, _CW = DynamicScope.READ_ONLY, DynamicScope.CLUSTER_WIDE
_CLEANUP_POLICIES = ("compact", "delete")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def _table(*defs: ConfigDef) -> dict[str, ConfigDef]:
    out: dict[str, ConfigDef] = {}
    for d in defs:
        assert d.name not in out, d.name
        assert isinstance(d.default, d.python_type), d.name
        out[d.name] = d
    return out


def _c(
    name: str,
    typ: ConfigType,
    default: Any,
    validator: Validator | None = None,
    *,
    dynamic: DynamicScope = _RO,
    null: bool = False,
) -> ConfigDef:
    return ConfigDef(name, typ, default, validator, dynamic, sensitive=typ is _PW, null_default=null)


BROKER_CONFIGS: dict[str, ConfigDef] = _table(
    _c("node.id", _INT, 1),
    _c("broker.id", _INT, -1),
    _c("cluster.id", _STR, "strom-cluster-0000000001"),
    _c("listeners", _LIST, "PLAINTEXT://127.0.0.1:9092"),
    _c("advertised.listeners", _LIST, ""),
    # the listener brokers use to reach each other (replica fetchers, transaction markers);
    # empty: the first listener that is not a controller listener
    _c("inter.broker.listener.name", _STR, ""),
    _c(
        "listener.security.protocol.map",
        _STR,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    ),
    # TLS (listeners whose security protocol is SSL or SASL_SSL); each can be overridden per
    # listener as listener.name.<lowercase listener name>.ssl.* (see security/tls.py)
    _c("ssl.keystore.type", _STR, "JKS"),
    _c("ssl.keystore.location", _STR, ""),
    _c("ssl.keystore.password", _PW, ""),
    _c("ssl.keystore.certificate.chain", _STR, ""),
    _c("ssl.keystore.key", _PW, ""),
    _c("ssl.key.password", _PW, ""),
    _c("ssl.truststore.type", _STR, "JKS"),
    _c("ssl.truststore.location", _STR, ""),
    _c("ssl.truststore.password", _PW, ""),
    _c("ssl.truststore.certificates", _STR, ""),
    _c("ssl.client.auth", _STR, "none"),
    _c("ssl.enabled.protocols", _STR, "TLSv1.2,TLSv1.3"),
    _c("ssl.protocol", _STR, "TLSv1.3"),
    _c("ssl.cipher.suites", _STR, ""),
    _c("log.dirs", _LIST, ""),
    _c("log.dir", _STR, "./strom-data"),
    _c("num.partitions", _INT, 1, AtLeast(1)),
    _c("default.replication.factor", _INT, 1),
    _c("auto.create.topics.enable", _BOOL, True),
    _c("delete.topic.enable", _BOOL, True),
    _c("socket.request.max.bytes", _INT, 104857600, AtLeast(1)),
    # Bytes of requests read but not yet handled, over all connections (Kafka's memory pool).
    # Kafka's default is -1 (unbounded); strom bounds it by default: 256 MiB holds two requests of
    # the largest size socket.request.max.bytes allows while 20 clients trickling 50 MB frames
    # cannot take the broker to a GB. -1 restores Kafka's behaviour.
    _c("queued.max.request.bytes", _INT, 268435456, PositiveOrMinusOne()),
    # the synonyms of topic configs (the log.* configs) change at runtime (Kafka's
    # DynamicLogConfig), per broker or as the cluster default
    _c("message.max.bytes", _INT, 1048588, AtLeast(1), dynamic=_CW),
    _c("log.segment.bytes", _INT, 1073741824, AtLeast(14), dynamic=_CW),
    _c("log.roll.ms", _LONG, -1, AtLeast(1), dynamic=_CW, null=True),
    _c("log.roll.hours", _INT, 168, AtLeast(1), dynamic=_CW),
    _c("log.index.interval.bytes", _INT, 4096, AtLeast(0), dynamic=_CW),
    _c("log.index.size.max.bytes", _INT, 10485760, AtLeast(4), dynamic=_CW),
    _c("log.flush.interval.messages", _LONG, LONG_MAX, AtLeast(1), dynamic=_CW),
    _c("log.flush.interval.ms", _LONG, -1, AtLeast(0), dynamic=_CW, null=True),
    _c("log.flush.scheduler.interval.ms", _LONG, LONG_MAX),
    _c("log.retention.hours", _INT, 168, AtLeast(-1), dynamic=_CW),
    _c("log.retention.minutes", _INT, -1, AtLeast(-1), dynamic=_CW, null=True),
    _c("log.retention.ms", _LONG, -2, AtLeast(-1), dynamic=_CW, null=True),
    _c("log.retention.bytes", _LONG, -1, dynamic=_CW),
    _c("log.retention.check.interval.ms", _LONG, 300000),
    _c("log.cleanup.policy", _LIST, "delete", ValidList(_CLEANUP_POLICIES), dynamic=_CW),
    _c("log.message.timestamp.type", _STR, "CreateTime", ValidString(_TIMESTAMP_TYPES), dynamic=_CW),
    _c("log.segment.delete.delay.ms", _LONG, 60000, AtLeast(0), dynamic=_CW),
    _c("log.cleaner.min.cleanable.ratio", _DBL, 0.5, Between(0, 1), dynamic=_CW),
    _c("log.cleaner.min.compaction.lag.ms", _LONG, 0, AtLeast(0), dynamic=_CW),
    _c("log.cleaner.max.compaction.lag.ms", _LONG, LONG_MAX, AtLeast(1), dynamic=_CW),
    _c("log.cleaner.delete.retention.ms", _LONG, 86400000, AtLeast(0), dynamic=_CW),
    _c("log.cleaner.enable", _BOOL, True),
    _c("log.cleaner.backoff.ms", _LONG, 15000),
    _c("log.cleaner.io.max.bytes.per.second", _DBL, 1.7976931348623157e308, dynamic=_CW),
    _c("strom.log.cleaner.process", _BOOL, True),
    _c("strom.log.cleaner.process.nice", _INT, 10),
    _c("strom.log.cleaner.writeback.pacing", _BOOL, True),
    # log file descriptors kept open at most (an LRU, strom.log.file_cache; Kafka keeps every
    # segment's files open). -1: half of the soft RLIMIT_NOFILE, the rest left for sockets
    _c("strom.log.max.open.files", _INT, -1),
    # AlterReplicaLogDirs: bytes per second the future logs copy at most (Kafka's, unlimited)
    _c("replica.alter.log.dirs.io.max.bytes.per.second", _INT, LONG_MAX),
    # how often every log dir is checked for a failure (gone, unreadable, read-only); Kafka
    # notices only at an I/O error, strom also looks, so an idle dir's failure is reported too
    _c("strom.log.dir.check.interval.ms", _LONG, 1000),
    # partitions this broker may hold; CreateTopics/CreatePartitions beyond get POLICY_VIOLATION
    # (-1: no limit). Each partition costs memory (~tens of KB), not descriptors
    _c("strom.broker.max.partitions", _INT, 50000),
    _c("min.insync.replicas", _INT, 1, AtLeast(1), dynamic=_CW),
    # replication (Kafka's names and defaults): followers fetch from leaders
    _c("num.replica.fetchers", _INT, 1, AtLeast(1), dynamic=_CW),
    _c("replica.fetch.max.bytes", _INT, 1048576, AtLeast(0), dynamic=_CW),
    _c("replica.fetch.min.bytes", _INT, 1),
    _c("replica.fetch.wait.max.ms", _INT, 500),
    _c("replica.fetch.response.max.bytes", _INT, 10485760, AtLeast(0), dynamic=_CW),
    _c("replica.fetch.backoff.ms", _INT, 1000, AtLeast(0)),
    _c("replica.lag.time.max.ms", _LONG, 30000),
    _c("replica.socket.timeout.ms", _INT, 30000),
    _c("compression.type", _STR, "producer", ValidString(_COMPRESSION_TYPES), dynamic=_CW),
    _c("offsets.topic.num.partitions", _INT, 50),
    _c("offsets.topic.replication.factor", _INT, 1),
    _c("offsets.topic.segment.bytes", _INT, 104857600),
    _c("offsets.retention.minutes", _INT, 10080),
    _c("offsets.retention.check.interval.ms", _LONG, 600000),
    _c("group.initial.rebalance.delay.ms", _INT, 3000),
    _c("group.min.session.timeout.ms", _INT, 6000),
    _c("group.max.session.timeout.ms", _INT, 1800000),
    _c("group.max.size", _INT, 2147483647),
    _c("group.consumer.session.timeout.ms", _INT, 45000),
    _c("group.consumer.heartbeat.interval.ms", _INT, 5000),
    _c("group.consumer.assignors", _LIST, "uniform,range"),
    _c("group.consumer.regex.refresh.interval.ms", _INT, 600000, AtLeast(10000)),  # Kafka: atLeast(10 * 1000)
    _c("group.consumer.min.session.timeout.ms", _LONG, 45000),
    _c("group.consumer.max.session.timeout.ms", _LONG, 60000),
    _c("group.consumer.min.heartbeat.interval.ms", _LONG, 5000),
    _c("group.consumer.max.heartbeat.interval.ms", _LONG, 15000),
    # share groups (KIP-932; Kafka's GroupCoordinatorConfig / ShareGroupConfig names and defaults)
    _c("group.share.enable", _BOOL, True),
    _c("group.share.session.timeout.ms", _LONG, 45000),
    _c("group.share.min.session.timeout.ms", _LONG, 45000),
    _c("group.share.max.session.timeout.ms", _LONG, 60000),
    _c("group.share.heartbeat.interval.ms", _LONG, 5000),
    _c("group.share.min.heartbeat.interval.ms", _LONG, 5000),
    _c("group.share.max.heartbeat.interval.ms", _LONG, 15000),
    _c("group.share.max.size", _INT, 200),
    _c("group.share.record.lock.duration.ms", _LONG, 30000),
    _c("group.share.min.record.lock.duration.ms", _LONG, 15000),
    _c("group.share.max.record.lock.duration.ms", _LONG, 60000),
    _c("group.share.delivery.count.limit", _INT, 5),
    _c("group.share.min.delivery.count.limit", _INT, 2),
    _c("group.share.max.delivery.count.limit", _INT, 10),
    _c("group.share.partition.max.record.locks", _INT, 2000),
    _c("group.share.min.partition.max.record.locks", _INT, 100),
    _c("group.share.max.partition.max.record.locks", _INT, 10000),
    _c("share.coordinator.state.topic.num.partitions", _INT, 50),
    _c("share.coordinator.state.topic.replication.factor", _INT, 1),
    _c("share.coordinator.snapshot.update.records.per.snapshot", _INT, 500),
    _c("transaction.state.log.num.partitions", _INT, 50),
    _c("transaction.state.log.replication.factor", _INT, 1),
    # the finalized level of Kafka's ``transaction.version`` feature (what ``kafka-storage format
    # --feature transaction.version=N`` sets; 2, KIP-890's epoch bump per transaction, is Kafka
    # 4.0's default). Clients read it from ApiVersions: at 2 the Java client ends transactions
    # with EndTxn v5 and adds partitions implicitly; 0 or 1 keep the classic protocol
    _c("strom.transaction.version", _INT, 2),
    _c("transaction.max.timeout.ms", _INT, 900000),
    _c("transaction.abort.timed.out.transaction.cleanup.interval.ms", _LONG, 10000),
    _c("transactional.id.expiration.ms", _INT, 604800000),
    _c("producer.id.expiration.ms", _INT, 86400000),
    _c("max.incremental.fetch.session.cache.slots", _INT, 1000),
    _c("num.network.threads", _INT, 3),
    _c("num.io.threads", _INT, 8),
    _c("connections.max.idle.ms", _LONG, 600000),
    _c("strom.fetch.sendfile", _BOOL, True),
    # load every accepted API version's codec at start-up (1-2 s) instead of on its first request,
    # where each took the event loop 2-20 ms (bench/loop_lag.py); the test harness turns it off
    _c("strom.protocol.preload.schemas", _BOOL, True),
    # observability (strom.observability): the HTTP listener serving /metrics (Prometheus text
    # format), /healthz and /readyz; empty disables it. Per-partition series (log end offset, high
    # watermark, log start offset, size, segments; consumer-group lag per partition) only with
    # strom.metrics.partition.enable (their cardinality grows with the partitions)
    _c("strom.http.listener", _STR, "http://127.0.0.1:9644"),
    _c("strom.metrics.partition.enable", _BOOL, False),
    # page cache (strom.log.segment.PAGE_CACHE): bytes of each segment's freshly written tail kept
    # in the page cache; the pages behind are released (posix_fadvise DONTNEED) as the log grows,
    # so new writes reuse them. 0 leaves everything to the kernel, as Kafka does
    _c("strom.log.page.cache.window.bytes", _LONG, 64 * 1024 * 1024, AtLeast(0)),
    # ... released every this many bytes appended. The first release of a dirty range starts its
    # writeback, during which an append to the same file waits (ext4): a smaller step makes those
    # waits shorter (16 MiB: 5-17 ms stalls every 16 MiB; 2 MiB: none over 5 ms), a larger one costs
    # less CPU per GB (bench/latency.py and bench/replication.py, README "The page cache")
    _c("strom.log.page.cache.release.bytes", _LONG, 2 * 1024 * 1024, AtLeast(64 * 1024)),
    # how often the event-loop lag monitor's timer runs (strom_event_loop_lag_seconds: how late
    # it ran, i.e. how long the loop was blocked; a WARN line for a stall of a second or more);
    # 0 turns it off
    _c("strom.event.loop.lag.sample.ms", _INT, 10, AtLeast(0)),
    # the web console (strom.console) served by the HTTP listener under /console/: it talks the Kafka
    # protocol to strom.http.console.bootstrap.servers (empty: this broker's first PLAINTEXT
    # listener) with the client settings of strom.http.console.command.config (a properties file,
    # as `strom console --command-config`); read-only and basic auth (user:password lines) as the
    # command's --read-only and --basic-auth-file
    _c("strom.http.console.enable", _BOOL, False),
    _c("strom.http.console.read.only", _BOOL, False),
    _c("strom.http.console.bootstrap.servers", _STR, ""),
    _c("strom.http.console.command.config", _STR, ""),
    _c("strom.http.console.basic.auth.file", _STR, ""),
    _c("strom.http.console.metrics.interval.ms", _LONG, 10000, AtLeast(100)),
    # message searches: running at once (more get a 503 page), and how long one may run
    _c("strom.http.console.max.searches", _INT, 4, AtLeast(1)),
    _c("strom.http.console.search.timeout.ms", _LONG, 300000, AtLeast(100)),
    # keys/values in Confluent's wire format shown decoded through this schema registry (as
    # `strom console --schema-registry-url` / `--schema-registry-user-info`); empty: raw
    _c("strom.http.console.schema.registry.url", _STR, ""),
    _c("strom.http.console.schema.registry.basic.auth.user.info", _PW, ""),
    # the schema registry (strom.schema_registry) served by the HTTP listener under /schema-registry/:
    # its state in the _schemas topic (strom.http.schema.registry.topic) of
    # strom.http.schema.registry.bootstrap.servers (empty: this broker's first PLAINTEXT listener),
    # with the client settings of strom.http.schema.registry.command.config (a properties file, as
    # `strom schema-registry --command-config`); the brokers (and standalone instances) sharing the
    # topic elect a leader in the group strom.http.schema.registry.group.id; HTTP basic auth with a
    # realm file of 'user: password[,role ...]' lines (Confluent's authentication.method=BASIC)
    _c("strom.http.schema.registry.enable", _BOOL, False),
    _c("strom.http.schema.registry.bootstrap.servers", _STR, ""),
    _c("strom.http.schema.registry.command.config", _STR, ""),
    _c("strom.http.schema.registry.topic", _STR, "_schemas"),
    _c("strom.http.schema.registry.group.id", _STR, "schema-registry"),
    _c("strom.http.schema.registry.basic.auth.file", _STR, ""),
    # SASL (security/sasl.py). Kafka's default sasl.enabled.mechanisms is GSSAPI, which strom cannot
    # offer: strom enables PLAIN and SCRAM. Per listener: listener.name.<listener>.sasl.enabled.mechanisms;
    # PLAIN users (user_<name>="<password>") from listener.name.<listener>.plain.sasl.jaas.config, else
    # sasl.jaas.config (sensitive, like every password); SCRAM users via AlterUserScramCredentials.
    # Authorization (security/authorizer.py): unset = no authorization; Kafka's
    # org.apache.kafka.metadata.authorizer.StandardAuthorizer (or strom's own name) turns it on
    _c(
        "authorizer.class.name",
        _STR,
        "",
        ValidString(
            (
                "",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "strom.security.authorizer.StandardAuthorizer",
            )
        ),
    ),
    _c("super.users", _STR, ""),
    _c("allow.everyone.if.no.acl.found", _BOOL, False),
    _c(
        "principal.builder.class",
        _STR,
        "",
        ValidString(("", "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder")),
    ),
    # client quotas' sample windows (server/client_quotas.py; Kafka's QuotaConfig)
    _c("quota.window.num", _INT, 11, AtLeast(1)),
    _c("quota.window.size.seconds", _INT, 1, AtLeast(1)),
    # KIP-612: new connections per second on the broker's listeners (the inter-broker listener
    # excepted), per listener as listener.name.<l>.max.connection.creation.rate; a connection
    # over the rate waits before it is served (Kafka delays accepting it)
    _c("max.connection.creation.rate", _INT, 2147483647, AtLeast(0)),
    _c("ssl.principal.mapping.rules", _STR, "DEFAULT", _PrincipalRules()),
    _c("sasl.enabled.mechanisms", _STR, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"),
    _c("sasl.jaas.config", _PW, ""),
    # KIP-368: a SASL session lasts this long (0: for ever); clients re-authenticate before it
    # ends, a connection whose session ended is closed at its next request
    _c("connections.max.reauth.ms", _LONG, 0, AtLeast(0)),
    # SASL/OAUTHBEARER token validation (security/oauthbearer.py, KIP-768); each may also be given
    # per listener as listener.name.<l>.oauthbearer.<key>. Without a JWKS URL the listener uses
    # Kafka's unsecured validator (development only: unsigned tokens)
    _c("sasl.oauthbearer.jwks.endpoint.url", _STR, ""),
    _c("sasl.oauthbearer.jwks.endpoint.refresh.ms", _LONG, 3600000, AtLeast(0)),
    _c("sasl.oauthbearer.expected.audience", _LIST, ""),
    _c("sasl.oauthbearer.expected.issuer", _STR, ""),
    _c("sasl.oauthbearer.sub.claim.name", _STR, "sub"),
    _c("sasl.oauthbearer.scope.claim.name", _STR, "scope"),
    _c("sasl.oauthbearer.clock.skew.seconds", _INT, 30, AtLeast(0)),
    _c("sasl.server.callback.handler.class", _STR, ""),
    # frames an unauthenticated connection on a SASL listener may send (Kafka's default, 512 KiB)
    _c("sasl.server.max.receive.size", _INT, 524288),
    # KRaft (strom.metadata.quorum_config; Kafka's KRaftConfigs/QuorumConfig names and defaults).
    # Kafka requires process.roles; strom's default is the zero set-up node: broker and controller
    # in one process, with no voters configured a quorum of itself (no controller listener needed)
    _c("process.roles", _LIST, "broker,controller"),
    _c("controller.listener.names", _STR, ""),
    _c("controller.quorum.voters", _LIST, ""),
    _c("controller.quorum.bootstrap.servers", _LIST, ""),
    _c("controller.quorum.election.timeout.ms", _INT, 1000),
    _c("controller.quorum.fetch.timeout.ms", _INT, 2000),
    _c("controller.quorum.election.backoff.max.ms", _INT, 1000),
    _c("controller.quorum.request.timeout.ms", _INT, 2000),
    _c("controller.quorum.append.linger.ms", _INT, 25),
    _c("controller.quorum.retry.backoff.ms", _INT, 20),
    _c("broker.heartbeat.interval.ms", _INT, 2000),
    _c("broker.session.timeout.ms", _INT, 9000),
    _c("initial.broker.registration.timeout.ms", _INT, 60000),
    # where __cluster_metadata lives; empty: the first of log.dirs (Kafka's default)
    _c("metadata.log.dir", _STR, ""),
    _c("metadata.log.segment.bytes", _INT, 1073741824, AtLeast(12)),  # Records.LOG_OVERHEAD
    _c("metadata.log.segment.ms", _LONG, 604800000),
    _c("metadata.max.retention.bytes", _LONG, 104857600),
    _c("metadata.max.retention.ms", _LONG, 604800000),
    # run the node on its one-voter metadata quorum (server/kraft.py), as Kafka's KRaft mode; false:
    # the JSON topic registry of the older strom (strom-topics.json in the first log dir)
    _c("strom.metadata.quorum.enable", _BOOL, True),
    _c("metadata.log.max.record.bytes.between.snapshots", _LONG, 20971520, AtLeast(1)),
    _c("metadata.log.max.snapshot.interval.ms", _LONG, 3600000, AtLeast(0)),
    _c("metadata.max.idle.interval.ms", _INT, 500, AtLeast(0)),
    _c("broker.rack", _STR, ""),
    # KIP-392: empty (Kafka's null) = consumers always read from the leader
    _c("replica.selector.class", ConfigType.CLASS, "", _ReplicaSelector(), null=True),
    _c("auto.leader.rebalance.enable", _BOOL, True),
    _c("leader.imbalance.check.interval.seconds", _LONG, 300, AtLeast(1)),
    _c("leader.imbalance.per.broker.percentage", _INT, 10, AtLeast(0)),
    _c("unclean.leader.election.enable", _BOOL, False, dynamic=_CW),
    _c("controlled.shutdown.enable", _BOOL, True),
    # the longest a stopping broker waits for the controller to release it from controlled
    # shutdown (at most broker.session.timeout.ms too): leaderships move away within a few
    # heartbeats; what may never come is the other brokers catching up (one that stopped
    # heartbeating is not fenced before its session expires), and a stop must not hang on that
    _c("strom.controlled.shutdown.timeout.ms", _INT, 30000, AtLeast(0)),
)


def _t(
    name: str,
    typ: ConfigType,
    synonyms: tuple[str, ...],
    validator: Validator | None = None,
    default: Any = None,
) -> ConfigDef:
    if default is None:  # a placeholder: TOPIC_CONFIGS holds the default its synonyms give
        default = typ.python_type()
    return ConfigDef(name, typ, default, validator, _CW, synonyms=synonyms)


_TOPIC_TABLE = _table(
    _t("cleanup.policy", _LIST, ("log.cleanup.policy",), ValidList(_CLEANUP_POLICIES)),
    _t("compression.type", _STR, ("compression.type",), ValidString(_COMPRESSION_TYPES)),
    _t("delete.retention.ms", _LONG, ("log.cleaner.delete.retention.ms",), AtLeast(0)),
    _t("file.delete.delay.ms", _LONG, ("log.segment.delete.delay.ms",), AtLeast(0)),
    _t("flush.messages", _LONG, ("log.flush.interval.messages",), AtLeast(1)),
    _t("flush.ms", _LONG, ("log.flush.interval.ms",), AtLeast(0), default=LONG_MAX),
    _t("index.interval.bytes", _INT, ("log.index.interval.bytes",), AtLeast(0)),
    _t("max.compaction.lag.ms", _LONG, ("log.cleaner.max.compaction.lag.ms",), AtLeast(1)),
    _t("max.message.bytes", _INT, ("message.max.bytes",), AtLeast(0)),
    _t("message.timestamp.type", _STR, ("log.message.timestamp.type",), ValidString(_TIMESTAMP_TYPES)),
    _t("min.cleanable.dirty.ratio", _DBL, ("log.cleaner.min.cleanable.ratio",), Between(0, 1)),
    _t("min.compaction.lag.ms", _LONG, ("log.cleaner.min.compaction.lag.ms",), AtLeast(0)),
    _t("min.insync.replicas", _INT, ("min.insync.replicas",), AtLeast(1)),
    _t("retention.bytes", _LONG, ("log.retention.bytes",)),
    _t(
        "retention.ms",
        _LONG,
        ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
        AtLeast(-1),
    ),
    _t("segment.bytes", _INT, ("log.segment.bytes",), AtLeast(14)),
    _t("segment.index.bytes", _INT, ("log.index.size.max.bytes",), AtLeast(4)),
    _t("segment.ms", _LONG, ("log.roll.ms", "log.roll.hours"), AtLeast(1)),
    _t("unclean.leader.election.enable", _BOOL, ("unclean.leader.election.enable",)),
)

_UNIT_MS = {".hours": 3_600_000, ".minutes": 60_000}


def broker_default(name: str) -> Any:
    """The default of broker config ``name`` (KeyError for a name the schema does not know)."""
    return BROKER_CONFIGS[name].default


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


def resolve_topic_defaults(broker_values: Mapping[str, Any]) -> dict[str, Any]:
    """The topic-config defaults a broker with ``broker_values`` gives: for every topic config
    the first of its synonyms that is set, in ms for a ``*.minutes``/``*.hours`` synonym (Kafka's
    ``log.retention.ms`` > ``.minutes`` > ``.hours``), else the topic config's own default."""
    out: dict[str, Any] = {}
    for name, tdef in _TOPIC_TABLE.items():
        value = tdef.default
        for bname in tdef.synonyms:
            bdef = BROKER_CONFIGS[bname]
            v = broker_values.get(bname, bdef.default)
            if bdef.is_unset(v):
                continue
            unit = next((f for suffix, f in _UNIT_MS.items() if bname.endswith(suffix)), None)
            value = v if unit is None else v * unit
            break
        out[name] = value
    return out


# the topic table with each default resolved from the broker defaults (what LogConfig() is)
TOPIC_CONFIGS: dict[str, ConfigDef] = {
    name: ConfigDef(d.name, d.config_type, value, d.validator, d.dynamic, synonyms=d.synonyms)
    for (name, d), value in zip(_TOPIC_TABLE.items(), resolve_topic_defaults({}).values(), strict=True)
}


def _g(
    name: str,
    typ: ConfigType,
    *,
    synonym: str | None = None,
    default: Any = None,
    minimum: int | None = None,
    fixed_bounds: tuple[int, int] | None = None,
) -> ConfigDef:
    bounds: tuple[str, str] | None = None
    if synonym is not None:  # bounded by group.share.min.x.ms and group.share.max.x.ms
        default = typ.python_type(BROKER_CONFIGS[synonym].default)
        head, _, tail = synonym.partition(".")
        kind, _, rest = tail.partition(".")
        bounds = (f"{head}.{kind}.min.{rest}", f"{head}.{kind}.max.{rest}")
    return ConfigDef(
        name,
        typ,
        default,
        AtLeast(minimum) if minimum is not None else None,
        _CW,
        synonyms=(synonym,) if synonym else (),
        bound_configs=bounds,
        fixed_bounds=fixed_bounds,
    )


# Kafka's GroupConfig (per-group overrides of the group coordinator's settings)
GROUP_CONFIGS: dict[str, ConfigDef] = _table(
    _g("consumer.session.timeout.ms", _INT, synonym="group.consumer.session.timeout.ms", minimum=1),
    _g("consumer.heartbeat.interval.ms", _INT, synonym="group.consumer.heartbeat.interval.ms", minimum=1),
    _g("share.session.timeout.ms", _INT, synonym="group.share.session.timeout.ms", minimum=1),
    _g("share.heartbeat.interval.ms", _INT, synonym="group.share.heartbeat.interval.ms", minimum=1),
    _g("share.record.lock.duration.ms", _INT, synonym="group.share.record.lock.duration.ms", minimum=1000),
    _g("share.delivery.count.limit", _INT, synonym="group.share.delivery.count.limit", minimum=2),
    _g(
        "share.partition.max.record.locks",
        _INT,
        synonym="group.share.partition.max.record.locks",
        minimum=100,
    ),
    _g("share.auto.offset.reset", _STR, default="latest"),
    _g("share.isolation.level", _STR, default="read_uncommitted"),
    _g("share.renew.acknowledge.enable", _BOOL, default=True),
    # streams groups: strom has no group.streams.* broker configs; Kafka's defaults bound them
    _g("streams.session.timeout.ms", _INT, default=45000, minimum=1, fixed_bounds=(45000, 60000)),
    _g("streams.heartbeat.interval.ms", _INT, default=5000, minimum=1, fixed_bounds=(5000, 15000)),
    _g("streams.num.standby.replicas", _INT, default=0, minimum=0, fixed_bounds=(0, 2)),
    _g("streams.initial.rebalance.delay.ms", _INT, default=3000, minimum=0),
)


def _check_synonyms(tables: Iterable[dict[str, ConfigDef]]) -> None:
    for table in tables:
        for d in table.values():
            for s in (*d.synonyms, *(d.bound_configs or ())):
                assert s in BROKER_CONFIGS, (d.name, s)


_check_synonyms((TOPIC_CONFIGS, GROUP_CONFIGS))
