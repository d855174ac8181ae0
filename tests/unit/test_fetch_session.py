"""KIP-227 fetch session bookkeeping (strom.server.fetch_session): epochs, what an incremental
answer reports, fairness order, and the cache's eviction rules."""

from __future__ import annotations

import random

from strom.server.fetch_session import CachedPartition, FetchSessionCache


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def parts(*keys: tuple[str, int]) -> dict[tuple[str, int], CachedPartition]:
    return {k: CachedPartition(fetch_offset=0, max_bytes=1 << 20) for k in keys}


def test_session_epochs_and_updates() -> None:
    cache = FetchSessionCache(10, Clock(), rng=random.Random(1))
    s = cache.create(privileged=False, uses_topic_ids=True, partitions=parts(("t", 0), ("t", 1)))
    assert s is not None and s.epoch == 1 and cache.get(s.id) is s
    s.next_epoch()
    assert s.epoch == 2
    s.epoch = 0x7FFFFFFF
    s.next_epoch()
    assert s.epoch == 1  # wraps to 1, never 0 (0 opens a session) nor -1 (closes one)
    s.partitions[("t", 0)].high_watermark = 5
    s.update([(("t", 0), CachedPartition(fetch_offset=7, max_bytes=10)),
              (("u", 0), CachedPartition(fetch_offset=3, max_bytes=10))], [("t", 1)])
    assert list(s.partitions) == [("t", 0), ("u", 0)]
    p = s.partitions[("t", 0)]
    assert (p.fetch_offset, p.max_bytes, p.high_watermark) == (7, 10, 5)  # what was sent stays


def test_incremental_reports_only_news() -> None:
    cache = FetchSessionCache(10, Clock())
    s = cache.create(privileged=False, uses_topic_ids=False, partitions=parts(("t", 0)))
    assert s is not None
    key = ("t", 0)
    news = dict(has_records=False, error_code=0, high_watermark=10, last_stable_offset=10,
                log_start_offset=0, forced=False)
    assert s.to_report(key, **news)  # never told: reported
    assert not s.to_report(key, **news)  # nothing new
    assert s.to_report(key, **(news | {"has_records": True}))
    assert s.to_report(key, **(news | {"high_watermark": 11, "last_stable_offset": 11}))
    assert not s.to_report(key, **(news | {"high_watermark": 11, "last_stable_offset": 11}))
    moved = {"high_watermark": 11, "last_stable_offset": 11, "log_start_offset": 4}
    assert s.to_report(key, **(news | moved))
    assert s.to_report(key, **(news | {"error_code": 6}))  # errors always
    s.note_sent(key, 20, 20, 4)
    told = {"high_watermark": 20, "last_stable_offset": 20, "log_start_offset": 4}
    assert not s.to_report(key, **(news | told))


def test_rotation_puts_served_partitions_last() -> None:
    cache = FetchSessionCache(10, Clock())
    s = cache.create(privileged=False, uses_topic_ids=False,
                     partitions=parts(("t", 0), ("t", 1), ("t", 2)))
    assert s is not None
    s.rotate([("t", 0)])
    assert list(s.partitions) == [("t", 1), ("t", 2), ("t", 0)]


def test_eviction_rules() -> None:
    clock = Clock()
    cache = FetchSessionCache(2, clock, eviction_ms=1000, rng=random.Random(7))
    a = cache.create(privileged=False, uses_topic_ids=True, partitions=parts(("t", 0), ("t", 1)))
    b = cache.create(privileged=True, uses_topic_ids=True, partitions=parts(("t", 0)))
    assert a is not None and b is not None and len(cache) == 2
    # full: a smaller consumer session does not displace a bigger one, nor a follower's
    assert cache.create(privileged=False, uses_topic_ids=True, partitions=parts(("t", 0))) is None
    # a bigger consumer session takes a smaller consumer's place
    clock.now += 10
    c = cache.create(privileged=False, uses_topic_ids=True, partitions=parts(("t", 0), ("t", 1), ("t", 2)))
    assert c is not None and cache.get(a.id) is None and cache.evictions == 1
    # a follower's session takes a consumer's place, whatever its size
    d = cache.create(privileged=True, uses_topic_ids=True, partitions=parts(("x", 0)))
    assert d is not None and cache.get(c.id) is None and cache.get(b.id) is b
    # two followers' sessions: no consumer gets in until one of them goes stale
    nine = parts(*[("t", i) for i in range(9)])
    assert cache.create(privileged=False, uses_topic_ids=True, partitions=nine) is None
    clock.now += 500
    cache.touch(d)
    clock.now += 600  # b unused for 1,100 ms (> 1,000), d for 600
    e = cache.create(privileged=False, uses_topic_ids=True, partitions=parts(("t", 0)))
    assert e is not None and cache.get(b.id) is None and cache.get(d.id) is d
    assert cache.incremental_fetches == 1 and cache.partitions_cached == 2


def test_no_slots_no_sessions() -> None:
    cache = FetchSessionCache(0, Clock())
    assert cache.create(privileged=True, uses_topic_ids=True, partitions=parts(("t", 0))) is None
