"""v3 ACLs: list (with filters), create (one, or a batch), and delete, where the cluster has an authorizer."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from . import admin_groups
from .context import context_of
from .errors import RestError
from .v3_common import answer, body_object, cluster_id, listing, no_content, resource

_ACLS = "/v3/clusters/{cluster}/acls"
_FIELDS = (
    ("resource_type", ResourceType),
    ("pattern_type", ResourcePatternType),
    ("operation", AclOperation),
    ("permission", AclPermissionType),
)


# Kafka's resource type 4 is CLUSTER; confluent-kafka names it BROKER.
_CLUSTER_RESOURCE = ("CLUSTER", "BROKER")


def _enum(kind: Any, field: str, raw: Any, default: str) -> Any:
    """The member `raw` names; UNKNOWN is a name in Kafka's enums but no value a request may carry."""
    text = str(raw if raw is not None else default).upper()
    if kind is ResourceType and text == _CLUSTER_RESOURCE[0]:
        text = _CLUSTER_RESOURCE[1]
    if text != "UNKNOWN" and text in kind.__members__:
        return kind[text]
    names = ", ".join(_name(member) for member in kind if member.name != "UNKNOWN")
    raise RestError(400, 400, f"{field} must be one of {names}")


def _name(member: Any) -> str:
    return _CLUSTER_RESOURCE[0] if member is ResourceType.BROKER else str(member.name)


def _binding_args(source: Any, any_default: bool) -> dict[str, Any]:
    default = "ANY" if any_default else ""
    values = {field: _enum(kind, field, source.get(field), default or "") for field, kind in _FIELDS}
    return {
        "restype": values["resource_type"],
        "name": source.get("resource_name") or (None if any_default else ""),
        "resource_pattern_type": values["pattern_type"],
        "principal": source.get("principal") or (None if any_default else ""),
        "host": source.get("host") or (None if any_default else "*"),
        "operation": values["operation"],
        "permission_type": values["permission"],
    }


def acl_json(request: web.Request, cluster: str, binding: AclBinding) -> dict[str, Any]:
    return resource(
        request,
        "KafkaAcl",
        f"clusters/{cluster}/acls",
        f"kafka={cluster}/acl",
        cluster_id=cluster,
        resource_type=_name(binding.restype),
        resource_name=binding.name,
        pattern_type=binding.resource_pattern_type.name,
        principal=binding.principal,
        host=binding.host,
        operation=binding.operation.name,
        permission=binding.permission_type.name,
    )


def _acl_filter(query: Any) -> AclBindingFilter:
    try:
        return AclBindingFilter(**_binding_args(query, True))
    except (ValueError, TypeError) as exc:
        raise RestError(400, 400, f"invalid ACL filter: {exc}") from None


def _acl_binding(body: Any, where: str) -> AclBinding:
    if not isinstance(body, dict):
        raise RestError(400, 400, f"{where} must be an object")
    for required in (
        "resource_type",
        "resource_name",
        "pattern_type",
        "principal",
        "operation",
        "permission",
    ):
        if not isinstance(body.get(required), str) or not body[required]:
            raise RestError(400, 400, f"{where}.{required} is required")
    try:
        return AclBinding(**_binding_args(body, False))
    except (ValueError, TypeError) as exc:
        raise RestError(400, 400, f"invalid ACL {where}: {exc}") from None


async def list_acls(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    query = {k: v for k, v in request.query.items()}
    query.setdefault("pattern_type", "ANY")
    found = await admin_groups.describe_acls(context_of(request).admin, _acl_filter(query))
    return listing(request, "KafkaAclList", [acl_json(request, cluster, b) for b in found])


async def create_acl(request: web.Request) -> web.StreamResponse:
    await cluster_id(request)
    binding = _acl_binding(await body_object(request), "body")
    await admin_groups.create_acls(context_of(request).admin, [binding])
    return web.Response(status=201)


async def create_acls_batch(request: web.Request) -> web.StreamResponse:
    """POST .../acls:batch {"data": [ACL, ...]}: all of them in one CreateAcls request; 204."""
    await cluster_id(request)
    entries = (await body_object(request)).get("data")
    if not isinstance(entries, list) or not entries:
        raise RestError(400, 400, "data must be a non-empty list of ACLs")
    bindings = [_acl_binding(entry, f"data[{index}]") for index, entry in enumerate(entries)]
    await admin_groups.create_acls(context_of(request).admin, bindings)
    return no_content()


async def delete_acls(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    query = {k: v for k, v in request.query.items()}
    if "resource_type" not in query:
        raise RestError(400, 400, "resource_type is required (ANY to match all)")
    deleted = await admin_groups.delete_acls(context_of(request).admin, _acl_filter(query))
    return answer({"data": [acl_json(request, cluster, b) for b in deleted]})


ROUTES = [
    ("GET", _ACLS, list_acls),
    ("POST", _ACLS, create_acl),
    ("DELETE", _ACLS, delete_acls),
    ("POST", _ACLS + ":batch", create_acls_batch),
]
