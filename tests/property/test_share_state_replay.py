"""Replay of ``__share_group_state`` as a property: after any sequence of acquisitions,
acknowledgements, lock timeouts, member releases and failed appends, replaying the records (and
their log-compacted form) rebuilds exactly the share-partition state that was answered."""

from __future__ import annotations

import asyncio
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.clock import ManualClock
from strom.coordinator.share_coordinator import ShareConfig, ShareCoordinator
from strom.coordinator.share_partition import AckType
from strom.coordinator.storage import MemoryOffsetsStorage

TID = uuid.UUID(int=3)


class Logs:
    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return "t"

    def partitions(self, topic_id: uuid.UUID) -> int | None:
        return 1

    def log_start_offset(self, topic_id: uuid.UUID, partition: int) -> int:
        return 0

    def initial_offset(self, topic_id: uuid.UUID, partition: int, strategy: str) -> int:
        return 0


def coordinator(storage: MemoryOffsetsStorage, clock: ManualClock, every: int) -> ShareCoordinator:
    cfg = {"share.record.lock.duration.ms": "1000", "share.delivery.count.limit": "3"}
    return ShareCoordinator(
        storage,
        Logs(),
        config=ShareConfig(num_partitions=2, snapshot_every=every),
        clock=clock,
        group_config=lambda g: cfg,
        run_timer=False,
    )


ops = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.sampled_from("ab"), st.integers(1, 6)),
        st.tuples(
            st.just("ack"),
            st.sampled_from("ab"),
            st.integers(0, 25),
            st.integers(0, 3),
            st.sampled_from([AckType.ACCEPT, AckType.RELEASE, AckType.REJECT]),
        ),
        st.tuples(st.just("tick"), st.integers(0, 1500)),
        st.tuples(st.just("release"), st.sampled_from("ab")),
        st.tuples(st.just("fail")),
    ),
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(ops, st.integers(1, 6))
def test_replay_rebuilds_the_answered_state(steps: list[tuple], every: int) -> None:  # type: ignore[type-arg]
    async def go() -> None:
        storage = MemoryOffsetsStorage()
        clock = ManualClock()
        c = coordinator(storage, clock, every)
        key = ("g", TID, 0)

        def read(offset: int) -> tuple[bytes, int] | None:
            return (b"x", 25) if offset <= 25 else None

        for op in steps:
            if op[0] == "acquire":
                await c.acquire("g", op[1], TID, 0, read, op[2])
            elif op[0] == "ack":
                _k, m, first, span, t = op
                await c.acknowledge("g", m, TID, 0, [(first, first + span, [t])])
            elif op[0] == "tick":
                clock.advance(op[1])
                await c.expire()
            elif op[0] == "release":
                await c.release_member("g", op[1])
            else:
                storage.fail_next = 1
                await c.acquire("g", "a", TID, 0, read, 2)
                storage.fail_next = 0
            if key not in c.partitions:
                continue
            live = c.partitions[key]
            want = (live.start_offset, live.state_batches())
            for source in ("log", "compacted"):
                s2 = storage
                if source == "compacted":
                    s2 = MemoryOffsetsStorage()
                    s2.partitions = {p: storage.compacted(p) for p in storage.partitions}
                back = coordinator(s2, ManualClock(), every)
                await back.start()
                sp = back.partitions[key]
                assert (sp.start_offset, sp.state_batches()) == want, source

    asyncio.run(go())
