"""The archive job: Kafka offset ranges planned by Spark, written to Parquet by the executors.

Why not ``readStream.format("sluice") -> writeStream.format("parquet")``: every record would
then cross from the Python reader into the JVM as Arrow, be turned into a Spark row and be
written by Spark's Parquet writer; measured on a 2-core box that conversion and the JVM side
cost ~2.8 us of the ~4.7 us of CPU per 100-byte record. Here Spark plans and schedules, and
each task writes the Arrow batches it reads straight to Parquet with pyarrow (~1.6 us per
record in all), so records never become rows.

Exactly once, the way Spark's own file sink does it:

- the streaming query's source is the "sluice" source's offset planning with one row per
  offset range, so Spark's checkpoint logs the offsets of every micro-batch before it runs;
- ``foreachBatch`` runs one Spark task per range; each writes its Parquet files under
  ``topic=<t>/date=<yyyy-mm-dd>/`` (UTC day of the record timestamp) and returns their sizes;
- the driver then lists the batch's files in ``<dir>/_spark_metadata`` with Spark's own
  ``FileStreamSinkLog`` (the file sink's format and compaction), and a batch already listed
  there is skipped when Spark replays it after a crash.

Files of failed or replayed attempts are never listed, so Spark (and every job here, which read
through Spark) ignores them, exactly as with Spark's file sink.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from sluice.pipeline.formats import Codecs, column_types, decode_batch, resolve_codecs
from sluice.pipeline.options import SourceOptions, parse_source_options
from sluice.pipeline.planning import OffsetRange
from sluice.pipeline.schema import kafka_schema
from sluice.pipeline.source import KafkaRangePartition, KafkaStreamReader, read_offset_range

RANGES_FORMAT = "sluice-offset-ranges"
RANGE_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("start", LongType(), False),
        StructField("end", LongType(), False),
    ]
)
METADATA_DIR = "_spark_metadata"
# Hive's name for the partition directory of a null value, which Spark also writes and reads.
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# Spark writes ~128 MB row groups; a reader task buffers this much before writing one.
ROW_GROUP_ROWS = 1_000_000
ROW_GROUP_BYTES = 64 * 1024 * 1024
_MICROS_PER_DAY = 86_400_000_000
_EPOCH = date(1970, 1, 1)
# Stands for a null timestamp while grouping by day; no real day number is this small.
_NULL_DAY = np.iinfo(np.int64).min
# What Hadoop's local filesystem reports as the block size; only informative in the log.
_LOCAL_BLOCK_SIZE = 32 * 1024 * 1024


class OffsetRangeSource(DataSource):
    """The "sluice" source's streaming offsets, one row per planned offset range instead of records."""

    @classmethod
    def name(cls) -> str:
        return RANGES_FORMAT

    def schema(self) -> StructType:
        return RANGE_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return OffsetRangeReader(parse_source_options(self.options, "stream"))


class OffsetRangeReader(KafkaStreamReader):
    """KafkaStreamReader's planning (checkpointed offsets, limits, availableNow, data-loss checks)."""

    def read(self, partition: Any) -> Iterator[tuple[str, int, int, int]]:  # type: ignore[override]
        assert isinstance(partition, KafkaRangePartition)
        yield (partition.topic, partition.partition, partition.start, partition.end)


@dataclass(frozen=True)
class ArchiveTarget:
    """What an executor needs to archive a range: where to write and how to read (picklable)."""

    directory: str
    options: SourceOptions
    # Registry-framed key/value decoded to typed columns (keyFormat/valueFormat), else binary.
    codecs: Codecs = (None, None)

    def file_schema(self) -> pa.Schema:
        if self.codecs == (None, None):
            return _FILE_SCHEMA
        typed = to_arrow_schema(kafka_schema(True, *column_types(self.codecs)), timezone="UTC")
        return typed.remove(typed.get_field_index("topic"))


@dataclass(frozen=True)
class ArchivedFile:
    path: str  # file: URI, as Spark's sink log records it
    size: int
    modification_ms: int
    records: int


def archive_ranges(target: ArchiveTarget, rows: Iterable[Any]) -> Iterator[ArchivedFile]:
    """Executor side: read each offset range and write it as Parquet, one file per topic and day."""
    options = target.options
    file_schema = target.file_schema()
    typed_read_schema = _READ_SCHEMA if target.codecs == (None, None) else _with_topic(file_schema)
    for row in rows:
        offset_range = OffsetRange(row.topic, row.partition, row.start, row.end)
        batches = (
            decode_batch(batch, target.codecs, typed_read_schema)
            for batch in read_offset_range(options, offset_range, _READ_SCHEMA)
        )
        topic_dir = Path(target.directory) / f"topic={row.topic}"
        yield from _write_by_day(topic_dir, offset_range, batches, file_schema)


def _with_topic(file_schema: pa.Schema) -> pa.Schema:
    return file_schema.insert(_READ_SCHEMA.get_field_index("topic"), _READ_SCHEMA.field("topic"))


_READ_SCHEMA: pa.Schema = to_arrow_schema(kafka_schema(include_headers=True), timezone="UTC")
# The topic is a directory level, as with partitionBy("topic", "date"); the rest are file columns.
_FILE_SCHEMA: pa.Schema = _READ_SCHEMA.remove(_READ_SCHEMA.get_field_index("topic"))
_TIMESTAMP_COLUMN = _FILE_SCHEMA.get_field_index("timestamp")


class _DayFile:
    """One Parquet file being written, hidden under a dot name until it is complete."""

    def __init__(self, directory: Path, offset_range: OffsetRange, schema: pa.Schema) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.schema = schema
        name = f"part-{offset_range.partition:05d}-{offset_range.start}-{uuid.uuid4().hex}.snappy.parquet"
        self.path = directory / name
        self.partial_path = directory / f".{name}.inprogress"
        self.writer = pq.ParquetWriter(self.partial_path, schema, compression="snappy")
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = self.pending_bytes = self.records = 0

    def add(self, batch: pa.RecordBatch) -> None:
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        self.pending_bytes += batch.nbytes
        self.records += batch.num_rows
        if self.pending_rows >= ROW_GROUP_ROWS or self.pending_bytes >= ROW_GROUP_BYTES:
            self._write_row_group()

    def _write_row_group(self) -> None:
        if self.pending:
            self.writer.write_table(pa.Table.from_batches(self.pending, self.schema))
        self.pending, self.pending_rows, self.pending_bytes = [], 0, 0

    def finish(self) -> ArchivedFile:
        self._write_row_group()
        self.writer.close()
        with open(self.partial_path, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(self.partial_path, self.path)
        stat = self.path.stat()
        return ArchivedFile(
            self.path.resolve().as_uri(), stat.st_size, int(stat.st_mtime * 1000), self.records
        )


def _write_by_day(
    topic_dir: Path, offset_range: OffsetRange, batches: Iterable[pa.RecordBatch], schema: pa.Schema
) -> Iterator[ArchivedFile]:
    files: dict[str, _DayFile] = {}
    for batch in batches:
        data = batch.drop_columns(["topic"])
        for day, part in _split_by_day(data):
            day_file = files.get(day)
            if day_file is None:
                day_file = files[day] = _DayFile(topic_dir / f"date={day}", offset_range, schema)
            day_file.add(part)
    for day_file in files.values():
        yield day_file.finish()


def _split_by_day(batch: pa.RecordBatch) -> list[tuple[str, pa.RecordBatch]]:
    """The batch's rows grouped by UTC day of their timestamp (almost always a single day)."""
    timestamps = batch.column(_TIMESTAMP_COLUMN)
    days = np.floor_divide(timestamps.cast(pa.int64()).fill_null(0).to_numpy(), _MICROS_PER_DAY)
    if not timestamps.null_count and days.min() == days.max():
        return [(_day_name(int(days[0])), batch)]
    keys = np.where(timestamps.is_null().to_numpy(zero_copy_only=False), _NULL_DAY, days)
    return [
        (
            NULL_PARTITION if key == _NULL_DAY else _day_name(int(key)),
            batch.filter(pa.array(keys == key)),
        )
        for key in np.unique(keys)
    ]


def _day_name(days_since_epoch: int) -> str:
    return (_EPOCH + timedelta(days=days_since_epoch)).isoformat()


class SinkLog:
    """Spark's file sink metadata log (``_spark_metadata``), written through Spark's own class."""

    _CLASS_NAMES = (
        "org.apache.spark.sql.execution.streaming.sinks",  # Spark 4.1+
        "org.apache.spark.sql.execution.streaming",
    )

    def __init__(self, spark: SparkSession, directory: Path) -> None:
        jvm = spark._jvm  # type: ignore[attr-defined]
        self._gateway = spark.sparkContext._gateway  # type: ignore[attr-defined]
        package = self._spark_package(jvm)
        self._status_class = _jvm_member(jvm, f"{package}.SinkFileStatus")
        log_class = _jvm_member(jvm, f"{package}.FileStreamSinkLog")
        # A file: URI, like the files it lists, so a cluster whose default filesystem is not local
        # does not look for the log elsewhere.
        path = (directory / METADATA_DIR).as_uri()
        self._log = log_class(1, spark._jsparkSession, path, jvm.scala.Option.empty())  # type: ignore[attr-defined]

    @classmethod
    def _spark_package(cls, jvm: Any) -> str:
        for package in cls._CLASS_NAMES:
            if jvm.org.apache.spark.util.Utils.classIsLoadable(f"{package}.FileStreamSinkLog"):
                return package
        raise RuntimeError("this Spark version has no FileStreamSinkLog; the archive needs Spark 4")

    def has_batch(self, batch_id: int) -> bool:
        latest = self._log.getLatestBatchId()
        return bool(latest.isDefined()) and int(latest.get()) >= batch_id

    def add_batch(self, batch_id: int, files: Sequence[ArchivedFile]) -> None:
        statuses = self._gateway.new_array(self._status_class, len(files))
        for index, file in enumerate(files):
            statuses[index] = self._status_class(
                file.path, file.size, False, file.modification_ms, 1, _LOCAL_BLOCK_SIZE, "add"
            )
        if not self._log.add(batch_id, statuses):
            raise RuntimeError(f"batch {batch_id} is already in the archive's sink log")


def _jvm_member(jvm: Any, dotted: str) -> Any:
    member = jvm
    for part in dotted.split("."):
        member = getattr(member, part)
    return member


class ArchiveQuery:
    """A running archive: its StreamingQuery plus the records its committed batches wrote.

    Spark's own progress counts offset ranges here, not records; ``records_written`` counts
    records. Everything else is the StreamingQuery's (awaitTermination, stop, isActive, ...).
    """

    def __init__(self) -> None:
        self.query: StreamingQuery | None = None
        self.records_written = 0
        self.batches_written = 0

    def __getattr__(self, name: str) -> Any:
        if self.query is None:
            raise AttributeError(name)
        return getattr(self.query, name)


class _BatchWriter:
    """The foreachBatch function: one Spark job per micro-batch, then one entry in the sink log."""

    def __init__(self, spark: SparkSession, target: ArchiveTarget, progress: ArchiveQuery) -> None:
        self._log = SinkLog(spark, Path(target.directory))
        self._target = target
        self._progress = progress

    def __call__(self, ranges: DataFrame, batch_id: int) -> None:
        if self._log.has_batch(batch_id):
            return  # written and listed before a crash; Spark is only replaying its commit
        files = ranges.rdd.mapPartitions(partial(archive_ranges, self._target)).collect()
        self._log.add_batch(batch_id, files)
        self._progress.records_written += sum(f.records for f in files)
        self._progress.batches_written += 1


def start_archive_query(
    spark: SparkSession,
    reader_options: dict[str, str],
    to_dir: Path,
    checkpoint: Path,
    trigger: dict[str, Any],
    query_name: str,
) -> ArchiveQuery:
    spark.dataSource.register(OffsetRangeSource)
    options = parse_source_options(reader_options, "stream")
    directory = to_dir.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    progress = ArchiveQuery()
    target = ArchiveTarget(str(directory), options, resolve_codecs(options.formats))
    writer = _BatchWriter(spark, target, progress)
    stream = spark.readStream.format(RANGES_FORMAT).options(**reader_options).load()
    progress.query = (
        stream.writeStream.foreachBatch(writer)
        .option("checkpointLocation", str(checkpoint))
        .queryName(query_name)
        .trigger(**trigger)
        .start()
    )
    return progress
