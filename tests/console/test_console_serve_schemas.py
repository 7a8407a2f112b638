"""`sluice serve` hands its own Schema Registry to its console: the Schemas page lists what was registered."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from sluice.testing import SluiceCommand, free_port


def test_serve_console_shows_the_schemas_of_its_registry(tmp_path: Path) -> None:
    console, registry = free_port(), free_port()
    args = [
        "serve", "--data-dir", str(tmp_path / "data"),
        "--kafka-listen", f"127.0.0.1:{free_port()}", "--grpc-listen", f"127.0.0.1:{free_port()}",
        "--http-listen", f"127.0.0.1:{free_port()}", "--admin-listen", "off",
        "--console-listen", f"127.0.0.1:{console}", "--registry-listen", f"127.0.0.1:{registry}",
        "--rest-listen", "off",
    ]  # fmt: skip
    with SluiceCommand(*args, ready_prefix="sluice console on") as served:
        client = SchemaRegistryClient({"url": f"http://127.0.0.1:{registry}"})
        text = json.dumps({"type": "record", "name": "Served", "fields": [{"name": "a", "type": "int"}]})
        schema_id = client.register_schema("served-value", Schema(text, "AVRO"))
        with urllib.request.urlopen(f"http://127.0.0.1:{console}/schemas", timeout=30) as page:
            html = page.read().decode()
        assert 'href="/schemas"' in html  # the navigation offers the page
        assert "served-value" in html and f'<td class="num">{schema_id}</td>' in html
        assert served.stop() == 0, "".join(served.output)
