// Scenarios run by tests/integration/test_java_client.py with Apache Kafka's own Java client
// (kafka-clients): each prints what the client saw as one JSON line on stdout.
//
// Usage: java -cp <jars>:<classes> Scenarios <bootstrap> <scenario> [key=value ...]

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class Scenarios {
    static String bootstrap;
    static Map<String, String> args = new HashMap<>();

    public static void main(String[] argv) throws Exception {
        bootstrap = argv[0];
        for (int i = 2; i < argv.length; i++) {
            String[] kv = argv[i].split("=", 2);
            args.put(kv[0], kv[1]);
        }
        Map<String, Object> out;
        switch (argv[1]) {
            case "admin": out = admin(); break;
            case "produce": out = produce(); break;
            case "consume": out = consume(); break;
            case "members": out = members(); break;
            case "transactions": out = transactions(); break;
            case "group-admin": out = groupAdmin(); break;
            case "pattern": out = pattern(); break;
            default: throw new IllegalArgumentException("no scenario " + argv[1]);
        }
        System.out.println(json(out));
        System.out.flush();
        System.exit(0);  // the clients' threads are not waited for
    }

    static String arg(String name, String dflt) { return args.getOrDefault(name, dflt); }

    static int intArg(String name, int dflt) { return Integer.parseInt(arg(name, String.valueOf(dflt))); }

    static Properties common() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", "30000");
        String mechanism = args.get("sasl_mechanism");
        if (mechanism != null) {  // SASL/PLAIN or SCRAM: the user's organisation owns what it names
            String module = mechanism.equals("PLAIN") ? "org.apache.kafka.common.security.plain.PlainLoginModule"
                    : "org.apache.kafka.common.security.scram.ScramLoginModule";
            p.put("security.protocol", "SASL_PLAINTEXT");
            p.put("sasl.mechanism", mechanism);
            p.put("sasl.jaas.config", module + " required username=\"" + args.get("user") + "\" password=\""
                    + args.get("password") + "\";");
        }
        return p;
    }

    static String errorName(Throwable t) {
        Throwable cause = t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t;
        return cause.getClass().getSimpleName();
    }

    // -- admin: topics and cluster --------------------------------------------------------------
    static Map<String, Object> admin() throws Exception {
        String topic = arg("topic", "java-topic");
        int partitions = intArg("partitions", 3);
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = Admin.create(common())) {
            out.put("cluster_id", admin.describeCluster().clusterId().get());
            out.put("nodes", admin.describeCluster().nodes().get().size());
            out.put("controller", admin.describeCluster().controller().get().id());
            NewTopic nt = new NewTopic(topic, partitions, (short) 1)
                    .configs(Map.of("retention.ms", "3600000", "cleanup.policy", "delete"));
            admin.createTopics(List.of(nt)).all().get();
            try {
                admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
                out.put("again", "created");
            } catch (ExecutionException e) {
                out.put("again", errorName(e));
            }
            out.put("listed", admin.listTopics().names().get().contains(topic));
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            out.put("partitions", d.partitions().size());
            out.put("topic_id", d.topicId().toString());
            List<Object> leaders = new ArrayList<>();
            d.partitions().forEach(p -> leaders.add(p.leader().id()));
            out.put("leaders", leaders);
            TopicDescription byId = admin.describeTopics(
                    org.apache.kafka.common.TopicCollection.ofTopicIds(List.of(d.topicId())))
                    .allTopicIds().get().get(d.topicId());
            out.put("name_by_id", byId.name());
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config cfg = admin.describeConfigs(List.of(res)).all().get().get(res);
            out.put("retention_ms", cfg.get("retention.ms").value());
            out.put("retention_source", cfg.get("retention.ms").source().toString());
            admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(
                    new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET)))).all().get();
            cfg = admin.describeConfigs(List.of(res)).all().get().get(res);
            out.put("retention_ms_altered", cfg.get("retention.ms").value());
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(partitions + 2))).all().get();
            out.put("partitions_after", admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic)
                    .partitions().size());
            admin.deleteTopics(List.of(topic)).all().get();
            boolean gone = false;
            for (int i = 0; i < 50 && !gone; i++) {
                gone = !admin.listTopics().names().get().contains(topic);
                if (!gone) Thread.sleep(100);
            }
            out.put("deleted", gone);
            try {
                admin.describeTopics(List.of(topic)).allTopicNames().get();
                out.put("describe_deleted", "found");
            } catch (ExecutionException e) {
                out.put("describe_deleted", errorName(e));
            }
        }
        return out;
    }

    // -- produce ----------------------------------------------------------------------------------
    static Map<String, Object> produce() throws Exception {
        String topic = arg("topic", "java-topic");
        int n = intArg("n", 100);
        Map<String, Object> out = new LinkedHashMap<>();
        if (args.containsKey("create")) {  // the topic, with this many partitions, unless it exists
            try (Admin admin = Admin.create(common())) {
                admin.createTopics(List.of(new NewTopic(topic, intArg("create", 1), (short) 1))).all().get();
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof org.apache.kafka.common.errors.TopicExistsException)) throw e;
            }
        }
        Map<String, List<Long>> offsets = new TreeMap<>();
        List<KafkaProducer<String, String>> producers = new ArrayList<>();  // one per codec, taking turns
        try {
            for (String codec : arg("compression", "none").split(",")) {
                Properties p = common();
                p.put("key.serializer", StringSerializer.class.getName());
                p.put("value.serializer", StringSerializer.class.getName());
                p.put("acks", "all");
                p.put("compression.type", codec);
                p.put("enable.idempotence", arg("idempotence", "true"));
                p.put("linger.ms", "5");
                producers.add(new KafkaProducer<>(p));
            }
            List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                ProducerRecord<String, String> r = new ProducerRecord<>(topic, "k-" + i, "v-" + i);
                r.headers().add("idx", String.valueOf(i).getBytes());
                sent.add(producers.get(i % producers.size()).send(r));
            }
            for (KafkaProducer<String, String> producer : producers) producer.flush();
            for (java.util.concurrent.Future<RecordMetadata> f : sent) {
                RecordMetadata m = f.get();
                offsets.computeIfAbsent(String.valueOf(m.partition()), k -> new ArrayList<>()).add(m.offset());
            }
        } finally {
            for (KafkaProducer<String, String> producer : producers) producer.close();
        }
        for (List<Long> offs : offsets.values()) Collections.sort(offs);
        out.put("offsets", offsets);
        return out;
    }

    // -- consume with a group -------------------------------------------------------------------
    static KafkaConsumer<String, String> consumer(String group, String protocol, String isolation) {
        Properties p = common();
        p.put("group.id", group);
        p.put("group.protocol", protocol);
        if (protocol.equals("classic")) {
            p.put("partition.assignment.strategy", arg("strategy",
                    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"));
            p.put("session.timeout.ms", "10000");
            p.put("heartbeat.interval.ms", "500");
        }
        p.put("auto.offset.reset", "earliest");
        p.put("metadata.max.age.ms", arg("metadata_max_age_ms", "300000"));  // a classic pattern's new topics
        p.put("enable.auto.commit", "false");
        p.put("isolation.level", isolation);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    static Map<String, Object> recordOf(ConsumerRecord<String, String> r) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("partition", r.partition());
        m.put("offset", r.offset());
        m.put("key", r.key());
        m.put("value", r.value());
        Header h = r.headers().lastHeader("idx");
        m.put("idx", h == null ? null : new String(h.value()));
        m.put("timestamp", r.timestamp());
        return m;
    }

    static Map<String, Object> consume() throws Exception {
        String topic = arg("topic", "java-topic"), group = arg("group", "java-group");
        String protocol = arg("protocol", "classic");
        int n = intArg("n", 100);
        Map<String, Object> out = new LinkedHashMap<>();
        List<Object> records = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer(group, protocol, arg("isolation", "read_uncommitted"))) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + intArg("timeout_ms", 30000);
            while (records.size() < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) records.add(recordOf(r));
            }
            c.commitSync();
            Set<TopicPartition> assigned = c.assignment();
            Map<String, Object> committed = new TreeMap<>();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : c.committed(assigned).entrySet()) {
                committed.put(String.valueOf(e.getKey().partition()), e.getValue() == null ? null : e.getValue().offset());
            }
            List<Integer> parts = new ArrayList<>();
            assigned.forEach(tp -> parts.add(tp.partition()));
            Collections.sort(parts);
            out.put("assignment", parts);
            out.put("committed", committed);
            out.put("generation", c.groupMetadata().generationId());
            out.put("member_id", c.groupMetadata().memberId());
        }
        out.put("records", records);
        return out;
    }

    // -- two members of one group ---------------------------------------------------------------
    static Map<String, Object> members() throws Exception {
        String topic = arg("topic", "java-topic"), group = arg("group", "java-group");
        String protocol = arg("protocol", "classic");
        int n = intArg("n", 100);
        List<Map<String, Object>> found = Collections.synchronizedList(new ArrayList<>());
        AtomicBoolean stop = new AtomicBoolean();
        List<Map<String, Object>> members = new ArrayList<>();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            Map<String, Object> member = Collections.synchronizedMap(new LinkedHashMap<>());
            members.add(member);
            final int id = i;
            Thread t = new Thread(() -> {
                List<Integer> last = new ArrayList<>();
                long stable = 0;
                try (KafkaConsumer<String, String> c = consumer(group, protocol, "read_uncommitted")) {
                    c.subscribe(List.of(topic));
                    while (!stop.get()) {
                        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                            Map<String, Object> m = recordOf(r);
                            m.put("member", id);
                            found.add(m);
                        }
                        c.commitSync();
                        List<Integer> parts = new ArrayList<>();
                        c.assignment().forEach(tp -> parts.add(tp.partition()));
                        Collections.sort(parts);
                        if (!parts.equals(last)) {
                            last = parts;
                            stable = System.currentTimeMillis();
                        }
                        member.put("assignment", last);
                        member.put("since_ms", System.currentTimeMillis() - stable);
                        member.put("generation", c.groupMetadata().generationId());
                    }
                } catch (Exception e) {
                    member.put("error", e.toString());
                }
            });
            threads.add(t);
            t.start();
        }
        long deadline = System.currentTimeMillis() + intArg("timeout_ms", 40000);
        boolean settled = false;
        while (!settled && System.currentTimeMillis() < deadline) {  // every partition owned, no
            Set<Object> owned = new HashSet<>();                        // assignment changed for 2 s
            settled = true;
            for (Map<String, Object> m : members) {
                Object since = m.get("since_ms");
                settled &= since != null && ((Number) since).longValue() > 2000;
                Object assignment = m.get("assignment");
                if (assignment != null) owned.addAll((List<?>) assignment);
            }
            settled &= owned.size() == intArg("partitions", 1);
            Thread.sleep(100);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("settled", settled);
        out.put("produced", produce().get("offsets"));  // then the records, for both to read
        while (found.size() < n && System.currentTimeMillis() < deadline) Thread.sleep(100);
        stop.set(true);
        for (Thread t : threads) t.join(20000);
        out.put("members", members);
        out.put("records", new ArrayList<>(found));
        return out;
    }

    // -- a pattern subscription: topics created later join it --------------------------------
    static Map<String, Object> pattern() throws Exception {
        String prefix = arg("prefix", "java-re"), group = arg("group", "java-group");
        Map<String, Object> out = new LinkedHashMap<>();
        Map<String, List<String>> byTopic = new TreeMap<>();
        try (KafkaConsumer<String, String> c = consumer(group, arg("protocol", "classic"), "read_uncommitted");
             Admin admin = Admin.create(common())) {
            Properties pp = common();
            pp.put("key.serializer", StringSerializer.class.getName());
            pp.put("value.serializer", StringSerializer.class.getName());
            admin.createTopics(List.of(new NewTopic(prefix + "-a", 1, (short) 1), new NewTopic(prefix + "-b", 2, (short) 1),
                    new NewTopic("other-" + prefix, 1, (short) 1))).all().get();
            if (arg("protocol", "classic").equals("consumer")) {  // KIP-848: the broker resolves it (RE2)
                c.subscribe(new org.apache.kafka.clients.consumer.SubscriptionPattern(prefix + "-.*"));
            } else {  // the client matches its metadata (refreshed each metadata.max.age.ms)
                c.subscribe(java.util.regex.Pattern.compile(java.util.regex.Pattern.quote(prefix) + "-.*"));
            }
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
                for (String t : new String[] {prefix + "-a", prefix + "-b", "other-" + prefix}) {
                    producer.send(new ProducerRecord<>(t, "k", "first-" + t));
                }
                producer.flush();
                long deadline = System.currentTimeMillis() + intArg("timeout_ms", 40000);
                boolean created = false;
                while (System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                        byTopic.computeIfAbsent(r.topic(), k -> new ArrayList<>()).add(r.value());
                    }
                    if (!created && byTopic.size() >= 2) {  // the first two read: a third topic joins
                        admin.createTopics(List.of(new NewTopic(prefix + "-c", 1, (short) 1))).all().get();
                        producer.send(new ProducerRecord<>(prefix + "-c", "k", "first-" + prefix + "-c")).get();
                        created = true;
                    }
                    if (byTopic.size() >= 3) break;
                }
            }
            List<String> assigned = new ArrayList<>();
            c.assignment().forEach(tp -> assigned.add(tp.topic() + ":" + tp.partition()));
            Collections.sort(assigned);
            out.put("assignment", assigned);
        }
        out.put("records", byTopic);
        return out;
    }

    // -- transactions -----------------------------------------------------------------------------
    static Map<String, Object> transactions() throws Exception {
        String topic = arg("topic", "java-topic"), group = arg("group", "java-txn-group");
        Properties p = common();
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("transactional.id", arg("txn_id", "java-txn"));
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            String[] outcomes = {"commit", "abort", "commit"};
            for (int t = 0; t < outcomes.length; t++) {
                producer.beginTransaction();
                for (int i = 0; i < 10; i++) {
                    producer.send(new ProducerRecord<>(topic, 0, "k-" + t + "-" + i, outcomes[t] + "-" + t + "-" + i));
                }
                if (t == 0) {  // consume-transform-produce: the group's offset commits with the records
                    producer.sendOffsetsToTransaction(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(42)),
                            new org.apache.kafka.clients.consumer.ConsumerGroupMetadata(group));
                }
                producer.flush();  // sent, so an abort has records to abort (unsent ones it drops)
                if (outcomes[t].equals("commit")) producer.commitTransaction();
                else producer.abortTransaction();
            }
        }
        for (String isolation : new String[] {"read_committed", "read_uncommitted"}) {
            List<String> values = new ArrayList<>();
            try (KafkaConsumer<String, String> c = consumer(group + "-" + isolation, "classic", isolation)) {
                c.assign(List.of(new TopicPartition(topic, 0)));
                c.seekToBeginning(List.of(new TopicPartition(topic, 0)));
                long deadline = System.currentTimeMillis() + 10000;
                while (System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) values.add(r.value());
                    if (c.position(new TopicPartition(topic, 0)) >= c.endOffsets(
                            List.of(new TopicPartition(topic, 0))).get(new TopicPartition(topic, 0))) break;
                }
            }
            out.put(isolation, values);
        }
        try (Admin admin = Admin.create(common())) {
            OffsetAndMetadata om = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()
                    .get(new TopicPartition(topic, 0));
            out.put("group_offset", om == null ? null : om.offset());
        }
        return out;
    }

    // -- admin: groups, offsets, records --------------------------------------------------------
    static Map<String, Object> groupAdmin() throws Exception {
        String topic = arg("topic", "java-topic"), group = arg("group", "java-group");
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = Admin.create(common())) {
            List<Object> listed = new ArrayList<>();
            for (GroupListing g : admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get()) {
                if (g.groupId().equals(group)) {
                    listed.add(Map.of("type", String.valueOf(g.type().orElse(null)),
                            "state", String.valueOf(g.groupState().orElse(null)),
                            "protocol", g.protocol()));
                }
            }
            out.put("listed", listed);
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            out.put("state", d.groupState().toString());
            out.put("type", d.type().toString());
            out.put("members", d.members().size());
            out.put("coordinator", d.coordinator().id());
            Map<String, Object> offsets = new TreeMap<>();
            admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()
                    .forEach((tp, om) -> offsets.put(tp.topic() + ":" + tp.partition(), om.offset()));
            out.put("offsets", offsets);
            TopicPartition p0 = new TopicPartition(topic, 0);
            admin.alterConsumerGroupOffsets(group, Map.of(p0, new OffsetAndMetadata(1))).all().get();
            out.put("altered", admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()
                    .get(p0).offset());
            admin.deleteConsumerGroupOffsets(group, Set.of(p0)).all().get();
            out.put("after_delete_offset", admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                    .get().containsKey(p0));
            Map<String, Object> ends = new TreeMap<>();
            admin.listOffsets(Map.of(p0, OffsetSpec.latest())).all().get()
                    .forEach((tp, info) -> ends.put("latest", info.offset()));
            admin.listOffsets(Map.of(p0, OffsetSpec.earliest())).all().get()
                    .forEach((tp, info) -> ends.put("earliest", info.offset()));
            out.put("list_offsets", ends);
            admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(2))).all().get();
            out.put("earliest_after_delete_records", admin.listOffsets(Map.of(p0, OffsetSpec.earliest()))
                    .all().get().get(p0).offset());
            admin.deleteConsumerGroups(List.of(group)).all().get();
            Set<String> left = new HashSet<>();
            for (GroupListing g : admin.listGroups().all().get()) left.add(g.groupId());
            out.put("group_deleted", !left.contains(group));
        }
        return out;
    }

    // -- a small JSON writer ----------------------------------------------------------------------
    static String json(Object o) {
        StringBuilder b = new StringBuilder();
        write(b, o);
        return b.toString();
    }

    static void write(StringBuilder b, Object o) {
        if (o == null) {
            b.append("null");
        } else if (o instanceof String) {
            b.append('"');
            for (char ch : ((String) o).toCharArray()) {
                if (ch == '"' || ch == '\\') b.append('\\').append(ch);
                else if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch));
                else b.append(ch);
            }
            b.append('"');
        } else if (o instanceof Number || o instanceof Boolean) {
            b.append(o);
        } else if (o instanceof Map) {
            b.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : new ArrayList<>(((Map<?, ?>) o).entrySet())) {
                if (!first) b.append(',');
                first = false;
                write(b, String.valueOf(e.getKey()));
                b.append(':');
                write(b, e.getValue());
            }
            b.append('}');
        } else if (o instanceof Collection) {
            b.append('[');
            boolean first = true;
            for (Object x : new ArrayList<>((Collection<?>) o)) {
                if (!first) b.append(',');
                first = false;
                write(b, x);
            }
            b.append(']');
        } else {
            write(b, o.toString());
        }
    }
}
