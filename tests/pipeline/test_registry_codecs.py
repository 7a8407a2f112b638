"""The pure parts of registry-typed columns: Spark types derived from schemas, framing, batch decoding and
encoding, without a broker, a registry or a SparkSession (the reader schema's own id needs no look-up)."""

from __future__ import annotations

import datetime
import decimal
import json

import fastavro
import pytest
from protobuf_orders import order_message_class
from registry_codec_helpers import NOWHERE
from registry_codec_helpers import avro_codec as _avro_codec
from registry_codec_helpers import avro_framed as _avro_framed
from registry_codec_helpers import where as _where

pytest.importorskip("pyspark")

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sluice.client.schema_framing import (
    decode_message_index,
    encode_message_index,
    frame,
    split_frame,
)
from sluice.client.schema_registry import RegistrySchema
from sluice.pipeline import avro_spark, jsonschema_spark, protobuf_spark
from sluice.pipeline.encoding import ColumnEncoder
from sluice.pipeline.formats import ColumnCodec, UndecodableRecordError
from sluice.pipeline.options import (
    PipelineOptionError,
    RegistryConnection,
    parse_sink_options,
    parse_source_options,
)

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "choice", "type": ["null", "string", "long"]},
        {"name": "count", "type": ["null", "int", "long"]},
        {
            "name": "ship_to",
            "type": [
                "null",
                {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]},
            ],
            "default": None,
        },
        {"name": "bill_to", "type": ["null", "Address"], "default": None},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 2}},
    ],
}


def test_avro_schema_becomes_the_struct_spark_avro_gives() -> None:
    data_type, nullable = avro_spark.spark_type(fastavro.parse_schema(ORDER))
    address = StructType([StructField("city", StringType(), False)])
    assert not nullable
    assert data_type == StructType(
        [
            StructField("id", LongType(), False),
            StructField("placed", TimestampType(), False),
            StructField("day", DateType(), False),
            StructField("price", DecimalType(10, 2), False),
            StructField("status", StringType(), False),
            StructField("tags", ArrayType(StringType(), False), False),
            StructField("attrs", MapType(StringType(), LongType(), False), False),
            StructField(
                "choice",
                StructType(
                    [StructField("member0", StringType(), True), StructField("member1", LongType(), True)]
                ),
                True,
            ),
            StructField("count", LongType(), True),
            StructField("ship_to", address, True),
            StructField("bill_to", address, True),  # a named type used a second time, by name
            StructField("hash", BinaryType(), False),
        ]
    )


def test_recursive_avro_record_is_refused_with_its_name() -> None:
    node = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(avro_spark.AvroTypeError, match="Node is recursive"):
        avro_spark.spark_type(fastavro.parse_schema(node))


def test_avro_batch_decodes_to_typed_rows_with_nulls_and_union_members() -> None:
    records = [
        {
            "id": i,
            "placed": datetime.datetime(2024, 5, 1, 12, 0, i, tzinfo=datetime.UTC),
            "day": datetime.date(2024, 5, 1),
            "price": decimal.Decimal("12.50"),
            "status": "PAID",
            "tags": ["a", "b"][: i + 1],
            "attrs": {"n": i},
            "choice": ["text", 5][i],
            "count": 3,
            "ship_to": {"city": "Oslo"} if i == 0 else None,
            "bill_to": None,
            "hash": b"ab",
        }
        for i in range(2)
    ]
    values: list[bytes | None] = [*_avro_framed(ORDER, records), None]
    rows = _avro_codec(ORDER).decode(values, _where).to_pylist()
    assert rows[2] is None  # a tombstone stays a null value
    assert rows[0]["choice"] == {"member0": "text", "member1": None}
    assert rows[1]["choice"] == {"member0": None, "member1": 5}
    assert rows[0]["ship_to"] == {"city": "Oslo"} and rows[1]["ship_to"] is None
    assert rows[1]["placed"] == datetime.datetime(2024, 5, 1, 12, 0, 1, tzinfo=datetime.UTC)
    assert rows[0]["price"] == decimal.Decimal("12.50") and rows[0]["status"] == "PAID"
    assert rows[1]["tags"] == ["a", "b"] and dict(rows[1]["attrs"]) == {"n": 1}


def test_undecodable_value_names_topic_partition_offset_or_is_null_when_permissive() -> None:
    good = _avro_framed(
        {"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]}, [{"s": "x"}]
    )
    schema = {"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]}
    with pytest.raises(UndecodableRecordError, match=r"orders-0 offset 101 .*not registry-framed"):
        _avro_codec(schema).decode([good[0], b"plain text"], _where)
    cut = good[0][:-1]
    with pytest.raises(UndecodableRecordError, match=r"orders-0 offset 100 .*schema id 7"):
        _avro_codec(schema).decode([cut, good[0]], _where)
    rows = _avro_codec(schema, permissive=True).decode([b"plain text", good[0], cut], _where).to_pylist()
    assert rows == [None, {"s": "x"}, None]


def test_frame_and_protobuf_message_index_round_trip() -> None:
    schema_id, payload = split_frame(frame(258, b"body"))
    assert schema_id == 258 and bytes(payload) == b"body"
    for indexes in [(0,), (1,), (2, 0, 3)]:
        encoded = encode_message_index(indexes) + b"rest"
        assert decode_message_index(memoryview(encoded)) == (indexes, memoryview(b"rest"))
    assert encode_message_index([0]) == b"\x00"  # Confluent's short form for the first message
    with pytest.raises(UndecodableRecordError, match="cut short or malformed"):
        decode_message_index(memoryview(b"\x04\x80"))


def test_spark_struct_written_as_avro_reads_back_as_the_same_struct() -> None:
    import pyarrow as pa

    spark_type = StructType(
        [
            StructField("id", LongType(), False),
            StructField("name", StringType(), True),
            StructField("when", TimestampType(), True),
            StructField("scores", ArrayType(DoubleType(), True), True),
            StructField("labels", MapType(StringType(), IntegerType(), True), True),
            StructField("inner", StructType([StructField("ok", BooleanType(), True)]), True),
        ]
    )
    avro_schema = avro_spark.avro_schema_for(spark_type)
    assert avro_spark.spark_type(fastavro.parse_schema(avro_schema))[0] == spark_type
    schema = RegistrySchema(3, "AVRO", json.dumps(avro_schema), subject="out-value")
    rows = [
        {
            "id": 1,
            "name": "a",
            "when": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
            "scores": [1.5, None],
            "labels": [("x", 1)],
            "inner": {"ok": True},
        },
        None,
        {"id": 2, "name": None, "when": None, "scores": None, "labels": None, "inner": None},
    ]
    from pyspark.sql.pandas.types import to_arrow_type

    column = pa.array(rows, to_arrow_type(spark_type, timezone="UTC"))
    encoded = ColumnEncoder("value", schema).encode(column)
    assert encoded[1] is None and encoded[0][:5] == b"\x00\x00\x00\x00\x03"
    decoded = ColumnCodec("value", NOWHERE, schema).decode(encoded, _where).to_pylist()
    assert decoded == column.to_pylist()


def test_protobuf_message_becomes_a_struct_with_enum_names_maps_and_timestamps() -> None:
    order_class = order_message_class()
    descriptor = order_class.DESCRIPTOR  # type: ignore[attr-defined]
    assert protobuf_spark.spark_type(descriptor) == StructType(
        [
            StructField("id", LongType(), True),
            StructField("lines", ArrayType(StringType(), False), True),
            StructField("status", StringType(), True),
            StructField("placed", TimestampType(), True),
            StructField("stock", MapType(StringType(), IntegerType(), True), True),
            StructField("coupon", StringType(), True),
            StructField("big", DecimalType(20, 0), True),
        ]
    )
    order = order_class(id=9, lines=["x"], status=1, big=2**64 - 1)
    order.placed.FromDatetime(datetime.datetime(2024, 2, 3, 4, 5, 6, tzinfo=datetime.UTC))
    order.stock["a"] = 3
    row = protobuf_spark.row_converter(descriptor)(order)
    assert row == {
        "id": 9,
        "lines": ["x"],
        "status": "PAID",
        "placed": datetime.datetime(2024, 2, 3, 4, 5, 6, tzinfo=datetime.UTC),
        "stock": {"a": 3},
        "coupon": None,  # proto3 optional: unset is null, not ""
        "big": decimal.Decimal(2**64 - 1),
    }
    empty = protobuf_spark.row_converter(descriptor)(order_class())
    assert empty["placed"] is None and empty["id"] == 0  # a scalar without presence reads as its default


def test_json_schema_becomes_a_struct_and_values_are_shaped_to_it() -> None:
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": ["string", "null"]},
            "at": {"type": "string", "format": "date-time"},
            "items": {"type": "array", "items": {"$ref": "#/definitions/Item"}},
            "extra": {"type": "object", "additionalProperties": {"type": "number"}},
            "any": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        },
        "definitions": {"Item": {"type": "object", "properties": {"sku": {"type": "string"}}}},
    }
    data_type = jsonschema_spark.spark_type(schema)
    assert data_type.simpleString() == (
        "struct<id:bigint,name:string,at:timestamp,items:array<struct<sku:string>>,"
        "extra:map<string,double>,any:string>"
    )
    shaped = jsonschema_spark.shaper(data_type)(
        {"id": 4, "at": "2024-01-01T00:00:00Z", "items": [{"sku": "a", "x": 1}], "extra": {"k": 2}, "any": 7}
    )
    assert shaped == {
        "id": 4,
        "name": None,
        "at": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
        "items": [{"sku": "a"}],
        "extra": {"k": 2.0},
        "any": "7",
    }


def test_format_options_are_checked_and_subjects_default_to_topic_name_strategy() -> None:
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "orders"}
    formats = parse_source_options(
        {**base, "valueFormat": "avro", "schemaRegistry": "http://r:8081", "valueSchemaVersion": "3"}, "batch"
    ).formats
    assert formats is not None and formats.value is not None and formats.key is None
    assert (formats.value.subject, formats.value.version, formats.value.schema_type) == (
        "orders-value",
        3,
        "AVRO",
    )
    with pytest.raises(PipelineOptionError, match=r"schemaRegistry .* is required"):
        parse_source_options({**base, "valueFormat": "avro"}, "batch")
    with pytest.raises(PipelineOptionError, match="valueFormat must be one of avro, protobuf, json-schema"):
        parse_source_options({**base, "valueFormat": "thrift", "schemaRegistry": "http://r"}, "batch")
    with pytest.raises(PipelineOptionError, match="keySubject is needed"):
        parse_source_options(
            {**base, "subscribe": "a,b", "keyFormat": "json-schema", "schemaRegistry": "http://r"}, "batch"
        )
    with pytest.raises(PipelineOptionError, match="need keyFormat or valueFormat"):
        parse_source_options({**base, "valueSubject": "x"}, "batch")
    sink = parse_sink_options(
        {
            "kafka.bootstrap.servers": "h:1",
            "topic": "out",
            "keyFormat": "protobuf",
            "schemaRegistry": "http://r",
        }
    )
    assert sink.formats is not None and sink.formats.key is not None
    assert sink.formats.key.subject == "out-key" and not sink.formats.key.pinned


def test_a_registry_that_is_down_fails_the_batch_even_when_permissive() -> None:
    """A record of another schema id needs its writer schema; with the registry gone no record is to blame,
    so PERMISSIVE must not turn an outage into nulls."""
    from sluice.client.schema_registry import RegistryLookupError
    from sluice.testing import free_port

    schema = {"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]}
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    codec = ColumnCodec(
        "value",
        RegistryConnection(url, (("max.retries", "0"), ("timeout", "5"))),
        RegistrySchema(7, "AVRO", json.dumps(schema), subject="t-value"),
        permissive=True,
    )
    other_id = _avro_framed(schema, [{"s": "x"}], schema_id=8)
    with pytest.raises(RegistryLookupError, match=rf"schema registry {url}: schema id 8 failed"):
        codec.decode(other_id, _where)


def test_arrow_column_fast_path_decodes_like_the_general_one_and_still_names_a_bad_record() -> None:
    import pyarrow as pa

    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "n", "type": "long"}, {"name": "s", "type": "string"}],
    }
    framed = _avro_framed(schema, [{"n": i, "s": "x" * i} for i in range(50)])
    column = pa.array(framed, pa.binary()).slice(3, 40)  # a slice: offsets that do not start at 0
    codec = _avro_codec(schema)
    assert codec.decode_column(column, _where).to_pylist() == codec.decode(framed[3:43], _where).to_pylist()
    broken = pa.array([*framed[:5], framed[5][:-1] + b"\xff", *framed[6:10]], pa.binary())
    with pytest.raises(UndecodableRecordError, match="orders-0 offset 105"):
        codec.decode_column(broken, _where)
    other_ids = pa.array([framed[0], _avro_framed(schema, [{"n": 1, "s": ""}], schema_id=9)[0]], pa.binary())
    assert codec.decode_column(other_ids.slice(0, 1), _where).to_pylist() == [{"n": 0, "s": ""}]


def test_registry_passwords_never_show_in_reprs_or_messages() -> None:
    connection = RegistryConnection(
        "http://bob:pw-url@127.0.0.1:9",
        (("basic.auth.user.info", "alice:pw-info"), ("ssl.key.password", "pw-key")),
    )
    shown = repr(connection) + connection.masked("http://bob:pw-url@h alice:pw-info pw-key")
    assert "bob:***@" in shown and "alice:***" in shown
    assert not any(secret in shown for secret in ("pw-url", "pw-info", "pw-key"))
