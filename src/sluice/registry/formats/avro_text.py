"""An Avro schema printed as Avro's Java library prints it (Schema.toString(references, false)): the text
Confluent's registry stores for every Avro schema it registers (AvroSchema.canonicalString).

Compact JSON; each kind's keys in Avro's order (a record: type, name, namespace, doc, fields, its other
properties, aliases; a field: name, type, doc, default, order, aliases, properties); a primitive without
properties as its bare name; a namespace only where it differs from the enclosing one; a named type written
out once, then (and when a reference defines it) by its name, relative to the enclosing namespace. Defaults
and properties are written as given. Pure code over a schema that already parsed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_SCHEMA_RESERVED = frozenset(
    {"doc", "fields", "items", "name", "namespace", "size", "symbols", "values", "type", "aliases"}
)
_ENUM_RESERVED = _SCHEMA_RESERVED | {"default"}
_FIELD_RESERVED = frozenset({"default", "doc", "name", "order", "type", "aliases"})


def java_text(schema: Any, referenced: Iterable[str] = ()) -> str:
    """The text of `schema` (parsed JSON); `referenced`: full names the references define."""
    printer = _Printer(set(referenced))
    return json.dumps(printer.schema(schema, None), separators=(",", ":"), ensure_ascii=False)


def _split(name: str, namespace: str | None) -> tuple[str, str | None]:
    """(name, namespace) as Avro's Name holds them: a dotted name brings its own namespace; "" is none."""
    space, dot, simple = name.rpartition(".")
    if dot:
        namespace = space
    return simple, namespace or None


def _qualified(simple: str, space: str | None, current: str | None) -> str:
    return simple if space is None or space == current else f"{space}.{simple}"


class _Printer:
    def __init__(self, known: set[str]) -> None:
        self.known = known  # full names written already (or defined by a reference)

    def schema(self, node: Any, current: str | None) -> Any:
        if isinstance(node, str):
            return node if node in PRIMITIVES else self._reference(node, current)
        if isinstance(node, list):
            return [self.schema(branch, current) for branch in node]
        kind = node.get("type")
        if isinstance(kind, (dict, list)):  # {"type": {...}}: the inner schema
            return self.schema(kind, current)
        if kind in PRIMITIVES:
            props = _props(node, _SCHEMA_RESERVED)
            return {"type": kind, **props} if props else kind
        if kind == "array":
            return {
                "type": "array",
                "items": self.schema(node["items"], current),
                **_props(node, _SCHEMA_RESERVED),
            }
        if kind == "map":
            return {
                "type": "map",
                "values": self.schema(node["values"], current),
                **_props(node, _SCHEMA_RESERVED),
            }
        if kind in ("record", "error", "enum", "fixed"):
            return self._named(node, kind, current)
        return self._reference(str(kind), current)  # {"type": "Name"}: a reference by name

    def _reference(self, name: str, current: str | None) -> str:
        simple, space = _split(name, current)
        full = f"{space}.{simple}" if space else simple
        if full not in self.known and space is not None and simple in self.known:
            space = None  # a name of the null namespace, used inside a named one
        return _qualified(simple, space, current)

    def _named(self, node: dict[str, Any], kind: str, current: str | None) -> Any:
        given = node.get("namespace")
        simple, space = _split(str(node["name"]), current if given is None else given)
        full = f"{space}.{simple}" if space else simple
        if full in self.known:
            return _qualified(simple, space, current)
        self.known.add(full)
        out: dict[str, Any] = {"type": kind, "name": simple}
        if space is not None and space != current:
            out["namespace"] = space
        elif space is None and current is not None:
            out["namespace"] = ""
        if "doc" in node:
            out["doc"] = node["doc"]
        if kind in ("record", "error"):
            out["fields"] = [self._field(field, space) for field in node.get("fields", [])]
            out.update(_props(node, _SCHEMA_RESERVED))
        elif kind == "enum":
            out["symbols"] = list(node.get("symbols", []))
            if "default" in node:
                out["default"] = node["default"]
            out.update(_props(node, _ENUM_RESERVED))
        else:
            out["size"] = node["size"]
            out.update(_props(node, _SCHEMA_RESERVED))
        aliases = node.get("aliases")
        if aliases:
            out["aliases"] = [_qualified(*_split(alias, space), space) for alias in aliases]
        return out

    def _field(self, field: dict[str, Any], space: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"name": field["name"], "type": self.schema(field["type"], space)}
        if "doc" in field:
            out["doc"] = field["doc"]
        if "default" in field:
            out["default"] = field["default"]
        order = str(field.get("order", "ascending")).lower()
        if order != "ascending":
            out["order"] = order
        if field.get("aliases"):
            out["aliases"] = list(field["aliases"])
        out.update(_props(field, _FIELD_RESERVED))
        return out


def _props(node: dict[str, Any], reserved: frozenset[str]) -> dict[str, Any]:
    return {key: value for key, value in node.items() if key not in reserved}
