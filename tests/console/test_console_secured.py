"""`sluice console` against a cluster that wants TLS and SASL: the client settings come as librdkafka's
-X key=value and a YAML file, the pages work through them, and a wrong password reads as Kafka's error."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic
from test_console_pages import cell_texts

from sluice.protocol.messages import APIS_BY_NAME
from sluice.testing import BrokerProcess, free_port

ADMIN, PASSWORD = "admin", "admin-secret"


@dataclass
class Secured:
    process: BrokerProcess
    sasl_ssl: str
    ca: Path

    def settings(self, password: str = PASSWORD) -> dict[str, str]:
        return {
            "bootstrap.servers": self.sasl_ssl,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": ADMIN,
            "sasl.password": password,
            "ssl.ca.location": str(self.ca),
        }


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    pytest.importorskip(
        "sluice.security.acl", reason="the broker's TLS and SASL (security) are not merged yet"
    )
    import trustme

    tmp = tmp_path_factory.mktemp("secured")
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    ca_path, cert, key = tmp / "ca.pem", tmp / "server.crt", tmp / "server.key"
    ca.cert_pem.write_to_path(str(ca_path))
    cert.write_bytes(b"".join(p.bytes() for p in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(key))
    data = tmp / "data"
    data.mkdir()
    subprocess.run(
        [
            *(sys.executable, "-m", "sluice", "users", "create", ADMIN, "--mechanism", "SCRAM-SHA-256"),
            *("--password-stdin", "--data-dir", str(data)),
        ],
        input=PASSWORD + "\n",
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    plain, sasl_ssl = free_port(), free_port()
    config = tmp / "broker.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "listeners": [f"PLAINTEXT://127.0.0.1:{plain}", f"SASL_SSL://127.0.0.1:{sasl_ssl}"],
                "ssl_certfile": str(cert),
                "ssl_keyfile": str(key),
                "sasl_enabled_mechanisms": ["SCRAM-SHA-256"],
                "super_users": [f"User:{ADMIN}"],
                "authorizer": "acl",
                "connection_failed_authentication_delay_ms": 10,
            }
        )
    )
    process = BrokerProcess(data, config=config).start()
    yield Secured(process, f"127.0.0.1:{sasl_ssl}", ca_path)
    process.stop()


def start_console(secured: Secured, tmp: Path, password: str) -> tuple[subprocess.Popen[str], str]:
    """`sluice console` with the secret in a YAML file and the rest as -X flags, as an operator would."""
    client = tmp / "client.yaml"
    client.write_text(yaml.safe_dump({"sasl.password": password, "ssl.ca.location": str(secured.ca)}))
    port = free_port()
    flags = [
        f"-X{k}={v}"
        for k, v in secured.settings().items()
        if k not in ("bootstrap.servers", "sasl.password", "ssl.ca.location")
    ]
    proc = subprocess.Popen(
        [
            *(
                sys.executable,
                "-m",
                "sluice",
                "console",
                "-b",
                secured.sasl_ssl,
                "--listen",
                f"127.0.0.1:{port}",
            ),
            *("--config", str(client), "--sample-interval", "1", *flags),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    # The console's own line, read past anything its Kafka client logged first (with a wrong password,
    # librdkafka's authentication error may come out before the console says where it listens).
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if f"http://127.0.0.1:{port}/" in line:
            return proc, f"http://127.0.0.1:{port}"
    raise AssertionError("the console never said where it listens:\n" + "".join(lines))


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    proc.wait(30)


def test_the_console_reaches_a_sasl_ssl_cluster_with_x_settings_and_a_yaml_file(
    secured: Secured, page: Any, tmp_path: Path, shots: Path
) -> None:
    admin = AdminClient(secured.settings())
    admin.create_topics([NewTopic("secured-orders", 2, 1)])["secured-orders"].result(15)
    proc, url = start_console(secured, tmp_path, PASSWORD)
    try:
        page.goto(url + "/topics?q=secured-orders")
        [row] = cell_texts(page, "#topics-table")
        assert row[:3] == ["secured-orders", "2", "0"]
        if "DescribeLogDirs" in APIS_BY_NAME:
            # Asked with sluice's wire client over the same TLS and SCRAM login as librdkafka's.
            assert row[3].endswith("B") and row[3] != "—", row
        page.goto(url + "/")
        assert page.inner_text("#version").startswith("Kafka protocol, ")
        page.goto(url + "/topics/secured-orders")
        page.fill("form.produce input[name=key]", "through-tls")
        page.fill("form.produce textarea[name=value]", "secret order")
        page.select_option("form.produce select[name=partition]", "1")
        page.click("form.produce button[type=submit]")
        page.wait_for_selector("#produced")
        assert "partition 1 at offset 0" in page.inner_text("#produced")
        page.wait_for_selector("#messages-table td.key:has-text('through-tls')")
        page.goto(url + "/security")
        assert [r[:2] for r in cell_texts(page, "#users-table")] == [[ADMIN, "SCRAM-SHA-256"]]
        page.screenshot(path=shots / "sluice-sasl-ssl-security.png", full_page=True)
    finally:
        stop(proc)


def test_a_wrong_password_reads_as_kafkas_authentication_error(
    secured: Secured, page: Any, tmp_path: Path
) -> None:
    proc, url = start_console(secured, tmp_path, "not-the-password")
    try:
        response = page.goto(url + "/topics")
        assert response.status >= 500
        text = page.inner_text("main")
        assert "Traceback" not in text
        assert "AUTHENTICATION" in text.upper(), text
    finally:
        stop(proc)
