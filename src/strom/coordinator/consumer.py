"""The KIP-848 consumer-group protocol (ConsumerGroupHeartbeat) as a state machine.

Theory of operation (Kafka's ``ConsumerGroup`` / ``CurrentAssignmentBuilder``):

* The group has a **group epoch**, bumped whenever the inputs of the assignment change: a member
  joins or leaves, a subscription or assignor changes, or the partition count of a subscribed
  topic changes. The **target assignment** is recomputed by the server-side assignor (``uniform``
  by default, or ``range``) when the group epoch is ahead of the **assignment epoch**.
* Each member converges to its share of the target assignment through heartbeats, never owning a
  partition another member still owns:

  - partitions it holds that are no longer in its target are **revoked first**: the member stays
    at its old epoch (state ``unrevoked_partitions``) and is told its reduced assignment; once a
    heartbeat reports it no longer owns them, they are released and the member is reconciled
    again, towards the target as it is *then* (it may have moved on while the member revoked);
  - then it moves to the target epoch and receives the new partitions that are free; partitions
    still held by others are added on later heartbeats (state ``unreleased_partitions``).

* A member that misses its session timeout, or does not revoke within its rebalance timeout, is
  removed (fenced); its partitions are released.
* Epochs in requests: 0 joins, -1 leaves, -2 leaves temporarily (static member, keeps its
  assignment for a rejoin with the same instance id), >0 heartbeats. A heartbeat with an epoch
  other than the member's gets FENCED_MEMBER_EPOCH (the previous epoch is tolerated when the
  member's owned partitions show it simply missed a response).

Topics are identified by name internally; the resolver passed to :meth:`ConsumerGroup.heartbeat`
maps names to (topic id, partition count).

Regular-expression subscriptions (KIP-848 ``SubscribedTopicRegex``, Kafka's
``GroupMetadataManager.maybeUpdateRegularExpressions`` / ``refreshRegularExpressions``): a member
subscribes to its topic names plus the topics its regex matches. The group keeps one resolution
per regex its members use (the topics it matched, the topic catalog version and the time it was
resolved) and assigns from those. Kafka compiles with RE2/J and matches whole topic names; we use
Python's ``re.fullmatch`` and refuse, with INVALID_REGULAR_EXPRESSION, what does not compile or
what RE2 has no equivalent for (look-around, back-references, atomic groups, possessive
quantifiers). Internal topics never match. Kafka resolves asynchronously after the heartbeat that
needs it; we resolve synchronously in that heartbeat (the topic list is local), which gives the
same records. A regex new to the group is resolved at once; all of them are resolved again when a
topic was created or deleted since their last resolution, or when the last resolution is older
than ``group.consumer.regex.refresh.interval.ms``, but never twice within Kafka's
``REGEX_BATCH_REFRESH_MIN_INTERVAL_MS`` (10 s). A changed resolution bumps the group epoch. A
regex no member uses any more is dropped (a tombstone). Deleted topics leave the assignment at
once anyway: the subscribed topic metadata only holds topics that exist.

Persistence (Kafka's new group coordinator records, types 3-8 of ``__consumer_offsets``): the
persisted state of a group is :meth:`ConsumerGroup.view` -- group epoch, subscribed topic metadata,
each member's subscription, the target assignment (epoch and per member) and each member's current
assignment (epochs, state, assigned and pending partitions). The runtime runs a step on a
:meth:`~ConsumerGroup.clone`, turns the difference of the two views into records with
:func:`consumer_group_records` and, once they are appended, applies them to the live group with
:meth:`ConsumerGroup.replay` -- the same method that rebuilds groups when ``__consumer_offsets`` is
loaded. What is not persisted (as in Kafka) are the timers: session and revocation deadlines
restart from load time, and the last assignment sent is forgotten (the next heartbeat response
simply repeats the assignment). The owner of each partition and the static-member index are
derived from the members' current assignments and instance ids.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from re import _constants as _sre_constants  # type: ignore[attr-defined]
from re import _parser as _sre_parser  # type: ignore[attr-defined]
from typing import Any

from ..clock import Clock
from ..config_schema import broker_default
from ..protocol.errors import ErrorCode
from .records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_PARTITION_METADATA,
    CONSUMER_GROUP_REGULAR_EXPRESSION,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    TopicPartitions,
    encode_consumer_group_key,
    encode_consumer_group_regex_key,
    encode_consumer_group_value,
)

TopicResolver = Callable[[str], "tuple[uuid.UUID, int] | None"]
Assignment = dict[str, set[int]]  # topic name -> partitions

ASSIGNORS = ("uniform", "range")

STABLE = "stable"
UNREVOKED = "unrevoked_partitions"
UNRELEASED = "unreleased_partitions"
# Kafka's MemberState byte values in ConsumerGroupCurrentMemberAssignmentValue
STATE_CODES = {STABLE: 0, UNREVOKED: 1, UNRELEASED: 2}
STATE_NAMES = {v: k for k, v in STATE_CODES.items()}


@dataclass(frozen=True)
class ConsumerConfig:
    session_timeout_ms: int = broker_default("group.consumer.session.timeout.ms")
    heartbeat_interval_ms: int = broker_default("group.consumer.heartbeat.interval.ms")
    assignors: tuple[str, ...] = ASSIGNORS
    max_size: int = 2147483647  # Kafka's group.consumer.max.size (not a strom config)
    regex_refresh_interval_ms: int = broker_default("group.consumer.regex.refresh.interval.ms")
    regex_min_refresh_interval_ms: int = 10000  # Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS


@dataclass(frozen=True)
class TopicCatalog:
    """What regular expressions are resolved against: the names of the (non-internal) topics and
    a version that moves whenever a topic is created or deleted."""

    version: int
    names: Callable[[], Iterable[str]]


@dataclass(frozen=True)
class ResolvedRegex:
    """Kafka's ``ResolvedRegularExpression``: the topics a regex matched, the catalog version and
    the wall-clock time (ms) of the resolution."""

    topics: frozenset[str]
    version: int
    timestamp: int


# RE2 (Kafka's regex engine) has none of these; Python's re would accept them.
_NOT_RE2 = {
    _sre_constants.ASSERT: "look-around",
    _sre_constants.ASSERT_NOT: "look-around",
    _sre_constants.GROUPREF: "back-reference",
    _sre_constants.GROUPREF_EXISTS: "conditional group",
    _sre_constants.ATOMIC_GROUP: "atomic group",
    _sre_constants.POSSESSIVE_REPEAT: "possessive quantifier",
}


def _re2_violation(tree: Any) -> str | None:
    """The first construct of a parsed pattern (``re._parser``) that RE2 lacks, if any."""
    stack: list[Any] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, tuple) and len(node) == 2 and node[0] in _NOT_RE2:
            return _NOT_RE2[node[0]]
        if isinstance(node, (list, tuple)) or type(node).__name__ == "SubPattern":
            stack.extend(node)
    return None


@functools.lru_cache(maxsize=256)
def compile_topic_regex(regex: str) -> re.Pattern[str]:
    """Compile a ``SubscribedTopicRegex``; raises ValueError (the description for the
    INVALID_REGULAR_EXPRESSION message) for what RE2/J would refuse or Python cannot compile."""
    try:
        pattern = re.compile(regex)
        what = _re2_violation(_sre_parser.parse(regex))
    except re.error as e:
        raise ValueError(str(e)) from None
    if what is not None:
        raise ValueError(f"{what} is not supported (RE2 syntax)")
    return pattern


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    server_assignor: str | None
    rebalance_timeout_ms: int
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: str = STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    session_deadline: int = 0
    revocation_deadline: int | None = None
    last_sent: Assignment | None = None


@dataclass(frozen=True)
class CurrentAssignmentView:
    member_epoch: int
    previous_member_epoch: int
    state: str
    assigned: frozenset[tuple[str, int]]
    pending_revocation: frozenset[tuple[str, int]]


@dataclass(frozen=True)
class GroupView:
    """What ``__consumer_offsets`` holds about a consumer group (see the module doc)."""

    group_epoch: int
    topics: tuple[tuple[str, uuid.UUID, int], ...]  # (name, id, partition count), sorted
    members: dict[str, ConsumerGroupMemberMetadataValue]
    assignment_epoch: int
    target: dict[str, frozenset[tuple[str, int]]]
    current: dict[str, CurrentAssignmentView]
    regexes: dict[str, ResolvedRegex] = field(default_factory=dict)


@dataclass
class HeartbeatResult:
    error: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: list[tuple[uuid.UUID, list[int]]] | None = None


def _flatten(a: Assignment) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in a.items() for p in ps}


def _unflatten(tps: set[tuple[str, int]]) -> Assignment:
    out: Assignment = {}
    for t, p in tps:
        out.setdefault(t, set()).add(p)
    return out


def uniform_assign(
    members: dict[str, list[str]], partitions: dict[str, int], previous: dict[str, Assignment]
) -> dict[str, Assignment]:
    """Balanced and sticky: keep previous ownership where the balance allows, spread the rest.
    ``members``: member id -> subscribed topics; ``partitions``: topic -> partition count."""
    owner: dict[tuple[str, int], str] = {}
    counts = dict.fromkeys(members, 0)
    all_tps = sorted((t, p) for t, n in partitions.items() for p in range(n))
    subscribed = {m: set(ts) for m, ts in members.items()}
    for m, a in sorted(previous.items()):
        if m not in members:
            continue
        for tp in sorted(_flatten(a)):
            if (
                tp[0] in subscribed[m]
                and tp[0] in partitions
                and tp[1] < partitions[tp[0]]
                and tp not in owner
            ):
                owner[tp] = m
                counts[m] += 1
    for tp in all_tps:
        if tp in owner:
            continue
        eligible = [m for m in members if tp[0] in subscribed[m]]
        if eligible:
            best = min(eligible, key=lambda m: (counts[m], m))
            owner[tp] = best
            counts[best] += 1
    # Move partitions from the most to the least loaded eligible member until balanced.
    moved = True
    while moved:
        moved = False
        for tp in all_tps:
            cur = owner.get(tp)
            if cur is None:
                continue
            eligible = [m for m in members if tp[0] in subscribed[m]]
            best = min(eligible, key=lambda m: (counts[m], m))
            if counts[best] < counts[cur] - 1:
                owner[tp] = best
                counts[cur] -= 1
                counts[best] += 1
                moved = True
    out: dict[str, Assignment] = {m: {} for m in members}
    for (t, p), m in owner.items():
        out[m].setdefault(t, set()).add(p)
    return out


def range_assign(
    members: dict[str, list[str]], partitions: dict[str, int], previous: dict[str, Assignment]
) -> dict[str, Assignment]:
    """Per topic, contiguous ranges of partitions over the subscribed members (sorted by id)."""
    out: dict[str, Assignment] = {m: {} for m in members}
    for t, n in sorted(partitions.items()):
        subs = sorted(m for m, ts in members.items() if t in ts)
        if not subs:
            continue
        per, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            size = per + (1 if i < extra else 0)
            if size:
                out[m][t] = set(range(start, start + size))
            start += size
    return out


class ConsumerGroup:
    group_type = "consumer"
    protocol_type = "consumer"

    def __init__(self, group_id: str, clock: Clock, config: ConsumerConfig | None = None) -> None:
        self.group_id = group_id
        self.clock = clock
        self.config = config or ConsumerConfig()
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}
        self.target: dict[str, Assignment] = {}
        self.owners: dict[tuple[str, int], str] = {}
        self.topic_meta: dict[str, tuple[uuid.UUID, int]] = {}
        self.regexes: dict[str, ResolvedRegex] = {}
        # the catalog version the regexes were last resolved at in this process (not persisted:
        # after a load they are resolved again once the minimum interval allows)
        self.regex_catalog_version: int | None = None
        self.dead = False
        self.state_timestamp = clock.time_ms()

    # ------------------------------------------------------------------ views

    @property
    def state(self) -> str:
        if self.dead:
            return "Dead"
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state != STABLE:
                return "Reconciling"
        return "Stable"

    def is_empty(self) -> bool:
        return not self.members

    def assignor_name(self) -> str:
        for m in self.members.values():
            if m.server_assignor:
                return m.server_assignor
        return self.config.assignors[0] if self.config.assignors else "uniform"

    def member_topics(self, m: ConsumerMember) -> list[str]:
        """The member's topic names plus what its regex resolved to."""
        if not m.subscribed_topic_regex:
            return m.subscribed_topic_names
        r = self.regexes.get(m.subscribed_topic_regex)
        if r is None:
            return m.subscribed_topic_names
        return sorted(set(m.subscribed_topic_names) | r.topics)

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in self.member_topics(m)}

    def subscribed_regexes(self) -> set[str]:
        return {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}

    def refresh_regexes(self, catalog: TopicCatalog | None) -> bool:
        """Resolve the group's regexes again if due (see the module doc); drop those no member
        uses. True if what a subscribed regex matches changed (the group epoch must move)."""
        subscribed = self.subscribed_regexes()
        for gone in set(self.regexes) - subscribed:
            del self.regexes[gone]
        if catalog is None or not subscribed:
            return False
        now = self.clock.time_ms()
        last = max((r.timestamp for r in self.regexes.values()), default=None)
        due = bool(subscribed - set(self.regexes))
        if not due and last is not None and now >= last + self.config.regex_min_refresh_interval_ms:
            due = (
                catalog.version != self.regex_catalog_version
                or now >= last + self.config.regex_refresh_interval_ms
            )
        if not due:
            return False
        names = [t for t in catalog.names()]
        changed = False
        for regex in sorted(subscribed):
            try:
                pattern = compile_topic_regex(regex)
            except ValueError:
                matched: frozenset[str] = frozenset()  # validated on the way in; replayed junk
            else:
                matched = frozenset(t for t in names if pattern.fullmatch(t))
            old = self.regexes.get(regex)
            if old is None or old.topics != matched:
                changed = True
            self.regexes[regex] = ResolvedRegex(matched, catalog.version, now)
        self.regex_catalog_version = catalog.version
        return changed

    # ------------------------------------------------------------------ membership

    def _release(self, m: ConsumerMember) -> None:
        for tp in _flatten(m.assigned) | _flatten(m.pending_revocation):
            if self.owners.get(tp) == m.member_id:
                del self.owners[tp]

    def remove_member(self, member_id: str) -> None:
        if not self._drop_member(member_id):
            return
        self.target.pop(member_id, None)
        self.group_epoch += 1
        self.state_timestamp = self.clock.time_ms()

    def _refresh_topics(self, resolve: TopicResolver) -> bool:
        meta: dict[str, tuple[uuid.UUID, int]] = {}
        for t in sorted(self.subscribed_topics()):
            r = resolve(t)
            if r is not None and r[1] > 0:
                meta[t] = r
        if meta != self.topic_meta:
            self.topic_meta = meta
            return True
        return False

    def _compute_target(self) -> None:
        subs = {mid: self.member_topics(m) for mid, m in self.members.items()}
        parts = {t: n for t, (_tid, n) in self.topic_meta.items()}
        fn = range_assign if self.assignor_name() == "range" else uniform_assign
        self.target = fn(subs, parts, self.target)
        self.assignment_epoch = self.group_epoch

    def _reconcile(self, m: ConsumerMember, owned: Assignment | None) -> None:
        """Kafka's ``CurrentAssignmentBuilder.build``: move ``m`` one step towards its target.

        * stable at the assignment epoch: nothing to do;
        * unrevoked_partitions: wait until ``owned`` (the member's report) no longer holds any
          partition pending revocation; then they are free and the member is reconciled towards
          the *latest* target -- which may have moved on while it was revoking (it may now get
          partitions, or have more to revoke);
        * otherwise (stable at an older epoch, unreleased_partitions): reconcile."""
        if m.state == UNREVOKED:
            pending = _flatten(m.pending_revocation)
            # (nothing pending: a static member that left at -2 while revoking, now rejoined)
            if pending and (owned is None or _flatten(owned) & pending):
                return
            for tp in _flatten(m.pending_revocation):
                if self.owners.get(tp) == m.member_id:
                    del self.owners[tp]
            m.pending_revocation = {}
            m.revocation_deadline = None
        elif m.state == STABLE and m.member_epoch == self.assignment_epoch:
            return
        self._next_assignment(m, owned)

    def _next_assignment(self, m: ConsumerMember, owned: Assignment | None) -> None:
        """Kafka's ``computeNextAssignment``. Partitions the member holds outside its target are
        revoked first: it keeps its epoch and waits in unrevoked_partitions (unless its report
        shows it already gave them up). Otherwise it moves to the assignment epoch with its kept
        partitions plus those of its target that nobody else holds; the rest (still held by a
        member that has to revoke them) leave it in unreleased_partitions, re-examined at each
        heartbeat until their owner revokes them, leaves or is fenced."""
        target = _flatten(self.target.get(m.member_id, {}))
        current = _flatten(m.assigned)
        kept = current & target
        revoking = current - target
        wanted = target - kept
        free = {tp for tp in wanted if self.owners.get(tp) in (None, m.member_id)}
        if revoking and (owned is None or _flatten(owned) & revoking):
            m.assigned = _unflatten(kept)
            m.pending_revocation = _unflatten(revoking)
            m.state = UNREVOKED
            m.revocation_deadline = self.clock.monotonic_ms() + m.rebalance_timeout_ms
            return
        for tp in revoking:  # already given up by the member (its report does not hold them)
            if self.owners.get(tp) == m.member_id:
                del self.owners[tp]
        for tp in free:
            self.owners[tp] = m.member_id
        m.assigned = _unflatten(kept | free)
        m.pending_revocation = {}
        m.revocation_deadline = None
        m.state = UNRELEASED if wanted - free else STABLE
        if m.member_epoch != self.assignment_epoch:
            m.previous_member_epoch = m.member_epoch
            m.member_epoch = self.assignment_epoch

    def heartbeat(
        self,
        *,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        subscribed_topic_names: list[str] | None,
        subscribed_topic_regex: str | None,
        server_assignor: str | None,
        owned: Assignment | None,
        client_id: str,
        client_host: str,
        resolve: TopicResolver,
        catalog: TopicCatalog | None = None,
    ) -> HeartbeatResult:
        """ConsumerGroupHeartbeat. Errors: UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH,
        UNSUPPORTED_ASSIGNOR, UNRELEASED_INSTANCE_ID, INVALID_REQUEST, GROUP_MAX_SIZE_REACHED,
        INVALID_REGULAR_EXPRESSION. ``subscribed_topic_regex``: None leaves it as it is, the empty
        string clears it (Kafka's convention); ``catalog``: the topics regexes resolve against."""
        result = self._heartbeat(
            member_id=member_id,
            member_epoch=member_epoch,
            instance_id=instance_id,
            rack_id=rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms,
            subscribed_topic_names=subscribed_topic_names,
            subscribed_topic_regex=subscribed_topic_regex,
            server_assignor=server_assignor,
            owned=owned,
            client_id=client_id,
            client_host=client_host,
            resolve=resolve,
            catalog=catalog,
        )
        self.refresh_regexes(None)  # forget regexes no member uses any more
        return result

    def _heartbeat(
        self,
        *,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        subscribed_topic_names: list[str] | None,
        subscribed_topic_regex: str | None,
        server_assignor: str | None,
        owned: Assignment | None,
        client_id: str,
        client_host: str,
        resolve: TopicResolver,
        catalog: TopicCatalog | None,
    ) -> HeartbeatResult:
        interval = self.config.heartbeat_interval_ms
        if subscribed_topic_regex and member_epoch >= 0:
            try:
                compile_topic_regex(subscribed_topic_regex)
            except ValueError as e:
                return HeartbeatResult(
                    ErrorCode.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{subscribed_topic_regex}` is not a valid regular "
                    f"expression: {e}.",
                )
        if server_assignor is not None and server_assignor not in self.config.assignors:
            return HeartbeatResult(ErrorCode.UNSUPPORTED_ASSIGNOR, f"unknown assignor {server_assignor}")
        if member_epoch in (-1, -2):
            m = self.members.get(member_id)
            if m is None:
                return HeartbeatResult(
                    ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id, member_epoch=member_epoch
                )
            if member_epoch == -2 and m.instance_id is not None:
                # Temporary leave: keep the assignment for a rejoin with the same instance id.
                # As in Kafka, what it was revoking is given up now: those partitions go to
                # their new owners without waiting for the rejoin or the session timeout.
                for tp in _flatten(m.pending_revocation):
                    if self.owners.get(tp) == m.member_id:
                        del self.owners[tp]
                m.pending_revocation = {}
                m.revocation_deadline = None
                m.previous_member_epoch = m.member_epoch
                m.member_epoch = -2
                m.session_deadline = self.clock.monotonic_ms() + self.config.session_timeout_ms
            else:
                self.remove_member(member_id)
            return HeartbeatResult(
                ErrorCode.NONE, member_id=member_id, member_epoch=member_epoch, heartbeat_interval_ms=interval
            )
        now = self.clock.monotonic_ms()
        bump = False
        if member_epoch == 0:
            if subscribed_topic_names is None and subscribed_topic_regex is None:
                return HeartbeatResult(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set on join")
            if not member_id:
                member_id = str(uuid.uuid4())
            inherited: ConsumerMember | None = None
            if instance_id is not None:
                old_id = self.static_members.get(instance_id)
                if old_id is not None and old_id != member_id:
                    old = self.members.get(old_id)
                    if old is not None and old.member_epoch != -2:
                        return HeartbeatResult(
                            ErrorCode.UNRELEASED_INSTANCE_ID,
                            f"instance id {instance_id} is in use by {old_id}",
                        )
                    inherited = old
            existing = self.members.get(member_id)
            if existing is not None:
                self.remove_member(member_id)
            if existing is None and inherited is None and len(self.members) >= self.config.max_size:
                return HeartbeatResult(ErrorCode.GROUP_MAX_SIZE_REACHED)
            m = ConsumerMember(
                member_id=member_id,
                instance_id=instance_id,
                rack_id=rack_id,
                client_id=client_id,
                client_host=client_host,
                subscribed_topic_names=list(subscribed_topic_names or []),
                subscribed_topic_regex=subscribed_topic_regex or None,
                server_assignor=server_assignor,
                rebalance_timeout_ms=rebalance_timeout_ms if rebalance_timeout_ms > 0 else 300000,
            )
            if inherited is not None:
                # static rejoin: the new member id takes over the old member's partitions and epoch
                self.members.pop(inherited.member_id, None)
                for tp in _flatten(inherited.assigned) | _flatten(inherited.pending_revocation):
                    if self.owners.get(tp) == inherited.member_id:
                        self.owners[tp] = member_id
                m.assigned = inherited.assigned
                m.pending_revocation = inherited.pending_revocation
                m.state = inherited.state
                m.member_epoch = inherited.previous_member_epoch if inherited.previous_member_epoch > 0 else 0
                if inherited.member_id in self.target:
                    self.target[member_id] = self.target.pop(inherited.member_id)
                subs_changed = (
                    inherited.subscribed_topic_names != m.subscribed_topic_names
                    or inherited.subscribed_topic_regex != m.subscribed_topic_regex
                )
                bump = subs_changed
            else:
                bump = True
            self.members[member_id] = m
            if instance_id is not None:
                self.static_members[instance_id] = member_id
            self.state_timestamp = self.clock.time_ms()
        else:
            found = self.members.get(member_id)
            if found is None:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is unknown")
            m = found
            if member_epoch != m.member_epoch:
                lost_response = (
                    member_epoch == m.previous_member_epoch
                    and owned is not None
                    and _flatten(owned) <= _flatten(m.assigned)
                )
                if not lost_response:
                    return HeartbeatResult(
                        ErrorCode.FENCED_MEMBER_EPOCH,
                        f"epoch {member_epoch} is not the member's epoch {m.member_epoch}",
                    )
            if (
                subscribed_topic_names is not None
                and list(subscribed_topic_names) != m.subscribed_topic_names
            ):
                m.subscribed_topic_names = list(subscribed_topic_names)
                bump = True
            new_regex = subscribed_topic_regex or None
            if subscribed_topic_regex is not None and new_regex != m.subscribed_topic_regex:
                m.subscribed_topic_regex = new_regex
                bump = True
            if server_assignor is not None and server_assignor != m.server_assignor:
                m.server_assignor = server_assignor
                bump = True
            if rebalance_timeout_ms > 0:
                m.rebalance_timeout_ms = rebalance_timeout_ms
            if rack_id is not None:
                m.rack_id = rack_id
        m.session_deadline = now + self.config.session_timeout_ms
        if self.refresh_regexes(catalog):
            bump = True
        if self._refresh_topics(resolve):
            bump = True
        if bump:
            self.group_epoch += 1
        if self.group_epoch > self.assignment_epoch:
            self._compute_target()
        self._reconcile(m, owned)
        send = member_epoch == 0 or m.last_sent != m.assigned or (owned is not None and owned != m.assigned)
        assignment: list[tuple[uuid.UUID, list[int]]] | None = None
        if send:
            m.last_sent = {t: set(ps) for t, ps in m.assigned.items()}
            assignment = [
                (self.topic_meta[t][0], sorted(ps))
                for t, ps in sorted(m.assigned.items())
                if t in self.topic_meta and ps
            ]
        return HeartbeatResult(ErrorCode.NONE, None, member_id, m.member_epoch, interval, assignment)

    # ------------------------------------------------------------------ offsets / timers / views

    def validate_offset_commit(
        self, member_id: str, member_epoch: int, partitions: Iterable[tuple[str, int]] = ()
    ) -> int:
        """OffsetCommit / TxnOffsetCommit fencing (errors: UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH;
        TxnOffsetCommit reports the latter as ILLEGAL_GENERATION, as Kafka does).

        The member's current epoch is accepted. So is its previous epoch for ``partitions`` it
        still owns (assigned or pending revocation) -- the case of a commit racing the heartbeat
        response that bumped its epoch (the intent of Kafka 4.3's per-partition assignment
        epochs, KIP-1251, without persisting them): a zombie's commit for a partition that has
        moved on is refused. A static member that left temporarily (epoch -2) commits nothing."""
        if member_epoch < 0 and not member_id and not self.members:
            return ErrorCode.NONE
        m = self.members.get(member_id)
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch == m.member_epoch and member_epoch >= 0:
            return ErrorCode.NONE
        if m.member_epoch >= 0 and member_epoch == m.previous_member_epoch >= 0:
            held = _flatten(m.assigned) | _flatten(m.pending_revocation)
            if all(tp in held for tp in partitions):
                return ErrorCode.NONE
        return ErrorCode.STALE_MEMBER_EPOCH

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> int:
        if member_id is None or member_epoch < 0:
            return ErrorCode.NONE
        m = self.members.get(member_id)
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != m.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def next_deadline(self) -> int | None:
        ds = [m.session_deadline for m in self.members.values()]
        ds += [m.revocation_deadline for m in self.members.values() if m.revocation_deadline is not None]
        return min(ds) if ds else None

    def tick(self) -> list[str]:
        """Fence members whose session or revocation deadline passed; returns their ids."""
        now = self.clock.monotonic_ms()
        gone = [
            mid
            for mid, m in self.members.items()
            if now >= m.session_deadline
            or (m.revocation_deadline is not None and now >= m.revocation_deadline)
        ]
        for mid in gone:
            self.remove_member(mid)
        self.refresh_regexes(None)
        return gone

    def describe_member(self, m: ConsumerMember) -> dict[str, object]:
        def conv(a: Assignment) -> dict[str, object]:
            return {
                "topic_partitions": [
                    {"topic_id": self.topic_meta[t][0], "topic_name": t, "partitions": sorted(ps)}
                    for t, ps in sorted(a.items())
                    if t in self.topic_meta and ps
                ]
            }

        return {
            "member_id": m.member_id,
            "instance_id": m.instance_id,
            "rack_id": m.rack_id,
            "member_epoch": m.member_epoch,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "subscribed_topic_names": list(m.subscribed_topic_names),
            "subscribed_topic_regex": m.subscribed_topic_regex,
            "assignment": conv(m.assigned),
            "target_assignment": conv(self.target.get(m.member_id, {})),
            "member_type": 1,
        }

    # ------------------------------------------------------------------ persistence

    def clone(self) -> ConsumerGroup:
        """An independent copy (same clock and config) for a step to run on."""
        g = ConsumerGroup(self.group_id, self.clock, self.config)
        g.group_epoch = self.group_epoch
        g.assignment_epoch = self.assignment_epoch
        g.members = {
            mid: replace(
                m,
                subscribed_topic_names=list(m.subscribed_topic_names),
                assigned=_copy(m.assigned),
                pending_revocation=_copy(m.pending_revocation),
                last_sent=None if m.last_sent is None else _copy(m.last_sent),
            )
            for mid, m in self.members.items()
        }
        g.static_members = dict(self.static_members)
        g.target = {mid: _copy(a) for mid, a in self.target.items()}
        g.owners = dict(self.owners)
        g.topic_meta = dict(self.topic_meta)
        g.regexes = dict(self.regexes)
        g.regex_catalog_version = self.regex_catalog_version
        g.dead = self.dead
        g.state_timestamp = self.state_timestamp
        return g

    def view(self) -> GroupView:
        return GroupView(
            group_epoch=self.group_epoch,
            topics=tuple(sorted((t, tid, n) for t, (tid, n) in self.topic_meta.items())),
            members={
                mid: ConsumerGroupMemberMetadataValue(
                    m.instance_id,
                    m.rack_id,
                    m.client_id,
                    m.client_host,
                    tuple(m.subscribed_topic_names),
                    m.subscribed_topic_regex,
                    m.rebalance_timeout_ms,
                    m.server_assignor,
                )
                for mid, m in self.members.items()
            },
            assignment_epoch=self.assignment_epoch,
            target={mid: frozenset(_flatten(a)) for mid, a in self.target.items()},
            current={
                mid: CurrentAssignmentView(
                    m.member_epoch,
                    m.previous_member_epoch,
                    m.state,
                    frozenset(_flatten(m.assigned)),
                    frozenset(_flatten(m.pending_revocation)),
                )
                for mid, m in self.members.items()
            },
            regexes=dict(self.regexes),
        )

    def _member_for_replay(self, member_id: str) -> ConsumerMember:
        m = self.members.get(member_id)
        if m is None:
            # Records of one member may replay in any order after compaction; the others fill in.
            m = self.members[member_id] = ConsumerMember(
                member_id=member_id,
                instance_id=None,
                rack_id=None,
                client_id="",
                client_host="",
                subscribed_topic_names=[],
                subscribed_topic_regex=None,
                server_assignor=None,
                rebalance_timeout_ms=300000,
                session_deadline=self.clock.monotonic_ms() + self.config.session_timeout_ms,
            )
        return m

    def _drop_member(self, member_id: str) -> bool:
        """Forget a member, its partitions and its static id; False if there was none."""
        m = self.members.pop(member_id, None)
        if m is None:
            return False
        self._release(m)
        if m.instance_id is not None and self.static_members.get(m.instance_id) == member_id:
            del self.static_members[m.instance_id]
        return True

    def replay(
        self,
        kind: int,
        member_id: str | None,
        value: ConsumerGroupValue | None,
        topic_name: Callable[[uuid.UUID], str],
        regex: str | None = None,
    ) -> None:
        """Apply one consumer-group record (``value`` None: tombstone) to this group; the runtime
        after an append and the load path both come here. A ConsumerGroupMetadata tombstone (the
        group is gone) is the coordinator's business. Timers of members that appear start now."""

        def names(tps: TopicPartitions) -> Assignment:
            out: Assignment = {}
            for tid, parts in tps:
                if parts:
                    out.setdefault(topic_name(tid), set()).update(parts)
            return out

        mid = member_id or ""
        if kind == CONSUMER_GROUP_REGULAR_EXPRESSION:
            if isinstance(value, ConsumerGroupRegularExpressionValue) and regex is not None:
                self.regexes[regex] = ResolvedRegex(frozenset(value.topics), value.version, value.timestamp)
            elif regex is not None:
                self.regexes.pop(regex, None)
        elif kind == CONSUMER_GROUP_METADATA:
            if isinstance(value, ConsumerGroupMetadataValue):
                self.group_epoch = value.epoch
        elif kind == CONSUMER_GROUP_PARTITION_METADATA:
            self.topic_meta = (
                {name: (tid, n) for tid, name, n in value.topics}
                if isinstance(value, ConsumerGroupPartitionMetadataValue)
                else {}
            )
        elif kind == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
            self.assignment_epoch = (
                value.assignment_epoch if isinstance(value, ConsumerGroupTargetAssignmentMetadataValue) else 0
            )
        elif kind == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            if isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
                self.target[mid] = names(value.topic_partitions)
            else:
                self.target.pop(mid, None)
        elif kind == CONSUMER_GROUP_MEMBER_METADATA:
            if not isinstance(value, ConsumerGroupMemberMetadataValue):
                self._drop_member(mid)
                return
            m = self._member_for_replay(mid)
            if m.instance_id is not None and self.static_members.get(m.instance_id) == mid:
                del self.static_members[m.instance_id]
            m.instance_id = value.instance_id
            m.rack_id = value.rack_id
            m.client_id = value.client_id
            m.client_host = value.client_host
            m.subscribed_topic_names = list(value.subscribed_topic_names)
            m.subscribed_topic_regex = value.subscribed_topic_regex
            m.rebalance_timeout_ms = value.rebalance_timeout_ms
            m.server_assignor = value.server_assignor
            if m.instance_id is not None:
                self.static_members[m.instance_id] = mid
        elif kind == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            if not isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
                m0 = self.members.get(mid)
                if m0 is not None:  # the member is leaving; its metadata tombstone follows
                    self._release(m0)
                    m0.assigned, m0.pending_revocation = {}, {}
                    m0.member_epoch = m0.previous_member_epoch = -1
                    m0.state = STABLE
                    m0.revocation_deadline = None
                return
            m = self._member_for_replay(mid)
            self._release(m)
            m.member_epoch = value.member_epoch
            m.previous_member_epoch = value.previous_member_epoch
            m.state = STATE_NAMES.get(value.state, STABLE)
            m.assigned = names(value.assigned)
            m.pending_revocation = names(value.pending_revocation)
            for tp in _flatten(m.assigned) | _flatten(m.pending_revocation):
                self.owners[tp] = mid
            if m.state != UNREVOKED or not m.pending_revocation:
                m.revocation_deadline = None
            elif m.revocation_deadline is None:
                m.revocation_deadline = self.clock.monotonic_ms() + m.rebalance_timeout_ms

    def adopt_timers(self, other: ConsumerGroup) -> None:
        """Take the state records do not carry (deadlines, last assignment sent, the catalog
        version of the regex resolutions) from ``other``, the copy a step ran on, once its records
        were replayed here."""
        for mid, m in self.members.items():
            o = other.members.get(mid)
            if o is not None:
                m.session_deadline = o.session_deadline
                m.revocation_deadline = o.revocation_deadline
                m.last_sent = o.last_sent
        self.state_timestamp = other.state_timestamp
        self.regex_catalog_version = other.regex_catalog_version


def _copy(a: Assignment) -> Assignment:
    return {t: set(ps) for t, ps in a.items()}


def _topic_partitions(
    tps: frozenset[tuple[str, int]], topic_id: Callable[[str], uuid.UUID]
) -> TopicPartitions:
    by_topic: dict[uuid.UUID, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(topic_id(t), []).append(p)
    return tuple((tid, tuple(sorted(ps))) for tid, ps in sorted(by_topic.items()))


def consumer_group_records(
    group_id: str,
    before: GroupView | None,
    after: GroupView | None,
    topic_id: Callable[[str], uuid.UUID],
) -> list[tuple[bytes, bytes | None]]:
    """The ``__consumer_offsets`` records that take a group from ``before`` to ``after`` (None: the
    group does not exist), in Kafka's order: a leaving member's current assignment, target and
    metadata tombstones; member metadata; topic metadata and group epoch; target assignment per
    member then its epoch; current assignments. Replaying them on a group whose view is ``before``
    yields ``after``."""
    recs: list[tuple[bytes, bytes | None]] = []

    def put(kind: int, value: ConsumerGroupValue | None, member_id: str | None = None) -> None:
        key = encode_consumer_group_key(kind, group_id, member_id)
        recs.append((key, None if value is None else encode_consumer_group_value(value)))

    b_members = before.members if before is not None else {}
    a_members = after.members if after is not None else {}
    b_target = before.target if before is not None else {}
    a_target = after.target if after is not None else {}
    for mid in sorted(set(b_members) - set(a_members)):
        put(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, None, mid)
        put(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, None, mid)
        put(CONSUMER_GROUP_MEMBER_METADATA, None, mid)
    for mid in sorted(set(b_target) - set(a_target) - (set(b_members) - set(a_members))):
        put(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, None, mid)
    b_regexes = before.regexes if before is not None else {}
    a_regexes = after.regexes if after is not None else {}
    for regex in sorted(set(b_regexes) - set(a_regexes)):
        recs.append((encode_consumer_group_regex_key(group_id, regex), None))
    if after is None:
        if before is not None:
            put(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, None)
            put(CONSUMER_GROUP_PARTITION_METADATA, None)
            put(CONSUMER_GROUP_METADATA, None)
        return recs
    for mid, meta in sorted(a_members.items()):
        if b_members.get(mid) != meta:
            put(CONSUMER_GROUP_MEMBER_METADATA, meta, mid)
    for regex, resolved in sorted(a_regexes.items()):
        if b_regexes.get(regex) != resolved:
            value = ConsumerGroupRegularExpressionValue(
                tuple(sorted(resolved.topics)), resolved.version, resolved.timestamp
            )
            key = encode_consumer_group_regex_key(group_id, regex)
            recs.append((key, encode_consumer_group_value(value)))
    if before is None or before.topics != after.topics:
        put(
            CONSUMER_GROUP_PARTITION_METADATA,
            ConsumerGroupPartitionMetadataValue(tuple((tid, name, n) for name, tid, n in after.topics)),
        )
    if before is None or before.group_epoch != after.group_epoch:
        put(CONSUMER_GROUP_METADATA, ConsumerGroupMetadataValue(after.group_epoch))
    for mid, tps in sorted(a_target.items()):
        if b_target.get(mid) != tps:
            put(
                CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                ConsumerGroupTargetAssignmentMemberValue(_topic_partitions(tps, topic_id)),
                mid,
            )
    if before is None or before.assignment_epoch != after.assignment_epoch:
        put(
            CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
            ConsumerGroupTargetAssignmentMetadataValue(after.assignment_epoch),
        )
    b_current = before.current if before is not None else {}
    for mid, cur in sorted(after.current.items()):
        if b_current.get(mid) != cur:
            put(
                CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                ConsumerGroupCurrentMemberAssignmentValue(
                    cur.member_epoch,
                    cur.previous_member_epoch,
                    STATE_CODES[cur.state],
                    _topic_partitions(cur.assigned, topic_id),
                    _topic_partitions(cur.pending_revocation, topic_id),
                ),
                mid,
            )
    return recs
