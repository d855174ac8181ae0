import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.resource.*;
import org.apache.kafka.common.serialization.*;

/**
 * Java kafka-clients' column of strom's authorization matrix (tests/integration/test_acl_matrix.py).
 *
 *   java AclProbe PRINCIPAL TOPIC < client.properties
 *       client.properties: bootstrap.servers and the security settings of one principal.
 *       Runs every operation of the matrix as that principal (its group mx-g-PRINCIPAL, its
 *       transactional id mx-x-PRINCIPAL, its new topic mx-new-PRINCIPAL) and prints
 *       "CELL \t operation \t OK|HIDDEN|<Kafka error name>" per operation.
 */
public class AclProbe {
    static Properties base = new Properties();

    interface Op { void run() throws Exception; }

    static String outcome(Op op) {
        try {
            op.run();
            return "OK";
        } catch (HiddenException h) {
            return "HIDDEN";
        } catch (Throwable t) {
            // the first Kafka error down the cause chain (futures wrap them, producers too)
            for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
                if (c instanceof HiddenException) return "HIDDEN";
                Errors e = Errors.forException(c);
                if (e != Errors.UNKNOWN_SERVER_ERROR) return e.name();
            }
            return t.getClass().getSimpleName() + ": " + t.getMessage();
        }
    }

    static void cell(String name, Op op) {
        System.out.println("CELL\t" + name + "\t" + outcome(op));
        System.out.flush();
    }

    static Properties props(Map<String, Object> extra) {
        Properties p = new Properties();
        p.putAll(base);
        p.putAll(extra);
        return p;
    }

    public static void main(String[] a) throws Exception {
        String who = a[0], topic = a[1];
        base.load(System.in);
        base.put("request.timeout.ms", "10000");
        base.put("default.api.timeout.ms", "15000");
        Map<String, Object> ser = Map.of(
            "key.serializer", ByteArraySerializer.class.getName(),
            "value.serializer", ByteArraySerializer.class.getName(),
            "max.block.ms", "10000", "delivery.timeout.ms", "12000", "linger.ms", "0");
        try (Admin admin = Admin.create(props(Map.of()))) {
            cell("produce", () -> {
                Map<String, Object> m = new HashMap<>(ser);
                m.put("enable.idempotence", "false");
                m.put("acks", "1");
                m.put("retries", "0");
                try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(props(m))) {
                    p.send(new ProducerRecord<>(topic, "java".getBytes())).get();
                }
            });
            cell("produce idempotent", () -> {
                Map<String, Object> m = new HashMap<>(ser);
                m.put("enable.idempotence", "true");
                m.put("acks", "all");
                try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(props(m))) {
                    p.send(new ProducerRecord<>(topic, "java-idem".getBytes())).get();
                }
            });
            cell("produce transactional", () -> {
                Map<String, Object> m = new HashMap<>(ser);
                m.put("transactional.id", "mx-x-" + who);
                try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(props(m))) {
                    p.initTransactions();
                    p.beginTransaction();
                    p.send(new ProducerRecord<>(topic, "java-txn".getBytes())).get();
                    p.commitTransaction();
                }
            });
            cell("consume (group)", () -> {
                Map<String, Object> m = new HashMap<>();
                m.put("key.deserializer", ByteArrayDeserializer.class.getName());
                m.put("value.deserializer", ByteArrayDeserializer.class.getName());
                m.put("group.id", "mx-g-" + who);
                m.put("enable.auto.commit", "false");
                m.put("auto.offset.reset", "earliest");
                try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props(m))) {
                    TopicPartition tp = new TopicPartition(topic, 0);
                    c.assign(List.of(tp));
                    long deadline = System.currentTimeMillis() + 15000;
                    int got = 0;
                    while (got == 0 && System.currentTimeMillis() < deadline) got += c.poll(Duration.ofMillis(500)).count();
                    if (got == 0) throw new IllegalStateException("no record read");
                    c.commitSync(Duration.ofSeconds(10));
                }
            });
            cell("list offsets", () -> admin.listOffsets(
                Map.of(new TopicPartition(topic, 0), OffsetSpec.latest())).all().get());
            cell("metadata", () -> {
                if (!admin.listTopics().names().get().contains(topic)) throw new HiddenException();
            });
            cell("metadata (named topic)", () -> admin.describeTopics(List.of(topic)).allTopicNames().get());
            String mine = "mx-new-" + who;  // the topic its ACLs name (the C matrix deleted it)
            cell("create topic", () -> admin.createTopics(List.of(new NewTopic(mine, 1, (short) 1))).all().get());
            cell("describe configs", () -> admin.describeConfigs(
                List.of(new ConfigResource(ConfigResource.Type.TOPIC, topic))).all().get());
            cell("alter configs", () -> admin.incrementalAlterConfigs(Map.of(
                new ConfigResource(ConfigResource.Type.TOPIC, topic),
                List.of(new AlterConfigOp(new org.apache.kafka.clients.admin.ConfigEntry("retention.ms", "86400000"),
                                          AlterConfigOp.OpType.SET)))).all().get());
            cell("describe group", () -> admin.describeConsumerGroups(List.of("mx-g-" + who)).all().get());
            cell("delete group", () -> admin.deleteConsumerGroups(List.of("mx-g-" + who)).all().get());
            cell("describe acls", () -> admin.describeAcls(AclBindingFilter.ANY).values().get());
            cell("create acls", () -> admin.createAcls(List.of(new AclBinding(
                new ResourcePattern(ResourceType.TOPIC, "mx-acl-java-" + who, PatternType.LITERAL),
                new AccessControlEntry("User:nobody", "*", AclOperation.READ, AclPermissionType.ALLOW)))).all().get());
            cell("alter scram", () -> admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(
                "mx-scram-java-" + who, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "secret")))
                .all().get());
            cell("describe quotas", () -> admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get());
            cell("describe transactions", () -> admin.describeTransactions(List.of("mx-x-" + who)).all().get());
            cell("delete topic", () -> admin.deleteTopics(List.of(mine)).all().get());
        }
        System.exit(0);
    }

    static class HiddenException extends Exception {}
}
