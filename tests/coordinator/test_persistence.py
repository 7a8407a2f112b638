"""The __consumer_offsets record format, and rebuilding the coordinator from it after a restart."""

from __future__ import annotations

import struct

import pytest
from coordinator_driver import GROUP, SESSION_MS, Driver

from sluice.coordinator import CoordinatorConfig, GroupCoordinator
from sluice.coordinator.consumer_protocol import encode_subscription, subscribed_topics
from sluice.coordinator.messages import (
    DeleteGroups,
    LeaveGroup,
    MemberIdentity,
    OffsetCommit,
    OffsetCommitPartition,
    OffsetCommitTopic,
    OffsetDelete,
    OffsetDeleteTopic,
    OffsetFetch,
    OffsetFetchGroup,
    OffsetFetchResult,
)
from sluice.coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from sluice.errors import ErrorCode


def test_offset_commit_key_and_value_have_kafkas_layout() -> None:
    key = encode_offset_commit_key(OffsetCommitKey("g", "t", 3))
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    value = encode_offset_commit_value(OffsetCommitValue(42, 5, "m", 1_000))
    assert value == b"\x00\x03" + struct.pack(">qi", 42, 5) + b"\x00\x01m" + struct.pack(">q", 1_000)
    assert decode_key(key) == OffsetCommitKey("g", "t", 3)
    assert decode_offset_commit_value(value) == OffsetCommitValue(42, 5, "m", 1_000)


def test_group_metadata_key_is_version_2() -> None:
    key = encode_group_metadata_key(GroupMetadataKey("grp"))
    assert key == b"\x00\x02\x00\x03grp"
    assert decode_key(key) == GroupMetadataKey("grp")


def test_group_metadata_value_round_trips_with_nulls_and_binary() -> None:
    value = GroupMetadataValue(
        "consumer",
        7,
        None,
        None,
        123,
        [MemberMetadataValue("m", None, "c", "/h", 30_000, 10_000, b"\x00\xff", b"")],
    )
    assert decode_group_metadata_value(encode_group_metadata_value(value)) == value


def test_flexible_v4_values_written_by_newer_kafka_are_read() -> None:
    def compact(data: bytes) -> bytes:
        return bytes([len(data) + 1]) + data

    member = (
        compact(b"m1")
        + b"\x00"  # null group instance id
        + compact(b"c")
        + compact(b"h")
        + struct.pack(">ii", 30_000, 10_000)
        + compact(b"sub")
        + compact(b"asg")
        + b"\x00"  # no tagged fields
    )
    group = (
        b"\x00\x04"
        + compact(b"consumer")
        + struct.pack(">i", 3)
        + compact(b"range")
        + compact(b"m1")
        + struct.pack(">q", 99)
        + b"\x02"  # one member
        + member
        + b"\x01\x05\x02hi"  # one unknown tagged field (tag 5, two bytes) must be skipped
    )
    decoded = decode_group_metadata_value(group)
    assert (decoded.protocol, decoded.leader, decoded.generation) == ("range", "m1", 3)
    assert decoded.members[0].assignment == b"asg"
    assert decoded.members[0].group_instance_id is None

    offset = b"\x00\x04" + struct.pack(">qi", 8, -1) + compact(b"meta") + struct.pack(">q", 5) + b"\x00"
    assert decode_offset_commit_value(offset) == OffsetCommitValue(8, -1, "meta", 5)


def test_old_value_versions_are_read() -> None:
    v1 = b"\x00\x01" + struct.pack(">q", 10) + b"\x00\x00" + struct.pack(">qq", 20, 30)
    assert decode_offset_commit_value(v1) == OffsetCommitValue(10, -1, "", 20)
    v0_group = (
        b"\x00\x00\x00\x08consumer"
        + struct.pack(">i", 2)
        + b"\x00\x05range\x00\x01m"
        + struct.pack(">i", 1)
        + b"\x00\x01m\x00\x01c\x00\x01h"
        + struct.pack(">i", 6_000)
        + struct.pack(">i", 0)
        + struct.pack(">i", 0)
    )
    decoded = decode_group_metadata_value(v0_group)
    assert decoded.members[0].rebalance_timeout == decoded.members[0].session_timeout == 6_000


def test_truncated_values_are_refused() -> None:
    with pytest.raises(RecordFormatError):
        decode_offset_commit_value(b"\x00\x03\x00\x00")


def test_subscription_topics_are_decoded_and_junk_is_unknown() -> None:
    assert subscribed_topics(encode_subscription(["a", "b"], b"user", version=3)) == ["a", "b"]
    assert subscribed_topics(b"\x00\x00\x00\x00\x00\x05\x00\x01a") is None


def _restart(driver: Driver, now_ms: int) -> GroupCoordinator:
    restarted = GroupCoordinator(driver.config)
    for r in driver.records:
        restarted.apply(r.key, r.value)
    restarted.loaded(now_ms)
    return restarted


def test_restart_brings_back_offsets_and_forgets_deleted_ones() -> None:
    driver = Driver()
    partitions = [OffsetCommitPartition(0, 10, 3, "m0"), OffsetCommitPartition(1, 11, -1, "")]
    driver.call("offset_commit", OffsetCommit("simple", [OffsetCommitTopic("t", partitions)]))
    driver.call(
        "offset_commit", OffsetCommit("simple", [OffsetCommitTopic("t", [OffsetCommitPartition(0, 12)])])
    )
    driver.call("offset_delete", OffsetDelete("simple", [OffsetDeleteTopic("t", [1])]))
    driver.call(
        "offset_commit", OffsetCommit("doomed", [OffsetCommitTopic("t", [OffsetCommitPartition(0, 1)])])
    )
    driver.call("delete_groups", DeleteGroups(["doomed"]))

    restarted = _restart(driver, driver.now)
    assert set(restarted.groups) == {"simple"}
    request = OffsetFetch([OffsetFetchGroup("simple", None)])
    result = restarted.offset_fetch(request, driver.now, "t").replies[0][1]
    assert isinstance(result, OffsetFetchResult)
    partition = result.groups[0].topics[0].partitions
    assert [(p.partition_index, p.committed_offset, p.metadata) for p in partition] == [(0, 12, "")]


def test_restart_brings_back_a_stable_group_whose_members_carry_on() -> None:
    driver = Driver()
    ids = driver.stable_group("a", "b")
    group_before = driver.coordinator.groups[GROUP]
    restarted_at = driver.now + 1_000
    driver.coordinator = _restart(driver, restarted_at)
    driver.now = restarted_at
    group = driver.coordinator.groups[GROUP]
    assert driver.state() == "Stable"
    assert (group.generation_id, group.leader_id, group.protocol_name) == (1, group_before.leader_id, "range")
    assert [m.assignment for m in group.members.values()] == [
        m.assignment for m in group_before.members.values()
    ]
    assert group.subscribed_topics == frozenset({"orders"})
    assert driver.heartbeat(ids["a"], 1) == ErrorCode.NONE
    synced = driver.sync_result(driver.sync(ids["b"], 1))
    assert synced.assignment == f"assigned:{ids['b']}".encode()
    # Sessions restart at load time: a keeps heartbeating, b goes quiet and expires.
    driver.advance(SESSION_MS // 2)
    assert driver.heartbeat(ids["a"], 1) == ErrorCode.NONE
    driver.advance(SESSION_MS // 2)
    assert list(group.members) == [ids["a"]]
    assert driver.state() == "PreparingRebalance"


def test_restart_keeps_static_members_fenceable() -> None:
    driver = Driver(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    token = driver.join(client_id="s", group_instance_id="inst")
    member_id = driver.join_result(token).member_id
    driver.sync(member_id, 1, {member_id: b"x"})
    driver.coordinator = _restart(driver, driver.now)
    assert driver.heartbeat("impostor", 1, group_instance_id="inst") == ErrorCode.FENCED_INSTANCE_ID
    assert driver.heartbeat(member_id, 1, group_instance_id="inst") == ErrorCode.NONE


def test_restart_of_an_emptied_group_keeps_it_empty_with_its_generation() -> None:
    driver = Driver()
    ids = driver.stable_group("a")
    driver.call("leave_group", LeaveGroup(GROUP, [MemberIdentity(ids["a"])]))
    restarted = _restart(driver, driver.now)
    group = restarted.groups[GROUP]
    assert (group.state.value, group.generation_id, group.protocol_type) == ("Empty", 2, "consumer")


def test_load_skips_record_types_a_classic_coordinator_does_not_own() -> None:
    consumer_group_record = (b"\x00\x03\x00\x01g", b"\x00\x00whatever")
    offset = (
        encode_offset_commit_key(OffsetCommitKey("g", "t", 0)),
        encode_offset_commit_value(OffsetCommitValue(5)),
    )
    restarted = GroupCoordinator()
    for key, value in (consumer_group_record, offset):
        restarted.apply(key, value)
    restarted.loaded(0)
    assert restarted.groups["g"].offsets[("t", 0)].offset == 5


def test_tick_with_nothing_due_changes_nothing() -> None:
    driver = Driver()
    driver.stable_group("a")
    deadline = driver.coordinator.next_deadline()
    assert deadline is not None
    outcome = driver.coordinator.tick(deadline - 1)
    assert (outcome.replies, outcome.records) == ([], [])
    assert driver.state() == "Stable"


def test_an_ephemeral_group_that_a_restart_left_with_only_offsets_goes_after_a_session_timeout() -> None:
    """Its members may have been KIP-848 ones (membership is not persisted): after one session timeout
    without a member it goes, offsets included; a created group that is not ephemeral stays."""
    driver = Driver()
    for name, ephemeral in (("brief", True), ("kept", False)):
        created = driver.coordinator.create_group(name, 8_000, ephemeral, driver.now)
        assert created is not None
        driver.records += created.records
        partitions = [OffsetCommitPartition(0, 7, -1, "")]
        driver.call("offset_commit", OffsetCommit(name, [OffsetCommitTopic("t", partitions)]))
    restarted = _restart(driver, driver.now)
    assert restarted.next_deadline() == driver.now + 8_000
    assert not restarted.tick(driver.now + 7_999).records
    assert {"brief", "kept"} <= set(restarted.groups)
    gone = restarted.tick(driver.now + 8_000)
    assert gone.records  # the deletion is persisted
    assert "brief" not in restarted.groups and "kept" in restarted.groups
    assert restarted.groups["kept"].offsets[("t", 0)].offset == 7
