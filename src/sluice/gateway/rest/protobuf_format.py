"""The protobuf embedded format: JSON records to and from Confluent's protobuf framing.

The message class comes from the registered .proto text and the texts it imports (its references, fetched from
the registry), compiled by the registry's own schema code; a record is the first message of the schema (message
index [0]), given in protobuf's JSON mapping (either field name) and returned as Confluent's consumers print it:
JSON names, fields at their default value included.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf import json_format

from sluice.registry.formats import parse_schema, protobuf_message_class
from sluice.registry.formats.protobuf import imports_of, is_bundled

MAGIC = b"\x00"
# Confluent's message-index array for the first message: a count of zero, meaning [0].
FIRST_MESSAGE = b"\x00"


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if position >= len(data) or shift > 63:
            raise ValueError("truncated message index")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def _zigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def message_indexes(data: bytes, position: int) -> tuple[list[int], int]:
    """Confluent's message-index array (zigzag varints, a leading count; a lone 0 means [0])."""
    count, position = _read_varint(data, position)
    count = _zigzag(count)
    if count == 0:
        return [0], position
    indexes = []
    for _ in range(count):
        value, position = _read_varint(data, position)
        indexes.append(_zigzag(value))
    return indexes, position


def registered_imports(text: str) -> list[str]:
    """The files a .proto text imports that must come from the registry (as references), in order: all but
    the well-known types and the google/type files the registry bundles, as Confluent's does."""
    return [name for name in imports_of(text) if not is_bundled(name)]


class ProtobufCodec:
    """Encoders and decoders for schemas fetched by id (`fetch(id)` -> .proto text and every text it imports,
    by import name)."""

    def __init__(self, fetch: Callable[[int], tuple[str, Mapping[str, str]]]) -> None:
        self._fetch = fetch
        self._schemas: dict[int, Any] = {}

    def _schema(self, schema_id: int) -> Any:
        parsed = self._schemas.get(schema_id)
        if parsed is None:
            text, references = self._fetch(schema_id)
            parsed = self._schemas[schema_id] = parse_schema("PROTOBUF", text, references)
        return parsed

    def encoder(self, schema_id: int) -> Callable[[Any], bytes]:
        message_class = protobuf_message_class(self._schema(schema_id), (0,))
        prefix = MAGIC + schema_id.to_bytes(4, "big") + FIRST_MESSAGE

        def encode(value: Any) -> bytes:
            return prefix + json_format.ParseDict(value, message_class()).SerializeToString()

        return encode

    def decode(self, data: bytes) -> Any:
        if len(data) < 6 or data[:1] != MAGIC:
            raise ValueError("not in Confluent's framing (magic byte 0 and a schema id)")
        schema_id = int.from_bytes(data[1:5], "big")
        indexes, position = message_indexes(data, 5)
        message = protobuf_message_class(self._schema(schema_id), indexes)()
        message.ParseFromString(data[position:])
        # As Confluent's consumers print a record (ProtobufSchemaUtils.toJson): fields at their default value
        # included, by their JSON names (lowerCamelCase).
        return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)
