"""One connection's security state (pure): which listener it came through, who it is, what it may send.

The shell creates a `Session` per connection; SaslHandshake and SaslAuthenticate advance it; the authorizer
reads `principal`. Before authentication completes on a SASL listener only ApiVersions and the SASL APIs are
accepted, with a small request-size cap (Kafka's CVE-2022-34917 lesson).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice.security.acl import ANONYMOUS
from sluice.security.authn import SaslExchange

PLAINTEXT = "PLAINTEXT"
SSL = "SSL"
SASL_PLAINTEXT = "SASL_PLAINTEXT"
SASL_SSL = "SASL_SSL"
PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)

API_VERSIONS_KEY = 18
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
PRE_AUTH_APIS = frozenset({API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY})
# Largest request accepted before authentication (Kafka: 512 KiB, CVE-2022-34917).
PRE_AUTH_MAX_REQUEST_BYTES = 512 * 1024


def uses_sasl(protocol: str) -> bool:
    return protocol in (SASL_PLAINTEXT, SASL_SSL)


def uses_tls(protocol: str) -> bool:
    return protocol in (SSL, SASL_SSL)


@dataclass(slots=True)
class Session:
    listener: str  # the security protocol of the listener the connection came through
    client_host: str
    # SSL listeners: User:<CN> of a verified client certificate, else ANONYMOUS.
    principal: str = ANONYMOUS
    authenticated: bool = False
    mechanism: str | None = None
    exchange: SaslExchange | None = None
    # SaslHandshake v0: the SASL tokens follow as bare length-prefixed frames, without Kafka headers.
    raw_tokens: bool = False
    # KIP-368: after this (epoch ms) only re-authentication is accepted; None: never expires.
    expires_ms: int | None = None
    # A failed login: the shell answers after this delay, then closes the connection.
    failure_delay_ms: int | None = None
    previous_principal: str | None = field(default=None)

    @classmethod
    def open(cls, listener: str, client_host: str, tls_principal: str | None = None) -> Session:
        session = cls(listener, client_host)
        if tls_principal is not None:
            session.principal = tls_principal
        session.authenticated = not uses_sasl(listener)
        return session

    def may_send(self, api_key: int, now_ms: int) -> bool:
        if api_key in PRE_AUTH_APIS:
            return True
        if not self.authenticated:
            return False
        return self.expires_ms is None or now_ms < self.expires_ms

    @property
    def max_request_bytes(self) -> int | None:
        """The cap that applies now, or None for the broker's usual limit."""
        return None if self.authenticated else PRE_AUTH_MAX_REQUEST_BYTES
