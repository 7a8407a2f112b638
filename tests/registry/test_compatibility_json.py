"""JSON Schema compatibility: one row per rule of Confluent's set (jsonschema referees in ..._referee.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from format_helpers import assert_both_directions, error_types

from sluice.registry.compatibility import check_compatibility
from sluice.registry.formats import parse_schema


def obj(
    props: dict[str, Any], *, required: list[str] | None = None, additional: Any = None, **extra: Any
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props, **extra}
    if required:
        schema["required"] = required
    if additional is not None:
        schema["additionalProperties"] = additional
    return schema


def errors(level: str, new: Any, *olds: Any, refs: dict[str, str] | None = None) -> list[str]:
    parsed = [parse_schema("JSON", json.dumps(schema), refs or {}) for schema in (*olds, new)]
    return error_types(check_compatibility(level, parsed[-1], parsed[:-1]))


STR, INT, NUM = {"type": "string"}, {"type": "integer"}, {"type": "number"}
D2020 = "https://json-schema.org/draft/2020-12/schema"

# (id, old, new, BACKWARD error types (new reads old data), FORWARD error types (old reads new data))
RULES = [
    ("same", obj({"a": STR}), obj({"a": STR}), [], []),
    (
        "description-changed",
        {"type": "string", "description": "x"},
        {"type": "string", "description": "y"},
        [],
        [],
    ),
    # A list of types is an anyOf of one schema per type: string -> anyOf passes (SUM_TYPE_EXTENDED); the
    # anyOf -> string way has no part to stand for the whole and is a change of kind.
    ("type-widened", STR, {"type": ["string", "null"]}, [], ["TYPE_CHANGED"]),
    ("integer-to-number", INT, NUM, [], ["TYPE_NARROWED"]),
    ("type-changed", STR, INT, ["TYPE_CHANGED"], ["TYPE_CHANGED"]),
    # {} is Confluent's EmptySchema, a kind apart from StringSchema: TYPE_CHANGED, not TYPE_NARROWED.
    ("type-added", {}, STR, ["TYPE_CHANGED"], []),
    (
        "closed-property-added",
        obj({"a": STR}, additional=False),
        obj({"a": STR, "b": INT}, additional=False),
        [],
        ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"],
    ),
    (
        "closed-required-property-added",
        obj({"a": STR}, additional=False),
        obj({"a": STR, "b": INT}, required=["b"], additional=False),
        ["REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"],
        ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"],
    ),
    (
        "closed-required-with-default",
        obj({"a": STR}, additional=False),
        obj({"a": STR, "b": {**INT, "default": 0}}, required=["b"], additional=False),
        [],
        ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"],
    ),
    # Confluent's current names; they pass only under its LENIENT policy, not the default STRICT one.
    (
        "open-property-added",
        obj({"a": STR}),
        obj({"a": STR, "b": INT}),
        ["OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"],
        [],
    ),
    (
        "open-required-property-added",
        obj({"a": STR}),
        obj({"a": STR, "b": INT}, required=["b"]),
        ["REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"],
        [],
    ),
    (
        "open-required-property-with-default-added",
        obj({"a": STR}),
        obj({"a": STR, "b": {**INT, "default": 0}}, required=["b"]),
        ["REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL"],
        [],
    ),
    # additionalProperties {} is a schema of additional properties, so the model is partially open.
    (
        "additional-properties-empty-schema-added",
        obj({"a": STR}),
        obj({"a": STR}, additional={}),
        ["ADDITIONAL_PROPERTIES_NARROWED"],
        [],
    ),
    (
        "additional-properties-true-to-empty",
        obj({"a": STR}, additional=True),
        obj({"a": STR}, additional={}),
        ["ADDITIONAL_PROPERTIES_NARROWED"],
        [],
    ),
    (
        "empty-additional-property-added",
        obj({"a": STR}, additional={}),
        obj({"a": STR, "b": INT}, additional={}),
        ["TYPE_CHANGED", "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"],
        [],
    ),
    (
        "empty-additional-required-added",
        obj({"a": STR}, additional={}),
        obj({"a": STR, "b": {}}, required=["b"], additional={}),
        ["REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"],
        [],
    ),
    # Any patternProperties make the model not open; a name no pattern matches is then closed to.
    (
        "pattern-properties-unmatched-removed",
        obj({"a": STR, "b": INT}, patternProperties={"^x": STR}),
        obj({"a": STR}, patternProperties={"^x": STR}),
        ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"],
        [],
    ),
    # A required name with no property schema is not compared (Confluent's compareRequired).
    (
        "required-without-property",
        obj({"a": STR}, required=["a"]),
        obj({"a": STR}, required=["z"]),
        [],
        ["REQUIRED_ATTRIBUTE_ADDED"],
    ),
    ("open-empty-property-added", obj({"a": STR}), obj({"a": STR, "b": {}}), [], []),
    # What made a property not covered is reported beside it, as Confluent keeps both differences.
    (
        "partially-open-covered",
        obj({"a": STR}, additional=STR),
        obj({"a": STR, "b": {"type": "string", "maxLength": 5}}, additional=STR),
        ["MAX_LENGTH_ADDED", "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"],
        [],
    ),
    (
        "partially-open-widened",
        obj({"a": STR}, additional=STR),
        obj({"a": STR, "b": {"type": ["string", "null"]}}, additional=STR),
        [],
        ["TYPE_CHANGED", "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"],
    ),
    (
        "pattern-properties-cover",
        obj({}, patternProperties={"^x": STR}, additional=False),
        obj({"xa": STR}, patternProperties={"^x": STR}, additional=False),
        [],
        [],
    ),
    (
        "closed-false-property-removed",
        obj({"a": STR, "b": False}, additional=False),
        obj({"a": STR}, additional=False),
        [],
        [],
    ),
    ("open-annotated-property-added", obj({"a": STR}), obj({"a": STR, "b": {"description": "any"}}), [], []),
    # Confluent has no difference type for propertyNames, so it is not compared.
    (
        "property-names-added",
        {"type": "object"},
        {"type": "object", "propertyNames": {"pattern": "^a"}},
        [],
        [],
    ),
    ("required-added", obj({"a": STR}), obj({"a": STR}, required=["a"]), ["REQUIRED_ATTRIBUTE_ADDED"], []),
    (
        "required-added-with-default",
        obj({"a": STR}),
        obj({"a": {**STR, "default": "x"}}, required=["a"]),
        [],
        [],
    ),
    (
        "additional-properties-closed",
        obj({"a": STR}),
        obj({"a": STR}, additional=False),
        ["ADDITIONAL_PROPERTIES_REMOVED"],
        [],
    ),
    (
        "additional-properties-narrowed",
        obj({"a": STR}),
        obj({"a": STR}, additional=STR),
        ["ADDITIONAL_PROPERTIES_NARROWED"],
        [],
    ),
    (
        "nested-property-type",
        obj({"a": obj({"x": STR})}),
        obj({"a": obj({"x": INT})}),
        ["TYPE_CHANGED"],
        ["TYPE_CHANGED"],
    ),
    ("enum-extended", {"enum": ["a", "b"]}, {"enum": ["a", "b", "c"]}, [], ["ENUM_ARRAY_NARROWED"]),
    (
        "enum-changed",
        {"enum": ["a", "b"]},
        {"enum": ["a", "c"]},
        ["ENUM_ARRAY_CHANGED"],
        ["ENUM_ARRAY_CHANGED"],
    ),
    # A type beside an enum makes an allOf of a string and an enum: against a lone string or enum, the
    # allOf's parts stand for the whole one way (PRODUCT_TYPE_NARROWED), and it is a change of kind the
    # other (an allOf of several parts never stands in as a whole).
    ("enum-added", STR, {**STR, "enum": ["a"]}, ["TYPE_CHANGED"], []),
    ("enum-given-its-type", {"enum": ["a", "b"]}, {**STR, "enum": ["a", "b"]}, ["TYPE_CHANGED"], []),
    ("enum-removed", {**STR, "enum": ["a"]}, STR, [], ["TYPE_CHANGED"]),
    # enum, const and each type are kinds apart, compared by kind alone, whatever values they allow.
    ("const-to-enum", {"const": 1}, {"enum": [1, 2]}, ["TYPE_CHANGED"], ["TYPE_CHANGED"]),
    ("enum-to-type", {"enum": ["a"]}, STR, ["TYPE_CHANGED"], ["TYPE_CHANGED"]),
    ("const-to-type", {"const": "a"}, STR, ["TYPE_CHANGED"], ["TYPE_CHANGED"]),
    ("const-changed", {"const": "a"}, {"const": "b"}, ["ENUM_ARRAY_CHANGED"], ["ENUM_ARRAY_CHANGED"]),
    ("boolean-to-null", {"type": "boolean"}, {"type": "null"}, ["TYPE_CHANGED"], ["TYPE_CHANGED"]),
    # An object keyword without a type is still an object: requiring the type is no difference.
    ("object-type-declared", {"properties": {"a": STR}}, obj({"a": STR}), [], []),
    # Keywords of another kind beside a type make an allOf of both kinds.
    ("length-beside-integer", INT, {**INT, "maxLength": 3}, ["TYPE_CHANGED"], []),
    (
        "types-widened",
        {"type": ["string", "null"]},
        {"type": ["string", "null", "integer"]},
        [],
        ["SUM_TYPE_NARROWED"],
    ),
    # An allOf of a string and an enum against an anyOf of string and null: allOf -> anyOf widens the
    # criterion (COMBINED_TYPE_EXTENDED) but the enum has no part of its own to pair with.
    (
        "enum-and-type-to-types",
        {**STR, "enum": ["a"]},
        {"type": ["string", "null"]},
        ["COMBINED_TYPE_SUBSCHEMAS_CHANGED"],
        ["COMBINED_TYPE_CHANGED"],
    ),
    # Between combinations the criterion may widen (to anyOf, between ones of one part, one part to
    # oneOf, allOf to one part); then parts pair one to one (CombinedSchemaDiff).
    ("single-all-of-to-any-of", {"allOf": [STR]}, {"anyOf": [STR]}, [], []),
    ("single-one-of-to-all-of", {"oneOf": [STR]}, {"allOf": [STR]}, [], []),
    ("all-of-to-fewer-any-of", {"allOf": [NUM, STR]}, {"anyOf": [STR]}, [], ["COMBINED_TYPE_CHANGED"]),
    ("any-of-to-more-one-of", {"anyOf": [STR]}, {"oneOf": [NUM, STR]}, [], ["SUM_TYPE_NARROWED"]),
    (
        "all-of-parts-changed",
        {"allOf": [STR, {"enum": ["a"]}]},
        {"allOf": [STR, {"enum": ["b"]}]},
        ["COMBINED_TYPE_SUBSCHEMAS_CHANGED"],
        ["COMBINED_TYPE_SUBSCHEMAS_CHANGED"],
    ),
    (
        "all-of-parts-reordered",
        {"allOf": [STR, {"enum": ["a"]}]},
        {"allOf": [{"enum": ["a", "b"]}, STR]},
        [],
        ["COMBINED_TYPE_SUBSCHEMAS_CHANGED"],
    ),
    (
        "all-of-to-one-of-more",
        {"allOf": [NUM]},
        {"oneOf": [NUM, STR]},
        [],
        ["COMBINED_TYPE_CHANGED"],
    ),
    ("enum-true-is-not-1", {"enum": [True]}, {"enum": [1]}, ["ENUM_ARRAY_CHANGED"], ["ENUM_ARRAY_CHANGED"]),
    ("max-length-added", STR, {**STR, "maxLength": 5}, ["MAX_LENGTH_ADDED"], []),
    ("max-length-decreased", {**STR, "maxLength": 9}, {**STR, "maxLength": 5}, ["MAX_LENGTH_DECREASED"], []),
    ("min-length-increased", {**STR, "minLength": 1}, {**STR, "minLength": 2}, ["MIN_LENGTH_INCREASED"], []),
    ("pattern-added", STR, {**STR, "pattern": "^a"}, ["PATTERN_ADDED"], []),
    (
        "pattern-changed",
        {**STR, "pattern": "^a"},
        {**STR, "pattern": "^b"},
        ["PATTERN_CHANGED"],
        ["PATTERN_CHANGED"],
    ),
    ("minimum-increased", {**NUM, "minimum": 0}, {**NUM, "minimum": 1}, ["MINIMUM_INCREASED"], []),
    ("maximum-added", NUM, {**NUM, "maximum": 1}, ["MAXIMUM_ADDED"], []),
    (
        "exclusive-minimum",
        {**NUM, "minimum": 0},
        {**NUM, "exclusiveMinimum": 0},
        ["EXCLUSIVE_MINIMUM_INCREASED"],
        [],
    ),
    (
        "draft4-exclusive",
        {"$schema": "http://json-schema.org/draft-04/schema#", "minimum": 0},
        {"$schema": "http://json-schema.org/draft-04/schema#", "minimum": 0, "exclusiveMinimum": True},
        ["MINIMUM_INCREASED"],
        [],
    ),
    ("multiple-of-reduced", {**NUM, "multipleOf": 4}, {**NUM, "multipleOf": 2}, [], ["MULTIPLE_OF_EXPANDED"]),
    (
        "multiple-of-changed",
        {**NUM, "multipleOf": 0.3},
        {**NUM, "multipleOf": 0.2},
        ["MULTIPLE_OF_CHANGED"],
        ["MULTIPLE_OF_CHANGED"],
    ),
    (
        "items-type",
        {"type": "array", "items": STR},
        {"type": "array", "items": INT},
        ["TYPE_CHANGED"],
        ["TYPE_CHANGED"],
    ),
    ("max-items-added", {"type": "array"}, {"type": "array", "maxItems": 3}, ["MAX_ITEMS_ADDED"], []),
    (
        "unique-items-added",
        {"type": "array"},
        {"type": "array", "uniqueItems": True},
        ["UNIQUE_ITEMS_ADDED"],
        [],
    ),
    (
        "tuple-item-added-open",
        {"type": "array", "items": [STR]},
        {"type": "array", "items": [STR, INT]},
        ["ITEM_ADDED_TO_OPEN_CONTENT_MODEL"],
        [],
    ),
    (
        "tuple-item-added-closed",
        {"type": "array", "items": [STR], "additionalItems": False},
        {"type": "array", "items": [STR, INT], "additionalItems": False},
        [],
        ["ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"],
    ),
    # The schema for every item and the tuple positions are separate keywords, as in Confluent.
    (
        "array-to-tuple",
        {"type": "array", "items": INT},
        {"type": "array", "items": [INT]},
        ["ITEM_ADDED_TO_OPEN_CONTENT_MODEL"],
        ["SCHEMA_ADDED"],
    ),
    ("items-added", {"type": "array"}, {"type": "array", "items": {}}, ["SCHEMA_ADDED"], []),
    ("items-true-added-draft7", {"type": "array"}, {"type": "array", "items": True}, ["SCHEMA_ADDED"], []),
    # From 2019-09 Confluent reads a boolean items as what it says of additional items: true is nothing.
    (
        "items-true-added-2020",
        {"$schema": D2020, "type": "array"},
        {"$schema": D2020, "type": "array", "items": True},
        [],
        [],
    ),
    (
        "items-false-added-2020",
        {"$schema": D2020, "type": "array", "items": True},
        {"$schema": D2020, "type": "array", "items": False},
        ["ADDITIONAL_ITEMS_REMOVED"],
        [],
    ),
    (
        "closed-false-item-removed",
        {"type": "array", "items": [STR, False], "additionalItems": False},
        {"type": "array", "items": [STR], "additionalItems": False},
        [],
        [],
    ),
    (
        "prefix-items-2020",
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "prefixItems": [STR], "items": False},
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "prefixItems": [INT], "items": False},
        ["TYPE_CHANGED"],
        ["TYPE_CHANGED"],
    ),
    (
        "one-of-extended",
        {"oneOf": [STR, INT]},
        {"oneOf": [STR, INT, {"type": "null"}]},
        [],
        ["SUM_TYPE_NARROWED"],
    ),
    ("single-to-one-of", STR, {"oneOf": [STR, INT]}, [], ["TYPE_CHANGED"]),
    (
        "all-of-extended",
        {"allOf": [obj({"a": STR})]},
        {"allOf": [obj({"a": STR}), {"required": ["a"]}]},
        ["PRODUCT_TYPE_EXTENDED"],
        [],
    ),
    ("any-of-to-one-of", {"anyOf": [STR, INT]}, {"oneOf": [STR, INT]}, ["COMBINED_TYPE_CHANGED"], []),
    ("not-added", STR, {**STR, "not": {"enum": ["x"]}}, ["TYPE_CHANGED"], []),
    ("not-extended", {"not": {"enum": ["x"]}}, {"not": {"enum": ["x", "y"]}}, ["NOT_TYPE_EXTENDED"], []),
    (
        "dependency-added",
        obj({"a": STR, "b": STR}),
        obj({"a": STR, "b": STR}, dependencies={"a": ["b"]}),
        ["DEPENDENCY_ARRAY_ADDED"],
        [],
    ),
    # false, the empty schema (true, {}, annotations only) and the rest are kinds apart, as in Confluent.
    ("false-to-object", False, obj({"a": INT}, required=["a"], additional=False), [], ["TYPE_CHANGED"]),
    ("true-to-false", True, False, ["TYPE_CHANGED"], []),
    ("not-true-to-false", {"not": True}, False, ["TYPE_CHANGED"], []),
    ("not-empty-to-not-true", {"not": {}}, {"not": True}, [], []),
    ("boolean-to-true", {"type": "boolean"}, True, [], ["TYPE_CHANGED"]),
    ("true-to-empty", True, {}, [], []),
    ("true-to-not", True, {"not": {}}, ["TYPE_CHANGED"], []),
    ("empty-to-object", {}, {"properties": {}}, ["TYPE_CHANGED"], []),
    ("annotated-to-string", {"description": "any"}, STR, ["TYPE_CHANGED"], []),
    ("property-true-to-false", obj({"a": True}), obj({"a": False}), ["TYPE_CHANGED"], []),
    (
        "ref-followed",
        {"definitions": {"x": STR}, "$ref": "#/definitions/x"},
        {"definitions": {"x": INT}, "$ref": "#/definitions/x"},
        ["TYPE_CHANGED"],
        ["TYPE_CHANGED"],
    ),
]


def up(props: dict[str, Any], uneval: Any = None, **keywords: Any) -> dict[str, Any]:
    """A 2020-12 object with these properties and, unless None, this unevaluatedProperties."""
    extra = {} if uneval is None else {"unevaluatedProperties": uneval}
    return {"$schema": D2020, "properties": props, **extra, **keywords}


def ui(prefix: list[Any], uneval: Any = None) -> dict[str, Any]:
    """A 2020-12 tuple with these positions and, unless None, this unevaluatedItems."""
    return {
        "$schema": D2020,
        "prefixItems": prefix,
        **({} if uneval is None else {"unevaluatedItems": uneval}),
    }


A, AB, AB_INT = {"a": STR}, {"a": STR, "b": STR}, {"a": STR, "b": INT}
GONE_CLOSED = ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"]
ADDED_UNCOVERED = ["TYPE_CHANGED", "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"]
GONE_UNCOVERED = ["TYPE_CHANGED", "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"]
# From 2019-09 unevaluatedProperties/Items stands in for an absent (or true) additionalProperties/Items when
# deciding what an added or dropped property or position means: false closes the model, a schema with
# assertions must cover the name or position, true or {} leave it open. It is also compared on its own.
RULES += [
    ("uneval-false-property-added", up(A, False), up(AB, False), [], GONE_CLOSED),
    (
        "uneval-false-required-added",
        up(A, False),
        up(AB, False, required=["b"]),
        ["REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"],
        GONE_CLOSED,
    ),
    ("uneval-schema-covers-property", up(A, STR), up(AB, STR), [], []),
    ("uneval-schema-misses-property", up(A, STR), up(AB_INT, STR), ADDED_UNCOVERED, GONE_UNCOVERED),
    ("uneval-true-open", up(A, True), up(AB, True), ["OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"], []),
    # additionalProperties, once a schema, decides alone which schema covers a name.
    (
        "uneval-behind-additional",
        up(A, False, additionalProperties=STR),
        up(AB_INT, False, additionalProperties=STR),
        ADDED_UNCOVERED,
        GONE_UNCOVERED,
    ),
    # Up to draft 7 Confluent's loader does not read the keyword: the model stays open.
    (
        "uneval-ignored-draft-7",
        {**obj(A), "unevaluatedProperties": False},
        {**obj(AB), "unevaluatedProperties": False},
        ["OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"],
        [],
    ),
    # Added where there was none: as true UNEVALUATED_PROPERTIES_NARROWED, as false ..._REMOVED.
    ("uneval-true-added", up(A), up(A, True), ["UNEVALUATED_PROPERTIES_NARROWED"], []),
    ("uneval-false-added", up(A), up(A, False), ["UNEVALUATED_PROPERTIES_REMOVED"], []),
    ("uneval-schema-changed", up(A, STR), up(A, INT), ["TYPE_CHANGED"], ["TYPE_CHANGED"]),
    ("uneval-items-cover-position", ui([STR], STR), ui([STR, STR], STR), [], []),
    (
        "uneval-items-miss-position",
        ui([STR, INT], STR),
        ui([STR], STR),
        ["TYPE_CHANGED", "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"],
        ["TYPE_CHANGED", "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"],
    ),
    (
        "uneval-items-false",
        ui([STR], False),
        ui([STR, INT], False),
        [],
        ["ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"],
    ),
    ("uneval-items-false-added", ui([STR]), ui([STR], False), ["UNEVALUATED_ITEMS_REMOVED"], []),
]


def nums(**keywords: Any) -> dict[str, Any]:
    """A 2020-12 array that must contain numbers."""
    return {"$schema": D2020, "type": "array", "contains": NUM, **keywords}


ARRAY_2020 = {"$schema": D2020, "type": "array"}
# minContains/maxContains count from 2019-09 and only beside contains, minContains then defaulting to 1;
# the contains schema itself is not compared (Confluent's ArraySchemaDiff has no difference type for it).
RULES += [
    ("min-contains-raised", nums(minContains=1), nums(minContains=2), ["MIN_CONTAINS_INCREASED"], []),
    ("max-contains-lowered", nums(maxContains=3), nums(maxContains=2), ["MAX_CONTAINS_DECREASED"], []),
    ("max-contains-added", nums(), nums(maxContains=2), ["MAX_CONTAINS_ADDED"], []),
    ("contains-added", ARRAY_2020, nums(), ["MIN_CONTAINS_ADDED"], []),
    ("min-contains-default", nums(), nums(minContains=1), [], []),
    ("contains-schema-not-compared", nums(), nums(contains=STR), [], []),
    ("min-contains-alone", ARRAY_2020, {**ARRAY_2020, "minContains": 2}, [], []),
]


@pytest.mark.parametrize(
    ("old", "new", "backward", "forward"), [r[1:] for r in RULES], ids=[r[0] for r in RULES]
)
def test_each_rule_in_both_directions(old: Any, new: Any, backward: list[str], forward: list[str]) -> None:
    assert_both_directions(errors, old, new, backward, forward)


def test_message_carries_the_json_path() -> None:
    old = parse_schema("JSON", json.dumps(obj({"a": obj({"x": STR})})))
    new = parse_schema("JSON", json.dumps(obj({"a": obj({"x": INT})})))
    [message] = check_compatibility("BACKWARD", new, [old])
    assert "#/properties/a/properties/x" in message and "new schema" in message


def test_references_are_followed_in_the_comparison() -> None:
    v1 = json.dumps({"type": "object", "properties": {"n": STR}})
    v2 = json.dumps({"type": "object", "properties": {"n": INT}})
    order = {"properties": {"c": {"$ref": "customer.json"}}}
    old = parse_schema("JSON", json.dumps(order), {"customer.json": v1})
    new = parse_schema("JSON", json.dumps(order), {"customer.json": v2})
    assert "TYPE_CHANGED" in check_compatibility("BACKWARD", new, [old])[0]


def test_recursive_schemas_terminate() -> None:
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}
    other = {**tree, "properties": {**tree["properties"], "v": STR}}
    assert errors("FULL", other, tree) == ["OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"]


def test_transitive_levels_check_every_version() -> None:
    v1, v2, v3 = {**STR, "maxLength": 3}, STR, {**STR, "maxLength": 5}
    assert errors("FORWARD", v3, v1, v2) == []
    assert errors("FORWARD_TRANSITIVE", v3, v1, v2) == ["MAX_LENGTH_DECREASED"]
    assert errors("BACKWARD_TRANSITIVE", v3, v1, v2) == ["MAX_LENGTH_ADDED"]


def test_keywords_beside_a_ref_count_from_draft_2019_09_only() -> None:
    def schema(draft: str, beside: dict[str, Any]) -> dict[str, Any]:
        return {"$schema": draft, "$defs": {"s": STR}, "properties": {"a": {"$ref": "#/$defs/s", **beside}}}

    draft7, draft2019 = (
        "http://json-schema.org/draft-07/schema#",
        "https://json-schema.org/draft/2019-09/schema",
    )
    assert errors("BACKWARD", schema(draft7, {"maxLength": 3}), schema(draft7, {})) == []
    assert errors("BACKWARD", schema(draft2019, {"maxLength": 3}), schema(draft2019, {})) == [
        "MAX_LENGTH_ADDED"
    ]


def test_recursive_refs_with_sibling_keywords_terminate() -> None:
    node = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"next": {"$ref": "#", "description": "the rest"}},
    }
    narrower = {**node, "additionalProperties": False}
    # Reported at the root and where the (re-described) root recurs, then the recursion stops.
    assert set(errors("BACKWARD", narrower, node)) == {"ADDITIONAL_PROPERTIES_REMOVED"}


def test_nested_alternatives_are_compared_in_bounded_time() -> None:
    import time

    # Eight alternatives per level, each pointing at the level below: 8**6 paths, 6 * 64 distinct pairs.
    definitions: dict[str, Any] = {"level0": {"type": "string"}}
    for level in range(1, 7):
        below = {"$ref": f"#/definitions/level{level - 1}"}
        alternatives = [{"type": "object", "properties": {f"p{i}": dict(below)}} for i in range(8)]
        definitions[f"level{level}"] = {"oneOf": alternatives}
    schema = {"definitions": definitions, "$ref": "#/definitions/level6"}
    other = json.loads(json.dumps(schema).replace('"string"', '"integer"'))
    started = time.process_time()
    # As many alternatives on each side, none paired: COMBINED_TYPE_SUBSCHEMAS_CHANGED (CombinedSchemaDiff).
    assert "COMBINED_TYPE_SUBSCHEMAS_CHANGED" in errors("BACKWARD", other, schema)
    assert time.process_time() - started < 5
