"""JoinGroup/SyncGroup: the rebalance dance, member ids, protocol choice and the timers around it."""

from __future__ import annotations

from coordinator_driver import GROUP, REBALANCE_MS, SESSION_MS, Driver, consumer_protocols

from sluice.coordinator import CoordinatorConfig
from sluice.coordinator.consumer_protocol import subscribed_topics
from sluice.coordinator.group import TRANSITIONS, ClassicGroup, GroupState, IllegalStateTransition
from sluice.coordinator.messages import JoinGroupProtocol
from sluice.errors import ErrorCode


def test_single_member_rebalance_dance_ends_stable_with_its_assignment() -> None:
    driver = Driver()
    member_id, token = driver.join_with_member_id("alpha")
    assert member_id == "alpha-1"
    joined = driver.join_result(token)
    assert joined.error_code == ErrorCode.NONE
    assert (joined.generation_id, joined.leader, joined.member_id) == (1, member_id, member_id)
    assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")
    assert [m.member_id for m in joined.members] == [member_id]
    assert subscribed_topics(joined.members[0].metadata) == ["orders"]
    assert driver.state() == "CompletingRebalance"

    synced = driver.sync_result(driver.sync(member_id, 1, {member_id: b"partitions 0-3"}))
    assert synced.error_code == ErrorCode.NONE
    assert synced.assignment == b"partitions 0-3"
    assert (synced.protocol_type, synced.protocol_name) == ("consumer", "range")
    assert driver.state() == "Stable"
    assert driver.records, "the assignment must be persisted before the SyncGroup reply"


def test_three_members_followers_wait_for_the_leaders_sync() -> None:
    driver = Driver()
    ids = {}
    for client in ("a", "b", "c"):
        ids[client] = driver.join_result(driver.join(client_id=client)).member_id
    tokens = {client: driver.join(member_id=ids[client], client_id=client) for client in ids}
    results = {client: driver.join_result(tokens[client]) for client in ids}
    leader = results["a"].leader
    assert leader == ids["a"], "the first member to join leads"
    assert {r.generation_id for r in results.values()} == {1}
    assert len(results["a"].members) == 3
    assert results["b"].members == [] and results["c"].members == []

    follower_tokens = [driver.sync(ids[c], 1) for c in ("b", "c")]
    assert not any(t in driver.replies for t in follower_tokens), "followers are parked"
    leader_token = driver.sync(leader, 1, {ids[c]: c.encode() * 2 for c in ids})
    assignments = [driver.sync_result(t).assignment for t in [leader_token, *follower_tokens]]
    assert assignments == [b"aa", b"bb", b"cc"]
    assert driver.state() == "Stable"


def test_join_v3_gets_a_member_id_without_a_second_round_trip() -> None:
    driver = Driver()
    result = driver.join_result(driver.join(client_id="old", api_version=3))
    assert result.error_code == ErrorCode.NONE
    assert result.member_id == "old-1"
    assert result.generation_id == 1


def test_join_v4_without_member_id_gets_member_id_required_and_no_membership() -> None:
    driver = Driver()
    result = driver.join_result(driver.join(client_id="new", api_version=4))
    assert result.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert result.member_id == "new-1"
    assert driver.heartbeat("new-1", 0) == ErrorCode.UNKNOWN_MEMBER_ID


def test_unused_pending_member_id_lapses_after_the_session_timeout() -> None:
    driver = Driver()
    pending = driver.join_result(driver.join(client_id="slow")).member_id
    driver.advance(SESSION_MS)
    late = driver.join_result(driver.join(member_id=pending, client_id="slow"))
    assert late.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_rebalance_waits_for_a_pending_member_to_come_back() -> None:
    driver = Driver()
    first = driver.join_result(driver.join(client_id="a")).member_id
    second = driver.join_result(driver.join(client_id="b")).member_id
    token = driver.join(member_id=first, client_id="a")
    assert token not in driver.replies, "b still holds a pending member id"
    other = driver.join(member_id=second, client_id="b")
    assert driver.join_result(token).generation_id == driver.join_result(other).generation_id == 1


def test_session_timeout_outside_the_bounds_is_rejected() -> None:
    driver = Driver()
    for timeout in (5_999, 1_800_001):
        result = driver.join_result(driver.join(session_timeout_ms=timeout))
        assert result.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert driver.state() is None, "a refused join leaves no group behind"


def test_join_with_an_empty_group_id_is_invalid() -> None:
    driver = Driver()
    assert driver.join_result(driver.join(group_id="")).error_code == ErrorCode.INVALID_GROUP_ID


def test_group_max_size_refuses_the_extra_member() -> None:
    driver = Driver(CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_max_size=1))
    driver.stable_group("a")
    refused = driver.join_result(driver.join(client_id="b"))
    assert refused.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert len(driver.coordinator.groups[GROUP].members) == 1


def test_protocol_type_mismatch_is_inconsistent() -> None:
    driver = Driver()
    driver.stable_group("a")
    result = driver.join_result(driver.join(client_id="b", protocol_type="connect"))
    assert result.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_no_protocol_in_common_is_inconsistent() -> None:
    driver = Driver()
    driver.stable_group("a")
    cooperative_only = consumer_protocols("orders", names=("cooperative-sticky",))
    result = driver.join_result(driver.join(client_id="b", protocols=cooperative_only))
    assert result.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_chosen_is_common_to_all_and_wins_the_vote() -> None:
    driver = Driver()
    preferences = {
        "a": ("range", "roundrobin", "sticky"),
        "b": ("roundrobin", "range", "sticky"),
        "c": ("sticky", "roundrobin"),
    }
    ids = {c: driver.join_result(driver.join(client_id=c)).member_id for c in preferences}
    tokens = [
        driver.join(member_id=ids[c], client_id=c, protocols=consumer_protocols("t", names=names))
        for c, names in preferences.items()
    ]
    # range is not supported by c; among roundrobin and sticky, roundrobin has two first-choice votes.
    assert {driver.join_result(t).protocol_name for t in tokens} == {"roundrobin"}


def test_initial_rebalance_delay_holds_the_first_generation() -> None:
    driver = Driver(CoordinatorConfig(group_initial_rebalance_delay_ms=3_000))
    _, token = driver.join_with_member_id("a")
    driver.advance(2_999)
    assert token not in driver.replies
    driver.advance(1)
    assert driver.join_result(token).generation_id == 1


def test_initial_delay_is_extended_while_members_keep_arriving() -> None:
    driver = Driver(CoordinatorConfig(group_initial_rebalance_delay_ms=3_000))
    _, first = driver.join_with_member_id("a")
    driver.advance(2_000)
    _, second = driver.join_with_member_id("b")
    driver.advance(1_000)
    assert first not in driver.replies, "a member arrived during the delay: wait again"
    driver.advance(3_000)
    assert driver.join_result(first).generation_id == driver.join_result(second).generation_id == 1
    assert len(driver.join_result(first).members) == 2


def test_initial_delay_extension_is_capped_by_the_rebalance_timeout() -> None:
    driver = Driver(CoordinatorConfig(group_initial_rebalance_delay_ms=3_000))
    _, first = driver.join_with_member_id("a", rebalance_timeout_ms=4_000)
    driver.advance(1_000)
    driver.join_with_member_id("b", rebalance_timeout_ms=4_000)
    driver.advance(2_000)  # t=3000: extended by min(3000, 4000-3000)
    driver.join_with_member_id("c", rebalance_timeout_ms=4_000)
    driver.advance(999)
    assert first not in driver.replies
    driver.advance(1)  # t=4000: the budget is spent although c just arrived
    assert driver.join_result(first).generation_id == 1


def test_rebalance_timeout_removes_members_that_do_not_rejoin() -> None:
    driver = Driver()
    ids = driver.stable_group("a", "b")
    token = driver.join(member_id=ids["a"], client_id="a")  # the leader asks for a rebalance
    assert driver.state() == "PreparingRebalance"
    for _ in range(REBALANCE_MS // 3_000 - 1):  # b stays alive but ignores the rebalance
        driver.advance(3_000)
        assert driver.heartbeat(ids["b"], 1) == ErrorCode.REBALANCE_IN_PROGRESS
    driver.advance(2_999)
    assert token not in driver.replies
    driver.advance(1)
    rejoined = driver.join_result(token)
    assert rejoined.generation_id == 2
    assert [m.member_id for m in rejoined.members] == [ids["a"]]
    assert driver.heartbeat(ids["b"], 2) == ErrorCode.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_is_the_largest_of_the_members() -> None:
    driver = Driver()
    ids = driver.stable_group("a", "b")
    token = driver.join(member_id=ids["a"], client_id="a", rebalance_timeout_ms=5_000)
    driver.join(member_id=ids["b"], client_id="b", rebalance_timeout_ms=60_000)
    assert driver.join_result(token).generation_id == 2, "everyone rejoined: no waiting at all"
    group = driver.coordinator.groups[GROUP]
    assert group.rebalance_timeout_ms() == 60_000


def test_member_that_never_syncs_is_removed_and_parked_followers_are_told_to_rejoin() -> None:
    driver = Driver()
    ids = {c: driver.join_result(driver.join(client_id=c)).member_id for c in ("a", "b")}
    tokens = [driver.join(member_id=ids[c], client_id=c) for c in ids]
    follower = driver.sync(ids["b"], 1)
    assert follower not in driver.replies
    for _ in range(REBALANCE_MS // 3_000 - 1):  # the leader heartbeats but never syncs
        driver.advance(3_000)
        assert driver.heartbeat(ids["a"], 1) == ErrorCode.NONE
    driver.advance(2_999)
    assert follower not in driver.replies
    driver.advance(1)
    assert driver.sync_result(follower).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert ids["a"] not in driver.coordinator.groups[GROUP].members
    assert driver.join_result(tokens[0]).leader == ids["a"]


def test_follower_rejoin_with_same_metadata_in_stable_does_not_rebalance() -> None:
    driver = Driver()
    ids = driver.stable_group("a", "b")
    result = driver.join_result(driver.join(member_id=ids["b"], client_id="b"))
    assert (result.error_code, result.generation_id, result.members) == (ErrorCode.NONE, 1, [])
    assert driver.state() == "Stable"


def test_new_subscription_from_a_follower_triggers_a_rebalance() -> None:
    driver = Driver()
    ids = driver.stable_group("a", "b")
    token = driver.join(member_id=ids["b"], client_id="b", protocols=consumer_protocols("orders", "refunds"))
    assert token not in driver.replies
    assert driver.state() == "PreparingRebalance"
    assert driver.heartbeat(ids["a"], 1) == ErrorCode.REBALANCE_IN_PROGRESS


def test_sync_during_rebalance_and_from_strangers_is_refused() -> None:
    driver = Driver()
    ids = driver.stable_group("a", "b")
    assert driver.sync_result(driver.sync("nobody", 1)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert driver.sync_result(driver.sync(ids["a"], 7)).error_code == ErrorCode.ILLEGAL_GENERATION
    driver.join(member_id=ids["a"], client_id="a")
    assert driver.sync_result(driver.sync(ids["b"], 1)).error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_sync_with_a_different_protocol_is_inconsistent_kip_559() -> None:
    driver = Driver()
    ids = driver.stable_group("a")
    wrong_type = driver.sync(ids["a"], 1, protocol_type="connect", protocol_name="range")
    wrong_name = driver.sync(ids["a"], 1, protocol_type="consumer", protocol_name="roundrobin")
    right = driver.sync(ids["a"], 1, protocol_type="consumer", protocol_name="range")
    assert driver.sync_result(wrong_type).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert driver.sync_result(wrong_name).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert driver.sync_result(right).error_code == ErrorCode.NONE


def test_join_response_names_protocol_type_and_protocol_kip_559() -> None:
    driver = Driver()
    protocols = [JoinGroupProtocol("sticky", b"\x00\x01")]
    result = driver.join_result(driver.join(api_version=3, protocol_type="connect", protocols=protocols))
    assert (result.protocol_type, result.protocol_name) == ("connect", "sticky")
    assert result.members[0].metadata == b"\x00\x01"


def test_join_v0_without_rebalance_timeout_uses_the_session_timeout() -> None:
    driver = Driver()
    driver.join(api_version=0, rebalance_timeout_ms=-1)
    assert driver.coordinator.groups[GROUP].rebalance_timeout_ms() == SESSION_MS


def test_join_accepts_a_reason() -> None:
    driver = Driver()
    result = driver.join_result(driver.join(api_version=3, reason="rebalance requested by user"))
    assert result.error_code == ErrorCode.NONE


def test_state_table_refuses_illegal_moves() -> None:
    group = ClassicGroup("g")
    assert GroupState.STABLE not in TRANSITIONS[GroupState.EMPTY]
    try:
        group.transition(GroupState.STABLE, 0)
    except IllegalStateTransition:
        pass
    else:
        raise AssertionError("Empty -> Stable must be refused")
    assert group.state is GroupState.EMPTY
