"""JSON Schema parsing: drafts, references by URL, normalized text, fingerprint, clear errors for bad input."""

from __future__ import annotations

import json

import pytest
from format_helpers import refusal

from sluice.registry.formats import InvalidSchemaError, json_validator, parse_schema

CUSTOMER = {
    "$id": "https://example.com/customer.json",
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
}


def test_normalized_text_sorts_keys_and_the_fingerprint_ignores_layout() -> None:
    a = parse_schema(
        "JSON", '{"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}'
    )
    b = parse_schema("JSON", '{"properties":{"a":{"type":"integer"},"b":{"type":"string"}},"type":"object"}')
    assert a.fingerprint == b.fingerprint
    assert a.text != b.text
    assert parse_schema("JSON", a.text, normalize=True).text == b.text
    assert json.loads(parse_schema("JSON", a.text, normalize=True).text) == json.loads(a.text)
    assert parse_schema("JSON", a.text, normalize=True).text.startswith('{"properties":{"a"')
    assert parse_schema("JSON", '{"type": "string", "description": "x"}').fingerprint != (
        parse_schema("JSON", '{"type": "string"}').fingerprint
    )


@pytest.mark.parametrize(
    "draft",
    [
        "http://json-schema.org/draft-04/schema#",
        "http://json-schema.org/draft-06/schema#",
        "http://json-schema.org/draft-07/schema#",
        "https://json-schema.org/draft/2019-09/schema",
        "https://json-schema.org/draft/2020-12/schema",
    ],
)
def test_every_supported_draft_is_recognised_and_validates(draft: str) -> None:
    parsed = parse_schema("JSON", json.dumps({"$schema": draft, "type": "object", "required": ["a"]}))
    assert json_validator(parsed).is_valid({"a": 1})
    assert not json_validator(parsed).is_valid({})


def test_draft_specific_keywords_follow_the_declared_draft() -> None:
    # draft 4: exclusiveMinimum is a boolean; draft 7: a number. Each is invalid in the other.
    parse_schema(
        "JSON",
        '{"$schema": "http://json-schema.org/draft-04/schema#", "minimum": 1, "exclusiveMinimum": true}',
    )
    with pytest.raises(InvalidSchemaError, match="exclusiveMinimum"):
        parse_schema("JSON", '{"minimum": 1, "exclusiveMinimum": true}')


def test_references_resolve_by_name_and_by_id_and_validate() -> None:
    order = {
        "$id": "https://example.com/order.json",
        "type": "object",
        "properties": {"customer": {"$ref": "customer.json"}, "count": {"$ref": "#/definitions/count"}},
        "definitions": {"count": {"type": "integer", "minimum": 1}},
    }
    parsed = parse_schema("JSON", json.dumps(order), {"customer.json": json.dumps(CUSTOMER)})
    validator = json_validator(parsed)
    assert validator.is_valid({"customer": {"name": "ann"}, "count": 2})
    assert not validator.is_valid({"customer": {}, "count": 2})
    assert not validator.is_valid({"customer": {"name": "ann"}, "count": 0})
    # Without an $id of its own, a name-only reference still resolves.
    bare = parse_schema(
        "JSON", '{"properties": {"c": {"$ref": "customer.json"}}}', {"customer.json": json.dumps(CUSTOMER)}
    )
    assert not json_validator(bare).is_valid({"c": {}})


def test_boolean_schemas_are_schemas() -> None:
    assert json_validator(parse_schema("JSON", "true")).is_valid(5)
    assert not json_validator(parse_schema("JSON", "false")).is_valid(5)


@pytest.mark.parametrize(
    "declared", ["http://example.com/my-draft", "https://json.schema.org/draft/2020-12/schema"]
)
def test_a_schema_naming_an_unknown_draft_is_read_as_draft_7_as_confluents_registry_does(
    declared: str,
) -> None:
    # draft 7 (not 2020-12) knows `dependencies`: a dependent property is required there.
    validator = json_validator(
        parse_schema("JSON", json.dumps({"$schema": declared, "dependencies": {"a": ["b"]}}))
    )
    assert not validator.is_valid({"a": 1})
    assert validator.is_valid({"a": 1, "b": 2})


BAD = [
    ("garbage", "{nope", "not valid JSON"),
    ("array", "[1, 2]", "object or a boolean"),
    ("bad type", '{"type": "objekt"}', "/type"),
    ("negative length", '{"minLength": -1}', "/minLength"),
    ("required not a list", '{"required": "a"}', "/required"),
    ("unresolved ref", '{"properties": {"a": {"$ref": "other.json"}}}', "'other.json'"),
    ("unresolved pointer", '{"$ref": "#/definitions/missing"}', "'#/definitions/missing'"),
    ("deep", '{"not": ' * 200 + "{}" + "}" * 200, "nested deeper"),
    ("huge", '{"description": "' + "x" * 1_100_000 + '"}', "limit"),
]


@pytest.mark.parametrize(("text", "needle"), [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_schemas_raise_invalid_schema_error_with_a_clear_message(text: str, needle: str) -> None:
    assert needle in refusal("JSON", text)


def test_bad_reference_text_is_named() -> None:
    with pytest.raises(InvalidSchemaError, match=r"referenced schema 'customer\.json'"):
        parse_schema("JSON", '{"$ref": "customer.json"}', {"customer.json": "{broken"})


def test_a_ref_to_a_drafts_meta_schema_resolves_offline() -> None:
    parsed = parse_schema(
        "JSON", '{"properties": {"inner": {"$ref": "http://json-schema.org/draft-07/schema#"}}}'
    )
    assert json_validator(parsed).is_valid({"inner": {"type": "string"}})
    assert not json_validator(parsed).is_valid({"inner": {"type": 5}})
