"""MirrorMaker 2's replication policies and topic/group filters.

``DefaultReplicationPolicy`` names a remote topic ``<source alias><separator><topic>`` (``A.orders``);
``IdentityReplicationPolicy`` keeps the name (only ``heartbeats`` topics are still prefixed, as in
Kafka, so heartbeats keep tracing the path they took). A topic is a *cycle* for target ``B`` when
walking its chain of source aliases (``C.B.orders`` -> ``C``, ``B``) meets ``B``: replicating it
would send ``B``'s data back to ``B``. Identity topics carry no alias, so identity cannot detect
cycles (Kafka says the same: keep the topology acyclic).

The Spark source subscribes with one Python regular expression (``subscribePattern``, matched with
``fullmatch``); :func:`subscribe_pattern` builds it from the include/exclude lists, the internal
topic rules and the cycle rule, so topics created later are picked up without restarting the
query. :meth:`TopicFilter.should_replicate` is the same decision as a function; a unit test checks
both agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEARTBEATS_TOPIC = "heartbeats"


def java_split(text: str, sep: str) -> list[str]:
    """``String.split(Pattern.quote(sep))``: trailing empty strings removed."""
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts or [""]


@dataclass(frozen=True)
class ReplicationPolicy:
    """``DefaultReplicationPolicy`` (``identity=False``) or ``IdentityReplicationPolicy``."""

    separator: str = "."
    internal_separator_enabled: bool = True
    identity: bool = False
    source_cluster_alias: str | None = None  # identity only: what topicSource answers

    @property
    def class_name(self) -> str:
        name = "IdentityReplicationPolicy" if self.identity else "DefaultReplicationPolicy"
        return f"org.apache.kafka.connect.mirror.{name}"

    def _internal_sep(self) -> str:
        return self.separator if self.internal_separator_enabled else "."

    def _looks_like_heartbeat(self, topic: str) -> bool:
        return topic.endswith(HEARTBEATS_TOPIC)

    # -- naming

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        if self.identity and not self._looks_like_heartbeat(topic):
            return topic
        return source_alias + self.separator + topic

    def topic_source(self, topic: str) -> str | None:
        if self.identity and not self._looks_like_heartbeat(topic):
            return self.source_cluster_alias
        parts = java_split(topic, self.separator)
        return parts[0] if len(parts) >= 2 else None

    def upstream_topic(self, topic: str) -> str | None:
        if self.identity and not self._looks_like_heartbeat(topic):
            return topic
        source = self.topic_source(topic)
        return None if source is None else topic[len(source) + len(self.separator) :]

    def original_topic(self, topic: str) -> str:
        seen = set()
        while topic not in seen:
            seen.add(topic)
            up = self.upstream_topic(topic)
            if up is None or up == topic:
                return topic
            topic = up
        return topic

    def heartbeats_topic(self) -> str:
        return HEARTBEATS_TOPIC

    def offset_syncs_topic(self, alias: str) -> str:
        s = self._internal_sep()
        return f"mm2-offset-syncs{s}{alias}{s}internal"

    def checkpoints_topic(self, alias: str) -> str:
        s = self._internal_sep()
        return f"{alias}{s}checkpoints{s}internal"

    # -- classification

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self.original_topic(topic) == HEARTBEATS_TOPIC

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(self._internal_sep() + "internal")

    def is_internal_topic(self, topic: str) -> bool:
        return (
            self.is_mm2_internal_topic(topic)
            or topic.startswith("__")
            or topic.startswith(".")
            or topic.endswith("-internal")
            or topic.endswith(".internal")
        )

    def is_cycle(self, topic: str, target_alias: str) -> bool:
        """MirrorSourceConnector.isCycle: some hop of the topic's source chain is the target."""
        seen = set()
        while topic not in seen:
            seen.add(topic)
            source = self.topic_source(topic)
            if source is None:
                return False
            if source == target_alias:
                return True
            up = self.upstream_topic(topic)
            if up is None or up == topic:
                return False
            topic = up
        return False

    def count_hops(self, topic: str, source_alias: str) -> int:
        """MirrorClient.countHopsForTopic: replication hops from ``source_alias`` to here, -1 if
        the topic did not come from it."""
        hops, seen = 0, set()
        while topic not in seen:
            seen.add(topic)
            hops += 1
            source = self.topic_source(topic)
            if source is None:
                return -1
            if source == source_alias:
                return hops
            up = self.upstream_topic(topic)
            if up is None or up == topic:
                return -1
            topic = up
        return -1

    def upstream_clusters(self, topics: list[str]) -> dict[str, int]:
        """MirrorClient.upstreamClusters + replicationHops: every cluster whose heartbeats reach
        this one (found in the names of its heartbeats topics), with the fewest hops from it."""
        out: dict[str, int] = {}
        for t in topics:
            if not self.is_heartbeats_topic(t):
                continue
            walk, seen = t, set()
            while walk not in seen:
                seen.add(walk)
                source = self.topic_source(walk)
                if source is None:
                    break
                hops = self.count_hops(t, source)
                if hops > 0:
                    out[source] = min(out.get(source, hops), hops)
                up = self.upstream_topic(walk)
                if up is None or up == walk:
                    break
                walk = up
        return out

    # -- regular expressions for the same rules (the Spark source's subscribePattern)

    def _remote_chain_rx(self) -> str:
        """Zero or more leading ``<alias><sep>`` hops (each followed by a remote-looking rest)."""
        sep = re.escape(self.separator)
        first = re.escape(self.separator[0]) if self.separator else ""
        seg = f"(?:(?!{sep}).)*" if len(self.separator) > 1 else f"[^{first}]*"
        return f"(?:{seg}{sep})"

    def cycle_rx(self, target_alias: str) -> str:
        """A regex (for ``fullmatch``) of the topics :meth:`is_cycle` reports for ``target_alias``."""
        sep = re.escape(self.separator)
        # after "<target><sep>" something that is not only separators must follow (Java's split
        # drops trailing empty strings, so "B." or "B.." is not a remote topic)
        rest = f"(?!(?:{sep})*\\Z).+"
        chain = self._remote_chain_rx()
        default = f"{chain}*?{re.escape(target_alias)}{sep}{rest}"
        if not self.identity:
            return f"(?s:{default})"
        hb = re.escape(HEARTBEATS_TOPIC)
        parts = [f"(?=.*{hb}\\Z){default}"]
        if self.source_cluster_alias == target_alias:
            parts.append(f"(?!.*{hb}\\Z).*")
        return "(?s:" + "|".join(parts) + ")"

    def heartbeats_rx(self) -> str:
        if self.identity:
            # originalTopic of a non-heartbeat-looking topic is itself; heartbeat-looking ones walk
            # the default chain
            return f"(?s:{self._remote_chain_rx()}*{re.escape(HEARTBEATS_TOPIC)})"
        return f"(?s:{self._remote_chain_rx()}*{re.escape(HEARTBEATS_TOPIC)})"

    def internal_rx(self) -> str:
        s = re.escape(self._internal_sep())
        return f"(?s:.*{s}internal|__.*|\\..*|.*-internal|.*\\.internal)"


def parse_list(value: str) -> list[str]:
    """Kafka's LIST type: comma separated, items trimmed, empty value = empty list."""
    value = value.strip()
    if not value:
        return []
    return [item.strip() for item in value.split(",")]


def _alternation(patterns: tuple[str, ...]) -> str | None:
    """One regex matching what any of ``patterns`` matches; None for none. The patterns are
    Java regexes read by Python's ``re`` as they are (the common syntax is shared; what ``re``
    does not know is refused when the config is validated)."""
    return "|".join(f"(?:{r})" for r in patterns) if patterns else None


@dataclass(frozen=True)
class TopicFilter:
    """DefaultTopicFilter (``topics``/``topics.exclude``) plus MirrorSourceConnector's rules."""

    includes: tuple[str, ...]
    excludes: tuple[str, ...]
    policy: ReplicationPolicy
    target_alias: str

    def __post_init__(self) -> None:
        for rx in self.includes + self.excludes:
            re.compile(rx)

    def _include_rx(self) -> str | None:
        return _alternation(self.includes)

    def _exclude_rx(self) -> str | None:
        return _alternation(self.excludes)

    def filter_topic(self, topic: str) -> bool:
        inc, exc = self._include_rx(), self._exclude_rx()
        included = inc is not None and re.fullmatch(inc, topic) is not None
        excluded = exc is not None and re.fullmatch(exc, topic) is not None
        return included and not excluded

    def should_replicate(self, topic: str) -> bool:
        p = self.policy
        return (
            (self.filter_topic(topic) or p.is_heartbeats_topic(topic))
            and not p.is_internal_topic(topic)
            and not p.is_cycle(topic, self.target_alias)
        )

    def subscribe_pattern(self) -> str:
        """One regex (``fullmatch``) equivalent to :meth:`should_replicate`."""
        p = self.policy
        inc, exc = self._include_rx(), self._exclude_rx()
        wanted = p.heartbeats_rx() if inc is None else f"(?:{inc})"
        if exc is not None and inc is not None:
            wanted = f"(?:(?!(?:{exc})\\Z){wanted})"
        if inc is not None:
            wanted = f"(?:{wanted}|{p.heartbeats_rx()})"
        return f"(?!(?:{p.internal_rx()})\\Z)(?!(?:{p.cycle_rx(self.target_alias)})\\Z){wanted}"


@dataclass(frozen=True)
class GroupFilter:
    """DefaultGroupFilter: ``groups`` include and ``groups.exclude`` regex lists."""

    includes: tuple[str, ...]
    excludes: tuple[str, ...]

    def should_replicate(self, group: str) -> bool:
        inc = any(re.fullmatch(r, group) for r in self.includes)
        exc = any(re.fullmatch(r, group) for r in self.excludes)
        return inc and not exc
