"""Produce (InitProducerId is with the transaction APIs)."""

from __future__ import annotations

from typing import Any

from sluice.broker.api import (
    NoResponse,
    Outcome,
    RequestContext,
    Respond,
    RespondEncoded,
    RespondWhenDurable,
    handles,
    response_class,
)
from sluice.broker.broker import AppendResult, Broker
from sluice.broker.quotas import PRODUCER_BYTE_RATE, throttled
from sluice.errors import ErrorCode
from sluice.protocol.codec import Encoded
from sluice.protocol.produce_answer import accepted_answer
from sluice.protocol.produce_request import OnePartition

ProduceResponse = response_class("Produce")
_TopicResponse = ProduceResponse.TopicProduceResponse
_PartitionResponse = ProduceResponse.PartitionProduceResponse
_RecordError = ProduceResponse.BatchIndexAndErrorMessage


@handles("Produce")
def produce(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    # acks=-1 is never refused for min.insync.replicas: since Kafka 3.7 (KAFKA-15583) a leader checks its ISR
    # against min(min.insync.replicas, replica count), and each sluice partition has one replica, its in-sync
    # leader. tests/compat/test_min_insync_replicas.py holds the broker to that.
    # Runs once per Produce request (for a producer with linger 0, once per message): names are bound
    # locally.
    acks = request.acks
    bad_acks = acks not in (0, 1, -1)
    by_id = ctx.api_version >= 13
    now_ms = ctx.now_ms
    append = broker.append
    size = 0  # record bytes, for the byte-rate quota
    topics = []
    for topic in request.topic_data:
        name = topic.name
        if by_id:
            meta = broker.storage.topic_by_id(topic.topic_id)
            name = meta.name if meta else None
        partitions = []
        for part in topic.partition_data:
            records = part.records
            if records is not None:
                size += len(records)
            if bad_acks:
                answer = _refused_acks(part.index, acks)
            elif name is None:
                answer = _PartitionResponse(
                    index=part.index,
                    error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                    base_offset=-1,
                    error_message="unknown topic id",
                )
            else:
                answer = _appended(part.index, append(name, part.index, records, now_ms))
            partitions.append(answer)
        topics.append(
            _TopicResponse(name=topic.name, topic_id=topic.topic_id, partition_responses=partitions)
        )
    if acks == 0:
        return NoResponse()
    response = throttled(ctx, ProduceResponse(responses=topics), PRODUCER_BYTE_RATE, size, now_ms)
    if broker.config.fsync_before_ack:
        return RespondWhenDurable(response)
    return Respond(response)


def produce_one(broker: Broker, request: OnePartition, now_ms: int) -> Outcome:
    """A Produce of the common shape (sluice.protocol.produce_request: one partition, by topic name, no
    transaction) when no quota or authorizer applies: what `produce` answers, with an accepted append's
    answer encoded at once instead of built and then encoded (sent when durable, with fsync_before_ack)."""
    acks, topic, index, records = request
    durable = broker.config.fsync_before_ack
    if acks not in (0, 1, -1):
        answer = _refused_acks(index, acks)
    else:
        result = broker.append(topic, index, records, now_ms)
        if acks == 0:
            return NoResponse()
        if result.error == ErrorCode.NONE and not result.record_errors:
            body = accepted_answer(topic, index, result.base_offset, result.log_start_offset)
            if body is not None:
                if durable:
                    return RespondWhenDurable(Encoded(body, lambda: _one_answer(topic, _appended(index, result))))
                return RespondEncoded(body)
        answer = _appended(index, result)
    response = _one_answer(topic, answer)
    return RespondWhenDurable(response) if durable else Respond(response)


def _one_answer(topic: str, answer: Any) -> Any:
    return ProduceResponse(responses=[_TopicResponse(name=topic, partition_responses=[answer])])


def _refused_acks(index: int, acks: int) -> Any:
    return _PartitionResponse(
        index=index,
        error_code=ErrorCode.INVALID_REQUIRED_ACKS,
        base_offset=-1,
        error_message=f"acks must be 0, 1 or -1, got {acks}",
    )


def _appended(index: int, result: AppendResult) -> Any:
    """The answer for partition `index` whose append gave `result`."""
    answer = _PartitionResponse(
        index=index,
        error_code=result.error,
        base_offset=result.base_offset,
        log_start_offset=result.log_start_offset,
        error_message=result.message,
    )
    if result.record_errors:
        answer.record_errors = [
            _RecordError(batch_index=i, batch_index_error_message=m) for i, m in result.record_errors
        ]
    return answer


def refuse_unflushed(broker: Broker, response: Any, failed: dict[tuple[str, int], str]) -> Any | None:
    """A produce response waiting for that fsync, with the answers for partitions whose fsync failed turned
    into KAFKA_STORAGE_ERROR (an answer the fast path encoded is built first). None when `response` is not
    a produce response."""
    if type(response) is Encoded:
        response = response.build()
    if not isinstance(response, ProduceResponse):
        return None
    for topic in response.responses:
        name = topic.name
        if not name and topic.topic_id is not None:
            meta = broker.storage.topic_by_id(topic.topic_id)
            name = meta.name if meta else None
        for part in topic.partition_responses:
            reason = failed.get((name, part.index))
            if reason is not None and part.error_code == ErrorCode.NONE:
                part.error_code, part.error_message, part.base_offset = (
                    ErrorCode.KAFKA_STORAGE_ERROR,
                    reason,
                    -1,
                )
    return response
