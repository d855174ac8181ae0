"""A whole Broker in one process on simulated time: ManualClock + ManualScheduler, the in-memory
network, the coordinators' flush on the loop (threaded_flush=False)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from strom.client import groups
from strom.clock import ManualClock
from strom.config import BrokerConfig
from strom.server.broker import Broker
from strom.testing.network import MemoryNetwork
from strom.testing.scheduler import ManualScheduler


def _broker(data: Path, clock: ManualClock, sched: ManualScheduler) -> Broker:
    config = BrokerConfig.from_sources(None, {
        "log.dirs": str(data),
        "listeners": "PLAINTEXT://127.0.0.1:19092",  # never opened: start(listen=False)
        "offsets.topic.num.partitions": "2",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "log.cleaner.enable": "false",
        # on the metadata quorum (STROM_TEST_QUORUM=1): no append linger, so a metadata change
        # commits without the test advancing the clock (the linger is a timer on `sched`)
        "controller.quorum.append.linger.ms": "0",
    })
    return Broker(config, clock=clock, scheduler=sched, threaded_flush=False)


def test_broker_on_manual_clock_scheduler_and_memory_network(tmp_path: Path) -> None:
    async def go() -> None:
        clock = ManualClock()
        sched = ManualScheduler(clock)
        broker = _broker(tmp_path / "data", clock, sched)
        await broker.start(listen=False)
        assert broker.servers == []
        net = MemoryNetwork(broker)
        client = net.client()
        try:
            assert await client.create_topics({"t": (1, 1)}) == {"t": None}
            base = await client.produce("t", 0, [(b"k", b"v1", [], clock.time_ms()), (None, b"v2", [], -1)])
            assert base == 0
            got = await client.fetch("t", 0, 0, max_wait_ms=0)
            assert [r.value for r in got.records] == [b"v1", b"v2"]
            assert got.high_watermark == 2

            assert await groups.commit_offsets(client, "g", {("t", 0): 2}) == {("t", 0): None}
            committed = await groups.fetch_offsets(client, "g")
            assert committed[("t", 0)].offset == 2
            # the commit is in __consumer_offsets, whose HW covers it (it was made durable)
            gp = broker.group_coordinator.partition_for("g")
            plog = broker.logs[("__consumer_offsets", gp)]
            assert plog.high_watermark == plog.log_end_offset >= 1
            assert plog.recovery_point == plog.log_end_offset

            # a long poll at the log end: answered exactly when max.wait.ms has passed on the clock
            waiting = asyncio.ensure_future(client.fetch("t", 0, 2, max_wait_ms=500))
            for _ in range(200):  # until the broker parks it in the purgatory
                await asyncio.sleep(0)
                if broker.replica_manager.purgatory._watchers.get(("t", 0)):
                    break
            assert broker.replica_manager.purgatory._watchers.get(("t", 0))
            sched.advance(499)
            await sched.settle()
            assert not waiting.done()
            sched.advance(1)
            result = await asyncio.wait_for(waiting, 5)
            assert result.records == []
            assert result.high_watermark == 2
        finally:
            await client.close()
            net.close()
            await broker.stop()

    asyncio.run(go())


def test_long_poll_is_woken_by_a_produce_before_its_timeout(tmp_path: Path) -> None:
    async def go() -> None:
        clock = ManualClock()
        sched = ManualScheduler(clock)
        broker = _broker(tmp_path / "data", clock, sched)
        await broker.start(listen=False)
        net = MemoryNetwork(broker)
        client = net.client()
        producer = net.client()
        try:
            await client.create_topics({"t": (1, 1)})
            waiting = asyncio.ensure_future(client.fetch("t", 0, 0, max_wait_ms=10_000))
            for _ in range(200):
                await asyncio.sleep(0)
                if broker.replica_manager.purgatory._watchers.get(("t", 0)):
                    break
            await producer.produce("t", 0, [(None, b"x", [], -1)])
            result = await asyncio.wait_for(waiting, 5)
            assert [r.value for r in result.records] == [b"x"]
            assert clock.monotonic_ms() == 0  # no simulated time passed
        finally:
            await client.close()
            await producer.close()
            net.close()
            await broker.stop()

    asyncio.run(go())
