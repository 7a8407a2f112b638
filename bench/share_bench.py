"""Share groups (KIP-932) against the classic consumer on the same sluice broker, in one run (issue #39).

No other broker here serves share groups (Tansu does not), so the peer is what a user would otherwise run:
confluent-kafka's classic Consumer reading the same partition of the same broker.

1. throughput: one ShareConsumer member (implicit acknowledgement) and one classic Consumer (assign from offset
   0) each read every record of a 1-partition topic of 100 B records: records/s, ratio share/classic, and the
   broker's CPU per record (per acknowledged record for the share member).
2. parallelism: 1 vs 4 share members on ONE partition, each record taking `--work-ms` of work (a sleep, as
   waiting on I/O would): wall time from the last produce to the last record done, and the speed-up.
3. redelivery: a member takes records and never acknowledges them; another polls; the time until the other
   gets them, against the group's lock duration (share.record.lock.duration.ms).

    .venv/bin/python bench/share_bench.py                 # 200,000 records, 2,000 with 1 ms of work
    .venv/bin/python bench/share_bench.py --records 50000 --rounds 1
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from statistics import median

from common import SluiceBroker
from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

VALUE = b"x" * 100


def group_configs(bootstrap: str, group: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)]).values():
        future.result(30)


def create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def produce(bootstrap: str, topic: str, count: int, per_batch: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 2_000_000})
    for index in range(count):
        producer.produce(topic, VALUE, partition=0)
        if per_batch and (index + 1) % per_batch == 0:
            producer.flush(30)
    producer.flush(60)


def read_classic(broker: SluiceBroker, topic: str, count: int) -> tuple[float, float]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "classic-bench",
                         "enable.auto.commit": False, "fetch.queue.backoff.ms": 10})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, t0, c0 = 0, time.perf_counter(), broker.cpu_seconds()
    while got < count:
        got += sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
    elapsed, cpu = time.perf_counter() - t0, broker.cpu_seconds() - c0
    consumer.close()
    return count / elapsed, cpu / count * 1e6


def read_share(broker: SluiceBroker, topic: str, group: str, count: int) -> tuple[float, float]:
    group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    consumer.subscribe([topic])
    got = 0
    while not got:  # the clock starts at the first record: joining is not reading
        got = sum(1 for m in consumer.poll(1.0) if m.error() is None)
    t0, c0 = time.perf_counter(), broker.cpu_seconds()
    while got < count:
        got += sum(1 for m in consumer.poll(1.0) if m.error() is None)
    consumer.commit_sync(30)  # the last poll's records accepted too: every record acknowledged
    elapsed, cpu = time.perf_counter() - t0, broker.cpu_seconds() - c0
    consumer.close()
    return count / elapsed, cpu / count * 1e6


def parallel(broker: SluiceBroker, topic: str, group: str, members: int, count: int, work_ms: float) -> float:
    """Seconds from the end of producing to the last of `count` records done by `members` members."""
    group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    done = [0]
    lock = threading.Lock()
    stop = threading.Event()
    consumers = [ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "max.poll.records": 10,
                                "fetch.wait.max.ms": 50}) for _ in range(members)]
    for consumer in consumers:
        consumer.subscribe([topic])

    def member(consumer: ShareConsumer) -> None:
        while not stop.is_set():
            for message in consumer.poll(0.1):
                if message.error() is None:
                    time.sleep(work_ms / 1000)
                    with lock:
                        done[0] += 1

    threads = [threading.Thread(target=member, args=(c,), daemon=True) for c in consumers]
    for thread in threads:
        thread.start()
    time.sleep(2.0)  # every member joined and holds its assignment before any record exists
    produce(broker.bootstrap, topic, count, per_batch=10)
    t0 = time.perf_counter()
    while done[0] < count:
        time.sleep(0.005)
    elapsed = time.perf_counter() - t0
    stop.set()
    for thread in threads:
        thread.join()
    for consumer in consumers:
        consumer.close()
    return elapsed


def redelivery(broker: SluiceBroker, topic: str, group: str, lock_ms: int) -> float:
    """Seconds from a member taking records (and never acknowledging them) to another member getting them."""
    group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=str(lock_ms))
    produce(broker.bootstrap, topic, 10)
    holder = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                            "share.acknowledgement.mode": "explicit"})
    holder.subscribe([topic])
    while not list(holder.poll(1.0)):
        pass
    taken = time.perf_counter()
    other = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "fetch.wait.max.ms": 100})
    other.subscribe([topic])
    while not [m for m in other.poll(0.1) if m.error() is None]:
        pass
    waited = time.perf_counter() - taken
    other.close()
    holder.close()
    return waited


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--parallel-records", type=int, default=2_000)
    parser.add_argument("--work-ms", type=float, default=1.0)
    parser.add_argument("--lock-ms", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    config = Path(tempfile.mkdtemp()) / "broker.yaml"
    config.write_text("group_share_min_record_lock_duration_ms: 1000\n")
    rows: dict[str, list[float]] = {}
    with SluiceBroker(extra_args=["--config", str(config)]) as broker:
        for rnd in range(args.rounds):
            topic = f"throughput-{rnd}"
            create(broker.bootstrap, topic)
            produce(broker.bootstrap, topic, args.records)
            classic_rate, classic_cpu = read_classic(broker, topic, args.records)
            share_rate, share_cpu = read_share(broker, topic, f"share-{rnd}", args.records)
            for name, value in (("classic rec/s", classic_rate), ("classic broker us/rec", classic_cpu),
                                ("share rec/s", share_rate), ("share broker us/acked rec", share_cpu),
                                ("share/classic", share_rate / classic_rate)):
                rows.setdefault(name, []).append(value)
            for members in (1, 4):
                topic = f"parallel-{rnd}-{members}"
                create(broker.bootstrap, topic)
                seconds = parallel(broker, topic, f"parallel-{rnd}-{members}", members, args.parallel_records,
                                   args.work_ms)
                rows.setdefault(f"{members} member(s) s", []).append(seconds)
            rows.setdefault("speed-up 4 vs 1", []).append(rows["1 member(s) s"][-1] / rows["4 member(s) s"][-1])
            topic = f"redelivery-{rnd}"
            create(broker.bootstrap, topic)
            waited = redelivery(broker, topic, f"redelivery-{rnd}", args.lock_ms)
            rows.setdefault("redelivery s", []).append(waited)
            rows.setdefault("redelivery - lock s", []).append(waited - args.lock_ms / 1000)
            print(f"round {rnd + 1}: " + ", ".join(f"{k} {v[-1]:.3g}" for k, v in rows.items()), flush=True)
    print(f"\n{args.records} records of 100 B, 1 partition; {args.parallel_records} records x {args.work_ms} ms "
          f"of work; lock {args.lock_ms} ms; median of {args.rounds} rounds (min-max)")
    for name, values in rows.items():
        print(f"  {name:28s} {median(values):12.3f}   ({min(values):.3f}-{max(values):.3f})")


if __name__ == "__main__":
    main()
