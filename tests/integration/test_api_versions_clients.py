# ruff: noqa: E501  (the embedded Java source keeps its natural line lengths)
"""strom's ApiVersions answer is Kafka 4.0.1's, and real clients take strom for a Kafka 4.0 broker.

The reference table is not strom's own: kafka-python ships the ApiVersions response it captured from
a real Kafka 4.0.0 broker (``BROKER_API_VERSIONS[(4, 0)]``); strom must list exactly those ranges for
every API it implements, JoinGroup aside (4.0.1 put back v0/v1, KAFKA-19444), and nothing else (no
telemetry APIs: Kafka lists those only with a ClientTelemetry plugin) but the share-group APIs of
Kafka 4.1+ (KIP-932), listed with Kafka 4.3's ranges.

Then each client family's own version inference: kafka-python's ``check_version`` (admin and
consumer), librdkafka's negotiated ranges and protocol features (no ``broker.version.fallback``), and
the Java client (4.x) using the new versions' fields (DescribeCluster v2 ``includeFencedBrokers``,
DescribeGroups v6's GROUP_ID_NOT_FOUND, ListOffsets v10) and logging no warning in a produce/consume
round trip.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.protocol.api_versions import KAFKA_API_RANGES
from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

COMPAT_HOME = Path(os.environ.get("STROM_COMPAT_HOME", Path.home() / ".cache" / "strom-compat"))
JAVA_LIBS = COMPAT_HOME / "java" / "libs"

# Kafka 4.0.1 differs from the 4.0.0 capture only here
KAFKA_4_0_1_CHANGES = {11: (0, 9)}  # JoinGroup v0/v1 back (KAFKA-19444)
# Share groups (KIP-932) came with Kafka 4.1: strom lists their APIs with the ranges of
# kafka-python's Kafka 4.3 capture (ShareFetch/ShareAcknowledge v2 and DescribeShareGroupOffsets
# v1 are 4.2's)
SHARE_APIS = frozenset({76, 77, 78, 79, 90, 91, 92})


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("apiv") / "data", overrides=["group.initial.rebalance.delay.ms=0"]
    )
    b.start()
    try:
        yield b
    finally:
        b.stop()


def test_kafka_python_infers_kafka_4_0(broker: BrokerProcess) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="apiv")
    try:
        assert admin._client.check_version() == (4, 0)
        got = {int(k): tuple(v) for k, v in admin.api_versions().items()}
    finally:
        admin.close()
    kafka_4_0 = {**BROKER_API_VERSIONS[(4, 0)], **KAFKA_4_0_1_CHANGES}
    if (4, 3) in BROKER_API_VERSIONS:
        kafka_4_3 = BROKER_API_VERSIONS[(4, 3)]
        assert {k: v for k, v in got.items() if k in SHARE_APIS} == {k: tuple(kafka_4_3[k]) for k in SHARE_APIS}
    got = {k: v for k, v in got.items() if k not in SHARE_APIS}
    assert set(got) <= set(kafka_4_0), "strom lists an API Kafka 4.0 does not"
    assert {k: v for k, v in got.items() if v != kafka_4_0[k]} == {}
    assert 71 not in got and 72 not in got  # telemetry: not without a ClientTelemetry plugin
    # every API strom implements is listed
    assert set(got) == (set(KAFKA_API_RANGES) - SHARE_APIS) & set(kafka_4_0)

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    try:
        assert consumer.config["api_version"] == (4, 0)
    finally:
        consumer.close()


def test_librdkafka_negotiates_kafka_4_ranges(broker: BrokerProcess) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    lines: list[str] = []
    problems: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())
            if record.levelno >= logging.WARNING:
                problems.append(record.getMessage())

    logger = logging.getLogger(f"rdkafka-apiv-{uuid.uuid4().hex[:6]}")
    logger.propagate = False
    logger.addHandler(Collect())
    logger.setLevel(logging.DEBUG)
    topic = f"apiv-{uuid.uuid4().hex[:8]}"
    # no broker.version.fallback / api.version.request tweaks: librdkafka's defaults
    p = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap, "debug": "feature,protocol", "compression.type": "zstd"},
        logger=logger,
    )
    p.produce(topic, b"v", b"k")
    assert p.flush(30) == 0
    text = "\n".join(lines)
    assert "ApiKey ListOffsets (2) Versions 1..10" in text
    assert "ApiKey Metadata (3) Versions 0..13" in text
    assert "ApiKey Produce (0) Versions 0..12" in text
    assert "ApiKey DescribeGroups (15) Versions 0..6" in text
    assert "ApiKey DescribeCluster (60) Versions 0..2" in text
    features = {line.rsplit(" ", 1)[1] for line in lines if "Enabling feature " in line}
    assert {"MsgVer2", "ApiVersion", "IdempotentProducer", "ZSTD", "LZ4", "BrokerBalancedConsumer"} <= features
    assert not [m for m in problems if "fallback" in m.lower() or "ApiVersion" in m], problems


PARITY_JAVA = r"""
import java.util.*;
import java.time.Duration;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class Parity {
    public static void main(String[] a) throws Exception {
        String topic = a[1];
        Properties p = new Properties();
        p.put("bootstrap.servers", a[0]);
        try (Admin admin = Admin.create(p)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            try {
                DescribeClusterResult dc = admin.describeCluster(new DescribeClusterOptions().includeFencedBrokers(true));
                System.out.println("CLUSTER " + dc.nodes().get().size() + " " + dc.controller().get().id() + " fenced=" + dc.nodes().get().iterator().next().isFenced());
            } catch (Exception e) { System.out.println("CLUSTER " + e); }
            try {
                ConsumerGroupDescription g = admin.describeConsumerGroups(List.of("no-such-group")).all().get().get("no-such-group");
                System.out.println("GROUP " + g.groupState());
            } catch (Exception e) { System.out.println("GROUP " + e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage()); }
            TopicPartition tp = new TopicPartition(topic, 0);
            System.out.println("OFFSETS " + admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get().get(tp).offset());
        }
        Properties pp = new Properties();
        pp.put("bootstrap.servers", a[0]);
        try (Producer<String, String> prod = new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            prod.send(new ProducerRecord<>(topic, "k", "v")).get();
        }
        Properties cp = new Properties();
        cp.put("bootstrap.servers", a[0]);
        cp.put("group.id", "parity-" + topic);
        cp.put("auto.offset.reset", "earliest");
        try (Consumer<String, String> c = new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
            c.subscribe(List.of(topic));
            int n = 0;
            long end = System.currentTimeMillis() + 30000;
            while (n < 1 && System.currentTimeMillis() < end) n += c.poll(Duration.ofMillis(200)).count();
            c.commitSync();
            System.out.println("CONSUMED " + n);
        }
    }
}
"""


def _slf4j_simple() -> str | None:
    """An SLF4J 2.x backend so the client's WARN lines reach stderr (the compat jars have none)."""
    found = sorted(glob.glob(str(Path.home() / ".m2/repository/org/slf4j/slf4j-simple/2.*/slf4j-simple-2.*.jar")))
    return found[-1] if found else None


def test_java_client_uses_kafka_4_versions_without_warnings(broker: BrokerProcess, tmp_path: Path) -> None:
    if shutil.which("java") is None or not JAVA_LIBS.is_dir():
        pytest.skip("no JDK or Kafka client jars")
    backend = _slf4j_simple()
    src = tmp_path / "Parity.java"
    src.write_text(PARITY_JAVA)
    classpath = f"{JAVA_LIBS}/*" + (f":{backend}" if backend else "")
    r = subprocess.run(
        ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath, str(src), broker.bootstrap, f"apiv-java-{uuid.uuid4().hex[:8]}"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "CLUSTER 1 1 fenced=false" in r.stdout  # DescribeCluster v2 (includeFencedBrokers needs it)
    assert "GROUP GroupIdNotFoundException: Group no-such-group not found." in r.stdout  # DescribeGroups v6
    assert "OFFSETS 0" in r.stdout
    assert "CONSUMED 1" in r.stdout
    if backend is not None:
        warnings = [line for line in r.stderr.splitlines() if " WARN " in line or " ERROR " in line]
        assert warnings == [], r.stderr
