"""The console against a Schema Registry behind TLS and basic auth (the real `sluice registry`): its client
settings reach the registry, and a password given to the console never shows on a page."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from console_helpers import ConsoleThread
from typer.testing import CliRunner

from sluice.cli import app as cli
from sluice.console.app import ConsoleConfig
from sluice.testing import RegistryProcess, free_port


@pytest.fixture(scope="module")
def locked_registry(
    broker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RegistryProcess, Path]]:
    """`sluice registry` on HTTPS (a throwaway CA) wanting alice:s3cret, with one subject registered."""
    base = tmp_path_factory.mktemp("locked-registry")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(base / "cert.pem"))
    cert.private_key_pem.write_to_path(str(base / "key.pem"))
    ca.cert_pem.write_to_path(str(base / "ca.pem"))
    security = base / "registry.yaml"
    tls = {"certificate_path": str(base / "cert.pem"), "key_path": str(base / "key.pem")}
    security.write_text(yaml.safe_dump({"tls": tls}))
    extra = ["--basic-auth", "alice:s3cret", "--security-config", str(security)]
    with RegistryProcess(
        broker.bootstrap, f"_schemas-console-{uuid.uuid4().hex[:8]}", extra_args=extra
    ) as proc:
        assert proc.url is not None and proc.url.startswith("https://")
        client = SchemaRegistryClient(
            {"url": proc.url, "basic.auth.user.info": "alice:s3cret", "ssl.ca.location": str(base / "ca.pem")}
        )
        text = json.dumps({"type": "record", "name": "Locked", "fields": [{"name": "a", "type": "int"}]})
        client.register_schema("locked-value", Schema(text, "AVRO"))
        yield proc, base / "ca.pem"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _schemas_page(broker: Any, url: str, settings: tuple[tuple[str, str], ...]) -> tuple[int, str]:
    config = ConsoleConfig(
        settings={"bootstrap.servers": broker.bootstrap},
        port=free_port(),
        schema_registry_url=url,
        schema_registry_settings=settings,
    )
    running = ConsoleThread(config).start()
    try:
        return _get(f"{running.url}/schemas")
    finally:
        running.stop()


def test_the_console_reads_a_registry_behind_tls_and_basic_auth(
    broker: Any, locked_registry: tuple[RegistryProcess, Path]
) -> None:
    registry, ca = locked_registry
    assert registry.url is not None
    status, body = _schemas_page(
        broker, registry.url, (("basic.auth.user.info", "alice:s3cret"), ("ssl.ca.location", str(ca)))
    )
    assert status == 200 and "locked-value" in body
    # Credentials in the URL work too.
    with_userinfo = registry.url.replace("https://", "https://alice:s3cret@")
    status, body = _schemas_page(broker, with_userinfo, (("ssl.ca.location", str(ca)),))
    assert status == 200 and "locked-value" in body


def test_a_wrong_registry_password_is_an_error_page_that_never_shows_it(
    broker: Any, locked_registry: tuple[RegistryProcess, Path]
) -> None:
    registry, ca = locked_registry
    assert registry.url is not None
    status, body = _schemas_page(
        broker, registry.url, (("basic.auth.user.info", "alice:hunter2"), ("ssl.ca.location", str(ca)))
    )
    assert status >= 400 and "schema registry" in body and "HTTP 401" in body
    assert "hunter2" not in body
    with_userinfo = registry.url.replace("https://", "https://alice:hunter2@")
    status, body = _schemas_page(broker, with_userinfo, (("ssl.ca.location", str(ca)),))
    assert status >= 400 and "alice:***@" in body and "hunter2" not in body
    # Without the CA the registry's certificate is refused: an error page, not a traceback.
    status, body = _schemas_page(broker, registry.url, (("basic.auth.user.info", "alice:s3cret"),))
    assert status >= 400 and "schema registry" in body and "Traceback" not in body


def test_console_flags_for_the_registry_are_checked(tmp_path: Path) -> None:
    missing = str(tmp_path / "absent.pem")

    def refused(*args: str) -> str:
        result = CliRunner().invoke(cli, ["console", *args], env={"COLUMNS": "400"})
        assert result.exit_code != 0
        return result.stdout + result.stderr

    assert "no such file" in refused("--schema-registry", "https://x:1", "--schema-registry-ca", missing)
    assert "give both or neither" in refused(
        "--schema-registry", "https://x:1", "--schema-registry-cert", missing
    )
    assert "--schema-registry-basic-auth" in refused("--schema-registry-basic-auth", "no-colon")
