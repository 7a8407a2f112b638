"""The REST Proxy's avro embedded format against a real `sluice registry`, through a real gateway and broker."""

from __future__ import annotations

import json

import pytest
import requests
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from rest_helpers import (
    BINARY,
    V2,
    RestGateway,
    create_topic,
    direct_messages,
    read_formatted,
    reader_at,
    records_until,
    unique,
)

from sluice.testing import BrokerProcess

AVRO = "application/vnd.kafka.avro.v2+json"
VALUE_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "int"},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    }
)
KEY_SCHEMA = json.dumps({"type": "string"})


@pytest.fixture(scope="module")
def rest(rest_with_registry: RestGateway) -> RestGateway:
    return rest_with_registry


def _produce(rest: RestGateway, topic: str, body: dict) -> requests.Response:
    return requests.post(f"{rest.url}/topics/{topic}", json=body, headers={"Content-Type": AVRO}, timeout=30)


def _read_values(rest: RestGateway, topic: str, fmt: str, count: int) -> list[tuple[object, object]]:
    """(key, value) of the first `count` records of `topic`, through a consumer instance of format `fmt`."""
    return [(r["key"], r["value"]) for r in read_formatted(rest.url, topic, fmt, count)]


def test_avro_produce_registers_and_consumers_decode(
    rest: RestGateway, registry: str, broker: BrokerProcess
) -> None:
    topic = unique("rest-avro")
    create_topic(rest.url, topic)
    first = _produce(
        rest,
        topic,
        {
            "key_schema": KEY_SCHEMA,
            "value_schema": VALUE_SCHEMA,
            "records": [{"key": "a", "value": {"id": 1, "note": {"string": "x"}}}],
        },
    )
    assert first.status_code == 200, first.text
    ids = first.json()
    assert ids["key_schema_id"] > 0 and ids["value_schema_id"] > 0
    # The schema is the subject's in the registry; a second request names it by id.
    assert (
        requests.get(f"{registry}/subjects/{topic}-value/versions/latest", timeout=30).json()["id"]
        == ids["value_schema_id"]
    )
    second = _produce(
        rest,
        topic,
        {
            "key_schema_id": ids["key_schema_id"],
            "value_schema_id": ids["value_schema_id"],
            "records": [{"key": "b", "value": {"id": 2, "note": None}}],
        },
    )
    assert second.status_code == 200 and second.json()["offsets"][0]["offset"] == 1

    # Any Confluent client reads what the REST Proxy wrote.
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry}))
    messages = direct_messages(broker.bootstrap, topic, 2)
    context = SerializationContext(topic, MessageField.VALUE)
    assert [deserializer(m.value(), context) for m in messages] == [
        {"id": 1, "note": "x"},
        {"id": 2, "note": None},
    ]

    # Avro's JSON encoding, as the records were sent.
    assert _read_values(rest, topic, "avro", 2) == [
        ("a", {"id": 1, "note": {"string": "x"}}),
        ("b", {"id": 2, "note": None}),
    ]


@pytest.mark.parametrize(
    ("body", "code", "names"),
    [
        ({"records": [{"value": {"id": 1}}]}, 42202, "value schema"),
        ({"value_schema": VALUE_SCHEMA, "records": [{"key": "k", "value": {"id": 1}}]}, 42201, "key schema"),
        (
            # Confluent's SchemaRecordSerializerImpl: a record its schema does not take is a BadRequestException.
            {"value_schema": VALUE_SCHEMA, "records": [{"value": {"id": 1}}, {"value": {"id": "two"}}]},
            400,
            "records[1]",
        ),
        ({"value_schema": '{"type": "nope"}', "records": [{"value": 1}]}, 42205, "value_schema"),
        # Confluent's proxy answers an id the registry does not have 42207 (a failed registry call).
        ({"value_schema_id": 987654, "records": [{"value": 1}]}, 42207, "987654"),
    ],
)
def test_avro_errors(rest: RestGateway, body: dict, code: int, names: str) -> None:
    topic = unique("rest-avro-bad")
    create_topic(rest.url, topic)
    reply = _produce(rest, topic, body)
    assert (reply.status_code, reply.json()["error_code"]) == (400 if code == 400 else 422, code), reply.text
    assert names in reply.json()["message"]


def test_protobuf_produce_and_consume(rest: RestGateway, registry: str, broker: BrokerProcess) -> None:
    topic = unique("rest-proto")
    create_topic(rest.url, topic)
    schema = 'syntax = "proto3";\nmessage Order {\n  int32 id = 1;\n  string note = 2;\n  repeated string tags = 3;\n}\n'
    content_type = "application/vnd.kafka.protobuf.v2+json"
    ok = requests.post(
        f"{rest.url}/topics/{topic}",
        json={"value_schema": schema, "records": [{"value": {"id": 5, "note": "n", "tags": ["a", "b"]}}]},
        headers={"Content-Type": content_type},
        timeout=30,
    )
    assert ok.status_code == 200, ok.text
    schema_id = ok.json()["value_schema_id"]
    assert requests.get(f"{registry}/schemas/ids/{schema_id}", timeout=30).json()["schemaType"] == "PROTOBUF"
    bad = requests.post(
        f"{rest.url}/topics/{topic}",
        json={
            "value_schema_id": schema_id,
            "records": [{"value": {"id": 1}}, {"value": {"id": "x", "nope": 1}}],
        },
        headers={"Content-Type": content_type},
        timeout=30,
    )
    assert (bad.status_code, bad.json()["error_code"]) == (400, 400)
    assert "records[1]" in bad.json()["message"]
    # Confluent's framing on the topic: magic byte 0, the schema id, message index [0], the message.
    (message,) = direct_messages(broker.bootstrap, topic, 1)
    assert message.value()[:6] == b"\x00" + schema_id.to_bytes(4, "big") + b"\x00"
    assert _read_values(rest, topic, "protobuf", 1) == [(None, {"id": 5, "note": "n", "tags": ["a", "b"]})]


def test_jsonschema_produce_and_consume(rest: RestGateway, registry: str) -> None:
    topic = unique("rest-jsonschema")
    create_topic(rest.url, topic)
    schema = json.dumps(
        {
            "type": "object",
            "properties": {"id": {"type": "integer"}},
            "required": ["id"],
            "additionalProperties": False,
        }
    )
    content_type = "application/vnd.kafka.jsonschema.v2+json"
    ok = requests.post(
        f"{rest.url}/topics/{topic}",
        json={"value_schema": schema, "records": [{"value": {"id": 7}}]},
        headers={"Content-Type": content_type},
        timeout=30,
    )
    assert ok.status_code == 200, ok.text
    schema_id = ok.json()["value_schema_id"]
    assert requests.get(f"{registry}/schemas/ids/{schema_id}", timeout=30).json()["schemaType"] == "JSON"
    bad = requests.post(
        f"{rest.url}/topics/{topic}",
        json={"value_schema_id": schema_id, "records": [{"value": {"id": 8}}, {"value": {"id": "eight"}}]},
        headers={"Content-Type": content_type},
        timeout=30,
    )
    assert (bad.status_code, bad.json()["error_code"]) == (400, 400)
    assert "records[1]" in bad.json()["message"]
    assert _read_values(rest, topic, "jsonschema", 1) == [(None, {"id": 7})]


def _produce_plain_text(rest: RestGateway, topic: str) -> None:
    """One record of plain bytes ("test"), in no schema format's framing."""
    sent = requests.post(
        f"{rest.url}/topics/{topic}",
        json={"records": [{"value": "dGVzdA=="}]},
        headers={"Content-Type": BINARY},
        timeout=30,
    )
    assert sent.status_code == 200, sent.text


@pytest.mark.parametrize("fmt", ["avro", "jsonschema", "protobuf", "json"])
def test_a_record_not_in_the_instances_format_is_a_408_naming_it(rest: RestGateway, fmt: str) -> None:
    """Bytes that are no record of the format (here plain text, without Confluent's framing) fail the read as
    Confluent's proxy fails it (a SerializationException: 408, 40801), never a 500, and name the record so the
    caller can seek past it."""
    topic = unique(f"rest-undecodable-{fmt}")
    create_topic(rest.url, topic)
    _produce_plain_text(rest, topic)
    base = reader_at(rest.url, topic, fmt)
    try:
        reply = requests.get(
            f"{base}/records",
            params={"timeout": 5000},
            headers={"Accept": f"application/vnd.kafka.{fmt}.v2+json"},
            timeout=30,
        )
        assert reply.status_code == 408, reply.text
        assert reply.json()["error_code"] == 40801
        message = reply.json()["message"]
        assert f"offset 0 of partition 0 of {topic}" in message and f"format {fmt}" in message, message
    finally:
        requests.delete(base, timeout=30)


def test_records_before_an_undecodable_one_are_delivered_and_a_seek_passes_it(rest: RestGateway) -> None:
    """As the Java consumer does: the records before a bad one come, the next read fails on it (and again until
    the caller seeks past it), and none is skipped or handed out twice."""
    topic = unique("rest-undecodable-prefix")
    create_topic(rest.url, topic)

    def produce_avro(value: dict) -> None:
        reply = _produce(rest, topic, {"value_schema": VALUE_SCHEMA, "records": [{"value": value}]})
        assert reply.status_code == 200, reply.text

    produce_avro({"id": 1, "note": None})
    _produce_plain_text(rest, topic)
    produce_avro({"id": 3, "note": None})
    base = reader_at(rest.url, topic, "avro")
    try:
        (first,) = records_until(base, 1, fmt=AVRO)
        assert (first["offset"], first["value"]) == (0, {"id": 1, "note": None})
        for _ in range(2):
            reply = requests.get(
                f"{base}/records", params={"timeout": 1000}, headers={"Accept": AVRO}, timeout=30
            )
            assert (reply.status_code, reply.json()["error_code"]) == (408, 40801), reply.text
            assert f"offset 1 of partition 0 of {topic}" in reply.json()["message"]
        seek = requests.post(
            f"{base}/positions",
            json={"offsets": [{"topic": topic, "partition": 0, "offset": 2}]},
            headers={"Content-Type": V2},
            timeout=30,
        )
        assert seek.status_code == 204, seek.text
        (third,) = records_until(base, 1, fmt=AVRO)
        assert (third["offset"], third["value"]) == (2, {"id": 3, "note": None})
    finally:
        requests.delete(base, timeout=30)
