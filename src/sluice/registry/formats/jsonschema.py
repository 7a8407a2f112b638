"""JSON Schema schemas: draft by $schema (draft 7 when absent, as Confluent), meta-schema check, $ref resolution.

References are resolved only from the texts the registry passes in (never fetched over the network): each is
registered under its reference name and under its own $id, and every $ref in the schema and its references
must resolve at parse time, so an unresolvable one is a 42201 and not a failure at the first message.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import jsonschema
import jsonschema_specifications
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.protocols import Validator

from .parsed import InvalidSchemaError, Parsed, Schema, compact_json, load_json

_DRAFTS: dict[str, type[Validator]] = {
    "json-schema.org/draft-04/schema": jsonschema.Draft4Validator,
    "json-schema.org/draft-06/schema": jsonschema.Draft6Validator,
    "json-schema.org/draft-07/schema": jsonschema.Draft7Validator,
    "json-schema.org/draft/2019-09/schema": jsonschema.Draft201909Validator,
    "json-schema.org/draft/2020-12/schema": jsonschema.Draft202012Validator,
}
DEFAULT_DRAFT: type[Validator] = jsonschema.Draft7Validator
# The drafts' own meta-schemas, so a $ref to one resolves without the network.
META_SCHEMAS: referencing.Registry[Any] = jsonschema_specifications.REGISTRY
# referencing.Resolver (what Registry.resolver returns) is not exported by the package.
Resolver = Any


@dataclass(frozen=True)
class JsonModel:
    """The schema with what the compatibility checks and decoders need to follow its $refs."""

    root: Any
    draft: type[Validator]
    registry: referencing.Registry[Any]
    base_uri: str

    def validator(self) -> Validator:
        return self.draft(self.root, registry=self.registry)

    def resolver(self, base: str | None = None) -> Resolver:
        return self.registry.resolver(base_uri=self.base_uri if base is None else base)

    def lookup(self, resolver: Resolver, ref: str) -> tuple[Any, Resolver]:
        """A $ref seen where `resolver` applies -> (the target schema, the resolver to use inside it).

        A reference named by a relative URL ("customer.json") is tried as given after the URL joined to the
        base, since the registry registers references under their names.
        """
        for attempt in (resolver, self.registry.resolver()):
            try:
                resolved = attempt.lookup(ref)
            except referencing.exceptions.Unresolvable:
                continue
            return resolved.contents, resolved.resolver
        raise InvalidSchemaError(f"Invalid JSON schema: the $ref {ref!r} does not resolve")


def parse(text: str, references: Mapping[str, str]) -> Parsed:
    root = load_json(text)
    draft = draft_of(root, "the schema")
    check_meta(root, draft, "the schema")
    resources: list[tuple[str, referencing.Resource[Any]]] = []
    referenced: list[tuple[str, Any]] = []
    for name, ref_text in references.items():
        contents = load_json(ref_text, f"referenced schema {name!r}")
        ref_draft = draft_of(contents, f"referenced schema {name!r}", default=draft)
        check_meta(contents, ref_draft, f"referenced schema {name!r}")
        resource = _resource(contents, ref_draft)
        resources.append((name, resource))
        if resource.id():
            resources.append((resource.id() or "", resource))
        referenced.append((name, contents))
    root_resource = _resource(root, draft)
    base_uri = root_resource.id() or ""
    try:
        registry = (META_SCHEMAS.with_resources([*resources, (base_uri, root_resource)])).crawl()
    except Exception as error:  # referencing raises on malformed $id/$anchor values
        raise InvalidSchemaError(f"Invalid JSON schema: {error}") from None
    model = JsonModel(root=root, draft=draft, registry=registry, base_uri=base_uri)
    for base, ref in _refs(root, base_uri, draft):
        model.lookup(model.resolver(base), ref)
    for name, contents in referenced:
        for base, ref in _refs(contents, _resource(contents, draft).id() or name, draft):
            model.lookup(model.resolver(base), ref)
    canonical = compact_json(root, sort_keys=True)
    # Stored as Confluent's JsonSchema.canonicalString writes it: compact, keys in the order given.
    return Parsed(normalized=canonical, identity=canonical, raw=root, model=model, text=compact_json(root))


def draft_of(schema: Any, what: str, default: type[Validator] = DEFAULT_DRAFT) -> type[Validator]:
    if isinstance(schema, bool):
        return default
    if not isinstance(schema, dict):
        raise InvalidSchemaError(f"Invalid JSON schema: {what} must be an object or a boolean")
    declared = schema.get("$schema")
    if declared is None:
        return default
    key = declared.partition("://")[2].rstrip("#") if isinstance(declared, str) else None
    # A $schema naming no draft it knows is no error to Confluent's registry: JsonSchema.rawSchema keeps its
    # default, draft 7 (a typo such as json.schema.org, or a dialect of one's own, still registers).
    return _DRAFTS.get(key or "", DEFAULT_DRAFT)


def check_meta(schema: Any, draft: type[Validator], what: str) -> None:
    try:
        draft.check_schema(schema)
    except jsonschema.SchemaError as error:
        where = "/" + "/".join(str(part) for part in error.path)
        raise InvalidSchemaError(f"Invalid JSON schema: {what} at {where}: {error.message}") from None


def _resource(contents: Any, draft: type[Validator]) -> referencing.Resource[Any]:
    specification = referencing.jsonschema.specification_with(draft.META_SCHEMA["$schema"])
    return referencing.Resource.from_contents(contents, default_specification=specification)


def _refs(schema: Any, base: str, draft: type[Validator]) -> Iterator[tuple[str, str]]:
    """Every ($ref, base URI it is relative to) in a schema, following nested $id base changes."""
    id_key = "id" if draft is jsonschema.Draft4Validator else "$id"
    stack: list[tuple[Any, str]] = [(schema, base)]
    while stack:
        node, node_base = stack.pop()
        if isinstance(node, dict):
            own_id = node.get(id_key)
            if isinstance(own_id, str) and not own_id.startswith("#"):
                node_base = urljoin(node_base, own_id)
            for key, value in node.items():
                if key in ("$ref", "$dynamicRef", "$recursiveRef") and isinstance(value, str):
                    yield node_base, value
                elif key not in ("enum", "const", "default", "examples"):
                    stack.append((value, node_base))
        elif isinstance(node, list):
            stack.extend((item, node_base) for item in node)


def json_validator(schema: Schema) -> Validator:
    """A jsonschema validator for the parsed schema, with its references resolvable."""
    model: JsonModel = schema.model
    return model.validator()
