"""``mm2.properties``: MirrorMaker 2's dedicated-mode configuration.

``clusters = A, B`` names the clusters; ``A.bootstrap.servers`` (and any other ``A.<client key>``)
configure clients of ``A``; ``A->B.enabled = true`` enables the flow from ``A`` to ``B``; a key
``A->B.<name>`` overrides ``<name>`` for that flow only; a top-level key applies to every flow.
Names and defaults are Kafka's (MirrorSourceConfig, MirrorCheckpointConfig, MirrorHeartbeatConfig).
As Kafka's AbstractConfig does, an unknown key is accepted and logged ("supplied but isn't a known
config"); a known key with a bad value is an error (:class:`MirrorConfigError`, one line).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from strom.mirror.policy import GroupFilter, ReplicationPolicy, TopicFilter, parse_list

log = logging.getLogger("strom.mirror")

DEFAULT_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"

# key -> default (Kafka's), as strings the way a properties file holds them
DEFAULTS: dict[str, str] = {
    "topics": ".*",
    "topics.exclude": r".*[\-\.]internal, .*\.replica, __.*",
    "groups": ".*",
    "groups.exclude": r"console-consumer-.*, connect-.*, __.*",
    "replication.policy.class": DEFAULT_POLICY,
    "replication.policy.separator": ".",
    "replication.policy.internal.topic.separator.enabled": "true",
    "replication.factor": "2",
    "offset-syncs.topic.replication.factor": "3",
    "offset-syncs.topic.location": "source",
    "checkpoints.topic.replication.factor": "3",
    "heartbeats.topic.replication.factor": "3",
    "offset.storage.replication.factor": "3",
    "offset.storage.partitions": "25",
    "offset.lag.max": "100",
    "refresh.topics.enabled": "true",
    "refresh.topics.interval.seconds": "600",
    "refresh.groups.enabled": "true",
    "refresh.groups.interval.seconds": "600",
    "sync.topic.configs.enabled": "true",
    "sync.topic.configs.interval.seconds": "600",
    "sync.topic.acls.enabled": "true",
    "sync.topic.acls.interval.seconds": "600",
    "config.properties.exclude": (
        r"follower\.replication\.throttled\.replicas, leader\.replication\.throttled\.replicas, "
        r"message\.timestamp\.difference\.max\.ms, message\.timestamp\.type, "
        r"unclean\.leader\.election\.enable, min\.insync\.replicas"
    ),
    "emit.heartbeats.enabled": "true",
    "emit.heartbeats.interval.seconds": "1",
    "emit.checkpoints.enabled": "true",
    "emit.checkpoints.interval.seconds": "60",
    "emit.offset-syncs.enabled": "true",
    "sync.group.offsets.enabled": "false",
    "sync.group.offsets.interval.seconds": "60",
    "consumer.poll.timeout.ms": "1000",
    "tasks.max": "1",
    "enabled": "false",
    "exactly.once.source.support": "enabled",
}
# accepted, not used by strom (Connect worker settings of dedicated mode and the like)
ACCEPTED = {
    "clusters",
    "dedicated.mode.enable.internal.rest",
    "key.converter",
    "value.converter",
    "header.converter",
    "config.storage.replication.factor",
    "status.storage.replication.factor",
    "offset.flush.interval.ms",
    "topics.blacklist",
    "groups.blacklist",
    "config.properties.blacklist",
    "topic.filter.class",
    "group.filter.class",
    "config.property.filter.class",
    "emit.checkpoints.enabled",
    "admin.timeout.ms",
    "use.incremental.alter.configs",
    "replication.policy.class",
    "source.cluster.alias",
    "target.cluster.alias",
}
ALIASES = {
    "topics.blacklist": "topics.exclude",
    "groups.blacklist": "groups.exclude",
    "config.properties.blacklist": "config.properties.exclude",
}
# client settings handed from "<alias>.<key>" to strom's and librdkafka's clients
CLIENT_KEY = re.compile(r"(bootstrap\.servers|security\.protocol|sasl\..*|ssl\..*|client\.id)")


class MirrorConfigError(ValueError):
    """A bad mm2.properties (one line, shown as is)."""


@dataclass(frozen=True)
class ClusterConfig:
    alias: str
    client: dict[str, str]  # librdkafka-style keys (bootstrap.servers, security.protocol, sasl.*)

    @property
    def bootstrap(self) -> str:
        return self.client["bootstrap.servers"]


@dataclass
class FlowConfig:
    source: ClusterConfig
    target: ClusterConfig
    props: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.source.alias}->{self.target.alias}"

    def get(self, key: str) -> str:
        if key in self.props:
            return self.props[key]
        for old, new in ALIASES.items():
            if new == key and old in self.props:
                return self.props[old]
        return DEFAULTS[key]

    def get_bool(self, key: str) -> bool:
        v = self.get(key).strip().lower()
        if v not in ("true", "false"):
            raise MirrorConfigError(
                f"Invalid value {self.get(key)} for configuration {key}: "
                "Expected value to be either true or false"
            )
        return v == "true"

    def get_int(self, key: str, minimum: int | None = None) -> int:
        raw = self.get(key).strip()
        try:
            v = int(raw)
        except ValueError:
            raise MirrorConfigError(
                f"Invalid value {raw} for configuration {key}: Not a number of type INT"
            ) from None
        if minimum is not None and v < minimum:
            raise MirrorConfigError(
                f"Invalid value {v} for configuration {key}: Value must be at least {minimum}"
            )
        return v

    def interval(self, key: str, enabled_key: str | None = None) -> float | None:
        """Seconds between runs of a periodic task; None when disabled (or negative, as Kafka)."""
        if enabled_key is not None and not self.get_bool(enabled_key):
            return None
        v = self.get_int(key)
        return None if v < 0 else float(v)

    def policy(self) -> ReplicationPolicy:
        cls = self.get("replication.policy.class").strip()
        short = cls.rsplit(".", 1)[-1]
        if short not in ("DefaultReplicationPolicy", "IdentityReplicationPolicy"):
            raise MirrorConfigError(
                f"Invalid value {cls} for configuration replication.policy.class: strom supports "
                f"{DEFAULT_POLICY} and {IDENTITY_POLICY}"
            )
        sep = self.get("replication.policy.separator")
        if not sep:
            raise MirrorConfigError("replication.policy.separator must not be empty")
        return ReplicationPolicy(
            separator=sep,
            internal_separator_enabled=self.get_bool("replication.policy.internal.topic.separator.enabled"),
            identity=short == "IdentityReplicationPolicy",
            source_cluster_alias=self.props.get("source.cluster.alias"),
        )

    def topic_filter(self) -> TopicFilter:
        try:
            return TopicFilter(
                tuple(parse_list(self.get("topics"))),
                tuple(parse_list(self.get("topics.exclude"))),
                self.policy(),
                self.target.alias,
            )
        except re.error as e:
            raise MirrorConfigError(
                f"{self.name}: bad regular expression in topics/topics.exclude: {e}"
            ) from None

    def _patterns(self, key: str) -> tuple[str, ...]:
        """The regular expressions of a list config, each checked to compile."""
        patterns = tuple(parse_list(self.get(key)))
        for rx in patterns:
            try:
                re.compile(rx)
            except re.error as e:
                raise MirrorConfigError(f"{self.name}: bad regular expression {rx!r} in {key}: {e}") from None
        return patterns

    def group_filter(self) -> GroupFilter:
        return GroupFilter(self._patterns("groups"), self._patterns("groups.exclude"))

    def config_excluded(self, name: str) -> bool:
        return any(re.fullmatch(rx, name) for rx in self._patterns("config.properties.exclude"))

    def offset_syncs_on_target(self) -> bool:
        loc = self.get("offset-syncs.topic.location").strip().lower()
        if loc not in ("source", "target"):
            raise MirrorConfigError(
                f"Invalid value {loc} for configuration offset-syncs.topic.location: "
                "String must be one of: source, target"
            )
        return loc == "target"

    def offset_syncs_topic(self) -> str:
        other = self.source.alias if self.offset_syncs_on_target() else self.target.alias
        return self.policy().offset_syncs_topic(other)

    def validate(self) -> None:
        self.policy()
        self.topic_filter()
        self.group_filter()
        self._patterns("config.properties.exclude")
        self.offset_syncs_on_target()
        for k in (
            "replication.factor",
            "offset-syncs.topic.replication.factor",
            "checkpoints.topic.replication.factor",
            "heartbeats.topic.replication.factor",
            "offset.storage.replication.factor",
        ):
            v = self.get_int(k)
            if v == 0 or v < -1:
                raise MirrorConfigError(f"Invalid value {v} for configuration {k}: must be -1 or at least 1")
        self.get_int("offset.storage.partitions", 1)
        self.get_int("offset.lag.max", 0)
        for k in (
            "refresh.topics",
            "refresh.groups",
            "sync.topic.configs",
            "emit.heartbeats",
            "emit.checkpoints",
            "sync.group.offsets",
        ):
            self.interval(f"{k}.interval.seconds", f"{k}.enabled")
        self.get_bool("emit.offset-syncs.enabled")
        self.get_bool("sync.topic.acls.enabled")


@dataclass
class MirrorMakerConfig:
    clusters: dict[str, ClusterConfig]
    flows: list[FlowConfig]
    unknown: list[str]


_FLOW_KEY = re.compile(r"^([^.>\s]+)->([^.\s]+)\.(.+)$")


def parse_mm2(props: dict[str, str], only_targets: list[str] | None = None) -> MirrorMakerConfig:
    """The clusters and enabled flows of an mm2.properties (``only_targets``: MM2's ``--clusters``)."""
    if "clusters" not in props or not parse_list(props["clusters"]):
        raise MirrorConfigError('Missing required configuration "clusters" which has no default value.')
    aliases = parse_list(props["clusters"])
    for a in aliases:
        if not a or "->" in a or "." in a:
            raise MirrorConfigError(f"bad cluster alias {a!r} in clusters")
    if len(set(aliases)) != len(aliases):
        raise MirrorConfigError(f"clusters lists an alias twice: {props['clusters']}")
    cluster_props: dict[str, dict[str, str]] = {a: {} for a in aliases}
    top: dict[str, str] = {}
    flow_props: dict[tuple[str, str], dict[str, str]] = {}
    for key, value in props.items():
        m = _FLOW_KEY.match(key)
        if m and m.group(1) in cluster_props and m.group(2) in cluster_props:
            flow_props.setdefault((m.group(1), m.group(2)), {})[m.group(3)] = value
            continue
        alias = next((a for a in aliases if key.startswith(a + ".")), None)
        if alias is not None:
            cluster_props[alias][key[len(alias) + 1 :]] = value
            continue
        top[key] = value
    unknown = sorted(
        k for k in top if k not in DEFAULTS and k not in ACCEPTED and not CLIENT_KEY.fullmatch(k)
    )
    for k in unknown:
        log.warning("The configuration '%s' was supplied but isn't a known config.", k)
    clusters: dict[str, ClusterConfig] = {}
    for a in aliases:
        client = {k: v for k, v in top.items() if CLIENT_KEY.fullmatch(k)}
        client.update({k: v for k, v in cluster_props[a].items() if CLIENT_KEY.fullmatch(k)})
        clusters[a] = ClusterConfig(a, client)
    flows = []
    for (s, t), fp in sorted(flow_props.items()):
        merged = {k: v for k, v in top.items() if not CLIENT_KEY.fullmatch(k)}
        merged.update(fp)
        flow = FlowConfig(clusters[s], clusters[t], merged)
        if not flow.get_bool("enabled"):
            continue
        if s == t:
            raise MirrorConfigError(f"flow {s}->{t} replicates a cluster to itself")
        if only_targets and t not in only_targets:
            continue
        for c in (flow.source, flow.target):
            if not c.client.get("bootstrap.servers", "").strip():
                raise MirrorConfigError(
                    f'Missing required configuration "{c.alias}.bootstrap.servers" for flow {flow.name}'
                )
        flow.validate()
        flows.append(flow)
    if only_targets:
        missing = [t for t in only_targets if t not in clusters]
        if missing:
            raise MirrorConfigError(f"--clusters names unknown cluster(s): {', '.join(missing)}")
    return MirrorMakerConfig(clusters, flows, unknown)


def load_mm2(path: str | Path, only_targets: list[str] | None = None) -> MirrorMakerConfig:
    from strom.connect.config import parse_properties

    try:
        text = Path(path).read_text()
    except OSError as e:
        raise MirrorConfigError(f"cannot read {path}: {e.strerror or e}") from None
    return parse_mm2(parse_properties(text), only_targets)
