"""Protobuf schema text as Confluent's registry returns it, over HTTP from a `sluice registry` on the
session broker.

The expected texts are written out by hand from Confluent's protobuf-provider: a plain registration stores
ProtobufSchema.canonicalString() (ProtobufSchemaUtils.toString over Wire's parse of the text), and
?normalize=true stores ProtobufSchema.normalize().canonicalString() (ProtobufSchemaUtils.toNormalizedString).
"""

from __future__ import annotations

import pytest

from sluice.testing import RegistryProcess

# Defines the custom options the shop schema uses; Confluent does not need it imported for them to stay.
OPTIONS = """syntax = "proto3";
package shop.v1;
import "google/protobuf/descriptor.proto";
extend google.protobuf.FileOptions { string file_tag = 50001; }
extend google.protobuf.MessageOptions { int32 msg_level = 50002; }
extend google.protobuf.FieldOptions { bool pii = 50003; }
"""

SHOP = """syntax = "proto3";
// The shop's orders.
package shop.v1;

import "shop/options.proto";
import "google/protobuf/timestamp.proto";

option (shop.v1.file_tag) = "orders";
option java_package = "com.shop";

/* An order, as the
   shop writes it. */
message Order {
  option (msg_level) = 2;
  reserved "legacy";
  reserved 20 to 30, 9;
  string id = 1 [(pii) = true, deprecated = true];  // trailing comment
  map<string,Line> lines = 2;
  oneof payment {
    option (not.defined.anywhere) = true;
    string voucher = 6;
    string card = 5;
  }
  Status status = 4;
  google.protobuf.Timestamp placed = 3;
  message Line { string sku = 1; int32 quantity = 2; }
  enum Status { option allow_alias = true; STATUS_UNSPECIFIED = 0; SETTLED = 1; PAID = 1; }
}
enum Region { REGION_UNSPECIFIED = 0; }
message Refund { string order_id = 1; }
service Orders { rpc Place (Order) returns (stream Refund); }
"""

# ProtobufSchemaUtils.toString: every block opens with a newline (an empty line between blocks; inside a
# nested block that line is indented too, written \x20\x20 here), messages before enums, fields before
# oneofs, options and names as written, one option per line in a bracket of more than one; comments are
# not kept.
SHOP_CANONICAL = """syntax = "proto3";
package shop.v1;

import "shop/options.proto";
import "google/protobuf/timestamp.proto";

option (shop.v1.file_tag) = "orders";
option java_package = "com.shop";

message Order {
  reserved "legacy";
  reserved 20 to 30, 9;

  option (msg_level) = 2;

  string id = 1 [
    (pii) = true,
    deprecated = true
  ];
  map<string, Line> lines = 2;
  Status status = 4;
  google.protobuf.Timestamp placed = 3;

  oneof payment {
    option (not.defined.anywhere) = true;
\x20\x20
    string voucher = 6;
    string card = 5;
  }

  message Line {
    string sku = 1;
    int32 quantity = 2;
  }
  enum Status {
    option allow_alias = true;
    STATUS_UNSPECIFIED = 0;
    SETTLED = 1;
    PAID = 1;
  }
}
message Refund {
  string order_id = 1;
}
enum Region {
  REGION_UNSPECIFIED = 0;
}

service Orders {
  rpc Place (Order) returns (stream Refund);
}
"""

# ProtobufSchemaUtils.toNormalizedString: imports sorted, options sorted by (resolved) name, custom option
# names resolved to full names when they can be, types as ".full.Name", fields, oneof members and enum
# constants by number, reserved ranges one per statement by start.
SHOP_NORMALIZED = """syntax = "proto3";
package shop.v1;

import "google/protobuf/timestamp.proto";
import "shop/options.proto";

option java_package = "com.shop";
option (shop.v1.file_tag) = "orders";

message Order {
  reserved 9;
  reserved 20 to 30;
  reserved "legacy";

  option (shop.v1.msg_level) = 2;

  string id = 1 [
    deprecated = true,
    (shop.v1.pii) = true
  ];
  map<string, .shop.v1.Order.Line> lines = 2;
  .google.protobuf.Timestamp placed = 3;
  .shop.v1.Order.Status status = 4;

  oneof payment {
    option (not.defined.anywhere) = true;
\x20\x20
    string card = 5;
    string voucher = 6;
  }

  message Line {
    string sku = 1;
    int32 quantity = 2;
  }
  enum Status {
    option allow_alias = true;
    STATUS_UNSPECIFIED = 0;
    PAID = 1;
    SETTLED = 1;
  }
}
message Refund {
  string order_id = 1;
}
enum Region {
  REGION_UNSPECIFIED = 0;
}

service Orders {
  rpc Place (.shop.v1.Order) returns (stream .shop.v1.Refund);
}
"""

LEGACY = """syntax = "proto2";
package legacy;
import "google/protobuf/descriptor.proto";
extend google.protobuf.FieldOptions { optional Rule rule = 50001; }
message Rule { optional int32 min = 1; optional int32 max = 2; }
message Event {
  required int64 id = 1 [default = 0x10];
  optional double ratio = 2 [json_name = "r", default = 1.23456];
  optional string note = 3 [(rule) = { max: 5 min: 1 }];
  extensions 100 to max;
}
extend Event { optional int32 priority = 100; }
"""

# default and json_name come after the other options (Wire keeps them apart); an aggregate value is one
# "key: value" per line; extends come after the types.
LEGACY_CANONICAL = """syntax = "proto2";
package legacy;

import "google/protobuf/descriptor.proto";

message Rule {
  optional int32 min = 1;
  optional int32 max = 2;
}
message Event {
  required int64 id = 1 [default = 0x10];
  optional double ratio = 2 [
    default = 1.23456,
    json_name = "r"
  ];
  optional string note = 3 [(rule) = {
    max: 5,
    min: 1
  }];

  extensions 100 to max;
}

extend google.protobuf.FieldOptions {
  optional Rule rule = 50001;
}
extend Event {
  optional int32 priority = 100;
}
"""

# Normalizing drops the proto2 syntax line, and writes numbers as java.text.DecimalFormat does (hex in
# decimal, at most three fraction digits: Confluent's normal form rounds the double default).
LEGACY_NORMALIZED = """package legacy;

import "google/protobuf/descriptor.proto";

message Rule {
  optional int32 min = 1;
  optional int32 max = 2;
}
message Event {
  required int64 id = 1 [default = 16];
  optional double ratio = 2 [
    default = 1.235,
    json_name = "r"
  ];
  optional string note = 3 [(legacy.rule) = {
    max: 5,
    min: 1
  }];

  extensions 100 to max;
}

extend .google.protobuf.FieldOptions {
  optional .legacy.Rule rule = 50001;
}
extend .legacy.Event {
  optional int32 priority = 100;
}
"""


@pytest.fixture
def subject(topic_name: str) -> str:
    return f"{topic_name}-value"


def register(
    registry: RegistryProcess, subject: str, text: str, *, normalize: bool = False, refs: list | None = None
) -> int:
    body = {"schemaType": "PROTOBUF", "schema": text, "references": refs or []}
    query = "?normalize=true" if normalize else ""
    status, answer = registry.call("POST", f"/subjects/{subject}/versions{query}", body)
    assert status == 200, answer
    return answer["id"]


def text_of(registry: RegistryProcess, schema_id: int) -> str:
    status, answer = registry.call("GET", f"/schemas/ids/{schema_id}")
    assert status == 200, answer
    return answer["schema"]


@pytest.fixture
def shop_refs(registry: RegistryProcess, subject: str) -> list[dict]:
    register(registry, f"{subject}-options", OPTIONS)
    return [{"name": "shop/options.proto", "subject": f"{subject}-options", "version": 1}]


def test_a_plain_registration_returns_the_canonical_text(
    registry: RegistryProcess, subject: str, shop_refs: list[dict]
) -> None:
    schema_id = register(registry, subject, SHOP, refs=shop_refs)
    assert text_of(registry, schema_id) == SHOP_CANONICAL
    status, version = registry.call("GET", f"/subjects/{subject}/versions/1")
    assert status == 200 and version["schema"] == SHOP_CANONICAL
    # Comments and layout are not in the canonical text, so the same schema written otherwise is the same.
    squeezed = " ".join(line.split("//")[0] for line in SHOP.splitlines())
    assert register(registry, subject, squeezed, refs=shop_refs) == schema_id
    # The canonical text registers as itself.
    assert register(registry, subject, SHOP_CANONICAL, refs=shop_refs) == schema_id
    status, found = registry.call(
        "POST", f"/subjects/{subject}", {"schemaType": "PROTOBUF", "schema": SHOP, "references": shop_refs}
    )
    assert status == 200 and found["id"] == schema_id and found["schema"] == SHOP_CANONICAL


def test_normalize_true_returns_the_normalized_text(
    registry: RegistryProcess, subject: str, shop_refs: list[dict]
) -> None:
    schema_id = register(registry, subject, SHOP, normalize=True, refs=shop_refs)
    assert text_of(registry, schema_id) == SHOP_NORMALIZED
    # Another order of fields, options and imports normalizes to the same text: the same schema.
    shuffled = SHOP.replace("Status status = 4;", "").replace(
        "google.protobuf.Timestamp placed = 3;", "google.protobuf.Timestamp placed = 3; Status status = 4;"
    )
    assert shuffled != SHOP
    assert register(registry, subject, shuffled, normalize=True, refs=shop_refs) == schema_id
    assert register(registry, subject, SHOP_NORMALIZED, normalize=True, refs=shop_refs) == schema_id
    status, versions = registry.call("GET", f"/subjects/{subject}/versions")
    assert status == 200 and versions == [1]


def test_proto2_defaults_aggregates_and_extends(registry: RegistryProcess, subject: str) -> None:
    plain = register(registry, subject, LEGACY)
    assert text_of(registry, plain) == LEGACY_CANONICAL
    normalized = register(registry, f"{subject}-normalized", LEGACY, normalize=True)
    assert text_of(registry, normalized) == LEGACY_NORMALIZED
    assert normalized != plain


def test_field_order_matters_only_when_not_normalizing(registry: RegistryProcess, subject: str) -> None:
    first = 'syntax = "proto3";\nmessage A { int32 a = 1; int32 b = 2; }\n'
    second = 'syntax = "proto3";\nmessage A { int32 b = 2; int32 a = 1; }\n'
    one = register(registry, subject, first)
    assert text_of(registry, one) == 'syntax = "proto3";\n\nmessage A {\n  int32 a = 1;\n  int32 b = 2;\n}\n'
    two = register(registry, subject, second)
    assert two != one  # canonical texts differ, as in Confluent
    assert text_of(registry, two) == 'syntax = "proto3";\n\nmessage A {\n  int32 b = 2;\n  int32 a = 1;\n}\n'
    # normalized, both are the first one's text: found among the subject's versions
    assert register(registry, subject, second, normalize=True) == one
