"""How a Kafka message is described: the parsed form of the DSL in docs/message-dsl.md.

Definitions are text written by us from the facts in Kafka's JSON schemas; this module turns that text into
`MessageDef` trees. `sluice.protocol.codec` compiles a tree into an encoder/decoder per version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

MAX_VERSION = 0x7FFF
PRIMITIVE_TYPES = frozenset(
    {
        "int8",
        "int16",
        "int32",
        "int64",
        "uint16",
        "uint32",
        "float64",
        "bool",
        "string",
        "bytes",
        "records",
        "uuid",
    }
)


class SchemaError(ValueError):
    """A message definition that does not follow the DSL."""


@dataclass(frozen=True, slots=True)
class Versions:
    low: int
    high: int

    @classmethod
    def parse(cls, text: str) -> Versions:
        text = text.strip().removeprefix("v")
        if text == "none":
            return NO_VERSIONS
        if text.endswith("+"):
            return cls(int(text[:-1]), MAX_VERSION)
        if "-" in text:
            low, high = text.split("-", 1)
            return cls(int(low), int(high.removeprefix("v")))
        return cls(int(text), int(text))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(range(self.low, self.high + 1))

    def __str__(self) -> str:
        if self.low > self.high:
            return "none"
        return f"{self.low}+" if self.high == MAX_VERSION else f"{self.low}-{self.high}"


NO_VERSIONS = Versions(1, 0)
ALL_VERSIONS = Versions(0, MAX_VERSION)


def snake_case(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


@dataclass(slots=True)
class FieldDef:
    name: str
    type: str  # a primitive name or a struct name
    is_array: bool
    versions: Versions
    nullable: Versions
    tag: int | None
    default: Any  # the parsed literal, or MISSING for the type's natural default
    struct: StructDef | None = None

    @property
    def attr(self) -> str:
        return snake_case(self.name)


@dataclass(slots=True)
class StructDef:
    name: str
    fields: list[FieldDef] = field(default_factory=list)


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


@dataclass(slots=True)
class MessageDef:
    name: str
    api_key: int | None
    valid: Versions
    flexible: Versions
    root: StructDef


_TOKEN_VERSION = re.compile(r"^v\d+(\+|-v?\d+)?$")


def _parse_default(text: str) -> Any:
    if text == "null":
        return None
    if text in ("true", "false"):
        return text == "true"
    if text.startswith('"') and text.endswith('"'):
        return text[1:-1]
    try:
        return int(text, 0)
    except ValueError:
        try:
            return float(text)
        except ValueError as exc:
            raise SchemaError(f"bad default {text!r}") from exc


def _parse_field_line(line: str, lineno: int) -> FieldDef:
    tokens = line.split()
    if len(tokens) < 2:
        raise SchemaError(f"line {lineno}: expected 'Name Type [options]': {line!r}")
    name, type_text, *options = tokens
    is_array = type_text.startswith("[]")
    base = type_text[2:] if is_array else type_text
    if not base or not (base in PRIMITIVE_TYPES or base[0].isupper()):
        raise SchemaError(f"line {lineno}: unknown type {type_text!r}")
    versions, nullable, tag, default = ALL_VERSIONS, NO_VERSIONS, None, MISSING
    for option in options:
        if _TOKEN_VERSION.match(option):
            versions = Versions.parse(option)
        elif option.startswith("null="):
            nullable = Versions.parse(option[5:])
        elif option.startswith("tag="):
            tag = int(option[4:])
        elif option.startswith("default="):
            default = _parse_default(option[8:])
        else:
            raise SchemaError(f"line {lineno}: unknown option {option!r}")
    return FieldDef(name, base, is_array, versions, nullable, tag, default)


def parse_fields(text: str, root_name: str) -> StructDef:
    """Parse indented field lines into a struct tree (two spaces per nesting level)."""
    root = StructDef(root_name)
    known: dict[str, StructDef] = {}
    # (indent, struct) pairs: the struct whose children are expected at deeper indentation.
    stack: list[tuple[int, StructDef]] = [(-1, root)]
    last_field: FieldDef | None = None
    last_indent = -1
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent > last_indent and last_field is not None:
            # First child of the previous line: that line declared a struct.
            if last_field.type in PRIMITIVE_TYPES:
                raise SchemaError(f"line {lineno}: fields nested under primitive {last_field.name}")
            struct = StructDef(last_field.type)
            if last_field.type in known:
                raise SchemaError(f"line {lineno}: struct {last_field.type} defined twice")
            known[struct.name] = struct
            last_field.struct = struct
            stack.append((last_indent, struct))
        while indent <= stack[-1][0]:
            stack.pop()
        parsed = _parse_field_line(line, lineno)
        stack[-1][1].fields.append(parsed)
        last_field, last_indent = parsed, indent
    _resolve_structs(root, known)
    return root


def _resolve_structs(struct: StructDef, known: dict[str, StructDef]) -> None:
    for f in struct.fields:
        if f.type in PRIMITIVE_TYPES:
            continue
        if f.struct is None:
            if f.type not in known:
                raise SchemaError(f"{struct.name}.{f.name}: struct {f.type} has no fields")
            f.struct = known[f.type]
        else:
            _resolve_structs(f.struct, known)


@dataclass
class Api:
    """One Kafka API: its key, version ranges and the request/response field definitions."""

    key: int
    name: str
    valid: str
    flexible: str
    request: str
    response: str

    @cached_property
    def request_def(self) -> MessageDef:
        return self._message(self.name + "Request", self.request)

    @cached_property
    def response_def(self) -> MessageDef:
        return self._message(self.name + "Response", self.response)

    @property
    def versions(self) -> Versions:
        return Versions.parse(self.valid)

    def _message(self, name: str, text: str) -> MessageDef:
        return MessageDef(
            name,
            self.key,
            Versions.parse(self.valid),
            Versions.parse(self.flexible),
            parse_fields(text, name),
        )


@dataclass
class Struct:
    """A versioned message that is not an API call (consumer protocol payloads, internal records)."""

    name: str
    valid: str
    flexible: str
    fields: str

    @cached_property
    def message_def(self) -> MessageDef:
        return MessageDef(
            self.name,
            None,
            Versions.parse(self.valid),
            Versions.parse(self.flexible),
            parse_fields(self.fields, self.name),
        )
