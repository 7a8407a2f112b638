"""Group, offset and consumer-protocol definitions against hand-built wire bytes and Kafka's own schemas.

The golden bytes are written out field by field from the protocol rules (big-endian ints; int16-length
strings and int32-length arrays/bytes before the flexible version; uvarint length+1 and a tagged-field
byte per struct from it), so a wrong version range, nullability or default in a definition shows up here.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from sluice.protocol.codec import MessageCodecs
from sluice.protocol.messages import consumer_protocol, groups, offsets
from sluice.protocol.schema import MISSING, FieldDef, MessageDef, Versions

TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")


def s16(text: str) -> str:
    """int16-length string."""
    return f"{len(text):04x}" + text.encode().hex()


def cs(text: str) -> str:
    """Compact string (uvarint length + 1; all test strings are short)."""
    return f"{len(text) + 1:02x}" + text.encode().hex()


def i32(value: int) -> str:
    return (value & 0xFFFFFFFF).to_bytes(4, "big").hex()


def i64(value: int) -> str:
    return (value & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big").hex()


NULL16 = "ffff"
NULL32 = "ffffffff"
NO_TAGS = "00"
COMPACT_NULL = "00"


def build(codecs: MessageCodecs, struct: str, **values: Any) -> Any:
    return codecs.classes[struct](**values)


def roundtrip(message: MessageDef, version: int, obj: Any, expected_hex: str) -> Any:
    codec = codecs_of(message)[version]
    expected = bytes.fromhex(expected_hex.replace(" ", ""))
    assert codec.encode(obj).hex() == expected.hex()
    decoded, end = codec.decode(expected)
    assert end == len(expected)
    # Fields a version lacks decode to their defaults, so compare through the wire form.
    assert codec.encode(decoded).hex() == expected.hex()
    return decoded


_CODECS: dict[int, MessageCodecs] = {}


def codecs_of(message: MessageDef) -> MessageCodecs:
    """One codec set per definition: generated classes compare equal only to their own kind."""
    codecs = _CODECS.get(id(message))
    if codecs is None:
        codecs = _CODECS[id(message)] = MessageCodecs(message)
    return codecs


# ----- JoinGroup / SyncGroup -----


def _join_request(version: int) -> Any:
    c = codecs_of(groups.JOIN_GROUP.request_def)
    protocol = build(c, "JoinGroupRequestProtocol", name="range", metadata=b"\x00\x01")
    return build(
        c,
        "JoinGroupRequest",
        group_id="g",
        session_timeout_ms=30000,
        rebalance_timeout_ms=60000 if version >= 1 else -1,
        member_id="",
        protocol_type="consumer",
        protocols=[protocol],
    )


def test_join_group_request_v0() -> None:
    expected = s16("g") + i32(30000) + s16("") + s16("consumer") + i32(1) + s16("range") + i32(2) + "0001"
    decoded = roundtrip(groups.JOIN_GROUP.request_def, 0, _join_request(0), expected)
    assert decoded.rebalance_timeout_ms == -1
    assert decoded.group_instance_id is None
    assert [p.name for p in decoded.protocols] == ["range"]


def test_join_group_request_v5_null_instance_id() -> None:
    expected = (
        s16("g") + i32(30000) + i32(60000) + s16("") + NULL16 + s16("consumer")
        + i32(1) + s16("range") + i32(2) + "0001"
    )  # fmt: skip
    roundtrip(groups.JOIN_GROUP.request_def, 5, _join_request(5), expected)


def test_join_group_request_v8_flexible_with_null_reason() -> None:
    expected = (
        cs("g") + i32(30000) + i32(60000) + cs("") + COMPACT_NULL + cs("consumer")
        + "02" + cs("range") + "03" + "0001" + NO_TAGS
        + COMPACT_NULL + NO_TAGS
    )  # fmt: skip
    assert roundtrip(groups.JOIN_GROUP.request_def, 8, _join_request(8), expected) == _join_request(8)


def test_join_group_request_defaults() -> None:
    c = codecs_of(groups.JOIN_GROUP.request_def)
    obj = c.cls()
    assert obj.rebalance_timeout_ms == -1
    assert obj.group_instance_id is None
    assert obj.reason is None


def test_join_group_response_v7_null_protocol_type() -> None:
    c = codecs_of(groups.JOIN_GROUP.response_def)
    member = build(c, "JoinGroupResponseMember", member_id="m", metadata=b"")
    obj = build(
        c,
        "JoinGroupResponse",
        generation_id=1,
        protocol_type=None,
        protocol_name="range",
        leader="m",
        member_id="m",
        members=[member],
    )
    expected = (
        i32(0) + "0000" + i32(1) + COMPACT_NULL + cs("range") + cs("m") + cs("m")
        + "02" + cs("m") + COMPACT_NULL + "01" + NO_TAGS + NO_TAGS
    )  # fmt: skip
    roundtrip(groups.JOIN_GROUP.response_def, 7, obj, expected)


def test_join_group_response_v9_skip_assignment() -> None:
    c = codecs_of(groups.JOIN_GROUP.response_def)
    obj = build(c, "JoinGroupResponse", generation_id=3, protocol_type="consumer", protocol_name="range",
                leader="a", skip_assignment=True, member_id="b")  # fmt: skip
    expected = (
        i32(0) + "0000" + i32(3) + cs("consumer") + cs("range") + cs("a") + "01" + cs("b") + "01" + NO_TAGS
    )
    roundtrip(groups.JOIN_GROUP.response_def, 9, obj, expected)


def test_join_group_response_v1_has_no_throttle_time() -> None:
    c = codecs_of(groups.JOIN_GROUP.response_def)
    obj = build(
        c, "JoinGroupResponse", error_code=25, generation_id=-1, protocol_name="", leader="", member_id=""
    )
    expected = "0019" + i32(-1) + s16("") + s16("") + s16("") + i32(0)
    roundtrip(groups.JOIN_GROUP.response_def, 1, obj, expected)


def test_sync_group_request_v3_and_v5() -> None:
    c = codecs_of(groups.SYNC_GROUP.request_def)
    assignment = build(c, "SyncGroupRequestAssignment", member_id="m", assignment=b"\x07")
    obj = build(c, "SyncGroupRequest", group_id="g", generation_id=2, member_id="m", assignments=[assignment])
    v3 = s16("g") + i32(2) + s16("m") + NULL16 + i32(1) + s16("m") + i32(1) + "07"
    roundtrip(groups.SYNC_GROUP.request_def, 3, obj, v3)
    obj.protocol_type, obj.protocol_name = "consumer", "range"
    v5 = (
        cs("g") + i32(2) + cs("m") + COMPACT_NULL + cs("consumer") + cs("range")
        + "02" + cs("m") + "02" + "07" + NO_TAGS + NO_TAGS
    )  # fmt: skip
    roundtrip(groups.SYNC_GROUP.request_def, 5, obj, v5)


def test_sync_group_response_v0_and_v5() -> None:
    c = codecs_of(groups.SYNC_GROUP.response_def)
    obj = build(c, "SyncGroupResponse", assignment=b"\x00\x03")
    roundtrip(groups.SYNC_GROUP.response_def, 0, obj, "0000" + i32(2) + "0003")
    obj.protocol_type, obj.protocol_name = "consumer", "range"
    v5 = i32(0) + "0000" + cs("consumer") + cs("range") + "03" + "0003" + NO_TAGS
    roundtrip(groups.SYNC_GROUP.response_def, 5, obj, v5)


# ----- Heartbeat / LeaveGroup / FindCoordinator -----


def test_heartbeat_request_v3_and_v4() -> None:
    c = codecs_of(groups.HEARTBEAT.request_def)
    obj = build(c, "HeartbeatRequest", group_id="g", generation_id=1, member_id="m", group_instance_id="i")
    roundtrip(groups.HEARTBEAT.request_def, 3, obj, s16("g") + i32(1) + s16("m") + s16("i"))
    roundtrip(groups.HEARTBEAT.request_def, 4, obj, cs("g") + i32(1) + cs("m") + cs("i") + NO_TAGS)


def test_leave_group_request_single_member_then_batch() -> None:
    c = codecs_of(groups.LEAVE_GROUP.request_def)
    obj = build(c, "LeaveGroupRequest", group_id="g", member_id="m")
    roundtrip(groups.LEAVE_GROUP.request_def, 2, obj, s16("g") + s16("m"))
    batch = build(c, "LeaveGroupRequest", group_id="g", members=[build(c, "MemberIdentity", member_id="m")])
    roundtrip(groups.LEAVE_GROUP.request_def, 3, batch, s16("g") + i32(1) + s16("m") + NULL16)
    v5 = cs("g") + "02" + cs("m") + COMPACT_NULL + COMPACT_NULL + NO_TAGS + NO_TAGS
    roundtrip(groups.LEAVE_GROUP.request_def, 5, batch, v5)


def test_find_coordinator_v0_and_v4() -> None:
    req = codecs_of(groups.FIND_COORDINATOR.request_def)
    roundtrip(groups.FIND_COORDINATOR.request_def, 0, build(req, "FindCoordinatorRequest", key="g"), s16("g"))
    batched = build(req, "FindCoordinatorRequest", key_type=0, coordinator_keys=["g"])
    roundtrip(groups.FIND_COORDINATOR.request_def, 4, batched, "00" + "02" + cs("g") + NO_TAGS)

    resp = codecs_of(groups.FIND_COORDINATOR.response_def)
    v0 = build(resp, "FindCoordinatorResponse", node_id=1, host="h", port=9092)
    roundtrip(groups.FIND_COORDINATOR.response_def, 0, v0, "0000" + i32(1) + s16("h") + i32(9092))
    v1 = build(resp, "FindCoordinatorResponse", node_id=1, host="h", port=9092, error_message=None)
    roundtrip(
        groups.FIND_COORDINATOR.response_def, 1, v1, i32(0) + "0000" + NULL16 + i32(1) + s16("h") + i32(9092)
    )
    coordinator = build(resp, "Coordinator", key="g", node_id=1, host="h", port=9092, error_message=None)
    v4 = build(resp, "FindCoordinatorResponse", coordinators=[coordinator])
    expected = (
        i32(0) + "02" + cs("g") + i32(1) + cs("h") + i32(9092) + "0000" + COMPACT_NULL + NO_TAGS + NO_TAGS
    )
    roundtrip(groups.FIND_COORDINATOR.response_def, 4, v4, expected)


def test_list_and_describe_groups() -> None:
    c = codecs_of(groups.LIST_GROUPS.response_def)
    listed = build(
        c, "ListedGroup", group_id="g", protocol_type="consumer", group_state="Stable", group_type="classic"
    )
    obj = build(c, "ListGroupsResponse", groups=[listed])
    roundtrip(groups.LIST_GROUPS.response_def, 0, obj, "0000" + i32(1) + s16("g") + s16("consumer"))
    v5 = i32(0) + "0000" + "02" + cs("g") + cs("consumer") + cs("Stable") + cs("classic") + NO_TAGS + NO_TAGS
    roundtrip(groups.LIST_GROUPS.response_def, 5, obj, v5)

    d = codecs_of(groups.DESCRIBE_GROUPS.response_def)
    group = build(d, "DescribedGroup", group_id="g", group_state="Dead", error_message=None)
    described = build(d, "DescribeGroupsResponse", groups=[group])
    assert group.authorized_operations == -(2**31)
    v6 = (
        i32(0) + "02" + "0000" + COMPACT_NULL + cs("g") + cs("Dead") + cs("") + cs("") + "01"
        + i32(-(2**31)) + NO_TAGS + NO_TAGS
    )  # fmt: skip
    roundtrip(groups.DESCRIBE_GROUPS.response_def, 6, described, v6)


# ----- KIP-848 -----


def test_consumer_group_heartbeat_request_v0_and_v1() -> None:
    c = codecs_of(groups.CONSUMER_GROUP_HEARTBEAT.request_def)
    obj = build(c, "ConsumerGroupHeartbeatRequest", group_id="g", member_id="m")
    assert obj.rebalance_timeout_ms == -1
    assert obj.subscribed_topic_names is None and obj.topic_partitions is None
    head = cs("g") + cs("m") + i32(0) + COMPACT_NULL + COMPACT_NULL + i32(-1) + COMPACT_NULL
    tail = COMPACT_NULL + COMPACT_NULL + NO_TAGS
    roundtrip(groups.CONSUMER_GROUP_HEARTBEAT.request_def, 0, obj, head + tail)
    roundtrip(groups.CONSUMER_GROUP_HEARTBEAT.request_def, 1, obj, head + COMPACT_NULL + tail)

    owned = build(c, "TopicPartitions", topic_id=TOPIC_ID, partitions=[0, 2])
    obj.subscribed_topic_names, obj.topic_partitions = ["t"], [owned]
    expected = (
        cs("g") + cs("m") + i32(0) + COMPACT_NULL + COMPACT_NULL + i32(-1) + "02" + cs("t")
        + COMPACT_NULL + "02" + TOPIC_ID.hex + "03" + i32(0) + i32(2) + NO_TAGS + NO_TAGS
    )  # fmt: skip
    roundtrip(groups.CONSUMER_GROUP_HEARTBEAT.request_def, 0, obj, expected)


def test_consumer_group_heartbeat_response_nullable_assignment() -> None:
    c = codecs_of(groups.CONSUMER_GROUP_HEARTBEAT.response_def)
    obj = build(
        c, "ConsumerGroupHeartbeatResponse", member_id="m", member_epoch=1, heartbeat_interval_ms=5000
    )
    assert obj.assignment is None
    head = i32(0) + "0000" + COMPACT_NULL + cs("m") + i32(1) + i32(5000)
    roundtrip(groups.CONSUMER_GROUP_HEARTBEAT.response_def, 0, obj, head + "ff" + NO_TAGS)
    obj.assignment = build(c, "Assignment", topic_partitions=[])
    roundtrip(groups.CONSUMER_GROUP_HEARTBEAT.response_def, 0, obj, head + "01" + "01" + NO_TAGS + NO_TAGS)


def test_consumer_group_describe_member_type_from_v1() -> None:
    c = codecs_of(groups.CONSUMER_GROUP_DESCRIBE.response_def)
    member = build(c, "Member", member_id="m", client_id="c", client_host="/h", member_type=1)
    group = build(
        c, "DescribedGroup", group_id="g", group_state="Stable", assignor_name="uniform", members=[member]
    )
    obj = build(c, "ConsumerGroupDescribeResponse", groups=[group])
    empty_assignment = "01" + NO_TAGS
    member_v0 = (
        cs("m") + COMPACT_NULL + COMPACT_NULL + i32(0) + cs("c") + cs("/h") + "01" + COMPACT_NULL
        + empty_assignment + empty_assignment
    )  # fmt: skip
    prefix = (
        i32(0)
        + "02"
        + "0000"
        + COMPACT_NULL
        + cs("g")
        + cs("Stable")
        + i32(0)
        + i32(0)
        + cs("uniform")
        + "02"
    )
    suffix = i32(-(2**31)) + NO_TAGS + NO_TAGS
    roundtrip(
        groups.CONSUMER_GROUP_DESCRIBE.response_def, 1, obj, prefix + member_v0 + "01" + NO_TAGS + suffix
    )
    member.member_type = -1
    roundtrip(groups.CONSUMER_GROUP_DESCRIBE.response_def, 0, obj, prefix + member_v0 + NO_TAGS + suffix)


# ----- OffsetCommit / OffsetFetch / OffsetDelete -----


def _commit(version: int) -> Any:
    c = codecs_of(offsets.OFFSET_COMMIT.request_def)
    partition = build(
        c, "OffsetCommitRequestPartition", partition_index=0, committed_offset=42, committed_metadata=None
    )
    topic = build(c, "OffsetCommitRequestTopic", name="t", topic_id=TOPIC_ID, partitions=[partition])
    return build(
        c, "OffsetCommitRequest", group_id="g", generation_id_or_member_epoch=5, member_id="m", topics=[topic]
    )


def test_offset_commit_request_versions() -> None:
    request = offsets.OFFSET_COMMIT.request_def
    topic_v0 = i32(1) + s16("t") + i32(1) + i32(0) + i64(42)
    roundtrip(request, 0, _commit(0), s16("g") + topic_v0 + NULL16)
    # v1 carries a per-partition commit timestamp (default -1), v2-4 a retention time instead.
    roundtrip(request, 1, _commit(1), s16("g") + i32(5) + s16("m") + topic_v0 + i64(-1) + NULL16)
    roundtrip(request, 2, _commit(2), s16("g") + i32(5) + s16("m") + i64(-1) + topic_v0 + NULL16)
    roundtrip(request, 5, _commit(5), s16("g") + i32(5) + s16("m") + topic_v0 + NULL16)
    roundtrip(request, 6, _commit(6), s16("g") + i32(5) + s16("m") + topic_v0 + i32(-1) + NULL16)
    v7 = s16("g") + i32(5) + s16("m") + NULL16 + topic_v0 + i32(-1) + NULL16
    roundtrip(request, 7, _commit(7), v7)
    partition_flex = "02" + i32(0) + i64(42) + i32(-1) + COMPACT_NULL + NO_TAGS
    v9 = cs("g") + i32(5) + cs("m") + COMPACT_NULL + "02" + cs("t") + partition_flex + NO_TAGS + NO_TAGS
    roundtrip(request, 9, _commit(9), v9)
    v10 = cs("g") + i32(5) + cs("m") + COMPACT_NULL + "02" + TOPIC_ID.hex + partition_flex + NO_TAGS + NO_TAGS
    roundtrip(request, 10, _commit(10), v10)


def test_offset_commit_request_defaults() -> None:
    c = codecs_of(offsets.OFFSET_COMMIT.request_def)
    assert c.cls().generation_id_or_member_epoch == -1
    assert c.cls().retention_time_ms == -1
    partition = c.classes["OffsetCommitRequestPartition"]()
    assert partition.committed_leader_epoch == -1
    assert partition.commit_timestamp == -1


def test_offset_commit_response_v3_and_v10() -> None:
    c = codecs_of(offsets.OFFSET_COMMIT.response_def)
    partition = build(c, "OffsetCommitResponsePartition", partition_index=1, error_code=0)
    obj = build(
        c,
        "OffsetCommitResponse",
        topics=[build(c, "OffsetCommitResponseTopic", name="t", partitions=[partition])],
    )
    roundtrip(offsets.OFFSET_COMMIT.response_def, 2, obj, i32(1) + s16("t") + i32(1) + i32(1) + "0000")
    roundtrip(
        offsets.OFFSET_COMMIT.response_def, 3, obj, i32(0) + i32(1) + s16("t") + i32(1) + i32(1) + "0000"
    )
    obj.topics[0].topic_id = TOPIC_ID
    v10 = i32(0) + "02" + TOPIC_ID.hex + "02" + i32(1) + "0000" + NO_TAGS + NO_TAGS + NO_TAGS
    roundtrip(offsets.OFFSET_COMMIT.response_def, 10, obj, v10)


def test_offset_fetch_request_null_topics() -> None:
    c = codecs_of(offsets.OFFSET_FETCH.request_def)
    empty = build(c, "OffsetFetchRequest", group_id="g", topics=[])
    roundtrip(offsets.OFFSET_FETCH.request_def, 1, empty, s16("g") + i32(0))
    all_topics = build(c, "OffsetFetchRequest", group_id="g", topics=None)
    assert roundtrip(offsets.OFFSET_FETCH.request_def, 2, all_topics, s16("g") + NULL32).topics is None
    roundtrip(offsets.OFFSET_FETCH.request_def, 6, all_topics, cs("g") + COMPACT_NULL + NO_TAGS)
    all_topics.require_stable = True
    roundtrip(offsets.OFFSET_FETCH.request_def, 7, all_topics, cs("g") + COMPACT_NULL + "01" + NO_TAGS)


def test_offset_fetch_request_batched_groups() -> None:
    c = codecs_of(offsets.OFFSET_FETCH.request_def)
    group = build(c, "OffsetFetchRequestGroup", group_id="g", topics=None)
    obj = build(c, "OffsetFetchRequest", groups=[group])
    assert group.member_id is None and group.member_epoch == -1
    v8 = "02" + cs("g") + COMPACT_NULL + NO_TAGS + "00" + NO_TAGS
    roundtrip(offsets.OFFSET_FETCH.request_def, 8, obj, v8)
    v9 = "02" + cs("g") + COMPACT_NULL + i32(-1) + COMPACT_NULL + NO_TAGS + "00" + NO_TAGS
    roundtrip(offsets.OFFSET_FETCH.request_def, 9, obj, v9)
    topic = build(c, "OffsetFetchRequestTopics", name="t", topic_id=TOPIC_ID, partition_indexes=[3])
    group.topics = [topic]
    v10 = (
        "02" + cs("g") + COMPACT_NULL + i32(-1) + "02" + TOPIC_ID.hex + "02" + i32(3) + NO_TAGS
        + NO_TAGS + "00" + NO_TAGS
    )  # fmt: skip
    roundtrip(offsets.OFFSET_FETCH.request_def, 10, obj, v10)


def test_offset_fetch_response_v1_v5_v8() -> None:
    c = codecs_of(offsets.OFFSET_FETCH.response_def)
    partition = build(c, "OffsetFetchResponsePartition", partition_index=0, committed_offset=-1, metadata="")
    topic = build(c, "OffsetFetchResponseTopic", name="t", partitions=[partition])
    obj = build(c, "OffsetFetchResponse", topics=[topic])
    v1 = i32(1) + s16("t") + i32(1) + i32(0) + i64(-1) + s16("") + "0000"
    roundtrip(offsets.OFFSET_FETCH.response_def, 1, obj, v1)
    v5 = i32(0) + i32(1) + s16("t") + i32(1) + i32(0) + i64(-1) + i32(-1) + s16("") + "0000" + "0000"
    roundtrip(offsets.OFFSET_FETCH.response_def, 5, obj, v5)

    partitions = build(
        c, "OffsetFetchResponsePartitions", partition_index=0, committed_offset=7, metadata=None
    )
    topics = build(c, "OffsetFetchResponseTopics", name="t", partitions=[partitions])
    batched = build(
        c, "OffsetFetchResponse", groups=[build(c, "OffsetFetchResponseGroup", group_id="g", topics=[topics])]
    )
    v8 = (
        i32(0) + "02" + cs("g") + "02" + cs("t") + "02" + i32(0) + i64(7) + i32(-1) + COMPACT_NULL + "0000"
        + NO_TAGS + NO_TAGS + "0000" + NO_TAGS + NO_TAGS
    )  # fmt: skip
    roundtrip(offsets.OFFSET_FETCH.response_def, 8, batched, v8)


def test_offset_delete_response_field_order() -> None:
    c = codecs_of(offsets.OFFSET_DELETE.response_def)
    partition = build(c, "OffsetDeleteResponsePartition", partition_index=2, error_code=0)
    topic = build(c, "OffsetDeleteResponseTopic", name="t", partitions=[partition])
    obj = build(c, "OffsetDeleteResponse", error_code=0, throttle_time_ms=5, topics=[topic])
    roundtrip(
        offsets.OFFSET_DELETE.response_def,
        0,
        obj,
        "0000" + i32(5) + i32(1) + s16("t") + i32(1) + i32(2) + "0000",
    )


# ----- consumer protocol and __consumer_offsets records -----


def test_consumer_protocol_subscription_versions() -> None:
    message = consumer_protocol.CONSUMER_PROTOCOL_SUBSCRIPTION.message_def
    c = codecs_of(message)
    owned = build(c, "TopicPartition", topic="t", partitions=[0, 1])
    obj = build(c, "ConsumerProtocolSubscription", topics=["t"], user_data=None, owned_partitions=[owned])
    assert obj.generation_id == -1 and obj.rack_id is None
    v0 = i32(1) + s16("t") + NULL32
    roundtrip(message, 0, obj, v0)
    v1 = v0 + i32(1) + s16("t") + i32(2) + i32(0) + i32(1)
    roundtrip(message, 1, obj, v1)
    roundtrip(message, 3, obj, v1 + i32(-1) + NULL16)


def test_consumer_protocol_assignment() -> None:
    message = consumer_protocol.CONSUMER_PROTOCOL_ASSIGNMENT.message_def
    c = codecs_of(message)
    assigned = build(c, "TopicPartition", topic="t", partitions=[4])
    obj = build(c, "ConsumerProtocolAssignment", assigned_partitions=[assigned], user_data=b"u")
    roundtrip(message, 0, obj, i32(1) + s16("t") + i32(1) + i32(4) + i32(1) + "75")


def test_offset_commit_records() -> None:
    key = consumer_protocol.OFFSET_COMMIT_KEY.message_def
    roundtrip(key, 1, build(codecs_of(key), "OffsetCommitKey", group="g", topic="t", partition=3),
              s16("g") + s16("t") + i32(3))  # fmt: skip
    value = consumer_protocol.OFFSET_COMMIT_VALUE.message_def
    obj = build(codecs_of(value), "OffsetCommitValue", offset=42, metadata="", commit_timestamp=1000)
    roundtrip(value, 1, obj, i64(42) + s16("") + i64(1000) + i64(-1))
    roundtrip(value, 3, obj, i64(42) + i32(-1) + s16("") + i64(1000))
    roundtrip(value, 4, obj, i64(42) + i32(-1) + cs("") + i64(1000) + NO_TAGS)


def test_group_metadata_records() -> None:
    key = consumer_protocol.GROUP_METADATA_KEY.message_def
    roundtrip(key, 2, build(codecs_of(key), "GroupMetadataKey", group="g"), s16("g"))
    value = consumer_protocol.GROUP_METADATA_VALUE.message_def
    c = codecs_of(value)
    member = build(c, "MemberMetadata", member_id="m", client_id="c", client_host="/h", rebalance_timeout=300,
                   session_timeout=45, subscription=b"", assignment=b"")  # fmt: skip
    obj = build(c, "GroupMetadataValue", protocol_type="consumer", generation=1, protocol=None, leader=None,
                members=[member])  # fmt: skip
    v0_member = s16("m") + s16("c") + s16("/h") + i32(45) + i32(0) + i32(0)
    roundtrip(value, 0, obj, s16("consumer") + i32(1) + NULL16 + NULL16 + i32(1) + v0_member)
    v3_member = s16("m") + NULL16 + s16("c") + s16("/h") + i32(300) + i32(45) + i32(0) + i32(0)
    roundtrip(value, 3, obj, s16("consumer") + i32(1) + NULL16 + NULL16 + i64(-1) + i32(1) + v3_member)


# ----- every field against Kafka's JSON schemas (as bundled by kafka-python 3) -----

KAFKA_SCHEMAS: Path | None
try:
    import kafka.protocol

    KAFKA_SCHEMAS = Path(kafka.protocol.__file__).parent / "schemas" / "resources"
except ImportError:  # pragma: no cover - kafka-python is a test dependency
    KAFKA_SCHEMAS = None


def _load_kafka_schema(name: str) -> dict[str, Any] | None:
    if KAFKA_SCHEMAS is None or not (KAFKA_SCHEMAS / f"{name}.json").exists():
        return None
    text = (KAFKA_SCHEMAS / f"{name}.json").read_text()
    text = re.sub(r"^\s*//.*$", "", text, flags=re.M)
    return json.loads(text)


def _kafka_default(field: dict[str, Any]) -> Any:
    raw = field.get("default")
    if raw is None or isinstance(raw, int):
        return MISSING if raw is None else raw
    if raw == "null":
        return None
    if raw in ("true", "false"):
        return raw == "true"
    try:
        return int(raw, 0)
    except ValueError:
        return raw


def _natural(ours: FieldDef) -> Any:
    return {"bool": False, "string": ""}.get(ours.type, 0) if not ours.is_array else MISSING


def _compare(path: str, ours: list[FieldDef], theirs: list[dict[str, Any]], common: dict[str, Any],
             window: Versions) -> list[str]:  # fmt: skip
    def clip(v: Versions) -> tuple[int, int] | None:
        low, high = max(v.low, window.low), min(v.high, window.high)
        return (low, high) if low <= high else None

    problems: list[str] = []
    if [f.name for f in ours] != [f["name"] for f in theirs]:
        problems.append(f"{path}: fields {[f.name for f in ours]} != {[f['name'] for f in theirs]}")
        return problems
    for mine, kafka in zip(ours, theirs, strict=True):
        where = f"{path}.{mine.name}"
        if ("[]" if mine.is_array else "") + mine.type != kafka["type"]:
            problems.append(f"{where}: type {mine.type} != {kafka['type']}")
        if clip(mine.versions) != clip(Versions.parse(kafka["versions"])):
            problems.append(f"{where}: versions {mine.versions} != {kafka['versions']}")
        if clip(mine.nullable) != clip(Versions.parse(kafka.get("nullableVersions", "none"))):
            problems.append(f"{where}: nullable {mine.nullable} != {kafka.get('nullableVersions')}")
        if mine.tag != kafka.get("tag"):
            problems.append(f"{where}: tag {mine.tag} != {kafka.get('tag')}")
        expected_default = _kafka_default(kafka)
        if mine.default != expected_default and not (
            MISSING in (mine.default, expected_default) and _natural(mine) in (mine.default, expected_default)
        ):
            problems.append(f"{where}: default {mine.default!r} != {expected_default!r}")
        if mine.struct is not None:
            children = kafka.get("fields") or common.get(mine.type, [])
            problems += _compare(where, mine.struct.fields, children, common, window)
    return problems


def _messages() -> list[tuple[str, MessageDef]]:
    found: list[tuple[str, MessageDef]] = []
    for module in (groups, offsets):
        for api in module.APIS:
            found += [(api.name + "Request", api.request_def), (api.name + "Response", api.response_def)]
    found += [(s.name, s.message_def) for s in consumer_protocol.STRUCTS]
    return found


@pytest.mark.parametrize(("name", "message"), _messages(), ids=[name for name, _ in _messages()])
def test_matches_kafka_schema(name: str, message: MessageDef) -> None:
    schema = _load_kafka_schema(name)
    if schema is None:
        pytest.skip(f"kafka-python bundles no {name}.json")
    kafka_valid = Versions.parse(schema["validVersions"])
    # Ours may reach further back than the Kafka release kafka-python mirrors, never less far forward.
    assert message.valid.low <= kafka_valid.low and message.valid.high == kafka_valid.high
    assert str(message.flexible) == str(Versions.parse(schema.get("flexibleVersions", "none")))
    common = {s["name"]: s["fields"] for s in schema.get("commonStructs", [])}
    assert _compare(name, message.root.fields, schema["fields"], common, kafka_valid) == []
