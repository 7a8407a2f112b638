"""Batch reads and writes of format("sluice") with a real SparkSession and a real broker."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def _read(spark: Any, kafka: Any, **options: str) -> Any:
    reader = spark.read.format("sluice").option("kafka.bootstrap.servers", kafka.bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_batch_read_returns_every_record_with_kafka_schema(spark: Any, kafka: Any) -> None:
    topic = kafka.new_topic("read", partitions=2)
    kafka.produce(
        topic,
        [
            {"value": b"v%d" % i, "key": b"k%d" % i, "partition": i % 2, "timestamp": 1_700_000_000_000 + i,
             "headers": [("h", b"x%d" % i), ("empty", None)]}
            for i in range(20)
        ],
    )
    frame = _read(spark, kafka, subscribe=topic, includeHeaders="true")
    assert frame.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    rows = sorted(frame.collect(), key=lambda r: int(r.value[1:]))
    assert [bytes(r.value) for r in rows] == [b"v%d" % i for i in range(20)]
    assert [bytes(r.key) for r in rows] == [b"k%d" % i for i in range(20)]
    assert {(r.partition, r.offset) for r in rows} == {(p, o) for p in range(2) for o in range(10)}
    first = rows[0]
    assert first.topic == topic
    assert first.timestampType == 0
    assert int(first.timestamp.timestamp() * 1000) == 1_700_000_000_000
    assert [(h.key, None if h.value is None else bytes(h.value)) for h in first.headers] == [
        ("h", b"x0"),
        ("empty", None),
    ]


def test_batch_read_honours_offsets_and_min_partitions(spark: Any, kafka: Any) -> None:
    topic = kafka.new_topic("range", partitions=2)
    kafka.produce(topic, [{"value": b"%d" % i, "partition": i % 2} for i in range(40)])
    starting = json.dumps({topic: {"0": 5, "1": -2}})
    ending = json.dumps({topic: {"0": 15, "1": -1}})
    frame = _read(spark, kafka, subscribe=topic, startingOffsets=starting, endingOffsets=ending, minPartitions="6")
    assert frame.rdd.getNumPartitions() >= 6
    offsets = sorted((r.partition, r.offset) for r in frame.select("partition", "offset").collect())
    assert offsets == [(0, o) for o in range(5, 15)] + [(1, o) for o in range(20)]


def test_batch_read_by_pattern_and_assign(spark: Any, kafka: Any) -> None:
    topic = kafka.new_topic("pattern", partitions=3)
    kafka.produce(topic, [{"value": b"x", "partition": p} for p in range(3) for _ in range(2)])
    assert _read(spark, kafka, subscribePattern=topic.replace("-", ".")).count() == 6
    assert _read(spark, kafka, assign=json.dumps({topic: [0, 2]})).count() == 4


def test_batch_write_then_read_back(spark: Any, kafka: Any) -> None:
    topic = kafka.new_topic("write", partitions=2)
    rows = [(f"k{i}", f"value-{i}", i % 2, [("trace", f"t{i}".encode())]) for i in range(30)]
    frame = spark.createDataFrame(
        rows, "key string, value string, partition int, headers array<struct<key:string,value:binary>>"
    )
    (
        frame.write.format("sluice")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("topic", topic)
        .options(**{f"kafka.{k}": v for k, v in kafka.producer_overrides.items()})
        .mode("append")
        .save()
    )
    messages = kafka.consume_all(topic, partitions=2)
    got = sorted((m.key(), m.value(), m.partition(), m.headers()) for m in messages)
    assert got == sorted((k.encode(), v.encode(), p, [(hk, hv)]) for k, v, p, [(hk, hv)] in rows)


@pytest.mark.parametrize(
    ("ddl", "options", "message"),
    [
        ("key string", {"topic": "t"}, "needs a 'value' column"),
        ("value string", {}, "needs option 'topic' or a 'topic' column"),
        ("value int", {"topic": "t"}, "column 'value' must be string or binary, not int"),
        ("value string, partition string", {"topic": "t"}, "column 'partition' must be int"),
        ("value string", {"topic": "t", "subscribe": "t"}, "unknown write option(s) for format 'sluice': subscribe"),
    ],
)
def test_bad_writes_fail_with_a_clear_message(
    spark: Any, kafka: Any, ddl: str, options: dict[str, str], message: str
) -> None:
    frame = spark.createDataFrame([], ddl)
    writer = frame.write.format("sluice").option("kafka.bootstrap.servers", kafka.bootstrap).options(**options)
    with pytest.raises(Exception) as caught:
        writer.mode("append").save()
    assert message in str(caught.value)


def test_topic_column_routes_rows_and_option_overrides_it(spark: Any, kafka: Any) -> None:
    first, second = kafka.new_topic("route-a"), kafka.new_topic("route-b")
    frame = spark.createDataFrame([(first, b"1"), (second, b"2"), (second, b"3")], "topic string, value binary")
    overrides = {f"kafka.{k}": v for k, v in kafka.producer_overrides.items()}
    writer = frame.write.format("sluice").option("kafka.bootstrap.servers", kafka.bootstrap).options(**overrides)
    writer.mode("append").save()
    assert [m.value() for m in kafka.consume_all(first, 1)] == [b"1"]
    assert sorted(m.value() for m in kafka.consume_all(second, 1)) == [b"2", b"3"]
    writer.option("topic", first).mode("append").save()
    assert sorted(m.value() for m in kafka.consume_all(first, 1)) == [b"1", b"1", b"2", b"3"]


def test_reads_default_to_read_committed_and_stop_at_an_open_transaction(spark: Any, kafka: Any) -> None:
    from confluent_kafka import Producer

    topic = kafka.new_topic("isolation")
    kafka.produce(topic, [{"value": b"plain"}])
    txn = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"{topic}-writer"})
    txn.init_transactions(10)
    for value, commit in ((b"committed", True), (b"aborted", False)):
        txn.begin_transaction()
        txn.produce(topic, value=value)
        txn.commit_transaction(10) if commit else (txn.flush(10), txn.abort_transaction(10))
    kafka.produce(topic, [{"value": b"after"}])
    # Left open: "latest" is the last stable offset, so the read ends before it instead of waiting.
    txn.begin_transaction()
    txn.produce(topic, value=b"open")
    assert txn.flush(10) == 0

    def values(**options: str) -> list[bytes]:
        rows = _read(spark, kafka, subscribe=topic, **options).orderBy("offset").collect()
        return [bytes(r.value) for r in rows]

    try:
        assert values() == [b"plain", b"committed", b"after"]
        assert values(**{"kafka.isolation.level": "read_uncommitted"}) == [
            b"plain",
            b"committed",
            b"aborted",
            b"after",
            b"open",
        ]
    finally:
        txn.abort_transaction(10)
