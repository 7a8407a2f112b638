"""The authorizer's special cases: APIs whose denial filters or rewrites the answer rather than taking items
out of the request (Metadata, ListGroups, FindCoordinator, OffsetFetch...), and the cluster-wide
administrative APIs. Each returns (the response to send instead of running the handler, or None; how to
complete the handler's response, or None). The table that names them is sluice.broker.authz_rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluice.broker.api import RequestContext, response_class
from sluice.broker.authz_denials import deny_every_item
from sluice.broker.authz_model import (
    CLUSTER,
    DENIED,
    GROUP,
    TOPIC,
    TXN,
    Access,
    Finish,
    blank_response,
    set_error,
)
from sluice.errors import ErrorCode
from sluice.security.acl import CLUSTER_NAME, Operation


def metadata(access: Access, ctx: RequestContext, request: Any) -> tuple[Any, Finish | None]:
    all_topics = request.topics is None or (ctx.api_version == 0 and not request.topics)
    # Auto-creation needs Create on the cluster or on every topic it would create.
    if (
        not all_topics
        and request.allow_auto_topic_creation
        and not access.allows(Operation.CREATE, CLUSTER, CLUSTER_NAME)
        and not all(access.allows(Operation.CREATE, TOPIC, t.name or "") for t in request.topics)
    ):
        request.allow_auto_topic_creation = False

    def finish(response: Any) -> Any:
        if all_topics:
            response.topics = [
                t for t in response.topics if access.allows(Operation.DESCRIBE, TOPIC, t.name or "")
            ]
            return response
        for t in response.topics:  # v0 names topics without the per-item check above
            if not t.error_code and not access.allows(Operation.DESCRIBE, TOPIC, t.name or ""):
                t.error_code, t.partitions = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), []
        return response

    return None, finish


def list_groups(access: Access, ctx: RequestContext, request: Any) -> tuple[Any, Finish | None]:
    if access.allows(Operation.DESCRIBE, CLUSTER, CLUSTER_NAME):
        return None, None

    def finish(response: Any) -> Any:
        response.groups = [g for g in response.groups if access.allows(Operation.DESCRIBE, GROUP, g.group_id)]
        return response

    return None, finish


def list_transactions(access: Access, ctx: RequestContext, request: Any) -> tuple[Any, Finish | None]:
    """Kafka lists only the transactional ids the principal may Describe (no cluster-wide check)."""

    def finish(response: Any) -> Any:
        response.transaction_states = [
            t
            for t in response.transaction_states
            if access.allows(Operation.DESCRIBE, TXN, t.transactional_id)
        ]
        return response

    return None, finish


def find_coordinator(access: Access, ctx: RequestContext, request: Any) -> tuple[Any, Finish | None]:
    resource = TXN if request.key_type == 1 else GROUP
    R = response_class("FindCoordinator")
    if ctx.api_version < 4:
        if access.allows(Operation.DESCRIBE, resource, request.key):
            return None, None
        response = R(node_id=-1, host="", port=-1)
        set_error(response, DENIED[resource])
        return response, None
    denied = [k for k in request.coordinator_keys if not access.allows(Operation.DESCRIBE, resource, k)]
    if not denied:
        return None, None
    request.coordinator_keys = [k for k in request.coordinator_keys if k not in denied]

    def finish(response: Any) -> Any:
        for key in denied:
            entry = R.Coordinator(key=key, node_id=-1, host="", port=-1)
            set_error(entry, DENIED[resource])
            response.coordinators.append(entry)
        return response

    if not request.coordinator_keys:
        return finish(R()), None
    return None, finish


def offset_fetch(access: Access, ctx: RequestContext, request: Any) -> tuple[Any, Finish | None]:
    R = response_class("OffsetFetch")
    if ctx.api_version < 8:
        if not access.allows(Operation.DESCRIBE, GROUP, request.group_id):
            response = R()
            if ctx.api_version >= 2:
                response.error_code = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
            for t in request.topics or []:
                response.topics.append(
                    R.OffsetFetchResponseTopic(
                        name=t.name,
                        partitions=[
                            R.OffsetFetchResponsePartition(
                                partition_index=i,
                                committed_offset=-1,
                                error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
                            )
                            for i in t.partition_indexes
                        ],
                    )
                )
            return response, None
        fetch_all = request.topics is None

        def finish_old(response: Any) -> Any:
            keep = []
            for t in response.topics:
                if access.allows(Operation.DESCRIBE, TOPIC, t.name):
                    keep.append(t)
                elif not fetch_all:
                    for p in t.partitions:
                        p.committed_offset, p.metadata = -1, ""
                        p.error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    keep.append(t)
            response.topics = keep
            return response

        return None, finish_old
    denied = [g for g in request.groups if not access.allows(Operation.DESCRIBE, GROUP, g.group_id)]
    request.groups = [g for g in request.groups if g not in denied]
    fetch_all_by_group = {g.group_id: g.topics is None for g in request.groups}

    def finish(response: Any) -> Any:
        for group in response.groups:
            keep = []
            for t in group.topics:
                if access.allows(Operation.DESCRIBE, TOPIC, t.name):
                    keep.append(t)
                elif not fetch_all_by_group.get(group.group_id, False):
                    for p in t.partitions:
                        p.committed_offset, p.metadata = -1, ""
                        p.error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    keep.append(t)
            group.topics = keep
        for g in denied:
            response.groups.append(
                R.OffsetFetchResponseGroup(
                    group_id=g.group_id, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
                )
            )
        return response

    if not request.groups:
        return finish(R()), None
    return None, finish


def cluster_wide(
    op: Operation, fill: Callable[[Any, Any, ErrorCode], None] | None = None
) -> Callable[..., tuple[Any, Finish | None]]:
    """Administration of the cluster (ACLs, SCRAM, quotas, markers, leaders): `op` on the cluster, else the
    error on every item the request names, derived from the message definitions (`deny_every_item`)
    unless `fill` says otherwise."""
    message = f"not authorized: needs {''.join(p.capitalize() for p in op.name.split('_'))} on the cluster"

    def check(access: Access, ctx: RequestContext, request: Any) -> tuple[Any, Finish | None]:
        if access.allows(op, CLUSTER, CLUSTER_NAME):
            return None, None
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        if fill is None:
            return deny_every_item(ctx.api_key, ctx.api_version, request, code, message), None
        response = blank_response(ctx.api_key)
        fill(response, request, code)
        return response, None

    return check


def fill_top(response: Any, request: Any, code: ErrorCode) -> None:
    set_error(response, code)


def fill_alter_scram(response: Any, request: Any, code: ErrorCode) -> None:
    R = type(response)
    users = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
    response.results = [
        R.AlterUserScramCredentialsResult(
            user=u, error_code=int(code), error_message="not authorized: needs Alter on the cluster"
        )
        for u in users
    ]


def fill_alter_replica_log_dirs(response: Any, request: Any, code: ErrorCode) -> None:
    R = type(response)
    response.results = [
        R.AlterReplicaLogDirTopicResult(
            topic_name=topic.name,
            partitions=[
                R.AlterReplicaLogDirPartitionResult(partition_index=index, error_code=int(code))
                for index in topic.partitions
            ],
        )
        for log_dir in request.dirs
        for topic in log_dir.topics
    ]


def describe_topic_partitions(access: Access, ctx: RequestContext, request: Any) -> tuple[Any, Finish | None]:
    """Named topics are checked one by one (the Items rule, which runs first and may leave the list empty);
    all topics lists only the describable ones. Denied named topics keep their error entry."""
    denied = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)

    def finish(response: Any) -> Any:
        response.topics = [
            t
            for t in response.topics
            if t.error_code == denied or access.allows(Operation.DESCRIBE, TOPIC, t.name or "")
        ]
        return response

    return None, finish
