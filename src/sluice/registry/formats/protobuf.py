"""Protobuf schemas: compiled by grpcio-tools' bundled protoc into descriptors held in a private pool.

The schema and its references are written to a temporary directory and compiled in-process with
grpc_tools._protoc_compiler.get_protos: unlike the public protoc.main, which only prints its errors to the
process's stderr, it returns them, so they become the 42201 message. protoc's Python
generator embeds each file's serialized FileDescriptorProto in the code it returns; we read that literal
(never execute the code) and load the files, dependencies first, into a DescriptorPool of our own, so two
schemas defining the same names never meet. The well-known types (google/protobuf/*.proto) come from the
include directory grpcio-tools ships, and the google/type/*.proto files Confluent's ProtobufSchema bundles
(its KNOWN_DEPENDENCIES) from googleapis-common-protos, which ships them beside its modules; a reference of
the same name wins over either. A base64 serialized FileDescriptorProto (confluent-kafka's ProtobufSerializer
registers that) is printed to .proto text first.
"""

from __future__ import annotations

import ast
import base64
import os
import re
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import google.type.date_pb2
import grpc_tools
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FileDescriptor
from google.protobuf.message import DecodeError
from grpc_tools import _protoc_compiler

from .parsed import InvalidSchemaError, Parsed, Schema, check_size
from .protobuf_canonical import Names, render
from .protobuf_syntax import parse as parse_syntax
from .protobuf_text import has_custom_options, render_file

MAIN_FILE = "schema.proto"
_WELL_KNOWN_INCLUDE = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
# The google/type files Confluent's registry resolves without a reference (ProtobufSchema.KNOWN_DEPENDENCIES;
# googleapis-common-protos has more, such as localized_text.proto, which Confluent does not bundle).
BUNDLED_GOOGLE_TYPES = frozenset(
    f"google/type/{name}.proto"
    for name in (
        "calendar_period", "color", "date", "datetime", "dayofweek", "decimal", "expr", "fraction",
        "interval", "latlng", "money", "month", "phone_number", "postal_address", "quaternion", "timeofday",
    )
)  # fmt: skip
_GOOGLE_TYPE_DIR = Path(google.type.date_pb2.__file__).parent
_IMPORT = re.compile(r'^\s*import\s+(?:public\s+|weak\s+)?"([^"]+)"\s*;', re.MULTILINE)
# protoc's compiler keeps global state (its error collector and source tree) per call: one at a time.
_COMPILER_LOCK = threading.Lock()


@dataclass(frozen=True)
class ProtobufModel:
    """The compiled file and its dependencies, for the compatibility checks."""

    file: descriptor_pb2.FileDescriptorProto
    files: dict[str, descriptor_pb2.FileDescriptorProto]  # every file by name, the schema's own included
    pool: descriptor_pool.DescriptorPool


def parse(text: str, references: Mapping[str, str]) -> Parsed:
    check_size(text)
    for name, ref_text in references.items():
        _check_import_path(name)
        check_size(ref_text, f"referenced schema {name!r}")
    proto_text = _as_proto_text(text, "the schema")
    references = {
        name: _as_proto_text(ref, f"referenced schema {name!r}") for name, ref in references.items()
    }
    try:
        element, compiled_text = parse_syntax(proto_text)
    except InvalidSchemaError:
        _compile(proto_text, references)  # protoc's own account of what is wrong, when it finds something
        raise
    files = _compile(compiled_text, {name: _for_protoc(ref) for name, ref in references.items()})
    pool = descriptor_pool.DescriptorPool()
    for proto in files.values():
        try:
            pool.Add(proto)
        except Exception as error:  # the pool's own checks (e.g. a name defined twice across files)
            raise InvalidSchemaError(f"Invalid Protobuf schema: {proto.name}: {error}") from None
    main = files[MAIN_FILE]
    canonical = render(element)
    # Confluent validates every schema by normalizing it, so a name it cannot resolve fails either way.
    normalized = render(element, _names(pool))
    return Parsed(
        normalized=normalized,
        identity=canonical,
        raw=pool.FindFileByName(MAIN_FILE),
        model=ProtobufModel(file=main, files=files, pool=pool),
        text=canonical,
        normalized_identity=normalized,
    )


def _for_protoc(text: str) -> str:
    """A reference's text with its custom options blanked (Confluent never resolves them); a text the
    reader cannot follow goes as it is, for protoc to say what is wrong with it."""
    try:
        return parse_syntax(text)[1]
    except InvalidSchemaError:
        return text


def _names(pool: descriptor_pool.DescriptorPool) -> Names:
    def type_exists(name: str) -> bool:
        for find in (pool.FindMessageTypeByName, pool.FindEnumTypeByName):
            try:
                find(name)
                return True
            except KeyError:
                pass
        return False

    def extension(name: str) -> tuple[bool, Any] | None:
        try:
            found = pool.FindExtensionByName(name)
        except KeyError:
            return None
        return found.is_repeated, found.message_type

    return Names(type_exists, extension)


_BASE64 = re.compile(r"[A-Za-z0-9+/=\r\n\t ]+")


def _as_proto_text(text: str, what: str) -> str:
    """A base64 serialized FileDescriptorProto (what confluent-kafka's ProtobufSerializer registers) -> .proto
    text; anything else is taken as .proto text already. No .proto file is made of base64 characters only."""
    if not _BASE64.fullmatch(text):
        return text
    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=False))
    except (ValueError, DecodeError):  # binascii.Error is a ValueError
        return text
    if not proto.name:
        return text
    if has_custom_options(proto):
        raise InvalidSchemaError(
            f"Invalid Protobuf schema: {what} is a serialized descriptor with custom options, which cannot be "
            "turned back into .proto text; register the .proto text instead"
        )
    try:
        return render_file(proto)
    except (
        LookupError,
        ValueError,
        TypeError,
    ) as error:  # a descriptor no compiler made (an entry without fields)
        raise InvalidSchemaError(
            f"Invalid Protobuf schema: {what} is not a usable descriptor ({error!r})"
        ) from None


def _check_import_path(name: str) -> None:
    path = PurePosixPath(name)
    if (
        not name
        or path.is_absolute()
        or ".." in path.parts
        or "\\" in name
        or "\0" in name
        or name == MAIN_FILE
    ):
        raise InvalidSchemaError(f"Invalid Protobuf schema: {name!r} is not usable as an import path")


def imports_of(text: str) -> list[str]:
    """The files a .proto text imports, in order, each once."""
    return list(dict.fromkeys(_IMPORT.findall(text)))


def is_bundled(name: str) -> bool:
    """Whether an import resolves without a reference, as in Confluent's registry: the well-known types
    (google/protobuf/...) and the google/type files it bundles."""
    return name.startswith("google/protobuf/") or name in BUNDLED_GOOGLE_TYPES


def _bundled_types(texts: Mapping[str, str]) -> dict[str, str]:
    """The bundled google/type files the texts import and do not bring as references, by import name."""
    wanted = {name for text in texts.values() for name in imports_of(text) if name in BUNDLED_GOOGLE_TYPES}
    return {
        name: (_GOOGLE_TYPE_DIR / PurePosixPath(name).name).read_text(encoding="utf-8")
        for name in sorted(wanted - set(texts))
    }


def _compile(text: str, references: Mapping[str, str]) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """Schema text -> every FileDescriptorProto it needs, dependencies first, the schema's own last."""
    with tempfile.TemporaryDirectory(prefix="sluice-proto-") as workdir:
        root = Path(workdir)
        texts = {**references, MAIN_FILE: text}
        for name, ref_text in {**_bundled_types(texts), **texts}.items():
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(ref_text, encoding="utf-8")
        include = [workdir.encode(), _WELL_KNOWN_INCLUDE.encode()]
        with _COMPILER_LOCK:
            try:
                generated = _protoc_compiler.get_protos(MAIN_FILE.encode(), include)
            except _protoc_compiler.ProtocErrors as errors:
                raise InvalidSchemaError(_describe_errors(errors.errors(), workdir, references)) from None
            except Exception as error:  # the compiler's other failures (unreadable file, encoding)
                raise InvalidSchemaError(f"Invalid Protobuf schema: {error}") from None
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    for _module, code in generated:
        proto = descriptor_pb2.FileDescriptorProto.FromString(_embedded_descriptor(code))
        files[proto.name] = proto
    if MAIN_FILE not in files:
        raise InvalidSchemaError("Invalid Protobuf schema: the compiler produced no descriptor")
    return files


def _describe_errors(errors: Sequence[Any], workdir: str, references: Mapping[str, str]) -> str:
    parts = []
    for error in errors[:10]:
        name = error.filename.decode(errors="replace").replace(workdir + os.sep, "")
        if name == MAIN_FILE:
            where = "the schema"
        else:
            where = f"referenced schema {name!r}" if name in references else f"the import {name!r}"
        message = error.message.decode(errors="replace").replace(workdir + os.sep, "")
        if error.line >= 0:
            where += f" line {error.line + 1} column {error.column + 1}"
        parts.append(f"{where}: {message}")
    return "Invalid Protobuf schema: " + "; ".join(parts)


def _embedded_descriptor(code: bytes) -> bytes:
    """The bytes literal passed to AddSerializedFile in protoc's generated Python, read as a literal."""
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile" and node.args:
            value = ast.literal_eval(node.args[0])
            if isinstance(value, bytes):
                return value
    raise InvalidSchemaError("Invalid Protobuf schema: the compiler's output holds no descriptor")


def message_descriptor(schema: Schema, message_index: Sequence[int] = (0,)) -> Descriptor:
    """Confluent's message-index path (top-level message, then nested ones) -> the message descriptor."""
    file: FileDescriptor = schema.raw
    if not message_index:
        message_index = (0,)
    candidates = list(file.message_types_by_name.values())
    descriptor: Descriptor | None = None
    for position in message_index:
        if not 0 <= position < len(candidates):
            raise InvalidSchemaError(f"the schema has no message at index path {list(message_index)}")
        descriptor = candidates[position]
        candidates = list(descriptor.nested_types)
    assert descriptor is not None
    return descriptor


def protobuf_message_class(schema: Schema, message_index: Sequence[int] = (0,)) -> type:
    """The generated message class for the message at Confluent's message-index path."""
    return message_factory.GetMessageClass(message_descriptor(schema, message_index))
