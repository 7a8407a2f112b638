"""The broker's admin listener (/metrics, groups create/delete/rewind) secured for leaving loopback:
`admin_tls` serves it over HTTPS with the broker's certificate and `admin_auth` makes every request carry
an HTTP basic or bearer credential, like the gateway's `auth:`. The CLI reaches it with
--admin https://USER:PASSWORD@HOST:PORT or SLUICE_ADMIN_TOKEN."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from secure_broker import Certificates, make_certificates

from sluice.broker.config import BrokerConfig
from sluice.testing import BrokerProcess

USER, PASSWORD, TOKEN = "ops", "ops-secret", "token-123"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("admin-certs"))


@pytest.fixture(scope="module")
def admin_broker(tmp_path_factory: pytest.TempPathFactory, certs: Certificates) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("admin-auth")
    config = root / "broker.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "ssl_certfile": str(certs.server_cert),
                "ssl_keyfile": str(certs.server_key),
                "admin_tls": True,
                "admin_auth": {"basic": {USER: PASSWORD}, "bearer_tokens": [TOKEN]},
            }
        )
    )
    broker = BrokerProcess(root / "data", config=config, admin=True).start()
    try:
        yield broker
    finally:
        broker.kill()


def call(
    url: str, certs: Certificates, authorization: str | None = None, method: str = "GET", body: object = None
) -> tuple[int, bytes, dict[str, str]]:
    headers = {"Content-Type": "application/json"} | (
        {"Authorization": authorization} if authorization else {}
    )
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    context = ssl.create_default_context(cafile=str(certs.ca_path))
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as reply:
            return reply.status, reply.read(), dict(reply.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def sluice(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def assert_guarded(broker: BrokerProcess, certs: Certificates) -> None:
    assert broker.admin_url is not None and broker.admin_url.startswith("https://"), broker.admin_url
    metrics = f"{broker.admin_url}/metrics"
    status, body, headers = call(metrics, certs)
    assert status == 401, body
    assert "Basic" in headers.get("WWW-Authenticate", ""), headers
    assert call(metrics, certs, basic(USER, "wrong"))[0] == 401
    assert call(metrics, certs, basic("nobody", PASSWORD))[0] == 401
    assert call(metrics, certs, "Bearer not-a-token")[0] == 401
    status, body, _ = call(metrics, certs, basic(USER, PASSWORD))
    assert status == 200 and b"sluice_" in body, body[:200]
    status, body, _ = call(metrics, certs, f"Bearer {TOKEN}")
    assert status == 200 and b"sluice_" in body
    # The /v1 API is behind the same gate: a refused create changes nothing.
    group = f"refused-{uuid.uuid4().hex[:8]}"
    status, _, _ = call(f"{broker.admin_url}/v1/groups", certs, method="POST", body={"group": group})
    assert status == 401
    status, body, _ = call(f"{broker.admin_url}/v1/groups", certs, basic(USER, PASSWORD))
    assert status == 200 and group.encode() not in body


def test_every_admin_request_needs_a_credential_over_https(
    admin_broker: BrokerProcess, certs: Certificates
) -> None:
    assert_guarded(admin_broker, certs)


def test_plain_http_to_the_tls_admin_port_is_refused_and_the_listener_keeps_serving(
    admin_broker: BrokerProcess, certs: Certificates
) -> None:
    assert admin_broker.admin_url is not None
    plain = admin_broker.admin_url.replace("https://", "http://") + "/metrics"
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(plain, timeout=10).read()
    assert call(f"{admin_broker.admin_url}/metrics", certs, f"Bearer {TOKEN}")[0] == 200


def test_the_cli_reaches_a_guarded_admin_api_with_url_credentials_or_a_token(
    admin_broker: BrokerProcess, certs: Certificates
) -> None:
    assert admin_broker.admin_url is not None
    hostport = admin_broker.admin_url.removeprefix("https://")
    env = {"SSL_CERT_FILE": str(certs.ca_path)}
    group = f"guarded-{uuid.uuid4().hex[:8]}"
    with_password = f"https://{USER}:{PASSWORD}@{hostport}"
    created = sluice(
        "groups", "create", group, "-b", admin_broker.bootstrap, "--admin", with_password, env=env
    )
    assert created.returncode == 0, created.stderr
    status, body, _ = call(f"{admin_broker.admin_url}/v1/groups", certs, basic(USER, PASSWORD))
    assert status == 200 and group.encode() in body

    # No credential: a clear error naming what to pass, not a traceback, and no password echoed anywhere.
    refused = sluice(
        "groups",
        "delete",
        group,
        "-b",
        admin_broker.bootstrap,
        "--force",
        "--admin",
        f"https://{hostport}",
        env=env,
    )
    assert refused.returncode != 0
    assert "admin_auth" in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    wrong = sluice(
        "groups", "delete", group, "-b", admin_broker.bootstrap, "--force",
        "--admin", f"https://{USER}:not-it@{hostport}", env=env,
    )  # fmt: skip
    assert wrong.returncode != 0 and "not-it" not in wrong.stderr + wrong.stdout, wrong.stderr

    deleted = sluice(
        "groups", "delete", group, "-b", admin_broker.bootstrap, "--force", "--admin", f"https://{hostport}",
        env={**env, "SLUICE_ADMIN_TOKEN": TOKEN},
    )  # fmt: skip
    assert deleted.returncode == 0, deleted.stderr
    status, body, _ = call(f"{admin_broker.admin_url}/v1/groups", certs, f"Bearer {TOKEN}")
    assert status == 200 and group.encode() not in body


def test_the_guard_is_back_after_kill_9(admin_broker: BrokerProcess, certs: Certificates) -> None:
    admin_broker.kill()
    admin_broker.start()
    assert_guarded(admin_broker, certs)


def test_admin_settings_that_cannot_work_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="admin_tls"):
        BrokerConfig(data_dir=None, admin_tls=True).validate()
    with pytest.raises(ValueError, match="admin_auth"):
        BrokerConfig(data_dir=None, admin_auth={"basic": "ops"}).validate()
    with pytest.raises(ValueError, match="admin_auth"):
        BrokerConfig(data_dir=None, admin_auth={"passwords": {}}).validate()
    config = tmp_path / "broker.yaml"
    config.write_text(yaml.safe_dump({"admin_tls": True}))
    process = subprocess.run(
        [sys.executable, "-m", "sluice", "broker", "--data-dir", ":memory:", "--listen", "127.0.0.1:0",
         "--metrics-listen", "127.0.0.1:0", "--config", str(config)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert process.returncode != 0
    assert "admin_tls" in process.stdout + process.stderr, process.stdout + process.stderr
