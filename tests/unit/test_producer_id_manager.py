"""Producer id managers: blocks from the controller (RPCProducerIdManager: prefetch at 90%,
retriable COORDINATOR_LOAD_IN_PROGRESS while no block is there, backoff after a failure, never an
id twice, across brokers too) and the local file of the registry path.

The controller is a real QuorumController (``ControllerHarness``: its records commit at once)
behind the channel's ``call``; the channel can be made unreachable (it then raises
NotControllerError, as the real channel does after its timeout) or held (answers wait)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from strom.clock import ManualClock
from strom.controller.server import NotControllerError
from strom.metadata.records import ProducerIdsRecord
from strom.protocol.errors import ErrorCode, KafkaError
from strom.server.producer_id_manager import (
    ALLOCATE_PRODUCER_IDS,
    LocalProducerIdManager,
    ProducerIdsBlock,
    RPCProducerIdManager,
)
from strom.testing.controller import ControllerHarness


class HarnessChannel:
    def __init__(self, h: ControllerHarness) -> None:
        self.h = h
        self.down = False
        self.gate: asyncio.Event | None = None
        self.calls = 0
        self.answer: dict[str, Any] | None = None  # a forced answer (a misbehaving controller)

    async def call(
        self,
        api_key: int,
        request: Any,
        api_version: int = -1,
        *,
        principal: str | None = None,
        client_host: str | None = None,
    ) -> dict[str, Any]:
        assert api_key == ALLOCATE_PRODUCER_IDS
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.down:
            raise NotControllerError("no active controller answered: connection refused")
        if self.answer is not None:
            return self.answer
        response: dict[str, Any] = self.h.commit(self.h.controller.allocate_producer_ids(request))
        return response

    async def close(self) -> None:
        return None


def _manager(
    h: ControllerHarness, channel: HarnessChannel, broker: int = 0, clock: ManualClock | None = None
) -> RPCProducerIdManager:
    return RPCProducerIdManager(broker, clock or ManualClock(), lambda: h.epoch(broker), channel)  # type: ignore[arg-type]


async def _settle(m: RPCProducerIdManager) -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def _load_in_progress(m: RPCProducerIdManager) -> bool:
    with pytest.raises(KafkaError) as e:
        m.allocate()
    return e.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def test_blocks_of_the_controller_with_a_prefetch_at_90_percent() -> None:
    async def main() -> None:
        h = ControllerHarness()
        h.start_brokers(1)
        channel = HarnessChannel(h)
        m = _manager(h, channel)
        await m.start()  # waits for the first block
        assert (m.current, m.next_block, channel.calls) == (None, ProducerIdsBlock(0, 1000), 1)
        assert [m.allocate() for _ in range(900)] == list(range(900))
        await _settle(m)
        assert channel.calls == 1  # nothing asked before 90% of the block
        assert m.allocate() == 900  # the 90% mark: the next block is asked for in the background
        await _settle(m)
        assert (channel.calls, m.next_block) == (2, ProducerIdsBlock(1000, 1000))
        assert h.log[-1] == ProducerIdsRecord(broker_id=0, broker_epoch=h.epoch(0), next_producer_id=2000)
        rest = [m.allocate() for _ in range(1099)]
        assert rest == list(range(901, 2000))  # no gap, no wait at the block boundary
        await _settle(m)
        assert channel.calls == 3 and m.next_block == ProducerIdsBlock(2000, 1000)
        await m.close()

    asyncio.run(main())


def test_three_brokers_never_share_an_id_even_with_controller_failures() -> None:
    async def main() -> None:
        h = ControllerHarness()
        h.start_brokers(3)
        rnd = random.Random(7)
        clock = ManualClock()
        channels = [HarnessChannel(h) for _ in range(3)]
        managers = [_manager(h, channels[b], b, clock) for b in range(3)]
        for m in managers:
            await m.start()
        given: list[int] = []
        refused = 0
        for _ in range(12_000):
            b = rnd.randrange(3)
            channels[b].down = rnd.random() < 0.2
            try:
                given.append(managers[b].allocate())
            except KafkaError as e:
                assert e.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                refused += 1
            if rnd.random() < 0.1:
                await _settle(managers[b])
                clock.advance(rnd.randrange(100))
        assert len(given) == len(set(given)) > 10_000, (len(given), refused)
        # every id came from a block the controller recorded, and within what it handed out
        assert max(given) < h.controller.producer_ids.next_producer_id
        for m in managers:
            await m.close()

    asyncio.run(main())


def test_unreachable_controller_answers_load_in_progress_and_retries_after_the_backoff() -> None:
    async def main() -> None:
        h = ControllerHarness()
        h.start_brokers(1)
        clock = ManualClock()
        channel = HarnessChannel(h)
        channel.down = True
        m = _manager(h, channel, clock=clock)
        await m.start()  # the first block could not be had: the start does not fail
        assert channel.calls == 1 and m.last_error is not None and "controller" in m.last_error
        assert _load_in_progress(m)
        await _settle(m)
        assert channel.calls == 1  # within the backoff: no new request
        clock.advance(50)
        channel.down = False
        assert _load_in_progress(m)  # asks again, answers at once
        await _settle(m)
        assert channel.calls == 2 and m.allocate() == 0 and m.last_error is None
        await m.close()

    asyncio.run(main())


def test_a_request_in_flight_is_not_sent_twice_and_the_exhausted_block_waits_for_it() -> None:
    async def main() -> None:
        h = ControllerHarness()
        h.start_brokers(1)
        channel = HarnessChannel(h)
        m = _manager(h, channel)
        await m.start()
        channel.gate = asyncio.Event()  # the controller is slow from now on
        assert [m.allocate() for _ in range(1000)] == list(range(1000))
        for _ in range(5):
            assert _load_in_progress(m)
        await _settle(m)
        assert channel.calls == 2  # one request for the next block, however many callers wait
        channel.gate.set()
        await _settle(m)
        assert m.allocate() == 1000
        await m.close()

    asyncio.run(main())


def test_stale_broker_epoch_and_unregistered_broker_get_no_block() -> None:
    async def main() -> None:
        h = ControllerHarness()
        h.start_brokers(1)
        clock = ManualClock()
        channel = HarnessChannel(h)
        epoch = [-1]
        m = RPCProducerIdManager(0, clock, lambda: epoch[0], channel)  # type: ignore[arg-type]
        await m.start()
        assert channel.calls == 0 and m.last_error == "the broker is not registered yet"
        epoch[0] = h.epoch(0) - 1
        clock.advance(50)
        assert _load_in_progress(m)
        await _settle(m)
        assert channel.calls == 1 and m.last_error is not None and "STALE_BROKER_EPOCH" in m.last_error
        assert h.controller.producer_ids.next_producer_id == 0  # nothing handed out
        epoch[0] = h.epoch(0)
        clock.advance(50)
        assert _load_in_progress(m)
        await _settle(m)
        assert m.allocate() == 0
        await m.close()

    asyncio.run(main())


def test_a_block_overlapping_handed_out_ids_or_malformed_is_refused() -> None:
    async def main() -> None:
        h = ControllerHarness()
        h.start_brokers(1)
        clock = ManualClock()
        channel = HarnessChannel(h)
        m = _manager(h, channel, clock=clock)
        await m.start()
        given = [m.allocate() for _ in range(1000)]
        await _settle(m)  # the prefetched [1000, 2000)
        given += [m.allocate() for _ in range(1000)]  # 1900 asked for the next block (not sent yet)
        bads = (
            {"error_code": 0, "producer_id_start": 1500, "producer_id_len": 1000},  # handed out
            {"error_code": 0, "producer_id_start": -1, "producer_id_len": 1000},
            {"error_code": 0, "producer_id_start": 5000, "producer_id_len": 0},
            {"error_code": 0, "producer_id_start": 2**63 - 10, "producer_id_len": 1000},
        )
        for i, bad in enumerate(bads):
            channel.answer = bad
            if i:  # after the backoff, the next caller asks again
                clock.advance(50)
                assert _load_in_progress(m)
            await _settle(m)
            assert channel.calls == 3 + i
            assert m.next_block is None and m.last_error is not None and "refused" in m.last_error
            assert _load_in_progress(m)
        channel.answer = None
        clock.advance(50)
        assert _load_in_progress(m)
        await _settle(m)
        given.append(m.allocate())
        assert given == list(range(2001))
        await m.close()

    asyncio.run(main())


def test_close_cancels_the_request_in_flight() -> None:
    async def main() -> None:
        h = ControllerHarness()
        h.start_brokers(1)
        channel = HarnessChannel(h)
        channel.gate = asyncio.Event()
        m = RPCProducerIdManager(0, ManualClock(), lambda: h.epoch(0), channel, first_block_wait_s=0.01)  # type: ignore[arg-type]
        await m.start()  # gives up waiting; the request stays in flight
        assert channel.calls == 1 and m.next_block is None
        await m.close()
        channel.gate.set()
        await _settle(m)
        assert m.next_block is None and h.controller.producer_ids.next_producer_id == 0
        with pytest.raises(KafkaError):
            m.allocate()
        await _settle(m)
        assert channel.calls == 1  # closed: asks no more

    asyncio.run(main())


def test_local_file_blocks_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "strom-producer-ids.json"
    first = LocalProducerIdManager(path)
    ids = [first.allocate() for _ in range(1500)]
    again = LocalProducerIdManager(path)
    assert again.allocate() == 2000  # the whole reserved block is skipped
    assert ids == list(range(1500))
