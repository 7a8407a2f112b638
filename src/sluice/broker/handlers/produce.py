"""Produce (InitProducerId is with the transaction APIs)."""

from __future__ import annotations

from typing import Any

from sluice.broker.api import (
    NoResponse,
    Outcome,
    RequestContext,
    Respond,
    RespondWhenDurable,
    handles,
    response_class,
)
from sluice.broker.broker import Broker
from sluice.broker.quotas import PRODUCER_BYTE_RATE, throttled
from sluice.errors import ErrorCode

ProduceResponse = response_class("Produce")


@handles("Produce")
def produce(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    refuse: tuple[ErrorCode, str] | None = None
    if request.acks not in (0, 1, -1):
        refuse = (ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, got {request.acks}")
    topics = []
    for topic in request.topic_data:
        name = topic.name
        if ctx.api_version >= 13:
            meta = broker.storage.topic_by_id(topic.topic_id)
            name = meta.name if meta else None
        partitions = []
        for part in topic.partition_data:
            record_errors: list[tuple[int, str]] = []
            if refuse is not None:
                error, message, base, log_start = refuse[0], refuse[1], -1, -1
            elif name is None:
                error, message, base, log_start = ErrorCode.UNKNOWN_TOPIC_ID, "unknown topic id", -1, -1
            else:
                result = broker.append(name, part.index, part.records, ctx.now_ms)
                error, message, base, log_start = (
                    result.error,
                    result.message,
                    result.base_offset,
                    result.log_start_offset,
                )
                record_errors = result.record_errors
            partitions.append(
                ProduceResponse.PartitionProduceResponse(
                    index=part.index,
                    error_code=error,
                    base_offset=base,
                    log_start_offset=log_start,
                    error_message=message,
                    record_errors=[
                        ProduceResponse.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                        for i, m in record_errors
                    ],
                )
            )
        topics.append(
            ProduceResponse.TopicProduceResponse(
                name=topic.name, topic_id=topic.topic_id, partition_responses=partitions
            )
        )
    if request.acks == 0:
        return NoResponse()
    size = sum(len(p.records or b"") for t in request.topic_data for p in t.partition_data)
    response = throttled(ctx, ProduceResponse(responses=topics), PRODUCER_BYTE_RATE, size, ctx.now_ms)
    if broker.config.fsync_before_ack:
        return RespondWhenDurable(response)
    return Respond(response)


def refuse_unflushed(broker: Broker, response: Any, failed: dict[tuple[str, int], str]) -> bool:
    """Turn the answers for partitions whose fsync failed into KAFKA_STORAGE_ERROR, in a produce response
    waiting for that fsync. False when `response` is not a produce response."""
    if not isinstance(response, ProduceResponse):
        return False
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
    return True
