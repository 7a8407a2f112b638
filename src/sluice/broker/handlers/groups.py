"""Consumer-group APIs: translate Kafka requests into coordinator calls and its results into responses.

Every group handler parks its request: the coordinator's answer arrives through the group service, after
whatever it asked to persist is durable.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sluice.broker.api import Outcome, Parked, RequestContext, Respond, handles, response_class
from sluice.broker.authorized_ops import operations_if
from sluice.broker.broker import Broker
from sluice.coordinator import messages as m
from sluice.coordinator.consumer_group_state import CONSUMER_MEMBER_TYPE, grouped_by_topic
from sluice.errors import ErrorCode
from sluice.security.acl import ResourceType

FindCoordinatorResponse = response_class("FindCoordinator")
JoinGroupResponse = response_class("JoinGroup")
SyncGroupResponse = response_class("SyncGroup")
HeartbeatResponse = response_class("Heartbeat")
LeaveGroupResponse = response_class("LeaveGroup")
OffsetCommitResponse = response_class("OffsetCommit")
OffsetFetchResponse = response_class("OffsetFetch")
OffsetDeleteResponse = response_class("OffsetDelete")
ListGroupsResponse = response_class("ListGroups")
DescribeGroupsResponse = response_class("DescribeGroups")
DeleteGroupsResponse = response_class("DeleteGroups")
ConsumerGroupHeartbeatResponse = response_class("ConsumerGroupHeartbeat")
ConsumerGroupDescribeResponse = response_class("ConsumerGroupDescribe")

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


def park(broker: Broker, ctx: RequestContext, method: str, request: Any, convert: Any) -> Parked:
    broker.groups.call(method, request, ctx.now_ms, ctx.reply_token, convert)
    return Parked()


@handles("FindCoordinator")
def find_coordinator(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    host, port = broker.config.advertised_for(ctx.listener)
    node = broker.config.node_id
    R = FindCoordinatorResponse
    service = {GROUP_KEY_TYPE: broker.groups, TRANSACTION_KEY_TYPE: broker.transactions}.get(request.key_type)
    # A coordinator unloaded because its internal topic cannot be written is not available until it loads.
    supported = service is not None and service.ensure_loaded(ctx.now_ms)
    error = ErrorCode.NONE if supported else ErrorCode.COORDINATOR_NOT_AVAILABLE
    message = None
    if service is None:
        message = f"sluice has no coordinator for key type {request.key_type}"
    elif not supported:
        message = f"the coordinator for key type {request.key_type} is unavailable: its log cannot be written"
    if ctx.api_version >= 4:
        return Respond(R(coordinators=[
            R.Coordinator(key=key, node_id=node if supported else -1, host=host if supported else "",
                          port=port if supported else -1, error_code=error, error_message=message)
            for key in request.coordinator_keys
        ]))
    if not supported:
        return Respond(R(error_code=error, error_message=message, node_id=-1, host="", port=-1))
    return Respond(R(error_code=0, node_id=node, host=host, port=port))


@handles("JoinGroup")
def join_group(broker: Broker, ctx: RequestContext, request: Any) -> Parked:
    version = ctx.api_version
    join = m.JoinGroup(
        group_id=request.group_id,
        session_timeout_ms=request.session_timeout_ms,
        member_id=request.member_id,
        protocol_type=request.protocol_type,
        protocols=[m.JoinGroupProtocol(p.name, bytes(p.metadata)) for p in request.protocols],
        # v0 has no rebalance timeout: Kafka uses the session timeout for both.
        rebalance_timeout_ms=request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms,
        group_instance_id=request.group_instance_id,
        reason=request.reason,
        api_version=version,
        client_id=ctx.client_id or "",
        client_host="/" + ctx.client_host,
    )

    def convert(result: m.JoinGroupResult) -> Any:
        R = JoinGroupResponse
        return R(
            error_code=result.error_code,
            generation_id=result.generation_id,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name if version >= 7 else (result.protocol_name or ""),
            leader=result.leader,
            skip_assignment=result.skip_assignment,
            member_id=result.member_id,
            members=[R.JoinGroupResponseMember(member_id=x.member_id, group_instance_id=x.group_instance_id,
                                               metadata=x.metadata) for x in result.members],
        )

    return park(broker, ctx, "join_group", join, convert)


@handles("SyncGroup")
def sync_group(broker: Broker, ctx: RequestContext, request: Any) -> Parked:
    sync = m.SyncGroup(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        assignments=[m.SyncGroupAssignment(a.member_id, bytes(a.assignment)) for a in request.assignments],
        group_instance_id=request.group_instance_id,
        protocol_type=request.protocol_type,
        protocol_name=request.protocol_name,
    )

    def convert(result: m.SyncGroupResult) -> Any:
        return SyncGroupResponse(error_code=result.error_code, protocol_type=result.protocol_type,
                                 protocol_name=result.protocol_name, assignment=result.assignment)

    return park(broker, ctx, "sync_group", sync, convert)


@handles("Heartbeat")
def heartbeat(broker: Broker, ctx: RequestContext, request: Any) -> Parked:
    beat = m.Heartbeat(request.group_id, request.generation_id, request.member_id, request.group_instance_id)
    return park(broker, ctx, "heartbeat", beat, lambda r: HeartbeatResponse(error_code=r.error_code))


@handles("LeaveGroup")
def leave_group(broker: Broker, ctx: RequestContext, request: Any) -> Parked:
    version = ctx.api_version
    if version >= 3:
        members = [m.MemberIdentity(x.member_id, x.group_instance_id, x.reason) for x in request.members]
    else:
        members = [m.MemberIdentity(request.member_id)]

    def convert(result: m.LeaveGroupResult) -> Any:
        R = LeaveGroupResponse
        if version < 3:
            # One member only: its own error is the answer.
            return R(error_code=result.members[0].error_code if result.members else result.error_code)
        return R(error_code=result.error_code, members=[
            R.MemberResponse(member_id=x.member_id, group_instance_id=x.group_instance_id, error_code=x.error_code)
            for x in result.members])

    return park(broker, ctx, "leave_group", m.LeaveGroup(request.group_id, members), convert)


def _split_unknown_partitions(broker: Broker, topics: list[Any]) -> tuple[list[Any], dict[str, list[int]]]:
    """Kafka answers UNKNOWN_TOPIC_OR_PARTITION for partitions that do not exist before the coordinator
    sees the commit (KafkaApis.handleOffsetCommitRequest): the known ones, and the unknown ones by topic."""
    known: list[Any] = []
    unknown: dict[str, list[int]] = {}
    for t in topics:
        meta = broker.storage.topic(t.name)
        exists = [meta is not None and 0 <= p.partition_index < meta.partitions for p in t.partitions]
        parts = [p for p, ok in zip(t.partitions, exists, strict=True) if ok]
        missing = [p.partition_index for p, ok in zip(t.partitions, exists, strict=True) if not ok]
        if parts:
            known.append((t.name, parts))
        if missing:
            unknown.setdefault(t.name, []).extend(missing)
    return known, unknown


def _named_by_id(broker: Broker, topics: list[Any]) -> tuple[list[Any], list[Any]]:
    """Version 10 names topics by id (KIP-848): give each its name; (known topics, unknown ids)."""
    known, unknown = [], []
    for t in topics:
        meta = broker.storage.topic_by_id(t.topic_id)
        if meta is None:
            unknown.append(t)
        else:
            t.name = meta.name
            known.append(t)
    return known, unknown


def _topic_id(broker: Broker, name: str) -> Any:
    meta = broker.storage.topic(name)
    return None if meta is None else meta.topic_id


@handles("OffsetCommit", "0-10")
def offset_commit(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    version = ctx.api_version
    R = OffsetCommitResponse
    topics, unknown_ids = _named_by_id(broker, request.topics) if version >= 10 else (request.topics, [])
    known, unknown = _split_unknown_partitions(broker, topics)
    refused = [
        R.OffsetCommitResponseTopic(name=name, topic_id=_topic_id(broker, name), partitions=[
            R.OffsetCommitResponsePartition(partition_index=i, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            for i in indexes])
        for name, indexes in unknown.items()
    ] + [
        R.OffsetCommitResponseTopic(topic_id=t.topic_id, partitions=[
            R.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=ErrorCode.UNKNOWN_TOPIC_ID)
            for p in t.partitions])
        for t in unknown_ids
    ]
    if unknown and not known:
        return Respond(R(topics=refused))
    commit = m.OffsetCommit(
        group_id=request.group_id,
        topics=[
            m.OffsetCommitTopic(name, [
                m.OffsetCommitPartition(p.partition_index, p.committed_offset, p.committed_leader_epoch,
                                        p.committed_metadata, p.commit_timestamp)
                for p in parts])
            for name, parts in known
        ],
        generation_id=request.generation_id_or_member_epoch if version >= 1 else -1,
        member_id=request.member_id if version >= 1 else "",
        group_instance_id=request.group_instance_id,
        retention_time_ms=request.retention_time_ms,
    )

    def convert(result: m.OffsetCommitResult) -> Any:
        R = OffsetCommitResponse
        return R(topics=[
            R.OffsetCommitResponseTopic(name=t.name, topic_id=_topic_id(broker, t.name), partitions=[
                R.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=p.error_code)
                for p in t.partitions])
            for t in result.topics] + refused)

    return park(broker, ctx, "offset_commit", commit, convert)


@handles("OffsetFetch", "1-10")
def offset_fetch(broker: Broker, ctx: RequestContext, request: Any) -> Parked:
    version = ctx.api_version
    unknown_ids: dict[str, list[Any]] = {}  # v10: per group, the topics asked for by an id nobody has
    if version >= 10:
        for g in request.groups:
            if g.topics is not None:
                g.topics, unknown_ids[g.group_id] = _named_by_id(broker, g.topics)
    if version >= 8:
        groups = [
            m.OffsetFetchGroup(g.group_id, None if g.topics is None else [
                m.OffsetFetchTopic(t.name, list(t.partition_indexes)) for t in g.topics])
            for g in request.groups
        ]
    else:
        topics = None if request.topics is None else [
            m.OffsetFetchTopic(t.name, list(t.partition_indexes)) for t in request.topics]
        groups = [m.OffsetFetchGroup(request.group_id, topics)]

    def convert(result: m.OffsetFetchResult) -> Any:
        R = OffsetFetchResponse
        if request.require_stable and broker.transactions is not None:
            _mark_unstable(broker, result)
        if version >= 8:
            return R(groups=[
                R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=g.error_code, topics=[
                    R.OffsetFetchResponseTopics(name=t.name, topic_id=topic_id, partitions=[
                        R.OffsetFetchResponsePartitions(
                            partition_index=p.partition_index, committed_offset=p.committed_offset,
                            committed_leader_epoch=p.committed_leader_epoch, metadata=p.metadata,
                            error_code=p.error_code)
                        for p in t.partitions])
                    for t in g.topics
                    # v10 names topics by id: offsets of a topic no longer there are left out.
                    if (topic_id := _topic_id(broker, t.name)) is not None or version < 10
                ] + [
                    R.OffsetFetchResponseTopics(topic_id=t.topic_id, partitions=[
                        R.OffsetFetchResponsePartitions(
                            partition_index=i, committed_offset=-1, error_code=ErrorCode.UNKNOWN_TOPIC_ID)
                        for i in t.partition_indexes])
                    for t in unknown_ids.get(g.group_id, ())
                ])
                for g in result.groups])
        group = result.groups[0]
        return R(error_code=group.error_code, topics=[
            R.OffsetFetchResponseTopic(name=t.name, partitions=[
                R.OffsetFetchResponsePartition(
                    partition_index=p.partition_index, committed_offset=p.committed_offset,
                    committed_leader_epoch=p.committed_leader_epoch,
                    metadata=p.metadata, error_code=p.error_code)
                for p in t.partitions])
            for t in group.topics])

    return park(broker, ctx, "offset_fetch", m.OffsetFetch(groups, request.require_stable), convert)


def _mark_unstable(broker: Broker, result: m.OffsetFetchResult) -> None:
    """require_stable (KIP-447): a partition with a transactional commit still open answers
    UNSTABLE_OFFSET_COMMIT, so the consumer retries instead of starting from an offset about to change."""
    for group in result.groups:
        pending = broker.transactions.coordinator.pending_offsets(group.group_id)
        for topic in group.topics if pending else ():
            for part in topic.partitions:
                if (topic.name, part.partition_index) in pending:
                    part.error_code = ErrorCode.UNSTABLE_OFFSET_COMMIT
                    part.committed_offset = -1


@handles("OffsetDelete")
def offset_delete(broker: Broker, ctx: RequestContext, request: Any) -> Parked:
    delete = m.OffsetDelete(request.group_id, [
        m.OffsetDeleteTopic(t.name, [p.partition_index for p in t.partitions]) for t in request.topics])

    def convert(result: m.OffsetDeleteResult) -> Any:
        R = OffsetDeleteResponse
        return R(error_code=result.error_code, topics=[
            R.OffsetDeleteResponseTopic(name=t.name, partitions=[
                R.OffsetDeleteResponsePartition(partition_index=p.partition_index, error_code=p.error_code)
                for p in t.partitions])
            for t in result.topics])

    return park(broker, ctx, "offset_delete", delete, convert)


@handles("ListGroups")
def list_groups(broker: Broker, ctx: RequestContext, request: Any) -> Parked:
    def convert(result: m.ListGroupsResult) -> Any:
        R = ListGroupsResponse
        return R(error_code=result.error_code, groups=[
            R.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.group_state,
                          group_type=g.group_type)
            for g in result.groups])

    listing = m.ListGroups(list(request.states_filter), list(request.types_filter))
    return park(broker, ctx, "list_groups", listing, convert)


@handles("DescribeGroups")
def describe_groups(broker: Broker, ctx: RequestContext, request: Any) -> Parked:
    version = ctx.api_version

    def convert(result: m.DescribeGroupsResult) -> Any:
        R = DescribeGroupsResponse
        groups = []
        for g in result.groups:
            out = R.DescribedGroup(
                error_code=g.error_code, group_id=g.group_id, group_state=g.group_state,
                protocol_type=g.protocol_type, protocol_data=g.protocol_data,
                members=[R.DescribedGroupMember(
                    member_id=x.member_id, group_instance_id=x.group_instance_id, client_id=x.client_id,
                    client_host=x.client_host, member_metadata=x.member_metadata,
                    member_assignment=x.member_assignment) for x in g.members])
            if version >= 6 and g.group_state == "Dead" and not g.error_code:
                out.error_code = ErrorCode.GROUP_ID_NOT_FOUND
                out.error_message = g.error_message or f"group {g.group_id!r} does not exist"
            if not out.error_code:
                out.authorized_operations = operations_if(
                    bool(request.include_authorized_operations), ctx, ResourceType.GROUP, g.group_id
                )
            groups.append(out)
        return R(groups=groups)

    return park(broker, ctx, "describe_groups", m.DescribeGroups(list(request.groups)), convert)


@handles("DeleteGroups")
def delete_groups(broker: Broker, ctx: RequestContext, request: Any) -> Parked:
    def convert(result: m.DeleteGroupsResult) -> Any:
        R = DeleteGroupsResponse
        return R(results=[R.DeletableGroupResult(group_id=r.group_id, error_code=r.error_code)
                          for r in result.results])

    if broker.shares is not None and broker.groups.loaded:
        coordinator = broker.groups.coordinator
        for group_id in request.groups_names:
            group = coordinator.share.groups.get(group_id)
            if group is not None and group.is_empty():
                # Its share-partitions' state first: the group's record goes in the same group commit.
                broker.shares.drop_group(group_id, ctx.now_ms)
    return park(broker, ctx, "delete_groups", m.DeleteGroups(list(request.groups_names)), convert)


# --- KIP-848 consumer groups ---------------------------------------------------------------------


class BrokerTopics(Mapping[str, m.TopicInfo]):
    """The broker's user topics as the consumer-group coordinator sees them, read on demand so a
    heartbeat costs a lookup per subscribed topic, not a copy of all metadata."""

    def __init__(self, broker: Broker) -> None:
        self.storage = broker.storage

    def __getitem__(self, name: str) -> m.TopicInfo:
        meta = self.storage.topic(name)
        if meta is None or meta.internal:
            raise KeyError(name)
        return m.TopicInfo(meta.name, meta.topic_id, meta.partitions)

    def __iter__(self) -> Iterator[str]:
        return iter([meta.name for meta in self.storage.topics() if not meta.internal])

    def __len__(self) -> int:
        return sum(1 for meta in self.storage.topics() if not meta.internal)


@handles("ConsumerGroupHeartbeat", "0-1")
def consumer_group_heartbeat(broker: Broker, ctx: RequestContext, request: Any) -> Parked:
    owned = None if request.topic_partitions is None else [
        (t.topic_id, p) for t in request.topic_partitions for p in t.partitions]
    beat = m.ConsumerGroupHeartbeat(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=None if request.subscribed_topic_names is None else list(request.subscribed_topic_names),
        subscribed_topic_regex=request.subscribed_topic_regex if ctx.api_version >= 1 else None,
        server_assignor=request.server_assignor,
        topic_partitions=owned,
        api_version=ctx.api_version,
        client_id=ctx.client_id or "",
        client_host="/" + ctx.client_host,
        topics=BrokerTopics(broker),
    )

    def convert(result: m.ConsumerGroupHeartbeatResult) -> Any:
        R = ConsumerGroupHeartbeatResponse
        assignment = None
        if result.assignment is not None:
            assignment = R.Assignment(topic_partitions=[
                R.TopicPartitions(topic_id=t, partitions=ps) for t, ps in grouped_by_topic(result.assignment).items()])
        return R(error_code=result.error_code, error_message=result.error_message, member_id=result.member_id,
                 member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms,
                 assignment=assignment)

    return park(broker, ctx, "consumer_group_heartbeat", beat, convert)


@handles("ConsumerGroupDescribe", "0-1")
def consumer_group_describe(broker: Broker, ctx: RequestContext, request: Any) -> Parked:
    def convert(result: m.ConsumerGroupDescribeResult) -> Any:
        R = ConsumerGroupDescribeResponse
        G = R.DescribedGroup
        M = R.Member

        def assignment(tps: list[m.DescribedTopicPartitions]) -> Any:
            return R.Assignment(topic_partitions=[
                R.TopicPartitions(topic_id=t.topic_id, topic_name=t.topic_name, partitions=t.partitions)
                for t in tps])

        return R(groups=[
            G(error_code=g.error_code, error_message=g.error_message, group_id=g.group_id, group_state=g.group_state,
              group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch, assignor_name=g.assignor_name,
              members=[M(member_id=x.member_id, instance_id=x.instance_id, rack_id=x.rack_id,
                         member_epoch=x.member_epoch, client_id=x.client_id, client_host=x.client_host,
                         subscribed_topic_names=x.subscribed_topic_names,
                         subscribed_topic_regex=x.subscribed_topic_regex,
                         assignment=assignment(x.assignment), target_assignment=assignment(x.target_assignment),
                         member_type=CONSUMER_MEMBER_TYPE)
                       for x in g.members],
              authorized_operations=operations_if(
                  request.include_authorized_operations and not g.error_code, ctx, ResourceType.GROUP, g.group_id
              ))
            for g in result.groups])

    return park(broker, ctx, "consumer_group_describe", m.ConsumerGroupDescribe(list(request.group_ids)), convert)
