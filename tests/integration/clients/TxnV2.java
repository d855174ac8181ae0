// Java kafka-clients 4.x against a broker advertising transaction.version=2 (KIP-890 part 2),
// for strom's tests. Each mode prints result lines the test checks.
// usage: TxnV2 rounds BOOTSTRAP TOPIC TXN_ID            -> commit c*, abort a*, commit d*; prints "epoch=<broker's epoch>"
//        TxnV2 offsets BOOTSTRAP IN OUT GROUP TXN_ID N  -> consume N from IN in GROUP, produce them to OUT, sendOffsetsToTransaction, commit
//        TxnV2 zombie BOOTSTRAP TOPIC TXN_ID            -> a second producer fences the first mid-transaction; prints "fenced" and "epoch=..."
//        TxnV2 timeout BOOTSTRAP TOPIC TXN_ID           -> a transaction outlives transaction.timeout.ms (1 s); prints "commit=<exception class>" and "epoch=..."
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.serialization.*;

public class TxnV2 {
    public static void main(String[] a) throws Exception {
        switch (a[0]) {
            case "rounds" -> rounds(a[1], a[2], a[3]);
            case "offsets" -> offsets(a[1], a[2], a[3], a[4], a[5], Integer.parseInt(a[6]));
            case "zombie" -> zombie(a[1], a[2], a[3]);
            case "timeout" -> timeout(a[1], a[2], a[3]);
            default -> throw new IllegalArgumentException(a[0]);
        }
    }

    static KafkaProducer<String, String> producer(String bs, String txnId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bs);
        p.put("transactional.id", txnId);
        p.put("linger.ms", "5");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static void printEpoch(String bs, String txnId) throws Exception {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bs))) {
            TransactionDescription d = admin.describeTransactions(List.of(txnId)).description(txnId).get();
            System.out.println("epoch=" + d.producerEpoch() + " state=" + d.state());
        }
    }

    static void rounds(String bs, String topic, String txnId) throws Exception {
        try (KafkaProducer<String, String> pr = producer(bs, txnId)) {
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
        printEpoch(bs, txnId);
    }

    static void offsets(String bs, String in, String out, String group, String txnId, int n) throws Exception {
        Properties c = new Properties();
        c.put("bootstrap.servers", bs);
        c.put("group.id", group);
        c.put("isolation.level", "read_committed");
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer());
             KafkaProducer<String, String> pr = producer(bs, txnId)) {
            pr.initTransactions();
            consumer.subscribe(List.of(in));
            int got = 0;
            long deadline = System.currentTimeMillis() + 60000;
            while (got < n && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(300));
                if (recs.isEmpty()) continue;
                pr.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offs = new HashMap<>();
                for (ConsumerRecord<String, String> r : recs) {
                    pr.send(new ProducerRecord<>(out, r.key(), r.value().toUpperCase()));
                    offs.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    got++;
                }
                pr.sendOffsetsToTransaction(offs, consumer.groupMetadata());
                pr.commitTransaction();
            }
            System.out.println("copied=" + got);
        }
        printEpoch(bs, txnId);
    }

    static void zombie(String bs, String topic, String txnId) throws Exception {
        KafkaProducer<String, String> a = producer(bs, txnId);
        a.initTransactions();
        a.beginTransaction();
        a.send(new ProducerRecord<>(topic, 0, "k", "zombie")).get();
        try (KafkaProducer<String, String> b = producer(bs, txnId)) {
            b.initTransactions();  // fences a: its transaction is aborted with a bumped epoch
            try {
                a.send(new ProducerRecord<>(topic, 0, "k", "zombie2")).get();
                a.commitTransaction();
                System.out.println("not-fenced");
            } catch (Exception e) {
                Throwable t = e.getCause() != null ? e.getCause() : e;
                if (e instanceof ProducerFencedException || t instanceof ProducerFencedException
                        || e instanceof InvalidProducerEpochException || t instanceof InvalidProducerEpochException)
                    System.out.println("fenced");
                else
                    System.out.println("error=" + e);
            } finally {
                a.close(Duration.ofSeconds(5));
            }
            b.beginTransaction();
            b.send(new ProducerRecord<>(topic, 0, "k", "live"));
            b.commitTransaction();
        }
        printEpoch(bs, txnId);
    }

    static void timeout(String bs, String topic, String txnId) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bs);
        p.put("transactional.id", txnId);
        p.put("transaction.timeout.ms", "1000");
        try (KafkaProducer<String, String> pr = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            pr.initTransactions();
            pr.beginTransaction();
            pr.send(new ProducerRecord<>(topic, 0, "k", "late")).get();
            Thread.sleep(4000);  // the coordinator aborts it, fencing this producer
            try {
                pr.commitTransaction();
                System.out.println("commit=ok");
            } catch (Exception e) {
                System.out.println("commit=" + e.getClass().getSimpleName());
            }
        }
        printEpoch(bs, txnId);
    }
}
