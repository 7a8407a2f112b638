"""What a JSON Schema node says, keyword by keyword, for the compatibility check.

Whether it is empty, its enum values, its numeric bounds, what it says about properties it does not
list and how its array items are laid out, across drafts 4 to 2020-12.
"""

from __future__ import annotations

import re
from typing import Any

# The keywords that give a schema a kind of its own (string, number, object, array, enum, not, a combination,
# a condition...). A schema with none of them (true, {}, or annotations only) is the "empty" schema, which
# Confluent keeps apart from every other kind, as it keeps `false` apart.
ASSERTIONS = frozenset(
    {
        *("type", "enum", "const", "not", "allOf", "anyOf", "oneOf", "if", "then", "else"),
        *("$ref", "$dynamicRef", "$recursiveRef", "format", "pattern", "minLength", "maxLength"),
        *("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
        *("properties", "patternProperties", "additionalProperties", "unevaluatedProperties", "required"),
        *("propertyNames", "dependencies", "dependentRequired", "dependentSchemas"),
        *("minProperties", "maxProperties", "items", "prefixItems", "additionalItems", "unevaluatedItems"),
        *("contains", "minContains", "maxContains", "minItems", "maxItems", "uniqueItems"),
    }
)


def is_open(rest: Any) -> bool:
    """additionalProperties / additionalItems absent or true.

    A schema there, even the empty one, makes the content model partially open: Confluent's loaders keep
    `{}` as a schema of additional properties, and its isOpenContentModel asks for none at all, so absent
    -> {} is ADDITIONAL_PROPERTIES_NARROWED and a property added under {} must be covered by it.
    """
    return rest is None or rest is True


def is_empty(schema: Any) -> bool:
    """true, {} or a schema of annotations only: what Confluent's loader makes a TrueSchema or EmptySchema."""
    return schema is True or (isinstance(schema, dict) and not ASSERTIONS.intersection(schema))


def enum_values(schema: dict[str, Any]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    values = schema.get("enum")
    return values if isinstance(values, list) else None


def numeric_bound(schema: dict[str, Any], lower: bool) -> tuple[float, bool, str] | None:
    """The effective (value, exclusive, keyword) lower or upper bound, in draft 4 or later form."""
    plain, exclusive = ("minimum", "exclusiveMinimum") if lower else ("maximum", "exclusiveMaximum")
    candidates: list[tuple[float, bool, str]] = []
    if isinstance(schema.get(plain), (int, float)):
        candidates.append((schema[plain], schema.get(exclusive) is True, plain))
    if isinstance(schema.get(exclusive), (int, float)) and not isinstance(schema.get(exclusive), bool):
        candidates.append((schema[exclusive], True, exclusive))
    if not candidates:
        return None
    return max(candidates, key=lambda c: (c[0] if lower else -c[0], c[1]))


def open_model(schema: dict[str, Any]) -> bool:
    """An object that says nothing of the properties it does not list (Confluent's isOpenContentModel).

    Any patternProperties make it not open, even when no pattern matches the name in question.
    """
    return is_open(schema.get("additionalProperties")) and not dict_at(schema, "patternProperties")


def partial_schema(schema: dict[str, Any], name: str) -> Any:
    """The schema a partially open object gives an unlisted property: the first matching patternProperties,
    else additionalProperties when it is a schema; None when the object is closed to that name."""
    for pattern, sub in dict_at(schema, "patternProperties").items():
        try:
            if re.search(pattern, name):
                return sub
        except re.error:
            continue
    rest = schema.get("additionalProperties")
    return None if rest is False or is_open(rest) else rest


def array_shape(schema: dict[str, Any], boolean_items: bool) -> tuple[Any, list[Any], Any]:
    """(the schema for every item or None, the tuple positions, the schema for items after them or None).

    Across the 2019-09/2020-12 change: prefixItems with items, or items as a list with additionalItems.
    boolean_items is how Confluent reads 2019-09 and 2020-12 (its json-sKema translation): a boolean
    `items` speaks of the additional items, so `items: true` is no schema at all (adding it is no
    SCHEMA_ADDED) and `items: false` closes the array (ADDITIONAL_ITEMS_REMOVED). Up to draft 7 its
    loader keeps `items: true` as a schema for every item.
    """
    if isinstance(schema.get("prefixItems"), list):
        return None, schema["prefixItems"], schema.get("items")
    items = schema.get("items")
    if isinstance(items, list):
        return None, items, schema.get("additionalItems")
    if boolean_items and isinstance(items, bool):
        return None, [], None if items else False
    return items, [], schema.get("additionalItems")


def has_default(schema: Any) -> bool:
    return isinstance(schema, dict) and "default" in schema


def dict_at(schema: dict[str, Any], keyword: str) -> dict[str, Any]:
    value = schema.get(keyword)
    return value if isinstance(value, dict) else {}
