# ruff: noqa: E501  (the embedded Java source keeps its natural line lengths)
"""Several log dirs with real clients: the Java Admin (kafka-clients 4.x: describeLogDirs,
alterReplicaLogDirs, describeReplicaLogDirs, as kafka-log-dirs.sh and kafka-reassign-partitions.sh
use them) moves partitions between dirs while a confluent-kafka producer and consumer keep
running (nothing lost, nothing duplicated), a move survives kill -9, and a failed dir (a tmpfs
unmounted under the broker: the disk gone) takes only its partitions offline. Skipped without a JDK / client jars."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

COMPAT_HOME = Path(os.environ.get("STROM_COMPAT_HOME", Path.home() / ".cache" / "strom-compat"))
JAVA_LIBS = COMPAT_HOME / "java" / "libs"

SOURCE = r"""
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.TopicPartitionReplica;
import org.apache.kafka.common.TopicPartition;

public class LogDirsAdmin {
    public static void main(String[] a) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", a[1]);
        try (Admin admin = Admin.create(p)) {
            if (a[0].equals("describe")) {
                Map<String, LogDirDescription> dirs = admin.describeLogDirs(List.of(1)).allDescriptions().get().get(1);
                for (Map.Entry<String, LogDirDescription> e : dirs.entrySet()) {
                    LogDirDescription d = e.getValue();
                    System.out.println("DIR " + e.getKey() + " " + (d.error() == null ? "none" : d.error().getClass().getSimpleName())
                        + " total=" + d.totalBytes().orElse(-1) + " usable=" + d.usableBytes().orElse(-1));
                    for (Map.Entry<TopicPartition, ReplicaInfo> r : d.replicaInfos().entrySet())
                        System.out.println("REPLICA " + e.getKey() + " " + r.getKey() + " size=" + r.getValue().size()
                            + " lag=" + r.getValue().offsetLag() + " future=" + r.getValue().isFuture());
                }
                return;
            }
            String topic = a[2];
            Map<TopicPartitionReplica, String> want = new LinkedHashMap<>();
            for (int i = 3; i < a.length; i++) {
                String[] kv = a[i].split("=", 2);
                want.put(new TopicPartitionReplica(topic, Integer.parseInt(kv[0]), 1), kv[1]);
            }
            if (a[0].equals("alter")) {
                for (Map.Entry<TopicPartitionReplica, org.apache.kafka.common.KafkaFuture<Void>> f : admin.alterReplicaLogDirs(want).values().entrySet()) {
                    try { f.getValue().get(); System.out.println("ALTER " + f.getKey().partition() + " ok"); }
                    catch (Exception e) { System.out.println("ALTER " + f.getKey().partition() + " " + e.getCause().getClass().getSimpleName()); }
                }
            }
            // wait: describeReplicaLogDirs until each replica is in its dir with no future replica
            long deadline = System.currentTimeMillis() + Long.parseLong(System.getProperty("waitMs", "0"));
            while (true) {
                Map<TopicPartitionReplica, DescribeReplicaLogDirsResult.ReplicaLogDirInfo> info = admin.describeReplicaLogDirs(want.keySet()).all().get();
                boolean done = true;
                for (TopicPartitionReplica r : want.keySet()) {
                    DescribeReplicaLogDirsResult.ReplicaLogDirInfo i = info.get(r);
                    if (i.getFutureReplicaLogDir() != null)
                        System.out.println("FUTURE " + r.partition() + " " + i.getFutureReplicaLogDir() + " lag=" + i.getFutureReplicaOffsetLag());
                    if (!want.get(r).equals(i.getCurrentReplicaLogDir()) || i.getFutureReplicaLogDir() != null) done = false;
                }
                if (done) {
                    for (TopicPartitionReplica r : want.keySet()) System.out.println("MOVED " + r.partition() + " " + info.get(r).getCurrentReplicaLogDir());
                    return;
                }
                if (System.currentTimeMillis() > deadline) { System.out.println("NOT_MOVED"); return; }
                Thread.sleep(200);
            }
        }
    }
}
"""


@pytest.fixture(scope="module")
def java_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("java") is None or not JAVA_LIBS.is_dir():
        pytest.skip("no JDK or Kafka client jars")
    src = tmp_path_factory.mktemp("java") / "LogDirsAdmin.java"
    src.write_text(SOURCE)
    return src


def java(src: Path, *args: str, wait_ms: int = 0) -> str:
    r = subprocess.run(
        ["java", f"-DwaitMs={wait_ms}", "-cp", f"{JAVA_LIBS}/*", str(src), *args],
        capture_output=True, text=True, timeout=240,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def start_broker(data: list[Path], **extra: str) -> BrokerProcess:
    overrides = [f"log.dirs={','.join(str(d) for d in data)}", "strom.log.dir.check.interval.ms=200",
                 "offsets.topic.num.partitions=3"]
    overrides += [f"{k}={v}" for k, v in extra.items()]
    return BrokerProcess(data[0], overrides=overrides).start()


def where(data: list[Path], topic: str, p: int) -> Path:
    [d] = [d for d in data if (d / f"{topic}-{p}").is_dir()]
    return d


def create(b: BrokerProcess, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


class Traffic:
    """A confluent producer (idempotent) writing ``<partition>:<n>`` in order to every partition
    and a consumer reading them, both in threads, until stopped."""

    def __init__(self, b: BrokerProcess, topic: str, partitions: int) -> None:
        self.b, self.topic, self.partitions = b, topic, partitions
        self.sent: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.got: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._produce), threading.Thread(target=self._consume)]
        for t in self.threads:
            t.start()

    def _produce(self) -> None:
        prod = Producer({"bootstrap.servers": self.b.bootstrap, "enable.idempotence": True, "linger.ms": 5, "batch.size": 65536})

        def report(err: KafkaError | None, msg: object) -> None:
            if err is not None:
                self.errors.append(str(err))

        n = 0
        while not self.stopping.is_set():
            for p in range(self.partitions):
                prod.produce(self.topic, value=f"{p}:{n}".encode(), partition=p, on_delivery=report)
                self.sent[p].append(n)
            n += 1
            if n % 50 == 0:
                prod.poll(0)
                time.sleep(0.005)
        prod.flush(60)

    def _consume(self) -> None:
        c = Consumer({"bootstrap.servers": self.b.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe([self.topic])
        idle_since: float | None = None
        while True:
            m = c.poll(0.2)
            if m is None:
                if self.stopping.is_set() and all(len(self.got[p]) >= len(self.sent[p]) for p in self.got):
                    break
                idle_since = idle_since or time.monotonic()
                if self.stopping.is_set() and time.monotonic() - idle_since > 30:
                    break
                continue
            idle_since = None
            if m.error():
                self.errors.append(str(m.error()))
                continue
            p, n = (int(x) for x in m.value().decode().split(":"))
            self.got[p].append(n)
        c.close()

    def stop(self) -> None:
        self.stopping.set()
        self.threads[0].join(90)
        self.threads[1].join(90)


def test_java_admin_moves_partitions_under_traffic(java_src: Path, tmp_path: Path) -> None:
    data = [tmp_path / f"d{i}" for i in range(3)]
    topic = "moving"
    # throttled, so the copy takes a while with the producer and consumer running
    b = start_broker(data, **{"log.segment.bytes": "262144",
                              "replica.alter.log.dirs.io.max.bytes.per.second": "2000000"})
    try:
        create(b, topic, 2)
        traffic = Traffic(b, topic, 2)
        time.sleep(2)
        out = java(java_src, "describe", b.bootstrap)
        for d in data:
            assert f"DIR {d} none total=" in out
        src = {p: where(data, topic, p) for p in range(2)}
        dest = {p: next(d for d in data if d != src[p]) for p in range(2)}
        assert f"REPLICA {src[0]} {topic}-0 " in out
        out = java(java_src, "alter", b.bootstrap, topic, *(f"{p}={dest[p]}" for p in range(2)), wait_ms=60_000)
        assert "ALTER 0 ok" in out and "ALTER 1 ok" in out
        assert f"MOVED 0 {dest[0]}" in out and f"MOVED 1 {dest[1]}" in out, out
        time.sleep(1)  # traffic goes on after the swap
        traffic.stop()
        assert not traffic.errors
        for p in range(2):
            assert traffic.sent[p] and traffic.got[p] == traffic.sent[p]  # in order, no loss, no duplicate
            assert where(data, topic, p) == dest[p]
        # a partition not on this broker, a dir not configured
        out = java(java_src, "alter", b.bootstrap, "nope", f"0={dest[0]}", f"1={tmp_path / 'elsewhere'}")
        assert "ALTER 0 ReplicaNotAvailableException" in out
        assert "ALTER 1 LogDirNotFoundException" in out
        b.stop()
        b = start_broker(data)  # found again where they were moved to
        out = java(java_src, "alter", b.bootstrap, topic, *(f"{p}={dest[p]}" for p in range(2)), wait_ms=10_000)
        assert f"MOVED 0 {dest[0]}" in out
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "after", "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        total, want = 0, sum(len(v) for v in traffic.sent.values())
        deadline = time.monotonic() + 60
        while total < want and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                total += 1
        c.close()
        assert total == want
    finally:
        b.stop()


@pytest.mark.slow
def test_move_survives_kill_9(java_src: Path, tmp_path: Path) -> None:
    data = [tmp_path / f"d{i}" for i in range(2)]
    topic = "slowmove"
    b = start_broker(data, **{"replica.alter.log.dirs.io.max.bytes.per.second": "300000"})
    try:
        create(b, topic, 1)
        prod = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20})
        for i in range(3000):
            prod.produce(topic, value=f"{i}".encode() + b"x" * 1000, partition=0)
        assert prod.flush(60) == 0
        src = where(data, topic, 0)
        dest = next(d for d in data if d != src)
        out = java(java_src, "alter", b.bootstrap, topic, f"0={dest}", wait_ms=1500)
        assert "ALTER 0 ok" in out and f"FUTURE 0 {dest} lag=" in out and "NOT_MOVED" in out
        out = java(java_src, "describe", b.bootstrap)
        assert f"REPLICA {dest} {topic}-0 " in out and "future=true" in out
        b.kill()
        assert any(n.endswith("-future") for n in os.listdir(dest))
        b = start_broker(data)  # the move is resumed, unthrottled now
        out = java(java_src, "wait", b.bootstrap, topic, f"0={dest}", wait_ms=60_000)
        assert f"MOVED 0 {dest}" in out
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "k9", "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        seen: list[int] = []
        deadline = time.monotonic() + 60
        while len(seen) < 3000 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                seen.append(int(m.value()[:-1000]))
        c.close()
        assert seen == list(range(3000))
    finally:
        b.stop()


@pytest.fixture
def tmpfs_dir(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root / CAP_SYS_ADMIN): {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_failed_dir_takes_only_its_partitions_offline(java_src: Path, tmp_path: Path, tmpfs_dir: Path) -> None:
    data = [tmp_path / "d0", tmp_path / "d1", tmpfs_dir / "data"]
    topic = "failing"
    b = start_broker(data)
    try:
        create(b, topic, 6)
        bad = [p for p in range(6) if where(data, topic, p) == data[2]]
        good = [p for p in range(6) if p not in bad]
        assert bad and good
        # the disk is gone (a read-only remount is refused while files are open for writing)
        r = subprocess.run(["umount", "-l", str(tmpfs_dir)], capture_output=True)
        assert r.returncode == 0, r.stderr
        time.sleep(1)  # the broker's check notices the missing dir
        out = java(java_src, "describe", b.bootstrap)
        assert f"DIR {data[2]} KafkaStorageException total=-1 usable=-1" in out
        assert f"DIR {data[0]} none" in out and f"REPLICA {data[2]} " not in out
        md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(topic, timeout=10).topics[topic]
        for p in bad:  # no leader, the replica offline (Kafka's controller's view of a failed dir)
            assert md.partitions[p].leader == -1 and md.partitions[p].replicas == [1]
            assert md.partitions[p].error is not None and md.partitions[p].error.code() == KafkaError.LEADER_NOT_AVAILABLE
        assert all(md.partitions[p].leader == 1 and md.partitions[p].error is None for p in good)
        prod = Producer({"bootstrap.servers": b.bootstrap, "message.timeout.ms": 4000, "retries": 2})
        results: dict[int, str] = {}

        def report(err: KafkaError | None, msg: object) -> None:
            results[msg.partition()] = "ok" if err is None else err.name()  # type: ignore[attr-defined]

        for p in range(6):
            prod.produce(topic, value=b"after", partition=p, on_delivery=report)
        prod.flush(30)
        assert all(results[p] == "ok" for p in good), results
        assert all(results[p] != "ok" for p in bad), results
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "survivors", "auto.offset.reset": "earliest"})
        c.assign([__import__("confluent_kafka").TopicPartition(topic, p, 0) for p in good])
        got = 0
        deadline = time.monotonic() + 30
        while got < len(good) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got += 1
        c.close()
        assert got == len(good)
        assert b.proc is not None and b.proc.poll() is None  # the broker keeps serving
        assert "log dir" in b.log() and "failed" in b.log()
    finally:
        b.stop()
