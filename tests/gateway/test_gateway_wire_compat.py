"""The proto stays wire-compatible with kafka-pixy's generated clients."""

from __future__ import annotations

from sluice.gateway.proto import kafkapixy_pb2 as pb

# kafka-pixy's field numbers (kafkapixy.proto), message by message.
KAFKA_PIXY_FIELDS = {
    "RecordHeader": {"key": 1, "value": 2},
    "ProdRq": {
        "cluster": 1,
        "topic": 2,
        "key_value": 3,
        "key_undefined": 4,
        "message": 5,
        "async_mode": 6,
        "headers": 7,
    },
    "ProdRs": {"partition": 1, "offset": 2},
    "ConsNAckRq": {
        "cluster": 1,
        "topic": 2,
        "group": 3,
        "no_ack": 4,
        "auto_ack": 5,
        "ack_partition": 6,
        "ack_offset": 7,
    },
    "ConsRs": {"partition": 1, "offset": 2, "key_value": 3, "key_undefined": 4, "message": 5, "headers": 6},
    "AckRq": {"cluster": 1, "topic": 2, "group": 3, "partition": 4, "offset": 5},
    "PartitionOffset": {
        "partition": 1,
        "begin": 2,
        "end": 3,
        "count": 4,
        "offset": 5,
        "lag": 6,
        "metadata": 7,
        "sparse_acks": 8,
    },
    "GetOffsetsRq": {"cluster": 1, "topic": 2, "group": 3},
    "GetOffsetsRs": {"offsets": 1},
    "PartitionMetadata": {"partition": 1, "leader": 2, "replicas": 3, "isr": 4},
    "GetTopicMetadataRq": {"cluster": 1, "topic": 2, "with_partitions": 3},
    "GetTopicMetadataRs": {"version": 1, "config": 2, "partitions": 3},
    "ListTopicRs": {"topics": 1},
    "ListTopicRq": {"cluster": 1, "with_partitions": 2},
    "ListConsumersRq": {"cluster": 1, "topic": 2, "group": 3},
    "ConsumerPartitions": {"partitions": 1},
    "ConsumerGroups": {"consumers": 1},
    "ListConsumersRs": {"groups": 1},
    "SetOffsetsRq": {"cluster": 1, "topic": 2, "group": 3, "offsets": 4},
}


def test_messages_keep_kafka_pixy_field_numbers() -> None:
    for message_name, fields in KAFKA_PIXY_FIELDS.items():
        descriptor = pb.DESCRIPTOR.message_types_by_name[message_name]
        assert {f.name: f.number for f in descriptor.fields} == fields, message_name


def test_rpc_paths_are_kafka_pixy_ones() -> None:
    service = pb.DESCRIPTOR.services_by_name["KafkaPixy"]
    # No proto package: the path is /KafkaPixy/<Method>, exactly what kafka-pixy's clients call.
    assert service.full_name == "KafkaPixy"
    assert {m.name: (m.input_type.name, m.output_type.name) for m in service.methods} == {
        "Produce": ("ProdRq", "ProdRs"),
        "ConsumeNAck": ("ConsNAckRq", "ConsRs"),
        "Ack": ("AckRq", "AckRs"),
        "GetOffsets": ("GetOffsetsRq", "GetOffsetsRs"),
        "SetOffsets": ("SetOffsetsRq", "SetOffsetsRs"),
        "ListTopics": ("ListTopicRq", "ListTopicRs"),
        "ListConsumers": ("ListConsumersRq", "ListConsumersRs"),
        "GetTopicMetadata": ("GetTopicMetadataRq", "GetTopicMetadataRs"),
    }


def test_hand_encoded_kafka_pixy_request_decodes() -> None:
    # ConsNAckRq{topic="t" (2), group="g" (3), ack_partition=1 (6), ack_offset=300 (7)} as a pixy client sends it.
    wire = bytes([0x12, 1]) + b"t" + bytes([0x1A, 1]) + b"g" + bytes([0x30, 1, 0x38, 0xAC, 0x02])
    request = pb.ConsNAckRq.FromString(wire)
    assert (request.topic, request.group, request.ack_partition, request.ack_offset) == ("t", "g", 1, 300)
