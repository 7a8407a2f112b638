"""Assertions the schema format and compatibility tests share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from sluice.registry.formats import InvalidSchemaError, parse_schema


def refusal(schema_type: str, text: str, references: Mapping[str, str] | None = None) -> str:
    """The message of the InvalidSchemaError parse_schema must raise."""
    with pytest.raises(InvalidSchemaError) as caught:
        parse_schema(schema_type, text, references or {})
    return str(caught.value)


def error_types(messages: list[str]) -> list[str]:
    """{errorType:'X', ...} messages -> their X."""
    return [message.split("'")[1] for message in messages]


def assert_both_directions(
    errors: Callable[[str, Any, Any], list[str]], old: Any, new: Any, backward: list[str], forward: list[str]
) -> None:
    """errors(level, new, old) gives the error types; FULL is both directions and NONE accepts anything."""
    assert errors("BACKWARD", new, old) == backward
    assert errors("FORWARD", new, old) == forward
    assert errors("FULL", new, old) == backward + forward
    assert errors("NONE", new, old) == []
