"""Client authentication on the gateway's own listeners (towards its clients, not towards Kafka).

Two independent layers, both optional:
- mutual TLS: `tls.grpc` / `tls.http` with `client_ca_path` (and `client_auth: required`, the default once a
  CA is given) only admit clients whose certificate that CA signed;
- credentials: the top-level `auth:` section lists HTTP basic users and/or bearer tokens; every HTTP request
  (but /_ping and /_health, for load balancers) and every gRPC call must carry one in its `Authorization`
  header / `authorization` metadata, or gets 401 / UNAUTHENTICATED.

    auth:
      basic: {alice: s3cret}          # user: password
      bearer_tokens: [token-1, token-2]
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from aiohttp import web
from grpc import aio

from sluice.security.http_auth import ClientAuth, client_auth_from
from sluice.security.http_auth import http_middleware as _http_middleware

log = logging.getLogger("sluice.gateway.auth")

# Load balancers' probes stay open.
OPEN_HTTP_PATHS = frozenset({"/_ping", "/_health"})

__all__ = ["OPEN_HTTP_PATHS", "ClientAuth", "GrpcAuthInterceptor", "client_auth_from", "http_middleware"]


def http_middleware(auth: ClientAuth) -> Callable[..., Awaitable[web.StreamResponse]]:
    return _http_middleware(auth, OPEN_HTTP_PATHS)


class GrpcAuthInterceptor(aio.ServerInterceptor):
    """Refuses every call whose `authorization` metadata is not a configured credential."""

    def __init__(self, auth: ClientAuth) -> None:
        self.auth = auth

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]], details: Any) -> Any:
        metadata = dict(details.invocation_metadata or ())
        if self.auth.accepts(metadata.get("authorization")):
            return await continuation(details)
        log.warning("refused gRPC %s: no valid credentials", details.method)
        handler = await continuation(details)
        return _refusing(handler)


def _refusing(handler: Any) -> Any:
    """A handler of the same shape as `handler` that aborts with UNAUTHENTICATED."""

    async def unary(request: Any, context: aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "authentication required")

    async def streaming(request: Any, context: aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "authentication required")
        yield  # pragma: no cover  (makes this an async generator)

    if handler is None:
        return None
    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary, **kwargs)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(streaming, **kwargs)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary, **kwargs)
    return grpc.stream_stream_rpc_method_handler(streaming, **kwargs)
