"""Range reads straight from the broker, without Spark."""

from __future__ import annotations

import gc
from datetime import UTC, datetime
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")
import pyarrow as pa
from confluent_kafka import KafkaError, Message
from pyspark.sql.pandas.types import to_arrow_schema

from sluice.pipeline.kafka_io import (
    READER_DEFAULTS,
    KafkaMetadata,
    KafkaUnavailableError,
    _consumer_config,
    _cyclic_gc_paused,
    _records_in_range,
    read_range,
    records_to_batch,
)
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


# Arrow batches are built from whole consume() results; these run without a broker, on Message
# objects made by hand (confluent-kafka >= 2.4 can construct them).


def _message(offset: int, **fields: Any) -> Message:
    return Message(topic="t", partition=3, offset=offset, **fields)


def test_batch_of_contiguous_records_without_headers() -> None:
    records = [_message(10 + i, value=b"v%d" % i, key=None if i % 2 else b"k", timestamp=(1, 1_000 + i)) for i in range(4)]
    batch = records_to_batch(records, "t", 3, SCHEMA)
    assert batch.schema.equals(SCHEMA)
    assert batch.to_pydict() == {
        "key": [b"k", None, b"k", None],
        "value": [b"v0", b"v1", b"v2", b"v3"],
        "topic": ["t"] * 4,
        "partition": [3] * 4,
        "offset": [10, 11, 12, 13],
        "timestamp": [datetime.fromtimestamp((1_000 + i) / 1000, UTC) for i in range(4)],
        "timestampType": [0] * 4,
        "headers": [None] * 4,
    }


def test_batch_with_offset_gaps_mixed_timestamps_and_headers() -> None:
    records = [
        _message(3, value=b"a", timestamp=(0, 0)),  # timestamp not available
        _message(7, value=None, timestamp=(2, 55), headers=[("h", None), ("i", b"1")]),  # LogAppendTime
        _message(8, value=b"c", timestamp=(1, 9), headers=[]),
    ]
    batch = records_to_batch(records, "t", 3, SCHEMA)
    assert batch.column("offset").to_pylist() == [3, 7, 8]
    assert batch.column("timestamp").to_pylist() == [None, datetime(1970, 1, 1, 0, 0, 0, 55_000, UTC),
                                                     datetime(1970, 1, 1, 0, 0, 0, 9_000, UTC)]
    assert batch.column("timestampType").to_pylist() == [-1, 1, 0]
    assert batch.column("headers").to_pylist() == [None, [{"key": "h", "value": None}, {"key": "i", "value": b"1"}], []]
    without_headers = to_arrow_schema(kafka_schema(include_headers=False), timezone="UTC")
    assert records_to_batch(records, "t", 3, without_headers).schema.equals(without_headers)


def test_consume_results_are_cut_at_the_range_end() -> None:
    messages = [_message(offset, value=b"x") for offset in range(5, 12)]
    records, next_offset = _records_in_range(None, messages, OffsetRange("t", 3, 5, 9), 5, 9, True)  # type: ignore[arg-type]
    assert [r.offset() for r in records] == [5, 6, 7, 8] and next_offset == 9
    records, next_offset = _records_in_range(None, messages[:3], OffsetRange("t", 3, 5, 9), 5, 9, True)  # type: ignore[arg-type]
    assert [r.offset() for r in records] == [5, 6, 7] and next_offset == 8
    # An end-of-partition event past the range end (transaction markers) finishes the range.
    eof = _message(10, error=KafkaError(KafkaError._PARTITION_EOF))
    records, next_offset = _records_in_range(None, [*messages[:2], eof], OffsetRange("t", 3, 5, 9), 5, 9, True)  # type: ignore[arg-type]
    assert [r.offset() for r in records] == [5, 6] and next_offset == 9


def test_readers_fetch_again_soon_unless_told_otherwise() -> None:
    assert _consumer_config("b:9092", {})["fetch.queue.backoff.ms"] == READER_DEFAULTS["fetch.queue.backoff.ms"]
    assert _consumer_config("b:9092", {"fetch.queue.backoff.ms": "500"})["fetch.queue.backoff.ms"] == "500"
    # What readers rely on cannot be overridden.
    assert _consumer_config("b:9092", {"enable.auto.commit": "true"})["enable.auto.commit"] is False


def test_cycle_collector_is_paused_only_while_a_batch_is_made(kafka: Any) -> None:
    topic = kafka.new_topic("gc-pause")
    kafka.produce(topic, [{"value": b"%d" % i} for i in range(12)])
    assert gc.isenabled()
    batches = 0
    for _batch in read_range(kafka.bootstrap, {}, OffsetRange(topic, 0, 0, 12), SCHEMA, 10, True, max_batch_rows=5):
        assert gc.isenabled()  # Spark's worker code runs here, between batches
        batches += 1
    assert batches >= 3 and gc.isenabled()
    with pytest.raises(RuntimeError), _cyclic_gc_paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with _cyclic_gc_paused():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()
