"""Where a broker's producer ids come from (Kafka's ``ProducerIdManager``, KIP-730).

Theory of operation
-------------------
Every InitProducerId that needs a new producer id (an idempotent producer's first one, a
transactional id seen for the first time, an exhausted epoch) takes the next id of this broker's
manager with :meth:`ProducerIdManager.allocate`. A producer id must be unique in the whole
cluster: two producers with the same id writing to one partition would see each other's batches
as duplicates or out of order. Two managers:

* :class:`LocalProducerIdManager`, the single node on the topic registry path
  (``strom.metadata.quorum.enable=false``): blocks of 1000 ids are reserved in
  ``strom-producer-ids.json`` in the first log dir (written durably before an id of the block is
  handed out), so a restart never hands out an id twice. Only correct for one broker.
* :class:`RPCProducerIdManager`, on the metadata quorum (Kafka's ``RPCProducerIdManager``): the
  blocks come from the active controller (AllocateProducerIds through the broker's controller
  channel, sent as itself, not in an envelope). The controller writes each block in the metadata
  log (``ProducerIdsRecord``: the next id not yet handed out) before it answers, so no two
  brokers, and no two incarnations of one broker, ever get the same block. The manager holds
  the current block and at most one prefetched block: when 90% of the current block is handed
  out it asks for the next one in the background (one request at a time), so that
  :meth:`allocate` stays synchronous and normally never waits. When the current block is used
  up and no next block arrived (the controller is unreachable, fenced this broker's epoch,
  answered an error), :meth:`allocate` raises COORDINATOR_LOAD_IN_PROGRESS (Kafka's answer: it
  is retriable for every client, where REQUEST_TIMED_OUT is fatal for older ones) and a new
  request is sent, at most once per ``retry_backoff_ms`` after a failure. Never a duplicate: a
  block that is malformed or does not start above every id this manager already handed out
  is refused (logged), as a failure.

A data dir written on the registry path and started on the quorum carries its reservation into
the metadata log (:mod:`strom.metadata.migration` appends a ``ProducerIdsRecord`` with the
file's next block), so the controller's first block starts above every id the file handed out.

Start and stop (:class:`~strom.server.broker.Broker`): on the quorum, :meth:`start` runs once
the broker registered (AllocateProducerIds carries the broker epoch) and waits a little for the
first block, so that the first InitProducerId after the listeners open needs no retry;
:meth:`close` cancels a request in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.allocate_producer_ids.v0 import request as allocate_request
from kio.static.primitive import i32, i64

from ..clock import Clock
from ..controller.server import NotControllerError
from ..durable_file import replace_file
from ..protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from ..rate_limited_log import RateLimitedLog
    from .controller_channel import ControllerChannel

__all__ = [
    "ALLOCATE_PRODUCER_IDS",
    "LocalProducerIdManager",
    "ProducerIdManager",
    "ProducerIdsBlock",
    "RPCProducerIdManager",
]

log = logging.getLogger("strom.producer_ids")

ALLOCATE_PRODUCER_IDS = 67
LONG_MAX = 2**63 - 1
PID_PREFETCH_THRESHOLD = 0.90  # Kafka's RPCProducerIdManager.PidPrefetchThreshold
RETRY_BACKOFF_MS = 50  # Kafka's RPCProducerIdManager.RetryBackoffMs
FIRST_BLOCK_WAIT_S = 5.0


class ProducerIdManager(Protocol):
    def allocate(self) -> int:
        """The next producer id; raises KafkaError (COORDINATOR_LOAD_IN_PROGRESS: retriable)."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class LocalProducerIdManager:
    """Producer ids of a single node: blocks reserved on disk before use, so a restart never
    hands out an id twice (the registry path; see the module doc)."""

    BLOCK = 1000

    def __init__(self, path: Path, storage_log: RateLimitedLog | None = None) -> None:
        self.path = path
        self.storage_log = storage_log
        self._next = 0
        self._limit = 0
        if path.exists():
            self._next = self._limit = int(json.loads(path.read_text())["next_block"])

    def allocate(self) -> int:
        if self._next >= self._limit:
            new_limit = self._next + self.BLOCK
            try:
                replace_file(self.path, json.dumps({"next_block": new_limit}).encode())
            except OSError as e:
                if self.storage_log is not None:
                    self.storage_log.failed("reserving producer ids in", str(self.path), e,
                                            "answering COORDINATOR_LOAD_IN_PROGRESS (clients retry)")
                raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "cannot reserve producer ids") from e
            if self.storage_log is not None:
                self.storage_log.ok("reserving producer ids in", str(self.path))
            self._limit = new_limit
        pid = self._next
        self._next += 1
        return pid

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


@dataclass(frozen=True)
class ProducerIdsBlock:
    """``size`` producer ids from ``first`` (Kafka's ``ProducerIdsBlock``)."""

    first: int
    size: int

    @property
    def last(self) -> int:
        return self.first + self.size - 1

    @property
    def prefetch_at(self) -> int:
        """The id whose handing out asks for the next block."""
        return self.first + int(self.size * PID_PREFETCH_THRESHOLD)


class RPCProducerIdManager:
    """Producer id blocks from the active controller (see the module doc).

    ``broker_epoch``: this broker's current epoch (-1 before it registered); ``channel``: the
    broker's controller channel (``call(api_key, request) -> dict``, raising
    NotControllerError when no controller answered)."""

    def __init__(
        self,
        broker_id: int,
        clock: Clock,
        broker_epoch: Callable[[], int],
        channel: ControllerChannel,
        *,
        retry_backoff_ms: int = RETRY_BACKOFF_MS,
        first_block_wait_s: float = FIRST_BLOCK_WAIT_S,
    ) -> None:
        self.broker_id = broker_id
        self.clock = clock
        self.broker_epoch = broker_epoch
        self.channel = channel
        self.retry_backoff_ms = retry_backoff_ms
        self.first_block_wait_s = first_block_wait_s
        self.current: ProducerIdsBlock | None = None
        self.next_block: ProducerIdsBlock | None = None
        self._next_id = 0  # the next id of ``current`` to hand out
        self._highest = -1  # the last id of every block accepted so far (a new one starts above)
        self._in_flight: asyncio.Task[None] | None = None
        self._backoff_until_ms = -1  # no request before this (after a failure)
        self._closed = False
        self.requests = 0  # AllocateProducerIds sent (tests, logs)
        self.last_error: str | None = None

    # -- handing out
    def allocate(self) -> int:
        while True:
            cur = self.current
            if cur is not None and self._next_id <= cur.last:
                pid = self._next_id
                self._next_id += 1
                if pid >= cur.prefetch_at:
                    self._maybe_request_next_block()
                return pid
            block = self.next_block
            if block is None:
                self._maybe_request_next_block()
                msg = "Producer ID block is full. Waiting for next block"
                raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, msg)
            self.current, self.next_block, self._next_id = block, None, block.first

    # -- blocks from the controller
    def _maybe_request_next_block(self) -> None:
        if self._closed or self.next_block is not None or self._in_flight is not None:
            return
        if self._backoff_until_ms >= 0 and self.clock.monotonic_ms() < self._backoff_until_ms:
            return
        self._backoff_until_ms = -1
        self._in_flight = asyncio.get_running_loop().create_task(
            self._request_block(), name=f"allocate-producer-ids-{self.broker_id}"
        )

    async def _request_block(self) -> None:
        try:
            error = await self._fetch()
        finally:
            self._in_flight = None
        self.last_error = error
        if error is not None:
            self._backoff_until_ms = self.clock.monotonic_ms() + self.retry_backoff_ms
            log.warning("broker %d: no producer id block from the controller: %s", self.broker_id, error)

    async def _fetch(self) -> str | None:
        """Ask for a block; the error, or None once ``next_block`` is set."""
        epoch = self.broker_epoch()
        if epoch < 0:
            return "the broker is not registered yet"
        request = allocate_request.AllocateProducerIdsRequest(
            broker_id=i32(self.broker_id),  # type: ignore[arg-type]
            broker_epoch=i64(epoch),
        )
        self.requests += 1
        try:
            response: dict[str, Any] = await self.channel.call(ALLOCATE_PRODUCER_IDS, request)
        except NotControllerError as e:
            return str(e)
        except (KafkaError, OSError) as e:
            return f"{type(e).__name__}: {e}"
        code = int(response.get("error_code", ErrorCode.UNKNOWN_SERVER_ERROR))
        if code != ErrorCode.NONE:
            name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
            return f"AllocateProducerIds answered {name} (broker epoch {epoch})"
        start, size = int(response["producer_id_start"]), int(response["producer_id_len"])
        if start < 0 or size <= 0 or start > LONG_MAX - size:
            return f"refused an invalid producer id block (start {start}, length {size})"
        if start <= self._highest:
            return f"refused block [{start}, {start + size}): ids up to {self._highest} were handed out"
        if self._closed:
            return None
        self.next_block = ProducerIdsBlock(start, size)
        self._highest = start + size - 1
        log.debug("broker %d: producer id block [%d, %d)", self.broker_id, start, start + size)
        return None

    # -- lifecycle
    async def start(self) -> None:
        """Ask for the first block (the broker registered) and wait a little for it."""
        self._maybe_request_next_block()
        task = self._in_flight
        if task is not None:
            await asyncio.wait({task}, timeout=self.first_block_wait_s)

    async def close(self) -> None:
        self._closed = True
        task = self._in_flight
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
