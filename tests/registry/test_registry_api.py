"""The REST API as confluent-kafka's SchemaRegistryClient and curl users call it: one `sluice registry` for
the module, on the session broker, every endpoint and Confluent error code."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from sluice.testing import RegistryProcess


def record(name: str, *fields: tuple[str, object], extra: dict | None = None) -> str:
    """An Avro record schema text; fields as (name, type) or (name, type, default)."""
    out = []
    for spec in fields:
        field = {"name": spec[0], "type": spec[1]}
        if len(spec) > 2:
            field["default"] = spec[2]  # type: ignore[misc]
        out.append(field)
    return json.dumps({"type": "record", "name": name, "fields": out, **(extra or {})})


USER_V1 = record("User", ("name", "string"))
USER_V2 = record("User", ("name", "string"), ("age", "int", 0))
USER_BAD = record("User", ("name", "string"), ("email", "string"))  # a new field without a default


@pytest.fixture
def client(registry: RegistryProcess) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry.url})


@pytest.fixture
def subject(topic_name: str) -> str:
    return f"{topic_name}-value"


def test_avro_serializer_round_trip_through_kafka(
    registry: RegistryProcess, client: SchemaRegistryClient, bootstrap: str, topic_name: str
) -> None:
    serializer = AvroSerializer(client, USER_V1)
    context = SerializationContext(topic_name, MessageField.VALUE)
    payload = serializer({"name": "ada"}, context)
    assert payload[0] == 0  # Confluent framing: magic byte, then the schema id
    schema_id = int.from_bytes(payload[1:5], "big")
    assert registry.call("GET", f"/schemas/ids/{schema_id}")[1]["schema"]
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic_name, payload)
    producer.flush(30)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": topic_name, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic_name])
    message = None
    for _ in range(100):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            break
    consumer.close()
    assert message is not None and message.error() is None
    decoded = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))(message.value(), context)
    assert decoded == {"name": "ada"}


def test_json_schema_serializer_round_trip(
    registry: RegistryProcess, client: SchemaRegistryClient, topic_name: str
) -> None:
    text = json.dumps(
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": "Order",
            "type": "object",
            "properties": {"id": {"type": "integer"}, "note": {"type": "string"}},
            "required": ["id"],
        }
    )
    context = SerializationContext(topic_name, MessageField.VALUE)
    payload = JSONSerializer(text, client)({"id": 7, "note": "hi"}, context)
    schema_id = int.from_bytes(payload[1:5], "big")
    assert registry.call("GET", f"/schemas/ids/{schema_id}")[1]["schemaType"] == "JSON"
    assert registry.call("GET", f"/subjects/{topic_name}-value/versions/1")[1]["id"] == schema_id
    assert JSONDeserializer(None, schema_registry_client=client)(payload, context) == {"id": 7, "note": "hi"}


def test_protobuf_serializer_round_trip(
    registry: RegistryProcess, client: SchemaRegistryClient, topic_name: str
) -> None:
    from sluice.gateway.proto import kafkapixy_pb2

    context = SerializationContext(topic_name, MessageField.VALUE)
    serializer = ProtobufSerializer(kafkapixy_pb2.ProdRs, client, {"use.deprecated.format": False})
    payload = serializer(kafkapixy_pb2.ProdRs(partition=3, offset=42), context)
    schema_id = int.from_bytes(payload[1:5], "big")
    stored = registry.call("GET", f"/schemas/ids/{schema_id}")[1]
    assert stored["schemaType"] == "PROTOBUF" and "ProdRs" in stored["schema"]  # kept as .proto text
    deserializer = ProtobufDeserializer(kafkapixy_pb2.ProdRs, {"use.deprecated.format": False})
    assert deserializer(payload, context) == kafkapixy_pb2.ProdRs(partition=3, offset=42)


def test_protobuf_schema_text_registers_and_evolves(registry: RegistryProcess, subject: str) -> None:
    v1 = 'syntax = "proto3";\npackage ex;\nmessage Click { string page = 1; }\n'
    v2 = 'syntax = "proto3";\npackage ex;\nmessage Click { string page = 1; int64 at = 2; }\n'
    first = registry.call("POST", f"/subjects/{subject}/versions", {"schema": v1, "schemaType": "PROTOBUF"})
    assert first[0] == 200, first
    second = registry.call("POST", f"/subjects/{subject}/versions", {"schema": v2, "schemaType": "PROTOBUF"})
    assert second[0] == 200 and second[1]["id"] > first[1]["id"]
    got = registry.call("GET", f"/subjects/{subject}/versions/1")[1]
    assert got["schemaType"] == "PROTOBUF" and "Click" in got["schema"]
    found = registry.call("POST", f"/subjects/{subject}", {"schema": v1, "schemaType": "PROTOBUF"})
    assert found[1]["version"] == 1
    assert set(registry.call("GET", "/schemas/types")[1]) == {"AVRO", "JSON", "PROTOBUF"}


def test_register_is_idempotent_and_versions_grow(client: SchemaRegistryClient, subject: str) -> None:
    first = client.register_schema(subject, Schema(USER_V1, "AVRO"))
    assert (
        SchemaRegistryClient({"url": client._rest_client.base_urls[0]}).register_schema(
            subject, Schema(USER_V1, "AVRO")
        )
        == first
    )
    second = client.register_schema(subject, Schema(USER_V2, "AVRO"))
    assert second > first
    assert client.get_versions(subject) == [1, 2]
    latest = client.get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (2, second)
    found = client.lookup_schema(subject, Schema(USER_V1, "AVRO"))
    assert (found.version, found.schema_id) == (1, first)
    assert subject in client.get_subjects()


def test_same_schema_in_two_subjects_shares_its_id(registry: RegistryProcess, subject: str) -> None:
    text = record("Shared", ("x", "long"))
    a = registry.call("POST", f"/subjects/{subject}-a/versions", {"schema": text})[1]["id"]
    b = registry.call("POST", f"/subjects/{subject}-b/versions", {"schema": text})[1]["id"]
    assert a == b
    status, versions = registry.call("GET", f"/schemas/ids/{a}/versions")
    assert status == 200 and versions == [
        {"subject": f"{subject}-a", "version": 1},
        {"subject": f"{subject}-b", "version": 1},
    ]
    assert registry.call("GET", f"/schemas/ids/{a}/subjects")[1] == [f"{subject}-a", f"{subject}-b"]
    assert registry.call("GET", f"/schemas/ids/{a}/schema")[1] == json.loads(text)  # the text itself


def test_incompatible_schema_gets_409_with_reasons(registry: RegistryProcess, subject: str) -> None:
    assert registry.call("POST", f"/subjects/{subject}/versions", {"schema": USER_V1})[0] == 200
    status, body = registry.call("POST", f"/subjects/{subject}/versions", {"schema": USER_BAD})
    assert status == 409 and body["error_code"] == 409 and "email" in body["message"]
    status, body = registry.call(
        "POST", f"/compatibility/subjects/{subject}/versions/latest?verbose=true", {"schema": USER_BAD}
    )
    assert status == 200 and body["is_compatible"] is False and any("email" in m for m in body["messages"])
    assert registry.call("POST", f"/compatibility/subjects/{subject}/versions/1", {"schema": USER_V2})[1] == {
        "is_compatible": True
    }
    # With NONE on the subject, anything goes.
    assert registry.call("PUT", f"/config/{subject}", {"compatibility": "NONE"}) == (
        200,
        {"compatibility": "NONE"},
    )
    assert registry.call("POST", f"/subjects/{subject}/versions", {"schema": USER_BAD})[0] == 200


def test_json_schema_compatibility_decided_as_confluent_decides(
    registry: RegistryProcess, subject: str
) -> None:
    def register(name: str, schema: object) -> tuple[int, dict]:
        return registry.call(
            "POST", f"/subjects/{name}/versions", {"schemaType": "JSON", "schema": json.dumps(schema)}
        )

    for name in (subject, f"{subject}-false", f"{subject}-true"):
        assert registry.call("PUT", f"/config/{name}", {"compatibility": "BACKWARD"})[0] == 200
    # An array of integers read as a tuple: a position added to an open array.
    assert register(subject, {"type": "array", "items": {"type": "integer"}})[0] == 200
    status, body = register(subject, {"type": "array", "items": [{"type": "integer"}]})
    assert status == 409 and "ITEM_ADDED_TO_OPEN_CONTENT_MODEL" in body["message"]
    # false held no data, so anything may follow it; true held any data, so false may not follow it.
    assert register(f"{subject}-false", False)[0] == 200
    assert register(f"{subject}-false", {"type": "object", "required": ["a"]})[0] == 200
    assert register(f"{subject}-true", True)[0] == 200
    status, body = register(f"{subject}-true", False)
    assert status == 409 and "TYPE_CHANGED" in body["message"]


def test_config_global_and_per_subject(registry: RegistryProcess, subject: str) -> None:
    assert registry.call("GET", "/config")[1]["compatibilityLevel"] in ("BACKWARD", "FULL")
    assert registry.call("GET", f"/config/{subject}")[1]["error_code"] == 40408
    assert registry.call("GET", f"/config/{subject}?defaultToGlobal=true")[0] == 200
    assert registry.call("PUT", f"/config/{subject}", {"compatibility": "full_transitive"})[1] == {
        "compatibility": "FULL_TRANSITIVE"
    }
    assert registry.call("GET", f"/config/{subject}")[1] == {"compatibilityLevel": "FULL_TRANSITIVE"}
    assert registry.call("PUT", f"/config/{subject}", {"compatibility": "SIDEWAYS"})[1]["error_code"] == 42203
    assert registry.call("DELETE", f"/config/{subject}")[1] == {"compatibilityLevel": "FULL_TRANSITIVE"}
    assert registry.call("GET", f"/config/{subject}")[1]["error_code"] == 40408


def test_soft_and_permanent_deletes(registry: RegistryProcess, subject: str) -> None:
    # Schemas no other test registers: an id lives on while any subject holds the same schema.
    v1, v2 = record("Gone", ("a", "string")), record("Gone", ("a", "string"), ("b", "int", 0))
    one = registry.call("POST", f"/subjects/{subject}/versions", {"schema": v1})[1]["id"]
    registry.call("POST", f"/subjects/{subject}/versions", {"schema": v2})
    assert registry.call("DELETE", f"/subjects/{subject}/versions/1?permanent=true")[1]["error_code"] == 40407
    assert registry.call("DELETE", f"/subjects/{subject}/versions/1") == (200, 1)
    assert registry.call("DELETE", f"/subjects/{subject}/versions/1")[1] == {
        "error_code": 40406,
        "message": f"Subject '{subject}' Version 1 was soft deleted.Set permanent=true to delete permanently",
    }  # Confluent's text, word for word
    assert registry.call("GET", f"/subjects/{subject}/versions/1")[1]["error_code"] == 40402
    assert registry.call("GET", f"/subjects/{subject}/versions/1?deleted=true")[1]["id"] == one
    assert registry.call("GET", f"/subjects/{subject}/versions?deleted=true")[1] == [1, 2]
    assert registry.call("DELETE", f"/subjects/{subject}?permanent=true")[1] == {
        "error_code": 40405,
        "message": f"Subject '{subject}' was not deleted first before being permanently deleted",
    }
    assert registry.call("DELETE", f"/subjects/{subject}") == (200, [2])
    assert registry.call("DELETE", f"/subjects/{subject}")[1]["error_code"] == 40404
    assert subject not in registry.call("GET", "/subjects")[1]
    assert subject in registry.call("GET", "/subjects?deleted=true")[1]
    assert registry.call("GET", f"/schemas/ids/{one}")[0] == 200  # soft-deleted schemas still decode
    assert registry.call("DELETE", f"/subjects/{subject}?permanent=true") == (200, [1, 2])
    assert registry.call("GET", f"/subjects/{subject}/versions")[1]["error_code"] == 40401
    assert registry.call("GET", f"/schemas/ids/{one}")[1]["error_code"] == 40403
    # The id is never handed out again, even for the very same schema.
    again = registry.call("POST", f"/subjects/{subject}/versions", {"schema": v1})[1]
    assert again["id"] > one and again["version"] == 1


def test_references(registry: RegistryProcess, client: SchemaRegistryClient, subject: str) -> None:
    address = json.dumps(
        {
            "type": "record",
            "name": "Address",
            "namespace": "ex",
            "fields": [{"name": "city", "type": "string"}],
        }
    )
    client.register_schema(f"{subject}-address", Schema(address, "AVRO"))
    person = json.dumps(
        {
            "type": "record",
            "name": "Person",
            "namespace": "ex",
            "fields": [{"name": "home", "type": "ex.Address"}],
        }
    )
    ref = SchemaReference("ex.Address", f"{subject}-address", 1)
    person_id = client.register_schema(subject, Schema(person, "AVRO", [ref]))
    got = registry.call("GET", f"/subjects/{subject}/versions/latest")[1]
    assert got["references"] == [{"name": "ex.Address", "subject": f"{subject}-address", "version": 1}]
    assert registry.call("GET", f"/subjects/{subject}-address/versions/1/referencedby")[1] == [person_id]
    status, body = registry.call("DELETE", f"/subjects/{subject}-address/versions/1")
    assert (status, body["error_code"]) == (422, 42206)
    missing = {"schema": person, "references": [{"name": "ex.Address", "subject": "nope", "version": 1}]}
    assert registry.call("POST", f"/subjects/{subject}-x/versions", missing)[1]["error_code"] == 42201


def test_mode_readonly_and_import(registry: RegistryProcess, subject: str) -> None:
    assert registry.call("GET", "/mode")[1] == {"mode": "READWRITE"}
    assert registry.call("PUT", f"/mode/{subject}", {"mode": "READONLY"})[1] == {"mode": "READONLY"}
    status, body = registry.call("POST", f"/subjects/{subject}/versions", {"schema": USER_V1})
    assert (status, body["error_code"]) == (422, 42205)
    assert registry.call("PUT", f"/mode/{subject}", {"mode": "BOGUS"})[1]["error_code"] == 42204
    assert registry.call("DELETE", f"/mode/{subject}")[1] == {"mode": "READONLY"}
    assert registry.call("GET", f"/mode/{subject}")[1]["error_code"] == 40409
    # IMPORT keeps the ids and versions it is given.
    assert registry.call("PUT", f"/mode/{subject}", {"mode": "IMPORT"})[0] == 200
    body = {"schema": USER_V1, "id": 900001, "version": 7}
    assert registry.call("POST", f"/subjects/{subject}/versions", body)[1]["id"] == 900001
    assert registry.call("GET", f"/subjects/{subject}/versions/7")[1]["id"] == 900001
    taken = {"schema": USER_BAD, "id": 900001, "version": 8}
    assert registry.call("POST", f"/subjects/{subject}/versions", taken)[1]["error_code"] == 42207
    registry.call("DELETE", f"/mode/{subject}")
    assert (
        registry.call("POST", f"/subjects/{subject}/versions", {"schema": USER_V1, "id": 5})[1]["error_code"]
        == 42205
    )
    # Ids given on import move the next id past them.
    other = registry.call("POST", f"/subjects/{subject}-next/versions", {"schema": record("N", ("n", "int"))})
    assert other[1]["id"] > 900001


def test_lookup_errors_and_deleted_flag(registry: RegistryProcess, subject: str) -> None:
    assert registry.call("POST", f"/subjects/{subject}", {"schema": USER_V1})[1]["error_code"] == 40401
    registry.call("POST", f"/subjects/{subject}/versions", {"schema": USER_V1})
    assert registry.call("POST", f"/subjects/{subject}", {"schema": USER_V2})[1]["error_code"] == 40403
    found = registry.call(
        "POST", f"/subjects/{subject}", {"schema": json.dumps(json.loads(USER_V1), indent=2)}
    )
    assert found[0] == 200 and found[1]["version"] == 1
    registry.call("DELETE", f"/subjects/{subject}")
    assert registry.call("POST", f"/subjects/{subject}", {"schema": USER_V1})[1]["error_code"] == 40401
    assert registry.call("POST", f"/subjects/{subject}?deleted=true", {"schema": USER_V1})[0] == 200


def test_schema_types_and_root(registry: RegistryProcess) -> None:
    status, types = registry.call("GET", "/schemas/types")
    assert status == 200 and "AVRO" in types
    assert registry.call("GET", "/") == (200, {})


@pytest.mark.parametrize(
    ("method", "path", "raw", "status", "code"),
    [
        ("POST", "/subjects/s/versions", b"{not json", 422, 422),
        ("POST", "/subjects/s/versions", b"[1, 2]", 422, 422),
        ("POST", "/subjects/s/versions", b'{"schema": 5}', 422, 42201),
        ("POST", "/subjects/s/versions", b'{"schema": "{\\"type\\": \\"recrod\\"}"}', 422, 42201),
        ("POST", "/subjects/s/versions", b'{"schema": "{}", "schemaType": "XML"}', 422, 42201),
        ("POST", "/subjects/s/versions", b'{"schema": "\\"int\\"", "references": "x"}', 422, 422),
        ("GET", "/subjects/s/versions/0", None, 422, 42202),
        ("GET", "/subjects/s/versions/abc", None, 422, 42202),
        ("GET", "/subjects/s/versions/99999999999", None, 422, 42202),
        # Jersey cannot convert the id to an Integer: its generic 404 (JAX-RS), not "schema not found".
        ("GET", "/schemas/ids/abc", None, 404, 404),
        ("GET", "/schemas/ids/1_0", None, 404, 404),
        ("GET", "/schemas/ids/99999999999", None, 404, 404),
        ("GET", "/schemas/ids/2000000000", None, 404, 40403),
        ("GET", "/no/such/path", None, 404, 404),
        ("PUT", "/config", b'{"compatibility": 3}', 422, 42203),
        ("PUT", "/mode", b'{"mode": null}', 422, 42204),
        ("DELETE", "/subjects", None, 405, 405),
    ],
)
def test_bad_input_gets_a_confluent_error(
    registry: RegistryProcess, method: str, path: str, raw: bytes | None, status: int, code: int
) -> None:
    got_status, body = registry.call(method, path, raw=raw)
    assert (got_status, body["error_code"]) == (status, code), body
    assert body["message"]


@pytest.mark.parametrize("body", [{}, {"schema": ""}, {"schema": "  "}, {"schema": None}])
def test_a_register_without_a_schema_is_confluents_empty_schema(
    registry: RegistryProcess, body: dict
) -> None:
    status, reply = registry.call("POST", f"/subjects/empty-{uuid.uuid4().hex[:8]}/versions", body)
    assert (status, reply) == (422, {"error_code": 42201, "message": "Empty schema"})


def test_an_invalid_version_is_named_in_confluents_words(registry: RegistryProcess) -> None:
    """confluent-kafka-python's own registry tests match this text."""
    status, body = registry.call("GET", "/subjects/s/versions/abc")
    assert (status, body["error_code"]) == (422, 42202)
    assert body["message"].startswith("The specified version 'abc' is not a valid version id.")


def test_oversized_request_gets_413(registry: RegistryProcess) -> None:
    huge = json.dumps({"schema": "x" * (5 * 1024 * 1024)}).encode()
    status, body = registry.call("POST", "/subjects/huge/versions", raw=huge)
    assert status == 413 and body["error_code"] == 413


def test_client_errors_surface_in_confluent_client(client: SchemaRegistryClient, subject: str) -> None:
    with pytest.raises(SchemaRegistryError) as caught:
        client.get_latest_version(subject)
    assert caught.value.error_code == 40401 and caught.value.http_status_code == 404


def test_normalize_stores_the_normalized_text_and_finds_it_again(
    registry: RegistryProcess, subject: str
) -> None:
    spaced = json.dumps(json.loads(record("Norm", ("a", "int"))), indent=4)
    status, body = registry.call("POST", f"/subjects/{subject}/versions?normalize=true", {"schema": spaced})
    assert status == 200
    stored = registry.call("GET", f"/subjects/{subject}/versions/1")[1]["schema"]
    assert stored != spaced and json.loads(stored) == json.loads(spaced)
    again = registry.call("POST", f"/subjects/{subject}?normalize=true", {"schema": spaced})
    assert again[1]["id"] == body["id"]
    # The same schema, sent as is to another subject, is the same schema: the same id.
    raw_status, raw = registry.call("POST", f"/subjects/{subject}-raw/versions", {"schema": spaced})
    assert raw_status == 200 and raw["id"] == body["id"]


def test_a_client_that_disappears_halfway_leaves_the_registry_serving(registry: RegistryProcess) -> None:
    import socket

    host, port = registry.url.removeprefix("http://").rsplit(":", 1)
    for cut in (
        b'POST /subjects/cut/versions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{"sch',
        b"GET /sub",
    ):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(cut)
    assert registry.call("GET", "/subjects/cut/versions")[1]["error_code"] == 40401
    assert registry.call("POST", "/subjects/cut/versions", {"schema": record("Cut", ("c", "int"))})[0] == 200


def test_global_import_mode_needs_force_when_schemas_exist(registry: RegistryProcess, subject: str) -> None:
    registry.call("POST", f"/subjects/{subject}/versions", {"schema": record("Imp", ("i", "int"))})
    status, body = registry.call("PUT", "/mode", {"mode": "IMPORT"})
    assert (status, body["error_code"]) == (422, 42205)
    try:
        assert registry.call("PUT", "/mode?force=true", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})
        assert registry.call("GET", f"/mode/{subject}?defaultToGlobal=true")[1] == {"mode": "IMPORT"}
    finally:
        assert registry.call("PUT", "/mode", {"mode": "READWRITE"})[0] == 200


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/octet-stream", "application/vnd.schemaregistry+json"]
)
def test_json_and_octet_stream_bodies_are_accepted(
    registry: RegistryProcess, subject: str, content_type: str
) -> None:
    text = record("Typed", ("t", "int"))
    status, body = registry.call(
        "POST", f"/subjects/{subject}/versions", {"schema": text}, headers={"Content-Type": content_type}
    )
    assert status == 200 and body["version"] == 1


def test_schemas_list_by_prefix_with_deleted_latest_only_and_paging(
    registry: RegistryProcess, subject: str
) -> None:
    first, second = f"{subject}-a", f"{subject}-b"
    v1, v2 = record("Listed", ("a", "string")), record("Listed", ("a", "string"), ("b", "int", 0))
    for name, text in ((first, v1), (first, v2), (second, v1)):
        assert registry.call("POST", f"/subjects/{name}/versions", {"schema": text})[0] == 200
    assert registry.call("DELETE", f"/subjects/{first}/versions/1") == (200, 1)

    def listed(query: str) -> list[tuple[str, int]]:
        status, body = registry.call("GET", f"/schemas?subjectPrefix={subject}&{query}")
        assert status == 200, body
        return [(entry["subject"], entry["version"]) for entry in body]

    assert listed("") == [(first, 2), (second, 1)]
    assert listed("deleted=true") == [(first, 1), (first, 2), (second, 1)]
    assert listed("latestOnly=true") == [(first, 2), (second, 1)]
    assert listed("deleted=true&offset=1&limit=1") == [(first, 2)]
    assert listed("deleted=true&offset=2&limit=-1") == [(second, 1)]
    assert listed("offset=5") == []
    # Each entry is what GET /subjects/{s}/versions/{v} shows.
    entry = registry.call("GET", f"/schemas?subjectPrefix={second}")[1]
    assert entry == [registry.call("GET", f"/subjects/{second}/versions/1")[1]]
    assert {(e["subject"], e["version"]) for e in registry.call("GET", "/schemas")[1]} >= {
        (first, 2),
        (second, 1),
    }
    for bad in ("offset=x", "limit=1.5", "offset=-1"):
        status, body = registry.call("GET", f"/schemas?{bad}")
        assert (status, body["error_code"]) == (422, 422), body


def test_schema_ids_take_a_subject_and_list_deleted_users(registry: RegistryProcess, subject: str) -> None:
    text = record("ByIdUsers", ("a", "string"))
    other = f"{subject}-other"
    schema_id = registry.call("POST", f"/subjects/{subject}/versions", {"schema": text})[1]["id"]
    assert registry.call("POST", f"/subjects/{other}/versions", {"schema": text})[1]["id"] == schema_id
    assert registry.call("DELETE", f"/subjects/{other}/versions/1") == (200, 1)
    base = f"/schemas/ids/{schema_id}"
    assert registry.call("GET", f"{base}/subjects")[1] == [subject]
    assert registry.call("GET", f"{base}/subjects?deleted=true")[1] == sorted([subject, other])
    assert registry.call("GET", f"{base}/versions?deleted=true")[1] == [
        {"subject": s, "version": 1} for s in sorted([subject, other])
    ]
    # `subject` names the context the id is looked up in: the default context holds every id here (a
    # subject that does not use it included), any other context none.
    for qualified in (subject, other, "unrelated", f":.:{subject}"):
        assert json.loads(registry.call("GET", f"{base}?subject={qualified}")[1]["schema"]) == json.loads(
            text
        )
    assert registry.call("GET", f"{base}/subjects?subject={subject}")[1] == [subject]
    for path in ("", "/schema", "/versions", "/subjects"):
        status, body = registry.call("GET", f"{base}{path}?subject=:.elsewhere:{subject}")
        assert (status, body["error_code"]) == (404, 40403), body


def test_metadata_id_names_the_kafka_cluster_and_the_registry_group(registry: RegistryProcess) -> None:
    status, body = registry.call("GET", "/v1/metadata/id")
    assert status == 200, body
    clusters = body["scope"]["clusters"]
    assert body["scope"]["path"] == []
    assert clusters["schema-registry-cluster"] == registry.group
    assert isinstance(clusters["kafka-cluster"], str) and clusters["kafka-cluster"]
