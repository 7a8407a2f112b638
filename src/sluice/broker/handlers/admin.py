"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords."""

from __future__ import annotations

from typing import Any

from sluice.broker.api import RequestContext, Respond, errors_into, handles, response_class
from sluice.broker.broker import OFFSETS_TOPIC, Broker, check_topic_name
from sluice.broker.config_defs import topic_config_problem
from sluice.errors import ErrorCode, KafkaError
from sluice.storage.config import validate_topic_configs

CreateTopicsResponse = response_class("CreateTopics")
DeleteTopicsResponse = response_class("DeleteTopics")
CreatePartitionsResponse = response_class("CreatePartitions")
DeleteRecordsResponse = response_class("DeleteRecords")


def _check_single_node(broker: Broker, replication_factor: int, assignments: list[Any] | None) -> None:
    if replication_factor not in (-1, 1):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {replication_factor} is impossible on sluice's single broker; use 1 or -1",
        )
    for assignment in assignments or ():
        if list(assignment.broker_ids) != [broker.config.node_id]:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"replicas {list(assignment.broker_ids)} name brokers other than node {broker.config.node_id}",
            )


def _create_one(broker: Broker, topic: Any, validate_only: bool) -> Any:
    R = CreateTopicsResponse
    result = R.CreatableTopicResult(name=topic.name)
    with errors_into(result):
        check_topic_name(topic.name)
        if topic.name.startswith("__"):
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"{topic.name!r}: names starting with '__' are reserved")
        _check_single_node(broker, topic.replication_factor, topic.assignments)
        partitions = topic.num_partitions
        if partitions == -1:
            partitions = len(topic.assignments) or broker.config.default_partitions
        if partitions < 1:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"number of partitions must be at least 1, got {partitions}")
        configs = {c.name: c.value for c in topic.configs}
        problem = topic_config_problem(configs) or validate_topic_configs(configs)
        if problem:
            raise KafkaError(ErrorCode.INVALID_CONFIG, problem)
        if broker.storage.topic(topic.name) is not None:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists")
        clean = {k: v for k, v in configs.items() if v is not None}
        if validate_only:
            result.num_partitions, result.replication_factor = partitions, 1
            return result
        meta = broker.create_topic(topic.name, partitions, clean)
        result.topic_id = meta.topic_id
        result.num_partitions, result.replication_factor = meta.partitions, 1
        result.configs = [
            R.CreatableTopicConfigs(name=name, value=value, config_source=1) for name, value in sorted(meta.configs.items())
        ]
    return result


@handles("CreateTopics", "2-7")
def create_topics(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    seen: set[str] = set()
    results = []
    for topic in request.topics:
        if topic.name in seen:
            results.append(
                CreateTopicsResponse.CreatableTopicResult(
                    name=topic.name, error_code=ErrorCode.INVALID_REQUEST, error_message="topic named twice in one request"
                )
            )
            continue
        seen.add(topic.name)
        results.append(_create_one(broker, topic, request.validate_only))
    return Respond(CreateTopicsResponse(topics=results))


@handles("DeleteTopics", "1-6")
def delete_topics(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = DeleteTopicsResponse
    wanted = (
        [(t.name, t.topic_id) for t in request.topics] if ctx.api_version >= 6 else [(n, None) for n in request.topic_names]
    )
    results = []
    for name, topic_id in wanted:
        meta = broker.storage.topic(name) if name is not None else broker.storage.topic_by_id(topic_id)
        result = R.DeletableTopicResult(name=name if name is not None else (meta.name if meta else None))
        if meta is not None:
            result.topic_id = meta.topic_id
        with errors_into(result):
            if meta is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name is not None else ErrorCode.UNKNOWN_TOPIC_ID
                raise KafkaError(code, f"topic {name or topic_id} does not exist")
            if meta.name == OFFSETS_TOPIC:
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "the internal offsets topic cannot be deleted")
            broker.delete_topic(meta.name)
        results.append(result)
    return Respond(R(responses=results))


@handles("CreatePartitions")
def create_partitions(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = CreatePartitionsResponse
    results = []
    for topic in request.topics:
        result = R.CreatePartitionsTopicResult(name=topic.name)
        with errors_into(result):
            meta = broker.storage.topic(topic.name)
            if meta is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic.name!r} does not exist")
            if topic.count <= meta.partitions:
                raise KafkaError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"topic {topic.name!r} has {meta.partitions} partitions; the new count must be larger, got {topic.count}",
                )
            _check_single_node(broker, 1, topic.assignments)
            if not request.validate_only:
                broker.create_partitions(topic.name, topic.count)
        results.append(result)
    return Respond(R(results=results))


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
