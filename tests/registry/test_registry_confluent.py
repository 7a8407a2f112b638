"""The registry as Confluent's behaves where Karapace's integration suite found sluice apart from it (checked in
schema-registry's ProtobufSchema, AbstractSchemaProvider, CompatibilityResource, protobuf diff/ and Versions):
one `sluice registry` for the module, over real HTTP."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import requests
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient

from sluice.testing import BrokerProcess, RegistryProcess

V1 = "application/vnd.schemaregistry.v1+json"


@pytest.fixture(scope="module")
def registry(broker: BrokerProcess) -> Iterator[str]:
    proc = RegistryProcess(broker.bootstrap, f"_schemas-confluent-{uuid.uuid4().hex[:8]}").start()
    proc.wait_primary()
    assert proc.url is not None
    yield proc.url
    proc.stop()


def subject(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def post(url: str, path: str, body: Any, **headers: str) -> requests.Response:
    return requests.post(f"{url}{path}", json=body, headers=headers, timeout=30)


def test_google_type_imports_need_no_reference(registry: str) -> None:
    """Confluent's ProtobufSchema bundles google/type/*.proto (KNOWN_DEPENDENCIES) beside the well-known types;
    sluice answered 42201 "google.type.PostalAddress is not defined"."""
    text = (
        'syntax = "proto3";\npackage shop;\nimport "google/type/postal_address.proto";\n'
        'import "google/type/money.proto";\nimport "google/type/date.proto";\n'
        "message Customer {\n  google.type.PostalAddress address = 1;\n  google.type.Money balance = 2;\n"
        "  google.type.Date born = 3;\n}\n"
    )
    reply = post(
        registry, f"/subjects/{subject('customer')}/versions", {"schemaType": "PROTOBUF", "schema": text}
    )
    assert reply.status_code == 200, reply.text
    # What Confluent does not bundle (localized_text is in googleapis-common-protos, not in its list) still
    # needs a reference.
    other = text.replace("money.proto", "localized_text.proto").replace(
        "google.type.Money", "google.type.LocalizedText"
    )
    refused = post(
        registry, f"/subjects/{subject('customer')}/versions", {"schemaType": "PROTOBUF", "schema": other}
    )
    assert (refused.status_code, refused.json()["error_code"]) == (422, 42201)
    assert "localized_text.proto" in refused.json()["message"]


def test_a_reference_of_version_minus_one_is_the_latest(registry: str) -> None:
    """AbstractSchemaProvider resolves version -1 to the subject's latest version, and that version is what
    the registered schema's reference records (sluice refused -1)."""
    place = subject("place")
    for fields in ("string city = 1;", "string city = 1; int32 zone = 2;"):
        dep = f'syntax = "proto3";\npackage a1;\nmessage Place {{ {fields} }}\n'
        assert post(registry, f"/subjects/{place}/versions", {"schemaType": "PROTOBUF", "schema": dep}).ok
    main = 'syntax = "proto3";\npackage a1;\nimport "place.proto";\nmessage Customer { Place place = 1; }\n'
    refs = [{"name": "place.proto", "subject": place, "version": -1}]
    customer = subject("customer")
    body = {"schemaType": "PROTOBUF", "schema": main, "references": refs}
    reply = post(registry, f"/subjects/{customer}/versions", body)
    assert reply.status_code == 200, reply.text
    stored = requests.get(f"{registry}/subjects/{customer}/versions/1", timeout=30).json()
    assert stored["references"] == [{"name": "place.proto", "subject": place, "version": 2}]
    # The same body is the same schema (a lookup and a second register find version 1).
    assert post(registry, f"/subjects/{customer}", body).json()["version"] == 1
    assert post(registry, f"/subjects/{customer}/versions", body).json()["id"] == reply.json()["id"]
    missing = post(
        registry,
        f"/subjects/{subject('c')}/versions",
        {**body, "references": [{**refs[0], "subject": "nope"}]},
    )
    assert (missing.status_code, missing.json()["error_code"]) == (422, 42201)


def test_protobuf_compatibility_looks_into_referenced_files(registry: str) -> None:
    """A field of a message a reference defines turning string -> int32 is incompatible (Confluent's
    FieldSchemaDiff compares the referenced message); sluice compared the type's name only."""
    base, main = subject("container"), subject("main")
    dep = 'syntax = "proto3";\npackage a1.container;\nmessage Hint { string hint_str = 1; }\n'
    assert post(registry, f"/subjects/{base}/versions", {"schemaType": "PROTOBUF", "schema": dep}).ok
    text = 'syntax = "proto3";\npackage a1;\nimport "container.proto";\nmessage M { a1.container.Hint hint = 1; }\n'
    refs = [{"name": "container.proto", "subject": base, "version": 1}]
    body = {"schemaType": "PROTOBUF", "schema": text, "references": refs}
    assert post(registry, f"/subjects/{main}/versions", body).ok
    changed = dep.replace("string hint_str", "int32 hint_str")
    assert requests.put(f"{registry}/config/{base}", json={"compatibility": "NONE"}, timeout=30).ok
    assert post(registry, f"/subjects/{base}/versions", {"schemaType": "PROTOBUF", "schema": changed}).ok
    check = post(
        registry,
        f"/compatibility/subjects/{main}/versions/latest?verbose=true",
        {**body, "references": [{**refs[0], "version": 2}]},
    )
    assert check.status_code == 200 and check.json()["is_compatible"] is False, check.text
    assert any("hint_str" in m for m in check.json()["messages"])


def test_int32_to_enum_is_compatible_as_in_confluent(registry: str) -> None:
    """Confluent's ScalarKind counts an enum with int32 & co (GENERAL_NUMBER); sluice called it a kind change."""
    name = subject("enum")
    old = 'syntax = "proto3";\nmessage M { int32 state = 1; }\n'
    new = 'syntax = "proto3";\nmessage M { State state = 1; }\nenum State { UNKNOWN = 0; ON = 1; }\n'
    assert post(registry, f"/subjects/{name}/versions", {"schemaType": "PROTOBUF", "schema": old}).ok
    check = post(
        registry, f"/compatibility/subjects/{name}/versions/latest", {"schemaType": "PROTOBUF", "schema": new}
    )
    assert check.json() == {"is_compatible": True}
    signed = new.replace("State state", "sint32 state")
    refused = post(
        registry,
        f"/compatibility/subjects/{name}/versions/latest",
        {"schemaType": "PROTOBUF", "schema": signed},
    )
    assert refused.json() == {"is_compatible": False}


@pytest.mark.parametrize("name", ["curly{brace}", "{", "a}b{c", "with space { and } braces"])
def test_subjects_with_braces_work(registry: str, name: str) -> None:
    """aiohttp's default path variable excludes { and }; Confluent's subjects may hold them."""
    path = quote(name, safe="")
    reply = post(registry, f"/subjects/{path}/versions", {"schema": '"string"'})
    assert reply.status_code == 200, reply.text
    assert requests.get(f"{registry}/subjects/{path}/versions", timeout=30).json() == [1]
    assert name in requests.get(f"{registry}/subjects", timeout=30).json()
    assert requests.put(f"{registry}/config/{path}", json={"compatibility": "NONE"}, timeout=30).ok
    assert requests.delete(f"{registry}/subjects/{path}", timeout=30).json() == [1]


def test_a_compatibility_check_on_a_missing_subject_answers_as_confluent(registry: str) -> None:
    """CompatibilityResource: a numbered version that is not there is 40402 (subject or not); "latest" of a
    subject with no live version compares with nothing and passes, as does the check against all versions."""
    name = subject("missing")
    body = {"schema": json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})}
    numbered = post(registry, f"/compatibility/subjects/{name}/versions/1", body)
    assert (numbered.status_code, numbered.json()["error_code"]) == (404, 40402)
    assert post(registry, f"/compatibility/subjects/{name}/versions/latest", body).json() == {
        "is_compatible": True
    }
    assert post(registry, f"/compatibility/subjects/{name}/versions", body).json() == {"is_compatible": True}
    assert post(registry, f"/subjects/{name}/versions", body).ok
    assert requests.delete(f"{registry}/subjects/{name}/versions/1", timeout=30).ok
    soft_deleted = post(registry, f"/compatibility/subjects/{name}/versions/1", body)
    assert (soft_deleted.status_code, soft_deleted.json()["error_code"]) == (404, 40402)
    bad = post(registry, f"/compatibility/subjects/{name}/versions/x", body)
    assert (bad.status_code, bad.json()["error_code"]) == (422, 42202)


@pytest.mark.parametrize(
    ("accept", "answered"),
    [
        (None, V1),
        ("application/json", "application/json"),
        ("application/vnd.schemaregistry+json", "application/vnd.schemaregistry+json"),
        ("application/vnd.schemaregistry.v2+json; q=0.1, application/vnd.schemaregistry+json; q=0.9",
         "application/vnd.schemaregistry+json"),
        ("text/html, image/gif, *; q=.2, */*; q=.2", V1),
        ("application/*", V1),
        ("*/does_not_matter", V1),
        ("application/json, */*", "application/json"),
        ("application/vnd.schemaregistry.v2+json", None),
        ("text/*", None),
        ("application/octet-stream", None),
    ],
)  # fmt: skip
def test_accept_headers_are_negotiated_as_jersey_does(
    registry: str, accept: str | None, answered: str | None
) -> None:
    """Confluent's resources produce v1 (qs 1), the unversioned type (qs 0.9) and application/json (qs 0.5):
    the answer comes in the one the Accept header prefers, or 406 (sluice always answered v1)."""
    headers = {"Accept": accept} if accept is not None else {}
    reply = requests.get(f"{registry}/subjects", headers=headers, timeout=30)
    if answered is None:
        assert (reply.status_code, reply.json()) == (
            406,
            {"error_code": 406, "message": "HTTP 406 Not Acceptable"},
        )
    else:
        assert (reply.status_code, reply.headers["Content-Type"]) == (200, answered)


def test_request_bodies_of_other_types_are_415(registry: str) -> None:
    """Bodies are v1, the unversioned type, application/json or application/octet-stream, in the charset
    the Content-Type names; anything else is 415 (sluice took any body as JSON)."""
    body = json.dumps({"compatibility": "NONE"})
    name = quote(subject("ct"), safe="")
    for content_type, data in [
        ("text/html", body.encode()),
        ("application/x-www-form-urlencoded", body.encode()),
    ]:
        reply = requests.put(
            f"{registry}/config/{name}", data=data, headers={"Content-Type": content_type}, timeout=30
        )
        assert (reply.status_code, reply.json()) == (
            415,
            {"error_code": 415, "message": "HTTP 415 Unsupported Media Type"},
        )
        assert reply.headers["Content-Type"] == V1
    for content_type, data in [
        ("application/octet-stream", body.encode()),
        (f"{V1}; charset=utf-8", body.encode()),
        (f"{V1}; charset=utf-16", body.encode("utf-16")),
        ("application/json", body.encode()),
    ]:
        reply = requests.put(
            f"{registry}/config/{name}", data=data, headers={"Content-Type": content_type}, timeout=30
        )
        assert reply.status_code == 200 and reply.json() == {"compatibility": "NONE"}, (
            content_type,
            reply.text,
        )


def test_confluent_clients_still_talk_to_it(registry: str) -> None:
    """confluent-kafka's client sends its own Accept and Content-Type: negotiation leaves it working, a
    google/type import and a -1 reference included."""
    client = SchemaRegistryClient({"url": registry})
    place = subject("client-place")
    client.register_schema(
        place, Schema('syntax = "proto3";\nmessage Place { string city = 1; }\n', "PROTOBUF")
    )
    text = 'syntax = "proto3";\nimport "p.proto";\nimport "google/type/latlng.proto";\nmessage At { Place p = 1; google.type.LatLng where = 2; }\n'
    schema_id = client.register_schema(
        subject("client-at"), Schema(text, "PROTOBUF", [SchemaReference("p.proto", place, -1)])
    )
    assert client.get_schema(schema_id).references[0].version == 1


def test_schema_text_comes_back_as_confluent_stores_it(registry: str) -> None:
    """Confluent stores every registered schema's canonicalString(): Avro as Avro's Java Schema.toString(),
    JSON Schema as compact JSON in the given key order (sluice kept the text as sent)."""
    avro_text = json.dumps(
        {
            "fields": [{"type": {"type": "string"}, "name": "a", "default": "x"}],
            "name": "n.R",
            "type": "record",
        },
        indent=2,
    )
    name = subject("canonical-avro")
    schema_id = post(registry, f"/subjects/{name}/versions", {"schema": avro_text}).json()["id"]
    expected = (
        '{"type":"record","name":"R","namespace":"n","fields":[{"name":"a","type":"string","default":"x"}]}'
    )
    assert requests.get(f"{registry}/schemas/ids/{schema_id}", timeout=30).json()["schema"] == expected
    assert requests.get(f"{registry}/subjects/{name}/versions/1/schema", timeout=30).text == expected
    # The same schema written otherwise is found as that one.
    again = post(registry, f"/subjects/{name}", {"schema": json.dumps(json.loads(avro_text))})
    assert (again.json()["id"], again.json()["schema"]) == (schema_id, expected)
    json_text = (
        '{\n  "type": "object",\n  "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}\n}'
    )
    name = subject("canonical-json")
    schema_id = post(
        registry, f"/subjects/{name}/versions", {"schemaType": "JSON", "schema": json_text}
    ).json()["id"]
    assert requests.get(f"{registry}/schemas/ids/{schema_id}", timeout=30).json()["schema"] == (
        '{"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}}'
    )
