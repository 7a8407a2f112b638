"""Structured Streaming through format("sluice"): rate limits, topic-to-topic, data loss, group commits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
from pyspark.errors import StreamingQueryException

pytestmark = pytest.mark.spark


def _stream(spark: Any, kafka: Any, topic: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("sluice")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _run_available_now(frame: Any, checkpoint: Path, sink_dir: Path) -> Any:
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(sink_dir))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    except StreamingQueryException:
        pass  # the test inspects query.exception()
    return query


def test_max_offsets_per_trigger_caps_every_micro_batch(spark: Any, kafka: Any, tmp_path: Path) -> None:
    topic = kafka.new_topic("limit", partitions=2)
    kafka.produce(topic, [{"value": b"%d" % i, "partition": i % 2} for i in range(50)])
    frame = _stream(spark, kafka, topic, maxOffsetsPerTrigger="15")
    query = _run_available_now(frame, tmp_path / "cp", tmp_path / "out")
    assert query.exception() is None
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 50
    assert max(sizes) <= 15 and len(sizes) >= 4
    assert spark.read.parquet(str(tmp_path / "out")).count() == 50


def test_stream_from_topic_to_topic_with_group_commit(spark: Any, kafka: Any, tmp_path: Path) -> None:
    from confluent_kafka import Consumer, TopicPartition

    source = kafka.new_topic("copy-src", partitions=2)
    target = kafka.new_topic("copy-dst", partitions=2)
    kafka.produce(
        source, [{"value": b"v%d" % i, "key": b"k%d" % i, "partition": i % 2, "headers": [("n", b"%d" % i)]}
                 for i in range(30)]
    )
    group = f"group-{source}"
    frame = _stream(spark, kafka, source, includeHeaders="true", **{"kafka.group.id": group})
    query = (
        frame.select("key", "value", "partition", "headers")
        .writeStream.format("sluice")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("topic", target)
        .options(**{f"kafka.{k}": v for k, v in kafka.producer_overrides.items()})
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    copied = kafka.consume_all(target, partitions=2)
    assert sorted((m.partition(), m.key(), m.value(), m.headers()) for m in copied) == sorted(
        (i % 2, b"k%d" % i, b"v%d" % i, [("n", b"%d" % i)]) for i in range(30)
    )
    # Progress mirrored into the consumer group lets ordinary lag tools watch the query.
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
    committed = consumer.committed([TopicPartition(source, p) for p in range(2)], timeout=10)
    consumer.close()
    assert sorted(tp.offset for tp in committed) == [15, 15]


def test_recreated_topic_is_data_loss_unless_allowed(spark: Any, kafka: Any, tmp_path: Path) -> None:
    topic = kafka.new_topic("loss")
    kafka.produce(topic, [{"value": b"old-%d" % i} for i in range(10)])
    checkpoint, out = tmp_path / "cp", tmp_path / "out"
    assert _run_available_now(_stream(spark, kafka, topic), checkpoint, out).exception() is None
    kafka.recreate_topic(topic)
    kafka.produce(topic, [{"value": b"new-%d" % i} for i in range(3)])

    failed = _run_available_now(_stream(spark, kafka, topic), checkpoint, out)
    assert failed.exception() is not None
    message = str(failed.exception())
    assert "DataLossError" in message and "deleted and recreated" in message and "failOnDataLoss=false" in message

    resumed = _run_available_now(_stream(spark, kafka, topic, failOnDataLoss="false"), checkpoint, out)
    assert resumed.exception() is None
    values = sorted(bytes(r.value) for r in spark.read.parquet(str(out)).collect())
    assert values == sorted([b"old-%d" % i for i in range(10)] + [b"new-%d" % i for i in range(3)])
