"""SASL by hand over sluice's WireClient, for tests that need exact control of the exchange."""

from __future__ import annotations

import ssl
from typing import Any

from scramp import ScramClient

from sluice.client.wire import WireClient


def connect(address: str, cafile: str | None = None) -> WireClient:
    client = WireClient.connect(address, timeout=10)
    if cafile is not None:
        context = ssl.create_default_context(cafile=cafile)
        client.sock = context.wrap_socket(client.sock, server_hostname="127.0.0.1")
    return client


def login(
    client: WireClient, user: str, password: str, mechanism: str = "SCRAM-SHA-256", version: int = 2
) -> Any:
    """SaslHandshake v1 + SaslAuthenticate; returns the last SaslAuthenticate response."""
    handshake = client.call("SaslHandshake", 1, client.request_class("SaslHandshake")(mechanism=mechanism))
    assert handshake.error_code == 0, handshake
    auth = client.request_class("SaslAuthenticate")
    if mechanism == "PLAIN":
        return client.call("SaslAuthenticate", version, auth(auth_bytes=f"\0{user}\0{password}".encode()))
    scram = ScramClient([mechanism], user, password)
    first = client.call("SaslAuthenticate", version, auth(auth_bytes=scram.get_client_first().encode()))
    if first.error_code:
        return first
    scram.set_server_first(bytes(first.auth_bytes).decode())
    final = client.call("SaslAuthenticate", version, auth(auth_bytes=scram.get_client_final().encode()))
    if final.error_code == 0:
        scram.set_server_final(bytes(final.auth_bytes).decode())  # the broker proved it knows the key too
    return final
