import java.nio.file.*;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.*;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A consume-transform-produce application over several KIP-848 groups (group.protocol=consumer)
 * whose members join, leave and rejoin while they work.
 *
 * usage: TxnGroupChurn BOOTSTRAP STOP_FILE SPEC...
 * SPEC = name,group,assignor,topic+topic,static(0|1),startMs,stopMs,restartMs  (-1: never)
 *
 * Each instance is a thread with a read_committed consumer and a transactional producer
 * (transactional.id = "txc-" + name, the same across its lives). Every polled batch is written to
 * "out-" + group (key = topic:partition:offset) in one transaction that also commits the batch's
 * offsets with sendOffsetsToTransaction(offsets, consumer.groupMetadata()). An abortable error
 * aborts and rewinds to the batch's first offsets; an error that makes the producer unusable is
 * reported, and the producer is replaced. A static member (group.instance.id = name) that stops
 * and later restarts is a rolling bounce. Threads end when the stop file exists.
 * Output lines: "name EVENT details".
 */
public class TxnGroupChurn {
    static synchronized void out(String s) { System.out.println(s); System.out.flush(); }

    public static void main(String[] a) throws Exception {
        if (a[0].equals("stale-probe")) {
            staleProbe(a[1], a[2], a[3]);
            return;
        }
        String bootstrap = a[0];
        Path stop = Paths.get(a[1]);
        long t0 = System.currentTimeMillis();
        List<Thread> ts = new ArrayList<>();
        for (int i = 2; i < a.length; i++) {
            String[] f = a[i].split(",");
            Thread t = new Thread(() -> instance(bootstrap, stop, t0, f), f[0]);
            t.start();
            ts.add(t);
        }
        for (Thread t : ts) t.join();
        out("main DONE");
    }

    static void sleepUntil(long t, Path stop) throws InterruptedException {
        while (System.currentTimeMillis() < t && !Files.exists(stop)) Thread.sleep(20);
    }

    static void instance(String bootstrap, Path stop, long t0, String[] f) {
        String name = f[0], group = f[1], assignor = f[2];
        List<String> topics = Arrays.asList(f[3].split("\\+"));
        boolean isStatic = f[4].equals("1");
        long start = Long.parseLong(f[5]), stopAt = Long.parseLong(f[6]), restart = Long.parseLong(f[7]);
        try {
            sleepUntil(t0 + start, stop);
            if (Files.exists(stop)) return;
            life(bootstrap, stop, name, group, assignor, topics, isStatic, stopAt < 0 ? -1 : t0 + stopAt);
            if (restart >= 0) {
                sleepUntil(t0 + restart, stop);
                if (!Files.exists(stop)) life(bootstrap, stop, name, group, assignor, topics, isStatic, -1);
            }
        } catch (Throwable e) {
            out(name + " CRASH " + e);
        }
        out(name + " END");
    }

    static KafkaProducer<String, String> producer(String bootstrap, String name) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", "txc-" + name);
        p.put("client.id", "p-" + name);
        p.put("linger.ms", "2");
        p.put("transaction.timeout.ms", "30000");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        KafkaProducer<String, String> pr = new KafkaProducer<>(p);
        pr.initTransactions();
        return pr;
    }

    static void life(String bootstrap, Path stop, String name, String group, String assignor,
                     List<String> topics, boolean isStatic, long until) throws Exception {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("group.protocol", "consumer");
        c.put("group.remote.assignor", assignor);
        if (isStatic) c.put("group.instance.id", name);
        c.put("client.id", "c-" + name);
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("isolation.level", "read_committed");
        c.put("max.poll.records", "10");
        c.put("max.poll.interval.ms", "30000");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        String outTopic = "out-" + group;
        out(name + " JOIN " + group);
        KafkaProducer<String, String> pr = producer(bootstrap, name);
        try (KafkaConsumer<String, String> con = new KafkaConsumer<>(c)) {
            con.subscribe(topics, new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> ps) {
                    if (!ps.isEmpty()) out(name + " REVOKED " + ps);
                }
                public void onPartitionsAssigned(Collection<TopicPartition> ps) {
                    if (!ps.isEmpty()) out(name + " ASSIGNED " + ps);
                }
                public void onPartitionsLost(Collection<TopicPartition> ps) {
                    out(name + " LOST " + ps);
                }
            });
            long lastEpochLog = -2;
            while (!Files.exists(stop) && (until < 0 || System.currentTimeMillis() < until)) {
                ConsumerRecords<String, String> rs = con.poll(Duration.ofMillis(100));
                int gen = con.groupMetadata().generationId();
                if (gen != lastEpochLog) {
                    out(name + " EPOCH " + gen);
                    lastEpochLog = gen;
                }
                if (rs.isEmpty()) continue;
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                Map<TopicPartition, Long> first = new HashMap<>();
                for (ConsumerRecord<String, String> r : rs) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    first.putIfAbsent(tp, r.offset());
                    offsets.put(tp, new OffsetAndMetadata(r.offset() + 1));
                }
                try {
                    pr.beginTransaction();
                    for (ConsumerRecord<String, String> r : rs) {
                        pr.send(new ProducerRecord<>(outTopic, r.topic() + ":" + r.partition() + ":" + r.offset(), name));
                    }
                    Thread.sleep(15); // work: widens the window in which the group changes mid-transaction
                    pr.sendOffsetsToTransaction(offsets, con.groupMetadata());
                    pr.commitTransaction();
                    out(name + " COMMIT " + rs.count());
                } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException
                         | UnsupportedVersionException e) {
                    out(name + " FATAL " + e);
                    try { pr.close(Duration.ZERO); } catch (Exception ignored) { }
                    pr = producer(bootstrap, name);
                    rewind(con, first);
                } catch (KafkaException e) {
                    boolean fatal = false;
                    try {
                        pr.abortTransaction();
                        out(name + " ABORT " + e);
                    } catch (KafkaException e2) {
                        fatal = true;
                        out(name + " FATAL " + e + " / " + e2);
                    }
                    if (fatal) {
                        try { pr.close(Duration.ZERO); } catch (Exception ignored) { }
                        pr = producer(bootstrap, name);
                    }
                    rewind(con, first);
                }
            }
            out(name + " LEAVE " + group);
        } finally {
            pr.close(Duration.ofSeconds(5));
        }
    }

    /** usage: TxnGroupChurn stale-probe BOOTSTRAP TOPIC GROUP. One member joins and consumes;
     *  a transaction commits its offsets with the member's epoch + 5 (what a member that missed
     *  epoch bumps would send), then with its real group metadata. Prints how each ended. */
    static void staleProbe(String bootstrap, String topic, String group) throws Exception {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("group.protocol", "consumer");
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("isolation.level", "read_committed");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        KafkaProducer<String, String> pr = producer(bootstrap, "probe-" + group);
        try (KafkaConsumer<String, String> con = new KafkaConsumer<>(c)) {
            con.subscribe(List.of(topic));
            ConsumerRecords<String, String> rs = ConsumerRecords.empty();
            long deadline = System.currentTimeMillis() + 30000;
            while (rs.isEmpty() && System.currentTimeMillis() < deadline) rs = con.poll(Duration.ofMillis(200));
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            for (ConsumerRecord<String, String> r : rs) {
                offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
            }
            ConsumerGroupMetadata real = con.groupMetadata();
            ConsumerGroupMetadata stale = new ConsumerGroupMetadata(
                real.groupId(), real.generationId() + 5, real.memberId(), real.groupInstanceId());
            for (ConsumerGroupMetadata md : List.of(stale, real)) {
                String which = md == real ? "real" : "stale";
                try {
                    pr.beginTransaction();
                    pr.send(new ProducerRecord<>(topic + "-out", "k", which));
                    pr.sendOffsetsToTransaction(offsets, md);
                    pr.commitTransaction();
                    out(which + " COMMITTED");
                } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException e) {
                    out(which + " FATAL " + e);
                    return;
                } catch (KafkaException e) {
                    try {
                        pr.abortTransaction();
                        out(which + " ABORTABLE " + e.getClass().getSimpleName());
                    } catch (KafkaException e2) {
                        out(which + " FATAL " + e + " / " + e2);
                        return;
                    }
                }
            }
        } finally {
            pr.close(Duration.ofSeconds(5));
        }
    }

    static void rewind(KafkaConsumer<String, String> con, Map<TopicPartition, Long> first) {
        Set<TopicPartition> mine = con.assignment();
        for (Map.Entry<TopicPartition, Long> e : first.entrySet()) {
            if (mine.contains(e.getKey())) con.seek(e.getKey(), e.getValue());
        }
    }
}
