"""v3 partitions of a topic, their earliest and latest offsets, their replicas, and ongoing replica
reassignments."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from . import admin_wire
from .admin import Partition
from .admin_wire import Reassignment
from .context import context_of
from .errors import RestError, bad_request
from .v3_common import answer, cluster_id, listing, related, resource

_TOPICS = "/v3/clusters/{cluster}/topics"
_PARTITION = "{partition:[0-9]{1,9}}"


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


def replica_json(
    request: web.Request, cluster: str, topic: str, partition: Partition, broker_id: int
) -> dict[str, Any]:
    return resource(
        request,
        "KafkaReplica",
        f"clusters/{cluster}/topics/{topic}/partitions/{partition.partition}/replicas/{broker_id}",
        f"kafka={cluster}/topic={topic}/partition={partition.partition}/replica={broker_id}",
        cluster_id=cluster,
        topic_name=topic,
        partition_id=partition.partition,
        broker_id=broker_id,
        is_leader=partition.leader == broker_id,
        is_in_sync=broker_id in partition.isr,
        broker=related(request, f"clusters/{cluster}/brokers/{broker_id}"),
    )


def reassignment_json(request: web.Request, cluster: str, found: Reassignment) -> dict[str, Any]:
    base = f"clusters/{cluster}/topics/{found.topic}/partitions/{found.partition}"
    return resource(
        request,
        "KafkaReassignment",
        f"{base}/reassignment",
        f"kafka={cluster}/topic={found.topic}/partition={found.partition}/reassignment",
        cluster_id=cluster,
        topic_name=found.topic,
        partition_id=found.partition,
        adding_replicas=list(found.adding),
        removing_replicas=list(found.removing),
        replicas=related(request, f"{base}/replicas"),
    )


async def _partition(request: web.Request) -> tuple[str, str, Partition]:
    cluster = await cluster_id(request)
    topic = request.match_info["topic"]
    found = await context_of(request).admin.partition(topic, int(request.match_info["partition"]))
    return cluster, topic, found


async def list_partitions(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    topic = await context_of(request).admin.topic(request.match_info["topic"])
    return listing(
        request,
        "KafkaPartitionList",
        [partition_json(request, cluster, topic.name, p) for p in topic.partitions],
    )


async def get_partition(request: web.Request) -> web.StreamResponse:
    cluster, topic, found = await _partition(request)
    return answer(partition_json(request, cluster, topic, found))


async def partition_offsets(request: web.Request) -> web.StreamResponse:
    """GET .../partitions/{p}/offset: the earliest and latest offsets (offset_type earliest_and_latest, the
    only one Confluent's server takes; others are 400)."""
    offset_type = request.query.get("offset_type", "earliest_and_latest")
    if offset_type != "earliest_and_latest":
        raise bad_request(f"offset_type:{offset_type} is invalid")
    cluster, topic, found = await _partition(request)
    ((earliest, latest),) = (await context_of(request).admin.watermarks([(topic, found.partition)])).values()
    return answer(
        resource(
            request,
            "KafkaPartitionWithOffsets",
            f"clusters/{cluster}/topics/{topic}/partitions/{found.partition}/offset",
            f"kafka={cluster}/topic={topic}/partition={found.partition}/offset_type={offset_type}",
            cluster_id=cluster,
            topic_name=topic,
            partition_id=found.partition,
            earliest_offset=earliest,
            latest_offset=latest,
        )
    )


async def list_replicas(request: web.Request) -> web.StreamResponse:
    cluster, topic, found = await _partition(request)
    return listing(
        request, "KafkaReplicaList", [replica_json(request, cluster, topic, found, b) for b in found.replicas]
    )


async def get_replica(request: web.Request) -> web.StreamResponse:
    cluster, topic, found = await _partition(request)
    broker_id = int(request.match_info["broker"])
    if broker_id not in found.replicas:
        raise RestError(404, 404, f"Replica {broker_id} of {topic}-{found.partition} cannot be found.")
    return answer(replica_json(request, cluster, topic, found, broker_id))


async def list_reassignments(request: web.Request) -> web.StreamResponse:
    """Every ongoing reassignment of the cluster, or of one topic (`topics/{t}/partitions/-/reassignment`)."""
    cluster = await cluster_id(request)
    admin = context_of(request).admin
    topic = request.match_info.get("topic")
    if topic is not None:
        await admin.topic(topic)
    found = [r for r in await admin_wire.reassignments(admin) if topic is None or r.topic == topic]
    return listing(request, "KafkaReassignmentList", [reassignment_json(request, cluster, r) for r in found])


async def get_reassignment(request: web.Request) -> web.StreamResponse:
    cluster, topic, found = await _partition(request)
    for ongoing in await admin_wire.reassignments(context_of(request).admin):
        if (ongoing.topic, ongoing.partition) == (topic, found.partition):
            return answer(reassignment_json(request, cluster, ongoing))
    raise RestError(404, 404, f"Partition {topic}-{found.partition} has no ongoing reassignment.")


_ONE = _TOPICS + "/{topic}/partitions/" + _PARTITION
ROUTES = [
    ("GET", _TOPICS + "/-/partitions/-/reassignment", list_reassignments),
    ("GET", _TOPICS + "/{topic}/partitions", list_partitions),
    ("GET", _TOPICS + "/{topic}/partitions/-/reassignment", list_reassignments),
    ("GET", _ONE, get_partition),
    ("GET", _ONE + "/offset", partition_offsets),
    ("GET", _ONE + "/reassignment", get_reassignment),
    ("GET", _ONE + "/replicas", list_replicas),
    ("GET", _ONE + "/replicas/{broker:[0-9]{1,10}}", get_replica),
]
