"""Heartbeats, session expiry, LeaveGroup and static membership (group.instance.id)."""

from __future__ import annotations

from coordinator_driver import GROUP, SESSION_MS, Driver, consumer_protocols

from sluice.coordinator import CoordinatorConfig
from sluice.coordinator.messages import MemberIdentity
from sluice.errors import ErrorCode


def delayed_driver() -> Driver:
    return Driver(CoordinatorConfig(group_initial_rebalance_delay_ms=3_000))


def static_stable_group(driver: Driver, *instances: str) -> dict[str, str]:
    """Static members skip MEMBER_ID_REQUIRED; returns instance id -> member id."""
    tokens = {i: driver.join(client_id=i, group_instance_id=i) for i in instances}
    # They arrive during the initial delay, so they share the first generation.
    driver.advance(3 * driver.config.group_initial_rebalance_delay_ms)
    results = {i: driver.join_result(t) for i, t in tokens.items()}
    members = {i: r.member_id for i, r in results.items()}
    leader = results[instances[0]].leader
    for member_id in members.values():
        if member_id != leader:
            driver.sync(member_id, 1)
    driver.sync(leader, 1, {m: f"for {i}".encode() for i, m in members.items()})
    assert driver.state() == "Stable"
    return members


# --- heartbeat -------------------------------------------------------------------------------


def test_heartbeat_errors_name_what_is_wrong() -> None:
    driver = Driver()
    ids = driver.stable_group("a")
    assert driver.heartbeat(ids["a"], 1) == ErrorCode.NONE
    assert driver.heartbeat(ids["a"], 2) == ErrorCode.ILLEGAL_GENERATION
    assert driver.heartbeat("stranger", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    other = Driver()
    assert other.heartbeat("anyone", 0) == ErrorCode.UNKNOWN_MEMBER_ID, "unknown group"


def test_heartbeat_during_rebalance_says_rebalance_in_progress() -> None:
    driver = Driver()
    ids = driver.stable_group("a", "b")
    driver.join(member_id=ids["a"], client_id="a")
    assert driver.heartbeat(ids["b"], 1) == ErrorCode.REBALANCE_IN_PROGRESS


def test_session_expiry_evicts_a_silent_member_and_rebalances_the_rest() -> None:
    driver = Driver()
    ids = driver.stable_group("a", "b")
    for _ in range(3):
        driver.advance(3_000)
        assert driver.heartbeat(ids["b"], 1) == ErrorCode.NONE
    driver.advance(SESSION_MS - 9_000 - 1)
    assert ids["a"] in driver.coordinator.groups[GROUP].members
    driver.advance(1)
    assert ids["a"] not in driver.coordinator.groups[GROUP].members
    assert driver.state() == "PreparingRebalance"
    assert driver.heartbeat(ids["b"], 1) == ErrorCode.REBALANCE_IN_PROGRESS
    rejoined = driver.join_result(driver.join(member_id=ids["b"], client_id="b"))
    assert (rejoined.generation_id, rejoined.leader) == (2, ids["b"])


def test_heartbeats_keep_a_member_alive_past_its_session_timeout() -> None:
    driver = Driver()
    ids = driver.stable_group("a")
    for _ in range(10):
        driver.advance(SESSION_MS - 1)
        assert driver.heartbeat(ids["a"], 1) == ErrorCode.NONE
    assert driver.state() == "Stable"


def test_next_deadline_is_none_without_groups_and_due_at_session_expiry() -> None:
    driver = Driver()
    assert driver.coordinator.next_deadline() is None
    driver.stable_group("a")
    assert driver.coordinator.next_deadline() == driver.now + SESSION_MS


# --- leave -----------------------------------------------------------------------------------


def test_clean_leave_rebalances_at_once_and_the_rest_settle_without_waiting() -> None:
    driver = Driver()
    ids = driver.stable_group("a", "b", "c")
    result = driver.leave(MemberIdentity(ids["a"], reason="shutting down"))
    assert [(m.member_id, m.error_code) for m in result.members] == [(ids["a"], ErrorCode.NONE)]
    assert driver.state() == "PreparingRebalance"
    assert driver.heartbeat(ids["b"], 1) == ErrorCode.REBALANCE_IN_PROGRESS
    first = driver.join(member_id=ids["b"], client_id="b")
    second = driver.join(member_id=ids["c"], client_id="c")
    # No timer had to fire: the last rejoin completes the generation on the spot.
    assert driver.join_result(first).generation_id == driver.join_result(second).generation_id == 2
    assert driver.join_result(first).leader == ids["b"], "leadership moves off the leaver"


def test_last_member_leaving_empties_the_group_immediately() -> None:
    driver = Driver()
    ids = driver.stable_group("a")
    before = len(driver.records)
    driver.leave(MemberIdentity(ids["a"]))
    assert driver.state() == "Empty"
    assert driver.coordinator.groups[GROUP].generation_id == 2
    assert len(driver.records) == before + 1, "the Empty generation is persisted"


def test_leave_reports_each_member_separately() -> None:
    driver = delayed_driver()
    ids = static_stable_group(driver, "i1", "i2")
    result = driver.leave(
        MemberIdentity("", group_instance_id="i2"),  # administrative removal by instance id
        MemberIdentity("ghost"),
        MemberIdentity("stale", group_instance_id="i1"),
    )
    errors = [m.error_code for m in result.members]
    assert errors == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID]
    assert result.error_code == ErrorCode.NONE
    assert list(driver.coordinator.groups[GROUP].members) == [ids["i1"]]


def test_leave_of_an_unknown_group_is_unknown_member_per_member() -> None:
    driver = Driver()
    result = driver.leave(MemberIdentity("x"))
    assert [m.error_code for m in result.members] == [ErrorCode.UNKNOWN_MEMBER_ID]


def test_leaving_with_a_pending_member_id_unblocks_the_rebalance() -> None:
    driver = Driver()
    first = driver.join_result(driver.join(client_id="a")).member_id
    pending = driver.join_result(driver.join(client_id="b")).member_id
    token = driver.join(member_id=first, client_id="a")
    assert token not in driver.replies
    driver.leave(MemberIdentity(pending))
    assert driver.join_result(token).generation_id == 1


def test_member_removed_while_parked_in_join_gets_unknown_member_id() -> None:
    driver = Driver()
    ids = driver.stable_group("a", "b")
    parked = driver.join(member_id=ids["b"], client_id="b", protocols=consumer_protocols("x"))
    driver.leave(MemberIdentity(ids["b"]))
    assert driver.join_result(parked).error_code == ErrorCode.UNKNOWN_MEMBER_ID


# --- static membership -----------------------------------------------------------------------


def test_static_member_restart_takes_over_without_a_rebalance() -> None:
    driver = delayed_driver()
    ids = static_stable_group(driver, "i1", "i2")
    records_before = len(driver.records)
    restarted = driver.join_result(driver.join(client_id="i2", group_instance_id="i2"))
    assert restarted.error_code == ErrorCode.NONE
    assert restarted.member_id not in (ids["i2"], "")
    assert (restarted.generation_id, restarted.leader) == (1, ids["i1"])
    assert driver.state() == "Stable"
    assert len(driver.records) == records_before + 1, "the new member id is persisted"
    synced = driver.sync_result(driver.sync(restarted.member_id, 1, group_instance_id="i2"))
    assert synced.assignment == b"for i2", "the old assignment carries over"


def test_static_leader_restart_on_v9_skips_assignment_but_sees_the_members() -> None:
    driver = delayed_driver()
    ids = static_stable_group(driver, "i1", "i2")
    restarted = driver.join_result(driver.join(client_id="i1", group_instance_id="i1", api_version=9))
    assert restarted.leader == restarted.member_id != ids["i1"]
    assert restarted.skip_assignment is True
    assert {m.group_instance_id for m in restarted.members} == {"i1", "i2"}
    assert driver.state() == "Stable"


def test_static_leader_restart_before_v9_is_told_the_old_leader_id_so_it_does_not_assign() -> None:
    driver = delayed_driver()
    ids = static_stable_group(driver, "i1", "i2")
    restarted = driver.join_result(driver.join(client_id="i1", group_instance_id="i1", api_version=8))
    assert restarted.leader == ids["i1"] != restarted.member_id
    assert (restarted.skip_assignment, restarted.members) == (False, [])
    assert driver.coordinator.groups[GROUP].leader_id == restarted.member_id, "it still leads"


def test_static_member_restart_with_new_subscription_rebalances() -> None:
    driver = delayed_driver()
    static_stable_group(driver, "i1", "i2")
    token = driver.join(client_id="i2", group_instance_id="i2", protocols=consumer_protocols("orders", "new"))
    assert token not in driver.replies
    assert driver.state() == "PreparingRebalance"


def test_stale_incarnation_of_a_static_member_is_fenced() -> None:
    driver = delayed_driver()
    ids = static_stable_group(driver, "i1")
    restarted = driver.join_result(driver.join(client_id="i1", group_instance_id="i1")).member_id
    assert driver.heartbeat(ids["i1"], 1, group_instance_id="i1") == ErrorCode.FENCED_INSTANCE_ID
    assert driver.heartbeat(restarted, 1, group_instance_id="i1") == ErrorCode.NONE
    stale_join = driver.join_result(driver.join(member_id=ids["i1"], client_id="i1", group_instance_id="i1"))
    assert stale_join.error_code == ErrorCode.FENCED_INSTANCE_ID
    stale_sync = driver.sync_result(driver.sync(ids["i1"], 1, group_instance_id="i1"))
    assert stale_sync.error_code == ErrorCode.FENCED_INSTANCE_ID


def test_restart_fences_the_parked_join_of_the_old_incarnation() -> None:
    driver = delayed_driver()
    ids = static_stable_group(driver, "i1", "i2")
    parked = driver.join(
        member_id=ids["i2"], client_id="i2", group_instance_id="i2", protocols=consumer_protocols("x")
    )
    assert parked not in driver.replies
    driver.join(client_id="i2", group_instance_id="i2")
    assert driver.join_result(parked).error_code == ErrorCode.FENCED_INSTANCE_ID


def test_static_member_that_misses_the_rebalance_keeps_its_place() -> None:
    driver = delayed_driver()
    ids = static_stable_group(driver, "i1", "i2")
    token = driver.join(
        member_id=ids["i1"], client_id="i1", group_instance_id="i1", protocols=consumer_protocols("y")
    )
    for _ in range(10):  # i2 is alive (heartbeats) but does not rejoin within the 30 s rebalance timeout
        driver.advance(3_000)
        driver.heartbeat(ids["i2"], 1, group_instance_id="i2")
    completed = driver.join_result(token)
    assert completed.generation_id == 2
    assert {m.member_id for m in completed.members} == {ids["i1"], ids["i2"]}, (
        "a dynamic member would be gone"
    )
    assert driver.heartbeat(ids["i2"], 1, group_instance_id="i2") == ErrorCode.ILLEGAL_GENERATION


def test_sole_static_member_may_restart_with_a_different_protocol() -> None:
    driver = delayed_driver()
    static_stable_group(driver, "i1")
    sticky = consumer_protocols("orders", names=("cooperative-sticky",))
    token = driver.join(client_id="i1", group_instance_id="i1", protocols=sticky)
    result = driver.join_result(token)
    assert result.error_code == ErrorCode.NONE, "its own old protocols must not outvote it"
    assert (result.generation_id, result.protocol_name) == (2, "cooperative-sticky")


def test_a_repeated_join_supersedes_the_parked_one() -> None:
    driver = Driver()
    ids = driver.stable_group("a", "b")
    first = driver.join(member_id=ids["a"], client_id="a")
    assert first not in driver.replies
    second = driver.join(member_id=ids["a"], client_id="a")
    assert driver.join_result(first).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert second not in driver.replies
    driver.join(member_id=ids["b"], client_id="b")
    assert driver.join_result(second).generation_id == 2


def test_new_member_stuck_in_a_long_rebalance_times_out_with_unknown_member_id() -> None:
    driver = Driver(CoordinatorConfig(group_initial_rebalance_delay_ms=0, new_member_join_timeout_ms=5_000))
    ids = driver.stable_group("a", "b")
    newcomer = driver.join(client_id="c", api_version=3)
    for _ in range(2):  # the old members stay alive but do not rejoin yet
        driver.advance(2_500)
        driver.heartbeat(ids["a"], 1)
        driver.heartbeat(ids["b"], 1)
    result = driver.join_result(newcomer)
    assert (result.error_code, result.member_id) == (ErrorCode.UNKNOWN_MEMBER_ID, "")
    assert set(driver.coordinator.groups[GROUP].members) == set(ids.values())
