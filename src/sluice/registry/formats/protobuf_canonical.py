"""A .proto element tree printed as Confluent's registry prints it.

Confluent stores and returns the text of ProtobufSchema.canonicalString(), which is
ProtobufSchemaUtils.toString over the tree Wire parsed from the schema (normalize=False here), and with
?normalize=true the text of ProtobufSchema.normalize(), ProtobufSchemaUtils.toNormalizedString
(normalize=True). The layout rules carried over from that printer:

- each block (imports, options, types, extends, services; inside a message: reserved, options, fields,
  oneofs, groups, extension ranges, extends, nested types) starts with a newline, so blocks after the first
  are separated by an empty line, which inside a nested block keeps the indentation of its lines ("  ");
- messages come before enums, at the top and inside each message; fields come before oneofs;
- options are printed as written; a bracket with more than one option goes one option per line;
  aggregate values go one "key: value" per line; comments are gone.

Normalizing also: drops `syntax = "proto2";`, sorts and dedups imports, resolves type names and custom
option names to full names (".pkg.Type" for types; "(pkg.option)" for options) within the schema and its
references, sorts options by name (merging repeated assignments of a non-repeated option), sorts fields
by number, oneofs by their first field, enum constants by number, splits reserved and extension ranges
one per statement in order, and rewrites numbers the way java.text.DecimalFormat does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

from .parsed import InvalidSchemaError
from .protobuf_syntax import (
    MAX_TAG,
    Enum,
    EnumConstant,
    Extend,
    Field,
    Group,
    Identifier,
    Message,
    OneOf,
    Option,
    Primitive,
    ProtoFile,
    Ranges,
    Rpc,
    Service,
    as_item,
)
from .protobuf_text import SCALAR_NAMES as SCALARS

_NUMERIC = SCALARS - {"bool", "string", "bytes"}
_NAMED_ESCAPES = {
    "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
    "\\": "\\\\", "'": "\\'", '"': '\\"',
}  # fmt: skip


@dataclass(frozen=True)
class Names:
    """What normalizing resolves names against: the types and extensions of the schema and its references.

    type_exists(full name) and extension(full name) -> (is repeated, the fields of its message type, or
    None); both take names without the leading dot.
    """

    type_exists: Callable[[str], bool]
    extension: Callable[[str], tuple[bool, Any] | None]


class _Printer:
    def __init__(self, package: str | None, names: Names | None) -> None:
        self.normalize = names is not None
        self.names = names
        self.package = [part for part in (package or "").split(".") if part]
        self.scope: list[str] = []

    # -- names
    def _resolve(self, name: str, exists: Callable[[str], bool]) -> str | None:
        """Confluent's Context.resolve: a leading dot means a full name; else the innermost scope first."""
        if name.startswith("."):
            return name[1:] if exists(name[1:]) else None
        prefix = self.package + self.scope
        while prefix:
            candidate = ".".join(prefix) + "." + name
            if exists(candidate):
                return candidate
            prefix = prefix[:-1]
        return name if exists(name) else None

    def type_name(self, name: str) -> str:
        assert self.names is not None
        resolved = self._resolve(name, self.names.type_exists)
        if resolved is None:
            raise InvalidSchemaError(f"Invalid Protobuf schema: could not resolve type {name}")
        return "." + resolved

    def extension_name(self, name: str) -> str | None:
        assert self.names is not None
        extension = self.names.extension
        return self._resolve(name, lambda full: extension(full) is not None)

    # -- file
    def file(self, proto: ProtoFile) -> str:
        out = []
        if proto.edition is not None:
            out.append(f'edition = "{proto.edition}";\n')
        elif proto.syntax is not None and (not self.normalize or proto.syntax == "proto3"):
            out.append(f'syntax = "{proto.syntax}";\n')
        if proto.package is not None:
            out.append(f"package {proto.package};\n")
        imports, public = proto.imports, proto.public_imports
        if self.normalize:
            imports, public = sorted(set(imports)), sorted(set(public))
        imports = [f'import "{name}";\n' for name in imports] + [
            f'import public "{name}";\n' for name in public
        ]
        out += block(imports, nested=False)
        out += block(self.option_statements(proto.options), nested=False)
        out += block(self.types(proto.types), nested=False)
        out += block([self.extend(extend) for extend in self.extends(proto.extends)], nested=False)
        out += block([self.service(service) for service in proto.services], nested=False)
        return "".join(out)

    def types(self, types: list[Message | Enum]) -> list[str]:
        # The order of messages matters (clients send message indexes), so it is never sorted.
        ordered = [t for t in types if isinstance(t, Message)] + [t for t in types if isinstance(t, Enum)]
        out = []
        for element in ordered:
            self.scope.append(element.name)
            out.append(self.message(element) if isinstance(element, Message) else self.enum(element))
            self.scope.pop()
        return out

    def service(self, service: Service) -> str:
        out = [f"service {service.name} {{"]
        out += block(self.option_statements(service.options))
        out += block([self.rpc(rpc) for rpc in service.rpcs])
        return "".join([*out, "}\n"])

    def rpc(self, rpc: Rpc) -> str:
        request = self.type_name(rpc.request) if self.normalize else rpc.request
        response = self.type_name(rpc.response) if self.normalize else rpc.response
        text = (
            f"rpc {rpc.name} ({'stream ' if rpc.request_streaming else ''}{request}) returns "
            f"({'stream ' if rpc.response_streaming else ''}{response})"
        )
        options = self.option_statements(rpc.options)
        if options:
            text += " {\n" + "".join(indent(option) for option in options) + "}"
        return text + ";\n"

    # -- messages
    def message(self, message: Message) -> str:
        oneofs = message.oneofs
        if self.normalize:
            oneofs = [replace(o, fields=self.by_tag(o.fields)) for o in oneofs if o.fields]
            oneofs.sort(key=lambda oneof: oneof.fields[0].tag)
        out = [f"message {message.name} {{"]
        out += block([self.ranges("reserved", r) for r in self.split(message.reserveds, True)])
        out += block(self.option_statements(message.options))
        out += block([self.field(field) for field in self.by_tag(message.fields)])
        out += block([self.oneof(oneof) for oneof in oneofs])
        out += block([self.group(group) for group in self.by_tag(message.groups)])
        out += block([self.ranges("extensions", r) for r in self.split(message.extensions, False)])
        out += block([self.extend(extend) for extend in self.extends(message.extends)])
        out += block(self.types(message.types))
        return "".join([*out, "}\n"])

    def oneof(self, oneof: OneOf) -> str:
        out = [f"oneof {oneof.name} {{"]
        out += block(self.option_statements(oneof.options))
        out += block([self.field(field) for field in oneof.fields])  # sorted by the caller
        out += block([self.group(group) for group in self.by_tag(oneof.groups)])
        return "".join([*out, "}\n"])

    def group(self, group: Group) -> str:
        label = f"{group.label} " if group.label else ""
        fields = block([self.field(field) for field in self.by_tag(group.fields)])
        return "".join([f"{label}group {group.name} = {group.tag} {{", *fields, "}\n"])

    def extends(self, extends: list[Extend]) -> list[Extend]:
        if not self.normalize:
            return extends
        grouped: dict[str, list[Field]] = {}
        for extend in extends:
            grouped.setdefault(self.type_name(extend.name), []).extend(extend.fields)
        return [Extend(name, fields) for name, fields in grouped.items()]

    def extend(self, extend: Extend) -> str:
        fields = block([self.field(field) for field in self.by_tag(extend.fields)])
        return "".join([f"extend {extend.name} {{", *fields, "}\n"])

    def field(self, field: Field) -> str:
        label, type_name = field.label, field.type
        if self.normalize:
            if type_name.startswith("map<"):
                key, _, value = type_name[4:-1].partition(", ")
                if value not in SCALARS:
                    value = self.type_name(value)
                type_name, label = f"map<{key}, {value}>", None
            elif type_name not in SCALARS:
                type_name = self.type_name(type_name)
        options = list(field.options)
        if field.default is not None:
            simple = type_name.rpartition(".")[2]
            # Confluent prints a bytes default as a number (unquoted), which no parser reads back; it is
            # quoted here, like a string.
            kind = {"bool": "BOOLEAN", "string": "STRING", "bytes": "STRING"}.get(
                simple, "NUMBER" if simple in _NUMERIC else "ENUM"
            )
            options.append(Option("default", kind, field.default))
        if field.json_name is not None:
            options.append(Option("json_name", "STRING", field.json_name))
        text = f"{label + ' ' if label else ''}{type_name} {field.name} = {field.tag}"
        options = self.options(options)
        return text + (" " + self.option_list(options) if options else "") + ";\n"

    # -- enums
    def enum(self, enum: Enum) -> str:
        out = [f"enum {enum.name} {{"]
        out += block([self.ranges("reserved", r) for r in self.split(enum.reserveds, True)])
        if not enum.reserveds and (enum.options or enum.constants):
            out.append("\n")  # an enum's options and constants follow the reserved ones without a gap
        out.extend(indent(option) for option in self.option_statements(enum.options))
        constants = enum.constants
        if self.normalize:
            constants = sorted(constants, key=lambda constant: (constant.tag, constant.name))
        out.extend(indent(self.constant(constant)) for constant in constants)
        out.append("}\n")
        return "".join(out)

    def constant(self, constant: EnumConstant) -> str:
        options = self.options(constant.options)
        suffix = " " + self.option_list(options) if options else ""
        return f"{constant.name} = {constant.tag}{suffix};\n"

    # -- reserved and extension ranges
    def split(self, statements: list[Ranges], with_names: bool) -> list[Ranges]:
        if not self.normalize:
            return statements
        single = [
            Ranges([value], statement.options) for statement in statements for value in statement.values
        ]

        def order(ranges: Ranges) -> tuple[int, str]:
            value = ranges.values[0]
            start = value[0] if isinstance(value, tuple) else value if isinstance(value, int) else 2**31 - 1
            text = f"{value[0]}..{value[1]}" if isinstance(value, tuple) else str(value)
            return (start, text if with_names else "")

        return sorted(single, key=order)

    def ranges(self, keyword: str, ranges: Ranges) -> str:
        parts = []
        for value in ranges.values:
            if isinstance(value, Identifier):
                parts.append(value)
            elif isinstance(value, str):
                parts.append(f'"{value}"')
            elif isinstance(value, int):
                parts.append(str(value))
            elif self.normalize and value[0] == value[1]:
                parts.append(str(value[0]))
            else:
                parts.append(f"{value[0]} to {value[1] if value[1] < MAX_TAG else 'max'}")
        options = self.options(ranges.options)
        suffix = " " + self.option_list(options) if options else ""
        return f"{keyword} {', '.join(parts)}{suffix};\n"

    def by_tag(self, items: list[Any]) -> list[Any]:
        return sorted(items, key=lambda item: item.tag) if self.normalize else items

    # -- options
    def options(self, options: list[Option]) -> list[Option]:
        if not self.normalize or not options:
            return options
        assert self.names is not None
        named = []
        for option in options:
            if option.parenthesized:
                resolved = self.extension_name(option.name)
                if resolved is not None:
                    option = _as_map(replace(option, name=resolved))
            named.append(option)
        named.sort(key=lambda option: option.name)
        grouped: dict[str, list[Option]] = {}
        for option in named:
            grouped.setdefault(option.name, []).append(option)
        result = []
        for name, group in grouped.items():
            extension = self.names.extension(name)
            if extension is not None and not extension[0]:
                merged = group[0]
                for later in group[1:]:
                    merged = _merge_option(extension[1], merged, later)
                result.append(merged)
            else:
                result.extend(group)
        return result

    def option_statements(self, options: list[Option]) -> list[str]:
        return [f"option {self.option(option)};\n" for option in self.options(options)]

    def option(self, option: Option) -> str:
        name = f"({option.name})" if option.parenthesized else option.name
        kind, value = option.kind, option.value
        if kind == "STRING":
            return f'{name} = "{escape(value)}"'
        if kind in ("BOOLEAN", "ENUM"):
            return f"{name} = {value}"
        if kind == "NUMBER":
            return f"{name} = {self.number(value)}"
        if kind == "OPTION":
            return f"{name}.{self.option(replace(value, parenthesized=False))}"
        if kind == "MAP":
            return f"{name} = {{\n{self.option_map(value)}}}"
        return f"{name} = {self.option_list(value)}"

    def option_list(self, items: list[Any]) -> str:
        if len(items) == 1:
            return f"[{self.option_value(items[0])}]"
        return "[\n" + comma_lines([self.option_value(item) for item in items]) + "]"

    def option_map(self, values: dict[str, Any]) -> str:
        if self.normalize:
            assert self.names is not None
            entries: dict[str, Any] = {}
            for key, value in values.items():
                if isinstance(value, list) and not value:
                    continue
                if key.startswith("[") and key.endswith("]"):
                    resolved = self.extension_name(key[1:-1])
                    key = f"[{resolved}]" if resolved is not None else key
                entries.setdefault(key, value)
            values = dict(sorted(entries.items()))
        return comma_lines([f"{key}: {self.option_value(value)}" for key, value in values.items()])

    def option_value(self, value: Any) -> str:
        if isinstance(value, str):
            return f'"{escape(value)}"'
        if isinstance(value, dict):
            return "{\n" + self.option_map(value) + "}"
        if isinstance(value, list):
            if self.normalize and len(value) == 1:
                return self.option_value(value[0])
            return "[\n" + comma_lines([self.option_value(v) for v in value]) + "]"
        if isinstance(value, Primitive):
            return self.number(value.value) if value.kind == "NUMBER" else value.value
        if isinstance(value, Option):
            return self.option(value)
        return str(value)

    def number(self, text: str) -> str:
        return format_number(text) if self.normalize else text


def render(proto: ProtoFile, names: Names | None = None) -> str:
    """Confluent's canonical text of the file; its normalized text when `names` is given."""
    return _Printer(proto.package, names).file(proto)


def block(items: list[str], *, nested: bool = True) -> list[str]:
    """A block of a file or of an element: nothing when empty, else a newline and then the items (indented
    one level inside an element)."""
    if not items:
        return []
    return ["\n", *(indent(item) if nested else item for item in items)]


def comma_lines(items: list[str]) -> str:
    """Items one to a line, indented, a comma after each but the last (lists, aggregates, option brackets)."""
    last = len(items) - 1
    return "".join(indent(item + ("," if i < last else "")) for i, item in enumerate(items))


def indent(text: str) -> str:
    """Confluent's appendIndented: two spaces before every line, empty lines included (trailing ones not)."""
    lines = text.split("\n")
    while len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return "".join(f"  {line}\n" for line in lines)


def escape(text: str) -> str:
    """ProtobufSchemaUtils.escapeChars; other control characters (which it leaves raw, and protoc refuses
    in a literal) are written as octal escapes so the text still compiles."""
    out = []
    for char in text:
        if char in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\{ord(char):03o}")
        else:
            out.append(char)
    return "".join(out)


def format_number(text: str) -> str:
    """A number as Confluent's normalizer writes it: NumberUtils.createNumber then a DecimalFormat without
    grouping (integers in decimal, at most three fraction digits, no exponent); others (inf, nan) as is."""
    body = text.lower().removeprefix("-")
    sign = "-" if text.startswith("-") else ""
    try:
        if body.startswith("0x"):
            return sign + str(int(body, 16))
        if len(body) > 1 and body.startswith("0") and body.isdigit():
            return sign + str(int(body, 8))
        if body.isdigit():
            return sign + str(int(body))
        value = Decimal(text.rstrip("fFdD")).quantize(Decimal("0.001"), rounding=ROUND_HALF_EVEN)
    except (ValueError, InvalidOperation):
        return text
    if not value.is_finite():
        return text
    printed = f"{value:f}".rstrip("0").rstrip(".")
    return "0" if printed in ("-0", "") else printed


def _as_map(option: Option) -> Option:
    """Confluent's transform: "(a).b.c = v" becomes "(a) = { b: { c: v } }"."""
    if option.kind != "OPTION":
        return option
    return Option(option.name, "MAP", _option_map(option), option.parenthesized)


def _option_map(option: Option) -> dict[str, Any]:
    inner: Option = option.value
    value = _option_map(inner) if inner.kind == "OPTION" else as_item(inner.kind, inner.value)
    return {inner.name: value}


def _merge_option(message: Any, existing: Option, replacement: Option) -> Option:
    replacement = _as_map(replacement)
    if existing.kind == "MAP" and replacement.kind == "MAP":
        merged = _merge_maps(message, existing.value, replacement.value)
        return Option(replacement.name, "MAP", merged, replacement.parenthesized)
    return replacement


def _merge_maps(message: Any, existing: dict[str, Any], replacement: dict[str, Any]) -> dict[str, Any]:
    """Two aggregate values of one option set twice: a singular message field merges, a singular scalar is
    replaced, anything else (repeated, or a field not found) gathers the values into a list."""
    merged = dict(existing)
    for key, value in replacement.items():
        if key not in merged:
            merged[key] = value
            continue
        field = message.fields_by_name.get(key) if message is not None else None
        singular = field is not None and not field.is_repeated
        old = merged[key]
        if singular and isinstance(old, dict) and isinstance(value, dict) and field.message_type is not None:
            merged[key] = _merge_maps(field.message_type, old, value)
        elif singular:
            merged[key] = value
        else:
            items: list[Any] = []
            for item in [
                *(old if isinstance(old, list) else [old]),
                *(value if isinstance(value, list) else [value]),
            ]:
                if item not in items:
                    items.append(item)
            merged[key] = items
    return merged
