"""Spark structs as Protobuf: the .proto text the sink registers, and filling a message from a row.

proto3; fields numbered in column order from 1; nested structs are nested messages, arrays
``repeated``, maps ``map<string, V>``, timestamps ``google.protobuf.Timestamp``; a nullable
scalar is ``optional`` so null and zero stay apart. Dates and decimals are written as their ISO /
decimal string (Protobuf has no such scalars).
"""

from __future__ import annotations

import datetime
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
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
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sluice.pipeline.options import PipelineOptionError

_TIMESTAMP = "google.protobuf.Timestamp"


_PROTO_SCALARS: dict[type[DataType], str] = {
    BooleanType: "bool",
    ByteType: "int32",
    ShortType: "int32",
    IntegerType: "int32",
    LongType: "int64",
    FloatType: "float",
    DoubleType: "double",
    StringType: "string",
    DateType: "string",
    DecimalType: "string",
    BinaryType: "bytes",
    TimestampType: _TIMESTAMP,
    TimestampNTZType: _TIMESTAMP,
}


def _scalar(data_type: DataType) -> str | None:
    return _PROTO_SCALARS.get(type(data_type))


def _message_name(field_name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in field_name.split("_") if part) or "Nested"


def _message(struct: StructType, name: str, indent: str, uses_timestamp: list[bool]) -> list[str]:
    lines = [f"{indent}message {name} {{"]
    for number, field in enumerate(struct.fields, start=1):
        data_type, label = field.dataType, ""
        if isinstance(data_type, ArrayType):
            data_type, label = data_type.elementType, "repeated "
        if isinstance(data_type, MapType):
            if not isinstance(data_type.keyType, StringType):
                raise PipelineOptionError(f"field {field.name}: Protobuf maps here have string keys")
            value = _field_type(data_type.valueType, field.name, lines, indent, uses_timestamp)
            lines.append(f"{indent}  map<string, {value}> {field.name} = {number};")
            continue
        type_name = _field_type(data_type, field.name, lines, indent, uses_timestamp)
        if not label and field.nullable and _scalar(data_type) not in (None, _TIMESTAMP):
            label = "optional "
        lines.append(f"{indent}  {label}{type_name} {field.name} = {number};")
    lines.append(f"{indent}}}")
    return lines


def _field_type(data_type: DataType, field_name: str, lines: list[str], indent: str, uses: list[bool]) -> str:
    if isinstance(data_type, StructType):
        nested = _message_name(field_name)
        lines.extend(_message(data_type, nested, indent + "  ", uses))
        return nested
    scalar = _scalar(data_type)
    if scalar is None:
        raise PipelineOptionError(f"field {field_name}: {data_type.simpleString()} has no Protobuf type here")
    if scalar == _TIMESTAMP:
        uses[0] = True
    return scalar


def proto_file_for(struct: StructType, name: str) -> str:
    uses_timestamp = [False]
    body = _message(struct, _message_name(name), "", uses_timestamp)
    head = ['syntax = "proto3";', ""]
    if uses_timestamp[0]:
        head = ['syntax = "proto3";', "", 'import "google/protobuf/timestamp.proto";', ""]
    return "\n".join(head + body) + "\n"


def fill_message(message: Message, row: dict[str, Any]) -> None:
    """Set ``message``'s fields from a row dict (as Arrow's ``to_pylist`` gives it)."""
    for field in message.DESCRIPTOR.fields:
        value = row.get(field.name)
        if value is None:
            continue
        is_message = field.type == FieldDescriptor.TYPE_MESSAGE
        entry = field.message_type
        if is_message and entry.GetOptions().map_entry:
            target = getattr(message, field.name)
            value_field = entry.fields_by_name["value"]
            for key, item in value.items() if isinstance(value, dict) else value:
                if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                    _fill_single(target[key], item)
                else:
                    target[key] = _plain(item)
        elif field.is_repeated:
            target = getattr(message, field.name)
            for item in value:
                if is_message:
                    _fill_single(target.add(), item)
                else:
                    target.append(_plain(item))
        elif is_message:
            _fill_single(getattr(message, field.name), value)
        else:
            setattr(message, field.name, _plain(value))


def _fill_single(message: Message, value: Any) -> None:
    if message.DESCRIPTOR.full_name == _TIMESTAMP:
        moment = value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
        message.FromDatetime(moment)  # type: ignore[attr-defined]
    else:
        fill_message(message, value)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime.date) or hasattr(value, "as_tuple"):
        return str(value) if not isinstance(value, datetime.date) else value.isoformat()
    return value
