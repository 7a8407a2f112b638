"""Broker CPU per Produce request: 100 B messages, one per request (librdkafka with batch.num.messages=1,
linger.ms=0, acks=1, 5 in flight), sluice (fsync on and off) and Tansu side by side in one run.

    .venv/bin/python bench/request_cost_bench.py                    # 100,000 requests, 3 rounds
    .venv/bin/python bench/request_cost_bench.py --count 20000 --rounds 1 --latency
    .venv/bin/python bench/request_cost_bench.py --before-src /tmp/old/src     # before/after, alternated

The driver is bench/c/one_per_request.c, compiled into build/ with Debian's librdkafka headers
(`apt-get install librdkafka-dev`) and linked against the librdkafka bundled in the confluent-kafka wheel
(Tansu refuses the ApiVersions request of Debian's older librdkafka 2.0). Broker CPU comes from /proc/<pid>/stat (and schedstat), measured
around the send only. `--latency` adds broker_bench's acks=all end-to-end latency at 1,000 msg/s. `--before-src` also runs
each sluice broker from another source tree (rows named `...@before`), in the same rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BROKERS, REPO, Broker, median

SOURCE = REPO / "bench/c/one_per_request.c"
BINARY = REPO / "build/one_per_request"


def bundled_librdkafka() -> Path:
    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    if not found:
        raise FileNotFoundError(f"no librdkafka in {libs}")
    return found[0]


def build_driver() -> Path:
    if not BINARY.exists() or BINARY.stat().st_mtime < SOURCE.stat().st_mtime:
        BINARY.parent.mkdir(exist_ok=True)
        library = bundled_librdkafka()
        command = ["cc", "-O2", "-o", str(BINARY), str(SOURCE), str(library), f"-Wl,-rpath,{library.parent}"]
        subprocess.run(command, check=True)
    return BINARY


def create_topic(broker: Broker, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
    for future in admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30).values():
        future.result(30)


def run_requests(broker: Broker, count: int, in_flight: int, acks: str) -> dict[str, Any]:
    topic = "one-per-request"
    create_topic(broker, topic)
    # A warm-up outside the measurement: connections, metadata, first segment.
    subprocess.run(
        [str(BINARY), broker.bootstrap, topic, "2000", "100", acks, str(in_flight)],
        check=True,
        capture_output=True,
    )
    cpu0 = broker.cpu_seconds()
    done = subprocess.run(
        [str(BINARY), broker.bootstrap, topic, str(count), "100", acks, str(in_flight)],
        check=True,
        capture_output=True,
        text=True,
    )
    cpu = broker.cpu_seconds() - cpu0
    fields = dict(item.split("=") for item in done.stdout.split())
    seconds = float(fields["seconds"])
    return {
        "broker": broker.name,
        "requests": count,
        "seconds": seconds,
        "requests_per_s": count / seconds,
        "broker_us_per_request": cpu / count * 1e6,
    }


def run_latency(broker: Broker, rnd: int) -> dict[str, Any]:
    from broker_bench import run_latency as measure

    create_topic(broker, "latency")
    result = measure(broker, 1000.0, 10.0, rnd)
    return {
        "broker": broker.name,
        **{k: result.extra.get(k) for k in ("p50_ms", "p99_ms", "max_ms")},
        "error": result.error,
    }


@contextlib.contextmanager
def source_tree(src: str | None) -> Iterator[None]:
    """Brokers started in the block run sluice from `src` (None: this tree)."""
    if src is None:
        yield
        return
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = src
    try:
        yield
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved


@contextlib.contextmanager
def running(label: str, before_src: str | None) -> Iterator[Broker]:
    """The broker a row label names, started and stopped: `sluice-nosync@before` is sluice-nosync from the
    --before-src tree."""
    name, _, variant = label.partition("@")
    broker = BROKERS[name]()
    with source_tree(before_src if variant == "before" else None):
        broker.start()
    broker.name = label
    try:
        yield broker
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=5)
    parser.add_argument("--acks", default="1")
    parser.add_argument("--brokers", default="sluice,sluice-nosync,tansu")
    parser.add_argument("--latency", action="store_true", help="also acks=all latency at 1,000 msg/s")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--before-src", help="also run each sluice broker from this source tree (PYTHONPATH)")
    args = parser.parse_args(argv)
    build_driver()
    names = args.brokers.split(",")
    if args.before_src:
        names = [
            label for name in names for label in (name, f"{name}@before") if not label.startswith("tansu@")
        ]
    results: list[dict[str, Any]] = []
    latencies: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        for name in names:
            with running(name, args.before_src) as broker:
                result = run_requests(broker, args.count, args.in_flight, args.acks)
                print(json.dumps(result), file=sys.stderr, flush=True)
                results.append(result)
            if args.latency and name != "tansu":
                with running(name, args.before_src) as broker:
                    latency = run_latency(broker, rnd)
                    print(json.dumps(latency), file=sys.stderr, flush=True)
                    latencies.append(latency)
    print(
        f"\n{args.count:,} requests of one 100 B message, acks={args.acks}, {args.in_flight} in flight; "
        f"medians of {args.rounds} rounds"
    )
    print(f"{'broker':<22}{'us CPU/request':>16}{'requests/s':>14}{'vs tansu':>10}")
    per_broker = {
        name: (
            median(r["broker_us_per_request"] for r in results if r["broker"] == name),
            median(r["requests_per_s"] for r in results if r["broker"] == name),
        )
        for name in names
    }
    tansu = per_broker.get("tansu", (None, None))[0]
    for name, (us, rate) in per_broker.items():
        ratio = f"{us / tansu:.2f}" if us and tansu else "-"
        print(f"{name:<22}{us or 0:>16.1f}{rate or 0:>14,.0f}{ratio:>10}")
    for name in names:
        rows = [row for row in latencies if row["broker"] == name]
        if rows:
            p99 = median(row["p99_ms"] for row in rows)
            p50 = median(row["p50_ms"] for row in rows)
            print(f"{name}: acks=all end-to-end latency at 1,000 msg/s p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    if args.json_out:
        args.json_out.write_text(json.dumps({"requests": results, "latency": latencies}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
