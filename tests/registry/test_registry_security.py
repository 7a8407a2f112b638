"""The registry's own listener secured as the gateway's is: HTTPS, and HTTP basic or bearer credentials."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import yaml
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from registry_tls import tls_files

from sluice.testing import REGISTRY_CONTENT_TYPE as CONTENT_TYPE
from sluice.testing import BrokerProcess, RegistryProcess


def test_https_with_basic_and_bearer_credentials(broker: BrokerProcess, tmp_path: Path) -> None:
    cert_path, key_path, ca_path = tls_files(tmp_path)
    # The gateway's `auth:` and `tls:` sections from a file, beside a --basic-auth user from the command line.
    config = tmp_path / "registry-security.yaml"
    sections = {
        "auth": {"bearer_tokens": ["tok-1"]},
        "tls": {"certificate_path": str(cert_path), "key_path": str(key_path)},
    }
    config.write_text(yaml.safe_dump(sections))
    extra = ["--basic-auth", "alice:s3cret", "--security-config", str(config)]
    proc = RegistryProcess(broker.bootstrap, f"_schemas-sec-{uuid.uuid4().hex[:8]}", extra_args=extra).start()
    try:
        assert proc.url.startswith("https://")
        context = ssl.create_default_context(cafile=str(ca_path))

        def get(headers: dict[str, str]) -> tuple[int, dict]:
            request = urllib.request.Request(proc.url + "/subjects", headers=headers)
            try:
                with urllib.request.urlopen(request, context=context, timeout=30) as reply:
                    return reply.status, json.loads(reply.read())
            except urllib.error.HTTPError as error:
                assert error.headers["Content-Type"].startswith(CONTENT_TYPE)
                return error.code, json.loads(error.read())

        status, body = get({})
        assert (status, body["error_code"]) == (401, 40101)
        assert get({"Authorization": "Bearer wrong"})[0] == 401
        assert get({"Authorization": "Bearer tok-1"}) == (200, [])
        client = SchemaRegistryClient(
            {"url": proc.url, "basic.auth.user.info": "alice:s3cret", "ssl.ca.location": str(ca_path)}
        )
        text = json.dumps({"type": "record", "name": "Sec", "fields": [{"name": "a", "type": "int"}]})
        schema_id = client.register_schema("sec-value", Schema(text, "AVRO"))
        assert json.loads(client.get_schema(schema_id).schema_str) == json.loads(text)
    finally:
        proc.kill()


def test_a_bad_security_config_is_one_clear_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = tmp_path / "bad.yaml"
    config.write_text("auth: {basic: [alice]}\n")
    done = subprocess.run(
        [sys.executable, "-m", "sluice", "registry", "--security-config", str(config)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0 and "auth.basic" in done.stderr and "Traceback" not in done.stderr
