"""archive / replay / stats jobs end to end: topic -> Parquet -> topic, restarts, statistics, CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
from sluice.pipeline.jobs import (
    read_archive,
    read_topics,
    replay,
    start_archive,
    stats,
)

pytestmark = pytest.mark.spark

AWKWARD_BYTES = [b"", b"\x00\xff\xfe binary", "ünïcode".encode(), b"x" * 3000]


def _records(count: int, partitions: int) -> list[dict[str, Any]]:
    records = []
    for i in range(count):
        record: dict[str, Any] = {
            "value": AWKWARD_BYTES[i % len(AWKWARD_BYTES)] + b"%d" % i,
            "partition": i % partitions,
            "timestamp": 1_700_000_000_000 + i * 60_000,
        }
        if i % 5:
            record["key"] = b"key-%d" % (i % 7)
        if i % 3:
            record["headers"] = [("trace", b"\x01\x02%d" % i), ("null-header", None), ("trace", b"dup")]
        records.append(record)
    return records


def _by_partition(messages: list[Any]) -> dict[int, list[tuple[Any, ...]]]:
    grouped: dict[int, list[tuple[Any, ...]]] = {}
    for m in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        grouped.setdefault(m.partition(), []).append((m.key(), m.value(), m.headers()))
    return grouped


def test_topic_to_parquet_to_topic_is_byte_exact(spark: Any, kafka: Any, tmp_path: Path) -> None:
    source = kafka.new_topic("archive-src", partitions=2)
    target = kafka.new_topic("archive-dst", partitions=2)
    kafka.produce(source, _records(40, partitions=2))
    archive_dir = tmp_path / "archive"

    start_archive(spark, kafka.bootstrap, [source], archive_dir, available_now=True).awaitTermination(120)

    archived = read_archive(spark, archive_dir)
    assert archived.count() == 40
    dates = {r.date for r in archived.select("date").distinct().collect()}
    assert dates == {"2023-11-14"}
    assert (archive_dir / f"topic={source}" / "date=2023-11-14").is_dir()

    result = replay(spark, kafka.bootstrap, archive_dir, target, kafka_settings=kafka.producer_overrides)
    assert result.records == 40 and result.kept_partitions

    original = _by_partition(kafka.consume_all(source, partitions=2))
    replayed = _by_partition(kafka.consume_all(target, partitions=2))
    assert replayed == original


def test_archive_dates_are_utc_days_at_the_boundary(spark: Any, kafka: Any, tmp_path: Path) -> None:
    topic = kafka.new_topic("archive-days")
    midnight_ms = 1_700_006_400_000  # 2023-11-15T00:00:00Z
    kafka.produce(topic, [{"value": b"late", "timestamp": midnight_ms - 1}, {"value": b"early", "timestamp": midnight_ms}])
    archive_dir = tmp_path / "archive"

    start_archive(spark, kafka.bootstrap, [topic], archive_dir, available_now=True).awaitTermination(120)

    assert sorted(p.name for p in (archive_dir / f"topic={topic}").iterdir()) == ["date=2023-11-14", "date=2023-11-15"]
    rows = read_archive(spark, archive_dir).select("value", "date").collect()
    # The date stays a string column when read back, whatever type it was written from.
    assert sorted((bytes(r.value), r.date) for r in rows) == [(b"early", "2023-11-15"), (b"late", "2023-11-14")]


def test_replay_time_window(spark: Any, kafka: Any, tmp_path: Path) -> None:
    from datetime import UTC, datetime

    source = kafka.new_topic("window-src")
    target = kafka.new_topic("window-dst")
    kafka.produce(source, [{"value": b"%d" % i, "timestamp": 1_700_000_000_000 + i * 1000} for i in range(10)])
    start_archive(spark, kafka.bootstrap, source, tmp_path / "a", available_now=True).awaitTermination(120)
    since = datetime.fromtimestamp(1_700_000_003, tz=UTC)
    until = datetime.fromtimestamp(1_700_000_007, tz=UTC)
    result = replay(spark, kafka.bootstrap, tmp_path / "a", target, since, until, kafka_settings=kafka.producer_overrides)
    assert result.records == 4
    assert [m.value() for m in kafka.consume_all(target, partitions=1)] == [b"3", b"4", b"5", b"6"]


def test_archive_stopped_half_way_and_restarted_loses_and_duplicates_nothing(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    topic = kafka.new_topic("restart", partitions=2)
    kafka.produce(topic, [{"value": b"first-%d" % i, "partition": i % 2} for i in range(200)])
    archive_dir = tmp_path / "archive"

    query = start_archive(
        spark, kafka.bootstrap, topic, archive_dir, trigger_interval="0 seconds", max_offsets_per_trigger=25
    )
    deadline = time.monotonic() + 120
    while query.records_written < 50 and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()
    archived_before_restart = read_archive(spark, archive_dir).count()
    assert 0 < archived_before_restart < 200, "the archive should have been stopped half-way"

    kafka.produce(topic, [{"value": b"second-%d" % i, "partition": i % 2} for i in range(100)])
    start_archive(spark, kafka.bootstrap, topic, archive_dir, available_now=True).awaitTermination(120)

    rows = read_archive(spark, archive_dir).select("partition", "offset", "value").collect()
    assert len(rows) == 300
    assert {(r.partition, r.offset) for r in rows} == {(p, o) for p in range(2) for o in range(150)}
    values = sorted(bytes(r.value) for r in rows)
    assert values == sorted([b"first-%d" % i for i in range(200)] + [b"second-%d" % i for i in range(100)])


def _archived_offsets(spark: Any, archive_dir: Path) -> list[tuple[int, int]]:
    return sorted((r.partition, r.offset) for r in read_archive(spark, archive_dir).select("partition", "offset").collect())


def test_archive_of_many_micro_batches_survives_sink_log_compaction(spark: Any, kafka: Any, tmp_path: Path) -> None:
    # Spark's sink log compacts every 10th batch into one file; readers must still see every batch.
    topic = kafka.new_topic("many-batches", partitions=2)
    kafka.produce(topic, [{"value": b"%d" % i, "partition": i % 2} for i in range(130)])
    archive_dir = tmp_path / "archive"

    query = start_archive(spark, kafka.bootstrap, topic, archive_dir, available_now=True, max_offsets_per_trigger=10)
    query.awaitTermination(180)

    assert query.batches_written == 13 and query.records_written == 130
    assert (archive_dir / "_spark_metadata" / "9.compact").is_file()
    assert _archived_offsets(spark, archive_dir) == [(p, o) for p in range(2) for o in range(65)]


def _forget_log_entry(log_dir: Path, batch_id: int) -> None:
    """Remove one entry of a Spark metadata log as if it had never been written (with its checksum)."""
    (log_dir / str(batch_id)).unlink()
    (log_dir / f".{batch_id}.crc").unlink(missing_ok=True)


@pytest.mark.parametrize("listed", [True, False], ids=["files-listed", "files-not-listed"])
def test_archive_replaying_an_uncommitted_batch_duplicates_nothing(
    spark: Any, kafka: Any, tmp_path: Path, listed: bool
) -> None:
    # A driver that dies after the batch's files are written (and maybe listed) but before Spark
    # commits the batch: on restart Spark replays the batch from its offset log.
    topic = kafka.new_topic("replayed-batch", partitions=2)
    kafka.produce(topic, [{"value": b"%d" % i, "partition": i % 2} for i in range(40)])
    archive_dir = tmp_path / "archive"
    start_archive(spark, kafka.bootstrap, topic, archive_dir, available_now=True, max_offsets_per_trigger=20).awaitTermination(120)
    expected = [(p, o) for p in range(2) for o in range(20)]
    assert _archived_offsets(spark, archive_dir) == expected

    _forget_log_entry(archive_dir / "_checkpoint" / "commits", 1)
    if not listed:
        _forget_log_entry(archive_dir / "_spark_metadata", 1)
    files_before = set((archive_dir / f"topic={topic}").rglob("*.parquet"))
    query = start_archive(spark, kafka.bootstrap, topic, archive_dir, available_now=True)
    query.awaitTermination(120)

    assert (archive_dir / "_checkpoint" / "commits" / "1").is_file(), "Spark should have replayed batch 1"
    assert _archived_offsets(spark, archive_dir) == expected
    files_after = set((archive_dir / f"topic={topic}").rglob("*.parquet"))
    # A listed batch is not written again; an unlisted one is, and its first files stay unlisted.
    assert (files_after == files_before) is listed


def test_stats_per_topic_partition_and_hour(spark: Any, kafka: Any) -> None:
    topic = kafka.new_topic("stats", partitions=2)
    hour = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000
    records = [
        {"value": b"12345", "key": b"k%d" % (i % 3), "partition": i % 2, "timestamp": hour + (i // 4) * 3_600_000}
        for i in range(8)
    ]
    kafka.produce(topic, records)
    report = stats(read_topics(spark, kafka.bootstrap, topic))
    assert [(r.topic, r.messages, r.bytes, r.distinct_keys) for r in report.by_topic] == [(topic, 8, 8 * 7, 3)]
    assert [(r.partition, r.messages, r.bytes) for r in report.by_hour] == [
        (0, 2, 14), (0, 2, 14), (1, 2, 14), (1, 2, 14)
    ]
    assert len({r.hour for r in report.by_hour}) == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t", "bogus": "1"}, "unknown read option(s) for format 'sluice': bogus"),
        ({}, "one of the options subscribe, subscribePattern or assign is required"),
        ({"subscribe": "t", "subscribePattern": "t.*"}, "contradict each other"),
        ({"subscribe": "t", "startingOffsets": '{"t": {"0": '}, "startingOffsets is not valid JSON"),
        ({"subscribe": "no-such-topic"}, "not found on"),
        ({"subscribe": "t", "kafka.no.such.setting": "1"}, "invalid kafka.* option"),
    ],
)
def test_bad_options_fail_with_a_clear_message(spark: Any, kafka: Any, options: dict[str, str], message: str) -> None:
    reader = spark.read.format("sluice").option("kafka.bootstrap.servers", kafka.bootstrap).options(**options)
    with pytest.raises(Exception) as caught:
        reader.load().count()
    assert message in str(caught.value)


def test_unreachable_broker_fails_fast(spark: Any) -> None:
    started = time.monotonic()
    reader = (
        spark.read.format("sluice")
        .option("kafka.bootstrap.servers", "127.0.0.1:1")
        .option("subscribe", "t")
        .option("metadataTimeoutMs", "1500")
    )
    with pytest.raises(Exception, match=r"Kafka at 127\.0\.0\.1:1 did not answer a metadata request within 1\.5s"):
        reader.load().count()
    assert time.monotonic() - started < 30


def test_cli_archive_and_stats(kafka: Any, tmp_path: Path) -> None:
    topic = kafka.new_topic("cli")
    kafka.produce(topic, [{"value": b"v%d" % i, "key": b"k"} for i in range(12)])
    environment = {**os.environ, "COLUMNS": "200"}
    command = [sys.executable, "-c", "from sluice.cli.pipeline import app; app()"]
    common = ["--bootstrap", kafka.bootstrap, "--master", "local[1]"]
    archived = subprocess.run(
        [*command, "archive", "--topics", topic, "--to", str(tmp_path / "a"), "--available-now", *common],
        capture_output=True, text=True, timeout=600, env=environment,
    )
    assert archived.returncode == 0, archived.stderr[-3000:]
    assert "archived 12 records" in archived.stderr
    summary = subprocess.run(
        [*command, "stats", "--from", str(tmp_path / "a"), *common],
        capture_output=True, text=True, timeout=600, env=environment,
    )
    assert summary.returncode == 0, summary.stderr[-3000:]
    assert topic in summary.stdout and "12" in summary.stdout
    missing = subprocess.run(
        [*command, "replay", "--from", str(tmp_path / "a"), "--to-topic", "nowhere", *common],
        capture_output=True, text=True, timeout=600, env=environment,
    )
    assert missing.returncode == 2
    assert "topic 'nowhere' does not exist" in missing.stderr
