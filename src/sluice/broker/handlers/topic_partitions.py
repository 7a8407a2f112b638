"""DescribeTopicPartitions (KIP-966): topics and their partitions in name order, paged by a cursor."""

from __future__ import annotations

from typing import Any

from sluice.broker.api import RequestContext, Respond, handles, response_class
from sluice.broker.authorized_ops import authorized_operations
from sluice.broker.broker import Broker
from sluice.broker.topic_cache import PerTopicCache
from sluice.errors import ErrorCode
from sluice.security.acl import ResourceType
from sluice.storage.api import TopicMeta

DescribeTopicPartitionsResponse = response_class("DescribeTopicPartitions")
# max.request.partition.size.limit: the most partitions one response carries, whatever the client asks.
MAX_PARTITIONS_PER_RESPONSE = 2000


def _partitions(broker: Broker, meta: TopicMeta) -> list[Any]:
    # With 1,000 topics, building their 2,000 entries on every call cost more than encoding them.
    cache = _PARTITIONS.get(broker.config.node_id)
    if cache is None:
        node = broker.config.node_id
        cache = _PARTITIONS[node] = PerTopicCache(
            lambda meta: [
                DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponsePartition(
                    error_code=0,
                    partition_index=i,
                    leader_id=node,
                    leader_epoch=0,
                    replica_nodes=[node],
                    isr_nodes=[node],
                    eligible_leader_replicas=[],
                    last_known_elr=[],
                    offline_replicas=[],
                )
                for i in range(meta.partitions)
            ]
        )
    return cache.get(meta, broker.storage.topic)


_PARTITIONS: dict[int, PerTopicCache[list[Any]]] = {}


@handles("DescribeTopicPartitions")
def describe_topic_partitions(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = DescribeTopicPartitionsResponse
    fetch_all = not request.topics
    names = (
        sorted(m.name for m in broker.storage.topics())
        if fetch_all
        else sorted({t.name for t in request.topics})
    )
    cursor = request.cursor
    if cursor is not None:
        if cursor.partition_index < 0 or (not fetch_all and cursor.topic_name not in names):
            # Kafka refuses a cursor outside the request's topics, or a negative partition.
            topic = R.DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.INVALID_REQUEST, name=cursor.topic_name
            )
            return Respond(R(topics=[topic]))
        names = [n for n in names if n >= cursor.topic_name]
    budget = min(max(request.response_partition_limit, 1), MAX_PARTITIONS_PER_RESPONSE)
    topics: list[Any] = []
    next_cursor = None
    for name in names:
        meta = broker.storage.topic(name)
        if meta is None:
            topics.append(
                R.DescribeTopicPartitionsResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name
                )
            )
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        if budget == 0:
            next_cursor = R.Cursor(topic_name=name, partition_index=first)
            break
        last = min(meta.partitions, first + budget)
        partitions = _partitions(broker, meta)[first:last]
        budget -= len(partitions)
        topics.append(
            R.DescribeTopicPartitionsResponseTopic(
                error_code=0,
                name=name,
                topic_id=meta.topic_id,
                is_internal=meta.internal,
                partitions=partitions,
                # The request has no "include" flag: Kafka always reports the operations here.
                topic_authorized_operations=authorized_operations(ctx, ResourceType.TOPIC, name),
            )
        )
        if last < meta.partitions:
            next_cursor = R.Cursor(topic_name=name, partition_index=last)
            break
    return Respond(R(topics=topics, next_topic_partition=next_cursor))
