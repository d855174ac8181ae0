"""The classic consumer-group protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) as a state machine.

Theory of operation (Kafka's ``ClassicGroup`` / the 3.x ``GroupCoordinator``):

* A group moves through ``Empty -> PreparingRebalance -> CompletingRebalance -> Stable`` (and
  ``Dead`` when deleted). :data:`VALID_PREVIOUS_STATES` is the transition table; every
  transition is checked against it.
* **Join phase** (PreparingRebalance): every known member must send JoinGroup again. The phase
  ends when all members and no "pending" members (those told MEMBER_ID_REQUIRED) are awaiting a
  join, or when the rebalance timeout (the largest ``rebalance_timeout_ms`` among members)
  expires; dynamic members that did not rejoin are then removed. An Empty group first waits
  ``group.initial.rebalance.delay.ms`` (extended while new members keep arriving, bounded by
  the rebalance timeout), so a starting fleet of consumers lands in one generation.
* Ending the join phase bumps the generation, selects the protocol every member supports (by
  member votes on their preference order), answers all pending JoinGroups (the leader's answer
  carries every member's metadata) and moves to CompletingRebalance.
* **Sync phase**: the leader's SyncGroup carries the assignment; it is stored as a GroupMetadata
  record and, once durable, every pending SyncGroup is answered and the group is Stable. Members
  that do not sync within the rebalance timeout are removed and a new rebalance starts.
* **Liveness**: a member not awaiting a join/sync answer must heartbeat (or commit, join, sync)
  within its session timeout or it is removed, which triggers a rebalance.
* **Static membership** (``group.instance.id``): a rejoin with a known instance id and an empty
  member id replaces the old member id (the old one is fenced: FENCED_INSTANCE_ID). When the
  group is Stable and the selected protocol would not change, the member gets its previous
  assignment back without a rebalance. Static members are not removed at the end of a join phase
  they missed; only a session timeout or an explicit LeaveGroup removes them.

Rules: no I/O, no wall-clock reads except through the injected clock, no randomness except the
injected member-id factory. Records and answers go to an :class:`Effects`; answers are delivered
only after the records are durable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from ..clock import Clock
from ..config_schema import broker_default
from ..protocol.errors import ErrorCode
from .effects import Effects, Pending
from .records import (
    GroupMetadataValue,
    MemberMetadataValue,
    encode_group_metadata_key,
    encode_group_metadata_value,
    subscribed_topics,
)

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState
# target state -> states it may be entered from (Kafka's ClassicGroupState.validPreviousStates)
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    S.PREPARING_REBALANCE: frozenset({S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
    S.DEAD: frozenset({S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}),
}


class IllegalStateTransition(RuntimeError):
    pass


@dataclass(frozen=True)
class ClassicConfig:
    min_session_timeout_ms: int = broker_default("group.min.session.timeout.ms")
    max_session_timeout_ms: int = broker_default("group.max.session.timeout.ms")
    initial_rebalance_delay_ms: int = broker_default("group.initial.rebalance.delay.ms")
    max_size: int = broker_default("group.max.size")


@dataclass
class JoinResult:
    error: int
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    heartbeat_deadline: int = 0
    join_pending: Pending[JoinResult] | None = None
    sync_pending: Pending[SyncResult] | None = None
    supports_skip_assignment: bool = False

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]


def _join_error(member_id: str) -> Callable[[int], JoinResult]:
    return lambda code: JoinResult(error=code, member_id=member_id)


def _sync_error(code: int) -> SyncResult:
    return SyncResult(error=code)


class ClassicGroup:
    """One classic group. Methods take an :class:`Effects` to fill; see the module doc."""

    group_type = "classic"

    def __init__(
        self,
        group_id: str,
        clock: Clock,
        config: ClassicConfig | None = None,
        new_member_id: Callable[[str], str] | None = None,
    ) -> None:
        self.group_id = group_id
        self.clock = clock
        self.config = config or ClassicConfig()
        self._new_member_id = new_member_id or _default_member_id
        self.state = GroupState.EMPTY
        self.state_timestamp = clock.time_ms()
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, ClassicMember] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: dict[str, int] = {}  # member id -> expiry (MEMBER_ID_REQUIRED round)
        self.pending_sync: set[str] = set()
        self.join_deadline: int | None = None
        self.sync_deadline: int | None = None
        self.initial_delay_remaining: int | None = None
        self.new_member_added = False
        self.subscribed_topics: set[str] | None = None

    # ------------------------------------------------------------------ helpers

    def _now(self) -> int:
        return self.clock.monotonic_ms()

    def transition(self, target: GroupState) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalStateTransition(f"group {self.group_id}: {self.state.value} -> {target.value}")
        self.state = target
        self.state_timestamp = self.clock.time_ms()

    def is_empty(self) -> bool:
        return not self.members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def is_static_member_fenced(self, member_id: str, instance_id: str | None) -> bool:
        if instance_id is None:
            return False
        mapped = self.static_members.get(instance_id)
        return mapped is not None and mapped != member_id

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {n for n, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        return bool(names & self._candidate_protocols())

    def _candidate_protocols(self) -> set[str]:
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str | None:
        candidates = self._candidate_protocols()
        if not candidates:
            return None
        votes: Counter[str] = Counter()
        for m in self.members.values():
            vote = next((n for n in m.protocol_names() if n in candidates), None)
            if vote is not None:
                votes[vote] += 1
        first = next(iter(self.members.values())).protocol_names()
        return max(candidates, key=lambda n: (votes[n], -first.index(n) if n in first else -len(first)))

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.join_pending is not None for m in self.members.values())

    def _member_list(self) -> list[tuple[str, str | None, bytes]]:
        return [
            (m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()
        ]

    def _current_join_result(self, member: ClassicMember) -> JoinResult:
        is_leader = member.member_id == self.leader_id
        return JoinResult(
            error=ErrorCode.NONE,
            member_id=member.member_id,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader=self.leader_id or "",
            members=self._member_list() if is_leader else [],
        )

    def _refresh(self, member: ClassicMember) -> None:
        member.heartbeat_deadline = self._now() + member.session_timeout_ms

    def to_record_value(self) -> GroupMetadataValue:
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=self.state_timestamp,
            members=tuple(
                MemberMetadataValue(
                    member_id=m.member_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    session_timeout=m.session_timeout_ms,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    subscription=m.metadata(self.protocol_name),
                    assignment=m.assignment,
                    group_instance_id=m.group_instance_id,
                )
                for m in self.members.values()
            ),
        )

    def _store(self, eff: Effects) -> None:
        eff.records.append(
            (encode_group_metadata_key(self.group_id), encode_group_metadata_value(self.to_record_value()))
        )

    @classmethod
    def load(
        cls,
        group_id: str,
        value: GroupMetadataValue,
        clock: Clock,
        config: ClassicConfig | None = None,
        new_member_id: Callable[[str], str] | None = None,
    ) -> ClassicGroup:
        """Rebuild a group from its last GroupMetadata record (broker restart)."""
        g = cls(group_id, clock, config, new_member_id)
        g.protocol_type = value.protocol_type or None
        g.generation_id = value.generation
        g.protocol_name = value.protocol
        g.leader_id = value.leader
        now = g._now()
        for mv in value.members:
            m = ClassicMember(
                member_id=mv.member_id,
                group_instance_id=mv.group_instance_id,
                client_id=mv.client_id,
                client_host=mv.client_host,
                rebalance_timeout_ms=mv.rebalance_timeout,
                session_timeout_ms=mv.session_timeout,
                protocol_type=value.protocol_type,
                protocols=[(value.protocol or "", mv.subscription)],
                assignment=mv.assignment,
                heartbeat_deadline=now + mv.session_timeout,
            )
            g.members[m.member_id] = m
            if m.group_instance_id is not None:
                g.static_members[m.group_instance_id] = m.member_id
        g.state = GroupState.STABLE if g.members else GroupState.EMPTY
        g.state_timestamp = (
            value.current_state_timestamp if value.current_state_timestamp >= 0 else clock.time_ms()
        )
        if g.leader_id not in g.members:
            g.leader_id = next(iter(g.members), None)
        g._update_subscribed_topics()
        return g

    def _update_subscribed_topics(self) -> None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or not self.members:
            self.subscribed_topics = None
            return
        topics: set[str] = set()
        for m in self.members.values():
            t = subscribed_topics(m.metadata(self.protocol_name))
            if t is None:
                self.subscribed_topics = None
                return
            topics |= t
        self.subscribed_topics = topics

    # ------------------------------------------------------------------ JoinGroup

    def join(
        self,
        eff: Effects,
        *,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        require_known_member_id: bool = True,
        supports_skip_assignment: bool = False,
    ) -> Pending[JoinResult]:
        """JoinGroup. Errors (in the result): COORDINATOR_NOT_AVAILABLE (Dead group),
        INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, MEMBER_ID_REQUIRED,
        GROUP_MAX_SIZE_REACHED. Session-timeout and group-id validation is the caller's."""
        p: Pending[JoinResult] = Pending(_join_error(member_id))
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        if self.state == GroupState.DEAD:
            eff.complete(p, JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id))
            return p
        known = member_id in self.members or member_id in self.pending_members
        static_known = group_instance_id is not None and group_instance_id in self.static_members
        if (
            not known
            and not static_known
            and len(self.members) + len(self.pending_members) >= self.config.max_size
        ):
            eff.complete(p, JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id))
            return p
        args = _JoinArgs(
            group_instance_id,
            protocol_type,
            protocols,
            session_timeout_ms,
            rebalance_timeout_ms,
            client_id,
            client_host,
            supports_skip_assignment,
        )
        if not member_id:
            self._join_unknown(eff, p, args, require_known_member_id)
        else:
            self._join_known(eff, p, member_id, args)
        return p

    def _join_unknown(self, eff: Effects, p: Pending[JoinResult], a: _JoinArgs, require_known: bool) -> None:
        if not self.supports_protocols(a.protocol_type, a.protocols):
            eff.complete(p, JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_id = self._new_member_id(a.client_id)
        if a.group_instance_id is not None:
            old_id = self.static_members.get(a.group_instance_id)
            if old_id is not None and old_id in self.members:
                self._replace_static_member(eff, p, old_id, new_id, a)
            else:
                self._add_member_and_rebalance(eff, p, new_id, a)
        elif require_known:
            self.pending_members[new_id] = self._now() + a.session_timeout_ms
            eff.complete(p, JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id))
        else:
            self._add_member_and_rebalance(eff, p, new_id, a)

    def _join_known(self, eff: Effects, p: Pending[JoinResult], member_id: str, a: _JoinArgs) -> None:
        if member_id in self.pending_members:
            if not self.supports_protocols(a.protocol_type, a.protocols):
                eff.complete(p, JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
                return
            del self.pending_members[member_id]
            self._add_member_and_rebalance(eff, p, member_id, a)
            return
        if self.is_static_member_fenced(member_id, a.group_instance_id):
            eff.complete(p, JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id))
            return
        member = self.members.get(member_id)
        if member is None or self.state == GroupState.EMPTY:
            eff.complete(p, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
            return
        if not self.supports_protocols(a.protocol_type, a.protocols):
            eff.complete(p, JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        matches = member.protocols == a.protocols
        if self.state == GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(eff, p, member, a)
        elif self.state == GroupState.COMPLETING_REBALANCE:
            if matches:
                self._refresh(member)
                eff.complete(p, self._current_join_result(member))
            else:
                self._update_member_and_rebalance(eff, p, member, a)
        elif self.state == GroupState.STABLE:
            if member_id == self.leader_id or not matches:
                self._update_member_and_rebalance(eff, p, member, a)
            else:
                self._refresh(member)
                eff.complete(p, self._current_join_result(member))

    def _add_member_and_rebalance(
        self, eff: Effects, p: Pending[JoinResult], member_id: str, a: _JoinArgs
    ) -> None:
        m = ClassicMember(
            member_id=member_id,
            group_instance_id=a.group_instance_id,
            client_id=a.client_id,
            client_host=a.client_host,
            rebalance_timeout_ms=a.rebalance_timeout_ms,
            session_timeout_ms=a.session_timeout_ms,
            protocol_type=a.protocol_type,
            protocols=list(a.protocols),
            join_pending=p,
            supports_skip_assignment=a.supports_skip_assignment,
        )
        self._refresh(m)
        if not self.members:
            self.protocol_type = a.protocol_type
        self.members[member_id] = m
        if a.group_instance_id is not None:
            self.static_members[a.group_instance_id] = member_id
        if self.leader_id is None or self.leader_id not in self.members:
            self.leader_id = member_id
        self.new_member_added = True
        self._maybe_prepare_rebalance(eff)
        self._maybe_complete_join(eff)

    def _update_member_and_rebalance(
        self, eff: Effects, p: Pending[JoinResult], m: ClassicMember, a: _JoinArgs
    ) -> None:
        if m.join_pending is not None and m.join_pending is not p:
            eff.complete(m.join_pending, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, m.member_id))
        m.protocols = list(a.protocols)
        m.session_timeout_ms = a.session_timeout_ms
        m.rebalance_timeout_ms = a.rebalance_timeout_ms
        m.client_id, m.client_host = a.client_id, a.client_host
        m.supports_skip_assignment = a.supports_skip_assignment
        m.join_pending = p
        self._refresh(m)
        self._maybe_prepare_rebalance(eff)
        self._maybe_complete_join(eff)

    def _replace_static_member(
        self, eff: Effects, p: Pending[JoinResult], old_id: str, new_id: str, a: _JoinArgs
    ) -> None:
        old = self.members.pop(old_id)
        if old.join_pending is not None:
            eff.complete(old.join_pending, JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
        if old.sync_pending is not None:
            eff.complete(old.sync_pending, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        new = ClassicMember(
            member_id=new_id,
            group_instance_id=a.group_instance_id,
            client_id=a.client_id,
            client_host=a.client_host,
            rebalance_timeout_ms=a.rebalance_timeout_ms,
            session_timeout_ms=a.session_timeout_ms,
            protocol_type=a.protocol_type,
            protocols=list(a.protocols),
            assignment=old.assignment,
            supports_skip_assignment=a.supports_skip_assignment,
        )
        self._refresh(new)
        self.members[new_id] = new
        assert a.group_instance_id is not None
        self.static_members[a.group_instance_id] = new_id
        old_leader = self.leader_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        if self.state == GroupState.STABLE:
            if self.select_protocol() == self.protocol_name:
                is_leader = self.leader_id == new_id
                skip = is_leader and a.supports_skip_assignment
                result = JoinResult(
                    error=ErrorCode.NONE,
                    member_id=new_id,
                    generation_id=self.generation_id,
                    protocol_type=self.protocol_type,
                    protocol_name=self.protocol_name,
                    # Without KIP-814 a rejoining static leader must not run the assignor: it is
                    # told the leader is its old id, as Kafka did before skip_assignment existed.
                    leader=(new_id if skip else (old_id if is_leader else (old_leader or ""))),
                    skip_assignment=skip,
                    members=self._member_list() if skip else [],
                )
                self._store(eff)
                generation = self.generation_id
                eff.on_failure.append(lambda: self._on_store_failed(generation))
                eff.complete(p, result)
            else:
                new.join_pending = p
                self._prepare_rebalance(eff)
        elif self.state == GroupState.COMPLETING_REBALANCE:
            new.join_pending = p
            self._prepare_rebalance(eff)
        else:  # PreparingRebalance
            new.join_pending = p
            self._maybe_complete_join(eff)

    # ------------------------------------------------------------------ rebalance

    def _maybe_prepare_rebalance(self, eff: Effects) -> None:
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(eff)

    def _prepare_rebalance(self, eff: Effects) -> None:
        if self.state == GroupState.COMPLETING_REBALANCE:
            for m in self.members.values():
                m.assignment = b""
                if m.sync_pending is not None:
                    eff.complete(m.sync_pending, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
                    m.sync_pending = None
        self.pending_sync.clear()
        self.sync_deadline = None
        now = self._now()
        delay = self.config.initial_rebalance_delay_ms
        if self.state == GroupState.EMPTY and delay > 0:
            self.join_deadline = now + delay
            self.initial_delay_remaining = max(self.rebalance_timeout_ms() - delay, 0)
            self.new_member_added = False
        else:
            self.join_deadline = now + self.rebalance_timeout_ms()
            self.initial_delay_remaining = None
        self.transition(GroupState.PREPARING_REBALANCE)
        self._maybe_complete_join(eff)

    def _maybe_complete_join(self, eff: Effects) -> None:
        if (
            self.state == GroupState.PREPARING_REBALANCE
            and self.initial_delay_remaining is None
            and self.all_joined()
        ):
            self._complete_join(eff)

    def _complete_join(self, eff: Effects) -> None:
        for mid, m in list(self.members.items()):
            if m.join_pending is None and m.group_instance_id is None:
                self._remove_member(eff, mid)
        if self.state != GroupState.PREPARING_REBALANCE:
            return
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is None or leader.join_pending is None:
            self.leader_id = next(
                (mid for mid, m in self.members.items() if m.join_pending is not None),
                next(iter(self.members), None),
            )
        self.join_deadline = None
        self.initial_delay_remaining = None
        self.generation_id += 1
        now = self._now()
        if not self.members:
            self.protocol_name = None
            self.transition(GroupState.EMPTY)
            self.subscribed_topics = None
            self._store(eff)
            return
        self.protocol_name = self.select_protocol()
        self.transition(GroupState.COMPLETING_REBALANCE)
        self._update_subscribed_topics()
        self.pending_sync = set(self.members)
        self.sync_deadline = now + self.rebalance_timeout_ms()
        for m in self.members.values():
            if m.join_pending is not None:
                eff.complete(m.join_pending, self._current_join_result(m))
                m.join_pending = None
            self._refresh(m)

    def _on_store_failed(self, generation: int) -> None:
        """A GroupMetadata append failed: the assignment is not durable, rebalance again."""
        if self.generation_id == generation and self.state == GroupState.STABLE:
            for m in self.members.values():
                m.assignment = b""
            eff = Effects()
            self._prepare_rebalance(eff)
            eff.deliver()

    def _remove_member(self, eff: Effects, member_id: str) -> None:
        m = self.members.pop(member_id, None)
        if m is None:
            return
        if m.join_pending is not None:
            eff.complete(m.join_pending, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
        if m.sync_pending is not None:
            eff.complete(m.sync_pending, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        if m.group_instance_id is not None and self.static_members.get(m.group_instance_id) == member_id:
            del self.static_members[m.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)

    def _remove_member_and_update(self, eff: Effects, member_id: str) -> None:
        self._remove_member(eff, member_id)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(eff)
        elif self.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(eff)

    # ------------------------------------------------------------------ SyncGroup

    def sync(
        self,
        eff: Effects,
        *,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> Pending[SyncResult]:
        """SyncGroup. Errors: COORDINATOR_NOT_AVAILABLE, FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID,
        ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, REBALANCE_IN_PROGRESS."""
        p: Pending[SyncResult] = Pending(_sync_error)
        err = self._validate_member(member_id, group_instance_id, generation_id)
        if err == ErrorCode.NONE:
            type_mismatch = protocol_type is not None and protocol_type != self.protocol_type
            name_mismatch = protocol_name is not None and protocol_name != self.protocol_name
            if type_mismatch or name_mismatch:
                err = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
            elif self.state == GroupState.EMPTY:
                err = ErrorCode.UNKNOWN_MEMBER_ID
            elif self.state == GroupState.PREPARING_REBALANCE:
                err = ErrorCode.REBALANCE_IN_PROGRESS
        if err != ErrorCode.NONE:
            eff.complete(p, SyncResult(err))
            return p
        m = self.members[member_id]
        self._refresh(m)
        self.pending_sync.discard(member_id)
        if self.state == GroupState.STABLE:
            eff.complete(p, self._sync_result(m))
            return p
        # CompletingRebalance
        if m.sync_pending is not None and m.sync_pending is not p:
            eff.complete(m.sync_pending, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        m.sync_pending = p
        if member_id == self.leader_id:
            for mid, mm in self.members.items():
                mm.assignment = assignments.get(mid, b"")
            self._store(eff)
            generation = self.generation_id
            eff.on_failure.append(lambda: self._on_store_failed(generation))
            self.transition(GroupState.STABLE)
            for mm in self.members.values():
                if mm.sync_pending is not None:
                    eff.complete(mm.sync_pending, self._sync_result(mm))
                    mm.sync_pending = None
        return p

    def _sync_result(self, m: ClassicMember) -> SyncResult:
        return SyncResult(ErrorCode.NONE, self.protocol_type, self.protocol_name, m.assignment)

    def _validate_member(self, member_id: str, instance_id: str | None, generation_id: int) -> int:
        if self.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.is_static_member_fenced(member_id, instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    # ------------------------------------------------------------------ Heartbeat / LeaveGroup

    def heartbeat(self, member_id: str, generation_id: int, group_instance_id: str | None) -> int:
        """Heartbeat: NONE, or COORDINATOR_NOT_AVAILABLE, FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID,
        ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (join the next generation)."""
        err = self._validate_member(member_id, group_instance_id, generation_id)
        if err != ErrorCode.NONE:
            return err
        if self.state == GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._refresh(self.members[member_id])
        if self.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, eff: Effects, members: list[tuple[str, str | None]]) -> list[int]:
        """LeaveGroup for a batch of (member_id, group_instance_id); one error code each."""
        out: list[int] = []
        for member_id, instance_id in members:
            if self.state == GroupState.DEAD:
                out.append(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            elif instance_id is not None:
                mapped = self.static_members.get(instance_id)
                if mapped is None:
                    out.append(ErrorCode.UNKNOWN_MEMBER_ID)
                elif member_id and member_id != mapped:
                    out.append(ErrorCode.FENCED_INSTANCE_ID)
                else:
                    self._remove_member_and_update(eff, mapped)
                    out.append(ErrorCode.NONE)
            elif member_id in self.pending_members:
                del self.pending_members[member_id]
                self._maybe_complete_join(eff)
                out.append(ErrorCode.NONE)
            elif member_id in self.members:
                self._remove_member_and_update(eff, member_id)
                out.append(ErrorCode.NONE)
            else:
                out.append(ErrorCode.UNKNOWN_MEMBER_ID)
        return out

    # ------------------------------------------------------------------ offsets

    def validate_offset_commit(self, member_id: str, instance_id: str | None, generation_id: int) -> int:
        """Kafka's ClassicGroup.validateOffsetCommit (non-transactional)."""
        if self.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and self.state == GroupState.EMPTY:
            return ErrorCode.NONE
        if generation_id >= 0 or member_id or instance_id is not None:
            if self.is_static_member_fenced(member_id, instance_id):
                return ErrorCode.FENCED_INSTANCE_ID
            if member_id not in self.members:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if generation_id != self.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif self.state != GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if self.state == GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        m = self.members.get(member_id)
        if m is not None:
            self._refresh(m)
        return ErrorCode.NONE

    # ------------------------------------------------------------------ timers

    def next_deadline(self) -> int | None:
        ds: list[int] = list(self.pending_members.values())
        ds += [
            m.heartbeat_deadline
            for m in self.members.values()
            if m.join_pending is None and m.sync_pending is None
        ]
        if self.join_deadline is not None:
            ds.append(self.join_deadline)
        if self.sync_deadline is not None:
            ds.append(self.sync_deadline)
        return min(ds) if ds else None

    def tick(self, eff: Effects) -> None:
        """Expire what is due at the clock's now: pending members, sessions, join/sync phases."""
        if self.state == GroupState.DEAD:
            return
        now = self._now()
        expired_pending = [mid for mid, dl in self.pending_members.items() if now >= dl]
        for mid in expired_pending:
            del self.pending_members[mid]
        for mid, m in list(self.members.items()):
            if (
                mid in self.members
                and m.join_pending is None
                and m.sync_pending is None
                and now >= m.heartbeat_deadline
            ):
                self._remove_member_and_update(eff, mid)
        if self.state == GroupState.PREPARING_REBALANCE:
            if self.join_deadline is not None and now >= self.join_deadline:
                remaining = self.initial_delay_remaining
                if remaining is not None and self.new_member_added and remaining > 0:
                    delay = min(self.config.initial_rebalance_delay_ms, remaining)
                    self.initial_delay_remaining = max(remaining - delay, 0)
                    self.join_deadline = now + delay
                    self.new_member_added = False
                else:
                    self._complete_join(eff)
            elif expired_pending:
                self._maybe_complete_join(eff)
        if (
            self.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
            and self.sync_deadline is not None
            and now >= self.sync_deadline
        ):
            self.sync_deadline = None
            laggards = list(self.pending_sync)
            self.pending_sync.clear()
            if laggards:
                for mid in laggards:
                    self._remove_member(eff, mid)
                self._prepare_rebalance(eff)

    # ------------------------------------------------------------------ admin

    def mark_dead(self, eff: Effects) -> None:
        for mid in list(self.members):
            self._remove_member(eff, mid)
        self.pending_members.clear()
        self.join_deadline = self.sync_deadline = None
        self.transition(GroupState.DEAD)

    def describe(self) -> dict[str, object]:
        stable = self.state == GroupState.STABLE
        return {
            "group_state": self.state.value,
            "protocol_type": self.protocol_type or "",
            "protocol_data": (self.protocol_name or "") if stable else "",
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata(self.protocol_name) if stable else b"",
                    "member_assignment": m.assignment if stable else b"",
                }
                for m in self.members.values()
            ],
        }


@dataclass
class _JoinArgs:
    group_instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    supports_skip_assignment: bool


def _default_member_id(client_id: str) -> str:
    import uuid

    return f"{client_id}-{uuid.uuid4()}"
