"""A connector's config, as Kafka Connect takes it: the JSON posted to ``POST /connectors``
(``{"name": ..., "config": {...}}``), a bare config map (``PUT /connectors/{n}/config``), or a
``.properties`` file as ``connect-standalone.sh`` reads it.

:func:`parse_config` validates everything up front (connector class, its keys, ``tasks.max``,
``topics``/``topics.regex``, ``transforms.*``, ``predicates.*``, ``errors.*``, the converters
and their ``*.converter.*`` keys) and raises :class:`~strom.connect.data.ConfigError` with one
line naming the problem. As in Connect, a key no connector, transform or converter reads is not
an error (the plugin ignores it): it is logged as a warning naming the key and listed in
:attr:`ConnectorConfig.warnings` (``strom connect validate`` prints them).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.connect.data import ConfigError
from strom.connect.delta import DELTA_KEYS, DELTA_SINK
from strom.connect.delta import validate_props as validate_delta_props
from strom.connect.postgres import JDBC_SINK, JDBC_SOURCE, PG_CDC
from strom.connect.transforms import (
    UNKNOWN_KEYS,
    Predicate,
    Transformation,
    TransformChain,
    make_predicate,
    make_transform,
    plugin_keys,
)

log = logging.getLogger("strom.connect")

__all__ = [
    "DELTA_SINK",
    "JDBC_SINK",
    "JDBC_SOURCE",
    "PG_CDC",
    "ConfigError",
    "ConnectorConfig",
    "ConnectorSpec",
    "load_config",
    "parse_config",
    "parse_properties",
]


@dataclass(frozen=True)
class ConnectorSpec:
    java_class: str
    kind: str  # "source" | "sink"
    keys: dict[str, str | None]  # key -> default (None: required)


FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
FILE_SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"
PARQUET_SINK = "strom.connect.ParquetSinkConnector"
HTTP_SINK = "io.confluent.connect.http.HttpSinkConnector"

CONNECTORS: dict[str, ConnectorSpec] = {
    FILE_SOURCE: ConnectorSpec(FILE_SOURCE, "source", {"file": "", "topic": None, "batch.size": "2000"}),
    FILE_SINK: ConnectorSpec(FILE_SINK, "sink", {"file": ""}),
    PARQUET_SINK: ConnectorSpec(PARQUET_SINK, "sink", {"path": None}),
    DELTA_SINK: ConnectorSpec(DELTA_SINK, "sink", DELTA_KEYS),
    HTTP_SINK: ConnectorSpec(
        HTTP_SINK,
        "sink",
        {
            "http.api.url": None,
            "request.method": "POST",
            "headers": "",
            "header.separator": "|",
            "batch.max.size": "1",
            "batch.prefix": "",
            "batch.suffix": "",
            "batch.separator": ",",
            "request.body.format": "string",
            "max.retries": "10",
            "retry.backoff.ms": "3000",
            "http.request.timeout.ms": "30000",
        },
    ),
    JDBC_SOURCE: ConnectorSpec(
        JDBC_SOURCE,
        "source",
        {
            "connection.url": None,
            "connection.user": "",
            "connection.password": "",
            "connection.attempts": "3",
            "connection.backoff.ms": "10000",
            "mode": None,
            "incrementing.column.name": "",
            "timestamp.column.name": "",
            "table.whitelist": "",
            "table.include.list": "",
            "table.blacklist": "",
            "table.exclude.list": "",
            "schema.pattern": "",
            "catalog.pattern": "",
            "table.types": "TABLE",
            "topic.prefix": "",
            "poll.interval.ms": "5000",
            "batch.max.rows": "100",
            "timestamp.delay.interval.ms": "0",
            "numeric.mapping": "none",
            "db.timezone": "UTC",
            "validate.non.null": "true",
            "dialect.name": "",
        },
    ),
    JDBC_SINK: ConnectorSpec(
        JDBC_SINK,
        "sink",
        {
            "connection.url": None,
            "connection.user": "",
            "connection.password": "",
            "connection.attempts": "3",
            "connection.backoff.ms": "10000",
            "insert.mode": "insert",
            "batch.size": "3000",
            "delete.enabled": "false",
            "table.name.format": "${topic}",
            "pk.mode": "none",
            "pk.fields": "",
            "fields.whitelist": "",
            "auto.create": "false",
            "auto.evolve": "false",
            "db.timezone": "UTC",
            "quote.sql.identifiers": "ALWAYS",
            "max.retries": "10",
            "retry.backoff.ms": "3000",
            "dialect.name": "",
        },
    ),
    PG_CDC: ConnectorSpec(
        PG_CDC,
        "source",
        {
            "database.hostname": None,
            "database.port": "5432",
            "database.user": None,
            "database.password": "",
            "database.dbname": None,
            "topic.prefix": None,
            "table.include.list": "",
            "table.exclude.list": "",
            "schema.include.list": "",
            "plugin.name": "pgoutput",
            "slot.name": "debezium",
            "slot.drop.on.stop": "false",
            "publication.name": "dbz_publication",
            "publication.autocreate.mode": "all_tables",
            "snapshot.mode": "initial",
            "tombstones.on.delete": "true",
            "decimal.handling.mode": "precise",
            "time.precision.mode": "adaptive",
            "poll.interval.ms": "500",
            "max.batch.size": "2048",
            "max.queue.size": "8192",
            "heartbeat.interval.ms": "0",
        },
    ),
}

JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"

# keys every connector takes (ConnectorConfig, SourceConnectorConfig, SinkConnectorConfig)
COMMON_KEYS = {
    "name",
    "connector.class",
    "tasks.max",
    "tasks.max.enforce",
    "key.converter",
    "value.converter",
    "header.converter",
    "config.action.reload",
    "transforms",
    "predicates",
    "errors.retry.timeout",
    "errors.retry.delay.max.ms",
    "errors.tolerance",
    "errors.log.enable",
    "errors.log.include.messages",
    "errors.deadletterqueue.topic.name",
    "errors.deadletterqueue.topic.replication.factor",
    "errors.deadletterqueue.context.headers.enable",
    "topics",
    "topics.regex",
    "exactly.once.support",
    "transaction.boundary",
    "offsets.storage.topic",
    "topic.creation.groups",
    "offset.flush.interval.ms",
}
PASS_PREFIXES = ("producer.override.", "consumer.override.", "admin.override.", "topic.creation.")
SOURCE_ONLY = {
    "exactly.once.support",
    "transaction.boundary",
    "offsets.storage.topic",
    "topic.creation.groups",
}
SINK_ONLY = {
    "topics",
    "topics.regex",
    "errors.deadletterqueue.topic.name",
    "errors.deadletterqueue.topic.replication.factor",
    "errors.deadletterqueue.context.headers.enable",
}


@dataclass
class ErrorsConfig:
    tolerance: str = "none"  # none | all
    log_enable: bool = False
    log_include_messages: bool = False
    dlq_topic: str = ""
    dlq_replication_factor: int = 3
    dlq_context_headers: bool = False
    retry_timeout_ms: int = 0
    retry_delay_max_ms: int = 60_000


@dataclass
class ConnectorConfig:
    name: str
    connector_class: str  # Kafka's full class name
    kind: str
    props: dict[str, str]  # the config as given (strings)
    tasks_max: int = 1
    topics: list[str] = field(default_factory=list)
    topics_regex: str | None = None
    errors: ErrorsConfig = field(default_factory=ErrorsConfig)
    key_converter: tuple[str, dict[str, str]] = (JSON_CONVERTER, {})
    value_converter: tuple[str, dict[str, str]] = (JSON_CONVERTER, {})
    transforms: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    predicates: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # keys supplied but not known

    def connector_props(self) -> dict[str, str]:
        """The connector's own keys with their defaults."""
        spec = CONNECTORS[self.connector_class]
        return {k: self.props.get(k, d if d is not None else "") for k, d in spec.keys.items()}

    def transform_chain(self) -> TransformChain:
        preds: dict[str, Predicate] = {}
        for a, (c, p) in self.predicates.items():
            with plugin_keys(f"predicates.{a}."):
                preds[a] = make_predicate(c, p)
        steps: list[tuple[str, Transformation, Predicate | None, bool]] = []
        for alias, cls, props in self.transforms:
            props = dict(props)
            pname = props.pop("predicate", None)
            negate_s = props.pop("negate", "false").strip().lower()
            if negate_s not in ("true", "false"):
                raise ConfigError(
                    f"Invalid value {negate_s} for configuration transforms.{alias}.negate: "
                    "Expected value to be either true or false"
                )
            if pname is not None and pname not in preds:
                raise ConfigError(
                    f"transforms.{alias}.predicate names predicate {pname!r}, which is not in "
                    f"predicates ({', '.join(preds) or 'none'})"
                )
            if pname is None and negate_s == "true":
                raise ConfigError(f"transforms.{alias}.negate is set but transforms.{alias}.predicate is not")
            try:
                with plugin_keys(f"transforms.{alias}."):
                    t = make_transform(cls, props)
            except ConfigError as e:
                raise ConfigError(f"transforms.{alias}: {e}") from None
            steps.append((alias, t, preds[pname] if pname else None, negate_s == "true"))
        return TransformChain(steps)


_ALIASES = {
    "FileStreamSource": FILE_SOURCE,
    "FileStreamSourceConnector": FILE_SOURCE,
    "FileStreamSink": FILE_SINK,
    "FileStreamSinkConnector": FILE_SINK,
    "ParquetSink": PARQUET_SINK,
    "ParquetSinkConnector": PARQUET_SINK,
    "HttpSink": HTTP_SINK,
    "DeltaSink": DELTA_SINK,
    "DeltaSinkConnector": DELTA_SINK,
    "HttpSinkConnector": HTTP_SINK,
    "JdbcSourceConnector": JDBC_SOURCE,
    "JdbcSinkConnector": JDBC_SINK,
    "PostgresConnector": PG_CDC,
}


def connector_class(name: str) -> str:
    name = name.strip()
    if name in CONNECTORS:
        return name
    if name in _ALIASES:
        return _ALIASES[name]
    known = ", ".join(sorted(CONNECTORS))
    raise ConfigError(
        f"Failed to find any class that implements Connector and which name matches {name}, "
        f"available connectors are: {known}"
    )


def _str(v: Any, key: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, str)):
        return str(v)
    if v is None:
        return ""
    raise ConfigError(f"config {key!r}: expected a string, got {type(v).__name__}")


def _bool(props: dict[str, str], key: str, default: bool) -> bool:
    v = props.get(key)
    if v is None:
        return default
    if v.strip().lower() not in ("true", "false"):
        raise ConfigError(
            f"Invalid value {v} for configuration {key}: Expected value to be either true or false"
        )
    return v.strip().lower() == "true"


def _int(props: dict[str, str], key: str, default: int, minimum: int | None = None) -> int:
    v = props.get(key)
    if v is None:
        return default
    try:
        n = int(v.strip())
    except ValueError:
        raise ConfigError(f"Invalid value {v} for configuration {key}: Not a number of type INT") from None
    if minimum is not None and n < minimum:
        raise ConfigError(f"Invalid value {n} for configuration {key}: Value must be at least {minimum}")
    return n


def _aliases(props: dict[str, str], key: str) -> list[str]:
    raw = props.get(key, "")
    aliases = [a.strip() for a in raw.split(",") if a.strip()]
    if len(set(aliases)) != len(aliases):
        raise ConfigError(f"Invalid value {raw} for configuration {key}: Duplicate alias provided.")
    return aliases


def parse_config(doc: dict[str, Any], name: str | None = None) -> ConnectorConfig:
    """A connector config from ``{"name", "config"}`` or a flat config map (``name`` may be given
    separately, as by ``PUT /connectors/{name}/config``)."""
    if not isinstance(doc, dict):
        raise ConfigError("connector config must be a JSON object")
    if "config" in doc and isinstance(doc.get("config"), dict):
        extra = set(doc) - {"name", "config", "initial_state"}
        if extra:
            raise ConfigError(
                f"unknown field {sorted(extra)[0]!r} in connector request (expected name, config)"
            )
        raw = dict(doc["config"])
        if "name" in doc:
            if "name" in raw and str(raw["name"]) != str(doc["name"]):
                raise ConfigError(
                    f"Connector name configuration ({raw['name']}) doesn't match connector name "
                    f"in the URL / request ({doc['name']})"
                )
            raw["name"] = doc["name"]
    else:
        raw = dict(doc)
    props = {str(k): _str(v, str(k)) for k, v in raw.items()}
    if name is not None:
        if "name" in props and props["name"] != name:
            raise ConfigError(
                f"Connector name configuration ({props['name']}) doesn't match connector name "
                f"in the URL ({name})"
            )
        props["name"] = name
    unknown: list[str] = []
    token = UNKNOWN_KEYS.set(unknown)
    try:
        cfg = _validate(props)
    finally:
        UNKNOWN_KEYS.reset(token)
    for key in unknown:
        cfg.warnings.append(f"The configuration '{key}' was supplied but isn't a known config.")
    for w in cfg.warnings:
        log.warning("connector %s: %s", cfg.name, w)
    return cfg


def _validate(props: dict[str, str]) -> ConnectorConfig:
    name = props.get("name", "").strip()
    if not name:
        raise ConfigError('Missing required configuration "name" which has no default value.')
    if any(c in name for c in "/\\") or any(ord(c) < 32 for c in name):
        raise ConfigError(f"connector name {name!r} may not contain '/', '\\' or control characters")
    if "connector.class" not in props:
        raise ConfigError('Missing required configuration "connector.class" which has no default value.')
    cls = connector_class(props["connector.class"])
    spec = CONNECTORS[cls]
    cfg = ConnectorConfig(name=name, connector_class=cls, kind=spec.kind, props=props)
    cfg.tasks_max = _int(props, "tasks.max", 1, minimum=1)

    # topics
    if spec.kind == "sink":
        topics = [t.strip() for t in props.get("topics", "").split(",") if t.strip()]
        regex = props.get("topics.regex", "").strip()
        if topics and regex:
            raise ConfigError("Must configure one of topics or topics.regex, not both")
        if not topics and not regex:
            raise ConfigError("Must configure one of topics or topics.regex")
        if regex:
            try:
                re.compile(regex)
            except re.error as e:
                raise ConfigError(f"Invalid value {regex} for configuration topics.regex: {e}") from None
        cfg.topics, cfg.topics_regex = topics, regex or None
        dlq = props.get("errors.deadletterqueue.topic.name", "").strip()
        if dlq and (dlq in topics or (regex and re.fullmatch(regex, dlq))):
            raise ConfigError(
                f"The DLQ topic '{dlq}' may not be included in the list of topics "
                "('topics' or 'topics.regex') to be consumed."
            )

    # errors
    tol = props.get("errors.tolerance", "none").strip().lower()
    if tol not in ("none", "all"):
        raise ConfigError(
            f"Invalid value {props['errors.tolerance']} for configuration errors.tolerance: "
            "String must be one of: none, all"
        )
    cfg.errors = ErrorsConfig(
        tolerance=tol,
        log_enable=_bool(props, "errors.log.enable", False),
        log_include_messages=_bool(props, "errors.log.include.messages", False),
        dlq_topic=props.get("errors.deadletterqueue.topic.name", "").strip(),
        dlq_replication_factor=_int(props, "errors.deadletterqueue.topic.replication.factor", 3),
        dlq_context_headers=_bool(props, "errors.deadletterqueue.context.headers.enable", False),
        retry_timeout_ms=_int(props, "errors.retry.timeout", 0, minimum=-1),
        retry_delay_max_ms=_int(props, "errors.retry.delay.max.ms", 60_000, minimum=1),
    )

    # converters (validated by building them)
    from strom.connect.converters import make_converter

    for which in ("key", "value", "header"):
        cls_name = props.get(f"{which}.converter", "").strip()
        sub = {k[len(which) + 11 :]: v for k, v in props.items() if k.startswith(f"{which}.converter.")}
        if which == "header":
            if cls_name and cls_name.rsplit(".", 1)[-1] != "SimpleHeaderConverter":
                raise ConfigError(
                    f"header.converter {cls_name}: strom passes headers as bytes "
                    "(org.apache.kafka.connect.storage.SimpleHeaderConverter) only"
                )
            continue
        if not cls_name and sub:
            cls_name = JSON_CONVERTER
        conv = (cls_name or JSON_CONVERTER, sub)
        try:
            with plugin_keys(f"{which}.converter."):
                make_converter(conv[0], conv[1], is_key=which == "key")
        except ConfigError as e:
            raise ConfigError(f"{which}.converter: {e}") from None
        if which == "key":
            cfg.key_converter = conv
        else:
            cfg.value_converter = conv

    # transforms and predicates
    t_aliases = _aliases(props, "transforms")
    p_aliases = _aliases(props, "predicates")
    for alias in t_aliases:
        t_cls = props.get(f"transforms.{alias}.type", "").strip()
        if not t_cls:
            raise ConfigError(
                f'Missing required configuration "transforms.{alias}.type" which has no default value.'
            )
        sub = {
            k[len(alias) + 12 :]: v
            for k, v in props.items()
            if k.startswith(f"transforms.{alias}.") and k != f"transforms.{alias}.type"
        }
        cfg.transforms.append((alias, t_cls, sub))
    for alias in p_aliases:
        p_cls = props.get(f"predicates.{alias}.type", "").strip()
        if not p_cls:
            raise ConfigError(
                f'Missing required configuration "predicates.{alias}.type" which has no default value.'
            )
        sub = {
            k[len(alias) + 12 :]: v
            for k, v in props.items()
            if k.startswith(f"predicates.{alias}.") and k != f"predicates.{alias}.type"
        }
        cfg.predicates[alias] = (p_cls, sub)
    cfg.transform_chain()  # builds every transform and predicate: their config errors surface now

    # unknown keys
    for key in props:
        if key in COMMON_KEYS or key in spec.keys or key.startswith(PASS_PREFIXES):
            if spec.kind == "source" and key in SINK_ONLY:
                cfg.warnings.append(
                    f"The configuration '{key}' was supplied but isn't a known config "
                    f"({key} is a sink connector config; {cls} is a source connector)."
                )
            continue
        if key.startswith(("key.converter.", "value.converter.")):
            continue
        m = re.match(r"(transforms|predicates)\.([^.]+)\.", key)
        if m:
            if m.group(2) not in (t_aliases if m.group(1) == "transforms" else p_aliases):
                cfg.warnings.append(
                    f"The configuration '{key}' was supplied but isn't a known config "
                    f"({m.group(2)!r} is not listed in {m.group(1)})."
                )
            continue
        cfg.warnings.append(
            f"The configuration '{key}' was supplied but isn't a known config "
            f"(not a key of {cls.rsplit('.', 1)[-1]}: {', '.join(spec.keys)}; "
            "nor one of Connect's common keys)."
        )
    for key, default in spec.keys.items():
        if default is None and not props.get(key, "").strip():
            raise ConfigError(f'Missing required configuration "{key}" which has no default value.')
    if cls == HTTP_SINK:
        url = props["http.api.url"].strip()
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"Invalid value {url} for configuration http.api.url: not an http(s) URL")
        method = props.get("request.method", "POST").strip().upper()
        if method not in ("POST", "PUT", "PATCH", "DELETE"):
            raise ConfigError(
                f"Invalid value {method} for configuration request.method: String must be one of: "
                "POST, PUT, PATCH, DELETE"
            )
        if props.get("request.body.format", "string").strip().lower() not in ("string", "json"):
            raise ConfigError(
                "Invalid value for configuration request.body.format: String must be one of: string, json"
            )
        _int(props, "batch.max.size", 1, minimum=1)
        _int(props, "max.retries", 10, minimum=0)
        _int(props, "retry.backoff.ms", 3000, minimum=0)
        _int(props, "http.request.timeout.ms", 30000, minimum=1)
    if cls == DELTA_SINK:
        validate_delta_props(props)
    if cls in (JDBC_SOURCE, JDBC_SINK, PG_CDC):
        _validate_postgres(cls, props)
    if cls == FILE_SOURCE:
        _int(props, "batch.size", 2000, minimum=1)
        if "," in props["topic"]:
            raise ConfigError(
                "'topic' in FileStreamSourceConnector configuration requires definition of a single topic."
            )
    return cfg


def _one_of(props: dict[str, str], key: str, default: str, allowed: tuple[str, ...]) -> str:
    v = props.get(key, default).strip().lower()
    if v not in allowed:
        raise ConfigError(
            f"Invalid value {props.get(key)} for configuration {key}: String must be one of: "
            f"{', '.join(allowed)}"
        )
    return v


def _validate_postgres(cls: str, props: dict[str, str]) -> None:
    from strom.connect import postgres as pg

    if cls in (JDBC_SOURCE, JDBC_SINK):
        pg.parse_jdbc_url(props["connection.url"])
        _int(props, "connection.attempts", 3, minimum=1)
    if cls == JDBC_SOURCE:
        mode = props["mode"].strip().lower()
        if mode in ("bulk",) or props.get("query", ""):
            raise ConfigError(
                f"mode {mode}: strom's JDBC source supports incrementing, timestamp and "
                "timestamp+incrementing"
            )
        mode = _one_of(props, "mode", "", ("incrementing", "timestamp", "timestamp+incrementing"))
        props["mode"] = mode
        if "incrementing" in mode and not props.get("incrementing.column.name", "").strip():
            raise ConfigError(
                f"mode {mode} needs incrementing.column.name (the strictly increasing id column)"
            )
        if "timestamp" in mode and not props.get("timestamp.column.name", "").strip():
            raise ConfigError(f"mode {mode} needs timestamp.column.name (the last-modified timestamp column)")
        for key in (
            "table.whitelist",
            "table.include.list",
            "table.blacklist",
            "table.exclude.list",
            "schema.pattern",
        ):
            pg.check_regexes(key, pg.split_list(props.get(key, "")))
        if props.get("table.whitelist", "").strip() and props.get("table.include.list", "").strip():
            raise ConfigError("table.whitelist and table.include.list are the same setting: set one")
        _int(props, "poll.interval.ms", 5000, minimum=1)
        _int(props, "batch.max.rows", 100, minimum=1)
        _int(props, "timestamp.delay.interval.ms", 0, minimum=0)
        _one_of(
            props, "numeric.mapping", "none", ("none", "precision_only", "best_fit", "best_fit_eager_double")
        )
    if cls == JDBC_SINK:
        _one_of(props, "insert.mode", "insert", ("insert", "upsert", "update"))
        pk_mode = _one_of(props, "pk.mode", "none", ("none", "kafka", "record_key", "record_value"))
        if props.get("insert.mode", "insert").strip().lower() in ("upsert", "update") and pk_mode == "none":
            raise ConfigError(
                f"insert.mode={props['insert.mode']} needs a primary key: set pk.mode (record_key, "
                "record_value or kafka)"
            )
        if _bool(props, "delete.enabled", False) and pk_mode != "record_key":
            raise ConfigError("delete.enabled=true requires pk.mode=record_key")
        _bool(props, "auto.create", False)
        _bool(props, "auto.evolve", False)
        _int(props, "batch.size", 3000, minimum=1)
    if cls == PG_CDC:
        _int(props, "database.port", 5432, minimum=1)
        plugin = props.get("plugin.name", "pgoutput").strip().lower()
        if plugin != "pgoutput":
            raise ConfigError(
                f"Invalid value {plugin} for configuration plugin.name: strom decodes the pgoutput "
                "plugin only "
                "(decoderbufs needs a server extension)"
            )
        _one_of(props, "snapshot.mode", "initial", ("initial", "always", "when_needed", "no_data", "never"))
        _one_of(props, "publication.autocreate.mode", "all_tables", ("all_tables", "filtered", "disabled"))
        _one_of(props, "decimal.handling.mode", "precise", ("precise", "double", "string"))
        _one_of(props, "time.precision.mode", "adaptive", ("adaptive",))
        _bool(props, "tombstones.on.delete", True)
        _bool(props, "slot.drop.on.stop", False)
        _int(props, "poll.interval.ms", 500, minimum=1)
        slot = props.get("slot.name", "debezium")
        if not re.fullmatch(r"[a-z0-9_]{1,63}", slot):
            raise ConfigError(
                f"Invalid value {slot} for configuration slot.name: lower-case letters, digits and "
                "underscores only"
            )
        for key in ("table.include.list", "table.exclude.list", "schema.include.list"):
            pg.check_regexes(key, pg.split_list(props.get(key, "")))


def unescape_properties_value(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[i + 2 : i + 6]):
                out.append(chr(int(s[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(n, n))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Java ``Properties.load``: ``key=value``, ``key: value`` or ``key value``; ``#``/``!``
    comments; a trailing odd backslash continues the line; ``\\`` escapes (``\\t``, ``\\uXXXX``)."""
    out: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        i, key = 0, ""
        while i < len(line):
            c = line[i]
            if c == "\\" and i + 1 < len(line):
                key += c + line[i + 1]
                i += 2
                continue
            if c in "=: \t\f":
                break
            key += c
            i += 1
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        out[unescape_properties_value(key)] = unescape_properties_value(rest)
    return out


def load_config(path: str | Path) -> ConnectorConfig:
    """A connector config file: ``.json`` (``{"name", "config"}`` or flat) or ``.properties``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read connector config {p}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"connector config {p} is not UTF-8 text: {e.reason}") from None
    if p.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(
                f"connector config {p}: bad JSON at line {e.lineno} column {e.colno}: {e.msg}"
            ) from None
        return parse_config(doc)
    return parse_config(parse_properties(text))
