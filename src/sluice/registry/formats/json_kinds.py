"""The kind of a JSON Schema node, as Confluent's loaders build it before its compatibility diff runs.

Confluent does not diff JSON Schema text: its loaders (everit's SchemaLoader up to draft 7, its own
json-sKema translation from 2019-09) first turn each node into one schema object per kind of keyword
(enum, const, not, each of allOf/anyOf/oneOf, one per declared type, then string, number, object, array
and if/then/else keywords left without a declared type). A node with keywords of several kinds becomes
an allOf of those parts, and a list of types an anyOf of one part per type. SchemaDiff then compares
two nodes of different kinds by kind alone (TYPE_CHANGED), so this split decides what is compared with
what: {"enum": [...]} against {"type": "string"} is a change of kind, and {"type": "string", "enum":
[...]} is an allOf of a string and an enum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .json_keywords import is_empty

COMBINATORS = ("allOf", "anyOf", "oneOf")

_STRING = ("minLength", "maxLength", "pattern", "format")
_NUMBER = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_OBJECT = (
    *("properties", "required", "minProperties", "maxProperties", "dependencies", "patternProperties"),
    *("additionalProperties", "propertyNames", "dependentRequired", "dependentSchemas"),
    "unevaluatedProperties",
)
_ARRAY = (
    *("items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains"),
    *("minContains", "maxContains", "unevaluatedItems"),
)
_CONDITIONAL = ("if", "then", "else")

# A declared type, the kind it makes and the keywords it takes with it. integer and number are one kind
# (everit's NumberSchema); which of the two is compared as TYPE_NARROWED / TYPE_EXTENDED within it.
_TYPES: dict[str, tuple[str, tuple[str, ...]]] = {
    "string": ("string", _STRING),
    "integer": ("number", _NUMBER),
    "number": ("number", _NUMBER),
    "object": ("object", _OBJECT),
    "array": ("array", _ARRAY),
    "boolean": ("boolean", ()),
    "null": ("null", ()),
}
# Keywords no declared type took, in the order everit's PropertySnifferSchemaExtractor looks for them.
_SNIFFED = (("array", _ARRAY), ("object", _OBJECT), ("number", _NUMBER), ("string", _STRING))


@dataclass(frozen=True)
class Shape:
    """kind: false, empty, enum, const, not, string, number, object, array, boolean, null, conditional,
    or a combinator (allOf/anyOf/oneOf) whose parts are subs."""

    kind: str
    subs: tuple[Any, ...] = ()

    @property
    def combined(self) -> bool:
        return self.kind in COMBINATORS


def shape(schema: Any, draft: int) -> Shape:
    """The kind of a dereferenced node in a draft (4, 6, 7; 2019 for 2019-09 and later).

    A node of one kind is compared as it stands; the parts of a node of several kinds are new dicts that
    hold only that kind's keywords. Draft 4 has no const and only draft 7 on has if/then/else, so the
    loader makes nothing of them there.
    """
    if schema is False:
        return Shape("false")
    if not isinstance(schema, dict) or is_empty(schema):
        return Shape("empty")
    parts: list[tuple[str, Any]] = []
    if "enum" in schema:
        parts.append(("enum", {"enum": schema["enum"]}))
    for combinator in COMBINATORS:
        if isinstance(schema.get(combinator), list):
            parts.append((combinator, {combinator: schema[combinator]}))
    if "not" in schema:
        parts.append(("not", {"not": schema["not"]}))
    if "const" in schema and draft > 4:
        parts.append(("const", {"const": schema["const"]}))
    taken: set[str] = set()
    declared = schema.get("type")
    if isinstance(declared, str) and declared in _TYPES:
        kind, keywords = _TYPES[declared]
        taken.update(keywords)
        parts.append((kind, _pick(schema, declared, keywords)))
    elif isinstance(declared, list):
        # Even a list of one type is an anyOf (of one), which SchemaDiff compares as its only part.
        alternatives = [t for t in dict.fromkeys(declared) if isinstance(t, str) and t in _TYPES]
        for name in alternatives:
            taken.update(_TYPES[name][1])
        subs = [_pick(schema, name, _TYPES[name][1]) for name in alternatives]
        parts.append(("anyOf", {"anyOf": subs}))
    for kind, keywords in _SNIFFED:
        if not taken.intersection(keywords) and any(k in schema for k in keywords):
            parts.append((kind, _pick(schema, None, keywords)))
    if draft >= 7 and any(k in schema for k in _CONDITIONAL):
        parts.append(("conditional", _pick(schema, None, _CONDITIONAL)))
    if not parts:  # keywords of no kind (a $dynamicRef, const in draft 4): everit's EmptySchema
        return Shape("empty")
    if len(parts) > 1:
        return Shape("allOf", tuple(node for _, node in parts))
    kind, node = parts[0]
    if kind in COMBINATORS:
        return Shape(kind, tuple(node[kind]))
    return Shape(kind)


def _pick(schema: dict[str, Any], declared: str | None, keywords: tuple[str, ...]) -> dict[str, Any]:
    part = {k: schema[k] for k in keywords if k in schema}
    if declared is not None:
        part["type"] = declared
    return part
