"""`sluice serve` serves the Schema Registry beside the broker, its state in the broker's `_schemas`."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from sluice.testing import RegistryProcess, free_port


def test_serve_runs_the_registry_beside_the_broker(tmp_path: Path) -> None:
    kafka, registry = free_port(), free_port()
    args = [
        sys.executable, "-m", "sluice", "serve", "--data-dir", str(tmp_path / "data"),
        "--kafka-listen", f"127.0.0.1:{kafka}", "--grpc-listen", f"127.0.0.1:{free_port()}",
        "--http-listen", f"127.0.0.1:{free_port()}", "--metrics-listen", f"127.0.0.1:{free_port()}",
        "--console-listen", "off", "--registry-listen", f"127.0.0.1:{registry}",
        "--rest-listen", "off",
    ]  # fmt: skip
    client = RegistryProcess(f"127.0.0.1:{kafka}", "_schemas")
    client.url = f"http://127.0.0.1:{registry}"
    text = json.dumps({"type": "record", "name": "Served", "fields": [{"name": "a", "type": "int"}]})
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ready = threading.Event()
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("sluice registry listening on"):
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert ready.wait(90) and proc.poll() is None, "".join(lines)
        client.wait_primary()
        status, body = client.call("POST", "/subjects/served-value/versions", {"schema": text})
        assert status == 200, body
        assert client.call("GET", f"/schemas/ids/{body['id']}")[0] == 200
        assert any(line.startswith("sluice broker listening") for line in lines)
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
