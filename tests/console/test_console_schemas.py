"""The console's Schemas pages and registry-decoded messages, in headless Chromium, against the real
`sluice registry` (child process) and the session's sluice broker; schemas registered and values framed by
confluent-kafka's own serializers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from console_helpers import ConsoleThread

from sluice.console.app import ConsoleConfig
from sluice.testing import RegistryProcess, create_topic, free_port

USER_V1 = {
    "type": "record",
    "name": "User",
    "namespace": "accounts",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
USER_V2 = {
    **USER_V1,
    "fields": [*USER_V1["fields"], {"name": "email", "type": ["null", "string"], "default": None}],
}


@pytest.fixture(scope="module")
def registry_console(broker: Any, schema_registry: RegistryProcess) -> Iterator[ConsoleThread]:
    config = ConsoleConfig(
        settings={"bootstrap.servers": broker.bootstrap},
        port=free_port(),
        schema_registry_url=schema_registry.url,
    )
    running = ConsoleThread(config).start()
    yield running
    running.stop()


def test_messages_show_decoded_avro_and_json_values_with_schema_id_and_subject(
    registry_console: ConsoleThread,
    schema_registry: RegistryProcess,
    page: Any,
    bootstrap: str,
    topic_name: str,
    shots: Path,
) -> None:
    topic = create_topic(bootstrap, name=topic_name)
    client = SchemaRegistryClient({"url": schema_registry.url})
    avro = AvroSerializer(client, json.dumps(USER_V1))
    keys = JSONSerializer(
        json.dumps({"type": "object", "properties": {"tenant": {"type": "string"}}}), client
    )
    producer = Producer({"bootstrap.servers": bootstrap})
    value_context = SerializationContext(topic, MessageField.VALUE)
    key_context = SerializationContext(topic, MessageField.KEY)
    producer.produce(
        topic,
        key=keys({"tenant": "acme"}, key_context),
        value=avro({"name": "Ada", "age": 36}, value_context),
    )
    producer.produce(topic, key=b"plain", value=b"\x00\x00\x00\xff\xffnot a real id")
    assert producer.flush(30) == 0
    value_id = client.get_latest_version(f"{topic}-value").schema_id
    key_id = client.get_latest_version(f"{topic}-key").schema_id

    page.goto(f"{registry_console.url}/topics/{topic}")
    table = page.locator("#messages-table")
    decoded_row = table.locator("tbody tr").filter(has_text="Ada")
    decoded_row.locator("td.value summary").click()
    value_cell = decoded_row.locator("td.value")
    assert value_cell.locator(".kind").text_content() == "avro"
    assert f"id {value_id} · {topic}-value" in value_cell.inner_text()
    assert json.loads(value_cell.locator("pre").inner_text()) == {"name": "Ada", "age": 36}
    key_cell = decoded_row.locator("td.key")
    assert key_cell.locator(".kind").text_content() == "json-schema"
    assert f"id {key_id} · {topic}-key" in key_cell.inner_text()
    assert '{"tenant": "acme"}' in key_cell.inner_text()
    # Framed-looking bytes with an id the registry does not know stay bytes, with the reason given.
    other = table.locator("tbody tr").filter(has_text="plain")
    other.locator("td.value summary").click()
    assert "schema id 65535" in other.locator("td.value").inner_text()
    page.screenshot(path=str(shots / "schemas-decoded-messages.png"), full_page=True)


def test_schemas_page_lists_subjects_shows_versions_and_diffs_them(
    registry_console: ConsoleThread, schema_registry: RegistryProcess, page: Any, topic_name: str, shots: Path
) -> None:
    from confluent_kafka.schema_registry import Schema

    client = SchemaRegistryClient({"url": schema_registry.url})
    subject = f"{topic_name}-value"
    first = client.register_schema(subject, Schema(json.dumps(USER_V1), "AVRO"))
    second = client.register_schema(subject, Schema(json.dumps(USER_V2), "AVRO"))

    page.goto(f"{registry_console.url}/schemas")
    row = page.locator("#subjects-table tbody tr").filter(has_text=subject)
    cells = row.locator("td").all_inner_texts()
    assert cells[1:] == ["AVRO", "2", str(second), "2"]
    page.screenshot(path=str(shots / "schemas-subjects.png"), full_page=True)

    row.locator("a").click()
    page.wait_for_url(f"**/schemas/{subject}")
    assert page.locator("#shown-version").inner_text() == "2"
    assert page.locator("#shown-id").inner_text() == str(second)
    assert '"email"' in page.locator("#schema-text").inner_text()

    page.locator("#versions a", has_text="1").click()
    page.wait_for_url("**version=1")
    assert page.locator("#shown-id").inner_text() == str(first)
    assert '"email"' not in page.locator("#schema-text").inner_text()

    page.select_option("#diff-version", "2")
    page.locator("#diff-form button").click()
    page.wait_for_url("**diff=2")
    added = page.locator("#schema-diff .diff-add").all_inner_texts()
    assert any('"email"' in line for line in added)
    assert all('"email"' not in line for line in page.locator("#schema-diff .diff-del").all_inner_texts())
    page.screenshot(path=str(shots / "schemas-diff.png"), full_page=True)

    response = page.goto(f"{registry_console.url}/schemas/no-such-subject")
    assert response is not None and response.status == 404
    assert "no-such-subject" in page.locator(".alert").inner_text()


def test_without_a_registry_the_schemas_page_says_how_to_configure_one(
    sluice_console: Any, page: Any
) -> None:
    page.goto(f"{sluice_console.url}/schemas")
    assert "--schema-registry" in page.locator(".alert").inner_text()


def test_a_registry_that_is_down_reads_as_an_error_page_and_messages_still_show(
    broker: Any, page: Any, bootstrap: str, topic_name: str
) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = ConsoleConfig(
        settings={"bootstrap.servers": broker.bootstrap}, port=free_port(), schema_registry_url=url
    )
    running = ConsoleThread(config).start()
    try:
        response = page.goto(f"{running.url}/schemas")
        assert response is not None and response.status == 503
        assert f"schema registry {url}" in page.locator(".alert").inner_text()
        topic = create_topic(bootstrap, name=topic_name)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(topic, value=b"\x00\x00\x00\x00\x05framed")
        assert producer.flush(30) == 0
        response = page.goto(f"{running.url}/topics/{topic}")
        assert response is not None and response.status == 200
        cell = page.locator("#messages-table tbody tr td.value")
        cell.locator("summary").click()
        assert "not decoded" in cell.inner_text() and url in cell.inner_text()
    finally:
        running.stop()


def test_what_a_caller_asks_wrongly_is_4xx_never_5xx(registry_console: ConsoleThread) -> None:
    import requests

    refused = requests.get(f"{registry_console.url}/schemas/%16%C2%90", timeout=30)
    assert refused.status_code == 400 and "not a valid subject" in refused.text
    forgotten = requests.get(f"{registry_console.url}/scans/no-such-scan", timeout=30)
    assert forgotten.status_code == 404 and "start it again" in forgotten.text
