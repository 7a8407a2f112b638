"""The group coordinator's share-group calls: one group id names one kind of group, so share groups are
routed here, beside the classic and KIP-848 groups, and refused where another kind holds the id.

Mixed into sluice.coordinator.coordinator.GroupCoordinator, which owns `groups` (classic), `consumer`
(KIP-848) and `share` (sluice.coordinator.share.group.ShareGroups).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING

from sluice.coordinator.messages import ListedGroup
from sluice.coordinator.outcome import Outcome
from sluice.coordinator.records import PersistRecord, share_group_metadata_record
from sluice.coordinator.share.group import (
    SHARE_GROUP_TYPE,
    SHARE_PROTOCOL_TYPE,
    ShareDescribedGroup,
    ShareGroup,
    ShareGroupDescribe,
    ShareGroupHeartbeat,
    ShareGroupHeartbeatResult,
    ShareGroups,
)
from sluice.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from sluice.coordinator.consumer_group import ConsumerGroups
    from sluice.coordinator.group import ClassicGroup


class ShareGroupCalls:
    groups: dict[str, ClassicGroup]
    consumer: ConsumerGroups
    share: ShareGroups

    def _held_by_another_kind(self, group_id: str) -> bool:
        return group_id in self.groups or group_id in self.consumer.groups

    def is_share_group(self, group_id: str) -> bool:
        return group_id in self.share.groups

    def share_group_heartbeat(self, request: ShareGroupHeartbeat, now_ms: int, reply_to: Hashable) -> Outcome:
        out = Outcome()
        if self._held_by_another_kind(request.group_id):
            out.reply(
                reply_to,
                ShareGroupHeartbeatResult(
                    ErrorCode.GROUP_ID_NOT_FOUND,
                    f"Group {request.group_id} is not a share group.",
                    member_epoch=request.member_epoch,
                ),
            )
            return out
        result, created = self.share.heartbeat(request, now_ms)
        if created and result.error_code is ErrorCode.NONE:
            group = self.share.groups[request.group_id]
            out.records.append(share_group_metadata_record(group.group_id, group.group_epoch))
        out.reply(reply_to, result)
        return out

    def share_group_describe(self, request: ShareGroupDescribe, now_ms: int, reply_to: Hashable) -> Outcome:
        described = []
        for group_id in request.group_ids:
            group = self.share.groups.get(group_id)
            if group is not None:
                described.append(self.share.describe(group))
            elif not group_id:
                described.append(ShareDescribedGroup(ErrorCode.INVALID_GROUP_ID, group_id, "Group id can't be empty."))
            elif self._held_by_another_kind(group_id):
                message = f"Group {group_id} is not a share group."
                described.append(ShareDescribedGroup(ErrorCode.GROUP_ID_NOT_FOUND, group_id, message))
            else:
                described.append(
                    ShareDescribedGroup(ErrorCode.GROUP_ID_NOT_FOUND, group_id, f"Group {group_id} not found.")
                )
        return Outcome([(reply_to, described)])

    def share_group_for_offsets(self, group_id: str, *, create: bool) -> tuple[ShareGroup | None, list[PersistRecord]]:
        """The share group whose offsets an admin alters or deletes: it must be a share group with no members.
        `create` makes it when absent (AlterShareGroupOffsets does). Raises KafkaError with Kafka's answer."""
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "The group id can't be empty.")
        if self._held_by_another_kind(group_id):
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        group = self.share.groups.get(group_id)
        if group is None:
            if not create:
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
            group = self.share.groups[group_id] = ShareGroup(group_id)
            return group, [share_group_metadata_record(group_id, group.group_epoch)]
        if not group.is_empty():
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"The share group {group_id} has active members.")
        return group, []

    def listed_share_groups(self, states: set[str], types: set[str]) -> list[ListedGroup]:
        if types and SHARE_GROUP_TYPE not in types:
            return []
        return [
            ListedGroup(g.group_id, SHARE_PROTOCOL_TYPE, g.state, SHARE_GROUP_TYPE)
            for g in self.share.groups.values()
            if not states or g.state.lower() in states
        ]

    def delete_share_group(self, group_id: str) -> tuple[ErrorCode, list[PersistRecord]]:
        group = self.share.groups[group_id]
        if not group.is_empty():
            return ErrorCode.NON_EMPTY_GROUP, []
        del self.share.groups[group_id]
        return ErrorCode.NONE, [share_group_metadata_record(group_id, None)]

    def load_share_groups(self, epochs: Iterable[tuple[str, int]]) -> None:
        self.share.groups = {
            group_id: ShareGroup(group_id, group_epoch=epoch, assignment_epoch=epoch) for group_id, epoch in epochs
        }

    def not_a_consumer_group(self, group_id: str) -> str | None:
        """Kafka's refusal of consumer-group offset calls on a share group id, or None."""
        return f"Group {group_id} is not a consumer group." if group_id in self.share.groups else None
