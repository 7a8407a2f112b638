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


def open_model(schema: dict[str, Any], later: bool) -> bool:
    """An object that says nothing of the properties it does not list (Confluent's isOpenContentModel).

    Any patternProperties make it not open, even when no pattern matches the name in question; from
    2019-09 so does an unevaluatedProperties that is false or a schema with assertions (see leftover).
    """
    rest = leftover(schema.get("additionalProperties"), unevaluated(schema, "unevaluatedProperties", later))
    return is_open(rest) and not dict_at(schema, "patternProperties")


def partial_schema(schema: dict[str, Any], name: str, later: bool) -> Any:
    """The schema a partially open object gives an unlisted property: the first matching patternProperties,
    else additionalProperties when it is a schema, else (from 2019-09, additionalProperties absent or true)
    unevaluatedProperties when it is a schema; None when the object is closed to that name or open."""
    for pattern, sub in dict_at(schema, "patternProperties").items():
        try:
            if re.search(pattern, name):
                return sub
        except re.error:
            continue
    rest = leftover(schema.get("additionalProperties"), unevaluated(schema, "unevaluatedProperties", later))
    return None if rest is False or is_open(rest) else rest


def unevaluated(schema: dict[str, Any], keyword: str, later: bool) -> Any:
    """unevaluatedProperties / unevaluatedItems as Confluent reads them, None where it does not.

    Only its json-sKema translation (2019-09 and 2020-12) hands them to ObjectSchemaDiff/ArraySchemaDiff
    as schemas; up to draft 7 everit's loader keeps an unknown keyword as plain JSON, which they ignore.
    """
    return schema.get(keyword) if later else None


def leftover(rest: Any, uneval: Any) -> Any:
    """What a content model says of the properties or items it does not list: additionalProperties /
    additionalItems when it is false or a schema; when it is absent or true, the unevaluated keyword decides
    (false closes the model, true or an empty schema leaves it open, another schema makes it partially
    open). None or True for open, False for closed, else the covering schema."""
    if not is_open(rest) or uneval is None:
        return rest
    return None if is_empty(uneval) else uneval


def contains_bounds(schema: dict[str, Any], later: bool) -> dict[str, int | None]:
    """minContains / maxContains as Confluent compares them (ArraySchemaDiff's MIN_/MAX_CONTAINS_* types).

    Its json-sKema translation records them only beside `contains` (2019-09 on), minContains then
    defaulting to 1, and the diff compares their whole-number parts. Elsewhere both are None: not compared.
    """
    if not later or "contains" not in schema:
        return {"minContains": None, "maxContains": None}
    low, high = schema.get("minContains"), schema.get("maxContains")
    return {
        "minContains": int(low) if _is_number(low) else 1,
        "maxContains": int(high) if _is_number(high) else None,
    }


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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
