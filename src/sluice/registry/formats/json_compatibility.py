"""Does a JSON Schema reader accept every document a writer schema accepted? Confluent's JSON Schema rule set.

The check walks both schemas side by side and names each difference by Confluent's difference types (facts
its clients and users see in messages). Only the differences that narrow what the reader accepts are
returned; widening ones (a type added, a bound relaxed, a property removed from an open model) pass.
Nodes are first split into kinds as Confluent's loaders split them (json_kinds): nodes of different kinds
are compared by kind alone, a combined node against a plain one by its parts. The content model decides
what adding or removing a property means: an open model (additionalProperties absent or true, no
patternProperties) may already hold the added name with any value; a closed one (false) cannot; a
partially open one (a schema, even {}, or patternProperties) must be compared with the property's schema.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

import jsonschema

from .json_keywords import (
    array_shape,
    contains_bounds,
    dict_at,
    enum_values,
    has_default,
    is_empty,
    is_open,
    leftover,
    numeric_bound,
    open_model,
    partial_schema,
    unevaluated,
)
from .json_kinds import Shape, shape
from .jsonschema import JsonModel, Resolver
from .parsed import Problem, Roles, compact_json

_LOWER_BOUNDS = ("minLength", "minItems", "minProperties", "minContains")
_UPPER_BOUNDS = ("maxLength", "maxItems", "maxProperties", "maxContains")
_MAX_REF_HOPS = 50
_REF_REPLACES = (jsonschema.Draft4Validator, jsonschema.Draft6Validator, jsonschema.Draft7Validator)
_DRAFT_NUMBERS = {jsonschema.Draft4Validator: 4, jsonschema.Draft6Validator: 6, jsonschema.Draft7Validator: 7}


def problems(reader: JsonModel, writer: JsonModel, roles: Roles) -> list[Problem]:
    diff = _Diff(reader, writer, roles)
    diff.compare(writer.root, writer.resolver(), reader.root, reader.resolver(), "#")
    return diff.found


def _distinct(subs: tuple[Any, ...]) -> list[Any]:
    """A combination's parts with repeats dropped, as CombinedSchemaDiff collects them into sets."""
    return list({compact_json(sub, sort_keys=True): sub for sub in reversed(subs)}.values())[::-1]


def _matching_size(fits: list[list[int]], right: int) -> int:
    """The size of a maximum matching: fits[i] lists the right-hand parts left-hand part i may pair with."""
    paired: list[int | None] = [None] * right

    def place(left: int, seen: set[int]) -> bool:
        for j in fits[left]:
            if j not in seen:
                seen.add(j)
                holder = paired[j]
                if holder is None or place(holder, seen):
                    paired[j] = left
                    return True
        return False

    return sum(place(left, set()) for left in range(len(fits)))


def _dependencies_of(schema: dict[str, Any]) -> dict[str, Any]:
    """Draft 7's dependencies and their 2019-09 halves (dependentRequired, dependentSchemas) as one map."""
    return {
        **dict_at(schema, "dependencies"),
        **dict_at(schema, "dependentRequired"),
        **dict_at(schema, "dependentSchemas"),
    }


def _snake(keyword: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", keyword).upper()


class _Diff:
    def __init__(self, reader: JsonModel, writer: JsonModel, roles: Roles) -> None:
        self.reader = reader
        self.writer = writer
        self.roles = roles
        self.found: list[Problem] = []
        # (writer node, reader node) -> its problems, or None while being compared: each pair is compared
        # once (oneOf x oneOf probing stays polynomial) and a recursive $ref meeting itself again passes.
        self.results: dict[tuple[int, int], list[Problem] | None] = {}
        self.shapes: dict[int, tuple[Any, Shape]] = {}

    # ---------------------------------------------------------------------------------------------- helpers
    def report(self, error_type: str, path: str, description: str) -> None:
        self.found.append(Problem(error_type, path, description, path))

    def probe(self, w: Any, w_res: Resolver, r: Any, r_res: Resolver, path: str) -> bool:
        """Compare without reporting: does the reader accept everything the writer does?"""
        return not self.attempt(w, w_res, r, r_res, path)

    def attempt(self, w: Any, w_res: Resolver, r: Any, r_res: Resolver, path: str) -> list[Problem]:
        """Compare without reporting; the problems found, for a caller that may report them after all."""
        saved, self.found = self.found, []
        try:
            self.compare(w, w_res, r, r_res, path)
            return self.found
        finally:
            self.found = saved

    def covered(self, w: Any, w_res: Resolver, r: Any, r_res: Resolver, path: str) -> bool:
        """Is a property or item covered by a partially open model? Confluent keeps the differences of
        that comparison beside its *_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL, so they are reported."""
        problems = self.attempt(w, w_res, r, r_res, path)
        self.found.extend(problems)
        return not problems

    def later(self, model: JsonModel) -> bool:
        """Is the draft 2019-09 or later, which Confluent reads through its json-sKema translation?"""
        return model.draft not in _REF_REPLACES

    def deref(self, schema: Any, resolver: Resolver, model: JsonModel) -> tuple[Any, Resolver]:
        """Follow $ref, keeping sibling keywords where the draft applies them."""
        for _ in range(_MAX_REF_HOPS):
            if not isinstance(schema, dict) or not isinstance(schema.get("$ref"), str):
                return schema, resolver
            target, resolver = model.lookup(resolver, schema["$ref"])
            # Up to draft 7 a $ref replaces its object; from 2019-09 the keywords beside it apply too.
            siblings = (
                {key: value for key, value in schema.items() if key != "$ref"}
                if model.draft not in _REF_REPLACES
                else {}
            )
            schema = {**target, **siblings} if isinstance(target, dict) and siblings else target
        return {}, resolver  # a $ref chain this long is a loop: treat it as unconstrained

    # --------------------------------------------------------------------------------------------- the walk
    def compare(self, w: Any, w_res: Resolver, r: Any, r_res: Resolver, path: str) -> None:
        key = (id(w), id(r))  # the nodes as they sit in the schemas (deref builds new dicts)
        if key in self.results:
            self.found.extend(self.results[key] or ())
            return
        self.results[key] = None
        outer, self.found = self.found, []
        try:
            self._compare_nodes(w, w_res, r, r_res, path)
        finally:
            self.results[key] = self.found
            self.found = outer + self.found

    def _compare_nodes(self, w: Any, w_res: Resolver, r: Any, r_res: Resolver, path: str) -> None:
        w_target, w_res = self.deref(w, w_res, self.writer)
        r_target, r_res = self.deref(r, r_res, self.reader)
        if w_target is not w or r_target is not r:
            # Compare the targets as pairs of their own, so a recursive $ref meets the pair in progress.
            self.compare(w_target, w_res, r_target, r_res, path)
            return
        w_shape, r_shape = self.shape(w, self.writer), self.shape(r, self.reader)
        if not self._kinds(w, w_shape, w_res, r, r_shape, r_res, path):
            return
        kind = w_shape.kind
        if kind == "not":
            self._not(w, w_res, r, r_res, path)
        elif kind in ("enum", "const"):
            self._enum(w, r, path)
        elif kind in ("string", "number", "object", "array"):
            # A node of one kind holds no keyword of another, so each comparison below finds only its own.
            if kind == "number" and r.get("type") == "integer" and w.get("type") != "integer":
                self.report("TYPE_NARROWED", path, self._says("restricts the numbers to integers", path))
            self._bounds(w, r, path)
            self._numbers(w, r, path)
            self._pattern(w, r, path)
            if r.get("uniqueItems") is True and w.get("uniqueItems") is not True:
                self.report("UNIQUE_ITEMS_ADDED", path, self._says("requires unique array items", path))
            self._object(w, w_res, r, r_res, path)
            self._array(w, w_res, r, r_res, path)
        # boolean, null, the empty schema, false and if/then/else have nothing Confluent compares.

    def shape(self, node: Any, model: JsonModel) -> Shape:
        """The node's kind, split once per node; keeping the node keeps its id (the memo's key) unique."""
        entry = self.shapes.get(id(node))
        if entry is None:
            entry = self.shapes[id(node)] = (node, shape(node, _DRAFT_NUMBERS.get(model.draft, 2019)))
        return entry[1]

    def _says(self, what: str, path: str) -> str:
        return (
            f"The {self.roles.reader} schema {what} at '{path}', which the {self.roles.writer} schema did not"
        )

    def _kinds(
        self, w: Any, w_shape: Shape, w_res: Resolver, r: Any, r_shape: Shape, r_res: Resolver, path: str
    ) -> bool:
        """Confluent's SchemaDiff.compareTypes; returns whether both are of one plain kind to compare further.

        Schemas of different kinds are compared by kind alone: TYPE_CHANGED, except that a writer's false
        accepted no document and a reader's empty schema accepts every one. Before that, a combined schema
        against a plain one passes when one of its parts does: the reader's anyOf/oneOf offers an
        alternative that accepts the writer's schema (SUM_TYPE_EXTENDED), the writer's allOf has a part
        the reader accepts (PRODUCT_TYPE_NARROWED), or either is a combination of one.
        """
        if w_shape.kind == "false" or r_shape.kind == "empty":
            return False
        # Which parts may stand for the whole: a reader's alternatives, a writer's conditions, a lone part.
        pairs: list[tuple[Any, Any]] = []
        if r_shape.combined and not w_shape.combined:
            if len(r_shape.subs) == 1 or r_shape.kind != "allOf":
                pairs = [(w, sub) for sub in r_shape.subs]
        elif (
            w_shape.combined and not r_shape.combined and (len(w_shape.subs) == 1 or w_shape.kind == "allOf")
        ):
            pairs = [(sub, r) for sub in w_shape.subs]
        if any(self.probe(w_part, w_res, r_part, r_res, path) for w_part, r_part in pairs):
            return False
        if w_shape.combined and r_shape.combined:
            self._combined(w_shape, w_res, r_shape, r_res, path)
            return False
        if w_shape.kind != r_shape.kind:
            self.report(
                "TYPE_CHANGED",
                path,
                f"The {self.roles.reader} schema at '{path}' is {compact_json(r)[:200]}, a kind apart from the "
                f"{self.roles.writer} schema's {compact_json(w)[:200]}",
            )
            return False
        return True

    def _combined(self, w: Shape, w_res: Resolver, r: Shape, r_res: Resolver, path: str) -> None:
        """Two combined schemas, as Confluent's CombinedSchemaDiff compares them."""
        if w.kind != r.kind and not (
            r.kind == "anyOf"  # COMBINED_TYPE_EXTENDED: any criterion widens to anyOf
            or (len(w.subs) == 1 and (len(r.subs) == 1 or r.kind == "oneOf"))
            or (len(r.subs) == 1 and w.kind == "allOf")
        ):
            self.report("COMBINED_TYPE_CHANGED", path, self._says(f"replaces {w.kind} with {r.kind}", path))
            return
        w_subs, r_subs = _distinct(w.subs), _distinct(r.subs)
        if len(w_subs) < len(r_subs) and r.kind == "allOf":
            self.report("PRODUCT_TYPE_EXTENDED", path, self._says("adds an allOf condition", path))
        elif len(w_subs) > len(r_subs) and w.kind != "allOf":
            self.report(
                "SUM_TYPE_NARROWED",
                path,
                f"The {self.roles.reader} schema's {r.kind} at '{path}' has fewer alternatives than the "
                f"{self.roles.writer} schema's {w.kind}",
            )
        # Each part of the smaller side must be paired with its own part of the other side that it is
        # compatible with (a maximum matching); otherwise COMBINED_TYPE_SUBSCHEMAS_CHANGED.
        fits = [
            [j for j, r_sub in enumerate(r_subs) if self.probe(w_sub, w_res, r_sub, r_res, path)]
            for w_sub in w_subs
        ]
        if _matching_size(fits, len(r_subs)) < min(len(w_subs), len(r_subs)):
            self.report(
                "COMBINED_TYPE_SUBSCHEMAS_CHANGED",
                path,
                f"The {self.roles.reader} schema's {r.kind} at '{path}' has no one-to-one pairing of its parts "
                f"with those of the {self.roles.writer} schema's {w.kind}",
            )

    def _not(self, w: dict[str, Any], w_res: Resolver, r: dict[str, Any], r_res: Resolver, path: str) -> None:
        if "not" not in r:
            return
        if "not" not in w:
            self.report("NOT_TYPE_EXTENDED", f"{path}/not", self._says("adds a 'not' exclusion", path))
        elif not self.probe(r["not"], r_res, w["not"], w_res, f"{path}/not"):
            # What the reader excludes must already have been excluded by the writer.
            self.report("NOT_TYPE_EXTENDED", f"{path}/not", self._says("excludes more with 'not'", path))

    def _enum(self, w: dict[str, Any], r: dict[str, Any], path: str) -> None:
        r_values, w_values = enum_values(r), enum_values(w)
        if r_values is None or w_values is None:
            return
        r_keys = {compact_json(v, sort_keys=True) for v in r_values}
        missing = [v for v in w_values if compact_json(v, sort_keys=True) not in r_keys]
        if missing:
            w_keys = {compact_json(v, sort_keys=True) for v in w_values}
            self.report(
                "ENUM_ARRAY_NARROWED" if r_keys <= w_keys else "ENUM_ARRAY_CHANGED",
                path,
                f"The {self.roles.reader} schema's enum at '{path}' lacks {compact_json(missing)[:200]} of the "
                f"{self.roles.writer} schema",
            )

    def _bounds(self, w: dict[str, Any], r: dict[str, Any], path: str) -> None:
        w = {**w, **contains_bounds(w, self.later(self.writer))}
        r = {**r, **contains_bounds(r, self.later(self.reader))}
        for keyword, is_lower in [(k, True) for k in _LOWER_BOUNDS] + [(k, False) for k in _UPPER_BOUNDS]:
            r_value, w_value = r.get(keyword), w.get(keyword)
            if r_value is None:
                continue
            if w_value is None:
                self.report(f"{_snake(keyword)}_ADDED", path, self._says(f"adds {keyword} {r_value}", path))
            elif (r_value > w_value) if is_lower else (r_value < w_value):
                change = "INCREASED" if is_lower else "DECREASED"
                self.report(
                    f"{_snake(keyword)}_{change}",
                    path,
                    self._says(f"tightens {keyword} from {w_value} to {r_value}", path),
                )

    def _numbers(self, w: dict[str, Any], r: dict[str, Any], path: str) -> None:
        for lower in (True, False):
            r_bound, w_bound = numeric_bound(r, lower), numeric_bound(w, lower)
            if r_bound is None:
                continue
            keyword = r_bound[2]
            if w_bound is None:
                self.report(
                    f"{_snake(keyword)}_ADDED", path, self._says(f"adds {keyword} {r_bound[0]}", path)
                )
                continue
            (r_value, r_exclusive, _), (w_value, w_exclusive, _) = r_bound, w_bound
            tighter = r_value > w_value if lower else r_value < w_value
            if tighter or (r_value == w_value and r_exclusive and not w_exclusive):
                change = "INCREASED" if lower else "DECREASED"
                self.report(
                    f"{_snake(keyword)}_{change}", path, self._says(f"tightens {keyword} to {r_value}", path)
                )
        r_step, w_step = r.get("multipleOf"), w.get("multipleOf")
        if isinstance(r_step, (int, float)):
            if not isinstance(w_step, (int, float)):
                self.report("MULTIPLE_OF_ADDED", path, self._says(f"adds multipleOf {r_step}", path))
            elif Fraction(str(w_step)) % Fraction(str(r_step)) != 0:
                expanded = Fraction(str(r_step)) % Fraction(str(w_step)) == 0
                self.report(
                    "MULTIPLE_OF_EXPANDED" if expanded else "MULTIPLE_OF_CHANGED",
                    path,
                    self._says(f"changes multipleOf from {w_step} to {r_step}", path),
                )

    def _pattern(self, w: dict[str, Any], r: dict[str, Any], path: str) -> None:
        if "pattern" not in r or r.get("pattern") == w.get("pattern"):
            return
        if "pattern" not in w:
            self.report("PATTERN_ADDED", path, self._says(f"adds the pattern {r['pattern']!r}", path))
        else:
            self.report("PATTERN_CHANGED", path, self._says(f"changes the pattern to {r['pattern']!r}", path))

    # ----------------------------------------------------------------------------------------------- objects
    def _object(
        self, w: dict[str, Any], w_res: Resolver, r: dict[str, Any], r_res: Resolver, path: str
    ) -> None:
        w_props, r_props = dict_at(w, "properties"), dict_at(r, "properties")
        w_required = set(w.get("required", [])) if isinstance(w.get("required"), list) else set()
        r_required = set(r.get("required", [])) if isinstance(r.get("required"), list) else set()
        for name in [*w_props, *(n for n in r_props if n not in w_props)]:
            where = f"{path}/properties/{name}"
            if name in w_props and name in r_props:
                self.compare(w_props[name], w_res, r_props[name], r_res, where)
                # Only a property both list can gain `required` (REQUIRED_ATTRIBUTE_ADDED); a required name
                # with no property schema is not compared at all, as in Confluent's compareRequired.
                if name in r_required and name not in w_required and not has_default(r_props[name]):
                    self.report(
                        "REQUIRED_ATTRIBUTE_ADDED",
                        f"{path}/required",
                        self._says(f"requires the property '{name}'", path),
                    )
            elif name in w_props:
                self._property_removed(w_props[name], w_res, r, r_res, name, where)
            else:
                self._property_added(w, w_res, r_props[name], r_res, name in r_required, name, where)
        self._rest(
            w.get("additionalProperties"), w_res, r.get("additionalProperties"), r_res, path, "PROPERTIES"
        )
        self._unevaluated(w, w_res, r, r_res, path, "unevaluatedProperties")
        self._dependencies(w, w_res, r, r_res, path)
        # propertyNames and patternProperties are not compared keyword by keyword: Confluent's
        # ObjectSchemaDiff has no difference type for them; patternProperties only decide whether a
        # model is open and which schema covers an added or removed property.

    def _property_added(
        self,
        w: dict[str, Any],
        w_res: Resolver,
        r_prop: Any,
        r_res: Resolver,
        required: bool,
        name: str,
        where: str,
    ) -> None:
        if open_model(w, self.later(self.writer)):
            # PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL passes; OPTIONAL_/REQUIRED_(WITH_DEFAULT_)
            # PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL pass only under Confluent's LENIENT policy, not its default
            # STRICT one, which sluice follows: the writer may already have sent the name with any value.
            if is_empty(r_prop):
                return
            if not required:
                kind = "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"
            elif has_default(r_prop):
                kind = "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL"
            else:
                kind = "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"
            self.report(
                kind,
                where,
                f"The {self.roles.reader} schema adds the property at '{where}' while the "
                f"{self.roles.writer} schema's open content model allowed it with any value",
            )
            return
        covering = partial_schema(w, name, self.later(self.writer))
        if covering is not None and not self.covered(covering, w_res, r_prop, r_res, where):
            self.report(
                "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                where,
                self._says("adds a property narrower than the schema that covered it", where),
            )
        # Closed or partially open alike: OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL and
        # REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL pass.
        if required and not has_default(r_prop):
            self.report(
                "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL",
                where,
                self._says("requires a new property without a default", where),
            )

    def _property_removed(
        self, w_prop: Any, w_res: Resolver, r: dict[str, Any], r_res: Resolver, name: str, where: str
    ) -> None:
        if open_model(r, self.later(self.reader)):  # PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL
            return
        covering = partial_schema(r, name, self.later(self.reader))
        if covering is None:
            if w_prop is False:  # PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL: it never held data
                return
            self.report(
                "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
                where,
                f"The {self.roles.reader} schema removes the property at '{where}' but its closed content model "
                f"rejects documents of the {self.roles.writer} schema that have it",
            )
        elif not self.covered(w_prop, w_res, covering, r_res, where):
            self.report(
                "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                where,
                f"The {self.roles.reader} schema removes the property at '{where}' and its additional properties "
                f"schema does not accept the values the {self.roles.writer} schema allowed",
            )

    def _rest(self, w_rest: Any, w_res: Resolver, r_rest: Any, r_res: Resolver, path: str, what: str) -> None:
        """additionalProperties / additionalItems: open (absent, true), closed (false) or a schema."""
        if w_rest is False or is_open(r_rest):
            return
        if r_rest is False:
            self.report(
                f"ADDITIONAL_{what}_REMOVED",
                path,
                self._says(f"closes the content model (additional {what.lower()})", path),
            )
        elif is_open(w_rest):
            self.report(
                f"ADDITIONAL_{what}_NARROWED", path, self._says(f"restricts additional {what.lower()}", path)
            )
        else:
            self.compare(w_rest, w_res, r_rest, r_res, path)

    def _unevaluated(
        self, w: dict[str, Any], w_res: Resolver, r: dict[str, Any], r_res: Resolver, path: str, keyword: str
    ) -> None:
        """unevaluatedProperties / unevaluatedItems (2019-09 on), as Confluent's diff compares them.

        The keyword is compared on its own, beside additionalProperties/Items: dropping it or opening it
        (UNEVALUATED_*_ADDED / _EXTENDED) passes; making it false is UNEVALUATED_*_REMOVED; adding it where
        there was none, even as true, or giving a schema where true/{} stood is UNEVALUATED_*_NARROWED.
        """
        w_uneval = unevaluated(w, keyword, self.later(self.writer))
        r_uneval = unevaluated(r, keyword, self.later(self.reader))
        if r_uneval is None or w_uneval is False:
            return
        where, what = f"{path}/{keyword}", "UNEVALUATED_" + _snake(keyword).rsplit("_", 1)[1]
        if r_uneval is False:
            self.report(f"{what}_REMOVED", where, self._says(f"closes {keyword}", path))
        elif w_uneval is None or (is_empty(w_uneval) and not is_empty(r_uneval)):
            self.report(f"{what}_NARROWED", where, self._says(f"restricts {keyword}", path))
        elif not is_empty(r_uneval):
            self.compare(w_uneval, w_res, r_uneval, r_res, where)

    def _dependencies(
        self, w: dict[str, Any], w_res: Resolver, r: dict[str, Any], r_res: Resolver, path: str
    ) -> None:
        w_deps, r_deps = _dependencies_of(w), _dependencies_of(r)
        for name, r_dep in r_deps.items():
            where = f"{path}/dependencies/{name}"
            w_dep = w_deps.get(name)
            if isinstance(r_dep, list):
                if not isinstance(w_dep, list):
                    self.report(
                        "DEPENDENCY_ARRAY_ADDED", where, self._says(f"adds a dependency on '{name}'", path)
                    )
                elif set(r_dep) - set(w_dep):
                    self.report(
                        "DEPENDENCY_ARRAY_EXTENDED",
                        where,
                        self._says(f"extends the dependency of '{name}'", path),
                    )
            elif w_dep is None or isinstance(w_dep, list):
                self.report(
                    "DEPENDENCY_SCHEMA_ADDED",
                    where,
                    self._says(f"adds a dependency schema for '{name}'", path),
                )
            else:
                self.compare(w_dep, w_res, r_dep, r_res, where)

    # ------------------------------------------------------------------------------------------------ arrays
    def _array(
        self, w: dict[str, Any], w_res: Resolver, r: dict[str, Any], r_res: Resolver, path: str
    ) -> None:
        # The schema every item must match and the tuple positions are separate keywords, as in Confluent:
        # an array of integers and a tuple of one integer are not compared with each other.
        w_every, w_items, w_rest = array_shape(w, self.later(self.writer))
        r_every, r_items, r_rest = array_shape(r, self.later(self.reader))
        # What the model says of items past the tuple: additionalItems, or unevaluatedItems where that is
        # absent or true (Confluent's isOpenContentModel / schemaFromPartiallyOpenContentModel for arrays).
        w_left = leftover(w_rest, unevaluated(w, "unevaluatedItems", self.later(self.writer)))
        r_left = leftover(r_rest, unevaluated(r, "unevaluatedItems", self.later(self.reader)))
        if r_every is not None:
            if w_every is None:
                # SCHEMA_ADDED: the writer's items were unconstrained (dropping the schema, SCHEMA_REMOVED, passes).
                self.report("SCHEMA_ADDED", f"{path}/items", self._says("adds a schema for every item", path))
            else:
                self.compare(w_every, w_res, r_every, r_res, f"{path}/items")
        for index in range(max(len(w_items), len(r_items))):
            where = f"{path}/items/{index}"
            if index < len(w_items) and index < len(r_items):
                self.compare(w_items[index], w_res, r_items[index], r_res, where)
            elif index < len(w_items):
                if r_left is False and w_items[index] is not False:  # ..._WITH_FALSE_REMOVED_... passes
                    self.report(
                        "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL",
                        where,
                        self._says("drops a tuple position of a closed array", path),
                    )
                elif not is_open(r_left) and not self.covered(w_items[index], w_res, r_left, r_res, where):
                    self.report(
                        "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                        where,
                        self._says("drops a tuple position", path),
                    )
            elif w_left is not False:
                if is_open(w_left) and not is_empty(r_items[index]):
                    self.report(
                        "ITEM_ADDED_TO_OPEN_CONTENT_MODEL",
                        where,
                        self._says("adds a tuple position to an open array", path),
                    )
                elif not is_open(w_left) and not self.covered(w_left, w_res, r_items[index], r_res, where):
                    self.report(
                        "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                        where,
                        self._says("adds a tuple position", path),
                    )
        self._rest(w_rest, w_res, r_rest, r_res, f"{path}/additionalItems", "ITEMS")
        self._unevaluated(w, w_res, r, r_res, path, "unevaluatedItems")
