"""Avro compatibility: one row per resolution rule, the levels' directions, and fastavro as the referee."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from fastavro.read import SchemaResolutionError
from format_helpers import assert_both_directions, error_types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.registry.compatibility import LEVELS, check_compatibility
from sluice.registry.formats import parse_schema


def record(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "ns", "fields": list(fields), **extra}


def field(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def check(level: str, new: Any, *olds: Any) -> list[str]:
    parsed = [parse_schema("AVRO", json.dumps(schema)) for schema in (*olds, new)]
    return check_compatibility(level, parsed[-1], parsed[:-1])


COLOR = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}
COLOR_MORE = {**COLOR, "symbols": ["RED", "GREEN", "BLUE"]}

# (id, old, new, the error types under BACKWARD (new reads old), the error types under FORWARD (old reads new))
RULES = [
    ("same", record(field("a", "int")), record(field("a", "int")), [], []),
    (
        "add-field-no-default",
        record(field("a", "int")),
        record(field("a", "int"), field("b", "string")),
        ["READER_FIELD_MISSING_DEFAULT_VALUE"],
        [],
    ),
    (
        "add-field-with-default",
        record(field("a", "int")),
        record(field("a", "int"), field("b", "string", default="x")),
        [],
        [],
    ),
    (
        "remove-field-no-default",
        record(field("a", "int"), field("b", "int")),
        record(field("a", "int")),
        [],
        ["READER_FIELD_MISSING_DEFAULT_VALUE"],
    ),
    (
        "remove-field-with-default",
        record(field("a", "int"), field("b", "int", default=0)),
        record(field("a", "int")),
        [],
        [],
    ),
    ("int-to-long", record(field("a", "int")), record(field("a", "long")), [], ["TYPE_MISMATCH"]),
    ("int-to-double", record(field("a", "int")), record(field("a", "double")), [], ["TYPE_MISMATCH"]),
    ("long-to-float", record(field("a", "long")), record(field("a", "float")), [], ["TYPE_MISMATCH"]),
    ("float-to-double", record(field("a", "float")), record(field("a", "double")), [], ["TYPE_MISMATCH"]),
    ("long-to-int", record(field("a", "long")), record(field("a", "int")), ["TYPE_MISMATCH"], []),
    ("string-to-bytes", record(field("a", "string")), record(field("a", "bytes")), [], []),
    (
        "string-to-int",
        record(field("a", "string")),
        record(field("a", "int")),
        ["TYPE_MISMATCH"],
        ["TYPE_MISMATCH"],
    ),
    (
        "enum-symbol-added",
        record(field("c", COLOR)),
        record(field("c", COLOR_MORE)),
        [],
        ["MISSING_ENUM_SYMBOLS"],
    ),
    (
        "enum-symbol-removed",
        record(field("c", COLOR_MORE)),
        record(field("c", COLOR)),
        ["MISSING_ENUM_SYMBOLS"],
        [],
    ),
    (
        "enum-symbol-removed-with-default",
        record(field("c", COLOR_MORE)),
        record(field("c", {**COLOR, "default": "RED"})),
        [],
        [],
    ),
    (
        "enum-renamed",
        record(field("c", COLOR)),
        record(field("c", {**COLOR, "name": "Colour"})),
        ["NAME_MISMATCH"],
        ["NAME_MISMATCH"],
    ),
    (
        "enum-renamed-with-alias",
        record(field("c", COLOR)),
        record(field("c", {**COLOR, "name": "Colour", "aliases": ["Color"]})),
        [],
        ["NAME_MISMATCH"],
    ),
    (
        "record-renamed",
        record(field("a", "int")),
        record(field("a", "int"), name="S"),
        ["NAME_MISMATCH"],
        ["NAME_MISMATCH"],
    ),
    (
        "record-renamed-with-alias",
        record(field("a", "int")),
        record(field("a", "int"), name="S", aliases=["R"]),
        [],
        ["NAME_MISMATCH"],
    ),
    (
        "namespace-changed",
        record(field("a", "int")),
        {**record(field("a", "int")), "namespace": "other"},
        [],
        [],
    ),
    (
        "field-renamed-with-alias",
        record(field("a", "int")),
        record(field("b", "int", aliases=["a"])),
        [],
        ["READER_FIELD_MISSING_DEFAULT_VALUE"],
    ),
    (
        "fixed-size",
        record(field("f", {"type": "fixed", "name": "F", "size": 4})),
        record(field("f", {"type": "fixed", "name": "F", "size": 8})),
        ["FIXED_SIZE_MISMATCH"],
        ["FIXED_SIZE_MISMATCH"],
    ),
    (
        "fixed-renamed",
        record(field("f", {"type": "fixed", "name": "F", "size": 4})),
        record(field("f", {"type": "fixed", "name": "G", "size": 4})),
        ["NAME_MISMATCH"],
        ["NAME_MISMATCH"],
    ),
    ("make-nullable", record(field("a", "int")), record(field("a", ["null", "int"])), [], ["TYPE_MISMATCH"]),
    (
        "union-branch-added",
        record(field("a", ["null", "int"])),
        record(field("a", ["null", "int", "string"])),
        [],
        ["MISSING_UNION_BRANCH"],
    ),
    (
        "union-branch-removed",
        record(field("a", ["null", "int", "string"])),
        record(field("a", ["null", "int"])),
        ["MISSING_UNION_BRANCH"],
        [],
    ),
    (
        "union-branch-promoted",
        record(field("a", ["null", "int"])),
        record(field("a", ["null", "long"])),
        [],
        ["MISSING_UNION_BRANCH"],
    ),
    (
        "union-to-single",
        record(field("a", ["null", "int"])),
        record(field("a", "int")),
        ["TYPE_MISMATCH"],
        [],
    ),
    (
        "array-items",
        record(field("a", {"type": "array", "items": "int"})),
        record(field("a", {"type": "array", "items": "long"})),
        [],
        ["TYPE_MISMATCH"],
    ),
    (
        "map-values",
        record(field("a", {"type": "map", "values": "string"})),
        record(field("a", {"type": "map", "values": "int"})),
        ["TYPE_MISMATCH"],
        ["TYPE_MISMATCH"],
    ),
    (
        "array-to-map",
        record(field("a", {"type": "array", "items": "int"})),
        record(field("a", {"type": "map", "values": "int"})),
        ["TYPE_MISMATCH"],
        ["TYPE_MISMATCH"],
    ),
    (
        "nested-record-field-added",
        record(field("n", record(field("x", "int"), name="N"))),
        record(field("n", record(field("x", "int"), field("y", "int"), name="N"))),
        ["READER_FIELD_MISSING_DEFAULT_VALUE"],
        [],
    ),
    (
        "recursive",
        record(field("next", ["null", "R"], default=None)),
        record(field("next", ["null", "R"], default=None), field("v", "int", default=0)),
        [],
        [],
    ),
    (
        "logical-type-ignored",
        record(field("d", {"type": "int", "logicalType": "date"})),
        record(field("d", "int")),
        [],
        [],
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "backward", "forward"), [r[1:] for r in RULES], ids=[r[0] for r in RULES]
)
def test_each_resolution_rule_in_both_directions(
    old: Any, new: Any, backward: list[str], forward: list[str]
) -> None:
    assert_both_directions(lambda *args: error_types(check(*args)), old, new, backward, forward)


def test_message_names_the_problem_the_field_and_the_path() -> None:
    old = record(field("a", "int"), field("n", record(field("x", "int"), name="N")))
    new = record(field("a", "int"), field("n", record(field("x", "int"), field("y", "string"), name="N")))
    [message] = check("BACKWARD", new, old)
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in message
    assert "'y'" in message and "/fields/1/type/fields/1" in message and "new schema" in message


def test_non_transitive_levels_check_only_the_newest_version() -> None:
    v1 = record(field("a", "int"))
    v2 = record(field("a", "int"), field("b", "int", default=0))
    v3 = record(field("a", "int"), field("b", "int"))  # no default: v1 data lacks b, v2 data has it
    assert check("BACKWARD", v3, v1, v2) == []
    assert check("FULL", v3, v1, v2) == []
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in check("BACKWARD_TRANSITIVE", v3, v1, v2)[0]
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in check("FULL_TRANSITIVE", v3, v1, v2)[0]


def test_forward_transitive_checks_that_every_old_version_reads_the_new_one() -> None:
    v1 = record(field("a", "int"), field("b", "int"))
    v2 = record(field("a", "int"), field("b", "int", default=0))
    v3 = record(field("a", "int"))
    assert check("FORWARD", v3, v1, v2) == []
    assert len(check("FORWARD_TRANSITIVE", v3, v1, v2)) == 1


def test_first_version_and_unknown_level() -> None:
    only = parse_schema("AVRO", json.dumps(record(field("a", "int"))))
    assert all(check_compatibility(level, only, []) == [] for level in LEVELS)
    with pytest.raises(ValueError, match="unknown compatibility level"):
        check_compatibility("SIDEWAYS", only, [only])


def test_schemas_of_different_types_are_incompatible() -> None:
    from dataclasses import replace

    avro_schema = parse_schema("AVRO", '"string"')
    other = replace(avro_schema, schema_type="JSON")
    assert "SCHEMA_TYPE_MISMATCH" in check_compatibility("BACKWARD", avro_schema, [other])[0]
    assert check_compatibility("NONE", avro_schema, [other]) == []


# ---------------------------------------------------------------------------------- fastavro as the referee
FIELD_TYPES = [
    "int",
    "long",
    "float",
    "double",
    "string",
    "bytes",
    "boolean",
    ["null", "int"],
    ["null", "string"],
    COLOR,
    COLOR_MORE,
    {**COLOR, "default": "GREEN"},
    {"type": "array", "items": "int"},
    {"type": "map", "values": ["null", "long"]},
]
DEFAULTS: dict[str, Any] = {
    "int": 1,
    "long": 2,
    "float": 1.5,
    "double": 2.5,
    "string": "s",
    "bytes": "b",
    "boolean": True,
}


def default_for(type_: Any) -> Any:
    if isinstance(type_, list):
        return None
    if isinstance(type_, dict):
        return {"array": [], "map": {}}.get(type_["type"]) if "symbols" not in type_ else type_["symbols"][0]
    return DEFAULTS[type_]


@st.composite
def record_schemas(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=5, unique=True))
    fields = []
    for name in names:
        type_ = draw(st.sampled_from(FIELD_TYPES))
        if (
            isinstance(type_, dict)
            and "symbols" in type_
            and any("symbols" in f["type"] for f in fields if isinstance(f["type"], dict))
        ):
            type_ = "int"  # a named type is defined once per schema
        entry = field(name, type_)
        if draw(st.booleans()):
            entry["default"] = default_for(type_)
        fields.append(entry)
    return record(*fields)


def value_for(type_: Any, draw: st.DrawFn) -> Any:
    if isinstance(type_, list):
        return draw(st.sampled_from([None, value_for(type_[1], draw)]))
    if isinstance(type_, dict) and type_["type"] == "array":
        return [value_for(type_["items"], draw) for _ in range(draw(st.integers(0, 2)))]
    if isinstance(type_, dict) and type_["type"] == "map":
        return {
            key: value_for(type_["values"], draw)
            for key in draw(st.lists(st.sampled_from("xyz"), max_size=2))
        }
    if isinstance(type_, dict):
        return draw(st.sampled_from(type_["symbols"]))
    strategies: dict[str, st.SearchStrategy[Any]] = {
        "int": st.integers(-(2**31), 2**31 - 1),
        "long": st.integers(-(2**63), 2**63 - 1),
        "float": st.floats(width=32, allow_nan=False),
        "double": st.floats(allow_nan=False),
        "string": st.text(max_size=5),
        # The specification promotes bytes to string; that reads only UTF-8 (fastavro refuses anything else).
        "bytes": st.text(max_size=5).map(str.encode),
        "boolean": st.booleans(),
    }
    return draw(strategies[type_])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(old=record_schemas(), new=record_schemas(), data=st.data())
def test_whenever_the_check_says_backward_fastavro_reads_old_data_with_the_new_schema(
    old: dict[str, Any], new: dict[str, Any], data: st.DataObject
) -> None:
    writer = parse_schema("AVRO", json.dumps(old))
    reader = parse_schema("AVRO", json.dumps(new))
    problems = check_compatibility("BACKWARD", reader, [writer])
    value = {f["name"]: value_for(f["type"], data.draw) for f in old["fields"]}
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, writer.raw, value)
    buffer.seek(0)
    if not problems:
        decoded = fastavro.schemaless_reader(buffer, writer.raw, reader.raw)
        assert set(decoded) == {f["name"] for f in new["fields"]}
        return
    kinds = {message.split("'")[1] for message in problems}
    if kinds == {"READER_FIELD_MISSING_DEFAULT_VALUE"}:
        # This breaks every record, whatever its values: fastavro must refuse too.
        with pytest.raises(SchemaResolutionError):
            fastavro.schemaless_reader(buffer, writer.raw, reader.raw)


def test_a_named_pair_found_incompatible_inside_a_union_stays_incompatible_elsewhere() -> None:
    inner_old = record(field("x", "int"), name="In")
    inner_new = record(field("x", "int"), field("y", "int"), name="In")  # y has no default
    old = record(field("u", ["null", inner_old]), field("v", "ns.In"))
    new = record(field("u", ["null", inner_new]), field("v", "ns.In"))
    messages = check("BACKWARD", new, old)
    assert any("MISSING_UNION_BRANCH" in m for m in messages)
    assert any("READER_FIELD_MISSING_DEFAULT_VALUE" in m for m in messages)
