"""What v3 resources share: kinds, metadata with self links, related links, list envelopes."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .context import context_of
from .errors import V3_JSON, RestError, json_response, read_json, require_object


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
    """The path's cluster id, which must be this cluster's (404 otherwise)."""
    wanted = request.match_info["cluster"]
    actual = await context_of(request).admin.cluster_id()
    if wanted != actual:
        raise RestError(404, 404, f"Cluster {wanted} cannot be found.")
    return actual


async def body_object(request: web.Request) -> dict[str, Any]:
    content_type = request.content_type.lower()
    if request.body_exists and content_type not in ("application/json", "application/octet-stream"):
        raise RestError(415, 415, f"unsupported Content-Type {content_type!r}: expected application/json")
    return require_object(await read_json(request))


def no_content() -> web.Response:
    return web.Response(status=204)
