"""JSON Schema compatibility with jsonschema as the referee: whatever the check lets pass, validation agrees."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.registry.compatibility import check_compatibility
from sluice.registry.formats import json_validator, parse_schema

STR, INT, NUM = {"type": "string"}, {"type": "integer"}, {"type": "number"}


def obj(props: dict[str, Any], *, required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, **({"required": required} if required else {})}


LEAVES = [
    STR,
    INT,
    NUM,
    {"type": "null"},
    {**STR, "maxLength": 3},
    {**INT, "minimum": 0},
    {"enum": ["a", "b"]},
    {},
]


def objects(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        props = draw(st.dictionaries(st.sampled_from("abc"), children, max_size=3))
        required = draw(st.lists(st.sampled_from("abc"), unique=True, max_size=2))
        schema = obj(props, required=[r for r in required if r in props])
        if draw(st.booleans()):
            schema["additionalProperties"] = draw(st.sampled_from([False, True, STR]))
        return schema

    return build()


SCHEMAS = st.recursive(
    st.sampled_from(LEAVES),
    lambda children: st.one_of(
        objects(children),
        st.builds(lambda items: {"type": "array", "items": items}, children),
        # oneOf is left out: like Confluent, the check treats it as a sum type and does not prove its
        # alternatives disjoint, so oneOf [null, null] "accepts" null by the check but not by validation.
        st.builds(lambda a, b: {"anyOf": [a, b]}, children, children),
    ),
    max_leaves=6,
)


def mutations(schema: Any) -> st.SearchStrategy[Any]:
    """Small edits of a schema, so that many drawn pairs are compatible and the referee has work to do."""
    if not isinstance(schema, dict):
        return st.just(schema)
    options: list[Any] = [
        {key: value for key, value in schema.items() if key != "maxLength"},
        {**schema, "maxLength": 5},
        {key: value for key, value in schema.items() if key != "required"},
        {**schema, "additionalProperties": False},
        {key: value for key, value in schema.items() if key != "additionalProperties"},
        {**schema, "type": [schema["type"], "null"]} if schema.get("type") not in (None, "null") else schema,
    ]
    if isinstance(schema.get("properties"), dict):
        for name, sub in schema["properties"].items():
            options.append(
                {**schema, "properties": {k: v for k, v in schema["properties"].items() if k != name}}
            )
            options.append({**schema, "properties": {**schema["properties"], name: {}}})
            if isinstance(sub, dict) and "type" in sub:
                options.append(
                    {**schema, "properties": {**schema["properties"], name: {**sub, "type": "string"}}}
                )
        options.append({**schema, "properties": {**schema["properties"], "d": STR}})
    return st.sampled_from(options)


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.integers(-3, 5), st.sampled_from(["a", "b", "long string"]), st.floats(-2, 2)),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.sampled_from("abcd"), children, max_size=4)
    ),
    max_leaves=8,
)


@settings(max_examples=120, deadline=None)
@given(old=SCHEMAS, data=st.data())
def test_whenever_backward_holds_the_new_schema_accepts_what_the_old_one_did(
    old: Any, data: st.DataObject
) -> None:
    new = data.draw(st.one_of(mutations(old), SCHEMAS))
    old_parsed, new_parsed = parse_schema("JSON", json.dumps(old)), parse_schema("JSON", json.dumps(new))
    if check_compatibility("BACKWARD", new_parsed, [old_parsed]):
        return
    old_validator, new_validator = json_validator(old_parsed), json_validator(new_parsed)
    for doc in data.draw(st.lists(JSON_VALUES, min_size=5, max_size=10)):
        if old_validator.is_valid(doc):
            assert new_validator.is_valid(doc), f"{doc!r} fits the old schema only"
