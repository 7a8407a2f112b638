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

import base64
import binascii
import hmac
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from aiohttp import web
from grpc import aio

log = logging.getLogger("sluice.gateway.auth")

OPEN_HTTP_PATHS = frozenset({"/_ping", "/_health"})
MAX_AUTHORIZATION_BYTES = 8192


@dataclass(frozen=True)
class ClientAuth:
    basic: dict[str, str] = field(default_factory=dict)
    bearer_tokens: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.basic or self.bearer_tokens)

    def accepts(self, authorization: str | None) -> bool:
        """Is this `Authorization` value one of the configured credentials? Compared in constant time."""
        if not authorization or len(authorization) > MAX_AUTHORIZATION_BYTES:
            return False
        scheme, _, value = authorization.strip().partition(" ")
        scheme = scheme.lower()
        value = value.strip()
        if scheme == "bearer":
            found = False
            for token in self.bearer_tokens:
                found |= hmac.compare_digest(token.encode(), value.encode())
            return found
        if scheme == "basic":
            try:
                user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return False
            expected = self.basic.get(user)
            return (
                bool(sep)
                and expected is not None
                and hmac.compare_digest(expected.encode(), password.encode())
            )
        return False


def client_auth_from(section: Any, where: str = "auth") -> ClientAuth | None:
    """Parse the `auth:` section; ValueError names what is wrong."""
    if section is None:
        return None
    if not isinstance(section, dict):
        raise ValueError(f"{where}: expected a mapping")
    unknown = set(section) - {"basic", "bearer_tokens"}
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    basic = section.get("basic") or {}
    tokens = section.get("bearer_tokens") or []
    if not isinstance(basic, dict) or not all(isinstance(v, str | int) for v in basic.values()):
        raise ValueError(f"{where}.basic: expected a mapping of user: password")
    if not isinstance(tokens, list) or not all(isinstance(t, str) and t for t in tokens):
        raise ValueError(f"{where}.bearer_tokens: expected a list of non-empty strings")
    if any(":" in str(user) for user in basic):
        raise ValueError(f"{where}.basic: a user name cannot contain ':'")
    auth = ClientAuth({str(u): str(p) for u, p in basic.items()}, tuple(tokens))
    return auth if auth.enabled else None


def http_middleware(auth: ClientAuth) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def authenticate(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path in OPEN_HTTP_PATHS or auth.accepts(request.headers.get("Authorization")):
            return await handler(request)
        log.warning(
            "refused HTTP %s %s from %s: no valid credentials", request.method, request.path, request.remote
        )
        return web.json_response(
            {"error": "authentication required"},
            status=401,
            headers={"WWW-Authenticate": 'Basic realm="sluice", Bearer'},
        )

    return authenticate


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
