"""Avro schemas: validation (our structural checks, then fastavro's), normalized text, fingerprint, references.

Named types are written with full names and no "namespace" key in the normalized text, so two texts that
differ only in layout, key order, `{"type": "int"}` vs `"int"`, or where a namespace is declared normalize to
the same string. Docs, defaults, aliases and custom properties are kept: Confluent registers a schema whose
doc changed as a new version, so they are part of its identity.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import fastavro
from fastavro.schema import SchemaParseException, UnknownType

from .avro_text import java_text
from .parsed import InvalidSchemaError, Parsed, compact_json, load_json

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED_KINDS = frozenset({"record", "error", "enum", "fixed"})
_SIMPLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Keys the normalizer writes in a fixed order; anything else is a custom property, written sorted after them.
_NAMED_KEYS = ("type", "name", "namespace", "doc", "aliases", "fields", "symbols", "size", "default")
_FIELD_KEYS = ("name", "type", "doc", "default", "order", "aliases")


@dataclass(frozen=True)
class AvroModel:
    """A self-contained view for the compatibility checks.

    root: the schema with every named type written out at its first use and referred to by full name after;
    named: full name -> that written-out definition (the references' types included).
    """

    root: Any
    named: dict[str, dict[str, Any]]


def parse(text: str, references: Mapping[str, str]) -> Parsed:
    value = load_json(text)
    named: dict[str, Any] = {}
    referenced = _parse_references(references, named)
    check_structure(value, "")
    parsed = _fastavro_parse(value, named, "the schema")
    canonical = compact_json(render(parsed, named, inline=lambda _name: False, keep=referenced))
    model_named: dict[str, dict[str, Any]] = {}
    root = render(parsed, named, inline=lambda _name: True, keep=frozenset(), defined=model_named)
    try:
        raw = fastavro.parse_schema(root)
    except Exception as error:  # fastavro raises many types; the input was already accepted once above
        raise InvalidSchemaError(f"Invalid Avro schema: {error}") from None
    return Parsed(
        normalized=canonical,
        identity=canonical,
        raw=raw,
        model=AvroModel(root=root, named=model_named),
        text=java_text(value, referenced),
    )


def _parse_references(references: Mapping[str, str], named: dict[str, Any]) -> frozenset[str]:
    """Parse the referenced schemas into `named`, dependencies first, whatever order they were given in."""
    pending: dict[str, Any] = {}
    for name, ref_text in references.items():
        value = load_json(ref_text, f"referenced schema {name!r}")
        check_structure(value, "")
        pending[name] = value
    while pending:
        progressed = False
        for name, value in list(pending.items()):
            try:
                _fastavro_parse(value, named, f"referenced schema {name!r}", strict=False)
            except UnknownType:
                continue
            del pending[name]
            progressed = True
        if not progressed:
            name, value = next(iter(pending.items()))
            _fastavro_parse(value, named, f"referenced schema {name!r}")  # raises with the unknown name
    return frozenset(named)


def _fastavro_parse(value: Any, named: dict[str, Any], what: str, *, strict: bool = True) -> Any:
    trial = dict(named)
    try:
        parsed = fastavro.parse_schema(value, named_schemas=trial, _write_hint=False)
    except UnknownType as error:
        if not strict:
            raise
        raise InvalidSchemaError(
            f"Invalid Avro schema: {what} uses the type {error.name!r}, which is neither defined in it "
            "nor given as a reference"
        ) from None
    except SchemaParseException as error:
        raise InvalidSchemaError(f"Invalid Avro schema: {what}: {error}") from None
    except Exception as error:  # fastavro's own KeyError/TypeError/ValueError on shapes we did not foresee
        raise InvalidSchemaError(f"Invalid Avro schema: {what}: {type(error).__name__} {error}") from None
    named.clear()
    named.update(trial)
    return parsed


# ------------------------------------------------------------------------------------------------ structure
def check_structure(node: Any, namespace: str, path: str = "") -> None:
    """The Avro specification's rules that fastavro does not enforce, with the path of what broke."""
    where = path or "/"
    if isinstance(node, str):
        return
    if isinstance(node, list):
        _check_union(node, namespace, path)
        return
    if not isinstance(node, dict):
        raise InvalidSchemaError(f"Invalid Avro schema at {where}: {compact_json(node)} is not a schema")
    kind = node.get("type")
    if isinstance(kind, (dict, list)):
        check_structure(kind, namespace, f"{path}/type")
        return
    if not isinstance(kind, str):
        raise InvalidSchemaError(f"Invalid Avro schema at {where}: a schema object needs a string 'type'")
    if kind in NAMED_KINDS:
        namespace = _check_named(node, namespace, where)
    if kind in ("record", "error"):
        _check_fields(node, namespace, path)
    elif kind == "enum":
        _check_enum(node, where)
    elif kind == "fixed":
        size = node.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InvalidSchemaError(f"Invalid Avro schema at {where}: a fixed type needs a 'size' >= 0")
    elif kind == "array":
        if "items" not in node:
            raise InvalidSchemaError(f"Invalid Avro schema at {where}: an array needs 'items'")
        check_structure(node["items"], namespace, f"{path}/items")
    elif kind == "map":
        if "values" not in node:
            raise InvalidSchemaError(f"Invalid Avro schema at {where}: a map needs 'values'")
        check_structure(node["values"], namespace, f"{path}/values")


def _check_named(node: dict[str, Any], namespace: str, where: str) -> str:
    name = node.get("name")
    if not isinstance(name, str) or not _valid_full_name(name):
        raise InvalidSchemaError(f"Invalid Avro schema at {where}: {name!r} is not a valid type name")
    declared = node.get("namespace")
    if declared is not None and (
        not isinstance(declared, str) or (declared and not _valid_full_name(declared))
    ):
        raise InvalidSchemaError(f"Invalid Avro schema at {where}: {declared!r} is not a valid namespace")
    aliases = node.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and _valid_full_name(a) for a in aliases):
        raise InvalidSchemaError(f"Invalid Avro schema at {where}: 'aliases' must be a list of type names")
    full = _full_name(name, declared if declared is not None else namespace)
    return full.rpartition(".")[0]


def _check_fields(node: dict[str, Any], namespace: str, path: str) -> None:
    fields = node.get("fields")
    if not isinstance(fields, list):
        raise InvalidSchemaError(f"Invalid Avro schema at {path or '/'}: a record needs a 'fields' list")
    seen: set[str] = set()
    for index, field_node in enumerate(fields):
        where = f"{path}/fields/{index}"
        if not isinstance(field_node, dict):
            raise InvalidSchemaError(f"Invalid Avro schema at {where}: a field must be an object")
        name = field_node.get("name")
        if not isinstance(name, str) or not _SIMPLE_NAME.match(name):
            raise InvalidSchemaError(f"Invalid Avro schema at {where}: {name!r} is not a valid field name")
        if name in seen:
            raise InvalidSchemaError(f"Invalid Avro schema at {where}: the field name {name!r} is repeated")
        seen.add(name)
        if "type" not in field_node:
            raise InvalidSchemaError(f"Invalid Avro schema at {where}: the field {name!r} has no 'type'")
        order = field_node.get("order", "ascending")
        if order not in ("ascending", "descending", "ignore"):
            raise InvalidSchemaError(f"Invalid Avro schema at {where}: 'order' {order!r} is not valid")
        check_structure(field_node["type"], namespace, f"{where}/type")
        _check_integer_default(field_node, where)


_INTEGER_RANGES = {"int": 2**31, "long": 2**63}


def _check_integer_default(field_node: dict[str, Any], where: str) -> None:
    """fastavro accepts any integer as an int/long default; one that cannot be written is no default."""
    kind = field_node["type"]
    kind = kind.get("type") if isinstance(kind, dict) else kind
    default = field_node.get("default")
    if isinstance(kind, str) and kind in _INTEGER_RANGES and type(default) is int:
        bound = _INTEGER_RANGES[kind]
        if not -bound <= default < bound:
            raise InvalidSchemaError(
                f"Invalid Avro schema at {where}: the default {default} does not fit {kind}"
            )


def _check_enum(node: dict[str, Any], where: str) -> None:
    symbols = node.get("symbols")
    if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
        raise InvalidSchemaError(f"Invalid Avro schema at {where}: an enum needs a 'symbols' list of strings")
    for symbol in symbols:
        if not _SIMPLE_NAME.match(symbol):
            raise InvalidSchemaError(f"Invalid Avro schema at {where}: {symbol!r} is not a valid enum symbol")


def _check_union(branches: list[Any], namespace: str, path: str) -> None:
    kinds: set[str] = set()
    for index, branch in enumerate(branches):
        where = f"{path}/{index}"
        if isinstance(_unwrapped(branch), list):
            raise InvalidSchemaError(
                f"Invalid Avro schema at {where}: a union may not directly contain a union"
            )
        check_structure(branch, namespace, where)
        kind = _union_kind(branch, namespace)
        if kind in kinds:
            raise InvalidSchemaError(
                f"Invalid Avro schema at {where}: the union has two branches of type {kind}"
            )
        kinds.add(kind)


def _unwrapped(node: Any) -> Any:
    """{"type": {"type": ...}} -> the innermost schema ({"type": [...]} is a union in disguise)."""
    while isinstance(node, dict) and isinstance(node.get("type"), (dict, list)):
        node = node["type"]
    return node


def _union_kind(branch: Any, namespace: str) -> str:
    """What makes union branches distinct: the type, or for named types the full name."""
    branch = _unwrapped(branch)
    if isinstance(branch, str):
        return branch if branch in PRIMITIVES else _full_name(branch, namespace)
    kind = branch["type"]
    if kind in NAMED_KINDS:
        return _full_name(branch["name"], branch.get("namespace", namespace))
    return str(kind)


def _valid_full_name(name: str) -> bool:
    return all(_SIMPLE_NAME.match(part) for part in name.split("."))


def _full_name(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


# ------------------------------------------------------------------------------------------------ rendering
def render(
    node: Any,
    named: Mapping[str, Any],
    *,
    inline: Any,
    keep: Iterable[str],
    defined: dict[str, dict[str, Any]] | None = None,
) -> Any:
    """fastavro's parsed form -> our normalized JSON value.

    A named type is written out at its first use and by full name after; a type from a reference is written
    out only when inline(name) is true (never in the stored text, always in the self-contained model).
    `keep` lists names already written elsewhere (the references) and so never written out unless inlined.
    """
    seen: set[str] = set()
    kept = set(keep)
    out_defined = defined if defined is not None else {}

    def walk(current: Any, namespace: str) -> Any:
        if isinstance(current, str):
            if current in PRIMITIVES or current in seen:
                return current
            if current in kept and not inline(current):
                return current
            return walk(named[current], namespace)
        if isinstance(current, list):
            return [walk(branch, namespace) for branch in current]
        kind = current["type"]
        if not isinstance(kind, str):
            return walk(kind, namespace)
        if kind in NAMED_KINDS:
            return named_type(current, kind, namespace)
        out: dict[str, Any] = {"type": kind}
        if kind == "array":
            out["items"] = walk(current["items"], namespace)
        elif kind == "map":
            out["values"] = walk(current["values"], namespace)
        out.update(_custom(current, ("type", "items", "values")))
        return kind if len(out) == 1 else out

    def named_type(current: dict[str, Any], kind: str, enclosing: str) -> Any:
        full = current["name"]
        if full in seen:
            return full
        seen.add(full)
        namespace = full.rpartition(".")[0]
        out: dict[str, Any] = {"type": kind, "name": full}
        if not namespace and enclosing:
            out["namespace"] = ""  # a dotless name inside a namespace would otherwise join it
        if "doc" in current:
            out["doc"] = current["doc"]
        if current.get("aliases"):
            out["aliases"] = [_full_name(alias, namespace) for alias in current["aliases"]]
        out_defined[full] = out
        if kind in ("record", "error"):
            out["fields"] = [field(f, namespace) for f in current["fields"]]
        elif kind == "enum":
            out["symbols"] = list(current["symbols"])
        else:
            out["size"] = current["size"]
        if "default" in current:
            out["default"] = current["default"]
        out.update(_custom(current, _NAMED_KEYS))
        return out

    def field(current: dict[str, Any], namespace: str) -> dict[str, Any]:
        out: dict[str, Any] = {"name": current["name"], "type": walk(current["type"], namespace)}
        for key in ("doc", "default"):
            if key in current:
                out[key] = current[key]
        if current.get("order", "ascending") != "ascending":
            out["order"] = current["order"]
        if current.get("aliases"):
            out["aliases"] = list(current["aliases"])
        out.update(_custom(current, _FIELD_KEYS))
        return out

    return walk(node, "")


def _custom(node: Mapping[str, Any], known: Iterable[str]) -> dict[str, Any]:
    skip = set(known)
    return {key: node[key] for key in sorted(node) if key not in skip and not key.startswith("__")}
