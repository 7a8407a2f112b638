"""Writing DataFrames to Kafka (batch ``df.write`` and streaming ``writeStream``).

Columns, as in Spark's Kafka sink: ``value`` (required, string or binary), ``key`` (string or
binary), ``topic`` (string; the ``topic`` option overrides it), ``headers``
(array<struct<key string, value binary>>) and ``partition`` (int). Other columns are ignored, so
a DataFrame read from Kafka can be written back as is. A ``timestamp`` column is sent as the
record's CreateTime only with option ``writeTimestamps=true``: replayed old timestamps would
otherwise make the broker's time-based retention delete the data right away.

Option ``deliveryGuarantee`` (Flink's name) picks how:

- ``at-least-once`` (default): each task flushes its producer before reporting success, and a
  failed task is retried by Spark, which may produce some records twice.
- ``exactly-once``: each task writes its share in one Kafka transaction (for streams with the
  marker "task k of batch B is done") and leaves it prepared; the driver's commit ends them
  all (see ``transactional.py``). Retries, speculative copies and batches replayed after a
  driver crash never make a record visible twice to read_committed readers, and a batch
  ``df.write`` is all-or-nothing.
"""

from __future__ import annotations

import logging
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

from sluice.pipeline.encoding import ColumnEncoder, writer_schema
from sluice.pipeline.kafka_io import DeliveryTracker, KafkaMetadata
from sluice.pipeline.options import PipelineOptionError, SinkOptions
from sluice.pipeline.schema import HEADERS_TYPE
from sluice.pipeline.transactional import (
    BATCH_ID_PROPERTY,
    QUERY_ID_PROPERTY,
    PreparedTransaction,
    TransactionalTask,
    abort_job,
    abort_prepared,
    batch_job_prefix,
    check_transactions_supported,
    commit_prepared,
    task_identity,
)

log = logging.getLogger(__name__)

_FLUSH_TIMEOUT_S = 300.0


@dataclass
class ProducedCount(WriterCommitMessage):
    """What one write task reports back to the driver."""

    records: int
    # Exactly-once streams: an earlier attempt of this task had already committed its records.
    skipped: bool = False
    # Exactly-once batch writes: the task's open transaction, for the driver to end.
    prepared: PreparedTransaction | None = None


def _check_column_types(schema: StructType, options: SinkOptions) -> None:
    types: dict[str, DataType] = {f.name: f.dataType for f in schema.fields}
    formats = options.formats
    # Registry-framed columns may be of any type the format can write (checked when deriving its schema).
    typed = {c.side for c in (formats.key, formats.value) if c is not None} if formats else set()
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
            f"writing to Kafka needs a 'value' column (string or binary, or typed with valueFormat); "
            f"the DataFrame has {sorted(types)}"
        )
    if options.topic is None and "topic" not in types:
        raise PipelineOptionError("writing to Kafka needs option 'topic' or a 'topic' column")
    if options.write_timestamps and "timestamp" not in types:
        raise PipelineOptionError("option writeTimestamps=true needs a 'timestamp' column")
    for name, accepted in allowed.items():
        if name in typed:
            continue
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

    # A batch job's transactional ids are unique to it; a stream's come from its query id.
    job_prefix: str | None = None

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        _check_column_types(schema, options)
        # Fail in the driver within the metadata timeout rather than in every task after minutes.
        metadata = KafkaMetadata(options.bootstrap_servers, options.kafka_config, options.metadata_timeout_s)
        metadata.topic_partitions()
        if options.exactly_once:
            check_transactions_supported(options, markers=self.job_prefix is None)
        self.options = options
        self.column_names = set(schema.fieldNames())
        self.encoders = _column_encoders(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedCount:
        if self.options.exactly_once:
            return self._write_transactionally(iterator)
        options = self.options
        tracker = DeliveryTracker(options.bootstrap_servers, options.kafka_config)
        produced = 0
        for batch in iterator:
            produced += self._produce_batch(tracker, batch)
        tracker.flush(_FLUSH_TIMEOUT_S)
        return ProducedCount(produced)

    def _write_transactionally(self, iterator: Iterator[pa.RecordBatch]) -> ProducedCount:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None, "write() runs in a Spark task"
        batches = (batch for batch in iterator if batch.num_rows)
        first = next(batches, None)
        if first is None:
            # Nothing to write: a replay of this task has nothing either (Spark replays a batch
            # with the offsets it logged), so no transaction is needed.
            return ProducedCount(0)
        prefix, batch_id = task_identity(
            {name: context.getLocalProperty(name) for name in (BATCH_ID_PROPERTY, QUERY_ID_PROPERTY)},
            self.job_prefix or self.options.transactional_id_prefix,
        )
        driver_commits = self.job_prefix is not None
        task = TransactionalTask(
            self.options, prefix, batch_id, context.partitionId(), markers=not driver_commits
        )
        try:
            if not task.begin():
                for _ in batches:
                    pass  # Spark expects the input consumed
                return ProducedCount(0, skipped=True)
            # A failure here leaves the transaction open: the retry's init_transactions (or, for
            # a batch job that fails, the driver's abort) fences and aborts it.
            produced = self._produce_batch(task.tracker, first)
            for batch in batches:
                produced += self._produce_batch(task.tracker, batch)
            # The driver commits (see TransactionalTask.prepare for why the task must not).
            return ProducedCount(produced, prepared=task.prepare())
        finally:
            task.close()

    def _produce_batch(self, tracker: DeliveryTracker, batch: pa.RecordBatch) -> int:
        count = batch.num_rows
        columns = set(batch.schema.names)

        def column(name: str) -> pa.Array | None:
            return batch.column(name) if name in columns else None

        values = self._bytes_of("value", column("value"))
        keys = self._bytes_of("key", column("key")) or [None] * count
        topics: list[Any] = (
            [self.options.topic] * count if self.options.topic else column("topic").to_pylist()  # type: ignore[union-attr]
        )
        headers_column = column("headers")
        headers: list[Any] = headers_column.to_pylist() if headers_column is not None else [None] * count
        partition_column = column("partition")
        partitions: list[Any] = (
            partition_column.to_pylist() if partition_column is not None else [None] * count
        )
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


    def _bytes_of(self, name: str, column: pa.Array | None) -> list[bytes | None]:
        encoder = self.encoders.get(name)
        if encoder is None or column is None:
            return _as_bytes(column)
        return encoder.encode(column)


def _column_encoders(options: SinkOptions, schema: StructType) -> dict[str, ColumnEncoder]:
    """Driver side: register (or look up) the schema of each registry-framed column."""
    formats = options.formats
    if formats is None:
        return {}
    types = {f.name: f.dataType for f in schema.fields}
    encoders: dict[str, ColumnEncoder] = {}
    for column in (formats.key, formats.value):
        if column is None or column.side not in types:
            continue
        registered = writer_schema(
            formats.connection,
            column.schema_type,
            column.subject,
            column.version,
            column.pinned,
            types[column.side],
            "topLevelRecord",
        )
        encoders[column.side] = ColumnEncoder(column.side, registered)
    return encoders


class KafkaBatchWriter(_KafkaWriting, DataSourceArrowWriter):
    """df.write.format("sluice"): at-least-once (tasks flush), or exactly-once all-or-nothing.

    With exactly-once every task leaves its transaction prepared and the driver commits them all
    once every task succeeded, or aborts them all.
    """

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        if options.exactly_once:
            self.job_prefix = batch_job_prefix(options.transactional_id_prefix)
        super().__init__(options, schema)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Exactly-once: end every task's transaction; at-least-once records are already visible."""
        if self.options.exactly_once:
            commit_prepared(self.options, _prepared(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Exactly-once: nothing of the job becomes visible. At-least-once records stay."""
        if self.options.exactly_once and self.job_prefix is not None:
            abort_job(self.options, self.job_prefix, len(messages), _prepared(messages))


def _prepared(messages: list[WriterCommitMessage | None]) -> list[PreparedTransaction]:
    return [m.prepared for m in messages if isinstance(m, ProducedCount) and m.prepared is not None]


class KafkaStreamWriter(_KafkaWriting, DataSourceStreamArrowWriter):
    """df.writeStream.format("sluice"): at-least-once or exactly-once per micro-batch."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Exactly-once: commit every task's prepared transaction (records and marker).

        Spark logs the batch only after this returns; a replay of a batch whose commit was cut
        short finds the markers of the shares committed and rewrites only the others.
        """
        if self.options.exactly_once:
            commit_prepared(self.options, _prepared(messages))
            counts = [m for m in messages if isinstance(m, ProducedCount)]
            log.info(
                "batch %d: %d records committed, %d task(s) already committed by an earlier attempt",
                batchId,
                sum(m.records for m in counts),
                sum(m.skipped for m in counts),
            )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Exactly-once: abort the prepared transactions now (a replay would fence them anyway)."""
        if self.options.exactly_once:
            abort_prepared(self.options, _prepared(messages))
