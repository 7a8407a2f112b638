import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Drives the official Kafka Java client for sluice's tests (tests/java). One JVM serves a whole test session:
 * it reads one command per stdin line (space-separated words, "k=v" words are client configs) and answers each
 * with one JSON line {"reply": result} or {"reply": null, "error": ..., "message": ...} on stdout. Group members
 * run in their own threads and report what they do as JSON event lines {"event": ..., "member": ...}.
 * Keys, values and header values are hex on both sides ("-" is null), so every byte can be compared.
 */
public final class SluiceJavaClient {
    private static final HexFormat HEX = HexFormat.of();
    private static String bootstrap;
    // SCRAM mode: client security settings (security.protocol, sasl.*, ssl.*) from the properties file
    // named by the optional second argument, applied to every client this driver makes.
    private static final Properties security = new Properties();
    private static Admin admin;
    private static final Map<String, Member> members = new ConcurrentHashMap<>();

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        if (args.length > 1)
            try (var reader = Files.newBufferedReader(Path.of(args[1]))) { security.load(reader); }
        admin = Admin.create(configs(List.of()));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            if (line.isBlank()) continue;
            Map<String, Object> reply = new LinkedHashMap<>();
            try {
                reply.put("reply", run(line.trim().split(" +")));
            } catch (Exception e) {
                reply.put("reply", null);
                reply.putAll(describe(e));
            }
            emit(reply);
        }
        for (Member member : members.values()) member.stop();
        admin.close(Duration.ofSeconds(5));
    }

    private static Object run(String[] w) throws Exception {
        List<String> rest = Arrays.asList(w).subList(1, w.length);
        switch (w[0]) {
            case "create-topic": {  // NAME PARTITIONS [config=value...]
                NewTopic topic = new NewTopic(w[1], Integer.parseInt(w[2]), (short) 1).configs(pairs(rest.subList(2, rest.size())));
                return admin.createTopics(List.of(topic)).topicId(w[1]).get().toString();
            }
            case "describe-topics": {  // NAME...
                Map<String, Object> out = new TreeMap<>();
                for (TopicDescription d : admin.describeTopics(rest).allTopicNames().get().values()) {
                    List<Object> partitions = new ArrayList<>();
                    for (TopicPartitionInfo p : d.partitions())
                        partitions.add(map("partition", p.partition(), "leader", p.leader().id(), "replicas", ids(p.replicas()), "isr", ids(p.isr())));
                    out.put(d.name(), map("id", d.topicId().toString(), "internal", d.isInternal(), "partitions", partitions));
                }
                return out;
            }
            case "list-topics":
                return new TreeMap<>(admin.listTopics().namesToListings().get()).keySet();
            case "describe-config": {  // TOPIC: every entry, with where its value comes from
                ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, w[1]);
                Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
                Map<String, Object> out = new TreeMap<>();
                for (ConfigEntry e : config.entries()) out.put(e.name(), map("value", e.value(), "source", e.source().toString()));
                return out;
            }
            case "alter-config": {  // TOPIC name=value (SET) or name= (DELETE) ...
                List<AlterConfigOp> ops = new ArrayList<>();
                for (Map.Entry<String, String> e : pairs(rest.subList(1, rest.size())).entrySet())
                    ops.add(new AlterConfigOp(new ConfigEntry(e.getKey(), e.getValue()),
                            e.getValue().isEmpty() ? AlterConfigOp.OpType.DELETE : AlterConfigOp.OpType.SET));
                ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, w[1]);
                admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get();
                return true;
            }
            case "describe-broker-config": {  // the broker resource: every entry, with where its value comes from
                ConfigResource resource = new ConfigResource(ConfigResource.Type.BROKER, w[1]);
                Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
                Map<String, Object> out = new TreeMap<>();
                for (ConfigEntry e : config.entries())
                    out.put(e.name(), map("value", e.value(), "source", e.source().toString(), "type", e.type().toString()));
                return out;
            }
            case "describe-log-dirs": {  // BROKER: {dir: {"topic-partition": size}}
                Map<String, Object> out = new TreeMap<>();
                var dirs = admin.describeLogDirs(List.of(Integer.parseInt(w[1]))).allDescriptions().get().get(Integer.parseInt(w[1]));
                for (var dir : dirs.entrySet()) {
                    Map<String, Object> sizes = new TreeMap<>();
                    for (var r : dir.getValue().replicaInfos().entrySet()) sizes.put(r.getKey().toString(), r.getValue().size());
                    out.put(dir.getKey(), sizes);
                }
                return out;
            }
            case "elect-leaders": {  // TOPIC PARTITION: the error's class name, or null
                TopicPartition tp = new TopicPartition(w[1], Integer.parseInt(w[2]));
                var result = admin.electLeaders(org.apache.kafka.common.ElectionType.PREFERRED, java.util.Set.of(tp)).partitions().get();
                return result.get(tp).map(e -> e.getClass().getSimpleName()).orElse(null);
            }
            case "list-reassignments":
                return admin.listPartitionReassignments().reassignments().get().size();
            case "describe-producers": {  // TOPIC PARTITION
                TopicPartition tp = new TopicPartition(w[1], Integer.parseInt(w[2]));
                List<Object> out = new ArrayList<>();
                for (var p : admin.describeProducers(List.of(tp)).partitionResult(tp).get().activeProducers())
                    out.add(map("id", p.producerId(), "epoch", p.producerEpoch(), "last_sequence", p.lastSequence()));
                return out;
            }
            case "describe-quorum": {
                var q = admin.describeMetadataQuorum().quorumInfo().get();
                List<Object> voters = new ArrayList<>();
                for (var v : q.voters()) voters.add(v.replicaId());
                return map("leader", q.leaderId(), "voters", voters, "high_watermark", q.highWatermark());
            }
            case "describe-features":
                return admin.describeFeatures().featureMetadata().get().finalizedFeatures().size();
            case "alter-quota": {  // ENTITY_TYPE NAME KEY VALUE|- (- removes it)
                var entity = new org.apache.kafka.common.quota.ClientQuotaEntity(Map.of(w[1], w[2]));
                Double value = w[4].equals("-") ? null : Double.valueOf(w[4]);
                var op = new org.apache.kafka.common.quota.ClientQuotaAlteration.Op(w[3], value);
                admin.alterClientQuotas(List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration(entity, List.of(op)))).all().get();
                return true;
            }
            case "describe-quotas": {  // every entity: {"type=name,...": {key: value}}
                var found = admin.describeClientQuotas(org.apache.kafka.common.quota.ClientQuotaFilter.all()).entities().get();
                Map<String, Object> out = new TreeMap<>();
                for (var e : found.entrySet()) out.put(new TreeMap<>(e.getKey().entries()).toString(), new TreeMap<>(e.getValue()));
                return out;
            }
            case "create-partitions":  // TOPIC TOTAL
                admin.createPartitions(Map.of(w[1], NewPartitions.increaseTo(Integer.parseInt(w[2])))).all().get();
                return true;
            case "delete-records": {  // TOPIC PARTITION BEFORE_OFFSET: the new low watermark
                TopicPartition tp = new TopicPartition(w[1], Integer.parseInt(w[2]));
                return admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(Long.parseLong(w[3]))))
                        .lowWatermarks().get(tp).get().lowWatermark();
            }
            case "delete-topics":  // NAME...
                admin.deleteTopics(rest).all().get();
                return true;
            case "describe-cluster": {
                DescribeClusterResult c = admin.describeCluster();
                List<Object> nodes = new ArrayList<>();
                for (Node n : c.nodes().get()) nodes.add(map("id", n.id(), "host", n.host(), "port", n.port()));
                return map("cluster_id", c.clusterId().get(), "controller", c.controller().get().id(), "nodes", nodes);
            }
            case "list-offsets": {  // TOPIC PARTITION earliest|latest|max-timestamp|TIMESTAMP, through the admin client
                TopicPartition tp = new TopicPartition(w[1], Integer.parseInt(w[2]));
                OffsetSpec spec = switch (w[3]) {
                    case "earliest" -> OffsetSpec.earliest();
                    case "latest" -> OffsetSpec.latest();
                    case "max-timestamp" -> OffsetSpec.maxTimestamp();
                    default -> OffsetSpec.forTimestamp(Long.parseLong(w[3]));
                };
                ListOffsetsResult.ListOffsetsResultInfo info = admin.listOffsets(Map.of(tp, spec)).partitionResult(tp).get();
                return map("offset", info.offset(), "timestamp", info.timestamp());
            }
            case "offsets-for-times":  // TOPIC PARTITION TIMESTAMP, through a consumer, with its beginning and end offsets
                return offsetsForTimes(new TopicPartition(w[1], Integer.parseInt(w[2])), Long.parseLong(w[3]));
            case "produce":  // TOPIC FILE [config=value...]; FILE lines: PARTITION TIMESTAMP KEY VALUE HEADERS
                return produce(w[1], Path.of(w[2]), pairs(rest.subList(2, rest.size())));
            case "consume":  // TOPIC PARTITION FROM UNTIL [config=value...]: records [FROM, UNTIL) by assign + seek
                return consume(new TopicPartition(w[1], Integer.parseInt(w[2])), Long.parseLong(w[3]), Long.parseLong(w[4]),
                        pairs(rest.subList(4, rest.size())));
            case "list-groups": {
                Map<String, Object> out = new TreeMap<>();
                for (ConsumerGroupListing g : admin.listConsumerGroups().all().get())
                    out.put(g.groupId(), g.state().map(Object::toString).orElse(null));
                return out;
            }
            case "describe-groups": {  // GROUP...
                Map<String, Object> out = new TreeMap<>();
                for (ConsumerGroupDescription g : admin.describeConsumerGroups(rest).all().get().values()) {
                    List<Object> ms = new ArrayList<>();
                    for (MemberDescription m : g.members())
                        ms.add(map("member_id", m.consumerId(), "instance_id", m.groupInstanceId().orElse(null), "client_id", m.clientId(),
                                "partitions", partitions(m.assignment().topicPartitions())));
                    out.put(g.groupId(), map("state", g.state().toString(), "assignor", g.partitionAssignor(),
                            "coordinator", g.coordinator().id(), "members", ms));
                }
                return out;
            }
            case "group-offsets": {  // GROUP: {"topic:partition": offset}
                Map<String, Object> out = new TreeMap<>();
                admin.listConsumerGroupOffsets(w[1]).partitionsToOffsetAndMetadata().get()
                        .forEach((tp, om) -> out.put(tp.topic() + ":" + tp.partition(), om == null ? null : om.offset()));
                return out;
            }
            case "alter-group-offsets": {  // GROUP TOPIC PARTITION=OFFSET...
                Map<TopicPartition, OffsetAndMetadata> offsets = new LinkedHashMap<>();
                pairs(rest.subList(2, rest.size())).forEach((p, o) -> offsets.put(new TopicPartition(w[2], Integer.parseInt(p)), new OffsetAndMetadata(Long.parseLong(o))));
                admin.alterConsumerGroupOffsets(w[1], offsets).all().get();
                return true;
            }
            case "delete-groups": {  // GROUP...: "ok" or the error per group
                Map<String, Object> out = new TreeMap<>();
                admin.deleteConsumerGroups(rest).deletedGroups().forEach((g, f) -> out.put(g, outcome(f)));
                return out;
            }
            case "member-start": {  // NAME GROUP TOPIC [config=value...]: a consumer thread that reports events
                Member member = new Member(w[1], w[2], w[3], pairs(rest.subList(3, rest.size())));
                if (members.putIfAbsent(w[1], member) != null) throw new IllegalArgumentException("member exists: " + w[1]);
                member.thread.start();
                return true;
            }
            case "member-stop": {  // NAME: close the consumer (a dynamic member leaves the group) and wait
                Member member = members.remove(w[1]);
                if (member == null) throw new IllegalArgumentException("no member " + w[1]);
                member.stop();
                return true;
            }
            case "list-transactions": {  // [STATE...]: {"id": [state, producer id]} through the admin client (KIP-664)
                org.apache.kafka.clients.admin.ListTransactionsOptions options = new org.apache.kafka.clients.admin.ListTransactionsOptions();
                if (!rest.isEmpty()) {
                    List<org.apache.kafka.clients.admin.TransactionState> states = new ArrayList<>();
                    for (String state : rest) states.add(org.apache.kafka.clients.admin.TransactionState.parse(state));
                    options.filterStates(states);
                }
                Map<String, Object> out = new TreeMap<>();
                for (org.apache.kafka.clients.admin.TransactionListing t : admin.listTransactions(options).all().get())
                    out.put(t.transactionalId(), List.of(t.state().toString(), t.producerId()));
                return out;
            }
            case "describe-transaction": {  // ID: state, producer id and epoch, partitions
                org.apache.kafka.clients.admin.TransactionDescription d = admin.describeTransactions(List.of(w[1])).description(w[1]).get();
                List<Object> partitions = new ArrayList<>();
                for (TopicPartition tp : d.topicPartitions()) partitions.add(tp.topic() + "-" + tp.partition());
                return map("state", d.state().toString(), "producer_id", d.producerId(), "epoch", d.producerEpoch(),
                        "timeout_ms", d.transactionTimeoutMs(), "partitions", partitions);
            }
            case "txn-round":  // TOPIC TXN_ID N: an aborted then a committed transaction of N records each,
                               // then a second producer with the same id fences the first
                return txnRound(w[1], w[2], Integer.parseInt(w[3]));
            case "txn-timeout-recover":  // TOPIC TXN_ID: a transaction outlives its timeout; the producer
                                         // aborts, recovers (KIP-360/588) and commits the next one
                return txnTimeoutRecover(w[1], w[2]);
            case "scram-upsert": {  // USER SCRAM-SHA-256|SCRAM-SHA-512 ITERATIONS PASSWORD
                ScramMechanism mechanism = ScramMechanism.fromMechanismName(w[2]);
                admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(
                        w[1], new ScramCredentialInfo(mechanism, Integer.parseInt(w[3])), w[4]))).all().get();
                return true;
            }
            case "scram-describe": {  // USER...: {"user": ["SCRAM-SHA-256", ...]}
                Map<String, Object> out = new TreeMap<>();
                admin.describeUserScramCredentials(rest).all().get().forEach((user, description) ->
                        out.put(user, description.credentialInfos().stream()
                                .map(info -> info.mechanism().mechanismName()).sorted().toList()));
                return out;
            }
            default:
                throw new IllegalArgumentException("unknown command " + w[0]);
        }
    }

    private static List<Object> produce(String topic, Path file, Map<String, String> extra) throws Exception {
        Properties props = configs(List.of());
        props.putAll(extra);
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (String line : Files.readAllLines(file)) {
                String[] f = line.split(" ");
                RecordHeaders headers = new RecordHeaders();
                if (!f[4].equals("-"))
                    for (String h : f[4].split(",")) {
                        String[] kv = h.split(":", -1);  // name (hex) : value (hex, "-" for null)
                        headers.add(new String(HEX.parseHex(kv[0]), StandardCharsets.UTF_8), bytes(kv[1]));
                    }
                Integer partition = f[0].equals("-") ? null : Integer.valueOf(f[0]);
                Long timestamp = f[1].equals("-") ? null : Long.valueOf(f[1]);
                sent.add(producer.send(new ProducerRecord<>(topic, partition, timestamp, bytes(f[2]), bytes(f[3]), headers)));
            }
            producer.flush();
        }
        List<Object> out = new ArrayList<>();  // [partition, offset, timestamp] of each record, in file order
        for (Future<RecordMetadata> f : sent) {
            RecordMetadata m = f.get();
            out.add(List.of(m.partition(), m.offset(), m.timestamp()));
        }
        return out;
    }

    private static Map<String, Object> txnRound(String topic, String txnId, int n) throws Exception {
        Properties props = configs(List.of("transactional.id", txnId, "linger.ms", "5"));
        Map<String, Object> out = new LinkedHashMap<>();
        KafkaProducer<byte[], byte[]> first = new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
        try {
            first.initTransactions();
            first.beginTransaction();
            for (int i = 0; i < n; i++) first.send(new ProducerRecord<>(topic, 0, null, ("aborted" + i).getBytes(StandardCharsets.UTF_8)));
            first.flush();
            first.abortTransaction();
            first.beginTransaction();
            for (int i = 0; i < n; i++) first.send(new ProducerRecord<>(topic, 0, null, ("committed" + i).getBytes(StandardCharsets.UTF_8)));
            first.commitTransaction();
            first.beginTransaction();
            first.send(new ProducerRecord<>(topic, 0, null, "zombie".getBytes(StandardCharsets.UTF_8))).get();
            out.put("open", run(new String[] {"describe-transaction", txnId}));
            out.put("listed", run(new String[] {"list-transactions", "Ongoing"}));
            try (KafkaProducer<byte[], byte[]> second = new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
                second.initTransactions();  // fences `first` and aborts its open transaction
                try {
                    first.commitTransaction();
                    out.put("zombie", "committed");
                } catch (Exception e) {
                    out.put("zombie", e.getClass().getSimpleName());
                }
            }
        } finally {
            first.close(Duration.ofSeconds(5));
        }
        return out;
    }

    private static Map<String, Object> txnTimeoutRecover(String topic, String txnId) throws Exception {
        Properties props = configs(List.of("transactional.id", txnId, "transaction.timeout.ms", "1500", "linger.ms", "0"));
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, null, "timed-out".getBytes(StandardCharsets.UTF_8))).get();
            Thread.sleep(3000);  // the broker aborts the transaction and bumps the epoch
            try {
                producer.send(new ProducerRecord<>(topic, 0, null, "late".getBytes(StandardCharsets.UTF_8))).get();
                out.put("first", "sent");
            } catch (Exception e) {
                Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
                out.put("first", cause.getClass().getSimpleName());
            }
            // The client completes the failed send's future before its sender thread records the error (and
            // decides on the epoch bump); a commit or abort in between races with it, so let it settle.
            Thread.sleep(500);
            String step = "abort";
            try {
                producer.abortTransaction();  // the KIP-360 epoch bump happens here
                step = "begin";
                producer.beginTransaction();
                step = "send";
                producer.send(new ProducerRecord<>(topic, 0, null, "recovered".getBytes(StandardCharsets.UTF_8))).get();
                step = "commit";
                producer.commitTransaction();
                out.put("second", "committed");
            } catch (Exception e) {
                Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
                out.put("second", step + ": " + cause.getClass().getSimpleName() + ": " + cause.getMessage());
            }
        }
        return out;
    }

    private static List<Object> consume(TopicPartition tp, long from, long until, Map<String, String> extra) {
        // The consumer fetches ahead while it returns records, and close() waits for that fetch, which the
        // broker rightly holds for fetch.max.wait.ms at the log end: keep that short for one-shot reads.
        Properties props = configs(List.of("fetch.max.wait.ms", "50"));
        props.putAll(extra);
        List<Object> out = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.assign(List.of(tp));
            consumer.seek(tp, from);
            long deadline = System.currentTimeMillis() + 30_000;
            while (consumer.position(tp) < until && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    if (r.offset() >= until) break;
                    List<Object> headers = new ArrayList<>();
                    for (Header h : r.headers()) headers.add(Arrays.asList(h.key(), hex(h.value())));
                    out.add(map("offset", r.offset(), "timestamp", r.timestamp(), "timestamp_type", r.timestampType().toString(),
                            "key", hex(r.key()), "value", hex(r.value()), "headers", headers));
                }
            }
        }
        return out;
    }

    private static Map<String, Object> offsetsForTimes(TopicPartition tp, long timestamp) {
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(configs(List.of()), new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            OffsetAndTimestamp found = consumer.offsetsForTimes(Map.of(tp, timestamp)).get(tp);
            return map("offset", found == null ? null : found.offset(), "timestamp", found == null ? null : found.timestamp(),
                    "beginning", consumer.beginningOffsets(List.of(tp)).get(tp), "end", consumer.endOffsets(List.of(tp)).get(tp));
        }
    }

    /** A subscribed consumer that commits synchronously after every poll and when partitions are revoked. */
    private static final class Member implements ConsumerRebalanceListener, Runnable {
        final String name, topic;
        final KafkaConsumer<byte[], byte[]> consumer;
        final Thread thread = new Thread(this);
        final Map<TopicPartition, OffsetAndMetadata> pending = new LinkedHashMap<>();
        volatile boolean stopping;

        Member(String name, String group, String topic, Map<String, String> extra) {
            this.name = name;
            this.topic = topic;
            Properties props = configs(List.of("group.id", group, "client.id", name, "enable.auto.commit", "false", "auto.offset.reset", "earliest"));
            props.putAll(extra);
            consumer = new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        }

        public void run() {
            try {
                consumer.subscribe(List.of(topic), this);
                while (!stopping) {
                    List<Object> seen = new ArrayList<>();
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                        seen.add(List.of(r.partition(), r.offset()));
                        pending.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    if (!seen.isEmpty()) event("records", "records", seen);  // processed, before it is committed
                    commit();
                }
            } catch (Exception e) {
                Map<String, Object> error = new LinkedHashMap<>(map("event", "error", "member", name));
                error.putAll(describe(e));
                emit(error);
            } finally {
                try {
                    consumer.close(Duration.ofSeconds(10));  // eager assignors revoke (and so commit) here
                } finally {
                    event("closed");
                }
            }
        }

        void stop() throws InterruptedException {
            stopping = true;
            thread.join(30_000);
            if (thread.isAlive()) throw new IllegalStateException(name + " did not close");
        }

        void commit() {
            if (pending.isEmpty()) return;
            consumer.commitSync(pending);
            pending.clear();
        }

        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            commit();  // the partitions move only after what was processed on them is committed
            event("revoked", "partitions", partitions(partitions));
        }

        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            event("assigned", "partitions", partitions(partitions), "assignment", partitions(consumer.assignment()),
                    "generation", consumer.groupMetadata().generationId(), "member_id", consumer.groupMetadata().memberId());
        }

        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            pending.keySet().removeAll(partitions);  // someone else owns them now: a commit would be refused
            event("lost", "partitions", partitions(partitions));
        }

        private void event(String kind, Object... kv) {
            Map<String, Object> e = new LinkedHashMap<>(map("event", kind, "member", name));
            e.putAll(map(kv));
            emit(e);
        }
    }

    // ----- small helpers: configs, hex, errors, and a JSON writer -----

    private static Properties configs(List<String> kv) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.putAll(security);
        for (int i = 0; i < kv.size(); i += 2) props.put(kv.get(i), kv.get(i + 1));
        return props;
    }

    private static Map<String, String> pairs(List<String> words) {
        Map<String, String> out = new LinkedHashMap<>();
        for (String word : words) {
            int eq = word.indexOf('=');
            out.put(word.substring(0, eq), word.substring(eq + 1));
        }
        return out;
    }

    private static byte[] bytes(String hex) {
        return hex.equals("-") ? null : HEX.parseHex(hex);
    }

    private static String hex(byte[] data) {
        return data == null ? null : HEX.formatHex(data);
    }

    private static List<Integer> ids(List<Node> nodes) {
        return nodes.stream().map(Node::id).toList();
    }

    private static List<Integer> partitions(Collection<TopicPartition> tps) {
        return tps.stream().map(TopicPartition::partition).sorted().toList();
    }

    private static Map<String, Object> map(Object... kv) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) out.put((String) kv[i], kv[i + 1]);
        return out;
    }

    private static Object outcome(org.apache.kafka.common.KafkaFuture<Void> future) {
        try {
            future.get();
            return "ok";
        } catch (Exception e) {
            return describe(e);
        }
    }

    /** The client's own exception (not the ExecutionException around it): class name and message. */
    private static Map<String, Object> describe(Throwable e) {
        while (e instanceof ExecutionException && e.getCause() != null) e = e.getCause();
        return map("error", e.getClass().getSimpleName(), "message", String.valueOf(e.getMessage()));
    }

    private static synchronized void emit(Map<String, Object> line) {
        System.out.println(json(line));
        System.out.flush();
    }

    /** JSON text, all ASCII: anything else is a \\u escape, whatever the platform's default charset. */
    private static String json(Object o) {
        if (o == null) return "null";
        if (o instanceof Number || o instanceof Boolean) return o.toString();
        if (o instanceof Map<?, ?> m) {
            List<String> parts = new ArrayList<>();
            m.forEach((k, v) -> parts.add(json(String.valueOf(k)) + ":" + json(v)));
            return "{" + String.join(",", parts) + "}";
        }
        if (o instanceof Collection<?> c) return "[" + String.join(",", c.stream().map(SluiceJavaClient::json).toList()) + "]";
        StringBuilder s = new StringBuilder("\"");
        for (char ch : o.toString().toCharArray()) {
            if (ch == '"' || ch == '\\') s.append('\\').append(ch);
            else if (ch < 0x20 || ch > 0x7e) s.append(String.format("\\u%04x", (int) ch));
            else s.append(ch);
        }
        return s.append('"').toString();
    }
}
