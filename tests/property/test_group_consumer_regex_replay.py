"""Random KIP-848 sequences with regex subscriptions, topics created and deleted and time moving:
replaying ``__consumer_offsets`` (as written, and compacted) rebuilds exactly the live groups,
their regex resolutions included; and every resolution a group holds is what its regex matches
among the topics that existed when it was resolved."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.clock import ManualClock
from strom.coordinator.consumer import ConsumerGroup, TopicCatalog
from strom.coordinator.group_coordinator import CoordinatorConfig, GroupCoordinator
from strom.coordinator.storage import MemoryOffsetsStorage

ALL: dict[str, tuple[uuid.UUID, int]] = {
    "t": (uuid.UUID(int=1), 3),
    "u": (uuid.UUID(int=2), 2),
    "t2": (uuid.UUID(int=3), 2),
    "x1": (uuid.UUID(int=4), 1),
}
REGEXES = ["t.*", "[tu].*", "x.*", "u", ""]

op = st.one_of(
    st.tuples(st.just("join"), st.integers(0, 2), st.sampled_from(REGEXES), st.booleans()),
    st.tuples(st.just("hb"), st.integers(0, 2)),
    st.tuples(st.just("regex"), st.integers(0, 2), st.sampled_from(REGEXES)),
    st.tuples(st.just("leave"), st.integers(0, 2)),
    st.tuples(st.just("advance"), st.sampled_from([1000, 5000, 10001, 700000])),
    st.tuples(st.just("create"), st.sampled_from(sorted(ALL))),
    st.tuples(st.just("delete"), st.sampled_from(sorted(ALL))),
)


def _id(t: str) -> uuid.UUID:
    return ALL[t][0] if t in ALL else uuid.UUID(t)


def views(gc: GroupCoordinator) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for gid, g in gc.groups.items():
        if isinstance(g, ConsumerGroup):
            v = g.view()
            out[gid] = (
                v.group_epoch,
                v.topics,
                v.members,
                v.assignment_epoch,
                {m: frozenset((_id(t), p) for t, p in a) for m, a in v.target.items()},
                {
                    m: (
                        c.member_epoch,
                        c.previous_member_epoch,
                        c.state,
                        frozenset((_id(t), p) for t, p in c.assigned),
                        frozenset((_id(t), p) for t, p in c.pending_revocation),
                    )
                    for m, c in v.current.items()
                },
                v.regexes,
            )
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sets(st.sampled_from(sorted(ALL))), st.lists(op, max_size=25))
def test_regex_state_replays_and_matches_topics(initial: set[str], ops: list[tuple[Any, ...]]) -> None:
    existing = set(initial)
    version = [0]
    history: dict[int, frozenset[str]] = {0: frozenset(existing)}

    def resolve(name: str) -> tuple[uuid.UUID, int] | None:
        return ALL[name] if name in existing else None

    def catalog() -> TopicCatalog:
        return TopicCatalog(version[0], lambda: sorted(existing))

    async def main() -> None:
        clock = ManualClock()
        storage = MemoryOffsetsStorage()
        cfg = CoordinatorConfig(num_partitions=2)
        gc = GroupCoordinator(cfg, clock, storage, run_timer=False)
        gc.verify_replay = True
        await gc.start()
        epochs: dict[str, tuple[str, int]] = {}  # slot -> (member id, epoch)

        async def hb(slot: str, mid: str, epoch: int, **kw: Any) -> None:
            r = await gc.consumer_group_heartbeat(
                "g",
                member_id=mid,
                member_epoch=epoch,
                resolve=resolve,
                catalog=catalog(),
                rebalance_timeout_ms=20000,
                **kw,
            )
            if r.error == 0 and epoch >= 0:
                epochs[slot] = (r.member_id or mid, r.member_epoch)
            else:
                epochs.pop(slot, None)

        for o in ops:
            slot = f"s{o[1]}" if o[0] in ("join", "hb", "regex", "leave") else ""
            if o[0] == "join" and slot not in epochs:
                names = ["u"] if o[3] or not o[2] else None
                await hb(slot, "", 0, subscribed_topic_names=names, subscribed_topic_regex=o[2] or None)
            elif o[0] == "hb" and slot in epochs:
                await hb(slot, *epochs[slot])
            elif o[0] == "regex" and slot in epochs:
                await hb(slot, *epochs[slot], subscribed_topic_regex=o[2])
            elif o[0] == "leave" and slot in epochs:
                await hb(slot, epochs[slot][0], -1)
            elif o[0] == "advance":
                clock.advance(o[1])
                await gc.tick()
                g0 = gc.groups.get("g")
                members = g0.members if isinstance(g0, ConsumerGroup) else {}
                epochs = {s: e for s, e in epochs.items() if e[0] in members}
            elif o[0] == "create" and o[1] not in existing:
                existing.add(o[1])
                version[0] += 1
                history[version[0]] = frozenset(existing)
            elif o[0] == "delete" and o[1] in existing:
                existing.discard(o[1])
                version[0] += 1
                history[version[0]] = frozenset(existing)
            g = gc.groups.get("g")
            if isinstance(g, ConsumerGroup):
                assert set(g.regexes) == g.subscribed_regexes()
                for regex, resolved in g.regexes.items():
                    want = {t for t in history[resolved.version] if re.fullmatch(regex, t)}
                    assert resolved.topics == want, (regex, resolved)
            live = views(gc)
            for compact in (False, True):
                src = storage
                if compact:
                    src = MemoryOffsetsStorage()
                    for p in storage.partitions:
                        src.partitions[p] = storage.compacted(p)
                gc2 = GroupCoordinator(cfg, clock, src, run_timer=False)
                await gc2.start()
                assert views(gc2) == live, (o, compact)
        await gc.stop()

    asyncio.run(main())
