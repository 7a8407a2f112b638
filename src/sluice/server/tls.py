"""TLS for the Kafka listeners: one server-side SSLContext built from the broker's ssl_* settings.

TLS 1.2 is the floor. Certificates are reloaded in place (`TlsContext.reload`, on SIGHUP): OpenSSL copies the
context's certificate into each connection at its handshake, so loading a new chain into the same context
changes what new connections see and leaves open connections alone.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any

from sluice.security.acl import ANONYMOUS

log = logging.getLogger("sluice.tls")

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TlsContext:
    def __init__(
        self,
        certfile: str,
        keyfile: str,
        password: str | None = None,
        cafile: str | None = None,
        client_auth: str = "none",
    ) -> None:
        self.certfile, self.keyfile, self.password, self.cafile = certfile, keyfile, password, cafile
        self.client_auth = client_auth
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.verify_mode = CLIENT_AUTH[client_auth]
        self._load()

    @classmethod
    def from_config(cls, config: Any) -> TlsContext:
        return cls(
            config.ssl_certfile,
            config.ssl_keyfile,
            config.ssl_key_password,
            config.ssl_cafile,
            config.ssl_client_auth,
        )

    def _load(self) -> None:
        self.context.load_cert_chain(self.certfile, self.keyfile, self.password)
        if self.cafile:
            self.context.load_verify_locations(cafile=self.cafile)

    def reload(self) -> bool:
        """Load the files again (same paths) into the live context; a broken file keeps the old certificate."""
        try:
            probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            probe.load_cert_chain(self.certfile, self.keyfile, self.password)
            self._load()
        except (OSError, ssl.SSLError) as exc:
            log.error("TLS certificate reload failed, keeping the previous one: %s", exc)
            return False
        log.info("TLS certificate reloaded from %s", self.certfile)
        return True


def peer_principal(transport: Any) -> str | None:
    """User:<CN> of a verified client certificate, ANONYMOUS on a TLS connection without one, None without TLS."""
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    if not cert:
        return ANONYMOUS
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return f"User:{value}"
    return ANONYMOUS
