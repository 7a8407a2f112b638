"""A Spark driver in its own process, for tests that kill it: an exactly-once topic-to-topic copy.

Usage: python eos_driver.py CONFIG_JSON. The config names the broker, the topics, the checkpoint,
the master, the guarantee, and the faults: a partition whose tasks sleep between Arrow batches
(so a kill can land while a task holds an open transaction), and a partition whose first attempt
fails once the sink has written some of its records (a task failure mid-batch). A Python worker hands its output
on when 64 KiB have piled up, so the tests use values big enough for one Arrow batch to pass. The process prints one
``BATCH <id> <rows>`` line per finished micro-batch and exits 0 when the copy reached the end.
With ``wait_for_go`` it prints ``READY`` once its session is up and starts the copy when a ``go`` line
comes on stdin: a test warms the next driver up while it waits to kill the current one.

Tests that kill nothing run the same copy (``start_copy``) in the SparkSession they share, which saves
a JVM start: everything the copy's transform refers to lives in this module, shipped to Python workers
by value (``cloudpickle.register_pickle_by_value``), since they cannot import the tests' directory.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any


def wait_until_written(config: dict[str, Any], target_partition: int) -> None:
    """Until the sink's open transaction holds records in the target partition (a fixed sleep
    is not enough on a loaded machine); this task is the only writer there."""
    from confluent_kafka import Consumer, TopicPartition

    bootstrap = config.get("sink_bootstrap", config["bootstrap"])
    # read_uncommitted: the high watermark, not the last stable offset, which the open
    # transaction holds back.
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "eos-driver-wait", "isolation.level": "read_uncommitted"}
    )
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            where = TopicPartition(config["target"], target_partition)
            if consumer.get_watermark_offsets(where, timeout=10)[1] > 0:
                return
            time.sleep(0.1)
    finally:
        consumer.close()


def slow_and_failing(config: dict[str, Any]) -> Any:
    slow_partition = config.get("slow_partition")
    slow_seconds = float(config.get("slow_seconds", 0))
    fail_partition = config.get("fail_partition")

    def transform(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context else -1
        for index, batch in enumerate(batches):
            yield batch
            # Batches travel on in 64 KiB writes, into and out of the JVM: the first is in the sink
            # once two more have followed it.
            if partition == fail_partition and context.attemptNumber() == 0 and index == 2:
                wait_until_written(config, batch.column("partition")[0].as_py())
                raise RuntimeError("injected task failure after the sink wrote some records")
            if partition == slow_partition:
                time.sleep(slow_seconds)

    return transform


def sql_conf(config: dict[str, Any]) -> dict[str, str]:
    """The session settings the copy needs, in its own driver or in a session shared with other tests."""
    return {
        "spark.sql.shuffle.partitions": "2",
        # Several Arrow batches per task, so a task can fail or sleep between two of them.
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(config.get("arrow_batch", 5)),
    }


def start_copy(spark: Any, config: dict[str, Any]) -> Any:
    """Start the copy (source topic, faulty transform, sink) in ``spark``; returns the StreamingQuery."""
    frame = (
        spark.readStream.format("sluice")
        .option("kafka.bootstrap.servers", config["bootstrap"])
        .option("subscribe", config["source"])
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(config.get("per_trigger", 1000000)))
        .load()
        .select("key", "value", "partition")
    )
    frame = frame.mapInArrow(slow_and_failing(config), frame.schema)
    return (
        frame.writeStream.format("sluice")
        .option("kafka.bootstrap.servers", config.get("sink_bootstrap", config["bootstrap"]))
        .option("topic", config["target"])
        .option("deliveryGuarantee", config.get("guarantee", "exactly-once"))
        .option("checkpointLocation", config["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )


def main() -> None:
    config = json.loads(sys.argv[1])
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from sluice.pipeline import register

    builder = (
        SparkSession.builder.master(config.get("master", "local[2,3]"))
        .appName("sluice-eos-driver")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    for name, value in {**sql_conf(config), **config.get("spark_conf", {})}.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    if config.get("wait_for_go"):
        # Warmed up (JVM, session, Python workers) while an earlier driver may still run the copy;
        # the test says when to start. Without its word (stdin closed) the driver never starts.
        print("READY", flush=True)
        if sys.stdin.readline().strip() != "go":
            spark.stop()
            return
    query = start_copy(spark, config)
    seen = -1
    while query.isActive:
        for progress in query.recentProgress:
            if progress["batchId"] > seen:
                seen = progress["batchId"]
                print(f"BATCH {seen} {progress['numInputRows']}", flush=True)
        time.sleep(0.2)
    query.awaitTermination()
    for progress in query.recentProgress:
        if progress["batchId"] > seen:
            seen = progress["batchId"]
            print(f"BATCH {seen} {progress['numInputRows']}", flush=True)
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
