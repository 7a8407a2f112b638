"""The vocabulary of the authorizer's rule table: which check (`Whole`, `Items`), the `Rule` of an API, and
the principal's `Access` to the authorizer. The table is sluice.broker.authz_rules; it is applied by
sluice.broker.authz."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluice.broker.api import RequestContext
from sluice.errors import ErrorCode
from sluice.protocol.messages import response_codecs
from sluice.security.acl import Authorizer, Operation, ResourceType

TOPIC, GROUP, CLUSTER, TXN = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
DENIED = {
    TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    TXN: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
# Config resource types (DescribeConfigs & co.) -> ACL resource.
CONFIG_RESOURCES = {2: TOPIC, 4: CLUSTER}

Finish = Callable[[Any], Any]


@dataclass(frozen=True)
class Whole:
    """The whole request needs `op` on the resource named by request attribute `attr` (CLUSTER: fixed name).
    `when` restricts the check to requests where that attribute is set (Produce's transactional id)."""

    resource: ResourceType
    op: Operation
    attr: str | None = None
    when_set: bool = False
    # Also allowed when this (resource type, op) is allowed on any resource (InitProducerId: Write on some topic).
    or_any: tuple[ResourceType, Operation] | None = None
    # The API versions the check applies to (None: all).
    versions: range | None = None
    # The check does not apply when this request attribute is set.
    unless_set: str | None = None


@dataclass(frozen=True)
class Items:
    """Per-item check on a list in the request, mirrored by a list in the response.

    Two levels (topics and their partitions) when `req_parts` is set; `req_index` None means the request's
    partition list holds bare indexes. `req_name` None means the request list holds bare names.
    """

    resource: ResourceType
    op: Operation
    req_list: str
    req_name: str | None
    resp_list: str
    resp_item: str
    resp_name: str
    req_parts: str | None = None
    req_index: str | None = None
    resp_parts: str | None = None
    resp_part: str | None = None
    resp_index: str | None = None
    resp_error: str = "error_code"
    versions: range | None = None
    # CreateTopics: Create on the cluster allows every topic.
    or_cluster: bool = False
    # Config resources: the ACL resource type comes from the item's resource_type code.
    config_resource: bool = False


@dataclass(frozen=True)
class Rule:
    checks: tuple[Whole | Items, ...] = ()
    # Special cases that filter or rewrite the response (Metadata, ListGroups, ...): (az, ctx, request) ->
    # (immediate response or None, finish).
    custom: Callable[[Access, RequestContext, Any], tuple[Any, Finish | None]] | None = None
    # When every item is denied, answer them without running the handler. Not for Metadata: its answer
    # must still list the brokers, or a client drops its connections.
    answer_denied_alone: bool = True


@dataclass(slots=True)
class Access:
    """The principal's view of the authorizer for one request."""

    authorizer: Authorizer
    principal: str
    host: str
    topic_names_by_id: Callable[[Any], str | None] = field(default=lambda topic_id: None)

    def allows(self, op: Operation, resource: ResourceType, name: str) -> bool:
        return self.authorizer.authorize(self.principal, self.host, op, resource, name)

    def allows_any(self, op: Operation, resource: ResourceType) -> bool:
        return self.authorizer.authorize_any(self.principal, self.host, op, resource)


def set_error(obj: Any, code: ErrorCode, attr: str = "error_code") -> None:
    setattr(obj, attr, int(code))
    if hasattr(obj, "error_message"):
        obj.error_message = f"{code.name}: not authorized"


def blank_response(api_key: int) -> Any:
    return response_codecs(api_key).cls()
