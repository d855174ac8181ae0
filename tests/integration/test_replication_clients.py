"""Real clients across a failover (issue 14): three ``strom serve`` nodes, topics with replication
factor 3 and ``min.insync.replicas=2``, and unchanged third-party clients producing and consuming
while the leader of their partitions is killed with SIGKILL (kill -9) and started again.

Each client has its own topic (3 partitions, so the victim leads one of each) and runs at once
with the others, through the same kill:

* Java kafka-clients 4.x (``clients/Failover.java``): an idempotent ``acks=all`` producer, a group
  consumer (commitSync), and an AdminClient's describeTopics and listOffsets before and after;
* kafka-python: an idempotent ``acks=all`` KafkaProducer and a group KafkaConsumer;
* kcat: ``kcat -P`` (``acks=all``, idempotent) fed line by line, and a balanced ``kcat -G``
  consumer;
* confluent-kafka (librdkafka): an idempotent ``acks=all`` Producer and a group Consumer.

Every acknowledged record must be read by that client's consumer (which ran across the kill) and
be in the final log exactly once, at the offset the producer was told; the AdminClient must see
the three replicas before and after, the ISRs full again and listOffsets' end offsets equal to the
final log's. Skips the clients that are not installed (Java needs the JDK and the jars that
``../shared/compat/setup.sh`` puts under ``~/.cache/strom-compat``).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.testing.cluster_process import ClusterProcess
from strom.testing.jepsen import final_read
from strom.testing.polling import wait_for

pytestmark = pytest.mark.integration

NODES = (1, 2, 3)
PARTITIONS = 3
COUNT = 450  # records per producer
INTERVAL = 0.03  # seconds between two records of one producer (about 14 s of producing)
OVERRIDES = (
    "broker.heartbeat.interval.ms=300",
    "broker.session.timeout.ms=2500",
    "replica.lag.time.max.ms=3000",
    "controller.quorum.election.timeout.ms=500",
    "controller.quorum.fetch.timeout.ms=1000",
    "offsets.topic.replication.factor=3",
    "transaction.state.log.replication.factor=3",
)
CLIENTS = Path(__file__).parent / "clients"
COMPAT_HOME = Path(os.environ.get("STROM_COMPAT_HOME", Path.home() / ".cache" / "strom-compat"))
JAVA_LIBS = COMPAT_HOME / "java" / "libs"

Acked = dict[str, tuple[int, int]]  # value -> (partition, offset); offset -1: unknown to the client




def isr_full(c: ClusterProcess, topics: list[str]) -> bool:
    for node in c.running:
        md = c.metadata(node, topics)
        for t in topics:
            parts = md.topics[t].partitions
            if len(parts) != PARTITIONS or any(p.leader < 0 or len(p.isr) != 3 for p in parts.values()):
                return False
    return True


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    root = tmp_path_factory.mktemp("clients") / "dc"
    c = ClusterProcess(root, 3, overrides=OVERRIDES)
    c.start()
    try:
        c.wait_ready(90)
        yield c
    finally:
        c.close()
        print(f"node logs: {root}/node-<id>/server.log")


@pytest.fixture(scope="module")
def java_cp(tmp_path_factory: pytest.TempPathFactory) -> str | None:
    if shutil.which("javac") is None or shutil.which("java") is None:
        return None
    if not list(JAVA_LIBS.glob("kafka-clients-*.jar")):
        return None
    out = tmp_path_factory.mktemp("java")
    r = subprocess.run(["javac", "-cp", f"{JAVA_LIBS}/*", "-d", str(out), str(CLIENTS / "Failover.java")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return f"{JAVA_LIBS}/*:{out}"


class Lines:
    """A subprocess whose stdout lines are collected by a thread as they come."""

    def __init__(self, args: list[str], *, stdin: bool = False, err_file: Path | None = None) -> None:
        self.args = args
        self.err_file = err_file  # every stderr line is also written there (kept for a failure)
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.err: collections.deque[str] = collections.deque(maxlen=300)  # the last lines
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()
        self._e = threading.Thread(target=self._read_err, daemon=True)
        self._e.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        with contextlib.ExitStack() as stack:
            out = stack.enter_context(self.err_file.open("w")) if self.err_file is not None else None
            for line in self.proc.stderr:
                self.err.append(line.rstrip("\n"))
                if out is not None:
                    out.write(line)

    def tagged(self, tag: str) -> list[list[str]]:
        return [line.split("\t")[1:] for line in list(self.lines) if line.split("\t", 1)[0] == tag]

    def wait(self, timeout: float) -> int:
        rc = self.proc.wait(timeout)
        self._t.join(10)
        self._e.join(10)
        return rc

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._t.join(10)
        self._e.join(10)

    def tail(self) -> str:
        where = [f"(all of its stderr: {self.err_file})"] if self.err_file is not None else []
        return "\n".join([*self.lines[-10:], *list(self.err)[-60:], *where])


class Client:
    """One client's producer and consumer on its own topic (subclasses per library)."""

    name = ""

    def __init__(self, c: ClusterProcess, topic: str) -> None:
        self.c = c
        self.bs = c.bootstrap
        self.topic = topic
        self.group = f"{topic}-g"
        self.acked: Acked = {}
        self.failed: list[tuple[str, str]] = []
        self.seen: dict[str, tuple[int, int]] = {}  # value -> (partition, offset), by the consumer
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []

    def thread(self, fn: Callable[[], None]) -> None:
        def run() -> None:
            try:
                fn()
            except Exception as e:  # noted; the test's checks fail on what is missing
                self.failed.append(("thread", repr(e)))

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.threads.append(t)

    def start_consumer(self) -> None: ...
    def start_producer(self) -> None: ...
    def progress(self) -> int:
        """Records acknowledged (or, for kcat, handed to it) so far."""
        return len(self.acked)

    def wait_producer(self, timeout: float) -> None: ...
    def observe(self) -> None:
        """Bring the consumer's reads into ``seen`` (for subprocess clients)."""

    def finish_consumer(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.observe()
            if set(self.acked) <= set(self.seen):
                break
            time.sleep(0.3)
        self.stop_event.set()
        self.stop_consumer()
        self.observe()
        for t in self.threads:
            t.join(30)

    def stop_consumer(self) -> None: ...


class JavaClient(Client):
    name = "java"

    def __init__(self, c: ClusterProcess, topic: str, cp: str) -> None:
        super().__init__(c, topic)
        self.cp = cp
        self.prod: Lines | None = None
        self.cons: Lines | None = None

    def java(self, *args: str, stdin: bool = False) -> Lines:
        return Lines(["java", "-cp", self.cp, "Failover", *args], stdin=stdin)

    def admin(self) -> tuple[dict[int, tuple[int, list[int], list[int]]], dict[int, int]]:
        run = self.java("admin", self.bs, self.topic)
        rc = run.wait(120)
        assert rc == 0, run.tail()
        def ids(s: str) -> list[int]:
            return [int(x) for x in s.split(",") if x]

        parts = {int(p): (int(leader), ids(reps), ids(isr)) for p, leader, reps, isr in run.tagged("PART")}
        ends = {int(p): int(o) for p, o in run.tagged("END")}
        return parts, ends

    def start_consumer(self) -> None:
        self.cons = self.java("consume", self.bs, self.topic, self.group, stdin=True)

    def start_producer(self) -> None:
        self.prod = self.java("produce", self.bs, self.topic, str(COUNT), str(int(INTERVAL * 1000)))

    def progress(self) -> int:
        return len(self.prod.tagged("ACK")) if self.prod is not None else 0

    def wait_producer(self, timeout: float) -> None:
        assert self.prod is not None
        rc = self.prod.wait(timeout)
        assert rc == 0, f"the Java producer exited with {rc}:\n{self.prod.tail()}"
        for v, p, o in self.prod.tagged("ACK"):
            self.acked[v] = (int(p), int(o))
        self.failed += [(v, e) for v, e in self.prod.tagged("ERR")]
        assert self.cons is not None and self.cons.proc.stdin is not None
        self.cons.proc.stdin.write(f"EXPECT {len(self.acked)}\n")
        self.cons.proc.stdin.flush()

    def observe(self) -> None:
        assert self.cons is not None
        for p, o, v in self.cons.tagged("REC"):
            self.seen[v] = (int(p), int(o))

    def stop_consumer(self) -> None:
        assert self.cons is not None
        try:
            rc = self.cons.wait(30)
        except subprocess.TimeoutExpired:
            rc = None
        self.cons.stop()
        assert rc == 0, f"the Java consumer: exit {rc}\n{self.cons.tail()}"


class _Recent(logging.Handler):
    """The last log lines of a client library (its consumer's resets, truncations and
    rebalances), printed when a check fails."""

    def __init__(self, keep: int = 400) -> None:
        super().__init__(logging.INFO)
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.created:.3f} {record.name}: {record.getMessage()}")


class KafkaPythonClient(Client):
    name = "kafka-python"

    def start_consumer(self) -> None:
        from kafka import KafkaConsumer  # type: ignore[import-untyped]

        self.log = _Recent()
        lg = logging.getLogger("kafka")
        lg.addHandler(self.log)
        if lg.getEffectiveLevel() > logging.INFO:
            lg.setLevel(logging.INFO)
        if os.environ.get("STROM_KPY_DEBUG"):
            fh = logging.FileHandler(os.environ["STROM_KPY_DEBUG"])
            fh.setFormatter(logging.Formatter("%(created).3f %(threadName)s %(name)s: %(message)s"))
            lg.addHandler(fh)
            lg.setLevel(logging.DEBUG)

        cons = KafkaConsumer(self.topic, bootstrap_servers=self.bs.split(","), group_id=self.group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=10000, heartbeat_interval_ms=1000,
                             metadata_max_age_ms=2000, request_timeout_ms=30000)

        def run() -> None:
            try:
                while not self.stop_event.is_set():
                    # a long poll: kafka-python 3.0.12 loses a rebalance that completes just
                    # after a poll timed out inside it (join_group_async returns on its timer,
                    # the in-flight join then finishes, need_rejoin() turns False and the
                    # assignment is never applied: the consumer reads nothing, forever). With
                    # 300 ms polls that hit one CI run and 1 in 7 runs here; poll returns as
                    # soon as records arrive, so a long timeout costs nothing
                    got = cons.poll(timeout_ms=5000)
                    for recs in got.values():
                        for r in recs:
                            self.seen[r.value.decode()] = (r.partition, r.offset)
                    if got:
                        try:
                            cons.commit()
                        except Exception as e:  # a coordinator moving: the next commit covers it
                            self.failed.append(("commit", repr(e)))
            finally:
                cons.close()

        self.thread(run)

    def start_producer(self) -> None:
        from kafka import KafkaProducer  # type: ignore[import-untyped]

        prod = KafkaProducer(bootstrap_servers=self.bs.split(","), acks="all", enable_idempotence=True,
                             linger_ms=5, request_timeout_ms=10000, delivery_timeout_ms=120000,
                             metadata_max_age_ms=2000)

        def run() -> None:
            futures = []
            for i in range(COUNT):
                v = f"k-{i}"
                f = prod.send(self.topic, v.encode(), partition=i % PARTITIONS)
                f.add_callback(lambda md, v=v: self.acked.__setitem__(v, (md.partition, md.offset)))
                futures.append((v, f))
                time.sleep(INTERVAL)
            prod.flush()
            for v, f in futures:
                try:
                    md = f.get(timeout=150)
                    self.acked[v] = (md.partition, md.offset)
                except Exception as e:
                    self.failed.append((v, repr(e)))
            prod.close()

        self.prod_thread = threading.Thread(target=run, daemon=True)
        self.prod_thread.start()

    def wait_producer(self, timeout: float) -> None:
        self.prod_thread.join(timeout)
        assert not self.prod_thread.is_alive(), "the kafka-python producer did not finish"


class KcatClient(Client):
    name = "kcat"

    def __init__(self, c: ClusterProcess, topic: str, kcat: str) -> None:
        super().__init__(c, topic)
        self.kcat = kcat
        self.sent: list[str] = []

    def start_consumer(self) -> None:
        self.cons = Lines([self.kcat, "-b", self.bs, "-E", "-q", "-u", "-G", self.group, "-f", "%p\t%o\t%s\n",
                           "-X", "auto.offset.reset=earliest",
                           "-X", "topic.metadata.refresh.interval.ms=1000", "-X", "log_level=0", self.topic])

    def start_producer(self) -> None:
        # "key:value" lines (-K:): the keys spread the records over the partitions
        self.prod = Lines([self.kcat, "-b", self.bs, "-E", "-P", "-K:", "-t", self.topic, "-X", "acks=all",
                           "-X", "enable.idempotence=true", "-X", "linger.ms=5",
                           "-X", "topic.metadata.refresh.interval.ms=1000",
                           # librdkafka's idempotence, partition and request log (PID, epoch bumps,
                           # drains, leader moves, each Produce), in a file kept for a failure
                           "-X", "debug=eos,msg,topic,broker,protocol,queue", "-X", "log_level=7"],
                          stdin=True, err_file=self.c.root / f"kcat-producer-{self.topic}.log")

        def feed() -> None:
            stdin = self.prod.proc.stdin
            assert stdin is not None
            for i in range(COUNT):
                v = f"c-{i}"
                stdin.write(f"{v}:{v}\n")
                stdin.flush()
                self.sent.append(v)
                time.sleep(INTERVAL)
            stdin.close()

        self.feeder = threading.Thread(target=feed, daemon=True)
        self.feeder.start()

    def progress(self) -> int:
        return len(self.sent)

    def wait_producer(self, timeout: float) -> None:
        self.feeder.join(timeout)
        try:
            rc = self.prod.wait(timeout)
        except subprocess.TimeoutExpired:
            self.prod.stop()
            raise AssertionError(f"kcat -P did not finish in {timeout} s:\n{self.prod.tail()}") from None
        # kcat exits 1 with a "Delivery failed" line per record it gave up on; 0: every one delivered
        assert rc == 0, f"kcat -P exited with {rc}:\n{self.prod.tail()}"
        self.acked = {v: (-1, -1) for v in self.sent}

    def observe(self) -> None:
        for line in list(self.cons.lines):
            p, o, v = line.split("\t", 2)
            self.seen[v] = (int(p), int(o))

    def stop_consumer(self) -> None:
        self.cons.stop()


class ConfluentClient(Client):
    name = "confluent-kafka"

    def start_consumer(self) -> None:
        import confluent_kafka

        cons = confluent_kafka.Consumer({
            "bootstrap.servers": self.bs, "group.id": self.group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
            "topic.metadata.refresh.interval.ms": 1000, "log_level": 0,
        })
        cons.subscribe([self.topic])

        def run() -> None:
            try:
                while not self.stop_event.is_set():
                    msgs = [m for m in cons.consume(200, 0.3) if m.error() is None]
                    for m in msgs:
                        v = (m.value() or b"").decode()
                        self.seen[v] = (int(m.partition() or 0), int(m.offset() or 0))
                    if msgs:
                        try:
                            cons.commit(asynchronous=False)
                        except confluent_kafka.KafkaException as e:
                            self.failed.append(("commit", repr(e)))
            finally:
                cons.close()

        self.thread(run)

    def start_producer(self) -> None:
        import confluent_kafka

        prod = confluent_kafka.Producer({
            "bootstrap.servers": self.bs, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "message.timeout.ms": 120000, "topic.metadata.refresh.interval.ms": 1000, "log_level": 0,
        })

        def delivered(err: Any, msg: Any) -> None:
            v = msg.value().decode()
            if err is not None:
                self.failed.append((v, str(err)))
            else:
                off = msg.offset()
                self.acked[v] = (msg.partition(), off if off is not None else -1)

        def run() -> None:
            for i in range(COUNT):
                prod.produce(self.topic, f"r-{i}".encode(), partition=i % PARTITIONS, on_delivery=delivered)
                prod.poll(INTERVAL)
            assert prod.flush(150) == 0

        self.prod_thread = threading.Thread(target=run, daemon=True)
        self.prod_thread.start()

    def wait_producer(self, timeout: float) -> None:
        self.prod_thread.join(timeout)
        assert not self.prod_thread.is_alive(), "the confluent-kafka producer did not finish"


def test_real_clients_across_a_leader_kill(cluster: ClusterProcess, java_cp: str | None) -> None:
    c = cluster
    for i in NODES:
        if not c.is_running(i):
            c.start_node(i)
    run_id = uuid.uuid4().hex[:6]
    clients: list[Client] = []
    skipped: list[str] = []
    topic = f"fo-{run_id}"
    if java_cp is not None:
        clients.append(JavaClient(c, f"{topic}-java", java_cp))
    else:
        skipped.append("Java (no JDK or kafka-clients jars)")
    try:
        import kafka  # noqa: F401

        clients.append(KafkaPythonClient(c, f"{topic}-kpy"))
    except ImportError:
        skipped.append("kafka-python")
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is not None:
        clients.append(KcatClient(c, f"{topic}-kcat", kcat))
    else:
        skipped.append("kcat")
    try:
        import confluent_kafka  # noqa: F401

        clients.append(ConfluentClient(c, f"{topic}-ck"))
    except ImportError:
        skipped.append("confluent-kafka")
    if not clients:
        pytest.skip("none of the clients is installed")
    print(f"clients: {[cl.name for cl in clients]}; not installed: {skipped or 'none'}")
    topics = [cl.topic for cl in clients]
    res = c.create_topics(c.running[0], {t: (PARTITIONS, 3) for t in topics},
                          configs={"min.insync.replicas": "2"})
    assert all(code == 0 for code, _m in res.values()), res
    for t in topics:
        c.wait_topic(t, timeout=60)
    wait_for("full ISRs", lambda: isr_full(c, topics), 60)

    java = next((cl for cl in clients if isinstance(cl, JavaClient)), None)
    if java is not None:
        parts, ends = java.admin()
        print(f"Java AdminClient before: partitions {parts}, end offsets {ends}")
        assert sorted(parts) == list(range(PARTITIONS))
        assert all(sorted(reps) == list(NODES) and sorted(isr) == list(NODES)
                   for _l, reps, isr in parts.values())
        assert ends == dict.fromkeys(range(PARTITIONS), 0)

    md = c.metadata(c.running[0], topics)
    leads = {t: {p.partition: p.leader for p in md.topics[t].partitions.values()} for t in topics}
    victim = leads[topics[0]][0]
    print(f"leaders: {leads}; the victim: node {victim}")
    t0 = time.monotonic()
    for cl in clients:
        cl.start_consumer()
    for cl in clients:
        cl.start_producer()
    wait_for("every client's first acknowledgements", lambda: all(cl.progress() >= 30 for cl in clients), 60)
    c.kill(victim)
    print(f"[{time.monotonic() - t0:5.1f}s] kill -9 node {victim}, leader of "
          f"{ {t: [p for p, ld in lp.items() if ld == victim] for t, lp in leads.items()} }")
    time.sleep(4.0)
    c.start_node(victim)
    print(f"[{time.monotonic() - t0:5.1f}s] node {victim} restarted")
    for cl in clients:
        cl.wait_producer(180)
    print(f"[{time.monotonic() - t0:5.1f}s] producers done: "
          f"{ {cl.name: (len(cl.acked), len(cl.failed)) for cl in clients} } (acked, failed)")
    for cl in clients:
        cl.finish_consumer(60)
        print(f"[{time.monotonic() - t0:5.1f}s] {cl.name} consumer done")
    wait_for("full ISRs after the restart", lambda: isr_full(c, topics), 90)

    problems: list[tuple[Any, ...]] = []
    for cl in clients:
        final = final_read(c.bootstrap, cl.topic, PARTITIONS)
        where: dict[str, list[tuple[int, int]]] = {}
        for p, recs in final.items():
            for o, v in recs:
                where.setdefault(v, []).append((p, o))
        lost = [v for v in cl.acked if v not in where]
        dup = {v: locs for v, locs in where.items() if len(locs) > 1}
        misplaced = [(v, po, where[v]) for v, po in cl.acked.items()
                     if po[1] >= 0 and v in where and [po] != where[v]]
        unseen = [v for v in cl.acked if v not in cl.seen]
        phantom = [(v, po) for v, po in cl.seen.items() if where.get(v) != [po]]
        print(f"{cl.name}: acked {len(cl.acked)} of {COUNT}, not acked {len(cl.failed)}, "
              f"read by the consumer {len(cl.seen)}, final log {sum(len(r) for r in final.values())}; "
              f"lost {len(lost)}, "
              f"duplicated {len(dup)}, misplaced {len(misplaced)}, unseen by the consumer {len(unseen)}, "
              f"phantom {len(phantom)}; errors {cl.failed[:3]}")
        if unseen:
            print(f"{cl.name}: {len(unseen)} unseen, e.g. "
                  f"{[(v, cl.acked[v]) for v in unseen[:20]]}; the consumer read "
                  f"{sorted(cl.seen.values())[:10]} ...")
        if (lost or dup or misplaced or unseen or phantom) and isinstance(cl, KafkaPythonClient):
            print("kafka-python's log:\n" + "\n".join(cl.log.lines))
        if lost or dup or misplaced or unseen or phantom:
            problems.append((cl.name, lost[:5], list(dup.items())[:5], misplaced[:5], unseen[:5],
                             phantom[:5]))
        if len(cl.acked) < COUNT * 0.9:
            problems.append((cl.name, f"only {len(cl.acked)} of {COUNT} acknowledged"))
        spread = {p: len(recs) for p, recs in final.items()}
        if min(spread.values()) < COUNT / PARTITIONS / 3:  # the victim's partition too
            problems.append((cl.name, "records not spread over the partitions", spread))
        if java is not None and cl is java:
            parts, ends = java.admin()
            print(f"Java AdminClient after: partitions {parts}, end offsets {ends}")
            if not all(ld >= 0 and sorted(isr) == list(NODES) for ld, _r, isr in parts.values()):
                problems.append(("java admin", "ISR not full or no leader", parts))
            want = {p: (recs[-1][0] + 1 if recs else 0) for p, recs in final.items()}
            if ends != want:
                problems.append(("java admin", "listOffsets", ends, "final log ends", want))
    assert not problems, problems
