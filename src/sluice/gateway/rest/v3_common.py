"""What v3 resources share: kinds, metadata with self links, related links, list envelopes."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .context import CLUSTERS, REQUEST_CLUSTER
from .errors import V3_JSON, RestError, bad_request, json_response, read_json, require_object


def base_url(request: web.Request) -> str:
    scheme = request.headers.get("X-Forwarded-Proto", request.scheme)
    host = request.headers.get("X-Forwarded-Host", request.host)
    return f"{scheme}://{host}/v3"


def resource(request: web.Request, kind: str, path: str, crn: str, **fields: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {"self": f"{base_url(request)}/{path}", "resource_name": f"crn:///{crn}"},
        **fields,
    }


def related(request: web.Request, path: str) -> dict[str, str]:
    return {"related": f"{base_url(request)}/{path}"}


def listing(request: web.Request, kind: str, data: list[dict[str, Any]]) -> web.Response:
    return json_response(
        {
            "kind": kind,
            "metadata": {"self": f"{base_url(request)}{request.path[3:]}", "next": None},
            "data": data,
        },
        content_type=V3_JSON,
    )


def answer(body: dict[str, Any], status: int = 200) -> web.Response:
    return json_response(body, status, V3_JSON)


async def cluster_id(request: web.Request) -> str:
    """The path's cluster id, which must be one of the gateway's clusters' (404 otherwise); the request is
    served by that cluster's context from now on (`context_of`)."""
    wanted = request.match_info["cluster"]
    unreachable: RestError | None = None
    for context in request.app[CLUSTERS]:
        try:
            actual = await context.admin.cluster_id()
        except RestError as error:  # a cluster that cannot be asked may be the one named
            unreachable = unreachable or error
            continue
        if actual == wanted:
            request[REQUEST_CLUSTER] = context
            return actual
    if unreachable is not None:
        raise unreachable
    raise RestError(404, 404, f"Cluster {wanted} cannot be found.")


async def body_object(request: web.Request) -> dict[str, Any]:
    content_type = request.content_type.lower()
    if request.body_exists and content_type not in ("application/json", "application/octet-stream"):
        raise RestError(415, 415, f"unsupported Content-Type {content_type!r}: expected application/json")
    try:
        return require_object(await read_json(request))
    except RestError as error:  # v3 answers a body that is no JSON object 400, as Confluent's does
        if error.status == 422:
            raise bad_request(error.message) from None
        raise


def no_content() -> web.Response:
    return web.Response(status=204)
