"""Compatibility levels: which earlier versions a new schema is checked against, and in which direction.

BACKWARD: the new schema reads data written with the old one. FORWARD: the old schema reads data written with
the new one. FULL: both. The *_TRANSITIVE levels check every live version, the others only the newest.
The format rules themselves live beside each format (formats/*_compatibility.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .formats import avro_compatibility, json_compatibility, protobuf_compatibility
from .formats.parsed import Problem, Roles, Schema

LEVELS = (
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
    "NONE",
)

_CHECKERS: dict[str, Callable[[Any, Any, Roles], list[Problem]]] = {
    "AVRO": avro_compatibility.problems,
    "JSON": json_compatibility.problems,
    "PROTOBUF": protobuf_compatibility.problems,
}
_NEW_READS_OLD = Roles(reader="new", writer="old")
_OLD_READS_NEW = Roles(reader="old", writer="new")


def check_compatibility(level: str, new: Schema, existing: Sequence[Schema]) -> list[str]:
    """One message per problem ([] when compatible). existing: the subject's live versions, oldest first."""
    level = level.upper()
    if level not in LEVELS:
        raise ValueError(f"unknown compatibility level {level!r}; valid levels are {', '.join(LEVELS)}")
    if level == "NONE" or not existing:
        return []
    olds = list(existing) if level.endswith("_TRANSITIVE") else [existing[-1]]
    base = level.removesuffix("_TRANSITIVE")
    messages: list[str] = []
    for old in reversed(olds):
        for message in _check_pair(base, new, old):
            if message not in messages:
                messages.append(message)
    return messages


def _check_pair(base: str, new: Schema, old: Schema) -> list[str]:
    if new.schema_type != old.schema_type:
        return [
            f"{{errorType:'SCHEMA_TYPE_MISMATCH', description:'The new schema is {new.schema_type} and the "
            f"old one {old.schema_type}; schemas of different types are never compatible', additionalInfo:'/'}}"
        ]
    checker = _CHECKERS[new.schema_type]
    found: list[Problem] = []
    try:
        if base in ("BACKWARD", "FULL"):
            found.extend(checker(new.model, old.model, _NEW_READS_OLD))
        if base in ("FORWARD", "FULL"):
            found.extend(checker(old.model, new.model, _OLD_READS_NEW))
    except RecursionError:
        return [
            "{errorType:'SCHEMA_TOO_DEEP', description:'The schemas are nested too deeply to compare', "
            "additionalInfo:'/'}"
        ]
    return [problem.message() for problem in found]
