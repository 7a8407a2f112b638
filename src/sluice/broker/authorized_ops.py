"""KIP-430 authorized operations: the bitfield of ACL operations a principal may perform on one resource,
which Metadata, DescribeTopicPartitions, DescribeCluster, DescribeGroups and ConsumerGroupDescribe return
when the client asks (`include_*_authorized_operations`).

Only the operations that apply to the resource type are listed. With no authorizer configured every one of
them is allowed, so all are listed. A client that did not ask gets the field's default, INT32_MIN."""

from __future__ import annotations

from sluice.broker.api import RequestContext
from sluice.security.acl import CLUSTER_NAME, Operation, ResourceType

NOT_REQUESTED = -(2**31)

_O = Operation
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (
        _O.READ,
        _O.WRITE,
        _O.CREATE,
        _O.DESCRIBE,
        _O.DELETE,
        _O.ALTER,
        _O.DESCRIBE_CONFIGS,
        _O.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE),
    ResourceType.CLUSTER: (
        _O.CREATE,
        _O.CLUSTER_ACTION,
        _O.DESCRIBE_CONFIGS,
        _O.ALTER_CONFIGS,
        _O.IDEMPOTENT_WRITE,
        _O.ALTER,
        _O.DESCRIBE,
    ),
}


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
    """Bit `1 << operation code` set for each supported operation the request's principal is allowed."""
    operations = SUPPORTED_OPERATIONS[resource_type]
    acl = ctx.acl
    if acl is not None:
        principal, host = ctx.principal, ctx.client_host
        operations = tuple(op for op in operations if acl.authorize(principal, host, op, resource_type, name))
    bits = 0
    for op in operations:
        bits |= 1 << int(op)
    return bits


def operations_if(
    requested: bool, ctx: RequestContext, resource_type: ResourceType, name: str = CLUSTER_NAME
) -> int:
    """`authorized_operations` when the client asked for it, else the "not requested" default."""
    return authorized_operations(ctx, resource_type, name) if requested else NOT_REQUESTED
