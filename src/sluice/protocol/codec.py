"""Compiles a message definition into straight-line Python encode/decode functions, one pair per version.

Generated code is the fast path the broker runs for every request: consecutive fixed-width fields are read
and written with a single precompiled `struct` call, arrays of fixed-width values in bulk, and record
batches are passed through as views without copying. Classes are generated once per message; every
version's codec shares them, so handlers see the same attributes whatever version a client speaks.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sluice.protocol import primitives as p
from sluice.protocol.produce_answer import produce_response_encoder
from sluice.protocol.schema import MISSING, NO_VERSIONS, PRIMITIVE_TYPES, FieldDef, MessageDef, StructDef

_MISSING_ARG: Any = object()
# Structs nested deeper than this are decoded by a call (also what tagged fields pass to `_read`).
_NO_INLINE = 8
# Hand-written encoders for the commonest answers, by message: (version, generated encoder, classes) -> the
# encoder to use, which hands every shape it does not special-case to the generated one.
SPECIAL_ENCODERS = {"ProduceResponse": produce_response_encoder}


class Message:
    """Base of every generated message and struct class: attribute access, equality and a readable repr."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    # Every field's value in one C call: encoders compare tagged struct fields with their default for each
    # element of large arrays (every partition of a fetch), so equality must be cheap.
    _values: Callable[[Any], Any] = staticmethod(lambda message: ())

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self is other or self._values(self) == self._values(other)

    def __repr__(self) -> str:
        body = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({body})"

    __hash__ = None  # type: ignore[assignment]


def _natural_default(f: FieldDef) -> str:
    """Python expression for a field's default value (a fresh object where it is mutable)."""
    if f.default is not MISSING:
        return repr(f.default) if f.type != "uuid" or f.default is None else "_ZERO_UUID"
    if f.is_array:
        return "[]"
    if f.type not in PRIMITIVE_TYPES:
        return f"_cls_{f.type}()"
    return {
        "string": "''",
        "bytes": "b''",
        "records": "None",
        "uuid": "_ZERO_UUID",
        "bool": "False",
        "float64": "0.0",
    }.get(f.type, "0")


def _default_to_compare(f: FieldDef) -> str:
    """Like `_natural_default`, but a struct's default is one shared instance (`_DEFAULT_<name>` in the
    codec's namespace), only ever compared with, so encoding allocates nothing for an absent tagged field."""
    if f.default is MISSING and not f.is_array and f.type not in PRIMITIVE_TYPES:
        return f"_DEFAULT_{f.type}"
    return _natural_default(f)


def _walk_structs(struct: StructDef, seen: dict[str, StructDef]) -> dict[str, StructDef]:
    seen.setdefault(struct.name, struct)
    for f in struct.fields:
        if f.struct is not None and f.struct.name not in seen:
            _walk_structs(f.struct, seen)
    return seen


def build_classes(message: MessageDef) -> dict[str, type[Message]]:
    """One class per struct of the message, the root class carrying the nested ones as attributes."""
    structs = _walk_structs(message.root, {})
    namespace: dict[str, Any] = {"_M": _MISSING_ARG, "_ZERO_UUID": p.ZERO_UUID}
    classes: dict[str, type[Message]] = {}
    for name, struct_def in structs.items():
        attrs = tuple(f.attr for f in struct_def.fields)
        params = ", ".join(f"{a}=_M" for a in attrs)
        body = [f"def __init__(self{', *, ' + params if params else ''}):"]
        for f in struct_def.fields:
            body.append(f"    self.{f.attr} = {_natural_default(f)} if {f.attr} is _M else {f.attr}")
        if not struct_def.fields:
            body.append("    pass")
        code: dict[str, Any] = {}
        exec("\n".join(body), namespace, code)
        values = staticmethod(operator.attrgetter(*attrs)) if attrs else Message._values
        cls = type(
            name,
            (Message,),
            {"__slots__": attrs, "_fields": attrs, "_values": values, "__init__": code["__init__"]},
        )
        classes[name] = cls
        namespace[f"_cls_{name}"] = cls
    root = classes[message.root.name]
    for name, cls in classes.items():
        if cls is not root:
            setattr(root, name, cls)
    return classes


def _is_fixed(f: FieldDef) -> bool:
    return not f.is_array and f.type in p.FIXED_FORMATS


def _field_runs(fields: Iterable[FieldDef]) -> Iterator[list[FieldDef] | FieldDef]:
    """Consecutive fixed-width fields grouped into one list (one struct call); any other field alone."""
    run: list[FieldDef] = []
    for f in fields:
        if _is_fixed(f):
            run.append(f)
            continue
        if run:
            yield run
            run = []
        yield f
    if run:
        yield run


class _Generator:
    """Writes the source of every struct's decode and encode function for one version."""

    def __init__(self, message: MessageDef, version: int) -> None:
        self.version = version
        self.flexible = version in message.flexible
        self.formats: dict[str, str] = {}
        self.lines: list[str] = []
        self.counter = 0

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def fixed_struct(self, fmt: str) -> str:
        name = self.formats.get(fmt)
        if name is None:
            name = self.formats[fmt] = f"_S_{len(self.formats)}"
        return name

    # ----- decoding -----

    def decode_struct(self, struct_def: StructDef) -> None:
        body = self._decode_body(struct_def, "o", "    ", 0)
        self.lines.extend([f"def _dec_{struct_def.name}(buf, pos):", *body, "    return o, pos"])

    def _decode_body(self, struct_def: StructDef, obj: str, ind: str, depth: int) -> list[str]:
        """Lines that decode one `struct_def` into the local `obj`, advancing `pos`. Nested structs are decoded
        inline (no call and tuple per element of an array), except inside tagged fields, whose loop keeps its
        place in locals an inner loop would overwrite."""
        fields = [f for f in struct_def.fields if self.version in f.versions]
        absent = [f for f in struct_def.fields if self.version not in f.versions or (f.tag is not None)]
        out = [f"{ind}{obj} = _new(_cls_{struct_def.name})"]
        for f in absent:
            out.append(f"{ind}{obj}.{f.attr} = {_natural_default(f)}")
        for run in _field_runs(f for f in fields if f.tag is None):
            if isinstance(run, list):
                fmt = ">" + "".join(p.FIXED_FORMATS[f.type] for f in run)
                targets = ", ".join(f"{obj}.{f.attr}" for f in run) + ","
                out.append(f"{ind}{targets} = {self.fixed_struct(fmt)}.unpack_from(buf, pos)")
                out.append(f"{ind}pos += {struct.calcsize(fmt)}")
            else:
                out.extend(self._read(run, f"{obj}.{run.attr}", ind, depth + 1))
        if self.flexible:
            tagged = sorted((f for f in fields if f.tag is not None), key=lambda f: f.tag or 0)
            count, end = self.fresh("n_tags"), self.fresh("end")
            out.append(f"{ind}if buf[pos] == 0:")
            out.append(f"{ind}    pos += 1")
            out.append(f"{ind}else:")
            out.append(f"{ind}    {count}, pos = read_uvarint(buf, pos)")
            out.append(f"{ind}    for _ in range({count}):")
            out.append(f"{ind}        tag, pos = read_uvarint(buf, pos)")
            out.append(f"{ind}        size, pos = read_uvarint(buf, pos)")
            out.append(f"{ind}        {end} = pos + size")
            out.append(
                f"{ind}        if {end} > len(buf): raise DecodeError('tagged field runs past the end')"
            )
            keyword = "if"
            for f in tagged:
                out.append(f"{ind}        {keyword} tag == {f.tag}:")
                out.extend(self._read(f, f"{obj}.{f.attr}", ind + "            ", _NO_INLINE))
                keyword = "elif"
            out.append(f"{ind}        pos = {end}")
        return out

    def _read(self, f: FieldDef, target: str, ind: str, depth: int) -> list[str]:
        nullable = self.version in f.nullable
        flex = self.flexible
        null_check = (
            [] if nullable else [f"{ind}if {target} is None: raise DecodeError('{f.name} must not be null')"]
        )
        if f.is_array:
            return self._read_array(f, target, ind, nullable, depth)
        if f.type in p.FIXED_FORMATS:
            fmt = ">" + p.FIXED_FORMATS[f.type]
            return [
                f"{ind}{target}, = {self.fixed_struct(fmt)}.unpack_from(buf, pos)",
                f"{ind}pos += {struct.calcsize(fmt)}",
            ]
        if f.type in ("string", "bytes", "records"):
            reader = f"read_{'compact_' if flex else ''}{f.type}"
            if flex and f.type != "bytes":
                inline = self._read_short_compact(f.type, target, reader, ind)
                if nullable:  # null (a zero length byte), as the transactional id of most produce requests
                    null = [f"{ind}if buf[pos] == 0:", f"{ind}    {target} = None", f"{ind}    pos += 1"]
                    inline = [*null, f"{ind}else:", *("    " + line for line in inline)]
                return [*inline, *null_check]
            return [f"{ind}{target}, pos = {reader}(buf, pos)", *null_check]
        if f.type == "uuid":
            return [f"{ind}{target}, pos = read_uuid(buf, pos)"]
        if nullable:
            # A nullable struct is preceded by an int8 presence marker: -1 for null, 1 when present.
            return [
                f"{ind}if buf[pos] == 0xFF:",
                f"{ind}    {target} = None",
                f"{ind}    pos += 1",
                f"{ind}else:",
                f"{ind}    {target}, pos = _dec_{f.type}(buf, pos + 1)",
            ]
        if depth < _NO_INLINE and f.struct is not None:
            local = self.fresh("s")
            return [*self._decode_body(f.struct, local, ind, depth), f"{ind}{target} = {local}"]
        return [f"{ind}{target}, pos = _dec_{f.type}(buf, pos)"]

    def _read_short_compact(self, kind: str, target: str, reader: str, ind: str) -> list[str]:
        """A compact string or records field whose length prefix takes one or two varint bytes (all but the
        largest record sets) read inline, without the reader's calls; longer prefixes, null and anything that
        does not fit go through the reader, which names the fault."""
        # (`stop`, not `end`: the tagged-field loop keeps the end of the field it reads in `end`.)
        value = "str(buf[start:stop], 'utf-8')" if kind == "string" else "memoryview(buf)[start:stop]"
        return [
            f"{ind}stop = buf[pos]",
            f"{ind}if stop < 0x80:",
            f"{ind}    start, stop = pos + 1, pos + stop",
            f"{ind}elif buf[pos + 1] < 0x80:",
            f"{ind}    start, stop = pos + 2, pos + 1 + ((stop & 0x7F) | (buf[pos + 1] << 7))",
            f"{ind}else:",
            f"{ind}    start = 0",
            f"{ind}if 0 < start <= stop <= len(buf):",
            f"{ind}    {target} = {value}",
            f"{ind}    pos = stop",
            f"{ind}else:",
            f"{ind}    {target}, pos = {reader}(buf, pos)",
        ]

    def _read_array(self, f: FieldDef, target: str, ind: str, nullable: bool, depth: int) -> list[str]:
        count = self.fresh("n")
        if self.flexible:
            # A one-byte length (under 127 elements) read inline: every request has a few arrays.
            lines = [
                f"{ind}{count} = buf[pos] - 1",
                f"{ind}if {count} < 0x7F:",
                f"{ind}    pos += 1",
                f"{ind}else:",
                f"{ind}    {count}, pos = read_compact_array_length(buf, pos)",
            ]
        else:
            lines = [f"{ind}{count}, pos = read_array_length(buf, pos)"]
        lines.append(f"{ind}if {count} < 0:")
        if nullable:
            lines.append(f"{ind}    {target} = None")
        else:
            lines.append(f"{ind}    raise DecodeError('{f.name} must not be null')")
        lines.append(f"{ind}else:")
        lines.append(f"{ind}    if {count} > len(buf) - pos: check_array_count(buf, pos, {count})")
        if f.type in p.FIXED_FORMATS:
            letter = p.FIXED_FORMATS[f.type]
            size = struct.calcsize(">" + letter)
            lines.append(f"{ind}    {target} = list(_unpack_from('>%d{letter}' % {count}, buf, pos))")
            lines.append(f"{ind}    pos += {size} * {count}")
            return lines
        items = self.fresh("items")
        item = self.fresh("item")
        element = FieldDef(f.name, f.type, False, f.versions, NO_VERSIONS, None, MISSING, f.struct)
        lines.append(f"{ind}    {items} = []")
        lines.append(f"{ind}    for _ in range({count}):")
        lines.extend(self._read(element, item, ind + "        ", depth))
        lines.append(f"{ind}        {items}.append({item})")
        lines.append(f"{ind}    {target} = {items}")
        return lines

    # ----- encoding -----

    def encode_struct(self, struct_def: StructDef) -> None:
        fields = [f for f in struct_def.fields if self.version in f.versions]
        out = [f"def _enc_{struct_def.name}(o, out):"]
        for run in _field_runs(f for f in fields if f.tag is None):
            if isinstance(run, list):
                fmt = ">" + "".join(p.FIXED_FORMATS[f.type] for f in run)
                args = ", ".join(f"o.{f.attr}" for f in run)
                out.append(f"    out.append({self.fixed_struct(fmt)}.pack({args}))")
            else:
                out.extend(self._write(run, f"o.{run.attr}", "out", "    "))
        if self.flexible:
            tagged = sorted((f for f in fields if f.tag is not None), key=lambda f: f.tag or 0)
            if not tagged:
                out.append("    out.append(b'\\x00')")
            else:
                out.append("    tagged = []")
                for f in tagged:
                    out.append(f"    if o.{f.attr} != {_default_to_compare(f)}:")
                    out.append("        sub = []")
                    out.extend(self._write(f, f"o.{f.attr}", "sub", "        "))
                    out.append(f"        tagged.append(({f.tag}, b''.join(sub)))")
                out.append("    if not tagged:")
                out.append("        out.append(b'\\x00')")
                out.append("        return")
                out.append("    out.append(uvarint_bytes(len(tagged)))")
                out.append("    for tag, data in tagged:")
                out.append("        out.append(uvarint_bytes(tag))")
                out.append("        out.append(uvarint_bytes(len(data)))")
                out.append("        out.append(data)")
        if len(out) == 1:
            out.append("    pass")
        self.lines.extend(out)

    def _write(self, f: FieldDef, value: str, out: str, ind: str) -> list[str]:
        flex = self.flexible
        if f.is_array:
            if flex:
                length = f"(b'\\x00' if {value} is None else uvarint_bytes(len({value}) + 1))"
                lines = [f"{ind}{out}.append{length}"]
            else:
                lines = [f"{ind}write_array_length({out}, {value})"]
            if f.type in p.FIXED_FORMATS:
                letter = p.FIXED_FORMATS[f.type]
                lines.append(f"{ind}if {value}: {out}.append(_pack('>%d{letter}' % len({value}), *{value}))")
                return lines
            item = self.fresh("item")
            element = FieldDef(f.name, f.type, False, f.versions, NO_VERSIONS, None, MISSING, f.struct)
            lines.append(f"{ind}for {item} in {value} or ():")
            lines.extend(self._write(element, item, out, ind + "    "))
            return lines
        if f.type in p.FIXED_FORMATS:
            fmt = ">" + p.FIXED_FORMATS[f.type]
            return [f"{ind}{out}.append({self.fixed_struct(fmt)}.pack({value}))"]
        if f.type in ("string", "bytes", "records"):
            kind = "bytes" if f.type == "records" else f.type
            return [f"{ind}write_{'compact_' if flex else ''}{kind}({out}, {value})"]
        if f.type == "uuid":
            return [f"{ind}write_uuid({out}, {value})"]
        if self.version in f.nullable:
            return [
                f"{ind}if {value} is None:",
                f"{ind}    {out}.append(b'\\xff')",
                f"{ind}else:",
                f"{ind}    {out}.append(b'\\x01')",
                f"{ind}    _enc_{f.type}({value}, {out})",
            ]
        return [f"{ind}_enc_{f.type}({value}, {out})"]


class VersionCodec:
    """Encoder and decoder of one message at one version."""

    __slots__ = (
        "cls",
        "decode_root",
        "encode_root",
        "flexible",
        "generated_encode_root",
        "message",
        "version",
    )

    def __init__(self, message: MessageDef, version: int, classes: dict[str, type[Message]]) -> None:
        self.message = message
        self.version = version
        self.flexible = version in message.flexible
        self.cls = classes[message.root.name]
        gen = _Generator(message, version)
        for struct_def in _walk_structs(message.root, {}).values():
            gen.decode_struct(struct_def)
            gen.encode_struct(struct_def)
        namespace: dict[str, Any] = {
            name: getattr(p, name)
            for name in dir(p)
            if name.startswith(("read_", "write_", "check_", "skip_"))
        }
        namespace.update(
            {
                "DecodeError": p.DecodeError,
                "uvarint_bytes": p.uvarint_bytes,
                "_ZERO_UUID": p.ZERO_UUID,
                "_new": object.__new__,
                "_unpack_from": struct.unpack_from,
                "_pack": struct.pack,
            }
        )
        namespace.update({f"_cls_{name}": cls for name, cls in classes.items()})
        namespace.update({f"_DEFAULT_{name}": cls() for name, cls in classes.items()})
        namespace.update({name: struct.Struct(fmt) for fmt, name in gen.formats.items()})
        source = "\n".join(gen.lines)
        exec(compile(source, f"<sluice codec {message.name} v{version}>", "exec"), namespace)
        self.decode_root: Callable[[p.Buffer, int], tuple[Any, int]] = namespace[f"_dec_{message.root.name}"]
        self.encode_root: Callable[[Any, list[Any]], None] = namespace[f"_enc_{message.root.name}"]
        self.generated_encode_root = self.encode_root  # what a special encoder must match byte for byte
        special = SPECIAL_ENCODERS.get(message.name)
        if special is not None:
            self.encode_root = special(version, self.encode_root, classes)

    def decode(self, buf: p.Buffer, pos: int = 0) -> tuple[Any, int]:
        """Decode one message starting at `pos`; returns it and the position after it."""
        try:
            return self.decode_root(buf, pos)
        except p.DecodeError:
            raise
        except (IndexError, struct.error, UnicodeDecodeError, ValueError, OverflowError) as exc:
            raise p.DecodeError(f"malformed {self.message.name} v{self.version}: {exc}") from exc

    def encode_into(self, obj: Any, out: list[Any]) -> None:
        self.encode_root(obj, out)

    def encode(self, obj: Any) -> bytes:
        out: list[Any] = []
        self.encode_root(obj, out)
        return b"".join(out)


class MessageCodecs:
    """Every version of one message, compiled on first use."""

    def __init__(self, message: MessageDef) -> None:
        self.message = message
        self.classes = build_classes(message)
        self.cls = self.classes[message.root.name]
        self._versions: dict[int, VersionCodec] = {}

    def __getitem__(self, version: int) -> VersionCodec:
        codec = self._versions.get(version)
        if codec is None:
            if version not in self.message.valid:
                raise KeyError(f"{self.message.name} has no version {version}")
            codec = self._versions[version] = VersionCodec(self.message, version, self.classes)
        return codec
