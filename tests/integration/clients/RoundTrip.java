import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.*;

/**
 * Java kafka-clients side of strom's integration tests (tests/integration/test_clients.py).
 *
 *   java RoundTrip produce BOOTSTRAP TOPIC COMPRESSION  < spec
 *       spec lines: partition \t timestamp \t key \t value \t headers
 *       (key/value hex or "-" for null; headers "name=hex,name=-" or empty). Idempotent, acks=all.
 *       prints "ACK \t index \t partition \t offset" for every record, in input order.
 *   java RoundTrip consume BOOTSTRAP TOPIC PARTITIONS COUNT [GROUP]
 *       without GROUP: assign() all partitions from the beginning (no group coordinator needed);
 *       with GROUP: subscribe() in that group and commitSync() at the end.
 *       prints "REC \t partition \t offset \t tstype \t timestamp \t key \t value \t headers".
 * Exit 0 on success; otherwise a "FAIL ..." line and exit 1.
 */
public class RoundTrip {
    static final HexFormat HEX = HexFormat.of();

    static byte[] dec(String s) { return s.equals("-") ? null : HEX.parseHex(s); }
    static String enc(byte[] b) { return b == null ? "-" : HEX.formatHex(b); }

    static void fail(String m) { System.out.println("FAIL " + m); System.out.flush(); System.exit(1); }

    public static void main(String[] a) throws Exception {
        if (a[0].equals("produce")) produce(a[1], a[2], a[3]);
        else consume(a[1], a[2], Integer.parseInt(a[3]), Integer.parseInt(a[4]), a.length > 5 ? a[5] : null);
        System.exit(0);
    }

    static void produce(String bs, String topic, String compression) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bs);
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("compression.type", compression);
        p.put("linger.ms", "5");
        p.put("request.timeout.ms", "15000");
        p.put("delivery.timeout.ms", "60000");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        List<Future<RecordMetadata>> fs = new ArrayList<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(p)) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isEmpty()) continue;
                String[] f = line.split("\t", -1);
                ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(
                    topic, Integer.parseInt(f[0]), Long.parseLong(f[1]), dec(f[2]), dec(f[3]));
                if (!f[4].isEmpty()) {
                    for (String h : f[4].split(",")) {
                        int eq = h.indexOf('=');
                        r.headers().add(h.substring(0, eq), dec(h.substring(eq + 1)));
                    }
                }
                fs.add(prod.send(r));
            }
            prod.flush();
            for (int i = 0; i < fs.size(); i++) {
                RecordMetadata md;
                try { md = fs.get(i).get(); } catch (Exception e) { fail("produce record " + i + ": " + e); return; }
                System.out.println("ACK\t" + i + "\t" + md.partition() + "\t" + md.offset());
            }
        }
    }

    static void consume(String bs, String topic, int parts, int count, String group) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bs);
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", "30000");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        if (group != null) p.put("group.id", group);
        int got = 0;
        long deadline = System.currentTimeMillis() + 60_000;
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            if (group != null) {
                c.subscribe(List.of(topic));
            } else {
                List<TopicPartition> tps = new ArrayList<>();
                for (int i = 0; i < parts; i++) tps.add(new TopicPartition(topic, i));
                c.assign(tps);
                c.seekToBeginning(tps);
            }
            StringBuilder out = new StringBuilder();
            while (got < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                    StringBuilder hs = new StringBuilder();
                    for (Header h : r.headers()) {
                        if (hs.length() > 0) hs.append(',');
                        hs.append(h.key()).append('=').append(enc(h.value()));
                    }
                    int tt = r.timestampType() == TimestampType.LOG_APPEND_TIME ? 1 : 0;
                    out.append("REC\t").append(r.partition()).append('\t').append(r.offset()).append('\t')
                       .append(tt).append('\t').append(r.timestamp()).append('\t').append(enc(r.key()))
                       .append('\t').append(enc(r.value())).append('\t').append(hs).append('\n');
                    got++;
                }
            }
            System.out.print(out);
            System.out.flush();
            if (group != null) c.commitSync();
        }
        if (got < count) fail("consumed " + got + " of " + count + " records within 60 s");
    }
}
