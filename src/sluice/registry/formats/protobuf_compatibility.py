"""Can a Protobuf reader schema read what a writer schema wrote? The wire rules, as Confluent checks them.

Fields match by number. A field either side lacks is skipped by the reader (its number should be reserved),
so adding and removing optional fields pass both ways; what breaks:
- a message type of the writer's file missing from the reader's (data framed with its index cannot be read);
- the package changing (every full name changes);
- a field's kind changing between scalar and message, or its message type being another one (by its name
  within its package); a message type both sides take from a referenced file is compared field by field too,
  as Confluent's FieldSchemaDiff does (a change there that breaks is reported with FIELD_NAMED_TYPE_CHANGED);
- a scalar type changing outside its wire-compatible group: {int32, uint32, int64, uint64, bool, any enum}
  (an enum is a varint, so int32 -> enum and one enum -> another pass, as in Confluent's ScalarKind),
  {sint32, sint64}, {fixed32, sfixed32}, {fixed64, sfixed64}; a string read as bytes (not the reverse: a
  proto3 string must be UTF-8, bytes need not be); float and double stand alone;
- a numeric field turning repeated or back (packed data is one length-delimited record; string, bytes and
  message fields may switch: a singular reader keeps the last element);
- a required (proto2) field of the reader that the writer did not always write;
- oneofs: a member removed; an existing field moved into an existing oneof; several existing fields moved
  into one new oneof (a single field may move into a new one).
Enum values added or removed pass: unknown values are kept (open enums) or read as unknown fields.
"""

from __future__ import annotations

from collections.abc import Iterator

from google.protobuf import descriptor_pb2

from .parsed import Problem, Roles
from .protobuf import ProtobufModel
from .protobuf_text import scalar_name

_Field = descriptor_pb2.FieldDescriptorProto
_Message = descriptor_pb2.DescriptorProto
_ENUM = "enum"
_WIRE_GROUPS = [
    {"int32", "uint32", "int64", "uint64", "bool", _ENUM},
    {"sint32", "sint64"},
    {"fixed32", "sfixed32"},
    {"fixed64", "sfixed64"},
]
# string data reads as bytes; bytes data reads as string only when it is UTF-8, which proto3 parsers enforce.
_ONE_WAY = {("string", "bytes")}
_LENGTH_DELIMITED = {"string", "bytes"}


def problems(reader: ProtobufModel, writer: ProtobufModel, roles: Roles) -> list[Problem]:
    return _Checker(roles).check(reader, writer)


def _messages(prefix: str, messages: list[_Message]) -> Iterator[tuple[str, _Message]]:
    for message in messages:
        full = f"{prefix}.{message.name}" if prefix else message.name
        yield full, message
        yield from _messages(full, list(message.nested_type))


def _kind(field: _Field) -> str:
    return "message" if field.type in (_Field.TYPE_MESSAGE, _Field.TYPE_GROUP) else "scalar"


def _scalar(field: _Field) -> str:
    return _ENUM if field.type == _Field.TYPE_ENUM else scalar_name(field.type) or ""


class _Types:
    """The message types of a schema and of every file it imports: full name ('.pkg.Outer.Inner') -> the
    message and the package of the file defining it."""

    def __init__(self, model: ProtobufModel) -> None:
        self.main = model.file.name
        self.found: dict[str, tuple[_Message, str, str]] = {}
        for file in model.files.values():
            for name, message in _messages(file.package, list(file.message_type)):
                self.found[f".{name}"] = (message, file.package, file.name)

    def local_name(self, type_name: str) -> str:
        """The name within its package, as Confluent compares field types (the package is checked apart)."""
        found = self.found.get(type_name)
        package = found[1] if found else ""
        if package and type_name.startswith(f".{package}."):
            return type_name[len(package) + 2 :]
        return type_name.lstrip(".")

    def imported(self, type_name: str) -> _Message | None:
        """The message behind a type name when a referenced file defines it (the main file's are compared
        on their own)."""
        found = self.found.get(type_name)
        return found[0] if found is not None and found[2] != self.main else None


def _real_oneof(message: _Message, field: _Field) -> str | None:
    if field.HasField("oneof_index") and not field.proto3_optional:
        return message.oneof_decl[field.oneof_index].name
    return None


class _Checker:
    def __init__(self, roles: Roles) -> None:
        self.roles = roles
        self.found: list[Problem] = []
        self.compared: set[tuple[str, str]] = set()  # imported message types compared already (or under way)

    def report(self, error_type: str, path: str, description: str) -> None:
        self.found.append(Problem(error_type, path, description, path))

    def check(self, reader: ProtobufModel, writer: ProtobufModel) -> list[Problem]:
        if reader.file.package != writer.file.package:
            self.report(
                "PACKAGE_CHANGED",
                "#/",
                f"The package is '{reader.file.package}' in the {self.roles.reader} schema and "
                f"'{writer.file.package}' in the {self.roles.writer} schema",
            )
            return self.found
        self.reader_types, self.writer_types = _Types(reader), _Types(writer)
        reader_messages = dict(_messages(reader.file.package, list(reader.file.message_type)))
        for name, message in _messages(writer.file.package, list(writer.file.message_type)):
            counterpart = reader_messages.get(name)
            if counterpart is None:
                self.report(
                    "MESSAGE_REMOVED",
                    f"#/{name}",
                    f"The message '{name}' of the {self.roles.writer} schema is missing from the "
                    f"{self.roles.reader} schema",
                )
            else:
                self._message(name, counterpart, message)
        return self.found

    def _message(self, name: str, reader: _Message, writer: _Message) -> None:
        r_fields = {field.number: field for field in reader.field}
        w_fields = {field.number: field for field in writer.field}
        for number, w_field in w_fields.items():
            r_field = r_fields.get(number)
            path = f"#/{name}/{w_field.name}"
            if r_field is None:
                if _real_oneof(writer, w_field):
                    self.report(
                        "ONEOF_FIELD_REMOVED",
                        path,
                        f"The {self.roles.reader} schema drops field {number} of the oneof "
                        f"'{_real_oneof(writer, w_field)}' in '{name}'",
                    )
                continue
            self._field(path, r_field, w_field)
            if r_field.label == _Field.LABEL_REQUIRED and w_field.label != _Field.LABEL_REQUIRED:
                self._required(path, r_field, name)
        for number, r_field in r_fields.items():
            if number not in w_fields and r_field.label == _Field.LABEL_REQUIRED:
                self._required(f"#/{name}/{r_field.name}", r_field, name)
        self._oneofs(name, reader, writer, r_fields, w_fields)

    def _required(self, path: str, field: _Field, message: str) -> None:
        self.report(
            "REQUIRED_FIELD_ADDED",
            path,
            f"The {self.roles.reader} schema requires field '{field.name}' ({field.number}) of '{message}', "
            f"which the {self.roles.writer} schema does not always write",
        )

    def _field(self, path: str, reader: _Field, writer: _Field) -> None:
        r_kind, w_kind = _kind(reader), _kind(writer)
        if r_kind != w_kind:
            self.report(
                "FIELD_KIND_CHANGED",
                path,
                f"Field {writer.number} is a {w_kind} in the {self.roles.writer} schema and a {r_kind} in the "
                f"{self.roles.reader} schema",
            )
            return
        if r_kind == "scalar":
            r_type, w_type = _scalar(reader), _scalar(writer)
            same_group = any(r_type in group and w_type in group for group in _WIRE_GROUPS)
            if r_type != w_type and not same_group and (w_type, r_type) not in _ONE_WAY:
                self.report(
                    "FIELD_SCALAR_KIND_CHANGED",
                    path,
                    f"Field {writer.number} is {w_type} in the {self.roles.writer} schema and {r_type} in the "
                    f"{self.roles.reader} schema, which do not share a wire encoding",
                )
                return
        elif self.reader_types.local_name(reader.type_name) != self.writer_types.local_name(writer.type_name):
            self._named_type_changed(path, reader, writer)
            return
        else:
            self._imported_message(path, reader, writer)
        repeated = (reader.label == _Field.LABEL_REPEATED, writer.label == _Field.LABEL_REPEATED)
        delimited = r_kind == "message" or (scalar_name(reader.type) in _LENGTH_DELIMITED)
        if repeated[0] != repeated[1] and not delimited:
            self.report(
                "FIELD_NUMERIC_LABEL_CHANGED",
                path,
                f"Numeric field {writer.number} is {'repeated' if repeated[1] else 'singular'} in the "
                f"{self.roles.writer} schema and {'repeated' if repeated[0] else 'singular'} in the "
                f"{self.roles.reader} schema",
            )

    def _named_type_changed(self, path: str, reader: _Field, writer: _Field) -> None:
        self.report(
            "FIELD_NAMED_TYPE_CHANGED",
            path,
            f"Field {writer.number} is of type '{writer.type_name.lstrip('.')}' in the {self.roles.writer} "
            f"schema and '{reader.type_name.lstrip('.')}' in the {self.roles.reader} schema",
        )

    def _imported_message(self, path: str, reader: _Field, writer: _Field) -> None:
        """A message type of the same name that a referenced file defines (on either side): its fields
        must be compatible too."""
        r_message = self.reader_types.found.get(reader.type_name)
        w_message = self.writer_types.found.get(writer.type_name)
        if r_message is None or w_message is None:
            return
        imported = self.reader_types.imported(reader.type_name) or self.writer_types.imported(
            writer.type_name
        )
        pair = (reader.type_name, writer.type_name)
        if imported is None or pair in self.compared:
            return
        self.compared.add(pair)
        before = len(self.found)
        self._message(writer.type_name.lstrip("."), r_message[0], w_message[0])
        if len(self.found) > before:
            self._named_type_changed(path, reader, writer)

    def _oneofs(
        self,
        name: str,
        reader: _Message,
        writer: _Message,
        r_fields: dict[int, _Field],
        w_fields: dict[int, _Field],
    ) -> None:
        writer_oneofs = {_real_oneof(writer, field) for field in writer.field} - {None}
        moved: dict[str, list[int]] = {}
        for number, r_field in r_fields.items():
            oneof = _real_oneof(reader, r_field)
            w_field = w_fields.get(number)
            if oneof is None or w_field is None or _real_oneof(writer, w_field) is not None:
                continue
            moved.setdefault(oneof, []).append(number)
        for oneof, numbers in moved.items():
            if oneof in writer_oneofs:
                self.report(
                    "FIELD_MOVED_TO_EXISTING_ONEOF",
                    f"#/{name}/{oneof}",
                    f"The {self.roles.reader} schema moves field(s) {numbers} of '{name}' into the existing "
                    f"oneof '{oneof}'",
                )
            elif len(numbers) > 1:
                self.report(
                    "MULTIPLE_FIELDS_MOVED_TO_ONEOF",
                    f"#/{name}/{oneof}",
                    f"The {self.roles.reader} schema moves the fields {numbers} of '{name}' into the new oneof "
                    f"'{oneof}': data setting more than one of them would lose all but the last",
                )
