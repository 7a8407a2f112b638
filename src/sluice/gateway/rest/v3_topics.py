"""v3 clusters, topics and topic configs."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from .admin import ConfigValue, Partition, RestAdmin, Topic, parse_configs
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


def topic_json(request: web.Request, cluster: str, topic: Topic) -> dict[str, Any]:
    base = f"clusters/{cluster}/topics/{topic.name}"
    return resource(
        request,
        "KafkaTopic",
        base,
        f"kafka={cluster}/topic={topic.name}",
        cluster_id=cluster,
        topic_name=topic.name,
        is_internal=topic.name.startswith("__"),
        replication_factor=topic.replication_factor,
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


async def create_topic(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    body = await body_object(request)
    name = body.get("topic_name")
    if not isinstance(name, str) or not name:
        raise bad_request("topic_name must be a non-empty string")
    partitions, replication = body.get("partitions_count", -1), body.get("replication_factor", -1)
    for field_name, value in (("partitions_count", partitions), ("replication_factor", replication)):
        if not isinstance(value, int) or isinstance(value, bool) or value == 0 or value < -1:
            raise bad_request(f"{field_name} must be a positive integer")
    configs = parse_configs(body.get("configs"), "configs")
    admin = context_of(request).admin
    await admin.create_topic(name, partitions, replication, configs)
    topic = await _wait_for_topic(request, name)
    return answer(topic_json(request, cluster, topic), 201)


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


def config_json(request: web.Request, cluster: str, topic: str, config: ConfigValue) -> dict[str, Any]:
    return resource(
        request,
        "KafkaTopicConfig",
        f"clusters/{cluster}/topics/{topic}/configs/{config.name}",
        f"kafka={cluster}/topic={topic}/config={config.name}",
        cluster_id=cluster,
        topic_name=topic,
        name=config.name,
        value=config.value,
        is_default=config.is_default,
        is_read_only=config.is_read_only,
        is_sensitive=config.is_sensitive,
        source=config.source,
        synonyms=[],
    )


async def list_configs(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    topic = request.match_info["topic"]
    configs = await context_of(request).admin.topic_configs(topic)
    return listing(
        request, "KafkaTopicConfigList", [config_json(request, cluster, topic, c) for c in configs]
    )


async def get_config(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    topic, name = request.match_info["topic"], request.match_info["name"]
    for config in await context_of(request).admin.topic_configs(topic):
        if config.name == name:
            return answer(config_json(request, cluster, topic, config))
    raise RestError(404, 404, f"Config {name} of topic {topic} cannot be found.")


async def set_config(request: web.Request) -> web.StreamResponse:
    await cluster_id(request)
    body = await body_object(request)
    value = body.get("value")
    if not isinstance(value, str):
        raise bad_request("value must be a string")
    await context_of(request).admin.alter_topic_configs(
        request.match_info["topic"], [(request.match_info["name"], value)]
    )
    return no_content()


async def reset_config(request: web.Request) -> web.StreamResponse:
    await cluster_id(request)
    await context_of(request).admin.alter_topic_configs(
        request.match_info["topic"], [(request.match_info["name"], None)]
    )
    return no_content()


async def alter_configs(request: web.Request) -> web.StreamResponse:
    """POST .../configs:alter {"data": [{"name", "value"?, "operation"?: SET|DELETE}]}, all in one request."""
    await cluster_id(request)
    body = await body_object(request)
    entries = body.get("data")
    if not isinstance(entries, list) or not entries:
        raise bad_request("data must be a non-empty list of {name, value, operation}")
    changes: list[tuple[str, str | None]] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise bad_request(f"data[{index}] needs a name")
        operation = str(entry.get("operation") or "SET").upper()
        if operation not in ("SET", "DELETE"):
            raise bad_request(f"data[{index}].operation must be SET or DELETE")
        value = entry.get("value")
        if operation == "SET" and not isinstance(value, str):
            raise bad_request(f"data[{index}].value must be a string")
        changes.append((entry["name"], value if operation == "SET" else None))
    await context_of(request).admin.alter_topic_configs(request.match_info["topic"], changes)
    return no_content()


async def list_brokers(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    _, _, brokers = await context_of(request).admin.describe_cluster()
    return listing(request, "KafkaBrokerList", [_broker(request, cluster, *b) for b in brokers])


async def get_broker(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    _, _, brokers = await context_of(request).admin.describe_cluster()
    for broker in brokers:
        if str(broker[0]) == request.match_info["broker"]:
            return answer(_broker(request, cluster, *broker))
    raise RestError(404, 404, f"Broker {request.match_info['broker']} cannot be found.")


def _broker(request: web.Request, cluster: str, broker_id: int, host: str, port: int) -> dict[str, Any]:
    return resource(
        request,
        "KafkaBroker",
        f"clusters/{cluster}/brokers/{broker_id}",
        f"kafka={cluster}/broker={broker_id}",
        cluster_id=cluster,
        broker_id=broker_id,
        host=host,
        port=port,
        rack=None,
    )


def partition_json(request: web.Request, cluster: str, topic: str, partition: Partition) -> dict[str, Any]:
    base = f"clusters/{cluster}/topics/{topic}/partitions/{partition.partition}"
    return resource(
        request,
        "KafkaPartition",
        base,
        f"kafka={cluster}/topic={topic}/partition={partition.partition}",
        cluster_id=cluster,
        topic_name=topic,
        partition_id=partition.partition,
        leader=related(request, f"{base}/replicas/{partition.leader}"),
        replicas=related(request, f"{base}/replicas"),
        reassignment=related(request, f"{base}/reassignment"),
    )


async def list_partitions(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    topic = await context_of(request).admin.topic(request.match_info["topic"])
    return listing(
        request,
        "KafkaPartitionList",
        [partition_json(request, cluster, topic.name, p) for p in topic.partitions],
    )


async def get_partition(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    topic = request.match_info["topic"]
    found = await context_of(request).admin.partition(topic, int(request.match_info["partition"]))
    return answer(partition_json(request, cluster, topic, found))


ROUTES = [
    ("GET", "/v3/clusters", list_clusters),
    ("GET", "/v3/clusters/{cluster}", get_cluster),
    ("GET", _TOPICS, list_topics),
    ("POST", _TOPICS, create_topic),
    ("GET", _TOPICS + "/{topic}", get_topic),
    ("DELETE", _TOPICS + "/{topic}", delete_topic),
    ("GET", _TOPICS + "/{topic}/configs", list_configs),
    ("GET", _TOPICS + "/{topic}/partitions", list_partitions),
    ("GET", _TOPICS + "/{topic}/partitions/{partition:[0-9]{1,9}}", get_partition),
    ("GET", "/v3/clusters/{cluster}/brokers", list_brokers),
    ("GET", "/v3/clusters/{cluster}/brokers/{broker}", get_broker),
    ("POST", _TOPICS + "/{topic}/configs:alter", alter_configs),
    ("GET", _TOPICS + "/{topic}/configs/{name}", get_config),
    ("PUT", _TOPICS + "/{topic}/configs/{name}", set_config),
    ("DELETE", _TOPICS + "/{topic}/configs/{name}", reset_config),
]
