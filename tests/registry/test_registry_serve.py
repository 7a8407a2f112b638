"""`sluice serve` serves the Schema Registry beside the broker, its state in the broker's `_schemas`."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from registry_process import RegistryProcess

from sluice.testing import free_port


def test_serve_runs_the_registry_and_keeps_its_schemas_across_a_restart(tmp_path: Path) -> None:
    kafka, registry = free_port(), free_port()
    args = [
        sys.executable, "-m", "sluice", "serve", "--data-dir", str(tmp_path / "data"),
        "--kafka-listen", f"127.0.0.1:{kafka}", "--grpc-listen", f"127.0.0.1:{free_port()}",
        "--http-listen", f"127.0.0.1:{free_port()}", "--metrics-listen", f"127.0.0.1:{free_port()}",
        "--console-listen", "off", "--registry-listen", f"127.0.0.1:{registry}",
    ]  # fmt: skip
    client = RegistryProcess(f"127.0.0.1:{kafka}", "_schemas")
    client.url = f"http://127.0.0.1:{registry}"
    text = json.dumps({"type": "record", "name": "Served", "fields": [{"name": "a", "type": "int"}]})
    schema_id = None
    for _ in range(2):
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ready = threading.Event()
        lines: list[str] = []

        def pump(
            proc: subprocess.Popen[str] = proc, lines: list[str] = lines, ready: threading.Event = ready
        ) -> None:
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
            assert schema_id in (None, body["id"])  # the same id after the restart: nothing was lost
            schema_id = body["id"]
        finally:
            proc.terminate()
            assert proc.wait(30) == 0
