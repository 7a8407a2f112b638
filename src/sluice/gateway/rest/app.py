"""The REST Proxy application: routes and the middleware that turns every failure into Confluent's error body."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from ..errors import GatewayError
from . import (
    v2_consumers,
    v2_metadata,
    v2_produce,
    v3_acls,
    v3_brokers,
    v3_configs,
    v3_groups,
    v3_partitions,
    v3_records,
    v3_topics,
)
from .context import CLUSTERS, CONTEXT, MAX_BODY_BYTES, RestContext
from .errors import RestError, error_response, from_gateway_error

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_PARTITION = "{partition:[0-9]{1,9}}"
_INSTANCE = "/consumers/{group}/instances/{instance}"


@web.middleware
async def confluent_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RestError as error:
        return error_response(error, _is_v3(request))
    except GatewayError as error:
        return error_response(from_gateway_error(error), _is_v3(request))
    except web.HTTPRequestEntityTooLarge as exc:
        return error_response(RestError(413, 413, f"request body too large: {exc.text}"), _is_v3(request))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        answer = error_response(RestError(exc.status, exc.status, exc.reason), _is_v3(request))
        if "Allow" in exc.headers:  # a 405 says which methods the resource has (RFC 9110)
            answer.headers["Allow"] = exc.headers["Allow"]
        return answer
    except (ConnectionResetError, ConnectionError):
        raise
    except Exception as exc:
        log.exception("REST %s %s failed", request.method, request.path)
        failure = RestError(500, 50002, f"internal error: {type(exc).__name__}: {exc}")
        return error_response(failure, _is_v3(request))


def _is_v3(request: web.Request) -> bool:
    """v3 answers errors in its own shape (worked out only for a failed request: `path` decodes the URL)."""
    return request.path.startswith("/v3")


def create_rest_app(
    context: RestContext, max_body_bytes: int, others: list[RestContext] | None = None
) -> web.Application:
    """The REST API of the default cluster's `context`; v3 also serves the `others` by their cluster ids."""
    app = web.Application(client_max_size=max_body_bytes, middlewares=[confluent_errors])
    app[CONTEXT] = context
    app[CLUSTERS] = [context, *(others or [])]
    app[MAX_BODY_BYTES] = max_body_bytes
    routes: list[tuple[str, str, Handler]] = [
        # v2 metadata and produce
        ("GET", "/topics", v2_metadata.list_topics),
        ("GET", "/topics/{topic}", v2_metadata.get_topic),
        ("POST", "/topics/{topic}", v2_produce.produce),
        ("GET", "/topics/{topic}/partitions", v2_metadata.list_partitions),
        ("GET", f"/topics/{{topic}}/partitions/{_PARTITION}", v2_metadata.get_partition),
        ("POST", f"/topics/{{topic}}/partitions/{_PARTITION}", v2_produce.produce),
        ("GET", f"/topics/{{topic}}/partitions/{_PARTITION}/offsets", v2_metadata.partition_offsets),
        ("GET", "/brokers", v2_metadata.list_brokers),
        # v2 consumer instances
        ("POST", "/consumers/{group}", v2_consumers.create),
        ("DELETE", _INSTANCE, v2_consumers.delete),
        ("POST", _INSTANCE + "/subscription", v2_consumers.subscribe),
        ("GET", _INSTANCE + "/subscription", v2_consumers.subscription),
        ("DELETE", _INSTANCE + "/subscription", v2_consumers.unsubscribe),
        ("POST", _INSTANCE + "/assignments", v2_consumers.assign),
        ("GET", _INSTANCE + "/assignments", v2_consumers.assignments),
        ("POST", _INSTANCE + "/positions", v2_consumers.seek),
        ("POST", _INSTANCE + "/positions/beginning", v2_consumers.seek_beginning),
        ("POST", _INSTANCE + "/positions/end", v2_consumers.seek_end),
        ("GET", _INSTANCE + "/records", v2_consumers.records),
        ("POST", _INSTANCE + "/offsets", v2_consumers.commit),
        ("GET", _INSTANCE + "/offsets", v2_consumers.committed),
    ]
    # Confluent's (Jersey's) v2 paths match with a trailing slash too: the same call, no redirect.
    routes += [(method, path + "/", handler) for method, path, handler in routes]
    routes += [
        *v3_configs.ROUTES,  # first: its topics/-/configs and brokers/-/configs are no topic or broker
        *v3_topics.ROUTES,
        *v3_partitions.ROUTES,
        *v3_brokers.ROUTES,
        *v3_records.ROUTES,
        *v3_groups.ROUTES,
        *v3_acls.ROUTES,
    ]
    for method, path, handler in routes:
        app.router.add_route(method, path, handler)
    return app
