"""v3 brokers, and the partition replicas each holds (their configs are in v3_configs)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .context import context_of
from .errors import RestError
from .v3_common import answer, cluster_id, listing, related, resource
from .v3_partitions import replica_json

_BROKERS = "/v3/clusters/{cluster}/brokers"


def broker_json(request: web.Request, cluster: str, broker_id: int, host: str, port: int) -> dict[str, Any]:
    base = f"clusters/{cluster}/brokers/{broker_id}"
    return resource(
        request,
        "KafkaBroker",
        base,
        f"kafka={cluster}/broker={broker_id}",
        cluster_id=cluster,
        broker_id=broker_id,
        host=host,
        port=port,
        rack=None,
        configs=related(request, f"{base}/configs"),
        partition_replicas=related(request, f"{base}/partition-replicas"),
    )


async def _brokers(request: web.Request) -> list[tuple[int, str, int]]:
    _, _, brokers = await context_of(request).admin.describe_cluster()
    return brokers


async def _broker(request: web.Request) -> tuple[int, str, int]:
    wanted = request.match_info["broker"]
    for broker in await _brokers(request):
        if str(broker[0]) == wanted:
            return broker
    raise RestError(404, 404, f"Broker {wanted} cannot be found.")


async def list_brokers(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    return listing(
        request, "KafkaBrokerList", [broker_json(request, cluster, *b) for b in await _brokers(request)]
    )


async def get_broker(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    return answer(broker_json(request, cluster, *await _broker(request)))


async def broker_replicas(request: web.Request) -> web.StreamResponse:
    """GET .../brokers/{b}/partition-replicas: every replica the broker holds."""
    cluster = await cluster_id(request)
    admin = context_of(request).admin
    broker_id, _, _ = await _broker(request)
    data = [
        replica_json(request, cluster, topic.name, partition, broker_id)
        for topic in (await admin.topics(internal=True)).values()
        for partition in topic.partitions
        if broker_id in partition.replicas
    ]
    return listing(request, "KafkaReplicaList", data)


ROUTES = [
    ("GET", _BROKERS, list_brokers),
    ("GET", _BROKERS + "/{broker:[0-9]{1,10}}", get_broker),
    ("GET", _BROKERS + "/{broker:[0-9]{1,10}}/partition-replicas", broker_replicas),
]
