"""format("sluice") against a SASL_SSL broker: librdkafka's security settings pass through `kafka.*`."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.client.secure import connect_secure

pytestmark = pytest.mark.spark


def test_read_and_write_over_sasl_ssl(spark: Any, secure: Any) -> None:
    settings = secure.admin_settings("SCRAM-SHA-512")
    source, sink = f"spark-in-{uuid.uuid4().hex[:6]}", f"spark-out-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(settings)
    for future in admin.create_topics([NewTopic(source, 1, 1), NewTopic(sink, 1, 1)]).values():
        future.result(timeout=10)
    producer = Producer(settings)
    for i in range(10):
        producer.produce(source, b"v%d" % i)
    assert producer.flush(10) == 0
    options = {f"kafka.{k}": v for k, v in settings.items() if k != "bootstrap.servers"}
    frame = (
        spark.read.format("sluice")
        .option("kafka.bootstrap.servers", settings["bootstrap.servers"])
        .options(**options)
        .option("subscribe", source)
        .load()
    )
    assert sorted(bytes(r.value) for r in frame.collect()) == sorted(b"v%d" % i for i in range(10))
    (
        frame.select("value")
        .write.format("sluice")
        .option("kafka.bootstrap.servers", settings["bootstrap.servers"])
        .options(**options)
        .option("topic", sink)
        .mode("append")
        .save()
    )
    consumer = Consumer({**settings, "group.id": sink, "auto.offset.reset": "earliest"})
    consumer.subscribe([sink])
    got: list[bytes] = []
    for _ in range(40):
        got += [m.value() for m in consumer.consume(10, 0.5) if m.error() is None]
        if len(got) >= 10:
            break
    consumer.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(10))


def _read_committed(settings: dict[str, Any], topic: str) -> list[bytes]:
    consumer = Consumer(
        {**settings, "group.id": topic, "isolation.level": "read_committed", "enable.partition.eof": True}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    for _ in range(100):
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error():
            break  # the last stable offset: everything committed is before it
        got.append(message.value())
    consumer.close()
    return got


def _committed_transactions(settings: dict[str, Any], prefix: str) -> int:
    """How many of the tasks' transactional ids (starting with ``prefix``) ended committed; fails on others."""
    host, _, port = settings["bootstrap.servers"].rpartition(":")
    with connect_secure(host, int(port), settings, 10) as client:
        listed = client.call(
            "ListTransactions", 1, client.request_class("ListTransactions")(state_filters=[])
        )
        ids = [t.transactional_id for t in listed.transaction_states if t.transactional_id.startswith(prefix)]
        cls = client.request_class("DescribeTransactions")
        states = client.call("DescribeTransactions", 0, cls(transactional_ids=ids)).transaction_states
    tasks = [s for s in states if not s.transactional_id.endswith("-probe")]  # the start check's own
    assert {s.transaction_state for s in tasks} <= {"CompleteCommit"}
    return len(tasks)


def test_exactly_once_stream_over_sasl_ssl(spark: Any, secure: Any, tmp_path: Path) -> None:
    settings = secure.admin_settings("SCRAM-SHA-512")
    source, sink = f"eos-in-{uuid.uuid4().hex[:6]}", f"eos-out-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(settings)
    for future in admin.create_topics([NewTopic(source, 1, 1), NewTopic(sink, 1, 1)]).values():
        future.result(timeout=10)
    producer = Producer(settings)
    for i in range(10):
        producer.produce(source, b"s%d" % i)
    assert producer.flush(10) == 0
    options = {f"kafka.{k}": v for k, v in settings.items() if k != "bootstrap.servers"}
    query = (
        spark.readStream.format("sluice")
        .option("kafka.bootstrap.servers", settings["bootstrap.servers"])
        .options(**options)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .select("value")
        .writeStream.format("sluice")
        .option("kafka.bootstrap.servers", settings["bootstrap.servers"])
        .options(**options)
        .option("topic", sink)
        .option("deliveryGuarantee", "exactly-once")
        .option("commitTopic", f"commits-{sink}")
        .option("transactionalIdPrefix", sink)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(_read_committed(settings, sink)) == sorted(b"s%d" % i for i in range(10))
    assert _committed_transactions(settings, sink) >= 1  # written in transactions the driver committed


def test_exactly_once_batch_write_over_sasl_ssl(spark: Any, secure: Any) -> None:
    # The tasks prepare their transactions over SASL_SSL; the driver commits them with EndTxn over
    # SASL_SSL too, with the same kafka.* settings.
    settings = secure.admin_settings("SCRAM-SHA-256")
    sink = f"spark-eos-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(settings)
    admin.create_topics([NewTopic(sink, 1, 1)])[sink].result(timeout=10)
    options = {f"kafka.{k}": v for k, v in settings.items() if k != "bootstrap.servers"}
    frame = spark.createDataFrame([(b"e%d" % i,) for i in range(20)], "value binary").repartition(2)
    (
        frame.write.format("sluice")
        .option("kafka.bootstrap.servers", settings["bootstrap.servers"])
        .options(**options)
        .option("topic", sink)
        .option("deliveryGuarantee", "exactly-once")
        .option("transactionalIdPrefix", sink)
        .mode("append")
        .save()
    )
    got = _read_committed(settings, sink)
    assert sorted(got) == sorted(b"e%d" % i for i in range(20))
    assert _committed_transactions(settings, sink) == 2  # one per task, committed by the driver
