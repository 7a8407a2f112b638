"""The "sluice" Spark data source: Kafka topics as batch and streaming DataFrames (and sinks).

Usage::

    from sluice.pipeline import register
    register(spark)
    df = (spark.read.format("sluice")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events")
          .load())

The driver plans offset ranges; every Spark task reads one range straight from the broker with
its own consumer (assign + seek, no group), so readers carry only plain data when pickled.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from sluice.pipeline.formats import Codecs, column_types, decode_batch, resolve_codecs
from sluice.pipeline.kafka_io import KafkaMetadata, read_range
from sluice.pipeline.options import (
    PipelineOptionError,
    SourceOptions,
    parse_sink_options,
    parse_source_options,
    source_registry_formats,
)
from sluice.pipeline.planning import (
    DataLossError,
    OffsetRange,
    PartitionOffsets,
    TopicPartition,
    check_range_start,
    deserialize_offsets,
    plan_ranges,
    rate_limit,
    resolve_spec,
    serialize_offsets,
)
from sluice.pipeline.schema import kafka_schema
from sluice.pipeline.sink import KafkaBatchWriter, KafkaStreamWriter

log = logging.getLogger(__name__)

FORMAT_NAME = "sluice"
__all__ = ["FORMAT_NAME", "SluiceDataSource", "kafka_schema", "register"]


def register(spark: SparkSession) -> None:
    """Make ``format("sluice")`` available in this SparkSession."""
    spark.dataSource.register(SluiceDataSource)


class SluiceDataSource(DataSource):
    """Kafka as a Spark data source and sink, with the options of Spark's Kafka connector."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def _codecs(self) -> Codecs:
        # The registry is asked once per DataSource: schema() and reader() must agree on the types.
        if not hasattr(self, "_resolved_codecs"):
            self._resolved_codecs = resolve_codecs(source_registry_formats(self.options))
        return self._resolved_codecs

    def schema(self) -> StructType:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() in ("true", "1", "yes")
        return kafka_schema(include, *column_types(self._codecs()))

    def _checked_source_options(self, schema: StructType, mode: str) -> SourceOptions:
        options = parse_source_options(self.options, "batch" if mode == "batch" else "stream")
        expected = kafka_schema(options.include_headers, *column_types(self._codecs()))
        if schema != expected:
            raise PipelineOptionError(
                "format 'sluice' has a fixed schema (that of Spark's Kafka source, with key/value typed by "
                f"keyFormat/valueFormat); do not pass .schema(); expected {expected.simpleString()}"
            )
        return options

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(self._checked_source_options(schema, "batch"), self._codecs())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self._checked_source_options(schema, "stream"), self._codecs())

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return KafkaBatchWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return KafkaStreamWriter(parse_sink_options(self.options), schema)


@dataclass
class KafkaRangePartition(InputPartition):
    """One Spark task: offsets [start, end) of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int


def _to_input_partitions(ranges: Sequence[OffsetRange]) -> list[InputPartition]:
    return [KafkaRangePartition(r.topic, r.partition, r.start, r.end) for r in ranges]


class _RangeReading:
    """What batch and stream readers share: options, a lazily opened metadata client, read()."""

    def __init__(self, options: SourceOptions, codecs: Codecs = (None, None)) -> None:
        self.options = options
        self.codecs = codecs
        self.arrow_schema: pa.Schema = to_arrow_schema(kafka_schema(options.include_headers), timezone="UTC")
        self.typed_schema: pa.Schema = to_arrow_schema(
            kafka_schema(options.include_headers, *column_types(codecs)), timezone="UTC"
        )
        self._metadata_client: KafkaMetadata | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Kafka clients hold sockets and threads; executors open their own inside read().
        state = self.__dict__.copy()
        state["_metadata_client"] = None
        return state

    @property
    def metadata(self) -> KafkaMetadata:
        if self._metadata_client is None:
            self._metadata_client = KafkaMetadata(
                self.options.bootstrap_servers, self.options.kafka_config, self.options.metadata_timeout_s
            )
        return self._metadata_client

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaRangePartition)
        offset_range = OffsetRange(partition.topic, partition.partition, partition.start, partition.end)
        for batch in read_offset_range(self.options, offset_range, self.arrow_schema):
            yield decode_batch(batch, self.codecs, self.typed_schema)


def read_offset_range(
    options: SourceOptions, offset_range: OffsetRange, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Executor side: one planned range as Arrow batches, read the way `options` say."""
    return read_range(
        options.bootstrap_servers,
        options.kafka_config,
        offset_range,
        schema,
        options.poll_timeout_s,
        options.fail_on_data_loss,
    )


class KafkaBatchReader(_RangeReading, DataSourceReader):
    """spark.read: from startingOffsets up to endingOffsets as they are when the query is planned."""

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        partitions, missing = self.metadata.subscribed_partitions(options.subscription)
        if missing:
            raise PipelineOptionError(
                f"{options.subscription.describe()}: topic(s) or partition(s) not found on "
                f"{options.bootstrap_servers}: {', '.join(missing)}"
            )
        watermarks = self.metadata.watermarks(partitions)
        find = self.metadata.offsets_for_timestamp
        start = resolve_spec(options.starting, partitions, watermarks, find, "startingOffsets")
        end = resolve_spec(options.ending, partitions, watermarks, find, "endingOffsets")
        for tp in partitions:
            if end[tp] > watermarks[tp][1]:
                raise PipelineOptionError(
                    f"endingOffsets {end[tp]} for {tp[0]}-{tp[1]} is past the latest offset {watermarks[tp][1]}"
                )
            start[tp] = check_range_start(tp, start[tp], watermarks, options.fail_on_data_loss)
            if start[tp] > end[tp]:
                raise PipelineOptionError(
                    f"{tp[0]}-{tp[1]}: starting offset {start[tp]} is after ending offset {end[tp]}"
                )
        return _to_input_partitions(plan_ranges(start, end, options.min_partitions))


class KafkaStreamReader(_RangeReading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """spark.readStream: micro-batches of offset ranges; Spark's checkpoint is the source of truth."""

    def __init__(self, options: SourceOptions, codecs: Codecs = (None, None)) -> None:
        super().__init__(options, codecs)
        self._available_now_target: PartitionOffsets | None = None
        self._last_group_commit: PartitionOffsets = {}

    def _current_partitions(self) -> tuple[list[TopicPartition], dict[TopicPartition, tuple[int, int]]]:
        # Topics that do not exist yet are fine in streaming: they are picked up once created.
        partitions, _missing = self.metadata.subscribed_partitions(self.options.subscription)
        return partitions, self.metadata.watermarks(partitions)

    def initialOffset(self) -> dict:
        partitions, watermarks = self._current_partitions()
        start = resolve_spec(
            self.options.starting,
            partitions,
            watermarks,
            self.metadata.offsets_for_timestamp,
            "startingOffsets",
        )
        return serialize_offsets(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        partitions, watermarks = self._current_partitions()
        self._available_now_target = {tp: watermarks[tp][1] for tp in partitions}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        previous = deserialize_offsets(start)
        # Spark asks for the next batch only once the previous one is committed, so ``start`` is
        # done; commit() alone would miss the last batch of an availableNow run.
        self._commit_to_group(previous)
        partitions, watermarks = self._current_partitions()
        latest = {tp: watermarks[tp][1] for tp in partitions}
        if self._available_now_target is not None:
            # Partitions born after the target was taken contribute nothing to an availableNow run.
            latest = {
                tp: min(high, self._available_now_target.get(tp, watermarks[tp][0]))
                for tp, high in latest.items()
            }
        for tp in sorted(set(previous) - set(latest)):
            message = f"{tp[0]}-{tp[1]} was being read but no longer exists (topic deleted?)"
            if self.options.fail_on_data_loss:
                raise DataLossError(message + ". Set option failOnDataLoss=false to carry on without it.")
            log.warning("%s; dropping it (failOnDataLoss=false)", message)
        base: PartitionOffsets = {}
        for tp in latest:
            # New partitions are read from their beginning, as Spark's Kafka source does.
            wanted = previous.get(tp, watermarks[tp][0])
            base[tp] = check_range_start(tp, wanted, watermarks, self.options.fail_on_data_loss)
            latest[tp] = max(latest[tp], base[tp])
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(base, latest, limit.max_rows)
        return serialize_offsets(latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        previous = deserialize_offsets(start)
        target = deserialize_offsets(end)
        needs_earliest = [tp for tp in target if tp not in previous or target[tp] < previous[tp]]
        earliest = {tp: low for tp, (low, _) in self.metadata.watermarks(needs_earliest).items()}
        begin = {tp: earliest[tp] if tp in earliest else previous[tp] for tp in target}
        return _to_input_partitions(plan_ranges(begin, target, self.options.min_partitions))

    def commit(self, end: dict) -> None:
        self._commit_to_group(deserialize_offsets(end))

    def _commit_to_group(self, offsets: PartitionOffsets) -> None:
        if self.options.commit_group_id and offsets and offsets != self._last_group_commit:
            self.metadata.commit_to_group(self.options.commit_group_id, offsets)
            self._last_group_commit = offsets

    def stop(self) -> None:
        if self._metadata_client is not None:
            self._metadata_client.close()
            self._metadata_client = None
