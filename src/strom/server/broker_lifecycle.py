"""The broker's lifecycle at the controller: Kafka's ``BrokerLifecycleManager``.

Theory of operation
-------------------
States (Kafka's ``BrokerState``): STARTING → RECOVERY (registered, fenced) → RUNNING (unfenced)
→ PENDING_CONTROLLED_SHUTDOWN → SHUTTING_DOWN.

* :meth:`start` registers the broker (BrokerRegistration with a fresh incarnation id, its
  listeners, features, rack and log dir ids) through the controller channel, retrying every
  ``retry_backoff_ms`` until the controller accepts it: NOT_CONTROLLER or no reachable controller
  and DUPLICATE_BROKER_REGISTRATION (the previous incarnation's session has not expired yet:
  it does within ``broker.session.timeout.ms``) are retried, INCONSISTENT_CLUSTER_ID and other
  refusals raise :class:`RegistrationError`. It then heartbeats until the controller unfences
  the broker (it is caught up with the metadata log) and returns: the broker serves clients
  only after that. From then on a heartbeat goes every ``broker.heartbeat.interval.ms``, a
  timer on the injected scheduler, reporting ``current_metadata_offset`` (the next offset the
  broker's metadata loader expects).
* A heartbeat answered STALE_BROKER_EPOCH means the controller no longer knows this
  registration (the broker was unregistered, or the controller's view is newer): the broker
  registers again (same incarnation id) and carries on with the new epoch.
* :meth:`controlled_shutdown` (the broker is stopping, e.g. on SIGTERM): heartbeats with
  ``want_shut_down`` until the controller answers ``should_shut_down`` (it moved the broker's
  partition leaderships away and the other brokers caught up with that), bounded by a timeout
  after which the broker stops anyway (Kafka waits in the same way, then shuts down).

Every heartbeat reports the broker's failed log dirs (``offline_log_dirs``, KIP-858), and a
dir failure sends one at once (:meth:`heartbeat_soon`): the controller moves the replicas
recorded in those dirs out of their ISRs.

``before_register`` runs before each registration attempt (a combined node whose own
controller is active tells it that its previous incarnation is gone, so a restart does not wait
for the old session to expire). Errors from the channel never escape the periodic heartbeat:
a missed heartbeat is logged and the next one goes at its time.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from kio.schema.broker_heartbeat.v1 import request as heartbeat
from kio.static.primitive import i32, i64

from ..controller.server import NotControllerError
from ..protocol.errors import ErrorCode
from ..scheduler import Scheduler, TaskHandle
from .controller_channel import ControllerChannel

__all__ = ["BrokerLifecycleManager", "BrokerState", "RegistrationError"]

log = logging.getLogger("strom.broker.lifecycle")

BROKER_REGISTRATION = 62
BROKER_HEARTBEAT = 63


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


class BrokerState(enum.Enum):
    STARTING = "STARTING"
    RECOVERY = "RECOVERY"  # registered, fenced
    RUNNING = "RUNNING"  # unfenced
    PENDING_CONTROLLED_SHUTDOWN = "PENDING_CONTROLLED_SHUTDOWN"
    SHUTTING_DOWN = "SHUTTING_DOWN"


class RegistrationError(Exception):
    """The controller refused the registration for good (say, another cluster's id)."""


class BrokerLifecycleManager:
    def __init__(
        self,
        node_id: int,
        channel: ControllerChannel,
        scheduler: Scheduler,
        registration_request: Callable[[uuid.UUID], Any],
        metadata_offset: Callable[[], int],
        *,
        heartbeat_interval_ms: int = 2000,
        retry_backoff_ms: int = 100,
        before_register: Callable[[], None] | None = None,
        offline_log_dirs: Callable[[], Sequence[uuid.UUID]] = tuple,
    ) -> None:
        self.node_id = node_id
        self.channel = channel
        self.scheduler = scheduler
        self.registration_request = registration_request
        self.metadata_offset = metadata_offset
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.before_register = before_register
        self.offline_log_dirs = offline_log_dirs
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        self.state = BrokerState.STARTING
        self.is_fenced = True
        self._timer: TaskHandle | None = None
        self._in_flight = False
        self._soon: set[asyncio.Task[None]] = set()

    # -- registration
    async def register(self) -> None:
        """Register (retrying until accepted, see the module doc); sets :attr:`broker_epoch`."""
        attempt = 0
        while True:
            attempt += 1
            if self.before_register is not None:
                self.before_register()
            try:
                request = self.registration_request(self.incarnation_id)
                response = await self.channel.call(BROKER_REGISTRATION, request)
            except NotControllerError as e:
                log.info("broker %d registration: %s; retrying", self.node_id, e)
                await asyncio.sleep(self.retry_backoff_ms / 1000)
                continue
            code = int(response["error_code"])
            if code == ErrorCode.NONE:
                self.broker_epoch = int(response["broker_epoch"])
                log.info("broker %d registered with epoch %d", self.node_id, self.broker_epoch)
                return
            if code in (ErrorCode.DUPLICATE_BROKER_REGISTRATION, ErrorCode.NOT_CONTROLLER):
                if attempt == 1 or attempt % 50 == 0:
                    log.info(
                        "broker %d registration: %s (the previous incarnation's session has not "
                        "expired yet); retrying",
                        self.node_id,
                        _name(code),
                    )
                await asyncio.sleep(self.retry_backoff_ms / 1000)
                continue
            raise RegistrationError(f"broker registration refused: {_name(code)}: {response}")

    async def start(self) -> None:
        """Register, heartbeat until unfenced, then heartbeat periodically."""
        await self.register()
        self.state = BrokerState.RECOVERY
        while True:
            try:
                response = await self.heartbeat()
            except NotControllerError as e:
                log.info("broker %d heartbeat: %s; retrying", self.node_id, e)
                response = None
            if response is not None and not response["is_fenced"] and not response["error_code"]:
                break
            await asyncio.sleep(min(self.retry_backoff_ms, 50) / 1000)
        self.state = BrokerState.RUNNING
        self._timer = self.scheduler.schedule_periodic(
            self.heartbeat_interval_ms, self._heartbeat_due, name="broker-heartbeat"
        )

    # -- heartbeats
    async def heartbeat(self, want_shut_down: bool = False) -> dict[str, Any]:
        """One heartbeat; re-registers on STALE_BROKER_EPOCH. Raises NotControllerError."""
        response = await self.channel.call(BROKER_HEARTBEAT, self._heartbeat_request(want_shut_down))
        code = int(response["error_code"])
        if code == ErrorCode.STALE_BROKER_EPOCH:
            log.warning(
                "broker %d heartbeat: STALE_BROKER_EPOCH for epoch %d; registering again",
                self.node_id,
                self.broker_epoch,
            )
            await self.register()
            response = await self.channel.call(BROKER_HEARTBEAT, self._heartbeat_request(want_shut_down))
            code = int(response["error_code"])
        if code == ErrorCode.NONE:
            self.is_fenced = bool(response["is_fenced"])
        return response

    def _heartbeat_request(self, want_shut_down: bool) -> Any:
        return heartbeat.BrokerHeartbeatRequest(
            broker_id=i32(self.node_id),  # type: ignore[arg-type]
            broker_epoch=i64(self.broker_epoch),
            current_metadata_offset=i64(self.metadata_offset()),
            want_fence=False,
            want_shut_down=want_shut_down,
            offline_log_dirs=tuple(self.offline_log_dirs()),
        )

    def heartbeat_soon(self) -> None:
        """A heartbeat now rather than at its time (a log dir failed: KIP-858 tells the
        controller at once). Nothing when one is in flight or the broker is not running."""
        if self.state is BrokerState.RUNNING and not self._in_flight:
            task = asyncio.ensure_future(self._heartbeat_due())
            self._soon.add(task)
            task.add_done_callback(self._soon.discard)

    async def _heartbeat_due(self) -> None:
        if self._in_flight or self.state is not BrokerState.RUNNING:
            return
        self._in_flight = True
        try:
            await self.heartbeat()
        except NotControllerError as e:
            log.warning("broker %d heartbeat: %s", self.node_id, e)
        except Exception:  # the next heartbeat goes at its time regardless
            log.exception("broker %d heartbeat failed", self.node_id)
        finally:
            self._in_flight = False

    # -- shutdown
    async def controlled_shutdown(self, timeout_ms: int) -> bool:
        """Heartbeat with want_shut_down until the controller answers should_shut_down, at most
        ``timeout_ms``; True when it did."""
        self._stop_timer()
        if self.state is not BrokerState.RUNNING:
            self.state = BrokerState.SHUTTING_DOWN
            return False
        self.state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
        deadline = time.monotonic() + timeout_ms / 1000
        done = False
        pause = min(self.heartbeat_interval_ms, 250) / 1000
        while time.monotonic() < deadline:
            try:
                response = await asyncio.wait_for(
                    self.heartbeat(want_shut_down=True), max(0.001, deadline - time.monotonic())
                )
            except (NotControllerError, TimeoutError) as e:
                log.info("broker %d controlled shutdown heartbeat: %s", self.node_id, e)
            else:
                if response["should_shut_down"]:
                    done = True
                    break
            await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        if done:
            log.info("broker %d: controlled shutdown complete", self.node_id)
        else:
            log.warning(
                "broker %d: controlled shutdown did not complete in %d ms; stopping anyway",
                self.node_id,
                timeout_ms,
            )
        self.state = BrokerState.SHUTTING_DOWN
        return done

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        self._stop_timer()
        self.state = BrokerState.SHUTTING_DOWN
