"""A secured sluice broker for the security tests (the `secure_broker` fixture is in conftest.py):
PLAINTEXT, SSL (client certificates requested),
SASL_PLAINTEXT and SASL_SSL listeners at once, the ACL authorizer on, `User:admin` a super user created
offline with `sluice users create` before the first start. Certificates come from trustme."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme
import yaml

from sluice.testing import BrokerProcess, free_port

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass
class Certificates:
    ca: trustme.CA
    directory: Path
    ca_path: Path
    server_cert: Path
    server_key: Path
    # CN -> (certificate path, key path)
    clients: dict[str, tuple[Path, Path]] = field(default_factory=dict)

    def client(self, name: str) -> tuple[Path, Path]:
        if name not in self.clients:
            issued = self.ca.issue_cert(f"{name}.clients.test", common_name=name)
            cert, key = self.directory / f"{name}.crt", self.directory / f"{name}.key"
            issued.cert_chain_pems[0].write_to_path(str(cert))
            issued.private_key_pem.write_to_path(str(key))
            self.clients[name] = (cert, key)
        return self.clients[name]


def make_certificates(directory: Path) -> Certificates:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    ca_path, cert, key = directory / "ca.pem", directory / "server.crt", directory / "server.key"
    ca.cert_pem.write_to_path(str(ca_path))
    cert.write_bytes(b"".join(p.bytes() for p in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(key))
    return Certificates(ca, directory, ca_path, cert, key)


def sluice_cli(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=check,
        timeout=60,
    )


@dataclass
class SecureBroker:
    process: BrokerProcess
    certs: Certificates
    ports: dict[str, int]
    data_dir: Path
    config_path: Path

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def sasl(
        self, user: str, password: str, mechanism: str = "SCRAM-SHA-256", *, tls: bool = True
    ) -> dict[str, Any]:
        """confluent-kafka settings for a SASL client."""
        settings: dict[str, Any] = {
            "bootstrap.servers": self.address("SASL_SSL" if tls else "SASL_PLAINTEXT"),
            "security.protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
        }
        if tls:
            settings["ssl.ca.location"] = str(self.certs.ca_path)
        return settings

    def admin_settings(
        self, mechanism: str = "SCRAM-SHA-256", *, tls: bool = True, password: str | None = None
    ) -> dict[str, Any]:
        """The super user's settings (`password` instead of the right one, to try a wrong one)."""
        return self.sasl(ADMIN, ADMIN_PASSWORD if password is None else password, mechanism, tls=tls)

    def mtls(self, name: str | None) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "bootstrap.servers": self.address("SSL"),
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.certs.ca_path),
        }
        if name is not None:
            cert, key = self.certs.client(name)
            settings |= {"ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
        return settings


def cli_settings(settings: dict[str, Any]) -> tuple[str, list[str]]:
    """confluent-kafka settings as a sluice command line takes them: the bootstrap, and -X KEY=VALUE for the rest."""
    extra = [
        arg
        for key, value in settings.items()
        if key != "bootstrap.servers"
        for arg in ("-X", f"{key}={value}")
    ]
    return settings["bootstrap.servers"], extra


def write_config(path: Path, certs: Certificates, ports: dict[str, int], **extra: Any) -> None:
    config = {
        "listeners": [f"{name}://127.0.0.1:{port}" for name, port in ports.items()],
        "ssl_certfile": str(certs.server_cert),
        "ssl_keyfile": str(certs.server_key),
        "ssl_cafile": str(certs.ca_path),
        "ssl_client_auth": "requested",
        "sasl_enabled_mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
        "super_users": [f"User:{ADMIN}"],
        "authorizer": "acl",
        "connection_failed_authentication_delay_ms": 50,
        **extra,
    }
    path.write_text(yaml.safe_dump(config))


def start_secure_broker(tmp: Path, **extra: Any) -> SecureBroker:
    certs = make_certificates(tmp / "certs")
    data_dir = tmp / "data"  # not made here: `sluice users create --data-dir` makes it, as on a first run
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        sluice_cli(
            "users",
            "create",
            ADMIN,
            "--mechanism",
            mechanism,
            "--password-stdin",
            "--data-dir",
            str(data_dir),
            stdin=ADMIN_PASSWORD + "\n",
        )
    ports = {name: free_port() for name in LISTENERS}
    config_path = tmp / "broker.yaml"
    write_config(config_path, certs, ports, **extra)
    process = BrokerProcess(data_dir, config=config_path).start()
    return SecureBroker(process, certs, ports, data_dir, config_path)
