"""Share groups (KIP-932) on one node: membership, share sessions and share-partition state.

Three parts, each Kafka's:

* **Membership** (the group coordinator's share-group half): ShareGroupHeartbeat joins (epoch 0),
  heartbeats and leaves (epoch -1). Assignment is Kafka's simple assignor in its single-broker
  shape: every member is assigned every partition of the topics it subscribes to (share groups
  share partitions; the share-partition's locks keep members from getting the same record). The
  group epoch moves when members, subscriptions or partition counts change; a member's epoch is
  the group epoch its assignment was computed at (no revocation phase in share groups). Members
  that stop heartbeating for ``share.session.timeout.ms`` are removed. Membership lives in memory:
  after a restart members rejoin (their next heartbeat gets UNKNOWN_MEMBER_ID, as after a
  coordinator move); the groups themselves are rebuilt from the persisted share-partition state.
* **Share sessions** (``ShareSessionCache``): per (group, member), the partitions a ShareFetch
  works on and the expected session epoch (0 opens, -1 closes and releases the member's records,
  otherwise it must be the next epoch: INVALID_SHARE_SESSION_EPOCH / SHARE_SESSION_NOT_FOUND).
  A session also ends when its client connection closes, or when the member's group session
  times out; a member leaving the group keeps its session until it closes it (clients send their
  final acknowledgements after the leave heartbeat).
* **Share-partition state** (``SharePartition`` + the share coordinator): one
  :class:`~.share_partition.SharePartition` per (group, topic id, partition), initialised with
  ``share.auto.offset.reset`` (latest by default) when first assigned or fetched, and persisted
  to ``__share_group_state`` in Kafka's record formats: a ShareSnapshot (the whole window) first
  and every ``share.coordinator.snapshot.update.records.per.snapshot`` writes, ShareUpdate records
  in between. Unlike Kafka's delta updates (its state topic is pruned with DeleteRecords behind
  each snapshot), a strom ShareUpdate holds every change since the last snapshot, because the
  topic is compacted: the newest snapshot and the newest update per share-partition are all that
  replay needs. Acquisitions are persisted too (as AVAILABLE with the new delivery count), so
  the delivery count limit survives crashes. An operation changes the state, appends its
  record durably, and only then answers; if the append fails the state is put back and the
  client gets an error. Start-up replays the topic, so a restart (clean or kill -9) loses no
  acknowledgement and never redelivers what was acknowledged; records that were merely acquired
  become available again with their delivery counts (locks do not survive restarts).

Error contract: methods return Kafka error codes and never raise for client input; storage
failures become COORDINATOR_NOT_AVAILABLE (retriable) with the state unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..clock import Clock, RealClock
from ..config_schema import GROUP_CONFIGS, broker_default, to_config_string
from ..protocol.errors import ErrorCode
from ..rate_limited_log import RateLimitedLog
from .records import RecordFormatError
from .share_partition import AckType, AcquiredRange, RecordState, SharePartition
from .share_records import (
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    ShareStateKey,
    ShareStateValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    state_partition_for,
)
from .storage import OffsetsStorage, StoredEntry

log = logging.getLogger(__name__)

SPKey = tuple[str, uuid.UUID, int]  # group, topic id, partition
TopicResolver = Callable[[str], "tuple[uuid.UUID, int] | None"]


class LogView(Protocol):
    """What the share coordinator needs to know about the data partitions."""

    def topic_name(self, topic_id: uuid.UUID) -> str | None: ...

    def partitions(self, topic_id: uuid.UUID) -> int | None: ...

    def log_start_offset(self, topic_id: uuid.UUID, partition: int) -> int: ...

    def initial_offset(self, topic_id: uuid.UUID, partition: int, strategy: str) -> int: ...


@dataclass
class ShareMember:
    member_id: str
    member_epoch: int
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed: tuple[str, ...]
    assignment: dict[uuid.UUID, list[int]] = field(default_factory=dict)
    session_deadline: int = 0


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}


@dataclass
class ShareSession:
    epoch: int  # the epoch the next request must carry
    partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)
    connection_id: str = ""  # the client connection it was last used on


@dataclass
class HeartbeatResult:
    error: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: list[tuple[uuid.UUID, list[int]]] | None = None


@dataclass
class ShareConfig:
    num_partitions: int = broker_default("share.coordinator.state.topic.num.partitions")
    max_size: int = broker_default("group.share.max.size")
    snapshot_every: int = broker_default("share.coordinator.snapshot.update.records.per.snapshot")
    enabled: bool = broker_default("group.share.enable")

    @classmethod
    def from_broker(cls, cfg: Any) -> ShareConfig:
        def get(name: str) -> Any:
            try:
                v = cfg[name]
            except (KeyError, TypeError):
                return broker_default(name)
            return broker_default(name) if v is None else v

        return cls(
            num_partitions=int(get("share.coordinator.state.topic.num.partitions")),
            max_size=int(get("group.share.max.size")),
            snapshot_every=max(int(get("share.coordinator.snapshot.update.records.per.snapshot")), 1),
            enabled=bool(get("group.share.enable")),
        )


# a share group's configs without a group-config source (the defaults of Kafka's GroupConfig)
DEFAULT_GROUP_CONFIG = {
    name: to_config_string(d.default) or ""
    for name, d in GROUP_CONFIGS.items()
    if name.startswith("share.")
}


def _expand(sp: SharePartition) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for first, last, state, count in sp.state_batches():
        for off in range(first, last + 1):
            out[off] = (state, count)
    return out


class ShareCoordinator:
    """See the module doc. Construct, ``await start()`` (replays the state topic), use, ``stop()``."""

    def __init__(
        self,
        storage: OffsetsStorage,
        logs: LogView,
        *,
        config: ShareConfig | None = None,
        clock: Clock | None = None,
        group_config: Callable[[str], dict[str, str]] | None = None,
        notify: Callable[[uuid.UUID, int], None] | None = None,
        run_timer: bool = True,
    ) -> None:
        self.storage = storage
        self.logs = logs
        self.config = config or ShareConfig()
        self.clock: Clock = clock or RealClock()
        self._group_config = group_config
        self.notify = notify or (lambda tid, p: None)
        self.run_timer = run_timer
        self.groups: dict[str, ShareGroup] = {}
        self.partitions: dict[SPKey, SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.storage_log = RateLimitedLog(log, self.clock)
        self._locks: dict[SPKey, asyncio.Lock] = {}
        self._snapshot_epoch: dict[SPKey, int] = {}
        # the state each share-partition's last snapshot holds (start, batches, state epoch)
        self._snapshot_base: dict[SPKey, tuple[int, list[tuple[int, int, int, int]], int]] = {}
        self._updates_since_snapshot: dict[SPKey, int] = {}
        self._timer: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Event | None = None
        self._background: set[asyncio.Task[None]] = set()
        # is a group id taken by another kind of group (classic/consumer)?
        self.other_group_exists: Callable[[str], bool] = lambda g: False

    # ------------------------------------------------------------------ config

    def group_config(self, group_id: str) -> dict[str, str]:
        if self._group_config is None:
            return dict(DEFAULT_GROUP_CONFIG)
        return {**DEFAULT_GROUP_CONFIG, **self._group_config(group_id)}

    def lock_duration_ms(self, group_id: str) -> int:
        return int(self.group_config(group_id)["share.record.lock.duration.ms"])

    def _tune(self, group_id: str, sp: SharePartition) -> dict[str, str]:
        cfg = self.group_config(group_id)
        sp.delivery_count_limit = int(cfg["share.delivery.count.limit"])
        sp.max_in_flight = int(cfg["share.partition.max.record.locks"])
        return cfg

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        read = getattr(self.storage, "read_entries", None)
        for p in range(self.config.num_partitions):
            entries: Iterable[Any] = read(p) if read is not None else self.storage.read_all(p)
            for e in entries:
                entry = e if isinstance(e, StoredEntry) else StoredEntry(e[0], e[1])
                if entry.key is None or entry.transactional:
                    continue
                try:
                    self._replay(entry.key, entry.value)
                except (RecordFormatError, ValueError) as ex:
                    log.warning("skipping malformed __share_group_state-%d record: %s", p, ex)
            await asyncio.sleep(0)
        for group, _tid, _p in self.partitions:
            self.groups.setdefault(group, ShareGroup(group))
        if self.run_timer:
            self._wakeup = asyncio.Event()
            self._timer = asyncio.create_task(self._timer_loop(), name="share-coordinator-timer")

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
            self._timer = None

    def _replay(self, key: bytes, value: bytes | None) -> None:
        k = decode_key(key)
        spk = (k.group, k.topic_id, k.partition)
        if value is None:
            if k.kind == SHARE_SNAPSHOT:
                self.partitions.pop(spk, None)
                self._snapshot_base.pop(spk, None)
            return
        v = decode_value(k.kind, value)
        self._snapshot_epoch[spk] = v.snapshot_epoch
        if k.kind == SHARE_SNAPSHOT:
            self._snapshot_base[spk] = (v.start_offset, v.batches, v.state_epoch)
            self.partitions[spk] = SharePartition.restore(
                v.start_offset,
                v.batches,
                state_epoch=v.state_epoch,
                delivery_count_limit=1 << 15,
                max_in_flight=1 << 30,
            )
            self._updates_since_snapshot[spk] = 0
        else:
            base = self._snapshot_base.get(spk)
            if base is None or spk not in self.partitions:
                return  # an update without its snapshot (Kafka ignores it too)
            # an update holds every change since the snapshot: apply it to the snapshot
            sp = self.partitions[spk] = SharePartition.restore(
                base[0], base[1], state_epoch=base[2], delivery_count_limit=1 << 15, max_in_flight=1 << 30
            )
            if v.start_offset >= 0:
                if v.start_offset < sp.start_offset:
                    sp.reset(v.start_offset)
                else:
                    sp.move_start(v.start_offset)
            sp.apply_batches(v.batches)
            self._updates_since_snapshot[spk] = self._updates_since_snapshot.get(spk, 0) + 1

    def _lock(self, key: SPKey) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    # ------------------------------------------------------------------ persistence

    def _records_for(
        self, key: SPKey, before: SharePartition | None, after: SharePartition | None
    ) -> list[tuple[bytes, bytes | None]]:
        group, tid, p = key
        if after is None:
            return [
                (encode_key(ShareStateKey(SHARE_SNAPSHOT, group, tid, p)), None),
                (encode_key(ShareStateKey(SHARE_UPDATE, group, tid, p)), None),
            ]
        epoch = self._snapshot_epoch.get(key, -1)
        updates = self._updates_since_snapshot.get(key, 0)
        base = self._snapshot_base.get(key)
        if (
            before is None
            or base is None
            or updates + 1 >= self.config.snapshot_every
            or after.start_offset < before.start_offset
        ):
            epoch += 1
            batches = after.state_batches()
            value = ShareStateValue(epoch, after.state_epoch, 0, after.start_offset, batches)
            return [
                (
                    encode_key(ShareStateKey(SHARE_SNAPSHOT, group, tid, p)),
                    encode_value(SHARE_SNAPSHOT, value),
                )
            ]
        new = _expand(after)
        if after.start_offset == before.start_offset and _expand(before) == new:
            return []
        # An update holds every change since the last snapshot (not only this step's), so the
        # snapshot and the newest update alone rebuild the state: log compaction keeps just
        # those two per share-partition.
        base_start, base_batches, _se = base
        old: dict[int, tuple[int, int]] = {}
        for first, last, state, count in base_batches:
            for off in range(first, last + 1):
                old[off] = (state, count)
        changed = sorted(o for o, st in new.items() if old.get(o) != st)
        upd: list[tuple[int, int, int, int]] = []
        for off in changed:
            state, count = new[off]
            if upd and upd[-1][1] == off - 1 and upd[-1][2:] == (state, count):
                upd[-1] = (upd[-1][0], off, state, count)
            else:
                upd.append((off, off, state, count))
        start = after.start_offset if after.start_offset != base_start else -1
        value = ShareStateValue(max(epoch, 0), -1, 0, start, upd)
        return [(encode_key(ShareStateKey(SHARE_UPDATE, group, tid, p)), encode_value(SHARE_UPDATE, value))]

    async def _persist(self, key: SPKey, records: list[tuple[bytes, bytes | None]]) -> bool:
        if not records:
            return True
        part = state_partition_for(key[0], key[1], key[2], self.config.num_partitions)
        try:
            await self.storage.append(part, records)
        except Exception as e:
            self.storage_log.failed(
                "append to",
                f"__share_group_state-{part}",
                e,
                "the share-partition state is unchanged; clients retry",
            )
            return False
        self.storage_log.ok("append to", f"__share_group_state-{part}")
        for k, v in records:
            kk = decode_key(k)
            if v is None:
                self._snapshot_base.pop(key, None)
                self._updates_since_snapshot.pop(key, None)
                continue
            vv = decode_value(kk.kind, v)
            self._snapshot_epoch[key] = vv.snapshot_epoch
            if kk.kind == SHARE_SNAPSHOT:
                self._updates_since_snapshot[key] = 0
                self._snapshot_base[key] = (vv.start_offset, vv.batches, vv.state_epoch)
            else:
                self._updates_since_snapshot[key] = self._updates_since_snapshot.get(key, 0) + 1
        return True

    async def _mutate(self, key: SPKey, op: Callable[[SharePartition], Any]) -> tuple[Any, bool]:
        """Run ``op`` on the share-partition (which must exist) and persist what changed; on a
        failed append the partition is put back as it was. Caller holds the key's lock."""
        sp = self.partitions[key]
        before = copy.deepcopy(sp)
        result = op(sp)
        ok = await self._persist(key, self._records_for(key, before, sp))
        if not ok:
            self.partitions[key] = before
        return result, ok

    async def _ensure_partition(self, key: SPKey) -> SharePartition | None:
        """The share-partition, initialised (and persisted) with share.auto.offset.reset."""
        sp = self.partitions.get(key)
        if sp is not None:
            return sp
        group, tid, p = key
        cfg = self.group_config(group)
        try:
            start = self.logs.initial_offset(tid, p, cfg["share.auto.offset.reset"])
        except Exception:
            return None
        sp = SharePartition(start)
        self._tune(group, sp)
        if not await self._persist(key, self._records_for(key, None, sp)):
            return None
        self.partitions[key] = sp
        self.groups.setdefault(group, ShareGroup(group))
        return sp

    # ------------------------------------------------------------------ membership

    async def heartbeat(
        self,
        group_id: str,
        *,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed_topic_names: list[str] | None,
        client_id: str,
        client_host: str,
        resolve: TopicResolver,
    ) -> HeartbeatResult:
        if not group_id:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if not member_id:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        if member_epoch < -1:
            return HeartbeatResult(
                ErrorCode.INVALID_REQUEST, f"MemberEpoch is {member_epoch}, but must be >= -1."
            )
        if member_epoch == 0 and not subscribed_topic_names:
            return HeartbeatResult(
                ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request."
            )
        if self.other_group_exists(group_id):
            return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        cfg = self.group_config(group_id)
        interval = int(cfg["share.heartbeat.interval.ms"])
        now = self.clock.monotonic_ms()
        g = self.groups.get(group_id)
        if member_epoch == -1:
            if g is not None and member_id in g.members:
                del g.members[member_id]
                g.group_epoch += 1
                g.assignment_epoch = g.group_epoch
                # its share session stays: a client may send its final acknowledgements (epoch
                # -1) after leaving; records it still holds are released when that session
                # closes or their locks expire
            return HeartbeatResult(ErrorCode.NONE, None, member_id, -1, interval)
        if g is None:
            if member_epoch != 0:
                return HeartbeatResult(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"Group {group_id} has no member {member_id}."
                )
            g = self.groups[group_id] = ShareGroup(group_id)
        m = g.members.get(member_id)
        if m is None:
            if member_epoch != 0:
                return HeartbeatResult(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}."
                )
            if len(g.members) >= self.config.max_size:
                return HeartbeatResult(
                    ErrorCode.GROUP_MAX_SIZE_REACHED,
                    f"The share group has reached its maximum capacity of {self.config.max_size} members.",
                )
            m = g.members[member_id] = ShareMember(
                member_id, 0, rack_id, client_id, client_host, tuple(subscribed_topic_names or ())
            )
            g.group_epoch += 1
        elif member_epoch != 0 and member_epoch != m.member_epoch:
            return HeartbeatResult(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The share group member has a smaller member epoch ({member_epoch}) than the one known "
                f"by the group coordinator ({m.member_epoch}). The member must abandon all its partitions "
                "and rejoin.",
            )
        if subscribed_topic_names is not None and tuple(subscribed_topic_names) != m.subscribed:
            m.subscribed = tuple(subscribed_topic_names)
            g.group_epoch += 1
        if rack_id is not None:
            m.rack_id = rack_id
        m.client_id, m.client_host = client_id, client_host
        target: dict[uuid.UUID, list[int]] = {}
        for name in sorted(set(m.subscribed)):
            r = resolve(name)
            if r is not None:
                target[r[0]] = list(range(r[1]))
        if target != m.assignment:
            if m.member_epoch == g.group_epoch:
                g.group_epoch += 1
            m.assignment = target
        m.member_epoch = g.group_epoch
        g.assignment_epoch = g.group_epoch
        m.session_deadline = now + int(cfg["share.session.timeout.ms"])
        for tid, parts in target.items():  # initialise share-partitions on assignment (Kafka)
            for p in parts:
                if (group_id, tid, p) not in self.partitions:
                    async with self._lock((group_id, tid, p)):
                        await self._ensure_partition((group_id, tid, p))
        if self._wakeup is not None:
            self._wakeup.set()
        return HeartbeatResult(
            ErrorCode.NONE, None, member_id, m.member_epoch, interval, sorted(target.items())
        )

    async def _member_gone(self, group_id: str, member_id: str) -> None:
        """A member's session timed out (fenced): close its share session, release what it holds."""
        self.sessions.pop((group_id, member_id), None)
        await self.release_member(group_id, member_id)

    async def release_member(self, group_id: str, member_id: str) -> None:
        for key in [k for k in self.partitions if k[0] == group_id]:
            async with self._lock(key):
                sp = self.partitions.get(key)
                if sp is None or not any(
                    r.member_id == member_id for r in sp.in_flight.values() if r.state == RecordState.ACQUIRED
                ):
                    continue
                self._tune(group_id, sp)
                await self._mutate(key, lambda s: s.release_member(member_id))
            self.notify(key[1], key[2])

    # ------------------------------------------------------------------ sessions

    def open_session(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        add: Iterable[tuple[uuid.UUID, int]],
        forget: Iterable[tuple[uuid.UUID, int]],
        connection_id: str = "",
    ) -> tuple[int, ShareSession | None]:
        """Validate a ShareFetch's session epoch and update the session (Kafka's
        ``ShareSessionCache``): (error, session). Epoch -1 returns the closing session."""
        key = (group_id, member_id)
        if epoch == 0:
            fresh = self.sessions[key] = ShareSession(1, set(add), connection_id)
            return ErrorCode.NONE, fresh
        s = self.sessions.get(key)
        if s is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND, None
        if epoch == -1:
            del self.sessions[key]
            return ErrorCode.NONE, s
        if epoch != s.epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None
        s.epoch = 1 if s.epoch >= 2**31 - 1 else s.epoch + 1
        if connection_id:
            s.connection_id = connection_id
        s.partitions.update(add)
        s.partitions.difference_update(forget)
        return ErrorCode.NONE, s

    def check_ack_session(self, group_id: str, member_id: str, epoch: int, connection_id: str = "") -> int:
        """ShareAcknowledge: epoch 0 is invalid, -1 closes, else the next epoch."""
        if epoch == 0:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH
        err, _s = self.open_session(group_id, member_id, epoch, (), (), connection_id)
        return err

    def topic_deleted(self, topic_id: uuid.UUID) -> None:
        """A topic was deleted: its share-partitions' state goes (tombstones in the background),
        as Kafka's group coordinator deletes the share state of deleted topics."""

        async def drop() -> None:
            for key in [k for k in self.partitions if k[1] == topic_id]:
                async with self._lock(key):
                    if key in self.partitions and await self._persist(
                        key, self._records_for(key, self.partitions[key], None)
                    ):
                        self.partitions.pop(key, None)

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(drop())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def connection_closed(self, connection_id: str) -> None:
        """The client connection of share sessions closed: the sessions end and their members'
        records are released (Kafka closes a share session with its connection)."""
        gone = [k for k, s in self.sessions.items() if s.connection_id == connection_id]
        for group_id, member_id in gone:
            del self.sessions[(group_id, member_id)]
            task = asyncio.get_running_loop().create_task(self.release_member(group_id, member_id))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ records

    async def acquire(
        self,
        group_id: str,
        member_id: str,
        topic_id: uuid.UUID,
        partition: int,
        read: Callable[[int], tuple[bytes, int] | tuple[bytes, int, list[tuple[int, int]]] | None],
        max_records: int,
    ) -> tuple[int, bytes | None, list[AcquiredRange]]:
        """Acquire records of one partition for a member: ``read(offset)`` returns the log's
        bytes from ``offset``, the last offset they hold and optionally offset ranges never to
        deliver (aborted transactions under read_committed: archived); None: nothing there.
        Returns (error, bytes, acquired ranges)."""
        key = (group_id, topic_id, partition)
        async with self._lock(key):
            sp = await self._ensure_partition(key)
            if sp is None:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, None, []
            cfg = self._tune(group_id, sp)
            try:
                log_start = self.logs.log_start_offset(topic_id, partition)
            except Exception:
                log_start = -1
            if log_start > sp.start_offset:
                _r, ok = await self._mutate(key, lambda s: s.move_start(log_start))
                sp = self.partitions[key]
            start = sp.next_fetch_offset()
            if start is None:
                return ErrorCode.NONE, None, []
            got = read(start)
            if got is None:
                return ErrorCode.NONE, None, []
            data, last, *rest = got
            skips: list[tuple[int, int]] = list(rest[0]) if rest else []
            lock_ms = int(cfg["share.record.lock.duration.ms"])
            now = self.clock.monotonic_ms()

            def op(s: SharePartition) -> list[AcquiredRange]:
                got_ranges = s.acquire(
                    member_id, start, last, max_records=max_records, now=now, lock_ms=lock_ms
                )
                if not skips:
                    return got_ranges
                # read_committed: records of aborted transactions are archived, never delivered
                skipped: set[int] = set()
                for r in got_ranges:
                    for lo, hi in skips:
                        a, b = max(lo, r.first_offset), min(hi, r.last_offset)
                        if a <= b:
                            s.acknowledge(member_id, a, b, [AckType.GAP], now=now, lock_ms=lock_ms)
                            skipped.update(range(a, b + 1))
                out: list[AcquiredRange] = []
                for r in got_ranges:
                    for off in range(r.first_offset, r.last_offset + 1):
                        if off in skipped:
                            continue
                        if (
                            out
                            and out[-1].last_offset == off - 1
                            and out[-1].delivery_count == r.delivery_count
                        ):
                            out[-1] = AcquiredRange(out[-1].first_offset, off, r.delivery_count)
                        else:
                            out.append(AcquiredRange(off, off, r.delivery_count))
                return out

            ranges, ok = await self._mutate(key, op)
            if not ok:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, None, []
        if ranges and self._wakeup is not None:
            self._wakeup.set()
        return ErrorCode.NONE, (data if ranges else None), ranges

    async def acknowledge(
        self,
        group_id: str,
        member_id: str,
        topic_id: uuid.UUID,
        partition: int,
        batches: list[tuple[int, int, list[int]]],
    ) -> int:
        """Apply a partition's acknowledgement batches; durable before it returns NONE."""
        key = (group_id, topic_id, partition)
        async with self._lock(key):
            sp = self.partitions.get(key)
            if sp is None:
                return ErrorCode.INVALID_RECORD_STATE
            cfg = self._tune(group_id, sp)
            lock_ms = int(cfg["share.record.lock.duration.ms"])
            now = self.clock.monotonic_ms()

            def op(s: SharePartition) -> int:
                err: int = ErrorCode.NONE
                for first, last, types in batches:
                    e = s.acknowledge(member_id, first, last, types, now=now, lock_ms=lock_ms)
                    if e != ErrorCode.NONE:
                        err = e
                return err

            err, ok = await self._mutate(key, op)
        self.notify(topic_id, partition)
        return err if ok else ErrorCode.COORDINATOR_NOT_AVAILABLE

    async def expire(self) -> None:
        """Release timed-out acquisition locks and remove members whose session expired."""
        now = self.clock.monotonic_ms()
        for gid, g in list(self.groups.items()):
            for mid, m in list(g.members.items()):
                if m.session_deadline <= now:
                    log.info("share group %s: member %s session timed out", gid, mid)
                    del g.members[mid]
                    g.group_epoch += 1
                    g.assignment_epoch = g.group_epoch
                    await self._member_gone(gid, mid)
        for key, sp in list(self.partitions.items()):
            d = sp.next_deadline()
            if d is None or d > now:
                continue
            async with self._lock(key):
                if key not in self.partitions:
                    continue
                self._tune(key[0], self.partitions[key])
                n, _ok = await self._mutate(key, lambda s: s.expire_locks(now))
            if n:
                self.notify(key[1], key[2])

    def next_deadline(self) -> int | None:
        ds = [d for sp in self.partitions.values() if (d := sp.next_deadline()) is not None]
        ds += [m.session_deadline for g in self.groups.values() for m in g.members.values()]
        return min(ds) if ds else None

    async def _timer_loop(self) -> None:
        assert self._wakeup is not None
        while True:
            try:
                await self.expire()
            except Exception:
                log.exception("share coordinator timer step failed")
            nxt = self.next_deadline()
            now = self.clock.monotonic_ms()
            delay = 1.0 if nxt is None else min(max((nxt - now) / 1000.0, 0.005), 1.0)
            self._wakeup.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), delay)

    # ------------------------------------------------------------------ admin

    def list_groups(self) -> list[ShareGroup]:
        return [g for _gid, g in sorted(self.groups.items())]

    def describe(self, group_id: str) -> dict[str, Any]:
        g = self.groups.get(group_id)
        if g is None:
            msg = (
                f"Group {group_id} is not a share group."
                if self.other_group_exists(group_id)
                else f"Group {group_id} not found."
            )
            return {
                "group_id": group_id,
                "error_code": ErrorCode.GROUP_ID_NOT_FOUND,
                "error_message": msg,
                "group_state": "Dead",
            }
        members = []
        for m in g.members.values():
            members.append(
                {
                    "member_id": m.member_id,
                    "rack_id": m.rack_id,
                    "member_epoch": m.member_epoch,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed),
                    "assignment": {
                        "topic_partitions": [
                            {
                                "topic_id": tid,
                                "topic_name": self.logs.topic_name(tid) or "",
                                "partitions": parts,
                            }
                            for tid, parts in sorted(m.assignment.items())
                        ]
                    },
                }
            )
        return {
            "group_id": group_id,
            "error_code": ErrorCode.NONE,
            "group_state": g.state,
            "group_epoch": g.group_epoch,
            "assignment_epoch": g.assignment_epoch,
            "assignor_name": "simple",
            "members": members,
        }

    def start_offsets(self, group_id: str) -> dict[tuple[uuid.UUID, int], SharePartition]:
        return {(t, p): sp for (g, t, p), sp in self.partitions.items() if g == group_id}

    async def alter_offsets(
        self, group_id: str, offsets: dict[tuple[uuid.UUID, int], int]
    ) -> tuple[int, str | None, dict[tuple[uuid.UUID, int], int]]:
        """AlterShareGroupOffsets: the group must be empty (or unknown)."""
        g = self.groups.get(group_id)
        if g is not None and g.members:
            return ErrorCode.NON_EMPTY_GROUP, "The group is not empty.", {}
        if self.other_group_exists(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.", {}
        out: dict[tuple[uuid.UUID, int], int] = {}
        for (tid, p), off in offsets.items():
            key = (group_id, tid, p)
            async with self._lock(key):
                before = self.partitions.get(key)
                sp = SharePartition(off, state_epoch=(before.state_epoch + 1) if before else 0)
                self._tune(group_id, sp)
                ok = await self._persist(key, self._records_for(key, None, sp))
                if ok:
                    self.partitions[key] = sp
                out[(tid, p)] = ErrorCode.NONE if ok else ErrorCode.COORDINATOR_NOT_AVAILABLE
        self.groups.setdefault(group_id, ShareGroup(group_id))
        return ErrorCode.NONE, None, out

    async def delete_offsets(
        self, group_id: str, topic_ids: list[uuid.UUID]
    ) -> tuple[int, str | None, dict[uuid.UUID, int]]:
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", {}
        if g.members:
            return ErrorCode.NON_EMPTY_GROUP, "The group is not empty.", {}
        out: dict[uuid.UUID, int] = {}
        for tid in topic_ids:
            out[tid] = ErrorCode.NONE
            for key in [k for k in self.partitions if k[0] == group_id and k[1] == tid]:
                async with self._lock(key):
                    if await self._persist(key, self._records_for(key, self.partitions.get(key), None)):
                        self.partitions.pop(key, None)
                    else:
                        out[tid] = ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE, None, out

    async def delete_group(self, group_id: str) -> int:
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if g.members:
            return ErrorCode.NON_EMPTY_GROUP
        for key in [k for k in self.partitions if k[0] == group_id]:
            async with self._lock(key):
                if not await self._persist(key, self._records_for(key, self.partitions.get(key), None)):
                    return ErrorCode.COORDINATOR_NOT_AVAILABLE
                self.partitions.pop(key, None)
        self.groups.pop(group_id, None)
        return ErrorCode.NONE
