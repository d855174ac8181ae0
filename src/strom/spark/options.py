"""Options of the ``strom`` Spark data source, with the names and semantics of Spark's Kafka
source and sink (``spark-sql-kafka-0-10``), parsed and validated before any broker is contacted.

Rules (as in Spark's ``KafkaSourceProvider``):

* ``kafka.bootstrap.servers`` is required; every other ``kafka.*`` option is a client setting
  passed through (see :class:`ClientSettings`); the consumer settings that Spark's source manages
  itself (``auto.offset.reset``, deserializers, ``enable.auto.commit``, interceptors) are rejected
  with Spark's message.
* Security settings pass through as Spark's source passes them to its Kafka client:
  ``kafka.security.protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), ``kafka.sasl.mechanism``
  (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), ``kafka.sasl.jaas.config``, ``kafka.ssl.*`` with PEM
  stores (see :mod:`strom.client.security`); what the strom client cannot do (GSSAPI,
  OAUTHBEARER, JKS/PKCS12 stores) is refused up front with a message that says so. They are kept
  in :attr:`ClientSettings.security`, whose ``repr`` hides the secrets; no ``ssl.*`` / ``sasl.*``
  setting lands in :attr:`ClientSettings.extra`.
* Reading: exactly one of ``subscribe`` / ``subscribePattern`` / ``assign``.
* Starting position, by priority: ``startingTimestamp`` > ``startingOffsetsByTimestamp`` >
  ``startingOffsets``. Default ``latest`` for streams, ``earliest`` for batch reads.
  ``endingOffsets`` (and the timestamp variants) only for batch reads.

Error contract: every invalid or conflicting option raises :class:`StromOptionError` (an
``IllegalArgumentException``-like ``ValueError``) whose message names the option, as Spark does.
Option names are case-insensitive (Spark passes a case-insensitive map).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.client.security import SecurityConfig, SecurityConfigError

__all__ = [
    "EARLIEST",
    "LATEST",
    "ClientSettings",
    "OffsetSpec",
    "ReadOptions",
    "StromOptionError",
    "WriteOptions",
    "parse_read_options",
    "parse_write_options",
]

EARLIEST = -2
LATEST = -1


class StromOptionError(ValueError):
    """An invalid, missing or conflicting option (Spark raises IllegalArgumentException)."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: ``kind`` is ``earliest``, ``latest``, ``offsets`` (per-partition
    JSON, -2 earliest, -1 latest), ``timestamps`` (per-partition JSON) or ``timestamp`` (one time
    for all partitions)."""

    kind: str
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    timestamp: int = -1


@dataclass(frozen=True)
class ClientSettings:
    """Kafka client settings (the ``kafka.`` prefix removed). Picklable: shipped to executors."""

    bootstrap_servers: str
    client_id: str = "strom-spark"
    request_timeout_ms: int = 30_000
    isolation_level: int = 0  # 0 read_uncommitted, 1 read_committed
    fetch_max_bytes: int = 50 * 1024 * 1024
    max_partition_fetch_bytes: int = 8 * 1024 * 1024
    fetch_max_wait_ms: int = 500
    acks: int = -1
    compression: int = 0
    linger_ms: int = 0
    batch_size: int = 1024 * 1024
    transactional_id_prefix: str | None = None
    transaction_timeout_ms: int = 60_000
    extra: tuple[tuple[str, str], ...] = ()  # other kafka.* settings (never ssl.* or sasl.*)
    security: SecurityConfig = field(default_factory=SecurityConfig)  # TLS context built where used


@dataclass(frozen=True)
class ReadOptions:
    client: ClientSettings
    strategy: str  # subscribe | subscribePattern | assign
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict[str, tuple[int, ...]] = field(default_factory=dict)
    starting: OffsetSpec = OffsetSpec("latest")
    ending: OffsetSpec = OffsetSpec("latest")
    starting_by_timestamp_strategy: str = "error"  # error | latest
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10


@dataclass(frozen=True)
class WriteOptions:
    client: ClientSettings
    topic: str | None = None
    include_headers: bool = True
    exactly_once: bool = False
    eos_id: str | None = None
    # exactlyOnce: the topic whose partition 0 keeps the committed batch marker (default: the
    # ``topic`` option); lets rows carry their own ``topic`` (strom.streams' dead letters)
    eos_marker_topic: str | None = None
    key_format: Any = None  # strom.spark.formats.FieldFormat (settled by the sink, registry contacted)
    value_format: Any = None


# Spark's KafkaSourceProvider refuses these consumer settings with these explanations.
_UNSUPPORTED_CONSUMER = {
    "auto.offset.reset": "Kafka option 'auto.offset.reset' is not supported. Instead set the source "
    "option 'startingOffsets' to 'earliest' or 'latest' to specify where to start. Structured "
    "Streaming manages which offsets are consumed internally, rather than relying on the "
    "kafkaConsumer. This will ensure that no data is missed when new topics/partitions are "
    "dynamically subscribed.",
    "key.deserializer": "Kafka option 'key.deserializer' is not supported, as keys are always "
    "deserialized as byte arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly "
    "deserialize the keys.",
    "value.deserializer": "Kafka option 'value.deserializer' is not supported, as values are always "
    "deserialized as byte arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly "
    "deserialize the values.",
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported, as Structured "
    "Streaming does not commit any offset to Kafka.",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported, as the source reads "
    "records as byte arrays.",
}
_UNSUPPORTED_PRODUCER = {
    "key.serializer": "Kafka option 'key.serializer' is not supported, as keys are always serialized "
    "with ByteArraySerializer or StringSerializer. Use DataFrame operations to explicitly serialize "
    "the keys into either strings or byte arrays.",
    "value.serializer": "Kafka option 'value.serializer' is not supported, as values are always "
    "serialized with ByteArraySerializer or StringSerializer. Use DataFrame operations to explicitly "
    "serialize the values into either strings or byte arrays.",
}
_COMPRESSION = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_STRATEGIES = ("subscribe", "subscribepattern", "assign")
_SPARK_NAMES = {"subscribe": "subscribe", "subscribepattern": "subscribePattern", "assign": "assign"}


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _int_opt(
    opts: Mapping[str, str], name: str, default: int | None, *, positive: bool = False
) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise StromOptionError(f"Invalid value '{raw}' for option '{name}': must be a number") from None
    if positive and value <= 0:
        raise StromOptionError(f"Invalid value '{raw}' for option '{name}': must be positive")
    return value


def _bool_opt(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    v = raw.strip().lower()
    if v not in ("true", "false"):
        raise StromOptionError(f"Invalid value '{raw}' for option '{name}': must be 'true' or 'false'")
    return v == "true"


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(opts: Mapping[str, str], name: str, default: int) -> int:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    m = _DURATION.match(raw)
    if not m:
        raise StromOptionError(f"Invalid value '{raw}' for option '{name}': expected a duration like '15m'")
    return int(m.group(1)) * _UNIT_MS[(m.group(2) or "ms").lower()]


def client_settings(options: Mapping[str, str], *, for_write: bool = False) -> ClientSettings:
    """The ``kafka.*`` options as :class:`ClientSettings` (raises on missing bootstrap servers,
    refused consumer/producer settings and unsupported or invalid security settings)."""
    opts = _lower(options)
    kafka = {k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")}
    servers = kafka.get("bootstrap.servers", "").strip()
    if not servers:
        raise StromOptionError(
            "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer"
            if not for_write
            else "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka producer"
        )
    refused = _UNSUPPORTED_PRODUCER if for_write else _UNSUPPORTED_CONSUMER
    for name, message in refused.items():
        if name in kafka:
            raise StromOptionError(message)
    try:
        security = SecurityConfig.from_config(kafka, prefix="kafka.")
    except SecurityConfigError as e:
        raise StromOptionError(str(e)) from None
    iso = kafka.get("isolation.level", "read_uncommitted").strip().lower()
    if iso not in ("read_uncommitted", "read_committed"):
        raise StromOptionError(
            f"Invalid value '{iso}' for option 'kafka.isolation.level': "
            "must be 'read_uncommitted' or 'read_committed'"
        )
    acks_raw = kafka.get("acks", "all").strip().lower()
    acks = -1 if acks_raw in ("all", "-1") else _int_opt({"acks": acks_raw}, "acks", -1)
    if acks not in (-1, 0, 1):
        raise StromOptionError(f"Invalid value '{acks_raw}' for option 'kafka.acks': must be all, 0 or 1")
    comp_raw = kafka.get("compression.type", "none").strip().lower()
    if comp_raw not in _COMPRESSION:
        raise StromOptionError(
            f"Invalid value '{comp_raw}' for option 'kafka.compression.type': "
            f"must be one of {', '.join(_COMPRESSION)}"
        )

    def num(name: str, default: int) -> int:
        value = _int_opt(kafka, name, default)
        assert value is not None
        return value

    known = {
        "bootstrap.servers",
        "client.id",
        "request.timeout.ms",
        "isolation.level",
        "fetch.max.bytes",
        "max.partition.fetch.bytes",
        "fetch.max.wait.ms",
        "acks",
        "compression.type",
        "linger.ms",
        "batch.size",
        "transactional.id",
        "transaction.timeout.ms",
        "security.protocol",
    }
    return ClientSettings(
        bootstrap_servers=servers,
        client_id=kafka.get("client.id", "strom-spark"),
        request_timeout_ms=num("request.timeout.ms", 30_000),
        isolation_level=1 if iso == "read_committed" else 0,
        fetch_max_bytes=num("fetch.max.bytes", 50 * 1024 * 1024),
        max_partition_fetch_bytes=num("max.partition.fetch.bytes", 8 * 1024 * 1024),
        fetch_max_wait_ms=num("fetch.max.wait.ms", 500),
        acks=acks,
        compression=_COMPRESSION[comp_raw],
        linger_ms=num("linger.ms", 0),
        batch_size=num("batch.size", 1024 * 1024),
        transactional_id_prefix=kafka.get("transactional.id"),
        transaction_timeout_ms=num("transaction.timeout.ms", 60_000),
        extra=tuple(sorted((k, v) for k, v in kafka.items() if k not in known and not _is_security(k))),
        security=security,
    )


def _is_security(name: str) -> bool:
    return name.startswith(("ssl.", "sasl.")) or name == "enable.ssl.certificate.verification"


def _json_obj(raw: str, name: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise StromOptionError(
            f"Invalid JSON in option '{name}': {raw!r} ({e.msg}); expected e.g. "
            '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
        ) from None
    if not isinstance(value, dict):
        raise StromOptionError(f"Option '{name}' must be a JSON object, got {raw!r}")
    return value


def parse_partition_json(raw: str, name: str) -> dict[str, dict[int, int]]:
    """``{"topicA":{"0":23,"1":-1}}`` -> ``{"topicA": {0: 23, 1: -1}}`` (Spark's JsonUtils)."""
    out: dict[str, dict[int, int]] = {}
    for topic, parts in _json_obj(raw, name).items():
        if not isinstance(parts, dict):
            raise StromOptionError(
                f"Option '{name}': expected a partition -> number object for topic {topic!r}, got {parts!r}"
            )
        per: dict[int, int] = {}
        for p, v in parts.items():
            try:
                per[int(p)] = int(v)
            except (TypeError, ValueError):
                raise StromOptionError(
                    f"Option '{name}': partition {p!r} of topic {topic!r} must map to a number, got {v!r}"
                ) from None
        out[str(topic)] = per
    return out


def _offset_spec(opts: Mapping[str, str], prefix: str, default: str, *, batch_ending: bool) -> OffsetSpec:
    ts = opts.get(f"{prefix}timestamp")
    if ts is not None:
        try:
            return OffsetSpec("timestamp", timestamp=int(ts.strip()))
        except ValueError:
            raise StromOptionError(
                f"Invalid value '{ts}' for option '{prefix}Timestamp': must be a timestamp in milliseconds"
            ) from None
    by_ts = opts.get(f"{prefix}offsetsbytimestamp")
    if by_ts is not None:
        return OffsetSpec("timestamps", offsets=parse_partition_json(by_ts, f"{prefix}OffsetsByTimestamp"))
    raw = opts.get(f"{prefix}offsets")
    if raw is None:
        return OffsetSpec(default)
    v = raw.strip()
    if v.lower() in ("earliest", "latest"):
        return OffsetSpec(v.lower())
    offsets = parse_partition_json(v, f"{prefix}Offsets")
    for topic, parts in offsets.items():
        for p, o in parts.items():
            if batch_ending and o == EARLIEST:
                raise StromOptionError(
                    f"ending offset for {topic}-{p} can't be earliest for batch queries on Kafka"
                )
            if o < EARLIEST:
                raise StromOptionError(
                    f"Option '{prefix}Offsets': offset {o} for {topic}-{p} is invalid "
                    "(use -2 for earliest, -1 for latest)"
                )
    return OffsetSpec("offsets", offsets=offsets)


def parse_read_options(options: Mapping[str, str], *, streaming: bool | None) -> ReadOptions:
    """Validate and parse the options of a read (``streaming`` for ``readStream``; ``None`` when
    the mode is not known yet, as in ``DataSource.schema()``: the mode-specific checks wait)."""
    opts = _lower(options)
    client = client_settings(opts)
    given = [s for s in _STRATEGIES if s in opts]
    if not given:
        raise StromOptionError(
            "One of the following options must be specified for Kafka source: subscribe, "
            "subscribePattern, assign. See the docs for more details."
        )
    if len(given) > 1:
        raise StromOptionError(
            "Only one of the following options can be specified for Kafka source: subscribe, "
            f"subscribePattern, assign. Specified: {', '.join(_SPARK_NAMES[g] for g in given)}. "
            "See the docs for more details."
        )
    strategy = _SPARK_NAMES[given[0]]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict[str, tuple[int, ...]] = {}
    if strategy == "subscribe":
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise StromOptionError(
                "No topics to subscribe to as specified value for option 'subscribe' is "
                f"'{opts['subscribe']}'"
            )
    elif strategy == "subscribePattern":
        pattern = opts["subscribepattern"].strip()
        if not pattern:
            raise StromOptionError(
                "Pattern to subscribe is empty as specified value for option 'subscribePattern' is ''"
            )
        try:
            re.compile(pattern)
        except re.error as e:
            raise StromOptionError(f"Invalid regular expression in option 'subscribePattern': {e}") from None
    else:
        raw = opts["assign"].strip()
        for topic, parts in _json_obj(raw, "assign").items():
            if not isinstance(parts, list) or not all(isinstance(p, int) for p in parts):
                raise StromOptionError(
                    f'Option \'assign\' must look like {{"topicA":[0,1],"topicB":[2,4]}}, got {raw!r}'
                )
            assign[str(topic)] = tuple(sorted(set(parts)))
        if not any(assign.values()):
            raise StromOptionError(
                f"No topicpartitions to assign as specified value for option 'assign' is '{raw}'"
            )

    starting = _offset_spec(
        opts, "starting", "earliest" if streaming is False else "latest", batch_ending=False
    )
    if streaming is False and starting.kind == "latest":
        raise StromOptionError("starting offset can't be latest for batch queries on Kafka")
    if streaming is False and starting.kind == "offsets":
        for topic, parts in starting.offsets.items():
            for p, o in parts.items():
                if o == LATEST:
                    raise StromOptionError(
                        f"startingOffsets for {topic}-{p} can't be latest for batch queries on Kafka"
                    )
    ending_given = any(k in opts for k in ("endingoffsets", "endingoffsetsbytimestamp", "endingtimestamp"))
    if streaming and ending_given:
        raise StromOptionError("Ending offset not valid in streaming queries")
    ending = _offset_spec(opts, "ending", "latest", batch_ending=True)
    if streaming is False and ending.kind == "earliest":
        raise StromOptionError("ending offset can't be earliest for batch queries on Kafka")

    strat = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strat not in ("error", "latest"):
        raise StromOptionError(
            f"Invalid value '{strat}' for option 'startingOffsetsByTimestampStrategy': "
            "must be 'error' or 'latest'"
        )
    max_trigger = _int_opt(opts, "maxOffsetsPerTrigger", None, positive=True)
    min_trigger = _int_opt(opts, "minOffsetsPerTrigger", None, positive=True)
    if max_trigger is not None and min_trigger is not None and min_trigger > max_trigger:
        raise StromOptionError(
            f"The value of minOffsetPerTrigger({min_trigger}) is higher than the "
            f"maxOffsetsPerTrigger({max_trigger})."
        )
    return ReadOptions(
        client=client,
        strategy=strategy,
        topics=topics,
        pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_by_timestamp_strategy=strat,
        max_offsets_per_trigger=max_trigger,
        min_offsets_per_trigger=min_trigger,
        max_trigger_delay_ms=_duration_ms(opts, "maxTriggerDelay", 15 * 60 * 1000),
        fail_on_data_loss=_bool_opt(opts, "failOnDataLoss", True),
        min_partitions=_int_opt(opts, "minPartitions", None, positive=True),
        max_records_per_partition=_int_opt(opts, "maxRecordsPerPartition", None, positive=True),
        include_headers=_bool_opt(opts, "includeHeaders", False),
        fetch_offset_num_retries=_int_opt(opts, "fetchOffset.numRetries", 3) or 0,
        fetch_offset_retry_interval_ms=_int_opt(opts, "fetchOffset.retryIntervalMs", 10) or 0,
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Validate and parse the options of a write (batch or streaming)."""
    opts = _lower(options)
    client = client_settings(opts, for_write=True)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise StromOptionError("Option 'topic' must not be empty")
    return WriteOptions(
        client=client,
        topic=topic.strip() if topic is not None else None,
        include_headers=True,
        exactly_once=_bool_opt(opts, "exactlyOnce", False),
        eos_id=opts.get("exactlyonce.id"),
        eos_marker_topic=(opts.get("exactlyonce.markertopic") or "").strip() or None,
    )
