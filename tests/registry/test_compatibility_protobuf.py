"""Protobuf compatibility: one row per wire rule, and the protobuf runtime as the referee."""

from __future__ import annotations

from typing import Any

import pytest
from format_helpers import assert_both_directions, error_types
from google.protobuf import unknown_fields
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.registry.compatibility import check_compatibility
from sluice.registry.formats import parse_schema, protobuf_message_class


def proto(body: str, *, package: str = "p", syntax: str = "proto3") -> str:
    return f'syntax = "{syntax}"; package {package}; {body}'


def errors(level: str, new: str, *olds: str) -> list[str]:
    parsed = [parse_schema("PROTOBUF", text) for text in (*olds, new)]
    return error_types(check_compatibility(level, parsed[-1], parsed[:-1]))


A = proto("message A { int32 x = 1; string s = 2; }")

# (id, old, new, BACKWARD error types (new reads old data), FORWARD error types (old reads new data))
RULES = [
    ("same", A, A, [], []),
    ("field-added", A, proto("message A { int32 x = 1; string s = 2; bool b = 3; }"), [], []),
    ("field-removed", A, proto("message A { int32 x = 1; reserved 2; }"), [], []),
    ("field-renamed", A, proto("message A { int32 y = 1; string s = 2; }"), [], []),
    ("int32-to-int64", A, proto("message A { int64 x = 1; string s = 2; }"), [], []),
    ("int32-to-bool", A, proto("message A { bool x = 1; string s = 2; }"), [], []),
    (
        "int32-to-sint32",
        A,
        proto("message A { sint32 x = 1; string s = 2; }"),
        ["FIELD_SCALAR_KIND_CHANGED"],
        ["FIELD_SCALAR_KIND_CHANGED"],
    ),
    ("sint32-to-sint64", proto("message A { sint32 x = 1; }"), proto("message A { sint64 x = 1; }"), [], []),
    (
        "fixed32-to-sfixed32",
        proto("message A { fixed32 x = 1; }"),
        proto("message A { sfixed32 x = 1; }"),
        [],
        [],
    ),
    (
        "fixed32-to-fixed64",
        proto("message A { fixed32 x = 1; }"),
        proto("message A { fixed64 x = 1; }"),
        ["FIELD_SCALAR_KIND_CHANGED"],
        ["FIELD_SCALAR_KIND_CHANGED"],
    ),
    (
        "float-to-double",
        proto("message A { float x = 1; }"),
        proto("message A { double x = 1; }"),
        ["FIELD_SCALAR_KIND_CHANGED"],
        ["FIELD_SCALAR_KIND_CHANGED"],
    ),
    (
        "string-to-bytes",
        A,
        proto("message A { int32 x = 1; bytes s = 2; }"),
        [],
        ["FIELD_SCALAR_KIND_CHANGED"],
    ),
    (
        "scalar-to-message",
        A,
        proto("message A { int32 x = 1; B s = 2; } message B {}"),
        ["FIELD_KIND_CHANGED"],
        ["FIELD_KIND_CHANGED", "MESSAGE_REMOVED"],
    ),
    # An enum is a varint: Confluent's ScalarKind puts it with int32 & co (GENERAL_NUMBER), whatever enum it is.
    ("int32-to-enum", A, proto("message A { E x = 1; string s = 2; } enum E { Z = 0; }"), [], []),
    (
        "enum-type-changed",
        proto("message A { E e = 1; } enum E { Z = 0; } enum F { Y = 0; }"),
        proto("message A { F e = 1; } enum E { Z = 0; } enum F { Y = 0; }"),
        [],
        [],
    ),
    (
        "string-to-enum",
        A,
        proto("message A { int32 x = 1; E s = 2; } enum E { Z = 0; }"),
        ["FIELD_SCALAR_KIND_CHANGED"],
        ["FIELD_SCALAR_KIND_CHANGED"],
    ),
    (
        "sint32-to-enum",
        proto("message A { sint32 x = 1; }"),
        proto("message A { E x = 1; } enum E { Z = 0; }"),
        ["FIELD_SCALAR_KIND_CHANGED"],
        ["FIELD_SCALAR_KIND_CHANGED"],
    ),
    (
        "message-type-changed",
        proto("message A { B b = 1; } message B {} message C {}"),
        proto("message A { C b = 1; } message B {} message C {}"),
        ["FIELD_NAMED_TYPE_CHANGED"],
        ["FIELD_NAMED_TYPE_CHANGED"],
    ),
    ("message-removed", proto("message A {} message B {}"), proto("message A {}"), ["MESSAGE_REMOVED"], []),
    (
        "nested-message-removed",
        proto("message A { message N {} }"),
        proto("message A {}"),
        ["MESSAGE_REMOVED"],
        [],
    ),
    (
        "package-changed",
        A,
        proto("message A { int32 x = 1; string s = 2; }", package="q"),
        ["PACKAGE_CHANGED"],
        ["PACKAGE_CHANGED"],
    ),
    (
        "numeric-made-repeated",
        A,
        proto("message A { repeated int32 x = 1; string s = 2; }"),
        ["FIELD_NUMERIC_LABEL_CHANGED"],
        ["FIELD_NUMERIC_LABEL_CHANGED"],
    ),
    ("string-made-repeated", A, proto("message A { int32 x = 1; repeated string s = 2; }"), [], []),
    ("proto3-optional-added", A, proto("message A { optional int32 x = 1; string s = 2; }"), [], []),
    (
        "enum-value-added",
        proto("message A { E e = 1; } enum E { Z = 0; }"),
        proto("message A { E e = 1; } enum E { Z = 0; O = 1; }"),
        [],
        [],
    ),
    (
        "enum-value-removed",
        proto("message A { E e = 1; } enum E { Z = 0; O = 1; }"),
        proto("message A { E e = 1; } enum E { Z = 0; reserved 1; }"),
        [],
        [],
    ),
    (
        "oneof-member-removed",
        proto("message A { oneof o { int32 x = 1; string s = 2; } }"),
        proto("message A { oneof o { int32 x = 1; } }"),
        ["ONEOF_FIELD_REMOVED"],
        [],
    ),
    (
        "field-into-existing-oneof",
        proto("message A { int32 x = 1; oneof o { string s = 2; } }"),
        proto("message A { oneof o { int32 x = 1; string s = 2; } }"),
        ["FIELD_MOVED_TO_EXISTING_ONEOF"],
        [],
    ),
    ("one-field-into-new-oneof", A, proto("message A { oneof o { int32 x = 1; } string s = 2; }"), [], []),
    (
        "fields-into-new-oneof",
        A,
        proto("message A { oneof o { int32 x = 1; string s = 2; } }"),
        ["MULTIPLE_FIELDS_MOVED_TO_ONEOF"],
        [],
    ),
    (
        "map-value-type",
        proto("message A { map<string, int32> m = 1; }"),
        proto("message A { map<string, string> m = 1; }"),
        ["FIELD_SCALAR_KIND_CHANGED"],
        ["FIELD_SCALAR_KIND_CHANGED"],
    ),
    (
        "proto2-required-added",
        proto("message A { optional int32 x = 1; }", syntax="proto2"),
        proto("message A { optional int32 x = 1; required int32 y = 2; }", syntax="proto2"),
        ["REQUIRED_FIELD_ADDED"],
        [],
    ),
    (
        "proto2-optional-made-required",
        proto("message A { optional int32 x = 1; }", syntax="proto2"),
        proto("message A { required int32 x = 1; }", syntax="proto2"),
        ["REQUIRED_FIELD_ADDED"],
        [],
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "backward", "forward"), [r[1:] for r in RULES], ids=[r[0] for r in RULES]
)
def test_each_rule_in_both_directions(old: str, new: str, backward: list[str], forward: list[str]) -> None:
    assert_both_directions(errors, old, new, backward, forward)


def test_message_names_the_field_path() -> None:
    [message] = check_compatibility(
        "BACKWARD",
        parse_schema("PROTOBUF", proto("message A { message N { sint32 v = 1; } }")),
        [parse_schema("PROTOBUF", proto("message A { message N { int32 v = 1; } }"))],
    )
    assert "#/p.A.N/v" in message and "new schema" in message


def test_a_message_type_from_a_referenced_file_is_compared_field_by_field() -> None:
    """Confluent's FieldSchemaDiff compares a message type a reference defines, not only its name: a field
    there turning string -> int32 breaks, int32 -> int64 does not."""

    def parsed(dependency: str) -> Any:
        main = 'syntax = "proto3"; package a1; import "dep.proto"; message M { a1.dep.D d = 1; int32 x = 2; }'
        return parse_schema("PROTOBUF", main, {"dep.proto": dependency})

    dep = 'syntax = "proto3"; package a1.dep; message D { string s = 1; int32 n = 2; }'
    string_to_int = parsed(dep.replace("string s", "int32 s"))
    widened = parsed(dep.replace("int32 n", "int64 n"))
    broken = check_compatibility("BACKWARD", string_to_int, [parsed(dep)])
    assert error_types(broken) == ["FIELD_SCALAR_KIND_CHANGED", "FIELD_NAMED_TYPE_CHANGED"]
    assert "#/a1.dep.D/s" in broken[0]
    assert check_compatibility("BACKWARD", widened, [parsed(dep)]) == []
    assert check_compatibility("FULL", parsed(dep), [parsed(dep)]) == []


def test_transitive_levels_see_a_field_number_reused_with_another_type() -> None:
    v1 = proto("message A { int32 x = 1; string old = 2; }")
    v2 = proto("message A { int32 x = 1; reserved 2; }")
    v3 = proto("message A { int32 x = 1; double old = 2; }")
    assert errors("BACKWARD", v3, v1, v2) == []
    assert errors("BACKWARD_TRANSITIVE", v3, v1, v2) == ["FIELD_SCALAR_KIND_CHANGED"]
    assert errors("FULL_TRANSITIVE", v3, v1, v2) == ["FIELD_SCALAR_KIND_CHANGED", "FIELD_SCALAR_KIND_CHANGED"]


# ---------------------------------------------------------------------------- the protobuf runtime as referee
SCALARS = [
    "int32",
    "int64",
    "uint32",
    "bool",
    "sint32",
    "sint64",
    "fixed32",
    "sfixed32",
    "fixed64",
    "double",
    "float",
    "string",
    "bytes",
]
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "int32": st.integers(0, 2**31 - 1),
    "int64": st.integers(0, 2**31 - 1),
    "uint32": st.integers(0, 2**31 - 1),
    "bool": st.booleans(),
    "sint32": st.integers(-(2**31), 2**31 - 1),
    "sint64": st.integers(-(2**31), 2**31 - 1),
    "fixed32": st.integers(0, 2**31 - 1),
    "sfixed32": st.integers(0, 2**31 - 1),
    "fixed64": st.integers(0, 2**63 - 1),
    "double": st.floats(allow_nan=False),
    "float": st.floats(width=32, allow_nan=False),
    "string": st.text(max_size=4),
    "bytes": st.binary(max_size=4),
}
FIELDS = st.dictionaries(
    st.integers(1, 4), st.tuples(st.sampled_from(SCALARS), st.booleans()), min_size=1, max_size=4
)


def message_text(fields: dict[int, tuple[str, bool]]) -> str:
    body = " ".join(
        f"{'repeated ' if rep else ''}{kind} f{n} = {n};" for n, (kind, rep) in sorted(fields.items())
    )
    return proto(f"message M {{ {body} }}")


@settings(max_examples=100, deadline=None)
@given(old=FIELDS, new=FIELDS, data=st.data())
def test_whenever_backward_holds_the_new_schema_parses_old_bytes(
    old: dict[int, tuple[str, bool]], new: dict[int, tuple[str, bool]], data: st.DataObject
) -> None:
    writer, reader = parse_schema("PROTOBUF", message_text(old)), parse_schema("PROTOBUF", message_text(new))
    message = protobuf_message_class(writer)()
    for number, (kind, repeated) in old.items():
        value = data.draw(VALUES[kind])
        if repeated:
            getattr(message, f"f{number}").append(value)
        else:
            setattr(message, f"f{number}", value)
    payload = message.SerializeToString()
    if check_compatibility("BACKWARD", reader, [writer]):
        return
    try:
        decoded = protobuf_message_class(reader).FromString(payload)
    except DecodeError as error:  # pragma: no cover - the property is that this never happens
        pytest.fail(f"compatible per the check, but the reader cannot parse the writer's bytes: {error}")
    # A field the reader knows but whose wire type it cannot take lands among the unknown fields.
    unknown = {field.field_number for field in unknown_fields.UnknownFieldSet(decoded)}
    assert unknown <= set(old) - set(new)
    for number, (kind, repeated) in old.items():
        if new.get(number) == (kind, repeated):
            assert getattr(decoded, f"f{number}") == getattr(message, f"f{number}")
