"""KIP-848 consumer groups survive broker restarts: Java consumers with ``group.protocol=consumer``
keep their member ids, epochs and partitions across a SIGTERM restart and a kill -9 restart of the
broker (the group is persisted in ``__consumer_offsets``), and consume every record exactly once."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from strom.testing.broker_process import BrokerProcess
from strom.testing.java_clients import compile_java

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # noqa: E402

pytestmark = pytest.mark.integration


GROUP_RESTART_JAVA = r"""
import java.nio.file.*;
import java.time.Duration;
import java.util.*;
import java.util.stream.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/** n consumers (threads) in one KIP-848 group; prints what they are given and consume, commits
 *  after every non-empty poll, runs until the stop file exists. */
public class GroupRestart {
    static synchronized void out(String s) { System.out.println(s); System.out.flush(); }

    static String fmt(Collection<TopicPartition> ps) {
        return ps.stream().map(tp -> Integer.toString(tp.partition())).sorted()
            .collect(Collectors.joining(","));
    }

    public static void main(String[] a) throws Exception {
        List<Thread> ts = new ArrayList<>();
        for (int i = 0; i < Integer.parseInt(a[3]); i++) {
            final int idx = i;
            Thread t = new Thread(() -> run(idx, a[0], a[1], a[2], Paths.get(a[4])));
            t.start();
            ts.add(t);
        }
        for (Thread t : ts) t.join();
        out("DONE");
    }

    static void run(int idx, String bootstrap, String topic, String group, Path stop) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("group.protocol", "consumer");
        p.put("client.id", "grc-" + idx);
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> ps) {
                    if (!ps.isEmpty()) out(idx + " REVOKED " + fmt(ps));
                }
                public void onPartitionsAssigned(Collection<TopicPartition> ps) {
                    if (!ps.isEmpty()) out(idx + " ASSIGNED " + fmt(ps));
                }
                public void onPartitionsLost(Collection<TopicPartition> ps) {
                    out(idx + " LOST " + fmt(ps));
                }
            });
            String last = "";
            while (!Files.exists(stop)) {
                ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(100));
                for (ConsumerRecord<String, String> r : rs) {
                    out(idx + " REC " + r.partition() + " " + r.offset());
                }
                if (!rs.isEmpty()) {
                    try {
                        c.commitSync(Duration.ofSeconds(30));
                        out(idx + " COMMITTED");
                    } catch (Exception e) {
                        out(idx + " COMMITFAIL " + e);
                    }
                }
                ConsumerGroupMetadata m = c.groupMetadata();
                String cur = m.memberId() + " " + m.generationId();
                if (!cur.equals(last) && !m.memberId().isEmpty()) {
                    out(idx + " MEMBER " + cur);
                    last = cur;
                }
            }
            out(idx + " CLOSING");
        }
    }
}
"""


@pytest.fixture(scope="module")
def group_restart_cp(tmp_path_factory: pytest.TempPathFactory) -> str:
    return compile_java(GROUP_RESTART_JAVA, tmp_path_factory.mktemp("java-group-restart"), "GroupRestart")


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, key=f"{part}-{i}".encode(), value=tag.encode(), partition=part)
    assert p.flush(30) == 0


class Output:
    """The Java program's stdout, parsed as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self) -> list[list[str]]:
        return [ln.split(" ", 3) for ln in self.path.read_text().splitlines() if ln.strip()]

    def records(self) -> list[tuple[int, int]]:
        return [(int(f[2]), int(f[3])) for f in self.lines() if len(f) == 4 and f[1] == "REC"]

    def events(self) -> list[tuple[str, str, str]]:
        return [(f[0], f[1], f[2]) for f in self.lines() if f[1] in ("ASSIGNED", "REVOKED", "LOST")]

    def members(self) -> list[tuple[str, str]]:
        return [(f[0], " ".join(f[2:])) for f in self.lines() if f[1] == "MEMBER"]

    def owned(self) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for who, kind, parts in self.events():
            ps = {int(x) for x in parts.split(",") if x}
            cur = out.setdefault(who, set())
            if kind == "ASSIGNED":
                cur |= ps
            else:
                cur -= ps
        return out


def wait_for(cond: Callable[[], bool], what: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        assert proc.poll() is None, f"java consumer exited early while waiting for {what}"
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_java_consumer_group_survives_broker_restarts(tmp_path: Path, group_restart_cp: str) -> None:
    partitions, per = 4, 25
    b = BrokerProcess(
        tmp_path / "data",
        overrides=["group.initial.rebalance.delay.ms=0", "group.consumer.heartbeat.interval.ms=500"],
    )
    b.start()
    proc: subprocess.Popen[bytes] | None = None
    stop_file = tmp_path / "stop"
    out = Output(tmp_path / "java.out")
    try:
        bs = b.bootstrap
        topic = f"kip848-{uuid.uuid4().hex[:8]}"
        group = f"g-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bs})
        for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            fut.result(10)
        produce(bs, topic, partitions, per, "1")
        with open(out.path, "wb") as f:
            proc = subprocess.Popen(
                ["java", "-cp", group_restart_cp, "GroupRestart", bs, topic, group, "2", str(stop_file)],
                stdout=f,
                stderr=subprocess.STDOUT,
            )

        def converged() -> bool:
            o = out.owned()
            return (
                len(o) == 2
                and all(o.values())
                and sorted(p for ps in o.values() for p in ps) == list(range(partitions))
            )

        wait_for(lambda: converged() and len(out.records()) >= partitions * per, "first batch", proc)
        time.sleep(1.5)  # a few heartbeats at the final epoch
        owned_before = out.owned()
        members_before = dict(out.members())  # latest member id + epoch per consumer
        n_events = len(out.events())
        assert len(members_before) == 2

        for i, how in enumerate(["sigterm", "kill-9"]):
            if how == "sigterm":
                assert b.stop() in (0, -15)
            else:
                b.kill()
            time.sleep(1.0)  # the consumers notice the coordinator is gone
            b.start()
            produce(bs, topic, partitions, per, str(i + 2))
            want = partitions * per * (i + 2)
            wait_for(lambda w=want: len(out.records()) >= w, f"batch {i + 2} after {how}", proc)  # type: ignore[misc]
            time.sleep(2.0)  # several heartbeats against the restarted broker
            assert out.events()[n_events:] == [], f"rebalance after {how}: {out.events()[n_events:]}"
            assert out.owned() == owned_before
            assert dict(out.members()) == members_before, f"member id/epoch changed after {how}"
            log = b.log()
            assert "Traceback" not in log, log

        stop_file.touch()
        assert proc.wait(60) == 0
        recs = out.records()
        dupes = len(recs) - len(set(recs))
        assert dupes == 0, f"{dupes} records consumed twice"
        assert sorted(set(recs)) == [(p, o) for p in range(partitions) for o in range(3 * per)]
        # everything consumed was committed; a fresh reader of the group's offsets sees it
        c = Consumer({"bootstrap.servers": bs, "group.id": group})
        committed = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        c.close()
        assert [tp.offset for tp in committed] == [3 * per] * partitions
        assert "COMMITFAIL" not in out.path.read_text()
    finally:
        if proc is not None and proc.poll() is None:
            stop_file.touch()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        b.stop()
        if proc is not None:
            print(out.path.read_text()[-4000:])


def test_groups_map_to_the_offsets_topics_own_partition_count(tmp_path: Path) -> None:
    """A broker restarted with another ``offsets.topic.num.partitions`` than its
    ``__consumer_offsets`` was created with (Kafka keeps the topic as it is) maps groups to the
    topic's partitions, as FindCoordinator does (Kafka's partitionFor uses the topic's count):
    every group's committed offsets are still there. (The group coordinator hashed with the
    config's count and looked for the groups in the wrong partitions: their offsets were gone.)"""
    b = BrokerProcess(tmp_path / "d", overrides=["offsets.topic.num.partitions=3"]).start()
    groups = [f"g{i}-{uuid.uuid4().hex[:6]}" for i in range(8)]
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("committed", 1, 1)])["committed"].result(30)
        del admin  # (not left retrying the stopped broker)
        for i, g in enumerate(groups):
            c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": g, "log_level": 0})
            c.commit(offsets=[TopicPartition("committed", 0, 10 + i)], asynchronous=False)
            c.close()
        assert b.stop() == 0, b.log()
        b.overrides = [o for o in b.overrides if not o.startswith("offsets.topic.num.partitions")]
        b.overrides.append("offsets.topic.num.partitions=5")
        b.start()
        got = []
        for g in groups:
            c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": g, "log_level": 0})
            got.append(c.committed([TopicPartition("committed", 0)], timeout=30)[0].offset)
            c.close()
        assert got == [10 + i for i in range(len(groups))], got
    finally:
        b.stop()
