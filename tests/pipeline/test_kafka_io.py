"""Range reads straight from the broker, without Spark."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from sluice.pipeline.kafka_io import KafkaMetadata, KafkaUnavailableError, read_range
from sluice.pipeline.options import Subscription
from sluice.pipeline.planning import DataLossError, OffsetRange
from sluice.pipeline.source import kafka_schema

SCHEMA = to_arrow_schema(kafka_schema(include_headers=True), timezone="UTC")


def test_read_range_yields_exactly_the_range_as_arrow(kafka: Any) -> None:
    topic = kafka.new_topic("range-read")
    kafka.produce(topic, [{"value": b"%d" % i, "headers": [("i", b"%d" % i)]} for i in range(30)])
    batches = list(read_range(kafka.bootstrap, {}, OffsetRange(topic, 0, 7, 19), SCHEMA, 10, True, max_batch_rows=5))
    assert all(batch.schema.equals(SCHEMA) for batch in batches)
    table = pa.Table.from_batches(batches)
    assert table.column("offset").to_pylist() == list(range(7, 19))
    assert table.column("value").to_pylist() == [b"%d" % i for i in range(7, 19)]
    assert table.column("headers").to_pylist()[0] == [{"key": "i", "value": b"7"}]


def test_reading_offsets_that_are_gone_is_data_loss(kafka: Any) -> None:
    topic = kafka.new_topic("gone")
    kafka.produce(topic, [{"value": b"x"} for _ in range(3)])
    gone = OffsetRange(topic, 0, 50, 60)
    with pytest.raises(DataLossError, match=r"offsets 50\.\.59 are gone \(the partition now ends at 3\)"):
        list(read_range(kafka.bootstrap, {}, gone, SCHEMA, 10, fail_on_data_loss=True))
    assert list(read_range(kafka.bootstrap, {}, gone, SCHEMA, 10, fail_on_data_loss=False)) == []


def test_metadata_lists_subscribed_partitions_and_watermarks(kafka: Any) -> None:
    topic = kafka.new_topic("meta", partitions=3)
    kafka.produce(topic, [{"value": b"x", "partition": 1} for _ in range(4)])
    metadata = KafkaMetadata(kafka.bootstrap, {}, 10)
    partitions, missing = metadata.subscribed_partitions(Subscription(topics=(topic, "absent-topic")))
    assert partitions == [(topic, 0), (topic, 1), (topic, 2)] and missing == ["absent-topic"]
    assert metadata.watermarks(partitions) == {(topic, 0): (0, 0), (topic, 1): (0, 4), (topic, 2): (0, 0)}
    with pytest.raises(KafkaUnavailableError, match="did not answer"):
        KafkaMetadata("127.0.0.1:1", {}, 1).topic_partitions()
