"""Share-group membership, pure (sluice.coordinator.share.group and the group coordinator's routing): Kafka's
validation words, epochs, the simple assignor's spread, the assignment interval, departures, and one group id
naming one kind of group."""

from __future__ import annotations

import uuid

import pytest

from sluice.coordinator import GroupCoordinator
from sluice.coordinator.messages import TopicInfo
from sluice.coordinator.share.group import (
    ShareGroupConfig,
    ShareGroupHeartbeat,
    ShareGroups,
    ShareMember,
    assign_simple,
)
from sluice.errors import ErrorCode

T = TopicInfo("t", uuid.UUID(int=7), 4)
TOPICS = {"t": T}


def beat(groups: ShareGroups, member: str, epoch: int, now: int, topics: list[str] | None = None) -> object:
    request = ShareGroupHeartbeat("g", member, epoch, subscribed_topic_names=topics, topics=TOPICS)
    return groups.heartbeat(request, now)[0]


@pytest.mark.parametrize(
    ("member", "epoch", "topics", "words"),
    [
        ("", 0, ["t"], "Invalid member id in the request."),
        ("x" * 37, 0, ["t"], "Invalid member id in the request."),
        ("m", -2, ["t"], "MemberEpoch is invalid."),
        ("m", 0, None, "SubscribedTopicNames must be set in first request."),
        ("m", 0, [], "SubscribedTopicNames must be set in first request."),
    ],
)
def test_invalid_heartbeats_get_kafkas_words(member: str, epoch: int, topics: list[str] | None, words: str) -> None:
    result = beat(ShareGroups(), member, epoch, 0, topics)
    assert (result.error_code, result.error_message) == (ErrorCode.INVALID_REQUEST, words)


def test_members_starting_together_share_the_partitions_from_the_first_assignment() -> None:
    groups = ShareGroups(ShareGroupConfig(assignment_interval_ms=1000))
    first = beat(groups, "a", 0, 0, ["t"])
    assert first.member_epoch > 0 and first.assignment == [] and first.heartbeat_interval_ms <= 1000
    second = beat(groups, "b", 0, 300, ["t"])
    assert second.member_epoch > 0 and second.assignment == []
    a = beat(groups, "a", first.member_epoch, 1000)
    b = beat(groups, "b", second.member_epoch, 1000)
    assert a.member_epoch == b.member_epoch > first.member_epoch
    assert sorted(p for _, p in a.assignment + b.assignment) == [0, 1, 2, 3]
    assert len(a.assignment) == len(b.assignment) == 2


def test_the_simple_assignor_shares_partitions_when_members_outnumber_them() -> None:
    members = {f"m{i}": ShareMember(f"m{i}", subscribed_topic_names=("t",)) for i in range(3)}
    target = assign_simple(members, {"t": TopicInfo("t", T.topic_id, 2)})
    assert sorted(len(tps) for tps in target.values()) == [1, 1, 2]
    per_partition = [sum((T.topic_id, p) in tps for tps in target.values()) for p in range(2)]
    assert per_partition == [2, 2]  # ceil(3/2) members each
    alone = assign_simple({"m": ShareMember("m", subscribed_topic_names=("t",))}, TOPICS)
    assert alone["m"] == frozenset((T.topic_id, p) for p in range(4))


def test_epochs_leaving_fencing_and_expiry() -> None:
    groups = ShareGroups(ShareGroupConfig(assignment_interval_ms=0, session_timeout_ms=45_000))
    joined = beat(groups, "a", 0, 0, ["t"])
    assert len(joined.assignment) == 4  # no interval: at once
    stale = beat(groups, "a", joined.member_epoch + 5, 10)
    assert stale.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert beat(groups, "ghost", 3, 10).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    left = beat(groups, "a", -1, 20)
    assert (left.error_code, left.member_epoch) == (ErrorCode.NONE, -1)
    assert groups.groups["g"].state == "Empty"
    assert beat(groups, "a", -1, 30).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    rejoined = beat(groups, "a", 0, 40, ["t"])
    assert groups.next_deadline() == 40 + 45_000
    assert groups.tick(40 + 45_000) == [("g", "a")] and groups.groups["g"].is_empty()
    assert rejoined.error_code == ErrorCode.NONE


def test_one_group_id_names_one_kind_of_group() -> None:
    coordinator = GroupCoordinator()
    request = ShareGroupHeartbeat("g", "m", 0, subscribed_topic_names=["t"], topics=TOPICS)
    out = coordinator.share_group_heartbeat(request, 0, "r1")
    assert out.replies[0][1].error_code == ErrorCode.NONE
    assert out.records  # the share group's existence, in __consumer_offsets
    assert coordinator.not_a_consumer_group("g") == "Group g is not a consumer group."
    loaded = GroupCoordinator()
    for record in out.records:
        loaded.apply(record.key, record.value)
    loaded.loaded(0)
    assert loaded.is_share_group("g") and loaded.share.groups["g"].is_empty()
