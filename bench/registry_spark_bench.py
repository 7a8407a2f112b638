"""Benchmark: Spark reading registry-framed Avro as typed columns vs reading the same topic's raw bytes.

In one run, on one topic of N Avro records (confluent-kafka's AvroSerializer, an 8-field order
record of ~60 bytes, framed with magic byte and schema id) on sluice's broker, with `sluice registry`
serving the schema:

(a) ``spark.read.format("sluice")`` -> ``write.format("noop")``: key and value as bytes,
(b) the same with ``valueFormat=avro``: the value decoded into a struct column,

printing records/s of each (medians of --rounds after a warm-up) and the ratio (b)/(a), target >= 0.50;
and, steadier on a shared machine, the Spark CPU (JVM, Python workers and planners, this driver) per
record of each and the rate ratio that CPU implies.
The Spark JVM and its Python workers are started and warmed on the topic before timing.

    .venv/bin/python bench/registry_spark_bench.py --messages 500000 --rounds 3

Wall-clock figures on a shared machine are noisy: compare medians of several rounds. Never run as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from typing import Any

from common import SluiceBroker, median, ratio
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pipeline_archive import cpu_by_group

from sluice.testing import RegistryProcess

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "quantity", "type": "int"},
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "paid", "type": "boolean"},
    ],
}


def fill(bootstrap: str, registry_url: str, topic: str, messages: int, partitions: int) -> int:
    """Produce ``messages`` framed orders; returns the payload bytes of one (for the report)."""
    import datetime

    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: a collected client cancels its futures
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(ORDER))
    context = SerializationContext(topic, MessageField.VALUE)
    placed = datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC)
    # A few distinct values, serialized once each: the bench measures reading, not producing.
    samples = [
        serializer(
            {
                "id": 10_000_000 + i,
                "customer": f"customer-{i:04d}",
                "amount": 12.5 * i,
                "quantity": i % 7,
                "placed": placed,
                "status": ["NEW", "PAID", "SHIPPED"][i % 3],
                "note": None if i % 2 else "leave at the door",
                "paid": bool(i % 2),
            },
            context,
        )
        for i in range(64)
    ]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(messages):
        while True:
            try:
                producer.produce(
                    topic, value=samples[i % len(samples)], key=b"%d" % i, partition=i % partitions
                )
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    return len(samples[0])


_SPARK_GROUPS = ("jvm", "python workers", "python planners", "driver")


def read(
    spark: Any, bootstrap: str, registry_url: str, topic: str, typed: bool
) -> tuple[float, dict[str, float]]:
    """(wall seconds, Spark CPU seconds by process group) of reading the whole topic into a no-op sink."""
    reader = (
        spark.read.format("sluice").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    )
    if typed:
        reader = reader.option("schemaRegistry", registry_url).option("valueFormat", "avro")
    before = cpu_by_group(None)
    started = time.perf_counter()
    reader.load().write.format("noop").mode("overwrite").save()
    wall = time.perf_counter() - started
    after = cpu_by_group(None)
    return wall, {g: after[g] - before[g] for g in _SPARK_GROUPS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from sluice.pipeline.jobs import build_spark_session

    runs: dict[str, list[tuple[float, dict[str, float]]]] = {"raw bytes": [], "typed avro": []}
    with SluiceBroker() as broker, RegistryProcess(broker.bootstrap) as registry:
        assert registry.url is not None
        topic = f"registry-bench-{uuid.uuid4().hex[:8]}"
        print(f"producing {args.messages} Avro orders to {topic} ...", flush=True)
        size = fill(broker.bootstrap, registry.url, topic, args.messages, args.partitions)
        spark = build_spark_session(args.master, "sluice-registry-bench")
        spark.sparkContext.setLogLevel("ERROR")
        for typed in (False, True):  # warm the JVM, the Python workers and the registry client
            read(spark, broker.bootstrap, registry.url, topic, typed)
        for round_number in range(args.rounds):
            print(f"round {round_number + 1}/{args.rounds} ...", flush=True)
            runs["raw bytes"].append(read(spark, broker.bootstrap, registry.url, topic, False))
            runs["typed avro"].append(read(spark, broker.bootstrap, registry.url, topic, True))
        spark.stop()

    print(
        f"\n{args.messages} records ({size} B framed Avro values), {args.partitions} partitions, {args.master}"
    )
    print(f"medians of {args.rounds}")
    rates: dict[str, float | None] = {}
    cpu_us: dict[str, float | None] = {}
    for name, timings in runs.items():
        wall = median(w for w, _ in timings)
        cpu = median(sum(c.values()) for _, c in timings)
        split = ", ".join(
            f"{g} {(median(c[g] for _, c in timings) or 0) / args.messages * 1e6:.2f}" for g in _SPARK_GROUPS
        )
        rates[name] = args.messages / wall if wall else None
        cpu_us[name] = cpu / args.messages * 1e6 if cpu else None
        print(
            f"{name:<12}{rates[name] or 0:>14,.0f} records/s{wall or 0:>9.2f} s{cpu_us[name] or 0:>9.2f} us CPU/record"
        )
        print(f"{'':<12}us CPU/record by process: {split}")
    print(
        f"typed avro / raw bytes = {ratio(rates['typed avro'], rates['raw bytes']) or 0:.2f} wall (target >= 0.50)"
    )
    by_cpu = ratio(cpu_us["raw bytes"], cpu_us["typed avro"]) or 0
    print(f"typed avro / raw bytes = {by_cpu:.2f} by Spark CPU per record")


if __name__ == "__main__":
    main()
