"""BrokerLifecycleManager against the controller state machine (ControllerHarness: records
commit at once), behind a channel that hands each request to the controller as the active
controller's runtime would: registration retried while the previous incarnation's session
lives, heartbeats on the injected scheduler, re-registration on STALE_BROKER_EPOCH, controlled
shutdown moving leadership away."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.unregister_broker.v0 import request as unregister
from kio.static.primitive import i32

from strom.clock import ManualClock
from strom.controller.server import NotControllerError
from strom.protocol.errors import ErrorCode
from strom.server.broker_lifecycle import BrokerLifecycleManager, BrokerState, RegistrationError
from strom.testing.controller import ControllerHarness, registration_request
from strom.testing.scheduler import ManualScheduler


class HarnessChannel:
    """The active controller of a ControllerHarness as a ControllerChannel. ``before_call`` runs
    first (time passing, other brokers heartbeating); ``down`` makes calls fail as when no
    controller answers."""

    def __init__(self, harness: ControllerHarness, before_call: Callable[[], None] | None = None) -> None:
        self.harness = harness
        self.before_call = before_call
        self.calls: list[int] = []
        self.down = 0

    async def call(
        self,
        api_key: int,
        request: Any,
        api_version: int = -1,
        *,
        principal: str | None = None,
        client_host: str | None = None,
    ) -> dict[str, Any]:
        await asyncio.sleep(0)
        self.calls.append(api_key)
        if self.down:
            self.down -= 1
            raise NotControllerError("no controller answered")
        if self.before_call is not None:
            self.before_call()
        h = self.harness
        result = h.controller.handle(api_key, request, now_ms=h.now_ms, next_offset=h.next_offset)
        response: dict[str, Any] = h.commit(result)
        return response

    async def close(self) -> None:
        return None


def lifecycle(
    harness: ControllerHarness, channel: HarnessChannel, scheduler: ManualScheduler, broker_id: int = 1
) -> BrokerLifecycleManager:
    return BrokerLifecycleManager(
        broker_id,
        channel,
        scheduler,
        lambda incarnation: registration_request(broker_id, incarnation),
        lambda: harness.next_offset,
        heartbeat_interval_ms=2000,  # (broker.heartbeat.interval.ms)
        retry_backoff_ms=1,
    )


def test_registers_unfences_and_heartbeats_on_the_scheduler() -> None:
    async def main() -> None:
        harness = ControllerHarness()
        channel = HarnessChannel(harness)
        channel.down = 3  # no controller for a while: the registration is retried
        scheduler = ManualScheduler(ManualClock())
        lc = lifecycle(harness, channel, scheduler)
        await lc.start()
        assert lc.state is BrokerState.RUNNING and not lc.is_fenced
        reg = harness.controller.cluster.registration(1)
        assert reg is not None and not reg.fenced and reg.epoch == lc.broker_epoch
        assert reg.incarnation_id == lc.incarnation_id
        assert channel.calls[:4] == [62, 62, 62, 62] and channel.calls[4] == 63
        before = len(channel.calls)
        scheduler.advance(1999)
        await scheduler.settle()
        assert len(channel.calls) == before  # not yet
        scheduler.advance(1)
        await scheduler.settle()
        assert channel.calls[before:] == [63]
        for _ in range(3):
            scheduler.advance(2000)
            await scheduler.settle()
        assert channel.calls[before:] == [63] * 4
        lc.close()
        scheduler.advance(10_000)
        await scheduler.settle()
        assert len(channel.calls) == before + 4

    asyncio.run(main())


def test_duplicate_registration_is_retried_until_the_old_session_expires() -> None:
    async def main() -> None:
        harness = ControllerHarness()
        harness.start_brokers(2)  # broker 1's previous incarnation is alive
        harness.controller.cluster.touch(1, harness.now_ms)

        def time_passes() -> None:
            harness.advance(1000)

        channel = HarnessChannel(harness, time_passes)
        lc = lifecycle(harness, channel, ManualScheduler(ManualClock()))
        await lc.register()
        reg = harness.controller.cluster.registration(1)
        assert reg is not None and reg.incarnation_id == lc.incarnation_id
        # refused while the old session lived (broker.session.timeout.ms, 9 s by default)
        assert 8 <= channel.calls.count(62) <= 11
        lc.close()

    asyncio.run(main())


def test_a_refused_registration_raises() -> None:
    async def main() -> None:
        harness = ControllerHarness()
        channel = HarnessChannel(harness)
        lc = BrokerLifecycleManager(
            1,
            channel,
            ManualScheduler(ManualClock()),
            lambda incarnation: dataclasses.replace(
                registration_request(1, incarnation), cluster_id="another-cluster"
            ),
            lambda: 0,
        )
        with pytest.raises(RegistrationError, match="INCONSISTENT_CLUSTER_ID"):
            await lc.register()

    asyncio.run(main())


def test_stale_broker_epoch_registers_again() -> None:
    async def main() -> None:
        harness = ControllerHarness()
        channel = HarnessChannel(harness)
        scheduler = ManualScheduler(ManualClock())
        lc = lifecycle(harness, channel, scheduler)
        await lc.start()
        first = lc.broker_epoch
        # the operator unregistered the broker: the controller no longer knows its epoch
        harness.commit(
            harness.controller.unregister_broker(unregister.UnregisterBrokerRequest(broker_id=i32(1)))
        )  # type: ignore[arg-type]
        assert harness.controller.cluster.registration(1) is None
        answer = await lc.heartbeat()
        assert answer["error_code"] == ErrorCode.NONE
        reg = harness.controller.cluster.registration(1)
        assert reg is not None and reg.epoch == lc.broker_epoch and lc.broker_epoch > first
        assert channel.calls[-3:] == [63, 62, 63]
        lc.close()

    asyncio.run(main())


def test_controlled_shutdown_moves_leadership_away_first() -> None:
    async def main() -> None:
        harness = ControllerHarness()
        harness.start_brokers(3)  # brokers 0, 1 and 2; this one is 1
        topic = harness.create_topic("t", assignments={0: [1, 2]})
        assert topic["error_code"] == 0
        tid = topic["topic_id"]
        part = harness.controller.replication.topics[tid].parts[0]
        assert part.leader == 1

        def others_heartbeat() -> None:  # brokers 0 and 2 keep up with the log
            harness.heartbeat(0)
            harness.heartbeat(2)

        channel = HarnessChannel(harness, others_heartbeat)
        lc = lifecycle(harness, channel, ManualScheduler(ManualClock()))
        reg = harness.controller.cluster.registration(1)
        assert reg is not None
        lc.incarnation_id = reg.incarnation_id  # the harness's broker 1 is this one
        await lc.start()
        assert lc.broker_epoch == reg.epoch  # the same incarnation: the same registration
        assert harness.controller.replication.topics[tid].parts[0].leader == 1
        assert await lc.controlled_shutdown(5000) is True
        assert lc.state is BrokerState.SHUTTING_DOWN
        part = harness.controller.replication.topics[tid].parts[0]
        assert part.leader == 2 and 1 not in part.isr
        reg = harness.controller.cluster.registration(1)
        assert reg is not None and reg.fenced
        # the heartbeats said want_shut_down until should_shut_down
        assert channel.calls.count(63) >= 2

    asyncio.run(main())


def test_controlled_shutdown_gives_up_after_its_timeout() -> None:
    async def main() -> None:
        harness = ControllerHarness()
        channel = HarnessChannel(harness)
        lc = lifecycle(harness, channel, ManualScheduler(ManualClock()))
        await lc.start()
        channel.down = 10**6  # the controller is gone
        loop = asyncio.get_running_loop()
        start = loop.time()
        assert await lc.controlled_shutdown(300) is False
        assert 0.25 <= loop.time() - start < 2 and lc.state is BrokerState.SHUTTING_DOWN

    asyncio.run(main())


def test_a_failed_log_dir_goes_to_the_controller_at_once() -> None:
    """KIP-858: every heartbeat carries the failed dirs' ids; heartbeat_soon sends one now, and
    the controller (which knows the dir from the registration) keeps only the online dir."""
    import uuid

    async def main() -> None:
        harness = ControllerHarness()
        harness.start_brokers(1)  # broker 0: another broker, so that broker 1 may lose leaderships
        channel = HarnessChannel(harness)
        scheduler = ManualScheduler(ManualClock())
        a, b = uuid.UUID(int=1 << 100), uuid.UUID(int=2 << 100)
        offline: list[uuid.UUID] = []
        sent: list[tuple[uuid.UUID, ...]] = []
        lc = BrokerLifecycleManager(
            1, channel, scheduler,
            lambda inc: dataclasses.replace(registration_request(1, inc), log_dirs=(a, b)),
            lambda: harness.next_offset, heartbeat_interval_ms=2000, retry_backoff_ms=1,
            offline_log_dirs=lambda: list(offline),
        )
        real = channel.call

        async def spy(api_key: int, request: Any, *args: Any, **kw: Any) -> dict[str, Any]:
            if api_key == 63:
                sent.append(tuple(request.offline_log_dirs))
            return await real(api_key, request, *args, **kw)

        channel.call = spy  # type: ignore[method-assign]
        await lc.start()
        assert sent and all(s == () for s in sent)
        n = len(sent)
        offline.append(b)
        lc.heartbeat_soon()  # no waiting for broker.heartbeat.interval.ms
        await scheduler.settle()
        await asyncio.sleep(0.01)
        assert sent[n:] == [(b,)]
        reg = harness.controller.cluster.registration(1)
        assert reg is not None and reg.directories == (a,) and not reg.fenced
        lc.close()

    asyncio.run(main())
