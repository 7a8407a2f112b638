"""v3 ACLs: list (with filters), create and delete, where the cluster has an authorizer."""

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
from .v3_common import answer, body_object, cluster_id, listing, resource

_ACLS = "/v3/clusters/{cluster}/acls"
_FIELDS = (
    ("resource_type", ResourceType),
    ("pattern_type", ResourcePatternType),
    ("operation", AclOperation),
    ("permission", AclPermissionType),
)


def _enum(kind: Any, field: str, raw: Any, default: str) -> Any:
    text = str(raw if raw is not None else default).upper()
    try:
        return kind[text]
    except KeyError:
        names = ", ".join(member.name for member in kind if member.name != "UNKNOWN")
        raise RestError(400, 400, f"{field} must be one of {names}") from None


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
        resource_type=binding.restype.name,
        resource_name=binding.name,
        pattern_type=binding.resource_pattern_type.name,
        principal=binding.principal,
        host=binding.host,
        operation=binding.operation.name,
        permission=binding.permission_type.name,
    )


async def list_acls(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    query = {k: v for k, v in request.query.items()}
    query.setdefault("pattern_type", "ANY")
    found = await admin_groups.describe_acls(
        context_of(request).admin, AclBindingFilter(**_binding_args(query, True))
    )
    return listing(request, "KafkaAclList", [acl_json(request, cluster, b) for b in found])


async def create_acl(request: web.Request) -> web.StreamResponse:
    await cluster_id(request)
    body = await body_object(request)
    for required in (
        "resource_type",
        "resource_name",
        "pattern_type",
        "principal",
        "operation",
        "permission",
    ):
        if not isinstance(body.get(required), str) or not body[required]:
            raise RestError(400, 400, f"{required} is required")
    try:
        binding = AclBinding(**_binding_args(body, False))
    except (ValueError, TypeError) as exc:
        raise RestError(400, 400, f"invalid ACL: {exc}") from None
    await admin_groups.create_acl(context_of(request).admin, binding)
    return web.Response(status=201)


async def delete_acls(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    query = {k: v for k, v in request.query.items()}
    if "resource_type" not in query:
        raise RestError(400, 400, "resource_type is required (ANY to match all)")
    try:
        filter_ = AclBindingFilter(**_binding_args(query, True))
    except (ValueError, TypeError) as exc:
        raise RestError(400, 400, f"invalid ACL filter: {exc}") from None
    deleted = await admin_groups.delete_acls(context_of(request).admin, filter_)
    return answer({"data": [acl_json(request, cluster, b) for b in deleted]})


ROUTES = [
    ("GET", _ACLS, list_acls),
    ("POST", _ACLS, create_acl),
    ("DELETE", _ACLS, delete_acls),
]
