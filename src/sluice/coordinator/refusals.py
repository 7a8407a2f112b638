"""The answer each group call gets from a coordinator that is not loaded.

When `__consumer_offsets` cannot be written (full disk, I/O error) the group coordinator unloads, as Kafka's
does when it loses its partition: every group call is answered with NOT_COORDINATOR, which every client
treats as "find the coordinator again" (FindCoordinator answers COORDINATOR_NOT_AVAILABLE meanwhile), and
the coordinator loads again from the log once it can be written. Kafka answers a coordinator that does not
own a group this way for every group API except ListGroups, which lists only the groups it has loaded.
"""

from __future__ import annotations

from typing import Any

from sluice.coordinator import messages as m
from sluice.coordinator.offsets import commit_refused
from sluice.coordinator.share.group import ShareDescribedGroup, ShareGroupHeartbeatResult
from sluice.errors import ErrorCode


def refused_result(method: str, request: Any, error: ErrorCode) -> m.Result:
    """The result of group call `method` on `request` refused as a whole with `error`."""
    if method == "join_group":
        return m.JoinGroupResult(error, member_id=request.member_id)
    if method == "sync_group":
        return m.SyncGroupResult(error)
    if method == "heartbeat":
        return m.HeartbeatResult(error)
    if method == "leave_group":
        return m.LeaveGroupResult(error)
    if method == "offset_commit":
        return commit_refused(request, error)
    if method == "offset_fetch":
        return m.OffsetFetchResult([m.OffsetFetchResultGroup(g.group_id, [], error) for g in request.groups])
    if method == "offset_delete":
        return m.OffsetDeleteResult(error)
    if method == "list_groups":
        return m.ListGroupsResult(ErrorCode.NONE, [])  # no group is loaded here, so none is listed
    if method == "describe_groups":
        return m.DescribeGroupsResult([m.DescribedGroup(error, g, "", "", "") for g in request.groups])
    if method == "delete_groups":
        return m.DeleteGroupsResult([m.DeletableGroupResult(g, error) for g in request.groups_names])
    if method == "consumer_group_heartbeat":
        return m.ConsumerGroupHeartbeatResult(error)
    if method == "consumer_group_describe":
        return m.ConsumerGroupDescribeResult(
            [m.ConsumerGroupDescribedGroup(error, g) for g in request.group_ids]
        )
    if method == "share_group_heartbeat":
        return ShareGroupHeartbeatResult(error)
    if method == "share_group_describe":
        return [ShareDescribedGroup(error, g) for g in request.group_ids]
    raise ValueError(f"no refusal for group call {method!r}")
