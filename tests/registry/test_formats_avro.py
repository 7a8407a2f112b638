"""Avro parsing: what is accepted, what the normalized text and fingerprint are, and clear errors for bad input."""

from __future__ import annotations

import io
import json

import fastavro
import pytest
from format_helpers import refusal
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.registry.formats import InvalidSchemaError, Reference, parse_schema, supported_types

USER = {
    "type": "record",
    "name": "User",
    "namespace": "com.example",
    "doc": "a user",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": {"type": "string"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
        {"name": "friend", "type": ["null", "User"], "default": None},
    ],
}


def avro(value: object, **kwargs: object):
    return parse_schema("AVRO", json.dumps(value), **kwargs)


def test_supported_types_lists_all_three_confluent_names() -> None:
    assert set(supported_types()) >= {"AVRO"}


def test_text_is_printed_as_confluent_stores_it_and_normalized_on_request() -> None:
    """Confluent's registry stores Avro's Java Schema.toString(): compact, Avro's key order, a namespace only
    where it changes, a primitive without properties by its name, a named type by name after its first use."""
    text = json.dumps(USER, indent=2)
    assert parse_schema("AVRO", text).text == (
        '{"type":"record","name":"User","namespace":"com.example","doc":"a user","fields":['
        '{"name":"id","type":"long"},{"name":"name","type":"string"},'
        '{"name":"tags","type":{"type":"array","items":"string"},"default":[]},'
        '{"name":"friend","type":["null","User"],"default":null}]}'
    )
    shuffled = {
        "fields": [{"type": "int", "order": "ignore", "name": "n", "doc": "d", "x-prop": 1}],
        "aliases": ["Old", "other.Older"],
        "name": "a.R",
        "type": "record",
        "x-record": True,
    }
    assert avro(shuffled).text == (
        '{"type":"record","name":"R","namespace":"a","fields":[{"name":"n","type":"int","doc":"d",'
        '"order":"ignore","x-prop":1}],"x-record":true,"aliases":["Old","other.Older"]}'
    )
    nested = {"type": "record", "name": "a.R", "fields": [
        {"name": "e", "type": {"type": "enum", "name": "E", "namespace": "b", "symbols": ["X"], "default": "X"}},
        {"name": "f", "type": {"type": "fixed", "name": "F", "namespace": "", "size": 2}},
        {"name": "again", "type": "b.E"},
        {"name": "date", "type": {"type": "int", "logicalType": "date"}},
    ]}  # fmt: skip
    assert avro(nested).text == (
        '{"type":"record","name":"R","namespace":"a","fields":['
        '{"name":"e","type":{"type":"enum","name":"E","namespace":"b","symbols":["X"],"default":"X"}},'
        '{"name":"f","type":{"type":"fixed","name":"F","namespace":"","size":2}},'
        '{"name":"again","type":"b.E"},{"name":"date","type":{"type":"int","logicalType":"date"}}]}'
    )
    assert parse_schema(None, text).schema_type == "AVRO"
    normalized = parse_schema("AVRO", text, normalize=True).text
    assert json.loads(normalized) == {
        "type": "record",
        "name": "com.example.User",
        "doc": "a user",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": "string"},
            {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
            {"name": "friend", "type": ["null", "com.example.User"], "default": None},
        ],
    }
    assert ", " not in normalized and ": " not in normalized


@pytest.mark.parametrize(
    "variant",
    [
        {**USER, "namespace": None, "name": "com.example.User"},
        {
            "fields": USER["fields"],
            "name": "User",
            "type": "record",
            "doc": "a user",
            "namespace": "com.example",
        },
        {**USER, "fields": [{**USER["fields"][0], "type": {"type": "long"}}, *USER["fields"][1:]]},
        {**USER, "fields": [{**USER["fields"][0], "order": "ascending"}, *USER["fields"][1:]]},
    ],
    ids=["full-name", "key-order", "primitive-object", "default-order"],
)
def test_same_schema_written_differently_has_the_same_fingerprint(variant: dict) -> None:
    variant = {key: value for key, value in variant.items() if value is not None}
    assert avro(variant).fingerprint == avro(USER).fingerprint
    assert avro(variant, normalize=True).text == avro(USER, normalize=True).text


@pytest.mark.parametrize(
    "change",
    [
        {"doc": "another doc"},
        {"fields": USER["fields"][:3]},
        {"fields": [{**USER["fields"][0], "type": "int"}, *USER["fields"][1:]]},
        {"fields": [*USER["fields"][:2], {**USER["fields"][2], "default": ["x"]}, USER["fields"][3]]},
        {"aliases": ["Person"]},
        {"owner": "team-a"},
    ],
    ids=["doc", "field-removed", "type", "default", "alias", "custom-property"],
)
def test_a_different_schema_has_another_fingerprint(change: dict) -> None:
    assert avro({**USER, **change}).fingerprint != avro(USER).fingerprint


def test_references_take_part_in_the_fingerprint() -> None:
    address = {
        "type": "record",
        "name": "Address",
        "namespace": "com.example",
        "fields": [{"name": "street", "type": "string"}],
    }
    text = json.dumps(
        {"type": "record", "name": "Order", "fields": [{"name": "to", "type": "com.example.Address"}]}
    )
    refs = {"com.example.Address": json.dumps(address)}
    v1 = parse_schema("AVRO", text, refs, reference_list=[Reference("com.example.Address", "address", 1)])
    v2 = parse_schema("AVRO", text, refs, reference_list=[Reference("com.example.Address", "address", 2)])
    assert v1.fingerprint != v2.fingerprint
    assert v1.references == (Reference("com.example.Address", "address", 1),)


def test_references_resolve_transitively_in_any_order_and_stay_names_in_the_text() -> None:
    country = {"type": "enum", "name": "Country", "namespace": "geo", "symbols": ["NL", "FR"]}
    address = {
        "type": "record",
        "name": "Address",
        "namespace": "geo",
        "fields": [{"name": "country", "type": "Country"}],
    }
    order = {
        "type": "record",
        "name": "Order",
        "fields": [{"name": "ship", "type": "geo.Address"}, {"name": "bill", "type": "geo.Address"}],
    }
    refs = {"geo.Address": json.dumps(address), "geo.Country": json.dumps(country)}
    parsed = avro(order, references=refs, normalize=True)
    assert json.loads(parsed.text)["fields"][0]["type"] == "geo.Address"
    buffer = io.BytesIO()
    record = {"ship": {"country": "NL"}, "bill": {"country": "FR"}}
    fastavro.schemaless_writer(buffer, parsed.raw, record)
    buffer.seek(0)
    assert fastavro.schemaless_reader(buffer, parsed.raw) == record


def test_a_top_level_union_over_a_referenced_type_is_usable_raw() -> None:
    ref = {"type": "fixed", "name": "md5", "size": 16}
    parsed = parse_schema("AVRO", '["null", "md5"]', {"md5": json.dumps(ref)})
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed.raw, b"x" * 16)
    buffer.seek(0)
    assert fastavro.schemaless_reader(buffer, parsed.raw) == b"x" * 16


def test_a_primitive_schema_is_accepted() -> None:
    assert (
        parse_schema("AVRO", '"string"').fingerprint == parse_schema("AVRO", '{"type": "string"}').fingerprint
    )


def one_field(**field: object) -> str:
    return json.dumps({"type": "record", "name": "R", "fields": [field]})


BAD = [
    ("garbage", "not json {", "not valid JSON"),
    ("number", "5", "not a schema"),
    ("unknown type", '"strin"', "'strin'"),
    ("unknown type object", '{"type": "foo"}', "foo"),
    ("record without fields", '{"type": "record", "name": "R"}', "fields"),
    ("bad name", '{"type": "record", "name": "1R", "fields": []}', "'1R'"),
    ("bad field name", one_field(name="a-b", type="int"), "'a-b'"),
    (
        "repeated field",
        one_field(name="a", type="int").replace("}]", '}, {"name": "a", "type": "int"}]'),
        "repeated",
    ),
    ("field without type", one_field(name="a"), "no 'type'"),
    ("bad default", one_field(name="a", type="int", default="x"), "Default"),
    ("enum repeated symbol", '{"type": "enum", "name": "E", "symbols": ["A", "A"]}', "unique"),
    ("enum bad default", '{"type": "enum", "name": "E", "symbols": ["A"], "default": "B"}', "symbols"),
    ("enum bad symbol", '{"type": "enum", "name": "E", "symbols": ["a b"]}', "'a b'"),
    ("fixed without size", '{"type": "fixed", "name": "F"}', "size"),
    ("array without items", '{"type": "array"}', "items"),
    ("map without values", '{"type": "map"}', "values"),
    ("nested union", '["null", ["int"]]', "union"),
    ("duplicate union branch", '["int", "string", "int"]', "two branches"),
    ("redefined name", one_field(name="a", type={"type": "fixed", "name": "R", "size": 1}), "R"),
    ("int default too big", one_field(name="a", type="int", default=2**31), "does not fit int"),
    ("long default too big", one_field(name="a", type={"type": "long"}, default=2**63), "does not fit long"),
    ("bad order", one_field(name="a", type="int", order="up"), "order"),
    ("unresolved reference", one_field(name="a", type="x.Missing"), "x.Missing"),
    ("deep", "[" * 5000 + "]" * 5000, "nested"),
    ("huge", '"' + "a" * 1_100_000 + '"', "limit"),
]


@pytest.mark.parametrize(("text", "needle"), [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_schemas_raise_invalid_schema_error_with_a_clear_message(text: str, needle: str) -> None:
    assert needle in refusal("AVRO", text)


def test_deep_but_valid_nesting_is_bounded_not_a_crash() -> None:
    schema: object = "int"
    for _ in range(200):
        schema = {"type": "array", "items": schema}
    with pytest.raises(InvalidSchemaError, match="nested deeper"):
        avro(schema)


@pytest.mark.parametrize(
    ("refs", "needle"),
    [
        ({"x.A": "garbage"}, "referenced schema 'x.A'"),
        (
            {
                "x.A": '{"type": "record", "name": "A", "namespace": "x", "fields": [{"name": "b", "type": "x.B"}]}'
            },
            "x.B",
        ),
    ],
)
def test_bad_references_are_invalid(refs: dict[str, str], needle: str) -> None:
    assert needle in refusal("AVRO", '"x.A"', refs)


@pytest.mark.parametrize("schema_type", ["XML", "", 5])
def test_unknown_schema_type_or_wrong_input_type(schema_type: object) -> None:
    with pytest.raises(InvalidSchemaError):
        parse_schema(schema_type, '"int"' if schema_type != "" else b'"int"')  # type: ignore[arg-type]


# ------------------------------------------------------------------------ normalization is a fixed point
@st.composite
def named_schemas(draw: st.DrawFn) -> dict:
    """Records nesting records and enums in assorted namespaces, later uses naming types by short name."""
    namespaces = ["", "a", "a.b", None]
    counter = iter(range(100))

    def record(depth: int, namespace: str | None) -> dict:
        fields = []
        for index in range(draw(st.integers(1, 3))):
            choice = draw(st.sampled_from(["int", "string", "record", "enum", "array", "union"]))
            if choice == "record" and depth < 3:
                kind: object = record(depth + 1, draw(st.sampled_from(namespaces)))
            elif choice == "enum":
                kind = {"type": "enum", "name": f"E{next(counter)}", "symbols": ["X", "Y"]}
            elif choice == "array":
                kind = {"type": "array", "items": draw(st.sampled_from(["long", {"type": "double"}]))}
            elif choice == "union":
                kind = ["null", "string"]
            else:
                kind = choice if choice in ("int", "string") else "bytes"
            fields.append(
                {"name": f"f{index}", "type": kind, **({"doc": "d"} if draw(st.booleans()) else {})}
            )
        schema = {"type": "record", "name": f"R{next(counter)}", "fields": fields}
        if namespace is not None:
            schema["namespace"] = namespace
        return schema

    return record(0, draw(st.sampled_from(namespaces)))


@settings(max_examples=150, deadline=None)
@given(schema=named_schemas())
def test_normalizing_twice_changes_nothing_and_keeps_the_fingerprint(schema: dict) -> None:
    first = avro(schema, normalize=True)
    second = parse_schema("AVRO", first.text, normalize=True)
    assert second.text == first.text
    assert second.fingerprint == first.fingerprint == avro(schema).fingerprint


def test_a_type_in_the_null_namespace_nested_in_a_namespace_stays_there() -> None:
    inner = {"type": "record", "name": "Inner", "namespace": "", "fields": [{"name": "x", "type": "int"}]}
    schema = {"type": "record", "name": "Outer", "namespace": "a", "fields": [{"name": "n", "type": inner}]}
    normalized = avro(schema, normalize=True)
    assert json.loads(normalized.text)["fields"][0]["type"]["namespace"] == ""
    assert parse_schema("AVRO", normalized.text).fingerprint == normalized.fingerprint
    assert "Inner" in normalized.raw["__named_schemas"]
