"""KIP-848 regular-expression subscriptions (``SubscribedTopicRegex``): resolution against the
topics that exist, re-resolution after topics are created or deleted (no sooner than Kafka's 10 s
minimum), INVALID_REGULAR_EXPRESSION, and the ConsumerGroupRegularExpression record (type 16)
written, replayed and compacted as Kafka's group coordinator does."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest

from strom.clock import ManualClock
from strom.coordinator.classic import ClassicConfig
from strom.coordinator.consumer import ConsumerGroup, ResolvedRegex, TopicCatalog, compile_topic_regex
from strom.coordinator.group_coordinator import CoordinatorConfig, GroupCoordinator
from strom.coordinator.records import (
    CONSUMER_GROUP_REGULAR_EXPRESSION,
    ConsumerGroupKey,
    ConsumerGroupRegularExpressionValue,
    decode_consumer_group_value,
    decode_key,
    encode_consumer_group_regex_key,
    encode_consumer_group_value,
)
from strom.coordinator.storage import MemoryOffsetsStorage
from strom.protocol.errors import ErrorCode as E

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


class Topics:
    """A topic registry stand-in: name -> (id, partitions), a version bumped on create/delete."""

    def __init__(self) -> None:
        self.topics: dict[str, tuple[uuid.UUID, int]] = {}
        self.version = 0
        self._next = 100

    def create(self, name: str, partitions: int) -> None:
        self._next += 1
        self.topics[name] = (uuid.UUID(int=self._next), partitions)
        self.version += 1

    def delete(self, name: str) -> None:
        del self.topics[name]
        self.version += 1

    def resolve(self, name: str) -> tuple[uuid.UUID, int] | None:
        return self.topics.get(name)

    def catalog(self) -> TopicCatalog:
        return TopicCatalog(self.version, lambda: list(self.topics))


def make(storage: MemoryOffsetsStorage, clock: ManualClock) -> GroupCoordinator:
    cfg = CoordinatorConfig(num_partitions=4, classic=ClassicConfig(initial_rebalance_delay_ms=0))
    gc = GroupCoordinator(cfg, clock, storage, run_timer=False)
    gc.verify_replay = True
    run(gc.start())
    return gc


def hb(gc: GroupCoordinator, topics: Topics, member_id: str, epoch: int, **kw: Any) -> Any:
    return run(
        gc.consumer_group_heartbeat(
            "g",
            member_id=member_id,
            member_epoch=epoch,
            resolve=topics.resolve,
            catalog=topics.catalog(),
            rebalance_timeout_ms=30000,
            **kw,
        )
    )


def assigned_names(topics: Topics, result: Any) -> dict[str, list[int]]:
    names = {tid: n for n, (tid, _) in topics.topics.items()}
    return {names[tid]: ps for tid, ps in result.assignment or [] if ps}


def group(gc: GroupCoordinator) -> ConsumerGroup:
    g = gc.groups["g"]
    assert isinstance(g, ConsumerGroup)
    return g


def test_record_format_matches_kafka() -> None:
    # ConsumerGroupRegularExpressionKey: int16 16, string group, string regex (not flexible)
    key = encode_consumer_group_regex_key("g", "a.*")
    assert key == b"\x00\x10" + b"\x00\x01g" + b"\x00\x03a.*"
    assert decode_key(key) == ConsumerGroupKey(CONSUMER_GROUP_REGULAR_EXPRESSION, "g", regex="a.*")
    # value v0, flexible: compact []string Topics, int64 Version, int64 Timestamp, tagged fields
    v = ConsumerGroupRegularExpressionValue(("ab", "ac"), 7, 1234)
    data = encode_consumer_group_value(v)
    assert data == (
        b"\x00\x00"
        + b"\x03"
        + b"\x03ab"
        + b"\x03ac"
        + (7).to_bytes(8, "big")
        + (1234).to_bytes(8, "big")
        + b"\x00"
    )
    assert decode_consumer_group_value(CONSUMER_GROUP_REGULAR_EXPRESSION, data) == v


def test_regex_compilation_refuses_what_re2_cannot_do() -> None:
    assert compile_topic_regex("^orders-.*").fullmatch("orders-1")
    for bad in ("a(", "[z-a]", "a(?=b)", "(?<!x)y", r"(a)\1", "a++", "(?>ab)"):
        with pytest.raises(ValueError):
            compile_topic_regex(bad)


def test_join_with_regex_resolves_existing_topics_full_match_only() -> None:
    clock = ManualClock()
    topics = Topics()
    topics.create("orders-a", 2)
    topics.create("orders-b", 1)
    topics.create("xorders-c", 1)
    gc = make(MemoryOffsetsStorage(), clock)
    r = hb(gc, topics, "", 0, subscribed_topic_regex="orders-.*")
    assert r.error == E.NONE
    assert assigned_names(topics, r) == {"orders-a": [0, 1], "orders-b": [0]}
    g = group(gc)
    assert g.regexes["orders-.*"].topics == {"orders-a", "orders-b"}
    assert g.describe_member(g.members[r.member_id])["subscribed_topic_regex"] == "orders-.*"


def test_invalid_regex_is_refused_and_creates_no_group() -> None:
    clock = ManualClock()
    topics = Topics()
    gc = make(MemoryOffsetsStorage(), clock)
    r = hb(gc, topics, "", 0, subscribed_topic_regex="orders-(")
    assert r.error == E.INVALID_REGULAR_EXPRESSION
    assert "orders-(" in (r.error_message or "")
    assert "g" not in gc.groups
    ok = hb(gc, topics, "", 0, subscribed_topic_names=["x"])
    bad = hb(gc, topics, ok.member_id, ok.member_epoch, subscribed_topic_regex="(?=x)")
    assert bad.error == E.INVALID_REGULAR_EXPRESSION
    assert group(gc).members[ok.member_id].subscribed_topic_regex is None


def test_created_topic_is_picked_up_after_min_interval_and_deleted_one_dropped() -> None:
    clock = ManualClock()
    topics = Topics()
    topics.create("p-1", 1)
    storage = MemoryOffsetsStorage()
    gc = make(storage, clock)
    r = hb(gc, topics, "", 0, subscribed_topic_regex="p-.*")
    mid, epoch = r.member_id, r.member_epoch
    assert assigned_names(topics, r) == {"p-1": [0]}
    topics.create("p-2", 2)
    clock.advance(5000)
    r = hb(gc, topics, mid, epoch)
    assert r.member_epoch == epoch  # within REGEX_BATCH_REFRESH_MIN_INTERVAL_MS: not yet
    clock.advance(5000)
    r = hb(gc, topics, mid, epoch)
    assert r.member_epoch > epoch
    assert assigned_names(topics, r) == {"p-1": [0], "p-2": [0, 1]}
    assert group(gc).regexes["p-.*"].topics == {"p-1", "p-2"}
    epoch = r.member_epoch
    # a deleted topic leaves the assignment at once (the subscribed topic metadata), and the
    # resolution at the next refresh
    topics.delete("p-1")
    r = hb(gc, topics, mid, epoch, owned={"p-1": {0}, "p-2": {0, 1}})
    assert assigned_names(topics, r) == {"p-2": [0, 1]}  # revoke p-1 first
    r = hb(gc, topics, mid, epoch, owned={"p-2": {0, 1}})
    assert r.member_epoch > epoch
    clock.advance(10000)
    r = hb(gc, topics, mid, r.member_epoch)
    assert group(gc).regexes["p-.*"].topics == {"p-2"}
    # the state is rebuilt by replay, as written and compacted
    for src in (storage, _compacted(storage)):
        gc2 = make(src, clock)
        assert group(gc2).view() == group(gc).view()


def test_periodic_refresh_without_topic_changes() -> None:
    clock = ManualClock()
    topics = Topics()
    topics.create("p-1", 1)
    gc = make(MemoryOffsetsStorage(), clock)
    r = hb(gc, topics, "", 0, subscribed_topic_regex="p-.*")
    t0 = group(gc).regexes["p-.*"].timestamp
    clock.advance(60000)
    hb(gc, topics, r.member_id, r.member_epoch)
    assert group(gc).regexes["p-.*"].timestamp == t0  # no new topics, refresh interval not over
    clock.advance(600000)
    hb(gc, topics, r.member_id, r.member_epoch)
    assert group(gc).regexes["p-.*"].timestamp == clock.time_ms()


def test_regex_shared_then_dropped_with_its_last_member() -> None:
    clock = ManualClock()
    topics = Topics()
    topics.create("a1", 4)
    topics.create("b1", 2)
    storage = MemoryOffsetsStorage()
    gc = make(storage, clock)
    r1 = hb(gc, topics, "", 0, subscribed_topic_regex="a.*")
    r2 = hb(gc, topics, "", 0, subscribed_topic_regex="a.*", subscribed_topic_names=["b1"])
    g = group(gc)
    assert set(g.regexes) == {"a.*"}
    assert set(g.member_topics(g.members[r2.member_id])) == {"a1", "b1"}
    # the second member switches to names only (Kafka's empty regex clears it)
    hb(gc, topics, r2.member_id, r2.member_epoch, subscribed_topic_regex="")
    assert group(gc).members[r2.member_id].subscribed_topic_regex is None
    assert set(group(gc).regexes) == {"a.*"}
    hb(gc, topics, r1.member_id, -1)
    assert group(gc).regexes == {}
    keys = [decode_key(k) for k, _ in storage.partitions[gc.partition_for("g")]]
    regex_keys = [
        k for k in keys if isinstance(k, ConsumerGroupKey) and k.kind == CONSUMER_GROUP_REGULAR_EXPRESSION
    ]
    assert regex_keys and regex_keys[-1].regex == "a.*"
    last_value = [v for k, v in storage.partitions[gc.partition_for("g")] if decode_key(k) == regex_keys[-1]][
        -1
    ]
    assert last_value is None  # a tombstone
    gc2 = make(_compacted(storage), clock)
    assert group(gc2).view() == group(gc).view()


def test_group_deletion_tombstones_regexes() -> None:
    clock = ManualClock()
    topics = Topics()
    topics.create("a1", 1)
    storage = MemoryOffsetsStorage()
    gc = make(storage, clock)
    r = hb(gc, topics, "", 0, subscribed_topic_regex="a.*")
    group(gc).regexes["zombie"] = ResolvedRegex(frozenset(), 0, 0)  # must go as well
    hb(gc, topics, r.member_id, -1)
    assert run(gc.delete_groups(["g"])) == {"g": E.NONE}
    gc2 = make(_compacted(storage), clock)
    assert "g" not in gc2.groups


def _compacted(storage: MemoryOffsetsStorage) -> MemoryOffsetsStorage:
    out = MemoryOffsetsStorage()
    for p in storage.partitions:
        out.partitions[p] = storage.compacted(p)
    return out


def test_empty_regex_group_becomes_classic_and_its_resolutions_go() -> None:
    clock = ManualClock()
    topics = Topics()
    topics.create("a1", 1)
    storage = MemoryOffsetsStorage()
    gc = make(storage, clock)
    r = hb(gc, topics, "", 0, subscribed_topic_regex="a.*")
    commit = run(
        gc.commit_offsets(
            "g", member_id=r.member_id, generation_id=r.member_epoch, offsets={("a1", 0): (5, -1, "")}
        )
    )
    assert commit == {("a1", 0): E.NONE}
    hb(gc, topics, r.member_id, -1)
    joined = run(
        gc.join_group(
            "g",
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[("range", b"")],
            session_timeout_ms=10000,
            rebalance_timeout_ms=10000,
            client_id="c",
            client_host="/h",
        )
    )
    assert joined.error == E.MEMBER_ID_REQUIRED
    for src in (storage, _compacted(storage)):
        gc2 = make(src, clock)
        assert not isinstance(gc2.groups["g"], ConsumerGroup)
        assert gc2.offsets["g"][("a1", 0)].offset == 5
    regex_records = [
        v
        for k, v in storage.partitions[gc.partition_for("g")]
        if isinstance(dk := decode_key(k), ConsumerGroupKey) and dk.kind == CONSUMER_GROUP_REGULAR_EXPRESSION
    ]
    assert regex_records[-1] is None
