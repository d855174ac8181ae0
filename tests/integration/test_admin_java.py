# ruff: noqa: E501  (the embedded Java source keeps its natural line lengths)
"""The Java AdminClient (kafka-clients 4.x, what kafka-configs.sh / kafka-topics.sh use) against
strom: describeConfigs with synonyms, incrementalAlterConfigs on a topic and on the cluster-default
broker resource (``--entity-default``), createPartitions, describeTopics (which uses
DescribeTopicPartitions) and describeLogDirs. Skipped without a JDK or the client jars."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

COMPAT_HOME = Path(os.environ.get("STROM_COMPAT_HOME", Path.home() / ".cache" / "strom-compat"))
JAVA_LIBS = COMPAT_HOME / "java" / "libs"

SOURCE = r"""
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.config.ConfigResource;

public class ConfigsAdmin {
    public static void main(String[] a) throws Exception {
        String topic = a[1];
        Properties p = new Properties();
        p.put("bootstrap.servers", a[0]);
        try (Admin admin = Admin.create(p)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            ConfigResource tr = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            admin.incrementalAlterConfigs(Map.of(tr, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "1234"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND))))
                .all().get();
            ConfigResource def = new ConfigResource(ConfigResource.Type.BROKER, "");
            admin.incrementalAlterConfigs(Map.of(def, List.of(
                new AlterConfigOp(new ConfigEntry("message.max.bytes", "500000"), AlterConfigOp.OpType.SET))))
                .all().get();
            Config c = admin.describeConfigs(List.of(tr), new DescribeConfigsOptions().includeSynonyms(true))
                .all().get().get(tr);
            for (String n : List.of("retention.ms", "cleanup.policy", "max.message.bytes")) {
                ConfigEntry e = c.get(n);
                StringBuilder sb = new StringBuilder();
                for (ConfigEntry.ConfigSynonym s : e.synonyms()) sb.append(s.source()).append(":").append(s.name()).append("=").append(s.value()).append(";");
                System.out.println("CONFIG " + n + "=" + e.value() + " " + e.source() + " " + sb);
            }
            Config d = admin.describeConfigs(List.of(def)).all().get().get(def);
            for (ConfigEntry e : d.entries()) System.out.println("DEFAULT " + e.name() + "=" + e.value() + " " + e.source());
            admin.incrementalAlterConfigs(Map.of(def, List.of(
                new AlterConfigOp(new ConfigEntry("message.max.bytes", ""), AlterConfigOp.OpType.DELETE))))
                .all().get();
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(3))).all().get();
            TopicDescription td = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            System.out.println("PARTITIONS " + td.partitions().size() + " leader " + td.partitions().get(2).leader().id());
            try {
                admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(2))).all().get();
                System.out.println("SHRINK ok?!");
            } catch (Exception e) {
                System.out.println("SHRINK " + e.getCause().getClass().getSimpleName());
            }
            try {
                admin.incrementalAlterConfigs(Map.of(tr, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET)))).all().get();
            } catch (Exception e) {
                System.out.println("INVALID " + e.getCause().getClass().getSimpleName());
            }
            Map<Integer, Map<String, LogDirDescription>> dirs = admin.describeLogDirs(List.of(1)).allDescriptions().get();
            for (LogDirDescription ld : dirs.get(1).values())
                System.out.println("LOGDIR " + ld.replicaInfos().keySet().stream().filter(tp -> tp.topic().equals(topic)).count());
        }
    }
}
"""


def test_java_admin_client(broker: BrokerProcess, tmp_path: Path) -> None:
    if shutil.which("java") is None or not JAVA_LIBS.is_dir():
        pytest.skip("no JDK or Kafka client jars")
    src = tmp_path / "ConfigsAdmin.java"
    src.write_text(SOURCE)
    topic = f"java-cfg-{uuid.uuid4().hex[:8]}"
    r = subprocess.run(
        ["java", "-cp", f"{JAVA_LIBS}/*", str(src), broker.bootstrap, topic],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.split(" ")[0].isupper()]
    assert (
        "CONFIG retention.ms=1234 DYNAMIC_TOPIC_CONFIG DYNAMIC_TOPIC_CONFIG:retention.ms=1234;"
        in "\n".join(lines)
    )
    assert "CONFIG cleanup.policy=delete,compact DYNAMIC_TOPIC_CONFIG" in r.stdout
    assert (
        "CONFIG max.message.bytes=500000 DYNAMIC_DEFAULT_BROKER_CONFIG "
        "DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=500000;DEFAULT_CONFIG:message.max.bytes=1048588;"
    ) in r.stdout
    assert "DEFAULT message.max.bytes=500000 DYNAMIC_DEFAULT_BROKER_CONFIG" in r.stdout
    assert "PARTITIONS 3 leader 1" in r.stdout
    assert "SHRINK InvalidPartitionsException" in r.stdout
    assert "INVALID InvalidConfigurationException" in r.stdout
    assert "LOGDIR 3" in r.stdout
