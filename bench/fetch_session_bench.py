"""The broker's CPU while a consumer of many idle partitions waits for data (KIP-227 fetch sessions).

    .venv/bin/python bench/fetch_session_bench.py                       # 5,000 partitions, 20 s idle
    .venv/bin/python bench/fetch_session_bench.py --src /work/main/src  # the same against another tree

Two consumers, each alone on a fresh broker with 500 topics x 10 empty partitions, all assigned:
- `session client`: sluice's wire client fetching as the Java consumer does (FetchSessionHandler): a full
  fetch at epoch 0, then incremental fetches (max.wait 500 ms) while the broker grants a session, and full
  fetches every time when it answers SessionId 0.
- `confluent-kafka`: librdkafka, which sends sessionless fetches (SessionId 0, epoch -1) whatever the broker
  supports: its cost shows what a fetch of every partition costs.
- `aiokafka` (`--clients aiokafka`): sessionless too, in Fetch v11 (not flexible).
The confluent-kafka consumer also runs against the peer broker (Tansu by default, `--peer`), and the ratio of
the two brokers' CPU is printed. Broker CPU comes from /proc/<pid>/stat over the idle window, after a warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioPartition
from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BROKERS, SluiceBroker, ratio

from sluice.client.wire import WireClient

PARTITIONS = 10
WAIT_MS = 500


def create_topics(bootstrap: str, topics: list[str]) -> None:
    with WireClient.connect(bootstrap, timeout=600) as client:
        cls = client.request_class("CreateTopics")
        for start in range(0, len(topics), 100):
            request = cls(
                timeout_ms=60_000,
                topics=[
                    cls.CreatableTopic(name=t, num_partitions=PARTITIONS, replication_factor=1)
                    for t in topics[start : start + 100]
                ],
            )
            for result in client.call("CreateTopics", 5, request).topics:
                assert result.error_code == 0, result.error_message


def session_client(bootstrap: str, topics: list[str], seconds: float, broker: SluiceBroker) -> dict[str, Any]:
    with WireClient.connect(bootstrap, timeout=60) as client:
        cls = client.request_class("Fetch")
        everything = [
            cls.FetchTopic(
                topic=t,
                partitions=[
                    cls.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                    for p in range(PARTITIONS)
                ],
            )
            for t in topics
        ]
        session_id, epoch, fetches, incremental = 0, 0, 0, 0

        def one() -> None:
            nonlocal session_id, epoch, fetches, incremental
            if session_id:
                request = cls(
                    max_wait_ms=WAIT_MS, min_bytes=1, session_id=session_id, session_epoch=epoch, topics=[]
                )
                incremental += 1
            else:
                request = cls(
                    max_wait_ms=WAIT_MS, min_bytes=1, session_id=0, session_epoch=0, topics=everything
                )
            response = client.call("Fetch", 12, request)
            fetches += 1
            if response.error_code or not response.session_id:
                session_id, epoch = 0, 0  # no session granted: full fetches from here on
            else:
                session_id, epoch = response.session_id, epoch + 1 if session_id else 1

        for _ in range(4):
            one()  # warm-up: the session exists before the meter starts
        fetches = incremental = 0
        cpu0, started = broker.cpu_seconds(), time.monotonic()
        while time.monotonic() - started < seconds:
            one()
        cpu, elapsed = broker.cpu_seconds() - cpu0, time.monotonic() - started
    return {
        "client": "session client",
        "fetches": fetches,
        "incremental": incremental,
        "broker_cpu_per_s": cpu / elapsed,
        "broker_ms_per_fetch": cpu / max(fetches, 1) * 1e3,
    }


def confluent_client(
    bootstrap: str, topics: list[str], seconds: float, broker: SluiceBroker
) -> dict[str, Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "idle",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": WAIT_MS,
            "log_level": 3,
        }
    )
    consumer.assign([TopicPartition(t, p, 0) for t in topics for p in range(PARTITIONS)])
    try:
        consumer.consume(1, 5.0)  # warm-up: connected and fetching
        cpu0, started = broker.cpu_seconds(), time.monotonic()
        while time.monotonic() - started < seconds:
            consumer.consume(100, 0.5)
        cpu, elapsed = broker.cpu_seconds() - cpu0, time.monotonic() - started
    finally:
        consumer.close()
    return {"client": "confluent-kafka", "broker_cpu_per_s": cpu / elapsed}


def aiokafka_client(
    bootstrap: str, topics: list[str], seconds: float, broker: SluiceBroker
) -> dict[str, Any]:
    async def idle() -> float:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=WAIT_MS)
        await consumer.start()
        try:
            consumer.assign([AioPartition(t, p) for t in topics for p in range(PARTITIONS)])
            await consumer.getmany(timeout_ms=5000)  # warm-up: connected and fetching
            cpu0, started = broker.cpu_seconds(), time.monotonic()
            while time.monotonic() - started < seconds:
                await consumer.getmany(timeout_ms=500)
            return (broker.cpu_seconds() - cpu0) / (time.monotonic() - started)
        finally:
            await consumer.stop()

    return {"client": "aiokafka", "broker_cpu_per_s": asyncio.run(idle())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topics", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--src", help="run the broker from this source tree (PYTHONPATH)")
    parser.add_argument("--clients", default="session,confluent", help="which consumers to run")
    parser.add_argument(
        "--peer",
        default="tansu",
        help="also run the confluent-kafka consumer against this broker ('' for none)",
    )
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    if args.src:
        os.environ["PYTHONPATH"] = args.src
    topics = [f"idle-{n:04d}" for n in range(args.topics)]
    results = []
    runs = {"session": session_client, "confluent": confluent_client, "aiokafka": aiokafka_client}
    pairs = [(name, SluiceBroker) for name in args.clients.split(",")]
    if args.peer and "confluent" in args.clients.split(","):
        pairs.append(("confluent", lambda: BROKERS[args.peer]()))
    for client, make in pairs:
        with make() as broker:
            create_topics(broker.bootstrap, topics)
            result = runs[client](broker.bootstrap, topics, args.seconds, broker)
        result["broker"] = broker.name
        result["partitions"] = len(topics) * PARTITIONS
        print(json.dumps(result), file=sys.stderr, flush=True)
        results.append(result)
    print(f"\n{len(topics) * PARTITIONS:,} idle partitions, fetch max.wait {WAIT_MS} ms, {args.seconds:g} s")
    for r in results:
        extra = f", {r['fetches']} fetches ({r['incremental']} incremental)" if "fetches" in r else ""
        print(
            f"{r['client']:<16} on {r['broker']:<7} broker CPU {r['broker_cpu_per_s'] * 100:6.2f}% of a core{extra}"
        )
    by_broker = {r["broker"]: r["broker_cpu_per_s"] for r in results if r["client"] == "confluent-kafka"}
    if args.peer in by_broker and "sluice" in by_broker:
        print(
            f"confluent-kafka idle: sluice / {args.peer} CPU = {ratio(by_broker['sluice'], by_broker[args.peer]):.2f}"
        )
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
