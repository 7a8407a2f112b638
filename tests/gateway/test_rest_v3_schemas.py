"""v3 records with schema'd keys and values, and v2 protobuf schemas that import others, through a real gateway,
broker and `sluice registry`, with plain HTTP."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
import requests
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from rest_helpers import (
    RestGateway,
    cluster_id,
    create_topic,
    direct_messages,
    read_formatted,
    registry_process,
    rest_gateway,
    unique,
)

from sluice.testing import BrokerProcess, free_port

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "int"}, {"name": "note", "type": ["null", "string"], "default": None}],
}
TICKET = {
    "title": "Ticket",
    "type": "object",
    "properties": {"seat": {"type": "integer"}},
    "required": ["seat"],
    "additionalProperties": False,
}
PROTO = 'syntax = "proto3";\npackage shop;\nmessage Parcel {\n  int32 weight = 1;\n}\n'
PROTOBUF_V2 = "application/vnd.kafka.protobuf.v2+json"


@pytest.fixture(scope="module")
def rest(rest_with_registry: RestGateway) -> RestGateway:
    return rest_with_registry


@pytest.fixture(scope="module")
def v3(rest: RestGateway) -> str:
    return f"{rest.url}/v3/clusters/{cluster_id(rest.url)}"


def _topic(rest: RestGateway, prefix: str) -> str:
    name = unique(prefix)
    create_topic(rest.url, name)
    return name


def _post(v3: str, topic: str, record: dict) -> requests.Response:
    return requests.post(f"{v3}/topics/{topic}/records", json=record, timeout=30)


def test_avro_by_schema_text_id_version_and_latest(
    v3: str, rest: RestGateway, registry: str, broker: BrokerProcess
) -> None:
    topic = _topic(rest, "v3-avro")
    first = _post(
        v3,
        topic,
        {
            "key": {"type": "STRING", "data": "k"},
            "value": {
                "type": "AVRO",
                "schema": json.dumps(ORDER),
                "data": {"id": 1, "note": {"string": "a"}},
            },
        },
    )
    assert first.status_code == 200, first.text
    described = first.json()["value"]
    schema_id = described["schema_id"]
    assert described == {
        "type": "AVRO",
        "subject": f"{topic}-value",
        "schema_id": schema_id,
        "schema_version": 1,
        "size": described["size"],
    }
    assert first.json()["key"] == {"type": "STRING", "size": 1}
    # The same schema named by id, by version of the topic's subject, and as the subject's latest.
    for offset, value in enumerate(
        [
            {"schema_id": schema_id, "data": {"id": 2, "note": None}},
            {"schema_version": 1, "data": {"id": 3, "note": None}},
            {"subject": f"{topic}-value", "data": {"id": 4, "note": None}},
        ],
        start=1,
    ):
        reply = _post(v3, topic, {"value": value})
        assert reply.status_code == 200, reply.text
        assert (reply.json()["offset"], reply.json()["value"]["schema_id"]) == (offset, schema_id)
    # Confluent's framing on the topic: any Confluent deserializer reads it.
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry}))
    context = SerializationContext(topic, MessageField.VALUE)
    values = [deserializer(m.value(), context) for m in direct_messages(broker.bootstrap, topic, 4)]
    assert [v["id"] for v in values] == [1, 2, 3, 4] and values[0]["note"] == "a"


def test_record_name_strategies_for_jsonschema_and_protobuf(
    v3: str, rest: RestGateway, registry: str
) -> None:
    topic = _topic(rest, "v3-strategies")
    ticket = _post(
        v3,
        topic,
        {
            "value": {
                "type": "JSONSCHEMA",
                "subject_name_strategy": "RECORD_NAME",
                "schema": json.dumps(TICKET),
                "data": {"seat": 12},
            }
        },
    )
    assert ticket.status_code == 200, ticket.text
    assert ticket.json()["value"]["subject"] == "Ticket"
    parcel = _post(
        v3,
        topic,
        {
            "key": {"type": "PROTOBUF", "subject_name_strategy": "TOPIC_RECORD_NAME", "schema": PROTO,
                    "data": {"weight": 3}},
            "value": {"type": "JSON", "data": None},
        },
    )  # fmt: skip
    assert parcel.status_code == 200, parcel.text
    assert parcel.json()["key"]["subject"] == f"{topic}-shop.Parcel"
    registered = requests.get(f"{registry}/subjects/{topic}-shop.Parcel/versions/latest", timeout=30).json()
    assert (registered["id"], registered["schemaType"]) == (parcel.json()["key"]["schema_id"], "PROTOBUF")
    # Read back through a v2 consumer of the protobuf format.
    (record,) = read_formatted(rest.url, topic, "protobuf", 1, offset=1)
    assert record["key"] == {"weight": 3}


@pytest.fixture(scope="module")
def schema_ids(v3: str, rest: RestGateway) -> dict[str, tuple[str, int]]:
    """By v3 type, a topic and the id of the schema registered as its values'."""
    ids = {}
    for kind, schema, data in [
        ("AVRO", json.dumps(ORDER), {"id": 1, "note": None}),
        ("JSONSCHEMA", json.dumps(TICKET), {"seat": 1}),
        ("PROTOBUF", PROTO, {"weight": 1}),
    ]:
        topic = _topic(rest, f"v3-{kind.lower()}")
        reply = _post(v3, topic, {"value": {"type": kind, "schema": schema, "data": data}})
        assert reply.status_code == 200, reply.text
        ids[kind] = (topic, reply.json()["value"]["schema_id"])
    return ids


@pytest.mark.parametrize(
    ("value", "status", "code", "names"),
    [
        # A schema_id of "AVRO", "JSONSCHEMA" or "PROTOBUF" stands for the id registered for that type.
        ({"schema_id": "AVRO", "data": {"id": "x"}}, 400, 400, "does not match"),
        ({"schema_id": "JSONSCHEMA", "data": {"seat": "x"}}, 400, 400, "does not match"),
        ({"schema_id": "PROTOBUF", "data": {"weight": "heavy"}}, 400, 400, "does not match"),
        ({"schema_id": "PROTOBUF", "data": {"nope": 1}}, 400, 400, "does not match"),
        ({"schema_id": 987654, "data": 1}, 422, 42207, "987654"),
        ({"subject": "no-such-subject", "data": 1}, 422, 42207, "no-such-subject"),
        ({"schema_version": 42, "data": 1}, 400, 400, "version 42"),
        ({"type": "AVRO", "schema": "{not json", "data": 1}, 400, 400, "does not parse"),
        ({"type": "PROTOBUF", "schema": "message {", "data": {}}, 400, 400, "does not parse"),
        ({"schema": json.dumps(ORDER), "data": 1}, 400, 400, "needs a type"),
        ({"schema_id": 1, "schema_version": 1, "data": 1}, 400, 400, "not schema_id and"),
        # As Confluent's: a type goes only with a schema text; subject and strategy exclude each other; the
        # plain types take no schema fields.
        ({"type": "AVRO", "schema_id": "AVRO", "data": {"id": 1}}, 400, 400, "schema_id has its own type"),
        ({"type": "AVRO", "schema_version": 1, "data": 1}, 400, 400, "schema_version has its own type"),
        ({"type": "AVRO", "data": 1}, 400, 400, "latest schema has its own type"),
        ({"subject": "s", "subject_name_strategy": "TOPIC_NAME", "data": 1}, 400, 400, "not both"),
        ({"type": "BINARY", "schema_id": 1, "data": "AA=="}, 400, 400, "BINARY takes no schema"),
        ({"type": "JSON", "subject": "s", "data": 1}, 400, 400, "JSON takes no schema"),
        ({"schema_id": 1, "subject": "not-its-subject", "data": 1}, 422, 42207, "not-its-subject"),
        ({"subject_name_strategy": "RECORD_NAME", "data": 1}, 400, 400, "RECORD_NAME needs"),
        ({"subject_name_strategy": "CLEVER", "data": 1}, 400, 400, "subject_name_strategy"),
        ({"schema_id": -3, "data": 1}, 400, 400, "positive"),
    ],
)
def test_schema_errors(
    v3: str,
    rest: RestGateway,
    schema_ids: dict[str, tuple[str, int]],
    value: dict,
    status: int,
    code: int,
    names: str,
) -> None:
    topic = _topic(rest, "v3-bad")
    if isinstance(value.get("schema_id"), str):
        topic, schema_id = schema_ids[value["schema_id"]]
        value = {**value, "schema_id": schema_id}
    reply = _post(v3, topic, {"value": value})
    assert (reply.status_code, reply.json()["error_code"]) == (status, code), reply.text
    assert names in reply.json()["message"]


def test_an_incompatible_schema_text_is_42207(v3: str, schema_ids: dict[str, tuple[str, int]]) -> None:
    topic, _ = schema_ids["AVRO"]
    changed = {**ORDER, "fields": [{"name": "id", "type": "string"}]}  # the registry refuses it (BACKWARD)
    reply = _post(v3, topic, {"value": {"type": "AVRO", "schema": json.dumps(changed), "data": {"id": "x"}}})
    assert (reply.status_code, reply.json()["error_code"]) == (422, 42207), reply.text
    assert f"{topic}-value" in reply.json()["message"]


def test_streaming_records_with_schemas(v3: str, schema_ids: dict[str, tuple[str, int]]) -> None:
    topic, avro_id = schema_ids["AVRO"]
    parcels, protobuf_id = schema_ids["PROTOBUF"]
    records = [
        {"value": {"schema_id": avro_id, "data": {"id": 1, "note": None}}},
        {"value": {"schema_id": avro_id, "data": {"id": "one"}}},
        {"value": {"schema_id": 987655, "data": 1}},
        {"value": {"schema_id": protobuf_id, "subject": f"{parcels}-value", "data": {"weight": 2}}},
        {"value": {"type": "JSON", "data": "plain"}},
    ]

    reply = requests.post(
        f"{v3}/topics/{topic}/records",
        data=(json.dumps(record).encode() for record in records),  # chunked: the streaming form
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert reply.status_code == 200
    answers = [json.loads(line) for line in reply.text.splitlines()]
    assert [a["error_code"] for a in answers] == [200, 400, 42207, 200, 200]
    assert [a.get("offset") for a in answers if a["error_code"] == 200] == [1, 2, 3]
    assert answers[3]["value"]["type"] == "PROTOBUF"


COMMON = (
    'syntax = "proto3";\npackage common;\nmessage Money {\n  string currency = 1;\n  int64 cents = 2;\n}\n'
)
INVOICE = (
    'syntax = "proto3";\npackage billing;\nimport "common/money.proto";\n'
    "message Invoice {\n  string id = 1;\n  common.Money total = 2;\n}\n"
)


def test_protobuf_schemas_importing_registered_ones(v3: str, rest: RestGateway, registry: str) -> None:
    imported = f"common/money-{unique('m')}.proto"
    invoice = INVOICE.replace("common/money.proto", imported)
    reply = requests.post(
        f"{registry}/subjects/{quote(imported, safe='')}/versions",
        json={"schema": COMMON, "schemaType": "PROTOBUF"},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    topic = _topic(rest, "v2-proto-refs")
    value = {"id": "i-1", "total": {"currency": "EUR", "cents": "1250"}}

    def produce(body: dict) -> requests.Response:
        return requests.post(
            f"{rest.url}/topics/{topic}", json=body, headers={"Content-Type": PROTOBUF_V2}, timeout=30
        )

    by_text = produce({"value_schema": invoice, "records": [{"value": value}]})
    assert by_text.status_code == 200, by_text.text
    schema_id = by_text.json()["value_schema_id"]
    registered = requests.get(f"{registry}/schemas/ids/{schema_id}", timeout=30).json()
    assert registered["references"] == [{"name": imported, "subject": imported, "version": 1}]
    by_id = produce({"value_schema_id": schema_id, "records": [{"value": {**value, "id": "i-2"}}]})
    assert by_id.status_code == 200, by_id.text
    assert (
        _post(v3, topic, {"value": {"schema_id": schema_id, "data": {**value, "id": "i-3"}}}).status_code
        == 200
    )
    records = read_formatted(rest.url, topic, "protobuf", 3)
    assert [r["value"] for r in records] == [{**value, "id": f"i-{n}"} for n in (1, 2, 3)]
    missing = produce(
        {"value_schema": INVOICE.replace("common/money.proto", "nowhere.proto"), "records": [{"value": {}}]}
    )
    assert (missing.status_code, missing.json()["error_code"]) == (422, 42205)
    assert "nowhere.proto" in missing.json()["message"]


def test_registry_down_then_back(broker: BrokerProcess) -> None:
    """A registry that stops answering gets a clear 500 / 50002 (no traceback); once it is back, so is the API."""
    port, name = free_port(), unique("_schemas-down")
    with rest_gateway(broker.bootstrap, "--schema-registry", f"http://127.0.0.1:{port}") as gateway:
        v3 = f"{gateway.url}/v3/clusters/{cluster_id(gateway.url)}"
        topic = _topic(gateway, "v3-registry-down")
        latest = {"value": {"subject": f"{topic}-value", "data": {"id": 2, "note": None}}}
        with registry_process(broker.bootstrap, port, name):
            record = {"value": {"type": "AVRO", "schema": json.dumps(ORDER), "data": {"id": 1, "note": None}}}
            assert _post(v3, topic, record).status_code == 200
        down = _post(v3, topic, latest)
        assert (down.status_code, down.json()["error_code"]) == (500, 50002), down.text
        assert "schema registry" in down.json()["message"] and "Traceback" not in down.text
        v2_down = requests.post(
            f"{gateway.url}/topics/{topic}",
            json={"value_schema": json.dumps({"type": "string"}), "records": [{"value": "x"}]},
            headers={"Content-Type": "application/vnd.kafka.avro.v2+json"},
            timeout=30,
        )
        assert (v2_down.status_code, v2_down.json()["error_code"]) == (500, 50002), v2_down.text
        with registry_process(broker.bootstrap, port, name):
            back = _post(v3, topic, latest)
            assert back.status_code == 200, back.text
            assert back.json()["offset"] == 1
