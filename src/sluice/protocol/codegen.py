"""Writes the source of a message's decode and encode functions for one version (sluice.protocol.codec compiles
and runs it): straight-line Python, consecutive fixed-width fields read and written with one precompiled
`struct` call, arrays of fixed-width values in bulk, nested structs inline, record batches passed through as
views without copying.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

from sluice.protocol import primitives as p
from sluice.protocol.schema import MISSING, NO_VERSIONS, PRIMITIVE_TYPES, FieldDef, MessageDef, StructDef

# Structs nested deeper than this are decoded by a call (also what tagged fields pass to `_read`).
_NO_INLINE = 8


def natural_default(f: FieldDef) -> str:
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
    """Like `natural_default`, but a struct's default is one shared instance (`_DEFAULT_<name>` in the
    codec's namespace), only ever compared with, so encoding allocates nothing for an absent tagged field."""
    if f.default is MISSING and not f.is_array and f.type not in PRIMITIVE_TYPES:
        return f"_DEFAULT_{f.type}"
    return natural_default(f)


def walk_structs(struct: StructDef, seen: dict[str, StructDef]) -> dict[str, StructDef]:
    seen.setdefault(struct.name, struct)
    for f in struct.fields:
        if f.struct is not None and f.struct.name not in seen:
            walk_structs(f.struct, seen)
    return seen


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


class Generator:
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
            out.append(f"{ind}{obj}.{f.attr} = {natural_default(f)}")
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
