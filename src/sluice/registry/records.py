"""The `_schemas` topic's record layout, as Confluent's Schema Registry writes it (Karapace reads and writes
the same), so a topic written by either is read as-is and they can read ours.

Keys and values are UTF-8 JSON objects:

| keytype        | key fields (in this order)            | value                                              |
|----------------|---------------------------------------|----------------------------------------------------|
| SCHEMA         | keytype, subject, version, magic=1    | subject, version, id, [schemaType], [references],  |
|                |                                       | schema, deleted; a tombstone = permanent delete     |
| CONFIG         | keytype, [subject], magic=0           | [subject], compatibilityLevel; tombstone = removed |
| MODE           | keytype, [subject], magic=0           | [subject], mode; tombstone = removed               |
| DELETE_SUBJECT | keytype, subject, magic=0             | subject, version: every version <= it soft-deleted |
| CLEAR_SUBJECT  | keytype, subject, magic=0             | subject: its soft-deleted versions are dropped     |
| NOOP           | keytype, magic=0                      | (ignored)                                          |
| NOOP (sluice)  | keytype, magic=0, name                | maxId: see MAX_ID_KEY below                        |

A null (absent) subject is the global CONFIG/MODE; null and empty fields are left out, as Jackson's
NON_EMPTY does in Confluent's writer. `schemaType` absent means AVRO. Readers ignore unknown fields and
unknown key types (Confluent's CONTEXT/ASSOC), so newer writers' records pass through.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

SCHEMA, CONFIG, MODE, DELETE_SUBJECT, CLEAR_SUBJECT, NOOP = (
    "SCHEMA",
    "CONFIG",
    "MODE",
    "DELETE_SUBJECT",
    "CLEAR_SUBJECT",
    "NOOP",
)
KEY_TYPES = frozenset({SCHEMA, CONFIG, MODE, DELETE_SUBJECT, CLEAR_SUBJECT, NOOP})
DEFAULT_SCHEMA_TYPE = "AVRO"
# sluice's one addition, in a form Confluent's and Karapace's readers skip (a NOOP key: they compare only
# keytype and magic): the largest schema id handed out so far, written beside every permanent delete. The
# tombstone makes compaction drop the deleted schema's record, id and all; this record keeps the id from
# being handed out again after a restart. Its own key, so Confluent's null-valued NOOPs do not erase it.
MAX_ID = "MAX_ID"
MAX_ID_NAME = "sluice-max-schema-id"
MAX_ID_KEY = b'{"keytype":"NOOP","magic":0,"name":"sluice-max-schema-id"}'


class RecordError(ValueError):
    """A `_schemas` record this reader cannot use (skipped on replay, with a warning)."""


@dataclass(frozen=True)
class Key:
    keytype: str
    subject: str | None = None
    version: int | None = None

    @property
    def magic(self) -> int:
        return 1 if self.keytype == SCHEMA else 0


@dataclass(frozen=True)
class Reference:
    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class SchemaValue:
    subject: str
    version: int
    id: int
    schema: str
    schema_type: str = DEFAULT_SCHEMA_TYPE
    references: tuple[Reference, ...] = ()
    deleted: bool = False


def _dumps(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def encode_key(key: Key) -> bytes:
    obj: dict[str, Any] = {"keytype": key.keytype}
    if key.subject is not None and key.keytype != NOOP:
        obj["subject"] = key.subject
    if key.keytype == SCHEMA:
        obj["version"] = key.version
    obj["magic"] = key.magic
    return _dumps(obj)


def encode_schema(value: SchemaValue) -> bytes:
    obj: dict[str, Any] = {"subject": value.subject, "version": value.version, "id": value.id}
    if value.schema_type != DEFAULT_SCHEMA_TYPE:
        obj["schemaType"] = value.schema_type
    if value.references:
        obj["references"] = [ref.to_json() for ref in value.references]
    obj["schema"] = value.schema
    obj["deleted"] = value.deleted
    return _dumps(obj)


def encode_config(subject: str | None, level: str) -> bytes:
    return _dumps({**({"subject": subject} if subject is not None else {}), "compatibilityLevel": level})


def encode_mode(subject: str | None, mode: str) -> bytes:
    return _dumps({**({"subject": subject} if subject is not None else {}), "mode": mode})


def encode_delete_subject(subject: str, version: int) -> bytes:
    return _dumps({"subject": subject, "version": version})


def encode_clear_subject(subject: str) -> bytes:
    return _dumps({"subject": subject})


def _object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"{what} is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise RecordError(f"{what} is not a JSON object")
    return obj


def _int(obj: dict[str, Any], name: str, what: str) -> int:
    value = obj.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordError(f"{what}: {name} is not an integer: {value!r}")
    return value


def _subject(obj: dict[str, Any], what: str, *, required: bool) -> str | None:
    subject = obj.get("subject")
    if subject is None and not required:
        return None
    if not isinstance(subject, str):
        raise RecordError(f"{what}: subject is not a string: {subject!r}")
    return subject


def decode_key(raw: bytes | None) -> Key | None:
    """The key, or None for a key type this reader does not use (NOOP, CONTEXT, ASSOC, ...)."""
    if raw is None:
        raise RecordError("record without a key")
    obj = _object(raw, "key")
    keytype = obj.get("keytype")
    if keytype == NOOP and obj.get("name") == MAX_ID_NAME:
        return Key(MAX_ID)
    if keytype not in KEY_TYPES or keytype == NOOP:
        return None
    if keytype == SCHEMA:
        magic = obj.get("magic", 1)
        if magic not in (0, 1):
            raise RecordError(f"SCHEMA key with magic {magic!r}")
        return Key(SCHEMA, _subject(obj, "SCHEMA key", required=True), _int(obj, "version", "SCHEMA key"))
    required = keytype in (DELETE_SUBJECT, CLEAR_SUBJECT)
    return Key(keytype, _subject(obj, f"{keytype} key", required=required))


def decode_schema(key: Key, raw: bytes) -> SchemaValue:
    obj = _object(raw, "SCHEMA value")
    text = obj.get("schema")
    if not isinstance(text, str):
        raise RecordError("SCHEMA value: schema is not a string")
    schema_type = obj.get("schemaType") or DEFAULT_SCHEMA_TYPE
    if not isinstance(schema_type, str):
        raise RecordError("SCHEMA value: schemaType is not a string")
    refs = obj.get("references") or []
    if not isinstance(refs, list):
        raise RecordError("SCHEMA value: references is not a list")
    references = []
    for ref in refs:
        if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
            raise RecordError(f"SCHEMA value: bad reference {ref!r}")
        references.append(Reference(ref["name"], str(ref.get("subject")), _int(ref, "version", "reference")))
    assert key.subject is not None and key.version is not None
    return SchemaValue(
        # The key is what compaction keeps one of: it names the subject and version.
        subject=key.subject,
        version=key.version,
        id=_int(obj, "id", "SCHEMA value"),
        schema=text,
        schema_type=schema_type.upper(),
        references=tuple(references),
        deleted=bool(obj.get("deleted", False)),
    )


def decode_level(raw: bytes, field: str) -> str:
    """The compatibilityLevel of a CONFIG value or the mode of a MODE value."""
    obj = _object(raw, f"{field} value")
    level = obj.get(field)
    if not isinstance(level, str):
        raise RecordError(f"value without a {field}")
    return level.upper()


def encode_max_id(max_id: int) -> bytes:
    return _dumps({"maxId": max_id})


def decode_max_id(raw: bytes) -> int:
    return _int(_object(raw, "max id value"), "maxId", "max id value")


def decode_delete_subject(raw: bytes) -> int:
    return _int(_object(raw, "DELETE_SUBJECT value"), "version", "DELETE_SUBJECT value")
