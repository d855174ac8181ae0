"""Fault scenarios for the replication simulation (``replsim``): each takes a seed, runs a
cluster of three brokers with producers (acks=-1 and acks=1, idempotent or not) under faults,
settles it, and returns it. A broken invariant raises ``replsim.InvariantViolation``."""

from __future__ import annotations

from collections.abc import Callable

from replsim import Cluster


def _cluster(seed: int, **kw: object) -> Cluster:
    c = Cluster(seed, **kw)  # type: ignore[arg-type]
    c.start()
    c.add_producer(-1, True, interval_ms=15)
    c.add_producer(-1, False, interval_ms=25)
    c.add_producer(1, True, interval_ms=25)
    c.add_producer(1, False, interval_ms=40)
    return c


def _leader(c: Cluster) -> int:
    return int(c.registration().leader)


def _kill(c: Cluster, b: int) -> None:
    """kill -9, or a power cut when the fault model allows one (see ``may_lose_unflushed``)."""
    c.kill(b, lose_unflushed=c.rng.random() < 0.6 and c.may_lose_unflushed(b))


def _run(seed: int, body: Callable[[Cluster], None], **kw: object) -> Cluster:
    c = _cluster(seed, **kw)
    try:
        c.run_for(c.rng.randint(100, 300))
        body(c)
        c.settle()
        return c
    finally:
        c.close()


def leader_kill(seed: int) -> Cluster:
    def body(c: Cluster) -> None:
        for _ in range(2):
            b = _leader(c)
            if b > 0:
                _kill(c, b)
            c.run_for(c.rng.randint(150, 600))
            c.restart(b)
            c.run_for(c.rng.randint(100, 400))

    return _run(seed, body)


def follower_kill(seed: int) -> Cluster:
    def body(c: Cluster) -> None:
        for _ in range(2):
            leader = _leader(c)
            b = c.rng.choice([x for x in c.brokers if x != leader])
            _kill(c, b)
            c.run_for(c.rng.randint(50, 450))
            c.restart(b)
            c.run_for(c.rng.randint(100, 400))

    return _run(seed, body)


def leader_partitioned(seed: int) -> Cluster:
    """The leader cut off from the other brokers and the controller; some producers may still
    reach it (acks=-1 to a stale leader must never be acknowledged wrongly)."""

    def body(c: Cluster) -> None:
        b = _leader(c)
        with_it = [p.node_id for p in c.producers if c.rng.random() < 0.5]
        c.partition([b, *with_it])
        c.run_for(c.rng.randint(150, 750))
        c.heal()
        c.run_for(c.rng.randint(100, 400))

    return _run(seed, body)


def back_to_back(seed: int) -> Cluster:
    """Two failures in a row: the leader, then (soon after) the new leader or another broker."""

    def body(c: Cluster) -> None:
        first = _leader(c)
        _kill(c, first)
        c.run_for(c.rng.randint(10, 250))
        second = _leader(c)
        if second == first or second < 0 or c.rng.random() < 0.3:
            second = c.rng.choice([x for x in c.brokers if x != first])
        _kill(c, second)
        c.run_for(c.rng.randint(50, 400))
        order = [first, second]
        c.rng.shuffle(order)
        for b in order:
            c.restart(b)
            c.run_for(c.rng.randint(0, 200))
        c.run_for(250)

    return _run(seed, body)


def unflushed_tail(seed: int) -> Cluster:
    """A follower loses its unflushed tail (power cut) again and again while data flows."""

    def body(c: Cluster) -> None:
        for _ in range(3):
            leader = _leader(c)
            b = c.rng.choice([x for x in c.brokers if x != leader])
            c.kill(b, lose_unflushed=c.may_lose_unflushed(b))
            c.run_for(c.rng.randint(0, 150))
            c.restart(b)
            c.run_for(c.rng.randint(50, 300))

    return _run(seed, body, flush_messages=1 << 62)


def slow_follower(seed: int) -> Cluster:
    """A follower far slower than replica.lag.time.max.ms: out of the ISR, back when it keeps up."""

    def body(c: Cluster) -> None:
        leader = _leader(c)
        b = c.rng.choice([x for x in c.brokers if x != leader])
        c.slow[b] = c.rng.randint(50, 200)
        c.run_for(c.rng.randint(400, 1000))
        c.slow.clear()
        c.run_for(c.rng.randint(150, 400))

    return _run(seed, body)


def chaos(seed: int) -> Cluster:
    """Random kills, power cuts, partitions and slow links on a lossy network."""

    def body(c: Cluster) -> None:
        for _ in range(6):
            r = c.rng.random()
            b = c.rng.choice(list(c.brokers))
            if r < 0.3:
                _kill(c, b)
            elif r < 0.5:
                others = [x for x in c.brokers if x != b]
                c.partition([b], others) if c.rng.random() < 0.5 else c.partition([b, CONTROLLER_ID])
            elif r < 0.65:
                c.slow[b] = c.rng.randint(25, 150)
            else:
                c.heal()
                c.slow.clear()
                for x in c.brokers:
                    if c.rng.random() < 0.5:
                        c.restart(x)
            c.run_for(c.rng.randint(50, 350))
        c.heal()

    return _run(seed, body, drop_rate=0.03)


CONTROLLER_ID = 0

SCENARIOS: dict[str, Callable[[int], Cluster]] = {
    "leader-kill": leader_kill,
    "follower-kill": follower_kill,
    "leader-partitioned": leader_partitioned,
    "back-to-back": back_to_back,
    "unflushed-tail": unflushed_tail,
    "slow-follower": slow_follower,
    "chaos": chaos,
}
