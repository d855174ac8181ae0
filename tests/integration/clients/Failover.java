import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.*;

/**
 * Java kafka-clients across a failover (tests/integration/test_replication_clients.py).
 *
 *   java Failover produce BOOTSTRAP TOPIC COUNT INTERVAL_MS
 *       an idempotent acks=all producer sends the values "j-0" .. "j-(COUNT-1)" round-robin over
 *       the topic's partitions (j-i to partition i mod partitions), one every INTERVAL_MS, and prints
 *       "ACK \t value \t partition \t offset" when one is acknowledged or "ERR \t value \t error".
 *   java Failover consume BOOTSTRAP TOPIC GROUP
 *       a consumer of GROUP (subscribe, commitSync after each poll) prints "REC \t partition \t
 *       offset \t value" for every record until it has read as many distinct values as the
 *       "EXPECT n" line on its standard input says (or 120 s passed: "TIMEOUT").
 *   java Failover admin BOOTSTRAP TOPIC
 *       AdminClient: describeTopics ("PART \t partition \t leader \t replicas \t isr") and
 *       listOffsets latest ("END \t partition \t offset").
 * Lines are flushed as they are printed; any other failure prints "FAIL ..." and exits 1.
 */
public class Failover {
    static synchronized void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] a) throws Exception {
        try {
            switch (a[0]) {
                case "produce" -> produce(a[1], a[2], Integer.parseInt(a[3]), Long.parseLong(a[4]));
                case "consume" -> consume(a[1], a[2], a[3]);
                case "admin" -> admin(a[1], a[2]);
                default -> throw new IllegalArgumentException("unknown mode " + a[0]);
            }
        } catch (Exception e) {
            out("FAIL " + e);
            System.exit(1);
        }
        System.exit(0);
    }

    static void produce(String bs, String topic, int count, long intervalMs) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bs);
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("linger.ms", "5");
        p.put("request.timeout.ms", "10000");
        p.put("delivery.timeout.ms", "120000");
        p.put("metadata.max.age.ms", "2000");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> prod = new KafkaProducer<>(p)) {
            int parts = prod.partitionsFor(topic).size();
            for (int i = 0; i < count; i++) {
                String v = "j-" + i;
                prod.send(new ProducerRecord<>(topic, i % parts, null, v), (md, e) -> {
                    if (e != null) out("ERR\t" + v + "\t" + e);
                    else out("ACK\t" + v + "\t" + md.partition() + "\t" + md.offset());
                });
                Thread.sleep(intervalMs);
            }
            prod.flush();
        }
    }

    static void consume(String bs, String topic, String group) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bs);
        p.put("group.id", group);
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        p.put("session.timeout.ms", "10000");
        p.put("heartbeat.interval.ms", "1000");
        p.put("request.timeout.ms", "10000");
        p.put("default.api.timeout.ms", "20000");
        p.put("metadata.max.age.ms", "2000");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        AtomicInteger expect = new AtomicInteger(Integer.MAX_VALUE);
        Thread stdin = new Thread(() -> {
            try {
                BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
                String line;
                while ((line = in.readLine()) != null) {
                    if (line.startsWith("EXPECT ")) expect.set(Integer.parseInt(line.substring(7).trim()));
                }
            } catch (Exception e) {
                out("FAIL stdin " + e);
            }
        });
        stdin.setDaemon(true);
        stdin.start();
        Set<String> seen = new HashSet<>();
        long deadline = System.currentTimeMillis() + 120_000;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(topic));
            while (seen.size() < expect.get()) {
                if (System.currentTimeMillis() > deadline) {
                    out("TIMEOUT read " + seen.size() + " of " + expect.get());
                    return;
                }
                ConsumerRecords<String, String> recs = c.poll(Duration.ofMillis(300));
                for (ConsumerRecord<String, String> r : recs) {
                    out("REC\t" + r.partition() + "\t" + r.offset() + "\t" + r.value());
                    seen.add(r.value());
                }
                if (!recs.isEmpty()) {
                    try {
                        c.commitSync();
                    } catch (Exception e) {  // a coordinator moving: the next commit covers it
                        out("COMMITERR\t" + e);
                    }
                }
            }
        }
    }

    static void admin(String bs, String topic) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bs);
        p.put("request.timeout.ms", "10000");
        p.put("default.api.timeout.ms", "30000");
        try (Admin admin = Admin.create(p)) {
            TopicDescription td = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            Map<TopicPartition, OffsetSpec> specs = new HashMap<>();
            for (TopicPartitionInfo pi : td.partitions()) {
                out("PART\t" + pi.partition() + "\t" + (pi.leader() == null ? -1 : pi.leader().id()) + "\t"
                    + ids(pi.replicas()) + "\t" + ids(pi.isr()));
                specs.put(new TopicPartition(topic, pi.partition()), OffsetSpec.latest());
            }
            Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> ends = admin.listOffsets(specs).all().get();
            for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e : ends.entrySet())
                out("END\t" + e.getKey().partition() + "\t" + e.getValue().offset());
        }
    }

    static String ids(List<org.apache.kafka.common.Node> nodes) {
        StringBuilder sb = new StringBuilder();
        for (org.apache.kafka.common.Node n : nodes) {
            if (sb.length() > 0) sb.append(',');
            sb.append(n.id());
        }
        return sb.toString();
    }
}
