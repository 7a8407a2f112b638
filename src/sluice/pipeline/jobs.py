"""Ready-made Spark jobs over Kafka: archive topics to Parquet, replay an archive, topic statistics.

Archive layout: Parquet files partitioned by ``topic`` and ``date`` (UTC day of the record
timestamp), holding every column of the Kafka schema including headers. Committed files are
listed in ``<dir>/_spark_metadata`` (Spark's file sink log) and the checkpoint records consumed
offsets, so a restarted archive neither loses nor duplicates records; always read the archive
back through Spark (or these jobs), which honours that metadata log, rather than globbing the
files.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from sluice.pipeline.archive import ArchiveQuery, start_archive_query
from sluice.pipeline.kafka_io import KafkaMetadata
from sluice.pipeline.options import PipelineOptionError
from sluice.pipeline.schema import kafka_schema
from sluice.pipeline.source import FORMAT_NAME, register

ARCHIVE_SCHEMA = StructType([*kafka_schema(include_headers=True).fields, StructField("date", StringType(), True)])
CHECKPOINT_DIR_NAME = "_checkpoint"


def build_spark_session(master: str = "local[*]", app_name: str = "sluice-pipeline") -> SparkSession:
    """A SparkSession with format("sluice") registered and UTC as the session time zone."""
    # Python workers must run this interpreter (it has sluice and confluent-kafka installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "true")
    )
    if master.startswith("local"):
        # A local driver bound to a non-loopback interface can miss its own executor heartbeats.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        builder = builder.config("spark.ui.enabled", "false")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


def parse_time(text: str) -> datetime:
    """ISO 8601 (naive means UTC) or milliseconds since the epoch."""
    from datetime import UTC

    stripped = text.strip()
    if stripped.isdigit():
        return datetime.fromtimestamp(int(stripped) / 1000, tz=UTC)
    try:
        parsed = datetime.fromisoformat(stripped)
    except ValueError:
        raise PipelineOptionError(
            f"cannot read time {text!r}: use ISO 8601 like 2024-05-01T12:00:00 or epoch milliseconds"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _as_options(kafka_settings: Mapping[str, str] | None) -> dict[str, str]:
    """librdkafka settings as data source options (``kafka.`` prefix)."""
    return {f"kafka.{name}": value for name, value in (kafka_settings or {}).items()}


def _topics_list(topics: Sequence[str] | str) -> list[str]:
    names = [t.strip() for t in (topics.split(",") if isinstance(topics, str) else topics) if t.strip()]
    if not names:
        raise PipelineOptionError("give at least one topic")
    return names


def start_archive(
    spark: SparkSession,
    bootstrap: str,
    topics: Sequence[str] | str,
    to_dir: str | Path,
    checkpoint_dir: str | Path | None = None,
    available_now: bool = False,
    trigger_interval: str = "10 seconds",
    max_offsets_per_trigger: int | None = None,
    kafka_settings: Mapping[str, str] | None = None,
    registry_options: Mapping[str, str] | None = None,
) -> ArchiveQuery:
    """Start streaming ``topics`` into Parquet under ``to_dir``; exactly once across restarts.

    See ``sluice.pipeline.archive`` for how: Spark plans and checkpoints offset ranges, tasks
    write Parquet themselves, the driver lists the files in ``_spark_metadata``.
    ``registry_options`` are the source's ``schemaRegistry``/``valueFormat``/``keyFormat``/...
    options: the archive then holds typed key/value columns (the subject's schema when the query
    starts) instead of bytes.
    """
    to_path = Path(to_dir)
    checkpoint = Path(checkpoint_dir) if checkpoint_dir is not None else to_path / CHECKPOINT_DIR_NAME
    reader_options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": ",".join(_topics_list(topics)),
        "startingOffsets": "earliest",
        "includeHeaders": "true",
        **_as_options(kafka_settings),
        **dict(registry_options or {}),
    }
    if max_offsets_per_trigger is not None:
        reader_options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    trigger: dict[str, Any] = {"availableNow": True} if available_now else {"processingTime": trigger_interval}
    query_name = f"sluice-archive-{'-'.join(_topics_list(topics))}"[:200]
    return start_archive_query(spark, reader_options, to_path, checkpoint, trigger, query_name)


def check_archive_dir(from_dir: str | Path) -> Path:
    path = Path(from_dir)
    if not (path / "_spark_metadata").is_dir():
        raise PipelineOptionError(f"{path} is not a sluice archive (no _spark_metadata directory)")
    return path


def existing_topics(bootstrap: str, kafka_settings: Mapping[str, str] | None, timeout_s: float = 10.0) -> dict[str, int]:
    """Partition count per topic; fails fast when the broker cannot be reached."""
    return KafkaMetadata(bootstrap, dict(kafka_settings or {}), timeout_s).topic_partitions()


def read_archive(spark: SparkSession, from_dir: str | Path) -> DataFrame:
    """An archive as a DataFrame with the Kafka schema plus ``date``; partition values stay strings.

    Key and value are binary, or the typed columns of an archive written with a registry format
    (their types are read from the files; versions that added fields are merged).
    """
    path = str(check_archive_dir(from_dir))
    found = {f.name: f.dataType for f in spark.read.option("mergeSchema", "true").parquet(path).schema.fields}
    if "value" not in found:
        return spark.read.schema(ARCHIVE_SCHEMA).parquet(path)  # an empty archive: no file yet
    typed = kafka_schema(include_headers=True, key_type=found["key"], value_type=found["value"])
    schema = StructType([*typed.fields, StructField("date", StringType(), True)])
    return spark.read.schema(schema).option("mergeSchema", "true").parquet(path)


@dataclass(frozen=True)
class ReplayResult:
    records: int
    kept_partitions: bool


def replay(
    spark: SparkSession,
    bootstrap: str,
    from_dir: str | Path,
    to_topic: str,
    since: datetime | None = None,
    until: datetime | None = None,
    topics: Sequence[str] | None = None,
    keep_timestamps: bool = False,
    kafka_settings: Mapping[str, str] | None = None,
    metadata_timeout_ms: int = 10_000,
) -> ReplayResult:
    """Produce archived records (``since`` <= timestamp < ``until``) to ``to_topic`` in offset order.

    When ``to_topic`` has at least as many partitions as the archive used, record from partition
    p goes to partition p, so the order of every partition is kept. Otherwise records are placed by
    key, which keeps the order per key.
    """
    frame = read_archive(spark, from_dir)
    if topics:
        frame = frame.where(F.col("topic").isin(list(topics)))
    if since is not None:
        frame = frame.where(F.col("timestamp") >= F.lit(since))
    if until is not None:
        frame = frame.where(F.col("timestamp") < F.lit(until))
    target_partitions = existing_topics(bootstrap, kafka_settings, metadata_timeout_ms / 1000).get(to_topic)
    if target_partitions is None:
        raise PipelineOptionError(f"topic {to_topic!r} does not exist on {bootstrap}; create it first")
    highest_partition = frame.agg(F.max("partition")).first()[0]  # type: ignore[index]
    if highest_partition is None:
        return ReplayResult(records=0, kept_partitions=True)
    keep_partitions = int(highest_partition) < target_partitions
    # One Spark task per source partition, producing in offset order, keeps partition order.
    ordered = frame.repartition("topic", "partition").sortWithinPartitions("topic", "partition", "offset")
    columns = ["key", "value", "headers"] + (["partition"] if keep_partitions else [])
    columns += ["timestamp"] if keep_timestamps else []
    records = frame.count()
    producer_settings = {
        # Retries must not reorder records, and keyed placement should match Java clients.
        "enable.idempotence": "true",
        "partitioner": "murmur2_random",
        **dict(kafka_settings or {}),
    }
    (
        ordered.select(*columns)
        .write.format(FORMAT_NAME)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", to_topic)
        .option("writeTimestamps", str(keep_timestamps).lower())
        .option("metadataTimeoutMs", str(metadata_timeout_ms))
        .options(**_as_options(producer_settings))
        .mode("append")
        .save()
    )
    return ReplayResult(records=records, kept_partitions=keep_partitions)


def read_topics(
    spark: SparkSession, bootstrap: str, topics: Sequence[str] | str, kafka_settings: Mapping[str, str] | None = None
) -> DataFrame:
    """Current contents of ``topics`` as a batch DataFrame (earliest to latest)."""
    return (
        spark.read.format(FORMAT_NAME)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(_topics_list(topics)))
        .options(**_as_options(kafka_settings))
        .load()
    )


@dataclass(frozen=True)
class TopicStats:
    by_topic: list[Row]
    by_hour: list[Row]


def _record_bytes() -> Any:
    return F.coalesce(F.octet_length("key"), F.lit(0)) + F.coalesce(F.octet_length("value"), F.lit(0))


def stats(frame: DataFrame) -> TopicStats:
    """Messages and bytes (key + value) per topic and per topic/partition/hour; distinct keys per topic."""
    sized = frame.withColumn("bytes", _record_bytes()).withColumn(
        "hour", F.date_format(F.date_trunc("hour", "timestamp"), "yyyy-MM-dd HH:00")
    )
    by_topic = (
        sized.groupBy("topic")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.sum("bytes").alias("bytes"),
            F.count_distinct("key").alias("distinct_keys"),
        )
        .orderBy("topic")
        .collect()
    )
    by_hour = (
        sized.groupBy("topic", "partition", "hour")
        .agg(F.count(F.lit(1)).alias("messages"), F.sum("bytes").alias("bytes"))
        .orderBy("topic", "partition", "hour")
        .collect()
    )
    return TopicStats(by_topic=by_topic, by_hour=by_hour)
