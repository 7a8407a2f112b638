"""v3 consumer groups: the groups, their consumers, and their lags (/lags, /lag-summary)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from . import admin_groups
from .admin_groups import Group, Lag, Member
from .context import context_of
from .errors import RestError
from .v3_common import answer, cluster_id, listing, related, resource

_GROUPS = "/v3/clusters/{cluster}/consumer-groups"


def group_json(request: web.Request, cluster: str, group: Group) -> dict[str, Any]:
    base = f"clusters/{cluster}/consumer-groups/{group.group_id}"
    return resource(
        request,
        "KafkaConsumerGroup",
        base,
        f"kafka={cluster}/consumer-group={group.group_id}",
        cluster_id=cluster,
        consumer_group_id=group.group_id,
        is_simple=group.is_simple,
        partition_assignor=group.assignor,
        state=group.state,
        coordinator=related(request, f"clusters/{cluster}/brokers/{group.coordinator}"),
        consumers=related(request, f"{base}/consumers"),
        lag_summary=related(request, f"{base}/lag-summary"),
    )


def consumer_json(request: web.Request, cluster: str, group: str, member: Member) -> dict[str, Any]:
    base = f"clusters/{cluster}/consumer-groups/{group}/consumers/{member.consumer_id}"
    return resource(
        request,
        "KafkaConsumer",
        base,
        f"kafka={cluster}/consumer-group={group}/consumer={member.consumer_id}",
        cluster_id=cluster,
        consumer_group_id=group,
        consumer_id=member.consumer_id,
        instance_id=member.instance_id,
        client_id=member.client_id,
        assignments=[{"topic_name": t, "partition_id": p} for t, p in member.partitions],
    )


def lag_json(request: web.Request, cluster: str, group: str, lag: Lag) -> dict[str, Any]:
    base = f"clusters/{cluster}/consumer-groups/{group}/lags/{lag.topic}/partitions/{lag.partition}"
    member = lag.member
    return resource(
        request,
        "KafkaConsumerLag",
        base,
        f"kafka={cluster}/consumer-group={group}/lag={lag.topic}/partition={lag.partition}",
        cluster_id=cluster,
        consumer_group_id=group,
        topic_name=lag.topic,
        partition_id=lag.partition,
        current_offset=lag.current_offset,
        log_end_offset=lag.log_end_offset,
        lag=lag.lag,
        consumer_id=member.consumer_id if member else "",
        instance_id=member.instance_id if member else None,
        client_id=member.client_id if member else "",
    )


async def list_groups(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    admin = context_of(request).admin
    groups = await admin_groups.describe_groups(admin, await admin_groups.group_ids(admin))
    return listing(request, "KafkaConsumerGroupList", [group_json(request, cluster, g) for g in groups])


async def get_group(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    found = await admin_groups.group(context_of(request).admin, request.match_info["group"])
    return answer(group_json(request, cluster, found))


async def list_consumers(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    found = await admin_groups.group(context_of(request).admin, request.match_info["group"])
    return listing(
        request,
        "KafkaConsumerList",
        [consumer_json(request, cluster, found.group_id, m) for m in found.members],
    )


async def get_consumer(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    found = await admin_groups.group(context_of(request).admin, request.match_info["group"])
    for member in found.members:
        if member.consumer_id == request.match_info["consumer"]:
            return answer(consumer_json(request, cluster, found.group_id, member))
    raise RestError(404, 404, f"Consumer {request.match_info['consumer']} cannot be found.")


async def list_lags(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    admin = context_of(request).admin
    found = await admin_groups.group(admin, request.match_info["group"])
    lags = await admin_groups.lags(admin, found)
    return listing(
        request, "KafkaConsumerLagList", [lag_json(request, cluster, found.group_id, lag) for lag in lags]
    )


async def lag_summary(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    admin = context_of(request).admin
    found = await admin_groups.group(admin, request.match_info["group"])
    lags = await admin_groups.lags(admin, found)
    base = f"clusters/{cluster}/consumer-groups/{found.group_id}"
    worst = max(lags, key=lambda lag: lag.lag, default=None)
    member = worst.member if worst else None
    return answer(
        resource(
            request,
            "KafkaConsumerGroupLagSummary",
            f"{base}/lag-summary",
            f"kafka={cluster}/consumer-group={found.group_id}/lag-summary",
            cluster_id=cluster,
            consumer_group_id=found.group_id,
            max_lag_consumer_id=member.consumer_id if member else "",
            max_lag_instance_id=member.instance_id if member else None,
            max_lag_client_id=member.client_id if member else "",
            max_lag_topic_name=worst.topic if worst else "",
            max_lag_partition_id=worst.partition if worst else 0,
            max_lag=worst.lag if worst else 0,
            total_lag=sum(lag.lag for lag in lags),
            max_lag_consumer=related(request, f"{base}/consumers/{member.consumer_id}") if member else None,
            max_lag_partition=(
                related(request, f"clusters/{cluster}/topics/{worst.topic}/partitions/{worst.partition}")
                if worst
                else None
            ),
        )
    )


ROUTES = [
    ("GET", _GROUPS, list_groups),
    ("GET", _GROUPS + "/{group}", get_group),
    ("GET", _GROUPS + "/{group}/consumers", list_consumers),
    ("GET", _GROUPS + "/{group}/consumers/{consumer}", get_consumer),
    ("GET", _GROUPS + "/{group}/lags", list_lags),
    ("GET", _GROUPS + "/{group}/lag-summary", lag_summary),
]
