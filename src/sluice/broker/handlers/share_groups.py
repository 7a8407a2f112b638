"""Share groups' membership and offsets (KIP-932): ShareGroupHeartbeat (76), ShareGroupDescribe (77),
DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92).

Membership goes through the group coordinator like every group call (parked until its records are durable).
A share group's offsets are its share-partitions' start offsets, kept by the share service: an admin may
move or drop them only while the group has no members, and the answer waits until that is durable.
"""

from __future__ import annotations

import uuid
from typing import Any

from sluice.broker.api import Outcome, RequestContext, Respond, RespondWhenDurable, handles, response_class
from sluice.broker.authorized_ops import operations_if
from sluice.broker.broker import Broker
from sluice.broker.handlers.groups import BrokerTopics, park
from sluice.coordinator.share.group import ShareDescribedGroup, ShareGroupDescribe, ShareGroupHeartbeat
from sluice.coordinator.share.records import SharePartitionKey
from sluice.errors import ErrorCode, KafkaError
from sluice.security.acl import ResourceType

ShareGroupHeartbeatResponse = response_class("ShareGroupHeartbeat")
ShareGroupDescribeResponse = response_class("ShareGroupDescribe")
DescribeShareGroupOffsetsResponse = response_class("DescribeShareGroupOffsets")
AlterShareGroupOffsetsResponse = response_class("AlterShareGroupOffsets")
DeleteShareGroupOffsetsResponse = response_class("DeleteShareGroupOffsets")

NO_TOPIC_ID = uuid.UUID(int=0)


@handles("ShareGroupHeartbeat")
def share_group_heartbeat(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    beat = ShareGroupHeartbeat(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        rack_id=request.rack_id,
        subscribed_topic_names=None if request.subscribed_topic_names is None else list(request.subscribed_topic_names),
        client_id=ctx.client_id or "",
        client_host="/" + ctx.client_host,
        topics=BrokerTopics(broker),
    )

    def convert(result: Any) -> Any:
        R = ShareGroupHeartbeatResponse
        assignment = None
        if result.assignment is not None:
            grouped: dict[uuid.UUID, list[int]] = {}
            for topic_id, partition in result.assignment:
                grouped.setdefault(topic_id, []).append(partition)
            assignment = R.Assignment(
                topic_partitions=[R.TopicPartitions(topic_id=t, partitions=ps) for t, ps in grouped.items()]
            )
        return R(error_code=result.error_code, error_message=result.error_message, member_id=result.member_id,
                 member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms,
                 assignment=assignment)

    return park(broker, ctx, "share_group_heartbeat", beat, convert)


@handles("ShareGroupDescribe")
def share_group_describe(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    def convert(result: list[ShareDescribedGroup]) -> Any:
        R = ShareGroupDescribeResponse
        return R(groups=[
            R.DescribedGroup(
                error_code=g.error_code, error_message=g.error_message, group_id=g.group_id,
                group_state=g.group_state, group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch,
                assignor_name=g.assignor_name,
                members=[R.Member(
                    member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
                    client_host=m.client_host, subscribed_topic_names=m.subscribed_topic_names,
                    assignment=R.Assignment(topic_partitions=[
                        R.TopicPartitions(topic_id=t.topic_id, topic_name=t.topic_name, partitions=t.partitions)
                        for t in m.assignment]),
                ) for m in g.members],
                authorized_operations=operations_if(
                    request.include_authorized_operations and not g.error_code, ctx, ResourceType.GROUP, g.group_id
                ),
            )
            for g in result
        ])

    return park(broker, ctx, "share_group_describe", ShareGroupDescribe(list(request.group_ids)), convert)


# --- offsets ---------------------------------------------------------------------------------------


def _not_a_share_group(broker: Broker, group_id: str) -> str | None:
    coordinator = broker.groups.coordinator
    if group_id in coordinator.groups or group_id in coordinator.consumer.groups:
        return f"Group {group_id} is not a share group."
    return None


@handles("DescribeShareGroupOffsets")
def describe_share_group_offsets(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    R = DescribeShareGroupOffsetsResponse
    groups = []
    for g in request.groups:
        out = R.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, topics=[])
        groups.append(out)
        if not broker.groups.ensure_loaded(ctx.now_ms) or not broker.shares.ensure_loaded(ctx.now_ms):
            out.error_code, out.error_message = ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator is loading"
            continue
        if (refusal := _not_a_share_group(broker, g.group_id)) is not None:
            out.error_code, out.error_message = ErrorCode.GROUP_ID_NOT_FOUND, refusal
            continue
        for name, topic_id, partitions in _described_topics(broker, g):
            out.topics.append(R.DescribeShareGroupOffsetsResponseTopic(
                topic_name=name, topic_id=topic_id,
                partitions=[_partition_offset(broker, R, g.group_id, name, topic_id, p) for p in partitions],
            ))
    return Respond(R(groups=groups))


def _described_topics(broker: Broker, group: Any) -> list[tuple[str, uuid.UUID, list[int]]]:
    """(name, id, partitions) asked for; every share-partition the group has state for when none are named."""
    if group.topics is not None:
        out = []
        for topic in group.topics:
            meta = broker.storage.topic(topic.topic_name)
            out.append((topic.topic_name, meta.topic_id if meta is not None else NO_TOPIC_ID, list(topic.partitions)))
        return out
    by_topic: dict[uuid.UUID, list[int]] = {}
    for key, _ in broker.shares.states.of_group(group.group_id):
        by_topic.setdefault(key.topic_id, []).append(key.partition)
    described = []
    for topic_id, partitions in sorted(by_topic.items(), key=lambda item: str(item[0])):
        meta = broker.storage.topic_by_id(topic_id)
        if meta is not None:  # a deleted topic's state is on its way out
            described.append((meta.name, topic_id, sorted(partitions)))
    return sorted(described)


def _partition_offset(broker: Broker, R: Any, group_id: str, name: str, topic_id: uuid.UUID, index: int) -> Any:
    out = R.DescribeShareGroupOffsetsResponsePartition(partition_index=index, start_offset=-1, leader_epoch=0, lag=-1)
    if topic_id == NO_TOPIC_ID:
        return out
    partition = broker.shares.states.get(SharePartitionKey(group_id, topic_id, index))
    if partition is None:
        return out
    out.start_offset = partition.start_offset
    state = broker.partitions.get((name, index))
    if state is not None:
        out.lag = partition.lag(state.high_watermark)
    return out


@handles("AlterShareGroupOffsets")
def alter_share_group_offsets(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    R = AlterShareGroupOffsetsResponse
    shares = broker.shares
    try:
        _require_shares(broker, ctx.now_ms)
        broker.groups.share_group_for_offsets(request.group_id, True, ctx.now_ms)
    except KafkaError as exc:
        return Respond(R(error_code=exc.code, error_message=exc.message))
    topics = []
    for topic in request.topics:
        meta = broker.storage.topic(topic.topic_name)
        out = R.AlterShareGroupOffsetsResponseTopic(
            topic_name=topic.topic_name, topic_id=meta.topic_id if meta else NO_TOPIC_ID, partitions=[]
        )
        topics.append(out)
        for part in topic.partitions:
            result = R.AlterShareGroupOffsetsResponsePartition(partition_index=part.partition_index)
            out.partitions.append(result)
            if meta is None or not 0 <= part.partition_index < meta.partitions:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = f"{topic.topic_name} has no partition {part.partition_index}"
                continue
            shares.reset(SharePartitionKey(request.group_id, meta.topic_id, part.partition_index), part.start_offset)
    if not shares.write(ctx.now_ms):
        return Respond(R(error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message="the share state could not be written"))
    return RespondWhenDurable(R(responses=topics))


@handles("DeleteShareGroupOffsets")
def delete_share_group_offsets(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    R = DeleteShareGroupOffsetsResponse
    shares = broker.shares
    try:
        _require_shares(broker, ctx.now_ms)
        broker.groups.share_group_for_offsets(request.group_id, False, ctx.now_ms)
    except KafkaError as exc:
        return Respond(R(error_code=exc.code, error_message=exc.message))
    topics = []
    for topic in request.topics:
        meta = broker.storage.topic(topic.topic_name)
        out = R.DeleteShareGroupOffsetsResponseTopic(
            topic_name=topic.topic_name, topic_id=meta.topic_id if meta else NO_TOPIC_ID
        )
        topics.append(out)
        keys = [] if meta is None else [
            key for key, _ in shares.states.of_group(request.group_id) if key.topic_id == meta.topic_id
        ]
        if meta is None:
            out.error_code, out.error_message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic.topic_name}"
        elif not keys:
            out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            out.error_message = "There is no offset information to delete."
        elif not shares.forget(keys, ctx.now_ms):
            out.error_code, out.error_message = ErrorCode.KAFKA_STORAGE_ERROR, "the share state could not be written"
    return RespondWhenDurable(R(responses=topics))


def _require_shares(broker: Broker, now_ms: int) -> None:
    if not broker.shares.ensure_loaded(now_ms):
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{broker.shares.topic.name} cannot be written now")
