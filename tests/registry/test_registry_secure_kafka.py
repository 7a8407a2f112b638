"""The registry as a client of a secured cluster: SASL_SSL (SCRAM) with ACLs, settings given as -X."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest

from sluice.testing import RegistryProcess

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
from secure_broker import cli_settings, start_secure_broker  # the security tests' broker helpers


def test_registry_over_sasl_ssl(tmp_path_factory: pytest.TempPathFactory) -> None:
    secure = start_secure_broker(tmp_path_factory.mktemp("registry-secure"))
    try:
        settings = secure.admin_settings()
        bootstrap, extra = cli_settings(settings)
        proc = RegistryProcess(bootstrap, f"_schemas-{uuid.uuid4().hex[:8]}", extra_args=extra)
        # Without credentials the registry cannot open its store: started beside the one that can.
        plain = RegistryProcess(
            settings["bootstrap.servers"], "_schemas-none", extra_args=["--store-timeout", "1"]
        )
        proc.launch()
        plain.launch()
        try:
            proc.wait_ready()
            proc.wait_primary()
            text = json.dumps({"type": "record", "name": "S", "fields": [{"name": "a", "type": "int"}]})
            status, body = proc.call("POST", "/subjects/secure-value/versions", {"schema": text})
            assert status == 200, body
            assert proc.call("GET", "/subjects/secure-value/versions/1")[1]["id"] == body["id"]
        finally:
            proc.kill()
        with pytest.raises(RuntimeError) as caught:
            plain.wait_ready()
        assert "cannot open" in caught.value.args[0] and "Traceback" not in caught.value.args[0]
    finally:
        secure.process.kill()
