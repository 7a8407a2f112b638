"""Many partitions on one broker: partitions -> RSS, CreateTopics time, one message to each partition
acknowledged and read back, and (sluice) the time until the port opens again after a clean stop and after
kill -9. Tansu (memory engine) runs the same creation and produce/read-back in the same run.

    ulimit -n 20000; .venv/bin/python bench/scale_bench.py --topics 5000          # 50,000 partitions
    .venv/bin/python bench/scale_bench.py --topics 500 --brokers sluice

Requests go through sluice's own wire client (100 topics per CreateTopics, 1,000 partitions per Produce
and Fetch), so the client costs little and the figures are the broker's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BROKERS, Broker, SluiceBroker, wait_port

from sluice.client.wire import WireClient
from sluice.protocol.records import Record, encode_batch

PARTITIONS = 10
TOPICS_PER_CREATE = 100
PARTITIONS_PER_REQUEST = 1000


def topic_names(count: int) -> list[str]:
    return [f"scale-{n:05d}" for n in range(count)]


def create_all(client: WireClient, topics: list[str]) -> list[str]:
    """Create every topic; returns the errors (topic: code message)."""
    cls = client.request_class("CreateTopics")
    errors = []
    for start in range(0, len(topics), TOPICS_PER_CREATE):
        chunk = topics[start : start + TOPICS_PER_CREATE]
        request = cls(
            timeout_ms=60_000,
            topics=[
                cls.CreatableTopic(name=t, num_partitions=PARTITIONS, replication_factor=1) for t in chunk
            ],
        )
        for result in client.call("CreateTopics", 5, request).topics:
            if result.error_code:
                errors.append(f"{result.name}: {result.error_code} {result.error_message}")
    return errors


def all_partitions(topics: list[str]) -> list[tuple[str, int]]:
    return [(t, p) for t in topics for p in range(PARTITIONS)]


def chunks(items: list[tuple[str, int]]) -> list[dict[str, list[int]]]:
    out = []
    for start in range(0, len(items), PARTITIONS_PER_REQUEST):
        by_topic: dict[str, list[int]] = {}
        for topic, partition in items[start : start + PARTITIONS_PER_REQUEST]:
            by_topic.setdefault(topic, []).append(partition)
        out.append(by_topic)
    return out


def produce_all(client: WireClient, items: list[tuple[str, int]], acks: int = 1) -> list[str]:
    """One record (its topic/partition) to each fresh partition; errors name the partitions it failed."""
    cls = client.request_class("Produce")
    errors = []
    now_ms = int(time.time() * 1000)
    for by_topic in chunks(items):
        data = [
            cls.TopicProduceData(
                name=topic,
                partition_data=[
                    cls.PartitionProduceData(
                        index=p,
                        records=encode_batch(
                            [Record(0, 0, None, f"{topic}/{p}".encode(), [])], base_timestamp=now_ms
                        ),
                    )
                    for p in parts
                ],
            )
            for topic, parts in by_topic.items()
        ]
        response = client.call("Produce", 8, cls(acks=acks, timeout_ms=60_000, topic_data=data))
        for topic in response.responses:
            for part in topic.partition_responses:
                if part.error_code or part.base_offset != 0:
                    errors.append(f"{topic.name}-{part.index}: {part.error_code} at {part.base_offset}")
    return errors


def read_back(client: WireClient, items: list[tuple[str, int]]) -> list[str]:
    """Fetch offset 0 of every partition; errors name the partitions whose record is missing or wrong."""
    cls = client.request_class("Fetch")
    errors = []
    for by_topic in chunks(items):
        topics = [
            cls.FetchTopic(
                topic=topic,
                partitions=[
                    cls.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=4096) for p in parts
                ],
            )
            for topic, parts in by_topic.items()
        ]
        request = cls(max_wait_ms=0, min_bytes=0, max_bytes=64 << 20, topics=topics)
        for topic in client.call("Fetch", 11, request).responses:
            for part in topic.partitions:
                expected = f"{topic.topic}/{part.partition_index}".encode()
                if part.error_code or expected not in bytes(part.records or b""):
                    errors.append(f"{topic.topic}-{part.partition_index}: {part.error_code}")
    return errors


class RestartableSluice(SluiceBroker):
    def __init__(self, data_root: str | None, data_dir: Path | None = None) -> None:
        super().__init__(data_root, keep_data=data_dir is not None)
        # A data dir kept from an earlier run (--data-dir): the broker starts on it and keeps it.
        self.fixed_data_dir = data_dir
        if data_dir is not None:
            data_dir.mkdir(parents=True, exist_ok=True)
            self.data_dir = data_dir

    def restart_on(self, data_dir: Path, port: int) -> None:
        """Start again on `data_dir` and `port` without waiting (the caller times the wait)."""
        self.port = port
        log = open(self.log_path or os.devnull, "ab")  # noqa: SIM115 - handed to the child
        self._proc = subprocess.Popen(
            self.command(str(data_dir)),
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log.close()


def restart_seconds(
    broker: RestartableSluice, how: signal.Signals, result: dict[str, Any], label: str
) -> float:
    """Stop the broker with `how` and start it on the same data dir and port; seconds until it listens
    (the stop's own seconds go into `result`)."""
    assert broker._proc is not None
    stopping = time.monotonic()
    broker._proc.send_signal(how)
    broker._proc.wait(900)
    result[f"stop_{label}_s"] = time.monotonic() - stopping
    broker.keep_data, data_dir = True, broker.data_dir
    port = broker.port
    assert data_dir is not None
    started = time.monotonic()
    broker.restart_on(data_dir, port)
    wait_port(broker.host, port, 120)
    return time.monotonic() - started


def run(broker: Broker, topics: int, *, reuse: bool = False) -> dict[str, Any]:
    names = topic_names(topics)
    items = all_partitions(names)
    result: dict[str, Any] = {"broker": broker.name, "partitions": len(items)}
    if reuse:
        made = items
        result["rss_started_mb"] = broker.rss_bytes() / 1e6
    else:
        made = create_and_fill(broker, names, items, result)
    return restarts(broker, made, result)


def create_and_fill(
    broker: Broker, names: list[str], items: list[tuple[str, int]], result: dict[str, Any]
) -> list[tuple[str, int]]:
    rss0 = broker.rss_bytes()
    with WireClient.connect(broker.bootstrap, timeout=300) as client:
        started = time.monotonic()
        errors = create_all(client, names)
        result["create_s"] = time.monotonic() - started
        result["create_errors"] = len(errors)
        result["first_create_error"] = errors[0] if errors else None
        time.sleep(1)  # let the broker settle before reading RSS
        result["rss_created_mb"] = broker.rss_bytes() / 1e6
        result["rss_per_partition_kb"] = (broker.rss_bytes() - rss0) / len(items) / 1e3
        made = (
            [item for item in items if not any(e.startswith(f"{item[0]}:") for e in errors[:1])]
            if errors
            else items
        )
        started = time.monotonic()
        produce_errors = produce_all(client, made)
        result["produce_s"] = time.monotonic() - started
        result["produce_errors"] = len(produce_errors)
        result["first_produce_error"] = produce_errors[0] if produce_errors else None
        result["rss_produced_mb"] = broker.rss_bytes() / 1e6
        read_errors = read_back(client, made)
        result["read_errors"] = len(read_errors)
    return made


def restarts(broker: Broker, made: list[tuple[str, int]], result: dict[str, Any]) -> dict[str, Any]:
    if isinstance(broker, RestartableSluice):
        result["restart_clean_s"] = restart_seconds(broker, signal.SIGTERM, result, "clean")
        started = time.monotonic()
        with WireClient.connect(broker.bootstrap, timeout=300) as client:
            result["read_errors_after_clean"] = len(read_back(client, made))
        result["read_all_after_clean_s"] = time.monotonic() - started
        result["restart_kill9_s"] = restart_seconds(broker, signal.SIGKILL, result, "kill9")
        started = time.monotonic()
        with WireClient.connect(broker.bootstrap, timeout=300) as client:
            result["read_errors_after_kill9"] = len(read_back(client, made))
        result["read_all_after_kill9_s"] = time.monotonic() - started
        result["rss_after_restart_mb"] = broker.rss_bytes() / 1e6
        broker.keep_data = broker.fixed_data_dir is not None
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topics", type=int, default=5000, help=f"topics of {PARTITIONS} partitions each")
    parser.add_argument("--brokers", default="sluice,tansu")
    parser.add_argument("--data-root", default=None, help="where sluice's data dir goes (default: $TMPDIR)")
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="sluice's data dir, kept after the run; when it already holds the topics (an earlier run with "
        "the same --topics), creation and produce are skipped and only the restarts are measured",
    )
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"open-file limit: soft {soft}, hard {hard}", file=sys.stderr)
    results = []
    for name in args.brokers.split(","):
        reuse = False
        if name == "sluice":
            reuse = args.data_dir is not None and (args.data_dir / "metadata.json").exists()
            broker: Broker = RestartableSluice(args.data_root, args.data_dir)
        else:
            broker = BROKERS[name]()
        with broker:
            result = run(broker, args.topics, reuse=reuse)
        print(json.dumps(result), file=sys.stderr, flush=True)
        results.append(result)
    print(f"\n{args.topics:,} topics x {PARTITIONS} partitions, open-file limit {soft}")
    keys = [
        "rss_started_mb",
        "create_s",
        "create_errors",
        "rss_created_mb",
        "rss_per_partition_kb",
        "produce_s",
        "produce_errors",
        "read_errors",
        "rss_produced_mb",
        "stop_clean_s",
        "restart_clean_s",
        "read_errors_after_clean",
        "read_all_after_clean_s",
        "restart_kill9_s",
        "read_errors_after_kill9",
        "read_all_after_kill9_s",
        "rss_after_restart_mb",
    ]
    print(f"{'':<26}" + "".join(f"{r['broker']:>14}" for r in results))
    for key in keys:
        cells = []
        for r in results:
            value = r.get(key)
            cells.append(
                f"{value:>14.2f}" if isinstance(value, float) else f"{'-' if value is None else value:>14}"
            )
        print(f"{key:<26}" + "".join(cells))
    for r in results:
        if r.get("first_create_error"):
            print(f"{r['broker']} first CreateTopics error: {r['first_create_error']}")
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
