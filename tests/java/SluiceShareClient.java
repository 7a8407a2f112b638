// Share groups (KIP-932) through the official Java clients of kafka-clients 4.x: KafkaShareConsumer and the
// Admin client's share-group calls. One command per stdin line, one JSON reply line per command (the same
// contract as SluiceJavaClient.java, which is built against 3.x too and so cannot name these classes).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;

public class SluiceShareClient {
    static String bootstrap;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        Properties adminProps = new Properties();
        adminProps.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(adminProps);
             BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
            String line;
            while ((line = in.readLine()) != null) {
                String[] words = line.trim().split(" ");
                String reply;
                try {
                    reply = "{\"ok\":" + run(admin, words) + "}";
                } catch (Throwable e) {
                    Throwable cause = e.getCause() != null ? e.getCause() : e;
                    reply = "{\"error\":" + quote(cause.getClass().getSimpleName()) + ",\"message\":"
                        + quote(String.valueOf(cause.getMessage())) + "}";
                }
                System.out.println(reply);
                System.out.flush();
            }
        }
    }

    static String run(Admin admin, String[] w) throws Exception {
        switch (w[0]) {
            case "group-config": {  // GROUP name=value...: IncrementalAlterConfigs SET on the GROUP resource
                ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, w[1]);
                List<AlterConfigOp> ops = new ArrayList<>();
                for (int i = 2; i < w.length; i++) {
                    String[] kv = w[i].split("=", 2);
                    ops.add(new AlterConfigOp(new ConfigEntry(kv[0], kv[1]), AlterConfigOp.OpType.SET));
                }
                admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get();
                return "null";
            }
            case "consume": {  // GROUP TOPIC COUNT implicit|explicit SECONDS [release-every-Nth]: records received
                return consume(w[1], w[2], Integer.parseInt(w[3]), w[4], Integer.parseInt(w[5]),
                    w.length > 6 ? Integer.parseInt(w[6]) : 0);
            }
            case "list-share-groups": {  // {"group": "state"} of the share groups
                Map<String, String> out = new TreeMap<>();
                for (GroupListing g : admin.listGroups(ListGroupsOptions.forShareGroups()).all().get())
                    out.put(g.groupId(), g.type().map(Object::toString).orElse("?") + "/"
                        + g.groupState().map(Object::toString).orElse("?"));
                return json(out);
            }
            case "describe-share-groups": {  // GROUP...
                Map<String, ShareGroupDescription> found =
                    admin.describeShareGroups(Arrays.asList(w).subList(1, w.length)).all().get();
                Map<String, Object> out = new TreeMap<>();
                for (ShareGroupDescription d : found.values()) {
                    List<Object> members = new ArrayList<>();
                    for (ShareMemberDescription m : d.members())
                        members.add(Map.of("client", m.clientId(), "partitions",
                            m.assignment().topicPartitions().stream().map(TopicPartition::toString).sorted()
                                .collect(Collectors.toList())));
                    out.put(d.groupId(), Map.of("state", d.groupState().toString(), "members", members));
                }
                return json(out);
            }
            case "share-group-offsets": {  // GROUP: {"topic-partition": [start offset, lag]}
                Map<TopicPartition, SharePartitionOffsetInfo> offsets = admin.listShareGroupOffsets(
                    Map.of(w[1], new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(w[1]).get();
                Map<String, Object> out = new TreeMap<>();
                for (Map.Entry<TopicPartition, SharePartitionOffsetInfo> e : offsets.entrySet()) {
                    SharePartitionOffsetInfo info = e.getValue();
                    out.put(e.getKey().toString(), info == null ? null
                        : List.of(info.startOffset(), info.lag().orElse(-1L)));
                }
                return json(out);
            }
            case "alter-share-group-offsets": {  // GROUP TOPIC PARTITION=OFFSET...
                Map<TopicPartition, Long> offsets = new HashMap<>();
                for (int i = 3; i < w.length; i++) {
                    String[] kv = w[i].split("=");
                    offsets.put(new TopicPartition(w[2], Integer.parseInt(kv[0])), Long.parseLong(kv[1]));
                }
                admin.alterShareGroupOffsets(w[1], offsets).all().get();
                return "null";
            }
            case "delete-share-group-offsets": {  // GROUP TOPIC...
                admin.deleteShareGroupOffsets(w[1], Set.copyOf(Arrays.asList(w).subList(2, w.length))).all().get();
                return "null";
            }
            case "delete-share-groups": {  // GROUP...
                admin.deleteShareGroups(Arrays.asList(w).subList(1, w.length)).all().get();
                return "null";
            }
            default:
                throw new IllegalArgumentException("unknown command " + w[0]);
        }
    }

    // Poll until COUNT records or SECONDS: every record's offset and delivery count. Explicit mode accepts
    // each record but releases every Nth; then commitSync, whose per-partition errors fail the command.
    static String consume(String group, String topic, int count, String mode, int seconds, int releaseEvery)
        throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("share.acknowledgement.mode", mode);
        List<String> records = new ArrayList<>();
        try (KafkaShareConsumer<String, String> consumer =
                 new KafkaShareConsumer<>(props, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            Instant deadline = Instant.now().plusSeconds(seconds);
            while (records.size() < count && Instant.now().isBefore(deadline)) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    records.add("[" + r.offset() + "," + r.deliveryCount().orElse((short) -1) + "]");
                    if (mode.equals("explicit")) {
                        boolean release = releaseEvery > 0 && r.offset() % releaseEvery == 0;
                        consumer.acknowledge(r, release ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT);
                    }
                }
            }
            Map<TopicIdPartition, Optional<KafkaException>> results = consumer.commitSync(Duration.ofSeconds(10));
            for (Optional<KafkaException> error : results.values())
                if (error.isPresent()) throw error.get();
        }
        return "[" + String.join(",", records) + "]";
    }

    static String json(Object value) {
        if (value == null) return "null";
        if (value instanceof String s) return quote(s);
        if (value instanceof Number || value instanceof Boolean) return value.toString();
        if (value instanceof Map<?, ?> m) {
            List<String> parts = new ArrayList<>();
            for (Map.Entry<?, ?> e : new TreeMap<>(m).entrySet())
                parts.add(quote(String.valueOf(e.getKey())) + ":" + json(e.getValue()));
            return "{" + String.join(",", parts) + "}";
        }
        if (value instanceof List<?> l)
            return "[" + l.stream().map(SluiceShareClient::json).collect(Collectors.joining(",")) + "]";
        return quote(value.toString());
    }

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n") + "\"";
    }
}
