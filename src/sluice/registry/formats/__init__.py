"""Schema formats of the registry: parse Avro, Protobuf and JSON Schema text into a ParsedSchema.

Pure code: no I/O beyond the temporary directory protoc compiles in. The registry resolves references
(subject + version -> text) and passes them in as texts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from . import avro, jsonschema, protobuf
from .jsonschema import json_validator
from .parsed import MAX_REFERENCES, InvalidSchemaError, Reference, Schema, fingerprint_of
from .protobuf import message_descriptor, protobuf_message_class

__all__ = [
    "InvalidSchemaError",
    "ParsedSchema",
    "Reference",
    "Schema",
    "json_validator",
    "message_descriptor",
    "parse_schema",
    "protobuf_message_class",
    "supported_types",
]

_PARSERS = {"AVRO": avro.parse, "JSON": jsonschema.parse, "PROTOBUF": protobuf.parse}


class ParsedSchema(Protocol):
    schema_type: str
    text: str
    fingerprint: str
    raw: object
    references: tuple[Reference, ...]


def supported_types() -> list[str]:
    return sorted(_PARSERS)


def parse_schema(
    schema_type: str | None,
    text: str,
    references: Mapping[str, str] | None = None,
    *,
    normalize: bool = False,
    reference_list: Sequence[Reference] = (),
) -> Schema:
    """Parse `text` as a schema of `schema_type` (None or "" means AVRO, as in Confluent's API).

    references: reference name (Avro full name, proto import path, JSON $ref URL) -> the referenced text,
    every level flattened in. reference_list: the Reference entries to record on the result (they take part
    in the fingerprint: the same text with other references is another schema).
    Raises InvalidSchemaError, and nothing else, for anything it cannot use.
    """
    kind = (schema_type or "AVRO").upper() if isinstance(schema_type, str) or schema_type is None else ""
    parser = _PARSERS.get(kind)
    if parser is None:
        raise InvalidSchemaError(
            f"unknown schema type {schema_type!r}; supported types are {', '.join(supported_types())}"
        )
    refs = dict(references or {})
    if not all(isinstance(key, str) and isinstance(value, str) for key, value in refs.items()):
        raise InvalidSchemaError("references must map names to schema texts")
    if len(refs) > MAX_REFERENCES:
        raise InvalidSchemaError(f"a schema may have at most {MAX_REFERENCES} references")
    try:
        parsed = parser(text, refs)
    except RecursionError:
        raise InvalidSchemaError("the schema is nested too deeply") from None
    declared = tuple(reference_list)
    identity = parsed.normalized_identity if normalize and parsed.normalized_identity else parsed.identity
    return Schema(
        schema_type=kind,
        text=parsed.normalized if normalize else parsed.text or text,
        fingerprint=fingerprint_of(kind, identity, declared),
        raw=parsed.raw,
        references=declared,
        model=parsed.model,
    )
