"""JSON Schema documents as Spark types, and JSON values shaped to them (and Spark types back).

Pure. ``object`` with ``properties`` -> struct (every field nullable: JSON may leave any out),
``object`` with only ``additionalProperties`` -> map<string, ...>, ``array`` -> array of
``items``, ``string`` -> string (``format: date-time`` -> timestamp, ``format: date`` -> date),
``integer`` -> long, ``number`` -> double, ``boolean`` -> boolean, ``$ref`` to ``#/...`` in the
same document followed; anything else (``oneOf``, several types, no type) -> string holding the
value's JSON text, so nothing is lost.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

Shaper = Callable[[Any], Any]
_SIMPLE: dict[str, DataType] = {
    "integer": LongType(),
    "number": DoubleType(),
    "boolean": BooleanType(),
    "string": StringType(),
}


class JsonSchemaTypeError(ValueError):
    """A JSON Schema Spark cannot represent (a reference that does not resolve or loops)."""


def _follow(schema: Any, root: Mapping[str, Any], seen: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
        ref = schema["$ref"]
        if ref in seen:
            raise JsonSchemaTypeError(
                f"$ref {ref} refers back to itself; Spark types cannot nest without end"
            )
        if not ref.startswith("#"):
            raise JsonSchemaTypeError(f"$ref {ref} points outside the schema; only #/... references are read")
        target: Any = root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise JsonSchemaTypeError(f"$ref {ref} does not resolve in the schema")
            target = target[part]
        schema, seen = target, (*seen, ref)
    return schema, seen


def _single_type(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        return kinds[0] if len(kinds) == 1 else None
    if kind is None and "properties" in schema:
        return "object"
    return kind if isinstance(kind, str) else None


def spark_type(schema: Any) -> DataType:
    """The Spark type of a whole JSON Schema document."""
    return _spark_type(schema, schema if isinstance(schema, dict) else {}, ())


def _spark_type(schema: Any, root: Mapping[str, Any], seen: tuple[str, ...]) -> DataType:
    schema, seen = _follow(schema, root, seen)
    if not isinstance(schema, dict):
        return StringType()
    kind = _single_type(schema)
    if kind == "object":
        properties = schema.get("properties")
        if isinstance(properties, dict) and properties:
            return StructType(
                [StructField(name, _spark_type(sub, root, seen), True) for name, sub in properties.items()]
            )
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return MapType(StringType(), _spark_type(extra, root, seen), True)
        return StringType()
    if kind == "array":
        items = schema.get("items")
        return ArrayType(_spark_type(items, root, seen) if isinstance(items, dict) else StringType(), True)
    if kind == "string":
        fmt = schema.get("format")
        if fmt == "date-time":
            return TimestampType()
        if fmt == "date":
            return DateType()
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    return StringType()


def shaper(data_type: DataType) -> Shaper:
    """A function from a parsed JSON value to what Arrow takes as ``data_type``.

    Fields the type does not name are dropped, missing ones are null, and a value of the wrong
    kind becomes null rather than failing the batch (the registry validated what was written).
    """
    if isinstance(data_type, StructType):
        fields = [(f.name, shaper(f.dataType)) for f in data_type.fields]

        def shape_struct(value: Any) -> Any:
            if not isinstance(value, dict):
                return None
            return {name: shape(value.get(name)) for name, shape in fields}

        return shape_struct
    if isinstance(data_type, MapType):
        shape_value = shaper(data_type.valueType)
        return lambda v: {k: shape_value(x) for k, x in v.items()} if isinstance(v, dict) else None
    if isinstance(data_type, ArrayType):
        shape_item = shaper(data_type.elementType)
        return lambda v: [shape_item(x) for x in v] if isinstance(v, list) else None
    if isinstance(data_type, StringType):
        return lambda v: v if isinstance(v, str) or v is None else json.dumps(v)
    if isinstance(data_type, TimestampType):
        return _parse_or_null(lambda v: datetime.datetime.fromisoformat(v.replace("Z", "+00:00")))
    if isinstance(data_type, DateType):
        return _parse_or_null(datetime.date.fromisoformat)
    if isinstance(data_type, BooleanType):
        return lambda v: v if isinstance(v, bool) else None
    if isinstance(data_type, LongType | IntegerType):
        return lambda v: v if isinstance(v, int) and not isinstance(v, bool) else None
    if isinstance(data_type, DoubleType | FloatType):
        return lambda v: float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
    return lambda v: v


def _parse_or_null(parse: Callable[[str], Any]) -> Shaper:
    def shape(value: Any) -> Any:
        if not isinstance(value, str):
            return None
        try:
            return parse(value)
        except ValueError:
            return None

    return shape


def json_schema_for(data_type: DataType) -> dict[str, Any]:
    """The JSON Schema a Spark type is written with (for the sink's registration)."""
    if isinstance(data_type, StructType):
        return {
            "type": "object",
            "properties": {
                f.name: _maybe_null(json_schema_for(f.dataType), f.nullable) for f in data_type.fields
            },
            "required": [f.name for f in data_type.fields if not f.nullable],
        }
    if isinstance(data_type, MapType):
        return {"type": "object", "additionalProperties": json_schema_for(data_type.valueType)}
    if isinstance(data_type, ArrayType):
        return {
            "type": "array",
            "items": _maybe_null(json_schema_for(data_type.elementType), data_type.containsNull),
        }
    if isinstance(data_type, TimestampType | TimestampNTZType):
        return {"type": "string", "format": "date-time"}
    if isinstance(data_type, DateType):
        return {"type": "string", "format": "date"}
    if isinstance(data_type, BooleanType):
        return {"type": "boolean"}
    if isinstance(data_type, LongType | IntegerType | ShortType | ByteType):
        return {"type": "integer"}
    if isinstance(data_type, DoubleType | FloatType | DecimalType):
        return {"type": "number"}
    if isinstance(data_type, StringType):
        return {"type": "string"}
    if isinstance(data_type, BinaryType):
        return {"type": "string", "contentEncoding": "base64"}
    raise JsonSchemaTypeError(f"Spark type {data_type.simpleString()} has no JSON Schema")


def _maybe_null(schema: dict[str, Any], nullable: bool) -> dict[str, Any]:
    if not nullable or "type" not in schema:
        return schema
    return {**schema, "type": [schema["type"], "null"]}


def to_json_value(value: Any) -> Any:
    """A value Arrow's ``to_pylist`` gives, as plain JSON (dates ISO 8601, binary base64, maps objects)."""
    import base64

    if isinstance(value, dict):
        return {k: to_json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(p, tuple) and len(p) == 2 for p in value):
            return {str(k): to_json_value(v) for k, v in value}  # an Arrow map
        return [to_json_value(v) for v in value]
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if hasattr(value, "as_tuple"):  # Decimal
        return float(value)
    return value
