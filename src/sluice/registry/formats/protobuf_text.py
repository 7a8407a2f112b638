"""A compiled .proto file printed back as .proto text: how a schema registered as a base64 serialized
FileDescriptorProto (what confluent-kafka's ProtobufSerializer registers) becomes text to read and store.

The text is a pure function of the descriptor, so comments, layout, import order and option order do not
show, and type names are written fully qualified (".pkg.Msg"), so the text compiles to the same descriptor
wherever it is read. Options whose meaning the descriptor classes do not know (custom options) cannot be
printed back, so a descriptor that has them is refused (see has_custom_options).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf import descriptor_pb2, text_format, unknown_fields
from google.protobuf.message import Message

_FieldProto = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    _FieldProto.TYPE_DOUBLE: "double",
    _FieldProto.TYPE_FLOAT: "float",
    _FieldProto.TYPE_INT64: "int64",
    _FieldProto.TYPE_UINT64: "uint64",
    _FieldProto.TYPE_INT32: "int32",
    _FieldProto.TYPE_FIXED64: "fixed64",
    _FieldProto.TYPE_FIXED32: "fixed32",
    _FieldProto.TYPE_BOOL: "bool",
    _FieldProto.TYPE_STRING: "string",
    _FieldProto.TYPE_BYTES: "bytes",
    _FieldProto.TYPE_UINT32: "uint32",
    _FieldProto.TYPE_SFIXED32: "sfixed32",
    _FieldProto.TYPE_SFIXED64: "sfixed64",
    _FieldProto.TYPE_SINT32: "sint32",
    _FieldProto.TYPE_SINT64: "sint64",
}
SCALAR_NAMES = frozenset(_SCALARS.values())
_MAX_FIELD_NUMBER = 536_870_911
_INDENT = "  "


def scalar_name(field_type: int) -> str | None:
    return _SCALARS.get(field_type)


def has_custom_options(proto: Message) -> bool:
    """Whether any *Options message inside holds fields the descriptor classes cannot name."""
    stack: list[Message] = [proto]
    while stack:
        message = stack.pop()
        if message.DESCRIPTOR.name.endswith("Options") and len(unknown_fields.UnknownFieldSet(message)):
            return True
        for field, value in message.ListFields():
            if field.message_type is None:
                continue
            if field.is_repeated:
                stack.extend(value)
            else:
                stack.append(value)
    return False


def render_file(proto: descriptor_pb2.FileDescriptorProto) -> str:
    lines: list[str] = []
    if proto.syntax == "editions":
        edition = descriptor_pb2.Edition.Name(proto.edition).removeprefix("EDITION_")
        lines.append(f'edition = "{edition}";')
    else:
        lines.append(f'syntax = "{proto.syntax or "proto2"}";')
    if proto.package:
        lines.append(f"package {proto.package};")
    public, weak = set(proto.public_dependency), set(proto.weak_dependency)
    imports = []
    for index, dependency in enumerate(proto.dependency):
        prefix = "public " if index in public else "weak " if index in weak else ""
        imports.append(f'import {prefix}"{_escape(dependency)}";')
    lines.extend(sorted(imports))
    lines.extend(_options(proto.options, ""))
    for message in proto.message_type:
        lines.extend(_message(message, proto, ""))
    for enum in proto.enum_type:
        lines.extend(_enum(enum, ""))
    for service in proto.service:
        lines.extend(_service(service))
    lines.extend(_extensions(proto.extension, proto, ""))
    return "\n".join(lines) + "\n"


def _message(message: descriptor_pb2.DescriptorProto, file: Any, indent: str) -> list[str]:
    inner = indent + _INDENT
    lines = [f"{indent}message {message.name} {{", *_options(message.options, inner)]
    nested = {nested.name: nested for nested in message.nested_type}
    fields = list(message.field)
    # A map field or a group declares its nested type where the field stands, so nested types and fields
    # are printed interleaved: each such type's field comes out just before the next nested type.
    owners = {
        field.type_name.rpartition(".")[2]: index
        for index, field in enumerate(fields)
        if field.type == _FieldProto.TYPE_GROUP
        or (field.type == _FieldProto.TYPE_MESSAGE and _is_own_map_entry(field, nested))
    }
    printed_oneofs: set[int] = set()
    next_field = 0

    def print_fields_until(stop: int) -> None:
        nonlocal next_field
        for field in fields[next_field:stop]:
            if field.HasField("oneof_index") and not field.proto3_optional:
                if field.oneof_index not in printed_oneofs:
                    printed_oneofs.add(field.oneof_index)
                    lines.extend(_oneof(message, field.oneof_index, nested, file, inner))
            else:
                lines.extend(_field(field, nested, file, inner, in_oneof=False))
        next_field = max(next_field, stop)

    for nested_message in message.nested_type:
        owner = owners.get(nested_message.name)
        if owner is None:
            lines.extend(_message(nested_message, file, inner))
        else:
            print_fields_until(owner + 1)
    print_fields_until(len(fields))
    for enum in message.enum_type:
        lines.extend(_enum(enum, inner))
    for extension_range in message.extension_range:
        lines.append(f"{inner}extensions {_range(extension_range.start, extension_range.end)};")
    lines.extend(_reserved(message.reserved_range, message.reserved_name, file, inner))
    lines.extend(_extensions(message.extension, file, inner))
    lines.append(f"{indent}}}")
    return lines


def _oneof(
    message: descriptor_pb2.DescriptorProto,
    index: int,
    nested: dict[str, descriptor_pb2.DescriptorProto],
    file: Any,
    indent: str,
) -> list[str]:
    oneof = message.oneof_decl[index]
    lines = [f"{indent}oneof {oneof.name} {{", *_options(oneof.options, indent + _INDENT)]
    for member in message.field:
        if member.HasField("oneof_index") and member.oneof_index == index:
            lines.extend(_field(member, nested, file, indent + _INDENT, in_oneof=True))
    lines.append(f"{indent}}}")
    return lines


def _is_own_map_entry(field: descriptor_pb2.FieldDescriptorProto, nested: dict[str, Any]) -> bool:
    entry = nested.get(field.type_name.rpartition(".")[2])
    return entry is not None and entry.options.map_entry and field.type_name.endswith("." + entry.name)


def _field(
    field: descriptor_pb2.FieldDescriptorProto,
    nested: dict[str, descriptor_pb2.DescriptorProto],
    file: Any,
    indent: str,
    *,
    in_oneof: bool,
) -> list[str]:
    if field.type == _FieldProto.TYPE_MESSAGE and _is_own_map_entry(field, nested):
        entry = nested[field.type_name.rpartition(".")[2]]
        key, value = entry.field[0], entry.field[1]
        type_name = f"map<{_type(key)}, {_type(value)}>"
        label = ""
    else:
        type_name = _type(field)
        label = "" if in_oneof else _label(field, file)
    options = _field_options(field)
    suffix = f" [{', '.join(options)}]" if options else ""
    if field.type == _FieldProto.TYPE_GROUP:
        group_name = field.type_name.rpartition(".")[2]
        body = _message(nested[group_name], file, indent)
        head = f"{indent}{label}group {group_name} = {field.number}{suffix} {{"
        return [head, *body[1:]]
    return [f"{indent}{label}{type_name} {field.name} = {field.number}{suffix};"]


def _label(field: descriptor_pb2.FieldDescriptorProto, file: Any) -> str:
    if field.label == _FieldProto.LABEL_REPEATED:
        return "repeated "
    if file.syntax == "proto3":
        return "optional " if field.proto3_optional else ""
    if file.syntax == "editions":
        return ""
    return "required " if field.label == _FieldProto.LABEL_REQUIRED else "optional "


def _type(field: descriptor_pb2.FieldDescriptorProto) -> str:
    return _SCALARS.get(field.type) or field.type_name


def _field_options(field: descriptor_pb2.FieldDescriptorProto) -> list[str]:
    options = []
    if field.HasField("default_value"):
        if field.type == _FieldProto.TYPE_STRING:
            options.append(f'default = "{_escape(field.default_value)}"')
        elif field.type == _FieldProto.TYPE_BYTES:
            options.append(f'default = "{field.default_value}"')  # already C-escaped by protoc
        else:
            options.append(f"default = {field.default_value}")
    if field.HasField("json_name"):
        options.append(f'json_name = "{_escape(field.json_name)}"')
    options.extend(f"{name} = {value}" for name, value in _option_values(field.options))
    return options


def _enum(enum: descriptor_pb2.EnumDescriptorProto, indent: str) -> list[str]:
    inner = indent + _INDENT
    lines = [f"{indent}enum {enum.name} {{", *_options(enum.options, inner)]
    for value in enum.value:
        options = [f"{name} = {v}" for name, v in _option_values(value.options)]
        suffix = f" [{', '.join(options)}]" if options else ""
        lines.append(f"{inner}{value.name} = {value.number}{suffix};")
    ranges = [_range(r.start, r.end + 1) for r in enum.reserved_range]  # enum ranges are inclusive
    lines.extend(_reserved_lines(ranges, enum.reserved_name, quoted=True, indent=inner))
    lines.append(f"{indent}}}")
    return lines


def _service(service: descriptor_pb2.ServiceDescriptorProto) -> list[str]:
    lines = [f"service {service.name} {{", *_options(service.options, _INDENT)]
    for method in service.method:
        request = ("stream " if method.client_streaming else "") + method.input_type
        response = ("stream " if method.server_streaming else "") + method.output_type
        head = f"{_INDENT}rpc {method.name} ({request}) returns ({response})"
        options = _options(method.options, _INDENT * 2)
        lines.extend([f"{head} {{", *options, f"{_INDENT}}}"] if options else [f"{head};"])
    lines.append("}")
    return lines


def _extensions(
    extensions: Iterable[descriptor_pb2.FieldDescriptorProto], file: Any, indent: str
) -> list[str]:
    lines: list[str] = []
    by_extendee: dict[str, list[descriptor_pb2.FieldDescriptorProto]] = {}
    for extension in extensions:
        by_extendee.setdefault(extension.extendee, []).append(extension)
    for extendee, fields in by_extendee.items():
        lines.append(f"{indent}extend {extendee} {{")
        for field in fields:
            lines.extend(_field(field, {}, file, indent + _INDENT, in_oneof=False))
        lines.append(f"{indent}}}")
    return lines


def _reserved(ranges: Iterable[Any], names: Iterable[str], file: Any, indent: str) -> list[str]:
    spans = [_range(r.start, r.end) for r in ranges]
    return _reserved_lines(spans, names, quoted=file.syntax != "editions", indent=indent)


def _reserved_lines(spans: list[str], names: Iterable[str], *, quoted: bool, indent: str) -> list[str]:
    lines = [f"{indent}reserved {', '.join(spans)};"] if spans else []
    name_list = [f'"{name}"' if quoted else name for name in names]
    if name_list:
        lines.append(f"{indent}reserved {', '.join(name_list)};")
    return lines


def _range(start: int, end_exclusive: int) -> str:
    last = end_exclusive - 1
    if last == start:
        return str(start)
    return f"{start} to {'max' if last >= _MAX_FIELD_NUMBER else last}"


def _options(options: Message, indent: str) -> list[str]:
    return [f"{indent}option {name} = {value};" for name, value in _option_values(options)]


def _option_values(options: Message) -> list[tuple[str, str]]:
    values: list[tuple[str, str]] = []
    for field, value in options.ListFields():
        name = f"({field.full_name})" if field.is_extension else field.name
        items = value if field.is_repeated else [value]
        values.extend((name, _option_value(field, item)) for item in items)
    return sorted(values)


def _option_value(field: Any, value: Any) -> str:
    if field.type == field.TYPE_BOOL:
        return "true" if value else "false"
    if field.type == field.TYPE_ENUM:
        return field.enum_type.values_by_number[value].name
    if field.type == field.TYPE_STRING:
        return f'"{_escape(value)}"'
    if field.type == field.TYPE_BYTES:
        return '"' + "".join(f"\\{byte:03o}" for byte in value) + '"'
    if field.type == field.TYPE_MESSAGE:
        return "{ " + text_format.MessageToString(value, as_one_line=True) + " }"
    return repr(value) if isinstance(value, float) else str(value)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
