"""Group requests that must be refused, sent on the bare wire so nothing in a client library can hide them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from group_helpers import (
    RawMember,
    assignment,
    create_topic,
    decode_assignment,
    delete_groups,
    group_state,
    wait_for,
)

from sluice.errors import ErrorCode as E


@pytest.fixture
def leader(fast_bootstrap: str, group_name: str, topic_name: str) -> Iterator[RawMember]:
    """The only member of a Stable group holding partition 0 of `topic_name`."""
    # The topic exists: Kafka answers commits for missing partitions UNKNOWN_TOPIC_OR_PARTITION.
    create_topic(fast_bootstrap, topic_name, 2)
    member = RawMember(fast_bootstrap, group_name)
    joined = member.join_fully([topic_name])
    assert joined.leader == member.member_id and joined.generation_id == 1
    synced = member.sync({member.member_id: assignment({topic_name: [0]})})
    assert synced.error_code == E.NONE
    assert decode_assignment(synced.assignment) == {topic_name: [0]}
    yield member
    member.close()


def test_join_v4_without_member_id_is_told_to_come_back_with_one(fast_bootstrap: str, group_name: str,
                                                                topic_name: str) -> None:
    member = RawMember(fast_bootstrap, group_name)
    first = member.join([topic_name], version=4)
    assert first.error_code == E.MEMBER_ID_REQUIRED
    assert first.member_id and first.generation_id == -1
    second = member.join([topic_name], version=4)
    assert second.error_code == E.NONE and second.member_id == first.member_id
    # Before v4 there is no second round trip: the first join makes the member.
    old = RawMember(fast_bootstrap, f"{group_name}-v3")
    joined = old.join([topic_name], version=3)
    assert joined.error_code == E.NONE and joined.member_id and joined.leader == joined.member_id
    member.close()
    old.close()


def test_heartbeats_from_strangers_and_stale_generations(fast_bootstrap: str, leader: RawMember,
                                                         group_name: str) -> None:
    assert leader.heartbeat() == E.NONE
    assert leader.heartbeat(member_id="nobody-0000") == E.UNKNOWN_MEMBER_ID
    assert leader.heartbeat(generation=leader.generation + 1) == E.ILLEGAL_GENERATION
    assert leader.heartbeat(generation=leader.generation - 1) == E.ILLEGAL_GENERATION
    stranger = RawMember(fast_bootstrap, f"{group_name}-never-created")
    stranger.member_id = "ghost"
    assert stranger.heartbeat(generation=1) == E.UNKNOWN_MEMBER_ID
    stranger.close()
    # None of the refusals disturbed the member.
    assert leader.heartbeat() == E.NONE


def test_sync_and_commit_with_wrong_identity(leader: RawMember, topic_name: str) -> None:
    assert leader.sync(generation=leader.generation + 1).error_code == E.ILLEGAL_GENERATION
    assert leader.commit(topic_name, 0, 5, generation=leader.generation + 1) == E.ILLEGAL_GENERATION
    real_id = leader.member_id
    leader.member_id = "impostor"
    assert leader.sync().error_code == E.UNKNOWN_MEMBER_ID
    assert leader.commit(topic_name, 0, 5) == E.UNKNOWN_MEMBER_ID
    leader.member_id = real_id
    assert leader.commit(topic_name, 0, 5) == E.NONE


def test_unknown_member_ids_cannot_join_or_leave(fast_bootstrap: str, leader: RawMember, group_name: str,
                                                 topic_name: str) -> None:
    stranger = RawMember(fast_bootstrap, group_name)
    stranger.member_id = "made-up-id"
    assert stranger.join([topic_name]).error_code == E.UNKNOWN_MEMBER_ID
    assert stranger.leave() == E.UNKNOWN_MEMBER_ID
    stranger.close()
    # LeaveGroup before v3 names one member and answers with its error at the top level.
    cls = leader.client.request_class("LeaveGroup")
    assert leader.client.call("LeaveGroup", 1, cls(group_id=group_name, member_id="made-up-id")).error_code \
        == E.UNKNOWN_MEMBER_ID
    assert leader.client.call("LeaveGroup", 1, cls(group_id=group_name, member_id=leader.member_id)).error_code \
        == E.NONE
    assert leader.heartbeat() == E.UNKNOWN_MEMBER_ID


def test_requests_in_the_middle_of_a_rebalance(fast_bootstrap: str, leader: RawMember, group_name: str,
                                               topic_name: str) -> None:
    newcomer = RawMember(fast_bootstrap, group_name)
    answers: dict[str, Any] = {}
    joining = threading.Thread(target=lambda: answers.setdefault("join", newcomer.join_fully([topic_name])))
    joining.start()  # parked until the leader rejoins too
    wait_for(lambda: group_state(fast_bootstrap, group_name)[0] == "PREPARING_REBALANCING", 10, "a rebalance")
    # PreparingRebalance: heartbeats and syncs say so; commits of the old generation still count.
    assert leader.heartbeat() == E.REBALANCE_IN_PROGRESS
    assert leader.sync().error_code == E.REBALANCE_IN_PROGRESS
    assert leader.commit(topic_name, 0, 1) == E.NONE
    rejoined = leader.join([topic_name])
    joining.join(10)
    assert rejoined.error_code == E.NONE and rejoined.generation_id == 2 == answers["join"].generation_id
    assert {m.member_id for m in rejoined.members} == {leader.member_id, newcomer.member_id}
    # CompletingRebalance: the new generation is known but not its assignment, so no commits yet.
    assert leader.heartbeat() == E.NONE
    assert leader.commit(topic_name, 0, 2) == E.REBALANCE_IN_PROGRESS
    syncing = threading.Thread(target=lambda: answers.setdefault("sync", newcomer.sync()))
    syncing.start()  # parked until the leader's assignment arrives
    plan = {leader.member_id: assignment({topic_name: [0]}), newcomer.member_id: assignment({topic_name: [1]})}
    assert decode_assignment(leader.sync(plan).assignment) == {topic_name: [0]}
    syncing.join(10)
    assert decode_assignment(answers["sync"].assignment) == {topic_name: [1]}
    assert leader.commit(topic_name, 0, 2) == E.NONE
    newcomer.close()


def test_a_replaced_static_member_is_fenced(fast_bootstrap: str, group_name: str, topic_name: str) -> None:
    first = RawMember(fast_bootstrap, group_name)
    first.join_fully([topic_name], instance_id="instance-1")
    assert first.sync({first.member_id: assignment({topic_name: [0]})}).error_code == E.NONE
    # The same group.instance.id starts again elsewhere: it takes over, the old process is fenced.
    second = RawMember(fast_bootstrap, group_name)
    taken_over = second.join([topic_name], instance_id="instance-1")
    assert taken_over.error_code == E.NONE and taken_over.generation_id == first.generation
    assert decode_assignment(second.sync().assignment) == {topic_name: [0]}

    def heartbeat(member: RawMember) -> int:
        cls = member.client.request_class("Heartbeat")
        request = cls(group_id=group_name, member_id=member.member_id, generation_id=member.generation,
                      group_instance_id="instance-1")
        return member.client.call("Heartbeat", 4, request).error_code

    assert heartbeat(first) == E.FENCED_INSTANCE_ID
    assert heartbeat(second) == E.NONE
    first.close()
    second.close()


def test_inconsistent_protocols_are_refused(fast_bootstrap: str, leader: RawMember, group_name: str,
                                            topic_name: str) -> None:
    other = RawMember(fast_bootstrap, group_name)
    # A Kafka Connect worker cannot join a consumer group...
    assert other.join([topic_name], protocol_type="connect").error_code == E.INCONSISTENT_GROUP_PROTOCOL
    # ...nor can a consumer whose assignors share nothing with the group's.
    assert other.join([topic_name], protocol="roundrobin").error_code == E.INCONSISTENT_GROUP_PROTOCOL
    other.close()
    assert leader.heartbeat() == E.NONE


def test_join_with_a_session_timeout_out_of_bounds(fast_bootstrap: str, group_name: str, topic_name: str) -> None:
    member = RawMember(fast_bootstrap, group_name)
    assert member.join([topic_name], session_timeout_ms=10).error_code == E.INVALID_SESSION_TIMEOUT
    member.close()


def test_delete_groups_refuses_a_group_with_members(fast_bootstrap: str, leader: RawMember,
                                                    group_name: str) -> None:
    missing = f"{group_name}-missing"
    assert delete_groups(fast_bootstrap, group_name, missing) == {
        group_name: E.NON_EMPTY_GROUP, missing: E.GROUP_ID_NOT_FOUND}
    assert leader.heartbeat() == E.NONE
    assert leader.leave() == E.NONE
    assert delete_groups(fast_bootstrap, group_name) == {group_name: E.NONE}
    assert delete_groups(fast_bootstrap, group_name) == {group_name: E.GROUP_ID_NOT_FOUND}
    # The departed member is unknown now, whatever generation it names.
    assert leader.heartbeat() == E.UNKNOWN_MEMBER_ID
