"""Replication benchmarks (issue 14): a 3-node strom cluster beside a single node, same machine, same run.

Targets, all real ``strom serve`` processes on loopback with their data on disk:

* ``rf3-all``: a three-node cluster (:class:`ClusterProcess`, the configs of ``strom dev-cluster``:
  combined broker+controller nodes), a topic with replication factor 3, ``acks=all``;
* ``rf3-1``: the same cluster and topic kind, ``acks=1``;
* ``single``: one ``strom serve`` (as ``bench/throughput.py``'s), replication factor 1, ``acks=1``.

Sections (``--sections``, default all):

``throughput``
    librdkafka's C load generator, ``rdkafka_performance -P -p 0 -s SIZE -c COUNT -X linger.ms=5
    -X acks=..`` (the produce command of ``../shared/compat/perf.sh``, binary from the compat cache),
    one partition (``--partitions``), a fresh topic per measurement (deleted afterwards). The three
    targets are measured one after the other for every size and run, their order rotated per run;
    the table shows medians over ``--runs`` of MB/s and msgs/s, the per-run ratios to ``single``
    and the CPU seconds each strom process spent per GB produced (leader, followers). Goal (issue
    14): ``rf3-all`` >= 0.5x ``single``.
``latency``
    ``bench/_paced_producer.py`` (confluent-kafka, absolute schedule; ``--rate`` msg/s of ``--size``
    B for ``--duration`` s, linger.ms=0) against each target, and ``rdkafka_performance -C -l``
    reading the same partition from the start: ack latency (produce() -> delivery report) and
    end-to-end latency (send -> consumer receipt; a consumer sees a record once the HW passed it,
    i.e. once both followers fetched it). The first ``--warmup`` s are discarded; medians over runs
    of each run's percentiles.
``failover``
    For each timeout set (``default``: broker.session.timeout.ms 9000, broker.heartbeat.interval.ms
    2000, replica.lag.time.max.ms 30000, Kafka's; ``tuned``: 2500/300/3000), a fresh cluster and
    ``--trials`` trials: a new topic of 3 partitions RF=3 (min.insync.replicas=2); a producer
    (confluent-kafka in its own process, acks=all, enable.idempotence=true, client defaults
    otherwise) sends 1 KiB records at ``--failover-rate`` msg/s to the partition whose leader is
    not the active controller (so the kill does not also cost a KRaft election); once it is
    acknowledged, kill -9 of that leader; the figure is the time from the kill to the first
    acknowledgement of a record sent after the kill. Then the node is restarted and the bench
    waits for the topic's full ISRs (that time is reported too, "rejoin").
``catchup``
    Tuned timeouts; a topic of 1 partition RF=3; a follower is killed, ``--catchup-mb`` MB of 1 KiB
    records produced (acks=1), then the follower restarted. While it catches up, consumers
    (``rdkafka_performance -C`` reading the whole partition from the leader, again and again)
    measure MB/s; the same consumer loop runs for the same length of time with the follower down
    before and caught up after, as baselines. Catch-up time: from restart to the follower back in
    the ISR (includes the process start).
``spread``
    N brokers on one N-core machine: 2 nodes (a 2-voter KRaft cluster), a topic of 2 partitions
    RF=1 with one partition led by each node, against a single node with the same 2-partition
    topic; ``rdkafka_performance -P`` without ``-p`` (librdkafka's partitioner spreads records over
    both partitions), acks=1. Does aggregate throughput rise with a broker per core?

    PYTHONPATH=src python bench/replication.py --runs 3            # every section
    PYTHONPATH=src python bench/replication.py --sections throughput --sizes 1024 --runs 5
    PYTHONPATH=src python bench/replication.py --sections failover --trials 10 --timeouts tuned

Figures of 2026-11-27, ``--runs 3`` (defaults otherwise), shared noisy 2-core machine (medians):

    produce, 1 partition          1 KiB MB/s  x single    100 B MB/s  x single
    rf3-all (acks=all)                  47.5     0.18           50.0     1.14
    rf3-1   (acks=1)                    80.2     0.34           59.1     1.29
    single  (acks=1)                   253.8     1.00           45.4     1.00
    latency 1,000 msg/s 1 KiB (ms)  ack p50   p99   | e2e p50   p99
    rf3-all idempotent                10.1    192   |    8.7    189
    rf3-all plain (1 request/record) 15,241 18,624  | 15,245 18,626   (falls behind: see README)
    rf3-1 plain                        3.0     10.1  |   10.8    30.5
    single plain                       1.0      4.3  |    0.4     4.5
    failover (kill -> acked again)  default 8,716 ms (7,606..10,411); tuned 3,391 ms (2,742..4,468)
    catch-up of 500 MB: 4.5 s restart -> ISR; consumer from the leader 408 MB/s during it
    2 brokers x 1 partition vs 1 broker x 2 partitions, acks=1: 1.69x (1 KiB), 1.25x (100 B)

See the README's Performance -> Replication section for what these mean.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import Variant, compat_home, cpu_seconds, fmt, median, strom_broker

from strom.testing.polling import wait_for

HERE = Path(__file__).resolve().parent
PRODUCER = HERE / "_paced_producer.py"
NODES = (1, 2, 3)
TIMEOUTS = {
    "default": ("broker.session.timeout.ms=9000", "broker.heartbeat.interval.ms=2000",
                "replica.lag.time.max.ms=30000"),
    "tuned": ("broker.session.timeout.ms=2500", "broker.heartbeat.interval.ms=300",
              "replica.lag.time.max.ms=3000"),
}
PERF_RE = re.compile(r"(\d+) msgs/s and ([\d.]+) MB/s")
CONSUME_RE = re.compile(r"(\d+) messages \((\d+) bytes\) consumed in (\d+)ms")


# ---------------------------------------------------------------- targets

@dataclass
class Target:
    """Somewhere to produce: a bootstrap, the strom processes behind it, how to make topics."""

    name: str
    bootstrap: str
    pids: Callable[[], dict[str, int]]  # role/node label -> pid
    rf: int
    acks: str
    cluster: Any = None  # ClusterProcess or None

    def create(self, topic: str, partitions: int, configs: dict[str, str] | None = None,
               assignment: list[list[int]] | None = None) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        if assignment:  # confluent-kafka wants the partition count (not -1) beside an assignment
            nt = NewTopic(topic, len(assignment), -1, replica_assignment=assignment, config=configs or {})
        else:
            nt = NewTopic(topic, partitions, self.rf, config=configs or {})
        for f in admin.create_topics([nt], operation_timeout=30).values():
            f.result(60)
        if self.cluster is not None:
            self.cluster.wait_topic(topic, timeout=60)
            if self.rf > 1:
                wait_isr_full(self.cluster, topic, partitions, self.rf)

    def delete(self, topic: str) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        with contextlib.suppress(Exception):
            for f in admin.delete_topics([topic], operation_timeout=30).values():
                f.result(60)

    def leaders(self, topic: str) -> dict[int, int]:
        if self.cluster is None:
            return {}
        info = self.cluster.partition_info(self.cluster.running[0], topic)
        return {p: i[0] for p, i in info.items()}






def wait_isr_full(c: Any, topic: str, partitions: int, rf: int = 3, timeout: float = 120.0) -> Any:
    def check() -> Any:
        for node in c.running:  # every running node's view, so clients see it wherever they ask
            info = c.partition_info(node, topic)
            if len(info) != partitions or any(len(i[2]) != rf or i[0] < 0 for i in info.values()):
                return None
        return info

    return wait_for(f"full ISRs of {topic}", check, timeout)


@contextlib.contextmanager
def cluster(root: Path, nodes: int = 3, overrides: Sequence[str] = ()) -> Iterator[Any]:
    from strom.testing.cluster_process import ClusterProcess

    c = ClusterProcess(root, nodes, overrides=list(overrides))
    c.start()
    try:
        c.wait_ready(120)
        yield c
    except BaseException:
        print(c.logs(), file=sys.stderr)
        raise
    finally:
        c.close()


def cluster_pids(c: Any) -> Callable[[], dict[str, int]]:
    def pids() -> dict[str, int]:
        return {f"node{i}": p.pid for i in c.node_ids if (p := c.proc(i)) is not None and p.poll() is None}

    return pids


def new_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------- rdkafka_performance

def perf_produce(perf: Path, bootstrap: str, topic: str, size: int, count: int, acks: str,
                 partition: int | None = 0, extra: Sequence[str] = ()) -> dict[str, Any]:
    cmd = [str(perf), "-P", "-b", bootstrap, "-t", topic, *(["-p", str(partition)] if partition is not None
           else []), "-s", str(size), "-c", str(count), "-X", "linger.ms=5", "-X", f"acks={acks}", *extra]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t0
    found = PERF_RE.findall(p.stdout + p.stderr)
    if not found:
        raise RuntimeError(f"rdkafka_performance gave no figures (rc={p.returncode}):\n{p.stdout[-2000:]}"
                           f"\n{p.stderr[-2000:]}")
    msgs, mbs = found[-1]
    failed = re.findall(r"(\d+) failed\)", p.stdout)
    return {"msgs": float(msgs), "mbs": float(mbs), "wall_s": wall, "rc": p.returncode,
            "delivery_failed": int(failed[-1]) if failed else None, "command": " ".join(cmd)}


def perf_consume(perf: Path, bootstrap: str, topic: str, count: int) -> tuple[int, float]:
    """Read ``count`` records of partition 0 from the start: (bytes, seconds)."""
    cmd = [str(perf), "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-c", str(count)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    found = CONSUME_RE.findall(p.stdout + p.stderr)
    if found:
        _n, nbytes, ms = found[-1]
        return int(nbytes), max(int(ms), 1) / 1000.0
    return 0, wall


# ---------------------------------------------------------------- throughput

def prewarm(where: Path, mb: int) -> float:
    """Write and delete ``mb`` MB in ``where`` (the data dirs' file system): the pages the next
    measurement writes into are then pages this VM has backed recently, as on a machine whose
    memory is full of page cache (see ``--prewarm-mb``). Seconds it took."""
    if mb <= 0:
        return 0.0
    t0 = time.monotonic()
    path = where / f"prewarm-{uuid.uuid4().hex[:6]}"
    chunk = b"\0" * (4 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(max(1, mb // 4)):
            os.write(fd, chunk)
    finally:
        os.close(fd)
        path.unlink()
    return time.monotonic() - t0


def measure_produce(perf: Path, t: Target, size: int, count: int, partitions: int,
                    warm: tuple[Path, int] | None = None) -> dict[str, Any]:
    topic = new_topic(f"tp-{t.name}-{size}")
    t.create(topic, partitions)
    if warm is not None:
        prewarm(*warm)
    leaders = t.leaders(topic)
    pids = t.pids()
    cpu0 = {k: cpu_seconds(v) for k, v in pids.items()}
    r = perf_produce(perf, t.bootstrap, topic, size, count, t.acks, 0 if partitions == 1 else None)
    cpu = {k: cpu_seconds(v) - cpu0[k] for k, v in pids.items()}
    t.delete(topic)
    gb = size * count / 1e9
    leader = f"node{leaders[0]}" if leaders else None
    r.update(target=t.name, size=size, count=count, cpu_s=cpu, leader=leader,
             leader_cpu_per_gb=(cpu[leader] if leader else sum(cpu.values())) / gb,
             followers_cpu_per_gb=(sum(v for k, v in cpu.items() if k != leader) / gb) if leader else None,
             leader_util=(cpu[leader] if leader else sum(cpu.values())) / r["wall_s"])
    return r


def section_throughput(a: argparse.Namespace, perf: Path, targets: list[Target]) -> dict[str, Any]:
    samples: list[dict[str, Any]] = []
    for run in range(a.runs):
        for size in a.sizes:
            count = a.count or (2_000_000 if size <= 256 else 300_000)
            k = run % len(targets)
            for t in targets[k:] + targets[:k]:
                s = measure_produce(perf, t, size, count, a.partitions, (a.work_dir, a.prewarm_mb))
                s["run"] = run
                samples.append(s)
                log(f"[throughput run {run + 1}/{a.runs}] {t.name:8} size={size}: {s['mbs']:.1f} MB/s "
                    f"{s['msgs']:.0f} msgs/s; CPU s {({k: round(v, 2) for k, v in s['cpu_s'].items()})}"
                    f" (wall {s['wall_s']:.1f} s)")
    rows = []
    for size in a.sizes:
        for t in targets:
            ss = [s for s in samples if s["size"] == size and s["target"] == t.name]
            ratios = []
            for s in ss:
                base = next((b for b in samples if b["size"] == size and b["run"] == s["run"]
                             and b["target"] == "single"), None)
                ratios.append(s["mbs"] / base["mbs"] if base and base["mbs"] else None)
            rows.append({"size": size, "target": t.name, "runs": len(ss),
                         "mbs": median([s["mbs"] for s in ss]), "msgs": median([s["msgs"] for s in ss]),
                         "mbs_all": [s["mbs"] for s in ss], "ratio_vs_single": median(ratios),
                         "ratios": ratios,
                         "leader_cpu_per_gb": median([s["leader_cpu_per_gb"] for s in ss]),
                         "followers_cpu_per_gb": median([s["followers_cpu_per_gb"] for s in ss]),
                         "leader_util": median([s["leader_util"] for s in ss])})
    print(f"\n== produce throughput, {a.partitions} partition(s), linger.ms=5, medians of {a.runs} run(s)")
    print(f"{'size':>5} {'target':8} {'MB/s':>8} {'msgs/s':>10} {'x single':>8}   {'runs MB/s':24} "
          f"{'leader CPU-s/GB':>15} {'followers CPU-s/GB':>18} {'leader CPU':>10}")
    for r in rows:
        print(f"{r['size']:>5} {r['target']:8} {fmt(r['mbs']):>8} {fmt(r['msgs'], 0):>10} "
              f"{fmt(r['ratio_vs_single'], 2):>8}   {', '.join(fmt(x) for x in r['mbs_all']):24} "
              f"{fmt(r['leader_cpu_per_gb'], 2):>15} {fmt(r['followers_cpu_per_gb'], 2):>18} "
              f"{fmt(100 * (r['leader_util'] or 0), 0):>9}%")
    if samples:
        print(f"e.g. {samples[-1]['command']}")
    return {"rows": rows, "samples": samples}


# ---------------------------------------------------------------- latency

def section_latency(a: argparse.Namespace, perf: Path, targets: list[Target], work: Path) -> dict[str, Any]:
    from latency import read_latencies, run_producer, stats, stop_consumer

    samples: list[dict[str, Any]] = []
    count = int(a.rate * a.duration)
    skip = int(a.rate * a.warmup)
    # librdkafka refuses enable.idempotence=true with acks other than all
    points = [(t, pc) for pc in a.latency_producers for t in targets if pc != "idempotent" or t.acks == "all"]
    for run in range(a.runs):
        k = run % len(points)
        for t, pc in points[k:] + points[:k]:
            name = f"{t.name}/{pc}"
            topic = new_topic(f"lat-{t.name}")
            t.create(topic, 1)
            cfile, pfile = work / f"{topic}.consumer.lat", work / f"{topic}.producer.lat"
            ccmd = [str(perf), "-C", "-l", "-A", str(cfile), "-b", t.bootstrap, "-t", topic, "-p", "0",
                    "-o", "beginning", "-c", str(count)]
            pcmd = [sys.executable, str(PRODUCER), t.bootstrap, topic, str(a.rate), str(count), str(a.size),
                    "--ack-file", str(pfile), "-X", f"acks={t.acks}", "-X", "linger.ms=0",
                    "-X", f"enable.idempotence={'true' if pc == 'idempotent' else 'false'}"]
            with open(work / f"{topic}.consumer.out", "wb") as cout:
                cons = subprocess.Popen(ccmd, stdout=cout, stderr=subprocess.STDOUT)
                try:
                    time.sleep(1.5)
                    prod = run_producer(pcmd, a.duration * 4 + 90, work / f"{topic}.producer.out")
                    stop_consumer(cons, 10)
                finally:
                    if cons.poll() is None:
                        cons.kill()
                        cons.wait()
            t.delete(topic)
            e2e, ack = stats(read_latencies(cfile), skip), stats(read_latencies(pfile), skip)
            s = {"run": run, "target": name, "ack_ms": ack, "e2e_ms": e2e, "sent": count,
                 "acked": prod.get("acked"), "received": e2e["n"] + skip,
                 "achieved_rate": prod.get("achieved_rate"), "commands": {"producer": " ".join(pcmd),
                                                                         "consumer": " ".join(ccmd)}}
            samples.append(s)
            log(f"[latency run {run + 1}/{a.runs}] {name:19}: ack p50 {fmt(ack['p50'], 2)} p99 "
                f"{fmt(ack['p99'], 2)} ms; e2e p50 {fmt(e2e['p50'], 2)} p99 {fmt(e2e['p99'], 2)} ms; "
                f"acked {prod.get('acked')}/{count}, rate {fmt(prod.get('achieved_rate'), 0)}/s")
    rows = []
    for t, pc in points:
        name = f"{t.name}/{pc}"
        ss = [s for s in samples if s["target"] == name]
        row: dict[str, Any] = {"target": name, "runs": len(ss)}
        for kind in ("ack_ms", "e2e_ms"):
            for q in ("p50", "p99", "p99.9", "max"):
                row[f"{kind}_{q}"] = median([s[kind][q] for s in ss])
        rows.append(row)
    print(f"\n== latency at {a.rate} msg/s of {a.size} B, {a.duration:g} s per point, "
          f"medians of {a.runs} run(s)")
    print(f"{'target/producer':19} {'ack p50':>8} {'p99':>8} {'p99.9':>8} | "
          f"{'e2e p50':>8} {'p99':>8} {'p99.9':>8}   (ms)")
    for r in rows:
        print(f"{r['target']:19} {fmt(r['ack_ms_p50'], 2):>8} {fmt(r['ack_ms_p99'], 2):>8} "
              f"{fmt(r['ack_ms_p99.9'], 2):>8} | {fmt(r['e2e_ms_p50'], 2):>8} {fmt(r['e2e_ms_p99'], 2):>8} "
              f"{fmt(r['e2e_ms_p99.9'], 2):>8}")
    if samples:
        c = samples[-1]["commands"]
        print(f"e.g. producer: {c['producer']}\n     consumer: {c['consumer']}")
    return {"rows": rows, "samples": samples}


# ---------------------------------------------------------------- failover

def failover_producer(argv: list[str]) -> int:
    """``replication.py _failover-producer BOOTSTRAP TOPIC PARTITION RATE SIZE OUT``: send until SIGTERM;
    print READY at the first ack, and, after SIGUSR1, RECOVERED at the first ack of a record sent after
    it; at the end write ``sent_ns ack_ns error`` (CLOCK_MONOTONIC, shared by all processes) per record."""
    from confluent_kafka import Producer

    bootstrap, topic, partition, rate, size, out = argv
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "log_level": 3})
    recs: list[tuple[int, int, str]] = []
    state = {"stop": False, "armed": 0, "ready": False, "recovered": False}

    def on_usr1(_sig: int, _frm: Any) -> None:
        state["armed"] = time.monotonic_ns()

    def on_term(_sig: int, _frm: Any) -> None:
        state["stop"] = True

    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGTERM, on_term)

    def cb(sent: int) -> Callable[[Any, Any], None]:
        def done(err: Any, _msg: Any) -> None:
            now = time.monotonic_ns()
            recs.append((sent, now, "" if err is None else str(err.name())))
            if err is None and not state["ready"]:
                state["ready"] = True
                print("READY", flush=True)
            if err is None and state["armed"] and sent >= state["armed"] and not state["recovered"]:
                state["recovered"] = True
                print(f"RECOVERED {sent} {now}", flush=True)
        return done

    p.list_topics(topic, timeout=10)
    pad = b"x" * int(size)
    interval = 1.0 / float(rate)
    t0 = time.monotonic()
    i = 0
    while not state["stop"]:
        due = t0 + i * interval
        wait = due - time.monotonic()
        if wait > 0:
            p.poll(wait)
        with contextlib.suppress(BufferError):
            p.produce(topic, pad, partition=int(partition), on_delivery=cb(time.monotonic_ns()))
        p.poll(0)
        i += 1
    left = p.flush(30)
    with open(out, "w") as f:
        for sent, ack, err in recs:
            f.write(f"{sent} {ack} {err or '-'}\n")
    print(f"DONE sent={i} acked={len(recs)} unflushed={left}", flush=True)
    return 0


def _wait_line(proc: subprocess.Popen[str], prefix: str, timeout: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([proc.stdout], [], [], 0.05)
        if r:
            line = proc.stdout.readline()
            if line.startswith(prefix):
                return line
            if not line and proc.poll() is not None:
                break
    raise TimeoutError(f"producer printed no {prefix} within {timeout} s (rc={proc.poll()})")


def failover_trial(c: Any, work: Path, trial: int, rate: int) -> dict[str, Any]:
    t = Target("rf3", c.bootstrap, cluster_pids(c), 3, "all", c)
    topic = new_topic(f"fo{trial}")
    t.create(topic, 3, {"min.insync.replicas": "2"})
    controller = c.active_controller()
    leaders = t.leaders(topic)
    part = next((p for p, lead in sorted(leaders.items()) if lead != controller), 0)
    victim = leaders[part]
    out = work / f"{topic}.acks"
    cmd = [sys.executable, str(Path(__file__).resolve()), "_failover-producer", c.bootstrap, topic, str(part),
           str(rate), "1024", str(out)]
    prod = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        _wait_line(prod, "READY", 60)
        time.sleep(1.0)
        c.kill(victim)
        t_kill = time.monotonic_ns()
        prod.send_signal(signal.SIGUSR1)
        _wait_line(prod, "RECOVERED", 180)
        prod.send_signal(signal.SIGTERM)
        prod.wait(60)
    finally:
        if prod.poll() is None:
            prod.kill()
            prod.wait()
    recs = [(int(s), int(k), e) for s, k, e in (ln.split() for ln in out.read_text().splitlines())]
    after = [k for s, k, e in recs if s >= t_kill and e == "-"]
    dt = (min(after) - t_kill) / 1e6 if after else None
    acks_before = [k for s, k, e in recs if k < t_kill and e == "-"]
    errors = sorted({e for _s, _k, e in recs if e != "-"})
    survivor = next(n for n in NODES if n != victim)
    wait_for("new leader", lambda: c.partition_info(survivor, topic)[part][0] not in (-1, victim), 60, 0.1)
    new_leader = c.partition_info(survivor, topic)[part][0]
    t0 = time.monotonic()
    c.start_node(victim)
    wait_isr_full(c, topic, 3)
    rejoin = time.monotonic() - t0
    c.wait_ready(120)
    log(f"  trial {trial + 1}: killed node {victim} (leader of p{part}; controller {controller}), new leader "
        f"{new_leader}: acknowledged again after {fmt(dt, 0)} ms; rejoin (restart -> full ISR) {rejoin:.1f} s"
        f"{'; delivery errors ' + ','.join(errors) if errors else ''}")
    return {"failover_ms": dt, "victim": victim, "controller": controller, "new_leader": new_leader,
            "rejoin_s": rejoin, "errors": errors, "acked_before_kill": len(acks_before), "records": len(recs)}


def section_failover(a: argparse.Namespace, root: Path, work: Path) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for name in a.timeouts:
        log(f"== failover, {name} timeouts: {', '.join(TIMEOUTS[name])}")
        with cluster(root / f"failover-{name}", 3, TIMEOUTS[name]) as c:
            trials = [failover_trial(c, work, i, a.failover_rate) for i in range(a.trials)]
        res[name] = trials
    print(f"\n== failover (kill -9 of a partition leader that is not the controller -> first ack of a record "
          f"sent after the kill; acks=all, idempotent, {a.failover_rate} msg/s of 1 KiB), ms")
    for name, trials in res.items():
        xs = [t["failover_ms"] for t in trials if t["failover_ms"] is not None]
        rj = [t["rejoin_s"] for t in trials]
        print(f"{name:8} ({', '.join(TIMEOUTS[name])}):\n"
              f"    median {fmt(median(xs), 0)}  min {fmt(min(xs) if xs else None, 0)}  "
              f"max {fmt(max(xs) if xs else None, 0)}  (n={len(xs)})   "
              f"all: {', '.join(fmt(x, 0) for x in xs)}\n"
              f"    rejoin (restart -> full ISR) median {fmt(median(rj), 1)} s")
    return res


# ---------------------------------------------------------------- catch-up

def consume_loop(perf: Path, bootstrap: str, topic: str, count: int, until: Callable[[], bool],
                 min_s: float = 0.0) -> dict[str, Any]:
    """Read the whole partition again and again until ``until()`` (checked between reads) and at least
    ``min_s`` seconds passed: total MB/s over the reads."""
    nbytes, secs, reads = 0, 0.0, 0
    t0 = time.monotonic()
    while True:
        b, s = perf_consume(perf, bootstrap, topic, count)
        nbytes, secs, reads = nbytes + b, secs + s, reads + 1
        if until() and time.monotonic() - t0 >= min_s:
            break
    return {"mbs": nbytes / 1e6 / secs if secs else None, "reads": reads, "window_s": time.monotonic() - t0}


def catchup_run(a: argparse.Namespace, perf: Path, c: Any, run: int) -> dict[str, Any]:
    t = Target("rf3", c.bootstrap, cluster_pids(c), 3, "1", c)
    topic = new_topic("catchup")
    t.create(topic, 1)
    controller = c.active_controller()
    leader = t.leaders(topic)[0]
    others = [n for n in NODES if n != leader]
    follower = next((n for n in others if n != controller), others[0])
    c.kill(follower)
    wait_for("the ISR to shrink", lambda: len(c.partition_info(leader, topic)[0][2]) == 2, 60)
    count = int(a.catchup_mb * 1e6 / 1024)
    lb = c.node_bootstrap(leader)
    perf_produce(perf, lb, topic, 1024, count, "1")
    base_down = consume_loop(perf, lb, topic, count, lambda: True)
    t0 = time.monotonic()
    c.start_node(follower)
    caught: list[float] = []

    def in_isr() -> bool:
        if not caught and follower in c.partition_info(leader, topic)[0][2]:
            caught.append(time.monotonic() - t0)
        return bool(caught)

    during = consume_loop(perf, lb, topic, count, in_isr)
    wait_for("the follower in the ISR", in_isr, 300, 0.1)
    base_up = consume_loop(perf, lb, topic, count, lambda: True, min_s=during["window_s"])
    t.delete(topic)
    c.wait_ready(120)
    log(f"[catchup run {run + 1}/{a.runs}] {a.catchup_mb:g} MB: follower {follower} back in the ISR "
        f"{caught[0]:.1f} s after restart; consumer {fmt(during['mbs'])} MB/s during "
        f"({during['reads']} reads), {fmt(base_down['mbs'])} with the follower down, "
        f"{fmt(base_up['mbs'])} caught up")
    return {"run": run, "mb": a.catchup_mb, "catchup_s": caught[0], "consume_during_mbs": during["mbs"],
            "consume_down_mbs": base_down["mbs"], "consume_caught_up_mbs": base_up["mbs"],
            "reads_during": during["reads"]}


def section_catchup(a: argparse.Namespace, perf: Path, root: Path) -> dict[str, Any]:
    with cluster(root / "catchup", 3, TIMEOUTS["tuned"]) as c:
        samples = [catchup_run(a, perf, c, run) for run in range(a.runs)]
    print(f"\n== follower catch-up after {a.catchup_mb:g} MB produced without it (medians of {a.runs})")
    print(f"catch-up (restart -> in ISR): {fmt(median([s['catchup_s'] for s in samples]), 1)} s; "
          f"consumer from the leader: {fmt(median([s['consume_during_mbs'] for s in samples]))} MB/s during "
          f"catch-up, {fmt(median([s['consume_down_mbs'] for s in samples]))} MB/s follower down, "
          f"{fmt(median([s['consume_caught_up_mbs'] for s in samples]))} MB/s caught up")
    return {"samples": samples}


# ---------------------------------------------------------------- spread

def section_spread(a: argparse.Namespace, perf: Path, root: Path) -> dict[str, Any]:
    samples: list[dict[str, Any]] = []
    with cluster(root / "spread", 2) as c, strom_broker(Variant("single")) as b:
        two = Target("2 nodes", c.bootstrap, cluster_pids(c), 1, "1", c)
        one = Target("1 node", b.bootstrap, lambda: {"single": b.proc.pid}, 1, "1")
        for run in range(a.runs):
            for size in a.sizes:
                count = 2 * (a.count or (2_000_000 if size <= 256 else 300_000))
                order = [two, one] if run % 2 == 0 else [one, two]
                for t in order:
                    topic = new_topic("spread")
                    t.create(topic, 2)
                    # one partition led by each node: the controller's placement usually does it (an
                    # explicit assignment naming the other node is refused, INVALID_REPLICA_ASSIGNMENT)
                    while t is two and len(set(t.leaders(topic).values())) < 2:
                        t.delete(topic)
                        topic = new_topic("spread")
                        t.create(topic, 2)
                    pids = t.pids()
                    cpu0 = {k: cpu_seconds(v) for k, v in pids.items()}
                    r = perf_produce(perf, t.bootstrap, topic, size, count, "1", None)
                    cpu = {k: round(cpu_seconds(v) - cpu0[k], 2) for k, v in pids.items()}
                    t.delete(topic)
                    r.update(run=run, size=size, target=t.name, cpu_s=cpu)
                    samples.append(r)
                    log(f"[spread run {run + 1}/{a.runs}] {t.name:8} size={size}: {r['mbs']:.1f} MB/s "
                        f"{r['msgs']:.0f} msgs/s; CPU s {cpu} (wall {r['wall_s']:.1f} s)")
    print(f"\n== 2 partitions, acks=1: two brokers (one partition each) vs one broker, medians of {a.runs}")
    rows = []
    for size in a.sizes:
        for name in ("1 node", "2 nodes"):
            ss = [s for s in samples if s["size"] == size and s["target"] == name]
            ratios = []
            for s in ss:
                base = next(x for x in samples if x["size"] == size and x["run"] == s["run"]
                            and x["target"] == "1 node")
                ratios.append(s["mbs"] / base["mbs"])
            row = {"size": size, "target": name, "mbs": median([s["mbs"] for s in ss]),
                   "msgs": median([s["msgs"] for s in ss]), "ratio": median(ratios),
                   "mbs_all": [s["mbs"] for s in ss]}
            rows.append(row)
            print(f"{size:>5} {name:8} {fmt(row['mbs']):>8} MB/s {fmt(row['msgs'], 0):>10} msgs/s  "
                  f"x1 node {fmt(row['ratio'], 2)}   runs: {', '.join(fmt(x) for x in row['mbs_all'])}")
    return {"rows": rows, "samples": samples}


# ---------------------------------------------------------------- main

def log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_failover-producer"]:
        return failover_producer(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="throughput,latency,failover,catchup,spread")
    ap.add_argument("--runs", type=int, default=3, help="repetitions; medians are reported (default 3)")
    ap.add_argument("--sizes", default="1024,100", help="record sizes for throughput and spread")
    ap.add_argument("--count", type=int, default=None,
                    help="records per produce measurement (default 300,000 for 1 KiB, 2,000,000 <= 256 B)")
    ap.add_argument("--partitions", type=int, default=1, help="partitions of the throughput topics")
    ap.add_argument("--rate", type=int, default=1000, help="latency: msg/s")
    ap.add_argument("--size", type=int, default=1024, help="latency: record size")
    ap.add_argument("--duration", type=float, default=10.0, help="latency: seconds per point")
    ap.add_argument("--warmup", type=float, default=1.0, help="latency: seconds discarded")
    ap.add_argument("--latency-producers", default="idempotent,plain",
                    help="latency: producer configs, idempotent (enable.idempotence=true: at most 5 "
                    "requests in flight, records queue into batches) and/or plain (enable.idempotence=false: "
                    "one request per record)")
    ap.add_argument("--trials", type=int, default=10, help="failover trials per timeout set")
    ap.add_argument("--timeouts", default="default,tuned", help="failover timeout sets: default, tuned")
    ap.add_argument("--failover-rate", type=int, default=1000, help="failover producer msg/s")
    ap.add_argument("--catchup-mb", type=float, default=500.0, help="MB produced while the follower is down")
    ap.add_argument("--json", metavar="FILE", help="also write every sample as JSON to FILE")
    ap.add_argument("--prewarm-mb", type=int, default=0,
                    help="throughput: before each measurement write and delete this many MB beside the "
                         "data dirs, so the run writes into page-cache memory the VM has backed "
                         "recently (see the README); 0 (default): off")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker config for every node of every target (repeatable), e.g. "
                         "strom.log.page.cache.window.bytes=0")
    a = ap.parse_args(argv)
    a.sizes = [int(x) for x in a.sizes.split(",") if x]
    a.latency_producers = [x for x in a.latency_producers.split(",") if x]
    a.timeouts = [x for x in a.timeouts.split(",") if x]
    sections = [x for x in a.sections.split(",") if x]

    home = compat_home()
    perf = home / "bin" / "rdkafka_performance"
    root = Path(tempfile.mkdtemp(prefix="strom-repbench-"))
    work = root / "work"
    work.mkdir()
    log(f"clusters and files in {root}; {time.strftime('%Y-%m-%d %H:%M')}; {os.cpu_count()} CPUs")
    results: dict[str, Any] = {"command": sys.argv, "date": time.strftime("%Y-%m-%d")}
    if {"throughput", "latency"} & set(sections):
        with cluster(root / "cluster", 3, a.override) as c, \
                strom_broker(Variant("single", list(a.override))) as b:
            targets = [Target("rf3-all", c.bootstrap, cluster_pids(c), 3, "all", c),
                       Target("rf3-1", c.bootstrap, cluster_pids(c), 3, "1", c),
                       Target("single", b.bootstrap, lambda: {"single": b.proc.pid}, 1, "1")]
            if "throughput" in sections:
                a.work_dir = work
                results["throughput"] = section_throughput(a, perf, targets)
            if "latency" in sections:
                results["latency"] = section_latency(a, perf, targets, work)
    if "failover" in sections:
        results["failover"] = section_failover(a, root, work)
    if "catchup" in sections:
        results["catchup"] = section_catchup(a, perf, root)
    if "spread" in sections:
        results["spread"] = section_spread(a, perf, root)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1, default=str) + "\n")
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
