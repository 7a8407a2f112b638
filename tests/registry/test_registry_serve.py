"""`sluice serve` serves the Schema Registry beside the broker, its state in the broker's `_schemas`."""

from __future__ import annotations

import json
from pathlib import Path

from sluice.testing import RegistryProcess, SluiceCommand, free_port


def test_serve_runs_the_registry_beside_the_broker(tmp_path: Path) -> None:
    kafka, registry = free_port(), free_port()
    args = [
        "serve", "--data-dir", str(tmp_path / "data"),
        "--kafka-listen", f"127.0.0.1:{kafka}", "--grpc-listen", f"127.0.0.1:{free_port()}",
        "--http-listen", f"127.0.0.1:{free_port()}", "--metrics-listen", f"127.0.0.1:{free_port()}",
        "--console-listen", "off", "--registry-listen", f"127.0.0.1:{registry}",
        "--rest-listen", "off",
    ]  # fmt: skip
    client = RegistryProcess(f"127.0.0.1:{kafka}", "_schemas")
    client.url = f"http://127.0.0.1:{registry}"
    text = json.dumps({"type": "record", "name": "Served", "fields": [{"name": "a", "type": "int"}]})
    with SluiceCommand(*args, ready_prefix="sluice registry listening on") as served:
        client.wait_primary()
        status, body = client.call("POST", "/subjects/served-value/versions", {"schema": text})
        assert status == 200, body
        assert client.call("GET", f"/schemas/ids/{body['id']}")[0] == 200
        assert any(line.startswith("sluice broker listening") for line in served.output)
        assert served.stop() == 0, "".join(served.output)
