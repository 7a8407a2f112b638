"""Parsed forms of the stored schemas, made on demand and kept (an id's schema never changes), and the
fingerprint indexes that lookups and idempotent registers use. Pure: parsing is CPU only."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from sluice.registry import errors
from sluice.registry.formats import InvalidSchemaError, parse_schema
from sluice.registry.records import Reference, SchemaValue
from sluice.registry.state import RegistryState

# Distinct request bodies whose parse is remembered: a client asks about the same few schemas again and again.
# Only schemas up to REQUEST_CACHE_MAX_CHARS are kept, so the cache stays within ~128 MiB whatever is sent.
REQUEST_CACHE_SIZE = 2048
REQUEST_CACHE_MAX_CHARS = 64 * 1024
MAX_REFERENCE_DEPTH = 32


class Catalog:
    def __init__(self, state: RegistryState) -> None:
        self.state = state
        self._parsed: dict[int, Any] = {}
        # Stored schemas are compared as stored: Confluent matches a request (normalized or not, as it asks)
        # against the stored texts, never re-normalizing them.
        self._ids_by_fingerprint: dict[str, int] = {}
        self._indexed: set[int] = set()
        self._requests: OrderedDict[tuple[str, str, tuple[Reference, ...], bool], Any] = OrderedDict()

    def reference_texts(self, references: Sequence[Reference], depth: int = 0) -> dict[str, str]:
        """name -> schema text for every reference, transitively (all levels flattened in)."""
        if depth > MAX_REFERENCE_DEPTH:
            raise errors.invalid_schema(f"references are nested deeper than {MAX_REFERENCE_DEPTH} levels")
        texts: dict[str, str] = {}
        for ref in references:
            target = self.state.version(ref.subject, ref.version)
            if target is None:
                raise errors.invalid_schema(
                    f"reference {ref.name!r} names subject '{ref.subject}' version {ref.version}, which does not exist"
                )
            texts.update(self.reference_texts(target.references, depth + 1))
            texts[ref.name] = target.schema
        return texts

    def parse_request(
        self, schema_type: str, text: str, references: tuple[Reference, ...], normalize: bool
    ) -> Any:
        """Parse a schema a client sent (42201 if it cannot be used); the last few thousand are remembered."""
        cache_key = (schema_type, text, references, normalize)
        parsed = self._requests.get(cache_key)
        if parsed is not None:
            self._requests.move_to_end(cache_key)
            return parsed
        try:
            parsed = parse_schema(
                schema_type,
                text,
                self.reference_texts(references),
                normalize=normalize,
                reference_list=references,
            )
        except InvalidSchemaError as exc:
            raise errors.invalid_schema(str(exc)) from None
        if len(text) <= REQUEST_CACHE_MAX_CHARS:
            self._requests[cache_key] = parsed
            if len(self._requests) > REQUEST_CACHE_SIZE:
                self._requests.popitem(last=False)
        return parsed

    def parsed(self, schema_id: int) -> Any | None:
        """The stored schema behind an id, parsed; None if it no longer parses (a newer writer's type, say)."""
        if schema_id in self._parsed:
            return self._parsed[schema_id]
        stored = self.state.schemas.get(schema_id)
        if stored is None:
            return None
        try:
            parsed = parse_schema(
                stored.schema_type,
                stored.text,
                self.reference_texts(stored.references),
                reference_list=stored.references,
            )
        except (InvalidSchemaError, errors.RegistryError):
            parsed = None
        self._parsed[schema_id] = parsed
        return parsed

    def parsed_versions(self, versions: Sequence[SchemaValue]) -> list[Any]:
        return [p for p in (self.parsed(v.id) for v in versions) if p is not None]

    def id_with_fingerprint(self, fingerprint: str) -> int | None:
        """The id of a stored schema that is the same schema, if any (the lowest such id)."""
        index = self._ids_by_fingerprint
        for schema_id in sorted(set(self.state.schemas) - self._indexed):
            self._indexed.add(schema_id)
            parsed = self.parsed(schema_id)
            if parsed is not None:
                index.setdefault(parsed.fingerprint, schema_id)
        found = index.get(fingerprint)
        if found is not None and found not in self.state.schemas:
            # Permanently deleted since it was indexed: forget it, and look again among the rest.
            del index[fingerprint]
            for schema_id in sorted(self.state.schemas):
                parsed = self.parsed(schema_id)
                if parsed is not None and parsed.fingerprint == fingerprint:
                    index[fingerprint] = schema_id
                    return schema_id
            return None
        return found

    def find_in_subject(self, subject: str, fingerprint: str, *, deleted: bool = False) -> SchemaValue | None:
        """The latest version of `subject` holding this same schema."""
        for value in reversed(self.state.versions(subject, deleted=deleted)):
            parsed = self.parsed(value.id)
            if parsed is not None and parsed.fingerprint == fingerprint:
                return value
        return None
