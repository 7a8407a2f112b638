"""Registry-typed columns end to end: the real sluice broker, the real `sluice registry` in a child process,
confluent-kafka's serializers and deserializers on the other side, and the shared local SparkSession."""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from protobuf_orders import order_message_class
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

from sluice.testing import RegistryProcess

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "lines", "type": {"type": "array", "items": "string"}},
    ],
}
# v2 adds a field with a default: BACKWARD compatible, so v1 records read with v2 get the default.
ORDER_V2 = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}],
}
PLACED = datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.UTC)


@pytest.fixture(scope="module")
def registry(kafka: Any) -> Iterator[RegistryProcess]:
    """`sluice registry` on the pipeline tests' broker (schemas in its _schemas topic)."""
    with RegistryProcess(kafka.bootstrap) as process:
        yield process


@pytest.fixture(scope="module")
def registry_client(registry: RegistryProcess) -> SchemaRegistryClient:
    assert registry.url is not None
    return SchemaRegistryClient({"url": registry.url})


def _order(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": i,
        "customer": f"c{i % 3}",
        "amount": decimal.Decimal(f"{i}.25"),
        "placed": PLACED,
        "status": "PAID" if i % 2 else "NEW",
        "lines": [f"sku-{i}"] * (i % 3),
        **extra,
    }


def _produce_avro(
    kafka: Any, client: SchemaRegistryClient, topic: str, schema: dict, orders: list[dict]
) -> None:
    values = AvroSerializer(client, json.dumps(schema))
    keys = AvroSerializer(client, json.dumps("string"))
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for order in orders:
        producer.produce(
            topic,
            key=keys(f"k{order['id']}", SerializationContext(topic, MessageField.KEY)),
            value=values(order, SerializationContext(topic, MessageField.VALUE)),
        )
    assert producer.flush(30) == 0


def _read(spark: Any, kafka: Any, registry: RegistryProcess, topic: str, **options: str) -> Any:
    return (
        spark.read.format("sluice")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", topic)
        .option("schemaRegistry", registry.url)
        .options(**options)
        .load()
    )


def test_avro_from_confluent_serializers_reads_as_typed_columns_latest_and_pinned(
    spark: Any, kafka: Any, registry: RegistryProcess, registry_client: SchemaRegistryClient
) -> None:
    topic = kafka.new_topic("typed-avro")
    _produce_avro(kafka, registry_client, topic, ORDER_V1, [_order(i) for i in range(3)])
    _produce_avro(kafka, registry_client, topic, ORDER_V2, [_order(i, coupon="SAVE") for i in range(3, 5)])

    latest = _read(spark, kafka, registry, topic, valueFormat="avro", keyFormat="avro")
    assert latest.schema["key"].dataType.simpleString() == "string"
    assert latest.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,customer:string,amount:decimal(9,2),placed:timestamp,status:string,"
        "lines:array<string>,coupon:string>"
    )
    rows = latest.orderBy("offset").select("key", "value.*").collect()
    assert [r["key"] for r in rows] == [f"k{i}" for i in range(5)]
    assert [r["coupon"] for r in rows] == [None, None, None, "SAVE", "SAVE"]  # v1 records get v2's default
    first = rows[1].asDict()
    assert first["amount"] == decimal.Decimal("1.25") and first["status"] == "PAID"
    assert first["placed"].replace(tzinfo=datetime.UTC) == PLACED and first["lines"] == ["sku-1"]
    # Spark SQL works on the typed columns directly.
    assert latest.where(F.col("value.status") == "NEW").count() == 3

    pinned = _read(spark, kafka, registry, topic, valueFormat="avro", valueSchemaVersion="1")
    assert "coupon" not in pinned.schema["value"].dataType.fieldNames()
    assert sorted(r["id"] for r in pinned.select("value.id").collect()) == [0, 1, 2, 3, 4]


def test_json_schema_values_read_as_typed_columns(
    spark: Any, kafka: Any, registry: RegistryProcess, registry_client: SchemaRegistryClient
) -> None:
    topic = kafka.new_topic("typed-json")
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Reading",
        "type": "object",
        "properties": {
            "sensor": {"type": "string"},
            "value": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["sensor", "value"],
    }
    serializer = JSONSerializer(json.dumps(schema), registry_client)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(4):
        reading = {"sensor": f"s{i}", "value": i * 1.5, "tags": ["a"] * i}
        producer.produce(topic, value=serializer(reading, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0
    frame = _read(spark, kafka, registry, topic, valueFormat="json-schema")
    assert (
        frame.schema["value"].dataType.simpleString()
        == "struct<sensor:string,value:double,tags:array<string>>"
    )
    rows = frame.orderBy("offset").select("value.*").collect()
    assert [(r["sensor"], r["value"], r["tags"]) for r in rows][2] == ("s2", 3.0, ["a", "a"])

    # Written back as JSON Schema framed values that confluent-kafka's JSONDeserializer reads and validates.
    copy = kafka.new_topic("typed-json-copy")
    (
        frame.select(F.struct("value.sensor", (F.col("value.value") * 2).alias("doubled")).alias("value"))
        .write.format("sluice")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("topic", copy)
        .option("schemaRegistry", registry.url)
        .option("valueFormat", "json-schema")
        .mode("append")
        .save()
    )
    deserializer = JSONDeserializer(None, schema_registry_client=registry_client)
    back = [
        deserializer(m.value(), SerializationContext(copy, MessageField.VALUE))
        for m in kafka.consume_all(copy, 1)
    ]
    assert sorted((r["sensor"], r["doubled"]) for r in back) == [
        ("s0", 0.0),
        ("s1", 3.0),
        ("s2", 6.0),
        ("s3", 9.0),
    ]


def test_undecodable_value_fails_naming_its_offset_and_permissive_reads_null(
    spark: Any, kafka: Any, registry: RegistryProcess, registry_client: SchemaRegistryClient
) -> None:
    topic = kafka.new_topic("typed-bad")
    _produce_avro(kafka, registry_client, topic, ORDER_V1, [_order(0)])
    kafka.produce(topic, [{"value": b"plain, not framed"}])
    _produce_avro(kafka, registry_client, topic, ORDER_V1, [_order(2)])
    with pytest.raises(PySparkException, match=rf"{topic}-0 offset 1 .*not registry-framed"):
        _read(spark, kafka, registry, topic, valueFormat="avro").collect()
    rows = (
        _read(spark, kafka, registry, topic, valueFormat="avro", mode="PERMISSIVE")
        .orderBy("offset")
        .collect()
    )
    assert [r["value"]["id"] if r["value"] else None for r in rows] == [0, None, 2]


def test_unknown_subject_fails_when_the_query_is_defined(
    spark: Any, kafka: Any, registry: RegistryProcess
) -> None:
    topic = kafka.new_topic("typed-nosubject")
    with pytest.raises(Exception, match=rf"{topic}-value"):
        _read(spark, kafka, registry, topic, valueFormat="avro").schema  # noqa: B018


def test_spark_writes_avro_that_confluent_deserializers_read(
    spark: Any, kafka: Any, registry: RegistryProcess, registry_client: SchemaRegistryClient
) -> None:
    topic = kafka.new_topic("typed-out")
    frame = spark.createDataFrame(
        [(i, f"name-{i}", [i, i + 1], {"k": i}, PLACED) for i in range(5)],
        "id long, name string, scores array<int>, attrs map<string,int>, at timestamp",
    )
    for _ in range(2):  # the same schema again: the subject keeps one version
        (
            frame.select(F.col("name").alias("key"), F.struct("*").alias("value"))
            .write.format("sluice")
            .option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("topic", topic)
            .option("schemaRegistry", registry.url)
            .option("valueFormat", "avro")
            .mode("append")
            .save()
        )
    assert registry_client.get_versions(f"{topic}-value") == [1]
    deserializer = AvroDeserializer(registry_client)
    messages = kafka.consume_all(topic, 1)
    decoded = [deserializer(m.value(), SerializationContext(topic, MessageField.VALUE)) for m in messages]
    assert len(decoded) == 10
    by_id = {d["id"]: (d, m.key()) for d, m in zip(decoded, messages, strict=True)}
    assert by_id[3] == (
        {"id": 3, "name": "name-3", "scores": [3, 4], "attrs": {"k": 3}, "at": PLACED},
        b"name-3",
    )
    assert sorted(by_id) == [0, 1, 2, 3, 4]


def test_exactly_once_stream_of_typed_rows(
    spark: Any, kafka: Any, registry: RegistryProcess, registry_client: SchemaRegistryClient, tmp_path: Path
) -> None:
    source = kafka.new_topic("typed-eos-in", partitions=2)
    target = kafka.new_topic("typed-eos-out")
    _produce_avro(kafka, registry_client, source, ORDER_V1, [_order(i) for i in range(20)])

    def run_once() -> None:
        stream = (
            spark.readStream.format("sluice")
            .option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("schemaRegistry", registry.url)
            .option("valueFormat", "avro")
            .load()
        )
        query = (
            stream.select(F.struct("value.id", "value.customer", "value.amount").alias("value"))
            .writeStream.format("sluice")
            .option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("topic", target)
            .option("schemaRegistry", registry.url)
            .option("valueFormat", "avro")
            .option("deliveryGuarantee", "exactly-once")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run_once()
    run_once()  # a restart from the checkpoint finds nothing new and writes nothing twice
    deserializer = AvroDeserializer(registry_client)
    rows = [
        deserializer(m.value(), SerializationContext(target, MessageField.VALUE))
        for m in kafka.consume_all(target, 1)
        if m.value() is not None
    ]
    assert sorted(r["id"] for r in rows) == list(range(20))
    assert rows[0]["amount"] == decimal.Decimal(f"{rows[0]['id']}.25")


def test_archive_keeps_typed_columns_in_parquet(
    spark: Any, kafka: Any, registry: RegistryProcess, registry_client: SchemaRegistryClient, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    from sluice.pipeline.jobs import read_archive, start_archive

    topic = kafka.new_topic("typed-archive")
    _produce_avro(kafka, registry_client, topic, ORDER_V1, [_order(i) for i in range(6)])
    query = start_archive(
        spark,
        kafka.bootstrap,
        topic,
        tmp_path / "archive",
        available_now=True,
        registry_options={"schemaRegistry": registry.url or "", "valueFormat": "avro", "keyFormat": "avro"},
    )
    query.awaitTermination(120)
    assert query.exception() is None and query.records_written == 6
    files = sorted((tmp_path / "archive").glob(f"topic={topic}/date=*/*.parquet"))
    assert files
    value_type = pq.read_schema(files[0]).field("value").type
    assert str(value_type.field("amount").type) == "decimal128(9, 2)"
    archived = read_archive(spark, tmp_path / "archive")
    assert archived.schema["key"].dataType.simpleString() == "string"
    rows = archived.where(F.col("value.status") == "PAID").select("value.id", "date").collect()
    assert sorted(r["id"] for r in rows) == [1, 3, 5]
    assert all(isinstance(r["date"], str) for r in rows)


def test_protobuf_values_read_as_typed_columns_and_written_back(
    spark: Any, kafka: Any, registry: RegistryProcess, registry_client: SchemaRegistryClient
) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    topic = kafka.new_topic("typed-proto")
    order_class = order_message_class()
    # confluent-kafka registers the message's file (as a base64 descriptor, timestamp.proto as a reference).
    serializer = ProtobufSerializer(order_class, registry_client, {"use.deprecated.format": False})

    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(3):
        order = order_class(id=i, lines=["a"] * i, status=i % 2)
        order.placed.FromDatetime(PLACED)
        order.stock["x"] = i
        order.big = 2**64 - 1 - i
        if i == 2:
            order.coupon = "SAVE"
        producer.produce(topic, value=serializer(order, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0

    frame = _read(spark, kafka, registry, topic, valueFormat="protobuf")
    assert frame.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,lines:array<string>,status:string,placed:timestamp,stock:map<string,int>,coupon:string,"
        "big:decimal(20,0)>"
    )
    rows = [r["value"].asDict() for r in frame.orderBy("offset").select("value").collect()]
    assert [(r["id"], r["status"], r["coupon"], r["stock"]) for r in rows] == [
        (0, "NEW", None, {"x": 0}),
        (1, "PAID", None, {"x": 1}),
        (2, "NEW", "SAVE", {"x": 2}),
    ]
    assert rows[2]["placed"].replace(tzinfo=datetime.UTC) == PLACED and rows[2]["lines"] == ["a", "a"]
    assert rows[0]["big"] == decimal.Decimal(2**64 - 1)  # uint64 beyond a long

    copy = kafka.new_topic("typed-proto-copy")
    (
        frame.select(F.struct("value.id", "value.lines", "value.status", "value.coupon").alias("value"))
        .write.format("sluice")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("topic", copy)
        .option("schemaRegistry", registry.url)
        .option("valueFormat", "protobuf")
        .mode("append")
        .save()
    )
    registered = registry_client.get_latest_version(f"{copy}-value")
    assert (
        registered.schema.schema_type == "PROTOBUF"
        and "message TopLevelRecord" in registered.schema.schema_str
    )
    raw = kafka.consume_all(copy, 1)[0].value()
    assert raw[:6] == b"\x00" + registered.schema_id.to_bytes(4, "big") + b"\x00"  # magic, id, index [0]
    back = _read(spark, kafka, registry, copy, valueFormat="protobuf").select("value.*").collect()
    assert sorted((r["id"], r["status"], r["coupon"]) for r in back) == [
        (0, "NEW", None),
        (1, "PAID", None),
        (2, "NEW", "SAVE"),
    ]


def test_spark_writes_typed_keys_under_the_key_subject(
    spark: Any, kafka: Any, registry: RegistryProcess, registry_client: SchemaRegistryClient
) -> None:
    topic = kafka.new_topic("typed-keys")
    frame = spark.createDataFrame(
        [(i, f"r{i % 2}", i * 10) for i in range(4)], "id long, region string, n int"
    )
    (
        frame.select(F.struct("id", "region").alias("key"), F.struct("n").alias("value"))
        .write.format("sluice")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("topic", topic)
        .option("schemaRegistry", registry.url)
        .option("keyFormat", "avro")
        .option("valueFormat", "avro")
        .mode("append")
        .save()
    )
    assert registry_client.get_versions(f"{topic}-key") == [1]
    assert registry_client.get_versions(f"{topic}-value") == [1]
    deserializer = AvroDeserializer(registry_client)
    pairs = [
        (
            deserializer(m.key(), SerializationContext(topic, MessageField.KEY)),
            deserializer(m.value(), SerializationContext(topic, MessageField.VALUE)),
        )
        for m in kafka.consume_all(topic, 1)
    ]
    assert sorted(pairs, key=lambda p: p[0]["id"]) == [
        ({"id": i, "region": f"r{i % 2}"}, {"n": i * 10}) for i in range(4)
    ]


def test_schema_registry_client_settings_pass_through_to_a_registry_behind_basic_auth(
    spark: Any, kafka: Any
) -> None:
    """schemaRegistry.<setting> reaches the registry client on the driver and in every task."""
    with RegistryProcess(kafka.bootstrap, extra_args=["--basic-auth", "alice:s3cret"]) as locked:
        assert locked.url is not None
        topic = kafka.new_topic("typed-auth")
        credentials = {
            "schemaRegistry": locked.url,
            "schemaRegistry.basic.auth.user.info": "alice:s3cret",
        }
        frame = spark.createDataFrame([(i, f"c{i}") for i in range(3)], "id long, customer string")
        (
            frame.select(F.struct("*").alias("value"))
            .write.format("sluice")
            .option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("topic", topic)
            .options(**credentials)
            .option("valueFormat", "avro")
            .mode("append")
            .save()
        )
        reader = (
            spark.read.format("sluice")
            .option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("subscribe", topic)
            .option("valueFormat", "avro")
        )
        rows = reader.options(**credentials).load().select("value.id", "value.customer").collect()
        assert sorted((r["id"], r["customer"]) for r in rows) == [(i, f"c{i}") for i in range(3)]
        wrong = {**credentials, "schemaRegistry.basic.auth.user.info": "alice:hunter2"}
        with pytest.raises(Exception, match="401") as refused:
            reader.options(**wrong).load().schema  # noqa: B018
        assert "hunter2" not in str(refused.value)
