"""Followers fetching from leaders (Kafka's ``ReplicaFetcherManager`` and ``ReplicaFetcherThread``).

Theory of operation
-------------------
* **One fetcher per (leader, fetcher id)**: a partition this broker follows is given to the
  fetcher of its leader numbered ``hash(partition) % num.replica.fetchers``; each fetcher is one
  asyncio task with one connection to the leader's endpoint on the broker's default (inter-broker)
  listener. A partition moves between fetchers when its leader changes; a fetcher with no
  partitions ends.
* **The fetch**: Fetch v12..17 with the replica's id (``replica_state`` from v15), topic ids from
  v13, per partition ``fetch_offset`` = the follower's log end offset, ``last_fetched_epoch`` =
  the latest epoch in its log, ``current_leader_epoch`` = the epoch it follows, its log start
  offset; ``replica.fetch.wait.max.ms``, ``replica.fetch.min.bytes``,
  ``replica.fetch.max.bytes`` per partition and ``replica.fetch.response.max.bytes``. The
  leader long-polls it, so records reach the follower as soon as they are appended.
* **The answer**, per partition:
  - records: appended as they are (``append_as_follower``: offsets, epochs and producer state
    from the leader's batches), then the follower's HW = min(leader's HW, its log end offset);
  - ``diverging_epoch``: the follower's log has a suffix the leader does not; it truncates
    (Kafka's ``getOffsetTruncationState``): to the end of the epoch both know, or, when the
    follower's largest epoch at or below the leader's answer differs, to that epoch's end (the
    next fetch asks again);
  - OFFSET_OUT_OF_RANGE: below the leader's log start the log restarts empty at it; above the
    leader's log end (only when the log has no epochs to compare) it is cut to the leader's HW;
  - NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, unknown topic, storage
    errors: the partition waits ``replica.fetch.backoff.ms`` (the metadata image will move it).
  An answer for a partition whose leader epoch changed while the fetch was in flight is dropped.
* A connection failure waits ``replica.fetch.backoff.ms`` and reconnects (to the leader's
  current endpoint).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..client.connection import KafkaConnection
from ..client.errors import KafkaError
from ..log.errors import KafkaStorageError, LogError
from ..protocol.errors import ErrorCode, ProtocolError
from ..protocol.replica_fetch import (
    FIRST_VERSION,
    LAST_VERSION,
    ReplicaFetchPartition,
    ReplicaFetchPartitionAnswer,
    ReplicaFetchResponse,
    ReplicaFetchTopic,
    decode_replica_fetch_response,
    encode_replica_fetch,
)
from ..replication.follower import FetchAnswer, fetch_partition, handle_fetch_answer

if TYPE_CHECKING:
    from .replica_manager import ReplicaManager

log = logging.getLogger("strom.replication")

FETCH = 1
TopicPartition = tuple[str, int]
NO_TOPIC_ID = uuid.UUID(int=0)  # (only v12 requests, which name topics, lack the id)


@dataclass(slots=True)
class FetchState:
    leader_epoch: int
    delayed_until: float = 0.0  # loop time


class ReplicaFetcherManager:
    """The fetchers of this broker (see the module docstring)."""

    def __init__(self, rm: ReplicaManager, *, listener: str, broker_epoch: Any = None) -> None:
        self.rm = rm
        self.listener = listener
        self.broker_epoch = broker_epoch  # () -> int, for ReplicaState.replica_epoch
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._where: dict[TopicPartition, tuple[int, int]] = {}
        self.closed = False

    def _fetcher_id(self, tp: TopicPartition) -> int:
        n = max(1, int(self.rm.config["num.replica.fetchers"]))
        return zlib.crc32(f"{tp[0]}-{tp[1]}".encode()) % n

    def add_partition(self, tp: TopicPartition, leader_id: int, leader_epoch: int) -> None:
        if self.closed:
            return
        key = (leader_id, self._fetcher_id(tp))
        old = self._where.get(tp)
        if old is not None and old != key:
            self._remove_from(old, tp)
        fetcher = self.fetchers.get(key)
        if fetcher is None or fetcher.done:
            fetcher = self.fetchers[key] = ReplicaFetcher(self, leader_id, key[1])
        fetcher.add(tp, leader_epoch)
        self._where[tp] = key

    def remove_partition(self, tp: TopicPartition) -> None:
        key = self._where.pop(tp, None)
        if key is not None:
            self._remove_from(key, tp)

    def _remove_from(self, key: tuple[int, int], tp: TopicPartition) -> None:
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            return
        fetcher.remove(tp)
        if not fetcher.partitions:
            del self.fetchers[key]
            fetcher.stop()

    async def close(self) -> None:
        self.closed = True
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        self._where.clear()
        for f in fetchers:
            f.stop()
        await asyncio.gather(*(f.wait_stopped() for f in fetchers), return_exceptions=True)


class ReplicaFetcher:
    """One leader's partitions, fetched in one loop over one connection."""

    def __init__(self, manager: ReplicaFetcherManager, leader_id: int, fetcher_id: int) -> None:
        self.manager = manager
        self.rm = manager.rm
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id
        self.partitions: dict[TopicPartition, FetchState] = {}
        self._wakeup = asyncio.Event()
        self._conn: KafkaConnection | None = None
        self._task: asyncio.Task[None] | None = asyncio.get_running_loop().create_task(
            self._run(), name=f"replica-fetcher-{leader_id}-{fetcher_id}"
        )
        self.done = False
        self.fetches = 0  # answers handled (tests, metrics)
        self._version = 12  # the Fetch version of the last request (its answer is read with it)

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        self.partitions[tp] = FetchState(leader_epoch)
        self._wakeup.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    def stop(self) -> None:
        self.done = True
        if self._task is not None:
            self._task.cancel()

    async def wait_stopped(self) -> None:
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self._close_conn()

    async def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    def _backoff_s(self) -> float:
        return max(0.01, int(self.rm.config["replica.fetch.backoff.ms"]) / 1000)

    async def _connection(self) -> KafkaConnection | None:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        node = self.rm.metadata_cache.alive_broker(self.leader_id, self.manager.listener)
        if node is None:
            return None
        timeout = int(self.rm.config["replica.socket.timeout.ms"]) / 1000
        self._conn = await KafkaConnection.open(
            node.host, node.port, client_id=f"strom-replica-fetcher-{self.rm.node_id}",
            request_timeout=timeout + int(self.rm.config["replica.fetch.wait.max.ms"]) / 1000,
        )
        return self._conn

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not self.done:
                if not self.partitions:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                now = loop.time()
                ready = {tp: st for tp, st in self.partitions.items() if st.delayed_until <= now}
                if not ready:
                    wait = min(st.delayed_until for st in self.partitions.values()) - now
                    self._wakeup.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wakeup.wait(), max(0.001, wait))
                    continue
                try:
                    conn = await self._connection()
                    if conn is None:
                        await asyncio.sleep(self._backoff_s())
                        continue
                    encode, sent = self._build(ready, conn)
                    if encode is None:
                        await asyncio.sleep(self._backoff_s())
                        continue
                    body = await conn.request_encoded(encode, what=f"Fetch v{self._version}")
                    resp = decode_replica_fetch_response(body, self._version)
                except ProtocolError as e:
                    log.warning("broker %d answered a Fetch this broker cannot read: %s "
                                "(reconnecting in %g s)", self.leader_id, e, self._backoff_s())
                    await self._close_conn()
                    await asyncio.sleep(self._backoff_s())
                    continue
                except (KafkaError, OSError, TimeoutError) as e:
                    log.info("fetching from broker %d failed: %s (retrying in %g s)", self.leader_id, e,
                             self._backoff_s())
                    await self._close_conn()
                    await asyncio.sleep(self._backoff_s())
                    continue
                self._handle(resp, sent)
                self.fetches += 1
        except asyncio.CancelledError:
            pass
        finally:
            self.done = True

    def _build(self, ready: dict[TopicPartition, FetchState], conn: KafkaConnection
               ) -> tuple[Callable[[int], bytes] | None, dict[TopicPartition, int]]:
        """The request (a function of its correlation id, encoded by
        :func:`~strom.protocol.replica_fetch.encode_replica_fetch`) and the leader epoch each
        partition was fetched at."""
        rm = self.rm
        cfg = rm.config
        version = max(FIRST_VERSION, min(LAST_VERSION, conn.version(FETCH)))
        self._version = version
        max_bytes = int(cfg["replica.fetch.max.bytes"])
        by_topic: dict[str, list[ReplicaFetchPartition]] = {}
        sent: dict[TopicPartition, int] = {}
        for tp, st in ready.items():
            plog = rm.logs.get(tp)
            if plog is None:
                continue
            by_topic.setdefault(tp[0], []).append(
                ReplicaFetchPartition(tp[1], **fetch_partition(plog, st.leader_epoch, max_bytes))
            )
            sent[tp] = st.leader_epoch
        topics: list[ReplicaFetchTopic] = []
        for name, parts in by_topic.items():
            info = rm.metadata_cache.topic(name)
            if info is None and version >= 13:
                for p in parts:
                    sent.pop((name, p.partition), None)
                continue
            topics.append(ReplicaFetchTopic(info.topic_id if info is not None else NO_TOPIC_ID, name, parts))
        if not topics:
            return None, sent
        epoch = self.manager.broker_epoch() if self.manager.broker_epoch is not None else -1
        client_id = conn.client_id or ""

        def encode(correlation_id: int) -> bytes:
            return encode_replica_fetch(
                version, correlation_id, client_id, topics, replica_id=rm.node_id, replica_epoch=epoch,
                max_wait_ms=int(cfg["replica.fetch.wait.max.ms"]),
                min_bytes=int(cfg["replica.fetch.min.bytes"]),
                max_bytes=int(cfg["replica.fetch.response.max.bytes"]),
            )

        return encode, sent

    def _handle(self, resp: ReplicaFetchResponse, sent: dict[TopicPartition, int]) -> None:
        rm = self.rm
        cache = rm.metadata_cache
        loop = asyncio.get_running_loop()
        backoff = self._backoff_s()
        if resp.error_code != ErrorCode.NONE:
            for tp in sent:
                st = self.partitions.get(tp)
                if st is not None:
                    st.delayed_until = loop.time() + backoff
            return
        for t in resp.responses:
            if t.topic_id is not None:
                info = cache.topic_by_id(t.topic_id)
                name = info.name if info is not None else None
            else:
                name = t.name
            if name is None:
                continue
            for pd in t.partitions:
                tp = (name, int(pd.partition_index))
                st = self.partitions.get(tp)
                if st is None or sent.get(tp) != st.leader_epoch:
                    continue  # no longer fetched here, or its leader epoch changed meanwhile
                try:
                    self._handle_partition(tp, pd)
                except (KafkaStorageError, OSError) as e:
                    plog = rm.logs.get(tp)
                    if plog is not None:
                        rm.note_storage_error(plog, e)
                    st.delayed_until = loop.time() + backoff
                except LogError as e:
                    log.warning("%s-%d: the follower's append failed: %s", tp[0], tp[1], e)
                    st.delayed_until = loop.time() + backoff
                else:
                    code = int(pd.error_code)
                    if code != ErrorCode.NONE and code != ErrorCode.OFFSET_OUT_OF_RANGE:
                        st.delayed_until = loop.time() + backoff

    def _handle_partition(self, tp: TopicPartition, pd: ReplicaFetchPartitionAnswer) -> None:
        """One partition of the leader's answer: :func:`strom.replication.follower.handle_fetch_answer`."""
        rm = self.rm
        plog = rm.logs.get(tp)
        if plog is None:
            return
        if handle_fetch_answer(tp, plog, FetchAnswer.of(pd)).high_watermark_advanced:
            rm.purgatory.notify(tp)


__all__ = ["ReplicaFetcher", "ReplicaFetcherManager"]
