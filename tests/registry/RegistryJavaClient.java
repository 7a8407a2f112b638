import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.Message;
import com.google.protobuf.util.JsonFormat;
import io.confluent.kafka.schemaregistry.ParsedSchema;
import io.confluent.kafka.schemaregistry.SchemaProvider;
import io.confluent.kafka.schemaregistry.avro.AvroSchemaProvider;
import io.confluent.kafka.schemaregistry.avro.AvroSchema;
import io.confluent.kafka.schemaregistry.client.CachedSchemaRegistryClient;
import io.confluent.kafka.schemaregistry.client.SchemaMetadata;
import io.confluent.kafka.schemaregistry.client.rest.entities.SchemaReference;
import io.confluent.kafka.schemaregistry.client.rest.exceptions.RestClientException;
import io.confluent.kafka.schemaregistry.protobuf.ProtobufSchema;
import io.confluent.kafka.schemaregistry.protobuf.ProtobufSchemaProvider;
import io.confluent.kafka.serializers.KafkaAvroDeserializer;
import io.confluent.kafka.serializers.KafkaAvroSerializer;
import io.confluent.kafka.serializers.protobuf.KafkaProtobufDeserializer;
import io.confluent.kafka.serializers.protobuf.KafkaProtobufSerializer;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Drives Confluent's Java serializers (KafkaAvroSerializer, KafkaProtobufSerializer and their deserializers) and
 * its CachedSchemaRegistryClient against a sluice registry, for tests/registry/test_registry_java.py. One JVM
 * serves a test module: each stdin line is one JSON command, each gets one JSON line on stdout, {"reply": ...}
 * or {"error": exception class, "message": ..., "status": HTTP status, "error_code": registry error code} (the
 * last two when the registry refused, found along the cause chain as the Java client reports them).
 * Records travel as JSON text: Avro's JSON encoding for Avro, protobuf's JSON mapping for Protobuf.
 */
public final class RegistryJavaClient {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static String bootstrap;
    private static String registryUrl;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        registryUrl = args[1];
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            if (line.isBlank()) continue;
            ObjectNode reply = JSON.createObjectNode();
            try {
                reply.set("reply", JSON.valueToTree(run(JSON.readTree(line))));
            } catch (Exception | LinkageError e) {  // a missing class is reported, not fatal
                describe(e, reply);
            }
            System.out.println(JSON.writeValueAsString(reply));
            System.out.flush();
        }
    }

    private static Object run(JsonNode command) throws Exception {
        String format = command.path("format").asText("avro");
        String op = command.get("op").asText();
        switch (op) {
            case "produce":  // topic, schema, values [, keys (strings, Avro-serialized when key_avro)] [, config]
                return produce(command, format);
            case "consume":  // topic, count: every record from the start of each partition, deserialized
                return consume(command, format);
            default:
                break;
        }
        // The rest are CachedSchemaRegistryClient calls, on a new client each (no cache from an earlier command).
        List<SchemaProvider> providers = List.of(new AvroSchemaProvider(), new ProtobufSchemaProvider());
        CachedSchemaRegistryClient client = new CachedSchemaRegistryClient(url(command), 100, providers, serdeConfig(command));
        String subject = command.path("subject").asText();
        switch (op) {
            case "register": {  // subject, schema [, references] [, version and id (IMPORT mode)]: the id
                ParsedSchema schema = parse(client, format, command);
                if (command.has("id")) return client.register(subject, schema, command.get("version").asInt(), command.get("id").asInt());
                return client.register(subject, schema);
            }
            case "lookup": {  // subject, schema [, references]: {id, version} of the registered schema
                ParsedSchema schema = parse(client, format, command);
                return Map.of("id", client.getId(subject, schema), "version", client.getVersion(subject, schema));
            }
            case "compatible":  // subject, schema: does the subject's latest version accept it
                return client.testCompatibility(subject, parse(client, format, command));
            case "latest":  // subject: its newest version as the client sees it
                return metadata(client.getLatestSchemaMetadata(subject));
            case "version":  // subject, version
                return metadata(client.getSchemaMetadata(subject, command.get("version").asInt()));
            case "by-id":  // id: the schema, as the deserializers fetch it
                return client.getSchemaById(command.get("id").asInt()).canonicalString();
            case "subjects-by-id":
                return client.getAllSubjectsById(command.get("id").asInt());
            case "subjects":
                return client.getAllSubjects();
            case "versions":
                return client.getAllVersions(subject);
            case "delete-version":  // subject, version [, permanent]: the version deleted
                return client.deleteSchemaVersion(subject, command.get("version").asText(), command.path("permanent").asBoolean());
            case "delete-subject":  // subject [, permanent]: the versions deleted
                return client.deleteSubject(subject, command.path("permanent").asBoolean());
            case "set-compatibility":  // subject ("" for the global level), level
                return client.updateCompatibility(subject.isEmpty() ? null : subject, command.get("level").asText());
            case "get-compatibility":
                return client.getCompatibility(subject.isEmpty() ? null : subject);
            case "set-mode":  // subject ("" for the global mode), mode
                return subject.isEmpty() ? client.setMode(command.get("mode").asText()) : client.setMode(command.get("mode").asText(), subject);
            case "get-mode":
                return subject.isEmpty() ? client.getMode() : client.getMode(subject);
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    private static String url(JsonNode command) {
        return command.path("url").asText(registryUrl);  // another registry than the module's, for one command
    }

    private static Map<String, Object> metadata(SchemaMetadata m) {
        List<Object> references = new ArrayList<>();
        for (SchemaReference r : m.getReferences())
            references.add(Map.of("name", r.getName(), "subject", r.getSubject(), "version", r.getVersion()));
        return Map.of("id", m.getId(), "version", m.getVersion(), "schema", m.getSchema(), "type", m.getSchemaType(),
                "references", references);
    }

    /** The command's schema as the client parses it: references are resolved by fetching them from the registry. */
    private static ParsedSchema parse(CachedSchemaRegistryClient client, String format, JsonNode command) {
        List<SchemaReference> references = new ArrayList<>();
        for (JsonNode r : command.path("references"))
            references.add(new SchemaReference(r.get("name").asText(), r.get("subject").asText(), r.get("version").asInt()));
        String type = format.equals("protobuf") ? ProtobufSchema.TYPE : AvroSchema.TYPE;
        return client.parseSchema(type, command.get("schema").asText(), references)
                .orElseThrow(() -> new IllegalArgumentException("the client cannot parse this " + type + " schema"));
    }

    private static Map<String, Object> serdeConfig(JsonNode command) {
        Map<String, Object> config = new HashMap<>();
        config.put("schema.registry.url", url(command));
        command.path("config").fields().forEachRemaining(e -> config.put(e.getKey(), e.getValue().asText()));
        return config;
    }

    private static Object produce(JsonNode command, String format) throws Exception {
        Map<String, Object> serde = serdeConfig(command);
        Serializer<Object> values = format.equals("protobuf") ? castSerializer(new KafkaProtobufSerializer<Message>()) : new KafkaAvroSerializer();
        values.configure(serde, false);
        Serializer<Object> keys = command.path("key_avro").asBoolean() ? new KafkaAvroSerializer() : castSerializer(new StringSerializer());
        keys.configure(serde, true);
        String topic = command.get("topic").asText();
        String schemaText = command.get("schema").asText();
        Map<String, Object> producerConfig = Map.of("bootstrap.servers", bootstrap, "acks", "all");
        List<Long> offsets = new ArrayList<>();
        try (KafkaProducer<Object, Object> producer = new KafkaProducer<>(producerConfig, keys, values)) {
            JsonNode keyTexts = command.path("keys");
            int i = 0;
            for (JsonNode value : command.get("values")) {
                Object key = keyTexts.has(i) ? keyTexts.get(i).asText() : null;
                Object record = format.equals("protobuf") ? protobufRecord(schemaText, value.asText()) : avroRecord(schemaText, value.asText());
                offsets.add(producer.send(new ProducerRecord<>(topic, key, record)).get().offset());
                i++;
            }
        }
        return offsets;
    }

    @SuppressWarnings("unchecked")
    private static <T> Serializer<Object> castSerializer(Serializer<T> serializer) {
        return (Serializer<Object>) serializer;
    }

    private static Object avroRecord(String schemaText, String json) throws Exception {
        Schema schema = new Schema.Parser().parse(schemaText);
        return new GenericDatumReader<>(schema).read(null, DecoderFactory.get().jsonDecoder(schema, json));
    }

    private static Message protobufRecord(String schemaText, String json) throws Exception {
        DynamicMessage.Builder builder = DynamicMessage.newBuilder(new ProtobufSchema(schemaText).toDescriptor());
        JsonFormat.parser().merge(json, builder);
        return builder.build();
    }

    private static Object consume(JsonNode command, String format) throws Exception {
        Map<String, Object> serde = serdeConfig(command);
        Deserializer<Object> values = format.equals("protobuf") ? castDeserializer(new KafkaProtobufDeserializer<>()) : new KafkaAvroDeserializer();
        values.configure(serde, false);
        Deserializer<Object> keys = command.path("key_avro").asBoolean() ? new KafkaAvroDeserializer() : castDeserializer(new StringDeserializer());
        keys.configure(serde, true);
        String topic = command.get("topic").asText();
        int count = command.get("count").asInt();
        Map<String, Object> consumerConfig = Map.of("bootstrap.servers", bootstrap, "enable.auto.commit", "false");
        List<Object> out = new ArrayList<>();
        try (KafkaConsumer<Object, Object> consumer = new KafkaConsumer<>(consumerConfig, keys, values)) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo p : consumer.partitionsFor(topic, Duration.ofSeconds(30))) partitions.add(new TopicPartition(topic, p.partition()));
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (out.size() < count && System.nanoTime() < deadline) {
                for (ConsumerRecord<Object, Object> r : consumer.poll(Duration.ofMillis(200))) {
                    Map<String, Object> record = new HashMap<>();
                    record.put("offset", r.offset());
                    record.put("key", r.key() == null ? null : r.key().toString());
                    if (r.value() instanceof Message m) {
                        record.put("value", JsonFormat.printer().preservingProtoFieldNames().print(m));
                        record.put("schema", m.getDescriptorForType().getFullName());
                    } else if (r.value() instanceof GenericData.Record g) {
                        record.put("value", GenericData.get().toString(g));
                        record.put("schema", g.getSchema().toString());
                    } else {
                        record.put("value", r.value() == null ? null : r.value().toString());
                    }
                    out.add(record);
                }
            }
        }
        return out;
    }

    @SuppressWarnings("unchecked")
    private static <T> Deserializer<Object> castDeserializer(Deserializer<T> deserializer) {
        return (Deserializer<Object>) deserializer;
    }

    private static void describe(Throwable e, ObjectNode reply) {
        reply.putNull("reply");
        reply.put("error", e.getClass().getSimpleName());
        StringBuilder message = new StringBuilder(String.valueOf(e.getMessage()));
        for (Throwable t = e.getCause(); t != null; t = t.getCause())
            message.append(" / caused by ").append(t.getClass().getSimpleName()).append(": ").append(t.getMessage());
        reply.put("message", message.toString());
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof RestClientException rest) {
                reply.put("status", rest.getStatus());
                reply.put("error_code", rest.getErrorCode());
                reply.put("registry_message", rest.getMessage());
                break;
            }
        }
    }
}
