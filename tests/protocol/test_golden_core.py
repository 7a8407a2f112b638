"""Golden bytes for the core broker APIs, built by hand from Kafka's wire rules rather than by the codec.

Each case pins one version-gated detail of a definition (a field's first or last version, its
nullability, a tagged field's tag) that a real client would trip over if it were wrong.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest

from sluice.protocol.messages import APIS_BY_NAME, request_codecs, response_codecs
from sluice.protocol.primitives import DecodeError


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def string(s: str | None) -> bytes:
    if s is None:
        return i16(-1)
    data = s.encode()
    return i16(len(data)) + data


def cstring(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    data = s.encode()
    return uvarint(len(data) + 1) + data


def array(items: list[bytes] | None) -> bytes:
    if items is None:
        return i32(-1)
    return i32(len(items)) + b"".join(items)


def carray(items: list[bytes] | None) -> bytes:
    if items is None:
        return uvarint(0)
    return uvarint(len(items) + 1) + b"".join(items)


def tags(*fields: tuple[int, bytes]) -> bytes:
    out = uvarint(len(fields))
    for tag, data in fields:
        out += uvarint(tag) + uvarint(len(data)) + data
    return out


NO_TAGS = tags()
TOPIC_ID = uuid.UUID("0b2c4d6e-8f10-4213-9415-161718191a1b")


def codecs_for(api: str, kind: str) -> Any:
    key = APIS_BY_NAME[api].key
    return request_codecs(key) if kind == "request" else response_codecs(key)


def check(api: str, kind: str, version: int, obj: Any, golden: bytes) -> Any:
    codec = codecs_for(api, kind)[version]
    assert codec.encode(obj) == golden
    decoded, end = codec.decode(golden)
    assert end == len(golden)
    return decoded


def normalise(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


# --- ApiVersions ---------------------------------------------------------------------------------


def test_api_versions_v0_request_is_empty() -> None:
    cls = codecs_for("ApiVersions", "request").cls
    check("ApiVersions", "request", 0, cls(), b"")


def test_api_versions_v3_request_carries_client_software() -> None:
    cls = codecs_for("ApiVersions", "request").cls
    obj = cls(client_software_name="sluice", client_software_version="1.0")
    check("ApiVersions", "request", 3, obj, cstring("sluice") + cstring("1.0") + NO_TAGS)


def test_api_versions_v0_response() -> None:
    cls = codecs_for("ApiVersions", "response").cls
    obj = cls(error_code=0, api_keys=[cls.ApiVersion(api_key=18, min_version=0, max_version=4)])
    check("ApiVersions", "response", 0, obj, i16(0) + array([i16(18) + i16(0) + i16(4)]))


def test_api_versions_v3_response_features_are_tagged() -> None:
    cls = codecs_for("ApiVersions", "response").cls
    obj = cls(
        error_code=0,
        api_keys=[cls.ApiVersion(api_key=0, min_version=0, max_version=13)],
        throttle_time_ms=0,
        supported_features=[cls.SupportedFeatureKey(name="metadata.version", min_version=1, max_version=27)],
        finalized_features_epoch=5,
        finalized_features=[
            cls.FinalizedFeatureKey(name="metadata.version", max_version_level=27, min_version_level=27)
        ],
    )
    supported = carray([cstring("metadata.version") + i16(1) + i16(27) + NO_TAGS])
    # FinalizedFeatureKey puts MaxVersionLevel before MinVersionLevel.
    finalized = carray([cstring("metadata.version") + i16(27) + i16(27) + NO_TAGS])
    golden = (
        i16(0)
        + carray([i16(0) + i16(0) + i16(13) + NO_TAGS])
        + i32(0)
        + tags((0, supported), (1, i64(5)), (2, finalized))
    )
    decoded = check("ApiVersions", "response", 3, obj, golden)
    assert decoded.zk_migration_ready is False


# --- Metadata ------------------------------------------------------------------------------------


def test_metadata_v1_null_topics_means_all() -> None:
    cls = codecs_for("Metadata", "request").cls
    decoded = check("Metadata", "request", 1, cls(topics=None), array(None))
    assert decoded.topics is None


def test_metadata_v0_topics_array_is_not_nullable() -> None:
    with pytest.raises(DecodeError):
        codecs_for("Metadata", "request")[0].decode(array(None))


def test_metadata_v8_request_authorized_operations_flags() -> None:
    cls = codecs_for("Metadata", "request").cls
    obj = cls(
        topics=[cls.MetadataRequestTopic(name="t")],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True,
    )
    golden = array([string("t")]) + i8(0) + i8(1) + i8(1)
    check("Metadata", "request", 8, obj, golden)


def test_metadata_v12_request_topic_by_id_with_null_name() -> None:
    cls = codecs_for("Metadata", "request").cls
    obj = cls(
        topics=[cls.MetadataRequestTopic(topic_id=TOPIC_ID, name=None)],
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    golden = carray([TOPIC_ID.bytes + cstring(None) + NO_TAGS]) + i8(1) + i8(0) + NO_TAGS
    check("Metadata", "request", 12, obj, golden)


def test_metadata_v0_response() -> None:
    cls = codecs_for("Metadata", "response").cls
    obj = cls(
        brokers=[cls.MetadataResponseBroker(node_id=1, host="localhost", port=9092)],
        topics=[
            cls.MetadataResponseTopic(
                error_code=0,
                name="t",
                partitions=[
                    cls.MetadataResponsePartition(
                        error_code=0, partition_index=0, leader_id=1, replica_nodes=[1], isr_nodes=[1]
                    )
                ],
            )
        ],
    )
    golden = array([i32(1) + string("localhost") + i32(9092)]) + array(
        [i16(0) + string("t") + array([i16(0) + i32(0) + i32(1) + array([i32(1)]) + array([i32(1)])])]
    )
    check("Metadata", "response", 0, obj, golden)


def test_metadata_v10_response_has_cluster_operations_and_v11_drops_them() -> None:
    cls = codecs_for("Metadata", "response").cls
    obj = cls(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=1, topics=[])
    v10 = i32(0) + carray([]) + cstring(None) + i32(1) + carray([]) + i32(-(2**31)) + NO_TAGS
    v11 = i32(0) + carray([]) + cstring(None) + i32(1) + carray([]) + NO_TAGS
    check("Metadata", "response", 10, obj, v10)
    check("Metadata", "response", 11, obj, v11)
    check("Metadata", "response", 13, obj, v11[:-1] + i16(0) + NO_TAGS)


# --- Produce -------------------------------------------------------------------------------------


def test_produce_v3_request_null_transactional_id() -> None:
    cls = codecs_for("Produce", "request").cls
    batch = b"\x00" * 61
    obj = cls(
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            cls.TopicProduceData(name="t", partition_data=[cls.PartitionProduceData(index=0, records=batch)])
        ],
    )
    golden = string(None) + i16(-1) + i32(30000) + array([string("t") + array([i32(0) + i32(61) + batch])])
    decoded = check("Produce", "request", 3, obj, golden)
    assert normalise(decoded.topic_data[0].partition_data[0].records) == batch


def test_produce_v0_request_has_no_transactional_id() -> None:
    cls = codecs_for("Produce", "request").cls
    obj = cls(acks=1, timeout_ms=1000, topic_data=[])
    check("Produce", "request", 0, obj, i16(1) + i32(1000) + array([]))


def test_produce_v13_request_uses_topic_ids() -> None:
    cls = codecs_for("Produce", "request").cls
    obj = cls(
        transactional_id="tx",
        acks=-1,
        timeout_ms=5,
        topic_data=[
            cls.TopicProduceData(
                topic_id=TOPIC_ID, partition_data=[cls.PartitionProduceData(index=2, records=None)]
            )
        ],
    )
    golden = (
        cstring("tx")
        + i16(-1)
        + i32(5)
        + carray([TOPIC_ID.bytes + carray([i32(2) + uvarint(0) + NO_TAGS]) + NO_TAGS])
        + NO_TAGS
    )
    check("Produce", "request", 13, obj, golden)


def test_produce_v10_response_current_leader_and_node_endpoints_are_tagged() -> None:
    cls = codecs_for("Produce", "response").cls
    part = cls.PartitionProduceResponse(
        index=0,
        error_code=6,
        base_offset=-1,
        log_append_time_ms=-1,
        log_start_offset=-1,
        current_leader=cls.LeaderIdAndEpoch(leader_id=2, leader_epoch=7),
    )
    obj = cls(
        responses=[cls.TopicProduceResponse(name="t", partition_responses=[part])],
        throttle_time_ms=0,
        node_endpoints=[cls.NodeEndpoint(node_id=2, host="h", port=9092, rack=None)],
    )
    part_bytes = (
        i32(0)
        + i16(6)
        + i64(-1)
        + i64(-1)
        + i64(-1)
        + carray([])
        + cstring(None)
        + tags((0, i32(2) + i32(7) + NO_TAGS))
    )
    golden = (
        carray([cstring("t") + carray([part_bytes]) + NO_TAGS])
        + i32(0)
        + tags((0, carray([i32(2) + cstring("h") + i32(9092) + cstring(None) + NO_TAGS])))
    )
    check("Produce", "response", 10, obj, golden)


# --- Fetch ---------------------------------------------------------------------------------------


def test_fetch_v4_request() -> None:
    cls = codecs_for("Fetch", "request").cls
    obj = cls(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1024,
        isolation_level=1,
        topics=[
            cls.FetchTopic(
                topic="t",
                partitions=[cls.FetchPartition(partition=0, fetch_offset=10, partition_max_bytes=512)],
            )
        ],
    )
    golden = (
        i32(-1)
        + i32(500)
        + i32(1)
        + i32(1024)
        + i8(1)
        + array([string("t") + array([i32(0) + i64(10) + i32(512)])])
    )
    check("Fetch", "request", 4, obj, golden)


def test_fetch_v15_request_replica_state_is_tagged_and_replica_id_gone() -> None:
    cls = codecs_for("Fetch", "request").cls
    obj = cls(
        replica_state=cls.ReplicaState(replica_id=3, replica_epoch=9),
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=0,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[],
        forgotten_topics_data=[],
        rack_id="",
    )
    golden = (
        i32(0)
        + i32(0)
        + i32(0)
        + i8(0)
        + i32(0)
        + i32(-1)
        + carray([])
        + carray([])
        + cstring("")
        + tags((1, i32(3) + i64(9) + NO_TAGS))
    )
    check("Fetch", "request", 15, obj, golden)


def test_fetch_v12_response_diverging_epoch_is_tagged() -> None:
    cls = codecs_for("Fetch", "response").cls
    part = cls.PartitionData(
        partition_index=0,
        error_code=0,
        high_watermark=100,
        last_stable_offset=100,
        log_start_offset=0,
        diverging_epoch=cls.EpochEndOffset(epoch=4, end_offset=90),
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=None,
    )
    obj = cls(
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[cls.FetchableTopicResponse(topic="t", partitions=[part])],
    )
    part_bytes = (
        i32(0)
        + i16(0)
        + i64(100)
        + i64(100)
        + i64(0)
        + carray(None)
        + i32(-1)
        + uvarint(0)
        + tags((0, i32(4) + i64(90) + NO_TAGS))
    )
    golden = i32(0) + i16(0) + i32(0) + carray([cstring("t") + carray([part_bytes]) + NO_TAGS]) + NO_TAGS
    check("Fetch", "response", 12, obj, golden)


# --- ListOffsets, OffsetForLeaderEpoch -----------------------------------------------------------


def test_list_offsets_v0_max_num_offsets_and_old_style_offsets() -> None:
    req = codecs_for("ListOffsets", "request").cls
    obj = req(
        replica_id=-1,
        topics=[
            req.ListOffsetsTopic(
                name="t", partitions=[req.ListOffsetsPartition(partition_index=0, timestamp=-1)]
            )
        ],
    )
    golden = i32(-1) + array([string("t") + array([i32(0) + i64(-1) + i32(1)])])
    check("ListOffsets", "request", 0, obj, golden)

    resp = codecs_for("ListOffsets", "response").cls
    robj = resp(
        topics=[
            resp.ListOffsetsTopicResponse(
                name="t",
                partitions=[
                    resp.ListOffsetsPartitionResponse(partition_index=0, error_code=0, old_style_offsets=[42])
                ],
            )
        ]
    )
    check(
        "ListOffsets", "response", 0, robj, array([string("t") + array([i32(0) + i16(0) + array([i64(42)])])])
    )


def test_list_offsets_v10_timeout_ends_the_request() -> None:
    cls = codecs_for("ListOffsets", "request").cls
    obj = cls(replica_id=-1, isolation_level=0, topics=[], timeout_ms=1500)
    check("ListOffsets", "request", 10, obj, i32(-1) + i8(0) + carray([]) + i32(1500) + NO_TAGS)


def test_offset_for_leader_epoch_v3_replica_id() -> None:
    cls = codecs_for("OffsetForLeaderEpoch", "request").cls
    obj = cls(topics=[])
    check("OffsetForLeaderEpoch", "request", 3, obj, i32(-2) + array([]))
    check("OffsetForLeaderEpoch", "request", 0, obj, array([]))


# --- Admin ---------------------------------------------------------------------------------------


def test_create_topics_v5_response_config_error_is_tagged() -> None:
    cls = codecs_for("CreateTopics", "response").cls
    obj = cls(
        throttle_time_ms=0,
        topics=[
            cls.CreatableTopicResult(
                name="t",
                error_code=0,
                error_message=None,
                topic_config_error_code=29,
                num_partitions=3,
                replication_factor=1,
                configs=None,
            )
        ],
    )
    topic = cstring("t") + i16(0) + cstring(None) + i32(3) + i16(1) + carray(None) + tags((0, i16(29)))
    check("CreateTopics", "response", 5, obj, i32(0) + carray([topic]) + NO_TAGS)


def test_delete_topics_v6_request_by_id() -> None:
    cls = codecs_for("DeleteTopics", "request").cls
    obj = cls(topics=[cls.DeleteTopicState(name=None, topic_id=TOPIC_ID)], timeout_ms=100)
    golden = carray([cstring(None) + TOPIC_ID.bytes + NO_TAGS]) + i32(100) + NO_TAGS
    check("DeleteTopics", "request", 6, obj, golden)
    check(
        "DeleteTopics", "request", 0, cls(topic_names=["t"], timeout_ms=100), array([string("t")]) + i32(100)
    )


def test_describe_configs_v0_response_is_default() -> None:
    cls = codecs_for("DescribeConfigs", "response").cls
    entry = cls.DescribeConfigsResourceResult(
        name="retention.ms", value=None, read_only=False, is_default=True, is_sensitive=False
    )
    obj = cls(
        throttle_time_ms=0,
        results=[
            cls.DescribeConfigsResult(
                error_code=0, error_message=None, resource_type=2, resource_name="t", configs=[entry]
            )
        ],
    )
    entry_bytes = string("retention.ms") + string(None) + i8(0) + i8(1) + i8(0)
    golden = i32(0) + array([i16(0) + string(None) + i8(2) + string("t") + array([entry_bytes])])
    check("DescribeConfigs", "response", 0, obj, golden)


def test_incremental_alter_configs_v1_request() -> None:
    cls = codecs_for("IncrementalAlterConfigs", "request").cls
    obj = cls(
        resources=[
            cls.AlterConfigsResource(
                resource_type=2,
                resource_name="t",
                configs=[cls.AlterableConfig(name="cleanup.policy", config_operation=1, value=None)],
            )
        ],
        validate_only=False,
    )
    config = cstring("cleanup.policy") + i8(1) + cstring(None) + NO_TAGS
    golden = carray([i8(2) + cstring("t") + carray([config]) + NO_TAGS]) + i8(0) + NO_TAGS
    check("IncrementalAlterConfigs", "request", 1, obj, golden)


# --- InitProducerId, SASL ------------------------------------------------------------------------


def test_init_producer_id_v3_request() -> None:
    cls = codecs_for("InitProducerId", "request").cls
    obj = cls(transactional_id=None, transaction_timeout_ms=60000)
    check("InitProducerId", "request", 3, obj, cstring(None) + i32(60000) + i64(-1) + i16(-1) + NO_TAGS)
    check("InitProducerId", "request", 0, obj, string(None) + i32(60000))


def test_sasl_handshake_and_authenticate() -> None:
    req = codecs_for("SaslHandshake", "request").cls
    check("SaslHandshake", "request", 1, req(mechanism="PLAIN"), string("PLAIN"))
    resp = codecs_for("SaslHandshake", "response").cls
    check(
        "SaslHandshake",
        "response",
        1,
        resp(error_code=0, mechanisms=["PLAIN"]),
        i16(0) + array([string("PLAIN")]),
    )

    auth = codecs_for("SaslAuthenticate", "response").cls
    obj = auth(error_code=0, error_message=None, auth_bytes=b"ok", session_lifetime_ms=1000)
    check("SaslAuthenticate", "response", 1, obj, i16(0) + string(None) + i32(2) + b"ok" + i64(1000))
    check(
        "SaslAuthenticate",
        "response",
        2,
        obj,
        i16(0) + cstring(None) + uvarint(3) + b"ok" + i64(1000) + NO_TAGS,
    )


def test_every_core_version_compiles_and_round_trips_defaults() -> None:
    names = [
        "Produce", "Fetch", "ListOffsets", "OffsetForLeaderEpoch", "ApiVersions", "Metadata",
        "DescribeCluster", "CreateTopics", "DeleteTopics", "CreatePartitions", "DescribeConfigs",
        "AlterConfigs", "IncrementalAlterConfigs", "DeleteRecords", "InitProducerId", "SaslHandshake",
        "SaslAuthenticate",
    ]  # fmt: skip
    for name in names:
        for version in APIS_BY_NAME[name].versions:
            for kind in ("request", "response"):
                codecs = codecs_for(name, kind)
                codec = codecs[version]
                data = codec.encode(codecs.cls())
                decoded, end = codec.decode(data)
                assert end == len(data)
                assert decoded == codecs.cls(), (name, kind, version)
