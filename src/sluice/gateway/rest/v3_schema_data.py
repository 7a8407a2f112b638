"""v3 records whose key or value names a schema: {"type": "AVRO"|"JSONSCHEMA"|"PROTOBUF", "data": ...} with
``schema_id``, ``schema_version`` or ``schema`` (text), and ``subject`` or ``subject_name_strategy``.

As Confluent's v3 resolves them: a schema id is used as it is (its subject, for the answer's version, comes from
``subject`` or the strategy); a version is looked up in ``subject`` (or ``<topic>-key|value``); a schema text
is registered (type required, and given only with a text: a registered schema has its own); with none of the
three, the subject's latest version is used. ``subject`` and ``subject_name_strategy`` exclude each other. The strategies
name the subject ``<topic>-key|value`` (TOPIC_NAME, the default), the schema's record name (RECORD_NAME: an Avro
record's full name, a protobuf file's first message, a JSON schema's title) or ``<topic>-<record name>``
(TOPIC_RECORD_NAME). The data is encoded by the same serializers as v2's schema formats (`schemas.py`).

Errors, as Confluent's v3 answers them: a bad request (a type that does not fit the other fields, an unknown
version, a schema text that does not parse, data that does not fit its schema) is 400; a schema the registry
does not know or refuses (an incompatible one) is 422 with error_code 42207; a registry that cannot be reached is 500 with 50002.
"""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass
from typing import Any

from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.error import SchemaRegistryError

from sluice.registry.formats import InvalidSchemaError, parse_schema, protobuf_message_class

from .errors import RestError
from .schemas import SchemaFormats, registry_error

# v3's type names, the embedded formats of `schemas.py` and the registry's schema types.
FORMAT_OF_TYPE = {"AVRO": "avro", "JSONSCHEMA": "jsonschema", "PROTOBUF": "protobuf"}
TYPE_OF_REGISTRY_TYPE = {"AVRO": "AVRO", "JSON": "JSONSCHEMA", "PROTOBUF": "PROTOBUF"}
REGISTRY_TYPE_OF_TYPE = {v3: registry for registry, v3 in TYPE_OF_REGISTRY_TYPE.items()}
STRATEGIES = ("TOPIC_NAME", "RECORD_NAME", "TOPIC_RECORD_NAME")
SCHEMA_FIELDS = ("schema_id", "schema_version", "schema", "subject", "subject_name_strategy")
SERIALIZATION_FAILED = 42207
# Resolutions kept (by topic, field and the request's schema fields); a schema text or id always resolves the same.
_MAX_CACHED = 10_000


def _bad(message: str) -> RestError:
    return RestError(400, 400, message)


def _refused(exc: Exception, what: str) -> RestError:
    """A registry failure: one it answered (unknown id, subject, invalid schema) is 42207, as Confluent's; one it
    could not answer (down, 5xx) keeps v2's 50002."""
    error = registry_error(exc, what)
    if error.status == 422:
        return RestError(
            422, SERIALIZATION_FAILED, f"Error serializing message. {error.message}", SERIALIZATION_FAILED
        )
    return RestError(error.status, error.code, error.message, error.code)


@dataclass(frozen=True)
class SchemaChoice:
    """What a key or value object says about its schema (no registry asked yet)."""

    field: str  # "key" or "value"
    type: str | None
    schema_id: int | None
    schema_version: int | None
    schema: str | None
    subject: str | None
    strategy: str


@dataclass(frozen=True)
class Resolved:
    type: str
    subject: str
    schema_id: int
    schema_version: int | None


def needs_schema(document: Any) -> bool:
    """Whether a v3 record's key or value names a schema (cheap: checked on every record)."""
    if not isinstance(document, dict):
        return False
    for field in ("key", "value"):
        data = document.get(field)
        if isinstance(data, dict):
            kind = data.get("type")
            if kind is None:
                if any(name in data for name in SCHEMA_FIELDS):
                    return True
            elif isinstance(kind, str) and kind.upper() in FORMAT_OF_TYPE:
                return True
    return False


def _positive(data: dict[str, Any], name: str, where: str) -> int | None:
    value = data.get(name)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
        raise _bad(f"{where}.{name} must be a positive integer")
    return value


def _text(data: dict[str, Any], name: str, where: str) -> str | None:
    value = data.get(name)
    if value is not None and (not isinstance(value, str) or not value):
        raise _bad(f"{where}.{name} must be a non-empty string")
    return value


def schema_choice(data: dict[str, Any], field: str) -> SchemaChoice:
    kind = data.get("type")
    if kind is not None:
        if not isinstance(kind, str) or kind.upper() not in FORMAT_OF_TYPE:
            raise _bad(f"{field}.type {kind!r} takes no schema (AVRO, JSONSCHEMA or PROTOBUF do)")
        kind = kind.upper()
    strategy = data.get("subject_name_strategy") or "TOPIC_NAME"
    if not isinstance(strategy, str) or strategy.upper() not in STRATEGIES:
        raise _bad(f"{field}.subject_name_strategy must be one of {', '.join(STRATEGIES)}")
    choice = SchemaChoice(
        field,
        kind,
        _positive(data, "schema_id", field),
        _positive(data, "schema_version", field),
        _text(data, "schema", field),
        _text(data, "subject", field),
        strategy.upper(),
    )
    if choice.subject is not None and data.get("subject_name_strategy") is not None:
        raise _bad(f"{field}: give subject or subject_name_strategy, not both")
    given = [name for name in ("schema_id", "schema_version", "schema") if getattr(choice, name) is not None]
    if len(given) > 1:
        raise _bad(f"{field}: give one of schema_id, schema_version and schema, not {' and '.join(given)}")
    if choice.schema is not None and choice.type is None:
        raise _bad(f"{field}.schema needs a type (AVRO, JSONSCHEMA or PROTOBUF)")
    if choice.type is not None and choice.schema is None:
        # As Confluent's: a registered schema (by id, version or the latest) brings its own type.
        named = given[0] if given else "the subject's latest schema"
        raise _bad(f"{field}.type goes only with a schema text: {named} has its own type, so leave type out")
    return choice


def record_name(v3_type: str, text: str, references: dict[str, str]) -> str:
    """The schema's record name, as RECORD_NAME subjects use it."""
    try:
        if v3_type == "PROTOBUF":
            parsed = parse_schema("PROTOBUF", text, references)
            return str(protobuf_message_class(parsed, (0,)).DESCRIPTOR.full_name)
        document = json.loads(text)
    except (InvalidSchemaError, ValueError) as exc:
        raise _bad(f"the schema does not parse: {exc}") from None
    if v3_type == "AVRO" and isinstance(document, dict) and isinstance(document.get("name"), str):
        name, namespace = document["name"], document.get("namespace")
        return name if "." in name or not namespace else f"{namespace}.{name}"
    if v3_type == "JSONSCHEMA" and isinstance(document, dict) and isinstance(document.get("title"), str):
        return str(document["title"])
    raise _bad(f"a {v3_type} schema without a record name cannot name a subject by RECORD_NAME")


class SchemaData:
    """Resolves and encodes the schema'd keys and values of v3 records through the registry of `formats`."""

    def __init__(self, formats: SchemaFormats) -> None:
        self.formats = formats
        self._resolved: dict[tuple[str, SchemaChoice], Resolved] = {}

    def _subject(self, topic: str, choice: SchemaChoice, schema: Schema | None) -> str:
        if choice.subject is not None:
            return choice.subject
        if choice.strategy == "TOPIC_NAME":
            return f"{topic}-{choice.field}"
        if schema is None:
            raise _bad(f"{choice.field}: subject_name_strategy={choice.strategy} needs schema_id or schema")
        v3_type = TYPE_OF_REGISTRY_TYPE.get(schema.schema_type or "AVRO", "AVRO")
        try:
            references = self.formats.referenced_texts(list(schema.references or []))
        except InvalidSchemaError as exc:
            raise _bad(f"{choice.field}: {exc}") from None
        name = record_name(v3_type, schema.schema_str or "", references)
        return name if choice.strategy == "RECORD_NAME" else f"{topic}-{name}"

    def _version(self, subject: str, schema: Schema, what: str) -> int:
        try:
            return int(self.formats.client.lookup_schema(subject, schema).version)
        except Exception as exc:
            raise _refused(exc, f"{what} is not registered under subject {subject}") from None

    def _resolve(self, topic: str, choice: SchemaChoice) -> Resolved:
        client = self.formats.client
        if choice.schema_id is not None:
            what = f"{choice.field}.schema_id {choice.schema_id}"
            try:
                schema = client.get_schema(choice.schema_id)
            except Exception as exc:
                raise _refused(exc, what) from None
            subject = self._subject(topic, choice, schema)
            version = self._version(subject, schema, what)
            return Resolved(_type_of(schema, choice), subject, choice.schema_id, version)
        if choice.schema is not None:
            assert choice.type is not None
            try:
                schema = self.formats.schema_of(REGISTRY_TYPE_OF_TYPE[choice.type], choice.schema)
            except RestError as error:  # an import that is no subject
                raise _bad(f"{choice.field}.schema: {error.message}") from None
            except Exception as exc:
                raise _refused(exc, f"{choice.field}.schema") from None
            try:  # a text that does not parse is the request's fault (400), as Confluent's says
                references = self.formats.referenced_texts(list(schema.references or []))
                parse_schema(schema.schema_type, choice.schema, references)
            except InvalidSchemaError as exc:
                raise _bad(f"{choice.field}.schema does not parse as {choice.type}: {exc}") from None
            except Exception as exc:
                raise _refused(exc, f"{choice.field}.schema") from None
            subject = self._subject(topic, choice, schema)
            try:
                schema_id = client.register_schema(subject, schema)
            except Exception as exc:
                raise _refused(exc, f"{choice.field}.schema cannot be registered under {subject}") from None
            return Resolved(
                choice.type, subject, schema_id, self._version(subject, schema, f"{choice.field}.schema")
            )
        subject = self._subject(topic, choice, None)
        try:
            if choice.schema_version is not None:
                found = client.get_version(subject, choice.schema_version)
            else:
                found = client.get_latest_version(subject)
        except SchemaRegistryError as exc:
            if choice.schema_version is not None and exc.http_status_code == 404:
                raise _bad(
                    f"{choice.field}: schema does not exist for subject {subject}, version {choice.schema_version}"
                ) from None
            raise _refused(exc, f"{choice.field}: no schema for subject {subject}") from None
        except Exception as exc:
            raise _refused(exc, f"{choice.field}: subject {subject}") from None
        return Resolved(_type_of(found.schema, choice), subject, found.schema_id, found.version)

    def resolve(self, topic: str, choice: SchemaChoice) -> Resolved:
        latest = choice.schema_id is None and choice.schema_version is None and choice.schema is None
        key = (topic, choice)
        cached = None if latest else self._resolved.get(key)
        if cached is None:
            cached = self._resolve(topic, choice)
            if not latest:
                if len(self._resolved) >= _MAX_CACHED:
                    self._resolved.clear()
                self._resolved[key] = cached
        return cached

    def _encode(self, topic: str, document: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        replaced, described = dict(document), {}
        for field in ("key", "value"):
            data = document.get(field)
            if not isinstance(data, dict) or not needs_schema({field: data}):
                continue
            resolved = self.resolve(topic, schema_choice(data, field))
            try:
                encode = self.formats.encoder(
                    FORMAT_OF_TYPE[resolved.type], topic, field, resolved.schema_id, resolved.subject
                )
            except RestError as error:
                raise RestError(error.status, error.code, error.message, error.code) from None
            raw = None
            if data.get("data") is not None:
                try:
                    raw = encode(data["data"])
                except Exception as exc:  # fastavro / jsonschema / protobuf say why the data does not fit
                    raise _bad(
                        f"{field}.data does not match {resolved.type} schema {resolved.schema_id}: {exc}"
                    ) from None
            replaced[field] = {
                "type": "BINARY",
                "data": None if raw is None else base64.b64encode(raw).decode(),
            }
            described[field] = {
                "type": resolved.type,
                "subject": resolved.subject,
                "schema_id": resolved.schema_id,
                "schema_version": resolved.schema_version,
                "size": len(raw or b""),
            }
        return replaced, described

    async def encode(self, topic: str, document: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The record with its schema'd key and value replaced by their encoded bytes (as BINARY data), and what
        the answer says about them."""
        return await asyncio.to_thread(self._encode, topic, document)


def _type_of(schema: Schema, choice: SchemaChoice) -> str:
    found = TYPE_OF_REGISTRY_TYPE.get(schema.schema_type or "AVRO")
    if found is None:
        raise _bad(f"{choice.field}: schema type {schema.schema_type} is not served")
    return found
