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

from sluice.client.schema_framing import decode_message_index, frame, split_frame
from sluice.registry.formats import parse_schema, protobuf_message_class
from sluice.registry.formats.protobuf import imports_of, is_bundled

# A record is the schema's first message: message index [0].
FIRST_MESSAGE = (0,)


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
        message_class = protobuf_message_class(self._schema(schema_id), FIRST_MESSAGE)
        prefix = frame(schema_id, b"", FIRST_MESSAGE)

        def encode(value: Any) -> bytes:
            return prefix + json_format.ParseDict(value, message_class()).SerializeToString()

        return encode

    def decode(self, data: bytes) -> Any:
        schema_id, framed = split_frame(data)
        indexes, payload = decode_message_index(framed)
        message = protobuf_message_class(self._schema(schema_id), indexes)()
        message.ParseFromString(payload)
        # As Confluent's consumers print a record (ProtobufSchemaUtils.toJson): fields at their default value
        # included, by their JSON names (lowerCamelCase).
        return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)
