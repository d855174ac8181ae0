// Java kafka-clients 4.x transactions against a broker, for strom's tests.
// usage: TxnRoundTrip produce BOOTSTRAP TOPIC TXN_ID      -> commits "c0..c9", aborts "a0..a9", commits "d0..d4"
//        TxnRoundTrip consume BOOTSTRAP TOPIC ISOLATION N -> prints each value on a line (assign, from beginning)
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class TxnRoundTrip {
    public static void main(String[] a) throws Exception {
        if (a[0].equals("produce")) produce(a[1], a[2], a[3]); else consume(a[1], a[2], a[3], Integer.parseInt(a[4]));
    }

    static void produce(String bs, String topic, String txnId) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bs);
        p.put("transactional.id", txnId);
        p.put("compression.type", "zstd");
        try (KafkaProducer<String, String> pr = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            pr.initTransactions();
            pr.beginTransaction();
            for (int i = 0; i < 10; i++) pr.send(new ProducerRecord<>(topic, i % 2, "k" + i, "c" + i));
            pr.commitTransaction();
            pr.beginTransaction();
            for (int i = 0; i < 10; i++) pr.send(new ProducerRecord<>(topic, i % 2, "k" + i, "a" + i));
            pr.flush();
            pr.abortTransaction();
            pr.beginTransaction();
            for (int i = 0; i < 5; i++) pr.send(new ProducerRecord<>(topic, i % 2, "k" + i, "d" + i));
            pr.commitTransaction();
        }
    }

    static void consume(String bs, String topic, String isolation, int n) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bs);
        p.put("isolation.level", isolation);
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            c.assign(List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1)));
            c.seekToBeginning(c.assignment());
            int got = 0;
            long deadline = System.currentTimeMillis() + 60000;  // (ends once n arrived)
            while (got < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(300))) {
                    System.out.println(r.value());
                    got++;
                }
            }
            // drain briefly to catch anything beyond n (must not exist)
            long end = System.currentTimeMillis() + 1500;
            while (System.currentTimeMillis() < end)
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) System.out.println(r.value());
        }
    }
}
