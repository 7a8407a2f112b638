"""`sluice serve` hands its own Schema Registry to its console: the Schemas page lists what was registered."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from sluice.testing import free_port


def test_serve_console_shows_the_schemas_of_its_registry(tmp_path: Path) -> None:
    console, registry = free_port(), free_port()
    args = [
        sys.executable, "-m", "sluice", "serve", "--data-dir", str(tmp_path / "data"),
        "--kafka-listen", f"127.0.0.1:{free_port()}", "--grpc-listen", f"127.0.0.1:{free_port()}",
        "--http-listen", f"127.0.0.1:{free_port()}", "--admin-listen", "off",
        "--console-listen", f"127.0.0.1:{console}", "--registry-listen", f"127.0.0.1:{registry}",
        "--rest-listen", "off",
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ready = threading.Event()
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("sluice console on"):
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert ready.wait(90) and proc.poll() is None, "".join(lines)
        client = SchemaRegistryClient({"url": f"http://127.0.0.1:{registry}"})
        text = json.dumps({"type": "record", "name": "Served", "fields": [{"name": "a", "type": "int"}]})
        schema_id = client.register_schema("served-value", Schema(text, "AVRO"))
        with urllib.request.urlopen(f"http://127.0.0.1:{console}/schemas", timeout=30) as page:
            html = page.read().decode()
        assert 'href="/schemas"' in html  # the navigation offers the page
        assert "served-value" in html and f'<td class="num">{schema_id}</td>' in html
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
