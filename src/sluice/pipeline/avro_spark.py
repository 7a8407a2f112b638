"""Avro schemas as Spark types and back, following what spark-avro's ``from_avro`` / ``to_avro`` give.

Pure: no registry, no broker. Reading (Avro -> Spark):

- records -> struct (a field is nullable only when it is a union with null), arrays -> array,
  maps -> map<string, ...>, enums -> string, fixed and bytes -> binary;
- logical types: ``date`` -> date, ``timestamp-millis``/``-micros`` -> timestamp,
  ``local-timestamp-*`` -> timestamp_ntz, ``decimal`` -> decimal(p, s), ``uuid`` -> string,
  ``time-millis`` -> int and ``time-micros`` -> long (time of day, as spark-avro);
- unions: ``[null, X]`` -> nullable X; only ints and longs -> long; only floats and doubles ->
  double; any other union -> struct<member0, member1, ...> of its non-null branches, all
  nullable, exactly one set per value.

Writing (Spark -> Avro) derives a schema for a DataFrame column the way ``to_avro`` does, except
that nullable fields become ``["null", T]`` with ``"default": null`` (spark-avro writes
``[T, "null"]`` without a default), so a field added later as nullable stays backward compatible.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
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

Adapter = Callable[[Any], Any]
_PRIMITIVES: dict[str, DataType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
}
_LOGICAL: dict[tuple[str, str], DataType] = {
    ("int", "date"): DateType(),
    ("long", "timestamp-millis"): TimestampType(),
    ("long", "timestamp-micros"): TimestampType(),
    ("long", "local-timestamp-millis"): TimestampNTZType(),
    ("long", "local-timestamp-micros"): TimestampNTZType(),
    ("string", "uuid"): StringType(),
    ("int", "time-millis"): IntegerType(),
    ("long", "time-micros"): LongType(),
}
_MAX_DECIMAL_PRECISION = 38


class AvroTypeError(ValueError):
    """An Avro schema Spark cannot represent (a recursive record, a decimal too wide, ...)."""


def _type_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    return str(schema["type"])


def _nonnull_branches(union: list[Any]) -> list[Any]:
    return [branch for branch in union if _type_name(branch) != "null"]


def named_types(schema: Any) -> dict[str, Any]:
    """fastavro's parsed schemas name a type in full once and refer to it by name afterwards."""
    return schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}


def _resolve(schema: Any, named: Mapping[str, Any]) -> Any:
    if isinstance(schema, str) and schema not in _PRIMITIVES and schema != "null":
        try:
            return named[schema]
        except KeyError:
            raise AvroTypeError(f"unresolved Avro type name {schema!r}") from None
    return schema


def spark_type(schema: Any) -> tuple[DataType, bool]:
    """The Spark type of a parsed Avro schema (fastavro.parse_schema output) and whether it is nullable."""
    return _spark_type(schema, (), named_types(schema))


def _spark_type(schema: Any, seen: tuple[str, ...], named: Mapping[str, Any]) -> tuple[DataType, bool]:
    schema = _resolve(schema, named)
    kind = _type_name(schema)
    if kind == "null":
        return StringType(), True  # only a value of nothing; spark-avro gives NullType, which Arrow lacks
    if kind == "union":
        return _union_type(schema, seen, named)
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema], False
        raise AvroTypeError(f"unresolved Avro type name {schema!r}")
    logical = schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        if precision > _MAX_DECIMAL_PRECISION:
            raise AvroTypeError(f"decimal({precision}, {scale}) is wider than Spark's 38 digits")
        return DecimalType(precision, scale), False
    if logical is not None and (kind, logical) in _LOGICAL:
        return _LOGICAL[(kind, logical)], False
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind], False
    if kind in ("enum",):
        return StringType(), False
    if kind == "fixed":
        return BinaryType(), False
    if kind == "array":
        element, nullable = _spark_type(schema["items"], seen, named)
        return ArrayType(element, nullable), False
    if kind == "map":
        value, nullable = _spark_type(schema["values"], seen, named)
        return MapType(StringType(), value, nullable), False
    if kind in ("record", "error"):
        name = schema.get("name", "")
        if name in seen:
            raise AvroTypeError(f"record {name} is recursive; Spark types cannot nest without end")
        fields = []
        for field in schema["fields"]:
            data_type, nullable = _spark_type(field["type"], (*seen, name), named)
            fields.append(StructField(field["name"], data_type, nullable))
        return StructType(fields), False
    raise AvroTypeError(f"Avro type {kind!r} has no Spark type")


def _union_type(union: list[Any], seen: tuple[str, ...], named: Mapping[str, Any]) -> tuple[DataType, bool]:
    branches = [_resolve(b, named) for b in _nonnull_branches(union)]
    nullable = len(branches) < len(union)
    names = {_type_name(b) for b in branches}
    if len(branches) == 1:
        data_type, inner_nullable = _spark_type(branches[0], seen, named)
        return data_type, nullable or inner_nullable
    if names == {"int", "long"} and all(isinstance(b, str) for b in branches):
        return LongType(), nullable
    if names == {"float", "double"} and all(isinstance(b, str) for b in branches):
        return DoubleType(), nullable
    if not branches:
        return StringType(), True
    members = [
        StructField(f"member{i}", _spark_type(b, seen, named)[0], True) for i, b in enumerate(branches)
    ]
    return StructType(members), nullable


# ----- values read by fastavro -> values Arrow takes for the Spark type -----

# Read as plain numbers and typed by Arrow: fastavro's datetime objects cost ~1 us per timestamp.
_NUMERIC_TIME = {
    "date": "int",
    "timestamp-millis": "long",
    "timestamp-micros": "long",
    "local-timestamp-millis": "long",
    "local-timestamp-micros": "long",
}


def without_time_logical_types(document: Any) -> Any:
    """A schema JSON document whose dates and timestamps read as their numbers (days, ms, us)."""
    if isinstance(document, list):
        return [without_time_logical_types(item) for item in document]
    if not isinstance(document, dict):
        return document
    logical = document.get("logicalType")
    if isinstance(logical, str) and _NUMERIC_TIME.get(logical) == document.get("type"):
        return {k: v for k, v in document.items() if k != "logicalType"}
    return {k: without_time_logical_types(v) for k, v in document.items()}


def arrow_read_type(
    schema: Any, arrow_type: pa.DataType, named: Mapping[str, Any] | None = None
) -> pa.DataType:
    """``arrow_type`` with millisecond timestamps kept in ms, so numbers read raw build it as they are.

    The column is then cast to ``arrow_type`` by Arrow (ms -> us for the whole column at once).
    """
    named = named_types(schema) if named is None else named
    schema = _resolve(schema, named)
    kind = _type_name(schema)
    if kind == "union":
        branches = [_resolve(b, named) for b in _nonnull_branches(schema)]
        if len(branches) == 1:
            return arrow_read_type(branches[0], arrow_type, named)
        if pa.types.is_struct(arrow_type) and len(branches) == arrow_type.num_fields:
            return pa.struct(
                [
                    f.with_type(arrow_read_type(b, f.type, named))
                    for b, f in zip(branches, arrow_type, strict=True)
                ]
            )
        return arrow_type
    if not isinstance(schema, dict):
        return arrow_type
    if schema.get("logicalType") in ("timestamp-millis", "local-timestamp-millis") and kind == "long":
        return pa.timestamp("ms", tz=arrow_type.tz)
    if kind == "array":
        item = arrow_type.value_field
        return pa.list_(item.with_type(arrow_read_type(schema["items"], item.type, named)))
    if kind == "map":
        item = arrow_type.item_field
        return pa.map_(
            arrow_type.key_type, item.with_type(arrow_read_type(schema["values"], item.type, named))
        )
    if kind in ("record", "error"):
        return pa.struct(
            [
                f.with_type(arrow_read_type(avro_field["type"], f.type, named))
                for avro_field, f in zip(schema["fields"], arrow_type, strict=True)
            ]
        )
    return arrow_type


def read_adapter(schema: Any, named: Mapping[str, Any] | None = None) -> Adapter | None:
    """What to apply to a datum fastavro read so that Arrow accepts it as ``spark_type(schema)``.

    None when fastavro's value is already right (the common case: no general unions, uuids or
    times), so the decoder's fast path does no per-record Python work.
    """
    named = named_types(schema) if named is None else named
    schema = _resolve(schema, named)
    kind = _type_name(schema)
    if kind == "union":
        return _union_adapter(schema, named)
    if isinstance(schema, str):
        return None
    logical = schema.get("logicalType")
    if logical == "uuid":
        return _optional(str)
    if logical == "time-millis" and kind == "int":
        return _optional(_time_to_millis)
    if logical == "time-micros" and kind == "long":
        return _optional(_time_to_micros)
    if kind == "array":
        return _array_adapter(read_adapter(schema["items"], named))
    if kind == "map":
        value = read_adapter(schema["values"], named)
        return None if value is None else _optional(lambda m: {k: value(v) for k, v in m.items()})
    if kind in ("record", "error"):
        return _record_adapter({f["name"]: read_adapter(f["type"], named) for f in schema["fields"]})
    return None


def _array_adapter(item: Adapter | None) -> Adapter | None:
    return None if item is None else _optional(lambda items: [item(v) for v in items])


def _record_adapter(adapters: Mapping[str, Adapter | None]) -> Adapter | None:
    """Adapt the fields that need it; None when none does."""
    needed = {name: a for name, a in adapters.items() if a is not None}
    if not needed:
        return None
    return _optional(lambda record: {**record, **{n: a(record.get(n)) for n, a in needed.items()}})


def _optional(adapter: Adapter) -> Adapter:
    return lambda value: None if value is None else adapter(value)


def _time_to_millis(value: datetime.time | int) -> int:
    if isinstance(value, int):
        return value
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000


def _time_to_micros(value: datetime.time | int) -> int:
    if isinstance(value, int):
        return value
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def _union_adapter(union: list[Any], named: Mapping[str, Any]) -> Adapter | None:
    branches = [_resolve(b, named) for b in _nonnull_branches(union)]
    names = {_type_name(b) for b in branches}
    simple = all(isinstance(b, str) for b in branches) and names in ({"int", "long"}, {"float", "double"})
    if len(branches) == 1:
        return read_adapter(branches[0], named)
    if simple:
        return _optional(float) if "double" in names else None
    adapters = [read_adapter(b, named) for b in branches]
    keys = [f"member{i}" for i in range(len(branches))]

    def to_members(value: Any) -> dict[str, Any] | None:
        if value is None:
            return None
        members: dict[str, Any] = dict.fromkeys(keys)
        index = branch_of(branches, value)
        adapter = adapters[index]
        members[keys[index]] = value if adapter is None else adapter(value)
        return members

    return to_members


def branch_of(branches: list[Any], value: Any) -> int:
    """Which union branch a Python value fastavro read belongs to (first match, Avro's own rule)."""
    for index, branch in enumerate(branches):
        if _matches(branch, value):
            return index
    raise AvroTypeError(
        f"value {value!r:.60} matches no branch of the union {[_type_name(b) for b in branches]}"
    )


def _matches(schema: Any, value: Any) -> bool:
    kind = _type_name(schema)
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    if logical == "decimal":
        import decimal

        return isinstance(value, decimal.Decimal)
    if logical in (
        "timestamp-millis",
        "timestamp-micros",
        "local-timestamp-millis",
        "local-timestamp-micros",
    ):
        return isinstance(value, datetime.datetime)
    if logical == "date":
        return isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)
    if logical == "uuid":
        return isinstance(value, uuid.UUID | str)
    if logical in ("time-millis", "time-micros"):
        return isinstance(value, datetime.time)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("int", "long"):
        return isinstance(value, int) and not isinstance(value, bool)
    if kind in ("float", "double"):
        return isinstance(value, float)
    if kind == "string":
        return isinstance(value, str)
    if kind == "enum":
        return isinstance(value, str) and value in schema["symbols"]
    if kind == "bytes":
        return isinstance(value, bytes)
    if kind == "fixed":
        return isinstance(value, bytes) and len(value) == schema["size"]
    if kind == "array":
        return isinstance(value, list)
    if kind in ("record", "error"):
        return isinstance(value, dict) and {f["name"] for f in schema["fields"]} == set(value)
    if kind == "map":
        return isinstance(value, dict)
    return False


# ----- Spark -> Avro, for the sink -----


_AVRO_OF_SPARK: dict[type[DataType], Any] = {
    BooleanType: "boolean",
    ByteType: "int",
    ShortType: "int",
    IntegerType: "int",
    LongType: "long",
    FloatType: "float",
    DoubleType: "double",
    StringType: "string",
    BinaryType: "bytes",
    DateType: {"type": "int", "logicalType": "date"},
    TimestampType: {"type": "long", "logicalType": "timestamp-micros"},
    TimestampNTZType: {"type": "long", "logicalType": "local-timestamp-micros"},
}


def avro_schema_for(data_type: DataType, name: str = "topLevelRecord", namespace: str = "") -> Any:
    """The Avro schema (JSON-able) a Spark type is written with; structs become records."""
    simple = _AVRO_OF_SPARK.get(type(data_type))
    if simple is not None:
        return dict(simple) if isinstance(simple, dict) else simple
    if isinstance(data_type, DecimalType):
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": data_type.precision,
            "scale": data_type.scale,
        }
    if isinstance(data_type, ArrayType):
        items = avro_schema_for(data_type.elementType, name, namespace)
        return {"type": "array", "items": _nullable(items) if data_type.containsNull else items}
    if isinstance(data_type, MapType):
        if not isinstance(data_type.keyType, StringType):
            raise AvroTypeError(f"Avro maps have string keys; {data_type.simpleString()} cannot be written")
        values = avro_schema_for(data_type.valueType, name, namespace)
        return {"type": "map", "values": _nullable(values) if data_type.valueContainsNull else values}
    if isinstance(data_type, StructType):
        child_namespace = f"{namespace}.{name}" if namespace else name
        fields = []
        for field in data_type.fields:
            field_schema = avro_schema_for(field.dataType, field.name, child_namespace)
            if field.nullable:
                fields.append({"name": field.name, "type": _nullable(field_schema), "default": None})
            else:
                fields.append({"name": field.name, "type": field_schema})
        record: dict[str, Any] = {"type": "record", "name": name, "fields": fields}
        if namespace:
            record["namespace"] = namespace
        return record
    raise AvroTypeError(f"Spark type {data_type.simpleString()} has no Avro type")


def _nullable(schema: Any) -> list[Any]:
    return ["null", schema]


def write_adapter(schema: Any, named: Mapping[str, Any] | None = None) -> Adapter | None:
    """What to apply to a value Arrow's ``to_pylist`` gives before fastavro writes it with ``schema``.

    Arrow gives maps as lists of (key, value) pairs and union-structs as dicts of members; fastavro
    wants dicts and the chosen branch's value.
    """
    named = named_types(schema) if named is None else named
    schema = _resolve(schema, named)
    kind = _type_name(schema)
    if kind == "union":
        branches = [_resolve(b, named) for b in _nonnull_branches(schema)]
        names = {_type_name(b) for b in branches}
        simple = all(isinstance(b, str) for b in branches) and names in ({"int", "long"}, {"float", "double"})
        if len(branches) == 1:
            return write_adapter(branches[0], named)
        if simple:
            return None
        adapters = [write_adapter(b, named) for b in branches]

        def from_members(value: Any) -> Any:
            if value is None:
                return None
            for index in range(len(branches)):
                member = value.get(f"member{index}")
                if member is not None:
                    adapter = adapters[index]
                    return member if adapter is None else adapter(member)
            return None

        return from_members
    if isinstance(schema, str):
        return None
    if kind == "array":
        return _array_adapter(write_adapter(schema["items"], named))
    if kind == "map":
        value = write_adapter(schema["values"], named)
        return _optional(lambda pairs: _as_dict(pairs, value))
    if kind in ("record", "error"):
        return _record_adapter({f["name"]: write_adapter(f["type"], named) for f in schema["fields"]})
    return None


def _as_dict(pairs: Any, value: Adapter | None) -> dict[str, Any]:
    items = pairs.items() if isinstance(pairs, Mapping) else pairs
    if value is None:
        return dict(items)
    return {k: value(v) for k, v in items}
