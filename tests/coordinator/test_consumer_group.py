"""KIP-848 consumer groups in the pure coordinator: epochs, reconciliation, leaving, expiry, fencing."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest

from sluice.coordinator import CoordinatorConfig, GroupCoordinator
from sluice.coordinator.messages import (
    ConsumerGroupDescribe,
    ConsumerGroupDescribeResult,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResult,
    DescribeGroups,
    DescribeGroupsResult,
    JoinGroup,
    JoinGroupProtocol,
    JoinGroupResult,
    ListGroups,
    ListGroupsResult,
    OffsetCommit,
    OffsetCommitPartition,
    OffsetCommitResult,
    OffsetCommitTopic,
    OffsetFetch,
    OffsetFetchGroup,
    OffsetFetchResult,
    Result,
    TopicInfo,
)
from sluice.errors import ErrorCode, KafkaError

GROUP = "orders-app"
TOPIC = "orders"
TOPIC_ID = uuid.UUID(int=7)
SESSION_MS = 10_000
INTERVAL_MS = 500
REBALANCE_MS = 30_000


class Clock:
    """Drives the coordinator with a hand-cranked clock and a topic table standing in for the broker."""

    def __init__(self, partitions: int = 6) -> None:
        self.now = 1_000_000
        self.topics: dict[str, TopicInfo] = {TOPIC: TopicInfo(TOPIC, TOPIC_ID, partitions)}
        config = CoordinatorConfig(
            group_initial_rebalance_delay_ms=0,
            consumer_group_session_timeout_ms=SESSION_MS,
            consumer_group_heartbeat_interval_ms=INTERVAL_MS,
        )
        ids = itertools.count(1)
        self.coordinator = GroupCoordinator(config, consumer_member_id_factory=lambda: f"m{next(ids)}")
        self.tokens = itertools.count()
        self.records: list[Any] = []

    def call(self, method: str, request: Any) -> Result:
        token = next(self.tokens)
        outcome = getattr(self.coordinator, method)(request, self.now, token)
        self.records += outcome.records
        [(reply_to, result)] = outcome.replies
        assert reply_to == token
        return result

    def beat(self, member_id: str, epoch: int, owned: set[int] | None = None, **fields: Any) -> ConsumerGroupHeartbeatResult:
        if epoch == 0:
            fields.setdefault("rebalance_timeout_ms", REBALANCE_MS)
            fields.setdefault("subscribed_topic_names", [TOPIC])
            owned = set() if owned is None else owned
        request = ConsumerGroupHeartbeat(
            group_id=fields.pop("group_id", GROUP), member_id=member_id, member_epoch=epoch,
            topic_partitions=None if owned is None else [(TOPIC_ID, p) for p in sorted(owned)],
            api_version=fields.pop("api_version", 1), topics=self.topics, client_id="test", **fields,
        )
        result = self.call("consumer_group_heartbeat", request)
        assert isinstance(result, ConsumerGroupHeartbeatResult)
        return result

    def advance(self, ms: int) -> None:
        self.now += ms
        deadline = self.coordinator.next_deadline()
        if deadline is not None and deadline <= self.now:
            self.records += self.coordinator.tick(self.now).records

    def group(self) -> Any:
        return self.coordinator.consumer.groups[GROUP]


def parts(result: ConsumerGroupHeartbeatResult) -> set[int] | None:
    return None if result.assignment is None else {p for _, p in result.assignment}


class Member:
    """A well-behaved client: remembers its epoch and partitions, revokes at once, reports what it owns."""

    def __init__(self, clock: Clock, member_id: str, **join_fields: Any) -> None:
        self.clock, self.member_id = clock, member_id
        self.epoch = 0
        self.owned: set[int] = set()
        self.join_fields = join_fields

    def beat(self) -> ConsumerGroupHeartbeatResult:
        fields = self.join_fields if self.epoch == 0 else {}
        result = self.clock.beat(self.member_id, self.epoch, set(self.owned), **fields)
        assert result.error_code is ErrorCode.NONE, result
        self.epoch = result.member_epoch
        if result.assignment is not None:
            self.owned = {p for _, p in result.assignment}
        return result


def settle(members: list[Member], rounds: int = 10) -> None:
    for _ in range(rounds):
        for member in members:
            member.beat()


def test_first_member_joins_and_gets_every_partition() -> None:
    clock = Clock()
    result = clock.beat("a", 0)
    assert result.error_code is ErrorCode.NONE
    assert result.member_id == "a"
    assert result.member_epoch == 1
    assert result.heartbeat_interval_ms == INTERVAL_MS
    assert parts(result) == set(range(6))
    group = clock.group()
    assert (group.group_epoch, group.assignment_epoch, group.state) == (1, 1, "Stable")
    # Nothing changed: no assignment in the answer.
    again = clock.beat("a", 1, set(range(6)))
    assert (again.member_epoch, again.assignment) == (1, None)


def test_v0_member_without_id_is_named_by_the_coordinator() -> None:
    clock = Clock()
    result = clock.beat("", 0, api_version=0)
    assert result.error_code is ErrorCode.NONE and result.member_id == "m1"
    # From v1 the client must name itself.
    assert clock.beat("", 0, api_version=1).error_code is ErrorCode.INVALID_REQUEST


def test_partition_moves_only_after_the_previous_owner_revoked_it() -> None:
    clock = Clock()
    a = Member(clock, "a")
    a.beat()
    assert a.owned == set(range(6))
    b = Member(clock, "b")
    joined = b.beat()
    # b joins at the new epoch but gets nothing yet: a still holds every partition.
    assert joined.member_epoch == 2 and parts(joined) == set()
    assert clock.group().state == "Reconciling"
    # a is told to give up half, staying at epoch 1 until it confirms.
    told = clock.beat("a", 1, set(range(6)))
    assert told.member_epoch == 1
    kept = parts(told)
    assert kept is not None and len(kept) == 3
    given_up = set(range(6)) - kept
    # While a still reports the partitions, they are not handed to b and a stays at epoch 1.
    assert parts(clock.beat("b", 2, set())) in (None, set())
    assert clock.beat("a", 1, set(range(6))).member_epoch == 1
    # a reports the revocation: it moves to epoch 2.
    done = clock.beat("a", 1, kept)
    assert done.member_epoch == 2
    # b now gets the released partitions.
    got = clock.beat("b", 2, set())
    assert parts(got) == given_up
    clock.beat("b", 2, given_up)
    assert clock.group().state == "Stable"


def test_three_members_balance_and_never_share_a_partition() -> None:
    clock = Clock()
    members = [Member(clock, name) for name in "abc"]
    for index in range(3):
        members[index].beat()
        for _ in range(6):
            for member in members[: index + 1]:
                member.beat()
                held = [p for m in members for p in m.owned]
                assert len(held) == len(set(held)), "a partition had two owners"
    assert sorted(len(m.owned) for m in members) == [2, 2, 2]
    assert {p for m in members for p in m.owned} == set(range(6))
    # Sticky: a fourth member does not reshuffle what stays.
    before = {m.member_id: set(m.owned) for m in members}
    d = Member(clock, "d")
    members.append(d)
    settle(members)
    for m in members[:3]:
        assert m.owned <= before[m.member_id]


def test_leave_frees_partitions_for_the_others() -> None:
    clock = Clock()
    a, b = Member(clock, "a"), Member(clock, "b")
    a.beat()
    b.beat()
    settle([a, b])
    assert len(a.owned) == len(b.owned) == 3
    left = clock.beat("b", -1)
    assert (left.error_code, left.member_epoch) == (ErrorCode.NONE, -1)
    a.beat()
    assert a.owned == set(range(6))
    assert set(clock.group().members) == {"a"}


def test_silent_member_is_removed_after_the_session_timeout() -> None:
    clock = Clock()
    a, b = Member(clock, "a"), Member(clock, "b")
    a.beat()
    b.beat()
    settle([a, b])
    for _ in range(int(SESSION_MS / INTERVAL_MS) + 2):  # only a keeps heartbeating
        clock.advance(INTERVAL_MS)
        a.beat()
    assert set(clock.group().members) == {"a"}
    assert a.owned == set(range(6))
    # The expired member is told so when it comes back.
    assert clock.beat("b", b.epoch, b.owned).error_code is ErrorCode.UNKNOWN_MEMBER_ID


def test_member_that_does_not_revoke_in_time_is_removed() -> None:
    clock = Clock()
    a = Member(clock, "a", rebalance_timeout_ms=2_000)
    a.beat()
    Member(clock, "b").beat()
    clock.beat("a", a.epoch, a.owned)  # told to revoke, never confirms
    assert clock.group().members["a"].revoking
    for _ in range(5):
        clock.advance(INTERVAL_MS)
        clock.beat("b", 2, set())
    assert "a" not in clock.group().members


def test_fencing_on_a_wrong_epoch() -> None:
    clock = Clock()
    a = Member(clock, "a")
    a.beat()
    assert clock.beat("a", 5, a.owned).error_code is ErrorCode.FENCED_MEMBER_EPOCH
    assert clock.beat("zz", 1, set()).error_code is ErrorCode.UNKNOWN_MEMBER_ID
    # A lost answer: the previous epoch is accepted while the member claims nothing it no longer has.
    Member(clock, "b").beat()
    told = clock.beat("a", 1, set(range(6)))
    kept = parts(told)
    assert kept is not None
    assert clock.beat("a", 1, kept).member_epoch == 2
    assert clock.beat("a", 1, kept).error_code is ErrorCode.NONE
    assert clock.beat("a", 1, set(range(6))).error_code is ErrorCode.FENCED_MEMBER_EPOCH
    # A fenced member rejoins with epoch 0 and starts from nothing.
    rejoined = clock.beat("a", 0)
    assert rejoined.error_code is ErrorCode.NONE and rejoined.member_epoch >= 2


def test_static_member_temporary_leave_keeps_its_partitions() -> None:
    clock = Clock()
    a = Member(clock, "a", instance_id="host-a")
    b = Member(clock, "b", instance_id="host-b")
    a.beat()
    b.beat()
    settle([a, b])
    held_by_b = set(b.owned)
    epoch_before = clock.group().group_epoch
    left = clock.beat("b", -2, instance_id="host-b")
    assert (left.error_code, left.member_epoch) == (ErrorCode.NONE, -2)
    # Nobody else gets b's partitions while it is away, and no rebalance happens.
    a.beat()
    assert not a.owned & held_by_b
    assert clock.group().group_epoch == epoch_before
    # The same instance under a new member id takes b's place and partitions.
    back = clock.beat("b2", 0, instance_id="host-b")
    assert back.error_code is ErrorCode.NONE
    assert parts(back) == held_by_b
    assert clock.group().group_epoch == epoch_before


def test_returning_static_member_gets_its_new_target_not_its_old_partitions() -> None:
    clock = Clock()
    a, b = Member(clock, "a"), Member(clock, "b", instance_id="host-b")
    settle([a, b])
    assert len(b.owned) == 3
    clock.beat("b", -2, instance_id="host-b")
    # c joins while b is away: the new target gives each of the three members two partitions.
    c = Member(clock, "c")
    settle([a, c])
    back = Member(clock, "b2", instance_id="host-b")
    settle([a, back, c])
    owned = [a.owned, back.owned, c.owned]
    assert [len(partitions) for partitions in owned] == [2, 2, 2]
    assert set().union(*owned) == set(range(6))
    assert clock.group().state == "Stable"


def test_static_instance_still_in_use_is_refused() -> None:
    clock = Clock()
    Member(clock, "a", instance_id="host-a").beat()
    result = clock.beat("other", 0, instance_id="host-a")
    assert result.error_code is ErrorCode.UNRELEASED_INSTANCE_ID


def test_static_member_that_stays_away_expires() -> None:
    clock = Clock()
    a, b = Member(clock, "a"), Member(clock, "b", instance_id="host-b")
    a.beat()
    b.beat()
    settle([a, b])
    clock.beat("b", -2, instance_id="host-b")
    for _ in range(int(SESSION_MS / INTERVAL_MS) + 2):
        clock.advance(INTERVAL_MS)
        a.beat()
    assert a.owned == set(range(6))


def test_request_validation_and_assignors() -> None:
    clock = Clock()
    assert clock.beat("a", 0, server_assignor="sticky").error_code is ErrorCode.UNSUPPORTED_ASSIGNOR
    assert clock.beat("a", 0, rebalance_timeout_ms=-1).error_code is ErrorCode.INVALID_REQUEST
    assert clock.beat("a", 0, group_id="").error_code is ErrorCode.INVALID_REQUEST
    assert clock.beat("a", -2).error_code is ErrorCode.INVALID_REQUEST  # -2 needs an instance id
    first = clock.beat("a", 0, server_assignor="range")
    second = clock.beat("b", 0, server_assignor="range")
    assert first.error_code is second.error_code is ErrorCode.NONE
    group = clock.group()
    assert group.assignor == "range"
    # range: contiguous blocks in member-id order.
    assert {p for _, p in group.target["a"]} == {0, 1, 2}
    assert {p for _, p in group.target["b"]} == {3, 4, 5}


def test_new_partitions_bump_the_group_epoch() -> None:
    clock = Clock(partitions=2)
    a = Member(clock, "a")
    a.beat()
    assert a.owned == {0, 1}
    clock.topics[TOPIC] = TopicInfo(TOPIC, TOPIC_ID, 4)
    result = a.beat()
    assert result.member_epoch == 2 and a.owned == {0, 1, 2, 3}


def commit(clock: Clock, member_id: str, epoch: int, partition: int = 0, offset: int = 5) -> ErrorCode:
    request = OffsetCommit(GROUP, [OffsetCommitTopic(TOPIC, [OffsetCommitPartition(partition, offset)])],
                           generation_id=epoch, member_id=member_id)
    result = clock.call("offset_commit", request)
    assert isinstance(result, OffsetCommitResult)
    return result.topics[0].partitions[0].error_code


def test_offset_commit_checks_the_member_epoch() -> None:
    clock = Clock()
    a = Member(clock, "a")
    a.beat()
    assert commit(clock, "a", 1) is ErrorCode.NONE
    assert commit(clock, "a", 0) is ErrorCode.STALE_MEMBER_EPOCH
    assert commit(clock, "nobody", 1) is ErrorCode.UNKNOWN_MEMBER_ID
    assert commit(clock, "", -1) is ErrorCode.UNKNOWN_MEMBER_ID  # the group is not empty
    fetched = clock.call("offset_fetch", OffsetFetch([OffsetFetchGroup(GROUP, None)]))
    assert isinstance(fetched, OffsetFetchResult)
    assert fetched.groups[0].topics[0].partitions[0].committed_offset == 5
    assert clock.records, "the commit must be persisted"
    clock.beat("a", -1)
    assert commit(clock, "", -1, offset=9) is ErrorCode.NONE  # admin commit into the empty group


def test_classic_and_consumer_groups_do_not_mix() -> None:
    clock = Clock()
    Member(clock, "a").beat()
    join = JoinGroup(GROUP, 10_000, "", "consumer", [JoinGroupProtocol("range", b"")], rebalance_timeout_ms=10_000,
                     api_version=5)
    result = clock.call("join_group", join)
    assert isinstance(result, JoinGroupResult)
    assert result.error_code is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    clock.call("join_group", JoinGroup("classic-g", 10_000, "", "consumer", [JoinGroupProtocol("range", b"")],
                                       rebalance_timeout_ms=10_000, api_version=3))
    refused = clock.beat("x", 0, group_id="classic-g")
    assert refused.error_code is ErrorCode.GROUP_ID_NOT_FOUND
    assert refused.error_message and "not a consumer group" in refused.error_message


def test_idle_classic_group_converts_and_keeps_its_offsets() -> None:
    clock = Clock()
    assert commit(clock, "", -1, offset=42) is ErrorCode.NONE  # a "simple" classic group with offsets
    assert GROUP in clock.coordinator.groups
    assert Member(clock, "a").beat().error_code is ErrorCode.NONE
    assert GROUP not in clock.coordinator.groups
    fetched = clock.call("offset_fetch", OffsetFetch([OffsetFetchGroup(GROUP, None)]))
    assert isinstance(fetched, OffsetFetchResult)
    assert fetched.groups[0].topics[0].partitions[0].committed_offset == 42


def test_a_member_from_before_a_restart_is_told_to_rejoin_not_that_the_group_is_gone() -> None:
    """After a restart a KIP-848 group's offsets come back as an idle classic group and its members keep
    heartbeating with their old epochs: UNKNOWN_MEMBER_ID (rejoin with epoch 0), which the client
    handles, rather than GROUP_ID_NOT_FOUND, which librdkafka treats as fatal."""
    clock = Clock()
    assert commit(clock, "", -1, offset=42) is ErrorCode.NONE
    stale = clock.beat("a", 7)
    assert stale.error_code is ErrorCode.UNKNOWN_MEMBER_ID
    assert GROUP in clock.coordinator.groups  # nothing converted by the stale heartbeat
    assert Member(clock, "a").beat().error_code is ErrorCode.NONE
    fetched = clock.call("offset_fetch", OffsetFetch([OffsetFetchGroup(GROUP, None)]))
    assert isinstance(fetched, OffsetFetchResult)
    assert fetched.groups[0].topics[0].partitions[0].committed_offset == 42


def test_list_and_describe() -> None:
    clock = Clock()
    a = Member(clock, "a")
    a.beat()
    listed = clock.call("list_groups", ListGroups())
    assert isinstance(listed, ListGroupsResult)
    [group] = listed.groups
    assert (group.group_id, group.protocol_type, group.group_type, group.group_state) == (
        GROUP, "consumer", "consumer", "Stable")
    only_classic = clock.call("list_groups", ListGroups(types_filter=["classic"]))
    assert isinstance(only_classic, ListGroupsResult) and not only_classic.groups
    described = clock.call("consumer_group_describe", ConsumerGroupDescribe([GROUP, "nope"]))
    assert isinstance(described, ConsumerGroupDescribeResult)
    ok, missing = described.groups
    assert ok.error_code is ErrorCode.NONE and ok.group_epoch == 1 and ok.assignor_name == "uniform"
    [member] = ok.members
    assert member.member_id == "a" and member.subscribed_topic_names == [TOPIC]
    assert member.assignment[0].topic_name == TOPIC and member.assignment[0].partitions == list(range(6))
    assert missing.error_code is ErrorCode.GROUP_ID_NOT_FOUND
    classic = clock.call("describe_groups", DescribeGroups([GROUP]))
    assert isinstance(classic, DescribeGroupsResult)
    assert classic.groups[0].group_state == "Dead" and "not a classic group" in (classic.groups[0].error_message or "")


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_members_with_different_subscriptions(assignor: str) -> None:
    clock = Clock()
    other_id = uuid.UUID(int=8)
    clock.topics["other"] = TopicInfo("other", other_id, 2)
    a = Member(clock, "a", server_assignor=assignor)
    b = Member(clock, "b", subscribed_topic_names=[TOPIC, "other"], server_assignor=assignor)
    a.beat()
    b.beat()
    settle([a, b])
    group = clock.group()
    assert all(tid == TOPIC_ID for tid, _ in group.target["a"])
    every = [tp for tps in group.target.values() for tp in tps]
    assert len(every) == len(set(every)) == 8


def test_admin_reset_only_while_the_consumer_group_is_empty() -> None:
    clock = Clock()
    Member(clock, "a").beat()
    with pytest.raises(KafkaError) as refused:
        clock.coordinator.reset_offsets(GROUP, {(TOPIC, 0): 3}, clock.now)
    assert refused.value.code is ErrorCode.NON_EMPTY_GROUP
    clock.beat("a", -1)
    records = clock.coordinator.reset_offsets(GROUP, {(TOPIC, 0): 3}, clock.now)
    assert len(records) == 1
    assert GROUP not in clock.coordinator.groups  # no classic twin
    assert clock.group().offsets[(TOPIC, 0)].offset == 3


def test_a_groups_own_configs_set_its_sessions_and_heartbeat_interval() -> None:
    """GROUP config resources: the group's consumer.heartbeat.interval.ms is what its members are told, and
    its consumer.session.timeout.ms how long a silent member keeps its partitions; other groups keep the
    broker's settings."""
    clock = Clock()
    clock.coordinator.consumer.group_overrides[GROUP] = (3 * SESSION_MS, 2 * INTERVAL_MS)
    joined = clock.beat("m-a", 0)
    assert joined.heartbeat_interval_ms == 2 * INTERVAL_MS
    assert clock.beat("m-b", 0, group_id="other-app").heartbeat_interval_ms == INTERVAL_MS
    clock.advance(2 * SESSION_MS)  # past the broker's session, within the group's own
    assert joined.member_id in clock.group().members
    clock.advance(SESSION_MS + 1)
    assert joined.member_id not in clock.group().members
