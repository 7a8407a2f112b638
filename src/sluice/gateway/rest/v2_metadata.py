"""v2 metadata: topics, their partitions and offsets, brokers."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .admin import Partition
from .context import context_of
from .errors import check_accept, json_response


def partition_to_json(partition: Partition) -> dict[str, Any]:
    return {
        "partition": partition.partition,
        "leader": partition.leader,
        "replicas": [
            {"broker": broker, "leader": broker == partition.leader, "in_sync": broker in partition.isr}
            for broker in partition.replicas
        ],
    }


def _partition_number(request: web.Request) -> int:
    return int(request.match_info["partition"])


async def list_topics(request: web.Request) -> web.StreamResponse:
    check_accept(request)
    return json_response(sorted(await context_of(request).admin.topics()))


async def get_topic(request: web.Request) -> web.StreamResponse:
    check_accept(request)
    admin = context_of(request).admin
    name = request.match_info["topic"]
    topic = await admin.topic(name)
    configs = {c.name: c.value for c in await admin.topic_configs(name)}
    return json_response(
        {"name": name, "configs": configs, "partitions": [partition_to_json(p) for p in topic.partitions]}
    )


async def list_partitions(request: web.Request) -> web.StreamResponse:
    check_accept(request)
    topic = await context_of(request).admin.topic(request.match_info["topic"])
    return json_response([partition_to_json(p) for p in topic.partitions])


async def get_partition(request: web.Request) -> web.StreamResponse:
    check_accept(request)
    found = await context_of(request).admin.partition(request.match_info["topic"], _partition_number(request))
    return json_response(partition_to_json(found))


async def partition_offsets(request: web.Request) -> web.StreamResponse:
    check_accept(request)
    admin = context_of(request).admin
    topic, partition = request.match_info["topic"], _partition_number(request)
    await admin.partition(topic, partition)
    beginning, end = (await admin.watermarks([(topic, partition)]))[(topic, partition)]
    return json_response({"beginning_offset": beginning, "end_offset": end})


async def list_brokers(request: web.Request) -> web.StreamResponse:
    check_accept(request)
    _, _, brokers = await context_of(request).admin.describe_cluster()
    return json_response({"brokers": [broker_id for broker_id, _, _ in brokers]})
