"""v3 consumer groups: the groups, their consumers and the partitions assigned to them, and their lags
(/lags, /lag-summary), as Confluent's REST Proxy answers them."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from . import admin_groups
from .admin_groups import Group, Lag, Member
from .context import context_of
from .errors import RestError
from .v3_common import answer, cluster_id, listing, related, resource

_GROUPS = "/v3/clusters/{cluster}/consumer-groups"
_PARTITION = "{partition:[0-9]{1,9}}"


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
        type=group.protocol,
        # Whether a KIP-848 group still has members on the classic protocol: the member descriptions
        # confluent-kafka gives do not say, so a group is reported as not mixed.
        is_mixed_consumer_group=False,
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
        assignments=related(request, f"{base}/assignments"),
    )


def assignment_json(
    request: web.Request, cluster: str, group: str, member: Member, topic: str, partition: int
) -> dict[str, Any]:
    return resource(
        request,
        "KafkaConsumerAssignment",
        f"clusters/{cluster}/consumer-groups/{group}/consumers/{member.consumer_id}/assignments/{topic}"
        f"/partitions/{partition}",
        f"kafka={cluster}/consumer-group={group}/consumer={member.consumer_id}/assignment={topic}"
        f"/partition={partition}",
        cluster_id=cluster,
        consumer_group_id=group,
        consumer_id=member.consumer_id,
        topic_name=topic,
        partition_id=partition,
        partition=related(request, f"clusters/{cluster}/topics/{topic}/partitions/{partition}"),
        lag=related(
            request, f"clusters/{cluster}/consumer-groups/{group}/lags/{topic}/partitions/{partition}"
        ),
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


async def _member(request: web.Request) -> tuple[str, Group, Member]:
    cluster = await cluster_id(request)
    found = await admin_groups.group(context_of(request).admin, request.match_info["group"])
    for member in found.members:
        if member.consumer_id == request.match_info["consumer"]:
            return cluster, found, member
    raise RestError(404, 404, f"Consumer {request.match_info['consumer']} cannot be found.")


async def get_consumer(request: web.Request) -> web.StreamResponse:
    cluster, found, member = await _member(request)
    return answer(consumer_json(request, cluster, found.group_id, member))


async def list_assignments(request: web.Request) -> web.StreamResponse:
    cluster, found, member = await _member(request)
    return listing(
        request,
        "KafkaConsumerAssignmentList",
        [
            assignment_json(request, cluster, found.group_id, member, t, p)
            for t, p in sorted(member.partitions)
        ],
    )


async def get_assignment(request: web.Request) -> web.StreamResponse:
    cluster, found, member = await _member(request)
    wanted = (request.match_info["topic"], int(request.match_info["partition"]))
    if wanted not in member.partitions:
        raise RestError(404, 404, f"Consumer assignment {wanted[0]}-{wanted[1]} cannot be found.")
    return answer(assignment_json(request, cluster, found.group_id, member, *wanted))


async def list_lags(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    admin = context_of(request).admin
    found = await admin_groups.group(admin, request.match_info["group"])
    lags = await admin_groups.lags(admin, found)
    return listing(
        request, "KafkaConsumerLagList", [lag_json(request, cluster, found.group_id, lag) for lag in lags]
    )


async def get_lag(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    admin = context_of(request).admin
    found = await admin_groups.group(admin, request.match_info["group"])
    topic, partition = request.match_info["topic"], int(request.match_info["partition"])
    for lag in await admin_groups.lags(admin, found):
        if (lag.topic, lag.partition) == (topic, partition):
            return answer(lag_json(request, cluster, found.group_id, lag))
    raise RestError(404, 404, f"Consumer lag of {topic}-{partition} cannot be found.")


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
            # Links even where no consumer owns the partition (to consumers/, as Confluent's are).
            max_lag_consumer=related(request, f"{base}/consumers/{member.consumer_id if member else ''}"),
            max_lag_partition=related(
                request,
                f"clusters/{cluster}/topics/{worst.topic if worst else ''}"
                f"/partitions/{worst.partition if worst else 0}",
            ),
        )
    )


ROUTES = [
    ("GET", _GROUPS, list_groups),
    ("GET", _GROUPS + "/{group}", get_group),
    ("GET", _GROUPS + "/{group}/consumers", list_consumers),
    ("GET", _GROUPS + "/{group}/consumers/{consumer}", get_consumer),
    ("GET", _GROUPS + "/{group}/lags", list_lags),
    ("GET", _GROUPS + "/{group}/consumers/{consumer}/assignments", list_assignments),
    (
        "GET",
        _GROUPS + "/{group}/consumers/{consumer}/assignments/{topic}/partitions/" + _PARTITION,
        get_assignment,
    ),
    ("GET", _GROUPS + "/{group}/lags/{topic}/partitions/" + _PARTITION, get_lag),
    ("GET", _GROUPS + "/{group}/lag-summary", lag_summary),
]
