"""Avro's JSON encoding of a value, checked against its schema before it is read (the avro embedded format).

Confluent's REST Proxy reads a record's key or value with Avro's JsonDecoder: a union value is null or an object
naming its branch (`{"string": "x"}`), bytes and fixed are strings. fastavro's JSON reader trusts its input and
fails inside with Python's own words (`'str' object has no attribute 'popitem'`), or not at all; this says
where and how a value departs from the encoding instead. Pure code over a schema parsed by fastavro.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

_INT32, _INT64 = 2**31, 2**63


def _is_int(value: Any, bound: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -bound <= value < bound


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


PRIMITIVES: dict[str, Callable[[Any], bool]] = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "int": lambda v: _is_int(v, _INT32),
    "long": lambda v: _is_int(v, _INT64),
    "float": _is_number,
    "double": _is_number,
    "bytes": lambda v: isinstance(v, str),
    "string": lambda v: isinstance(v, str),
}


def _show(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def branch_name(schema: Any) -> str:
    """The name a union branch goes by in Avro's JSON encoding: a primitive's or a named type's full name,
    `array` or `map`."""
    if isinstance(schema, str):
        return schema
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            return str(schema.get("name"))
        return str(kind)
    return "union"


def mismatch(schema: Any, value: Any, named: Mapping[str, Any], path: str = "") -> str | None:
    """Where and why `value` is not `schema` in Avro's JSON encoding, or None. `named`: full name -> the
    definition, for named types that a parsed schema refers to by name."""
    where = path or "the value"
    if isinstance(schema, str):
        check = PRIMITIVES.get(schema)
        if check is not None:
            return None if check(value) else f"{where}: expected {schema}, got {_show(value)}"
        definition = named.get(schema)
        return None if definition is None else mismatch(definition, value, named, path)
    if isinstance(schema, list):
        return _union(schema, value, named, path)
    kind = schema.get("type")
    if kind in PRIMITIVES:  # a primitive with a logical type or properties
        return mismatch(kind, value, named, path)
    if kind in ("record", "error"):
        if not isinstance(value, dict):
            return f"{where}: expected an object (record {schema.get('name')}), got {_show(value)}"
        for field in schema.get("fields", []):
            name = field["name"]
            if name in value:
                found = mismatch(field["type"], value[name], named, f"{path}.{name}" if path else name)
                if found:
                    return found
            elif "default" not in field:
                return f"{path + '.' if path else ''}{name}: missing, and the field has no default"
        return None
    if kind == "enum":
        if value in schema.get("symbols", []):
            return None
        return f"{where}: {_show(value)} is not a symbol of enum {schema.get('name')}"
    if kind == "fixed":
        if isinstance(value, str) and len(value) == schema.get("size"):
            return None
        return f"{where}: expected a string of {schema.get('size')} characters (fixed), got {_show(value)}"
    if kind == "array":
        if not isinstance(value, list):
            return f"{where}: expected an array, got {_show(value)}"
        for index, item in enumerate(value):
            found = mismatch(schema["items"], item, named, f"{path}[{index}]")
            if found:
                return found
        return None
    if kind == "map":
        if not isinstance(value, dict):
            return f"{where}: expected an object (map), got {_show(value)}"
        for key, item in value.items():
            found = mismatch(schema["values"], item, named, f"{path}[{json.dumps(key)}]")
            if found:
                return found
        return None
    return mismatch(kind, value, named, path) if kind is not None else None


def _union(branches: list[Any], value: Any, named: Mapping[str, Any], path: str) -> str | None:
    names = [branch_name(b) for b in branches]
    if value is None:
        return None if "null" in names else f"{path or 'the value'}: null is not a branch of {names}"
    if isinstance(value, dict) and len(value) == 1:
        ((name, inner),) = value.items()
        if name in names:
            return mismatch(branches[names.index(name)], inner, named, f"{path}.{name}" if path else name)
    example = next((n for n in names if n != "null"), "null")
    return (
        f"{path or 'the value'}: a union value is null or an object naming its branch, as in "
        f'{{"{example}": ...}} (Avro\'s JSON encoding; the branches are {names}); got {_show(value)}'
    )
