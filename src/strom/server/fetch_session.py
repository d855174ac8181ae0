"""Incremental fetch sessions (KIP-227), Kafka's ``FetchSession``/``FetchSessionCache``.

Theory of operation
-------------------
A consumer or follower that reads many partitions sends them all only once: its first Fetch
(session id 0, epoch 0) creates a session on the broker, which keeps, per partition, what the
client last asked for (fetch offset, max bytes, epochs). Each later Fetch names the session and
its next epoch and carries only the partitions whose request changed (added or updated) and the
ones it no longer wants (``forgotten_topics_data``); the broker reads every partition of the
session and answers only those with something new: records, an error, or a high watermark, last
stable offset or log start offset it has not sent yet. A consumer of a thousand mostly idle
partitions then pays for the few that move, on both sides.

Request kinds (``session_id``, ``session_epoch``), as Kafka's ``FetchMetadata``:

* (0, -1): sessionless full fetch (the only kind before); answered with session id 0.
* (0, 0) or (X, 0): full fetch opening a new session (closing X first); the answer carries the
  new session id, or 0 when the cache admits none (the client then goes on sessionless).
* (X, -1): closes X, then a sessionless full fetch.
* (X, n > 0): incremental; FETCH_SESSION_ID_NOT_FOUND for an unknown X,
  INVALID_FETCH_SESSION_EPOCH when n is not the epoch the session expects (the client then
  starts over with a full fetch). A session made with topic names cannot go on with topic ids
  or the reverse: FETCH_SESSION_TOPIC_ID_ERROR.

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's default 1000).
When full, a new session takes the place of one unused for ``eviction_ms`` (Kafka: 2 minutes),
else a follower's session (privileged) that of a consumer, else a consumer's session that of a
smaller consumer session; otherwise the client is answered sessionless. Partitions that return
records move to the end of the session's order, so that under ``max_bytes`` the others get their
turn (Kafka's fairness rule).

The module is sans-IO: the clock and the id source are injected.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..protocol.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000  # Kafka's FetchSessionCache eviction (min.incremental.fetch.session.eviction.ms)

TopicKey = Any  # a topic name (requests before v13) or a topic id (uuid.UUID, v13+)
PartitionKey = tuple[Any, int]


@dataclass(slots=True)
class CachedPartition:
    """What the client last asked for one partition, and what it was last told."""

    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # the follower's (Kafka's fetcher sends it)
    # last sent: -2 before the first answer, so that the first read always reports
    high_watermark: int = -2
    last_stable_offset: int = -2
    leader_log_start_offset: int = -2


@dataclass
class FetchSession:
    id: int
    privileged: bool  # a follower's: consumers' sessions never evict it
    uses_topic_ids: bool
    created_ms: int
    last_used_ms: int
    epoch: int = 1  # the epoch the next incremental request must carry
    partitions: dict[PartitionKey, CachedPartition] = field(default_factory=dict)

    def next_epoch(self) -> None:
        self.epoch = 1 if self.epoch >= 0x7FFFFFFF else self.epoch + 1

    def update(self, changed: Iterable[tuple[PartitionKey, CachedPartition]],
               forgotten: Iterable[PartitionKey]) -> None:
        """Apply an incremental request: added or updated partitions keep their place (new
        ones go to the end), forgotten ones leave."""
        for key in forgotten:
            self.partitions.pop(key, None)
        for key, req in changed:
            old = self.partitions.get(key)
            if old is None:
                self.partitions[key] = req
            else:  # the request's fields; what was last sent stays
                old.fetch_offset = req.fetch_offset
                old.max_bytes = req.max_bytes
                old.current_leader_epoch = req.current_leader_epoch
                old.last_fetched_epoch = req.last_fetched_epoch
                old.log_start_offset = req.log_start_offset

    def to_report(self, key: PartitionKey, *, has_records: bool, error_code: int, high_watermark: int,
                  last_stable_offset: int, log_start_offset: int, forced: bool) -> bool:
        """Whether an incremental answer includes this partition (Kafka's
        ``maybeUpdateResponseData``); notes what it is told when it does."""
        p = self.partitions.get(key)
        if p is None:
            return True
        if (has_records or error_code != ErrorCode.NONE or forced
                or high_watermark != p.high_watermark or last_stable_offset != p.last_stable_offset
                or log_start_offset != p.leader_log_start_offset):
            p.high_watermark = high_watermark
            p.last_stable_offset = last_stable_offset
            p.leader_log_start_offset = log_start_offset
            return True
        return False

    def note_sent(self, key: PartitionKey, high_watermark: int, last_stable_offset: int,
                  log_start_offset: int) -> None:
        """A full answer told the client these values."""
        p = self.partitions.get(key)
        if p is not None:
            p.high_watermark = high_watermark
            p.last_stable_offset = last_stable_offset
            p.leader_log_start_offset = log_start_offset

    def rotate(self, served: Iterable[PartitionKey]) -> None:
        """Partitions that returned records go to the end of the order (fairness)."""
        for key in served:
            p = self.partitions.pop(key, None)
            if p is not None:
                self.partitions[key] = p


class FetchSessionCache:
    """The broker's sessions, bounded by ``max_slots``; see the module doc for eviction."""

    def __init__(self, max_slots: int, clock_ms: Callable[[], int], *,
                 eviction_ms: int = EVICTION_MS, rng: random.Random | None = None) -> None:
        self.max_slots = max(0, max_slots)
        self.clock_ms = clock_ms
        self.eviction_ms = eviction_ms
        self.rng = rng or random.Random()
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        self.created = 0
        self.incremental_fetches = 0

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def partitions_cached(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def touch(self, session: FetchSession) -> None:
        """An incremental fetch used ``session``."""
        session.last_used_ms = self.clock_ms()
        self.incremental_fetches += 1

    def _new_id(self) -> int:
        while True:
            sid = self.rng.randint(1, 0x7FFFFFFF)
            if sid not in self.sessions:
                return sid

    def _evictable(self, privileged: bool, size: int, now: int) -> FetchSession | None:
        if not self.sessions:
            return None
        oldest = min(self.sessions.values(), key=lambda s: s.last_used_ms)
        if now - oldest.last_used_ms > self.eviction_ms:
            return oldest  # stale
        consumers = [s for s in self.sessions.values() if not s.privileged]
        if not consumers:
            return None
        if privileged:
            return min(consumers, key=lambda s: (len(s.partitions), s.last_used_ms))
        smallest = min(consumers, key=lambda s: (len(s.partitions), s.last_used_ms))
        return smallest if len(smallest.partitions) < size else None

    def create(self, *, privileged: bool, uses_topic_ids: bool,
               partitions: dict[PartitionKey, CachedPartition]) -> FetchSession | None:
        """A new session holding ``partitions``, or None when the cache admits none."""
        if self.max_slots <= 0:
            return None
        now = self.clock_ms()
        if len(self.sessions) >= self.max_slots:
            victim = self._evictable(privileged, len(partitions), now)
            if victim is None:
                return None
            del self.sessions[victim.id]
            self.evictions += 1
        s = FetchSession(self._new_id(), privileged, uses_topic_ids, now, now, partitions=partitions)
        self.sessions[s.id] = s
        self.created += 1
        return s
