"""The group coordinator runtime: groups, committed offsets, ``__consumer_offsets`` I/O, timers.

Every operation runs as one *step* under the lock of the group's ``__consumer_offsets``
partition: the step validates and mutates the in-memory state machines (:mod:`.classic`,
:mod:`.consumer`) and collects records and pending answers in an :class:`Effects`; the runtime
then appends the records, **replays** them, and only then answers (Kafka's
``CoordinatorResult(records, response)``). Committed offsets exist only through replay: a commit
step emits OffsetCommit records and the offsets become visible when the append returned and the
records were replayed; ``start()`` rebuilds the same state by replaying every partition, the one
code path for both. Classic-group membership is live state that the state machine owns; its
GroupMetadata records (written when a generation's assignment is set, when a group becomes Empty,
or when a static member is replaced) are replayed at load to rebuild generation, protocol,
members and assignments, exactly what Kafka persists.

KIP-848 consumer groups are persisted as Kafka's new coordinator does (record types 3-8, see
:mod:`.consumer`): a step runs on a copy of the group, the difference between the live group's
view and the copy's becomes records, and once appended they are replayed onto the live group (or
create it), the same replay that rebuilds the groups at load. Members therefore keep their member
id, epoch and partitions across a broker restart; their session timers restart at load. Topic
names of assignments (the records carry topic ids) come from the groups' topic metadata records
and from the topics resolved by heartbeats.

Protocol switches (KIP-848 "Upgrade/Downgrade"): as in Kafka, an *empty* classic group becomes a
consumer group on the first ConsumerGroupHeartbeat (its GroupMetadata is tombstoned, its offsets
stay), and an empty consumer group becomes a classic group on the first JoinGroup (its records,
regex resolutions included, are tombstoned); Kafka does this whatever
``group.consumer.migration.policy`` says. Not implemented: the *online* migration that policy
governs -- converting a non-empty classic group when a first member arrives with the consumer
protocol (answered GROUP_ID_NOT_FOUND, as Kafka does when the upgrade is disabled), serving
classic members (JoinGroup/SyncGroup/Heartbeat) inside a consumer group (INCONSISTENT_GROUP_PROTOCOL
here), and converting back when the last consumer-protocol member leaves. A rolling switch of a
live group therefore needs the group to be emptied in between.

Error contract: coordinator methods return Kafka error codes in their results and never raise
for client input; storage failures become Kafka's coordinator errors (retriable:
NOT_COORDINATOR for KAFKA_STORAGE_ERROR, else COORDINATOR_NOT_AVAILABLE; see :mod:`.partition_writer`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..clock import Clock, RealClock
from ..config_schema import broker_default
from ..protocol.errors import ErrorCode
from ..rate_limited_log import RateLimitedLog
from ..scheduler import AsyncioScheduler, DeadlineTimer, Scheduler
from .classic import ClassicConfig, ClassicGroup, GroupState, JoinResult, SyncResult
from .consumer import (
    Assignment,
    ConsumerConfig,
    ConsumerGroup,
    HeartbeatResult,
    TopicCatalog,
    TopicResolver,
    consumer_group_records,
)
from .effects import Effects, Pending
from .partition_writer import coordinator_error
from .records import (
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_PARTITION_METADATA,
    ConsumerGroupKey,
    ConsumerGroupPartitionMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_consumer_group_value,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_offset_commit_key,
    encode_offset_commit_value,
    partition_for,
)
from .storage import MemoryOffsetsStorage, OffsetsStorage, StoredEntry

# the first two bytes (the key's version) of an offset commit record's key
_OFFSET_KEY_PREFIXES = frozenset({b"\x00\x00", b"\x00\x01"})
# states of held offset records (GroupCoordinator._unreplayed)
_HELD, _DURABLE, _DROPPED = object(), object(), object()

log = logging.getLogger(__name__)

T = TypeVar("T")
Group = ClassicGroup | ConsumerGroup
TopicPartition = tuple[str, int]

OFFSET_METADATA_MAX_BYTES = 4096


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1


@dataclass
class CoordinatorConfig:
    num_partitions: int = broker_default("offsets.topic.num.partitions")
    offsets_retention_ms: int = broker_default("offsets.retention.minutes") * 60000
    retention_check_interval_ms: int = broker_default("offsets.retention.check.interval.ms")
    classic: ClassicConfig = field(default_factory=ClassicConfig)
    consumer: ConsumerConfig = field(default_factory=ConsumerConfig)

    @classmethod
    def from_broker(cls, cfg: Any) -> CoordinatorConfig:
        def get(name: str) -> Any:
            try:
                v = cfg[name]
            except (KeyError, TypeError):
                return broker_default(name)
            return broker_default(name) if v is None else v

        assignors = tuple(
            a.strip().lower() for a in str(get("group.consumer.assignors")).split(",") if a.strip()
        )
        # Kafka accepts class names too; keep the known short names.
        known = tuple(a.rsplit(".", 1)[-1].replace("assignor", "") or a for a in assignors)
        known = tuple(a for a in known if a in ("uniform", "range")) or ("uniform", "range")
        return cls(
            num_partitions=int(get("offsets.topic.num.partitions")),
            offsets_retention_ms=int(get("offsets.retention.minutes")) * 60000,
            retention_check_interval_ms=int(get("offsets.retention.check.interval.ms")),
            classic=ClassicConfig(
                min_session_timeout_ms=int(get("group.min.session.timeout.ms")),
                max_session_timeout_ms=int(get("group.max.session.timeout.ms")),
                initial_rebalance_delay_ms=int(get("group.initial.rebalance.delay.ms")),
                max_size=int(get("group.max.size")),
            ),
            consumer=ConsumerConfig(
                session_timeout_ms=int(get("group.consumer.session.timeout.ms")),
                heartbeat_interval_ms=int(get("group.consumer.heartbeat.interval.ms")),
                assignors=known,
                regex_refresh_interval_ms=int(get("group.consumer.regex.refresh.interval.ms")),
            ),
        )


class GroupCoordinator:
    """See the module doc. Construct, ``await start()`` (loads), use, ``await stop()``."""

    def __init__(
        self,
        config: Any = None,
        clock: Clock | None = None,
        storage: OffsetsStorage | None = None,
        *,
        run_timer: bool = True,
        new_member_id: Callable[[str], str] | None = None,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.config = (
            config
            if isinstance(config, CoordinatorConfig)
            else (CoordinatorConfig.from_broker(config) if config is not None else CoordinatorConfig())
        )
        self.clock: Clock = clock or RealClock()
        self.storage: OffsetsStorage = storage if storage is not None else MemoryOffsetsStorage()
        self.storage_log = RateLimitedLog(log, self.clock)  # failed __consumer_offsets writes
        self.run_timer = run_timer
        self.new_member_id = new_member_id or (lambda client_id: f"{client_id}-{uuid.uuid4()}")
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self.loading: set[int] = set(range(self.config.num_partitions))
        self._locks: dict[int, asyncio.Lock] = {}
        # the timer (session, rebalance and join timeouts; offsets expiry): one task of the
        # scheduler, re-armed for the nearest deadline (at most a second away)
        self.timer = DeadlineTimer(
            scheduler if scheduler is not None else AsyncioScheduler(), self.clock.monotonic_ms, self.tick,
            self.next_deadline, name="group coordinator timer",
        )
        self._next_retention_check = 0
        # transactional offset commits awaiting their marker: (partition, producer id) -> records
        self.pending_txn: dict[tuple[int, int], list[tuple[bytes, bytes | None]]] = {}
        # offset records appended but not yet durable (the HW has not passed them), per
        # partition in append order: [records, state]; replayed once durable (see _run)
        self._unreplayed: dict[int, deque[list[Any]]] = {}
        # topic name <-> id, for the topic ids in consumer-group records (from resolved topics and
        # the groups' topic metadata records)
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.topic_names: dict[uuid.UUID, str] = {}
        # tests: check after every consumer-group step that replaying its records rebuilt exactly
        # the state the state machine computed
        self.verify_replay = False
        # group id -> its group configs (KIP-848 consumer.session.timeout.ms and
        # consumer.heartbeat.interval.ms), effective values; None: the broker-level ones
        self.group_configs: Callable[[str], dict[str, str]] | None = None
        # which __consumer_offsets partitions this broker leads (the metadata quorum's image),
        # asked at start; None: every one (a single node). ``owned``: the partitions loaded and
        # served since (on_election / on_resignation); groups of the others answer NOT_COORDINATOR.
        self.owns: Callable[[int], bool] | None = None
        self.owned: set[int] | None = None

    # ------------------------------------------------------------------ lifecycle

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.num_partitions)

    async def start(self) -> None:
        """Load every ``__consumer_offsets`` partition this broker leads (``owns``), then start
        the timer task."""
        owns = self.owns
        if owns is not None:
            self.owned = {p for p in range(self.config.num_partitions) if owns(p)}
        for p in range(self.config.num_partitions):
            if self.owned is None or p in self.owned:
                self._load_from_storage(p)
                await asyncio.sleep(0)
            else:
                self.loading.discard(p)
        self._next_retention_check = self.clock.time_ms() + self.config.retention_check_interval_ms
        if self.run_timer:
            self.timer.start()

    async def stop(self) -> None:
        self.timer.stop()
        for g in self.groups.values():
            if isinstance(g, ClassicGroup):
                for m in g.members.values():
                    for pend in (m.join_pending, m.sync_pending):
                        if pend is not None:
                            pend.fail(ErrorCode.COORDINATOR_NOT_AVAILABLE)

    def _load_from_storage(self, partition: int) -> None:
        read_entries = getattr(self.storage, "read_entries", None)
        entries = read_entries(partition) if read_entries is not None else self.storage.read_all(partition)
        self.load_partition(partition, entries)

    def on_election(self, partition: int) -> None:
        """This broker became the leader of ``__consumer_offsets-partition`` (Kafka's
        ``onElection``): load its groups from the local log."""
        self.on_resignation(partition)  # (nothing of it is kept: the log is replayed whole)
        if self.owned is not None:
            self.owned.add(partition)
        self._load_from_storage(partition)

    def on_resignation(self, partition: int) -> None:
        """This broker no longer leads ``__consumer_offsets-partition`` (Kafka's
        ``onResignation``): forget its groups and offsets; members waiting in a join or sync
        are answered NOT_COORDINATOR and find the new coordinator."""
        if self.owned is not None:
            self.owned.discard(partition)
        for gid in [g for g in set(self.groups) | set(self.offsets) if self.partition_for(g) == partition]:
            group = self.groups.pop(gid, None)
            self.offsets.pop(gid, None)
            if isinstance(group, ClassicGroup):
                for m in group.members.values():
                    for pend in (m.join_pending, m.sync_pending):
                        if pend is not None:
                            pend.fail(ErrorCode.NOT_COORDINATOR)
        for key in [k for k in self.pending_txn if k[0] == partition]:
            del self.pending_txn[key]
        self._unreplayed.pop(partition, None)

    def load_partition(
        self, partition: int, records: Iterable[tuple[bytes, bytes | None] | StoredEntry]
    ) -> None:
        """Replay one partition from its first record (the load path of ``start``).
        Transactional offset commits stay pending until their producer's marker."""
        self.loading.add(partition)
        metadata: dict[str, GroupMetadataValue | None] = {}
        entries = [
            item if isinstance(item, StoredEntry) else StoredEntry(item[0], item[1]) for item in records
        ]
        self._learn_topic_names(entries)
        for entry in entries:
            if entry.marker_commit is not None:
                pending = self.pending_txn.pop((partition, entry.producer_id), [])
                if entry.marker_commit:
                    for pkey, pvalue in pending:
                        self._replay(pkey, pvalue)
                continue
            if entry.transactional:
                if entry.key is not None:
                    txn = self.pending_txn.setdefault((partition, entry.producer_id), [])
                    txn.append((entry.key, entry.value))
                continue
            key, value = entry.key, entry.value
            if key is None:
                continue
            try:
                k = decode_key(key)
                if isinstance(k, GroupMetadataKey):
                    metadata[k.group] = decode_group_metadata_value(value) if value is not None else None
                else:
                    if isinstance(k, ConsumerGroupKey):
                        metadata.pop(k.group, None)  # a later consumer group replaces a classic one
                    self._replay(key, value)
            except RecordFormatError as e:
                log.warning("skipping malformed __consumer_offsets-%d record: %s", partition, e)
        for gid, gm in metadata.items():
            if gm is None:
                if gid not in self.offsets:
                    self.groups.pop(gid, None)
                else:
                    self.groups[gid] = self._new_classic(gid)
            else:
                self.groups[gid] = ClassicGroup.load(
                    gid, gm, self.clock, self.config.classic, self.new_member_id
                )
        for gid in self.offsets:
            if gid not in self.groups and self.partition_for(gid) == partition:
                self.groups[gid] = self._new_classic(gid)
        self.loading.discard(partition)

    def _learn_topic_names(self, entries: list[StoredEntry]) -> None:
        """Topic ids -> names from the consumer groups' topic metadata records of a partition,
        before replaying it (after compaction an assignment may precede that record)."""
        for e in entries:
            if e.key is None or e.value is None or e.transactional:
                continue
            try:
                k = decode_key(e.key)
                if isinstance(k, ConsumerGroupKey) and k.kind == CONSUMER_GROUP_PARTITION_METADATA:
                    v = decode_consumer_group_value(k.kind, e.value)
                    assert isinstance(v, ConsumerGroupPartitionMetadataValue)
                    for tid, name, _n in v.topics:
                        self._remember_topic(name, tid)
            except RecordFormatError:
                pass  # reported by the replay

    def _remember_topic(self, name: str, topic_id: uuid.UUID) -> None:
        self.topic_ids[name] = topic_id
        self.topic_names[topic_id] = name

    def _topic_id(self, name: str) -> uuid.UUID:
        tid = self.topic_ids.get(name)
        if tid is None:  # a topic known only by id at load (see _topic_name)
            try:
                tid = uuid.UUID(name)
            except ValueError:
                tid = uuid.UUID(int=0)
        return tid

    def _topic_name(self, topic_id: uuid.UUID) -> str:
        # An id no topic metadata record names (a partition of an unsubscribed topic still being
        # revoked at a restart) is kept under its id's text until the member revokes it.
        return self.topic_names.get(topic_id) or str(topic_id)

    def _replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one record to the state (runtime and load). GroupMetadata values are applied
        by the load path only; at runtime the state machine already holds them."""
        k = decode_key(key)
        if isinstance(k, ConsumerGroupKey):
            self._replay_consumer(k, value)
        elif isinstance(k, OffsetCommitKey):
            tp = (k.topic, k.partition)
            if value is None:
                offs = self.offsets.get(k.group)
                if offs is not None:
                    offs.pop(tp, None)
                    if not offs:
                        del self.offsets[k.group]
            else:
                v = decode_offset_commit_value(value)
                self.offsets.setdefault(k.group, {})[tp] = OffsetAndMetadata(
                    v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp
                )
        elif isinstance(k, GroupMetadataKey) and value is None:
            g = self.groups.get(k.group)
            if g is not None and (
                (isinstance(g, ClassicGroup) and g.state == GroupState.DEAD)
                or (isinstance(g, ConsumerGroup) and g.dead)
            ):
                del self.groups[k.group]

    def _replay_consumer(self, k: ConsumerGroupKey, value: bytes | None) -> None:
        g = self.groups.get(k.group)
        if value is None:
            if isinstance(g, ConsumerGroup):
                if k.kind == CONSUMER_GROUP_METADATA:
                    del self.groups[k.group]
                else:
                    g.replay(k.kind, k.member_id, None, self._topic_name, k.regex)
            return
        v = decode_consumer_group_value(k.kind, value)
        if isinstance(v, ConsumerGroupPartitionMetadataValue):
            for tid, name, _n in v.topics:
                self._remember_topic(name, tid)
        if not isinstance(g, ConsumerGroup):  # created, or replacing an empty classic group
            g = self.groups[k.group] = ConsumerGroup(k.group, self.clock, self.config.consumer)
        g.replay(k.kind, k.member_id, v, self._topic_name, k.regex)

    def _consumer_step(
        self, eff: Effects, group_id: str, live: ConsumerGroup | None, work: ConsumerGroup
    ) -> None:
        """Persist what a step changed on ``work`` (a clone of ``live``, or a new group): the
        records go to ``eff``; replaying them updates (or creates) the live group, which then
        takes over the timers of ``work``."""
        before = live.view() if live is not None else None
        after = None if work.dead else work.view()
        eff.records.extend(consumer_group_records(group_id, before, after, self._topic_id))

        def adopt() -> None:
            g = self.groups.get(group_id)
            if isinstance(g, ConsumerGroup):
                g.adopt_timers(work)
            if self.verify_replay:
                replayed = g.view() if isinstance(g, ConsumerGroup) else None
                if replayed != after:
                    raise AssertionError(f"replay of {group_id}: {replayed} != {after}")

        eff.on_success.append(adopt)

    def _consumer_config(self, group_id: str) -> ConsumerConfig:
        """The consumer-group settings of ``group_id``: the broker's, with its group configs."""
        base = self.config.consumer
        if self.group_configs is None:
            return base
        eff = self.group_configs(group_id)
        try:
            return dataclasses.replace(
                base,
                session_timeout_ms=int(eff.get("consumer.session.timeout.ms", base.session_timeout_ms)),
                heartbeat_interval_ms=int(
                    eff.get("consumer.heartbeat.interval.ms", base.heartbeat_interval_ms)
                ),
            )
        except (TypeError, ValueError):
            return base

    def _new_classic(self, group_id: str) -> ClassicGroup:
        return ClassicGroup(group_id, self.clock, self.config.classic, self.new_member_id)

    def _lock(self, partition: int) -> asyncio.Lock:
        lock = self._locks.get(partition)
        if lock is None:
            lock = self._locks[partition] = asyncio.Lock()
        return lock

    def _unavailable(self, group_id: str) -> int:
        """Why the group cannot be served here: NOT_COORDINATOR when its ``__consumer_offsets``
        partition is not led by this broker (``owns``), COORDINATOR_LOAD_IN_PROGRESS while the
        partition loads, else NONE (0)."""
        partition = self.partition_for(group_id)
        if self.owned is not None and partition not in self.owned:
            return ErrorCode.NOT_COORDINATOR
        if partition in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    async def _run(self, group_id: str, step: Callable[[Effects], T]) -> tuple[T, int]:
        """Run a step under the partition lock, append its records and replay them; answer
        once the records are durable (the HW reached them, :mod:`.partition_writer`). Returns
        the step's value and NONE, or the error a failed write answers (Kafka's mapping,
        :func:`.partition_writer.coordinator_error`).

        The lock covers the step, the append (which does not wait for the disk) and the
        replay, so the next step of the partition sees this one's state; the wait for the HW
        happens outside it, so concurrent steps of one partition share a flush. A failed append
        leaves the state as it was (``on_failure`` undoes the step); a failed flush after a
        successful append answers the error but keeps the replayed state, which is what the log
        holds."""
        partition = self.partition_for(group_id)
        durable: Awaitable[None] | None = None
        failed: int = ErrorCode.NONE
        entry: list[Any] | None = None
        async with self._lock(partition):
            eff = Effects()
            value = step(eff)
            if eff.records:
                try:
                    write = getattr(self.storage, "write", None)
                    if write is not None:
                        durable = write(partition, eff.records)
                    else:  # an OffsetsStorage without the two-phase write: durable on return
                        await self.storage.append(partition, eff.records)
                except Exception as e:  # storage failure: nothing acknowledged
                    self._storage_failed(partition, e)
                    failed = coordinator_error(e)
                    eff.abort(failed)
                else:
                    held: list[tuple[bytes, bytes | None]] = []
                    for k, v in eff.records:
                        if durable is not None and k[:2] in _OFFSET_KEY_PREFIXES:
                            held.append((k, v))  # committed offsets are visible once durable
                        else:
                            self._replay(k, v)
                    if held:
                        entry = [held, _HELD]
                        self._unreplayed.setdefault(partition, deque()).append(entry)
            if not failed:
                eff.apply()
        if durable is not None:
            try:
                await durable
            except Exception as e:
                self._storage_failed(partition, e)
                failed = coordinator_error(e)
                eff.fail(failed)
            if entry is not None:
                entry[1] = _DROPPED if failed else _DURABLE
                self._replay_durable(partition)
        if not failed:
            if eff.records:
                self.storage_log.ok("append to", f"__consumer_offsets-{partition}")
            eff.answer()
        self.timer.poke()
        return value, failed

    def _replay_durable(self, partition: int) -> None:
        """Replay the held offset records that became durable, in append order (Kafka's
        coordinator shows a commit to OffsetFetch only once it is committed to the log: a
        coordinator that fails before the ISR has it never showed it, so no reader saw an
        offset that a new coordinator then lacks). A failed write's records are dropped."""
        queue = self._unreplayed.get(partition)
        while queue and queue[0][1] is not _HELD:
            records, state = queue.popleft()
            if state is _DURABLE:
                for k, v in records:
                    self._replay(k, v)
        if queue is not None and not queue:
            self._unreplayed.pop(partition, None)

    def _storage_failed(self, partition: int, e: BaseException) -> None:
        self.storage_log.failed(
            "append to", f"__consumer_offsets-{partition}", e,
            f"answering {ErrorCode(coordinator_error(e)).name}; clients retry",
        )

    @staticmethod
    async def _await(p: Pending[T]) -> T:
        if p.done:
            return p.result()
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def cb(v: T) -> None:
            if not fut.done():
                fut.set_result(v)

        p.add_callback(cb)
        return await fut

    # ------------------------------------------------------------------ classic protocol

    async def join_group(
        self,
        group_id: str,
        *,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        api_version: int = 9,
    ) -> JoinResult:
        """JoinGroup; waits until the join phase ends (or an error)."""
        if not group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID, member_id)
        if unavailable := self._unavailable(group_id):
            return JoinResult(unavailable, member_id)
        cc = self.config.classic
        if not cc.min_session_timeout_ms <= session_timeout_ms <= cc.max_session_timeout_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)

        def step(eff: Effects) -> Pending[JoinResult]:
            g = self.groups.get(group_id)
            replaced: ConsumerGroup | None = None
            if isinstance(g, ConsumerGroup):
                if not g.is_empty():
                    p0: Pending[JoinResult] = Pending(lambda c: JoinResult(c, member_id))
                    eff.complete(p0, JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
                    return p0
                replaced, g = g, None
            if g is None:
                if member_id:
                    p1: Pending[JoinResult] = Pending(lambda c: JoinResult(c, member_id))
                    eff.complete(p1, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
                    return p1
                if replaced is not None:  # the empty consumer group's records go
                    eff.records.extend(
                        consumer_group_records(group_id, replaced.view(), None, self._topic_id)
                    )
                g = self.groups[group_id] = self._new_classic(group_id)
            return g.join(
                eff,
                member_id=member_id,
                group_instance_id=group_instance_id,
                protocol_type=protocol_type,
                protocols=protocols,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms if api_version >= 1 else session_timeout_ms,
                client_id=client_id,
                client_host=client_host,
                require_known_member_id=api_version >= 4,
                supports_skip_assignment=api_version >= 9,
            )

        pending, _ok = await self._run(group_id, step)
        return await self._await(pending)

    async def sync_group(
        self,
        group_id: str,
        *,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        assignments: dict[str, bytes] | None = None,
    ) -> SyncResult:
        if not group_id:
            return SyncResult(ErrorCode.INVALID_GROUP_ID)
        if unavailable := self._unavailable(group_id):
            return SyncResult(unavailable)

        def step(eff: Effects) -> Pending[SyncResult]:
            g = self.groups.get(group_id)
            if not isinstance(g, ClassicGroup):
                p: Pending[SyncResult] = Pending(lambda c: SyncResult(c))
                eff.complete(p, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
                return p
            return g.sync(
                eff,
                member_id=member_id,
                generation_id=generation_id,
                group_instance_id=group_instance_id,
                protocol_type=protocol_type,
                protocol_name=protocol_name,
                assignments=assignments or {},
            )

        pending, _ok = await self._run(group_id, step)
        return await self._await(pending)

    async def heartbeat(
        self, group_id: str, *, member_id: str, generation_id: int, group_instance_id: str | None = None
    ) -> int:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if unavailable := self._unavailable(group_id):
            return unavailable
        g = self.groups.get(group_id)
        if not isinstance(g, ClassicGroup):
            return ErrorCode.UNKNOWN_MEMBER_ID
        return g.heartbeat(member_id, generation_id, group_instance_id)

    async def leave_group(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[int, list[int]]:
        """LeaveGroup: (top-level error, per-member errors)."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, []
        if unavailable := self._unavailable(group_id):
            return unavailable, []

        def step(eff: Effects) -> tuple[int, list[int]]:
            g = self.groups.get(group_id)
            if not isinstance(g, ClassicGroup):
                return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(members)
            if g.state == GroupState.DEAD:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
            return ErrorCode.NONE, g.leave(eff, members)

        (top, errs), failed = await self._run(group_id, step)
        return (top, errs) if not failed else (failed, errs)

    # ------------------------------------------------------------------ offsets

    def _offset_records(
        self, group_id: str, offsets: dict[TopicPartition, tuple[int, int, str | None]], retention_ms: int
    ) -> tuple[list[tuple[bytes, bytes | None]], dict[TopicPartition, int]]:
        """OffsetCommit records for ``offsets`` (tp -> (offset, leader epoch, metadata)) and the
        per-partition result (OFFSET_METADATA_TOO_LARGE for oversized metadata, else NONE)."""
        now = self.clock.time_ms()
        records: list[tuple[bytes, bytes | None]] = []
        out: dict[TopicPartition, int] = {}
        for (topic, partition), (offset, leader_epoch, metadata) in offsets.items():
            meta = metadata or ""
            if len(meta.encode()) > OFFSET_METADATA_MAX_BYTES:
                out[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            value = OffsetCommitValue(
                offset=offset,
                metadata=meta,
                commit_timestamp=now,
                leader_epoch=leader_epoch,
                expire_timestamp=now + retention_ms if retention_ms > 0 else -1,
            )
            records.append(
                (encode_offset_commit_key(group_id, topic, partition), encode_offset_commit_value(value))
            )
            out[(topic, partition)] = ErrorCode.NONE
        return records, out

    async def commit_offsets(
        self,
        group_id: str,
        *,
        member_id: str,
        generation_id: int,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
        group_instance_id: str | None = None,
        retention_ms: int = -1,
        api_version: int = 9,
    ) -> dict[TopicPartition, int]:
        """OffsetCommit: per partition error. ``offsets``: tp -> (offset, leader epoch, metadata).
        Acknowledged (NONE) only once the records are durable."""
        if unavailable := self._unavailable(group_id):
            return dict.fromkeys(offsets, unavailable)

        def step(eff: Effects) -> dict[TopicPartition, int]:
            g = self.groups.get(group_id)
            err: int = ErrorCode.NONE
            if g is None:
                if generation_id < 0:
                    g = self.groups[group_id] = self._new_classic(group_id)
                else:
                    err = ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9 else ErrorCode.ILLEGAL_GENERATION
            elif isinstance(g, ClassicGroup):
                err = g.validate_offset_commit(member_id, group_instance_id, generation_id)
            else:
                err = g.validate_offset_commit(member_id, generation_id, offsets)
            if err != ErrorCode.NONE:
                return dict.fromkeys(offsets, err)
            records, out = self._offset_records(group_id, offsets, retention_ms)
            eff.records.extend(records)
            return out

        result, failed = await self._run(group_id, step)
        if failed:
            return {
                tp: (failed if e == ErrorCode.NONE else e)
                for tp, e in result.items()
            }
        return result

    async def txn_commit_offsets(
        self,
        group_id: str,
        *,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
    ) -> dict[TopicPartition, int]:
        """TxnOffsetCommit: written durably as part of the producer's transaction; the offsets
        become committed when the COMMIT marker reaches this partition (:meth:`complete_txn`).
        KIP-447: a request naming a generation or member is fenced like a plain commit (a stale
        member epoch of a consumer group is reported as ILLEGAL_GENERATION, as Kafka does)."""
        if unavailable := self._unavailable(group_id):
            return dict.fromkeys(offsets, unavailable)
        partition = self.partition_for(group_id)
        g = self.groups.get(group_id)
        if g is None and generation_id >= 0:
            return dict.fromkeys(offsets, ErrorCode.ILLEGAL_GENERATION)  # Kafka: no such group
        if g is not None and (generation_id >= 0 or member_id):
            if isinstance(g, ClassicGroup):
                err = g.validate_offset_commit(member_id, group_instance_id, generation_id)
            else:
                err = g.validate_offset_commit(member_id, generation_id, offsets)
                if err == ErrorCode.STALE_MEMBER_EPOCH:
                    # Kafka's OffsetMetadataManager.validateTransactionalOffsetCommit: producers
                    # know ILLEGAL_GENERATION (an abortable CommitFailedException: abort, rewind,
                    # retry); STALE_MEMBER_EPOCH is an unexpected error that kills the producer.
                    err = ErrorCode.ILLEGAL_GENERATION
            if err != ErrorCode.NONE:
                return dict.fromkeys(offsets, err)
        records, out = self._offset_records(group_id, offsets, -1)
        if not records:
            return out
        durable: Awaitable[None] | None = None
        async with self._lock(partition):
            try:
                write_txn = getattr(self.storage, "write_txn", None)
                if write_txn is not None:  # appended now, durable later (outside the lock)
                    durable = write_txn(partition, records, producer_id, producer_epoch)
                else:
                    await self.storage.append_txn(partition, records, producer_id, producer_epoch)
            except Exception as e:
                self._storage_failed(partition, e)
                code = coordinator_error(e)
                return {tp: (code if err == 0 else err) for tp, err in out.items()}
            # pending from the moment they are in the log: a marker replayed at load sees them too
            self.pending_txn.setdefault((partition, producer_id), []).extend(records)
        if durable is not None:
            try:
                await durable
            except Exception as e:
                self._storage_failed(partition, e)
                code = coordinator_error(e)
                return {tp: (code if err == 0 else err) for tp, err in out.items()}
        self.storage_log.ok("append to", f"__consumer_offsets-{partition}")
        if g is None and group_id not in self.groups and not self._unavailable(group_id):
            self.groups[group_id] = self._new_classic(group_id)  # (not if resigned meanwhile)
        return out

    async def complete_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker reached ``__consumer_offsets-<partition>``: materialise (commit) or
        drop (abort) the producer's pending offsets there."""
        async with self._lock(partition):
            pending = self.pending_txn.pop((partition, producer_id), [])
            if commit:
                for k, v in pending:
                    self._replay(k, v)

    def has_pending_txn(self, group_id: str, tp: TopicPartition) -> bool:
        """For OffsetFetch ``require_stable``: is a transactional commit for ``tp`` unfinished?"""
        partition = self.partition_for(group_id)
        key = encode_offset_commit_key(group_id, tp[0], tp[1])
        return any(
            k == key for (part, _pid), recs in self.pending_txn.items() if part == partition for k, _ in recs
        )

    def fetch_offsets(
        self,
        group_id: str,
        topics: list[tuple[str, list[int]]] | None,
        *,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[int, dict[str, dict[int, OffsetAndMetadata | None]]]:
        """OffsetFetch: (group error, topic -> partition -> committed or None).
        ``topics`` None means every partition the group committed."""
        if unavailable := self._unavailable(group_id):
            return unavailable, {}
        g = self.groups.get(group_id)
        if isinstance(g, ConsumerGroup):
            err = g.validate_offset_fetch(member_id, member_epoch)
            if err != ErrorCode.NONE:
                return err, {}
        committed = self.offsets.get(group_id, {})
        out: dict[str, dict[int, OffsetAndMetadata | None]] = {}
        if topics is None:
            for (t, p), om in sorted(committed.items()):
                out.setdefault(t, {})[p] = om
        else:
            for t, parts in topics:
                d = out.setdefault(t, {})
                for p in parts:
                    d[p] = committed.get((t, p))
        return ErrorCode.NONE, out

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete: (group error, per partition error)."""
        if unavailable := self._unavailable(group_id):
            return unavailable, {}

        def step(eff: Effects) -> tuple[int, dict[TopicPartition, int]]:
            g = self.groups.get(group_id)
            if g is None:
                return ErrorCode.GROUP_ID_NOT_FOUND, {}
            subscribed: set[str] | None = set()
            if isinstance(g, ClassicGroup):
                if g.state == GroupState.DEAD:
                    return ErrorCode.GROUP_ID_NOT_FOUND, {}
                if g.state != GroupState.EMPTY:
                    if g.protocol_type != "consumer" or g.subscribed_topics is None:
                        return ErrorCode.NON_EMPTY_GROUP, {}
                    subscribed = g.subscribed_topics
            else:
                subscribed = g.subscribed_topics()
            out: dict[TopicPartition, int] = {}
            committed = self.offsets.get(group_id, {})
            for tp in partitions:
                if subscribed and tp[0] in subscribed:
                    out[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                    continue
                out[tp] = ErrorCode.NONE
                if tp in committed:
                    eff.records.append((encode_offset_commit_key(group_id, tp[0], tp[1]), None))
            return ErrorCode.NONE, out

        (err, result), failed = await self._run(group_id, step)
        if failed:
            return failed, {}
        return err, result

    # ------------------------------------------------------------------ admin

    def describe_group(self, group_id: str, api_version: int = 5) -> dict[str, Any]:
        """DescribeGroups for one id, as Kafka 4's group coordinator answers it: a classic group
        is described; an id with no group, or with a consumer-protocol (KIP-848) group, is
        ``Dead`` with no error before v6 and GROUP_ID_NOT_FOUND with a message from v6 on
        (KIP-1043). The empty id is an id like any other (Kafka keeps it describable)."""
        base: dict[str, Any] = {"group_id": group_id, "error_code": ErrorCode.NONE, "error_message": None}
        empty = {"protocol_type": "", "protocol_data": "", "members": []}
        # DescribeGroupsRequest.getErrorDescribedGroupList: no state
        if unavailable := self._unavailable(group_id):
            return {**base, **empty, "error_code": unavailable, "group_state": ""}
        g = self.groups.get(group_id)
        if isinstance(g, ClassicGroup):
            return {**base, **g.describe()}
        if api_version < 6:
            return {**base, **empty, "group_state": "Dead"}
        message = f"Group {group_id} not found." if g is None else f"Group {group_id} is not a classic group."
        return {
            **base,
            **empty,
            "error_code": ErrorCode.GROUP_ID_NOT_FOUND,
            "error_message": message,
            "group_state": "",
        }

    def lag(self, end_offset: Callable[[str, int], int | None]) -> Iterator[tuple[str, str, int, int]]:
        """``(group, topic, partition, lag)`` for every committed offset of the groups coordinated
        here whose partition's end offset ``end_offset`` knows (None: not known here): the
        partition's high watermark minus the committed offset, 0 at least (the LAG column of
        kafka-consumer-groups --describe)."""
        for gid, committed in self.offsets.items():
            for (topic, partition), om in committed.items():
                end = end_offset(topic, partition)
                if end is not None:
                    yield gid, topic, partition, max(0, end - om.offset)

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[dict[str, str]]:
        want_states = {s.lower() for s in states}
        want_types = {t.lower() for t in types}
        out = []
        for gid, g in sorted(self.groups.items()):
            state = g.state.value if isinstance(g, ClassicGroup) else g.state
            if state == "Dead":
                continue
            if want_states and state.lower() not in want_states:
                continue
            if want_types and g.group_type not in want_types:
                continue
            out.append(
                {
                    "group_id": gid,
                    "protocol_type": g.protocol_type or "",
                    "group_state": state,
                    "group_type": g.group_type,
                }
            )
        return out

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for gid in group_ids:
            out[gid] = await self._delete_group(gid)
        return out

    async def _delete_group(self, group_id: str) -> int:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if unavailable := self._unavailable(group_id):
            return unavailable

        def step(eff: Effects) -> int:
            g = self.groups.get(group_id)
            if g is None or (isinstance(g, ClassicGroup) and g.state == GroupState.DEAD):
                return ErrorCode.GROUP_ID_NOT_FOUND
            if not g.is_empty() or (isinstance(g, ClassicGroup) and g.state != GroupState.EMPTY):
                return ErrorCode.NON_EMPTY_GROUP
            self._delete_records(eff, group_id, g)
            return ErrorCode.NONE

        err, failed = await self._run(group_id, step)
        return failed or err

    def _delete_records(self, eff: Effects, group_id: str, g: Group) -> None:
        for topic, partition in self.offsets.get(group_id, {}):
            eff.records.append((encode_offset_commit_key(group_id, topic, partition), None))
        if isinstance(g, ConsumerGroup):
            # the group's tombstones; their replay removes it
            eff.records.extend(consumer_group_records(group_id, g.view(), None, self._topic_id))
            return
        eff.records.append((encode_group_metadata_key(group_id), None))
        g.mark_dead(eff)

        def revive() -> None:
            if self.groups.get(group_id) is g:
                self.groups[group_id] = self._new_classic(group_id)

        eff.on_failure.append(revive)

    # ------------------------------------------------------------------ KIP-848

    async def consumer_group_heartbeat(
        self,
        group_id: str,
        *,
        member_id: str,
        member_epoch: int,
        instance_id: str | None = None,
        rack_id: str | None = None,
        rebalance_timeout_ms: int = -1,
        subscribed_topic_names: list[str] | None = None,
        subscribed_topic_regex: str | None = None,
        server_assignor: str | None = None,
        owned: Assignment | None = None,
        client_id: str = "",
        client_host: str = "",
        resolve: TopicResolver,
        catalog: TopicCatalog | None = None,
    ) -> HeartbeatResult:
        if not group_id:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, "group id must not be empty")
        if unavailable := self._unavailable(group_id):
            return HeartbeatResult(unavailable)

        def remembering(name: str) -> tuple[uuid.UUID, int] | None:
            r = resolve(name)
            if r is not None:
                self._remember_topic(name, r[0])
            return r

        def step(eff: Effects) -> HeartbeatResult:
            g = self.groups.get(group_id)
            replaces_classic = False
            if isinstance(g, ClassicGroup):
                if g.state not in (GroupState.EMPTY, GroupState.DEAD) or g.members:
                    # Kafka (group.consumer.migration.policy upgrade/bidirectional) would convert
                    # the group online and keep serving its classic members; strom converts only
                    # an empty classic group (GroupMetadataManager.maybeDeleteEmptyClassicGroup)
                    return HeartbeatResult(
                        ErrorCode.GROUP_ID_NOT_FOUND,
                        f"Cannot upgrade classic group {group_id} to consumer group: it has members "
                        "and online upgrade is not supported; the group converts once it is empty.",
                    )
                g, replaces_classic = None, True
            live = g
            if g is None:
                if member_epoch != 0:
                    return HeartbeatResult(
                        ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id} has no member {member_id}"
                    )
                work = ConsumerGroup(group_id, self.clock, self.config.consumer)
            else:
                work = g.clone()
            work.config = self._consumer_config(group_id)
            result = work.heartbeat(
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
                resolve=remembering,
                catalog=catalog,
            )
            if live is None and result.error != ErrorCode.NONE:
                return result  # a failed first heartbeat creates no group
            if replaces_classic:
                eff.records.append((encode_group_metadata_key(group_id), None))
            self._consumer_step(eff, group_id, live, work)
            return result

        result, failed = await self._run(group_id, step)
        if failed:
            return HeartbeatResult(failed, "could not write the group's state")
        return result

    def consumer_group_describe(self, group_id: str) -> dict[str, Any]:
        base: dict[str, Any] = {"group_id": group_id, "error_code": ErrorCode.NONE}
        if unavailable := self._unavailable(group_id):
            return {**base, "error_code": unavailable}
        g = self.groups.get(group_id)
        if not isinstance(g, ConsumerGroup) or g.dead:
            msg = (
                f"Group {group_id} not found." if g is None else f"Group {group_id} is not a consumer group."
            )
            return {**base, "error_code": ErrorCode.GROUP_ID_NOT_FOUND, "error_message": msg}
        return {
            **base,
            "group_state": g.state,
            "group_epoch": g.group_epoch,
            "assignment_epoch": g.assignment_epoch,
            "assignor_name": g.assignor_name(),
            "members": [g.describe_member(m) for m in g.members.values()],
        }

    # ------------------------------------------------------------------ timers

    def next_deadline(self) -> int | None:
        ds = [d for g in self.groups.values() if (d := g.next_deadline()) is not None]
        return min(ds) if ds else None

    async def tick(self) -> None:
        """Expire everything due at the clock's now (sessions, join/sync phases, offsets)."""
        now = self.clock.monotonic_ms()
        for gid, g in list(self.groups.items()):
            d = g.next_deadline()
            if d is None or d > now:
                continue
            if isinstance(g, ClassicGroup):
                grp = g

                def step(eff: Effects, gid: str = gid, grp: ClassicGroup = grp) -> None:
                    if self.groups.get(gid) is grp:  # (else resigned, or reloaded, meanwhile)
                        grp.tick(eff)

                await self._run(gid, step)
            else:

                def cstep(eff: Effects, gid: str = gid) -> None:
                    live = self.groups.get(gid)
                    if isinstance(live, ConsumerGroup):
                        work = live.clone()
                        work.tick()
                        self._consumer_step(eff, gid, live, work)

                await self._run(gid, cstep)
        if self.clock.time_ms() >= self._next_retention_check:
            self._next_retention_check = self.clock.time_ms() + self.config.retention_check_interval_ms
            await self.expire_offsets()

    async def expire_offsets(self) -> int:
        """Kafka's offset retention (KIP-211); returns how many offsets expired."""
        now = self.clock.time_ms()
        retention = self.config.offsets_retention_ms
        total = 0
        for gid in list(self.groups):
            g = self.groups.get(gid)
            if g is None:
                continue

            def step(eff: Effects, gid: str = gid, g: Group = g) -> int:
                if self.groups.get(gid) is not g:  # resigned, or reloaded, during an earlier step
                    return 0
                committed = self.offsets.get(gid, {})
                base: Callable[[OffsetAndMetadata], int] | None = None
                keep_topics: set[str] = set()
                if isinstance(g, ClassicGroup):
                    if g.state == GroupState.EMPTY:
                        ts = g.state_timestamp
                        base = (lambda om: ts) if g.protocol_type else (lambda om: om.commit_timestamp)
                    elif g.state == GroupState.STABLE and g.subscribed_topics is not None:
                        base = lambda om: om.commit_timestamp  # noqa: E731
                        keep_topics = g.subscribed_topics
                elif g.is_empty():
                    ts = g.state_timestamp
                    base = lambda om: ts  # noqa: E731
                else:
                    base = lambda om: om.commit_timestamp  # noqa: E731
                    keep_topics = g.subscribed_topics()
                if base is None:
                    return 0
                expired = []
                for tp, om in committed.items():
                    if tp[0] in keep_topics:
                        continue
                    if om.expire_timestamp >= 0:
                        if now >= om.expire_timestamp:
                            expired.append(tp)
                    elif now - base(om) >= retention:
                        expired.append(tp)
                for t, p in expired:
                    eff.records.append((encode_offset_commit_key(gid, t, p), None))
                if (
                    g.is_empty()
                    and len(expired) == len(committed)
                    and (not isinstance(g, ClassicGroup) or g.state == GroupState.EMPTY)
                ):
                    self._delete_records_group_only(eff, gid, g)
                return len(expired)

            n, failed = await self._run(gid, step)
            if not failed:
                total += n
        return total

    def _delete_records_group_only(self, eff: Effects, group_id: str, g: Group) -> None:
        if isinstance(g, ConsumerGroup):
            eff.records.extend(consumer_group_records(group_id, g.view(), None, self._topic_id))
            return
        eff.records.append((encode_group_metadata_key(group_id), None))
        g.mark_dead(eff)


