"""Produce and InitProducerId."""

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
InitProducerIdResponse = response_class("InitProducerId")


@handles("Produce")
def produce(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    refuse: tuple[ErrorCode, str] | None = None
    if request.acks not in (0, 1, -1):
        refuse = (ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, got {request.acks}")
    elif request.transactional_id is not None:
        refuse = (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactions are not supported by sluice")
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
                error, message, base, log_start = result.error, result.message, result.base_offset, result.log_start_offset
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
        topics.append(ProduceResponse.TopicProduceResponse(name=topic.name, topic_id=topic.topic_id, partition_responses=partitions))
    if request.acks == 0:
        return NoResponse()
    size = sum(len(p.records or b"") for t in request.topic_data for p in t.partition_data)
    response = throttled(broker, ctx, ProduceResponse(responses=topics), PRODUCER_BYTE_RATE, size, ctx.now_ms)
    if broker.config.fsync_before_ack:
        return RespondWhenDurable(response)
    return Respond(response)


@handles("InitProducerId")
def init_producer_id(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    if request.transactional_id is not None:
        return Respond(
            InitProducerIdResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
        )
    if request.producer_id >= 0:
        # KIP-360: an idempotent producer bumps its epoch after an unknown-sequence error and keeps its id.
        epoch = (request.producer_epoch + 1) & 0x7FFF
        return Respond(InitProducerIdResponse(error_code=0, producer_id=request.producer_id, producer_epoch=epoch))
    return Respond(InitProducerIdResponse(error_code=0, producer_id=broker.new_producer_id(ctx.now_ms), producer_epoch=0))
