"""KIP-848 regex subscriptions with real clients (``group.protocol=consumer``): librdkafka
(confluent-kafka, ``^prefix.*``) and the Java consumer (``subscribe(SubscriptionPattern)``, the
broker-side RE2/J regex; ``subscribe(java.util.regex.Pattern)``, which the Java client resolves
itself and sends as names) are assigned the matching topics; a topic created later is picked up
(after Kafka's 10 s minimum between resolutions), a deleted one is dropped. Plus the switch of an
empty group between the classic and consumer protocols, keeping its committed offsets."""

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

pytestmark = [pytest.mark.integration, pytest.mark.slow]


REGEX_JAVA = r"""
import java.nio.file.*;
import java.time.Duration;
import java.util.*;
import java.util.regex.Pattern;
import java.util.stream.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/** One KIP-848 consumer subscribed by regex (args: bootstrap group regex re2j|java stopfile);
 *  prints its assignment whenever it changes and every record, commits, until the stop file. */
public class RegexConsume {
    public static void main(String[] a) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", a[0]);
        p.put("group.id", a[1]);
        p.put("group.protocol", "consumer");
        p.put("auto.offset.reset", "earliest");
        p.put("metadata.max.age.ms", "1000");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        Path stop = Paths.get(a[4]);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            if (a[3].equals("re2j")) c.subscribe(new SubscriptionPattern(a[2]));
            else c.subscribe(Pattern.compile(a[2]));
            String last = null;
            while (!Files.exists(stop)) {
                ConsumerRecords<String, String> rs;
                try {
                    rs = c.poll(Duration.ofMillis(100));
                } catch (org.apache.kafka.common.KafkaException e) {
                    System.out.println("ERROR " + e.getClass().getName() + " " + e.getMessage());
                    break;
                }
                for (ConsumerRecord<String, String> r : rs)
                    System.out.println("REC " + r.topic() + " " + r.partition() + " " + r.offset());
                if (!rs.isEmpty()) c.commitSync();
                String cur = c.assignment().stream().map(tp -> tp.topic() + ":" + tp.partition())
                    .sorted().collect(Collectors.joining(","));
                if (!cur.equals(last)) { System.out.println("ASSIGNMENT " + cur); last = cur; }
                System.out.flush();
            }
        }
        System.out.println("DONE");
    }
}
"""


@pytest.fixture(scope="module")
def regex_cp(tmp_path_factory: pytest.TempPathFactory) -> str:
    return compile_java(REGEX_JAVA, tmp_path_factory.mktemp("java-regex"), "RegexConsume")


@pytest.fixture
def broker(tmp_path: Path) -> BrokerProcess:
    b = BrokerProcess(
        tmp_path / "data",
        overrides=["group.initial.rebalance.delay.ms=0", "group.consumer.heartbeat.interval.ms=500"],
    )
    b.start()
    yield b  # type: ignore[misc]
    b.stop()
    assert "Traceback" not in b.log(), b.log()


def create(bs: str, *topics: tuple[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    for fut in admin.create_topics([NewTopic(t, n, 1) for t, n in topics]).values():
        fut.result(10)


def delete(bs: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    for fut in admin.delete_topics([topic]).values():
        fut.result(10)


def produce(bs: str, topic: str, partitions: int, per_partition: int) -> None:
    p = Producer({"bootstrap.servers": bs})
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, value=f"{part}-{i}".encode(), partition=part)
    assert p.flush(30) == 0


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 40) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_confluent_regex_subscription_follows_topic_changes(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    x = uuid.uuid4().hex[:6]
    create(bs, (f"rx{x}-a", 2), (f"other{x}", 1))
    produce(bs, f"rx{x}-a", 2, 3)
    produce(bs, f"other{x}", 1, 3)
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"g{x}",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        }
    )
    got: list[tuple[str, int, int]] = []
    try:
        c.subscribe([f"^rx{x}-.*"])

        def poll_until(cond: Callable[[], bool], what: str) -> None:
            def step() -> bool:
                m = c.poll(0.2)
                if m is not None and not m.error():
                    got.append((m.topic(), m.partition(), m.offset()))
                return cond()

            wait_for(step, what)

        poll_until(lambda: len(got) >= 6, "the records of the matching topic")
        assert {t for t, _, _ in got} == {f"rx{x}-a"}
        create(bs, (f"rx{x}-b", 1))
        produce(bs, f"rx{x}-b", 1, 2)
        poll_until(lambda: sum(t == f"rx{x}-b" for t, _, _ in got) >= 2, "the topic created later")
        delete(bs, f"rx{x}-a")
        poll_until(
            lambda: {tp.topic for tp in c.assignment()} == {f"rx{x}-b"}, "the deleted topic to be dropped"
        )
        assert sorted(got) == sorted(set(got))  # nothing twice
    finally:
        c.close()


@pytest.mark.parametrize("mode", ["re2j", "java"])
def test_java_regex_subscription_follows_topic_changes(
    broker: BrokerProcess, regex_cp: str, tmp_path: Path, mode: str
) -> None:
    bs = broker.bootstrap
    x = uuid.uuid4().hex[:6]
    create(bs, (f"jx{x}-a", 2), (f"other{x}", 1))
    produce(bs, f"jx{x}-a", 2, 3)
    produce(bs, f"other{x}", 1, 3)
    stop = tmp_path / "stop"
    out = tmp_path / "java.out"

    def lines() -> list[str]:
        return out.read_text().splitlines()

    def assignment() -> str | None:
        last = [ln for ln in lines() if ln.startswith("ASSIGNMENT")]
        return last[-1].partition(" ")[2] if last else None

    def recs(topic: str) -> int:
        return sum(ln.startswith(f"REC {topic} ") for ln in lines())

    with open(out, "wb") as f:
        proc = subprocess.Popen(
            ["java", "-cp", regex_cp, "RegexConsume", bs, f"g{x}", f"jx{x}-.*", mode, str(stop)],
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: recs(f"jx{x}-a") >= 6, "the records of the matching topic", 60)
        assert recs(f"other{x}") == 0
        create(bs, (f"jx{x}-b", 1))
        produce(bs, f"jx{x}-b", 1, 2)
        wait_for(lambda: recs(f"jx{x}-b") >= 2, "the topic created later")
        delete(bs, f"jx{x}-a")
        wait_for(lambda: assignment() == f"jx{x}-b:0", "the deleted topic to be dropped")
        stop.touch()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        print(out.read_text()[-3000:])


def test_empty_group_switches_between_classic_and_consumer_protocols(broker: BrokerProcess) -> None:
    """Kafka converts an empty classic group into a consumer group on the first
    ConsumerGroupHeartbeat, and an empty consumer group into a classic group on the first
    JoinGroup (GroupMetadataManager.maybeDeleteEmptyClassicGroup / ...ConsumerGroup); the
    committed offsets stay."""
    bs = broker.bootstrap
    x = uuid.uuid4().hex[:6]
    topic, group = f"mig{x}", f"gm{x}"
    create(bs, (topic, 2))
    admin = AdminClient({"bootstrap.servers": bs})

    def group_type() -> str:
        d = admin.describe_consumer_groups([group])[group].result(10)
        return str(d.type)

    def consume(protocol: str, n: int) -> list[tuple[int, int]]:
        conf = {
            "bootstrap.servers": bs,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf["session.timeout.ms"] = 6000
        c = Consumer(conf)
        got: list[tuple[int, int]] = []
        try:
            c.subscribe([topic])

            def step() -> bool:
                m = c.poll(0.2)
                if m is not None and not m.error():
                    got.append((m.partition(), m.offset()))
                    c.commit(m, asynchronous=False)
                return len(got) >= n

            wait_for(step, f"{n} records with the {protocol} protocol")
            seen_type = group_type()
        finally:
            c.close()
        assert protocol.upper() in seen_type, seen_type
        return got

    produce(bs, topic, 2, 3)
    first = consume("classic", 6)
    produce(bs, topic, 2, 2)
    second = consume("consumer", 4)  # an empty classic group becomes a consumer group
    produce(bs, topic, 2, 2)
    third = consume("classic", 4)  # and back
    assert sorted(first) == [(p, o) for p in range(2) for o in range(3)]
    assert sorted(second) == [(p, o) for p in range(2) for o in range(3, 5)]
    assert sorted(third) == [(p, o) for p in range(2) for o in range(5, 7)]
    c = Consumer({"bootstrap.servers": bs, "group.id": group})
    committed = c.committed([TopicPartition(topic, p) for p in range(2)], timeout=10)
    c.close()
    assert [tp.offset for tp in committed] == [7, 7]


def test_java_invalid_regex_is_refused(broker: BrokerProcess, regex_cp: str, tmp_path: Path) -> None:
    """RE2/J refuses look-ahead; so does strom, with INVALID_REGULAR_EXPRESSION, which the Java
    consumer raises from poll as InvalidRegularExpression."""
    stop = tmp_path / "stop"
    r = subprocess.run(
        ["java", "-cp", regex_cp, "RegexConsume", broker.bootstrap, "gbad", "(?=x)y", "re2j", str(stop)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "ERROR org.apache.kafka.common.errors.InvalidRegularExpression" in r.stdout, r.stdout + r.stderr


def test_confluent_regex_group_survives_broker_restart(broker: BrokerProcess) -> None:
    """The resolution (ConsumerGroupRegularExpression records) is replayed at load: the member
    keeps its partitions across a restart, and a topic created afterwards is still picked up."""
    bs = broker.bootstrap
    x = uuid.uuid4().hex[:6]
    create(bs, (f"rr{x}-a", 2))
    produce(bs, f"rr{x}-a", 2, 2)
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"g{x}",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        }
    )
    got: list[tuple[str, int, int]] = []

    def poll_until(cond: Callable[[], bool], what: str) -> None:
        def step() -> bool:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append((m.topic(), m.partition(), m.offset()))
            return cond()

        wait_for(step, what, 60)

    try:
        c.subscribe([f"^rr{x}-.*"])
        poll_until(lambda: len(got) >= 4, "the records of the matching topic")
        broker.stop()
        broker.start()
        produce(bs, f"rr{x}-a", 2, 1)
        poll_until(lambda: len(got) >= 6, "records after the restart")
        create(bs, (f"rr{x}-b", 1))
        produce(bs, f"rr{x}-b", 1, 1)
        poll_until(lambda: any(t == f"rr{x}-b" for t, _, _ in got), "a topic created after the restart")
        assert len(got) == len(set(got))
    finally:
        c.close()
