"""Benchmark: archive N x 100-byte Kafka messages to Parquet with Spark local[2], next to two ceilings.

(a) one confluent-kafka consumer reading the same topic straight from the broker, with the
    librdkafka settings the archive's readers use (how fast the broker and client can deliver),
(b) Spark writing the same number of similar rows from spark.range to Parquet, partitioned the
    same way (how fast Spark can write without any source),

all in the same run, printing rows/s, the archive's ratio to the slower ceiling, and where the
CPU goes (microseconds per row in the Spark JVM, the Python workers, this driver process and the
broker) plus a split of one reader's time outside Spark (waiting in consume() vs building Arrow).

    .venv/bin/python bench/pipeline_archive.py --messages 2000000
    .venv/bin/python bench/pipeline_archive.py --messages 200000 --rounds 3     # medians of 3
    .venv/bin/python bench/pipeline_archive.py --broker tansu                   # Tansu instead
    .venv/bin/python bench/pipeline_archive.py --bootstrap 127.0.0.1:9092       # an existing broker

Without --bootstrap a broker is started on a free loopback port: by default sluice's own
(`python -m sluice broker`, durable data dir, as the pipeline tests use), or Tansu (in-memory
storage; it needs one record per batch, see fill_topic, which makes it far costlier per record).
Wall-clock figures on a shared machine are noisy: use --rounds and compare medians; CPU per row
varies much less. Never run as a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import BROKERS, CLK_TCK, read_proc_stat
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

VALUE_BYTES = 100


def fill_topic(bootstrap: str, topic: str, messages: int, partitions: int, one_record_batches: bool) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
    settings: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    if one_record_batches:
        # Tansu 0.6 reports a wrong high watermark for multi-record batches.
        settings["batch.num.messages"] = 1
    producer = Producer(settings)
    value = b"v" * VALUE_BYTES
    started = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    return messages / (time.perf_counter() - started)


def consume_ceiling(bootstrap: str, topic: str, messages: int, partitions: int, settings: dict[str, Any]) -> None:
    consumer = Consumer(
        {**settings, "bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    received = 0
    while received < messages:
        for message in consumer.consume(10_000, timeout=1.0):
            if message.error() is None or message.error().code() != KafkaError._PARTITION_EOF:
                received += 1
    consumer.close()


# --- CPU per process group, from /proc -------------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, str, float, float]]:
    """pid -> (ppid, command, own CPU s, CPU s of reaped children) for every visible process."""
    table: dict[int, tuple[int, str, float, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            command, fields = read_proc_stat(f"/proc/{entry}/stat")
        except OSError:
            continue  # exited meanwhile
        own = (int(fields[11]) + int(fields[12])) / CLK_TCK
        reaped = (int(fields[13]) + int(fields[14])) / CLK_TCK
        table[int(entry)] = (int(fields[1]), command, own, reaped)
    return table


def _children(table: dict[int, tuple[int, str, float, float]]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in table.items():
        children.setdefault(ppid, []).append(pid)
    return children


def _descendants(children: dict[int, list[int]], root: int) -> list[int]:
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def cpu_by_group(broker_pid: int | None) -> dict[str, float]:
    """CPU seconds so far of: the Spark JVM, its Python workers (the executor side: the daemon and
    the workers it forks, exited ones included), the Python processes the JVM starts and reaps
    itself (driver side: the streaming source runner of each query, data source planning), this
    driver process (with its librdkafka threads and py4j) and the broker."""
    table = _proc_table()
    children = _children(table)
    me = os.getpid()
    groups = {"jvm": 0.0, "python workers": 0.0, "python planners": 0.0, "driver": table[me][2], "broker": 0.0}
    for pid in _descendants(children, me):
        _ppid, command, own, reaped = table[pid]
        if command != "java":
            continue
        groups["jvm"] += own
        groups["python planners"] += reaped  # the JVM's Python children that have exited
        for child in children.get(pid, []):
            # Executor-side daemons run pyspark.worker; planners run pyspark.sql.worker.<step> or
            # the streaming source runner.
            group = "python workers" if _is_executor_worker(child) else "python planners"
            groups[group] += sum(table[p][2] + table[p][3] for p in [child, *_descendants(children, child)])
    if broker_pid is not None and broker_pid in table:
        groups["broker"] = table[broker_pid][2] + table[broker_pid][3]
    return groups


def _is_executor_worker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return False
    return b"pyspark.sql.worker" not in b" ".join(args) and b"streaming" not in b" ".join(args)


@dataclass
class Phase:
    """Every round's rows/s and CPU microseconds per row (by group) of one timed phase."""

    rates: list[float] = field(default_factory=list)
    cpu_us: list[dict[str, float]] = field(default_factory=list)

    def run(self, rows: int, broker_pid: int | None, work: Callable[[], object]) -> object:
        before = cpu_by_group(broker_pid)
        started = time.perf_counter()
        result = work()
        elapsed = time.perf_counter() - started
        after = cpu_by_group(broker_pid)
        self.rates.append(rows / elapsed)
        self.cpu_us.append({group: (after[group] - before[group]) / rows * 1e6 for group in after})
        return result

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    def cpu(self, group: str) -> float:
        return statistics.median(row[group] for row in self.cpu_us)


def reader_split(bootstrap: str, topic: str, end: int) -> tuple[float, float, float, float]:
    """read_range over partition 0 outside Spark: (rows/s, seconds in consume(), seconds building
    Arrow batches, total seconds), to tell waiting for Kafka from per-row Python work."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from sluice.pipeline import kafka_io
    from sluice.pipeline.planning import OffsetRange
    from sluice.pipeline.schema import kafka_schema

    spent = {"consume": 0.0, "build": 0.0}
    original_consumer, original_build = kafka_io.Consumer, kafka_io.records_to_batch

    class TimedConsumer(original_consumer):  # type: ignore[misc, valid-type]
        def consume(self, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return super().consume(*args, **kwargs)
            finally:
                spent["consume"] += time.perf_counter() - started

    def timed_build(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original_build(*args, **kwargs)
        finally:
            spent["build"] += time.perf_counter() - started

    schema = to_arrow_schema(kafka_schema(include_headers=True), timezone="UTC")
    # pyarrow imports pandas on its first conversion of a Python list (~0.3 s, once per process;
    # Spark's reused workers pay it once): keep that out of the per-row figures.
    pa.array([None], pa.binary())
    kafka_io.Consumer, kafka_io.records_to_batch = TimedConsumer, timed_build  # type: ignore[misc]
    try:
        started = time.perf_counter()
        rows = sum(
            batch.num_rows
            for batch in kafka_io.read_range(bootstrap, {}, OffsetRange(topic, 0, 0, end), schema, 30, True)
        )
        total = time.perf_counter() - started
    finally:
        kafka_io.Consumer, kafka_io.records_to_batch = original_consumer, original_build  # type: ignore[misc]
    return rows / total, spent["consume"], spent["build"], total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1, help="repeat the three timed phases; medians are printed")
    parser.add_argument("--broker", choices=tuple(BROKERS), default="sluice", help="broker to start")
    parser.add_argument("--bootstrap", help="use this running broker instead of starting one")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import functions as F

    from sluice.pipeline.jobs import build_spark_session, read_archive, start_archive
    from sluice.pipeline.kafka_io import READER_DEFAULTS

    reader_settings = {name: value for name, value in READER_DEFAULTS.items() if name != "group.id"}
    one_record_batches = args.bootstrap is None and args.broker == "tansu"
    broker: AbstractContextManager[Any] = (
        _given(args.bootstrap) if args.bootstrap is not None else BROKERS[args.broker]()
    )
    work = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    consumer_defaults, consumer, spark_range, archive = Phase(), Phase(), Phase(), Phase()
    archived: list[int] = []
    batch_ms: list[dict[str, int]] = []
    try:
        with broker as running:
            bootstrap = running if isinstance(running, str) else running.bootstrap
            broker_pid = None if isinstance(running, str) else running.pid
            name = args.bootstrap or args.broker
            topic = f"bench-{uuid.uuid4().hex[:8]}"
            print(f"producing {args.messages} x {VALUE_BYTES} B to {topic} on {name} ({bootstrap}) ...", flush=True)
            produce_rate = fill_topic(bootstrap, topic, args.messages, args.partitions, one_record_batches)
            print(f"  produced at {produce_rate:,.0f} msg/s", flush=True)
            split = reader_split(bootstrap, topic, args.messages // args.partitions)

            spark = build_spark_session(args.master, "sluice-bench")
            spark.sparkContext.setLogLevel("ERROR")
            # Start the JVM and the Python workers (with their imports) and warm the JIT on every
            # code path before timing anything: an archive job runs for hours, not seconds.
            warmup_topic = f"{topic}-warmup"
            fill_topic(bootstrap, warmup_topic, 1000, args.partitions, one_record_batches)
            _range_rows(spark, F, 10_000, args.partitions, topic).write.partitionBy("topic", "date").parquet(
                str(work / "warmup-range")
            )
            start_archive(spark, bootstrap, warmup_topic, work / "warmup-archive", available_now=True).awaitTermination()

            for round_number in range(args.rounds):
                print(f"round {round_number + 1}/{args.rounds} ...", flush=True)
                consumer_defaults.run(
                    args.messages, broker_pid,
                    lambda: consume_ceiling(bootstrap, topic, args.messages, args.partitions, {}),
                )
                consumer.run(
                    args.messages, broker_pid,
                    lambda: consume_ceiling(bootstrap, topic, args.messages, args.partitions, reader_settings),
                )
                range_out, archive_out = work / f"range-{round_number}", work / f"archive-{round_number}"
                spark_range.run(
                    args.messages, broker_pid,
                    lambda: _range_rows(spark, F, args.messages, args.partitions, topic)
                    .write.partitionBy("topic", "date")
                    .parquet(str(range_out)),  # noqa: B023 - run() calls it at once
                )
                query = archive.run(
                    args.messages, broker_pid,
                    lambda: _finished(
                        start_archive(spark, bootstrap, topic, archive_out, available_now=True)  # noqa: B023
                    ),
                )
                batch_ms.append(_summed_durations(query))
                archived.append(read_archive(spark, archive_out).count())
                shutil.rmtree(range_out, ignore_errors=True)
                shutil.rmtree(archive_out, ignore_errors=True)
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    assert all(count == args.messages for count in archived), f"archived {archived} of {args.messages}"
    _report(args, name, consumer_defaults, consumer, spark_range, archive, batch_ms, split, reader_settings)


def _range_rows(spark: Any, F: Any, rows: int, partitions: int, topic: str) -> Any:
    """spark.range shaped like the archive's rows (same columns and partitioning)."""
    return spark.range(rows, numPartitions=partitions).select(
        F.lit(None).cast("binary").alias("key"),
        F.expr(f"cast(repeat('v', {VALUE_BYTES}) as binary)").alias("value"),
        F.lit(topic).alias("topic"),
        (F.col("id") % partitions).cast("int").alias("partition"),
        (F.col("id") / partitions).cast("long").alias("offset"),
        F.current_timestamp().alias("timestamp"),
        F.lit(0).alias("timestampType"),
        F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers"),
        F.to_date(F.current_timestamp()).alias("date"),
    )


def _finished(query: Any) -> Any:
    query.awaitTermination()
    return query


def _summed_durations(query: Any) -> dict[str, int]:
    """Spark's per-trigger durationMs summed over the micro-batches that read rows."""
    summed: dict[str, int] = {}
    for progress in query.recentProgress:
        if progress["numInputRows"]:
            for name, ms in progress["durationMs"].items():
                summed[name] = summed.get(name, 0) + int(ms)
    return summed


def _report(
    args: argparse.Namespace,
    broker_name: str,
    consumer_defaults: Phase,
    consumer: Phase,
    spark_range: Phase,
    archive: Phase,
    batch_ms: list[dict[str, int]],
    split: tuple[float, float, float, float],
    reader_settings: dict[str, Any],
) -> None:
    rounds = f"median of {args.rounds} rounds" if args.rounds > 1 else "1 round"
    ceiling = min(consumer.rate, spark_range.rate)
    slower = "a" if consumer.rate <= spark_range.rate else "b"
    settings = ", ".join(f"{k}={v}" for k, v in reader_settings.items())
    print(f"\n{args.messages} messages x {VALUE_BYTES} B, {args.partitions} partitions, {broker_name}, "
          f"Spark {args.master}, {rounds}")
    print(f"  (a) confluent-kafka consumer, broker -> Python : {consumer.rate:>12,.0f} rows/s   ({settings})")
    print(f"      same consumer, librdkafka defaults        : {consumer_defaults.rate:>12,.0f} rows/s   (not a ceiling)")
    print(f"  (b) Spark spark.range -> Parquet              : {spark_range.rate:>12,.0f} rows/s")
    print(f"  sluice archive, broker -> Parquet             : {archive.rate:>12,.0f} rows/s")
    print(f"  archive / slower ceiling ({slower})               : {archive.rate / ceiling:>12.2f}")
    if args.rounds > 1:
        print(f"  archive rows/s per round: {', '.join(f'{r:,.0f}' for r in archive.rates)}")

    print("\nCPU microseconds per row (all cores; medians):")
    groups = ["jvm", "python workers", "python planners", "driver", "broker"]
    print(f"  {'':26}" + "".join(f"{g:>16}" for g in groups) + f"{'total':>10}")
    for label, phase in (("(a) consumer", consumer), ("(b) spark.range -> Parquet", spark_range),
                         ("archive", archive)):
        cells = [phase.cpu(g) for g in groups]
        print(f"  {label:26}" + "".join(f"{c:>16.2f}" for c in cells) + f"{sum(cells):>10.2f}")

    seconds = args.messages / archive.rate
    trigger = statistics.median(ms.get("triggerExecution", 0) for ms in batch_ms) / 1000
    add_batch = statistics.median(ms.get("addBatch", 0) for ms in batch_ms) / 1000
    print(f"\narchive wall time {seconds:.2f} s: micro-batch execution (read + write) {add_batch:.2f} s, "
          f"other trigger work (offsets, WAL, commit) {trigger - add_batch:.2f} s, "
          f"query start/stop {seconds - trigger:.2f} s")
    rate, in_consume, in_build, total = split
    print(f"one reader outside Spark (partition 0): {rate:,.0f} rows/s; of {total:.2f} s, "
          f"{in_consume:.2f} s in consume() (librdkafka fetch + a Message object per record), "
          f"{in_build:.2f} s building Arrow batches, {total - in_consume - in_build:.2f} s other")


@contextmanager
def _given(bootstrap: str) -> Iterator[str]:
    yield bootstrap


if __name__ == "__main__":
    main()
