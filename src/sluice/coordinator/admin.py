"""ListGroups, DescribeGroups and DeleteGroups over the coordinator's ``groups`` table."""

from __future__ import annotations

from sluice.coordinator.group import ClassicGroup, GroupState
from sluice.coordinator.messages import (
    DeletableGroupResult,
    DeleteGroups,
    DeleteGroupsResult,
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroups,
    DescribeGroupsResult,
    ListedGroup,
    ListGroups,
    ListGroupsResult,
)
from sluice.coordinator.offsets import delete_group_records
from sluice.coordinator.records import PersistRecord
from sluice.errors import ErrorCode

CLASSIC_GROUP_TYPE = "classic"


def list_groups(groups: dict[str, ClassicGroup], request: ListGroups) -> ListGroupsResult:
    states = {s.lower() for s in request.states_filter}
    types = {t.lower() for t in request.types_filter}
    listed = [
        ListedGroup(g.group_id, g.protocol_type or "", g.state.value, CLASSIC_GROUP_TYPE)
        for g in sorted(groups.values(), key=lambda g: g.group_id)
        if (not states or g.state.value.lower() in states) and (not types or CLASSIC_GROUP_TYPE in types)
    ]
    return ListGroupsResult(ErrorCode.NONE, listed)


def _describe_one(group_id: str, group: ClassicGroup | None) -> DescribedGroup:
    if group is None:
        return DescribedGroup(ErrorCode.NONE, group_id, GroupState.DEAD.value, "", "")
    # Like Kafka, metadata and assignments are only meaningful (and only shown) once Stable.
    stable = group.is_in(GroupState.STABLE)
    members = [
        DescribedGroupMember(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            member_metadata=m.metadata_for(group.protocol_name) if stable else b"",
            member_assignment=m.assignment if stable else b"",
        )
        for m in group.members.values()
    ]
    return DescribedGroup(
        error_code=ErrorCode.NONE,
        group_id=group_id,
        group_state=group.state.value,
        protocol_type=group.protocol_type or "",
        protocol_data=(group.protocol_name or "") if stable else "",
        members=members,
    )


def describe_groups(groups: dict[str, ClassicGroup], request: DescribeGroups) -> DescribeGroupsResult:
    return DescribeGroupsResult([_describe_one(gid, groups.get(gid)) for gid in request.groups])


def delete_groups(
    groups: dict[str, ClassicGroup], request: DeleteGroups, now_ms: int
) -> tuple[DeleteGroupsResult, list[PersistRecord]]:
    results = []
    records: list[PersistRecord] = []
    for group_id in request.groups_names:
        group = groups.get(group_id)
        if group is None:
            error = ErrorCode.GROUP_ID_NOT_FOUND
        elif not group.is_in(GroupState.EMPTY) or group.pending_members:
            error = ErrorCode.NON_EMPTY_GROUP
        else:
            group.transition(GroupState.DEAD, now_ms)
            del groups[group_id]
            records += delete_group_records(group)
            error = ErrorCode.NONE
        results.append(DeletableGroupResult(group_id, error))
    return DeleteGroupsResult(results), records
