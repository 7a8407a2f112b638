"""The console's view of a Schema Registry: subjects, versions, diffs, and decoding framed messages.

Blocking (confluent-kafka's SchemaRegistryClient, which caches schemas by id and version); the
console runs these calls on its executor. Decoding is best effort: a key or value that is not
registry-framed, whose id the registry does not know, or whose payload does not parse is shown as
the console shows any bytes, with a note saying why it was not decoded.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import difflib
import io
import json
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sluice.client import schema_registry as registry
from sluice.client.schema_framing import decode_message_index, is_framed, split_frame
from sluice.client.schema_registry import AVRO, JSON, PROTOBUF, RegistryConnection, RegistrySchema
from sluice.console.cluster import ClusterError
from sluice.console.render import MAX_SHOWN_BYTES, Rendered, render_bytes

MAX_SUBJECTS = 1000
_CACHED_IDS = 512
_FORMAT_NAMES = {AVRO: "avro", PROTOBUF: "protobuf", JSON: "json-schema"}


@dataclass
class SubjectRow:
    name: str
    schema_type: str
    latest: int
    schema_id: int
    versions: int


@dataclass
class SchemaVersion:
    subject: str
    version: int
    schema_id: int
    schema_type: str
    text: str  # pretty-printed when it is JSON (Avro, JSON Schema), so diffs show structure
    references: list[tuple[str, str, int]]


@dataclass
class DiffLine:
    kind: str  # "add", "del", "hunk" or "same"
    text: str


def _pretty(schema_type: str, text: str) -> str:
    if schema_type in (AVRO, JSON):
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def unified_diff(old: SchemaVersion, new: SchemaVersion) -> list[DiffLine]:
    """Line diff of two versions' (pretty-printed) texts, with three lines of context."""
    lines: list[DiffLine] = []
    diff = difflib.unified_diff(
        old.text.splitlines(),
        new.text.splitlines(),
        f"version {old.version} (id {old.schema_id})",
        f"version {new.version} (id {new.schema_id})",
        lineterm="",
    )
    for line in diff:
        if line.startswith(("---", "+++")):
            continue
        kind = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "same")
        lines.append(DiffLine(kind, line))
    return lines


class SchemaBrowser:
    """One registry, as the console reads it."""

    def __init__(self, url: str, timeout_s: float, settings: Sequence[tuple[str, str]] = ()) -> None:
        """``settings``: confluent-kafka SchemaRegistryClient settings (basic auth, TLS files)."""
        self.url = url.rstrip("/")
        # One retry at most: a page waits on these calls, and a registry that is down should say so soon.
        limits = (("max.retries", "1"), ("timeout", str(int(max(timeout_s, 1)))))
        self.connection = RegistryConnection(self.url, (*settings, *limits))
        self.shown_url = self.connection.masked(self.url)
        self._decoders: dict[int, tuple[RegistrySchema, str | None, Callable[[memoryview], Any]]] = {}
        self._lock = threading.Lock()

    def _client(self) -> Any:
        return registry.client(self.connection)

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:
            status = getattr(exc, "http_status_code", None)
            code = getattr(exc, "error_code", None)
            message = getattr(exc, "error_message", None) or str(exc) or type(exc).__name__
            message = self.connection.masked(message)
            if status == 404:
                raise ClusterError("NOT_FOUND", f"{what}: {message} (error {code})") from None
            if isinstance(status, int) and 400 <= status < 500 and status not in (401, 403):
                # The registry refused what the caller asked: 400. (401/403 are the console's own credentials.)
                raise ClusterError("INVALID_REQUEST", f"{what}: {message} (HTTP {status}, error {code})") from None
            raise ClusterError(
                "REGISTRY_UNREACHABLE" if status is None else "REGISTRY_ERROR",
                f"schema registry {self.shown_url}: {what} failed: {message}"
                + ("" if status is None else f" (HTTP {status}, error {code})"),
            ) from None

    def subjects(self) -> list[SubjectRow]:
        client = self._client()
        names = self._call("listing subjects", client.get_subjects)[:MAX_SUBJECTS]
        rows = []
        for name in sorted(names):
            versions = self._call(f"versions of {name}", lambda n=name: client.get_versions(n))
            if not versions:
                continue
            latest = self._call(
                f"{name} v{max(versions)}", lambda n=name, v=max(versions): client.get_version(n, v)
            )
            schema_type = (latest.schema.schema_type or AVRO).upper()
            rows.append(SubjectRow(name, schema_type, latest.version, latest.schema_id, len(versions)))
        return rows

    def versions(self, subject: str) -> list[int]:
        return sorted(self._call(f"subject {subject!r}", lambda: self._client().get_versions(subject)))

    def version(self, subject: str, version: int) -> SchemaVersion:
        registered = self._call(
            f"subject {subject!r} version {version}", lambda: self._client().get_version(subject, version)
        )
        schema_type = (registered.schema.schema_type or AVRO).upper()
        return SchemaVersion(
            subject=subject,
            version=registered.version,
            schema_id=registered.schema_id,
            schema_type=schema_type,
            text=_pretty(schema_type, registered.schema.schema_str),
            references=[(r.name, r.subject, r.version) for r in registered.schema.references or []],
        )

    # ----- decoding messages -----

    def decode(self, data: bytes | None) -> Rendered | None:
        """The decoded form of a framed key or value; None when it is not framed (shown as usual)."""
        if not is_framed(data):
            return None
        assert data is not None
        schema_id, payload = split_frame(data)
        try:
            schema, subject, read = self._decoder(schema_id)
        except (ClusterError, registry.RegistryLookupError) as error:
            reason = error.message if isinstance(error, ClusterError) else str(error)
            return _undecoded(data, f"looks registry-framed, but not decoded: {reason}")
        try:
            value = read(payload)
        except Exception as exc:
            return _undecoded(data, f"schema id {schema_id} ({subject}): the payload does not decode: {exc}")
        pretty = json.dumps(value, indent=2, ensure_ascii=False, default=_json_default)
        compact = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=_json_default)
        return Rendered(
            _FORMAT_NAMES[schema.schema_type],
            pretty[:MAX_SHOWN_BYTES],
            len(data),
            len(pretty) > MAX_SHOWN_BYTES,
            " ".join(compact.split())[:140],
            schema_id=schema_id,
            subject=subject,
        )

    def _decoder(self, schema_id: int) -> tuple[RegistrySchema, str | None, Callable[[memoryview], Any]]:
        with self._lock:
            found = self._decoders.get(schema_id)
        if found is not None:
            return found
        schema = registry.by_id(self.connection, schema_id)
        subjects = self._call(
            f"subjects of schema id {schema_id}", lambda: self._client().get_subjects_by_schema_id(schema_id)
        )
        decoder = (schema, ", ".join(subjects) or None, _reader(schema))
        with self._lock:
            if len(self._decoders) >= _CACHED_IDS:
                self._decoders.clear()
            self._decoders[schema_id] = decoder
        return decoder

    def decode_messages(
        self, messages: Sequence[Any]
    ) -> dict[tuple[int, int], tuple[Rendered | None, Rendered | None]]:
        """(key, value) decoded per (partition, offset), for the messages that have a framed part."""
        out = {}
        for message in messages:
            key, value = self.decode(message.key), self.decode(message.value)
            if key is not None or value is not None:
                out[(message.partition, message.offset)] = (key, value)
        return out


def _undecoded(data: bytes, note: str) -> Rendered:
    shown = render_bytes(data)
    shown.note = note
    return shown


def _reader(schema: RegistrySchema) -> Callable[[memoryview], Any]:
    if schema.schema_type == AVRO:
        import fastavro

        parsed = registry.parsed_avro(schema)
        return lambda payload: fastavro.schemaless_reader(io.BytesIO(payload), parsed, None)
    if schema.schema_type == JSON:
        return lambda payload: json.loads(bytes(payload))
    from google.protobuf.json_format import MessageToDict

    from sluice.registry.formats import parse_schema, protobuf_message_class

    parsed = parse_schema(PROTOBUF, schema.text, dict(schema.references))
    classes: dict[tuple[int, ...], type] = {}

    def read_protobuf(payload: memoryview) -> Any:
        index, body = decode_message_index(payload)
        if index not in classes:
            classes[index] = protobuf_message_class(parsed, index)
        message = classes[index]()
        message.ParseFromString(bytes(body))
        return {
            "@type": message.DESCRIPTOR.full_name,
            **MessageToDict(message, preserving_proto_field_name=True),
        }

    return read_protobuf
