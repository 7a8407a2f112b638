"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from sluice.broker.api import (
    RequestContext,
    Respond,
    RespondWhenDurable,
    errors_into,
    handles,
    response_class,
)
from sluice.broker.broker import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, Broker, check_topic_name
from sluice.broker.config_defs import topic_config_problem
from sluice.broker.handlers.configs import topic_config_view
from sluice.broker.quotas import MutationQuota, mutation_quota
from sluice.errors import ErrorCode, KafkaError
from sluice.storage.api import TopicMeta
from sluice.storage.config import validate_topic_configs

CreateTopicsResponse = response_class("CreateTopics")
DeleteTopicsResponse = response_class("DeleteTopics")
CreatePartitionsResponse = response_class("CreatePartitions")
DeleteRecordsResponse = response_class("DeleteRecords")


# Kafka's controller writes at most this many records for one user operation, so a request adding more
# partitions than this is refused whole (QuorumController.MAX_RECORDS_PER_USER_OP); it also keeps a hostile
# request from making millions of directories.
MAX_PARTITIONS_PER_REQUEST = 10_000
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."
DUPLICATE_NAME = "Duplicate topic name."
THROTTLED = "The throttling quota has been exceeded."
UNKNOWN_TOPIC_TEXT = "This server does not host this topic-partition."
# Names the broker creates for itself when first needed; a user topic by that name would take their place.
RESERVED_TOPICS = frozenset({TRANSACTION_STATE_TOPIC, "__cluster_metadata"})


def _duplicates(names: list[Any]) -> set[Any]:
    return {name for name, count in Counter(names).items() if count > 1}


def _check_assignments(broker: Broker, assignments: list[Any], replicas: int | None = None) -> None:
    """Kafka's validateManualPartitionAssignment on a one-broker cluster: each partition names exactly this
    node, once (and as many replicas as the topic has, when growing one)."""
    node = broker.config.node_id
    for assignment in assignments:
        ids = sorted(assignment.broker_ids)
        if not ids:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.",
            )
        previous = None
        for broker_id in ids:
            if broker_id != node:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {broker_id}, but no such broker is registered.",
                )
            if broker_id == previous:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes the broker {broker_id} more than once.",
                )
            previous = broker_id
        if replicas is not None and len(ids) != replicas:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes a partition with {len(ids)} replica(s), but this is not "
                f"consistent with previous partitions, which have {replicas} replica(s).",
            )


def _partition_count(broker: Broker, topic: Any) -> int:
    """Partitions the topic would get, checking the shape of the request the way Kafka's controller does."""
    if topic.assignments:
        if topic.replication_factor != -1:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                "A manual partition assignment was specified, but replication factor was not set to -1.",
            )
        if topic.num_partitions != -1:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                "A manual partition assignment was specified, but numPartitions was not set to -1.",
            )
        indexes = [a.partition_index for a in topic.assignments]
        repeated = _duplicates(indexes)
        if repeated:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Found multiple manual partition assignments for partition {min(repeated)}",
            )
        _check_assignments(broker, topic.assignments)
        if sorted(indexes) != list(range(len(indexes))):
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "partitions should be a consecutive 0-based integer sequence",
            )
        return len(indexes)
    if topic.replication_factor < -1 or topic.replication_factor == 0:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    if topic.num_partitions < -1 or topic.num_partitions == 0:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."
        )
    if topic.replication_factor > 1:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {topic.replication_factor} time(s): The target replication factor of "
            f"{topic.replication_factor} cannot be reached because only 1 broker(s) are registered.",
        )
    return broker.config.default_partitions if topic.num_partitions == -1 else topic.num_partitions


def _colliding(broker: Broker, name: str) -> str | None:
    """An existing topic whose name differs from `name` only by '.' against '_' (their metric names clash)."""
    if "." not in name and "_" not in name:
        return None
    normal = name.replace(".", "_")
    for meta in broker.storage.topics():
        if meta.name != name and meta.name.replace(".", "_") == normal:
            return meta.name
    return None


def _charge(quota: MutationQuota, partitions: int, validate_only: bool) -> None:
    """KIP-599: refuse the topic while the controller_mutation_rate bucket is below zero, else count it."""
    if quota.exceeded():
        raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLED)
    if not validate_only:
        quota.record(partitions)


def _create_one(broker: Broker, topic: Any, validate_only: bool, quota: MutationQuota) -> Any:
    R = CreateTopicsResponse
    result = R.CreatableTopicResult(name=topic.name, error_message=None)  # Kafka sends null on success
    # Kafka's order: the name, then existence, then configs, then partitions and replicas.
    with errors_into(result):
        check_topic_name(topic.name)
        if broker.storage.topic(topic.name) is not None:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic.name}' already exists.")
        if topic.name in RESERVED_TOPICS:
            raise KafkaError(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"{topic.name!r} is reserved for the broker's internal topic",
            )
        collision = _colliding(broker, topic.name)
        if collision is not None:
            raise KafkaError(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic '{topic.name}' collides with existing topic: {collision}",
            )
        configs = {c.name: c.value for c in topic.configs}
        nulls = [name for name, value in configs.items() if value is None]
        if nulls:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {','.join(nulls)}"
            )
        problem = topic_config_problem(configs) or validate_topic_configs(configs)
        if problem:
            raise KafkaError(ErrorCode.INVALID_CONFIG, problem)
        partitions = _partition_count(broker, topic)
        _charge(quota, partitions, validate_only)
        clean = {k: v for k, v in configs.items() if v is not None}
        if validate_only:
            # The topic as it would be: Kafka answers validate_only with the same partitions and configs.
            meta = TopicMeta(
                topic.name, uuid.UUID(int=0), partitions, {**broker.config.topic_defaults, **clean}
            )
        else:
            meta = broker.create_topic(topic.name, partitions, clean)
            result.topic_id = meta.topic_id
        result.num_partitions, result.replication_factor = meta.partitions, 1
        result.configs = [
            R.CreatableTopicConfigs(
                name=name, value=value, read_only=False, config_source=source, is_sensitive=secret
            )
            for name, value, source, secret in topic_config_view(broker, meta)
        ]
    return result


def _requested_partitions(broker: Broker, topics: list[Any]) -> int:
    total = 0
    for topic in topics:
        if topic.assignments:
            total += len(topic.assignments)
        elif topic.num_partitions == -1:
            total += broker.config.default_partitions
        elif topic.num_partitions > 0:
            total += topic.num_partitions
    return total


@handles("CreateTopics", "2-7")
def create_topics(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = CreateTopicsResponse
    if _requested_partitions(broker, request.topics) > MAX_PARTITIONS_PER_REQUEST:
        refused = [
            R.CreatableTopicResult(
                name=t.name, error_code=ErrorCode.POLICY_VIOLATION, error_message=TOO_MANY_PARTITIONS
            )
            for t in request.topics
        ]
        return Respond(R(topics=refused))
    # A name given twice is answered once and created not at all (Kafka's ControllerApis).
    duplicates = _duplicates([t.name for t in request.topics])
    results = [
        R.CreatableTopicResult(name=name, error_code=ErrorCode.INVALID_REQUEST, error_message=DUPLICATE_NAME)
        for name in sorted(duplicates)
    ]
    quota = mutation_quota(ctx, strict=ctx.api_version >= 6)
    for topic in request.topics:
        if topic.name not in duplicates:
            results.append(_create_one(broker, topic, request.validate_only, quota))
    return Respond(R(topics=results, throttle_time_ms=quota.throttle_ms()))


@handles("DeleteTopics", "1-6")
def delete_topics(broker: Broker, ctx: RequestContext, request: Any) -> Respond | RespondWhenDurable:
    R = DeleteTopicsResponse
    wanted = (
        [(t.name, t.topic_id) for t in request.topics]
        if ctx.api_version >= 6
        else [(n, None) for n in request.topic_names]
    )
    # Kafka's ControllerApis deletes nothing named twice, by name or by id, and answers it once.
    twice = _duplicates([name for name, _ in wanted if name is not None])
    twice_ids = _duplicates([topic_id for name, topic_id in wanted if name is None])
    results = [
        R.DeletableTopicResult(name=n, error_code=ErrorCode.INVALID_REQUEST, error_message=DUPLICATE_NAME)
        for n in sorted(twice)
    ]
    results += [
        R.DeletableTopicResult(
            name=None, topic_id=i, error_code=ErrorCode.INVALID_REQUEST, error_message="Duplicate topic id."
        )
        for i in sorted(twice_ids, key=str)
    ]
    quota = mutation_quota(ctx, strict=ctx.api_version >= 5)
    deleted: list[str] = []
    for name, topic_id in wanted:
        if name in twice or (name is None and topic_id in twice_ids):
            continue
        meta = broker.storage.topic(name) if name is not None else broker.storage.topic_by_id(topic_id)
        result = R.DeletableTopicResult(name=name if name is not None else (meta.name if meta else None))
        if meta is not None:
            result.topic_id = meta.topic_id
        with errors_into(result):
            if meta is None:
                # Kafka's controller answers with the error's own text (ApiError(Errors)).
                if name is not None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_TEXT)
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")
            if meta.name == OFFSETS_TOPIC:
                raise KafkaError(
                    ErrorCode.TOPIC_AUTHORIZATION_FAILED, "the internal offsets topic cannot be deleted"
                )
            _charge(quota, meta.partitions, validate_only=False)
            broker.delete_topic(meta.name)
            deleted.append(meta.name)
            if broker.shares is not None:
                # Share groups' state of the topic goes with it; a topic made again under the name is new.
                broker.shares.drop_topic(meta.topic_id, ctx.now_ms)
        results.append(result)
    response = R(responses=results, throttle_time_ms=quota.throttle_ms())
    if deleted and broker.groups is not None and broker.groups.topics_deleted(deleted, ctx.now_ms):
        # The offsets' tombstones are durable before the answer: a crash cannot bring them back.
        return RespondWhenDurable(response)
    return Respond(response)


@handles("CreatePartitions")
def create_partitions(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = CreatePartitionsResponse
    duplicates = _duplicates([t.name for t in request.topics])
    results = [
        R.CreatePartitionsTopicResult(
            name=name, error_code=ErrorCode.INVALID_REQUEST, error_message=DUPLICATE_NAME
        )
        for name in sorted(duplicates)
    ]
    budget = MAX_PARTITIONS_PER_REQUEST
    quota = mutation_quota(ctx, strict=ctx.api_version >= 3)
    for topic in request.topics:
        if topic.name in duplicates:
            continue
        result = R.CreatePartitionsTopicResult(name=topic.name)
        with errors_into(result):
            meta = broker.storage.topic(topic.name)
            if meta is None:
                # Kafka's controller throws UnknownTopicOrPartitionException() without a message: null.
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                results.append(result)
                continue
            if topic.count < meta.partitions:
                raise KafkaError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"The topic {topic.name} currently has {meta.partitions} partition(s); {topic.count} would not be "
                    f"an increase.",
                )
            if topic.count == meta.partitions:
                raise KafkaError(
                    ErrorCode.INVALID_PARTITIONS, f"Topic already has {meta.partitions} partition(s)."
                )
            added = topic.count - meta.partitions
            if topic.assignments is not None:
                if len(topic.assignments) != added:
                    raise KafkaError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Attempted to add {added} additional partition(s), but only {len(topic.assignments)} "
                        f"assignment(s) were specified.",
                    )
                _check_assignments(broker, topic.assignments, replicas=1)
            if added > budget:
                raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_PARTITIONS)
            budget -= added
            _charge(quota, added, request.validate_only)
            if not request.validate_only:
                broker.create_partitions(topic.name, topic.count)
        results.append(result)
    return Respond(R(results=results, throttle_time_ms=quota.throttle_ms()))


@handles("DeleteRecords")
def delete_records(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = DeleteRecordsResponse
    topics = []
    for topic in request.topics:
        partitions = []
        for part in topic.partitions:
            result = R.DeleteRecordsPartitionResult(partition_index=part.partition_index, low_watermark=-1)
            try:
                state = broker.partition(topic.name, part.partition_index)
                offset = state.high_watermark if part.offset == -1 else part.offset
                if offset > state.high_watermark or offset < 0:
                    raise KafkaError(
                        ErrorCode.OFFSET_OUT_OF_RANGE,
                        f"offset {part.offset} is past the high watermark {state.high_watermark}",
                    )
                result.low_watermark = state.log.delete_records_before(offset)
            except KafkaError as exc:
                result.error_code = exc.code
            partitions.append(result)
        topics.append(R.DeleteRecordsTopicResult(name=topic.name, partitions=partitions))
    return Respond(R(topics=topics))
