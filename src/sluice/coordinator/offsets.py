"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, expiry and the admin reset.

Offsets live on their :class:`ClassicGroup` (a group that only ever committed offsets is an Empty
group with no protocol type, Kafka's "simple" group). Every function here works on the
coordinator's ``groups`` table and returns the records to persist; none of them keeps state.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Protocol

from sluice.coordinator.consumer_group_state import ConsumerGroup
from sluice.coordinator.group import COMMIT_ERROR, CONSUMER_PROTOCOL_TYPE, ClassicGroup, GroupState
from sluice.coordinator.messages import (
    NO_MEMBER_ID,
    OffsetCommit,
    OffsetCommitResult,
    OffsetDelete,
    OffsetDeleteResult,
    OffsetFetch,
    OffsetFetchGroup,
    OffsetFetchPartition,
    OffsetFetchResult,
    OffsetFetchResultGroup,
    OffsetFetchResultTopic,
    PartitionResult,
    TopicResult,
)
from sluice.coordinator.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    PersistRecord,
    group_metadata_record,
    offset_commit_record,
)
from sluice.errors import ErrorCode, KafkaError

Groups = dict[str, ClassicGroup]


class HasOffsets(Protocol):
    """Any group kind that keeps committed offsets (classic and KIP-848 consumer groups)."""

    group_id: str
    offsets: dict[tuple[str, int], OffsetCommitValue]


def commit_refused(request: OffsetCommit, error: ErrorCode) -> OffsetCommitResult:
    """The answer to a commit refused as a whole: `error` for every partition it names."""
    return OffsetCommitResult(
        [
            TopicResult(t.name, [PartitionResult(p.partition_index, error) for p in t.partitions])
            for t in request.topics
        ]
    )


def _commit_error(group: ClassicGroup, request: OffsetCommit) -> ErrorCode:
    if group.is_in(GroupState.DEAD):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if request.generation_id < 0 and group.is_in(GroupState.EMPTY):
        # Admin tools and consumers without group management commit into an idle group freely.
        return ErrorCode.NONE
    claims_membership = (
        request.generation_id >= 0
        or request.member_id != NO_MEMBER_ID
        or request.group_instance_id is not None
    )
    if claims_membership:
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if request.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
    elif not group.is_in(GroupState.EMPTY):
        # Once a group has members, only they may commit (a "simple" commit would race them).
        return ErrorCode.UNKNOWN_MEMBER_ID
    return COMMIT_ERROR[group.state]


def commit_offsets(
    groups: Groups, request: OffsetCommit, now_ms: int, metadata_max_chars: int
) -> tuple[OffsetCommitResult, list[PersistRecord]]:
    group = groups.get(request.group_id)
    if group is None:
        if request.generation_id >= 0:
            # A generation for a group we do not know: a member from a former life of the group.
            return commit_refused(request, ErrorCode.ILLEGAL_GENERATION), []
        group = groups[request.group_id] = ClassicGroup(request.group_id, state_timestamp_ms=now_ms)
    error = _commit_error(group, request)
    if error is not ErrorCode.NONE:
        return commit_refused(request, error), []
    member = group.members.get(request.member_id)
    if member is not None:
        member.session_deadline_ms = now_ms + member.session_timeout_ms
    return write_offsets(group.group_id, group.offsets, request, now_ms, metadata_max_chars)


def write_offsets(
    group_id: str,
    offsets: dict[tuple[str, int], OffsetCommitValue],
    request: OffsetCommit,
    now_ms: int,
    metadata_max_chars: int,
) -> tuple[OffsetCommitResult, list[PersistRecord]]:
    """Store a validated commit in ``offsets``; shared by classic and consumer (KIP-848) groups."""
    records = []
    topics = []
    for topic in request.topics:
        results = []
        for partition in topic.partitions:
            metadata = partition.committed_metadata
            if metadata is not None and len(metadata) > metadata_max_chars:
                results.append(
                    PartitionResult(partition.partition_index, ErrorCode.OFFSET_METADATA_TOO_LARGE)
                )
                continue
            timestamp = partition.commit_timestamp if partition.commit_timestamp >= 0 else now_ms
            value = OffsetCommitValue(
                partition.committed_offset, partition.committed_leader_epoch, metadata or "", timestamp
            )
            offsets[(topic.name, partition.partition_index)] = value
            key = OffsetCommitKey(group_id, topic.name, partition.partition_index)
            records.append(offset_commit_record(key, value))
            results.append(PartitionResult(partition.partition_index, ErrorCode.NONE))
        topics.append(TopicResult(topic.name, results))
    return OffsetCommitResult(topics), records


def _fetch_one(group: HasOffsets | None, request: OffsetFetchGroup) -> OffsetFetchResultGroup:
    offsets = group.offsets if group is not None else {}
    wanted: dict[str, list[int]] = {}
    if request.topics is None:
        for topic, partition in sorted(offsets):
            wanted.setdefault(topic, []).append(partition)
    else:
        for fetch_topic in request.topics:
            wanted.setdefault(fetch_topic.name, []).extend(fetch_topic.partition_indexes)
    topics = []
    for topic, partitions in wanted.items():
        results = []
        for partition in partitions:
            committed = offsets.get((topic, partition))
            if committed is None:
                results.append(OffsetFetchPartition(partition))
            else:
                results.append(
                    OffsetFetchPartition(
                        partition, committed.offset, committed.leader_epoch, committed.metadata
                    )
                )
        topics.append(OffsetFetchResultTopic(topic, results))
    return OffsetFetchResultGroup(request.group_id, topics)


def fetch_offsets(groups: Mapping[str, HasOffsets], request: OffsetFetch) -> OffsetFetchResult:
    # require_stable only matters with pending transactional commits, which sluice does not have.
    return OffsetFetchResult([_fetch_one(groups.get(g.group_id), g) for g in request.groups])


def remove_offsets(group: HasOffsets, keys: list[tuple[str, int]]) -> list[PersistRecord]:
    records = []
    for topic, partition in keys:
        if group.offsets.pop((topic, partition), None) is not None:
            records.append(offset_commit_record(OffsetCommitKey(group.group_id, topic, partition), None))
    return records


def forget_topics(groups: Iterable[HasOffsets], topics: Collection[str]) -> list[PersistRecord]:
    """Tombstones for every offset any group committed on `topics`, which were deleted: Kafka's
    OffsetMetadataManager.onPartitionsDeleted. The groups stay; one left Empty with no offsets goes at
    the next expiry check, as in Kafka."""
    records: list[PersistRecord] = []
    for group in groups:
        gone = [key for key in group.offsets if key[0] in topics]
        if gone:
            records += remove_offsets(group, gone)
    return records


def delete_offsets(groups: Groups, request: OffsetDelete) -> tuple[OffsetDeleteResult, list[PersistRecord]]:
    group = groups.get(request.group_id)
    if group is None or group.is_in(GroupState.DEAD):
        return OffsetDeleteResult(ErrorCode.GROUP_ID_NOT_FOUND), []
    active = not group.is_in(GroupState.EMPTY)
    if active and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        # Without the consumer protocol we cannot tell which topics the members use.
        return OffsetDeleteResult(ErrorCode.NON_EMPTY_GROUP), []
    eligible: list[tuple[str, int]] = []
    topics = []
    for topic in request.topics:
        in_use = active and group.is_subscribed_to(topic.name)
        error = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if in_use else ErrorCode.NONE
        if not in_use:
            eligible += [(topic.name, p) for p in topic.partition_indexes]
        topics.append(TopicResult(topic.name, [PartitionResult(p, error) for p in topic.partition_indexes]))
    return OffsetDeleteResult(ErrorCode.NONE, topics), remove_offsets(group, eligible)


def delete_group_records(group: HasOffsets) -> list[PersistRecord]:
    """Tombstones for every offset of the group and for the group itself."""
    records = remove_offsets(group, list(group.offsets))
    records.append(group_metadata_record(GroupMetadataKey(group.group_id), None))
    return records


def expire_offsets(groups: Groups, now_ms: int, retention_ms: int) -> list[PersistRecord]:
    """Drop offsets past retention, as Kafka's periodic cleanup does, and groups left with nothing.

    * Empty group that once had members: everything expires ``retention_ms`` after the group
      became Empty.
    * Group that never had members ("simple" commits): each offset ``retention_ms`` after its commit.
    * Stable consumer group: offsets of topics nobody subscribes to, ``retention_ms`` after commit.
    """
    records: list[PersistRecord] = []
    for group in list(groups.values()):
        if group.is_in(GroupState.EMPTY) and group.protocol_type is not None:
            expired = list(group.offsets) if now_ms - group.state_timestamp_ms >= retention_ms else []
        elif group.is_in(GroupState.EMPTY) or (
            group.is_in(GroupState.STABLE)
            and group.protocol_type == CONSUMER_PROTOCOL_TYPE
            and group.subscribed_topics is not None
        ):
            subscribed = group.subscribed_topics or frozenset()
            expired = [
                key
                for key, value in group.offsets.items()
                if key[0] not in subscribed and now_ms - value.commit_timestamp >= retention_ms
            ]
        else:
            expired = []
        records += remove_offsets(group, expired)
        if group.is_in(GroupState.EMPTY) and not group.offsets and not group.pending_members:
            group.transition(GroupState.DEAD, now_ms)
            del groups[group.group_id]
            records.append(group_metadata_record(GroupMetadataKey(group.group_id), None))
    return records


def reset_offsets(
    groups: Groups, group_id: str, offsets: Mapping[tuple[str, int], int], now_ms: int
) -> list[PersistRecord]:
    """Admin: overwrite committed offsets of a group nobody is consuming with."""
    group = groups.get(group_id)
    if group is not None and not group.is_in(GroupState.EMPTY):
        raise KafkaError(
            ErrorCode.NON_EMPTY_GROUP,
            f"group {group_id!r} is {group.state.value} with {len(group.members)} member(s); "
            "offsets can only be reset while it has no active members",
        )
    if group is None:
        group = groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=now_ms)
    records = []
    for (topic, partition), offset in sorted(offsets.items()):
        value = OffsetCommitValue(offset, -1, "", now_ms)
        group.offsets[(topic, partition)] = value
        records.append(offset_commit_record(OffsetCommitKey(group_id, topic, partition), value))
    return records


# --- KIP-848 consumer groups ---------------------------------------------------------------------


def delete_consumer_group_offsets(
    group: ConsumerGroup, request: OffsetDelete
) -> tuple[OffsetDeleteResult, list[PersistRecord]]:
    """OffsetDelete on a consumer group: refused for topics a member still subscribes to."""
    eligible: list[tuple[str, int]] = []
    topics = []
    for topic in request.topics:
        in_use = group.is_subscribed_to(topic.name)
        error = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if in_use else ErrorCode.NONE
        if not in_use:
            eligible += [(topic.name, p) for p in topic.partition_indexes]
        topics.append(TopicResult(topic.name, [PartitionResult(p, error) for p in topic.partition_indexes]))
    return OffsetDeleteResult(ErrorCode.NONE, topics), remove_offsets(group, eligible)


def expire_consumer_group_offsets(
    groups: dict[str, ConsumerGroup], now_ms: int, retention_ms: int
) -> list[PersistRecord]:
    """Offsets of topics no member subscribes to go ``retention_ms`` after their commit (Kafka's rule
    for consumer groups); an empty group left without offsets is deleted."""
    records: list[PersistRecord] = []
    for group in list(groups.values()):
        expired = [
            key
            for key, value in group.offsets.items()
            if not group.is_subscribed_to(key[0]) and now_ms - value.commit_timestamp >= retention_ms
        ]
        records += remove_offsets(group, expired)
        if group.is_empty() and not group.offsets:
            del groups[group.group_id]
            records.append(group_metadata_record(GroupMetadataKey(group.group_id), None))
    return records


def reset_consumer_group_offsets(
    group: ConsumerGroup, offsets: Mapping[tuple[str, int], int], now_ms: int
) -> list[PersistRecord]:
    """Admin: overwrite committed offsets of a consumer group that has no members."""
    if not group.is_empty():
        raise KafkaError(
            ErrorCode.NON_EMPTY_GROUP,
            f"group {group.group_id!r} is {group.state} with {len(group.members)} member(s); "
            "offsets can only be reset while it has no active members",
        )
    records = []
    for (topic, partition), offset in sorted(offsets.items()):
        value = OffsetCommitValue(offset, -1, "", now_ms)
        group.offsets[(topic, partition)] = value
        records.append(offset_commit_record(OffsetCommitKey(group.group_id, topic, partition), value))
    return records
