"""Can an Avro reader schema read what a writer schema wrote? The resolution rules of the Avro specification.

- same primitive; or a promotion: int -> long, float, double; long -> float, double; float -> double;
  string <-> bytes;
- records and enums and fixed types match by unqualified name, or by a reader alias naming the writer;
- a reader field missing from the writer needs a default; writer fields the reader lacks are skipped;
- an enum reader must hold every writer symbol, unless it has a default symbol to read unknown ones as;
- fixed sizes must be equal; arrays and maps compare their items and values;
- a writer union needs every branch readable; a reader union needs some branch that reads the writer.
Logical types are not compared: resolution works on the underlying types.
"""

from __future__ import annotations

from typing import Any

from .avro import PRIMITIVES, AvroModel
from .parsed import Problem, Roles

_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


def problems(reader: AvroModel, writer: AvroModel, roles: Roles) -> list[Problem]:
    return _Resolver(reader, writer, roles).check(reader.root, writer.root, "")


class _Resolver:
    def __init__(self, reader: AvroModel, writer: AvroModel, roles: Roles) -> None:
        self.reader = reader
        self.writer = writer
        self.roles = roles
        # Named type pairs -> their problems, or None while being compared: a recursive type meeting itself
        # again is taken as compatible (what is compared around it decides), and each pair is compared once.
        self.results: dict[tuple[str, str], list[Problem] | None] = {}

    def check(self, reader: Any, writer: Any, path: str) -> list[Problem]:
        r_node = _resolve(reader, self.reader)
        w_node = _resolve(writer, self.writer)
        if isinstance(w_node, list):
            return self._writer_union(r_node, w_node, path)
        if isinstance(r_node, list):
            if any(not self.check(branch, w_node, path) for branch in r_node):
                return []
            return [
                self._problem(
                    "MISSING_UNION_BRANCH",
                    path,
                    f"The {self.roles.reader} schema's union at '{path or '/'}' has no branch that reads "
                    f"the {self.roles.writer} schema's {_describe(w_node)}",
                )
            ]
        r_kind, w_kind = _kind(r_node), _kind(w_node)
        if r_kind != w_kind:
            if r_kind in _PROMOTIONS.get(w_kind, ()):
                return []
            return [self._type_mismatch(r_node, w_node, path)]
        if r_kind in PRIMITIVES or r_kind in ("array", "map"):
            if r_kind == "array":
                return self.check(r_node["items"], w_node["items"], f"{path}/items")
            if r_kind == "map":
                return self.check(r_node["values"], w_node["values"], f"{path}/values")
            return []
        return self._named(r_node, w_node, r_kind, path)

    def _writer_union(self, reader: Any, writer: list[Any], path: str) -> list[Problem]:
        found: list[Problem] = []
        for index, branch in enumerate(writer):
            if isinstance(reader, list):
                if not any(not self.check(r_branch, branch, path) for r_branch in reader):
                    found.append(
                        self._problem(
                            "MISSING_UNION_BRANCH",
                            f"{path}/{index}",
                            f"The {self.roles.reader} schema's union at '{path or '/'}' has no branch that "
                            f"reads the {self.roles.writer} schema's {_describe(_resolve(branch, self.writer))}",
                        )
                    )
            else:
                found.extend(self.check(reader, branch, f"{path}/{index}"))
        return found

    def _named(self, reader: dict[str, Any], writer: dict[str, Any], kind: str, path: str) -> list[Problem]:
        pair = (reader["name"], writer["name"])
        if pair in self.results:
            return list(self.results[pair] or ())
        self.results[pair] = None
        found = self._named_pair(reader, writer, kind, path)
        self.results[pair] = found
        return found

    def _named_pair(
        self, reader: dict[str, Any], writer: dict[str, Any], kind: str, path: str
    ) -> list[Problem]:
        if not _names_match(reader, writer):
            return [
                self._problem(
                    "NAME_MISMATCH",
                    f"{path}/name",
                    f"The {self.roles.reader} schema's type at '{path or '/'}' is named '{reader['name']}' and "
                    f"the {self.roles.writer} schema's '{writer['name']}', and no alias joins them",
                )
            ]
        if kind == "fixed":
            if reader["size"] == writer["size"]:
                return []
            return [
                self._problem(
                    "FIXED_SIZE_MISMATCH",
                    f"{path}/size",
                    f"The fixed type '{reader['name']}' is {reader['size']} bytes in the {self.roles.reader} "
                    f"schema and {writer['size']} bytes in the {self.roles.writer} schema",
                )
            ]
        if kind == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if not missing or "default" in reader:
                return []
            return [
                self._problem(
                    "MISSING_ENUM_SYMBOLS",
                    f"{path}/symbols",
                    f"The {self.roles.reader} schema's enum '{reader['name']}' lacks the symbols "
                    f"{', '.join(missing)} of the {self.roles.writer} schema and has no default symbol",
                    ", ".join(missing),
                )
            ]
        return self._record(reader, writer, path)

    def _record(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[Problem]:
        by_name = {field["name"]: field for field in writer["fields"]}
        found: list[Problem] = []
        for index, field in enumerate(reader["fields"]):
            field_path = f"{path}/fields/{index}"
            written = next(
                (by_name[name] for name in (field["name"], *field.get("aliases", ())) if name in by_name),
                None,
            )
            if written is not None:
                found.extend(self.check(field["type"], written["type"], f"{field_path}/type"))
            elif "default" not in field:
                found.append(
                    self._problem(
                        "READER_FIELD_MISSING_DEFAULT_VALUE",
                        field_path,
                        f"The field '{field['name']}' at '{field_path}' in the {self.roles.reader} schema "
                        f"has no default value and the {self.roles.writer} schema does not have it",
                        field["name"],
                    )
                )
        return found

    def _type_mismatch(self, reader: Any, writer: Any, path: str) -> Problem:
        return self._problem(
            "TYPE_MISMATCH",
            path,
            f"The type at '{path or '/'}' is {_describe(reader)} in the {self.roles.reader} schema, which "
            f"cannot read the {_describe(writer)} of the {self.roles.writer} schema",
        )

    def _problem(self, error_type: str, path: str, description: str, info: str = "") -> Problem:
        return Problem(error_type, path or "/", description, info or (path or "/"))


def _resolve(node: Any, model: AvroModel) -> Any:
    """A named type's full name -> its definition; other nodes as they are."""
    if isinstance(node, str) and node not in PRIMITIVES:
        return model.named[node]
    return node


def _kind(node: Any) -> str:
    if isinstance(node, str):
        return node
    kind = node["type"]
    return "record" if kind == "error" else kind


def _describe(node: Any) -> str:
    kind = _kind(node) if not isinstance(node, list) else "union"
    if isinstance(node, dict) and "name" in node:
        return f"{kind} '{node['name']}'"
    return kind


def _simple(name: str) -> str:
    return name.rpartition(".")[2]


def _names_match(reader: dict[str, Any], writer: dict[str, Any]) -> bool:
    if _simple(reader["name"]) == _simple(writer["name"]):
        return True
    return writer["name"] in reader.get("aliases", ())
