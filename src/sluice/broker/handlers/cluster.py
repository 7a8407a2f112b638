"""Replica and cluster administration, answered truthfully for one node that is its own controller:
DescribeLogDirs, AlterReplicaLogDirs, ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments,
DescribeQuorum, UpdateFeatures and DescribeProducers (KIP-664)."""

from __future__ import annotations

from typing import Any

from sluice.broker.api import RequestContext, Respond, handles, response_class
from sluice.broker.broker import Broker
from sluice.errors import ErrorCode

DescribeLogDirsResponse = response_class("DescribeLogDirs")
AlterReplicaLogDirsResponse = response_class("AlterReplicaLogDirs")
ElectLeadersResponse = response_class("ElectLeaders")
AlterPartitionReassignmentsResponse = response_class("AlterPartitionReassignments")
ListPartitionReassignmentsResponse = response_class("ListPartitionReassignments")
DescribeQuorumResponse = response_class("DescribeQuorum")
UpdateFeaturesResponse = response_class("UpdateFeatures")
DescribeProducersResponse = response_class("DescribeProducers")

# KRaft's own metadata log: what DescribeQuorum describes (Kafka's __cluster_metadata, partition 0).
METADATA_TOPIC = "__cluster_metadata"


def _exists(broker: Broker, topic: str, index: int) -> bool:
    return (topic, index) in broker.partitions


@handles("DescribeLogDirs")
def describe_log_dirs(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = DescribeLogDirsResponse
    if request.topics is None:
        wanted = sorted(broker.partitions)
    else:
        wanted = [(t.topic, i) for t in request.topics for i in t.partitions if _exists(broker, t.topic, i)]
    by_topic: dict[str, list[Any]] = {}
    for topic, index in wanted:
        state = broker.partitions[(topic, index)]
        by_topic.setdefault(topic, []).append(
            R.DescribeLogDirsPartition(
                partition_index=index,
                partition_size=state.log.size_bytes,
                # Kafka's OffsetLag for a current log: log end minus high watermark.
                offset_lag=max(0, state.log.log_end_offset - state.high_watermark),
                is_future_key=False,
            )
        )
    path, total, usable = broker.log_dir()
    result = R.DescribeLogDirsResult(
        error_code=0,
        log_dir=path,
        topics=[R.DescribeLogDirsTopic(name=name, partitions=parts) for name, parts in by_topic.items()],
        total_bytes=total,
        usable_bytes=usable,
    )
    return Respond(R(results=[result]))


@handles("AlterReplicaLogDirs")
def alter_replica_log_dirs(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = AlterReplicaLogDirsResponse
    own_dir = broker.log_dir()[0]
    results: dict[str, list[Any]] = {}
    for directory in request.dirs:
        for topic in directory.topics:
            for index in topic.partitions:
                if not _exists(broker, topic.name, index):
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif directory.path != own_dir:
                    # The broker has one log directory: any other path is not one of its log dirs.
                    code = ErrorCode.LOG_DIR_NOT_FOUND
                else:
                    code = ErrorCode.NONE
                results.setdefault(topic.name, []).append(
                    R.AlterReplicaLogDirPartitionResult(partition_index=index, error_code=code)
                )
    return Respond(
        R(
            results=[
                R.AlterReplicaLogDirTopicResult(topic_name=name, partitions=parts)
                for name, parts in results.items()
            ]
        )
    )


@handles("ElectLeaders")
def elect_leaders(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = ElectLeadersResponse
    # With every partition asked for, Kafka leaves out the partitions that need no election: on one node,
    # that is all of them.
    results = []
    for topic in request.topic_partitions or ():
        parts = []
        for index in topic.partition_id:
            if _exists(broker, topic.topic, index):
                code, message = ErrorCode.ELECTION_NOT_NEEDED, "leader is already the preferred replica"
            else:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic.topic}-{index} does not exist"
            parts.append(R.PartitionResult(partition_id=index, error_code=code, error_message=message))
        results.append(R.ReplicaElectionResult(topic=topic.topic, partition_result=parts))
    return Respond(R(error_code=0, replica_election_results=results))


@handles("AlterPartitionReassignments")
def alter_partition_reassignments(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = AlterPartitionReassignmentsResponse
    node = broker.config.node_id
    responses = []
    for topic in request.topics:
        parts = []
        for part in topic.partitions:
            code, message = ErrorCode.NONE, None
            if not _exists(broker, topic.name, part.partition_index):
                code, message = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"{topic.name}-{part.partition_index} does not exist",
                )
            elif part.replicas is None:
                code, message = (
                    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                    "no reassignment is in progress to cancel",
                )
            elif not part.replicas:
                code, message = ErrorCode.INVALID_REPLICA_ASSIGNMENT, "the replica list is empty"
            elif list(part.replicas) != [node]:
                code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
                message = f"replicas {list(part.replicas)} name brokers other than node {node}"
            # Otherwise the target is the current assignment: the reassignment completes at once.
            parts.append(
                R.ReassignablePartitionResponse(
                    partition_index=part.partition_index, error_code=code, error_message=message
                )
            )
        responses.append(R.ReassignableTopicResponse(name=topic.name, partitions=parts))
    # v1 (KIP-860) echoes whether the request allowed replication factor changes.
    return Respond(
        R(
            error_code=0,
            error_message=None,
            responses=responses,
            allow_replication_factor_change=request.allow_replication_factor_change,
        )
    )


@handles("ListPartitionReassignments")
def list_partition_reassignments(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    # No reassignment is ever in progress on one node; Kafka lists only ongoing ones (and skips unknown
    # partitions rather than failing the request).
    return Respond(ListPartitionReassignmentsResponse(error_code=0, error_message=None, topics=[]))


@handles("DescribeQuorum")
def describe_quorum(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = DescribeQuorumResponse
    node = broker.config.node_id
    topics = []
    for topic in request.topics:
        parts = []
        for part in topic.partitions:
            if topic.topic_name != METADATA_TOPIC or part.partition_index != 0:
                parts.append(
                    R.PartitionData(
                        partition_index=part.partition_index,
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        error_message=f"{topic.topic_name}-{part.partition_index} is not the metadata quorum",
                        leader_id=-1,
                        leader_epoch=-1,
                        high_watermark=-1,
                    )
                )
                continue
            # The node is the single voter and leader; its metadata log end is the number of topics it
            # has recorded, a stand-in that grows as Kafka's metadata offsets do.
            end = broker.metadata_offset()
            voter = R.ReplicaState(
                replica_id=node,
                log_end_offset=end,
                last_fetch_timestamp=ctx.now_ms,
                last_caught_up_timestamp=ctx.now_ms,
            )
            parts.append(
                R.PartitionData(
                    partition_index=0,
                    error_code=0,
                    leader_id=node,
                    leader_epoch=1,
                    high_watermark=end,
                    current_voters=[voter],
                    observers=[],
                )
            )
        topics.append(R.TopicData(topic_name=topic.topic_name, partitions=parts))
    host, port = broker.config.advertised
    nodes = [R.Node(node_id=node, listeners=[R.Listener(name="PLAINTEXT", host=host, port=port)])]
    return Respond(R(error_code=0, topics=topics, nodes=nodes))


@handles("UpdateFeatures")
def update_features(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = UpdateFeaturesResponse
    # sluice finalizes no feature flags (ApiVersions lists none), so every update names a feature the
    # controller does not support: Kafka's answer for that is INVALID_UPDATE_VERSION per feature.
    results = [
        R.UpdatableFeatureResult(
            feature=update.feature,
            error_code=ErrorCode.INVALID_UPDATE_VERSION,
            # Kafka's FeatureControlManager text for a feature its controller does not know.
            error_message=f"Invalid update version {update.max_version_level} for feature {update.feature}. "
            + (
                "A feature version cannot be less than 0."
                if update.max_version_level < 0
                else f"Local controller {broker.config.node_id} does not support this feature."
            ),
        )
        for update in request.feature_updates
    ]
    if ctx.api_version >= 1 and results:
        # From v1 Kafka fails the whole request with the first feature's error.
        first = results[0]
        return Respond(R(error_code=first.error_code, error_message=first.error_message, results=results))
    return Respond(R(error_code=0, error_message=None, results=results))


@handles("DescribeProducers")
def describe_producers(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = DescribeProducersResponse
    topics = []
    for topic in request.topics:
        parts = []
        for index in topic.partition_indexes:
            if not _exists(broker, topic.name, index):
                parts.append(
                    R.PartitionResponse(
                        partition_index=index,
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        error_message=f"{topic.name}-{index} does not exist",
                    )
                )
                continue
            producers = [
                R.ProducerState(
                    producer_id=p.producer_id,
                    producer_epoch=p.epoch,
                    last_sequence=p.last_sequence,
                    last_timestamp=p.last_timestamp,
                    coordinator_epoch=p.coordinator_epoch,
                    current_txn_start_offset=p.current_txn_start_offset,
                )
                for p in broker.active_producers(topic.name, index)
            ]
            parts.append(R.PartitionResponse(partition_index=index, error_code=0, active_producers=producers))
        topics.append(R.TopicResponse(name=topic.name, partitions=parts))
    return Respond(R(topics=topics))
