"""Connections the wire client makes as librdkafka would with the same settings: TLS from
`security.protocol`/`ssl.*`, then SASL PLAIN or SCRAM-SHA-256/512 from `sasl.*`.

Shared by the console (which asks brokers what confluent-kafka does not expose) and the pipeline's
driver (which ends the tasks' transactions with EndTxn), so both reach the clusters their
confluent-kafka clients reach. OAUTHBEARER and GSSAPI need token or Kerberos machinery this client
does not have; callers check `supported` first and say so.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping

from sluice.client.wire import WireClient

PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SecureConnectError(Exception):
    """The broker refused the SASL handshake or the credentials."""


def mechanism(settings: Mapping[str, str]) -> str:
    # librdkafka's default, and its older plural spelling of the key.
    return str(settings.get("sasl.mechanism") or settings.get("sasl.mechanisms") or "GSSAPI").upper()


def security_protocol(settings: Mapping[str, str]) -> str:
    return str(settings.get("security.protocol", "plaintext")).lower()


def unsupported_reason(settings: Mapping[str, str]) -> str | None:
    """Why this client cannot connect with these settings, or None when it can."""
    protocol = security_protocol(settings)
    if protocol not in PROTOCOLS:
        return f"security.protocol {protocol} is not one of {', '.join(PROTOCOLS)}"
    if protocol.startswith("sasl") and mechanism(settings) not in MECHANISMS:
        return f"sasl.mechanism {mechanism(settings)} is not one of {', '.join(MECHANISMS)}"
    return None


def supported(settings: Mapping[str, str]) -> bool:
    return unsupported_reason(settings) is None


def tls_context(settings: Mapping[str, str]) -> ssl.SSLContext:
    """librdkafka's TLS settings, as Python's ssl reads them."""
    context = ssl.create_default_context(cafile=settings.get("ssl.ca.location"))
    if str(settings.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        context.check_hostname = False
    if str(settings.get("enable.ssl.certificate.verification", "true")).lower() == "false":
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    cert, key = settings.get("ssl.certificate.location"), settings.get("ssl.key.location")
    if cert and key:
        context.load_cert_chain(cert, key, password=settings.get("ssl.key.password"))
    return context


def authenticate(client: WireClient, mechanism: str, username: str, password: str) -> None:
    """SaslHandshake, then SaslAuthenticate rounds: PLAIN's one, or SCRAM's two (RFC 5802, via scramp)."""
    handshake = client.call("SaslHandshake", 1, client.request_class("SaslHandshake")(mechanism=mechanism))
    if handshake.error_code != 0:
        raise SecureConnectError(f"SaslHandshake {mechanism}: error {handshake.error_code}")

    def step(data: bytes) -> bytes:
        reply = client.call("SaslAuthenticate", 1, client.request_class("SaslAuthenticate")(auth_bytes=data))
        if reply.error_code != 0:
            raise SecureConnectError(f"SaslAuthenticate: {reply.error_message or reply.error_code}")
        return bytes(reply.auth_bytes or b"")

    if mechanism == "PLAIN":
        step(b"\0" + username.encode() + b"\0" + password.encode())
        return
    from scramp import ScramClient

    scram = ScramClient([mechanism], username, password)
    scram.set_server_first(step(scram.get_client_first().encode()).decode())
    scram.set_server_final(step(scram.get_client_final().encode()).decode())


def connect_secure(
    host: str,
    port: int,
    settings: Mapping[str, str],
    timeout: float,
    *,
    client_id: str = "sluice-wire",
) -> WireClient:
    """A wire client connected as librdkafka would be with ``settings``: TLS, then SASL, when asked for."""
    reason = unsupported_reason(settings)
    if reason is not None:
        raise SecureConnectError(reason)
    protocol = security_protocol(settings)
    sock: socket.socket = socket.create_connection((host, port), timeout=timeout)
    try:
        if protocol.endswith("ssl"):
            sock = tls_context(settings).wrap_socket(sock, server_hostname=host)
        client = WireClient.over(sock, client_id=client_id)
        if protocol.startswith("sasl"):
            authenticate(
                client,
                mechanism(settings),
                str(settings.get("sasl.username", "")),
                str(settings.get("sasl.password", "")),
            )
    except BaseException:
        sock.close()
        raise
    return client
