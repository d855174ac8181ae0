import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;

/**
 * The Java share consumer (KafkaShareConsumer, kafka-clients 4.x) and Admin share-group calls
 * against a broker, driven by tests/integration/test_share_groups_java.py.
 *
 *   create BOOTSTRAP TOPIC PARTITIONS
 *   produce BOOTSTRAP TOPIC N PREFIX
 *   txproduce BOOTSTRAP TOPIC N                   (transactions: N committed "c", N aborted "a", N committed "d")
 *   setcfg BOOTSTRAP GROUP name=value...          (IncrementalAlterConfigs on the GROUP resource)
 *   getcfg BOOTSTRAP GROUP name...                (DescribeConfigs on the GROUP resource)
 *   consume BOOTSTRAP TOPIC GROUP POLICY WANT TIMEOUT_MS [IDLE_MS]
 *       prints "REC partition offset value deliveryCount ACK" per delivery; stops when WANT
 *       records got a final acknowledgement (ACCEPT/REJECT), at the timeout, or after IDLE_MS
 *       without records once some came. POLICY:
 *       accept | release-first | release-all | reject:VALUE | hold (acknowledge nothing, then
 *       halt without closing: the broker must time the locks out) | implicit
 *   describe BOOTSTRAP GROUP                      (describeShareGroups + listShareGroupOffsets)
 *   adminops BOOTSTRAP GROUP TOPIC                (alterShareGroupOffsets to 0, deleteShareGroupOffsets,
 *                                                  deleteShareGroups; prints each outcome)
 */
public class ShareClient {
    static Properties base(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        return p;
    }

    public static void main(String[] a) throws Exception {
        String mode = a[0];
        String bootstrap = a[1];
        switch (mode) {
            case "create": {
                try (Admin admin = Admin.create(base(bootstrap))) {
                    admin.createTopics(List.of(new NewTopic(a[2], Integer.parseInt(a[3]), (short) 1))).all().get();
                }
                System.out.println("CREATED");
                break;
            }
            case "produce": {
                Properties p = base(bootstrap);
                p.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
                p.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
                try (KafkaProducer<String, String> prod = new KafkaProducer<>(p)) {
                    int n = Integer.parseInt(a[3]);
                    for (int i = 0; i < n; i++) prod.send(new ProducerRecord<>(a[2], "k" + i, a[4] + i)).get();
                }
                System.out.println("PRODUCED");
                break;
            }
            case "txproduce": {
                Properties p = base(bootstrap);
                p.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
                p.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
                p.put("transactional.id", "share-tx-" + a[2]);
                int n = Integer.parseInt(a[3]);
                try (KafkaProducer<String, String> prod = new KafkaProducer<>(p)) {
                    prod.initTransactions();
                    for (String prefix : List.of("c", "a", "d")) {
                        prod.beginTransaction();
                        for (int i = 0; i < n; i++) prod.send(new ProducerRecord<>(a[2], "k" + i, prefix + i));
                        prod.flush();
                        if (prefix.equals("a")) prod.abortTransaction();
                        else prod.commitTransaction();
                    }
                }
                System.out.println("TXPRODUCED");
                break;
            }
            case "setcfg": {
                try (Admin admin = Admin.create(base(bootstrap))) {
                    ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, a[2]);
                    List<AlterConfigOp> ops = new ArrayList<>();
                    for (int i = 3; i < a.length; i++) {
                        String[] kv = a[i].split("=", 2);
                        ops.add(new AlterConfigOp(new ConfigEntry(kv[0], kv[1]), AlterConfigOp.OpType.SET));
                    }
                    try {
                        admin.incrementalAlterConfigs(Map.of(r, ops)).all().get();
                        System.out.println("SETCFG ok");
                    } catch (Exception e) {
                        System.out.println("SETCFG " + e.getCause().getClass().getSimpleName() + " " + e.getCause().getMessage());
                    }
                }
                break;
            }
            case "getcfg": {
                try (Admin admin = Admin.create(base(bootstrap))) {
                    ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, a[2]);
                    Config c = admin.describeConfigs(List.of(r)).all().get().get(r);
                    for (int i = 3; i < a.length; i++) {
                        ConfigEntry e = c.get(a[i]);
                        System.out.println("CFG " + a[i] + "=" + e.value() + " " + e.source());
                    }
                }
                break;
            }
            case "consume": {
                String topic = a[2], group = a[3], policy = a[4];
                int want = Integer.parseInt(a[5]);
                long deadline = System.currentTimeMillis() + Long.parseLong(a[6]);
                long idle = a.length > 7 ? Long.parseLong(a[7]) : Long.MAX_VALUE;
                long lastRecord = Long.MAX_VALUE;
                Properties p = base(bootstrap);
                p.put("group.id", group);
                p.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
                p.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
                p.put("share.acknowledgement.mode", policy.equals("implicit") ? "implicit" : "explicit");
                KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p);
                c.subscribe(List.of(topic));
                int done = 0;
                boolean held = false;
                while (done < want && System.currentTimeMillis() < deadline) {
                    ConsumerRecords<String, String> recs = c.poll(Duration.ofMillis(500));
                    if (!recs.isEmpty()) lastRecord = System.currentTimeMillis();
                    else if (lastRecord != Long.MAX_VALUE && System.currentTimeMillis() - lastRecord > idle) break;
                    for (ConsumerRecord<String, String> r : recs) {
                        short dc = r.deliveryCount().orElse((short) -1);
                        String ack;
                        if (policy.equals("hold")) {
                            ack = "NONE";
                            held = true;
                        } else if (policy.equals("implicit")) {
                            ack = "IMPLICIT";
                            done++;
                        } else if (policy.equals("release-all") || (policy.equals("release-first") && dc == 1)) {
                            c.acknowledge(r, AcknowledgeType.RELEASE);
                            ack = "RELEASE";
                        } else if (policy.startsWith("reject:") && r.value().equals(policy.substring(7))) {
                            c.acknowledge(r, AcknowledgeType.REJECT);
                            ack = "REJECT";
                            done++;
                        } else {
                            c.acknowledge(r, AcknowledgeType.ACCEPT);
                            ack = "ACCEPT";
                            done++;
                        }
                        System.out.println("REC " + r.partition() + " " + r.offset() + " " + r.value() + " " + dc + " " + ack);
                    }
                    System.out.flush();
                    if (held) {
                        System.out.println("HELD");
                        System.out.flush();
                        Runtime.getRuntime().halt(0);
                    }
                    if (!policy.equals("implicit") && !recs.isEmpty()) {
                        Map<?, ?> res = c.commitSync();
                        for (Map.Entry<?, ?> e : res.entrySet()) {
                            Optional<?> ex = (Optional<?>) e.getValue();
                            if (ex.isPresent()) System.out.println("COMMITERR " + e.getKey() + " " + ex.get());
                        }
                    }
                }
                if (policy.equals("implicit")) c.commitSync();
                c.close();
                System.out.println("DONE " + done);
                break;
            }
            case "describe": {
                try (Admin admin = Admin.create(base(bootstrap))) {
                    ShareGroupDescription d = admin.describeShareGroups(List.of(a[2])).all().get().get(a[2]);
                    System.out.println("GROUP " + d.groupId() + " " + d.groupState() + " members=" + d.members().size());
                    Map<TopicPartition, SharePartitionOffsetInfo> offs = admin.listShareGroupOffsets(
                        Map.of(a[2], new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(a[2]).get();
                    for (Map.Entry<TopicPartition, SharePartitionOffsetInfo> e : offs.entrySet())
                        System.out.println("OFFSET " + e.getKey() + " " + (e.getValue() == null ? "null"
                            : e.getValue().startOffset() + " lag=" + e.getValue().lag().orElse(-1L)));
                    for (GroupListing g : admin.listGroups(ListGroupsOptions.forShareGroups()).all().get())
                        System.out.println("LISTED " + g.groupId() + " " + g.type().orElse(null) + " " + g.groupState().orElse(null));
                }
                break;
            }
            case "adminops": {
                String group = a[2], topic = a[3];
                try (Admin admin = Admin.create(base(bootstrap))) {
                    try {
                        admin.alterShareGroupOffsets(group, Map.of(new TopicPartition(topic, 0), 0L)).all().get();
                        System.out.println("ALTER ok");
                    } catch (Exception e) {
                        System.out.println("ALTER " + e.getCause().getClass().getSimpleName());
                    }
                    Map<TopicPartition, SharePartitionOffsetInfo> offs = admin.listShareGroupOffsets(
                        Map.of(group, new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(group).get();
                    for (Map.Entry<TopicPartition, SharePartitionOffsetInfo> e : offs.entrySet())
                        System.out.println("OFFSET " + e.getKey() + " " + (e.getValue() == null ? "null"
                            : e.getValue().startOffset() + " lag=" + e.getValue().lag().orElse(-1L)));
                    try {
                        admin.deleteShareGroupOffsets(group, Set.of(topic)).all().get();
                        System.out.println("DELETEOFFSETS ok");
                    } catch (Exception e) {
                        System.out.println("DELETEOFFSETS " + e.getCause().getClass().getSimpleName());
                    }
                    try {
                        admin.deleteShareGroups(List.of(group)).all().get();
                        System.out.println("DELETEGROUP ok");
                    } catch (Exception e) {
                        System.out.println("DELETEGROUP " + e.getCause().getClass().getSimpleName());
                    }
                }
                break;
            }
            default:
                throw new IllegalArgumentException(mode);
        }
    }
}
