"""Writing DataFrames to Kafka (batch ``df.write`` and streaming ``writeStream``).

Columns, as in Spark's Kafka sink: ``value`` (required, string or binary), ``key`` (string or
binary), ``topic`` (string; the ``topic`` option overrides it), ``headers``
(array<struct<key string, value binary>>) and ``partition`` (int). Other columns are ignored, so
a DataFrame read from Kafka can be written back as is. A ``timestamp`` column is sent as the
record's CreateTime only with option ``writeTimestamps=true``: replayed old timestamps would
otherwise make the broker's time-based retention delete the data right away.

Delivery is at-least-once: each task flushes its producer before reporting success, and a
failed task is retried by Spark, which may produce some records twice. Downstream consumers
that need exactly-once must deduplicate (for example on topic/partition/offset carried in a
header) or use an idempotent key.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, DataType, IntegerType, StringType, StructType, TimestampType

from sluice.pipeline.kafka_io import DeliveryTracker, KafkaMetadata
from sluice.pipeline.options import PipelineOptionError, SinkOptions
from sluice.pipeline.source import HEADERS_TYPE

_FLUSH_TIMEOUT_S = 300.0


@dataclass
class ProducedCount(WriterCommitMessage):
    """What one write task reports back to the driver."""

    records: int


def _check_column_types(schema: StructType, options: SinkOptions) -> None:
    types: dict[str, DataType] = {f.name: f.dataType for f in schema.fields}
    allowed: dict[str, tuple[DataType, ...]] = {
        "key": (StringType(), BinaryType()),
        "value": (StringType(), BinaryType()),
        "topic": (StringType(),),
        "partition": (IntegerType(),),
        "headers": (HEADERS_TYPE,),
    }
    if options.write_timestamps:
        allowed["timestamp"] = (TimestampType(),)
    if "value" not in types:
        raise PipelineOptionError(
            f"writing to Kafka needs a 'value' column (string or binary); the DataFrame has {sorted(types)}"
        )
    if options.topic is None and "topic" not in types:
        raise PipelineOptionError("writing to Kafka needs option 'topic' or a 'topic' column")
    if options.write_timestamps and "timestamp" not in types:
        raise PipelineOptionError("option writeTimestamps=true needs a 'timestamp' column")
    for name, accepted in allowed.items():
        if name in types and not any(_same_type(types[name], a) for a in accepted):
            wanted = " or ".join(a.simpleString() for a in accepted)
            raise PipelineOptionError(f"column '{name}' must be {wanted}, not {types[name].simpleString()}")


def _same_type(actual: DataType, expected: DataType) -> bool:
    # Nullability of nested fields does not matter for writing.
    return actual.simpleString() == expected.simpleString()


def _as_bytes(column: pa.Array | None) -> list[bytes | None]:
    if column is None:
        return []
    values = column.to_pylist()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [v.encode("utf-8") if v is not None else None for v in values]
    return values


class _KafkaWriting:
    """Shared by the batch and streaming sinks: validate up front, produce, flush, count."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        _check_column_types(schema, options)
        # Fail in the driver within the metadata timeout rather than in every task after minutes.
        metadata = KafkaMetadata(options.bootstrap_servers, options.kafka_config, options.metadata_timeout_s)
        metadata.topic_partitions()
        self.options = options
        self.column_names = set(schema.fieldNames())

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedCount:
        options = self.options
        tracker = DeliveryTracker(options.bootstrap_servers, options.kafka_config)
        produced = 0
        for batch in iterator:
            produced += self._produce_batch(tracker, batch)
        tracker.flush(_FLUSH_TIMEOUT_S)
        return ProducedCount(produced)

    def _produce_batch(self, tracker: DeliveryTracker, batch: pa.RecordBatch) -> int:
        count = batch.num_rows
        columns = set(batch.schema.names)

        def column(name: str) -> pa.Array | None:
            return batch.column(name) if name in columns else None

        values = _as_bytes(column("value"))
        keys = _as_bytes(column("key")) or [None] * count
        topics: list[Any] = (
            [self.options.topic] * count if self.options.topic else column("topic").to_pylist()  # type: ignore[union-attr]
        )
        headers_column = column("headers")
        headers: list[Any] = headers_column.to_pylist() if headers_column is not None else [None] * count
        partition_column = column("partition")
        partitions: list[Any] = partition_column.to_pylist() if partition_column is not None else [None] * count
        timestamps: list[Any] = [None] * count
        timestamp_column = column("timestamp")
        if self.options.write_timestamps and timestamp_column is not None:
            micros = timestamp_column.cast(pa.int64()).to_pylist()
            timestamps = [m // 1000 if m is not None else None for m in micros]
        for i in range(count):
            topic = topics[i]
            if topic is None:
                raise PipelineOptionError("a row has a null 'topic' and no 'topic' option is set")
            row_headers = headers[i]
            tracker.produce(
                topic,
                value=values[i],
                key=keys[i],
                headers=[(h["key"], h["value"]) for h in row_headers] if row_headers else None,
                partition=partitions[i],
                timestamp_ms=timestamps[i],
            )
        return count


class KafkaBatchWriter(_KafkaWriting, DataSourceArrowWriter):
    """df.write.format("sluice"): at-least-once, each task flushes before it reports success."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to finalize: records are visible as soon as each task has flushed."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Kafka cannot take records back; already produced ones stay (at-least-once)."""


class KafkaStreamWriter(_KafkaWriting, DataSourceStreamArrowWriter):
    """df.writeStream.format("sluice"): at-least-once per micro-batch."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to finalize: records are visible as soon as each task has flushed."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Kafka cannot take records back; already produced ones stay (at-least-once)."""
