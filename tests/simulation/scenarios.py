"""Fault scenarios for the quorum simulation; each takes a seed and runs to a settled cluster."""

from __future__ import annotations

from collections.abc import Callable

from raftsim import Cluster


def initial_election(seed: int, voters: int) -> Cluster:
    c = Cluster(seed, voters=voters, max_delay_ms=20)
    c.client()
    c.run_for(5_000)
    if c.leader() is None:
        c.fail("no leader after 5 s")
    if c.committed_end == 0:
        c.fail("nothing committed after 5 s")
    c.settle()
    return c


def leader_kill(seed: int) -> Cluster:
    c = Cluster(seed, voters=3, max_delay_ms=20, drop_rate=0.02)
    c.client()
    c.run_for(3_000)
    for _ in range(3):
        leader = c.leader()
        if leader is not None:
            c.kill(leader.node_id)
            c.run_for(c.rng.randint(2_000, 6_000))
            c.restart(leader.node_id)
        c.run_for(2_000)
    c.settle()
    return c


def all_killed(seed: int) -> Cluster:
    c = Cluster(seed, voters=3, max_delay_ms=20)
    c.client(interval_ms=20)
    c.run_for(3_000)
    for _ in range(2):
        for nid in c.rng.sample(sorted(c.nodes), len(c.nodes)):
            c.kill(nid)
            c.run_for(c.rng.randint(0, 30))
        c.run_for(c.rng.randint(0, 2_000))
        for nid in c.rng.sample(sorted(c.nodes), len(c.nodes)):
            c.restart(nid)
            c.run_for(c.rng.randint(0, 500))
        c.run_for(3_000)
    c.settle()
    return c


def leader_partitioned(seed: int) -> Cluster:
    c = Cluster(seed, voters=5, max_delay_ms=20)
    c.client()
    c.run_for(3_000)
    leader = c.leader()
    if leader is not None:
        rest = [n for n in c.nodes if n != leader.node_id]
        c.partition([leader.node_id], rest)
        c.run_for(c.rng.randint(3_000, 8_000))
        c.heal()
        c.run_for(3_000)
    c.settle()
    return c


def splits(seed: int) -> Cluster:
    """Repeated 2/3 splits of five voters (and 1/2 of three), with lossy links."""
    c = Cluster(seed, voters=c_voters(seed), max_delay_ms=30, drop_rate=0.05)
    c.client()
    c.run_for(2_000)
    for _ in range(4):
        ids = sorted(c.nodes)
        c.rng.shuffle(ids)
        cut = len(ids) // 2
        c.partition(ids[:cut], ids[cut:])
        c.run_for(c.rng.randint(1_000, 5_000))
        if c.rng.random() < 0.5:
            c.heal()
            c.run_for(c.rng.randint(0, 2_000))
    c.settle()
    return c


def c_voters(seed: int) -> int:
    return 5 if seed % 2 else 3


def back_to_back(seed: int) -> Cluster:
    c = Cluster(seed, voters=5, max_delay_ms=20)
    c.client(interval_ms=20)
    c.run_for(3_000)
    killed = []
    for _ in range(2):
        leader = c.leader()
        while leader is None:
            c.run_for(100)
            leader = c.leader()
        c.kill(leader.node_id)
        killed.append(leader.node_id)
        # the next leader dies as soon as it is elected, or shortly after
        for _ in range(100):
            c.run_for(50)
            if c.leader() is not None:
                break
        c.run_for(c.rng.randint(0, 300))
    c.run_for(2_000)
    for nid in killed:
        c.restart(nid)
    c.settle()
    return c


def unflushed_tail(seed: int) -> Cluster:
    """The leader dies within its append linger: the unflushed tail is lost on its disk."""
    c = Cluster(seed, voters=3, max_delay_ms=5)
    c.client(interval_ms=7)
    for _ in range(4):
        c.run_for(c.rng.randint(1_000, 3_000))
        leader = c.leader()
        if leader is None:
            continue
        c.run_for(c.rng.randint(0, 20))

        c.kill(leader.node_id)
        if c.rng.random() < 0.5:  # and maybe a follower with it
            other = c.rng.choice([n for n in c.nodes if n != leader.node_id])
            c.kill(other)
            c.run_for(c.rng.randint(100, 3_000))
            c.restart(other)
        c.run_for(c.rng.randint(500, 3_000))
        c.restart(leader.node_id)
    c.settle()
    return c


def observers(seed: int) -> Cluster:
    c = Cluster(seed, voters=3, observers=2, max_delay_ms=20, drop_rate=0.02)
    c.client()
    c.run_for(3_000)
    for _ in range(3):
        victim = c.rng.choice(sorted(c.nodes))
        c.kill(victim)
        c.run_for(c.rng.randint(1_000, 4_000))
        c.restart(victim)
        c.run_for(1_000)
    c.settle()
    for nid in (4, 5):
        raft = c.nodes[nid].raft
        if raft is None or raft.epoch == 0 or raft.applied_offset == 0:
            c.fail(f"observer {nid} did not follow")
    for epoch, leader in c.epoch_leader.items():
        if leader in (4, 5):
            c.fail(f"observer {leader} led epoch {epoch}")
    return c


def snapshot_catch_up(seed: int) -> Cluster:
    """Nodes snapshot and drop their logs; a node away for long catches up by FetchSnapshot."""
    c = Cluster(seed, voters=3, observers=1, max_delay_ms=10, snapshot_every=40, snapshot_chunk_bytes=32)
    c.client(interval_ms=10)
    c.run_for(2_000)
    lagging = c.rng.choice(sorted(c.nodes))
    c.kill(lagging)
    c.run_for(6_000)
    c.restart(lagging)
    c.run_for(c.rng.randint(0, 2_000))
    victim = c.rng.choice(sorted(c.nodes))
    c.kill(victim)
    c.run_for(2_000)
    c.restart(victim)
    c.settle()
    listener = c.nodes[lagging].listener
    assert listener is not None
    if listener.snapshots_loaded == 0:
        c.fail(f"lagging node {lagging} did not load a snapshot")
    return c


def stale_leader_snapshot(seed: int) -> Cluster:
    """A leader cut off keeps taking appends until check-quorum; the majority moves on and
    snapshots. Back, the old leader's log reaches past the new snapshot with an older epoch."""
    c = Cluster(seed, voters=3, max_delay_ms=10, snapshot_every=30, snapshot_chunk_bytes=48)
    c.client(interval_ms=5)
    c.run_for(c.rng.randint(1_000, 3_000))
    leader = c.leader()
    if leader is not None:
        rest = [n for n in c.nodes if n != leader.node_id]
        c.partition([leader.node_id], rest)
        c.run_for(c.rng.randint(1_000, 6_000))
        c.heal()
    c.settle()
    return c


def slow_network(seed: int) -> Cluster:
    """Delays up to well past the request and fetch timeouts' fractions, loss and duplicates:
    answers arrive late, out of order and twice; a leader is killed in the middle."""
    c = Cluster(seed, voters=5, max_delay_ms=700, drop_rate=0.1, duplicate_rate=0.05)
    c.client(interval_ms=30)
    c.run_for(10_000)
    leader = c.leader()
    if leader is not None:
        c.kill(leader.node_id)
    c.run_for(10_000)
    c.max_delay_ms, c.drop_rate, c.duplicate_rate = 10, 0.0, 0.0
    c.settle(within_ms=30_000)
    return c


def chaos(seed: int) -> Cluster:
    """Everything at random: kills, restarts, partitions, loss, snapshots, an observer."""
    c = Cluster(
        seed,
        voters=c_voters(seed),
        observers=seed % 2,
        max_delay_ms=40,
        drop_rate=0.05,
        duplicate_rate=0.03,
        snapshot_every=60 if seed % 3 == 0 else 0,
    )
    c.client(interval_ms=15)
    for _ in range(12):
        c.run_for(c.rng.randint(50, 2_000))
        r = c.rng.random()
        ids = sorted(c.nodes)
        if r < 0.3:
            c.kill(c.rng.choice(ids))
        elif r < 0.55:
            for nid in ids:
                c.restart(nid)
        elif r < 0.75:
            c.rng.shuffle(ids)
            cut = c.rng.randint(1, len(ids) - 1) if len(ids) > 1 else 1
            c.partition(ids[:cut], ids[cut:])
        elif r < 0.9:
            c.heal()
        else:
            leader = c.leader()
            if leader is not None:
                c.resign(leader.node_id)
    c.settle()
    return c


SCENARIOS: dict[str, Callable[[int], Cluster]] = {
    "election-1": lambda s: initial_election(s, 1),
    "election-3": lambda s: initial_election(s, 3),
    "election-5": lambda s: initial_election(s, 5),
    "leader-kill": leader_kill,
    "all-killed": all_killed,
    "leader-partitioned": leader_partitioned,
    "splits": splits,
    "back-to-back": back_to_back,
    "unflushed-tail": unflushed_tail,
    "observers": observers,
    "snapshot-catch-up": snapshot_catch_up,
    "stale-leader-snapshot": stale_leader_snapshot,
    "slow-network": slow_network,
    "chaos": chaos,
}
