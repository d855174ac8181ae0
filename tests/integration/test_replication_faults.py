"""Fault tests of replication on real processes (issue 14), checked Jepsen-style.

Each test starts three ``strom serve`` nodes (:class:`ClusterProcess`, short session, lag and
election timeouts), a topic with replication factor 3 and ``min.insync.replicas=2``, and runs the
:class:`strom.testing.jepsen.Workload` throughout: idempotent ``acks=all`` producers
(confluent-kafka) recording every acknowledged ``(partition, offset, value)``, a consumer group
reading and committing, a monitor of the group's committed offsets; beside it, on a second topic
of the same shape, the :class:`strom.testing.jepsen.TxnWorkload`: transactional producers
(``transactional.id``) whose transactions span several partitions, a quarter of them aborted on
purpose, read by a read_committed and a read_uncommitted consumer. A fault is injected and
healed while it runs; then every node runs again, the ISRs are full, a final read takes every
partition from the start to its high watermark, and :func:`strom.testing.jepsen.check` looks for
lost, duplicated, misplaced, reordered and phantom records and committed offsets moving back;
:func:`strom.testing.jepsen.check_txn` for aborted reads, torn transactions and committed ones
lost (``__transaction_state`` is replicated three times too).
The replicas of every partition must also hold the same bytes in the end (a zombie's suffix
truncated away).

The faults: kill -9 of a partition leader; kill -9 of the active controller; kill -9 of the
group coordinator (``__consumer_offsets`` is replicated three times here); kill -9 and SIGSTOP of
the transaction coordinator (the leader of ``__transaction_state``); kill -9 of two
brokers one after the other (the first back and the ISRs full before the second: with
``min.insync.replicas=2`` and ``acks=all`` nothing acknowledged may be lost); kill -9 of two
brokers overlapping (one node left, below ``min.insync.replicas``: writes wait, then resume);
SIGSTOP of a leader for longer than the broker session timeout, then SIGCONT (the zombie is
fenced; nothing it appended alone may count as committed); SIGSTOP of the active controller
(writes go on: the other brokers heartbeat to the new controller and stay unfenced); a rolling
restart (SIGTERM each node in turn, the ISRs full between); a follower's disk filling up
(each node's data dir is a small tmpfs: a ballast file takes the rest; the node takes its dir
offline and stops, the two others keep acks=all going; space returns, it restarts and rejoins);
AlterPartitionReassignments of a partition's replicas from three to two and to a new set of three.
A network partition isolating a leader runs on its own cluster whose nodes live in network
namespaces (:mod:`strom.testing.netns_cluster`; root only, skipped with the reason otherwise).

One cluster serves the module (each test has its own topic and group, and heals its fault). The
victims and timings come from a seeded random generator (``STROM_FAULT_SEED``, default 14,
printed); ``-m slow`` runs every fault with more seeds and a longer workload. Node logs:
``<tmp>/dc/node-<id>/server.log``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from strom.client.cluster_admin import (
    alter_partition_reassignments,
    elect_leaders,
    list_partition_reassignments,
)
from strom.testing.cluster_process import ClusterProcess
from strom.testing.jepsen import (
    CheckResult,
    TxnCheckResult,
    TxnWorkload,
    Workload,
    check,
    check_txn,
    final_read,
    final_txn_read,
)
from strom.testing.netns_cluster import NetnsCluster, netns_unavailable
from strom.testing.polling import wait_for

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
    "transaction.state.log.replication.factor=3",
)
SEED = int(os.environ.get("STROM_FAULT_SEED", "14"))
DATA_TMPFS_SIZE = "160m"  # each node's data dir (disk_full_follower fills one)


@dataclass
class Run:
    c: ClusterProcess
    topic: str
    wl: Workload
    txn: TxnWorkload
    rng: random.Random
    t0: float

    def event(self, what: str) -> None:
        now = time.monotonic()
        print(f"[{now - self.t0:6.1f}s] {what} (acked so far {self.wl.acked}; clock {now:.1f})", flush=True)

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

    def txn_progress(self, n: int = 5, timeout: float = 60.0) -> None:
        assert self.txn.wait_committed(n, timeout), \
            f"no progress: fewer than {n} transactions committed in {timeout}s"

    def isr_full(self, timeout: float = 90.0) -> None:
        wait_isr_full(self.c, self.topic, timeout)
        self.event("every ISR full")




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


def data_dir(c: ClusterProcess, node: int) -> Path:
    return Path(c.spec(node).dir) / "data"


def mount_tmpfs(path: Path, size: str) -> str | None:
    """A tmpfs of ``size`` at ``path``; None, or why it cannot be mounted (not root)."""
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, text=True, check=False)
    return None if r.returncode == 0 else (r.stderr.strip() or f"mount exited with {r.returncode}")


def fill(path: Path) -> int:
    """Write a ballast file at ``path`` until its filesystem is full; the bytes written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    chunk = b"\0" * 65536
    try:
        while True:
            try:
                if os.write(fd, chunk) == 0:
                    break
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    """The module's cluster. Each node's data dir (``log.dirs``; the metadata log is beside it,
    in ``metadata.log.dir``) is a small tmpfs where mounting one is allowed, so that a test can
    fill one node's disk (``disk_full_follower``)."""
    root = tmp_path_factory.mktemp("faults") / "dc"
    c = ClusterProcess(root, 3, overrides=OVERRIDES)
    c.dev.plan()
    mounted: list[Path] = []
    for i in NODES:
        why = mount_tmpfs(data_dir(c, i), DATA_TMPFS_SIZE)
        if why is not None:
            c.tmpfs_refused = why  # type: ignore[attr-defined]
            break
        mounted.append(data_dir(c, i))
    try:
        c.dev.format()
        c.start()
        c.wait_ready(90)
        internal = ["__consumer_offsets", "__transaction_state"]
        md = c.metadata(c.running[0], internal)
        for t in internal:  # the coordinators' state survives the loss of a node
            assert all(len(p.replicas) == 3 for p in md.topics[t].partitions.values()), md.topics[t]
        yield c
    finally:
        c.close()
        for m in mounted:
            subprocess.run(["umount", "-l", str(m)], check=False)
        print(f"node logs: {root}/node-<id>/server.log")


@pytest.fixture
def cluster(shared_cluster: ClusterProcess) -> ClusterProcess:
    """The module's cluster with every node running (each test heals its fault; a failed one may
    not have)."""
    c = shared_cluster
    for i in NODES:
        c.resume(i)
        if not c.is_running(i):
            c.start_node(i)
    c.wait_ready(90)
    print(f"node logs: {c.root}/node-<id>/server.log")
    return c


def scenario(c: ClusterProcess, fault: Callable[[Run], None], seed: int, *, rate: float = 80.0,
             warmup: int = 300, after: int = 300, txn_rate: float = 4.0
             ) -> tuple[CheckResult, TxnCheckResult]:
    """Run the workloads, inject ``fault`` (which heals it), then check the histories."""
    rng = random.Random(seed)
    topic = f"faults-{uuid.uuid4().hex[:8]}"
    txn_topic = f"{topic}-txn"
    res = c.create_topics(c.running[0], {topic: (PARTITIONS, 3), txn_topic: (PARTITIONS, 3)},
                          configs={"min.insync.replicas": "2"})
    assert res[topic][0] == 0 and res[txn_topic][0] == 0, res
    for t in (topic, txn_topic):
        c.wait_topic(t, timeout=60)
        wait_isr_full(c, t, 60)
    wl = Workload(c.bootstrap, topic, PARTITIONS, producers=2, consumers=2, rate=rate)
    txn = TxnWorkload(c.bootstrap, txn_topic, PARTITIONS, producers=2, rate=txn_rate, seed=seed)
    run = Run(c, topic, wl, txn, rng, time.monotonic())
    print(f"seed {seed}, topics {topic} and {txn_topic}")
    txn.start()
    wl.start()
    try:
        run.progress(warmup)
        run.txn_progress(5)
        run.event(f"workload running ({txn.committed} transactions committed)")
        fault(run)
        for i in NODES:  # healed by the fault; just in case
            if not c.is_running(i):
                c.start_node(i)
        run.isr_full()
        run.progress(after)
        run.txn_progress(5)
        run.event(f"progress after the fault ({txn.committed} transactions committed)")
    finally:
        wl.stop(drain=30.0)
        txn.stop(drain=60.0)
        run.event("workload stopped")
    run.isr_full()
    wait_isr_full(c, txn_topic)
    wl.read_final_committed()
    final = final_read(c.bootstrap, topic, PARTITIONS)
    result = check(wl.history, final)
    print(result.details())
    txn_result = check_txn(txn.history, final_txn_read(c.bootstrap, txn_topic, PARTITIONS, "read_committed"),
                           final_txn_read(c.bootstrap, txn_topic, PARTITIONS, "read_uncommitted"))
    print(txn_result.details())
    h = wl.history
    failures: dict[str, int] = {}
    for _v, err in h.failed:
        failures[err] = failures.get(err, 0) + 1
    print(f"sent {len(h.sent)}, failed {len(h.failed)} {failures}, unanswered {wl.unanswered}, "
          f"client errors {len(h.errors)}, transactional client errors {len(txn.history.errors)}")
    for e in [e for e in h.errors + txn.history.errors if "_TRANSPORT" not in e][:15]:
        print("  ", e)  # (refused connections: expected)

    def same_bytes() -> bool:
        return all(len({segment_bytes(c, n, t, p) for n in NODES}) == 1
                   for t in (topic, txn_topic) for p in range(PARTITIONS))

    try:
        wait_for("identical replicas", same_bytes, 30)
        identical = True
    except AssertionError:
        identical = False
    if result.duplicated:  # which batches hold the copies (producer id, epoch, sequence), per node
        print_batches(c, topic, {p for places in result.duplicated.values() for p, _o in places},
                      {o for places in result.duplicated.values() for _p, o in places})
    assert result.ok, result.details()
    assert txn_result.ok, txn_result.details()
    assert identical, "the replicas of a partition hold different bytes after the ISRs were full"
    assert result.acked >= warmup + after
    assert txn_result.committed >= 10 and txn_result.aborted_on_purpose > 0, txn_result.summary()
    assert txn_result.aborted_seen_uncommitted > 0, "no aborted record reached the log: aborts untested"
    return result, txn_result


def print_batches(c: ClusterProcess, topic: str, partitions: set[int], offsets: set[int]) -> None:
    """The batches around ``offsets`` on every node: for a duplicate, whether its two copies came
    from one producer sequence (a broker failing to deduplicate) or two (the client re-sent it)."""
    from strom.protocol.records import iter_batches

    for p in sorted(partitions):
        for n in NODES:
            try:
                data = segment_bytes(c, n, topic, p)
            except OSError as e:
                print(f"node {n} {topic}-{p}: {e}")
                continue
            for _pos, h in iter_batches(data):
                last = h.base_offset + h.last_offset_delta
                if any(h.base_offset - 8 <= o <= last + 8 for o in offsets):
                    print(f"node {n} {topic}-{p} offsets {h.base_offset}-{last} leader epoch "
                          f"{h.partition_leader_epoch} producer {h.producer_id} epoch {h.producer_epoch} "
                          f"sequence {h.base_sequence}-{h.last_sequence}")


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


def kill_coordinator(run: Run) -> None:
    """kill -9 of the group coordinator (the leader of ``__consumer_offsets``, replicated 3
    times): another replica takes the group over with every offset it acknowledged."""
    md = run.c.metadata(run.c.running[0], ["__consumer_offsets"])
    victim = md.topics["__consumer_offsets"].partitions[0].leader
    run.c.kill(victim)
    run.event(f"kill -9 node {victim}, the group coordinator")
    time.sleep(run.rng.uniform(3, 6))
    run.progress(100)
    run.c.start_node(victim)
    run.event(f"node {victim} restarted")


def txn_coordinator(run: Run) -> int:
    md = run.c.metadata(run.c.running[0], ["__transaction_state"])
    p = md.topics["__transaction_state"].partitions[0]
    assert len(p.replicas) == 3, f"__transaction_state is not replicated three times: {p}"
    return int(p.leader)


def kill_txn_coordinator(run: Run) -> None:
    """kill -9 of the transaction coordinator (the leader of ``__transaction_state``, replicated
    3 times) with transactions open and being committed: another replica loads the transactions'
    state and completes or aborts each one; no transaction torn, no aborted record read."""
    victim = txn_coordinator(run)
    run.c.kill(victim)
    run.event(f"kill -9 node {victim}, the transaction coordinator")
    time.sleep(run.rng.uniform(3, 6))
    run.progress(100)
    run.txn_progress(3)
    run.c.start_node(victim)
    run.event(f"node {victim} restarted")


def pause_txn_coordinator(run: Run) -> None:
    """SIGSTOP of the transaction coordinator past its session: another replica of
    ``__transaction_state`` takes the transactions over; the zombie's writes are refused."""
    victim = txn_coordinator(run)
    run.c.pause(victim)
    run.event(f"SIGSTOP node {victim}, the transaction coordinator")
    try:
        time.sleep(2.5 + run.rng.uniform(3, 6))
        run.txn_progress(3, timeout=30)
    finally:
        run.c.resume(victim)
        run.event(f"SIGCONT node {victim}")


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


def pause_coordinator(run: Run) -> None:
    """SIGSTOP of the group coordinator past its session: another replica of
    ``__consumer_offsets`` takes the group over; the zombie's queued commits are not
    acknowledged, its answers never show offsets the group does not keep."""
    md = run.c.metadata(run.c.running[0], ["__consumer_offsets"])
    victim = md.topics["__consumer_offsets"].partitions[0].leader
    run.c.pause(victim)
    run.event(f"SIGSTOP node {victim}, the group coordinator")
    try:
        time.sleep(2.5 + run.rng.uniform(3, 6))
        run.progress(100, timeout=15)
    finally:
        run.c.resume(victim)
        run.event(f"SIGCONT node {victim}")


def pause_controller(run: Run) -> None:
    """SIGSTOP of the active controller: the quorum elects another, the brokers' heartbeats go
    there (not stuck on the frozen node), so no broker is fenced and writes go on meanwhile."""
    victim = run.c.active_controller()
    run.c.pause(victim)
    run.event(f"SIGSTOP node {victim}, the active controller")
    try:
        new = run.c.active_controller(timeout=15)
        run.event(f"node {new} is the active controller")
        time.sleep(2.5 + run.rng.uniform(2, 4))  # past the frozen node's session
        run.progress(100, timeout=15)  # the two others keep min.insync.replicas
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


def isr_holders(run: Run) -> set[int]:
    """The nodes in some ISR of the run's topic (as a running node sees it)."""
    md = run.c.metadata(run.c.running[0], [run.topic])
    return {r for p in md.topics[run.topic].partitions.values() for r in p.isr}


def disk_full_follower(run: Run) -> None:
    """A follower's data dir fills up (a ballast file takes the rest of its tmpfs). Its next
    append fails with ENOSPC: the dir goes offline, as Kafka takes a log dir offline at any
    IOException, and since it is the broker's only (first) log dir the broker stops; the
    controller moves its leaderships and ISR places within the session, and the other two keep
    ``acks=all`` (min.insync.replicas=2) going. Then space returns, the node starts again,
    catches up and rejoins every ISR."""
    c = run.c
    if getattr(c, "tmpfs_refused", None):
        pytest.skip(f"the data dirs are not a tmpfs here: {c.tmpfs_refused}")  # type: ignore[attr-defined]
    p, leader = run.some_leader()
    victim = run.rng.choice([n for n in NODES if n != leader])
    led = sorted(q for q, n in run.leaders().items() if n == victim)
    ballast = data_dir(c, victim) / "ballast"
    t_fill = time.monotonic()
    size = fill(ballast)
    run.event(f"node {victim} (a follower of partition {p}, leader of {led}) disk full: "
              f"{size >> 20} MiB ballast")
    try:
        wait_for(f"node {victim} stopping on its failed log dir", lambda: not c.is_running(victim), 30)
        rc = c.proc(victim).returncode  # type: ignore[union-attr]
        run.event(f"node {victim} stopped (exit {rc}) {time.monotonic() - t_fill:.1f}s after the disk filled")
        wait_for(f"node {victim} out of every ISR", lambda: victim not in isr_holders(run), 30)
        run.event(f"node {victim} out of every ISR {time.monotonic() - t_fill:.1f}s after the disk filled")
        run.progress(100, timeout=30)  # acks=all goes on with the two others
        log_text = c.log(victim, 200_000)
        assert "No space left on device" in log_text, log_text[-3000:]
        assert f"log dir {data_dir(c, victim)} failed" in log_text, log_text[-3000:]
        assert f"strom broker {victim} stopped: its first log dir failed" in log_text, log_text[-3000:]
        assert rc == 1, rc
    finally:
        with contextlib.suppress(OSError):
            ballast.unlink()
    run.event("space returned")
    c.start_node(victim)
    run.event(f"node {victim} restarted")


def reassignment_under_load(run: Run) -> None:
    """AlterPartitionReassignments while producers and consumers run: a partition's replicas
    move from all three to two (one replica removed, its log deleted), then to a new set of
    three led preferably by the node that had been removed (it copies the whole log from the
    leader, joins the ISR, and the reassignment completes)."""
    c = run.c
    p = run.rng.randrange(PARTITIONS)
    md = c.metadata(c.running[0], [run.topic])
    before = list(md.topics[run.topic].partitions[p].replicas)
    removed = run.rng.choice(before)
    steps = [[r for r in before if r != removed], [removed, *[r for r in before if r != removed]]]
    for target in steps:
        t0 = time.monotonic()
        res = c.run(c.running[0], lambda cl, tgt=target: alter_partition_reassignments(  # type: ignore[misc]
            cl, {(run.topic, p): tgt}))
        assert res[(run.topic, p)] is None, res
        run.event(f"reassigning partition {p}: {before} -> {target}")

        def done(tgt: list[int] = target) -> bool:
            ongoing = c.run(c.running[0], lambda cl: list_partition_reassignments(cl, [(run.topic, p)]))
            if ongoing:
                return False
            part = c.metadata(c.running[0], [run.topic]).topics[run.topic].partitions[p]
            return list(part.replicas) == tgt and sorted(part.isr) == sorted(tgt)

        wait_for(f"the reassignment of partition {p} to {target}", done, 60, every=0.3)
        run.event(f"partition {p} on {target} ({time.monotonic() - t0:.1f}s)")
        run.progress(100)
        before = target


FAULTS: dict[str, Callable[[Run], None]] = {
    "kill_leader": kill_leader,
    "kill_controller": kill_controller,
    "kill_coordinator": kill_coordinator,
    "kill_txn_coordinator": kill_txn_coordinator,
    "pause_txn_coordinator": pause_txn_coordinator,
    "kill_two_in_turn": kill_two_in_turn,
    "kill_two_overlapping": kill_two_overlapping,
    "pause_leader": pause_leader,
    "pause_coordinator": pause_coordinator,
    "pause_controller": pause_controller,
    "rolling_restart": rolling_restart,
    "disk_full_follower": disk_full_follower,
    "reassignment_under_load": reassignment_under_load,
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


ZOMBIE_PRODUCER = """
import json, sys
from confluent_kafka import Producer
bootstrap, topic, partition = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = []
p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
              "message.timeout.ms": 4000, "request.timeout.ms": 3000, "retries": 0, "log_level": 0})
def cb(err, msg):
    out.append([msg.value().decode(), None if err is None else err.name(), msg.offset()])
for i in range(5):
    p.produce(topic, value=f"zombie-{i}".encode(), partition=partition, on_delivery=cb)
p.flush(15)
print(json.dumps(out))
"""


def produce_inside(c: NetnsCluster, node: int, topic: str, partition: int) -> list[list[object]]:
    """Produce five ``acks=all`` records to ``node`` from inside its own namespace (the only
    client that can reach it while it is isolated); the delivery reports."""
    done = subprocess.run(
        ["ip", "netns", "exec", c.network.namespace(node), sys.executable, "-c", ZOMBIE_PRODUCER,
         c.node_bootstrap(node), topic, str(partition)],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    reports: list[list[object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return reports


def isolate_leader(run: Run) -> None:
    """A network partition: a partition leader alone on one side (its veth down: no peer, no
    controller, no client of the test reaches it), the two others on the majority side. They
    fence it after the broker session and elect a new leader; ``acks=all`` producers go on
    there. A client inside the isolated node's namespace gets none of its ``acks=all`` writes
    acknowledged (the zombie cannot reach min.insync.replicas, nor shrink its ISR without the
    controller); once healed, it learns the new epoch and truncates them away (the checker's
    *unexpected* count: values no workload producer sent must not be in the final log)."""
    c = run.c
    assert isinstance(c, NetnsCluster)
    p, victim = run.some_leader()
    t0 = time.monotonic()
    c.isolate(victim)
    run.event(f"node {victim}, leader of partition {p}, isolated (veth down)")
    try:
        zombie: dict[str, list[list[object]]] = {}
        t = threading.Thread(target=lambda: zombie.setdefault(
            "reports", produce_inside(c, victim, run.topic, p)), daemon=True)
        t.start()
        wait_for(f"partition {p} led by another node",
                 lambda: run.leaders().get(p) not in (victim, -1, None), 30)
        run.event(f"partition {p} has a new leader {time.monotonic() - t0:.1f}s after the partition")
        run.progress(100, timeout=30)  # acks=all on the majority side
        time.sleep(run.rng.uniform(1, 3))
        t.join(60)
        reports = zombie.get("reports")
        assert reports is not None, "the producer inside the isolated namespace did not finish"
        acked = [r for r in reports if r[1] is None]
        run.event(f"the isolated leader's producer: {len(reports)} sent, {len(acked)} acknowledged "
                  f"({sorted({str(r[1]) for r in reports})})")
        assert not acked, f"the isolated (zombie) leader acknowledged acks=all writes: {acked}"
    finally:
        c.heal(victim)
        run.event(f"node {victim} healed after {time.monotonic() - t0:.1f}s")


@pytest.fixture
def netns_cluster(tmp_path: Path) -> Iterator[NetnsCluster]:
    why = netns_unavailable()
    if why is not None:
        pytest.skip(f"a network partition needs per-node network namespaces: {why}")
    c = NetnsCluster(tmp_path / "ns", 3, overrides=OVERRIDES)
    try:
        c.start()
        c.wait_ready(90)
        yield c
    finally:
        c.close()  # the namespaces and the bridge go too, whatever happened
        print(f"node logs: {c.root}/node-<id>/server.log")


def test_network_partition(netns_cluster: NetnsCluster) -> None:
    scenario(netns_cluster, isolate_leader, SEED)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_network_partition_seeds(slow_only: None, netns_cluster: NetnsCluster, seed: int) -> None:
    scenario(netns_cluster, isolate_leader, seed, rate=150.0, warmup=1000, after=1000)


def test_an_acknowledged_offset_commit_survives_the_coordinators_death(cluster: ClusterProcess) -> None:
    """OffsetCommit is acknowledged only once the ISR of ``__consumer_offsets`` holds it: with
    both followers frozen, a commit acknowledged by the coordinator alone would be gone after
    its kill -9 (the group's committed offset moving back)."""
    import confluent_kafka

    c = cluster
    topic = f"commit-{uuid.uuid4().hex[:8]}"
    res = c.create_topics(c.running[0], {topic: (1, 3)}, configs={"min.insync.replicas": "2"})
    assert res[topic][0] == 0, res
    c.wait_topic(topic, timeout=60)
    group = f"g-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": c.bootstrap, "group.id": group, "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000, "log_level": 0}
    tp = confluent_kafka.TopicPartition
    cons = confluent_kafka.Consumer(conf)
    try:
        cons.commit(offsets=[tp(topic, 0, 3)], asynchronous=False)
        md = c.metadata(c.running[0], ["__consumer_offsets"])
        coordinator = md.topics["__consumer_offsets"].partitions[0].leader
        followers = [n for n in NODES if n != coordinator]
        time.sleep(1.0)  # offset 3 replicated
        outcome: dict[str, object] = {}

        def commit() -> None:
            try:
                outcome["ok"] = cons.commit(offsets=[tp(topic, 0, 7)], asynchronous=False)
            except Exception as e:
                outcome["error"] = e

        for f in followers:
            c.pause(f)
        try:
            t = threading.Thread(target=commit, daemon=True)
            t.start()
            t.join(0.8)
            acked_before_kill = "ok" in outcome
            c.kill(coordinator)
        finally:
            for f in followers:
                c.resume(f)
        t.join(60)
        print(f"coordinator {coordinator} killed; the commit of 7 was "
              f"{'acknowledged' if acked_before_kill else 'not acknowledged'} before; outcome {outcome}")
        check = confluent_kafka.Consumer(conf)
        try:
            got = wait_for("the group's committed offset",
                           lambda: check.committed([tp(topic, 0)], timeout=5)[0], 60)
        finally:
            check.close()
        committed = got.offset  # type: ignore[attr-defined]
        print(f"committed offset after the failover: {committed}")
        if acked_before_kill or "ok" in outcome:
            assert committed == 7, f"an acknowledged commit of 7 was lost: the group is back at {committed}"
        else:
            assert committed in (3, 7)
    finally:
        cons.close()
        c.start_node(coordinator)


EOS_APP = Path(__file__).parent / "apps" / "eos_transform.py"


def test_an_exactly_once_pipeline_survives_its_group_coordinators_death(cluster: ClusterProcess) -> None:
    """A consume-transform-produce app (confluent-kafka; its consumed offsets committed inside
    each transaction, TxnOffsetCommit, to a group coordinated by another node than its
    transactional id) runs on the cluster; kill -9 of the node coordinating its group (the
    leader of its ``__consumer_offsets`` partition, replicated three times) while it runs, more
    input produced while that node is down, the node restarted, the app run again to the end:
    every input appears in the output exactly once (read_committed) and the group's committed
    offsets are the input's ends. The group's coordinator must ask the transaction's whether
    its offsets partition is in the transaction (it answered INVALID_PRODUCER_ID_MAPPING from
    its own, empty, transaction state: the app died at its first commit), and the offsets of
    every transaction must be in the replicated log, where the new coordinator loads them from
    (a TxnOffsetCommit held only in the old coordinator's memory would have the app process its
    input twice)."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient

    c = cluster
    tag = uuid.uuid4().hex[:8]
    src, dst, group = f"eos-in-{tag}", f"eos-out-{tag}", f"eos-g-{tag}"

    txn_id = f"eos-app-{tag}"
    group_node = coordinators_apart(c, group, txn_id)
    res = c.create_topics(c.running[0], {src: (3, 3), dst: (3, 3)}, configs={"min.insync.replicas": "2"})
    assert res[src][0] == 0 and res[dst][0] == 0, res
    for t in (src, dst):
        c.wait_topic(t, timeout=60)
        wait_for(f"full ISRs of {t}",
                 lambda t=t: all(len(i[2]) == 3 for i in c.partition_info(c.running[0], t).values()), 60)

    def produce(start: int, n: int, rate: float | None = None) -> None:
        p = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True,
                                      "log_level": 0})
        t0 = time.monotonic()
        for i in range(start, start + n):
            p.produce(src, key=b"k%d" % (i % 13), value=b"rec-%06d" % i)
            if rate is not None:
                p.poll(0)
                time.sleep(max(0.0, t0 + (i - start) / rate - time.monotonic()))
        assert p.flush(60) == 0

    def app(idle: float) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, str(EOS_APP), c.bootstrap, src, dst, group, txn_id, str(idle)]
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    conf = {"bootstrap.servers": c.bootstrap, "group.id": group, "log_level": 0}

    def committed() -> list[int]:
        cons = confluent_kafka.Consumer(conf)
        try:
            tps = [confluent_kafka.TopicPartition(src, p) for p in range(3)]
            return [tp.offset for tp in cons.committed(tps, 30)]
        finally:
            cons.close()

    produce(0, 1000)
    first = app(idle=10)
    # more input while the app runs, across the kill (an idempotent producer: nothing lost)
    feeding = threading.Thread(target=produce, args=(1000, 3000, 300.0), daemon=True)
    feeding.start()
    try:
        deadline = time.monotonic() + 90
        while sum(max(o, 0) for o in committed()) < 300:  # its first transactions
            assert first.poll() is None, f"the app died (rc {first.returncode}) before committing 300 offsets"
            assert time.monotonic() < deadline, f"the app committed only {committed()} in 90 s"
            time.sleep(0.2)
        admin = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 0})
        victim = admin.describe_consumer_groups([group])[group].result(30).coordinator.id
        assert victim == group_node
        print(f"group {group}'s coordinator: node {victim}, {txn_id}'s: node {coordinator(c, txn_id, 1)}; "
              f"committed so far {committed()}")
        c.kill(victim)
        time.sleep(3)
        c.start_node(victim)
        feeding.join(120)
        assert not feeding.is_alive()
        try:
            first.wait(180)
        except subprocess.TimeoutExpired:
            first.kill()
        print(f"the app during the failover ended with rc {first.returncode}")
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    # it may have died of the outage (a fatal transaction error) or drained the input: either
    # way a second run must finish the input exactly once
    second = app(idle=6)
    assert second.wait(180) == 0
    assert committed() == end_offsets(c, src), (committed(), end_offsets(c, src))
    out = read_committed_values(c.bootstrap, dst, 3, expect=4000)
    assert len(out) == len(set(out)), f"{len(out) - len(set(out))} outputs written twice"
    assert sorted(out) == [b"REC-%06d" % i for i in range(4000)]


def coordinator(c: ClusterProcess, key: str, key_type: int) -> int:
    """The node FindCoordinator names for a group (``key_type`` 0) or transactional id (1)."""

    def ask() -> int | None:
        resp = c.request(c.running[0], 10, {"key": key, "key_type": key_type, "coordinator_keys": [key]})
        found = resp.coordinators[0]
        return int(found.node_id) if int(found.error_code) == 0 and int(found.node_id) >= 0 else None

    return int(wait_for(f"the coordinator of {key}", ask, 60))


def coordinators_apart(c: ClusterProcess, group: str, txn_id: str) -> int:
    """Have ``txn_id``'s transaction coordinated by another node than ``group`` (whose node is
    returned), so that the group's coordinator must ask that node about each TxnOffsetCommit.
    The test cluster has one partition of each coordinator topic: where both lead on one node,
    the transaction state's leadership moves (its replicas reordered, a preferred election)."""
    group_node = coordinator(c, group, 0)
    if coordinator(c, txn_id, 1) == group_node:
        tp = ("__transaction_state", 0)
        replicas = c.partition_info(c.running[0], tp[0])[0][1]
        target = sorted(replicas, key=lambda n: n == group_node)  # group_node last
        res = c.run(c.running[0], lambda cl: alter_partition_reassignments(cl, {tp: target}))
        assert res[tp] is None, res
        wait_for("the reordered replicas", lambda: c.partition_info(c.running[0], tp[0])[0][1] == target, 60)
        elected = c.run(c.running[0], lambda cl: elect_leaders(cl, "PREFERRED", [tp]))
        assert elected[tp] is None, elected
        wait_for("the transaction state led by another node than the group",
                 lambda: coordinator(c, txn_id, 1) != group_node, 60)
    return group_node


@pytest.fixture(scope="module")
def txn_v2_java(tmp_path_factory: pytest.TempPathFactory) -> str:
    from strom.testing.java_clients import compile_java

    return compile_java(Path(__file__).parent / "clients" / "TxnV2.java", tmp_path_factory.mktemp("txnv2"))


def test_java_send_offsets_to_a_transaction_coordinated_elsewhere(
    cluster: ClusterProcess, txn_v2_java: str
) -> None:
    """Java kafka-clients 4.x (transaction version 2: the offsets partition joins the transaction
    through TxnOffsetCommit v5, no AddOffsetsToTxn) copies records in transactions whose
    coordinator is another node than its group's: the group's coordinator adds the offsets
    partition there, the copies are committed once and the group's offsets with them."""
    import confluent_kafka

    c = cluster
    tag = uuid.uuid4().hex[:8]
    src, dst, group, txn_id = f"v2-in-{tag}", f"v2-out-{tag}", f"v2-g-{tag}", f"v2-copier-{tag}"
    coordinators_apart(c, group, txn_id)
    res = c.create_topics(c.running[0], {src: (2, 3), dst: (2, 3)}, configs={"min.insync.replicas": "2"})
    assert res[src][0] == 0 and res[dst][0] == 0, res
    for t in (src, dst):
        c.wait_topic(t, timeout=60)
    p = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap, "log_level": 0})
    for i in range(30):
        p.produce(src, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    cmd = ["java", "-cp", txn_v2_java, "TxnV2", "offsets", c.bootstrap, src, dst, group, txn_id, "30"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "copied=30" in r.stdout.split(), r.stdout
    out = read_committed_values(c.bootstrap, dst, 2, expect=30)
    assert sorted(out) == sorted(b"V%d" % i for i in range(30))
    cons = confluent_kafka.Consumer({"bootstrap.servers": c.bootstrap, "group.id": group, "log_level": 0})
    try:
        got = cons.committed([confluent_kafka.TopicPartition(src, q) for q in range(2)], timeout=30)
    finally:
        cons.close()
    assert [tp.offset for tp in got] == [15, 15]


def end_offsets(c: ClusterProcess, topic: str) -> list[int]:
    import confluent_kafka

    cons = confluent_kafka.Consumer({"bootstrap.servers": c.bootstrap, "group.id": "ends", "log_level": 0})
    try:
        return [cons.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), 30)[1] for p in range(3)]
    finally:
        cons.close()


def read_committed_values(bootstrap: str, topic: str, partitions: int, expect: int,
                          timeout: float = 90.0) -> list[bytes]:
    """Every committed value of ``topic`` (read_committed, from the start to the end)."""
    import confluent_kafka

    cons = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                                     "isolation.level": "read_committed", "enable.auto.commit": False,
                                     "enable.partition.eof": True, "log_level": 0})
    cons.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = cons.poll(0.3)
            if m is None:
                continue
            if m.error():
                if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                    if len(eof) == partitions and len(out) >= expect:
                        break
                continue
            eof.discard(m.partition())
            out.append(m.value())
    finally:
        cons.close()
    return out
