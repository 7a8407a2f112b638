"""What every schema format hands back: the parsed schema, its error type, and the input bounds they share."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

# A schema is a few KB in practice; Confluent's biggest real-world ones are well under 1 MB. The bounds keep
# a hostile request from pinning a CPU or blowing the interpreter's stack inside json/fastavro/protoc.
MAX_SCHEMA_CHARS = 1_000_000
MAX_NESTING = 100
MAX_REFERENCES = 1_000


class InvalidSchemaError(ValueError):
    """The schema text cannot be used; str(error) is the message for Confluent's error 42201."""


class Reference(NamedTuple):
    """A schema reference as the registry stores it: the name used inside the schema, and where it lives."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True, eq=False)
class Schema:
    """A parsed schema of any type (the registry's ParsedSchema).

    `model` is the format's own view used by the compatibility checks (not part of the public surface).
    """

    schema_type: str
    text: str
    fingerprint: str
    raw: Any
    references: tuple[Reference, ...] = ()
    model: Any = field(default=None, repr=False)


class Parsed(NamedTuple):
    """What a format's parser returns; parse_schema turns it into the Schema."""

    normalized: str  # the text stored when registering with normalize=true
    identity: str  # equal exactly when Confluent treats two schemas (of this type) as the same
    raw: Any
    model: Any
    text: str | None = None  # the text to store otherwise, when not the one given (e.g. canonical form)
    # equal exactly when Confluent treats two schemas registered with normalize=true as the same; None
    # when that is `identity` (Protobuf: Confluent compares the normalized texts then, the canonical ones
    # otherwise)
    normalized_identity: str | None = None


def fingerprint_of(schema_type: str, canonical: str, references: tuple[Reference, ...]) -> str:
    """A digest that is equal exactly when the type, the canonical text and the reference list are."""
    digest = hashlib.sha256()
    digest.update(schema_type.encode())
    digest.update(b"\0")
    digest.update(canonical.encode())
    for ref in references:
        digest.update(b"\0" + json.dumps([ref.name, ref.subject, ref.version]).encode())
    return digest.hexdigest()


def check_size(text: object, what: str = "schema") -> str:
    if not isinstance(text, str):
        raise InvalidSchemaError(f"the {what} must be a string, not {type(text).__name__}")
    if len(text) > MAX_SCHEMA_CHARS:
        raise InvalidSchemaError(
            f"the {what} is {len(text)} characters long; the limit is {MAX_SCHEMA_CHARS}"
        )
    return text


def load_json(text: str, what: str = "schema") -> Any:
    """json.loads bounded in size and nesting, raising InvalidSchemaError only."""
    check_size(text, what)
    try:
        value = json.loads(text)
    except RecursionError:
        raise InvalidSchemaError(f"the {what} is nested deeper than {MAX_NESTING} levels") from None
    except ValueError as error:
        raise InvalidSchemaError(f"the {what} is not valid JSON: {error}") from None
    check_nesting(value, what)
    return value


def check_nesting(value: Any, what: str = "schema") -> None:
    """Refuse JSON nested deeper than MAX_NESTING, so the recursive walkers after this stay bounded."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise InvalidSchemaError(f"the {what} is nested deeper than {MAX_NESTING} levels")
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)


def compact_json(value: Any, *, sort_keys: bool = False) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=sort_keys, ensure_ascii=False)


@dataclass(frozen=True)
class Problem:
    """One reason a reader schema cannot read what a writer schema wrote, in Confluent's message shape."""

    error_type: str
    path: str
    description: str
    info: str = ""

    def message(self) -> str:
        return (
            f"{{errorType:'{self.error_type}', description:'{self.description}', "
            f"additionalInfo:'{self.info or self.path}'}}"
        )


@dataclass(frozen=True)
class Roles:
    """Which schema reads and which writes, named as the user knows them ("new"/"old")."""

    reader: str
    writer: str
