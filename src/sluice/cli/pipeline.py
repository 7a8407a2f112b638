"""`sluice pipeline archive|replay|stats`: Spark jobs over Kafka topics.

pyspark is imported only when a command runs, so this sub-app can be mounted in installs
without the ``pipeline`` extra.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sluice.cli.common import err_console

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from rich.table import Table

    from sluice.pipeline.archive import ArchiveQuery

app = typer.Typer(
    help="Spark jobs over Kafka topics: archive to Parquet, replay an archive, topic statistics.",
    no_args_is_help=True,
)
console = err_console

Bootstrap = Annotated[
    str,
    typer.Option(
        "--bootstrap", "-b", envvar="SLUICE_BOOTSTRAP", help="Kafka bootstrap servers HOST:PORT[,...]"
    ),
]
Master = Annotated[str, typer.Option("--master", help="Spark master URL, e.g. local[*] or spark://host:7077")]
KafkaSettings = Annotated[
    list[str] | None,
    typer.Option("--kafka", "-k", "-X", help="extra librdkafka setting NAME=VALUE (repeatable)"),
]
_OUR_ERRORS = ("PipelineOptionError", "KafkaUnavailableError", "DataLossError", "ProduceFailedError")


def _kafka_settings(settings: list[str] | None) -> dict[str, str]:
    options: dict[str, str] = {}
    for setting in settings or []:
        name, sep, value = setting.partition("=")
        if not sep or not name.strip():
            raise typer.BadParameter(f"expected NAME=VALUE, got {setting!r}", param_hint="--kafka")
        options[name.strip()] = value
    return options


def _explain(error: BaseException) -> str:
    """The line that matters from an error that may have crossed Spark's JVM and Python workers."""
    text = str(error)
    for line in reversed(text.splitlines()):
        for name in _OUR_ERRORS:
            if f"{name}: " in line:
                return line.split(f"{name}: ", 1)[1]
    first_line = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return first_line


def _fail(error: BaseException) -> typer.Exit:
    console.print(f"[bold red]error:[/] {_explain(error)}")
    return typer.Exit(code=2)


def _session(master: str, app_name: str) -> SparkSession:
    from sluice.pipeline.jobs import build_spark_session

    with console.status(f"starting Spark ({master}); the first start can take minutes..."):
        return build_spark_session(master, app_name)


def _follow_stream(query: ArchiveQuery, available_now: bool) -> int:
    """Show progress until the archive ends (availableNow) or Ctrl-C; return the records written."""
    try:
        with console.status("archiving: waiting for the first micro-batch...") as status:
            started = time.monotonic()
            while query.isActive:
                if query.batches_written:
                    rate = query.records_written / max(time.monotonic() - started, 1e-9)
                    status.update(
                        f"archiving: {query.batches_written} batches, {query.records_written} records so far "
                        f"({rate:,.0f} records/s)"
                    )
                time.sleep(1.0)
    except KeyboardInterrupt:
        console.print("stopping (the checkpoint keeps the position; run again to continue)...")
        query.stop()
    if available_now or not query.isActive:
        query.awaitTermination()
    return query.records_written


def _registry_options(url: str | None, value_format: str | None, key_format: str | None) -> dict[str, str]:
    given = {"schemaRegistry": url, "valueFormat": value_format, "keyFormat": key_format}
    return {name: value for name, value in given.items() if value}


@app.command("archive")
def archive(
    topics: Annotated[str, typer.Option("--topics", help="comma-separated topics to archive")],
    to: Annotated[Path, typer.Option("--to", help="archive directory (Parquet by topic and date)")],
    checkpoint: Annotated[
        Path | None,
        typer.Option("--checkpoint", help="Spark checkpoint directory [default: <to>/_checkpoint]"),
    ] = None,
    available_now: Annotated[
        bool, typer.Option("--available-now", help="archive what is there now, then stop")
    ] = False,
    max_per_batch: Annotated[
        int | None, typer.Option("--max-per-batch", help="maxOffsetsPerTrigger: records per micro-batch")
    ] = None,
    interval: Annotated[
        str, typer.Option("--interval", help="micro-batch interval when running continuously")
    ] = "10 seconds",
    bootstrap: Bootstrap = "127.0.0.1:9092",
    master: Master = "local[*]",
    kafka: KafkaSettings = None,
    schema_registry: Annotated[
        str | None, typer.Option("--schema-registry", help="registry URL, for --value-format/--key-format")
    ] = None,
    value_format: Annotated[
        str | None,
        typer.Option("--value-format", help="avro|protobuf|json-schema: archive values as typed columns"),
    ] = None,
    key_format: Annotated[
        str | None, typer.Option("--key-format", help="avro|protobuf|json-schema: archive keys as typed columns")
    ] = None,
) -> None:
    """Stream topics into Parquet; restarts continue exactly where the checkpoint left off."""
    from sluice.pipeline.jobs import existing_topics, start_archive

    try:
        known = existing_topics(bootstrap, _kafka_settings(kafka))
    except Exception as error:
        raise _fail(error) from None
    absent = [t for t in topics.split(",") if t.strip() and t.strip() not in known]
    if absent:
        console.print(f"[yellow]not there yet (archived once created):[/] {', '.join(absent)}")
    spark = _session(master, "sluice-archive")
    try:
        query = start_archive(
            spark,
            bootstrap,
            topics,
            to,
            checkpoint,
            available_now,
            interval,
            max_per_batch,
            _kafka_settings(kafka),
            _registry_options(schema_registry, value_format, key_format),
        )
        rows = _follow_stream(query, available_now)
        if query.exception() is not None:
            raise _fail(query.exception())  # type: ignore[arg-type]
    except typer.Exit:
        raise
    except Exception as error:
        raise _fail(error) from None
    finally:
        spark.stop()
    console.print(f"[green]archived {rows} records[/] to {to}")


@app.command()
def replay(
    from_dir: Annotated[Path, typer.Option("--from", help="archive directory written by `archive`")],
    to_topic: Annotated[str, typer.Option("--to-topic", help="topic to produce to (must exist)")],
    since: Annotated[str | None, typer.Option("--since", help="ISO time or epoch ms, inclusive")] = None,
    until: Annotated[str | None, typer.Option("--until", help="ISO time or epoch ms, exclusive")] = None,
    topics: Annotated[str | None, typer.Option("--topics", help="only these archived topics")] = None,
    keep_timestamps: Annotated[
        bool, typer.Option("--keep-timestamps", help="send the archived timestamps as CreateTime")
    ] = False,
    bootstrap: Bootstrap = "127.0.0.1:9092",
    master: Master = "local[*]",
    kafka: KafkaSettings = None,
) -> None:
    """Produce archived records back to a topic, in offset order per partition (at-least-once)."""
    from sluice.pipeline.jobs import check_archive_dir, existing_topics, parse_time
    from sluice.pipeline.jobs import replay as run_replay

    # Cheap checks first: starting Spark can take minutes.
    try:
        since_time = parse_time(since) if since else None
        until_time = parse_time(until) if until else None
        check_archive_dir(from_dir)
        if to_topic not in existing_topics(bootstrap, _kafka_settings(kafka)):
            raise _fail(ValueError(f"topic {to_topic!r} does not exist on {bootstrap}; create it first"))
    except typer.Exit:
        raise
    except Exception as error:
        raise _fail(error) from None
    spark = _session(master, "sluice-replay")
    try:
        result = run_replay(
            spark,
            bootstrap,
            from_dir,
            to_topic,
            since_time,
            until_time,
            [t for t in topics.split(",") if t] if topics else None,
            keep_timestamps,
            _kafka_settings(kafka),
        )
    except Exception as error:
        raise _fail(error) from None
    finally:
        spark.stop()
    placement = "same partition numbers" if result.kept_partitions else "partitioned by key"
    console.print(f"[green]replayed {result.records} records[/] to {to_topic} ({placement})")


@app.command()
def stats(
    topics: Annotated[str | None, typer.Option("--topics", help="comma-separated topics to read")] = None,
    from_dir: Annotated[
        Path | None, typer.Option("--from", help="use an archive instead of the broker")
    ] = None,
    bootstrap: Bootstrap = "127.0.0.1:9092",
    master: Master = "local[*]",
    kafka: KafkaSettings = None,
) -> None:
    """Messages and bytes per topic, partition and hour; distinct keys per topic."""
    from sluice.pipeline.jobs import check_archive_dir, existing_topics, read_archive, read_topics
    from sluice.pipeline.jobs import stats as compute_stats

    if (topics is None) == (from_dir is None):
        raise typer.BadParameter("give exactly one of --topics or --from")
    try:
        if from_dir is not None:
            check_archive_dir(from_dir)
        else:
            existing_topics(bootstrap, _kafka_settings(kafka))
    except Exception as error:
        raise _fail(error) from None
    spark = _session(master, "sluice-stats")
    try:
        frame = (
            read_archive(spark, from_dir)
            if from_dir
            else read_topics(spark, bootstrap, topics or "", _kafka_settings(kafka))
        )
        report = compute_stats(frame)
    except Exception as error:
        raise _fail(error) from None
    finally:
        spark.stop()
    from rich.console import Console

    out = Console()
    out.print(_table("per topic", ["topic", "messages", "bytes", "distinct_keys"], report.by_topic))
    out.print(
        _table(
            "per partition and hour (UTC)",
            ["topic", "partition", "hour", "messages", "bytes"],
            report.by_hour,
        )
    )


def _table(title: str, columns: list[str], rows: list[Any]) -> Table:
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="left" if column in ("topic", "hour") else "right")
    for row in rows:
        table.add_row(*(str(row[c]) for c in columns))
    return table
