"""Benchmark: a streaming topic-to-topic copy, exactly-once vs at-least-once, vs a plain EOS loop.

In one run, on one source topic of N x 100-byte messages:

(a) Spark local[2], ``readStream.format("sluice") -> writeStream.format("sluice")``, availableNow,
    ``deliveryGuarantee=at-least-once`` (the default sink),
(b) the same query with ``deliveryGuarantee=exactly-once`` (one transaction per task and batch),
(c) a plain confluent-kafka loop, no Spark: consume -> transactional produce with
    ``send_offsets_to_transaction``, one commit every --loop-batch messages,

printing records/s, broker CPU per record (from /proc) and the ratio (b)/(a) (target >= 0.70).
The Spark JVM and Python workers are started and warmed on a small topic before timing.

    .venv/bin/python bench/pipeline_eos_bench.py --messages 200000 --rounds 3
    .venv/bin/python bench/pipeline_eos_bench.py --broker tansu     # Tansu's read_committed keeps aborted data

Wall-clock figures on a shared machine are noisy: compare medians of several rounds. Never run as a test.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from common import BROKERS, median, ratio
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

VALUE_BYTES = 100


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)


def fill(bootstrap: str, topic: str, messages: int, partitions: int) -> None:
    create(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, value=b"v" * VALUE_BYTES, key=b"%d" % i, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def count(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"count-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
        }
    )
    total = 0
    for p in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        total += high - low
    consumer.close()
    return total  # includes transaction markers; checked loosely below


def spark_copy(
    spark: Any, bootstrap: str, source: str, target: str, guarantee: str, checkpoint: Path
) -> None:
    frame = (
        spark.readStream.format("sluice")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .select("key", "value", "partition")
    )
    query = (
        frame.writeStream.format("sluice")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("deliveryGuarantee", guarantee)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None, query.exception()


def plain_loop(
    bootstrap: str, source: str, target: str, messages: int, partitions: int, per_txn: int
) -> None:
    """consume -> transactional produce, offsets in the transaction: the textbook EOS loop."""
    group = f"loop-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(source, p, 0) for p in range(partitions)])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": group, "linger.ms": 5})
    producer.init_transactions(30)
    done = 0
    producer.begin_transaction()
    in_txn = 0
    positions: dict[int, int] = {}
    while done < messages:
        for message in consumer.consume(10_000, timeout=1.0):
            if message.error() is not None:
                if message.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(message.error())
                continue
            while True:
                try:
                    producer.produce(
                        target, value=message.value(), key=message.key(), partition=message.partition()
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            positions[message.partition()] = message.offset() + 1
            done += 1
            in_txn += 1
            if in_txn >= per_txn or done == messages:
                offsets = [TopicPartition(source, p, o) for p, o in positions.items()]
                producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
                producer.commit_transaction(60)
                in_txn = 0
                if done < messages:
                    producer.begin_transaction()
    consumer.close()


def timed(broker: Any, action: Any) -> tuple[float, float | None]:
    cpu0 = broker.cpu_seconds() if broker is not None else None
    started = time.perf_counter()
    action()
    wall = time.perf_counter() - started
    cpu = broker.cpu_seconds() - cpu0 if broker is not None and cpu0 is not None else None
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--loop-batch", type=int, default=10_000, help="messages per transaction in (c)")
    parser.add_argument("--broker", choices=tuple(BROKERS), default="sluice")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from sluice.pipeline.jobs import build_spark_session

    work = Path(tempfile.mkdtemp(prefix="sluice-eos-bench-"))
    results: dict[str, list[tuple[float, float | None]]] = {
        "at-least-once": [],
        "exactly-once": [],
        "plain loop": [],
    }
    try:
        with BROKERS[args.broker]() as broker:
            bootstrap = broker.bootstrap
            source = f"eos-bench-{uuid.uuid4().hex[:8]}"
            print(f"producing {args.messages} x {VALUE_BYTES} B to {source} on {args.broker} ...", flush=True)
            fill(bootstrap, source, args.messages, args.partitions)
            spark = build_spark_session(args.master, "sluice-eos-bench")
            spark.sparkContext.setLogLevel("ERROR")
            warm = f"{source}-warm"
            fill(bootstrap, warm, 1000, args.partitions)
            for guarantee in ("at-least-once", "exactly-once"):
                create(bootstrap, f"{warm}-{guarantee}", args.partitions)
                spark_copy(
                    spark, bootstrap, warm, f"{warm}-{guarantee}", guarantee, work / f"warm-{guarantee}"
                )
            for round_number in range(args.rounds):
                print(f"round {round_number + 1}/{args.rounds} ...", flush=True)
                for guarantee in ("at-least-once", "exactly-once"):
                    target = f"{source}-{guarantee}-{round_number}"
                    create(bootstrap, target, args.partitions)
                    checkpoint = work / f"cp-{guarantee}-{round_number}"
                    copy = functools.partial(
                        spark_copy, spark, bootstrap, source, target, guarantee, checkpoint
                    )
                    results[guarantee].append(timed(broker, copy))
                    assert count(bootstrap, target, args.partitions) >= args.messages
                target = f"{source}-loop-{round_number}"
                create(bootstrap, target, args.partitions)
                loop = functools.partial(
                    plain_loop, bootstrap, source, target, args.messages, args.partitions, args.loop_batch
                )
                results["plain loop"].append(timed(broker, loop))
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"\n{args.messages} x {VALUE_BYTES} B, {args.partitions} partitions, {args.broker}, medians of {args.rounds}"
    )
    print(f"{'copy':<16}{'records/s':>12}{'wall s':>9}{'broker us/rec':>15}")
    rates: dict[str, float | None] = {}
    for name, runs in results.items():
        wall = median(w for w, _ in runs)
        cpu = median(c for _, c in runs)
        rates[name] = args.messages / wall if wall else None
        cpu_text = f"{cpu / args.messages * 1e6:.2f}" if cpu is not None else "-"
        print(f"{name:<16}{rates[name] or 0:>12,.0f}{wall or 0:>9.2f}{cpu_text:>15}")
    eos_vs_alo = ratio(rates["exactly-once"], rates["at-least-once"])
    eos_vs_loop = ratio(rates["exactly-once"], rates["plain loop"])
    print(f"exactly-once / at-least-once = {eos_vs_alo:.2f} (target >= 0.70)")
    print(f"exactly-once / plain confluent-kafka EOS loop = {eos_vs_loop:.2f}")


if __name__ == "__main__":
    main()
