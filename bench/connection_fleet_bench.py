"""Connection fleets (issue #42): what idle connections cost a broker, side by side with Tansu.

    ulimit -n 20000; .venv/bin/python bench/connection_fleet_bench.py                   # 10,000 idle
    .venv/bin/python bench/connection_fleet_bench.py --connections 2000 --rounds 1      # quick
    ulimit -n 20000; .venv/bin/python bench/connection_fleet_bench.py --partitions-check # 50,000 partitions

Each round starts sluice, then Tansu (memory engine), fresh, and for each:
- a live producer (confluent-kafka, acks=all, linger.ms=0, 100 B, paced at --rate msg/s) times each message
  from produce() to its delivery report, for --seconds with no other connection and --seconds with a fleet
  of --connections idle connections open (each did one ApiVersions round trip, then nothing, as a fleet of
  sidecars holds them), in --blocks alternating blocks (the fleet opened and closed each time), so a machine
  busy with other work loads both conditions alike: p50/p99 of each, and the p99 ratio;
- the broker's CPU per message in each condition, and per second with nothing to do, with and without the
  fleet (what holding it costs);
- its RSS growth per idle connection, --settle seconds after the fleet opened.
Both brokers run under the bench's open-file limit (`ulimit -n`; raised to fit --connections if it can be);
both get the same client. `--data-root /dev/shm` keeps sluice's fsync off a shared disk, whose stalls
otherwise dominate the p99 of both conditions.

--partitions-check (sluice only): 5,000 topics x 10 partitions, --connections idle connections, then one
record to each partition with acks=all and every one read back, with the broker's open-file limit set to
--open-files (20,000): nothing may fail for lack of descriptors (the broker log is searched for EMFILE),
and a new client still gets in. `--baseline-src DIR` also runs the broker from another checkout's src/
(e.g. `git archive <commit> src | tar -x -C DIR`) as "sluice-base", alternating with the others.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Broker, SluiceBroker, TansuBroker, median, percentile, ratio
from confluent_kafka import Producer
from scale_bench import all_partitions, create_all, produce_all, read_back, topic_names

from sluice.client.wire import WireClient
from sluice.testing import with_open_files

# Connections opened before their answers are read: below the smallest listen backlog (asyncio's and
# uvloop's 100), or the kernel drops SYNs and the client waits a second to try again.
BATCH = 50


def api_versions(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, -1)  # ApiVersions v0, no client id
    return struct.pack(">i", len(body)) + body


def read_answer(sock: socket.socket) -> None:
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk


def open_fleet(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` connections, each after one ApiVersions round trip."""
    fleet: list[socket.socket] = []
    while len(fleet) < count:
        batch = [socket.create_connection((host, port), 10) for _ in range(min(BATCH, count - len(fleet)))]
        for n, sock in enumerate(batch):
            sock.sendall(api_versions(len(fleet) + n))
        for sock in batch:
            read_answer(sock)
        fleet += batch
    return fleet


def close_fleet(fleet: list[socket.socket]) -> None:
    for sock in fleet:
        sock.close()


class LiveProducer:
    """confluent-kafka, acks=all, linger.ms=0, 100 B values: each message timed from produce() to its
    delivery report."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        self.failed: list[str] = []
        self.latencies: list[float] = []
        self.run(200.0, 0.1)  # warm up: metadata, the connection to the leader

    def _delivered(self, sent: float, err: Any, _msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.latencies.append(time.perf_counter() - sent)

    def run(self, rate: float, seconds: float) -> list[float]:
        """Messages paced at `rate` per second for `seconds`: their latencies in seconds."""
        self.latencies = []
        producer = self.producer
        payload = b"x" * 100
        start = time.perf_counter()
        for n in range(int(rate * seconds)):
            target = start + n / rate
            while (now := time.perf_counter()) < target:
                producer.poll(target - now)
            producer.produce(
                self.topic, payload, on_delivery=functools.partial(self._delivered, time.perf_counter())
            )
            producer.poll(0)
        producer.flush(30)
        if self.failed:
            raise RuntimeError(f"{len(self.failed)} messages failed: {self.failed[0]}")
        return self.latencies

    def close(self) -> None:
        self.producer.flush(30)


def create_topic(bootstrap: str, topic: str) -> None:
    with WireClient.connect(bootstrap, timeout=60) as client:
        cls = client.request_class("CreateTopics")
        request = cls(
            timeout_ms=30_000, topics=[cls.CreatableTopic(name=topic, num_partitions=1, replication_factor=1)]
        )
        client.call("CreateTopics", 5, request)
    time.sleep(0.5)


def fleet_round(
    broker: Broker, connections: int, rate: float, seconds: float, settle: float, blocks: int
) -> dict[str, Any]:
    """The live producer alone, then with the fleet open, in `blocks` alternating blocks (the fleet opened
    and closed each time), so a machine shared with other work loads both conditions alike."""
    result: dict[str, Any] = {"broker": broker.name, "connections": connections}
    create_topic(broker.bootstrap, "live")
    live = LiveProducer(broker.bootstrap, "live")
    alone: list[float] = []
    with_fleet: list[float] = []
    cpu_alone = cpu_fleet = 0.0
    closed_by_broker = 0
    for block in range(blocks):
        cpu0 = broker.cpu_seconds()
        alone += live.run(rate, seconds / blocks)
        cpu_alone += broker.cpu_seconds() - cpu0
        if block == 0:
            time.sleep(settle)
            quiet_cpu0, quiet_from = broker.cpu_seconds(), time.monotonic()
            time.sleep(settle)  # nothing at all: the broker's own timers
            spent = broker.cpu_seconds() - quiet_cpu0
            result["idle_cpu_ms_per_s_alone"] = spent / (time.monotonic() - quiet_from) * 1000
            rss0 = broker.rss_bytes()
        started = time.monotonic()
        fleet = open_fleet(broker.host, broker.port, connections)
        try:
            if block == 0:
                result["open_s"] = time.monotonic() - started
                time.sleep(settle)
                result["kib_per_connection"] = (broker.rss_bytes() - rss0) / connections / 1024
                quiet_cpu0, quiet_from = broker.cpu_seconds(), time.monotonic()
                time.sleep(settle)  # nothing but the fleet: what holding it costs the broker per second
                spent = broker.cpu_seconds() - quiet_cpu0
                result["idle_cpu_ms_per_s"] = spent / (time.monotonic() - quiet_from) * 1000
            else:
                time.sleep(1.5)  # past a sweep: the fleet's receive buffers are given back
            cpu0 = broker.cpu_seconds()
            with_fleet += live.run(rate, seconds / blocks)
            cpu_fleet += broker.cpu_seconds() - cpu0
            closed_by_broker += sum(1 for sock in fleet if _closed(sock))
        finally:
            close_fleet(fleet)
        time.sleep(1.0)  # the broker closes its side
    live.close()
    alone.sort()
    with_fleet.sort()
    result["us_per_msg_alone"] = cpu_alone / len(alone) * 1e6
    result["us_per_msg_fleet"] = cpu_fleet / len(with_fleet) * 1e6
    result["p50_alone_ms"] = percentile(alone, 50) * 1000
    result["p99_alone_ms"] = percentile(alone, 99) * 1000
    result["p50_fleet_ms"] = percentile(with_fleet, 50) * 1000
    result["p99_fleet_ms"] = percentile(with_fleet, 99) * 1000
    result["p99_ratio"] = result["p99_fleet_ms"] / result["p99_alone_ms"]
    result["fleet_closed_by_broker"] = closed_by_broker
    return result


def _closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


class BaselineSluice(SluiceBroker):
    """sluice run from another checkout's src/ (PYTHONPATH), e.g. the commit before a change."""

    name = "sluice-base"

    def __init__(self, src: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.src = src

    def start(self, timeout: float = 60.0) -> SluiceBroker:
        # Before issue #42 the default max_connections (1,000) refused a fleet outright.
        config = Path(tempfile.mkstemp(prefix="sluice-base-", suffix=".yaml")[1])
        config.write_text("max_connections: 1000000\n")
        self.extra_args = ["--config", str(config)]
        previous = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = str(self.src)
        try:
            return super().start(timeout)
        finally:
            if previous is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = previous


# --- the 50,000-partition check ----------------------------------------------------------------------


class LimitedSluice(SluiceBroker):
    """sluice whose open-file limit (soft and hard) is `open_files`, set before it starts."""

    def __init__(self, open_files: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.open_files = open_files

    def command(self, data_arg: str) -> list[str]:
        return with_open_files(self.open_files, super().command(data_arg))


def partitions_check(args: argparse.Namespace) -> dict[str, Any]:
    log_path = Path(tempfile.mkstemp(prefix="sluice-fleet-", suffix=".log")[1])
    broker = LimitedSluice(args.open_files, data_root=args.data_root, log_path=log_path)
    result: dict[str, Any] = {"open_files": args.open_files, "connections": args.connections}
    with broker:
        names = topic_names(args.topics)
        items = all_partitions(names)
        result["partitions"] = len(items)
        with WireClient.connect(broker.bootstrap, timeout=600) as client:
            started = time.monotonic()
            result["create_errors"] = len(create_all(client, names))
            result["create_s"] = time.monotonic() - started
        fleet = open_fleet(broker.host, broker.port, args.connections)
        try:
            with WireClient.connect(broker.bootstrap, timeout=600) as client:
                started = time.monotonic()
                errors = produce_all(client, items, acks=-1)
                result["produce_s"] = time.monotonic() - started
                result["acknowledged"] = len(items) - len(errors)
                result["produce_errors"] = len(errors)
                result["first_produce_error"] = errors[0] if errors else None
                started = time.monotonic()
                result["read_errors"] = len(read_back(client, items))
                result["read_s"] = time.monotonic() - started
            result["fleet_closed_by_broker"] = sum(1 for sock in fleet if _closed(sock))
            # One more client on top of the fleet and the 50,000 partitions.
            late = open_fleet(broker.host, broker.port, 1)
            close_fleet(late)
            result["new_client_served"] = True
            result["rss_mb"] = broker.rss_bytes() / 1e6
        finally:
            close_fleet(fleet)
    text = log_path.read_text(errors="replace")
    result["emfile_lines"] = sum(
        1
        for line in text.splitlines()
        if "Too many open files" in line or "EMFILE" in line or "out of file descriptors" in line
    )
    result["broker_log"] = str(log_path)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=float, default=500.0, help="live producer messages per second")
    parser.add_argument(
        "--seconds", type=float, default=20.0, help="the live producer's time in each condition"
    )
    parser.add_argument("--settle", type=float, default=3.0, help="seconds before RSS is read")
    parser.add_argument("--blocks", type=int, default=5, help="alone/fleet alternations within --seconds")
    parser.add_argument("--brokers", default="sluice,tansu")
    parser.add_argument("--baseline-src", type=Path, help="another checkout's src/, run as sluice-base")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--partitions-check", action="store_true")
    parser.add_argument(
        "--topics", type=int, default=5000, help="--partitions-check: topics of 10 partitions"
    )
    parser.add_argument(
        "--open-files", type=int, default=20_000, help="--partitions-check: the broker's limit"
    )
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < args.connections + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.connections + 200), hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    print(f"open-file limit: soft {soft}, hard {hard}", file=sys.stderr)
    if args.partitions_check:
        result = partitions_check(args)
        print(json.dumps(result, indent=1))
        if args.json_out:
            args.json_out.write_text(json.dumps(result, indent=1))
        ok = (
            result["create_errors"] == result["produce_errors"] == result["read_errors"] == 0
            and result["acknowledged"] == result["partitions"]
            and result["emfile_lines"] == 0
        )
        return 0 if ok else 1
    makers: dict[str, Any] = {
        "sluice": lambda: SluiceBroker(args.data_root),
        "tansu": TansuBroker,
    }
    names = args.brokers.split(",")
    if args.baseline_src:
        makers["sluice-base"] = lambda: BaselineSluice(args.baseline_src.resolve(), data_root=args.data_root)
        names.insert(1, "sluice-base")
    runs: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        for name in names:
            with makers[name]() as broker:
                result = fleet_round(
                    broker, args.connections, args.rate, args.seconds, args.settle, args.blocks
                )
            result["round"] = round_
            print(json.dumps(result), file=sys.stderr, flush=True)
            runs.append(result)
    keys = [
        "kib_per_connection",
        "idle_cpu_ms_per_s_alone",
        "idle_cpu_ms_per_s",
        "open_s",
        "us_per_msg_alone",
        "us_per_msg_fleet",
        "p50_alone_ms",
        "p99_alone_ms",
        "p50_fleet_ms",
        "p99_fleet_ms",
        "p99_ratio",
        "fleet_closed_by_broker",
    ]
    summary = {
        name: {key: median(r[key] for r in runs if r["broker"] == name) for key in keys} for name in names
    }
    print(
        f"\n{args.connections:,} idle connections, live producer {args.rate:.0f} msg/s acks=all, medians of {args.rounds} rounds"
    )
    print(f"{'':<24}" + "".join(f"{name:>14}" for name in names) + f"{'sluice/tansu':>14}")
    for key in keys:
        cells = "".join(
            f"{summary[n][key]:>14.2f}" if summary[n][key] is not None else f"{'-':>14}" for n in names
        )
        both = ratio(summary.get("sluice", {}).get(key), summary.get("tansu", {}).get(key))
        print(f"{key:<24}{cells}{'-' if both is None else f'{both:.2f}':>14}")
    if args.json_out:
        args.json_out.write_text(json.dumps({"runs": runs, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
