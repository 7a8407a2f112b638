"""ListGroups, DescribeGroups and DeleteGroups."""

from __future__ import annotations

from coordinator_driver import GROUP, Driver

from sluice.coordinator.messages import (
    DeleteGroups,
    DeleteGroupsResult,
    DescribeGroups,
    DescribeGroupsResult,
    ListGroups,
    ListGroupsResult,
    OffsetCommit,
    OffsetCommitPartition,
    OffsetCommitTopic,
)
from sluice.errors import ErrorCode


def simple_commit(driver: Driver, group_id: str) -> None:
    driver.call(
        "offset_commit", OffsetCommit(group_id, [OffsetCommitTopic("t", [OffsetCommitPartition(0, 1)])])
    )


def listed(driver: Driver, states: list[str] | None = None, types: list[str] | None = None) -> dict[str, str]:
    result = driver.call("list_groups", ListGroups(states or [], types or []))
    assert isinstance(result, ListGroupsResult)
    return {g.group_id: g.group_state for g in result.groups}


def test_list_groups_filters_by_state_case_insensitively() -> None:
    driver = Driver()
    driver.stable_group("a")
    simple_commit(driver, "offsets-only")
    assert listed(driver) == {GROUP: "Stable", "offsets-only": "Empty"}
    assert listed(driver, states=["stable"]) == {GROUP: "Stable"}
    assert listed(driver, states=["Empty", "Dead"]) == {"offsets-only": "Empty"}


def test_list_groups_type_filter_knows_only_classic_groups() -> None:
    driver = Driver()
    driver.stable_group("a")
    assert listed(driver, types=["Classic"]) == {GROUP: "Stable"}
    assert listed(driver, types=["consumer"]) == {}


def test_list_groups_reports_protocol_type() -> None:
    driver = Driver()
    driver.stable_group("a")
    simple_commit(driver, "offsets-only")
    result = driver.call("list_groups", ListGroups())
    assert isinstance(result, ListGroupsResult)
    assert {g.group_id: g.protocol_type for g in result.groups} == {GROUP: "consumer", "offsets-only": ""}


def test_describe_stable_group_shows_members_metadata_and_assignment() -> None:
    driver = Driver()
    ids = driver.stable_group("a", "b")
    result = driver.call("describe_groups", DescribeGroups([GROUP, "unknown"]))
    assert isinstance(result, DescribeGroupsResult)
    group, unknown = result.groups
    assert (group.group_state, group.protocol_type, group.protocol_data) == ("Stable", "consumer", "range")
    assert [m.member_id for m in group.members] == [ids["a"], ids["b"]]
    member = group.members[1]
    assert (member.client_id, member.client_host) == ("b", "/127.0.0.1")
    assert member.member_assignment == f"assigned:{ids['b']}".encode()
    assert b"orders" in member.member_metadata
    assert (unknown.error_code, unknown.group_state, unknown.members) == (ErrorCode.NONE, "Dead", [])


def test_describe_during_rebalance_hides_assignments() -> None:
    driver = Driver()
    ids = driver.stable_group("a", "b")
    driver.join(member_id=ids["a"], client_id="a")
    result = driver.call("describe_groups", DescribeGroups([GROUP]))
    assert isinstance(result, DescribeGroupsResult)
    group = result.groups[0]
    assert group.group_state == "PreparingRebalance"
    assert group.protocol_data == ""
    assert all(m.member_assignment == b"" for m in group.members)


def test_delete_groups_refuses_non_empty_and_unknown_groups() -> None:
    driver = Driver()
    driver.stable_group("a")
    simple_commit(driver, "idle")
    result = driver.call("delete_groups", DeleteGroups([GROUP, "idle", "never"]))
    assert isinstance(result, DeleteGroupsResult)
    assert [(r.group_id, r.error_code) for r in result.results] == [
        (GROUP, ErrorCode.NON_EMPTY_GROUP),
        ("idle", ErrorCode.NONE),
        ("never", ErrorCode.GROUP_ID_NOT_FOUND),
    ]
    assert driver.state("idle") is None
    assert driver.state() == "Stable"
    tombstones = [r for r in driver.records if r.value is None]
    assert len(tombstones) == 2, "the offset and the group"
