"""v3 clusters and topics (list, get, create, raise the partition count, delete)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from .admin import Partition, RestAdmin, Topic, parse_configs
from .context import CLUSTERS, context_of
from .errors import RestError, bad_request
from .v3_common import answer, body_object, cluster_id, listing, no_content, related, resource

log = logging.getLogger(__name__)

_TOPICS = "/v3/clusters/{cluster}/topics"


async def list_clusters(request: web.Request) -> web.StreamResponse:
    """Every cluster the gateway fronts that answers (one that cannot be reached is left out, and logged;
    with none reachable, the default one's failure is the answer)."""
    clusters: dict[str, dict[str, Any]] = {}
    failure: RestError | None = None
    for context in request.app[CLUSTERS]:
        try:
            described = await _cluster(request, context.admin)
        except RestError as error:
            log.warning("REST: cluster %s cannot be described: %s", context.admin.cluster.name, error.message)
            failure = failure or error
            continue
        clusters.setdefault(described["cluster_id"], described)
    if not clusters and failure is not None:
        raise failure
    return listing(request, "KafkaClusterList", list(clusters.values()))


async def get_cluster(request: web.Request) -> web.StreamResponse:
    await cluster_id(request)
    return answer(await _cluster(request, context_of(request).admin))


async def _cluster(request: web.Request, admin: RestAdmin) -> dict[str, Any]:
    found, controller, _ = await admin.describe_cluster()
    base = f"clusters/{found}"
    return resource(
        request,
        "KafkaCluster",
        base,
        f"kafka={found}",
        cluster_id=found,
        controller=related(request, f"{base}/brokers/{controller}"),
        acls=related(request, f"{base}/acls"),
        brokers=related(request, f"{base}/brokers"),
        broker_configs=related(request, f"{base}/broker-configs"),
        consumer_groups=related(request, f"{base}/consumer-groups"),
        topics=related(request, f"{base}/topics"),
        partition_reassignments=related(request, f"{base}/topics/-/partitions/-/reassignment"),
    )


def topic_json(
    request: web.Request, cluster: str, topic: Topic, replication_factor: int | None = None
) -> dict[str, Any]:
    base = f"clusters/{cluster}/topics/{topic.name}"
    return resource(
        request,
        "KafkaTopic",
        base,
        f"kafka={cluster}/topic={topic.name}",
        cluster_id=cluster,
        topic_name=topic.name,
        is_internal=topic.name.startswith("__"),
        replication_factor=topic.replication_factor if replication_factor is None else replication_factor,
        partitions_count=len(topic.partitions),
        partitions=related(request, f"{base}/partitions"),
        configs=related(request, f"{base}/configs"),
        partition_reassignments=related(request, f"{base}/partitions/-/reassignment"),
    )


async def list_topics(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    topics = await context_of(request).admin.topics(internal=True)
    return listing(request, "KafkaTopicList", [topic_json(request, cluster, t) for t in topics.values()])


async def get_topic(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    topic = await context_of(request).admin.topic(request.match_info["topic"])
    return answer(topic_json(request, cluster, topic))


# Kafka's ranges: CreateTopics carries partitions as int32 and the replication factor as int16.
_MAX_PARTITIONS = 2**31 - 1
_MAX_REPLICATION_FACTOR = 2**15 - 1


def _count(body: dict[str, Any], name: str, maximum: int, *, default: int | None) -> int:
    """A partition count or replication factor: -1 (the broker's default, where `default` allows it) or 1.."""
    value = body.get(name, default)
    if value is None:
        raise bad_request(f"{name} is required")
    if not isinstance(value, int) or isinstance(value, bool):
        raise bad_request(f"{name} must be an integer")
    if value == -1 and default == -1:
        return value
    if not 1 <= value <= maximum:
        raise bad_request(f"{name} must be between 1 and {maximum}, or left out for the broker's default")
    return value


async def create_topic(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    body = await body_object(request)
    name = body.get("topic_name")
    if not isinstance(name, str) or not name:
        raise bad_request("topic_name must be a non-empty string")
    partitions = _count(body, "partitions_count", _MAX_PARTITIONS, default=-1)
    replication = _count(body, "replication_factor", _MAX_REPLICATION_FACTOR, default=-1)
    if body.get("replicas_assignments") is not None:
        raise bad_request("replicas_assignments is not served: give partitions_count and replication_factor")
    validate_only = body.get("validate_only", False)
    if not isinstance(validate_only, bool):
        raise bad_request("validate_only must be a boolean")
    configs = parse_configs(body.get("configs"), "configs")
    admin = context_of(request).admin
    await admin.create_topic(name, partitions, replication, configs, validate_only=validate_only)
    if validate_only:  # as Confluent's: 200 and the topic as it would be
        described = Topic(name, tuple(Partition(p, -1, (), ()) for p in range(max(partitions, 1))))
        return answer(topic_json(request, cluster, described, replication), 200)
    topic = await _wait_for_topic(request, name)
    return answer(topic_json(request, cluster, topic), 201)


async def update_partition_count(request: web.Request) -> web.StreamResponse:
    """PATCH .../topics/{t} {"partitions_count": N}: raise the partition count; the topic as it then is."""
    cluster = await cluster_id(request)
    count = _count(await body_object(request), "partitions_count", _MAX_PARTITIONS, default=None)
    name = request.match_info["topic"]
    admin = context_of(request).admin
    await admin.create_partitions(name, count)
    for _ in range(50):  # metadata may take a moment to show the new partitions
        topic = await admin.topic(name)
        if len(topic.partitions) >= count:
            break
        admin.forget_topic(name)
        await asyncio.sleep(0.1)
    return answer(topic_json(request, cluster, topic))


async def _wait_for_topic(request: web.Request, name: str) -> Topic:
    """The created topic as metadata shows it (a fresh topic may take a moment to appear)."""
    admin = context_of(request).admin
    for _ in range(50):
        try:
            return await admin.topic(name)
        except RestError:
            await asyncio.sleep(0.1)
    return await admin.topic(name)


async def delete_topic(request: web.Request) -> web.StreamResponse:
    await cluster_id(request)
    await context_of(request).admin.delete_topic(request.match_info["topic"])
    return no_content()


ROUTES = [
    ("GET", "/v3/clusters", list_clusters),
    ("GET", "/v3/clusters/{cluster}", get_cluster),
    ("GET", _TOPICS, list_topics),
    ("POST", _TOPICS, create_topic),
    ("GET", _TOPICS + "/{topic}", get_topic),
    ("PATCH", _TOPICS + "/{topic}", update_partition_count),
    ("DELETE", _TOPICS + "/{topic}", delete_topic),
]
