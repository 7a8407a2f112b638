"""Rebuilding groups from the ``__consumer_offsets`` records written by the coordinator (or Kafka).

Records are replayed oldest first and the last one per key wins; a tombstone (value None) deletes.
A group comes back if it has committed offsets or a group-metadata record:
  * with members: Stable, same generation, protocol, leader, member ids, instance ids and
    assignments; every member's session timer starts at ``now_ms``;
  * without members: Empty, keeping its generation and protocol type (so retention treats it as a
    consumer group that became Empty at ``current_state_timestamp``);
  * offsets only: an Empty "simple" group without protocol type.
"""

from __future__ import annotations

from sluice.coordinator.group import ClassicGroup, GroupState, Member
from sluice.coordinator.messages import JoinGroupProtocol
from sluice.coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    ShareGroupMetadataKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    decode_share_group_metadata_value,
)


def _group_from_metadata(group_id: str, value: GroupMetadataValue, now_ms: int) -> ClassicGroup:
    group = ClassicGroup(
        group_id,
        state=GroupState.STABLE if value.members else GroupState.EMPTY,
        state_timestamp_ms=value.current_state_timestamp if value.current_state_timestamp >= 0 else now_ms,
        generation_id=value.generation,
        protocol_type=value.protocol_type or None,
        protocol_name=value.protocol,
    )
    for stored in value.members:
        protocols = [] if value.protocol is None else [JoinGroupProtocol(value.protocol, stored.subscription)]
        group.add(
            Member(
                member_id=stored.member_id,
                group_instance_id=stored.group_instance_id,
                client_id=stored.client_id,
                client_host=stored.client_host,
                rebalance_timeout_ms=stored.rebalance_timeout,
                session_timeout_ms=stored.session_timeout,
                protocol_type=value.protocol_type,
                protocols=protocols,
                assignment=stored.assignment,
                session_deadline_ms=now_ms + stored.session_timeout,
            )
        )
    # group.add made the first member leader; the record knows the real one.
    if value.leader in group.members:
        group.leader_id = value.leader
    group.refresh_subscribed_topics()
    return group


class ReplayedGroups:
    """``__consumer_offsets`` as read back so far: the last group-metadata value per group and the last
    commit per partition. The groups are built from them once the whole log is read (`groups`), since a
    group's shape comes from its metadata record wherever its offsets sit in the log."""

    def __init__(self) -> None:
        self.metadata: dict[str, GroupMetadataValue | None] = {}
        self.committed: dict[OffsetCommitKey, OffsetCommitValue | None] = {}
        # Share groups (ShareGroupMetadata): their epoch, None once deleted.
        self.share_epochs: dict[str, int | None] = {}

    def apply(self, raw_key: bytes, raw_value: bytes | None) -> None:
        key = decode_key(raw_key)
        if isinstance(key, GroupMetadataKey):
            self.metadata[key.group] = None if raw_value is None else decode_group_metadata_value(raw_value)
        elif isinstance(key, OffsetCommitKey):
            self.committed[key] = None if raw_value is None else decode_offset_commit_value(raw_value)
        elif isinstance(key, ShareGroupMetadataKey):
            self.share_epochs[key.group] = None if raw_value is None else decode_share_group_metadata_value(raw_value)

    def share_groups(self) -> list[tuple[str, int]]:
        """(group id, epoch) of every share group the log leaves in existence."""
        return [(group_id, epoch) for group_id, epoch in self.share_epochs.items() if epoch is not None]

    def groups(self, now_ms: int) -> dict[str, ClassicGroup]:
        groups: dict[str, ClassicGroup] = {}
        for group_id, value in self.metadata.items():
            if value is not None:
                groups[group_id] = _group_from_metadata(group_id, value, now_ms)
        for key, offset in self.committed.items():
            if offset is None:
                continue
            group = groups.get(key.group)
            if group is None:
                group = groups[key.group] = ClassicGroup(key.group, state_timestamp_ms=now_ms)
            group.offsets[(key.topic, key.partition)] = offset
        return groups
