"""ApiVersions, Metadata and DescribeCluster: what the broker is and what it serves."""

from __future__ import annotations

from typing import Any

from sluice.broker.api import HANDLERS, RequestContext, Respond, handles, response_class
from sluice.broker.authorized_ops import authorized_operations, operations_if
from sluice.broker.broker import Broker, check_topic_name
from sluice.broker.topic_cache import PerTopicCache
from sluice.errors import ErrorCode, KafkaError
from sluice.security.acl import ResourceType
from sluice.storage.api import TopicMeta

ApiVersionsResponse = response_class("ApiVersions")
MetadataResponse = response_class("Metadata")
DescribeClusterResponse = response_class("DescribeCluster")


def api_versions_body(error: ErrorCode = ErrorCode.NONE) -> Any:
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
        for key, low, high in HANDLERS.supported()
    ]
    return ApiVersionsResponse(error_code=error, api_keys=keys)


def unsupported_api_versions(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    """An ApiVersions of a version no handler serves: answered in v0 (sluice.broker.dispatch), so the client
    can pick a version it shares with the broker."""
    return Respond(api_versions_body(ErrorCode.UNSUPPORTED_VERSION))


@handles("ApiVersions")
def api_versions(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    return Respond(api_versions_body())


def _build_partitions(node: int, meta: TopicMeta) -> list[Any]:
    return [
        MetadataResponse.MetadataResponsePartition(
            error_code=0, partition_index=index, leader_id=node, leader_epoch=0, replica_nodes=[node], isr_nodes=[node]
        )
        for index in range(meta.partitions)
    ]


# Partition entries are the bulk of an all-topics answer (2,000 of them with 1,000 topics): built once per
# TopicMeta and node rather than on every call.
_PARTITIONS: dict[int, PerTopicCache[list[Any]]] = {}


def _partitions(broker: Broker, meta: TopicMeta) -> list[Any]:
    node = broker.config.node_id
    cache = _PARTITIONS.get(node)
    if cache is None:
        cache = _PARTITIONS[node] = PerTopicCache(lambda meta: _build_partitions(node, meta))
    return cache.get(meta, broker.storage.topic)


def _topic(broker: Broker, meta: TopicMeta) -> Any:
    return MetadataResponse.MetadataResponseTopic(
        error_code=0, name=meta.name, topic_id=meta.topic_id, is_internal=meta.internal, partitions=_partitions(broker, meta)
    )


def _missing_topic(name: str | None, error: ErrorCode, topic_id: Any = None) -> Any:
    topic = MetadataResponse.MetadataResponseTopic(error_code=error, name=name)
    if topic_id is not None:
        topic.topic_id = topic_id
    return topic


@handles("Metadata")
def metadata(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    host, port = broker.config.advertised_for(ctx.listener)
    all_topics = request.topics is None or (ctx.api_version == 0 and not request.topics)
    topics: list[Any] = []
    if all_topics:
        topics = [_topic(broker, meta) for meta in sorted(broker.storage.topics(), key=lambda m: m.name)]
    else:
        for wanted in request.topics:
            if wanted.name is None:
                meta = broker.storage.topic_by_id(wanted.topic_id)
                topics.append(_topic(broker, meta) if meta else _missing_topic(None, ErrorCode.UNKNOWN_TOPIC_ID, wanted.topic_id))
                continue
            try:
                check_topic_name(wanted.name)
            except KafkaError:
                topics.append(_missing_topic(wanted.name, ErrorCode.INVALID_TOPIC_EXCEPTION))
                continue
            try:
                meta = broker.topic_for_metadata(wanted.name, request.allow_auto_topic_creation)
            except KafkaError as exc:  # auto-creation failed (a full disk): metadata itself keeps working
                topics.append(_missing_topic(wanted.name, exc.code))
                continue
            topics.append(_topic(broker, meta) if meta else _missing_topic(wanted.name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    if request.include_topic_authorized_operations:
        for topic in topics:
            if not topic.error_code:
                topic.topic_authorized_operations = authorized_operations(ctx, ResourceType.TOPIC, topic.name)
    return Respond(
        MetadataResponse(
            brokers=[MetadataResponse.MetadataResponseBroker(node_id=broker.config.node_id, host=host, port=port)],
            cluster_id=broker.storage.cluster_id,
            controller_id=broker.config.node_id,
            topics=topics,
            cluster_authorized_operations=operations_if(
                request.include_cluster_authorized_operations, ctx, ResourceType.CLUSTER
            ),
        )
    )


@handles("DescribeCluster")
def describe_cluster(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    host, port = broker.config.advertised_for(ctx.listener)
    node = broker.config.node_id
    return Respond(
        DescribeClusterResponse(
            cluster_id=broker.storage.cluster_id,
            controller_id=node,
            brokers=[DescribeClusterResponse.DescribeClusterBroker(broker_id=node, host=host, port=port)],
            cluster_authorized_operations=operations_if(
                request.include_cluster_authorized_operations, ctx, ResourceType.CLUSTER
            ),
        )
    )
