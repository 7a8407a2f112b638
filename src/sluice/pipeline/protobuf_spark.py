"""Protobuf messages as Spark types and rows, close to what spark-protobuf's ``from_protobuf`` gives.

Pure: works from a message Descriptor. Messages -> struct (every field nullable), repeated ->
array, map fields -> map, enums -> string (the value's name), bytes -> binary,
``google.protobuf.Timestamp`` -> timestamp. int32/sint32/sfixed32 -> int, uint32 and the 64-bit
signed kinds -> long, uint64 -> decimal(20, 0) (so values above 2^63 survive). A proto3 scalar
without presence reads as its default when unset (the wire cannot tell); a message field, a
field in a oneof and an ``optional`` one read as null when unset.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

TIMESTAMP = "google.protobuf.Timestamp"
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

_SCALARS: dict[int, DataType] = {
    FieldDescriptor.TYPE_DOUBLE: DoubleType(),
    FieldDescriptor.TYPE_FLOAT: FloatType(),
    FieldDescriptor.TYPE_INT64: LongType(),
    FieldDescriptor.TYPE_UINT64: DecimalType(20, 0),
    FieldDescriptor.TYPE_INT32: IntegerType(),
    FieldDescriptor.TYPE_FIXED64: DecimalType(20, 0),
    FieldDescriptor.TYPE_FIXED32: LongType(),
    FieldDescriptor.TYPE_BOOL: BooleanType(),
    FieldDescriptor.TYPE_STRING: StringType(),
    FieldDescriptor.TYPE_BYTES: BinaryType(),
    FieldDescriptor.TYPE_UINT32: LongType(),
    FieldDescriptor.TYPE_SFIXED32: IntegerType(),
    FieldDescriptor.TYPE_SFIXED64: LongType(),
    FieldDescriptor.TYPE_SINT32: IntegerType(),
    FieldDescriptor.TYPE_SINT64: LongType(),
}
_UNSIGNED_64 = (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64)


class ProtobufTypeError(ValueError):
    """A message Spark cannot represent (it contains itself)."""


def _is_map(field: FieldDescriptor) -> bool:
    message = field.message_type
    return bool(message is not None and message.GetOptions().map_entry and field.is_repeated)


def _is_repeated(field: FieldDescriptor) -> bool:
    return field.is_repeated


def spark_type(descriptor: Descriptor) -> StructType:
    """The struct a message of this descriptor reads as."""
    return _message_type(descriptor, ())


def _message_type(descriptor: Descriptor, seen: tuple[str, ...]) -> StructType:
    if descriptor.full_name in seen:
        raise ProtobufTypeError(f"message {descriptor.full_name} contains itself; Spark types cannot")
    return StructType(
        [StructField(f.name, _field_type(f, (*seen, descriptor.full_name)), True) for f in descriptor.fields]
    )


def _field_type(field: FieldDescriptor, seen: tuple[str, ...]) -> DataType:
    if _is_map(field):
        entry = field.message_type
        key = _single_type(entry.fields_by_name["key"], seen)
        value = _single_type(entry.fields_by_name["value"], seen)
        return MapType(key, value, True)
    single = _single_type(field, seen)
    return ArrayType(single, False) if _is_repeated(field) else single


def _single_type(field: FieldDescriptor, seen: tuple[str, ...]) -> DataType:
    if field.type == FieldDescriptor.TYPE_ENUM:
        return StringType()
    if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        if field.message_type.full_name == TIMESTAMP:
            return TimestampType()
        return _message_type(field.message_type, seen)
    return _SCALARS[field.type]


Converter = Callable[[Any], Any]


def row_converter(descriptor: Descriptor) -> Callable[[Message], dict[str, Any]]:
    """Message -> dict Arrow takes as ``spark_type(descriptor)``; per-field work is decided once here."""
    fields = [(f.name, _field_reader(f)) for f in descriptor.fields]

    def convert(message: Message) -> dict[str, Any]:
        return {name: read(message) for name, read in fields}

    return convert


def _field_reader(field: FieldDescriptor) -> Callable[[Message], Any]:
    name = field.name
    if _is_map(field):
        value_conv = _value_converter(field.message_type.fields_by_name["value"])
        if value_conv is None:
            return lambda m: dict(getattr(m, name))
        return lambda m: {k: value_conv(v) for k, v in getattr(m, name).items()}
    conv = _value_converter(field)
    if _is_repeated(field):
        if conv is None:
            return lambda m: list(getattr(m, name))
        return lambda m: [conv(v) for v in getattr(m, name)]
    present = field.has_presence
    if conv is None:
        if present:
            return lambda m: getattr(m, name) if m.HasField(name) else None
        return lambda m: getattr(m, name)
    if present:
        return lambda m: conv(getattr(m, name)) if m.HasField(name) else None
    return lambda m: conv(getattr(m, name))


def _value_converter(field: FieldDescriptor) -> Converter | None:
    if field.type == FieldDescriptor.TYPE_ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        return lambda number: names.get(number, str(number))
    if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        if field.message_type.full_name == TIMESTAMP:
            return _timestamp
        return row_converter(field.message_type)
    if field.type in _UNSIGNED_64:
        return decimal.Decimal
    return None


def _timestamp(message: Any) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(seconds=message.seconds, microseconds=message.nanos // 1000)
