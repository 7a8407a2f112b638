"""v3 configs of three scopes, one set of handlers: a topic's (`topics/{t}/configs`), a broker's
(`brokers/{b}/configs`) and the cluster's dynamic broker defaults (`broker-configs`, Kafka's BROKER resource
with the empty name); and every topic's or broker's at once (`topics/-/configs`, `brokers/-/configs`).

Each scope lists, gets, sets (PUT {"value"}), resets (DELETE) and alters in a batch (`:alter`
{"data": [{"name", "value"?, "operation"?: SET|DELETE}], "validate_only"?}), as Confluent's REST Proxy does;
the writes answer 204.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from confluent_kafka.admin import ConfigResource

from . import admin_wire
from .admin import ConfigValue
from .context import context_of
from .errors import RestError, bad_request
from .v3_common import answer, body_object, cluster_id, listing, no_content, resource

_CLUSTER = "/v3/clusters/{cluster}"
_BROKER_ID = "{broker:[0-9]{1,10}}"


@dataclass(frozen=True)
class Scope:
    """Whose configs: the Kafka resource, and how its configs are named in v3 paths, CRNs and bodies."""

    kind: str  # KafkaTopicConfig, KafkaBrokerConfig, KafkaClusterConfig
    resource_type: ConfigResource.Type
    resource_name: str
    path: str  # below clusters/{id}, without the trailing /configs/{name}
    crn: str  # below kafka={id}
    fields: dict[str, Any] = field(default_factory=dict)


async def _topic_scope(request: web.Request, topic: str) -> Scope:
    await context_of(request).admin.topic(topic)  # 404 for a topic that does not exist
    return Scope(
        "KafkaTopicConfig",
        ConfigResource.Type.TOPIC,
        topic,
        f"topics/{topic}/configs",
        f"topic={topic}/config",
        {"topic_name": topic},
    )


async def _broker_ids(request: web.Request) -> list[int]:
    _, _, brokers = await context_of(request).admin.describe_cluster()
    return [broker_id for broker_id, _, _ in brokers]


def _broker_scope(broker_id: int) -> Scope:
    return Scope(
        "KafkaBrokerConfig",
        ConfigResource.Type.BROKER,
        str(broker_id),
        f"brokers/{broker_id}/configs",
        f"broker={broker_id}/config",
        {"broker_id": broker_id},
    )


ScopeOf = Callable[[web.Request], Awaitable[Scope]]


async def topic_scope(request: web.Request) -> Scope:
    return await _topic_scope(request, request.match_info["topic"])


async def broker_scope(request: web.Request) -> Scope:
    wanted = int(request.match_info["broker"])
    if wanted not in await _broker_ids(request):
        raise RestError(404, 404, f"Broker {wanted} cannot be found.")
    return _broker_scope(wanted)


async def cluster_scope(request: web.Request) -> Scope:
    return Scope(
        "KafkaClusterConfig",
        ConfigResource.Type.BROKER,
        "",
        "broker-configs",
        "broker-config",
        {"config_type": "BROKER"},
    )


def config_json(request: web.Request, cluster: str, scope: Scope, config: ConfigValue) -> dict[str, Any]:
    return resource(
        request,
        scope.kind,
        f"clusters/{cluster}/{scope.path}/{config.name}",
        f"kafka={cluster}/{scope.crn}={config.name}",
        cluster_id=cluster,
        **scope.fields,
        name=config.name,
        value=config.value,
        is_default=config.is_default,
        is_read_only=config.is_read_only,
        is_sensitive=config.is_sensitive,
        source=config.source,
        synonyms=[{"name": n, "value": v, "source": s} for n, v, s in config.synonyms],
    )


async def _configs(request: web.Request, scope: Scope) -> list[ConfigValue]:
    admin = context_of(request).admin
    if scope.resource_name == "" and scope.resource_type == ConfigResource.Type.BROKER:
        return await admin_wire.cluster_configs(admin)
    return await admin.configs(scope.resource_type, scope.resource_name)


async def _alter(
    request: web.Request, scope: Scope, changes: list[tuple[str, str | None]], validate_only: bool = False
) -> None:
    admin = context_of(request).admin
    if scope.resource_name == "" and scope.resource_type == ConfigResource.Type.BROKER:
        await admin_wire.alter_cluster_configs(admin, changes, validate_only=validate_only)
    else:
        await admin.alter_configs(
            scope.resource_type, scope.resource_name, changes, validate_only=validate_only
        )


def _config_value(body: dict[str, Any], where: str) -> str:
    value = body.get("value")
    if not isinstance(value, str):
        raise bad_request(f"{where} must be a string")
    return value


def _changes(body: dict[str, Any]) -> list[tuple[str, str | None]]:
    entries = body.get("data")
    if not isinstance(entries, list) or not entries:
        raise bad_request("data must be a non-empty list of {name, value, operation}")
    changes: list[tuple[str, str | None]] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise bad_request(f"data[{index}] needs a name")
        operation = entry.get("operation") or "SET"
        if not isinstance(operation, str) or operation.upper() not in ("SET", "DELETE"):
            raise bad_request(f"data[{index}].operation must be SET or DELETE")
        if any(entry["name"] == earlier for earlier, _ in changes):
            raise bad_request(f"data[{index}]: config {entry['name']} is named twice")
        if operation.upper() == "SET":
            changes.append((entry["name"], _config_value(entry, f"data[{index}].value")))
        else:
            changes.append((entry["name"], None))
    return changes


def scope_handlers(scope_of: ScopeOf) -> dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]]:
    """list, get, set, reset and alter for the scope `scope_of` names from a request."""

    async def list_configs(request: web.Request) -> web.StreamResponse:
        cluster = await cluster_id(request)
        scope = await scope_of(request)
        configs = await _configs(request, scope)
        return listing(
            request, f"{scope.kind}List", [config_json(request, cluster, scope, c) for c in configs]
        )

    async def get_config(request: web.Request) -> web.StreamResponse:
        cluster = await cluster_id(request)
        scope = await scope_of(request)
        name = request.match_info["name"]
        for config in await _configs(request, scope):
            if config.name == name:
                return answer(config_json(request, cluster, scope, config))
        raise RestError(404, 404, f"Config {name} cannot be found.")

    async def set_config(request: web.Request) -> web.StreamResponse:
        await cluster_id(request)
        scope = await scope_of(request)
        value = _config_value(await body_object(request), "value")
        await _alter(request, scope, [(request.match_info["name"], value)])
        return no_content()

    async def reset_config(request: web.Request) -> web.StreamResponse:
        await cluster_id(request)
        scope = await scope_of(request)
        await _alter(request, scope, [(request.match_info["name"], None)])
        return no_content()

    async def alter_configs(request: web.Request) -> web.StreamResponse:
        await cluster_id(request)
        scope = await scope_of(request)
        body = await body_object(request)
        changes = _changes(body)
        validate_only = body.get("validate_only", False)
        if not isinstance(validate_only, bool):
            raise bad_request("validate_only must be a boolean")
        await _alter(request, scope, changes, validate_only)
        return no_content()

    return {
        "list": list_configs,
        "get": get_config,
        "set": set_config,
        "reset": reset_config,
        "alter": alter_configs,
    }


async def list_all_topic_configs(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    admin = context_of(request).admin
    data: list[dict[str, Any]] = []
    for topic in await admin.topics(internal=True):
        scope = await _topic_scope(request, topic)
        data.extend(config_json(request, cluster, scope, c) for c in await _configs(request, scope))
    return listing(request, "KafkaTopicConfigList", data)


async def list_all_broker_configs(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    data: list[dict[str, Any]] = []
    for broker_id in await _broker_ids(request):
        scope = _broker_scope(broker_id)
        data.extend(config_json(request, cluster, scope, c) for c in await _configs(request, scope))
    return listing(request, "KafkaBrokerConfigList", data)


def _routes(base: str, scope_of: ScopeOf) -> list[tuple[str, str, Any]]:
    handlers = scope_handlers(scope_of)
    return [
        ("GET", base, handlers["list"]),
        ("POST", base + ":alter", handlers["alter"]),
        ("GET", base + "/{name}", handlers["get"]),
        ("PUT", base + "/{name}", handlers["set"]),
        ("DELETE", base + "/{name}", handlers["reset"]),
    ]


ROUTES = [
    ("GET", _CLUSTER + "/topics/-/configs", list_all_topic_configs),
    ("GET", _CLUSTER + "/brokers/-/configs", list_all_broker_configs),
    *_routes(_CLUSTER + "/topics/{topic}/configs", topic_scope),
    *_routes(_CLUSTER + f"/brokers/{_BROKER_ID}/configs", broker_scope),
    *_routes(_CLUSTER + "/broker-configs", cluster_scope),
]
