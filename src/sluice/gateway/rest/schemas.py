"""The schema embedded formats (avro, jsonschema, protobuf) through a schema registry.

A v2 produce names its schemas as ``value_schema`` (text: registered under ``<topic>-value``, or found if it is
already there) or ``value_schema_id`` (and the key equivalents); each record is then serialized into Confluent's
framing (magic byte, schema id, payload): avro and jsonschema by confluent-kafka's serializers, protobuf by
`protobuf_format.py`. A protobuf schema may import other registered schemas: given as text, each import names
the subject holding it (the import path, as Confluent's serializers register them; its latest version), and
a schema given by id brings its references along. Consumers of these formats get each record decoded with the schema its id names. Avro
travels in Avro's JSON encoding both ways, protobuf in protobuf's JSON mapping.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Callable
from typing import Any

import fastavro
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext, SerializationError

from sluice.client.schema_framing import split_frame
from sluice.registry.formats import InvalidSchemaError
from sluice.registry.formats.parsed import MAX_REFERENCES

from . import avro_json
from .errors import (
    KEY_SCHEMA_MISSING,
    VALUE_SCHEMA_MISSING,
    RestError,
    UndecodableRecord,
    bad_record,
    kafka_error,
)
from .protobuf_format import ProtobufCodec, registered_imports

SCHEMA_TYPES = {"avro": "AVRO", "jsonschema": "JSON", "protobuf": "PROTOBUF"}
INVALID_SCHEMA = 42205
SCHEMA_LOOKUP_FAILED = 42207
Encoder = Callable[[Any], bytes | None]


def schema_id_of(given: Any, name: str) -> int:
    """A schema id as Confluent's REST Proxy reads one (Jackson's Integer): a JSON integer, or a string
    holding one ("1")."""
    if (
        isinstance(given, str)
        and given.strip().lstrip("+-").isascii()
        and given.strip().lstrip("+-").isdigit()
    ):
        given = int(given)
    if not isinstance(given, int) or isinstance(given, bool) or not 0 < given < 2**31:
        raise RestError(422, 422, f"{name} must be a positive integer (an int32)")
    return given


def _lookup_failed(exc: SchemaRegistryError, what: str, subject: str) -> RestError:
    """The registry refused the serializer's look-up of the schema under its subject: 42207, as Confluent's
    proxy answers "Error when fetching schema version" (a schema id registered under another subject)."""
    if exc.http_status_code >= 500:
        return kafka_error(f"{what}: schema registry answered {exc.http_status_code}: {exc.error_message}")
    return RestError(
        422, SCHEMA_LOOKUP_FAILED, f"{what}: not found under subject {subject!r}: {exc.error_message}"
    )


class RecordMismatch(ValueError):
    """A record that is not its schema's JSON encoding; the message says where and why."""


def _reason(exc: Exception) -> str:
    """Why a record could not be serialized, in the serializer's words where they are about the data; a
    Python error from inside a library (AttributeError, KeyError, ...) says nothing to the caller."""
    if isinstance(exc, (ValueError, SerializationError)) and str(exc):
        return str(exc)
    return "it is not in the JSON form its schema needs"


def registry_error(exc: Exception, what: str) -> RestError:
    """A registry failure: a schema it calls invalid is 42205 (Confluent's invalidSchemaException); any other
    refusal (an unknown id or subject, an incompatible schema) 42207, as Confluent's proxy answers a failed
    registry call (Errors.messageSerializationException); no answer, or a 5xx, is 500/50002."""
    if isinstance(exc, SchemaRegistryError):
        if 400 <= exc.http_status_code < 500:
            code = INVALID_SCHEMA if exc.http_status_code == 422 else SCHEMA_LOOKUP_FAILED
            return RestError(422, code, f"{what}: {exc.error_message}")
        return kafka_error(f"{what}: schema registry answered {exc.http_status_code}: {exc.error_message}")
    return kafka_error(f"{what}: schema registry unreachable: {exc}")


class SchemaFormats:
    def __init__(self, url: str) -> None:
        self.url = url
        # A registry that is down fails a request within a second (the client's default retries take ~7 s), and
        # a subject's latest version is asked again after a minute.
        self.client = SchemaRegistryClient(
            {
                "url": url,
                "max.retries": 1,
                "retries.wait.ms": 100,
                "retries.max.wait.ms": 500,
                "timeout": 10,
                "cache.latest.ttl.sec": 60,
            }
        )
        # The registry client's HTTP library logs every request at INFO: one line per produce is noise.
        logging.getLogger("httpx2").setLevel(logging.WARNING)
        logging.getLogger("httpx").setLevel(logging.WARNING)
        self._encoders: dict[tuple[str, str, int], Encoder] = {}
        self._avro_schemas: dict[int, Any] = {}
        self._avro_named: dict[int, dict[str, Any]] = {}
        self._protobuf = ProtobufCodec(self._schema_text)
        self._decoders: dict[str, Callable[[bytes, SerializationContext], Any]] = {}

    # -- producing -------------------------------------------------------------
    def _schema_id(self, fmt: str, topic: str, field: str, body: dict[str, Any]) -> int | None:
        text, given_id = body.get(f"{field}_schema"), body.get(f"{field}_schema_id")
        if given_id is not None:
            return schema_id_of(given_id, f"{field}_schema_id")
        if text is None:
            return None
        if not isinstance(text, str):
            text = json.dumps(text)
        try:
            return self.client.register_schema(f"{topic}-{field}", self.schema_of(SCHEMA_TYPES[fmt], text))
        except RestError:
            raise
        except Exception as exc:
            raise registry_error(exc, f"{field}_schema") from None

    def schema_of(self, schema_type: str, text: str) -> Schema:
        """A schema to register: a protobuf one refers to the latest version of each subject it imports."""
        references = []
        if schema_type == "PROTOBUF":
            for name in registered_imports(text):
                try:
                    version = self.client.get_latest_version(name).version
                except SchemaRegistryError as exc:
                    if exc.http_status_code == 404:
                        raise RestError(
                            422,
                            INVALID_SCHEMA,
                            f"the import {name!r} is not a subject of the schema registry",
                        ) from None
                    raise
                references.append(SchemaReference(name, name, version))
        return Schema(text, schema_type, references)

    def _schema_text(self, schema_id: int) -> tuple[str, dict[str, str]]:
        """A schema's text and, by import name, every text it refers to (at every level)."""
        schema = self.client.get_schema(schema_id)
        try:
            return schema.schema_str or "", self.referenced_texts(schema.references or [])
        except InvalidSchemaError as exc:
            raise InvalidSchemaError(f"schema {schema_id}: {exc}") from None

    def referenced_texts(self, references: list[Any]) -> dict[str, str]:
        """By reference name, the text of every schema `references` lead to, at every level."""
        texts: dict[str, str] = {}
        pending = list(references)
        while pending:
            reference = pending.pop()
            if reference.name in texts:
                continue
            if len(texts) >= MAX_REFERENCES:
                raise InvalidSchemaError(f"more than {MAX_REFERENCES} references")
            referenced = self.client.get_version(reference.subject, reference.version).schema
            texts[reference.name] = referenced.schema_str or ""
            pending.extend(referenced.references or [])
        return texts

    def encoder(self, fmt: str, topic: str, field: str, schema_id: int, subject: str = "") -> Encoder:
        """Serializes a record's key or value (`field`) with schema `schema_id` of `subject` (by default
        `<topic>-<field>`) into Confluent's framing."""
        subject = subject or f"{topic}-{field}"
        cached = self._encoders.get((fmt, subject, schema_id))
        if cached is not None:
            return cached
        try:
            schema = self.client.get_schema(schema_id)
        except Exception as exc:
            raise registry_error(exc, f"{field}_schema_id {schema_id}") from None
        registered_type = schema.schema_type or "AVRO"
        if registered_type != SCHEMA_TYPES[fmt]:
            # Confluent's proxy casts the schema to the format's and fails with a 500; a 4xx says what is wrong.
            raise RestError(
                422,
                INVALID_SCHEMA,
                f"{field}_schema_id {schema_id} is a {registered_type} schema: the {fmt} format needs a "
                f"{SCHEMA_TYPES[fmt]} one",
            )
        if fmt == "protobuf":
            try:
                encode_protobuf = self._protobuf.encoder(schema_id)
            except InvalidSchemaError as exc:
                raise RestError(422, INVALID_SCHEMA, f"{field}_schema_id {schema_id}: {exc}") from None
            except Exception as exc:
                raise registry_error(exc, f"{field}_schema_id {schema_id}") from None
            self._encoders[(fmt, subject, schema_id)] = encode_protobuf
            return encode_protobuf
        conf = {
            "auto.register.schemas": False,
            "use.schema.id": schema_id,
            "subject.name.strategy": lambda _context, _record_name: subject,
        }
        serializer: Any
        if fmt == "avro":
            if isinstance(json.loads(schema.schema_str), str):
                # A primitive named by a bare string ('"string"'): confluent-kafka's AvroSerializer expects an object.
                schema = Schema(
                    json.dumps({"type": json.loads(schema.schema_str)}), "AVRO", schema.references
                )
            # Records arrive in Avro's JSON encoding (a union value is {"type": value}), as Confluent's take them.
            parsed = self._avro_schema(schema_id)
            named = self._avro_named[schema_id]

            def from_avro_json(value: Any, _: SerializationContext) -> Any:
                problem = avro_json.mismatch(parsed, value, named)
                if problem is not None:
                    raise RecordMismatch(problem)
                return next(fastavro.json_reader(io.StringIO(json.dumps(value)), parsed))

            serializer = AvroSerializer(self.client, schema, to_dict=from_avro_json, conf=conf)
        else:
            serializer = JSONSerializer(schema, self.client, conf=conf)
        context = SerializationContext(topic, MessageField.KEY if field == "key" else MessageField.VALUE)

        def encode(value: Any) -> bytes | None:
            return serializer(value, context)

        self._encoders[(fmt, subject, schema_id)] = encode
        return encode

    def _encode_all(
        self, fmt: str, topic: str, body: dict[str, Any], records: list[dict[str, Any]]
    ) -> tuple[list[tuple[bytes | None, bytes | None]], int | None, int | None]:
        ids: dict[str, int | None] = {}
        encoders: dict[str, Encoder | None] = {}
        for field, missing in (("key", KEY_SCHEMA_MISSING), ("value", VALUE_SCHEMA_MISSING)):
            ids[field] = self._schema_id(fmt, topic, field, body)
            if ids[field] is None and any(r.get(field) is not None for r in records):
                raise RestError(
                    422, missing, f"records have {field}s but the request names no {field} schema"
                )
            encoders[field] = self.encoder(fmt, topic, field, ids[field]) if ids[field] is not None else None
        encoded = []
        for index, record in enumerate(records):
            pair = []
            for field in ("key", "value"):
                value, encoder = record.get(field), encoders[field]
                if value is None or encoder is None:
                    pair.append(None)
                    continue
                try:
                    pair.append(encoder(value))
                except SchemaRegistryError as exc:  # the serializer's own look-up of the schema's version
                    raise _lookup_failed(exc, f"{field}_schema_id {ids[field]}", f"{topic}-{field}") from None
                except Exception as exc:  # fastavro / jsonschema / protobuf say why the record does not fit
                    raise bad_record(
                        f"records[{index}].{field} does not match its schema: {_reason(exc)}"
                    ) from None
            encoded.append((pair[0], pair[1]))
        return encoded, ids["key"], ids["value"]

    async def encode(
        self, fmt: str, topic: str, body: dict[str, Any], records: list[dict[str, Any]]
    ) -> tuple[list[tuple[bytes | None, bytes | None]], int | None, int | None]:
        """Each record's (key, value) bytes, and the key and value schema ids used."""
        return await asyncio.to_thread(self._encode_all, fmt, topic, body, records)

    def _avro_schema(self, schema_id: int) -> Any:
        parsed = self._avro_schemas.get(schema_id)
        if parsed is None:
            text = self.client.get_schema(schema_id).schema_str
            named: dict[str, Any] = {}
            parsed = fastavro.parse_schema(json.loads(text), named_schemas=named)
            self._avro_schemas[schema_id], self._avro_named[schema_id] = parsed, named
        return parsed

    # -- consuming -------------------------------------------------------------
    def _decode_avro(self, data: bytes) -> Any:
        """Confluent framing (0, 4-byte schema id, payload) to the value in Avro's JSON encoding."""
        schema_id, payload = split_frame(data)
        parsed = self._avro_schema(schema_id)
        datum = fastavro.schemaless_reader(io.BytesIO(payload), parsed)
        out = io.StringIO()
        fastavro.json_writer(out, parsed, [datum])
        return json.loads(out.getvalue())

    def decode(self, fmt: str, topic: str, field: str, data: bytes | None) -> Any:
        """A consumed key or value in the instance's format. Bytes that are not a record of that format (no
        Confluent framing, an id the registry does not know, a payload its schema cannot read) raise
        UndecodableRecord; a registry that cannot answer is a failure of the service (500, 50002)."""
        if data is None:
            return None
        try:
            if fmt == "protobuf":
                return self._protobuf.decode(data)
            if fmt == "avro":
                return self._decode_avro(data)
            decoder = self._decoders.get(fmt)
            if decoder is None:
                decoder = JSONDeserializer(None, schema_registry_client=self.client)
                self._decoders[fmt] = decoder
            context = SerializationContext(topic, MessageField.KEY if field == "key" else MessageField.VALUE)
            return decoder(data, context)
        except Exception as exc:
            if _registry_failed(exc):
                raise registry_error(exc, f"the schema of a record of {topic}") from None
            reason = exc.error_message if isinstance(exc, SchemaRegistryError) else str(exc)
            raise UndecodableRecord(f"{field} deserialization error for format {fmt}: {reason}") from None


def _registry_failed(exc: Exception) -> bool:
    """The registry did not answer (a transport error of the client's HTTP library, httpx or httpx2, whichever
    confluent-kafka found) or answered 5xx: not a fault of the record."""
    if isinstance(exc, SchemaRegistryError):
        return not 400 <= exc.http_status_code < 500
    return isinstance(exc, OSError) or any(cls.__name__ == "TransportError" for cls in type(exc).__mro__)
