"""Whatever text arrives, parse_schema answers with a schema or InvalidSchemaError, never another exception."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.registry.compatibility import LEVELS, check_compatibility
from sluice.registry.formats import InvalidSchemaError, parse_schema

# Keys and values each format gives meaning to, so the fuzzer reaches past the first "not a schema" check.
KEYS = st.sampled_from(
    [
        "type",
        "name",
        "namespace",
        "fields",
        "symbols",
        "items",
        "values",
        "size",
        "default",
        "aliases",
        "order",
        "doc",
        "logicalType",
        "precision",
        "scale",
        "properties",
        "required",
        "additionalProperties",
        "$ref",
        "$id",
        "$schema",
        "enum",
        "const",
        "oneOf",
        "anyOf",
        "allOf",
        "not",
        "minimum",
        "maxLength",
        "pattern",
        "prefixItems",
        "definitions",
        "dependencies",
        "patternProperties",
        "multipleOf",
    ]
)
ATOMS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.sampled_from(
        [
            "record",
            "enum",
            "fixed",
            "array",
            "map",
            "int",
            "long",
            "string",
            "null",
            "R",
            "a.b",
            "#",
            "#/x",
            "object",
            "integer",
            "http://json-schema.org/draft-04/schema#",
            "[",
            "A",
            "descending",
            "decimal",
        ]
    ),
    st.text(max_size=4),
)
JSON_VALUES = st.recursive(
    ATOMS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=20,
)
PROTO_WORDS = st.sampled_from(
    [
        'syntax = "proto3";',
        'syntax = "proto2";',
        "message",
        "M",
        "{",
        "}",
        "int32",
        "x",
        "=",
        "1",
        ";",
        "oneof",
        "map<string,",
        "int32>",
        "enum",
        "reserved",
        "import",
        '"google/protobuf/any.proto"',
        "option",
        "repeated",
        "optional",
        "required",
        "group",
        "extensions",
        "to",
        "max",
        "package",
        "a.b",
        "[default = 1]",
    ]
)


def parses_or_refuses(schema_type: str, text: str) -> Any:
    try:
        return parse_schema(schema_type, text)
    except InvalidSchemaError as error:
        assert str(error)
        return None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=JSON_VALUES, schema_type=st.sampled_from(["AVRO", "JSON"]))
def test_json_shaped_input(value: Any, schema_type: str) -> None:
    parsed = parses_or_refuses(schema_type, json.dumps(value))
    if parsed is not None:
        for level in LEVELS:
            assert isinstance(check_compatibility(level, parsed, [parsed]), list)


@settings(max_examples=80, deadline=None)
@given(words=st.lists(PROTO_WORDS, max_size=25))
def test_proto_shaped_input(words: list[str]) -> None:
    parsed = parses_or_refuses("PROTOBUF", " ".join(words))
    if parsed is not None:
        assert check_compatibility("FULL", parsed, [parsed]) == []


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=40), schema_type=st.sampled_from(["AVRO", "JSON", "PROTOBUF"]))
def test_any_text(text: str, schema_type: str) -> None:
    parses_or_refuses(schema_type, text)


AVRO_SEED = {
    "type": "record",
    "name": "R",
    "namespace": "n",
    "aliases": ["Q"],
    "fields": [
        {"name": "a", "type": ["null", {"type": "enum", "name": "E", "symbols": ["X"], "default": "X"}]},
        {
            "name": "b",
            "type": {"type": "array", "items": {"type": "fixed", "name": "F", "size": 2}},
            "default": [],
        },
        {"name": "c", "type": {"type": "map", "values": "R"}, "order": "ignore"},
        {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}},
    ],
}
JSON_SEED = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "a": {"type": "array", "items": [{"type": "string"}], "additionalItems": False},
        "b": {"oneOf": [{"$ref": "#/definitions/d"}, {"type": "null"}]},
        "c": {"type": "number", "minimum": 0, "exclusiveMaximum": 5, "multipleOf": 0.5},
    },
    "required": ["a"],
    "additionalProperties": {"type": "string"},
    "patternProperties": {"^x": {"not": {"type": "null"}}},
    "dependencies": {"a": ["b"], "c": {"required": ["a"]}},
    "definitions": {"d": {"enum": [1, "x", None]}},
}


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found.extend(paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found.extend(paths(child, (*prefix, index)))
    return found


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    target = copy
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return copy


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), schema_type=st.sampled_from(["AVRO", "JSON"]))
def test_valid_schemas_with_one_part_replaced(data: st.DataObject, schema_type: str) -> None:
    seed = AVRO_SEED if schema_type == "AVRO" else JSON_SEED
    assert parse_schema(schema_type, json.dumps(seed))
    mutated = seed
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths(mutated)))
        mutated = replaced(mutated, path, data.draw(JSON_VALUES))
    parsed = parses_or_refuses(schema_type, json.dumps(mutated))
    if parsed is not None:
        original = parse_schema(schema_type, json.dumps(seed))
        for level in ("BACKWARD", "FORWARD"):
            assert isinstance(check_compatibility(level, parsed, [original]), list)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_damaged_serialized_descriptors(data: st.DataObject) -> None:
    import base64

    text = 'syntax = "proto2"; package p; message M { map<string, int32> m = 1; optional group G = 2 { optional int32 x = 3; } enum E { A = 1; } optional E e = 4 [default = A]; }'
    payload = bytearray(parse_schema("PROTOBUF", text).raw.serialized_pb)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(payload) - 1))
        payload[position] = data.draw(st.integers(0, 255))
    parses_or_refuses("PROTOBUF", base64.b64encode(bytes(payload)).decode())
