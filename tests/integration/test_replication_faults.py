"""Fault tests of replication on real processes (issue 14), checked Jepsen-style.

Each test starts three ``strom serve`` nodes (:class:`ClusterProcess`, short session, lag and
election timeouts), a topic with replication factor 3 and ``min.insync.replicas=2``, and runs the
:class:`strom.testing.jepsen.Workload` throughout: idempotent ``acks=all`` producers
(confluent-kafka) recording every acknowledged ``(partition, offset, value)``, a consumer group
reading and committing, a monitor of the group's committed offsets. A fault is injected and
healed while it runs; then every node runs again, the ISRs are full, a final read takes every
partition from the start to its high watermark, and :func:`strom.testing.jepsen.check` looks for
lost, duplicated, misplaced, reordered and phantom records and committed offsets moving back.
The replicas of every partition must also hold the same bytes in the end (a zombie's suffix
truncated away).

The faults: kill -9 of a partition leader; kill -9 of the active controller; kill -9 of two
brokers one after the other (the first back and the ISRs full before the second: with
``min.insync.replicas=2`` and ``acks=all`` nothing acknowledged may be lost); SIGSTOP of a leader
for longer than the broker session timeout, then SIGCONT (the zombie is fenced; nothing it
appended alone may count as committed); a rolling restart (SIGTERM each node in turn, the ISRs
full between). Network partitions are not simulated (they need network namespaces).

The victims and timings come from a seeded random generator (``STROM_FAULT_SEED``, default 14,
printed); ``-m slow`` runs every fault with more seeds and a longer workload. Node logs:
``<tmp>/dc/node-<id>/server.log``.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from strom.testing.cluster_process import ClusterProcess
from strom.testing.jepsen import CheckResult, Workload, check, final_read

pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.integration

NODES = (1, 2, 3)
PARTITIONS = 4
OVERRIDES = (
    "broker.heartbeat.interval.ms=300",
    "broker.session.timeout.ms=2500",
    "replica.lag.time.max.ms=3000",
    "controller.quorum.election.timeout.ms=500",
    "controller.quorum.fetch.timeout.ms=1000",
    "offsets.topic.replication.factor=3",
)
SEED = int(os.environ.get("STROM_FAULT_SEED", "14"))


@dataclass
class Run:
    c: ClusterProcess
    topic: str
    wl: Workload
    rng: random.Random
    t0: float

    def event(self, what: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s] {what} (acked so far {self.wl.acked})", flush=True)

    def leaders(self) -> dict[int, int]:
        node = self.c.running[0]
        md = self.c.metadata(node, [self.topic])
        return {p.partition: p.leader for p in md.topics[self.topic].partitions.values()}

    def some_leader(self) -> tuple[int, int]:
        """(partition, its leader) for a seeded partition."""
        p = self.rng.randrange(PARTITIONS)
        leader = wait_for(f"a leader of partition {p}", lambda: max(self.leaders().get(p, -1), 0))
        return p, int(leader)

    def progress(self, n: int = 100, timeout: float = 60.0) -> None:
        assert self.wl.wait_acked(n, timeout), f"no progress: fewer than {n} records acked in {timeout}s"

    def isr_full(self, timeout: float = 90.0) -> None:
        wait_isr_full(self.c, self.topic, timeout)
        self.event("every ISR full")


def wait_for(what: str, check_fn: Callable[[], object], timeout: float = 30.0, every: float = 0.2) -> object:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = check_fn()
        except Exception as e:  # a node restarting: ask again
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def wait_isr_full(c: ClusterProcess, topic: str, timeout: float = 90.0) -> None:
    """Every running node lists every partition of ``topic`` led, with all three replicas in sync."""

    def full() -> bool:
        for node in c.running:
            md = c.metadata(node, [topic])
            parts = md.topics[topic].partitions
            if len(parts) != PARTITIONS:
                return False
            if any(p.leader < 0 or len(p.isr) != 3 for p in parts.values()):
                return False
        return True

    wait_for(f"full ISRs of {topic}", full, timeout, every=0.3)


def segment_bytes(c: ClusterProcess, node: int, topic: str, partition: int) -> bytes:
    d = Path(c.spec(node).dir) / "data" / f"{topic}-{partition}"
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcess]:
    c = ClusterProcess(tmp_path / "dc", 3, overrides=OVERRIDES)
    c.start()
    try:
        c.wait_ready(90)
        yield c
    finally:
        c.close()
        print(f"node logs: {tmp_path / 'dc'}/node-<id>/server.log")


def scenario(c: ClusterProcess, fault: Callable[[Run], None], seed: int, *, rate: float = 80.0,
             warmup: int = 300, after: int = 300) -> CheckResult:
    """Run the workload, inject ``fault`` (which heals it), then check the history."""
    rng = random.Random(seed)
    topic = f"faults-{uuid.uuid4().hex[:8]}"
    res = c.create_topics(c.running[0], {topic: (PARTITIONS, 3)}, configs={"min.insync.replicas": "2"})
    assert res[topic][0] == 0, res
    c.wait_topic(topic, timeout=60)
    wait_isr_full(c, topic, 60)
    wl = Workload(c.bootstrap, topic, PARTITIONS, producers=2, consumers=2, rate=rate)
    run = Run(c, topic, wl, rng, time.monotonic())
    print(f"seed {seed}, topic {topic}")
    wl.start()
    try:
        run.progress(warmup)
        run.event("workload running")
        fault(run)
        for i in NODES:  # healed by the fault; just in case
            if not c.is_running(i):
                c.start_node(i)
        run.isr_full()
        run.progress(after)
        run.event("progress after the fault")
    finally:
        wl.stop()
        run.event("workload stopped")
    run.isr_full()
    final = final_read(c.bootstrap, topic, PARTITIONS)
    result = check(wl.history, final)
    print(result.details())
    h = wl.history
    failures: dict[str, int] = {}
    for _v, err in h.failed:
        failures[err] = failures.get(err, 0) + 1
    print(f"sent {len(h.sent)}, failed {len(h.failed)} {failures}, unanswered {wl.unanswered}, "
          f"client errors {len(h.errors)}")
    for e in h.errors[:15]:
        print("  ", e)

    def same_bytes() -> bool:
        return all(len({segment_bytes(c, n, topic, p) for n in NODES}) == 1 for p in range(PARTITIONS))

    try:
        wait_for("identical replicas", same_bytes, 30)
        identical = True
    except AssertionError:
        identical = False
    assert result.ok, result.details()
    assert identical, "the replicas of a partition hold different bytes after the ISRs were full"
    assert result.acked >= warmup + after
    return result


# ---------------------------------------------------------------------------------- faults
def kill_leader(run: Run) -> None:
    p, victim = run.some_leader()
    run.c.kill(victim)
    run.event(f"kill -9 node {victim}, leader of partition {p}")
    time.sleep(run.rng.uniform(3, 6))
    run.progress(100)  # the other two hold the ISR
    run.c.start_node(victim)
    run.event(f"node {victim} restarted")


def kill_controller(run: Run) -> None:
    victim = run.c.active_controller()
    run.c.kill(victim)
    run.event(f"kill -9 node {victim}, the active controller")
    time.sleep(run.rng.uniform(3, 6))
    run.progress(100)
    run.c.start_node(victim)
    run.event(f"node {victim} restarted")


def kill_two_in_turn(run: Run) -> None:
    first, second = run.rng.sample(NODES, 2)
    for victim in (first, second):
        run.c.kill(victim)
        run.event(f"kill -9 node {victim}")
        time.sleep(run.rng.uniform(2, 5))
        run.progress(100)
        run.c.start_node(victim)
        run.event(f"node {victim} restarted")
        run.isr_full()
        run.progress(100)


def kill_two_overlapping(run: Run) -> None:
    """Two down at once: the ISRs shrink to the survivor, ``acks=all`` is refused (min ISR 2)
    until one comes back and catches up; nothing acknowledged may be lost on the way."""
    first, second = run.rng.sample(NODES, 2)
    run.c.kill(first)
    run.event(f"kill -9 node {first}")
    time.sleep(run.rng.uniform(3, 5))  # fenced: the ISRs shrink
    run.c.kill(second)
    run.event(f"kill -9 node {second} (one node left: below min.insync.replicas)")
    time.sleep(run.rng.uniform(3, 5))
    run.c.start_node(first)
    run.event(f"node {first} restarted")
    run.progress(100)
    run.c.start_node(second)
    run.event(f"node {second} restarted")


def pause_leader(run: Run) -> None:
    p, victim = run.some_leader()
    run.c.pause(victim)
    run.event(f"SIGSTOP node {victim}, leader of partition {p}")
    try:
        time.sleep(2.5 + run.rng.uniform(3, 6))  # longer than broker.session.timeout.ms
        wait_for(f"partition {p} led by another node",
                 lambda: run.leaders().get(p) not in (victim, -1, None), 15)
        run.event(f"partition {p} has a new leader")
        run.progress(100)
    finally:
        run.c.resume(victim)
        run.event(f"SIGCONT node {victim}")


def rolling_restart(run: Run) -> None:
    order = list(NODES)
    run.rng.shuffle(order)
    for victim in order:
        rc = run.c.stop(victim)
        run.event(f"SIGTERM node {victim} (exit {rc})")
        time.sleep(run.rng.uniform(0.5, 2))
        run.c.start_node(victim)
        run.event(f"node {victim} restarted")
        run.isr_full()
        run.progress(100)


FAULTS: dict[str, Callable[[Run], None]] = {
    "kill_leader": kill_leader,
    "kill_controller": kill_controller,
    "kill_two_in_turn": kill_two_in_turn,
    "kill_two_overlapping": kill_two_overlapping,
    "pause_leader": pause_leader,
    "rolling_restart": rolling_restart,
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault(cluster: ClusterProcess, fault: str) -> None:
    scenario(cluster, FAULTS[fault], SEED)


@pytest.fixture
def slow_only(request: pytest.FixtureRequest) -> None:
    """Skip unless ``-m`` names ``slow`` (before the cluster fixture starts anything)."""
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("more seeds and a longer workload: run with -m slow")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_seeds(slow_only: None, cluster: ClusterProcess, fault: str, seed: int) -> None:
    scenario(cluster, FAULTS[fault], seed, rate=150.0, warmup=1000, after=1000)


def test_network_partition() -> None:
    pytest.skip("network partitions need network namespaces (or iptables) per node: not simulated here")
