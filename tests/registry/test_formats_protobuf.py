"""Protobuf parsing: compiled by the bundled protoc into a private pool; normalized text; message classes."""

from __future__ import annotations

import pytest
from format_helpers import refusal
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.registry.formats import (
    InvalidSchemaError,
    message_descriptor,
    parse_schema,
    protobuf_message_class,
)

ORDER = """
syntax = "proto3";
package shop.v1;

import "google/protobuf/timestamp.proto";
import "common/money.proto";

// An order as the shop writes it.
message Order {
  string id = 1;
  repeated Line lines = 2;
  google.protobuf.Timestamp placed = 3;
  map<string, string> labels = 4;
  oneof payment {
    string card = 5;
    string voucher = 6;
  }
  optional common.Money total = 7;
  Status status = 8;
  reserved 9, 20 to 30;
  reserved "legacy";

  message Line {
    string sku = 1;
    int32 quantity = 2 [deprecated = true];
  }
  enum Status {
    STATUS_UNSPECIFIED = 0;
    STATUS_PAID = 1;
  }
}

message Refund { string order_id = 1; }

service Orders { rpc Place (Order) returns (stream Refund); }
"""
MONEY = 'syntax = "proto3"; package common; message Money { int64 units = 1; string currency = 2; }'
REFS = {"common/money.proto": MONEY}


@pytest.fixture(scope="module")
def order():
    return parse_schema("PROTOBUF", ORDER, REFS)


def test_message_classes_encode_and_decode_by_message_index(order) -> None:
    order_class = protobuf_message_class(order)
    message = order_class(id="o-1", card="visa", labels={"a": "b"})
    message.total.units = 5
    message.lines.add(sku="x", quantity=2)
    decoded = order_class.FromString(message.SerializeToString())
    assert decoded.id == "o-1" and decoded.WhichOneof("payment") == "card" and decoded.total.units == 5
    assert protobuf_message_class(order, [1])().DESCRIPTOR.full_name == "shop.v1.Refund"
    assert message_descriptor(order, []).full_name == "shop.v1.Order"
    nested = [d.name for d in message_descriptor(order, [0]).nested_types]
    assert message_descriptor(order, [0, nested.index("Line")]).full_name == "shop.v1.Order.Line"
    with pytest.raises(InvalidSchemaError, match="no message at index"):
        message_descriptor(order, [5])


def test_private_pools_keep_two_versions_of_the_same_names_apart(order) -> None:
    other = parse_schema("PROTOBUF", ORDER.replace("string id = 1;", "int64 id = 1;"), REFS)
    assert protobuf_message_class(order)().DESCRIPTOR.fields_by_name["id"].type != (
        protobuf_message_class(other)().DESCRIPTOR.fields_by_name["id"].type
    )


def test_normalized_text_compiles_to_the_same_descriptor(order) -> None:
    normalized = parse_schema("PROTOBUF", ORDER, REFS, normalize=True)
    assert "// An order" not in normalized.text and ".shop.v1.Order.Line lines = 2;" in normalized.text
    again = parse_schema("PROTOBUF", normalized.text, REFS, normalize=True)
    # Confluent compares normalized texts when normalizing and canonical texts otherwise, so the two
    # modes' fingerprints differ; the descriptors must not.
    assert again.fingerprint == normalized.fingerprint
    assert _descriptor(again) == _descriptor(order) == _descriptor(normalized)
    assert again.text == normalized.text


def _descriptor(parsed) -> bytes:
    """The compiled file, the order of imports, fields and oneofs aside (normalizing sorts them)."""
    proto = type(parsed.model.file)()
    proto.CopyFrom(parsed.model.file)
    assert not proto.public_dependency and not proto.weak_dependency
    deps = sorted(proto.dependency)
    del proto.dependency[:]
    proto.dependency.extend(deps)
    messages = list(proto.message_type)
    while messages:
        message = messages.pop()
        names = [oneof.name for oneof in message.oneof_decl]
        order = sorted(range(len(names)), key=names.__getitem__)
        fields = sorted(message.field, key=lambda field: field.number)
        for field in fields:
            if field.HasField("oneof_index"):
                field.oneof_index = order.index(field.oneof_index)
        oneofs = [message.oneof_decl[index] for index in order]
        # Map entries and group types stand where their field does, which normalizing moves.
        groups = {field.type_name.rpartition(".")[2] for field in fields if field.type == field.TYPE_GROUP}
        synthetic = [n for n in message.nested_type if n.options.map_entry or n.name in groups]
        nested = [n for n in message.nested_type if n not in synthetic]
        nested += sorted(synthetic, key=lambda n: n.name)
        for name, items in (("field", fields), ("oneof_decl", oneofs), ("nested_type", nested)):
            copies = [type(item)() for item in items]
            for copy, item in zip(copies, items, strict=True):
                copy.CopyFrom(item)
            message.ClearField(name)
            getattr(message, name).extend(copies)
        messages.extend(message.nested_type)
    return proto.SerializeToString(deterministic=True)


def test_layout_and_comments_do_not_change_the_fingerprint(order) -> None:
    squeezed = " ".join(line.split("//")[0] for line in ORDER.splitlines())
    assert parse_schema("PROTOBUF", squeezed, REFS).fingerprint == order.fingerprint
    renamed = ORDER.replace("string sku = 1;", "string stock_unit = 1;")
    assert parse_schema("PROTOBUF", renamed, REFS).fingerprint != order.fingerprint


PROTO2 = r"""
syntax = "proto2";
package legacy;
message Event {
  required int64 id = 1 [default = 7];
  optional string note = 2 [default = "say \"hi\""];
  optional bytes blob = 3 [default = "\001\002"];
  optional group Extra = 4 { optional int32 level = 5; }
  extensions 100 to max;
}
extend Event { optional int32 priority = 100; }
enum Kind { KIND_A = 1; reserved 5 to 7; }
"""


def test_proto2_features_survive_normalization() -> None:
    parsed = parse_schema("PROTOBUF", PROTO2, normalize=True)
    assert "required int64 id = 1 [default = 7];" in parsed.text
    assert "optional group Extra = 4 {" in parsed.text and "extensions 100 to max;" in parsed.text
    assert parse_schema("PROTOBUF", parsed.text).fingerprint == parsed.fingerprint
    event = protobuf_message_class(parsed)()
    assert event.id == 7 and event.note == 'say "hi"' and event.blob == b"\x01\x02"


def test_a_reference_replaces_a_well_known_import_of_the_same_name() -> None:
    fake = 'syntax = "proto3"; package google.protobuf; message Timestamp { string text = 1; }'
    parsed = parse_schema(
        "PROTOBUF",
        'syntax = "proto3"; import "google/protobuf/timestamp.proto"; message A { google.protobuf.Timestamp t = 1; }',
        {"google/protobuf/timestamp.proto": fake},
    )
    assert "text" in protobuf_message_class(parsed)().t.DESCRIPTOR.fields_by_name


def test_custom_options_are_kept_when_normalizing() -> None:
    text = (
        'syntax = "proto3"; import "google/protobuf/descriptor.proto";\n'
        "extend google.protobuf.FieldOptions { int32 tag = 50000; }\n"
        "message A { int32 a = 1 [(tag) = 3]; }\n"
    )
    # ProtobufSchemaUtils.toNormalizedString: types before extends, the extendee resolved to a full name.
    assert parse_schema("PROTOBUF", text, normalize=True).text == (
        'syntax = "proto3";\n\nimport "google/protobuf/descriptor.proto";\n\n'
        "message A {\n  int32 a = 1 [(tag) = 3];\n}\n\n"
        "extend .google.protobuf.FieldOptions {\n  int32 tag = 50000;\n}\n"
    )
    other = text.replace("(tag) = 3", "(tag) = 4")
    assert parse_schema("PROTOBUF", other).fingerprint != parse_schema("PROTOBUF", text).fingerprint


BAD = [
    ("garbage", "this is not a proto", "line 1"),
    ("unknown type", 'syntax = "proto3"; message A { Strin x = 1; }', '"Strin" is not defined'),
    ("duplicate number", 'syntax = "proto3"; message A { int32 x = 1; int32 y = 1; }', "already been used"),
    ("reserved reused", 'syntax = "proto3"; message A { reserved 2; int32 x = 2; }', "reserved"),
    ("proto3 required", 'syntax = "proto3"; message A { required int32 x = 1; }', "line 1"),
    ("missing import", 'syntax = "proto3"; import "nope.proto"; message A {}', "the import 'nope.proto'"),
    ("absolute import", 'syntax = "proto3"; import "/etc/hostname"; message A {}', "not found"),
    ("escaping import", 'syntax = "proto3"; import "../../etc/hostname"; message A {}', "not allowed"),
    ("redefined", 'syntax = "proto3"; message A {} message A {}', "already defined"),
    ("bad syntax", 'syntax = "proto4"; message A {}', "proto4"),
    ("huge", "// " + "x" * 1_100_000, "limit"),
]


@pytest.mark.parametrize(("text", "needle"), [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_schemas_raise_invalid_schema_error_with_a_clear_message(text: str, needle: str) -> None:
    assert needle in refusal("PROTOBUF", text)


@pytest.mark.parametrize(
    ("refs", "needle"),
    [
        ({"../etc/passwd": MONEY}, "import path"),
        ({"/abs.proto": MONEY}, "import path"),
        ({"common/money.proto": "broken {"}, "referenced schema 'common/money.proto'"),
        ({"common/money.proto": 'syntax = "proto3"; package shop.v1; message Order {}'}, "Order"),
    ],
)
def test_bad_references_are_invalid(refs: dict[str, str], needle: str) -> None:
    assert needle in refusal("PROTOBUF", ORDER, refs)


def test_deeply_nested_messages_are_an_error_or_fine_never_a_crash() -> None:
    text = 'syntax = "proto3"; ' + "message M { " * 300 + "}" * 300
    try:
        parse_schema("PROTOBUF", text)
    except InvalidSchemaError as error:
        assert "schema" in str(error)


def test_a_base64_serialized_descriptor_is_accepted_as_confluent_kafka_registers_it(order) -> None:
    import base64

    # confluent-kafka's ProtobufSerializer registers base64(FileDescriptor.serialized_pb), references too.
    def b64(parsed) -> str:
        return base64.standard_b64encode(parsed.raw.serialized_pb).decode("ascii")

    refs = {"common/money.proto": b64(parse_schema("PROTOBUF", MONEY))}
    from_descriptor = parse_schema("PROTOBUF", b64(order), refs)
    # Confluent prints a descriptor's type names fully qualified, so only the normalized forms are equal.
    assert _descriptor(from_descriptor) == _descriptor(order)
    normalized = parse_schema("PROTOBUF", ORDER, REFS, normalize=True)
    assert parse_schema("PROTOBUF", b64(order), refs, normalize=True).fingerprint == normalized.fingerprint
    assert from_descriptor.text.startswith('syntax = "proto3";') and "message Order {" in from_descriptor.text
    assert protobuf_message_class(from_descriptor)(id="x").id == "x"
    with pytest.raises(InvalidSchemaError):
        parse_schema("PROTOBUF", "bm90IGEgZGVzY3JpcHRvcg==")  # base64 of text that is no descriptor


# ------------------------------------------------------------------- printed text compiles to the same file
@st.composite
def proto_files(draw: st.DrawFn) -> str:
    syntax = draw(st.sampled_from(["proto2", "proto3"]))
    names = iter(f"T{i}" for i in range(1000))

    def message(depth: int) -> str:
        name = next(names)
        parts, number = [], iter(range(1, 100))
        for _ in range(draw(st.integers(0, 4))):
            kind = draw(
                st.sampled_from(
                    [
                        "int32",
                        "string",
                        "bytes",
                        "double",
                        "sint64",
                        "map",
                        "enum",
                        "nested",
                        "oneof",
                        "group",
                    ]
                )
            )
            label = draw(
                st.sampled_from(["optional ", "repeated ", "" if syntax == "proto3" else "required "])
            )
            if kind == "map":
                parts.append(f"map<string, int64> m{next(number)} = {next(number)};")
            elif kind == "enum":
                enum = next(names)
                parts.append(
                    f"enum {enum} {{ {enum}_ZERO = 0; {enum}_ONE = 1; }} {label}{enum} e{next(number)} = {next(number)};"
                )
            elif kind == "nested" and depth < 2:
                inner, body = message(depth + 1)
                parts.append(f"{body} {label}{inner} n{next(number)} = {next(number)};")
            elif kind == "group" and syntax == "proto2":
                group = next(names)
                parts.append(
                    f"optional group {group} = {next(number)} {{ optional int32 g{next(number)} = {next(number)}; }}"
                )
            elif kind == "oneof":
                parts.append(
                    f"oneof o{next(number)} {{ string a{next(number)} = {next(number)}; int32 b{next(number)} = {next(number)}; }}"
                )
            else:
                scalar = kind if kind not in ("nested", "group") else "int32"
                parts.append(f"{label}{scalar} f{next(number)} = {next(number)};")
        if draw(st.booleans()):
            parts.append('reserved 200 to 210; reserved "gone";')
        return name, f"message {name} {{ {' '.join(parts)} }}"

    bodies = [message(0)[1] for _ in range(draw(st.integers(1, 3)))]
    package = draw(st.sampled_from(["", "package a.b;"]))
    return f'syntax = "{syntax}"; {package} ' + " ".join(bodies)


@settings(max_examples=40, deadline=None)
@given(text=proto_files())
def test_the_printed_text_compiles_to_the_same_descriptor(text: str) -> None:
    parsed = parse_schema("PROTOBUF", text, normalize=True)
    again = parse_schema("PROTOBUF", parsed.text, normalize=True)
    assert again.fingerprint == parsed.fingerprint
    assert _descriptor(again) == _descriptor(parsed) == _descriptor(parse_schema("PROTOBUF", text))
    assert again.text == parsed.text


RULES = """syntax = "proto3";
package p;
import "google/protobuf/descriptor.proto";
message Rule { int32 min = 1; int32 max = 2; repeated string tags = 3; }
extend google.protobuf.MessageOptions { Rule rule = 50001; }
message A {
  option (rule).max = 5;
  option (rule) = { tags: "b" min: 1 };
  option (rule).tags = "a";
  option (undeclared.thing) = 7;
}
"""


def test_custom_options_are_kept_as_written_and_merged_when_normalizing() -> None:
    # Confluent never resolves custom options when it builds descriptors, so one defined nowhere is fine.
    plain = parse_schema("PROTOBUF", RULES).text
    assert (
        'message A {\n  option (rule).max = 5;\n  option (rule) = {\n    tags: "b",\n    min: 1\n  };\n'
        '  option (rule).tags = "a";\n  option (undeclared.thing) = 7;\n}\n'
    ) in plain
    # ProtobufSchemaUtils.FormatContext.filterOptions: names resolved, sorted, the assignments of a
    # non-repeated option merged into one aggregate (a repeated field gathers its values), keys sorted.
    normalized = parse_schema("PROTOBUF", RULES, normalize=True).text
    assert normalized.endswith(
        "message A {\n  option (p.rule) = {\n    max: 5,\n    min: 1,\n    tags: [\n"
        '      "b",\n      "a"\n    ]\n  };\n  option (undeclared.thing) = 7;\n}\n\n'
        "extend .google.protobuf.MessageOptions {\n  .p.Rule rule = 50001;\n}\n"
    )
    assert parse_schema("PROTOBUF", normalized, normalize=True).text == normalized


def test_an_editions_file_keeps_its_reserved_names_unquoted() -> None:
    # Wire predates editions; sluice prints them in the same layout, in a form protoc reads back.
    text = 'edition = "2023";\nmessage M { int32 a = 1; reserved foo, bar; reserved 5; }\n'
    for normalize in (False, True):
        printed = parse_schema("PROTOBUF", text, normalize=normalize).text
        assert "reserved foo" in printed or "reserved bar" in printed
        assert parse_schema("PROTOBUF", printed, normalize=normalize).text == printed
