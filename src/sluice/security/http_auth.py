"""HTTP basic and bearer credentials checked on a listener of ours: the gateway's HTTP API and the broker's
admin listener share them. The configuration section has one shape everywhere:

    basic: {alice: s3cret}          # user: password
    bearer_tokens: [token-1, token-2]

Credentials are compared in constant time; a missing or wrong one gets 401 with a WWW-Authenticate header.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

log = logging.getLogger("sluice.http_auth")

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


def http_middleware(
    auth: ClientAuth, open_paths: frozenset[str] = frozenset()
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """aiohttp middleware answering 401 to a request without a configured credential (`open_paths` excepted)."""

    @web.middleware
    async def authenticate(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path in open_paths or auth.accepts(request.headers.get("Authorization")):
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


def redact_url(url: str) -> str:
    """`url` without the password it may carry (https://user:secret@host -> https://user:***@host), for logs
    and error messages."""
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    userinfo, at, hostport = authority.rpartition("@")
    if not sep or not at:
        return url
    user = userinfo.partition(":")[0]
    return f"{scheme}://{user}:***@{hostport}{slash}{path}"
